"""evidence_lib: the engine's Python side and the evidence suite that proves it.

Modules say what they hold: `db` starts and reaches PostgreSQL, `migrate` installs PGMQ and
applies migrations, `schema_sync` proves `migrations/` equals `sql/`, `flows` defines flows,
`engine` calls the SQL API, `worker` runs v1 handlers.
"""

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
SQL_DIR = PROJECT_ROOT / "sql"
MIGRATIONS_DIR = PROJECT_ROOT / "migrations"
OUTPUTS_DIR = PROJECT_ROOT / "outputs"
KERNEL_NAME = "dirty-runs-evidence"

__all__ = ["KERNEL_NAME", "MIGRATIONS_DIR", "OUTPUTS_DIR", "PROJECT_ROOT", "SQL_DIR"]
