"""A sweep's journal: every verdict appended to `journal.jsonl` the moment it is reached, so a shard
stopped by a job limit, a crash or Ctrl-C loses nothing and resumes where it stopped (PIT's history
file, written as it goes). The first line says what the journal is of (revision, generator, the
selection and its shard); a journal of anything else is not resumed from, but set aside.

A mutant the model leaves alive is journaled too (`"stage": "model"`): a run stopped in the parts
phase resumes there, without replaying the model's histories for what it had already judged.

A RuntimeError is journaled but never resumed from: it says the mutant could not be judged (the
server went away, a part failed for a reason outside the engine), and the stop that ended the
run is often that reason, so a resumed run judges it again. Every other verdict is reused as is.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from evidence_lib.mutation.mutant import Verdict

FILE = "journal.jsonl"
JUDGED_AGAIN = ("RuntimeError",)  # statuses a resumed run does not reuse


@dataclass(frozen=True)
class Header:
    """What a journal is of: a resumed run must be the same run."""

    revision: str
    generator: str
    selection: str  # the settings' description, shard included
    planned: str  # digest of the ids of the whole selection (every shard's), see `report.planned_digest`

    def matches(self, other: dict[str, Any]) -> bool:
        return all(other.get(k) == v for k, v in asdict(self).items())


class Journal:
    """Append-only verdicts of one run in `folder` (created when missing)."""

    def __init__(self, folder: Path, header: Header) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / FILE
        self.header = header
        self.done: dict[str, Verdict] = {}
        self.model: dict[str, Verdict] = {}  # the model's verdict on a mutant left to the parts
        self.judged_again: set[str] = set()  # journaled as RuntimeError: judged again on resume
        if self.path.is_file():
            lines = self.path.read_text().splitlines()
            first = json.loads(lines[0]) if lines else {}
            if header.matches(first):
                for line in lines[1:]:
                    try:
                        entry = json.loads(line)
                    except ValueError:
                        continue  # a line cut short by a kill: that mutant is judged again
                    verdict = Verdict(entry["status"], entry["by"], entry["detail"], entry["seconds"],
                                      entry.get("parts_run", 0))  # fmt: skip
                    if verdict.status in JUDGED_AGAIN:
                        self.judged_again.add(entry["id"])
                        continue
                    (self.model if entry.get("stage") == "model" else self.done)[entry["id"]] = verdict
                self.judged_again -= self.done.keys()  # a final verdict came later: not judged again
            else:
                self.path.rename(self.path.with_suffix(f".{int(time.time())}.set-aside"))
        if not self.path.is_file():
            self.path.write_text(json.dumps(asdict(header)) + "\n")
        self._out = self.path.open("a")

    def append(self, mutant_id: str, verdict: Verdict, *, stage: str = "") -> None:
        """A final verdict; or, with `stage="model"`, the model's verdict on a mutant it leaves to the parts."""
        entry = {"id": mutant_id, "status": verdict.status, "by": verdict.by, "detail": verdict.detail,
                 "seconds": round(verdict.seconds, 3), "parts_run": verdict.parts_run}  # fmt: skip
        if stage:
            entry["stage"] = stage
        self._out.write(json.dumps(entry) + "\n")
        self._out.flush()
        (self.model if stage else self.done)[mutant_id] = verdict

    def close(self) -> None:
        self._out.close()
