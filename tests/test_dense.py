"""The dense leg: HNSW recall against an exact scan, exact fallback under selective filters."""

from __future__ import annotations

from typing import Any

import numpy as np
import psycopg
import pytest
from funnel_util import active, doc, ingest, unit

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

    vid, cid, dims = active(conn, "t")
    return [(int(a), float(b), int(c)) for a, b, c in conn.execute(
        "select chunk_id, score, rank from pgfunnel._dense_leg(%s, %s, %s, %s, 100, %s, null, "
        "null, now(), %s, %s)",
        (vid, dims, q, depth, principals, Jsonb(metadata) if metadata else None, cid)).fetchall()]


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
    before = [conn.execute(f"show hnsw.{name}").fetchone()[0]
              for name in ("ef_search", "iterative_scan")]
    with conn.transaction():
        _dense(conn, unit(np.random.default_rng(1), DIMS), 10, [])
        assert conn.execute("show hnsw.ef_search").fetchone()[0] == "100"
    after = [conn.execute(f"show hnsw.{name}").fetchone()[0]
             for name in ("ef_search", "iterative_scan")]
    assert after == before


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
    vid, cid, dims = active(conn, "t")

    def hits(q: np.ndarray) -> list[int]:
        ids, scores = conn.execute(
            "select chunk_ids, scores from pgfunnel._dense_hits(%s, %s, %s, 40, 100, '{alice}', "
            "null, null, now(), null, %s, %s)", (vid, dims, q, cid, share)).fetchone()
        assert list(scores) == sorted(scores, reverse=True)
        return [int(i) for i in ids]

    assert _alice_recall(conn, vecs, 4, 10, hits) >= 0.95
