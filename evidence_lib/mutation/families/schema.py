"""Schema (SchemaAnalyst's integrity-constraint mutants): each named constraint, unique index and
trigger of the engine's tables dropped."""

from __future__ import annotations

from collections.abc import Iterator

from evidence_lib import PROJECT_ROOT
from evidence_lib.mutation.families import ObjectPatch
from evidence_lib.mutation.sources import Engine

OPERATORS = {"constraint": "ConstraintDropped", "unique index": "UniqueIndexDropped", "trigger": "TriggerDropped"}


def dropped(engine: Engine) -> Iterator[ObjectPatch]:
    for obj in engine.schema:
        text = (PROJECT_ROOT / obj.file).read_text()[obj.start : obj.end]
        functions = (obj.function,) if obj.function else ()
        yield ObjectPatch(OPERATORS[obj.kind], obj.label, obj.file, obj.start, obj.end, text, "", f"{obj.drop};",
                          functions)  # fmt: skip

