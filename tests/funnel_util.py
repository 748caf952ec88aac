"""Helpers for the SQL funnel tests: tiny corpora ingested with precomputed vectors.

The collection and its active index version are created up front with a made-up
model name and dimension, so the Ingester never needs to load an embedding model.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol, TypeVar

import numpy as np
import psycopg

from pgfunnel.ingest import Ingester, create_version, get_or_create_collection
from pgfunnel.sources import DocumentRecord, chunk_text

_Row = TypeVar("_Row", covariant=True)
_R = TypeVar("_R")


class _FetchOne(Protocol[_Row]):
    def fetchone(self) -> _Row | None: ...


def one_row(cur: _FetchOne[_R]) -> _R:
    """The row a query that must return one gave back: fetchone(), failing the test
    by name when no row came back (indexing its None would fail with a TypeError)."""
    row = cur.fetchone()
    if row is None:
        raise AssertionError("the query returned no row")
    return row


def with_conninfo(dsn: str, **parts: str) -> str:
    """``dsn`` with some connection parameters replaced (``dbname``, ``user``)."""
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    info.update(parts)
    return psycopg.conninfo.make_conninfo("", **{k: v for k, v in info.items() if v is not None})


def conninfo_part(dsn: str, name: str) -> str:
    """One connection parameter of ``dsn`` (``user``, ``dbname``), which must be set."""
    value = psycopg.conninfo.conninfo_to_dict(dsn).get(name)
    if value is None:
        raise AssertionError(f"the DSN sets no {name}")
    return str(value)


def unit(rng: np.random.Generator, dims: int) -> np.ndarray:
    v = rng.standard_normal(dims).astype(np.float32)
    return v / np.linalg.norm(v)


def make_collection(conn: psycopg.Connection[Any], name: str, dims: int,
                    analyzer: str = "english_v1", private: bool = False) -> int:
    coll = get_or_create_collection(conn, name, private=private, analyzer=analyzer)
    return create_version(conn, coll, "random-unit", dims, analyzer, "active")


def ingest(conn: psycopg.Connection[Any], records: Sequence[DocumentRecord], *,
           collection: str = "t", dims: int = 16, seed: int = 0,
           vectors: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Ingest records with random unit vectors (or the given ones); returns the vectors."""
    if conn.execute("select 1 from pgfunnel.collection where name = %s",
                    (collection,)).fetchone() is None:
        make_collection(conn, collection, dims)
    rng = np.random.default_rng(seed)
    if vectors is None:
        vectors = {r.citekey: np.stack([unit(rng, dims) for _ in chunk_text(r.text)])
                   for r in records}
    Ingester(conn, collection).ingest(list(records), vectors=vectors)
    return vectors


def wait_for_lock_wait(conn: psycopg.Connection[Any], application_name: str,
                       statement: str = "", timeout_s: float = 60) -> None:
    """Wait until the session named ``application_name`` waits on a lock (in a statement
    holding ``statement``, when given): the moment a race test lets the other side go.
    It returns as soon as it does; ``timeout_s`` only bounds a test that fails, and is
    wide because a loaded 2-core machine stretches a thread's connect and its work
    before the wait."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if conn.execute("select 1 from pg_stat_activity where application_name = %s "
                        "and wait_event_type = 'Lock' and query ilike %s",
                        (application_name, f"%{statement}%")).fetchone():
            return
        time.sleep(0.05)
    raise AssertionError(f"{application_name} never waited for a lock"
                         + (f" in {statement!r}" if statement else ""))


def doc(citekey: str, text: str, **kw: Any) -> DocumentRecord:
    return DocumentRecord(citekey=citekey, text=text, title=kw.pop("title", citekey), **kw)


def active(conn: psycopg.Connection[Any], collection: str = "default") -> tuple[int, int, int]:
    """(version id, collection id, dimensions) of a collection's active version."""
    row = conn.execute(
        "select v.id, c.id, v.dimensions from pgfunnel.index_version v "
        "join pgfunnel.collection c on c.id = v.collection_id "
        "where c.name = %s and v.state = 'active'", (collection,)).fetchone()
    assert row is not None
    return int(row[0]), int(row[1]), int(row[2])


def chunk_id(conn: psycopg.Connection[Any], citekey: str, ordinal: int = 0,
             collection: str = "default") -> int:
    row = conn.execute(
        "select ch.id from pgfunnel.chunk ch join pgfunnel.document d on d.id = ch.document_id "
        "join pgfunnel.collection c on c.id = d.collection_id "
        "where c.name = %s and d.citekey = %s and ch.ordinal = %s",
        (collection, citekey, ordinal)).fetchone()
    assert row is not None, (citekey, ordinal)
    return int(row[0])


def lexical(conn: psycopg.Connection[Any], query: str, collection: str = "default",
            **kw: Any) -> list[tuple[Any, ...]]:
    """funnel_search rows with the lexical leg only (no embedding)."""
    args = {"k": 10, "collection": collection, **kw}
    named = ", ".join(f"{k} => %({k})s" for k in args)
    return conn.execute(
        f"select chunk_id, citekey, lexical_rank, lexical_score, final_rank "
        f"from pgfunnel.funnel_search(%(q)s, null, {named})", {"q": query, **args}).fetchall()


def load_module(name: str, path: Path) -> ModuleType:
    """A script that is not a package module (a benchmark, an example app), imported from
    its file. It is registered in sys.modules first: dataclasses look their module up."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class SlowEmbedder:
    """The real embedder, half a second slower per call: a model on a slow CPU."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.model_name = inner.model_name
        self.dimensions = inner.dimensions
        self.calls = 0

    def embed(self, texts: Any, progress: Any = None) -> np.ndarray:
        self.calls += 1
        time.sleep(0.5)
        vectors: np.ndarray = self.inner.embed(texts, progress=progress)
        return vectors


def pg_bin(name: str) -> str:
    """A client program of the tested server's version: PGFUNNEL_TEST_PGBIN (which
    scripts/test-pg16 sets, since a dump made by pg_dump 18 sets parameters a Postgres 16
    server refuses on restore, and its schema dump of a Postgres 15 server writes column
    options that differ between two equal databases), else the embedded server's build."""
    import os

    import pgserver

    where = os.environ.get("PGFUNNEL_TEST_PGBIN")
    if where:
        return str(Path(where) / name)
    return str(Path(pgserver.__file__).parent / "pginstall" / "bin" / name)


@contextmanager
def c_locale_database(server_dsn: str, encoding: str = "UTF8",
                      init: bool = True) -> Iterator[str]:
    """The DSN of a fresh database created with locale "C" (whose collation knows ASCII
    letters only) in ``encoding``, with the pgfunnel schema unless ``init`` is false;
    dropped on leaving."""
    from psycopg import sql

    from pgfunnel import schema

    name = f"pgf_t_c_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("create database {} template template0 locale 'C' "
                              "encoding {}").format(sql.Identifier(name), sql.Literal(encoding)))
    try:
        dsn = with_conninfo(server_dsn, dbname=name)
        if init:
            schema.init(dsn)
        yield dsn
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("drop database if exists {} with (force)").format(
                sql.Identifier(name)))


@contextmanager
def logged(logger_name: str) -> Iterator[list[str]]:
    """The messages a library logger emits inside the block (a handler on the logger
    itself: transformers' does not propagate to the root, so caplog misses it)."""
    messages: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    handler = Collect()
    logger = logging.getLogger(logger_name)
    logger.addHandler(handler)
    try:
        yield messages
    finally:
        logger.removeHandler(handler)


def message_primary(error: psycopg.Error) -> str:
    """The primary message of an error the server raised (psycopg types it Optional: an
    error raised on the client side has none)."""
    message = error.diag.message_primary
    if message is None:
        raise AssertionError(f"{type(error).__name__} carries no server message: {error}")
    return message
