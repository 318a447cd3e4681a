"""Values as plain text for gate details and tables: what a reader of a report expects, never a
Python repr (`{'b_step': 'created'}`, `UUID('...')`, `Report(run_id=...)`, `[('a',)]`)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from collections.abc import Mapping
from typing import Any


def plain(value: Any) -> str:
    """`k=v, k=v` for mappings and dataclasses, `a, b` for sequences, ISO times, bare UUIDs,
    "none" for None; a one-column row is its value."""
    if value is None:
        return "none"
    if isinstance(value, str):
        return value
    if isinstance(value, bool | int | float):
        return str(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat(timespec="seconds") if isinstance(value, dt.datetime) else value.isoformat()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return plain({f.name: getattr(value, f.name) for f in dataclasses.fields(value)})
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={plain(v)}" for k, v in value.items()) or "(empty)"
    if isinstance(value, tuple) and len(value) == 1:
        return plain(value[0])
    if isinstance(value, list | tuple | set | frozenset):
        items = sorted(value, key=str) if isinstance(value, set | frozenset) else list(value)
        inner = ", ".join(plain(v) for v in items)
        return f"({inner})" if isinstance(value, tuple) else inner or "(none)"
    return str(value)
