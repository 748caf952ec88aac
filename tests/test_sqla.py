"""funnel_search as a typed table-valued function inside SQLAlchemy select()."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import Column, MetaData, Table, Text, func, insert, select
from sqlalchemy import text as sa_text
from sqlalchemy.orm import Session

from pgfunnel.errors import ConfigError, MissingIdentityError
from pgfunnel.models import Chunk, Document
from pgfunnel.search import Funnel
from pgfunnel.sqla import engine_from_dsn, funnel_search_tvf, identity_statement


def test_tvf_rows_equal_the_search_api(sample_db: str, embedder: Any) -> None:
    q = "refund window on annual plans"
    vec = embedder.embed_query(q)
    fs = funnel_search_tvf(q, vec, k=6, principals=["alice"], per_source_cap=1)
    engine = engine_from_dsn(sample_db)
    try:
        with Session(engine) as s:
            s.execute(identity_statement(["alice"]))
            rows = s.execute(select(fs).order_by(fs.c.final_rank)).all()
        with Funnel(sample_db, embedder=embedder) as funnel:
            api = funnel.search(q, k=6, principals=["alice"], per_source_cap=1).results
        # the function's columns; a Result has its chunk's document_id after them
        assert [tuple(r) for r in rows] == [dataclasses.astuple(r)[:-1] for r in api]
        assert len({r.citekey for r in rows}) == 6
    finally:
        engine.dispose()


def test_tvf_none_means_the_default_for_weights_and_now_for_as_of(sample_db: str) -> None:
    """Documented: None is SQL NULL, the parameter's default. weights=None crashed in
    Python (iterating None) and as_of=None reached SQL, which refuses a NULL as_of."""
    engine = engine_from_dsn(sample_db)
    try:
        with Session(engine) as s:
            def citekeys(**params: Any) -> list[str]:
                fs = funnel_search_tvf("refund window on annual plans", k=5, principals=[],
                                       **params)
                return list(s.scalars(select(fs.c.citekey).order_by(fs.c.final_rank)))

            plain = citekeys()
            assert plain and citekeys(weights=None, as_of=None) == plain
    finally:
        engine.dispose()


def test_tvf_joins_orm_models_and_application_tables(sample_db: str, embedder: Any) -> None:
    engine = engine_from_dsn(sample_db)
    app_meta = MetaData(schema="public")
    bookmark = Table("bookmark", app_meta, Column("citekey", Text, primary_key=True),
                     Column("note", Text))
    try:
        app_meta.create_all(engine)
        with Session(engine) as s:
            s.execute(insert(bookmark).values(citekey="refunds-annual", note="pinned by ops"))
            q = "refund annual plan"
            fs = funnel_search_tvf(q, embedder.embed_query(q), k=5, principals=[])
            stmt = (select(fs.c.final_rank, fs.c.citekey, fs.c.metadata, Document.language,
                           Chunk.token_count, bookmark.c.note)
                    .join(Chunk, Chunk.id == fs.c.chunk_id)
                    .join(Document, Document.id == Chunk.document_id)
                    .outerjoin(bookmark, bookmark.c.citekey == fs.c.citekey)
                    .order_by(fs.c.final_rank))
            rows = s.execute(stmt).all()
            s.commit()
        assert rows[0].citekey == "refunds-annual" and rows[0].note == "pinned by ops"
        # the outer join notes every chunk of the bookmarked document, and only those
        assert all((r.note is not None) == (r.citekey == "refunds-annual") for r in rows)
        assert any(r.citekey != "refunds-annual" for r in rows)
        assert isinstance(rows[0].metadata, dict) and rows[0].metadata["plan"] == "annual"
        assert rows[0].language == "en" and rows[0].token_count > 0
    finally:
        engine.dispose()


def test_tvf_lateral_query_text_from_an_application_table(sample_db: str) -> None:
    engine = engine_from_dsn(sample_db)
    meta = MetaData(schema="public")
    saved = Table("saved_query", meta, Column("name", Text, primary_key=True),
                  Column("q", Text))
    try:
        meta.create_all(engine)
        with Session(engine) as s:
            s.execute(insert(saved), [{"name": "a", "q": "refund annual"},
                                      {"name": "b", "q": "two factor authentication"}])
            fs = funnel_search_tvf(saved.c.q, k=1, principals=[]).lateral()
            rows = s.execute(select(saved.c.name, fs.c.citekey).select_from(saved).join(
                fs, fs.c.final_rank == 1).order_by(saved.c.name)).all()
        assert [r.name for r in rows] == ["a", "b"]
        assert rows[0].citekey.startswith("refunds")
        assert rows[0].citekey != rows[1].citekey
    finally:
        engine.dispose()


def test_named_args_only_for_what_was_passed() -> None:
    from sqlalchemy.dialects import postgresql

    fs = funnel_search_tvf("x", [0.1, 0.2, 0.3], k=3, principals=["a"], metadata_filter=None)
    # SQLAlchemy leaves the dialect class's __init__ unannotated
    sql = str(select(fs).compile(dialect=postgresql.dialect()))  # type: ignore[no-untyped-call]
    assert "query_text =>" in sql and "k =>" in sql and "principals =>" in sql
    assert "VECTOR(3)" in sql
    # None is left out, to the SQL default (metadata_filter's is NULL too)
    assert "metadata_filter =>" not in sql and "NULL" not in sql
    assert "fusion =>" not in sql and "overfetch =>" not in sql


def test_bad_arguments_name_the_parameter() -> None:
    with pytest.raises(ConfigError, match="principals"):
        funnel_search_tvf("x", k=3)
    with pytest.raises(ConfigError, match="principals"):
        funnel_search_tvf("x", principals="alice")
    with pytest.raises(ConfigError, match="fuson"):
        funnel_search_tvf("x", principals=[], fuson="rrf")
    # the checks Funnel makes: no principal named "None", no tenant nobody has
    with pytest.raises(ConfigError, match="principals: must not contain None"):
        funnel_search_tvf("x", principals=[None])
    with pytest.raises(ConfigError, match="tenant"):
        funnel_search_tvf("x", principals=[], tenant="")
    with pytest.raises(ConfigError, match="principals"):
        identity_statement([""])


def test_revoking_a_reader_in_place_through_the_orm_is_saved(sample_db: str) -> None:
    """doc.readers.remove(...) is how an admin screen revokes access: the session must see
    the change (a plain ARRAY column would not, and the reader would keep access)."""
    from sqlalchemy import update

    engine = engine_from_dsn(sample_db.replace("postgresql://", "postgresql+psycopg://", 1))
    with Session(engine) as session:
        doc = session.scalars(select(Document).order_by(Document.citekey)).first()
        assert doc is not None
        session.execute(update(Document).where(Document.id == doc.id)
                        .values(is_public=False, readers=["alice", "mallory"]))
        session.commit()
        session.refresh(doc)
        doc.readers.remove("mallory")
        doc.metadata_["reviewed"] = True
        session.commit()
        doc_id = doc.id
    with Session(engine) as session:
        again = session.get(Document, doc_id)
        assert again is not None
        assert again.readers == ["alice"] and again.metadata_.get("reviewed") is True
        fs = funnel_search_tvf(again.title, k=50, principals=["mallory"])
        assert again.citekey not in session.scalars(select(fs.c.citekey)).all()
    engine.dispose()


def test_orm_delete_of_a_document_keeps_the_index_exact(sample_db: str) -> None:
    # session.delete() of a document (a web app's admin screen): the database cascades to
    # its chunks and the deletion trigger keeps postings and BM25 statistics exact;
    # SQLAlchemy must not try to null the chunks' document_id itself
    from test_bm25 import _orphan_postings
    from test_ingest import assert_stats_exact

    from pgfunnel.db import connect

    engine = engine_from_dsn(sample_db)
    with Session(engine) as session:
        document = session.scalars(select(Document).order_by(Document.citekey)).first()
        assert document is not None and document.chunks
        citekey = document.citekey
        session.delete(document)
        session.commit()
    engine.dispose()
    with connect(sample_db, autocommit=True) as conn:
        assert conn.execute("select count(*) from pgfunnel.document where citekey = %s",
                            (citekey,)).fetchone() == (0,)
        assert _orphan_postings(conn) == 0
        assert_stats_exact(conn)


def test_translate_reads_a_sqlalchemy_wrapped_client_side_error(sample_db: str) -> None:
    # psycopg refuses a NUL before sending anything: no SQLSTATE, only the error's class
    from sqlalchemy import literal
    from sqlalchemy.exc import DBAPIError

    from pgfunnel.errors import InvalidInputError, translate

    # given as a Python str, the tvf refuses it before any statement is built
    with pytest.raises(InvalidInputError, match="^query_text: contains a NUL"):
        funnel_search_tvf("ref\x00und", k=3, principals=[])
    engine = engine_from_dsn(sample_db)
    with Session(engine) as session, pytest.raises(DBAPIError) as caught:
        # a SQL expression is the caller's own, passed on as it is
        session.execute(select(funnel_search_tvf(literal("ref\x00und"), k=3,
                                                 principals=[]).c.citekey))
    engine.dispose()
    assert isinstance(translate(caught.value), InvalidInputError)


def test_the_tvf_checks_python_values_as_the_search_api_does() -> None:
    import numpy as np

    from pgfunnel.errors import ConfigError, InvalidVectorError

    for kw, param in (({"k": 2.6}, "k"), ({"k": "3"}, "k"), ({"weights": "1,2"}, "weights"),
                      ({"tenant": ""}, "tenant"), ({"per_source_cap": 2**40}, "per_source_cap"),
                      ({"metadata_filter": {"a": "b\x00"}}, "metadata_filter")):
        with pytest.raises(ConfigError, match=f"^{param}: "):
            funnel_search_tvf("refund", principals=[], **kw)
    for vector in (np.ones((2, 384)), np.full(384, np.nan), np.zeros(384)):
        with pytest.raises(InvalidVectorError, match="^query_embedding: "):
            funnel_search_tvf("refund", vector, principals=[])


def test_the_tvf_runs_on_an_async_engine(sample_db: str, embedder: Any) -> None:
    """FastAPI apps are often async: the same statements through AsyncSession give the
    rows the sync path gives."""
    import asyncio

    from sqlalchemy.ext.asyncio import AsyncSession

    from pgfunnel.sqla import async_engine_from_dsn

    vector = embedder.embed_query("refund on an annual plan")
    fs = funnel_search_tvf("refund on an annual plan", vector, k=5, principals=["alice"])
    stmt = select(fs.c.chunk_id, fs.c.final_rank).order_by(fs.c.final_rank)

    async def search() -> list[Any]:
        engine = async_engine_from_dsn(sample_db)
        try:
            async with AsyncSession(engine) as session:
                await session.execute(identity_statement(["alice"]))
                return list((await session.execute(stmt)).all())
        finally:
            await engine.dispose()

    engine = engine_from_dsn(sample_db)
    with Session(engine) as session:
        session.execute(identity_statement(["alice"]))
        expected = list(session.execute(stmt).all())
    engine.dispose()
    assert asyncio.run(search()) == expected and len(expected) == 5

    # a hand-written text() query binds a numpy vector on the async engine as on the sync
    # one (its connections had no pgvector adapters: "cannot adapt type 'ndarray'")
    raw = sa_text("select chunk_id, final_rank from pgfunnel.funnel_search(:q, :e, k => 5, "
                  "principals => :p) order by final_rank")
    values = {"q": "refund on an annual plan", "e": vector, "p": ["alice"]}

    async def raw_search() -> list[Any]:
        engine = async_engine_from_dsn(sample_db)
        try:
            async with AsyncSession(engine) as session:
                await session.execute(identity_statement(["alice"]))
                return list((await session.execute(raw, values)).all())
        finally:
            await engine.dispose()

    assert asyncio.run(raw_search()) == expected


def test_none_leaves_a_tvf_parameter_to_its_sql_default(sample_db: str) -> None:
    engine = engine_from_dsn(sample_db)
    try:
        with Session(engine) as session:
            def rows(**kw: Any) -> list[Any]:
                fs = funnel_search_tvf("refund annual plan", principals=[], **kw)
                return list(session.execute(
                    select(fs.c.chunk_id, fs.c.fused_score).order_by(fs.c.final_rank)).all())

            defaults = rows()
            assert len(defaults) == 10
            nones = {name: None for name in ("k", "collection", "fusion", "overfetch",
                                             "per_source_cap", "rrf_k", "k1", "b",
                                             "ef_search", "trace", "tenant", "weights",
                                             "as_of", "lexical_depth")}
            assert rows(**nones) == defaults
            assert len(rows(k=3)) == 3  # control: a value is sent
        with pytest.raises(MissingIdentityError):
            funnel_search_tvf("refund", principals=None)
    finally:
        engine.dispose()


@pytest.mark.parametrize("tenant", ["ac\x00me", 5, ["acme"], "a\ud800"])
def test_identity_statement_checks_the_tenant_as_a_search_does(tenant: Any) -> None:
    """The principals were checked and the tenant was not: a NUL reached the driver as a
    DataError, a number made set_config(text, integer, boolean), which does not exist."""
    with pytest.raises(ConfigError, match="^tenant: "):
        identity_statement(["alice"], tenant)
    # none, as in the setting
    assert identity_statement(["alice"], "").compile().params["set_config_7"] == ""


def test_a_failed_connection_is_the_same_pgfunnel_error_sync_and_async(sample_db: str) -> None:
    """engine_from_dsn's connections fail as ConnectionFailedError (password redacted);
    async_engine_from_dsn's came out as SQLAlchemy's OperationalError with libpq's text."""
    import asyncio

    from funnel_util import with_conninfo

    from pgfunnel.errors import ConnectionFailedError
    from pgfunnel.sqla import async_engine_from_dsn

    bad = with_conninfo(sample_db, user="no_such_role_here", password="hunter2")

    async def connect() -> None:
        engine = async_engine_from_dsn(bad)
        try:
            async with engine.connect():
                pass
        finally:
            await engine.dispose()

    attempts: list[Callable[[], None]] = [lambda: engine_from_dsn(bad).connect().close(),
                                          lambda: asyncio.run(connect())]
    for attempt in attempts:
        with pytest.raises(ConnectionFailedError, match="no_such_role_here") as caught:
            attempt()
        assert "hunter2" not in str(caught.value)


def test_the_documented_traced_tvf_example_keeps_its_trace(sample_db: str) -> None:
    # docs/python-api.md showed funnel_search_tvf in a Session that never committed: with
    # trace=True its search_log and search_trace rows were rolled back when it closed
    import re
    from pathlib import Path

    import psycopg

    doc = (Path(__file__).resolve().parent.parent / "docs" / "python-api.md").read_text()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", doc, re.S)
              if "funnel_search_tvf(" in b and "trace=True" in b]
    assert blocks, "docs/python-api.md has no traced funnel_search_tvf example"
    engine = engine_from_dsn(sample_db)
    ids: list[int] = []
    try:
        for block in blocks:
            namespace: dict[str, Any] = {
                "engine": engine, "q": "refund on an annual plan", "select": select,
                "func": func, "Session": Session, "funnel_search_tvf": funnel_search_tvf,
                "identity_statement": identity_statement}
            exec(block, namespace)  # noqa: S102 - the docs' own example
            ids.append(namespace["search_id"])
    finally:
        engine.dispose()
    with psycopg.connect(sample_db) as conn:
        logged = conn.execute("select count(*) from pgfunnel.search_log").fetchone()
        traced = conn.execute("select count(*) from pgfunnel.search_trace").fetchone()
        # the id the example reads with pgfunnel.last_search_id() is its search's
        assert [r[0] for r in conn.execute("select id from pgfunnel.search_log order by id")
                ] == ids
    assert logged is not None and logged[0] == len(blocks)
    assert traced is not None and traced[0] > 0


def test_the_documented_error_handling_gives_pgfunnel_errors_and_a_usable_session(
        sample_db: str) -> None:
    # what the database refuses comes back as sqlalchemy's DBAPIError; the docs' example
    # turns it into pgfunnel's class and rolls back, and the pooled connection goes on
    import re
    import textwrap
    from pathlib import Path

    from sqlalchemy import literal
    from sqlalchemy.exc import DBAPIError

    from pgfunnel.errors import AccessError, InvalidVectorError, PgfunnelError, translate

    doc = (Path(__file__).resolve().parent.parent / "docs" / "python-api.md").read_text()
    [block] = [textwrap.dedent(b) for b in re.findall(r"```python\n(.*?)```", doc, re.S)
               if "translate(exc" in b and "DBAPIError" in b]
    # a Python value of the wrong type is refused before any SQL, naming the parameter
    with pytest.raises(ConfigError) as caught:
        funnel_search_tvf("refund", k="5", principals=[])
    assert caught.value.parameter == "k"
    engine = engine_from_dsn(sample_db, pool_size=1, max_overflow=0)
    cases: list[tuple[Any, type[PgfunnelError], str | None]] = [
        (select(funnel_search_tvf("refund", [0.5, 0.5, 0.5], k=3, principals=[]).c.citekey),
         InvalidVectorError, "query_embedding"),
        (select(funnel_search_tvf("refund", k=0, principals=[]).c.citekey), ConfigError, "k"),
        (select(funnel_search_tvf("refund", fusion="nope", principals=[]).c.citekey),
         ConfigError, "fusion"),
        (select(funnel_search_tvf("refund", k=literal(0), principals=[]).c.citekey),
         ConfigError, "k"),
        (sa_text("select * from pgfunnel.funnel_search('refund', principals => null)"),
         AccessError, None),
    ]
    try:
        for stmt, expected, parameter in cases:
            namespace: dict[str, Any] = {"engine": engine, "stmt": stmt, "Session": Session,
                                         "identity_statement": identity_statement}
            with pytest.raises(expected) as raised:
                exec(block, namespace)  # noqa: S102 - the docs' own example
            cause = raised.value.__cause__
            assert isinstance(cause, DBAPIError)
            assert translate(cause).__class__ is type(raised.value)
            if parameter is not None:
                assert getattr(raised.value, "parameter", None) == parameter
        # without the rollback, the next statement is refused saying what to do
        with Session(engine) as session:
            with pytest.raises(DBAPIError):
                session.execute(cases[1][0]).all()
            with pytest.raises(DBAPIError) as aborted:
                session.execute(identity_statement([]))
            err = translate(aborted.value)
            assert type(err) is PgfunnelError
            assert str(err).startswith("current transaction is aborted")
            assert "roll it back (conn.rollback(), session.rollback()" in str(err)
        # the one pooled connection is usable after all of them
        with Session(engine) as session:
            session.execute(identity_statement([]))
            rows = session.execute(select(funnel_search_tvf(
                "refund", k=3, principals=[]).c.citekey)).all()
        assert len(rows) == 3
    finally:
        engine.dispose()


def test_connect_args_reach_the_driver_sync_and_async(sample_db: str) -> None:
    # engine_from_dsn opens connections through a creator, and SQLAlchemy gives
    # connect_args to the dialect's connect only: they were dropped without a word, so
    # prepare_threshold=None (PgBouncer in transaction mode) still prepared the search
    # after five runs, and application_name never reached the server
    import asyncio

    from sqlalchemy.ext.asyncio import AsyncSession

    from pgfunnel.sqla import async_engine_from_dsn

    args = {"prepare_threshold": None, "application_name": "pgf-webapp"}
    stmt = select(funnel_search_tvf("refund", k=3, principals=[]).c.citekey)
    probe = sa_text("select current_setting('application_name'), "
                    "(select count(*) from pg_prepared_statements)")
    engine = engine_from_dsn(sample_db, connect_args=args, pool_size=1)
    try:
        with Session(engine) as session:
            for _ in range(8):
                session.execute(identity_statement([]))
                assert len(session.execute(stmt).all()) == 3
            assert tuple(session.execute(probe).one()) == ("pgf-webapp", 0)
    finally:
        engine.dispose()

    async def run() -> tuple[Any, ...]:
        aengine = async_engine_from_dsn(sample_db, connect_args=args)
        try:
            async with AsyncSession(aengine) as session:
                for _ in range(8):
                    await session.execute(identity_statement([]))
                    assert len((await session.execute(stmt)).all()) == 3
                return tuple((await session.execute(probe)).one())
        finally:
            await aengine.dispose()

    assert asyncio.run(run()) == ("pgf-webapp", 0)
    # what the engine decides itself is refused, not silently overridden
    with pytest.raises(ConfigError, match="^connect_args: autocommit") as caught:
        engine_from_dsn(sample_db, connect_args={"autocommit": True})
    assert caught.value.parameter == "connect_args"
    with pytest.raises(ConfigError, match="^connect_args: must be a mapping"):
        async_engine_from_dsn(sample_db, connect_args=["prepare_threshold"])


def test_an_engine_pool_with_no_connection_free_is_a_connection_failed_error(
        sample_db: str) -> None:
    # SQLAlchemy's pool timeout has no .orig: translate gave a bare PgfunnelError, where
    # psycopg_pool's is a ConnectionFailedError (docs: "no pooled connection came free")
    from sqlalchemy.exc import TimeoutError as PoolTimeout

    from pgfunnel.errors import ConnectionFailedError, translate

    engine = engine_from_dsn(sample_db, pool_size=1, max_overflow=0, pool_timeout=0.2)
    try:
        with engine.connect(), pytest.raises(PoolTimeout) as caught:
            engine.connect()
        err = translate(caught.value)
        assert isinstance(err, ConnectionFailedError) and err.__cause__ is caught.value
        assert str(err).startswith("no connection free in the pool: QueuePool limit of size 1")
        assert "Background on this error" not in str(err)
    finally:
        engine.dispose()


def test_a_hand_written_call_given_a_vector_it_cannot_take_says_how_to_send_it(
        sample_db: str, embedder: Any) -> None:
    """A text() query given the vector as a list was Postgres' bare "function
    funnel_search(unknown, double precision[], ...) does not exist" through translate (a
    plain PgfunnelError: the unqualified call was not read as pgfunnel's), and a numpy
    array on an engine of the application's own psycopg's "cannot adapt type 'ndarray'";
    neither said that the vector was the argument at fault, nor how to send it."""
    import psycopg
    from pgvector.psycopg import register_vector
    from sqlalchemy import create_engine, event
    from sqlalchemy.exc import DBAPIError

    from pgfunnel.errors import InvalidVectorError, PgfunnelError, translate

    q = "refund on an annual plan"
    vec = embedder.embed_query(q)
    call = ("select citekey from {schema}funnel_search(:q, {v}, k => 3, principals => :p) "
            "order by final_rank")

    def run(engine: Any, sql: str, v: Any) -> list[Any]:
        with Session(engine) as s:
            s.execute(identity_statement(["alice"]))
            return list(s.execute(sa_text(sql), {"q": q, "v": v, "p": ["alice"]}).scalars())

    def refused(engine: Any, sql: str, v: Any) -> PgfunnelError:
        with pytest.raises(DBAPIError) as caught:
            run(engine, sql, v)
        return translate(caught.value)

    ours = engine_from_dsn(sample_db)
    # the application's own engine, on connections nothing registered pgvector on
    own = create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(sample_db))
    try:
        expected = run(ours, call.format(schema="", v=":v"), vec)
        assert len(expected) == 3
        for schema in ("", "pgfunnel."):
            for engine in (ours, own):
                err = refused(engine, call.format(schema=schema, v=":v"), vec.tolist())
                assert isinstance(err, InvalidVectorError)
                assert err.parameter == "query_embedding"
                assert str(err).startswith("query_embedding: was sent as double precision[] "
                                           "(a Python list), which no funnel_search takes; "
                                           "send the vector as a numpy array or "
                                           "pgvector.Vector"), err
        err = refused(own, call.format(schema="", v=":v"), vec)
        assert type(err) is PgfunnelError
        assert "cannot adapt type 'ndarray'" in str(err)
        assert "the connection has no pgvector adapters" in str(err)
        # each way the message gives works
        assert run(own, call.format(schema="", v="cast(:v as vector)"), vec.tolist()) == expected

        @event.listens_for(own, "connect")
        def _register(dbapi_connection: Any, _record: Any) -> None:
            register_vector(dbapi_connection)

        own.dispose()
        assert run(own, call.format(schema="", v=":v"), vec) == expected
        # another wrong argument of the unqualified call is said as the qualified one's
        err = refused(ours, "select * from funnel_search(:q, kk => 3, principals => :p)", None)
        assert isinstance(err, ConfigError) and err.parameter == "arguments"
        assert "no pgfunnel.funnel_search takes these arguments; check their names" in str(err)
        assert "or `pgfunnel init` if it has no pgfunnel schema" in str(err)
    finally:
        ours.dispose()
        own.dispose()


def test_a_hand_written_call_given_principals_as_a_string_or_tuple_says_to_pass_a_list(
        sample_db: str) -> None:
    """A text() query given principals as one string or a tuple (psycopg sends a tuple as
    a record) was InvalidInputError "malformed array literal: "(alice)"", naming neither
    the parameter nor what it takes."""
    from sqlalchemy.exc import DBAPIError

    from pgfunnel.errors import InvalidInputError, translate

    query = sa_text("select citekey from funnel_search('refund', principals => :p)")
    engine = engine_from_dsn(sample_db)
    try:
        for given, said in (("alice", '"alice"'), (("alice",), '"(alice)"')):
            with Session(engine) as s, pytest.raises(DBAPIError) as caught:
                s.execute(query, {"p": given})
            err = translate(caught.value)
            assert isinstance(err, InvalidInputError)
            assert str(err).startswith(f"malformed array literal: {said}; an array parameter "
                                       "(principals, weights) takes a list: from Python a "
                                       "list, not one string or a tuple"), err
        with Session(engine) as s:
            assert s.execute(query, {"p": ["alice"]}).scalars().first()
    finally:
        engine.dispose()


def test_statement_timeout_ms_given_to_the_tvf_says_how_to_set_the_limit(
        sample_db: str) -> None:
    """statement_timeout_ms, a SearchParams field, was 'unknown funnel_search parameter'
    for the tvf, with nothing on how a SQLAlchemy search gets the limit. The message's way
    is run here: the limit holds, and translate gives a SearchTimeoutError."""
    from sqlalchemy.exc import DBAPIError

    from pgfunnel.errors import SearchTimeoutError, translate

    with pytest.raises(ConfigError, match=r"^statement_timeout_ms: is Funnel.search's, not "
                                          "a funnel_search parameter: set the limit in the "
                                          "session's transaction") as exc:
        funnel_search_tvf("refund", k=3, principals=[], statement_timeout_ms=1)
    assert exc.value.parameter == "statement_timeout_ms"
    engine = engine_from_dsn(sample_db)
    try:
        with Session(engine) as s:
            s.execute(select(func.set_config("statement_timeout", "1", True)))
            with pytest.raises(DBAPIError) as caught:
                # pg_sleep: a search of the sample corpus can finish inside 1 ms
                s.execute(select(func.pg_sleep(0.05), func.count())
                          .select_from(funnel_search_tvf("refund", k=3, principals=[])))
            assert isinstance(translate(caught.value), SearchTimeoutError)
            s.rollback()
            # the limit was the transaction's: the next one searches
            fs = funnel_search_tvf("refund", k=3, principals=[])
            assert s.execute(select(fs.c.citekey)).all()
    finally:
        engine.dispose()


def test_a_hand_written_call_on_a_database_without_pgfunnel_is_schema_missing(
        server_dsn: str) -> None:
    """select * from funnel_search(...) where `pgfunnel init` never ran went through
    translate as a plain PgfunnelError, Postgres' "function funnel_search(unknown, k =>
    integer, ...) does not exist", which said nothing of the schema; a call that the
    function would have taken is the SchemaMissingError the tvf's gives."""
    import uuid

    from conftest import _create_db, _drop_db
    from sqlalchemy.exc import DBAPIError

    from pgfunnel.errors import SchemaMissingError, translate

    name = f"pgf_noschema_{uuid.uuid4().hex[:8]}"
    dsn = _create_db(server_dsn, name)
    engine = engine_from_dsn(dsn)

    def refused(query: str, values: dict[str, Any]) -> Any:
        with Session(engine) as s, pytest.raises(DBAPIError) as caught:
            s.execute(sa_text(query), values)
        return translate(caught.value)

    try:
        for query, values in (
                ("select * from funnel_search(:q, k => :k, principals => :p)",
                 {"q": "refund", "k": 3, "p": ["alice"]}),
                ("select * from funnel_search('refund', principals => '{}', "
                 "collection => 'handbook', weights => :w, trace => true)", {"w": [1.0, 0.5]})):
            err = refused(query, values)
            assert isinstance(err, SchemaMissingError), err
            assert str(err).startswith("the pgfunnel schema is not installed in this "
                                       "database; run `pgfunnel init` (function "
                                       "funnel_search("), err
        # one the function would not take either says both
        err = refused("select * from funnel_search('refund', tenant => 42)", {})
        assert isinstance(err, ConfigError) and "`pgfunnel init` if it has no pgfunnel " \
            "schema" in str(err), err
    finally:
        engine.dispose()
        _drop_db(server_dsn, name)


def test_a_missing_collection_through_python_names_pythons_form_of_the_argument(
        sample_db: str, embedder: Any) -> None:
    """The SQL functions' hint for a collection that does not exist says how to pass one
    in SQL (collection => 'NAME') and the CLI (-c NAME); a Funnel or SQLAlchemy caller was
    shown those two and not the keyword their own call takes."""
    import psycopg
    from sqlalchemy.exc import DBAPIError

    from pgfunnel.errors import NotFoundError, translate

    forms = ("(pass one as the collection: collection='NAME' in Python, collection => "
             "'NAME' in SQL, -c NAME in the CLI); or ingest into it first: pgfunnel ingest "
             "PATH --collection nosuch")
    engine = engine_from_dsn(sample_db)
    try:
        with Session(engine) as s, pytest.raises(DBAPIError) as caught:
            s.execute(select(funnel_search_tvf("refund", k=3, principals=[],
                                               collection="nosuch").c.citekey)).all()
        # psql's reader is told the SQL and CLI forms, from the function's hint
        assert isinstance(caught.value.orig, psycopg.Error)
        assert "collection => 'NAME' in SQL, -c NAME in the CLI" in (
            caught.value.orig.diag.message_hint or "")
        err = translate(caught.value)
        assert isinstance(err, NotFoundError)
        assert str(err) == (f"collection 'nosuch' does not exist; this database has "
                            f"'default' {forms}"), err
        # the argument that named it, as a caller tells its arguments apart
        assert err.parameter == "collection" and err.detail == str(err)
    finally:
        engine.dispose()
    # Funnel looks the collection up itself (for its model) before the search runs
    with Funnel(sample_db, collection="nosuch", embedder=embedder) as funnel, \
            pytest.raises(NotFoundError) as missing:
        funnel.search("refund", k=3, principals=[])
    assert str(missing.value) == f"collection 'nosuch' does not exist; this database has " \
                                 f"'default' {forms}"
    assert missing.value.parameter == "collection"


def test_both_engines_read_the_prepare_threshold_setting(
        sample_db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """PGFUNNEL_PREPARE_THRESHOLD=none reached the sync engine's connections (through
    pgfunnel.db.connect) but not the async engine's, which a transaction pooler behind a
    FastAPI app needs as much; connect_args' own value still wins."""
    import asyncio

    from sqlalchemy.ext.asyncio import AsyncEngine

    from pgfunnel.sqla import async_engine_from_dsn

    async def async_threshold(engine: AsyncEngine) -> Any:
        try:
            async with engine.connect() as conn:
                raw = await conn.get_raw_connection()
                assert raw.driver_connection is not None
                return raw.driver_connection.prepare_threshold
        finally:
            await engine.dispose()

    def sync_threshold(**kwargs: Any) -> Any:
        engine = engine_from_dsn(sample_db, **kwargs)
        try:
            with engine.connect() as conn:
                driver = conn.connection.driver_connection
                assert driver is not None
                return driver.prepare_threshold
        finally:
            engine.dispose()

    monkeypatch.delenv("PGFUNNEL_PREPARE_THRESHOLD", raising=False)
    assert asyncio.run(async_threshold(async_engine_from_dsn(sample_db))) == 5
    monkeypatch.setenv("PGFUNNEL_PREPARE_THRESHOLD", "none")
    assert asyncio.run(async_threshold(async_engine_from_dsn(sample_db))) is None
    assert sync_threshold() is None
    given = {"connect_args": {"prepare_threshold": 2}}
    assert asyncio.run(async_threshold(async_engine_from_dsn(sample_db, **given))) == 2
    assert sync_threshold(**given) == 2
