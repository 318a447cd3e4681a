"""evidence_lib: the engine's Python side and the evidence suite that proves it.

One subpackage per role; imports point one way, toward the engine (README "Architecture"):
`pg` (server, migrations) <- `engine` (what an application calls) <- `workers` and `harness`
<- `bench` <- `scenarios` <- `bundle` (results, runner, CLI).
"""

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
SQL_DIR = PROJECT_ROOT / "sql"
MIGRATIONS_DIR = PROJECT_ROOT / "migrations"
OUTPUTS_DIR = PROJECT_ROOT / "outputs"
KERNEL_NAME = "dirty-runs-evidence"

__all__ = ["KERNEL_NAME", "MIGRATIONS_DIR", "OUTPUTS_DIR", "PROJECT_ROOT", "SQL_DIR"]
