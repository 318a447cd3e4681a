"""The JSON value type shared by flows, handlers and the SQL bridge."""

from __future__ import annotations

from typing import TypeAlias

Json: TypeAlias = bool | int | float | str | list["Json"] | dict[str, "Json"] | None
