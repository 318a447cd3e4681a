"""Shared fixtures: one server per session, a migrated template, a fresh clone per test."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from evidence_lib.pg import db, migrate, servers
from evidence_lib.pg.db import Conn, Server


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    with servers.open_server(fast=True) as s:
        yield s


@pytest.fixture(scope="session")
def template_db(server: Server) -> Iterator[str]:
    given = os.environ.get(servers.TEST_TEMPLATE_ENV)
    if given:  # the mutation sweep runs a test as a part: its candidate's migrated template
        yield given
        return
    name = db.scratch_name("tmpl")
    url = db.create_database(server, name)
    migrate.apply_migrations(url)
    yield name
    db.drop_database(server, name)


@pytest.fixture
def db_url(server: Server, template_db: str) -> Iterator[str]:
    with db.scratch_database(server, template=template_db, prefix=os.environ.get(servers.TEST_PREFIX_ENV, "t")) as url:
        yield url


@pytest.fixture
def conn(db_url: str) -> Iterator[Conn]:
    with db.connect(db_url, application_name="test") as c:
        yield c


def pytest_report_header() -> str:
    import os

    asked = os.environ.get(servers.PG_ENV) or f"{servers.EMBEDDED_MAJOR} (embedded)"
    return f"PostgreSQL: {'DATABASE_URL' if os.environ.get('DATABASE_URL') else asked}"


LONGEST_FIRST = ("test_smoke_run_of_each_notebook", "test_four_shards_merged_equal_the_unsharded_run")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest tests first: pytest-xdist hands out tests in collection order, so a worker
    starts each of them at once instead of last, when the others are done."""
    items.sort(key=lambda item: item.originalname not in LONGEST_FIRST if isinstance(item, pytest.Function) else True)
