"""The dense leg: HNSW recall against an exact scan, exact fallback under selective filters."""

from __future__ import annotations

from typing import Any

import numpy as np
import psycopg
import pytest
from funnel_util import active, doc, ingest, one_row, unit

DIMS = 24


def _corpus(conn: psycopg.Connection[Any], n: int, private_every: int = 0) -> dict[int, np.ndarray]:
    """n one-chunk documents with random unit vectors; returns chunk id -> vector."""
    rng = np.random.default_rng(11)
    docs, vecs = [], {}
    for i in range(n):
        readers = ["alice"] if private_every and i % private_every == 0 else (
            ["bob"] if private_every else [])
        d = doc(f"d{i}", f"document number {i}", readers=readers,
                metadata={"team": "x" if i % 97 == 5 else "y"})
        docs.append(d)
        vecs[d.citekey] = unit(rng, DIMS)[None, :]
    ingest(conn, docs, dims=DIMS, vectors=vecs)
    rows = conn.execute(
        "select ch.id, d.citekey from pgfunnel.chunk ch join pgfunnel.document d "
        "on d.id = ch.document_id").fetchall()
    return {int(cid): vecs[ck][0] for cid, ck in rows}


def _dense(conn: psycopg.Connection[Any], q: np.ndarray, depth: int, principals: list[str],
           metadata: Any = None) -> list[tuple[int, float, int]]:
    from psycopg.types.json import Jsonb

    vid, cid, _ = active(conn, "t")
    return [(int(a), float(b), int(c)) for a, b, c in conn.execute(
        "select chunk_id, score, rank from pgfunnel._dense_leg(%s, %s, %s, 100, %s, null, "
        "null, now(), %s, %s)",
        (vid, q, depth, principals, Jsonb(metadata) if metadata else None, cid)).fetchall()]


def test_hnsw_recall_against_exact_scan(conn: psycopg.Connection[Any]) -> None:
    vecs = _corpus(conn, 600)
    ids = np.array(list(vecs))
    mat = np.stack([vecs[i] for i in ids])
    rng = np.random.default_rng(3)
    recalls = []
    for _ in range(25):
        q = unit(rng, DIMS)
        got = _dense(conn, q, 40, [])
        assert len(got) == 40
        assert [r for _, _, r in got] == list(range(1, 41))
        sims = mat @ q
        exact = set(ids[np.argsort(-sims)[:40]].tolist())
        recalls.append(len(exact & {g for g, _, _ in got}) / 40)
        for cid, score, _ in got:  # score is cosine similarity
            assert score == pytest.approx(float(vecs[cid] @ q), abs=1e-5)
        assert [s for _, s, _ in got] == sorted((s for _, s, _ in got), reverse=True)
    assert float(np.mean(recalls)) >= 0.95, recalls


def test_selective_filter_returns_every_visible_chunk(conn: psycopg.Connection[Any]) -> None:
    vecs = _corpus(conn, 500, private_every=100)  # alice sees 5 of 500 (1%)
    alice = {cid for cid, ck in conn.execute(
        "select ch.id, d.citekey from pgfunnel.chunk ch join pgfunnel.document d "
        "on d.id = ch.document_id where d.readers @> '{alice}'").fetchall()}
    assert len(alice) == 5
    rng = np.random.default_rng(5)
    for _ in range(5):
        q = unit(rng, DIMS)
        got = _dense(conn, q, 40, ["alice"])
        assert {g for g, _, _ in got} == alice  # min(depth, visible) = 5 rows, all alice's
        assert [g for g, _, _ in got] == sorted(alice, key=lambda c: -float(vecs[c] @ q))
        assert len(_dense(conn, q, 3, ["alice"])) == 3
        assert _dense(conn, q, 40, []) == []  # nothing is public here
    # bob sees 495: a full depth
    assert len(_dense(conn, unit(rng, DIMS), 40, ["bob"])) == 40


def test_metadata_filter_inside_the_leg(conn: psycopg.Connection[Any]) -> None:
    _corpus(conn, 400)
    team_x = {int(r[0]) for r in conn.execute(
        "select ch.id from pgfunnel.chunk ch join pgfunnel.document d on d.id = ch.document_id "
        "where d.metadata @> '{\"team\": \"x\"}'").fetchall()}
    assert 2 <= len(team_x) <= 6
    got = _dense(conn, unit(np.random.default_rng(9), DIMS), 40, [], {"team": "x"})
    assert {g for g, _, _ in got} == team_x


def test_search_settings_are_transaction_local(conn: psycopg.Connection[Any]) -> None:
    _corpus(conn, 50)
    before = [one_row(conn.execute(f"show hnsw.{name}"))[0]
              for name in ("ef_search", "iterative_scan")]
    with conn.transaction():
        _dense(conn, unit(np.random.default_rng(1), DIMS), 10, [])
    after = [one_row(conn.execute(f"show hnsw.{name}"))[0]
             for name in ("ef_search", "iterative_scan")]
    assert after == before
    # nor do they outlast the search in the caller's own transaction: its `set local`
    # comes back (a deep read left 1000 and relaxed_order)
    with conn.transaction():
        conn.execute("set local hnsw.ef_search = 400")
        conn.execute("set local hnsw.iterative_scan = strict_order")
        _dense(conn, unit(np.random.default_rng(1), DIMS), 10, [])
        conn.execute("select count(*) from funnel_search(null, %s, 5, collection => 't', "
                     "dense_depth => 2000)", (unit(np.random.default_rng(2), DIMS),))
        assert [one_row(conn.execute(f"show hnsw.{name}"))[0]
                for name in ("ef_search", "iterative_scan")] == ["400", "strict_order"]
    # and where it set none, pgvector's defaults
    with conn.transaction():
        _dense(conn, unit(np.random.default_rng(1), DIMS), 2000, [])
        assert [one_row(conn.execute(f"show hnsw.{name}"))[0]
                for name in ("ef_search", "iterative_scan")] == ["40", "off"]


def _alice_recall(conn: psycopg.Connection[Any], vecs: dict[int, np.ndarray], seed: int,
                  rounds: int, search: Any) -> float:
    """Mean recall@40 of ``search(q) -> ids`` against an exact scan of alice's chunks;
    every answer must be 40 chunks alice can read."""
    alice = {int(cid) for (cid,) in conn.execute(
        "select ch.id from pgfunnel.chunk ch join pgfunnel.document d "
        "on d.id = ch.document_id where d.readers @> '{alice}'").fetchall()}
    ids = np.array(sorted(alice))
    mat = np.stack([vecs[i] for i in ids])
    rng = np.random.default_rng(seed)
    recalls = []
    for _ in range(rounds):
        q = unit(rng, DIMS)
        got = list(search(q))
        assert len(got) == 40 and set(got) <= alice
        exact = set(ids[np.argsort(-(mat @ q))[:40]].tolist())
        recalls.append(len(exact & set(got)) / 40)
    return float(np.mean(recalls))


def test_partial_filter_reads_deeper_and_keeps_recall(conn: psycopg.Connection[Any]) -> None:
    # alice sees one document in three: the nearest `depth` rows hold too few visible
    # ones, so the leg reads the index deeper (iterative scan) rather than going exact
    vecs = _corpus(conn, 900, private_every=3)
    recall = _alice_recall(conn, vecs, 21, 15,
                           lambda q: [g for g, _, _ in _dense(conn, q, 40, ["alice"])])
    assert recall >= 0.95


@pytest.mark.parametrize("share", [1.0, 0.3, 0.01])
def test_expected_share_sizes_the_first_read_not_the_answer(
        conn: psycopg.Connection[Any], share: float) -> None:
    # the lexical leg tells the dense leg what share of rows the filter let through; a
    # wrong hint costs time, never rows
    vecs = _corpus(conn, 600, private_every=4)
    vid, cid, _ = active(conn, "t")

    def hits(q: np.ndarray) -> list[int]:
        ids, scores = one_row(conn.execute(
            "select chunk_ids, scores from pgfunnel._dense_hits(%s, %s, 40, 100, '{alice}', "
            "null, null, now(), null, %s, %s)", (vid, q, cid, share)))
        assert list(scores) == sorted(scores, reverse=True)
        return [int(i) for i in ids]

    assert _alice_recall(conn, vecs, 4, 10, hits) >= 0.95


def _indexdef(conn: psycopg.Connection[Any], vid: int) -> str:
    row = conn.execute("select pg_get_indexdef(to_regclass(%s))",
                       (f"pgfunnel.embedding_hnsw_v{vid}",)).fetchone()
    return str(row[0]) if row else ""


def test_few_visible_chunks_are_counted_and_scanned_exactly_not_walked_to(
        conn: psycopg.Connection[Any]) -> None:
    # 3,000 chunks, alice reads 1% of them (30). The lexical leg's guess of the share
    # comes from a few dozen rows and runs high (1 of 40 = 0.025): a walk sized by it
    # would read 1,600 rows for 40 visible ones. Under sqrt(2 x 40 x 3000) = 490
    # visible chunks the leg lists them and ranks them exactly, without the graph.
    vecs = _corpus(conn, 3000, private_every=100)
    vid, cid, _ = active(conn, "t")
    alice = sorted(int(cid_) for (cid_,) in conn.execute(
        "select ch.id from pgfunnel.chunk ch join pgfunnel.document d "
        "on d.id = ch.document_id where d.readers @> '{alice}'").fetchall())
    assert len(alice) == 30
    q = unit(np.random.default_rng(6), DIMS)

    def hits(share: float) -> list[int]:
        row = conn.execute(
            "select chunk_ids from pgfunnel._dense_hits(%s, %s, 40, 100, '{alice}', "
            "null, null, now(), null, %s, %s)", (vid, q, cid, share)).fetchone()
        return [int(i) for i in row[0]]  # type: ignore[index]

    exact = sorted(alice, key=lambda i: -float(vecs[i] @ q))
    answers: dict[float, list[int]] = {}
    for share in (0.025, 0.05):
        assert _graph_scans(conn, vid, lambda s=share: answers.update({s: hits(s)})) == 0
        assert answers[share] == exact  # every visible chunk, in exact order
    # without a hint the leg walks first, sees how few rows are visible, and goes exact
    assert _graph_scans(conn, vid, lambda: answers.update({1.0: hits(1.0)})) == 1
    assert answers[1.0] == exact


def test_a_low_share_guess_over_many_visible_chunks_walks_after_a_bounded_list(
        conn: psycopg.Connection[Any]) -> None:
    # alice reads 750 of 3,000 chunks, more than the 490 the leg would rank exactly; a
    # hint of 1% makes it list them, and the list stops at 491, so it walks the graph
    # (sized by at least 490 visible, not by the hint) and keeps the walk's recall
    vecs = _corpus(conn, 3000, private_every=4)
    vid, cid, _ = active(conn, "t")

    def hits(q: np.ndarray) -> list[int]:
        row = conn.execute(
            "select chunk_ids from pgfunnel._dense_hits(%s, %s, 40, 100, '{alice}', "
            "null, null, now(), null, %s, 0.01)", (vid, q, cid)).fetchone()
        return [int(i) for i in row[0]]  # type: ignore[index]

    q = unit(np.random.default_rng(9), DIMS)
    assert _graph_scans(conn, vid, lambda: hits(q)) == 1
    assert _alice_recall(conn, vecs, 5, 10, hits) >= 0.95


def test_new_versions_walk_a_unit_halfvec_graph(conn: psycopg.Connection[Any]) -> None:
    from pgfunnel.versions import validate

    _corpus(conn, 3000)  # on fewer rows the planner prefers an exact scan to any graph
    vid, _, _ = active(conn, "t")
    assert conn.execute("select params ->> 'hnsw_type' from pgfunnel.index_version "
                        "where id = %s", (vid,)).fetchone() == ("halfvec",)
    indexdef = _indexdef(conn, vid)
    assert "l2_normalize(embedding)" in indexdef and "halfvec_cosine_ops" in indexdef, indexdef
    # the graph answers (the probe checks the plan) with the recall of a full-precision one
    checked = validate(conn, vid)
    assert checked.ok and checked.index_used and (checked.recall or 0) >= 0.95, checked
    # and the dense leg's own statement walks it (its expression matches the index's)
    assert _graph_scans(conn, vid, lambda: _dense(conn, unit(np.random.default_rng(2), DIMS),
                                                  40, [])) == 1


def test_the_graph_walk_runs_from_a_cached_plan_with_the_answer_of_a_planned_one(
        conn: psycopg.Connection[Any]) -> None:
    from pgfunnel.schema import install_functions

    _corpus(conn, 3000)
    vid, _, dims = active(conn, "t")
    q = unit(np.random.default_rng(5), DIMS)
    planned = ("select array_agg(chunk_id order by dist, chunk_id) from (select chunk_id, "
               "embedding <=> %(q)s::vector as dist from pgfunnel.embedding "
               f"where index_version_id = {vid} order by l2_normalize(embedding)::halfvec({dims}) "
               f"<=> l2_normalize(%(q)s::vector)::halfvec({dims}) limit 40) s")
    walk = "select chunk_ids, cached from pgfunnel._hnsw_walk(%(v)s, %(q)s::vector, 40)"
    with conn.transaction():
        conn.execute("set local hnsw.ef_search = 100")
        want = conn.execute(planned, {"q": q}).fetchone()
        got = conn.execute(walk, {"v": vid, "q": q}).fetchone()
        assert got == (want[0], True) and len(want[0]) == 40  # type: ignore[index]
        # a version without a graph has no cached walk (the leg plans one)
        assert conn.execute(walk, {"v": vid + 1, "q": q}).fetchone() == (None, False)
        # the planned walk, the leg's fallback, gives the same answer
        assert conn.execute("select chunk_ids from pgfunnel._hnsw_walk_planned(%s, %s, 40)",
                            (vid, q)).fetchone() == want
    # the cached walk scans the version's graph
    assert _graph_scans(conn, vid, lambda: conn.execute(walk, {"v": vid, "q": q})) == 1
    # with no walk cached (sql/'s definition) the leg walks the graph by the planned query,
    # with the same rows
    cached_answer = _dense(conn, q, 40, [])
    conn.execute("create or replace function pgfunnel._hnsw_walk(version_id integer, "
                 "query_embedding vector, n integer, out chunk_ids bigint[], "
                 "out scores double precision[], out cached boolean) language plpgsql "
                 "as $$ begin cached := false; end $$")
    planned_answer: list[Any] = []
    assert _graph_scans(conn, vid, lambda: planned_answer.extend(_dense(conn, q, 40, []))) == 1
    assert planned_answer == cached_answer and len(cached_answer) == 40
    # `pgfunnel init` reinstalls sql/, which holds no walks, and writes them back
    with conn.transaction():
        install_functions(conn)
    assert conn.execute(walk, {"v": vid, "q": q}).fetchone()[1] is True  # type: ignore[index]


def test_a_role_that_cannot_replace_the_walks_gets_a_warning_and_planned_walks(
        conn: psycopg.Connection[Any], db: str) -> None:
    from _security_helpers import create_app_role

    from pgfunnel.db import connect
    from pgfunnel.ingest import refresh_hnsw_walks

    _corpus(conn, 300)
    vid, _, _ = active(conn, "t")
    with connect(create_app_role(db, writer=True), autocommit=True) as writer:
        with pytest.warns(UserWarning, match="pgfunnel init"):
            assert refresh_hnsw_walks(writer) is False
        # the connection is usable and the walk the owner cached is still there
        assert writer.execute("select (pgfunnel._hnsw_walk(%s, array_fill(1, array[%s])"
                              "::vector, 1)).cached", (vid, DIMS)).fetchone() == (True,)


def _graph_scans(conn: psycopg.Connection[Any], vid: int, search: Any) -> int:
    """How many times ``search()`` scanned version ``vid``'s HNSW index."""
    def scans() -> int:
        conn.execute("select pg_stat_force_next_flush()")
        conn.execute("select pg_stat_clear_snapshot()")
        row = conn.execute("select idx_scan from pg_stat_user_indexes where indexrelid = "
                           "to_regclass(%s)", (f"pgfunnel.embedding_hnsw_v{vid}",)).fetchone()
        return int(row[0]) if row else 0

    before = scans()
    search()
    return scans() - before


def test_vectors_past_half_precision_range_are_indexed_and_scored_exactly(
        conn: psycopg.Connection[Any]) -> None:
    # components up to ~1e6 would overflow half precision (max 65,504) if cast as they are
    rng = np.random.default_rng(17)
    docs = [doc(f"d{i}", f"document number {i}") for i in range(200)]
    vecs = {d.citekey: (unit(rng, DIMS) * 3e5)[None, :] for d in docs}
    ingest(conn, docs, dims=DIMS, vectors=vecs)
    by_id = {int(cid): vecs[ck][0] for cid, ck in conn.execute(
        "select ch.id, d.citekey from pgfunnel.chunk ch join pgfunnel.document d "
        "on d.id = ch.document_id").fetchall()}
    q = unit(rng, DIMS) * 1e6
    got = _dense(conn, q, 20, [])
    assert len(got) == 20
    for cid, score, _ in got:  # full-precision cosine of the stored vectors
        v = by_id[cid]
        assert score == pytest.approx(float(v @ q / np.linalg.norm(v) / np.linalg.norm(q)),
                                      abs=1e-5)


def test_a_full_precision_graph_of_an_older_version_keeps_serving(
        conn: psycopg.Connection[Any]) -> None:
    from pgfunnel.doctor import check_active_indexes
    from pgfunnel.ingest import create_hnsw_index
    from pgfunnel.versions import validate

    vecs = _corpus(conn, 3000)
    vid, _, dims = active(conn, "t")
    # a version made before hnsw_type was recorded has a vector graph
    conn.execute("update pgfunnel.index_version set params = params - 'hnsw_type' "
                 "where id = %s", (vid,))
    conn.execute(f"drop index pgfunnel.embedding_hnsw_v{vid}")
    create_hnsw_index(conn, vid, dims)
    assert "vector_cosine_ops" in _indexdef(conn, vid)
    checked = validate(conn, vid)
    assert checked.ok and checked.index_used and (checked.recall or 0) >= 0.95, checked
    assert _graph_scans(conn, vid, lambda: _dense(conn, unit(np.random.default_rng(2), DIMS),
                                                  40, [])) == 1
    assert not [f for f in check_active_indexes(conn) if f.level == "error"]
    q = unit(np.random.default_rng(8), DIMS)
    got = _dense(conn, q, 10, [])
    assert [g for g, _, _ in got] == sorted(vecs, key=lambda c: -float(vecs[c] @ q))[:10]
    # the walk planned per search (no walk cached) keys its query as the graph does
    walk = "select chunk_ids from pgfunnel._hnsw_walk_planned(%s, %s, 10)"
    with conn.transaction():
        conn.execute("set local hnsw.ef_search = 100")
        assert conn.execute(walk, (vid, q)).fetchone() == ([g for g, _, _ in got],)
    # a type it does not know is refused, naming the version, not walked as some other
    conn.execute("update pgfunnel.index_version set params = params || "
                 "'{\"hnsw_type\": \"bit\"}' where id = %s", (vid,))
    with pytest.raises(psycopg.errors.RaiseException,
                       match=f"index version {vid} records an unknown hnsw_type"):
        conn.execute(walk, (vid, q))
    # the doctor notices a graph that is not what the version records
    conn.execute("update pgfunnel.index_version set params = params || "
                 "'{\"hnsw_type\": \"halfvec\"}' where id = %s", (vid,))
    assert [f for f in check_active_indexes(conn)
            if f.level == "error" and "does not match" in f.message]


def test_a_halfvec_graph_indexes_more_than_2000_dimensions(conn: psycopg.Connection[Any]) -> None:
    # pgvector's HNSW takes up to 2,000 dimensions of vector and 4,000 of halfvec: a
    # 3,072-dimension model (as some hosted ones are) gets a graph
    dims = 3072
    rng = np.random.default_rng(4)
    docs = [doc(f"d{i}", f"document number {i}") for i in range(60)]
    vecs = {d.citekey: unit(rng, dims)[None, :] for d in docs}
    ingest(conn, docs, dims=dims, vectors=vecs)
    vid, _, _ = active(conn, "t")
    assert "halfvec(3072)" in _indexdef(conn, vid)
    q = vecs["d7"][0]
    [(best, score, rank)] = _dense(conn, q, 1, [])
    assert rank == 1 and score == pytest.approx(1.0, abs=1e-5)
    assert conn.execute("select d.citekey from pgfunnel.chunk ch join pgfunnel.document d "
                        "on d.id = ch.document_id where ch.id = %s", (best,)).fetchone() == ("d7",)


def test_more_dimensions_than_a_graph_takes_are_refused_before_any_row(
        conn: psycopg.Connection[Any]) -> None:
    from pgfunnel.errors import ConfigError
    from pgfunnel.ingest import Ingester

    class Wide:
        model_name = "wide-model"
        dimensions = 5000

    rng = np.random.default_rng(1)
    docs = [doc(f"d{i}", f"document {i}") for i in range(3)]
    with pytest.raises(ConfigError, match=r"dimensions: 'wide-model' makes 5000-dimension.*4,000"):
        Ingester(conn, "wide", embedder=Wide()).ingest(  # type: ignore[arg-type]
            docs, vectors={d.citekey: unit(rng, 5000)[None, :] for d in docs})
    assert conn.execute("select count(*) from pgfunnel.chunk").fetchone() == (0,)
    assert conn.execute("select count(*) from pgfunnel.index_version").fetchone() == (0,)


def test_the_walk_cache_keeps_active_versions_before_newer_inactive_ones(
        conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    import pgfunnel.ingest as ingest_module
    from pgfunnel.ingest import create_hnsw_index, create_version, refresh_hnsw_walks

    for name in ("a", "b"):
        ingest(conn, [doc(f"{name}{i}", f"text {i}") for i in range(20)], collection=name)
    a_active, _, dims = active(conn, "a")
    b_active, b_coll, _ = active(conn, "b")
    # a newer version of b that is ready (a reindex waiting to be activated), with a graph
    ready = create_version(conn, b_coll, "random-unit", dims, "english_v1", "ready")
    create_hnsw_index(conn, ready, dims)
    monkeypatch.setattr(ingest_module, "MAX_CACHED_WALKS", 2)
    assert refresh_hnsw_walks(conn)
    q = unit(np.random.default_rng(3), dims)
    cached = {vid: conn.execute("select cached from pgfunnel._hnsw_walk(%s, %s::vector, 10)",
                                (vid, q)).fetchone()[0]  # type: ignore[index]
              for vid in (a_active, b_active, ready)}
    # newest first would have cached b's two versions and left a's active one out
    assert cached == {a_active: True, b_active: True, ready: False}


def test_the_walk_cache_holds_the_active_versions_of_forty_collections(
        conn: psycopg.Connection[Any]) -> None:
    # a version left out plans its walk per search, weighing every version's partial
    # HNSW index: a collection per customer should not make the older customers pay that
    for i in range(40):
        ingest(conn, [doc(f"d{i}", f"text {i}")], collection=f"customer{i}")
    versions = [active(conn, f"customer{i}")[0] for i in range(40)]
    q = unit(np.random.default_rng(3), 16)
    assert all(conn.execute("select cached from pgfunnel._hnsw_walk(%s, %s::vector, 10)",
                            (vid, q)).fetchone() == (True,) for vid in versions)


@pytest.mark.parametrize("first_ef_search", [40, 400])
def test_the_cached_walk_of_a_small_version_walks_its_graph_whatever_the_first_search(
        db: str, conn: psycopg.Connection[Any], first_ef_search: int) -> None:
    from pgfunnel.db import connect

    _corpus(conn, 2000)
    vid, cid, _ = active(conn, "t")
    rng = np.random.default_rng(9)
    leg = ("select count(*) from pgfunnel._dense_leg(%s, %s, 40, %s, '{}', null, null, "
           "now(), null, %s)")
    # a fresh session: its first search fixes the walk's generic plan for the session
    with connect(db, autocommit=True) as session:
        session.execute(leg, (vid, unit(rng, DIMS), first_ef_search, cid))

        def search() -> None:
            assert session.execute(leg, (vid, unit(rng, DIMS), 100, cid)).fetchone() == (40,)

        # a generic plan read `limit n` as 2,000 / 10 rows and sorted all 2,000 instead
        assert _graph_scans(session, vid, search) == 1


def test_the_planned_walk_of_a_small_version_walks_its_graph(
        conn: psycopg.Connection[Any]) -> None:
    # a version the walk cache does not hold (past its 256) is walked by a query planned
    # per search; at 2,000 chunks of all-MiniLM's 384 dimensions that plan, even with the
    # limit known, sorted every row
    dims = 384
    rng = np.random.default_rng(4)
    docs = [doc(f"d{i}", f"document number {i}") for i in range(2000)]
    ingest(conn, docs, dims=dims, vectors={d.citekey: unit(rng, dims)[None, :] for d in docs})
    vid, _, _ = active(conn, "t")

    def walk() -> None:
        with conn.transaction():
            conn.execute("set local hnsw.ef_search = 100")
            row = conn.execute("select cardinality(chunk_ids) from "
                               "pgfunnel._hnsw_walk_planned(%s, %s, 40)",
                               (vid, unit(rng, dims))).fetchone()
        assert row == (40,)

    assert _graph_scans(conn, vid, walk) == 1
