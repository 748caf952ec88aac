"""Hostile input: a clear error or an empty answer, never a crash, a raw traceback or a
broken connection; through the Python API, SQL funnel_search and the CLI."""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

import numpy as np
import psycopg
import pytest
from _security_helpers import DIM, MODEL, Doc, ingest_docs, unit

from pgfunnel.db import connect
from pgfunnel.errors import (
    ConfigError,
    InvalidInputError,
    InvalidVectorError,
    PgfunnelError,
    QueryCancelledError,
    SearchTimeoutError,
    StatementTimeoutError,
    translate,
)
from pgfunnel.search import Funnel

HOSTILE_TEXT: list[str] = [
    "", " ", "!!", "\"refund", "'refund", "refund'\"", "a" * 10_000, "refund " * 150_000,
    "refund\x00plan", "refund \udc80 plan", "&", "|", "!", "(", ")", ":", "*", "a & b | !c",
    "!(refund", "refund:*", "refund:A", "(((", "<->", "refund <-> plan", "'; drop table "
    "pgfunnel.document; --", "\" or 1=1 --", "$1", "%s", "%(x)s", "\\", "\\x00", "{}", "[]",
    "null", "🔥 refund", "\u202erefund", "\t\n\r", "\ufeff",
]
HOSTILE_VECTORS: list[Any] = [
    np.ones(DIM + 1), np.ones(DIM - 1), [float("nan")] * DIM, [float("inf")] * DIM,
    [float("-inf")] + [1.0] * (DIM - 1), np.zeros(DIM), [], [[1.0] * DIM], "abc",
    ["x"] * DIM, [None] * DIM,
    # finite, but the squares underflow or overflow in pgvector's single precision
    [1e-30] * DIM, [1e20] * DIM,
    # the cast to float32 dropped the imaginary part and parsed the strings, unsaid
    np.ones(DIM, dtype=complex), np.array(["1"] * DIM),
    # and booleans became 0.0 and 1.0: a bit mask searched as if it were an embedding
    np.ones(DIM, dtype=bool), [True] * DIM,
    # past single precision: Inf once cast, and a Python int past any float
    [1e39] * DIM, [10**400] + [1] * (DIM - 1),
    # more dimensions than pgvector's vector holds: its own error, naming no argument
    np.ones(16_001),
]


@pytest.fixture(scope="module")
def corpus_db(server_dsn: str, schema_template: str) -> Any:
    import uuid

    from conftest import _create_db, _drop_db

    name = f"pgf_t_hostile_{uuid.uuid4().hex[:8]}"
    dsn = _create_db(server_dsn, name, schema_template)
    ingest_docs(dsn, [Doc(f"d{i:04d}", f"Refund plan billing invoice topic {i}. "
                          "Common words appear in every document here.")
                      for i in range(1500)], seed=5)
    yield dsn
    _drop_db(server_dsn, name)


def _usable(conn: psycopg.Connection[Any]) -> None:
    assert not conn.closed and not conn.broken
    assert conn.execute("select count(*) > 0 from pgfunnel.document").fetchone() == (True,)


@pytest.mark.parametrize("text", HOSTILE_TEXT, ids=range(len(HOSTILE_TEXT)))
def test_hostile_text_through_funnel(corpus_db: str, text: str) -> None:
    with connect(corpus_db, autocommit=True) as conn:
        f = Funnel(conn, embedder=None)
        try:
            res = f.search(text, k=5)
            assert isinstance(res.results, list)
        except PgfunnelError as exc:
            assert isinstance(exc, InvalidInputError)
            assert str(exc).startswith("query_text:")
        _usable(conn)


@pytest.mark.parametrize("text", HOSTILE_TEXT, ids=range(len(HOSTILE_TEXT)))
def test_hostile_text_through_sql(corpus_db: str, text: str) -> None:
    with connect(corpus_db, autocommit=True) as conn:
        try:
            rows = conn.execute("select citekey from funnel_search(%s, k => 5)",
                                (text,)).fetchall()
            assert isinstance(rows, list)
        except (psycopg.DataError, UnicodeEncodeError) as exc:
            # NUL / a lone surrogate cannot be sent (the driver refuses); too long: 22023
            assert "\x00" in text or "\udc80" in text or len(text) > 10_000, exc
        _usable(conn)


@pytest.mark.parametrize("text", HOSTILE_TEXT,
                         ids=lambda t: repr(t)[:20])
def test_hostile_text_through_cli(corpus_db: str, text: str) -> None:
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    res = CliRunner().invoke(app, ["search", text, "--lexical-only", "--dsn", corpus_db,
                                   "-k", "3"])
    assert res.exit_code in (0, 1), res.output
    assert "Traceback" not in res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)
    if res.exit_code == 1:
        # named as the argument typed (the library's name for it is query_text)
        assert res.output.startswith("error: QUERY: "), res.output


@pytest.mark.parametrize("vec", HOSTILE_VECTORS, ids=range(len(HOSTILE_VECTORS)))
def test_hostile_vectors_rejected_before_sql(corpus_db: str, vec: Any) -> None:
    wrong_dim = isinstance(vec, np.ndarray) and vec.shape == (DIM + 1,) or \
        isinstance(vec, np.ndarray) and vec.shape == (DIM - 1,)
    if wrong_dim:
        # the expected dimension lives in the database: one catalog read, no search SQL
        with connect(corpus_db, autocommit=True) as conn:
            with pytest.raises(InvalidVectorError, match="dimensions"):
                Funnel(conn, embedder=None).search("refund", query_embedding=vec)
            _usable(conn)
        return
    dead = connect(corpus_db, autocommit=True)
    dead.close()  # any SQL on it raises OperationalError, not InvalidVectorError
    with pytest.raises(InvalidVectorError):
        Funnel(dead, embedder=None).search("refund", query_embedding=vec)


def test_a_vector_longer_than_pgvector_holds_is_named_in_python(corpus_db: str) -> None:
    # pgvector refused it as the argument was sent: a bare PgfunnelError, "vector cannot
    # have more than 16000 dimensions", which named neither the argument nor its class
    with connect(corpus_db, autocommit=True) as conn:
        with pytest.raises(InvalidVectorError) as err:
            Funnel(conn, embedder=None).search("refund", query_embedding=np.ones(16_001))
        assert err.value.parameter == "query_embedding"
        assert str(err.value) == ("query_embedding: has 16,001 dimensions; pgvector's "
                                  "vector holds at most 16,000")
        _usable(conn)
    # and from SQL, pgvector's own refusal, before funnel_search runs (docs/sql.md)
    with connect(corpus_db, autocommit=True) as conn, \
            pytest.raises(psycopg.errors.ProgramLimitExceeded, match="16000 dimensions"):
        conn.execute("select * from funnel_search('refund', "
                     "array_fill(0.5::real, array[16001])::vector)")


@pytest.mark.parametrize("argument, said", [
    ("tenant => 42", "function funnel_search(unknown, tenant => integer) does not exist"),
    ("k => 5.5", "function funnel_search(unknown, k => numeric) does not exist"),
    ("trace => 1", "function funnel_search(unknown, trace => integer) does not exist"),
    ("query_embedding => '[1,2]'::halfvec",
     "function funnel_search(unknown, query_embedding => halfvec) does not exist"),
    ("query_embedding => array[1.0, 2.0]::float8[]",
     "function funnel_search(unknown, query_embedding => double precision[]) does not exist"),
    ("principals => 'alice'", 'malformed array literal: "alice"'),
    ("weights => '1,0.5'", 'malformed array literal: "1,0.5"'),
    ("as_of => 'last week'",
     'invalid input syntax for type timestamp with time zone: "last week"'),
    ("metadata_filter => 'plan=annual'", "invalid input syntax for type json"),
    ("k => 'ten'", 'invalid input syntax for type integer: "ten"'),
])
def test_a_value_of_no_type_the_parameter_takes_is_postgres_own_error_as_documented(
        corpus_db: str, argument: str, said: str) -> None:
    # docs/sql.md quotes these: Postgres refuses them before funnel_search runs, so no
    # pgfunnel check can name the parameter; the page says what each means and the fix
    with connect(corpus_db, autocommit=True) as conn:
        with pytest.raises(psycopg.Error) as err:
            conn.execute(psycopg.sql.SQL("select * from funnel_search('refund', {})")
                         .format(psycopg.sql.SQL(argument)))
        assert str(err.value).splitlines()[0] == said
        _usable(conn)


def test_a_time_without_a_zone_is_utc_in_python_and_the_sessions_in_sql(db: str) -> None:
    """docs/python-api.md and sql.md: a naive datetime (or a date) given to the Python API,
    a record's valid_from or a search's as_of, is UTC, as a JSONL line's valid_from without
    an offset is; it was sent naive and read in the session's TimeZone, hours off where
    that is not UTC. A SQL literal without an offset keeps Postgres' reading."""
    import datetime as dt

    from pgfunnel.explain import explain
    from pgfunnel.ingest import Ingester, create_version, get_or_create_collection
    from pgfunnel.sources import DocumentRecord, record_from_dict

    with connect(db, autocommit=True) as conn:
        conn.execute("set timezone = 'Pacific/Kiritimati'")  # UTC+14, for the session
        coll = get_or_create_collection(conn, "default")
        create_version(conn, coll, MODEL, DIM, "english_v8", "active")
        text = "Refund plan topic seven."
        records = [
            DocumentRecord("py", text, valid_from=dt.datetime(2020, 1, 1, 12)),
            record_from_dict({"citekey": "jsonl", "text": text,
                              "valid_from": "2020-01-01T12:00:00"}, "line 1"),
            # a naive and an aware time order as UTC: 12:00 UTC to 13:00+00:30
            DocumentRecord("mixed", text, valid_from=dt.datetime(2020, 1, 1, 12),
                           valid_to=dt.datetime(2020, 1, 1, 13, 30,
                                                tzinfo=dt.timezone(dt.timedelta(hours=1)))),
        ]
        vec = unit(np.ones(DIM))
        Ingester(conn, "default").ingest(records, vectors={r.citekey: vec[None, :]
                                                           for r in records})
        stored = {ck: (start, end) for ck, start, end in conn.execute(
            "select citekey, valid_from, valid_to from pgfunnel.document").fetchall()}
        noon = dt.datetime(2020, 1, 1, 12, tzinfo=dt.UTC)
        assert stored == {"py": (noon, None), "jsonl": (noon, None),
                          "mixed": (noon, noon + dt.timedelta(minutes=30))}
        funnel = Funnel(conn, embedder=None)

        def found(as_of: Any) -> set[str]:
            return {r.citekey for r in funnel.search("topic seven", k=5, as_of=as_of).results}

        assert found(dt.datetime(2020, 1, 1, 12, 15)) == {"py", "jsonl", "mixed"}
        assert found(dt.datetime(2020, 1, 1, 12, 15, tzinfo=dt.UTC)) == {"py", "jsonl", "mixed"}
        # 11:59 UTC is before them all (in the session's zone it was 21:59 UTC, long after)
        assert found(dt.datetime(2020, 1, 1, 11, 59)) == set()
        assert found(dt.datetime(2020, 1, 1, 12, 45)) == {"py", "jsonl"}
        assert found(dt.date(2020, 1, 2)) == {"py", "jsonl"}  # midnight UTC
        assert found(dt.date(2020, 1, 1)) == set()
        # explain reads its as_of so too
        early = explain(funnel, "topic seven", "py", as_of=dt.datetime(2020, 1, 1, 11, 59))
        assert early.final_rank is None
        assert explain(funnel, "topic seven", "py",
                       as_of=dt.datetime(2020, 1, 1, 12, 15)).final_rank is not None
        # SQL keeps Postgres' reading: 12:15 at UTC+14 is 22:15 UTC the day before
        rows = conn.execute("select citekey from funnel_search('topic seven', k => 5, "
                            "as_of => '2020-01-01 12:15')").fetchall()
        assert rows == []
        rows = conn.execute("select citekey from funnel_search('topic seven', k => 5, "
                            "as_of => '2020-01-01 12:15Z')").fetchall()
        assert {r[0] for r in rows} == {"py", "jsonl", "mixed"}


def test_translate_names_the_setting_of_postgres_own_invalid_value(db: str) -> None:
    # translate() of Postgres' own 22023 ('invalid value for parameter "statement_timeout":
    # "abc"') made a ConfigError whose .parameter was that whole first half of the message
    with connect(db, autocommit=True) as conn:
        with pytest.raises(psycopg.Error) as raw:
            conn.execute("set statement_timeout = 'abc'")
        err = translate(raw.value)
        assert type(err) is ConfigError and err.parameter == "statement_timeout"
        assert 'invalid value for parameter "statement_timeout"' in str(err)
        assert err.__cause__ is raw.value
        # pgfunnel's own messages name the parameter first, as before
        with pytest.raises(psycopg.Error) as raw:
            conn.execute("select * from pgfunnel.funnel_search('refund', null, k => 0, "
                         "principals => '{}')")
        err = translate(raw.value)
        assert type(err) is ConfigError and err.parameter == "k"
        assert str(err).startswith("k: must be between 1 and 1000")


def test_none_vector_where_required(corpus_db: str) -> None:
    dead = connect(corpus_db, autocommit=True)
    dead.close()
    with pytest.raises(ConfigError, match="^query_text: ") as refused:
        Funnel(dead, embedder=None).search(None, query_embedding=None)
    assert refused.value.parameter == "query_text"
    # with an embedder too, as SQL refuses funnel_search(NULL, NULL): there is no text
    # to embed (it answered empty, with the warning an empty string gets)
    with pytest.raises(ConfigError, match="both are None"):
        Funnel(dead, embedder="auto").search(None)
    # the same class as SQL's own refusal, translated
    with connect(corpus_db, autocommit=True) as conn, pytest.raises(psycopg.Error) as raw:
        conn.execute("select * from funnel_search(null, null)")
    assert type(translate(raw.value)) is ConfigError
    assert translate(raw.value).parameter == "query_text"  # type: ignore[attr-defined]
    from pgfunnel.ingest import Ingester
    from pgfunnel.sources import DocumentRecord

    with connect(corpus_db, autocommit=True) as conn:
        ing = Ingester(conn, "default")
        for bad in ([None], [np.full(DIM, math.nan)], [np.zeros(DIM)], [np.ones(DIM + 3)],
                    [np.ones(DIM, dtype=complex)], np.ones((1, DIM), dtype=complex),
                    [np.ones(DIM, dtype=bool)]):
            with pytest.raises(InvalidVectorError):
                ing.ingest([DocumentRecord(citekey="bad-vec", text="short text")],
                           vectors={"bad-vec": bad})  # type: ignore[dict-item]
            assert conn.execute("select count(*) from pgfunnel.document "
                                "where citekey = 'bad-vec'").fetchone() == (0,)
        _usable(conn)


def test_sql_rejects_zero_and_wrong_dim_vectors(corpus_db: str) -> None:
    with connect(corpus_db, autocommit=True) as conn:
        for vec in (np.zeros(DIM, dtype=np.float32), np.ones(DIM + 2, dtype=np.float32),
                    np.full(DIM, 1e-30, dtype=np.float32), np.full(DIM, 1e20, dtype=np.float32)):
            with pytest.raises(psycopg.errors.MostSpecificTypeMismatch,
                               match="query_embedding") as raw:
                conn.execute("select * from funnel_search('refund', %s)", (vec,))
            translated = translate(raw.value)
            assert type(translated) is InvalidVectorError
            assert translated.parameter == "query_embedding"
            assert str(translated) == str(raw.value.diag.message_primary)
            # a vector of another length is most often another model's: psql shows the
            # hint naming the version's model and how to embed with it
            if vec.shape != (DIM,):
                assert raw.value.diag.message_hint == (
                    f"embed the query with that version's model, {MODEL}: `pgfunnel embed "
                    "TEXT -c default` prints the vector as a literal")
            else:
                assert raw.value.diag.message_hint is None
            _usable(conn)


def test_a_vector_error_names_its_argument() -> None:
    # like ConfigError.parameter, so a web app can point at the field it got wrong
    from pgfunnel.embedder import check_vector

    for bad, parameter, detail in (
            ([math.nan, 1.0], "query_embedding", "contains NaN values"),
            ([0.0, 0.0], "vectors['a'][2]", "is the zero vector, which has no direction"),
            ([1.0, 1.0, 1.0], "query_embedding", "has 3 dimensions; the index version expects 2")):
        with pytest.raises(InvalidVectorError) as refused:
            check_vector(bad, 2, parameter=parameter)
        assert refused.value.parameter == parameter
        assert str(refused.value) == f"{parameter}: {detail}"
    # pgvector's own refusal names no argument
    assert InvalidVectorError("NaN not allowed in vector").parameter is None


def test_statement_timeout_cancels_and_connection_survives(corpus_db: str) -> None:
    with connect(corpus_db, autocommit=True) as conn:
        f = Funnel(conn, embedder=None)
        with pytest.raises(SearchTimeoutError, match="statement_timeout_ms = 1 ms"):
            f.search("refund plan billing invoice common words appear document",
                     query_embedding=unit(np.ones(DIM)), k=1000, lexical_depth=1500,
                     dense_depth=1000, overfetch=1, per_source_cap=1, statement_timeout_ms=1)
        # transaction-local: the timeout did not stay on the connection
        assert conn.execute("show statement_timeout").fetchone() == ("0",)
        assert f.search("refund", k=3).results
        # a pathological statement under a transaction-local timeout
        with pytest.raises(psycopg.errors.QueryCanceled), conn.transaction():
            conn.execute("select set_config('statement_timeout', '50', true)")
            conn.execute("select pg_sleep(5)")
        _usable(conn)


def test_candidates_and_final_keep_to_statement_timeout_ms(corpus_db: str) -> None:
    """SearchParams.statement_timeout_ms bounds a search; given to candidates() or final()
    it was silently ignored: a 1 ms limit let a 1,000-candidate pool run to its end."""
    from pgfunnel.search import SearchParams

    heavy = "refund plan billing invoice common words appear document"
    vector = unit(np.ones(DIM))
    limited = SearchParams.build(k=1000, lexical_depth=1500, dense_depth=1000, overfetch=1,
                                 per_source_cap=1, statement_timeout_ms=1)
    unlimited = SearchParams.build(k=1000, lexical_depth=1500, dense_depth=1000,
                                   overfetch=1, per_source_cap=1, trace=True)
    with connect(corpus_db, autocommit=True) as conn:
        f = Funnel(conn, embedder=None)
        with pytest.raises(SearchTimeoutError, match=r"statement_timeout_ms = 1 ms; "):
            f.candidates(conn, heavy, vector, limited)
        assert conn.execute("show statement_timeout").fetchone() == ("0",)
        pool = f.candidates(conn, heavy, vector, unlimited)
        assert len(pool) == 1000
        # a traced final() of the whole pool writes its 1,000 trace rows
        with pytest.raises(SearchTimeoutError, match=r"statement_timeout_ms = 1 ms; "):
            f.final(conn, heavy, pool, dataclasses.replace(unlimited, statement_timeout_ms=1),
                    reranked=False)
        assert conn.execute("show statement_timeout").fetchone() == ("0",)
        _usable(conn)
        # in the application's own transaction: its own limit is back after the call
        with conn.transaction():
            conn.execute("select set_config('statement_timeout', '4321', true)")
            roomy = dataclasses.replace(unlimited, trace=False, statement_timeout_ms=60_000)
            pool = f.candidates(conn, heavy, vector, roomy)
            assert f.final(conn, heavy, pool, roomy, reranked=False)
            assert conn.execute("show statement_timeout").fetchone() == ("4321ms",)


def test_a_search_cancelled_by_another_session_is_not_called_a_timeout(corpus_db: str) -> None:
    # a search with statement_timeout_ms that an administrator cancelled (pg_cancel_backend)
    # said it "ran past its time limit (statement_timeout_ms = 60000 ms ...)": it had not
    import threading
    import time

    with connect(corpus_db, autocommit=True) as victim, \
            connect(corpus_db, autocommit=True) as admin, \
            connect(corpus_db, autocommit=True) as locker:
        f = Funnel(victim, embedder=None)
        pid = victim.info.backend_pid
        caught: list[BaseException] = []

        def search() -> None:
            try:
                f.search("refund", k=3, statement_timeout_ms=60_000)
            except BaseException as exc:  # noqa: BLE001 - the test reads it
                caught.append(exc)

        with locker.transaction():
            # the search waits on this lock, and is cancelled while it waits
            locker.execute("lock table pgfunnel.chunk in access exclusive mode")
            worker = threading.Thread(target=search)
            worker.start()
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and admin.execute(
                    "select wait_event_type from pg_stat_activity where pid = %s",
                    (pid,)).fetchone() != ("Lock",):
                time.sleep(0.05)
            admin.execute("select pg_cancel_backend(%s)", (pid,))
            worker.join(30)
        assert len(caught) == 1, caught
        said = str(caught[0])
        # SQLSTATE 57014, as a timeout's; a cancel, not a timeout, by its class too
        assert isinstance(caught[0], QueryCancelledError), repr(caught[0])
        assert not isinstance(caught[0], StatementTimeoutError)
        assert "user request" in said
        assert "time limit" not in said and "statement_timeout_ms" not in said, said
        assert f.search("refund", k=3).results  # the connection goes on


def test_an_ingest_cancelled_by_another_session_is_not_called_a_timeout(
        corpus_db: str) -> None:
    """An ingest (or reindex) that an administrator cancelled (pg_cancel_backend; a
    SIGINT that reaches the server) was a StatementTimeoutError, as if it had run past
    statement_timeout; a search so cancelled was a SearchTimeoutError. Both are now a
    QueryCancelledError: the same SQLSTATE, 57014, and no time limit."""
    import threading
    import time

    caught: list[BaseException] = []

    def ingest() -> None:
        try:
            ingest_docs(corpus_db, [Doc("cancelled-0001", "Refund words of a new page.")],
                        seed=9)
        except BaseException as exc:  # noqa: BLE001 - the test reads it
            caught.append(exc)

    with connect(corpus_db, autocommit=True) as admin, \
            connect(corpus_db, autocommit=True) as locker, locker.transaction():
        # the ingest waits on this lock, and is cancelled while it waits
        locker.execute("lock table pgfunnel.document in access exclusive mode")
        worker = threading.Thread(target=ingest)
        worker.start()
        # each statement that waits (the batch's preparing connection's too, whose
        # failure the ingest leaves to its writing one) is cancelled, until one fails it
        deadline = time.monotonic() + 60
        while worker.is_alive() and time.monotonic() < deadline:
            admin.execute("select pg_cancel_backend(pid) from pg_stat_activity where "
                          "datname = current_database() and wait_event_type = 'Lock' "
                          "and pid <> %s", (locker.info.backend_pid,))
            worker.join(0.1)
    assert len(caught) == 1, caught
    assert isinstance(caught[0], QueryCancelledError), repr(caught[0])
    assert not isinstance(caught[0], StatementTimeoutError), repr(caught[0])
    said = str(caught[0])
    assert "user request" in said and "statement_timeout" not in said, said


def test_a_connection_lost_mid_session_is_not_called_a_failure_to_connect(
        corpus_db: str) -> None:
    """A search on a connection the server terminated said "cannot connect to Postgres";
    the connection had been open, and losing it is what happened."""
    from pgfunnel.errors import ConnectionFailedError, translate

    with connect(corpus_db, autocommit=True) as victim, \
            connect(corpus_db, autocommit=True) as admin:
        admin.execute("select pg_terminate_backend(%s)", (victim.info.backend_pid,))
        for _ in range(2):  # the server's notice first, then libpq's "connection is closed"
            with pytest.raises(psycopg.Error) as caught:
                victim.execute("select 1")
            err = translate(caught.value)
            assert isinstance(err, ConnectionFailedError)
            assert str(err).startswith("lost the connection to Postgres"), err
    with pytest.raises(ConnectionFailedError, match="cannot connect to Postgres"):
        connect("postgresql://nobody@127.0.0.1:1/none?connect_timeout=2")


@pytest.mark.parametrize("fusion, weights, rrf_k, parameter", [
    ("minmax", "{5e-324,5e-324}", 60, "weights"),
    ("rrf", "{5e-324,1}", 60, "weights"),
    ("zscore", "{1e-320,1}", 60, "weights"),
    ("rrf", "{1,1}", 1e7, "rrf_k"),
])
def test_weights_or_rrf_k_a_fused_score_underflows_at_are_named(
        corpus_db: str, fusion: str, weights: str, rrf_k: float, parameter: str) -> None:
    """A weight far below 1e-6 (or one over a vast rrf_k) made a fused score underflow,
    which Postgres raises: 22003 'value out of range: underflow' from deep in _pool."""
    with connect(corpus_db, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=f"^{parameter}:"):
            conn.execute("select * from funnel_search('refund plan', %s, 5, fusion => %s, "
                         "weights => %s, rrf_k => %s)",
                         (unit(np.ones(DIM)), fusion, weights, rrf_k))
        _usable(conn)
        with pytest.raises(ConfigError, match=f"^{parameter}:"):
            # (rrf_k only where it is read: with another fusion it is refused itself)
            rrf_k_given: dict[str, Any] = {"rrf_k": rrf_k} if fusion == "rrf" else {}
            Funnel(conn, embedder=None).search(
                "refund plan", query_embedding=unit(np.ones(DIM)), fusion=fusion,
                weights=[float(w) for w in weights.strip("{}").split(",")], **rrf_k_given)
        _usable(conn)


@pytest.mark.parametrize("target, shown", [("²", "document ²"), ("x#²", "document x#²"),
                                           ("١", "document ١"),
                                           ("99999999999999999999", "chunk 99999999999999999999")])
def test_explain_targets_that_are_not_ascii_digits_or_past_bigint(
        corpus_db: str, target: str, shown: str | None) -> None:
    """'²' passed str.isdigit() and int() raised a raw ValueError; an Arabic-Indic '١'
    was read as chunk 1; an id past bigint was told as "chunk -1 does not exist". Neither
    a chunk id nor CITEKEY#ORDINAL, a target is a document's citekey."""
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    res = CliRunner().invoke(app, ["explain", "refund", target, "--dsn", corpus_db,
                                   "--lexical-only"])
    assert "Traceback" not in res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), res.output
    assert res.exit_code == 0, res.output
    assert f"{shown} does not exist" in " ".join(res.output.split()), res.output
    assert "-1" not in res.output, res.output


@pytest.mark.parametrize("exc", [TimeoutError(), RuntimeError(""), psycopg.OperationalError(),
                                 psycopg.DataError()])
def test_translate_names_an_error_with_no_message_by_its_class(exc: BaseException) -> None:
    # an application wrapping every handler in `raise translate(e)` got an IndexError
    err = translate(exc)
    assert isinstance(err, PgfunnelError)
    assert type(exc).__name__ in str(err)


def test_principals_that_no_document_can_name_are_refused_in_python_and_sql(
        corpus_db: str) -> None:
    with connect(corpus_db, autocommit=True) as conn:
        f = Funnel(conn, embedder=None)
        for bad in ([" alice"], ["alice", "bob\n"], ["\talice"]):
            with pytest.raises(ConfigError, match="^principals: must not begin or end with "
                                                  "whitespace"):
                f.search("refund", principals=bad)
            with pytest.raises(psycopg.errors.InvalidParameterValue,
                               match="principals: must not begin or end with whitespace"):
                conn.execute("select * from funnel_search('refund', principals => %s)", (bad,))
        assert f.search("refund", principals=["alice bob"]).results  # inner space: a name


def test_a_tenant_or_language_that_no_document_can_have_is_refused_in_python_and_sql(
        corpus_db: str) -> None:
    # ingest refuses " acme" as a tenant; a search for it came back empty without a word
    with connect(corpus_db, autocommit=True) as conn:
        f = Funnel(conn, embedder=None)
        for name, bad in (("tenant", " acme"), ("tenant", "acme\n"), ("language", "en ")):
            padded: dict[str, Any] = {name: bad}
            with pytest.raises(ConfigError, match=f"^{name}: must not begin or end with "
                                                  "whitespace"):
                f.search("refund", **padded)
            with pytest.raises(psycopg.errors.InvalidParameterValue,
                               match=f"{name}: must not begin or end with whitespace"):
                conn.execute(f"select * from funnel_search('refund', {name} => %s)", (bad,))
        f.search("refund", tenant="acme corp")  # an inner space: a name like any other


def test_a_funnel_given_a_class_instead_of_a_connection_says_so() -> None:
    with pytest.raises(ConfigError, match="^source: got the class psycopg.Connection"):
        Funnel(psycopg.Connection, embedder=None)


@pytest.mark.parametrize("big", [1e39, -3.5e38, 10**39, 10**400])
def test_a_value_past_single_precision_is_named_as_such_without_a_warning(big: Any) -> None:
    # 1e39 was called "Inf" after numpy warned of an overflow in the cast; 10**400
    # raised a raw OverflowError
    import warnings

    from pgfunnel.embedder import check_vector

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(InvalidVectorError,
                           match=r"^query_embedding: contains values beyond single precision"):
            check_vector([big, 1.0, 1.0], 3)


def test_a_deadlock_is_a_conflict_that_says_to_run_it_again(db: str) -> None:
    # it was a bare PgfunnelError("deadlock detected"), with nothing to say that the
    # transaction was rolled back and may simply be run again
    import threading

    from pgfunnel.errors import ConflictError, translate

    with connect(db, autocommit=True) as setup:
        setup.execute("create table lockme (id int primary key)")
        setup.execute("insert into lockme values (1), (2)")
    a, b = connect(db), connect(db)
    caught: list[BaseException] = []
    try:
        a.execute("select 1 from lockme where id = 1 for update")
        b.execute("select 1 from lockme where id = 2 for update")

        def second_lock(conn: psycopg.Connection[Any], row: int) -> None:
            try:
                conn.execute("select 1 from lockme where id = %s for update", (row,))
            except psycopg.Error as exc:
                caught.append(exc)
                conn.rollback()

        waiting = threading.Thread(target=second_lock, args=(a, 2))
        waiting.start()
        second_lock(b, 1)
        b.rollback()  # the side that won still holds its locks: let the other go
        waiting.join(30)
        a.rollback()
    finally:
        a.close()
        b.close()
    assert len(caught) == 1
    err = translate(caught[0], searching=False)
    assert isinstance(err, ConflictError)
    assert str(err).startswith("deadlock detected") and str(err).endswith("run it again")


@pytest.mark.parametrize("params, parameter", [
    ({"weights": [10**400, 1]}, "weights"), ({"weights": [1, -10**400]}, "weights"),
    ({"rrf_k": 10**400, "fusion": "rrf"}, "rrf_k"), ({"k1": 10**400}, "k1"),
    ({"b": -10**309}, "b"),
    # past 4,300 digits an int has no repr: the message itself raised a ValueError
    ({"k": 10**5000}, "k"), ({"k": -10**5000}, "k"), ({"lexical_depth": 10**5000}, "lexical_depth"),
    ({"statement_timeout_ms": 10**5000}, "statement_timeout_ms"),
    ({"weights": [10**5000, 1]}, "weights"), ({"collection": 10**5000}, "collection"),
    ({"principals": ["alice", 10**5000]}, "principals"), ({"as_of": 10**5000}, "as_of"),
    ({"trace": 10**5000}, "trace"),
])
def test_an_integer_past_double_precision_is_a_config_error_naming_the_parameter(
        corpus_db: str, params: dict[str, Any], parameter: str) -> None:
    """float(10**400) raised a raw OverflowError out of Funnel.search (weights, rrf_k, k1,
    b), and an integer of over 4,300 digits made the error message's own repr raise."""
    from pgfunnel.rerank import check_gate_margin

    dead = connect(corpus_db, autocommit=True)
    dead.close()  # refused before any SQL
    with pytest.raises(ConfigError, match=f"^{parameter}: ") as refused:
        Funnel(dead, embedder=None).search("refund", **params)
    assert refused.value.parameter == parameter
    assert len(str(refused.value)) < 400
    for margin in (10**400, 10**5000):
        with pytest.raises(ConfigError, match="^margin: must be a finite number > 0"):
            check_gate_margin(margin)


@pytest.mark.parametrize("space", ["\u00a0", "\u0085", "\x1c", "\u3000", "\u2007", "\u202f"])
def test_sql_refuses_the_edge_whitespace_ingest_refuses_whatever_the_collation(
        corpus_db: str, space: str) -> None:
    """'\\s' follows the collation: under C.UTF-8 it misses the no-break space, U+0085 and
    U+001C..U+001F, so funnel_search took a tenant 'acme<NBSP>', which ingest (Python's
    str.strip) refuses, and hid the tenant's documents without a word."""
    from pgfunnel.sources import DocumentRecord, check_record

    with pytest.raises(InvalidInputError, match="leading or trailing whitespace"):
        check_record(DocumentRecord(citekey="a", text="t", tenant=f"acme{space}"), "x")
    with connect(corpus_db, autocommit=True) as conn:
        for name, value in (("tenant", f"acme{space}"), ("language", f"{space}en"),
                            ("principals", ["bob", f"alice{space}"])):
            with pytest.raises(psycopg.errors.InvalidParameterValue,
                               match=f"^{name}: must not begin or end with whitespace"):
                conn.execute(f"select * from funnel_search('refund', {name} => %s)", (value,))
            padded: dict[str, Any] = {name: value}
            with pytest.raises(ConfigError, match=f"^{name}: must not begin or end with"):
                Funnel(conn, embedder=None).search("refund", **padded)
        # the row-level-security settings are read with the same rule
        for setting, value, said in (
                ("pgfunnel.principals", f'["alice{space}"]', "pgfunnel.principals: must be"),
                ("pgfunnel.tenant", f"{space}acme", "pgfunnel.tenant: must not begin")):
            with pytest.raises(psycopg.errors.InvalidParameterValue, match=f"^{said}"), \
                    conn.transaction():
                conn.execute("select set_config('pgfunnel.principals', '[\"alice\"]', true)")
                conn.execute("select set_config(%s, %s, true)", (setting, value))
                conn.execute("select pgfunnel._rls_principals()")
        # inside a name, any space is part of it
        Funnel(conn, embedder=None).search("refund", tenant=f"ac{space}me",
                                           principals=[f"al{space}ice"])
        _usable(conn)


@pytest.mark.parametrize("target, said", [
    ("", "must be a chunk id or CITEKEY#ORDINAL"), ("  ", "must be a chunk id"),
    ("a\x00b", "contains a NUL byte"), ("\udc80", "is not valid Unicode"),
])
def test_explain_names_a_blank_or_unsendable_target(corpus_db: str, target: str,
                                                    said: str) -> None:
    """A blank target answered "filtered out or does not exist" (no document has a blank
    citekey), and one with a NUL raised Postgres' own message, naming nothing."""
    from pgfunnel.explain import explain

    with connect(corpus_db, autocommit=True) as conn:
        with pytest.raises(ConfigError, match=f"^chunk: {said}") as refused:
            explain(Funnel(conn, embedder=None), "refund", target)
        assert refused.value.parameter == "chunk"
        _usable(conn)
    if target.strip() == "":
        from pgfunnel.cli.main import app
        from typer.testing import CliRunner

        res = CliRunner().invoke(app, ["explain", "refund", target, "--dsn", corpus_db,
                                       "--lexical-only"])
        assert res.exit_code == 1, res.output
        assert "Traceback" not in res.output
        assert "CHUNKS: must be a chunk id" in res.output, res.output


@pytest.mark.parametrize("args, said", [
    (["--k", "0"], "--k: must be between 1 and 1000, got 0"),
    (["--overfetch", "101"], "--overfetch: must be between 1 and 100"),
    (["-c", "nope"], "collection 'nope' does not exist"),
    (["--per-source-cap", "0"], "--per-source-cap: must be at least 1"),
])
def test_search_with_rerank_names_a_bad_value_before_loading_the_cross_encoder(
        corpus_db: str, tmp_path: Any, args: list[str], said: str) -> None:
    """`pgfunnel search --rerank` loaded the cross-encoder (seconds) before any value was
    checked, and a model that could not load hid the bad value behind its own error."""
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    res = CliRunner().invoke(app, ["search", "refund", "--dsn", corpus_db, "--lexical-only",
                                   "--rerank", "--rerank-model", str(tmp_path / "absent"),
                                   *args], env={"COLUMNS": "300"})
    assert res.exit_code == 1, res.output
    assert "Traceback" not in res.output
    assert said in res.output, res.output
    assert "could not be loaded" not in res.output


def test_pgvector_vector_types_are_taken_as_query_vectors(corpus_db: str) -> None:
    """pgvector's Vector, HalfVector and SparseVector (what halfvec and sparsevec columns
    read back as) were refused with "float() argument must be a string or a real number,
    not 'HalfVector'"; each is checked as the numbers it holds."""
    from pgvector import HalfVector, SparseVector, Vector

    # values a half-precision float holds exactly, so every type carries the same vector
    query = unit(np.ones(DIM)).astype(np.float16).astype(np.float32)
    with connect(corpus_db, autocommit=True) as conn:
        f = Funnel(conn, embedder=None)
        expected = f.search("refund", query_embedding=query).results
        assert expected
        for wrapped in (Vector(query), HalfVector(query), SparseVector(query)):
            got = f.search("refund", query_embedding=wrapped).results
            assert [(r.chunk_id, r.dense_score) for r in got] == \
                [(r.chunk_id, r.dense_score) for r in expected], type(wrapped).__name__
        # and refused as any vector is when wrong
        with pytest.raises(InvalidVectorError, match="zero vector"):
            f.search("refund", query_embedding=SparseVector({}, DIM))
        with pytest.raises(InvalidVectorError, match="dimensions"):
            f.search("refund", query_embedding=HalfVector(np.ones(DIM + 1)))
        _usable(conn)


def test_a_metadata_filter_nested_too_deeply_is_a_config_error(corpus_db: str) -> None:
    """json.dumps raised a raw RecursionError out of Funnel.search."""
    deep: dict[str, Any] = {}
    inner = deep
    for _ in range(5000):
        inner["a"] = {}
        inner = inner["a"]
    dead = connect(corpus_db, autocommit=True)
    dead.close()  # refused before any SQL
    with pytest.raises(ConfigError, match="^metadata_filter: is nested too deeply"):
        Funnel(dead, embedder=None).search("refund", metadata_filter=deep)


def test_a_metadata_filter_is_checked_as_it_is_sent() -> None:
    """Sent as Jsonb(dict(filter)), as notes are: a read-only mapping was refused as "not
    JSON" by a check that dumped it without dict()."""
    from types import MappingProxyType

    from pgfunnel.search import SearchParams

    p = SearchParams.build(metadata_filter=MappingProxyType({"team": "billing"}))
    assert dict(p.metadata_filter or {}) == {"team": "billing"}
    with pytest.raises(ConfigError, match=r"^metadata_filter: contains a NUL character"):
        SearchParams.build(metadata_filter={"team": "a\x00b"})


def test_weights_as_a_numpy_array_are_taken_and_checked_as_a_list(corpus_db: str) -> None:
    """np.array([1.0, 0.5]) was refused as "must be two numbers [lexical, dense]" (an array
    is no Sequence), where a numpy k or a list of numpy floats is taken."""
    from pgfunnel.search import SearchParams

    assert SearchParams.build(weights=np.array([1.0, 0.5])).weights == (1.0, 0.5)
    assert SearchParams.build(weights=np.array([1, 0], dtype=np.int32)).weights == (1.0, 0.0)
    for bad in (np.array([True, False]), np.ones((1, 2)), np.array(["1", "1"])):
        with pytest.raises(ConfigError, match="^weights: must be two numbers"):
            SearchParams.build(weights=bad)
    with connect(corpus_db, autocommit=True) as conn:
        f = Funnel(conn, embedder=None)
        q = unit(np.ones(DIM))
        assert [r.chunk_id for r in f.search("refund plan", query_embedding=q,
                                             weights=np.array([1.0, 0.5])).results] == \
            [r.chunk_id for r in f.search("refund plan", query_embedding=q,
                                          weights=[1.0, 0.5]).results]
        with pytest.raises(ConfigError, match="^weights: "):
            f.search("refund", weights=np.array([np.nan, 1.0]))


@pytest.mark.parametrize("blank", ["", "  "])
def test_a_blank_model_name_is_refused_not_taken_as_no_model(corpus_db: str, db: str,
                                                             tmp_path: Any, blank: str) -> None:
    """`reindex --model ''` built a version of the active model, `ingest --model ''` used
    the collection's (or the default) model and `search --rerank-model ''` the default
    cross-encoder, each without a word; Embedder('') read the current folder as a model
    ("model reports no embedding dimension")."""
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    from pgfunnel.embedder import Embedder
    from pgfunnel.ingest import Ingester

    with pytest.raises(ConfigError, match="^embedding_model: must be a model id or a local"):
        Embedder(blank)
    with connect(db, autocommit=True) as conn, \
            pytest.raises(ConfigError, match="^embedder: must be a model id"):
        Ingester(conn, "fresh", embedder=blank)
    page = tmp_path / "a.jsonl"
    page.write_text('{"citekey": "a", "text": "refund words"}\n')
    with connect(corpus_db, autocommit=True) as conn:
        before = conn.execute("select count(*), (select count(*) from pgfunnel.index_version) "
                              "from pgfunnel.document").fetchone()
    for args, flag in ((["ingest", str(page), "-c", "fresh"], "--model"),
                       (["ingest", str(page)], "--model"),
                       (["reindex"], "--model"),
                       (["search", "refund", "--lexical-only", "--rerank"], "--rerank-model")):
        res = CliRunner().invoke(app, [*args, flag, blank, "--dsn", corpus_db],
                                 env={"COLUMNS": "300"})
        assert res.exit_code == 1, (args, res.output)
        assert "Traceback" not in res.output
        assert f"{flag}: must be a model id" in res.output, (args, res.output)
    with connect(corpus_db, autocommit=True) as conn:
        assert conn.execute("select count(*), (select count(*) from pgfunnel.index_version) "
                            "from pgfunnel.document").fetchone() == before
        assert conn.execute("select count(*) from pgfunnel.collection "
                            "where name = 'fresh'").fetchone() == (0,)


@pytest.mark.parametrize("dsn, said", [
    # a command line's undecodable byte, named as the byte it was
    ("\udcff", r"is not valid Unicode \(byte 0xff, not UTF-8, at character 0\)"),
    ("postgresql://postgres@/postgres?host=/tmp\x00junk", "contains a NUL byte"),
])
def test_a_dsn_libpq_cannot_take_whole_is_a_config_error(dsn: str, said: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """`--dsn $'\\xff'` (or PGFUNNEL_DSN) raised a raw UnicodeEncodeError with a traceback,
    and libpq read a DSN only up to a NUL, connecting to what came before it."""
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    with pytest.raises(ConfigError, match=f"^dsn: {said}") as refused:
        connect(dsn)
    assert "junk" not in str(refused.value)  # the DSN is not shown: it may hold a password
    # (an environment variable cannot hold a NUL)
    for args, env in ((["--dsn", dsn], {}), ([], {"PGFUNNEL_DSN": dsn} if "\x00" not in dsn
                                              else None)):
        if env is None:
            continue
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        res = CliRunner().invoke(app, ["search", "refund", "--lexical-only", *args])
        assert res.exit_code == 1, res.output
        assert "Traceback" not in res.output
        assert re.search(f"--dsn \\(or PGFUNNEL_DSN\\): {said}", res.output), res.output
        assert "surrogates not allowed" not in res.output


@pytest.mark.parametrize("given", ["", "  "])
def test_an_empty_dsn_given_is_refused_not_read_as_the_embedded_server(
        given: str, corpus_db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--dsn "$DATABASE_URL"` with the variable unset connected to the embedded Postgres
    without a word, and an ingest wrote there; an empty PGFUNNEL_DSN stays unset."""
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    from pgfunnel.search import Funnel

    with pytest.raises(ConfigError, match="^dsn: is empty"):
        connect(given)
    with pytest.raises(ConfigError, match="^dsn: is empty"):
        Funnel(given)  # when made, not at its first search
    res = CliRunner().invoke(app, ["search", "refund", "--lexical-only", "--dsn", given])
    assert res.exit_code == 1, res.output
    assert "--dsn (or PGFUNNEL_DSN): is empty (an unset variable?)" in res.output, res.output
    # an empty environment variable is no value: the --dsn given is used
    monkeypatch.setenv("PGFUNNEL_DSN", "")
    res = CliRunner().invoke(app, ["search", "refund", "--lexical-only", "--dsn", corpus_db])
    assert res.exit_code == 0, res.output


UNDECODABLE = "\udcff"  # what Python makes of a command line's byte 0xff


@pytest.mark.parametrize("args, said", [
    (["ingest", "{page}", "-c", UNDECODABLE],
     "--collection: is not valid Unicode (byte 0xff, not UTF-8, at character 0)"),
    (["reindex", "-c", UNDECODABLE], "--collection: is not valid Unicode"),
    (["reindex", "--maintenance-work-mem", UNDECODABLE],
     "--maintenance-work-mem: is not valid Unicode"),
    (["delete", UNDECODABLE], "citekeys: is not valid Unicode"),
    (["delete", "x", "-c", UNDECODABLE], "--collection: is not valid Unicode"),
    (["versions", "list", "-c", UNDECODABLE], "--collection: is not valid Unicode"),
    (["versions", "activate", "1", "-c", UNDECODABLE], "--collection: is not valid Unicode"),
])
def test_an_undecodable_command_line_value_is_one_line_naming_its_flag(
        corpus_db: str, tmp_path: Any, args: list[str], said: str) -> None:
    """Each raised the driver's UnicodeEncodeError with a traceback."""
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    page = tmp_path / "a.jsonl"
    page.write_text('{"citekey": "a", "text": "refund words"}\n')
    with connect(corpus_db, autocommit=True) as conn:
        before = conn.execute("select count(*), (select count(*) from pgfunnel.index_version) "
                              "from pgfunnel.document").fetchone()
    res = CliRunner().invoke(app, [a.replace("{page}", str(page)) for a in args]
                             + ["--dsn", corpus_db], env={"COLUMNS": "300"})
    assert res.exit_code == 1, res.output
    # a handled error exits; a raw one is the runner's exception (exit code 1 too)
    assert isinstance(res.exception, SystemExit), repr(res.exception)
    assert "Traceback" not in res.output, res.output
    assert said in res.output, res.output
    with connect(corpus_db, autocommit=True) as conn:
        assert conn.execute("select count(*), (select count(*) from pgfunnel.index_version) "
                            "from pgfunnel.document").fetchone() == before


def test_text_that_is_not_valid_unicode_is_said_as_what_it_was() -> None:
    """A byte that is not UTF-8 (Python's U+DC80 - U+DCFF) is named as the byte, a lone
    surrogate as one; the encoder's own "surrogates not allowed" said neither."""
    from pgfunnel.errors import text_problem

    assert text_problem("ab\udcffc") == ("is not valid Unicode (byte 0xff, not UTF-8, "
                                          "at character 2)")
    assert text_problem("\ud800") == ("is not valid Unicode (a lone surrogate, U+D800, "
                                       "at character 0)")
    assert text_problem("caf\u00e9") is None


def test_embedding_a_query_that_is_not_valid_unicode_is_named(embedder: Any) -> None:
    """`pgfunnel embed $'\\xff'` raised the tokenizer's TypeError ("TextEncodeInput must be
    Union[...]") with two tracebacks."""
    with pytest.raises(InvalidInputError, match="^text: is not valid Unicode"):
        embedder.embed_query(UNDECODABLE)
    with pytest.raises(InvalidInputError, match="^text: must be a string, got bytes"):
        embedder.embed_query(b"refund")
    # and the batch call, as a caller embedding its own texts uses it
    with pytest.raises(InvalidInputError, match=r"^texts\[1\]: is not valid Unicode"):
        embedder.embed(["refund", UNDECODABLE])
    with pytest.raises(InvalidInputError, match=r"^texts\[0\]: must be a string, got NoneType"):
        embedder.embed([None])
    with pytest.raises(InvalidInputError, match="^texts: must be a list of strings, not one"):
        embedder.embed("refund")


@pytest.mark.parametrize("column, values, said", [
    ("fused_ranks", "{0,2}", "fused_ranks: must be 1 or more"),
    ("lexical_ranks", "{-5,NULL}", "lexical_ranks: must be 1 or more, or NULL"),
    ("dense_ranks", "{NULL,0}", "dense_ranks: must be 1 or more, or NULL"),
    ("lexical_scores", "{NaN,NULL}", "lexical_scores: must not contain NaN"),
    ("dense_scores", "{NULL,NaN}", "dense_scores: must not contain NaN"),
])
@pytest.mark.parametrize("trace", [False, True])
def test_final_refuses_leg_ranks_and_scores_no_leg_could_give(
        corpus_db: str, column: str, values: str, said: str, trace: bool) -> None:
    """final() checked the fused scores and rerank scores for NaN but returned (and traced,
    into search_trace) a leg rank of 0 or -5 and a NaN leg score as given."""
    arrays = {"fused_ranks": "{1,2}", "lexical_ranks": "{1,NULL}", "dense_ranks": "{NULL,1}",
              "lexical_scores": "{2.5,NULL}", "dense_scores": "{NULL,0.5}", column: values}
    with connect(corpus_db, autocommit=True) as conn:
        ids = [r[0] for r in conn.execute("select id from pgfunnel.chunk order by id limit 2")]
        logged = conn.execute("select count(*) from pgfunnel.search_log").fetchone()
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=f"^{said}"):
            conn.execute(
                "select * from pgfunnel.final(%s, %s::int[], '{0.9,0.5}', %s::int[], "
                "%s::float8[], %s::int[], %s::float8[], trace => %s, query_text => 'refund')",
                (ids, arrays["fused_ranks"], arrays["lexical_ranks"], arrays["lexical_scores"],
                 arrays["dense_ranks"], arrays["dense_scores"], trace))
        assert conn.execute("select count(*) from pgfunnel.search_log").fetchone() == logged
        # what candidates() gives is taken
        ok = {**arrays, column: {"fused_ranks": "{1,2}", "lexical_ranks": "{1,NULL}",
                                 "dense_ranks": "{NULL,1}", "lexical_scores": "{2.5,NULL}",
                                 "dense_scores": "{NULL,0.5}"}[column]}
        assert len(conn.execute(
            "select * from pgfunnel.final(%s, %s::int[], '{0.9,0.5}', %s::int[], "
            "%s::float8[], %s::int[], %s::float8[])",
            (ids, ok["fused_ranks"], ok["lexical_ranks"], ok["lexical_scores"],
             ok["dense_ranks"], ok["dense_scores"])).fetchall()) == 2


def test_candidates_and_final_check_their_arguments_as_search_does(corpus_db: str) -> None:
    """The two public halves of a search with a rerank in between checked nothing
    search() checks: a NaN vector was "arguments: function pgfunnel.candidates(...) does
    not exist", a NUL in the query the driver's message; final() raised an AttributeError
    for ids, a TypeError for a set in log_notes, "invalid input syntax for type json" for
    a NaN in notes, and logged reranked='no' as a rerank."""
    import dataclasses

    from pgfunnel.search import SearchParams

    with connect(corpus_db, autocommit=True) as conn:
        f = Funnel(conn, embedder=None)
        p = SearchParams.build(k=5)
        traced = dataclasses.replace(p, trace=True)
        for args, error, said in (
                (("refund", [math.nan] * DIM, p), InvalidVectorError, "^query_embedding: "),
                (("re\x00fund", None, p), InvalidInputError, "^query_text: contains a NUL"),
                (("refund", None, {"k": 5}), ConfigError, "^p: must be a SearchParams")):
            with pytest.raises(error, match=said):
                f.candidates(conn, *args)
        pool = f.candidates(conn, "refund", None, p)
        assert pool
        logged = conn.execute("select count(*) from pgfunnel.search_log").fetchone()
        for ordered, kwargs, said in (
                ([c.chunk_id for c in pool], {}, "^ordered: must be a list of Candidate"),
                (None, {}, "^ordered: must be a list of Candidate"),
                (pool, {"reranked": "no"}, "^reranked: must be True or False"),
                (pool, {"notes": {"x": math.nan}}, "^notes: is not JSON"),
                (pool, {"log_notes": {"x": {1}}}, "^log_notes: is not JSON"),
                (pool, {"log_notes": [1]}, "^log_notes: must be a mapping"),
                (pool, {"notes": {"x": "\x00"}}, "^notes: contains a NUL"),
                (pool, {"index_version_id": 2**40}, "^index_version_id: must be an index")):
            final_kwargs: dict[str, Any] = {"reranked": False, **kwargs}
            with pytest.raises(ConfigError, match=said):
                f.final(conn, "refund", ordered, traced,  # type: ignore[arg-type]
                        **final_kwargs)
        assert conn.execute("select count(*) from pgfunnel.search_log").fetchone() == logged
        assert len(f.final(conn, "refund", pool, p, reranked=False)) == 5
        _usable(conn)


def test_final_refuses_an_infinite_rerank_score_as_it_refuses_nan(corpus_db: str) -> None:
    """final() refused a NaN rerank score but returned (and traced) +Infinity or -Infinity
    as a chunk's rerank score, a score no reranker gives (checked_ranking refuses one)."""
    import dataclasses

    from pgfunnel.search import SearchParams

    with connect(corpus_db, autocommit=True) as conn:
        ids = [r[0] for r in conn.execute("select id from pgfunnel.chunk order by id limit 2")]
        for bad in (math.nan, math.inf, -math.inf):
            with pytest.raises(psycopg.errors.InvalidParameterValue) as exc:
                conn.execute("select * from pgfunnel.final(%s, '{1,2}', '{0.9,0.5}', "
                             "'{1,NULL}', '{2.5,NULL}', '{NULL,1}', '{NULL,0.5}', "
                             "rerank_scores => %s::float8[])", (ids, [0.5, bad]))
            assert exc.value.diag.message_primary == \
                "rerank_scores: must not contain NaN or Infinity"
        f = Funnel(conn, embedder=None)
        p = SearchParams.build(k=5, trace=True)
        pool = f.candidates(conn, "refund", None, p)
        logged = conn.execute("select count(*) from pgfunnel.search_log").fetchone()
        for bad in (math.inf, -math.inf):
            scored = [dataclasses.replace(c, rerank_score=bad if i == 0 else 0.5)
                      for i, c in enumerate(pool)]
            # refused in Python now, naming the candidate, before the SQL's own check
            with pytest.raises(ConfigError, match=r"^ordered\[0\]\.rerank_score: must be a "
                                                  r"finite number or None \(chunk \d+, "):
                f.final(conn, "refund", scored, p, reranked=True)
        assert conn.execute("select count(*) from pgfunnel.search_log").fetchone() == logged
        scored = [dataclasses.replace(c, rerank_score=1e300) for c in pool]
        assert len(f.final(conn, "refund", scored, p, reranked=True)) == 5
        _usable(conn)


def test_final_refuses_an_infinite_fused_or_leg_score_as_it_refuses_nan(corpus_db: str) -> None:
    """final() refused NaN in fused_scores, lexical_scores and dense_scores (and Infinity
    in rerank_scores) but returned and traced +Infinity or -Infinity as a chunk's fused or
    leg score, a score no fusion and no leg gives."""
    import dataclasses

    from pgfunnel.search import SearchParams

    with connect(corpus_db, autocommit=True) as conn:
        ids = [r[0] for r in conn.execute("select id from pgfunnel.chunk order by id limit 2")]
        logged = conn.execute("select count(*) from pgfunnel.search_log").fetchone()
        for column, said in (("fused_scores", "must not contain NULL, NaN or Infinity"),
                             ("lexical_scores", "must not contain NaN or Infinity"),
                             ("dense_scores", "must not contain NaN or Infinity")):
            for bad in (math.nan, math.inf, -math.inf):
                arrays: dict[str, list[float | None]] = {
                    "fused_scores": [0.9, 0.5], "lexical_scores": [2.5, None],
                    "dense_scores": [None, 0.5]}
                arrays[column] = [0.9, bad] if column == "fused_scores" else \
                    [bad, None] if column == "lexical_scores" else [None, bad]
                with pytest.raises(psycopg.errors.InvalidParameterValue) as exc:
                    conn.execute(
                        "select * from pgfunnel.final(%s, '{1,2}', %s::float8[], '{1,NULL}', "
                        "%s::float8[], '{NULL,1}', %s::float8[], trace => true, "
                        "query_text => 'refund')",
                        (ids, arrays["fused_scores"], arrays["lexical_scores"],
                         arrays["dense_scores"]))
                assert exc.value.diag.message_primary == f"{column}: {said}", (column, bad)
        assert conn.execute("select count(*) from pgfunnel.search_log").fetchone() == logged
        # from Python, a pool whose scores were changed on the way: a ConfigError naming it
        f = Funnel(conn, embedder=None)
        p = SearchParams.build(k=5, trace=True)
        pool = f.candidates(conn, "refund", None, p)
        assert pool and pool[0].lexical_score is not None
        for field, column in (("fused_score", "fused_scores"),
                              ("lexical_score", "lexical_scores")):
            for bad in (math.inf, -math.inf):
                change: dict[str, Any] = {field: bad}
                changed = [dataclasses.replace(c, **change) if i == 0 else c
                           for i, c in enumerate(pool)]
                with pytest.raises(ConfigError, match=f"^{column}: must not contain "):
                    f.final(conn, "refund", changed, p, reranked=False)
        assert conn.execute("select count(*) from pgfunnel.search_log").fetchone() == logged
        assert len(f.final(conn, "refund", pool, p, reranked=False)) == 5
        _usable(conn)


def test_an_rrf_constant_or_merge_weight_past_double_precision_is_named(
        corpus_db: str) -> None:
    """search_multi(merge_rrf_k=10**400) and rrf_merge(k=10**400, or a weight of 10**400)
    raised a raw OverflowError; the constant is bounded as funnel_search's rrf_k is."""
    from pgfunnel.errors import positive_int
    from pgfunnel.transform import rrf_merge

    with pytest.raises(ConfigError, match="^rrf_k: must be at most 1,000,000"):
        rrf_merge([["a", "b"]], k=10**400)
    with pytest.raises(ConfigError, match="^weights: each weight must be a finite number"):
        rrf_merge([["a", "b"]], weights=[10**400])
    assert [key for key, _ in rrf_merge([["a", "b"]], k=10**6)] == ["a", "b"]
    with pytest.raises(ConfigError, match="^x: must be a positive integer, got a negative"):
        positive_int("x", -10**5000)  # its repr raised ValueError inside the message
    dead = connect(corpus_db, autocommit=True)
    dead.close()  # refused before any SQL
    for bad in (10**400, 1_000_001):
        with pytest.raises(ConfigError, match="^merge_rrf_k: must be at most 1,000,000"):
            Funnel(dead, embedder=None).search_multi(["refund", "plan"], merge_rrf_k=bad)


BIG = "x" * 1_000_000


@pytest.mark.parametrize("argument, value", [
    ("collection", BIG), ("tenant", f" {BIG}"), ("language", f"{BIG} "),
    ("principals", [f"p{i}" for i in range(20_000)] + [""]),
    ("principals", [f"p{i}" for i in range(20_000)] + [None]),
    ("principals", [f"{BIG} "]), ("weights", [1.0] * 100_000),
])
def test_an_error_shows_a_huge_value_cut_short(corpus_db: str, argument: str,
                                               value: Any) -> None:
    """A megabyte of tenant, collection or principals came back whole in the error
    message (and so in every log line of it), from SQL and from Python alike."""
    with connect(corpus_db, autocommit=True) as conn:
        with pytest.raises(psycopg.Error) as raw:
            conn.execute(f"select * from funnel_search('refund', {argument} => %s)", (value,))
        message = raw.value.diag.message_primary or ""
        assert message.startswith(f"{argument}: ") or argument == "collection", message
        assert len(message) < 1300, len(message)
        assert "characters" in message or "principals)" in message, message[-80:]
        with pytest.raises(PgfunnelError) as refused:
            Funnel(conn, embedder=None).search("refund", **{argument: value})
        assert len(str(refused.value)) < 1300, len(str(refused.value))
        _usable(conn)


@pytest.mark.parametrize("line, said", [
    ('{"query": "a\\u0000b"}', "line 2: the query contains a NUL byte"),
    ('{"query": "\\ud800"}', "line 2: the query is not valid Unicode"),
    ('{"query": "' + "refund " * 1500 + '"}', "line 2: the query is 10,500"),
])
def test_versions_compare_names_the_line_of_a_query_no_search_takes(
        tmp_path: Any, line: str, said: str) -> None:
    """A plain queries file was checked for empty lines only: a lone surrogate raised the
    tokenizer's TypeError with two tracebacks, and a NUL or an over-long query stopped the
    run at its search, naming no line."""
    from pgfunnel.versions import read_query_file

    path = tmp_path / "q.jsonl"
    path.write_text("refund\n" + line + "\n")
    with pytest.raises(InvalidInputError, match=f"^queries: .*q.jsonl: {said}"):
        read_query_file(path)
    # the line of the file, blank lines counted (they were not: "line 2" for line 4)
    path.write_text("refund\n\n\n" + line + "\n")
    with pytest.raises(InvalidInputError,
                       match=f"^queries: .*q.jsonl: {said.replace('line 2', 'line 4')}"):
        read_query_file(path)


def test_a_collection_model_that_cannot_load_is_not_blamed_on_an_untyped_model_flag(
        db: str, tmp_path: Any) -> None:
    """`pgfunnel ingest` and `embed` without --model on a collection whose model cannot
    load said "--model: 'x' could not be loaded", naming a flag that was never typed."""
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    ingest_docs(db, [Doc("a", "refund words here")], collection="lost")
    missing = str(tmp_path / "model-gone")
    with connect(db, autocommit=True) as conn:
        conn.execute("update pgfunnel.index_version set embedding_model = %s", (missing,))
    page = tmp_path / "b.jsonl"
    page.write_text('{"citekey": "b", "text": "more refund words"}\n')
    for args in (["ingest", str(page), "-c", "lost"], ["embed", "refund", "-c", "lost"]):
        res = CliRunner().invoke(app, [*args, "--dsn", db], env={"COLUMNS": "300"})
        assert res.exit_code == 1, res.output
        assert "--model" not in res.output, res.output
        assert f"embedding_model='{missing}' could not be loaded" in res.output, res.output
        # and a --model that was typed is still named as the flag
        res = CliRunner().invoke(app, [*args, "--dsn", db, "--model", missing],
                                 env={"COLUMNS": "300"})
        assert f"--model: '{missing}' could not be loaded" in res.output or \
            "--model: collection 'lost' is indexed with" in res.output, res.output
    with connect(db, autocommit=True) as conn:
        assert conn.execute("select count(*) from pgfunnel.document").fetchone() == (1,)


def test_every_error_class_and_sqlstate_is_in_the_error_table() -> None:
    """docs/python-api.md's error table is where an application looks up what to catch:
    pgfunnel.versions.ValidationFailed (a reindex whose version failed validation, exit
    3 in the CLI) was raised and exported but named nowhere in it. Every PgfunnelError
    class pgfunnel defines is named there, and every SQLSTATE its SQL raises translates
    to a class the table names for that code."""
    import importlib
    import pkgutil
    from pathlib import Path

    import pgfunnel
    from pgfunnel.errors import _SQLSTATE_MAP

    for module in pkgutil.walk_packages(pgfunnel.__path__, "pgfunnel."):
        if module.name.startswith("pgfunnel.eval") or module.name.endswith("__main__"):
            continue
        importlib.import_module(module.name)

    def subclasses(cls: type) -> set[type]:
        found: set[type] = set(cls.__subclasses__())
        return found.union(*(subclasses(sub) for sub in found)) if found else found

    root = Path(__file__).resolve().parent.parent
    doc = (root / "docs" / "python-api.md").read_text()
    table = doc.split("## Errors", 1)[1].split("\n## ", 1)[0]
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `(?:[\w.]+\.)?(\w+)`.*$",
                                                          table, re.MULTILINE)}
    for cls in subclasses(PgfunnelError):
        if cls.__module__.startswith("pgfunnel"):
            assert re.search(rf"`(?:[\w.]+\.)?{cls.__name__}`", table), \
                f"{cls.__module__}.{cls.__name__} is not in the table"
    raised = set(re.findall(r"errcode = '(\w{5})'",
                            "".join(p.read_text() for p in (root / "sql").glob("*.sql"))))
    assert raised, "no SQLSTATE found in sql/"
    special = {"25006": "ReadOnlyError"}  # translate() picks the class by the message
    for code in raised:
        name = special.get(code) or _SQLSTATE_MAP[code].__name__
        assert code in rows[name], (code, name, rows[name])
    assert "exit status 3" in table and "ValidationFailed" in table


@pytest.mark.parametrize(("params", "said", "as_sql_says"), [
    ({"k": 0}, "k: must be between 1 and 1000, got 0", True),
    ({"fusion": "borda"}, "fusion: unknown fusion 'borda' (use rrf, minmax or zscore)", True),
    # SearchParams refuses a wrong count itself, in a Python caller's terms (a list)
    ({"weights": [1.0, 0.5, 0.2]}, "weights: must be two numbers [lexical, dense], got 3",
     False),
    ({"overfetch": 0}, "overfetch: must be between 1 and 100, got 0", True),
])
def test_a_bad_value_is_refused_before_the_query_is_embedded(
        corpus_db: str, tmp_path: Any, params: dict[str, Any], said: str,
        as_sql_says: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Funnel whose model was loaded (a first search, or an Embedder given) embedded
    the query and only then had SQL refuse k=0: the check ran only before a load. The
    refusal comes before anything is embedded, at every search and not only the first;
    its class and message are the SQL function's own, but for what SearchParams refuses
    in Python's terms."""
    from pgfunnel.embedder import Embedder
    from pgfunnel.tiny_models import build_tiny_bi_encoder

    emb = Embedder(str(build_tiny_bi_encoder(tmp_path / "bi", DIM)), device="cpu")
    encoded: list[Any] = []

    def refuse(texts: Any, **kwargs: Any) -> Any:
        encoded.append(texts)
        raise AssertionError("the query was embedded")

    with connect(corpus_db) as conn:
        funnel = Funnel(conn, embedder=emb)
        assert funnel.search("refund plan", k=3).results  # the values that pass
        monkeypatch.setattr(emb._model, "encode", refuse)
        for _ in range(2):  # a second time: a refusal is never remembered as a pass
            with pytest.raises(ConfigError) as err:
                funnel.search("refund plan", **params)
            assert str(err.value).startswith(said), str(err.value)
            assert encoded == []
        if not as_sql_says:
            return
        # what SQL says to the same value, word for word
        sql_args = {"k": 3, **params}
        with pytest.raises(psycopg.errors.InvalidParameterValue) as sql_err:
            named = psycopg.sql.SQL(", ").join(
                psycopg.sql.SQL("{} => {}").format(psycopg.sql.Identifier(name),
                                                   psycopg.sql.Placeholder(name))
                for name in sql_args)
            conn.execute(psycopg.sql.SQL("select * from pgfunnel.funnel_search("
                                         "'refund plan', null, {})").format(named), sql_args)
        conn.rollback()
        assert str(translate(sql_err.value)) == str(err.value)
        _usable(conn)


def test_a_history_turn_of_a_megabyte_is_refused_quickly_and_logs_nothing(
        corpus_db: str) -> None:
    """Funnel.search(history=[...]) read a megabyte turn for its topic words (1.3 s)."""
    import time

    with connect(corpus_db) as conn:
        before = conn.execute("select count(*) from pgfunnel.search_log").fetchone()
        conn.commit()
        funnel = Funnel(conn, embedder=None)
        # this process's CPU time: the refusal's work, not a loaded machine's other processes
        started = time.process_time()
        with pytest.raises(InvalidInputError, match=r"^history\[0\]: is 1,000,000 characters "
                                                    r"long; a history holds at most 100,000"):
            funnel.search("what about annual?", history=["refund plan " * 83_333 + "refu"],
                          trace=True)
        assert time.process_time() - started < 0.5
        assert conn.execute("select count(*) from pgfunnel.search_log").fetchone() == before
        _usable(conn)


@pytest.mark.parametrize("call,error", [
    ("funnel_search('refund', null, fusion => 'bogus'", psycopg.errors.InvalidParameterValue),
    ("funnel_search('refund', %(vec)s", psycopg.errors.MostSpecificTypeMismatch),
    ("funnel_search('refund', null, collection => 'nope'", psycopg.errors.NoDataFound),
    ("funnel_search('refund', null, weights => '{0,0}'", psycopg.errors.InvalidParameterValue),
    ("funnel_search('refund', null, k => 0", psycopg.errors.InvalidParameterValue),
    ("funnel_search('refund', %(zero)s", psycopg.errors.MostSpecificTypeMismatch),
    ("funnel_search('refund', %(huge)s", psycopg.errors.MostSpecificTypeMismatch),
    ("funnel_search('refund', null, weights => '{0,1}'", psycopg.errors.InvalidParameterValue),
], ids=["fusion", "dimensions", "collection", "weights", "k", "zero-vector", "norm",
        "weights-one-leg"])
def test_a_search_error_in_sql_keeps_what_it_says_without_the_funnels_sql(
        corpus_db: str, call: str, error: type[psycopg.Error]) -> None:
    # psql prints an error's context after it: raised where _pool raised it, that was
    # 20 - 40 lines of the funnel's own SQL after a one-line message
    vectors = {"vec": np.ones(DIM + 2, dtype=np.float32),
               "zero": np.zeros(DIM, dtype=np.float32),
               "huge": np.full(DIM, 1e12, dtype=np.float32)}

    def raised(sql_text: str) -> psycopg.Error:
        with connect(corpus_db, autocommit=True) as conn:
            with pytest.raises(error) as caught:
                conn.execute(sql_text, vectors)
            _usable(conn)
        return caught.value

    untraced = raised(f"select * from {call})")
    from_candidates = raised(f"select * from pgfunnel.candidates{call[len('funnel_search'):]})")
    from_explain = raised(
        f"select * from pgfunnel.explain{call[len('funnel_search'):]}, chunk_id => 1)")
    # the traced search, which writes its trace, reads its pool in a block that writes
    # nothing: it printed the 40 lines of its statement after the message
    traced = raised(f"select * from {call}, trace => true)")
    for exc in (untraced, from_candidates, from_explain, traced):
        assert exc.sqlstate == traced.sqlstate
        assert exc.diag.message_primary == traced.diag.message_primary
        assert exc.diag.message_hint == traced.diag.message_hint
        assert exc.diag.message_detail == traced.diag.message_detail
        assert translate(exc).__class__ is translate(traced).__class__
        # _raise_again, its call, and the search function
        context = exc.diag.context or ""
        assert len(context.splitlines()) <= 3, context
        assert "with pool" not in context and "_pool" not in context, context
        assert str(exc).startswith(exc.diag.message_primary or "?")
        assert len(str(exc).splitlines()) <= 6, str(exc)


@pytest.mark.parametrize("detail,hint", [("d", "h"), ("", "h"), ("d", ""), ("", "")])
def test_an_error_raised_again_keeps_its_fields_and_prints_no_empty_ones(
        corpus_db: str, detail: str, hint: str) -> None:
    # get stacked diagnostics gives '' for a field the error did not have; raised again
    # with it, psql would print an empty DETAIL: or HINT: line
    with connect(corpus_db, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InvalidParameterValue) as caught:
            conn.execute("select pgfunnel._raise_again('22023', 'k: must be positive', %s, %s)",
                         (detail, hint))
        _usable(conn)
    assert caught.value.diag.message_primary == "k: must be positive"
    assert caught.value.diag.message_detail == (detail or None)
    assert caught.value.diag.message_hint == (hint or None)


@pytest.mark.parametrize("collection", [None, "", "  ", 5, ["default"]])
def test_admin_functions_refuse_a_collection_that_is_no_name(sample_db: str,
                                                              collection: Any) -> None:
    """The functions behind the admin CLI refuse a collection that is not a non-empty
    string as the CLI and a search refuse it: they said "collection None does not exist"
    (an argument left out), or, given a number, raised Postgres' "operator does not
    exist: text = smallint"."""
    from pgfunnel.ingest import delete_documents
    from pgfunnel.versions import activate, drop_collection, list_versions, rollback

    with connect(sample_db, autocommit=True) as conn:
        for call in (lambda: list_versions(conn, collection),
                     lambda: rollback(conn, collection),
                     lambda: drop_collection(conn, collection),
                     lambda: activate(conn, collection, 1),
                     lambda: delete_documents(conn, collection, ["refunds-annual"])):
            with pytest.raises(ConfigError, match=r"^collection: must be a non-empty name, "
                               "got "):
                call()
        assert conn.execute("select count(*) from pgfunnel.document where citekey = "
                            "'refunds-annual'").fetchone() == (1,)


@pytest.mark.parametrize("version", ["1", 1.0, True, None])
def test_a_version_that_is_not_an_integer_is_named_not_called_missing(
        sample_db: str, version: Any) -> None:
    """`activate(conn, 'default', "1")` (a number read from a form or a file) said
    "collection 'default' has no index version 1" while version 1 was there."""
    from pgfunnel.versions import activate, drop, list_versions, retire

    with connect(sample_db, autocommit=True) as conn:
        assert [v.version for v in list_versions(conn, "default")] == [1]
        for call in (activate, retire, drop):
            with pytest.raises(ConfigError, match=r"^version: must be a version number, an "
                               r"integer as `pgfunnel versions list` shows it, got "):
                call(conn, "default", version)
        assert [v.state for v in list_versions(conn, "default")] == ["active"]


def test_a_search_past_the_sessions_own_timeout_names_it_and_the_way_out(
        corpus_db: str) -> None:
    """A search that gave no statement_timeout_ms and ran past the session's own limit (a
    DBA's `alter role webapp set statement_timeout = '20ms'`) raised Postgres' bare
    "canceling statement due to statement timeout", which named neither the limit nor
    the search's own (--timeout-ms) that lifts it."""
    with connect(corpus_db, autocommit=True) as conn, \
            connect(corpus_db, autocommit=True) as locker:
        f = Funnel(conn, embedder=None)
        conn.execute("set statement_timeout = '300ms'")
        with locker.transaction():
            # the search waits on this lock until the session's limit cancels it
            locker.execute("lock table pgfunnel.chunk in access exclusive mode")
            with pytest.raises(SearchTimeoutError) as caught:
                f.search("refund", k=3)
        assert str(caught.value) == (
            "the search ran past this session's statement_timeout of 300ms (set for the "
            "session, its role, the database or the server) and was cancelled (canceling "
            "statement due to statement timeout): give the search a limit of its own with "
            "statement_timeout_ms (--timeout-ms in the CLI), or raise that setting")
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert f.search("refund", k=3, statement_timeout_ms=60_000).results


def test_candidates_and_final_past_the_sessions_own_timeout_name_it_as_search_does(
        corpus_db: str) -> None:
    """candidates() and final() past the session's own statement_timeout (a role's or the
    database's) raised Postgres' bare "canceling statement due to statement timeout",
    where search() named the limit and the way out."""
    from pgfunnel.search import SearchParams

    p = SearchParams.build(k=3)
    said = ("the search ran past this session's statement_timeout of 300ms (set for the "
            "session, its role, the database or the server) and was cancelled (canceling "
            "statement due to statement timeout): give the search a limit of its own with "
            "statement_timeout_ms (--timeout-ms in the CLI), or raise that setting")
    with connect(corpus_db, autocommit=True) as conn, \
            connect(corpus_db, autocommit=True) as locker:
        f = Funnel(conn, embedder=None)
        pool = f.candidates(conn, "refund", None, p)
        assert pool
        conn.execute("set statement_timeout = '300ms'")
        with locker.transaction():
            # the calls wait on this lock until the session's limit cancels them
            locker.execute("lock table pgfunnel.chunk in access exclusive mode")
            with pytest.raises(SearchTimeoutError) as caught:
                f.candidates(conn, "refund", None, p)
            assert str(caught.value) == said
            with pytest.raises(SearchTimeoutError) as caught:
                f.final(conn, "refund", pool, p, reranked=False)
            assert str(caught.value) == said
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert f.final(conn, "refund", pool, p, reranked=False)
