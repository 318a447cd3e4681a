"""Incremental runs (PIT's history file, Stryker's `incremental`): a verdict is reused when the
mutant's id is unchanged (the mutated object's normalized source, the operator and the position)
and the code that judged it is unchanged (a fingerprint of the judging code: the model and its
oracle for a model verdict; the scenarios and the harness besides, for a verdict of the parts).

Like PIT, the fingerprint covers the mutated object and its judges, not the rest of the engine:
a change elsewhere in `sql/` does not invalidate a verdict (a `--since` run judges every mutant
of the changed objects in full anyway).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Any

from evidence_lib import OUTPUTS_DIR, PROJECT_ROOT
from evidence_lib.mutation.coverage import TEST_SUPPORT, WORKER_TESTS
from evidence_lib.mutation.mutant import Verdict

DEFAULT = OUTPUTS_DIR / ".mutation" / "history.json"
MODEL_CODE = ("evidence_lib/model", "evidence_lib/engine", "evidence_lib/mutation/oracles.py",
              "evidence_lib/mutation/reach.py", "evidence_lib/mutation/apply.py")  # fmt: skip
PARTS_JUDGE = ("evidence_lib/mutation/judging.py", "evidence_lib/mutation/coverage.py")
# the parts judge with their code and with the files they compare against: the races' expected
# transcripts and the SQL probes with theirs (a new probe must invalidate a reused Survived), and
# the project's tests of the worker code, which are parts too
PARTS_CODE = (*MODEL_CODE, *PARTS_JUDGE, "evidence_lib/scenarios", "evidence_lib/harness", "tests/expected",
              "tests/regress", *WORKER_TESTS, *TEST_SUPPORT)  # fmt: skip
JUDGING_FILES = ("*.py", "*.sql", "*.out")


@cache
def fingerprint(paths: tuple[str, ...]) -> str:
    digest = hashlib.sha256()
    for root in paths:
        path = PROJECT_ROOT / root
        found = [path] if path.is_file() else [f for pattern in JUDGING_FILES for f in path.rglob(pattern)]
        for file in sorted(found):
            digest.update(str(file.relative_to(PROJECT_ROOT)).encode())
            digest.update(file.read_bytes())
    return digest.hexdigest()[:16]


def judges(verdict: Verdict) -> str:
    """The fingerprint of the code that reached `verdict`."""
    return fingerprint(MODEL_CODE if verdict.by.startswith("model") or verdict.status == "CompileError"
                       else PARTS_CODE)  # fmt: skip


@dataclass(frozen=True)
class Entry:
    status: str
    by: str
    detail: str
    seconds: float
    judges: str

    def verdict(self) -> Verdict:
        return Verdict(self.status, self.by, self.detail, self.seconds)  # type: ignore[arg-type]


class History:
    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.entries: dict[str, Entry] = {}
        if path is not None and path.is_file():
            data: dict[str, Any] = json.loads(path.read_text())
            self.entries = {k: Entry(**v) for k, v in data.get("mutants", {}).items()}

    def reusable(self, mutant_id: str) -> Verdict | None:
        entry = self.entries.get(mutant_id)
        if entry is None or entry.status in ("Pending", "RuntimeError", "Timeout"):  # judged again, every time
            return None
        current = fingerprint(MODEL_CODE if entry.by.startswith("model") or entry.status == "CompileError"
                              else PARTS_CODE)  # fmt: skip
        return entry.verdict() if entry.judges == current else None

    def record(self, mutant_id: str, verdict: Verdict) -> None:
        self.entries[mutant_id] = Entry(verdict.status, verdict.by, verdict.detail, round(verdict.seconds, 3),
                                        judges(verdict))  # fmt: skip

    def save(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {"mutants": {k: asdict(v) for k, v in sorted(self.entries.items())}}
        self.path.write_text(json.dumps(data, indent=0, sort_keys=True))
