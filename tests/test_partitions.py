"""Postings partitioned by index version: a version's own partition, indexed once after its
first postings; the same lexical results with or without that index; a dropped version
takes its partition along; and migration 0005 both ways with data in the tables."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import psycopg
import pytest
from funnel_util import ingest as ingest_records
from psycopg import sql

from pgfunnel import schema, security
from pgfunnel.db import connect
from pgfunnel.doctor import check_active_indexes
from pgfunnel.ingest import Ingester, posting_index_name, posting_partition_name
from pgfunnel.sources import DocumentRecord

QUERIES = ("refund policy", "err 4029 billing", "password reset link", "invoice tax")


def _records() -> list[DocumentRecord]:
    topics = ["refund policy for monthly plans", "error ERR-4029 when billing fails",
              "reset your password with the emailed link", "invoice and tax details",
              "billing cycle and plan changes", "account security and passwords"]
    return [DocumentRecord(f"doc{i}", f"{topics[i % len(topics)]}. Note {i} on "
                           f"{topics[(i * 7) % len(topics)]}.") for i in range(60)]


def _active_version_id(conn: psycopg.Connection[Any], collection: str = "t") -> int:
    row = conn.execute("select v.id from pgfunnel.index_version v join pgfunnel.collection c "
                       "on c.id = v.collection_id where c.name = %s and v.state = 'active'",
                       (collection,)).fetchone()
    assert row is not None
    return int(row[0])


def _partitions(conn: psycopg.Connection[Any]) -> dict[str, str]:
    """Each partition of pgfunnel.posting with its bound."""
    return {str(name): str(bound) for name, bound in conn.execute(
        "select c.relname, pg_get_expr(c.relpartbound, c.oid) from pg_inherits i "
        "join pg_class c on c.oid = i.inhrelid "
        "where i.inhparent = 'pgfunnel.posting'::regclass").fetchall()}


def _indexes(conn: psycopg.Connection[Any], table: str) -> list[str]:
    return [str(r[0]) for r in conn.execute(
        "select indexrelid::regclass::text from pg_index where indrelid = %s::regclass",
        (f"pgfunnel.{table}",)).fetchall()]


def _lexical(conn: psycopg.Connection[Any], collection: str = "t") -> list[Any]:
    # the first 10 of the lexical pool, read through _pool rather than funnel_search: the
    # schema is downgraded below chunk columns that this release's result rows carry
    # (section_path, 0008), while the pool reads only what 0004 already had
    return [conn.execute(
        "select p.chunk_ids[1:10], p.lexical_scores[1:10] from pgfunnel._pool("
        "%s, null, 10, %s, '{}', null, null, now(), null, 'minmax', 60, null, null, null, "
        "4, 3, 100, 1.2, 0.75) p", (q, collection)).fetchone() for q in QUERIES]


def _posting_security(conn: psycopg.Connection[Any]) -> Any:
    """pgfunnel.posting's kind (r plain, p partitioned), row security on, forced."""
    return conn.execute("select relkind, relrowsecurity, relforcerowsecurity from pg_class "
                        "where oid = 'pgfunnel.posting'::regclass").fetchone()


def _posting_policies(conn: psycopg.Connection[Any]) -> list[str]:
    return sorted(str(r[0]) for r in conn.execute(
        "select policyname from pg_policies where schemaname = 'pgfunnel' "
        "and tablename = 'posting'").fetchall())


def test_a_version_has_its_own_partition_indexed_after_its_first_ingest(
        conn: psycopg.Connection[Any]) -> None:
    ingest_records(conn, _records())
    vid = _active_version_id(conn)
    part = posting_partition_name(vid)
    assert _partitions(conn) == {part: f"FOR VALUES IN ({vid})"}
    # the partition holds every posting of the version, and the index was built after them
    n_part = conn.execute(f"select count(*) from pgfunnel.{part}").fetchone()
    n_all = conn.execute("select count(*) from pgfunnel.posting where index_version_id = %s",
                         (vid,)).fetchone()
    assert n_part is not None and n_all is not None and n_part[0] == n_all[0] > 60
    assert _indexes(conn, part) == [f"pgfunnel.{posting_index_name(vid)}"]
    # the lexical leg reads it by that index
    plan = conn.execute(
        "explain (format json) select chunk_id, tf from pgfunnel.posting "
        "where index_version_id = %s and term = 'refund'", (vid,)).fetchone()
    assert plan is not None and posting_index_name(vid) in str(plan[0])
    # a later ingest into the version writes through the index that exists
    ingest_records(conn, [DocumentRecord("late", "a refund arrives late")])
    assert _indexes(conn, part) == [f"pgfunnel.{posting_index_name(vid)}"]
    hit = conn.execute("select count(*) from pgfunnel.posting p join pgfunnel.chunk c "
                       "on c.id = p.chunk_id join pgfunnel.document d on d.id = c.document_id "
                       "where d.citekey = 'late' and p.term = 'late'").fetchone()
    assert hit == (1,)


def test_lexical_results_do_not_depend_on_the_posting_index(
        conn: psycopg.Connection[Any]) -> None:
    vectors = ingest_records(conn, _records())
    vid = _active_version_id(conn)
    indexed = _lexical(conn)
    assert all(ids for ids, _ in indexed)
    # as after an ingest that stopped before building it
    conn.execute(f"drop index pgfunnel.{posting_index_name(vid)}")
    assert _lexical(conn) == indexed
    warned = [f.message for f in check_active_indexes(conn) if f.level == "warning"]
    assert any(posting_partition_name(vid) in m and "pgfunnel ingest" in m for m in warned)
    # the next ingest, even of unchanged documents, builds it
    Ingester(conn, "t").ingest(_records()[:1], vectors={"doc0": vectors["doc0"]})
    assert _indexes(conn, posting_partition_name(vid)) == [
        f"pgfunnel.{posting_index_name(vid)}"]
    assert not [f for f in check_active_indexes(conn) if f.level == "warning"]
    assert _lexical(conn) == indexed


def test_reindex_indexes_the_new_partition_and_drop_removes_it(
        sample_db: str, embedder: Any) -> None:
    from pgfunnel import versions

    with connect(sample_db, autocommit=True) as conn:
        result = versions.reindex(conn, "default", analyzer="simple_v2", embedder=embedder)
        part = posting_partition_name(result.version_id)
        assert part in _partitions(conn)
        assert _indexes(conn, part) == [f"pgfunnel.{posting_index_name(result.version_id)}"]
        assert "posting_index" in result.seconds
        versions.drop(conn, "default", result.version)
        assert part not in _partitions(conn)
        assert conn.execute("select to_regclass(%s)", (f"pgfunnel.{part}",)).fetchone() == (None,)
        # the active version's postings are untouched
        active = _active_version_id(conn, "default")
        left = conn.execute("select count(*) from pgfunnel.posting where index_version_id = %s",
                            (active,)).fetchone()
        assert left is not None and left[0] > 1000


def test_migration_0005_both_ways_keeps_postings_policies_and_results(db: str) -> None:
    schema.init(db, rls=True)
    with connect(db, autocommit=True) as conn:
        ingest_records(conn, _records())
        vid = _active_version_id(conn)
        total = conn.execute("select count(*) from pgfunnel.posting").fetchone()
        before = _lexical(conn)
        assert all(ids and len(ids) >= 2 for ids, _ in before)
        policies = _posting_policies(conn)
        assert policies and security.rls_enabled(conn)

    # down: one plain table again, holding the partition's rows, with its key and policies
    schema.downgrade(db, "0004")
    with connect(db, autocommit=True) as conn:
        kind = _posting_security(conn)
        assert kind == ("r", True, True)
        assert conn.execute("select count(*) from pgfunnel.posting").fetchone() == total
        assert _indexes(conn, "posting") == ["pgfunnel.posting_pkey"]
        assert _posting_policies(conn) == policies
        assert _lexical(conn) == before
        # a version made under 0004 has no partition to go to later
        conn.execute("insert into pgfunnel.index_version (collection_id, version, "
                     "embedding_model, dimensions, analyzer, state) select collection_id, 99, "
                     "embedding_model, dimensions, analyzer, 'retired' "
                     "from pgfunnel.index_version where id = %s", (vid,))

    # up: the old table becomes posting_legacy for the versions it holds; nothing is copied
    schema.upgrade(db)
    with connect(db, autocommit=True) as conn:
        parts = _partitions(conn)
        assert parts["posting_legacy"] == f"FOR VALUES IN ({vid})"
        new = conn.execute("select id from pgfunnel.index_version where version = 99"
                           ).fetchone()
        assert new is not None and parts[posting_partition_name(new[0])] == (
            f"FOR VALUES IN ({new[0]})")
        assert conn.execute("select count(*) from pgfunnel.posting").fetchone() == total
        kind = _posting_security(conn)
        assert kind == ("p", True, True)
        assert _posting_policies(conn) == policies
        assert _lexical(conn) == before
        # the legacy version still takes new documents, and the schema matches the models
        ingest_records(conn, [DocumentRecord("after", "refund after the upgrade")],
                       vectors={"after": np.ones((1, 16), dtype=np.float32) / 4})
        total = conn.execute("select count(*) from pgfunnel.posting").fetchone()
        after = _lexical(conn)
    assert schema.autogenerate_diff(db) == []

    # down again, now from posting_legacy: it is the table again, under the parent's rules
    schema.downgrade(db, "0004")
    with connect(db, autocommit=True) as conn:
        kind = _posting_security(conn)
        assert kind == ("r", True, True)
        assert conn.execute("select count(*) from pgfunnel.posting").fetchone() == total
        assert _posting_policies(conn) == policies
        assert _lexical(conn) == after


def _posting_access(conn: psycopg.Connection[Any]) -> Any:
    """pgfunnel.posting's policies (name, permissive or restrictive, command, roles, using)
    and the privileges granted on it (grantee, privilege, grantable), grantor aside."""
    policies = conn.execute(
        "select policyname, permissive, cmd, roles::text[], qual from pg_policies "
        "where schemaname = 'pgfunnel' and tablename = 'posting' order by 1").fetchall()
    grants = conn.execute(
        "select distinct g.rolname, a.privilege_type, a.is_grantable from pg_class c, "
        "aclexplode(c.relacl) a join pg_roles g on g.oid = a.grantee "
        "where c.oid = 'pgfunnel.posting'::regclass and a.grantee <> c.relowner "
        "order by 1, 2").fetchall()
    return policies, grants


def test_migration_0005_both_ways_keeps_restrictive_policies_and_grant_options(db: str) -> None:
    import uuid

    from psycopg import sql

    tag = uuid.uuid4().hex[:8]
    # names that only survive when quoted; pgf_app_ roles are dropped after the test
    reader, heir = f'pgf_app_{tag} "r"', f"pgf_app_{tag}_h"
    narrow, wide = 'narrow "v"', "wide"
    with connect(db, autocommit=True) as conn:
        ingest_records(conn, _records())
    # down to a plain table, then up again: posting_legacy, then down from it
    schema.downgrade(db, "0004")
    with connect(db, autocommit=True) as conn:
        r, h = sql.Identifier(reader), sql.Identifier(heir)
        for role in (r, h):
            conn.execute(sql.SQL("create role {}").format(role))
        conn.execute(sql.SQL("grant usage on schema pgfunnel to {}").format(r))
        conn.execute(sql.SQL("grant select on pgfunnel.posting to {} with grant option"
                             ).format(r))
        conn.execute(sql.SQL("set role {}").format(r))
        conn.execute(sql.SQL("grant select on pgfunnel.posting to {}").format(h))
        conn.execute("reset role")
        conn.execute(sql.SQL("create policy {} on pgfunnel.posting as restrictive for select "
                             "to {} using (index_version_id < 0)").format(
                                 sql.Identifier(narrow), r))
        conn.execute(sql.SQL("create policy {} on pgfunnel.posting as permissive for select "
                             "to {}, {} using (true)").format(sql.Identifier(wide), r, h))
        access = _posting_access(conn)
        policies, grants = access
        assert [(p[0], p[1]) for p in policies if p[0] in (narrow, wide)] == [
            (narrow, "RESTRICTIVE"), (wide, "PERMISSIVE")]
        assert (reader, "SELECT", True) in grants and (heir, "SELECT", False) in grants

    schema.upgrade(db)
    with connect(db, autocommit=True) as conn:
        assert _posting_security(conn)[0] == "p"
        assert _posting_access(conn) == access

    schema.downgrade(db, "0004")
    with connect(db, autocommit=True) as conn:
        assert _posting_security(conn)[0] == "r"
        assert _posting_access(conn) == access


def test_under_rls_an_ingest_role_adds_documents_and_readers_get_no_partition(
        db: str) -> None:
    from _security_helpers import create_app_role

    schema.init(db, rls=True)
    with connect(db, autocommit=True) as conn:
        ingest_records(conn, _records())
        before = conn.execute("select count(*) from pgfunnel.posting").fetchone()
    writer = create_app_role(db, writer=True)
    with connect(writer, autocommit=True) as conn:
        ingest_records(conn, [DocumentRecord("w1", "refund written by the ingest job")],
                       vectors={"w1": np.ones((1, 16), dtype=np.float32) / 4})
        after = conn.execute("select count(*) from pgfunnel.posting").fetchone()
        assert before is not None and after is not None and after[0] > before[0]
        vid = _active_version_id(conn)
    # a reader is granted the parent, where the policies are, and not its partitions
    with connect(create_app_role(db), autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(f"select count(*) from pgfunnel.{posting_partition_name(vid)}")
        assert conn.execute("select count(*) from pgfunnel.posting").fetchone() == (0,)


def test_a_version_row_never_outlives_a_failed_partition(conn: psycopg.Connection[Any]) -> None:
    from pgfunnel.errors import PgfunnelError
    from pgfunnel.ingest import create_version, get_or_create_collection

    coll = get_or_create_collection(conn, "t")
    seq = conn.execute("select pg_get_serial_sequence('pgfunnel.index_version', 'id')"
                       ).fetchone()
    assert seq is not None and seq[0]
    upcoming = conn.execute("select case when is_called then last_value + 1 else last_value "
                            f"end from {seq[0]}").fetchone()
    assert upcoming is not None
    # a stray table where the next version's partition would go
    conn.execute(f"create table pgfunnel.{posting_partition_name(upcoming[0])} (x int)")
    try:
        create_version(conn, coll, "random-unit", 16, "english_v2", "active")
    except (psycopg.Error, PgfunnelError):
        pass
    else:
        raise AssertionError("create_version should have failed")
    assert conn.execute("select count(*) from pgfunnel.index_version").fetchone() == (0,)


def _posting_partitions_locked(conn: psycopg.Connection[Any],
                               search: Callable[[psycopg.Connection[Any]], object]) -> int:
    """How many posting partitions this session holds a lock on after ``search(conn)``
    runs in a transaction of its own (the locks last until it ends)."""
    with conn.transaction():
        search(conn)
        row = conn.execute(
            "select count(*) from pg_locks l join pg_inherits i on i.inhrelid = l.relation "
            "where l.pid = pg_backend_pid() "
            "and i.inhparent = 'pgfunnel.posting'::regclass").fetchone()
    assert row is not None
    return int(row[0])


def _add_empty_versions(conn: psycopg.Connection[Any], n: int) -> None:
    """A collection per customer: ``n`` more collections, each with an empty active
    version (and its posting partition)."""
    from pgfunnel.ingest import create_version, get_or_create_collection

    before = conn.execute("select count(*) from pg_inherits "
                          "where inhparent = 'pgfunnel.posting'::regclass").fetchone()
    assert before is not None
    for i in range(n):
        with conn.transaction():
            coll = get_or_create_collection(conn, f"customer{i}")
            create_version(conn, coll, "random-unit", 16, "english_v1", "active")
    assert conn.execute("select count(*) from pg_inherits "
                        "where inhparent = 'pgfunnel.posting'::regclass").fetchone() == (
                            before[0] + n,)


def test_with_many_partitions_a_search_locks_and_scores_its_own_partition_only(
        conn: psycopg.Connection[Any]) -> None:
    # a collection per customer: the scoring statement's cached generic plan locked and
    # set up every version's partition before pruning to one (400 versions: 8 ms of a
    # lexical leg that takes 0.9); past a few partitions it is planned per search
    from funnel_util import doc, ingest, lexical

    ingest(conn, [doc(f"d{i}", f"refund policy for plan {i} annual refund")
                  for i in range(30)], collection="t")
    # four terms, one and two (each count has its own scoring statement)
    queries = ("annual refund plan 7", "refund", "policy 7")
    few = {q: lexical(conn, q, "t", k=20) for q in queries}
    assert all(few.values())
    _add_empty_versions(conn, 12)
    for q in queries:
        search = partial(lexical, query=q, collection="t", k=20)
        assert _posting_partitions_locked(conn, search) == 1
        # the statement planned per search scores exactly as the cached one did
        assert lexical(conn, q, "t", k=20) == few[q], q


def test_with_many_partitions_a_filtered_search_samples_and_probes_its_own_partition_only(
        conn: psycopg.Connection[Any]) -> None:
    # alice reads one document in a hundred of 5,000 that all hold the four query words
    # (20,000 postings and more): the lexical leg samples the visibility of the rarest
    # term's first chunks, lists the 50 visible ones and probes their postings. Those two
    # statements read the posting table too; with many partitions each is planned per
    # search, like the scoring statement, or its cached plan locks every partition
    import random

    from funnel_util import active, doc, ingest, lexical

    rng = random.Random(3)
    words = ["zorp", "quib", "flenn", "mork"]
    ingest(conn, [doc(f"c{i}", " ".join(words + rng.choices(words + ["lorem", "ipsum"],
                                                            k=rng.randint(2, 12))),
                      readers=["alice"] if i % 100 == 0 else ["bob"]) for i in range(5000)],
           collection="t")
    query = "zorp quib flenn mork"
    vid, cid, _ = active(conn, "t")
    terms = conn.execute("select pgfunnel.analyze(%s, 'english_v1', true)", (query,)
                         ).fetchone()
    assert terms is not None and len(terms[0]) == 4
    sum_df = conn.execute("select sum(df) from pgfunnel.term_stat where index_version_id = %s "
                          "and term = any(%s)", (vid, terms[0])).fetchone()
    assert sum_df is not None and sum_df[0] >= 20000

    def share(c: psycopg.Connection[Any]) -> Any:
        return c.execute(
            "select visible_share from pgfunnel._lexical_hits(%s, %s, 40, 1.2, 0.75, '{alice}', "
            "null, null, now(), null, %s)", (vid, terms[0], cid)).fetchone()

    def search(c: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
        return lexical(c, query, "t", k=20, principals=["alice"])

    # the sample found the visible chunks few and all of them were listed (the share is
    # exact only then), so the postings were probed
    assert share(conn) == (50 / 5000,)
    few = search(conn)
    assert len(few) == 20 and {r[1] for r in few} <= {f"c{i}" for i in range(0, 5000, 100)}
    _add_empty_versions(conn, 12)
    assert _posting_partitions_locked(conn, share) == 1
    assert _posting_partitions_locked(conn, search) == 1
    assert share(conn) == (50 / 5000,)
    assert search(conn) == few


def test_with_many_partitions_a_hybrid_search_probes_its_best_match_in_its_own_partition_only(
        conn: psycopg.Connection[Any]) -> None:
    # with both legs and default weights the funnel probes which query terms the best
    # lexical match holds (the weights swap when it holds under 0.4 of the query's idf):
    # a read of the posting table, planned per search like the lexical leg's
    from funnel_util import doc, ingest, unit

    ingest(conn, [doc(f"d{i}", f"refund policy for plan {i} annual refund")
                  for i in range(30)], collection="t")
    qvec = unit(np.random.default_rng(5), 16)
    query = "annual refund quasar"

    def weights(c: psycopg.Connection[Any]) -> Any:
        return c.execute(
            "select p.weights_used from pgfunnel._pool(%s, %s, 10, 't', '{}', null, null, "
            "now(), null, 'minmax', 60, null, null, null, 4, 3, 100, 1.2, 0.75) p",
            (query, qvec)).fetchone()

    def search(c: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
        return c.execute("select chunk_id, lexical_rank, dense_rank, fused_rank, fused_score "
                         "from pgfunnel.funnel_search(%s, %s, k => 10, collection => 't')",
                         (query, qvec)).fetchall()

    # the best match holds "annual" and "refund", which every chunk holds, and not the
    # word no chunk holds: the probe found the terms it holds, and the legs swapped
    assert weights(conn) == ([0.7, 1.0],)
    before = search(conn)
    assert before and all(r[1] is not None and r[2] is not None for r in before[:3])
    _add_empty_versions(conn, 12)
    assert _posting_partitions_locked(conn, weights) == 1
    assert _posting_partitions_locked(conn, search) == 1
    assert weights(conn) == ([0.7, 1.0],)
    assert search(conn) == before


def test_with_a_few_partitions_common_terms_are_read_by_index_range(
        conn: psycopg.Connection[Any]) -> None:
    # Where the query terms are common, the scoring statement's cached plan turned, from
    # about 4 partitions on, to reading the version's whole partition and joining the
    # terms by hash: twice the time for a reader who sees one chunk in five. Each term's
    # postings are read by index range instead, on every path.
    import random

    from funnel_util import active, doc, ingest

    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel",
             "india", "juliet", "kilo", "lima", "mike", "november", "oscar", "papa"]
    rng = random.Random(1)
    weights = [1 / (i + 1) ** 0.6 for i in range(len(words))]
    ingest(conn, [doc(f"d{i}", " ".join(rng.choices(words, weights=weights,
                                                     k=rng.randint(10, 25))),
                      readers=["dave"] if i % 5 == 2 else ["bob"]) for i in range(2000)],
           collection="t")
    _add_empty_versions(conn, 4)
    vid, cid, _ = active(conn, "t")
    # four terms, two and one (each count has its own scoring statement)
    queries = [conn.execute("select pgfunnel.analyze(%s, 'english_v1', true)", (q,)).fetchone()
               for q in ("charlie golf alpha hotel", "charlie alpha", "alpha")]
    assert [len(t[0]) if t else 0 for t in queries] == [4, 2, 1]

    def seq_scans() -> int:
        # the backend's counts not yet reported (the ingest's) are in this view too
        row = conn.execute("select seq_scan from pg_stat_xact_user_tables "
                           "where relid = %s::regclass", (f"pgfunnel.posting_v{vid}",)
                           ).fetchone()
        assert row is not None
        return int(row[0])

    with conn.transaction():
        before = seq_scans()
        # a session's first searches run custom plans; its sixth on takes the cached one
        for _ in range(7):
            for terms in queries:
                assert terms is not None
                conn.execute("select chunk_ids from pgfunnel._lexical_hits(%s, %s, 40, 1.2, "
                             "0.75, '{dave}', null, null, now(), null, %s)", (vid, terms[0], cid))
        assert seq_scans() == before


def test_few_visible_chunks_are_scored_by_probes_or_by_hash_as_counts_decide(
        conn: psycopg.Connection[Any]) -> None:
    # After the sample lists every visible chunk, they are scored either by one index
    # probe per chunk and term (when the terms' postings far outnumber those pairs) or by
    # reading the terms' postings and matching the visible chunks by hash (else: 1,000
    # visible of 100,000 chunks, two terms, took 2.8 ms probed against 0.5 by hash). Both
    # give the best visible chunks, scored exactly.
    import random

    from funnel_util import active, doc, ingest

    rng = random.Random(3)
    words = ["zorp", "quib", "flenn", "mork"]

    def readers(i: int) -> list[str]:
        return ["few"] * (i % 100 == 0) + ["some"] * (i % 8 == 0) or ["bob"]

    ingest(conn, [doc(f"c{i}", " ".join(words + rng.choices(words + ["lorem", "ipsum"],
                                                            k=rng.randint(2, 12))),
                      readers=readers(i)) for i in range(5000)], collection="t")
    vid, cid, _ = active(conn, "t")
    terms = conn.execute("select pgfunnel.analyze('zorp quib flenn mork', 'english_v1', true)"
                         ).fetchone()
    assert terms is not None and len(terms[0]) == 4
    everyone = conn.execute(
        "select chunk_ids, scores from pgfunnel._lexical_hits(%s, %s, 5000, 1.2, 0.75, "
        "'{few,some,bob}', null, null, now(), null, %s)", (vid, terms[0], cid)).fetchone()
    assert everyone is not None and len(everyone[0]) == 5000
    owner = dict(conn.execute("select k.id, d.readers from pgfunnel.chunk k "
                              "join pgfunnel.document d on d.id = k.document_id").fetchall())

    def index_scans() -> int:
        row = conn.execute("select idx_scan from pg_stat_xact_user_tables "
                           "where relid = %s::regclass", (f"pgfunnel.posting_v{vid}",)
                           ).fetchone()
        assert row is not None
        return int(row[0])

    def hits(c: psycopg.Connection[Any], reader: str) -> Any:
        return c.execute(
            "select chunk_ids, scores, visible_share from pgfunnel._lexical_hits(%s, %s, 40, "
            "1.2, 0.75, %s, null, null, now(), null, %s)", (vid, terms[0], [reader], cid)
        ).fetchone()

    found = {}
    for reader, visible, probes in (("few", 50, True), ("some", 625, False)):
        expected = [(c, s) for c, s in zip(*everyone, strict=True) if reader in owner[c]][:40]
        with conn.transaction():
            before = index_scans()
            found[reader] = hits(conn, reader)
            scans = index_scans() - before
        assert found[reader] is not None
        # every visible chunk was listed (the share is exact only then)
        assert found[reader][2] == visible / 5000
        assert list(zip(found[reader][0], found[reader][1], strict=True)) == expected
        # 50 x 4 probes, or one range read per term (and the sample's)
        assert (scans >= 200) if probes else (scans < 20), (reader, scans)
    # past 8 partitions each form is planned per search: the same rows, one partition locked
    _add_empty_versions(conn, 12)
    for reader in ("few", "some"):
        assert _posting_partitions_locked(conn, partial(hits, reader=reader)) == 1
        assert hits(conn, reader) == found[reader]



def _statistics_match_postings(conn: psycopg.Connection[Any], collection: str) -> bool:
    version = _active_version_id(conn, collection)
    stored = conn.execute("select term, df from pgfunnel.term_stat "
                          "where index_version_id = %s order by term", (version,)).fetchall()
    recount = conn.execute("select term, df from pgfunnel.bm25_recount(%s) order by term",
                           (version,)).fetchall()
    return stored == recount


def test_a_document_deleted_in_one_collection_leaves_other_partitions_unlocked(
        db: str, conn: psycopg.Connection[Any]) -> None:
    # the statistics trigger deleted postings by a join on the version, which locked every
    # version's partition: one tenant's delete waited for another's index build or drop
    from funnel_util import doc, ingest

    for name in ("t", "other"):
        ingest(conn, [doc(f"d{i}", f"refund policy for plan {i} annual refund {name}")
                      for i in range(30)], collection=name)
    _add_empty_versions(conn, 3)

    delete_in_t = ("delete from pgfunnel.document d using pgfunnel.collection c "
                   "where c.id = d.collection_id and c.name = 't' and d.citekey = %s")

    def delete(c: psycopg.Connection[Any]) -> None:
        c.execute(delete_in_t, ("d3",))

    assert _posting_partitions_locked(conn, delete) == 1
    assert _statistics_match_postings(conn, "t")

    # another collection's partition held exclusively (a version being dropped there)
    other = posting_partition_name(_active_version_id(conn, "other"))
    with connect(db) as holder, connect(db, autocommit=True) as deleter:
        holder.execute(sql.SQL("lock table {} in access exclusive mode").format(
            sql.Identifier("pgfunnel", other)))
        deleter.execute("set lock_timeout = '2s'")
        assert deleter.execute(delete_in_t, ("d4",)).rowcount == 1
        holder.rollback()

    # one statement across collections corrects each version's statistics
    conn.execute("delete from pgfunnel.document where citekey in ('d5', 'd6')")
    assert _statistics_match_postings(conn, "t")
    assert _statistics_match_postings(conn, "other")
    assert conn.execute("select count(*) from pgfunnel.document").fetchone() == (54,)
