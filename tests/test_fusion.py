"""Fusion: fused scores equal hand-computed values from the per-leg ranks and scores."""

from __future__ import annotations

import math
import random
import statistics
from typing import Any

import numpy as np
import psycopg
import pytest
from funnel_util import doc, ingest, one_row, unit

DIMS = 16
COLS = "chunk_id, lexical_rank, lexical_score, dense_rank, dense_score, fused_rank, fused_score"


@pytest.fixture()
def corpus(conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    rng = random.Random(4)
    vocab = [f"{a}{b}" for a in ("ka", "lo", "mi", "su", "te") for b in ("ra", "po", "ne", "vi")]
    docs = [doc(f"f{i}", " ".join(rng.choices(vocab, k=rng.randint(8, 40)))) for i in range(120)]
    ingest(conn, docs, dims=DIMS, seed=2)
    return conn


def _candidates(conn: psycopg.Connection[Any], q: str | None, v: np.ndarray | None,
                **kw: Any) -> list[tuple[Any, ...]]:
    args = {"k": 10, "collection": "t", "lexical_depth": 15, "dense_depth": 15, **kw}
    named = ", ".join(f"{k} => %({k})s" for k in args)
    return conn.execute(f"select {COLS} from pgfunnel.candidates(%(q)s, %(v)s, {named})",
                        {"q": q, "v": v, **args}).fetchall()


def _expected(rows: list[tuple[Any, ...]], fusion: str, w: tuple[float, float],
              rrf_k: float, lexical_depth: int = 15) -> dict[int, float]:
    # the pool (k * overfetch = 40) holds every row of both legs (depth 15 each)
    lex = [r[2] for r in rows if r[1] is not None]
    den = [r[4] for r in rows if r[3] is not None]
    # a lexical list shorter than its depth holds every match: the rest score BM25 0
    lex_floor = 0.0 if len(lex) < lexical_depth else min(lex, default=0.0)
    den_floor = min(den, default=0.0)
    out = {}
    for cid, lr, ls, dr, ds, _, _ in rows:
        if fusion == "rrf":
            f = (w[0] / (rrf_k + lr) if lr else 0.0) + (w[1] / (rrf_k + dr) if dr else 0.0)
        elif fusion == "minmax":
            def mm(x: float | None, xs: list[float], lo: float) -> float:
                if x is None:
                    return 0.0  # fill: a leg that missed the chunk adds nothing
                return (x - lo) / (max(xs) - lo) if max(xs) > lo else 1.0
            f = w[0] * mm(ls, lex, lex_floor) + w[1] * mm(ds, den, den_floor)
        else:
            def z(x: float | None, xs: list[float], lo: float) -> float:
                sd = statistics.pstdev(xs) if xs else 0.0
                if not xs or sd == 0:
                    return 0.0
                # fill: a leg that missed the chunk gives the z-score of its floor
                return ((lo if x is None else x) - statistics.fmean(xs)) / sd
            # a short lexical list stands for its depth rows: past its matches, BM25 0
            lex_rows = lex + [0.0] * (lexical_depth - len(lex)) if lex else lex
            f = w[0] * z(ls, lex_rows, lex_floor) + w[1] * z(ds, den, den_floor)
        out[cid] = f
    return out


@pytest.mark.parametrize("fusion", ["rrf", "minmax", "zscore"])
@pytest.mark.parametrize("weights,rrf_k", [((1.0, 1.0), 60.0), ((2.0, 0.5), 10.0),
                                           ((0.1, 1.0), 1.0), ((1.0, 3.0), 200.0)])
def test_fused_scores_hand_computed(corpus: psycopg.Connection[Any], fusion: str,
                                    weights: tuple[float, float], rrf_k: float) -> None:
    rng = np.random.default_rng(1)
    for q in ("kara lopo", "sune", "tevi mira kapo"):
        v = unit(rng, DIMS)
        rows = _candidates(corpus, q, v, fusion=fusion, weights=list(weights), rrf_k=rrf_k)
        assert len({r[0] for r in rows}) == len(rows) > 15
        # every leg row is in the pool, so the hand computation sees the same leg lists
        assert sum(r[1] is not None for r in rows) == 15
        assert sum(r[3] is not None for r in rows) == 15
        want = _expected(rows, fusion, weights, rrf_k)
        for r in rows:
            assert r[6] == pytest.approx(want[r[0]], rel=1e-9, abs=1e-12), (fusion, r)
        # order: fused score descending, ties by chunk id; fused_rank is that order
        order = sorted(rows, key=lambda r: (-r[6], r[0]))
        assert [r[0] for r in rows] == [r[0] for r in order]
        assert [r[5] for r in rows] == list(range(1, len(rows) + 1))


def test_ties_break_by_chunk_id_and_are_deterministic(corpus: psycopg.Connection[Any]) -> None:
    v = unit(np.random.default_rng(8), DIMS)
    # equal weights and rrf: a chunk only at lexical rank r ties with one only at dense rank r
    rows = _candidates(corpus, "kara", v, fusion="rrf", weights=[1, 1])
    by_score: dict[float, list[int]] = {}
    for r in rows:
        by_score.setdefault(r[6], []).append(r[0])
    ties = [ids for ids in by_score.values() if len(ids) > 1]
    assert ties, "expected at least one exact tie"
    for ids in ties:
        assert ids == sorted(ids)
    for _ in range(3):
        assert _candidates(corpus, "kara", v, fusion="rrf", weights=[1, 1]) == rows


@pytest.mark.parametrize("fusion", ["rrf", "minmax", "zscore"])
def test_the_only_chunk_holding_a_word_leads_under_every_fusion(
        corpus: psycopg.Connection[Any], fusion: str) -> None:
    # under zscore one match had no spread: its z-score was 0, as every chunk's, and the
    # only chunk holding the word fell out of the pool behind the dense leg's 15 rows
    ingest(corpus, [doc("odd", "zorblax kara lopo")], dims=DIMS, seed=3)
    v = unit(np.random.default_rng(5), DIMS)
    rows = _candidates(corpus, "zorblax", v, fusion=fusion, weights=[1, 1])
    assert sum(r[1] is not None for r in rows) == 1
    [odd] = [r for r in rows if r[1] is not None]
    # level with the dense leg's first under rrf and minmax (chunk id breaks the tie)
    assert odd[5] <= 2, (fusion, odd)
    if fusion == "zscore":
        # one match among 15 rows of BM25 0: z = 14 / sqrt(14)
        assert odd[6] == pytest.approx(math.sqrt(14) + _expected(rows, fusion, (0.0, 1.0),
                                                                 60)[odd[0]], rel=1e-9)
        want = _expected(rows, fusion, (1.0, 1.0), 60)
        assert all(r[6] == pytest.approx(want[r[0]], rel=1e-9, abs=1e-12) for r in rows)


def test_leg_without_input_has_no_vote(corpus: psycopg.Connection[Any]) -> None:
    rows = _candidates(corpus, "kara lopo", None, fusion="minmax")
    assert rows and all(r[3] is None for r in rows)
    want = _expected(rows, "minmax", (1.0, 0.0), 60)
    assert all(r[6] == pytest.approx(want[r[0]]) for r in rows)
    v = unit(np.random.default_rng(2), DIMS)
    rows = _candidates(corpus, None, v, fusion="zscore")
    assert rows and all(r[1] is None for r in rows)
    # the default dense weight (0.7) applies; the missing lexical leg has weight 0
    want = _expected(rows, "zscore", (0.0, 0.7), 60)
    assert all(r[6] == pytest.approx(want[r[0]]) for r in rows)


@pytest.mark.parametrize("fusion", ["rrf", "minmax", "zscore"])
def test_a_leg_with_weight_zero_is_not_run(corpus: psycopg.Connection[Any], fusion: str) -> None:
    # Its rows had a fused score of 0 and filled the pool behind the other leg's in
    # chunk-id order; when it was the only leg with rows, the whole answer came in
    # chunk-id order instead of the leg's own.
    v = unit(np.random.default_rng(5), DIMS)
    for weights, on, off in (([1, 0], 1, 3), ([0, 1], 3, 1)):
        rows = _candidates(corpus, "kara lopo", v, fusion=fusion, weights=weights)
        assert len(rows) == 15 and all(r[off] is None for r in rows), (weights, rows)
        # the running leg's own order, ranks 1..15
        assert [r[on] for r in rows] == list(range(1, 16)), (weights, rows)
    # text whose every word is unindexed, and a dense leg of weight 0: nothing to fill with
    rows = _candidates(corpus, "zzzunknown", v, fusion=fusion, weights=[1, 0])
    assert rows == []
    alone = _candidates(corpus, "kara lopo", None, fusion=fusion, weights=[1, 0])
    assert [r[0] for r in alone] == [r[0] for r in
                                     _candidates(corpus, "kara lopo", v, fusion=fusion,
                                                 weights=[1, 0])]


@pytest.mark.parametrize("q, v, weights, leg", [("kara", None, [0, 1], "lexical"),
                                                (None, "vector", [1, 0], "dense")])
def test_weight_zero_on_the_only_leg_that_can_run_names_weights(
        corpus: psycopg.Connection[Any], q: str | None, v: str | None,
        weights: list[int], leg: str) -> None:
    vec = unit(np.random.default_rng(6), DIMS) if v else None
    with pytest.raises(psycopg.errors.InvalidParameterValue) as exc:
        _candidates(corpus, q, vec, weights=weights)
    msg = exc.value.diag.message_primary or ""
    assert msg.startswith("weights:") and f"weight 0 to the {leg} leg" in msg, msg


def test_explain_names_a_leg_not_run_for_its_weight(corpus: psycopg.Connection[Any]) -> None:
    v = unit(np.random.default_rng(7), DIMS)
    dense = _candidates(corpus, "kara", v, weights=[0, 1], dense_depth=5, k=1, overfetch=5)
    in_pool = {r[0] for r in dense}
    lexical_only = [r[0] for r in _candidates(corpus, "kara", None, lexical_depth=40)]
    missing = next(c for c in lexical_only if c not in in_pool)
    row = corpus.execute(
        "select verdict, reason, lexical_depth_used, dense_depth_used from pgfunnel.explain("
        "'kara', %s, %s, k => 1, overfetch => 5, collection => 't', weights => '{0,1}', "
        "dense_depth => 5)", (v, missing)).fetchone()
    assert row is not None
    verdict, reason, lex_used, den_used = row
    assert verdict == "in no leg at its depth" and lex_used is None and den_used == 5
    assert "lexical top (not run: weight 0)" in reason and "raise dense_depth" in reason, reason


def _idf(conn: psycopg.Connection[Any], term: str | None) -> float:
    """BM25's idf of a term in the active version; of a term in no chunk for None."""
    n = conn.execute("select chunk_count from pgfunnel.index_version where state = 'active'"
                     ).fetchone()[0]  # type: ignore[index]
    row = conn.execute("select df from pgfunnel.term_stat where term = %s", (term,)).fetchone()
    df = 0 if row is None else row[0]
    return math.log(1 + (n - df + 0.5) / (df + 0.5))


@pytest.mark.parametrize("fusion", ["rrf", "minmax", "zscore"])
def test_lexical_weight_scales_with_query_idf_coverage(corpus: psycopg.Connection[Any],
                                                       fusion: str) -> None:
    v = unit(np.random.default_rng(5), DIMS)
    # "zzqx" and "wovu" are in no chunk: the weight is the share of the query's idf
    # held by the two indexed words, each absent word counting a term in no chunk
    rows = _candidates(corpus, "kara zzqx lopo wovu", v, fusion=fusion, weights=[1.0, 0.7])
    held = _idf(corpus, "kara") + _idf(corpus, "lopo")
    share = held / (held + 2 * _idf(corpus, None))
    assert 0.05 < share < 0.5  # absent words are the rarest: less than their count share
    want = _expected(rows, fusion, (share, 0.7), 60.0)
    assert all(r[6] == pytest.approx(want[r[0]], rel=1e-9, abs=1e-12) for r in rows)
    # the lexical leg itself is unchanged: the absent words only cost it weight
    full = _candidates(corpus, "kara lopo", v, fusion=fusion, weights=[1.0, 0.7])
    assert sorted((r[0], r[1], r[2]) for r in rows if r[1] is not None) == \
        sorted((r[0], r[1], r[2]) for r in full if r[1] is not None)
    # an identifier counts as covered when one of its parts is indexed
    rows = _candidates(corpus, "kara_zzqx lopo", v, fusion=fusion, weights=[1.0, 0.7])
    want = _expected(rows, fusion, (1.0, 0.7), 60.0)
    assert all(r[6] == pytest.approx(want[r[0]], rel=1e-9, abs=1e-12) for r in rows)
    # a fully covered query keeps the given weight
    rows = _candidates(corpus, "kara lopo", v, fusion=fusion, weights=[1.0, 0.7])
    want = _expected(rows, fusion, (1.0, 0.7), 60.0)
    assert all(r[6] == pytest.approx(want[r[0]], rel=1e-9, abs=1e-12) for r in rows)


@pytest.mark.parametrize("fusion", ["rrf", "minmax", "zscore"])
def test_short_lexical_list_is_scaled_from_zero(corpus: psycopg.Connection[Any],
                                                fusion: str) -> None:
    # a word in three chunks: the lexical leg (depth 15) lists every match, and every
    # other chunk's BM25 score is 0, so 0 is the floor, not the third match's score
    ingest(corpus, [doc("z1", "zorblat " * 3 + "kara"), doc("z2", "zorblat zorblat lopo"),
                    doc("z3", "zorblat mira tevi sune kapo")], dims=DIMS, seed=9)
    v = unit(np.random.default_rng(6), DIMS)
    rows = _candidates(corpus, "zorblat", v, fusion=fusion, weights=[1.0, 0.7])
    lex_rows = [r for r in rows if r[1] is not None]
    assert len(lex_rows) == 3
    want = _expected(rows, fusion, (1.0, 0.7), 60.0)
    assert all(r[6] == pytest.approx(want[r[0]], rel=1e-9, abs=1e-12) for r in rows)
    if fusion == "minmax":
        # the third match keeps a lexical share above any chunk that matched nothing
        last = max(lex_rows, key=lambda r: r[1])
        top = max(r[2] for r in lex_rows)
        assert last[6] >= last[2] / top - 1e-12 > 0.0


def test_default_weights_trust_bm25_more_for_a_query_that_is_one_identifier(
        corpus: psycopg.Connection[Any]) -> None:
    rng = np.random.default_rng(3)
    shaped = {q: one_row(corpus.execute("select pgfunnel._identifier_query(%s)", (q,)))[0]
              for q in ("kara_lopo", "sune.tevi", "KaraLopo", "DBAPIError", "kara()",
                        "kara lopo", "sune", "ERR-4029", "err4029", "")}
    assert [q for q, yes in shaped.items() if yes] == [
        "kara_lopo", "sune.tevi", "KaraLopo", "DBAPIError", "kara()"]
    for q, want_minmax in (("kara_lopo", (1.0, 0.2)), ("sune.tevi", (1.0, 0.2)),
                           ("kara lopo", (1.0, 0.7)), ("sune", (1.0, 0.7))):
        v = unit(rng, DIMS)
        for fusion, want in (("minmax", want_minmax), ("rrf", (1.0, 0.7)),
                             ("zscore", (1.0, 0.7))):
            rows = _candidates(corpus, q, v, fusion=fusion)
            assert rows == _candidates(corpus, q, v, fusion=fusion, weights=list(want)), (q, fusion)
            expected = _expected(rows, fusion, want, 60.0)
            for r in rows:
                assert r[6] == pytest.approx(expected[r[0]], rel=1e-9, abs=1e-12), (q, fusion)


def test_default_weights_let_the_dense_leg_lead_when_the_best_lexical_match_holds_little(
        conn: psycopg.Connection[Any]) -> None:
    # four rare words, each in a chunk of its own: every word is indexed (the version
    # holds the whole query), but the best lexical match holds a quarter of its idf
    filler = ["kara lopo", "sune tevi", "mira kapo", "lone sura"]
    docs = [doc(f"w{i}", f"{word} {filler[i]} kara")
            for i, word in enumerate(("vardump", "plimsoe", "gribnak", "tuvolo"))]
    docs += [doc("both", "zorblat quennix kara lopo")]
    docs += [doc(f"f{i}", f"{filler[i % 4]} {filler[(i + 1) % 4]}") for i in range(12)]
    ingest(conn, docs, dims=DIMS, seed=11)
    v = unit(np.random.default_rng(12), DIMS)

    scattered = "vardump plimsoe gribnak tuvolo"
    rows = _candidates(conn, scattered, v, fusion="minmax")
    assert rows == _candidates(conn, scattered, v, fusion="minmax", weights=[0.7, 1.0])
    assert rows != _candidates(conn, scattered, v, fusion="minmax", weights=[1.0, 0.7])
    want = _expected(rows, "minmax", (0.7, 1.0), 60.0)
    assert all(r[6] == pytest.approx(want[r[0]], rel=1e-9, abs=1e-12) for r in rows)
    # the trace records the weights the search used
    sid = conn.execute("select search_id from funnel_search(%s, %s, k => 3, collection => 't', "
                       "trace => true) limit 1", (scattered, v)).fetchone()[0]  # type: ignore[index]
    assert conn.execute("select config -> 'weights' from pgfunnel.search_log where id = %s",
                        (sid,)).fetchone() == ([0.7, 1.0],)

    # the best match holding half the query or more (here all of it) keeps {1,0.7}
    held = "zorblat quennix"
    rows = _candidates(conn, held, v, fusion="minmax")
    assert rows == _candidates(conn, held, v, fusion="minmax", weights=[1.0, 0.7])
    # only min-max fusion, and only weights left to the default, follow the rule
    for fusion in ("rrf", "zscore"):
        assert _candidates(conn, scattered, v, fusion=fusion) == \
            _candidates(conn, scattered, v, fusion=fusion, weights=[1.0, 0.7])
    given = _candidates(conn, scattered, v, fusion="minmax", weights=[1.0, 0.7])
    want = _expected(given, "minmax", (1.0, 0.7), 60.0)
    assert all(r[6] == pytest.approx(want[r[0]], rel=1e-9, abs=1e-12) for r in given)


def test_default_weights_let_the_lexical_leg_lead_when_the_best_match_holds_a_rare_number(
        conn: psycopg.Connection[Any]) -> None:
    # `RFC RFC 6125`: the number decides the entry, BM25 finds the one chunk holding it,
    # and the dense model reads digits poorly
    docs = [doc("rfc6125", "rfc 6125 kapo tevo lune quoxil"), doc("code", "rfc kx4z lune")]
    docs += [doc(f"r{i}", f"rfc mira kapo tevo lune sura {i % 3}") for i in range(12)]
    ingest(conn, docs, dims=DIMS, seed=21)
    v = unit(np.random.default_rng(22), DIMS)
    query = "rfc 6125"
    rows = _candidates(conn, query, v, fusion="minmax")
    best = min((r for r in rows if r[1] is not None), key=lambda r: r[1])
    assert conn.execute("select d.citekey from pgfunnel.chunk ch join pgfunnel.document d "
                        "on d.id = ch.document_id where ch.id = %s",
                        (best[0],)).fetchone() == ("rfc6125",)  # the premise
    assert rows == _candidates(conn, query, v, fusion="minmax", weights=[1.0, 0.2])
    assert rows != _candidates(conn, query, v, fusion="minmax", weights=[1.0, 0.7])
    want = _expected(rows, "minmax", (1.0, 0.2), 60.0)
    assert all(r[6] == pytest.approx(want[r[0]], rel=1e-9, abs=1e-12) for r in rows)
    # as rare a word without a digit: the default {1,0.7}
    word = "rfc quoxil"
    assert _candidates(conn, word, v, fusion="minmax") == \
        _candidates(conn, word, v, fusion="minmax", weights=[1.0, 0.7])
    # a rare word with a digit in it is not a number: {1,0.7}
    code = "rfc kx4z"
    assert _candidates(conn, code, v, fusion="minmax") == \
        _candidates(conn, code, v, fusion="minmax", weights=[1.0, 0.7])
    # a number beside a rarer word: the word decides, {1,0.7}
    beside = "1 quoxil"
    assert _candidates(conn, beside, v, fusion="minmax") == \
        _candidates(conn, beside, v, fusion="minmax", weights=[1.0, 0.7])


def test_a_rare_number_leads_from_three_tenths_of_the_query(
        conn: psycopg.Connection[Any]) -> None:
    # Sphinx words a PEP's index entry `Python Enhancement Proposals PEP 487`: the number is
    # by far the rarest word, yet under 0.4 of the query's idf
    docs = [doc("target", "alpha beta gamma delta 777 pier")]
    docs += [doc(f"{w}{i}", f"{w} harbour crane {i}") for w in ("alpha", "beta", "gamma", "delta")
             for i in ("one", "two")]
    docs += [doc(f"f{i}", f"harbour crane boat {i}") for i in "abcdefghijk"]
    ingest(conn, docs, dims=DIMS, seed=23)
    v = unit(np.random.default_rng(24), DIMS)

    def number_share(query: str) -> float:
        share = one_row(conn.execute(
            "select max(t.idf) filter (where t.term = '777') / sum(t.idf) "
            "from pgfunnel.index_version iv, lateral (select pgfunnel._bm25_idf(d.df, "
            "iv.chunk_count) as idf, d.term from pgfunnel._term_df(iv.id, "
            "pgfunnel.analyze(%s, iv.analyzer, true)) d) t where iv.state = 'active'",
            (query,)))[0]
        return float(share)

    three = "alpha beta gamma 777"
    assert 0.3 <= number_share(three) < 0.4  # the premise: 0.33
    rows = _candidates(conn, three, v, fusion="minmax")
    assert rows == _candidates(conn, three, v, fusion="minmax", weights=[1.0, 0.2])
    assert rows != _candidates(conn, three, v, fusion="minmax", weights=[1.0, 0.7])
    # one more word as common: under 0.3 of the query, the number no longer decides it
    four = "alpha beta gamma delta 777"
    assert number_share(four) < 0.3
    assert _candidates(conn, four, v, fusion="minmax") == \
        _candidates(conn, four, v, fusion="minmax", weights=[1.0, 0.7])


def test_default_weights_let_the_dense_leg_lead_when_common_words_outvote_the_rarest(
        conn: psycopg.Connection[Any]) -> None:
    # `clang command line option -fPIE`: chunks holding the entry's common words outscored
    # the option's own short chunk, while the best match still held over half the idf
    common = "kara lopo"
    docs = [doc("common", f"{common} {common}")]
    docs += [doc(f"c{i}", f"{common.split()[i % 2]} mira kapo tevo lune") for i in range(10)]
    docs += [doc("rare", "quoxil mira kapo tevo lune sura")]
    docs += [doc(f"f{i}", "mira kapo tevo lune sura dorn") for i in range(8)]
    ingest(conn, docs, dims=DIMS, seed=13)
    v = unit(np.random.default_rng(14), DIMS)

    def citekey(chunk_id: int) -> str:
        return str(conn.execute("select d.citekey from pgfunnel.chunk ch join "
                                "pgfunnel.document d on d.id = ch.document_id "
                                "where ch.id = %s", (chunk_id,)).fetchone()[0])  # type: ignore[index]

    query = f"{common} quoxil"
    rows = _candidates(conn, query, v, fusion="minmax")
    best = min((r for r in rows if r[1] is not None), key=lambda r: r[1])
    assert citekey(best[0]) == "common"  # the premise: the rarest word is not in it
    shares = dict(conn.execute(
        "select term, pgfunnel._bm25_idf(df, 20) from pgfunnel._term_df("
        "(select a.version_id from pgfunnel.collection c, pgfunnel._active_version(c.id) a "
        "where c.name = 't'), %s)", (query.split(),)).fetchall())
    assert shares["quoxil"] / sum(shares.values()) >= 0.4
    assert rows == _candidates(conn, query, v, fusion="minmax", weights=[0.7, 1.0])
    assert rows != _candidates(conn, query, v, fusion="minmax", weights=[1.0, 0.7])
    want = _expected(rows, "minmax", (0.7, 1.0), 60.0)
    assert all(r[6] == pytest.approx(want[r[0]], rel=1e-9, abs=1e-12) for r in rows)
    # the rarest word in the best match: {1,0.7}
    held = f"{common} mira"
    assert _candidates(conn, held, v, fusion="minmax") == \
        _candidates(conn, held, v, fusion="minmax", weights=[1.0, 0.7])
    # only min-max fusion with weights left to the default follows the rule
    assert _candidates(conn, query, v, fusion="rrf") == \
        _candidates(conn, query, v, fusion="rrf", weights=[1.0, 0.7])
