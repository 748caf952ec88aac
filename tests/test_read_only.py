"""Searching where nothing may be written: a read replica (a hot standby), a role or
database with ``default_transaction_read_only = on``, or the application's own ``set
transaction read only``. Emulated here with the setting on the connection (a hot standby
refuses writes with the same SQLSTATE, 25006). Untraced searches, explain, the analyzer
functions and doctor run there and answer as on the primary; what writes (a trace,
ingest, reindex, init, migrate) is refused first, with the cause and the fix."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

from pgfunnel.db import connect
from pgfunnel.errors import ConfigError, PgfunnelError, ReadOnlyError, TraceReadOnlyError
from pgfunnel.rerank import Reranker
from pgfunnel.search import Funnel
from pgfunnel.sources import DocumentRecord
from pgfunnel.tiny_models import build_tiny_cross_encoder

QUERIES = ("refund on a monthly plan", "ERR-4029", "export my data as csv")


def read_only(dsn: str) -> str:
    """``dsn`` with every transaction read-only, as a replica's or a read-only role's."""
    return psycopg.conninfo.make_conninfo(dsn, options="-c default_transaction_read_only=on")


@pytest.fixture(scope="module")
def tiny_reranker(tmp_path_factory: pytest.TempPathFactory) -> Reranker:
    path = build_tiny_cross_encoder(tmp_path_factory.mktemp("ce") / "tiny")
    return Reranker(str(path), device="cpu")


class Counting:
    """Delegates to a real reranker and counts its calls."""

    def __init__(self, inner: Reranker) -> None:
        self.inner = inner
        self.calls = 0
        self.model_name = inner.model_name

    def rank(self, query: str, documents: Sequence[str]) -> list[dict[str, Any]]:
        self.calls += 1
        return list(self.inner.rank(query, documents))


@pytest.fixture()
def restricted_sample(sample_db: str) -> str:
    """The help-center sample with some documents for readers only and some in a tenant."""
    with connect(sample_db, autocommit=True) as conn:
        conn.execute("update pgfunnel.document set readers = '{alice,team-a}', "
                     "is_public = false where id % 5 = 1")
        conn.execute("update pgfunnel.document set tenant = 'acme' where id % 7 = 2")
    return sample_db


SQL_SEARCH = ("select chunk_id, lexical_score, dense_score, fused_score, final_rank "
              "from funnel_search(%(q)s, %(v)s, k => 8, fusion => %(fusion)s, "
              "principals => %(principals)s, tenant => %(tenant)s, "
              "metadata_filter => %(mf)s)")


def _sql_searches(conn: psycopg.Connection[Any], embedder: Any) -> list[Any]:
    answers = []
    for q in QUERIES:
        v = embedder.embed_query(q)
        for fusion in ("minmax", "rrf", "zscore"):
            readers: list[dict[str, Any]] = [{"principals": [], "tenant": None},
                                             {"principals": ["alice"], "tenant": "acme"}]
            for who in readers:
                for text, vec in ((q, v), (q, None), (None, v)):
                    answers.append(conn.execute(SQL_SEARCH, {
                        "q": text, "v": vec, "fusion": fusion, "mf": None, **who}).fetchall())
        answers.append(conn.execute(SQL_SEARCH, {
            "q": q, "v": v, "fusion": "minmax", "principals": ["alice"], "tenant": None,
            "mf": psycopg.types.json.Jsonb({"kind": "policy"})}).fetchall())
    return answers


def _explain_and_analyze(conn: psycopg.Connection[Any], embedder: Any) -> list[Any]:
    v = embedder.embed_query(QUERIES[0])
    ids = [r[0] for r in conn.execute("select id from pgfunnel.chunk order by id limit 5")]
    return [
        conn.execute("select verdict, final_rank, fused_rank from pgfunnel.explain(%s, %s, "
                     "%s, principals => '{alice}')", (QUERIES[0], v, cid)).fetchall()
        for cid in ids
    ] + [
        conn.execute("select pgfunnel.analyze('ERR-4029 os.path.join', 'english_v3', true), "
                     "pgfunnel.dropped_query_words('how do I get a refund', 'english_v3')"
                     ).fetchall(),
        conn.execute("select * from pgfunnel.analyze_tokens('how do I refund ERR-4029', "
                     "'simple_v3', true)").fetchall(),
        conn.execute("select count(*) from pgfunnel.analyzers()").fetchall(),
        conn.execute("select f.chunk_id, f.final_rank from (select "
                     "array_agg(chunk_id order by fused_rank) i, "
                     "array_agg(fused_rank order by fused_rank) fr, "
                     "array_agg(fused_score order by fused_rank) fs, "
                     "array_agg(lexical_rank order by fused_rank) lr, "
                     "array_agg(lexical_score order by fused_rank) ls, "
                     "array_agg(dense_rank order by fused_rank) dr, "
                     "array_agg(dense_score order by fused_rank) ds "
                     "from pgfunnel.candidates(%s, %s, principals => '{alice}')) c, "
                     "pgfunnel.final(c.i, c.fr, c.fs, c.lr, c.ls, c.dr, c.ds, "
                     "principals => '{alice}') f", (QUERIES[0], v)).fetchall(),
    ]


def _api_searches(funnel: Funnel, reranking: Funnel) -> list[Any]:
    def ids(resp: Any) -> list[tuple[int, int, float | None]]:
        return [(r.chunk_id, r.final_rank, r.rerank_score) for r in resp.results]

    answers = []
    for q in QUERIES:
        answers.append(ids(funnel.search(q, principals=["alice"], tenant="acme")))
        answers.append(ids(funnel.search(q, weights=[1, 0])))
        answers.append(ids(reranking.search(q, principals=["alice"])))
    answers.append(ids(funnel.search_multi(list(QUERIES[:2]), principals=["alice"])))
    answers.append(ids(reranking.search_multi(list(QUERIES[:2]))))
    answers.append(ids(funnel.search_decomposed("refund on a monthly plan; and how do I "
                                                "export my data?")))
    answers.append(ids(funnel.search("and on annual?", history=[QUERIES[0]])))
    return answers


def _sqla_search(dsn: str, embedder: Any) -> list[Any]:
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    from pgfunnel.sqla import engine_from_dsn, funnel_search_tvf

    engine = engine_from_dsn(dsn)
    try:
        with Session(engine) as session:
            fs = funnel_search_tvf(QUERIES[0], embedder.embed_query(QUERIES[0]), k=5,
                                   principals=["alice"])
            return [tuple(r) for r in session.execute(
                select(fs.c.chunk_id, fs.c.final_rank).order_by(fs.c.final_rank)).all()]
    finally:
        engine.dispose()


def test_searches_on_a_read_only_connection_answer_as_on_the_primary(
        restricted_sample: str, embedder: Any, tiny_reranker: Reranker) -> None:
    ro = read_only(restricted_sample)
    with connect(restricted_sample, autocommit=True) as rw, connect(ro, autocommit=True) as conn:
        assert conn.execute("show transaction_read_only").fetchone() == ("on",)
        assert _sql_searches(conn, embedder) == _sql_searches(rw, embedder)
        assert _explain_and_analyze(conn, embedder) == _explain_and_analyze(rw, embedder)
        logged = rw.execute("select count(*) from pgfunnel.search_log").fetchone()
    answers = []
    for dsn in (restricted_sample, ro):
        with Funnel(dsn, embedder=embedder) as funnel, \
                Funnel(dsn, embedder=embedder, reranker=tiny_reranker) as reranking:
            answers.append(_api_searches(funnel, reranking))
        answers.append(_sqla_search(dsn, embedder))
    assert answers[:2] == answers[2:]
    with connect(restricted_sample, autocommit=True) as rw:
        assert rw.execute("select count(*) from pgfunnel.search_log").fetchone() == logged


def test_a_traced_search_in_a_read_only_transaction_is_refused_before_it_runs(
        sample_db: str, embedder: Any, tiny_reranker: Reranker) -> None:
    """A trace writes search_log: on a replica the search failed after it ran (and after
    the reranker scored the pool) with Postgres' bare "cannot execute INSERT in a
    read-only transaction". It is refused first, naming `trace` and the fix."""
    ro = read_only(sample_db)
    v = embedder.embed_query(QUERIES[0])
    with connect(ro, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction) as traced:
            conn.execute("select * from funnel_search(%s, %s, trace => true)", (QUERIES[0], v))
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction) as final:
            conn.execute("select * from pgfunnel.final(array[1]::bigint[], '{1}', '{1}', "
                         "'{1}', '{1}', '{1}', '{1}', trace => true)")
    for exc in (traced.value, final.value):
        message = exc.diag.message_primary or ""
        assert message.startswith("trace: a traced search writes search_log"), message
        assert "read-only" in message and "tracing off" in message

    counting = Counting(tiny_reranker)
    with Funnel(ro, embedder=embedder, reranker=counting) as funnel:
        for search in (lambda: funnel.search(QUERIES[0], trace=True),
                       lambda: funnel.search(QUERIES[0], rerank=False, trace=True),
                       lambda: funnel.search_multi(list(QUERIES[:2]), trace=True),
                       lambda: funnel.search_decomposed("refunds; and exports?", trace=True),
                       # and the checks a search runs first, alone
                       lambda: funnel.check(QUERIES[0], trace=True)):
            with pytest.raises(TraceReadOnlyError) as refused:
                search()
            assert isinstance(refused.value, ReadOnlyError)
            assert isinstance(refused.value, ConfigError) and refused.value.parameter == "trace"
            assert "read-only" in str(refused.value)
        assert counting.calls == 0  # refused before the reranker scored anything
        assert funnel.search(QUERIES[0]).results  # the same Funnel searches untraced

    # the application's own read-only transaction on a read-write connection
    with connect(sample_db) as app:
        app.execute("set transaction read only")
        funnel = Funnel(app, embedder=embedder)
        with pytest.raises(TraceReadOnlyError):
            funnel.search(QUERIES[0], trace=True)
        assert app.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        assert funnel.search(QUERIES[0]).results
        app.rollback()
        assert app.execute("select count(*) from pgfunnel.search_log").fetchone() == (0,)

    from pgfunnel.cli.main import app as cli

    res = CliRunner().invoke(cli, ["search", QUERIES[0], "--dsn", ro, "--lexical-only",
                                   "--trace"])
    assert res.exit_code == 1, res.output
    assert "error: --trace: a traced search writes search_log" in res.output
    assert "Traceback" not in res.output


def test_what_writes_says_it_needs_the_primary(sample_db: str, embedder: Any) -> None:
    """Ingest embedded its first batch before its first write failed on a replica, reindex
    left psycopg's traceback, and init, migrate and the version commands printed only
    "cannot execute ... in a read-only transaction"."""
    from pgfunnel import schema, versions
    from pgfunnel.ingest import Ingester, delete_documents

    ro = read_only(sample_db)

    class NoModel:
        model_name = embedder.model_name
        dimensions = embedder.dimensions

        def embed(self, *args: Any, **kwargs: Any) -> Any:
            raise AssertionError("the model ran before the read-only refusal")

        embed_documents = embed_query = embed

    with connect(ro, autocommit=True) as conn:
        with pytest.raises(ReadOnlyError, match="^ingest writes to the database; the "
                                                "transaction is read-only"):
            Ingester(conn, embedder=NoModel()).ingest(  # type: ignore[arg-type]
                [DocumentRecord(citekey="new", title="New", text="zanzibar quokka")])
        with pytest.raises(ReadOnlyError, match="^reindex writes to the database"):
            versions.reindex(conn, "default", analyzer="simple_v3")
        with pytest.raises(ReadOnlyError, match="run it on the primary"):
            delete_documents(conn, "default", ["refunds-annual"])
    for step in (schema.init, schema.migrate):
        with pytest.raises(ReadOnlyError, match="in a read-only transaction; the transaction is "
                                                "read-only .*run it on the primary"):
            step(ro)

    from pgfunnel.cli.main import app as cli

    res = CliRunner().invoke(cli, ["reindex", "--dsn", ro, "--analyzer", "simple_v3"])
    assert res.exit_code == 1, res.output
    assert res.output.startswith("error: reindex writes to the database"), res.output
    with connect(sample_db, autocommit=True) as conn:
        assert conn.execute("select count(*) from pgfunnel.index_version").fetchone() == (1,)
        assert conn.execute("select count(*) from pgfunnel.document where citekey = 'new'"
                            ).fetchone() == (0,)


def test_eval_storing_judgments_on_a_read_only_connection_is_refused_before_it_searches(
        sample_db: str, tmp_path: Path) -> None:
    """`eval --store-qrels` on a replica ran every search, then failed on its first write
    to pgfunnel.qrel; a reader without INSERT on it was already refused up front."""
    from pgfunnel.cli.main import app as cli

    judged = tmp_path / "judged.jsonl"
    judged.write_text(json.dumps({"query_id": "q1", "query": QUERIES[0], "slice": "s",
                                  "relevant": ["refunds-monthly"]}) + "\n")
    base = ["eval", str(judged), "--preset", "lexical", "--dsn", read_only(sample_db)]
    stored = CliRunner().invoke(cli, [*base, "--store-qrels"], env={"COLUMNS": "200"})
    said = " ".join(stored.output.split())
    assert stored.exit_code == 1, said
    assert said.startswith("error: eval --store-qrels writes to the database; the "
                           "transaction is read-only"), said
    assert "evaluating" not in said, said
    plain = CliRunner().invoke(cli, base, env={"COLUMNS": "200"})
    assert plain.exit_code == 0, plain.output
    # --trace writes too, and is named by its flag, as `pgfunnel search --trace` names it
    traced = CliRunner().invoke(cli, [*base, "--trace"], env={"COLUMNS": "200"})
    said = " ".join(traced.output.split())
    assert traced.exit_code == 1 and said.startswith("error: --trace: "), said


def test_migrate_by_a_role_that_does_not_own_the_schema_says_whose_it_is(
        sample_db: str) -> None:
    # a reader got only "permission denied for table alembic_version"
    from _security_helpers import create_app_role

    from pgfunnel import schema
    from pgfunnel.errors import AccessError

    reader = create_app_role(sample_db)
    with pytest.raises(AccessError, match="permission denied .*run `pgfunnel migrate` as the "
                                          "role that owns the pgfunnel schema"):
        schema.migrate(reader)


@pytest.mark.parametrize("writer", [False, True])
def test_init_by_a_role_that_does_not_own_the_schema_says_whose_it_is(
        sample_db: str, writer: bool) -> None:
    # a reader got only "permission denied for table alembic_version", a pgfunnel_writer
    # member "permission denied for database <name>", where migrate names the owner
    from _security_helpers import create_app_role

    from pgfunnel import schema
    from pgfunnel.errors import AccessError

    role = create_app_role(sample_db, writer=writer)
    with pytest.raises(AccessError, match="permission denied .*run `pgfunnel init` as the "
                                          "role that owns the pgfunnel schema"):
        schema.init(role)


def test_doctor_runs_on_a_read_only_connection(sample_db: str, tmp_path: Path) -> None:
    from pgfunnel.doctor import run_checks

    with connect(sample_db, autocommit=True) as rw, \
            connect(read_only(sample_db), autocommit=True) as conn:
        primary = run_checks(rw)
        replica = run_checks(conn)
    assert [f for f in replica if f.level != "info"] == [], replica
    assert [(f.check, f.message) for f in replica] == [(f.check, f.message) for f in primary]

    from pgfunnel.cli.main import app as cli

    res = CliRunner().invoke(cli, ["doctor", "--dsn", read_only(sample_db)])
    assert res.exit_code == 0, res.output
    assert isinstance(ReadOnlyError("x"), PgfunnelError)
