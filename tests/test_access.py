"""Access control: a hidden chunk never reaches a reader who may not see it.

Each test has a positive control (the reader who may see the hidden chunk gets it
first), so a filter that hid everything would fail too. RLS tests search as an
application login role that is neither owner, superuser nor BYPASSRLS.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from _security_helpers import (
    DIM,
    Doc,
    create_app_role,
    ingest_docs,
    random_vectors,
    unit,
    with_user,
)
from funnel_util import conninfo_part, one_row
from psycopg import sql
from psycopg.types.json import Jsonb

from pgfunnel import schema
from pgfunnel.db import connect
from pgfunnel.errors import AccessError, ConfigError, ConnectionFailedError
from pgfunnel.search import Funnel
from pgfunnel.security import LOGIN_ROLE_NOTE

QUERY = "refund monthly plan invoice"
QVEC = unit(np.linspace(1.0, 2.0, DIM))


def _corpus(n_public: int = 30) -> list[Doc]:
    docs = [Doc("secret", "Refund monthly plan invoice. Refund of the monthly plan invoice.",
                readers=["alice"], vector=QVEC)]
    docs += [Doc(f"pub{i:03d}", f"Public note {i}: refund questions about a plan and billing.")
             for i in range(n_public)]
    return docs


@pytest.fixture()
def plain_db(db: str) -> str:
    ingest_docs(db, _corpus())
    return db


@pytest.fixture()
def rls_db(db: str) -> str:
    schema.init(db, rls=True)
    ingest_docs(db, _corpus())
    return db


@pytest.fixture()
def app_dsn(rls_db: str) -> str:
    return create_app_role(rls_db)


def _funnel(source: Any, **kw: Any) -> Funnel:
    return Funnel(source, embedder=None, **kw)


def _keys(response: Any) -> list[str]:
    return [r.citekey for r in response.results]


@pytest.fixture()
def app_conn(app_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with connect(app_dsn, autocommit=True) as c:
        yield c


# -- hidden top chunk ---------------------------------------------------------------

@pytest.mark.parametrize("mode", ["plain", "rls"])
def test_hidden_top_chunk_legs_and_funnel(request: pytest.FixtureRequest, mode: str) -> None:
    dsn = request.getfixturevalue("plain_db" if mode == "plain" else "app_dsn")
    with connect(dsn, autocommit=True) as conn:
        f = _funnel(conn)
        alice = f.search(QUERY, query_embedding=QVEC, principals=["alice"], k=5)
        assert _keys(alice)[0] == "secret"  # control: it really ranks first
        for who in (["bob"], [], ["alice-not"]):
            keys = _keys(f.search(QUERY, query_embedding=QVEC, principals=who, k=5))
            assert "secret" not in keys and len(keys) == 5
        # each leg on its own
        for weights in ((1.0, 0.0), (0.0, 1.0)):
            assert "secret" not in _keys(f.search(QUERY, query_embedding=QVEC, principals=["bob"],
                                                  k=5, weights=weights))
        # the candidate pool itself, through SQL, with the settings the API would set
        with conn.transaction():
            conn.execute("select set_config('pgfunnel.principals', '[\"bob\"]', true)")
            pool = conn.execute("select citekey, lexical_rank, dense_rank from pgfunnel.candidates("
                                "%s, %s, k => 20, principals => '{bob}')",
                                (QUERY, QVEC)).fetchall()
            sql_rows = conn.execute("select citekey from funnel_search(%s, %s, k => 50, "
                                    "principals => '{bob}')", (QUERY, QVEC)).fetchall()
        assert pool and "secret" not in [r[0] for r in pool]
        assert sql_rows and "secret" not in [r[0] for r in sql_rows]


@pytest.mark.parametrize("mode", ["plain", "rls"])
def test_hidden_top_chunk_rerank_path(request: pytest.FixtureRequest, mode: str,
                                      tmp_path: Any) -> None:
    from pgfunnel.rerank import Reranker
    from pgfunnel.tiny_models import build_tiny_cross_encoder

    dsn = request.getfixturevalue("plain_db" if mode == "plain" else "app_dsn")
    reranker = Reranker(str(build_tiny_cross_encoder(tmp_path / "ce")))
    with connect(dsn, autocommit=True) as conn:
        f = _funnel(conn, reranker=reranker)
        alice = f.search(QUERY, query_embedding=QVEC, principals=["alice"], k=30)
        assert alice.reranked and "secret" in _keys(alice)
        bob = f.search(QUERY, query_embedding=QVEC, principals=["bob"], k=30)
        assert bob.reranked and "secret" not in _keys(bob)
        assert "secret" not in [c.citekey for c in bob.pool]
        # final() re-checks visibility: feeding it the hidden chunk id returns nothing for it
        secret_id = alice.pool[[c.citekey for c in alice.pool].index("secret")].chunk_id
        with conn.transaction():
            conn.execute("select set_config('pgfunnel.principals', '[\"bob\"]', true)")
            rows = conn.execute(
                "select citekey from pgfunnel.final(array[%s]::bigint[], '{1}', '{1}', '{1}', "
                "'{1}', '{1}', '{1}', principals => '{bob}')", (secret_id,)).fetchall()
        assert rows == []


def test_candidates_and_final_under_rls_read_the_reader_the_docs_say_to_set(
        app_dsn: str) -> None:
    """docs/python-api.md ("Lower-level methods"): candidates() and final() set no reader,
    so under row-level security the caller sets it in their transaction with the statement
    the page gives; without it the pool is empty, with no error. The page said nothing of
    it, and a caller running their own stages got nothing."""
    from pgfunnel.search import SearchParams

    f = _funnel(app_dsn)
    p = SearchParams.build(k=5, principals=["alice"])
    with f.connection() as conn:
        with conn.transaction():
            assert f.candidates(conn, QUERY, QVEC, p) == []
        with conn.transaction():
            conn.execute("select set_config('pgfunnel.principals', %s, true), "
                         "set_config('pgfunnel.tenant', coalesce(%s, ''), true)",
                         (json.dumps(list(p.principals)), p.tenant))
            pool = f.candidates(conn, QUERY, QVEC, p)
            results = f.final(conn, QUERY, pool, p, reranked=False)
    f.close()
    assert pool[0].citekey == "secret"
    assert [r.citekey for r in results][0] == "secret"


def test_hidden_chunk_not_in_trace_rows_read_by_another_reader(app_dsn: str) -> None:
    with connect(app_dsn, autocommit=True) as conn:
        f = _funnel(conn)
        alice = f.search(QUERY, query_embedding=QVEC, principals=["alice"], k=5, trace=True)
        assert alice.search_id is not None and _keys(alice)[0] == "secret"
        bob = f.search(QUERY, query_embedding=QVEC, principals=["bob"], k=5, trace=True)
        assert bob.search_id is not None
        # a search that finds nothing is logged too, and its reader gets its id
        empty = f.search("quokka", principals=["bob"], k=5, trace=True)
        assert empty.results == [] and empty.search_id is not None

        def traced(principals: list[str]) -> tuple[set[int], set[str]]:
            with conn.transaction():
                conn.execute("select set_config('pgfunnel.principals', %s, true)",
                             (json.dumps(principals),))
                logs = {r[0] for r in conn.execute("select id from pgfunnel.search_log")}
                keys = {r[0] for r in conn.execute(
                    "select d.citekey from pgfunnel.search_trace t "
                    "join pgfunnel.chunk c on c.id = t.chunk_id "
                    "join pgfunnel.document d on d.id = c.document_id")}
                raw = conn.execute("select count(*) from pgfunnel.search_trace t where "
                                   "t.search_id = %s", (alice.search_id,)).fetchone()
            assert raw is not None
            return logs, keys | ({"<alice-trace-rows>"} if raw[0] else set())

        alice_logs, alice_keys = traced(["alice"])
        assert alice.search_id in alice_logs and "secret" in alice_keys  # control
        bob_logs, bob_keys = traced(["bob"])
        assert alice.search_id not in bob_logs and bob.search_id in bob_logs
        assert empty.search_id in bob_logs and empty.search_id not in alice_logs
        assert "secret" not in bob_keys and "<alice-trace-rows>" not in bob_keys
        # a reader cannot write a log entry under someone else's principals
        with pytest.raises(psycopg.Error), conn.transaction():
            conn.execute("select set_config('pgfunnel.principals', '[\"bob\"]', true)")
            conn.execute("insert into pgfunnel.search_log (collection_id, index_version_id, "
                         "config_hash, config, principals) values (1, 1, 'x', '{}', '{alice}')")
        # nor as another role than itself
        with pytest.raises(psycopg.errors.InsufficientPrivilege), conn.transaction():
            conn.execute("select set_config('pgfunnel.principals', '[\"bob\"]', true)")
            conn.execute("insert into pgfunnel.search_log (collection_id, index_version_id, "
                         "config_hash, config, principals, logged_by) "
                         "values (1, 1, 'x', '{}', '{bob}', 'postgres')")
        # nor add rows to another reader's trace: a forged row, or a duplicate key that
        # would tell which chunks alice's search held, or a search id that does not exist,
        # all meet the same refusal (the policy is checked before the keys)
        with conn.transaction():
            conn.execute("select set_config('pgfunnel.principals', '[\"alice\"]', true)")
            public_id, secret_id = (one_row(conn.execute(
                "select c.id from pgfunnel.chunk c join pgfunnel.document d "
                "on d.id = c.document_id where d.citekey = %s", (key,)))[0]
                for key in ("pub000", "secret"))
        missing = alice.search_id + bob.search_id + 1000
        for search_id, chunk_id in ((alice.search_id, public_id), (alice.search_id, secret_id),
                                    (missing, public_id)):
            with pytest.raises(psycopg.errors.InsufficientPrivilege) as refused, \
                    conn.transaction():
                conn.execute("select set_config('pgfunnel.principals', '[\"bob\"]', true)")
                conn.execute("insert into pgfunnel.search_trace (search_id, chunk_id, "
                             "fused_rank, fused_score, final_rank) values (%s, %s, 1, 9, 1)",
                             (search_id, chunk_id))
            assert "row-level security" in str(refused.value)
        # bob's own trace takes rows (the traced searches above wrote theirs this way)
        with conn.transaction():
            conn.execute("select set_config('pgfunnel.principals', '[\"bob\"]', true)")
            conn.execute("insert into pgfunnel.search_trace (search_id, chunk_id, fused_rank, "
                         "fused_score, final_rank, dropped) values (%s, %s, 99, 0, null, "
                         "'below k') on conflict do nothing", (bob.search_id, public_id))


def test_cli_search_hides_chunk(app_dsn: str) -> None:
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    runner = CliRunner()
    base = ["search", QUERY, "--lexical-only", "--json", "--dsn", app_dsn, "-k", "5"]
    alice = runner.invoke(app, [*base, "-p", "alice"])
    assert alice.exit_code == 0, alice.output
    assert json.loads(alice.stdout)["results"][0]["citekey"] == "secret"
    for extra in (["-p", "bob"], []):
        res = runner.invoke(app, [*base, *extra])
        assert res.exit_code == 0, res.output
        keys = [r["citekey"] for r in json.loads(res.stdout)["results"]]
        assert keys and "secret" not in keys


@pytest.mark.parametrize("mode", ["plain", "rls"])
def test_explain_hides_chunk(request: pytest.FixtureRequest, mode: str) -> None:
    dsn = request.getfixturevalue("plain_db" if mode == "plain" else "app_dsn")
    owner_dsn = request.getfixturevalue("plain_db" if mode == "plain" else "rls_db")
    with connect(owner_dsn, autocommit=True) as owner:
        row = owner.execute("select c.id from pgfunnel.chunk c join pgfunnel.document d "
                            "on d.id = c.document_id where d.citekey = 'secret'").fetchone()
        missing = owner.execute("select max(id) + 1000 from pgfunnel.chunk").fetchone()
    assert row is not None and missing is not None
    with connect(dsn, autocommit=True) as conn:
        exists = conn.execute("select count(*) from pg_proc where proname = 'explain' and "
                              "pronamespace = 'pgfunnel'::regnamespace").fetchone()
        if not exists or not exists[0]:
            pytest.skip("pgfunnel.explain is not installed (sql/050_explain.sql)")

        def explain(principals: list[str], chunk_id: int) -> list[Any]:
            with conn.transaction():
                conn.execute("select set_config('pgfunnel.principals', %s, true)",
                             (json.dumps(principals),))
                return conn.execute(
                    "select * from pgfunnel.explain(%s, %s, chunk_id => %s, k => 5, "
                    "principals => %s)", (QUERY, QVEC, chunk_id, principals)).fetchall()

        alice = explain(["alice"], row[0])
        assert "secret" in str(alice)  # control
        bob = explain(["bob"], row[0])
        assert "secret" not in str(bob) and "Refund monthly" not in str(bob)
        # a hidden chunk gets exactly the answer a chunk that does not exist gets
        assert str(bob).replace(str(row[0]), "ID") == \
            str(explain(["bob"], missing[0])).replace(str(missing[0]), "ID")

    # the Python and CLI explain set the reader's settings the policies read, as a search
    # does: alice's chunk is returned to her, and hidden from bob like a missing one
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    from pgfunnel.explain import explain as explain_chunk

    with _funnel(dsn) as f:
        assert explain_chunk(f, QUERY, "secret#0", query_embedding=QVEC, k=5,
                             principals=["alice"]).verdict == "returned"
        assert explain_chunk(f, QUERY, "secret#0", query_embedding=QVEC, k=5,
                             principals=["bob"]).verdict == "filtered out or does not exist"
        # the document as a whole: its chunks are looked up as the search sees them
        assert explain_chunk(f, QUERY, "secret", query_embedding=QVEC, k=5,
                             principals=["alice"]).verdict == "returned"
        assert explain_chunk(f, QUERY, "secret", query_embedding=QVEC, k=5,
                             principals=["bob"]).verdict == "filtered out or does not exist"
    res = CliRunner().invoke(app, ["explain", QUERY, "pub000#0", "--lexical-only", "--json",
                                   "--dsn", dsn])
    assert res.exit_code == 0, res.output
    [answer] = json.loads(res.stdout)
    assert answer["verdict"] in ("returned", "cut at k", "capped")


def test_explain_a_logged_search_reads_the_log_as_the_reader(app_dsn: str) -> None:
    # explain --search-id reads search_log and search_trace under their policies: a
    # reader the logged search's principals are not a subset of gets "not in the log",
    # the answer an id no search has gets
    from pgfunnel.errors import NotFoundError
    from pgfunnel.explain import explain

    with _funnel(app_dsn) as f:
        sid = f.search(QUERY, query_embedding=QVEC, k=5, principals=["alice"],
                       trace=True).search_id
        assert sid is not None
        mine = explain(f, None, "secret#0", search_id=sid, principals=["alice"])
        assert mine.verdict == "returned" and mine.citekey == "secret"
        assert mine.replayed_on is None and mine.reason.startswith(f"search {sid} logged it")
        # a chunk the logged reader could not see: which filter hid it is said only to
        # a reader who can see it; to another it is a chunk that does not exist
        bobs = f.search(QUERY, query_embedding=QVEC, k=5, principals=["bob"],
                        trace=True).search_id
        for reader, said in ((["alice", "bob"], "is hidden from its reader by its "
                                                "principals ['bob']"),
                             (["bob"], "document secret does not exist")):
            e = explain(f, None, "secret", search_id=bobs, principals=reader)
            assert e.verdict == "filtered out or does not exist" and said in e.reason, e
        for reader in (["bob"], []):
            with pytest.raises(NotFoundError, match=rf"^search_id: search {sid} is not in "
                                                    "the search log") as hidden:
                explain(f, None, "secret#0", search_id=sid, principals=reader)
        with pytest.raises(NotFoundError) as unknown:
            explain(f, None, "secret#0", search_id=sid + 1000, principals=["alice"])
        assert str(unknown.value).replace(str(sid + 1000), "ID") == \
            str(hidden.value).replace(str(sid), "ID")


@pytest.mark.parametrize("mode", ["plain", "rls"])
def test_a_logged_search_is_explained_to_a_reader_only_as_far_as_its_principals_see(
        request: pytest.FixtureRequest, mode: str) -> None:
    # without row-level security the principals given are the reader, as for a live
    # explain: before, bob was shown alice's trace (the citekey and ranks of a chunk he may
    # not see), and told which filter hid a document he cannot see, where one that does
    # not exist got "does not exist"
    from pgfunnel.errors import NotFoundError
    from pgfunnel.explain import explain

    dsn = request.getfixturevalue("plain_db" if mode == "plain" else "app_dsn")
    with _funnel(dsn) as f:
        alices = f.search(QUERY, query_embedding=QVEC, k=5, principals=["alice"],
                          trace=True).search_id
        bobs = f.search(QUERY, query_embedding=QVEC, k=5, principals=["bob"],
                        trace=True).search_id
        assert alices is not None and bobs is not None
        # control: alice reads her own trace, and is told which filter hid it from bob
        mine = explain(f, None, "secret#0", search_id=alices, principals=["alice"])
        assert mine.verdict == "returned" and mine.citekey == "secret"
        told = explain(f, None, "secret", search_id=bobs, principals=["alice", "bob"])
        assert "is hidden from its reader by its principals ['bob']" in told.reason, told
        for reader in (["bob"], []):
            with pytest.raises(NotFoundError, match=rf"^search_id: search {alices} is not in "
                                                    "the search log"):
                explain(f, None, "secret#0", search_id=alices, principals=reader)
        for target in ("secret", "secret#0", "nosuch", "nosuch#0"):
            e = explain(f, None, target, search_id=bobs, principals=["bob"])
            assert e.verdict == "filtered out or does not exist", e
            assert e.citekey is None and "hidden from its reader" not in e.reason, e
            assert e.reason.replace("secret", "X").replace("nosuch", "X") == \
                explain(f, None, target.replace("secret", "nosuch"), search_id=bobs,
                        principals=["bob"]).reason.replace("nosuch", "X"), e


def test_a_reader_cannot_log_under_an_id_ahead_of_the_sequence(rls_db: str) -> None:
    # before, a reader inserted search_log rows under the next ids by hand (the identity
    # column takes an explicit value), and every other reader's traced search then failed
    # on the primary key until the sequence had passed them. Readers may not write the id
    # column at all now (the privilege is refused before the policy is checked)
    mallory, victim = create_app_role(rls_db), create_app_role(rls_db)
    with connect(mallory, autocommit=True) as c:
        with c.transaction():
            c.execute("select set_config('pgfunnel.principals', '[]', true)")
            nxt = c.execute("select pg_catalog.nextval('pgfunnel.search_log_id_seq')").fetchone()
            ver = c.execute("select id, collection_id from pgfunnel.index_version").fetchone()
            assert nxt is not None and ver is not None
        insert = ("insert into pgfunnel.search_log (id, collection_id, index_version_id, "
                  "config_hash, config, principals) values (%s, %s, %s, 'x', '{}', '{}')")
        for ahead in (1, 2, 3):
            with pytest.raises(psycopg.errors.InsufficientPrivilege,
                               match="permission denied for table search_log"), \
                    c.transaction():
                c.execute("select set_config('pgfunnel.principals', '[]', true)")
                c.execute(insert, (nxt[0] + ahead, ver[1], ver[0]))
        # control: its own traced search logs as before
        with _funnel(c) as f:
            assert f.search(QUERY, query_embedding=QVEC, k=3, trace=True).search_id
    with _funnel(victim) as f:
        assert f.search(QUERY, query_embedding=QVEC, k=3, principals=["bob"],
                        trace=True).search_id


# -- missing principals -------------------------------------------------------------

def test_null_principals_is_an_error(plain_db: str) -> None:
    with connect(plain_db, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.NullValueNotAllowed):
            conn.execute("select * from funnel_search(%s, principals => null)", (QUERY,))
        # a missing identity: refused as an access error that names the parameter
        with pytest.raises(AccessError) as missing:
            _funnel(conn).search(QUERY, principals=None)
        assert isinstance(missing.value, ConfigError) and missing.value.parameter == "principals"
        # a None among them is a caller's missing identity, not a principal named "None"
        with pytest.raises(AccessError, match="principals: must not contain None"):
            _funnel(conn).search(QUERY, principals=["alice", None])
        with pytest.raises(ConfigError, match="principals: must not contain an empty string"):
            _funnel(conn).search(QUERY, principals=[""])
        with pytest.raises(ConfigError, match="metadata_filter"):
            _funnel(conn).search(QUERY, principals=[], metadata_filter=["billing"])
        # a two-dimensional array from SQL: Postgres' own error named neither
        with pytest.raises(psycopg.errors.InvalidParameterValue,
                           match="^principals: must be a one-dimensional array"), \
                conn.transaction():
            conn.execute("select * from funnel_search(%s, principals => '{{alice,bob}}')",
                         (QUERY,))
        empty = conn.execute("select citekey from funnel_search(%s, principals => '{}')",
                             (QUERY,)).fetchall()
        assert empty and "secret" not in [r[0] for r in empty]
        assert conn.execute("select 1").fetchone() == (1,)


def test_missing_rls_setting_gives_zero_rows(app_conn: psycopg.Connection[Any]) -> None:
    conn = app_conn
    for table in ("document", "chunk", "embedding", "lexical", "posting", "search_log",
                  "search_trace"):
        n = conn.execute(f"select count(*) from pgfunnel.{table}").fetchone()  # noqa: S608
        assert n == (0,), table
    # even funnel_search with alice's principals as a parameter finds nothing
    assert conn.execute("select * from funnel_search(%s, %s, principals => '{alice}')",
                        (QUERY, QVEC)).fetchall() == []
    for bad in ("", "[]"):
        with conn.transaction():
            conn.execute("select set_config('pgfunnel.principals', %s, true)", (bad,))
            n_docs = conn.execute("select count(*), count(*) filter (where not is_public) "
                                  "from pgfunnel.document").fetchone()
        assert n_docs is not None
        if bad == "":
            assert n_docs == (0, 0)
        else:  # '[]': public only
            assert n_docs[0] == 30 and n_docs[1] == 0
    # malformed settings are an error, never all rows
    for bad in ("null", "{alice}", "alice", '{"a": 1}', "[1, 2]", '[""]', '["alice", ""]',
                '[" alice"]', '["alice\\t"]'):
        with pytest.raises(psycopg.errors.InvalidParameterValue,
                           match="pgfunnel.principals: must be a JSON array of non-empty "
                                 "strings"), conn.transaction():
            conn.execute("select set_config('pgfunnel.principals', %s, true)", (bad,))
            conn.execute("select count(*) from pgfunnel.document")
    # a tenant no document can have is refused too, as the tenant argument refuses it,
    # whether or not the rows read have a tenant
    for bad in (" acme", "acme\t"):
        with pytest.raises(psycopg.errors.InvalidParameterValue,
                           match="pgfunnel.tenant: must not begin or end with whitespace"), \
                conn.transaction():
            conn.execute("select set_config('pgfunnel.principals', '[\"alice\"]', true), "
                         "set_config('pgfunnel.tenant', %s, true)", (bad,))
            conn.execute("select count(*) from pgfunnel.document")
    # a session-level setting is ignored once the transaction that set it locally ends
    with conn.transaction():
        conn.execute("select set_config('pgfunnel.principals', '[\"alice\"]', true)")
        assert conn.execute("select count(*) from pgfunnel.document").fetchone() == (31,)
    assert conn.execute("select count(*) from pgfunnel.document").fetchone() == (0,)


# -- shared pool --------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["plain", "rls"])
def test_shared_pool_two_readers_no_foreign_rows(db: str, mode: str) -> None:
    from psycopg_pool import ConnectionPool

    if mode == "rls":
        schema.init(db, rls=True)
    rng = np.random.default_rng(3)
    docs = [Doc(f"a{i:03d}", f"alpha shared topic words number {i}", readers=["alice"])
            for i in range(40)]
    docs += [Doc(f"b{i:03d}", f"bravo shared topic words number {i}", readers=["bob"])
             for i in range(40)]
    docs += [Doc(f"p{i:03d}", f"public shared topic words number {i}") for i in range(20)]
    ingest_docs(db, docs, seed=4)
    dsn = create_app_role(db) if mode == "rls" else db
    allowed = {"alice": ("a", "p"), "bob": ("b", "p")}
    foreign: list[str] = []
    searched = [0]
    lock = threading.Lock()
    with ConnectionPool(dsn, min_size=2, max_size=2, open=True,
                        kwargs={"autocommit": True}) as pool:
        f = _funnel(pool)

        def worker(reader: str, seed: int) -> None:
            r = np.random.default_rng(seed)
            for _ in range(500):
                vec = unit(r.normal(size=DIM))
                res = f.search("shared topic words", query_embedding=vec, principals=[reader],
                               k=10, per_source_cap=1)
                bad = [x.citekey for x in res.results if not x.citekey.startswith(allowed[reader])]
                with lock:
                    searched[0] += 1
                    foreign.extend(bad)
                assert len(res.results) == 10

        threads = [threading.Thread(target=worker, args=(who, s))
                   for who, s in (("alice", 1), ("bob", 2))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    del rng
    assert searched[0] == 1000
    assert foreign == []


# -- filtered top-k completeness ------------------------------------------------------

def test_filtered_topk_completeness_and_dense_recall(db: str) -> None:
    n = 2000
    vecs = random_vectors(n, seed=11)
    docs = [Doc(f"d{i:04d}", f"document body {i} with common words",
                readers=["rare"] if i % 100 == 0 else ["other"], vector=vecs[i])
            for i in range(n)]
    ingest_docs(db, docs)
    visible = [i for i in range(n) if i % 100 == 0]  # 1%: 20 chunks
    rng = np.random.default_rng(12)
    recalls = []
    with connect(db, autocommit=True) as conn:
        f = _funnel(conn)
        for _ in range(10):
            q = unit(rng.normal(size=DIM))
            for k in (5, 10, 50):
                res = f.search(None, query_embedding=q, principals=["rare"], k=k,
                               per_source_cap=1, dense_depth=k)
                assert len(res.results) == min(k, len(visible))
                exact = sorted(visible, key=lambda i: -float(vecs[i] @ q))[:k]
                got = {r.citekey for r in res.results}
                recalls.append(len(got & {f"d{i:04d}" for i in exact}) / len(exact))
    assert float(np.mean(recalls)) >= 0.95


def test_filtered_topk_completeness_under_rls(db: str) -> None:
    """Row-level security filters the HNSW walk itself: a walk that came back short of the
    rows asked for must not be taken for the end of the version (it returned 10 of 60
    visible rows), so the dense leg still returns min(k, visible) rows, the exact ones."""
    n_hidden, n_public = 600, 60
    vecs = random_vectors(n_hidden + n_public, seed=21)
    docs = [Doc(f"h{i:04d}", f"hidden note {i}", readers=["alice"], vector=vecs[i])
            for i in range(n_hidden)]
    docs += [Doc(f"p{i:04d}", f"public note {i}", vector=vecs[n_hidden + i])
             for i in range(n_public)]
    schema.init(db, rls=True)
    ingest_docs(db, docs)
    app = create_app_role(db)
    rng = np.random.default_rng(22)
    with connect(app) as conn:
        f = _funnel(conn)
        for _ in range(5):
            q = unit(rng.normal(size=DIM))
            exact = sorted(range(n_public), key=lambda i: -float(vecs[n_hidden + i] @ q))
            for k in (10, 40):
                with conn.transaction():
                    conn.execute("select set_config('pgfunnel.principals', '[\"bob\"]', true)")
                    res = f.search(None, query_embedding=q, principals=["bob"], k=k,
                                   per_source_cap=1, dense_depth=k)
                assert [r.citekey for r in res.results] == [f"p{i:04d}" for i in exact[:k]]


# -- no error side channel -------------------------------------------------------------

def test_hidden_row_cannot_make_a_filter_raise(db: str) -> None:
    schema.init(db, rls=True)
    ingest_docs(db, [
        Doc("visible", "quarterly numbers report", readers=["bob"], metadata={"n": "5"}),
        Doc("hidden", "quarterly numbers report", readers=["alice"],
            metadata={"n": "not-a-number", "tags": "x"}),
    ])
    # control: without RLS (owner, superuser) the cast reaches the hidden row and raises
    with connect(db, autocommit=True) as owner, \
            pytest.raises(psycopg.errors.InvalidTextRepresentation):
        owner.execute("select citekey from pgfunnel.document "
                      "where (metadata->>'n')::int > 3").fetchall()
    app = create_app_role(db)
    with connect(app, autocommit=True) as conn, conn.transaction():
        conn.execute("select set_config('pgfunnel.principals', '[\"bob\"]', true)")
        rows = conn.execute("select citekey from pgfunnel.document "
                            "where (metadata->>'n')::int > 3").fetchall()
        assert rows == [("visible",)]
        rows = conn.execute("select d.citekey from pgfunnel.chunk c join pgfunnel.document d "
                            "on d.id = c.document_id where (d.metadata->>'n')::int > 3 "
                            "and c.text like '%%quarterly%%'").fetchall()
        assert rows == [("visible",)]
        # funnel_search's metadata_filter is jsonb containment: it cannot raise on any value
        res = conn.execute("select citekey from funnel_search('quarterly numbers', "
                           "principals => '{bob}', metadata_filter => %s)",
                           (Jsonb({"n": 5}),)).fetchall()
        assert res == []


# -- revoke vs search ----------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["plain", "rls"])
def test_search_after_revoke_never_returns_document(db: str, mode: str) -> None:
    if mode == "rls":
        schema.init(db, rls=True)
    docs = _corpus(10)
    ingest_docs(db, docs)
    dsn = create_app_role(db) if mode == "rls" else db
    with connect(dsn, autocommit=True) as conn:
        f = _funnel(conn)
        assert _keys(f.search(QUERY, query_embedding=QVEC, principals=["bob"], k=3)) and \
            "secret" not in _keys(f.search(QUERY, query_embedding=QVEC, principals=["bob"], k=3))
        # grant bob, then revoke again; each change is a re-ingest that commits
        docs[0].readers = ["alice", "bob"]
        ingest_docs(db, docs)
        assert _keys(f.search(QUERY, query_embedding=QVEC, principals=["bob"], k=3))[0] == "secret"
        docs[0].readers = ["alice"]
        ingest_docs(db, docs)  # committed before the next search starts
        for _ in range(20):
            assert "secret" not in _keys(f.search(QUERY, query_embedding=QVEC, principals=["bob"],
                                                  k=3))


# -- doctor checks ---------------------------------------------------------------------------

def test_security_findings(db: str) -> None:
    from pgfunnel.security import security_findings

    with connect(db, autocommit=True) as conn:
        checks = {f.check for f in security_findings(conn) if f.level == "error"}
        assert "public_execute" not in checks and "security_definer" not in checks
    schema.init(db, rls=True)
    app = create_app_role(db)
    app_user = conninfo_part(app, "user")
    with connect(db, autocommit=True) as conn:
        assert [f for f in security_findings(conn) if f.level == "error"] == []
        conn.execute("alter table pgfunnel.posting no force row level security")
        conn.execute(f'alter role "{app_user}" bypassrls')
        conn.execute("create function pgfunnel.bad() returns int language sql security definer "
                     "set search_path = pg_catalog as 'select 1'")
        conn.execute("grant execute on function pgfunnel._remove_chunks to public")
        errors = {f.check: f.message for f in security_findings(conn) if f.level == "error"}
        assert set(errors) >= {"rls_not_forced", "app_role_bypassrls", "security_definer",
                               "public_execute"}
        assert "posting" in errors["rls_not_forced"] and app_user in errors["app_role_bypassrls"]
        owner = conn.execute("select current_user").fetchone()
        assert owner is not None
        owner_findings = security_findings(conn, app_role=str(owner[0]))
        assert {"app_role_owner", "app_role_superuser"} <= {f.check for f in owner_findings}


def test_app_role_cannot_write_or_disable_rls(app_conn: psycopg.Connection[Any]) -> None:
    for stmt in ("delete from pgfunnel.document",
                 "alter table pgfunnel.document disable row level security",
                 "select pgfunnel._remove_chunks('{1}')"):
        with pytest.raises(psycopg.Error) as info:
            app_conn.execute(stmt)
        assert isinstance(info.value, psycopg.errors.InsufficientPrivilege), stmt
    assert app_conn.execute("select 1").fetchone() == (1,)
    # through the API the refusal names what the role lacks, not the first internal
    # function it could not run
    from pgfunnel.ingest import delete_documents

    collection = one_row(app_conn.execute("select min(name) from pgfunnel.collection"))[0]
    with pytest.raises(AccessError, match="may not delete documents: it lacks DELETE on "
                                          "pgfunnel.document") as refused:
        delete_documents(app_conn, collection, ["secret"])
    assert "_remove_chunks" not in str(refused.value)


def test_writer_role_plain_delete_keeps_statistics_under_rls(rls_db: str) -> None:
    # the deletion trigger runs as the deleting writer, under the writer's all-rows policy
    from test_bm25 import _orphan_postings
    from test_ingest import assert_stats_exact

    writer = create_app_role(rls_db, writer=True)
    with connect(writer, autocommit=True) as conn:
        gone = conn.execute("delete from pgfunnel.document where citekey = "
                            "(select min(citekey) from pgfunnel.document) returning citekey"
                            ).fetchall()
        assert len(gone) == 1
    with connect(rls_db, autocommit=True) as conn:
        assert _orphan_postings(conn) == 0
        assert_stats_exact(conn)


def test_the_definer_functions_find_no_type_in_the_callers_temporary_schema(
        rls_db: str) -> None:
    """The deletion trigger runs with the owner's rights. Its pinned search_path did not
    name pg_temp, so Postgres searched the caller's temporary schema first for type names:
    a writer's domain pg_temp.text, checked by a pg_temp function, ran that function as
    the owner (a superuser here) when a delete emptied a term. pg_temp now comes last."""
    writer = create_app_role(rls_db, writer=True)
    with connect(writer, autocommit=True) as conn:
        conn.execute("create function pg_temp.escalate(v pg_catalog.text) returns boolean "
                     "language plpgsql as $$ begin if current_user <> session_user then "
                     "raise exception 'ran as %', current_user; end if; return true; end $$")
        conn.execute("create domain pg_temp.text as pg_catalog.text "
                     "check (pg_temp.escalate(value))")
        conn.execute("create domain pg_temp.int4 as pg_catalog.int4 "
                     "check (pg_temp.escalate(value::pg_catalog.text))")
        # 'secret' alone holds 'monthly' and 'invoice': the trigger empties their terms
        assert conn.execute("delete from pgfunnel.document where citekey = 'secret'"
                            ).rowcount == 1
        assert conn.execute("select count(*) from pgfunnel._term_df(1, array['refund'])"
                            ).fetchone() is not None
    with connect(rls_db, autocommit=True) as conn:
        definers = conn.execute(
            "select p.oid::regprocedure::text, s from pg_proc p, unnest(p.proconfig) s "
            "where p.pronamespace = 'pgfunnel'::regnamespace and p.prosecdef "
            "and s like 'search_path=%%'").fetchall()
        assert len(definers) == 2
        for sig, setting in definers:
            assert setting.replace(" ", "").endswith(",pg_temp"), (sig, setting)


def test_a_writer_making_a_new_version_is_told_it_takes_the_owner(rls_db: str) -> None:
    from pgfunnel.errors import AccessError
    from pgfunnel.ingest import Ingester
    from pgfunnel.sources import DocumentRecord

    writer = create_app_role(rls_db, writer=True)
    docs = [DocumentRecord("n1", "a note for a new collection")]
    with connect(writer, autocommit=True) as conn, \
            pytest.raises(AccessError, match="takes the owner of the pgfunnel tables"):
        # vectors of the size of the model a new collection's first version is made with
        # (the default's 384): vectors of another size are refused before the version is
        Ingester(conn, "brand-new", embedder=None).ingest(
            docs, vectors={"n1": random_vectors(1, 0, dim=384)})
    with connect(rls_db, autocommit=True) as conn:
        # nothing half made: no version row without its partition
        assert conn.execute("select count(*) from pgfunnel.index_version v "
                            "join pgfunnel.collection c on c.id = v.collection_id "
                            "where c.name = 'brand-new'").fetchone() == (0,)


# -- ORM and the example web app ---------------------------------------------------------

@pytest.mark.parametrize("mode", ["plain", "rls"])
def test_orm_hides_chunk(request: pytest.FixtureRequest, mode: str) -> None:
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    from pgfunnel.models import Document
    from pgfunnel.sqla import engine_from_dsn, funnel_search_tvf, identity_statement

    dsn = request.getfixturevalue("plain_db" if mode == "plain" else "app_dsn")
    engine = engine_from_dsn(dsn)
    try:
        def run(principals: list[str]) -> tuple[list[str], list[str]]:
            fs = funnel_search_tvf(QUERY, QVEC, k=5, principals=principals)
            with Session(engine) as s:
                s.execute(identity_statement(principals))
                found = [r.citekey for r in s.execute(
                    select(fs.c.citekey).order_by(fs.c.final_rank)).all()]
                docs = [d for (d,) in s.execute(select(Document.citekey)).all()]
                s.commit()
            return found, docs

        found, docs = run(["alice"])
        assert found[0] == "secret" and "secret" in docs
        found, docs = run(["bob"])
        assert found and "secret" not in found
        if mode == "rls":  # a plain ORM query, no filter written: RLS alone hides it
            assert docs and "secret" not in docs
    finally:
        engine.dispose()


def test_one_pooled_sqlalchemy_connection_carries_nothing_to_the_next_reader(
        app_dsn: str) -> None:
    # a web app's engine hands one server connection to request after request: the
    # reader's settings are transaction-local, and pgfunnel.last_search_id() (session-wide,
    # as lastval()) gave the next request the previous reader's search id, read as its own
    # by an app that traces some searches only
    from sqlalchemy import func, select
    from sqlalchemy import text as sa_text
    from sqlalchemy.exc import DBAPIError
    from sqlalchemy.orm import Session

    from pgfunnel.errors import translate
    from pgfunnel.sqla import engine_from_dsn, funnel_search_tvf, identity_statement

    engine = engine_from_dsn(app_dsn, pool_size=1, max_overflow=0)

    def serve(principals: list[str], trace: bool) -> tuple[Any, ...]:
        fs = funnel_search_tvf(QUERY, QVEC, k=5, principals=principals, trace=trace)
        with Session(engine) as s:
            pid, leftover = s.execute(sa_text(
                "select pg_backend_pid(), current_setting('pgfunnel.principals', true)")).one()
            s.execute(identity_statement(principals))
            before = s.execute(select(func.pgfunnel.last_search_id())).scalar()
            found = [r.citekey for r in s.execute(
                select(fs.c.citekey).order_by(fs.c.final_rank)).all()]
            own = s.execute(select(func.pgfunnel.last_search_id())).scalar()
            s.commit()
        return pid, leftover, before, found, own

    try:
        pid, _, before, found, alice_id = serve(["alice"], True)
        assert before is None and found[0] == "secret" and alice_id is not None
        # a request that fails in between: its error reads as pgfunnel's, and once rolled
        # back the session (and so the pooled connection) goes on
        with Session(engine) as s:
            s.execute(identity_statement(["alice"]))
            with pytest.raises(DBAPIError) as caught:
                s.execute(sa_text("select * from pgfunnel.funnel_search('x', k => 0, "
                                  "principals => '{alice}')")).all()
            err = translate(caught.value)
            assert isinstance(err, ConfigError) and err.parameter == "k"
            s.rollback()
            assert s.execute(sa_text("select 1")).scalar() == 1
        for trace in (False, True):
            same, leftover, before, found, own = serve(["bob"], trace)
            assert same == pid  # the same server session, reused
            assert leftover in (None, "")  # no reader left behind
            assert before is None  # not alice's search id
            assert found and "secret" not in found
            assert (own is None) if not trace else (own not in (None, alice_id))
        with engine.connect() as c:
            raw = c.connection.dbapi_connection
            assert raw is not None and raw.info.transaction_status == 0  # idle
    finally:
        engine.dispose()


def test_example_webapp_hides_chunk(app_dsn: str) -> None:
    from pathlib import Path

    from fastapi.testclient import TestClient
    from funnel_util import load_module

    path = Path(__file__).resolve().parent.parent / "examples" / "webapp" / "app.py"
    if not path.exists():
        pytest.skip("examples/webapp/app.py is not there yet")
    module = load_module("pgf_example_webapp", path)

    class FixedEmbedder:  # stands in for a model: these tests' vectors are not a model's
        model_name = "random-vectors-16"
        dimensions = DIM

        def embed_query(self, text: str) -> np.ndarray:
            return QVEC

    app = module.create_app(app_dsn, embedder=FixedEmbedder())
    with TestClient(app) as client:
        alice = client.get("/search", params={"q": QUERY, "k": 5},
                           headers={"X-Principals": "alice"})
        assert alice.status_code == 200, alice.text
        assert alice.json()["results"][0]["citekey"] == "secret"
        for header in ("bob", ""):
            res = client.get("/search", params={"q": QUERY, "k": 5},
                             headers={"X-Principals": header})
            assert res.status_code == 200, res.text
            keys = [r["citekey"] for r in res.json()["results"]]
            assert keys and "secret" not in keys
        assert client.get("/search", params={"q": QUERY}).status_code == 401
        # under row-level security the app itself cannot find the hidden document: 404,
        # as the example's README says (403 is for an app that may read every row)
        doc = client.get("/documents/secret", headers={"X-Principals": "bob"})
        assert doc.status_code == 404 and "Refund monthly" not in doc.text
        assert client.get("/documents/secret", headers={"X-Principals": "alice"}).status_code \
            == 200


@pytest.mark.parametrize("mode", ["plain", "rls"])
def test_eval_as_a_reader_looks_for_judged_items_as_that_reader(
        request: pytest.FixtureRequest, mode: str) -> None:
    """The harness checks that judged items exist as the reader its searches run as:
    under row-level security nothing is visible without the reader's settings, and
    without it the principals given are the reader (before, a document hidden from them
    was not said to be missing: it counted as never found without a word, while a
    citekey no document has was named)."""
    import warnings

    from pgfunnel.eval.harness import Harness, preset_configs
    from pgfunnel.eval.qrels import JudgedQuery

    app_dsn = request.getfixturevalue("plain_db" if mode == "plain" else "app_dsn")
    queries = [JudgedQuery("q1", QUERY, "keyword", {"pub000": 1, "secret": 1})]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "not in collection" warning for alice
        alice = Harness(app_dsn, principals=["alice"], embedder=None).run(
            queries, preset_configs("default"))
    assert alice.missing_items == []
    # bob can never find alice's document: for him it is missing, and said so
    with pytest.warns(UserWarning, match="1 of 2 judged items"):
        bob = Harness(app_dsn, principals=["bob"], embedder=None).run(
            queries, preset_configs("default"))
    assert bob.missing_items == ["secret"]


def test_migrate_as_a_reader_is_one_line_not_a_traceback(app_dsn: str) -> None:
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    from pgfunnel.errors import AccessError

    with pytest.raises(AccessError, match="permission denied"):
        schema.migrate(app_dsn)
    res = CliRunner().invoke(app, ["migrate", "--dsn", app_dsn])
    assert res.exit_code == 1 and "Traceback" not in res.output, res.output
    assert "permission denied" in res.output


def test_a_reader_cannot_list_the_vocabulary_but_searches_score_exactly(
        rls_db: str, app_dsn: str) -> None:
    """term_stat lists every word of a collection, alice's secret's included; readers get
    the df of the terms they search through pgfunnel._term_df, never the table."""
    from pgfunnel.security import grant_privileges, security_findings

    with connect(rls_db, autocommit=True) as owner:
        plain_scores = owner.execute(
            "select citekey, lexical_score from funnel_search(%s, null, 5, "
            "principals => '{alice}') order by final_rank", (QUERY,)).fetchall()
        # an earlier release granted it; doctor says so, and init --rls takes it back
        owner.execute("grant select on pgfunnel.term_stat to pgfunnel_reader")
        assert any(f.check == "reader_grants" for f in security_findings(owner))
        grant_privileges(owner)
        assert not any(f.check in ("reader_grants", "security_definer")
                       for f in security_findings(owner))
        from pgfunnel.doctor import check_row_security

        [on] = [f.message for f in check_row_security(owner) if f.level == "info"]
        assert "posting" in on and "search_trace" in on
    with connect(app_dsn, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege), conn.transaction():
            conn.execute("select set_config('pgfunnel.principals', '[\"bob\"]', true)")
            conn.execute("select term from pgfunnel.term_stat")
        with conn.transaction():
            conn.execute("select set_config('pgfunnel.principals', '[\"alice\"]', true)")
            # the same exact BM25 scores as the owner's search
            assert conn.execute(
                "select citekey, lexical_score from funnel_search(%s, null, 5, "
                "principals => '{alice}') order by final_rank", (QUERY,)).fetchall() \
                == plain_scores
            # the df of named terms only: nothing to enumerate
            named = dict(conn.execute("select term, df from pgfunnel._term_df(1, %s)",
                                      (["refund", "no-such-term"],)).fetchall())
            assert set(named) == {"refund"} and named["refund"] > 0


def test_a_reader_cannot_read_judgments_that_name_hidden_documents(
        rls_db: str, app_dsn: str) -> None:
    """qrel (`pgfunnel eval --store-qrels`) names judged documents and the queries that
    should find them, alice's secret's included, outside row-level security: readers
    were granted it, so bob learnt the citekey and topic of a document he cannot see."""
    from pgfunnel.eval.harness import store_qrels
    from pgfunnel.eval.qrels import JudgedQuery
    from pgfunnel.security import grant_privileges, security_findings

    with connect(rls_db, autocommit=True) as owner:
        store_qrels(owner, "default", [JudgedQuery("q1", "alice's refund dispute", "keyword",
                                                   {"secret": 1})])
        # an earlier release granted it; doctor says so, and init --rls takes it back
        owner.execute("grant select on pgfunnel.qrel to pgfunnel_reader")
        assert any(f.check == "reader_grants" and "qrel" in f.message
                   for f in security_findings(owner))
        grant_privileges(owner)
        assert not any(f.check == "reader_grants" for f in security_findings(owner))
    with connect(app_dsn, autocommit=True) as conn, pytest.raises(
            psycopg.errors.InsufficientPrivilege), conn.transaction():
        conn.execute("select set_config('pgfunnel.principals', '[\"bob\"]', true)")
        conn.execute("select item, query from pgfunnel.qrel")


def test_migrate_in_rls_mode_brings_the_policies_and_grants_up_to_date(rls_db: str) -> None:
    """Policies and grants change with releases (the trace insert check, term_stat): an
    upgrade by `pgfunnel migrate` (or `init`) installs them, not only `init --rls`."""
    old_trace_check = "exists (select 1 from pgfunnel.chunk c where c.id = chunk_id)"
    with connect(rls_db, autocommit=True) as conn:
        conn.execute("drop policy pgfunnel_reader_insert on pgfunnel.search_trace")
        conn.execute("create policy pgfunnel_reader_insert on pgfunnel.search_trace for insert "
                     f"to pgfunnel_reader with check ({old_trace_check})")
        conn.execute("grant select on pgfunnel.term_stat to pgfunnel_reader")
    schema.migrate(rls_db)
    with connect(rls_db, autocommit=True) as conn:
        check = one_row(conn.execute(
            "select with_check from pg_policies where tablename = "
            "'search_trace' and policyname = 'pgfunnel_reader_insert'"))[0]
        assert "search_log" in check and "logged_by" in check
        assert conn.execute("select has_table_privilege('pgfunnel_reader', "
                            "'pgfunnel.term_stat', 'select')").fetchone() == (False,)


# -- init and migrate while searches run --------------------------------------------

def test_init_and_migrate_in_rls_mode_do_not_break_running_searches(app_dsn: str,
                                                                   rls_db: str) -> None:
    # policies dropped and recreated table by table took each table's ACCESS EXCLUSIVE
    # lock in turn while a search held a later table and waited for an earlier one:
    # Postgres cancelled the search as a deadlock, once per init or migrate
    failures: list[str] = []
    searched = [0]
    stop = threading.Event()

    def search_loop() -> None:
        with connect(app_dsn, autocommit=True) as conn:
            f = _funnel(conn)
            while not stop.is_set():
                try:
                    keys = _keys(f.search(QUERY, query_embedding=QVEC, principals=["alice"],
                                          k=5))
                    if keys[:1] != ["secret"]:
                        failures.append(f"wrong answer {keys}")
                    searched[0] += 1
                except Exception as exc:  # noqa: BLE001 - every failure is the finding
                    failures.append(repr(exc))

    threads = [threading.Thread(target=search_loop) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for _ in range(2):
            schema.init(rls_db)
            schema.migrate(rls_db)
            # policies that differ from this release's (here: edited by hand) are
            # replaced under load too
            with connect(rls_db, autocommit=True) as owner:
                for table in ("document", "embedding"):
                    owner.execute(psycopg.sql.SQL(
                        "alter policy pgfunnel_writer_all on pgfunnel.{} using (1 = 1)"
                    ).format(psycopg.sql.Identifier(table)))
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert failures == []
    assert searched[0] > 0


def test_enable_rls_replaces_only_policies_that_changed(rls_db: str, app_dsn: str) -> None:
    from pgfunnel.security import enable_rls

    def policy_oids(conn: psycopg.Connection[Any]) -> dict[tuple[str, str], int]:
        rows = conn.execute("select c.relname, p.polname, p.oid from pg_policy p "
                            "join pg_class c on c.oid = p.polrelid "
                            "where c.relnamespace = 'pgfunnel'::regnamespace").fetchall()
        return {(t, n): oid for t, n, oid in rows}

    with connect(rls_db) as conn:
        before = policy_oids(conn)
        enable_rls(conn)
        conn.commit()
        assert policy_oids(conn) == before  # nothing changed, nothing recreated
        # a policy edited by hand (here: opened to every row) is made again
        conn.execute("alter policy pgfunnel_reader_select on pgfunnel.document using (true)")
        conn.commit()
        enable_rls(conn)
        conn.commit()
        after = policy_oids(conn)
        assert after[("document", "pgfunnel_reader_select")] != \
            before[("document", "pgfunnel_reader_select")]
        assert {k: v for k, v in after.items() if k[0] != "document"} == \
            {k: v for k, v in before.items() if k[0] != "document"}
    with connect(app_dsn, autocommit=True) as conn:
        # the reader's view is the policy's again: bob does not get alice's chunk
        assert "secret" not in _keys(_funnel(conn).search(QUERY, query_embedding=QVEC,
                                                          principals=["bob"], k=5))


def test_a_policy_change_waits_for_long_transactions_then_says_so(rls_db: str) -> None:
    from pgfunnel.errors import ConflictError
    from pgfunnel.security import _lock_for_policy_change

    with connect(rls_db) as holder, connect(rls_db) as changer:
        holder.execute("select count(*) from pgfunnel.chunk")  # idle in transaction after
        with pytest.raises(ConflictError, match="long transactions hold them"):
            _lock_for_policy_change(changer, ["document", "chunk"], give_up_after=1.0)
        changer.rollback()
        # nothing was left locked by the attempts: the holder's session goes on, and
        # once it ends the lock is taken
        holder.execute("select count(*) from pgfunnel.document")
        holder.rollback()
        _lock_for_policy_change(changer, ["document", "chunk"], give_up_after=1.0)
        assert changer.execute(
            "select count(*) from pg_locks where pid = pg_backend_pid() "
            "and mode = 'AccessExclusiveLock' and relation in "
            "('pgfunnel.document'::regclass, 'pgfunnel.chunk'::regclass)").fetchone() == (2,)
        changer.rollback()


def test_granting_a_role_that_does_not_exist_names_it(rls_db: str) -> None:
    from pgfunnel.errors import NotFoundError
    from pgfunnel.security import grant_app_role

    with connect(rls_db, autocommit=True) as conn:
        with pytest.raises(NotFoundError, match="role 'nosuchrole' does not exist: create it "
                                                "first .* then grant it pgfunnel_reader"):
            grant_app_role(conn, "nosuchrole")
        assert conn.execute("select 1").fetchone() == (1,)


def test_granting_an_app_role_before_init_rls_says_to_run_it(plain_db: str) -> None:
    """On a database set up by `pgfunnel init` without --rls, grant_app_role made the role a
    member of pgfunnel_reader (made, cluster-wide, by another database's `init --rls`),
    which holds nothing here: it said nothing, and each of the role's searches was
    'permission denied for schema pgfunnel'. Where no database had made the roles it was
    Postgres' bare 'role "pgfunnel_reader" does not exist'. After `init --rls` the same
    call makes a role that searches."""
    from pgfunnel.errors import ConflictError
    from pgfunnel.security import READER_ROLE, ensure_roles, grant_app_role

    role = f"t_app_{uuid.uuid4().hex[:8]}"
    with connect(plain_db, autocommit=True) as conn:
        ensure_roles(conn)  # as another database's `init --rls` leaves them
        conn.execute(sql.SQL("create role {} login").format(sql.Identifier(role)))
        try:
            for writer in (False, True):
                with pytest.raises(ConflictError, match=r"holds no privilege on this "
                                   r"database's pgfunnel tables .* run `pgfunnel init --rls` "
                                   "on this database first"):
                    grant_app_role(conn, role, writer=writer)
            assert conn.execute("select pg_has_role(%s, %s, 'member')",
                                (role, READER_ROLE)).fetchone() == (False,)
            schema.init(plain_db, rls=True)
            grant_app_role(conn, role)
            with _funnel(with_user(plain_db, role)) as funnel:
                assert _keys(funnel.search(QUERY, query_embedding=QVEC, k=3,
                                           principals=["alice"]))[0] == "secret"
        finally:
            conn.execute(sql.SQL("drop owned by {}").format(sql.Identifier(role)))
            conn.execute(sql.SQL("drop role {}").format(sql.Identifier(role)))


def test_a_role_that_may_not_grant_the_reader_role_is_told_who_may(rls_db: str) -> None:
    """A role without ADMIN OPTION on pgfunnel_reader (the tables' owner that a superuser
    made a member of pgfunnel_writer, as `init --rls` asks; an ingest job) got Postgres'
    bare 'permission denied to grant role "pgfunnel_reader"' from grant_app_role, which
    named neither the role to grant it to nor who may."""
    from pgfunnel.security import READER_ROLE, grant_app_role

    granter_dsn = create_app_role(rls_db, writer=True)
    granter = conninfo_part(granter_dsn, "user")
    target = f"pgf_app_{uuid.uuid4().hex[:8]}"
    with connect(rls_db, autocommit=True) as su:
        su.execute(sql.SQL("create role {} login").format(sql.Identifier(target)))
    with connect(granter_dsn, autocommit=True) as conn:
        with pytest.raises(AccessError) as exc:
            grant_app_role(conn, target)
        assert conn.execute("select pg_has_role(%s, %s, 'member')",
                            (target, READER_ROLE)).fetchone() == (False,)
    assert str(exc.value) == (
        f"role {granter!r} may not grant pgfunnel_reader to {target!r} (that takes ADMIN "
        "OPTION on pgfunnel_reader, or a superuser): ask a superuser to run `grant "
        f"pgfunnel_reader to {target}`, or to give this role `... with admin option` "
        "once, then run it again")


def test_a_writer_that_may_not_create_temporary_tables_is_told_the_grant(
        rls_db: str) -> None:
    """Under row-level security ingest stages its rows in temporary tables (COPY into a
    table whose policies apply is refused), and a database whose DBA revoked TEMPORARY
    from PUBLIC (a common hardening step) gave an ingest job Postgres' bare "permission
    denied to create temporary tables in database ..." once its first batch was ready.
    It is now refused before anything is written, with the grant that lets it through."""
    writer_dsn = create_app_role(rls_db, writer=True)
    writer = conninfo_part(writer_dsn, "user")
    with connect(rls_db, autocommit=True) as su:
        dbname = su.info.dbname
        su.execute(sql.SQL("revoke temporary on database {} from public").format(
            sql.Identifier(dbname)))
        before = su.execute("select count(*) from pgfunnel.document").fetchone()
    with pytest.raises(AccessError) as exc:
        ingest_docs(writer_dsn, [Doc("fresh", "a new refund policy for staff")])
    assert str(exc.value) == (
        f"role {writer!r} may not ingest documents: row-level security applies to it, so "
        "pgfunnel writes through temporary tables (Postgres refuses COPY into a table whose "
        "policies apply to the writer), and it may not create temporary tables in database "
        f"{dbname}: ask the database's owner to run `grant temporary on database {dbname} "
        f"to {writer}`")
    with connect(rls_db, autocommit=True) as su:
        assert su.execute("select count(*) from pgfunnel.document").fetchone() == before
        su.execute(sql.SQL("grant temporary on database {} to {}").format(
            sql.Identifier(dbname), sql.Identifier(writer)))
    ingest_docs(writer_dsn, [Doc("fresh", "a new refund policy for staff")])
    with connect(rls_db, autocommit=True) as su:
        assert su.execute("select count(*) from pgfunnel.document where citekey = 'fresh'"
                          ).fetchone() == (1,)


def test_a_role_rls_does_not_apply_to_is_not_made_a_reader(rls_db: str) -> None:
    """grant_app_role made a superuser, a BYPASSRLS role or the tables' owner a member of
    pgfunnel_reader without a word: row-level security does not apply to them, so the
    application role the docs set up would read every document (doctor said so only
    later). As a writer, which reads every row by design, such a role is still granted."""
    from pgfunnel.errors import ConfigError
    from pgfunnel.security import READER_ROLE, WRITER_ROLE, grant_app_role

    with connect(rls_db, autocommit=True) as conn:
        owner = conn.execute("select current_user").fetchone()[0]  # type: ignore[index]
        conn.execute("create role t_bypass login bypassrls")
        conn.execute("create role t_plain login")
        try:
            for role, what in (("t_bypass", "a BYPASSRLS role"),
                               (owner, "the owner of pgfunnel's tables")):
                with pytest.raises(ConfigError, match=f"{what}.*row-level security does "
                                                      "not apply to it") as exc:
                    grant_app_role(conn, role)
                assert exc.value.parameter == "role"
            grant_app_role(conn, "t_plain")
            grant_app_role(conn, "t_bypass", writer=True)
            members = {r for (r,) in conn.execute(
                "select m.rolname from pg_auth_members a join pg_roles g on g.oid = a.roleid "
                "join pg_roles m on m.oid = a.member where g.rolname = %s",
                (READER_ROLE,)).fetchall()}
            assert "t_plain" in members and not members & {"t_bypass", owner}
            assert conn.execute("select pg_has_role('t_bypass', %s, 'member')",
                                (WRITER_ROLE,)).fetchone() == (True,)
        finally:
            for role in ("t_bypass", "t_plain"):
                conn.execute(f"drop owned by {role}")
                conn.execute(f"drop role {role}")


def test_a_reader_writing_is_told_which_role_it_needs(rls_db: str, app_dsn: str) -> None:
    """A member of pgfunnel_reader only got Postgres' bare "permission denied for table
    document" (or "index_version") from ingest, reindex and the version commands; only
    delete said which role it needs."""
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    from pgfunnel import versions
    from pgfunnel.ingest import Ingester, create_version, delete_documents
    from pgfunnel.sources import DocumentRecord

    with connect(rls_db, autocommit=True) as owner:
        coll, analyzer = one_row(owner.execute(
            "select id, analyzer from pgfunnel.collection where name = 'default'"))
        create_version(owner, coll, "random-vectors-16", DIM, str(analyzer), "ready")
        before = owner.execute("select state from pgfunnel.index_version "
                               "order by id").fetchall()
    role = conninfo_part(app_dsn, "user")
    lacks = f"role '{role}' may not {{}}: it lacks {{}} on pgfunnel.{{}} " \
            f"(members of pgfunnel_writer have it: grant pgfunnel_writer to {role}"
    with connect(app_dsn, autocommit=True) as conn:
        record = DocumentRecord(citekey="new", text="refund money back", title="new")
        with pytest.raises(AccessError) as err:
            Ingester(conn, "default").ingest([record], vectors={"new": random_vectors(1, 1)})
        assert str(err.value).startswith(lacks.format("ingest documents", "INSERT",
                                                      "document"))
        # nor is the search role itself the one to make a writer: its searches would read
        # every row
        assert "not a role that searches for readers" in str(err.value)
        with pytest.raises(AccessError) as err:
            delete_documents(conn, "default", ["new"])
        assert str(err.value).startswith(lacks.format("delete documents", "DELETE",
                                                      "document"))
        for call, what in ((lambda: versions.activate(conn, "default", 2),
                            "activate a version"),
                           (lambda: versions.rollback(conn, "default"),
                            "roll back a version switch"),
                           (lambda: versions.retire(conn, "default", 2), "retire a version"),
                           (lambda: versions.reindex(conn, "default"), "reindex")):
            with pytest.raises(AccessError) as err:
                call()
            privilege = "INSERT" if what == "reindex" else "UPDATE"
            assert str(err.value).startswith(lacks.format(what, privilege, "index_version"))
    for command, what in ((["delete", "new"], "delete documents"),
                          (["versions", "activate", "2"], "activate a version"),
                          (["versions", "rollback"], "roll back a version switch"),
                          (["versions", "retire", "2"], "retire a version"),
                          (["reindex"], "reindex")):
        res = CliRunner().invoke(app, [*command, "--dsn", app_dsn])
        assert res.exit_code == 1 and "Traceback" not in res.output, res.output
        text = " ".join(res.output.split())
        assert f"role '{role}' may not {what}" in text and \
            f"grant pgfunnel_writer to {role}" in text, text
    with connect(rls_db, autocommit=True) as owner:
        assert owner.execute("select state from pgfunnel.index_version "
                             "order by id").fetchall() == before
        assert owner.execute("select count(*) from pgfunnel.document "
                             "where citekey = 'new'").fetchone() == (0,)


def test_eval_as_a_reader_is_refused_storing_judgments_before_it_searches(
        app_dsn: str, tmp_path: Any) -> None:
    # a reader ran every search of the eval, then failed on Postgres' bare "permission
    # denied for table qrel"; and a judged item hidden from it was called "not in collection"
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    judged = tmp_path / "judged.jsonl"
    judged.write_text(json.dumps({"query_id": "q1", "query": QUERY, "slice": "s",
                                  "relevant": {"secret": 1}}) + "\n")
    base = ["eval", str(judged), "--preset", "lexical", "--dsn", app_dsn]
    stored = CliRunner().invoke(app, [*base, "--store-qrels"], env={"COLUMNS": "200"})
    said = " ".join(stored.output.split())
    assert stored.exit_code == 1, said
    assert "error: role " in said and "may not store judgments (--store-qrels)" in said, said
    assert "lacks INSERT on pgfunnel.qrel" in said and "evaluating" not in said, said
    plain = CliRunner().invoke(app, base, env={"COLUMNS": "200"})
    said = " ".join(plain.output.split())
    assert plain.exit_code == 0, said
    assert ("1 of 1 judged items are not in collection 'default', or are hidden from the "
            "searches' reader (no principals: public documents only)") in said, said


def test_an_operator_shadowed_in_public_never_runs_inside_a_search(plain_db: str) -> None:
    # pgvector lives in public, where (before Postgres 15, or by grant) other roles may
    # create objects. An exact-match operator there beats pg_catalog's integer-minus-float
    # reached by a cast, for any function whose pinned path held public: the dense leg
    # computed `1 - distance` so, and ran the shadow as the searcher.
    with connect(plain_db, autocommit=True) as conn:
        conn.execute("create function public.shadow_minus(a integer, b double precision) "
                     "returns double precision language plpgsql as "
                     "$$begin raise exception 'shadow operator ran as %', current_user; end$$")
        conn.execute("create operator public.- (leftarg = integer, rightarg = double precision, "
                     "function = public.shadow_minus)")
        with pytest.raises(psycopg.errors.RaiseException, match="shadow operator ran"):
            conn.execute("select 1 - 0.5::float8").fetchone()  # control: it does shadow
        vid = conn.execute("select id from pgfunnel.index_version "
                           "where state = 'active'").fetchone()
        chunk = conn.execute("select min(id) from pgfunnel.chunk").fetchone()
        assert vid is not None and chunk is not None
        # the cached walk (alice's search sees every chunk) ...
        rows = conn.execute("select citekey, dense_rank from funnel_search(%s, %s, k => 5, "
                            "principals => '{alice}')", (QUERY, QVEC)).fetchall()
        assert rows[0] == ("secret", 1)
        pool = conn.execute("select count(*) from pgfunnel.candidates(%s, %s, k => 5) "
                            "where dense_rank is not null", (QUERY, QVEC)).fetchone()
        assert pool is not None and pool[0] > 0
        # ... the walk planned per search ...
        planned = conn.execute("select scores from pgfunnel._hnsw_walk_planned(%s, %s, 5)",
                               (vid[0], QVEC)).fetchone()
        assert planned is not None and len(planned[0]) == 5
        # ... the exact scan of the few chunks a reader sees (30 of 31, under the bound
        # sqrt(2 x depth x chunks)), and explain's exact score
        bob = conn.execute("select citekey, dense_score from funnel_search(%s, %s, k => 5, "
                           "principals => '{bob}')", (QUERY, QVEC)).fetchall()
        assert len(bob) == 5 and "secret" not in {r[0] for r in bob}
        assert all(r[1] is not None for r in bob)
        explained = conn.execute("select * from pgfunnel.explain(%s, %s, chunk_id => %s)",
                                 (QUERY, QVEC, chunk[0])).fetchall()
        assert explained


def test_every_pinned_search_path_names_only_pgfunnel_and_pg_catalog(plain_db: str) -> None:
    from pgfunnel.db import search_path_schemas
    from pgfunnel.security import PINNED_PATH_SCHEMAS, security_findings

    with connect(plain_db, autocommit=True) as conn:
        paths = conn.execute(
            "select p.oid::regprocedure::text, s from pg_proc p, unnest(p.proconfig) s "
            "where p.pronamespace = 'pgfunnel'::regnamespace "
            "and s like 'search_path=%%'").fetchall()
        assert len(paths) > 40
        for sig, setting in paths:
            names = search_path_schemas(setting.split("=", 1)[1])
            assert names and set(names) <= PINNED_PATH_SCHEMAS, (sig, setting)
        assert not [f for f in security_findings(conn) if f.check == "search_path"
                    and f.level == "warning"]
        # one that names public is reported
        conn.execute("alter function pgfunnel._dense_leg set search_path = pg_catalog, "
                     "pgfunnel, public")
        [finding] = [f for f in security_findings(conn) if f.check == "search_path"
                     and f.level == "warning"]
        assert "_dense_leg" in finding.message and "public is not pgfunnel's own" in \
            finding.message


def test_doctor_names_roles_that_may_create_where_funnel_search_lives(plain_db: str) -> None:
    from pgfunnel.security import security_findings

    with connect(plain_db, autocommit=True) as conn:
        conn.execute("revoke create on schema public from public")
        assert [f for f in security_findings(conn) if f.check == "schema_create"] == []
        conn.execute("create role pgf_schema_creator nologin")
        try:
            conn.execute("grant create on schema public to pgf_schema_creator")
            [finding] = [f for f in security_findings(conn) if f.check == "schema_create"]
            assert finding.level == "warning"
            assert "role 'pgf_schema_creator' may create objects in schema public" in \
                finding.message
            assert "revoke create on schema public from pgf_schema_creator" in finding.message
            conn.execute("revoke create on schema public from pgf_schema_creator")
            conn.execute("grant create on schema public to public")
            [finding] = [f for f in security_findings(conn) if f.check == "schema_create"]
            assert finding.message.startswith("every role (PUBLIC) may create objects")
            assert "from public`" in finding.message
        finally:
            conn.execute("revoke all on schema public from pgf_schema_creator")
            conn.execute("drop role pgf_schema_creator")


def test_a_traced_search_that_narrows_the_rls_reader_is_refused_before_it_runs(
        app_dsn: str) -> None:
    with connect(app_dsn, autocommit=True) as conn:
        def traced(setting: list[str], principals: str, tenant: str | None = None) -> Any:
            with conn.transaction():
                conn.execute("select set_config('pgfunnel.principals', %s, true)",
                             (json.dumps(setting),))
                return conn.execute("select citekey, search_id from funnel_search(%s, %s, "
                                    "k => 3, principals => %s, tenant => %s, trace => true)",
                                    (QUERY, QVEC, principals, tenant)).fetchall()

        # control: the settings' own reader is traced
        rows = traced(["alice", "staff"], "{staff,alice}")
        assert rows and rows[0][0] == "secret" and rows[0][1] is not None
        for setting, principals, tenant in ((["alice", "staff"], "{alice}", None),
                                            ([], "{alice}", None),
                                            (["alice"], "{alice}", "acme")):
            with pytest.raises(psycopg.errors.InsufficientPrivilege) as refused:
                traced(setting, principals, tenant)
            message = str(refused.value)
            assert message.startswith("trace: under row-level security a trace is written "
                                      "as the reader in the settings"), message
            assert "search untraced" in message and "row-level security policy" not in message
        # untraced, narrowing is a plain search under the intersection
        with conn.transaction():
            conn.execute("select set_config('pgfunnel.principals', '[\"alice\", \"staff\"]', "
                         "true)")
            assert conn.execute("select citekey from funnel_search(%s, %s, k => 3, "
                                "principals => '{staff}')", (QUERY, QVEC)).fetchall()


def test_doctor_warns_that_another_databases_readers_may_search_this_one(
        rls_db: str, empty_db: str) -> None:
    """pgfunnel_reader is one role for the whole cluster: a login role granted it for one
    database's application may connect to every other database in RLS mode (CONNECT is
    PUBLIC's by default) and read its rows under principals it sets itself."""
    from pgfunnel.security import security_findings

    def connect_findings(dsn: str) -> list[str]:
        with connect(dsn, autocommit=True) as conn:
            return [f.message for f in security_findings(conn)
                    if f.check == "database_connect"]

    # the only database that grants pgfunnel_reader its tables: nothing to say
    assert connect_findings(rls_db) == []
    schema.init(empty_db, rls=True)
    here = conninfo_part(rls_db, "dbname")
    other = conninfo_part(empty_db, "dbname")
    # the other database's application role, searching this one
    other_app = psycopg.conninfo.make_conninfo(create_app_role(empty_db), dbname=here)
    with connect(other_app) as c:
        c.execute("select set_config('pgfunnel.principals', '[\"alice\"]', true)")
        assert c.execute("select d.citekey from pgfunnel.document d "
                         "where d.citekey = 'secret'").fetchall() == [("secret",)]
    [message] = connect_findings(rls_db)
    assert other in message and f"revoke connect on database {here} from public" in message
    with connect(empty_db, autocommit=True) as conn:
        conn.execute(sql.SQL("revoke connect on database {} from public").format(
            sql.Identifier(here)))
    # once CONNECT is not PUBLIC's, the role the other database's application uses cannot
    # reach this one, and doctor says nothing
    with pytest.raises(ConnectionFailedError, match="CONNECT privilege"):
        connect(other_app).close()
    assert connect_findings(rls_db) == []


def test_doctor_says_an_application_role_that_is_also_a_writer_escapes_the_policies(
        rls_db: str, app_dsn: str) -> None:
    """The writer's policy reads every row: a search role made a member of pgfunnel_writer
    too (to delete from an admin screen, say) is no longer held by row-level security."""
    from pgfunnel.security import security_findings

    app_user = conninfo_part(app_dsn, "user")

    def writer_findings() -> list[str]:
        with connect(rls_db, autocommit=True) as conn:
            return [f.message for f in security_findings(conn)
                    if f.check == "app_role_writer" and f.level == "error"]

    assert writer_findings() == []
    with connect(rls_db, autocommit=True) as conn:
        conn.execute(sql.SQL("grant pgfunnel_writer to {}").format(sql.Identifier(app_user)))
    # no principals set, and every row: the policies no longer hold it
    with connect(app_dsn, autocommit=True) as c:
        assert c.execute("select citekey from pgfunnel.document "
                         "where citekey = 'secret'").fetchall() == [("secret",)]
    [message] = writer_findings()
    assert repr(app_user) in message and "pgfunnel_writer" in message
    # named as the application role, it is checked too
    with connect(rls_db, autocommit=True) as conn:
        conn.execute(sql.SQL("revoke pgfunnel_reader from {}").format(sql.Identifier(app_user)))
        assert [f for f in security_findings(conn) if f.check == "app_role_writer"] == []
        assert [f.level for f in security_findings(conn, app_role=app_user)
                if f.check == "app_role_writer"] == ["error"]


def test_a_reader_draws_from_the_search_log_sequence_only(rls_db: str,
                                                          app_conn: psycopg.Connection[Any]
                                                          ) -> None:
    """A traced search takes its search_log id; no search takes any other sequence value,
    and nextval on document_id_seq told a reader how many documents had been written (those
    it cannot see included) and took ids from ingest."""
    from pgfunnel.doctor import check_privileges
    from pgfunnel.security import enable_rls

    for seq in ("document_id_seq", "chunk_id_seq", "collection_id_seq",
                "index_version_id_seq"):
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            app_conn.execute(f"select nextval('pgfunnel.{seq}')")
    # a traced search still logs itself
    funnel = _funnel(app_conn)
    assert funnel.search(QUERY, query_embedding=QVEC, principals=["alice"],
                         trace=True).search_id is not None
    # what an earlier release granted, init and migrate take back; doctor finds nothing
    # missing
    with connect(rls_db, autocommit=True) as conn:
        conn.execute("grant usage on all sequences in schema pgfunnel to pgfunnel_reader")
        with conn.transaction():
            enable_rls(conn)
        assert conn.execute(
            "select c.relname from pg_class c where c.relnamespace = 'pgfunnel'::regnamespace "
            "and case when c.relkind = 'S' "
            "         then has_sequence_privilege('pgfunnel_reader', c.oid, 'USAGE') end "
            "order by 1").fetchall() == [("search_log_id_seq",)]
        assert [f.level for f in check_privileges(conn)] == ["info"]


def test_doctor_checks_the_members_of_pgfunnel_reader_through_a_group_role(
        rls_db: str) -> None:
    """A DBA grants pgfunnel_reader to a group role and the group to the application's
    login roles: those are members too, and one with BYPASSRLS (or the writer's
    privileges) escapes the policies as a direct member does."""
    from pgfunnel.security import security_findings

    group, app = f"pgf_app_group_{uuid.uuid4().hex[:8]}", f"pgf_app_{uuid.uuid4().hex[:8]}"
    with connect(rls_db, autocommit=True) as conn:
        conn.execute(sql.SQL("create role {} nologin").format(sql.Identifier(group)))
        conn.execute(sql.SQL("grant pgfunnel_reader to {}").format(sql.Identifier(group)))
        conn.execute(sql.SQL("create role {} login bypassrls in role {}").format(
            sql.Identifier(app), sql.Identifier(group)))
        try:
            found = {(f.check, f.message) for f in security_findings(conn)
                     if f.level == "error"}
            assert ("app_role_bypassrls", f"application role {app!r} has BYPASSRLS; "
                    "row-level security does not apply") in found
            # a group role cannot log in: not an application role itself
            assert not [m for _, m in found if repr(group) in m]
            conn.execute(sql.SQL("alter role {} nobypassrls").format(sql.Identifier(app)))
            conn.execute(sql.SQL("grant pgfunnel_writer to {}").format(sql.Identifier(group)))
            assert [c for c, m in {(f.check, f.message) for f in security_findings(conn)
                                   if f.level == "error"} if repr(app) in m] == [
                "app_role_writer"]
        finally:
            conn.execute(sql.SQL("drop role {}").format(sql.Identifier(app)))
            conn.execute(sql.SQL("drop owned by {}").format(sql.Identifier(group)))
            conn.execute(sql.SQL("drop role {}").format(sql.Identifier(group)))


def test_doctor_reports_a_reader_setting_given_to_a_role_or_database_by_default(
        rls_db: str, app_dsn: str) -> None:
    """`alter role webapp set pgfunnel.principals = ...` makes every session of the role
    start as that reader: a query that sets no reader reads its rows instead of none."""
    from pgfunnel.security import security_findings

    app_user = conninfo_part(app_dsn, "user")
    here = conninfo_part(rls_db, "dbname")

    def defaults() -> set[tuple[str, str]]:
        with connect(rls_db, autocommit=True) as conn:
            return {(f.level, f.message) for f in security_findings(conn)
                    if f.check == "identity_default"}

    assert defaults() == set()
    with connect(rls_db, autocommit=True) as conn:
        conn.execute(sql.SQL("alter role {} set pgfunnel.principals = '[\"alice\"]'").format(
            sql.Identifier(app_user)))
        conn.execute(sql.SQL("alter database {} set pgfunnel.tenant = 'acme'").format(
            sql.Identifier(here)))
    with connect(app_dsn, autocommit=True) as c:
        # no reader set, and yet alice's document
        assert c.execute("select citekey from pgfunnel.document "
                         "where citekey = 'secret'").fetchall() == [("secret",)]
    found = defaults()
    assert [level for level, _ in sorted(found)] == ["error", "warning"]
    error = next(m for level, m in found if level == "error")
    warning = next(m for level, m in found if level == "warning")
    assert repr(app_user) in error and f"alter role {app_user} reset pgfunnel.principals" \
        in error
    assert f"alter database {here} reset pgfunnel.tenant" in warning
    with connect(rls_db, autocommit=True) as conn:
        conn.execute(sql.SQL("alter role {} reset pgfunnel.principals").format(
            sql.Identifier(app_user)))
        conn.execute(sql.SQL("alter database {} reset pgfunnel.tenant").format(
            sql.Identifier(here)))
    assert defaults() == set()


def test_a_function_in_public_does_not_stand_in_for_a_built_in(
        conn: psycopg.Connection[Any]) -> None:
    """Admin code called pg_advisory_xact_lock, pg_try_advisory_lock and
    has_table_privilege unqualified with untyped arguments: a function of the same name in
    public (which servers before 15 let every role create in) that fits the arguments
    better ran instead, as whoever ingested. Each is now pg_catalog's, its arguments typed."""
    from funnel_util import doc, ingest

    from pgfunnel import versions
    from pgfunnel.security import security_findings

    for signature in ("pg_advisory_xact_lock(integer)", "pg_advisory_xact_lock(smallint)",
                      "pg_try_advisory_lock(integer, smallint)",
                      "has_table_privilege(varchar, varchar, varchar)"):
        name = signature.split("(")[0]
        returns = "void" if name == "pg_advisory_xact_lock" else "boolean"
        conn.execute(f"create function public.{signature} returns {returns} "
                     f"language plpgsql as $$ begin raise exception 'hijacked: {name}'; end $$")
    ingest(conn, [doc("d", "A refund is issued within five days.")])
    with versions.writer_lock(conn, "t"):
        pass
    security_findings(conn)
    assert conn.execute("select count(*) from pgfunnel.chunk").fetchone() == (1,)


@pytest.mark.parametrize("mode", ["plain", "rls"])
def test_a_role_granted_nothing_is_told_what_gives_it_access_in_this_mode(
        db: str, mode: str) -> None:
    """A login role granted nothing on pgfunnel, searching or ingesting from Python, was
    told the advice true in both modes ('in RLS mode ... grant it pgfunnel_reader ...;
    without RLS those roles hold nothing here: connect as the role that owns the
    schema ...'), naming neither the mode nor the owner nor the role, where the CLI's
    line names all three. Each public entry point says it as the CLI does now."""
    from psycopg_pool import ConnectionPool

    from pgfunnel.errors import SCHEMA_GRANT_HINT
    from pgfunnel.ingest import Ingester, delete_documents, delete_documents_report, moved_files
    from pgfunnel.search import SearchParams
    from pgfunnel.versions import (
        activate,
        drop,
        drop_collection,
        list_versions,
        retire,
        search_pinned,
        writer_lock,
    )

    schema.init(db, rls=mode == "rls")
    ingest_docs(db, _corpus(3))
    role = f"pgf_app_{uuid.uuid4().hex[:8]}"
    with connect(db, autocommit=True) as su:
        su.execute(sql.SQL("create role {} login").format(sql.Identifier(role)))
        owner_row = su.execute("select pg_get_userbyid(nspowner) from pg_namespace "
                               "where nspname = 'pgfunnel'").fetchone()
    assert owner_row is not None
    owner = owner_row[0]
    if mode == "rls":
        expected = (f"permission denied for schema pgfunnel; role {role!r} was granted "
                    f"nothing on pgfunnel: as {owner!r} (the schema's owner, where it "
                    f"created the roles) or a superuser, run `grant pgfunnel_reader to "
                    f"{role}` to search")
    else:
        expected = (f"permission denied for schema pgfunnel; role {role!r} was granted "
                    f"nothing on pgfunnel, and this database is not in RLS mode "
                    f"(pgfunnel_reader holds nothing here): connect as {owner!r} (the "
                    f"schema's owner)")
    app_dsn = with_user(db, role)
    errors: dict[str, AccessError] = {}

    def caught(name: str, call: Any) -> None:
        with pytest.raises(AccessError) as exc:
            call()
        errors[name] = exc.value

    with _funnel(app_dsn) as funnel:
        caught("search", lambda: funnel.search(QUERY, query_embedding=QVEC, principals=[]))
        caught("search, text alone", lambda: funnel.search(QUERY, principals=[]))
        caught("check", lambda: funnel.check(QUERY, principals=[]))
        caught("active_model", funnel.active_model)
    with ConnectionPool(app_dsn, min_size=1, max_size=1) as pool:
        caught("search, pool", lambda: _funnel(pool).search(QUERY, principals=[]))
    with psycopg.connect(app_dsn, autocommit=True) as conn:
        p = SearchParams.build(principals=[])
        caught("candidates", lambda: _funnel(db).candidates(conn, QUERY, None, p))
        caught("search, own connection", lambda: _funnel(conn).search(QUERY, principals=[]))
        caught("Ingester", lambda: Ingester(conn))
        caught("delete_documents", lambda: delete_documents(conn, "default", ["pub000"]))
        caught("list_versions", lambda: list_versions(conn, "default"))

        def locked() -> None:
            with writer_lock(conn, "default"):
                pass

        caught("writer_lock", locked)
        caught("activate", lambda: activate(conn, "default", 1))
        caught("retire", lambda: retire(conn, "default", 1))
        caught("drop", lambda: drop(conn, "default", 1))
        caught("drop_collection", lambda: drop_collection(conn, "default"))
        caught("search_pinned", lambda: search_pinned(conn, "default", 1, [QUERY]))
        caught("delete_documents_report",
               lambda: delete_documents_report(conn, "default", ["pub000"]))
        caught("moved_files", lambda: moved_files(
            conn, "default", {"setup": Path("/srv/docs/guides/setup.md")}))
    for name, error in errors.items():
        said = str(error)
        assert said.startswith(expected), (name, said)
        assert SCHEMA_GRANT_HINT not in said and "docs/security.md" in said, (name, said)
        assert isinstance(error.__cause__, psycopg.errors.InsufficientPrivilege), name


@pytest.mark.parametrize("mode", ["plain", "rls"])
def test_translate_given_where_sqlalchemy_was_refused_says_this_modes_advice(
        db: str, mode: str) -> None:
    """A SQLAlchemy app's role granted nothing on pgfunnel: translate(exc) of the
    DBAPIError gave the advice of both modes at once ('in RLS mode ...; without RLS ...'),
    having no connection to read the mode on. Given the session, its connection or the
    engine (bind=), it reads them on a connection of the engine's own and says the
    advice for this database's mode, naming the role and the owner, as Funnel does."""
    from sqlalchemy import select
    from sqlalchemy.exc import DBAPIError
    from sqlalchemy.orm import Session

    from pgfunnel.errors import SCHEMA_GRANT_HINT, translate
    from pgfunnel.sqla import engine_from_dsn, funnel_search_tvf

    schema.init(db, rls=mode == "rls")
    ingest_docs(db, _corpus(3))
    role = f"pgf_sa_{uuid.uuid4().hex[:8]}"
    with connect(db, autocommit=True) as su:
        su.execute(sql.SQL("create role {} login").format(sql.Identifier(role)))
        owner_row = su.execute("select pg_get_userbyid(nspowner) from pg_namespace "
                               "where nspname = 'pgfunnel'").fetchone()
    assert owner_row is not None
    said_for_mode = (
        f"role {role!r}{LOGIN_ROLE_NOTE} was granted nothing on pgfunnel: as "
        f"{owner_row[0]!r} (the schema's owner, where it created the roles) or a superuser, "
        f"run `grant pgfunnel_reader to {role}`" if mode == "rls" else
        f"role {role!r}{LOGIN_ROLE_NOTE} was granted nothing on pgfunnel, and this database "
        "is not in RLS "
        f"mode (pgfunnel_reader holds nothing here): connect as {owner_row[0]!r}")
    stmt = select(funnel_search_tvf(QUERY, k=3, principals=[]).c.citekey)
    engine = engine_from_dsn(with_user(db, role))
    said: dict[str, str] = {}
    try:
        with Session(engine) as session:
            with pytest.raises(DBAPIError) as caught:
                session.execute(stmt).all()
            said["none"] = str(translate(caught.value))
            # the session's transaction is aborted, rolled back or not: read elsewhere
            said["session, aborted"] = str(translate(caught.value, bind=session))
            session.rollback()
            said["session"] = str(translate(caught.value, bind=session))
            said["engine"] = str(translate(caught.value, bind=engine))
        with engine.connect() as sa_conn:
            said["connection"] = str(translate(caught.value, bind=sa_conn))
    finally:
        engine.dispose()
    assert SCHEMA_GRANT_HINT in said.pop("none")
    for bind, text in said.items():
        assert text.startswith(f"permission denied for schema pgfunnel; {said_for_mode}"), \
            (bind, text)
        assert SCHEMA_GRANT_HINT not in text, (bind, text)


def _refused_after_set_role(db: str, login_dsn: str, login: str, control: bool) -> str:
    """translate(exc, bind=session) of a search refused after the session's SET ROLE to a
    new role granted to ``login`` and nothing else; ``control``: the login role searches
    first, as itself."""
    from sqlalchemy import select, text
    from sqlalchemy.exc import DBAPIError
    from sqlalchemy.orm import Session

    from pgfunnel.errors import translate
    from pgfunnel.sqla import engine_from_dsn, funnel_search_tvf

    set_to = f"pgf_set_{uuid.uuid4().hex[:8]}"
    with connect(db, autocommit=True) as su:
        su.execute(sql.SQL("create role {}").format(sql.Identifier(set_to)))
        su.execute(sql.SQL("grant {} to {}").format(sql.Identifier(set_to),
                                                    sql.Identifier(login)))
    stmt = select(funnel_search_tvf(QUERY, k=3, principals=[]).c.citekey)
    engine = engine_from_dsn(login_dsn)
    try:
        with Session(engine) as session:
            if control:
                session.execute(stmt).all()
            # SET ROLE, with the role's name a bound value
            session.execute(text("select pg_catalog.set_config('role', :r, false)"),
                            {"r": set_to})
            with pytest.raises(DBAPIError) as caught:
                session.execute(stmt).all()
            return str(translate(caught.value, bind=session))
    finally:
        engine.dispose()


def test_translate_with_bind_says_it_names_the_login_role_not_a_set_role(db: str) -> None:
    """An app that ran SET ROLE in its transaction was refused as the role it set, and
    translate(exc, bind=session) named the engine's login role as the one granted nothing
    (it reads on a connection of its own; the refusal names no role): the advice now says
    the role it names is the login role, and that a SET ROLE's role is the one to grant."""
    from pgfunnel.errors import SCHEMA_GRANT_HINT

    schema.init(db)
    ingest_docs(db, _corpus(3))
    login = f"pgf_sa_{uuid.uuid4().hex[:8]}"
    with connect(db, autocommit=True) as su:
        su.execute(sql.SQL("create role {} login").format(sql.Identifier(login)))
    said = _refused_after_set_role(db, with_user(db, login), login, control=False)
    assert SCHEMA_GRANT_HINT not in said, said
    assert said.startswith(f"permission denied for schema pgfunnel; role {login!r}"
                           f"{LOGIN_ROLE_NOTE} was granted nothing on pgfunnel"), said
    assert "SET ROLE" in LOGIN_ROLE_NOTE and "login role" in LOGIN_ROLE_NOTE


def test_translate_with_bind_neither_waits_on_the_apps_pool_nor_raises_on_its_own(
        db: str) -> None:
    """translate(exc, bind=...) read the mode on a connection from the application's own
    pool: where the pool had none free (the refused SQLAlchemy connection still open on an
    engine of one), the error waited out pool_timeout before it was told, with the
    advice of both modes; and a Session bound to no engine, or a scoped_session, raised
    SQLAlchemy's UnboundExecutionError from translate() or was not read at all. A read
    that waits on the full pool times out and falls back to both modes' advice, which the
    assertions below refuse: no clock is needed to tell."""
    from sqlalchemy import select
    from sqlalchemy.exc import DBAPIError
    from sqlalchemy.orm import Session, scoped_session, sessionmaker

    from pgfunnel.errors import SCHEMA_GRANT_HINT, translate
    from pgfunnel.sqla import engine_from_dsn, funnel_search_tvf

    schema.init(db)
    ingest_docs(db, _corpus(3))
    role = f"pgf_sa_{uuid.uuid4().hex[:8]}"
    with connect(db, autocommit=True) as su:
        su.execute(sql.SQL("create role {} login").format(sql.Identifier(role)))
    for_mode = (f"role {role!r}{LOGIN_ROLE_NOTE} was granted nothing on pgfunnel, and this "
                "database is not in RLS mode")
    stmt = select(funnel_search_tvf(QUERY, k=3, principals=[]).c.citekey)
    # one connection, none in overflow: the refused one is the pool's only connection, and
    # a checkout waiting for it gives up after pool_timeout (then the mode goes unread)
    engine = engine_from_dsn(with_user(db, role), pool_size=1, max_overflow=0,
                             pool_timeout=2)
    said: dict[str, str] = {}
    try:
        with engine.connect() as sa_conn:
            with pytest.raises(DBAPIError) as caught:
                sa_conn.execute(stmt).all()
            for name, bind in (("connection", sa_conn), ("engine", engine)):
                said[name] = str(translate(caught.value, bind=bind))
            sa_conn.rollback()
        scoped = scoped_session(sessionmaker(bind=engine))
        said["scoped_session"] = str(translate(caught.value, bind=scoped))
        scoped.remove()
        # bound to nothing: nothing to read the mode on, and no SQLAlchemy error of its own
        unbound = translate(caught.value, bind=Session())
    finally:
        engine.dispose()
    assert isinstance(unbound, AccessError) and SCHEMA_GRANT_HINT in str(unbound), unbound
    for name, text in said.items():
        assert for_mode in text and SCHEMA_GRANT_HINT not in text, (name, text)


def test_turning_row_level_security_off_takes_back_what_the_reader_role_reads(
        app_dsn: str, rls_db: str) -> None:
    """`disable_rls` switched the policies off and left pgfunnel_reader its grants, so
    every member of that cluster-wide role read every row with no policy to hold it:
    the text of documents it may not see, and every other reader's logged query text
    and trace. Without RLS the group roles hold nothing (docs/security.md); turning it
    off now takes the reader's table privileges back, and `init --rls` gives them again."""
    from pgfunnel.doctor import check_privileges
    from pgfunnel.security import disable_rls, enable_rls

    with connect(app_dsn, autocommit=True) as conn:
        alice = _funnel(conn).search("refund invoice question alice", query_embedding=QVEC,
                                     principals=["alice"], k=3, trace=True)
        assert alice.search_id is not None and _keys(alice)[0] == "secret"
        # control: under the policies bob reads neither
        with conn.transaction():
            conn.execute("select set_config('pgfunnel.principals', '[\"bob\"]', true)")
            assert conn.execute("select count(*) from pgfunnel.search_log").fetchone() == (0,)
            assert conn.execute("select count(*) from pgfunnel.document "
                                "where citekey = 'secret'").fetchone() == (0,)
    with connect(rls_db, autocommit=True) as owner:
        with owner.transaction():
            disable_rls(owner)
        findings = check_privileges(owner)
        assert [(f.level, f.message.split(" holds")[0]) for f in findings
                if "pgfunnel_reader" in f.message] == [("info", "pgfunnel_reader")], findings
    with connect(app_dsn, autocommit=True) as conn:
        for table in ("search_log", "search_trace", "document", "chunk"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(sql.SQL("select * from pgfunnel.{}").format(sql.Identifier(table)))
        with pytest.raises(AccessError, match="not in RLS mode"):
            _funnel(conn).search(QUERY, principals=["bob"])
    with connect(rls_db, autocommit=True) as owner, owner.transaction():
        enable_rls(owner)
    with connect(app_dsn, autocommit=True) as conn:
        assert _keys(_funnel(conn).search(QUERY, query_embedding=QVEC, principals=["alice"],
                                          k=3))[0] == "secret"


def test_translate_with_bind_does_not_say_a_login_role_that_may_use_pgfunnel_has_nothing(
        db: str) -> None:
    """A login role that may search (a member of pgfunnel_reader) ran SET ROLE to a role
    granted nothing on pgfunnel, and was refused as that role: translate(exc, bind=...)
    read on the engine's own connection said the login role 'was granted nothing on
    pgfunnel' and told the owner to grant it what it already holds. It now checks the
    login role's access, and where it holds USAGE says the refused statement ran as
    another role, the one to grant."""
    schema.init(db, rls=True)
    ingest_docs(db, _corpus(3))
    login_dsn = create_app_role(db)
    login = conninfo_part(login_dsn, "user")
    # control: as itself the login role searches
    said = _refused_after_set_role(db, login_dsn, login, control=True)
    assert said.startswith("permission denied for schema pgfunnel; "), said
    assert f"role {login!r}{LOGIN_ROLE_NOTE} was granted nothing" not in said, said
    assert (f"role {login!r} (the engine's login role) may use schema pgfunnel, so the "
            "statement refused ran as another role") in said, said
    assert f"grant pgfunnel_reader to {login}`" not in said, said
    assert "grant pgfunnel_reader to THAT_ROLE`" in said, said


@pytest.mark.parametrize("mode", ["plain", "rls"])
def test_the_no_chunk_holds_code_notice_counts_only_chunks_the_searcher_may_see(
        request: pytest.FixtureRequest, rls_db: str, mode: str) -> None:
    """The notice `no chunk of collection 'C' holds 4029` read the collection-wide
    document frequency, hidden chunks included: it went away for every searcher once a
    chunk they may not see held 4029, so an application's end user could test a guessed
    code (a tenant's project number) through what a search said. It is now said of the
    chunks the search may see: the same for bob before and after alice's chunk holding
    the code is ingested, and not for alice (the control)."""
    if mode == "rls":
        dsn = request.getfixturevalue("app_dsn")
    else:
        from pgfunnel.security import disable_rls

        with connect(rls_db, autocommit=True) as owner, owner.transaction():
            disable_rls(owner)
        dsn = rls_db

    def notices(query: str, who: list[str]) -> list[str]:
        with connect(dsn, autocommit=True) as conn:
            said = _funnel(conn).search(query, principals=who, k=5).notices
        return [n for n in said if "holds" in n]

    queries = ("refund 4029", "refund section-4029", "4029")
    before = {q: notices(q, ["bob"]) for q in queries}
    assert before["refund 4029"] == ["pgfunnel: no chunk of collection 'default' holds 4029; "
                                     "the lexical leg ranked the query's other words"]
    ingest_docs(rls_db, [Doc("codebook", "Project 4029 refund codes, section 4029.",
                             readers=["alice"])], seed=7)
    assert notices("refund 4029", ["alice"]) == []  # control: alice's chunk holds it
    after = {q: notices(q, ["bob"]) for q in queries}
    assert after == before


def test_a_reader_logs_a_search_only_through_the_columns_a_traced_search_writes(
        rls_db: str, app_conn: psycopg.Connection[Any]) -> None:
    """pgfunnel_reader held INSERT on the whole of search_log, so a reader could write its
    own rows with an `at` of its choosing (2999-01-01): `versions compare --last N`, which
    takes the newest searches by `at`, then replayed the reader's chosen texts before every
    real search, for good. INSERT is now granted on the columns a traced search writes;
    `at`, `id` and `logged_by` take their defaults."""
    from pgfunnel.doctor import check_privileges
    from pgfunnel.security import enable_rls

    funnel = _funnel(app_conn)
    traced = funnel.search(QUERY, query_embedding=QVEC, principals=["bob"], k=3, trace=True)
    assert traced.search_id is not None  # a traced search still logs itself
    forged = {"at": "'2999-01-01'", "logged_by": "current_user",
              "id": "nextval('pgfunnel.search_log_id_seq')"}
    for column, value in forged.items():
        with pytest.raises(psycopg.errors.InsufficientPrivilege), app_conn.transaction():
            app_conn.execute("select set_config('pgfunnel.principals', '[\"bob\"]', true)")
            app_conn.execute(sql.SQL(
                "insert into pgfunnel.search_log ({}, collection_id, index_version_id, "
                "config_hash, config, query_text, principals) select " + value
                + ", collection_id, index_version_id, 'x', '{{}}', 'forged', '{{bob}}' "
                "from pgfunnel.search_log where id = %s").format(sql.Identifier(column)),
                (traced.search_id,))
    # an earlier release's grant on the whole table is taken back by init and migrate
    with connect(rls_db, autocommit=True) as owner:
        owner.execute("grant insert on pgfunnel.search_log to pgfunnel_reader")
        with owner.transaction():
            enable_rls(owner)
        assert owner.execute("select has_table_privilege('pgfunnel_reader', "
                             "'pgfunnel.search_log', 'INSERT')").fetchone() == (False,)
        assert [f.level for f in check_privileges(owner)] == ["info"]
    assert funnel.search(QUERY, principals=["bob"], k=3, trace=True).search_id is not None


def test_the_code_notice_counts_visible_chunks_past_eight_posting_partitions(
        plain_db: str) -> None:
    """Past 8 posting partitions the notice's check plans each statement per call (the
    other branch from the test above): bob's notice is the same before and after a chunk
    hidden from him holds the code, and alice's (the control) goes away."""
    for i in range(9):
        ingest_docs(plain_db, [Doc(f"x{i}", "filler text")], collection=f"c{i}")
    with connect(plain_db, autocommit=True) as conn:
        assert conn.execute("select count(*) > 8 from pg_inherits where inhparent = "
                            "'pgfunnel.posting'::regclass").fetchone() == (True,)

    def notices(query: str, who: list[str]) -> list[str]:
        with connect(plain_db, autocommit=True) as conn:
            said = _funnel(conn).search(query, principals=who, k=5).notices
        return [n for n in said if "holds" in n]

    before = [notices(q, ["bob"]) for q in ("refund 4029", "refund section-4029")]
    assert before[0]
    ingest_docs(plain_db, [Doc("codebook", "Project 4029 refund codes, section 4029.",
                               readers=["alice"])], seed=7)
    assert notices("refund 4029", ["alice"]) == []
    assert [notices(q, ["bob"]) for q in ("refund 4029", "refund section-4029")] == before


def test_a_reader_calling_the_analyzer_helper_itself_is_held_to_analyze_eachs_limit(
        db: str) -> None:
    """Readers hold EXECUTE on pgfunnel._analyze_pass (analyze_each and every search run
    it as the caller), so a reader's own `select ... from pgfunnel._analyze_pass(...)`
    analysed text of any length past analyze_each's 100,000 characters (11 s a megabyte
    of dotted words). A role that may not write the index (pgfunnel.lexical) is now
    refused past that limit, naming `inputs`, the limit and the length given (22023,
    ConfigError in Python); a writer, whose ingest analyses a batch's distinct words in
    one call, is not."""
    from pgfunnel.errors import ConfigError, translate

    reader_dsn = create_app_role(db)
    writer_dsn = create_app_role(db, writer=True)
    stmt = "select count(*) from pgfunnel._analyze_pass(%s, 'english_v8', '{}')"
    past = ["refund " * 15_000, "x.y"]
    with connect(reader_dsn) as reader:
        with pytest.raises(psycopg.errors.InvalidParameterValue) as err:
            reader.execute(stmt, (past,))
        reader.rollback()
        said = str(err.value).splitlines()[0]
        assert said == ("inputs: hold 105003 characters in all; the limit is 100000 for a "
                        "role that may not write the index (pgfunnel.lexical), as for analyze_each "
                        "(split the texts over several calls)"), said
        translated = translate(err.value)
        assert isinstance(translated, ConfigError) and translated.parameter == "inputs"
        assert "hold 105003 characters in all; the limit is 100000" in str(translated)
        # at the limit: answered
        assert reader.execute(stmt, (["refund " * 14_285 + "abcde"],)).fetchone() == (14_286,)
    with connect(writer_dsn) as writer:
        [(rows,)] = writer.execute(stmt, (past,)).fetchall()
        assert rows > 15_000
        # analyze_each's limit, which it has _analyze_pass check (bound_all) so its inputs
        # are counted once, binds a writer too; a reader passing false is still bound
        # (above: false is the default)
        with pytest.raises(psycopg.errors.InvalidParameterValue) as err:
            writer.execute("select count(*) from pgfunnel._analyze_pass(%s, 'english_v8', "
                           "'{}', bound_all => true)", (past,))
        writer.rollback()
        assert str(err.value).splitlines()[0] == (
            "inputs: hold 105003 characters in all; the limit is 100000, as for analyze's "
            "input (split the texts over several calls)")
