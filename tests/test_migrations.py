"""The migration runner, PGMQ installation and the schema sync check."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest

from evidence_lib import MIGRATIONS_DIR, SQL_DIR
from evidence_lib.pg import db, migrate, schema_sync
from evidence_lib.pg.db import Server, connect
from tests.helpers import scalar


def test_applies_in_order_records_sha256_and_pgmq_version(server: Server) -> None:
    with db.scratch_database(server) as url:
        applied = migrate.apply_migrations(url)
        assert applied == [f.name for f in migrate.sql_files(MIGRATIONS_DIR)]
        with connect(url) as c:
            rows = c.execute("select file_name, sha256 from engine.schema_migrations order by 1").fetchall()
            assert rows == [(f.name, f.sha256) for f in migrate.sql_files(MIGRATIONS_DIR)]
            assert "PGMQ SQL 1." in scalar(c, "select obj_description('pgmq'::regnamespace)")
        assert migrate.apply_migrations(url) == []  # nothing pending: a no-op


def _copy(tmp_path: Path) -> Path:
    target = tmp_path / "migrations"
    shutil.copytree(MIGRATIONS_DIR, target)
    return target


def test_refuses_a_changed_applied_migration(server: Server, tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    with db.scratch_database(server) as url:
        migrate.apply_migrations(url, folder)
        first = sorted(folder.glob("*.sql"))[0]
        first.write_text(first.read_text() + "\n-- edited\n")
        with pytest.raises(migrate.MigrationChanged, match=first.name):
            migrate.apply_migrations(url, folder)
        first.unlink()
        with pytest.raises(migrate.MigrationMissing, match=first.name):
            migrate.apply_migrations(url, folder)


def test_a_failing_migration_rolls_back_entirely(server: Server, tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    (folder / "9998_broken.sql").write_text("create table engine.half_done (x int);\nselect 1/0;\n")
    with db.scratch_database(server) as url:
        with pytest.raises(migrate.MigrationError, match=r"9998_broken\.sql"):
            migrate.apply_migrations(url, folder)
        with connect(url) as c:
            assert scalar(c, "select to_regclass('engine.half_done')") is None
            assert scalar(c, "select count(*) from engine.schema_migrations where file_name like '9998%'") == 0


def test_a_migration_waits_for_locks_only_up_to_its_lock_timeout(server: Server, tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    with db.scratch_database(server) as url:
        migrate.apply_migrations(url, folder)
        (folder / "9999_alter.sql").write_text("alter table engine.flows add column note text;\n")
        with connect(url) as holder:
            holder.execute("begin")
            holder.execute("lock table engine.flows in access share mode")
            errors: list[Exception] = []

            def apply() -> None:
                try:
                    migrate.apply_migrations(url, folder, lock_timeout="300ms")
                except Exception as exc:
                    errors.append(exc)

            t = threading.Thread(target=apply)
            t.start()
            t.join(timeout=30)
            holder.execute("rollback")
        assert errors and "55P03" in str(errors[0])  # lock_not_available, nothing applied
        with connect(url) as c:
            assert (
                scalar(
                    c,
                    "select count(*) from engine.schema_migrations where file_name = '9999_alter.sql'",
                )
                == 0
            )


def test_pgmq_is_installed_once(server: Server) -> None:
    with db.scratch_database(server) as url, connect(url) as c:
        v1 = migrate.ensure_pgmq(c)
        v2 = migrate.ensure_pgmq(c)  # a second install would fail: it must be skipped
        assert v1 == v2 and v1.count(".") == 2


def test_schema_sync_check_passes(server: Server) -> None:
    result = schema_sync.check_schema_sync(server)
    assert result.in_sync, result.diff


def test_schema_sync_check_fails_when_sql_differs(server: Server, tmp_path: Path) -> None:
    sources = tmp_path / "sql"
    shutil.copytree(SQL_DIR, sources)
    target = next(sources.glob("*_function_start_flow.sql"))
    target.write_text(target.read_text().replace("v_steps integer;", "v_steps bigint;"))
    result = schema_sync.check_schema_sync(server, sql_dir=sources)
    assert not result.in_sync
    assert "start_flow" in result.diff and "bigint" in result.diff
