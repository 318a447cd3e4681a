"""The negative-controls catalogue: hand-written defects (`known`, `v2`, `boundaries`, `scale`) and the
generated survivors that a new or sharper gate now kills (`survivors`; `probes`: those a SQL probe
with a golden transcript kills), in catalogue order."""

from __future__ import annotations

from evidence_lib.mutation.catalogue.boundaries import BOUNDARIES
from evidence_lib.mutation.catalogue.known import KNOWN_DEFECTS
from evidence_lib.mutation.catalogue.probes import probe_kills
from evidence_lib.mutation.catalogue.scale import SCALE
from evidence_lib.mutation.catalogue.survivors import SURVIVORS
from evidence_lib.mutation.catalogue.v2 import V2_PROTOCOL
from evidence_lib.mutation.controls import Control


def catalogue() -> tuple[Control, ...]:
    """Every control, in catalogue order."""
    return KNOWN_DEFECTS + V2_PROTOCOL + BOUNDARIES + SCALE + SURVIVORS + probe_kills()
