"""Funnel (candidate -> rerank -> final) against the real database: rerank-off parity
with funnel_search, a real tiny cross-encoder, the pinned rerank-before-cap order, the
failure modes of the rerank step, and the opt-in query transformations."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator, Sequence
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from funnel_util import one_row

from pgfunnel.db import connect
from pgfunnel.errors import ConfigError, InvalidInputError, ModelLoadError, RerankError
from pgfunnel.ingest import Ingester
from pgfunnel.rerank import Reranker
from pgfunnel.search import _FINAL_SQL, Funnel, FusionUsed, Result, SearchParams, SearchResponse
from pgfunnel.sources import DocumentRecord
from pgfunnel.tiny_models import build_tiny_cross_encoder
from pgfunnel.transform import GuardedRewriter


@pytest.fixture(scope="module")
def tiny_reranker(tmp_path_factory: pytest.TempPathFactory) -> Reranker:
    path = build_tiny_cross_encoder(tmp_path_factory.mktemp("ce") / "tiny")
    return Reranker(str(path), device="cpu")


class Counting:
    """Delegates to a real reranker and counts model calls; ``drop`` loses rows."""

    def __init__(self, inner: Any, drop: int = 0) -> None:
        self.inner = inner
        self.calls = 0
        self.drop = drop
        self.model_name = inner.model_name

    def rank(self, query: str, documents: Sequence[str]) -> list[dict[str, Any]]:
        self.calls += 1
        rows: list[dict[str, Any]] = self.inner.rank(query, documents)
        return rows[: len(rows) - self.drop]


def _cap_and_cut(chunks: Sequence[Any], k: int, cap: int) -> list[int]:
    seen: dict[str, int] = {}
    out: list[int] = []
    for c in chunks:
        if seen.get(c.citekey, 0) < cap and len(out) < k:
            seen[c.citekey] = seen.get(c.citekey, 0) + 1
            out.append(c.chunk_id)
    return out


# -- rerank off: exactly funnel_search ------------------------------------------------


def test_rerank_off_returns_exactly_funnel_search(sample_conn: psycopg.Connection[Any],
                                                  embedder: Any, tiny_reranker: Reranker) -> None:
    q = "refund window on annual plans"
    vec = embedder.embed_query(q)
    expected = sample_conn.execute(
        "select * from pgfunnel.funnel_search(%s, %s, k => 7, principals => '{}')",
        (q, vec)).fetchall()
    assert len(expected) == 7
    plain = Funnel(sample_conn, embedder=embedder).search(q, k=7, principals=[])
    # funnel_search's columns, and each chunk's document_id after them
    assert [dataclasses.astuple(r)[:-1] for r in plain.results] == [tuple(r) for r in expected]
    off = Funnel(sample_conn, embedder=embedder, reranker=tiny_reranker).search(
        q, k=7, principals=[], rerank=False)
    assert [dataclasses.astuple(r)[:-1] for r in off.results] == [tuple(r) for r in expected]
    assert not off.reranked and all(r.rerank_rank is None for r in off.results)


@pytest.mark.parametrize("name", ["rerank_depth", "rerank_gate_margin", "reranker",
                                  "embedder", "rewriter", "followup"])
def test_a_funnel_setting_given_to_one_search_says_where_it_goes(
        sample_conn: psycopg.Connection[Any], embedder: Any, tiny_reranker: Reranker,
        name: str) -> None:
    """docs/tuning.md keeps a CPU rerank small with `rerank_depth=20`; given to search()
    it was "rerank_depth: unknown search parameter (known: as_of, b, ...)", as if there
    were no such setting. It is the Funnel's, and the error says so."""
    funnel = Funnel(sample_conn, embedder=embedder, reranker=tiny_reranker)
    given: dict[str, Any] = {name: 20}
    for call in (lambda: funnel.search("refund window", **given),
                 lambda: funnel.check("refund window", **given)):
        with pytest.raises(ConfigError) as exc:
            call()
        assert exc.value.parameter == name
        said = str(exc.value)
        assert f"a setting of the Funnel, not of one search: Funnel(..., {name}=...)" in said
        assert "unknown search parameter" not in said


# -- rerank on: a real (tiny) CrossEncoder reorders the pool and nothing else ----------


def test_tiny_cross_encoder_reorders_the_pool_only(sample_conn: psycopg.Connection[Any],
                                                   embedder: Any,
                                                   tiny_reranker: Reranker) -> None:
    q = "how do I change the billing currency"
    funnel = Funnel(sample_conn, embedder=embedder, reranker=tiny_reranker)
    resp = funnel.search(q, k=5, principals=[], per_source_cap=2)
    assert resp.reranked and resp.rerank_skipped_reason is None
    vec = embedder.embed_query(q)
    cands = sample_conn.execute(
        "select chunk_id, fused_rank, fused_score, text from pgfunnel.candidates("
        "%s, %s, k => 5, principals => '{}', per_source_cap => 2)", (q, vec)).fetchall()
    # same candidates with the same fused ranks/scores: rerank only changes the order
    assert sorted((c.chunk_id, c.fused_rank, c.fused_score) for c in resp.pool) == sorted(
        (c[0], c[1], c[2]) for c in cands)
    # the new order is the model's, scoring exactly the shown snippets
    scores = tiny_reranker.predict(q, [c.text for c in resp.pool])
    assert [c.rerank_score for c in resp.pool] == pytest.approx(scores)
    assert scores == sorted(scores, reverse=True)
    assert [c.rerank_rank for c in resp.pool] == list(range(1, len(resp.pool) + 1))
    # the final query capped and cut the reranked order
    assert [r.chunk_id for r in resp.results] == _cap_and_cut(resp.pool, 5, 2)
    assert [r.final_rank for r in resp.results] == [1, 2, 3, 4, 5]
    assert all(r.rerank_score is not None for r in resp.results)


# -- pinned: rerank happens before the per-source cap ---------------------------------


class PreferMarker:
    """Deterministic scorer: chunks containing ``marker`` first, others keep their order."""

    model_name = "test/prefer-marker"

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def rank(self, query: str, documents: Sequence[str]) -> list[dict[str, Any]]:
        scores = [(10.0 if self.marker in d else 0.0) - i / 100 for i, d in enumerate(documents)]
        order = sorted(range(len(documents)), key=lambda i: -scores[i])
        return [{"corpus_id": i, "score": scores[i]} for i in order]


def _sections(topic: str, n: int, extra: str = "") -> str:
    return "\n\n".join(
        f"## {topic} part {i}\n\nGlacier backup restore steps for glacier backup restore "
        f"jobs, glacier backup restore retries and glacier restore limits, section {i}. {extra}"
        for i in range(1, n + 1))


@pytest.fixture()
def cap_conn(db: str, embedder: Any) -> Iterator[psycopg.Connection[Any]]:
    with connect(db, autocommit=True) as conn:
        Ingester(conn, "default", embedder=embedder, chunk_words=20).ingest([
            DocumentRecord("alpha", _sections("Alpha", 4), title="Alpha"),
            DocumentRecord("beta", _sections("Beta", 4), title="Beta"),
            DocumentRecord("gamma", "## Gamma\n\nA lighthouse keeper note that mentions a "
                           "glacier once, among many unrelated words about tides and lamps.",
                           title="Gamma"),
        ])
        yield conn


def test_rerank_before_cap_lets_a_third_source_in(cap_conn: psycopg.Connection[Any]) -> None:
    k, cap = 4, 2
    funnel = Funnel(cap_conn, embedder=None, reranker=PreferMarker("lighthouse"))
    resp = funnel.search("glacier backup restore", k=k, principals=[], per_source_cap=cap)
    by_key = {c.citekey for c in resp.pool}
    assert by_key == {"alpha", "beta", "gamma"}
    gamma = next(c for c in resp.pool if c.citekey == "gamma")
    assert gamma.fused_rank > k  # in fused order it was far outside the first k
    # actual (rerank, then cap, then cut): the promoted third source is first
    assert resp.results[0].citekey == "gamma"
    assert {r.citekey for r in resp.results} == {"alpha", "beta", "gamma"}
    assert len(resp.results) == k
    # swapped (cap and cut in fused order, then rerank those k): gamma never gets in
    fused_order = sorted(resp.pool, key=lambda c: c.fused_rank)
    capped = {c.chunk_id: c for c in fused_order if c.chunk_id in
              set(_cap_and_cut(fused_order, k, cap))}
    swapped_texts = list(capped.values())
    reranked = PreferMarker("lighthouse").rank("q", [c.text for c in swapped_texts])
    swapped = [swapped_texts[row["corpus_id"]].chunk_id for row in reranked]
    assert "gamma" not in {capped[i].citekey for i in swapped}
    assert swapped != [r.chunk_id for r in resp.results]


class Recording(PreferMarker):
    """PreferMarker that keeps how many candidates each call scored."""

    def __init__(self, marker: str) -> None:
        super().__init__(marker)
        self.sizes: list[int] = []

    def rank(self, query: str, documents: Sequence[str]) -> list[dict[str, Any]]:
        self.sizes.append(len(documents))
        return super().rank(query, documents)


def test_rerank_scores_the_pool_asked_for_when_it_was_widened_for_the_cap(
        db: str, embedder: Any) -> None:
    # a long document fills the lexical top 40 (k 10 x overfetch 4), so the pool is widened
    # until other documents let the cap return 10; the reranker still scores 40
    with connect(db, autocommit=True) as conn:
        Ingester(conn, "default", embedder=embedder, chunk_words=20).ingest(
            [DocumentRecord("alpha", _sections("Alpha", 60), title="Alpha")]
            + [DocumentRecord(f"note{i}", f"## Note {i}\n\nA glacier is mentioned once here, "
                              f"among words about tides and lamps {i}.", title=f"Note {i}")
               for i in range(10)])
        scorer = Recording("lighthouse")
        resp = Funnel(conn, embedder=None, reranker=scorer).search(
            "glacier backup restore", k=10, principals=[])
        assert len(resp.pool) > 40 and scorer.sizes == [40]
        assert len(resp.results) == 10
        assert [r.citekey for r in resp.results].count("alpha") == 3
        assert Funnel(conn, embedder=None, reranker=scorer, rerank_depth=50).search(
            "glacier backup restore", k=10, principals=[]).reranked
        assert scorer.sizes == [40, 50]


# -- failure modes of the rerank step ----------------------------------------------------


def test_zero_candidates_means_no_model_call(sample_conn: psycopg.Connection[Any],
                                             tiny_reranker: Reranker) -> None:
    counting = Counting(tiny_reranker)
    funnel = Funnel(sample_conn, embedder=None, reranker=counting)
    resp = funnel.search("qzxvbnmw", k=5, principals=[])
    assert resp.results == [] and resp.pool == []
    assert counting.calls == 0
    assert not resp.reranked and resp.rerank_skipped_reason == "no candidates"


def test_a_dense_only_search_is_not_reranked_and_says_why(
        sample_conn: psycopg.Connection[Any], embedder: Any, tiny_reranker: Reranker) -> None:
    # docs/python-api.md: a cross-encoder has no text to read, the pool keeps fused order
    counting = Counting(tiny_reranker)
    funnel = Funnel(sample_conn, embedder=None, reranker=counting)
    vector = embedder.embed_query("refund annual plan")
    resp = funnel.search(None, query_embedding=vector, k=5, principals=[])
    plain = funnel.search(None, query_embedding=vector, k=5, principals=[], rerank=False)
    assert counting.calls == 0 and resp.results
    assert not resp.reranked
    assert resp.rerank_skipped_reason == "no query text to rerank against"
    assert [r.chunk_id for r in resp.results] == [r.chunk_id for r in plain.results]


def test_score_count_mismatch_is_a_hard_error(sample_conn: psycopg.Connection[Any],
                                              embedder: Any, tiny_reranker: Reranker) -> None:
    funnel = Funnel(sample_conn, embedder=embedder, reranker=Counting(tiny_reranker, drop=1))
    with pytest.raises(RerankError, match="scores for"):
        funnel.search("refund annual plan", k=5, principals=[])


class Garbling:
    """A custom reranker whose rows are right in number but wrong in content."""

    model_name = "test/garbling"

    def __init__(self, garble: Any) -> None:
        self.garble = garble

    def rank(self, query: str, documents: Sequence[str]) -> list[dict[str, Any]]:
        rows = [{"corpus_id": i, "score": float(len(documents) - i)}
                for i in range(len(documents))]
        self.garble(rows)
        return rows


@pytest.mark.parametrize(("garble", "match"), [
    (lambda rows: rows[-1].update(corpus_id=len(rows)),
     r"^reranker returned corpus_id \d+ for \d+ candidates \(expected 0\.\.\d+\)$"),
    (lambda rows: rows[-1].update(corpus_id=0), r"^reranker returned corpus_id 0 more than once$"),
    (lambda rows: rows[1].update(score=float("nan")),
     r"^reranker returned score nan for corpus_id 1 \(scores must be finite numbers\)$"),
], ids=["out-of-range", "duplicate", "nan"])
def test_a_custom_rerankers_bad_rows_are_a_rerank_error(
        sample_conn: psycopg.Connection[Any], embedder: Any, garble: Any, match: str) -> None:
    # were: a raw IndexError, "ConfigError(chunk_ids): chunk .. appears more than once",
    # and a result with rerank_score=nan
    funnel = Funnel(sample_conn, embedder=embedder, reranker=Garbling(garble))
    with pytest.raises(RerankError, match=match):
        funnel.search("refund annual plan", k=5, principals=[])


def test_gate_skips_the_model_and_says_so_in_the_trace(sample_conn: psycopg.Connection[Any],
                                                        embedder: Any,
                                                        tiny_reranker: Reranker) -> None:
    counting = Counting(tiny_reranker)
    # 0 would skip every search, so it is refused; the smallest gap still gates
    with pytest.raises(ConfigError, match="rerank_gate_margin: must be a finite number > 0"):
        Funnel(sample_conn, embedder=embedder, reranker=counting, rerank_gate_margin=0.0)
    funnel = Funnel(sample_conn, embedder=embedder, reranker=counting, rerank_gate_margin=1e-12)
    resp = funnel.search("refund annual plan", k=5, principals=[], trace=True)
    assert counting.calls == 0 and not resp.reranked
    assert resp.rerank_skipped_reason is not None and resp.rerank_skipped_reason.startswith("gate")
    row = sample_conn.execute("select config from pgfunnel.search_log where id = %s",
                              (resp.search_id,)).fetchone()
    assert row is not None and row[0]["rerank_skipped"].startswith("gate")
    assert row[0]["rerank"] is False
    # a skipped rerank took no time of its own: timings_ms had a `rerank` entry anyway
    assert "rerank" not in resp.timings_ms and {"candidates", "final"} <= set(resp.timings_ms)
    # the gate off (default): the model runs
    ran = Funnel(sample_conn, embedder=embedder, reranker=counting).search(
        "refund annual plan", k=5, principals=[])
    assert counting.calls == 1 and ran.reranked and ran.timings_ms["rerank"] > 0


def test_wrong_model_id_raises_naming_the_setting(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError) as info:
        Reranker("pgfunnel-test/no-such-cross-encoder", device="cpu", local_files_only=True)
    assert info.value.setting == "rerank_model"
    assert "pgfunnel-test/no-such-cross-encoder" in str(info.value)
    with pytest.raises(ModelLoadError, match="rerank_model"):
        Reranker(str(tmp_path / "missing"), device="cpu")


# -- opt-in query transformations --------------------------------------------------------


def _logged_transforms(conn: psycopg.Connection[Any], search_id: int | None) -> Any:
    row = conn.execute("select config -> 'transforms' from pgfunnel.search_log where id = %s",
                       (search_id,)).fetchone()
    assert row is not None
    return row[0]


def test_search_multi_merges_phrasings_with_rrf(sample_conn: psycopg.Connection[Any],
                                                embedder: Any) -> None:
    funnel = Funnel(sample_conn, embedder=embedder)
    phrasings = ["refund on an annual plan", "money back for a yearly subscription",
                 "Refund on an annual plan"]
    resp = funnel.search_multi(phrasings, k=6, principals=[], per_source_cap=1, trace=True)
    rec = resp.transforms[-1]
    assert rec["step"] == "multi_query" and len(rec["queries"]) == 2  # duplicate dropped
    assert [r.final_rank for r in resp.results] == list(range(1, 7))
    citekeys = [r.citekey for r in resp.results]
    assert len(set(citekeys)) == len(citekeys)  # the cap holds across the merged list
    singles = [funnel.search(q, k=6, principals=[], per_source_cap=1) for q in rec["queries"]]
    from pgfunnel.transform import rrf_merge

    fused = [cid for cid, _ in rrf_merge([[r.chunk_id for r in s.results] for s in singles])]
    citekey_of = {r.chunk_id: r.citekey for s in singles for r in s.results}
    # the merged list, capped at one chunk per source, then cut to k
    capped = [cid for i, cid in enumerate(fused)
              if citekey_of[cid] not in {citekey_of[c] for c in fused[:i]}]
    assert [r.chunk_id for r in resp.results] == capped[:6]
    for sid in rec["search_ids"]:
        assert _logged_transforms(sample_conn, sid)[0]["step"] == "multi_query"


def test_search_multi_keeps_how_each_phrasing_was_resolved(
        sample_conn: psycopg.Connection[Any], embedder: Any) -> None:
    # with history, only the first phrasing's follow-up record reached the response:
    # the text the others were searched as could not be told
    funnel = Funnel(sample_conn, embedder=embedder)
    resp = funnel.search_multi(["what about monthly plans?", "and for monthly?"],
                               history=["how do refunds work?"], k=3, principals=[])
    followups = [t for t in resp.transforms if t["step"] == "followup"]
    assert [(t["part"], t["original"], t["query"]) for t in followups] == [
        (0, "what about monthly plans?", "refunds what about monthly plans?"),
        (1, "and for monthly?", "refunds for monthly?")]
    assert resp.transforms[-1]["step"] == "multi_query"
    # the text searched, as search() gives it, not the first phrasing as given
    assert resp.query == "refunds what about monthly plans?"


def test_search_decomposed_gives_each_part_its_share(sample_conn: psycopg.Connection[Any],
                                                     embedder: Any) -> None:
    funnel = Funnel(sample_conn, embedder=embedder)
    q = "currency on monthly plans and levy on annual plans"
    resp = funnel.search_decomposed(q, qualifiers=["monthly", "annual"], k=4, principals=[])
    rec = resp.transforms[-1]
    assert rec["step"] == "decompose" and len(rec["parts"]) == 2
    tops = [funnel.search(p, k=4, principals=[]).results for p in rec["parts"]]
    assert tops[0][0].chunk_id != tops[1][0].chunk_id
    # round-robin: slot 1 is part 1's best, slot 2 part 2's best
    assert [r.chunk_id for r in resp.results[:2]] == [tops[0][0].chunk_id, tops[1][0].chunk_id]
    whole = funnel.search_decomposed("terms and conditions", k=3, principals=[])
    assert whole.transforms[-1]["parts"] == ["terms and conditions"]


def _log_rows(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    row = conn.execute("select (select count(*) from pgfunnel.search_log), "
                       "(select count(*) from pgfunnel.search_trace)").fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def test_a_plan_refuses_a_text_before_any_of_its_traced_searches_runs(
        sample_conn: psycopg.Connection[Any]) -> None:
    # each of a plan's searches commits its own trace: a text refused at the second
    # phrasing (or part) left the first one's search_log and search_trace rows behind
    # the error, and a lone surrogate was refused as "invalid input syntax for type json"
    funnel = Funnel(sample_conn, embedder=None)
    before = _log_rows(sample_conn)
    with pytest.raises(InvalidInputError,
                       match=r"^phrasings\[1\]: is 12,000 characters long; a search takes "
                             r"at most 10,000$"):
        funnel.search_multi(["refund", "x " * 6000], k=3, trace=True)
    with pytest.raises(InvalidInputError,
                       match=r"^phrasings\[2\]: is not valid Unicode \(a lone surrogate"):
        funnel.search_multi(["refund", "money back", "a\ud800"], k=3, trace=True)
    # a merged tail joins its questions with " and ": a part can outgrow the query
    many = "refund? and plan? " * 500
    assert len(many) < 10_000
    with pytest.raises(InvalidInputError,
                       match=r"^query_text \(part 3 of 3 after decomposing it\): is 12,969 "):
        funnel.search_decomposed(many, k=3, trace=True)
    # a megabyte is refused before the split, which took seconds of CPU over it (this
    # process's CPU time: a loaded machine's other processes do not count)
    started = time.process_time()
    with pytest.raises(InvalidInputError, match=r"^query_text: is 1,080,000 characters long"):
        funnel.search_decomposed("refund? and plan? " * 60_000, k=3, trace=True)
    assert time.process_time() - started < 1
    assert _log_rows(sample_conn) == before
    # the plans still trace what they search
    funnel.search_multi(["refund", "money back"], k=3, trace=True)
    assert _log_rows(sample_conn)[0] == before[0] + 2


def test_guarded_rewrite_keeps_err_code_or_falls_back(sample_conn: psycopg.Connection[Any],
                                                      embedder: Any) -> None:
    q = "what does ERR-4029 mean"
    lossy = Funnel(sample_conn, embedder=embedder, rewriter=lambda s: "error code meaning")
    resp = lossy.search(q, k=3, principals=[], trace=True)
    assert resp.query == q
    rec = resp.transforms[0]
    assert rec["step"] == "rewrite" and not rec["used_rewrite"]
    assert "ERR-4029" in rec["missing"] and rec["reason"].startswith("fallback")
    assert _logged_transforms(sample_conn, resp.search_id)[0]["missing"] == ["ERR-4029"]

    keeps = Funnel(sample_conn, embedder=embedder, rewriter=GuardedRewriter(
        lambda s: "meaning of error err 4029", timeout_s=5))
    resp = keeps.search(q, k=3, principals=[])
    assert resp.query == "meaning of error err 4029" and resp.transforms[0]["used_rewrite"]

    # the guard protects the words of the collection searched, not of the Funnel's default
    sample_conn.execute("update pgfunnel.collection set settings = settings || "
                        "'{\"protected_terms\": [\"refund\"]}' where name = 'default'")
    drop = Funnel(sample_conn, "elsewhere", embedder=embedder,
                  rewriter=lambda s: "money back policy")
    resp = drop.search("refund window", k=3, principals=[], collection="default")
    assert resp.query == "refund window" and not resp.transforms[0]["used_rewrite"]
    assert "refund" in resp.transforms[0]["missing"]


def test_followup_carries_the_topic_into_the_trace(sample_conn: psycopg.Connection[Any],
                                                   embedder: Any) -> None:
    funnel = Funnel(sample_conn, embedder=embedder)
    resp = funnel.search("what about monthly plans?", history=["how do refunds work?"],
                         k=3, principals=[], trace=True)
    assert resp.query == "refunds what about monthly plans?"
    assert resp.results[0].citekey == "refunds-monthly"
    logged = _logged_transforms(sample_conn, resp.search_id)
    assert logged[0]["step"] == "followup" and logged[0]["carried_terms"] == ["refunds"]
    # without history nothing is transformed and nothing is recorded
    assert funnel.search("what about monthly plans?", k=3, principals=[]).transforms == []


@pytest.mark.filterwarnings("ignore::pgfunnel.errors.SearchNoticeWarning")  # "for", "all"
def test_a_self_contained_turn_with_history_is_searched_as_written(
        sample_conn: psycopg.Connection[Any], embedder: Any) -> None:
    # a chat app sends the history with every turn: "for loop syntax?" and "Any" were
    # searched as "refunds for loop syntax?" and "refunds __all__"
    funnel = Funnel(sample_conn, embedder=embedder)
    for own in ("for loop syntax?", "__all__"):
        resp = funnel.search(own, history=["how do refunds work?"], k=3, principals=[])
        assert resp.query == own
        assert resp.transforms[0]["step"] == "followup"
        assert resp.transforms[0]["carried_terms"] == []
        assert resp.transforms[0]["reason"].endswith("unchanged")


def test_a_followup_hook_that_returns_no_resolution_is_named(
        sample_conn: psycopg.Connection[Any]) -> None:
    # a resolve() returning the text itself failed as "'str' object has no attribute
    # 'original'", naming no hook
    from pgfunnel.errors import ConfigError

    class TextOnly:
        def resolve(self, history: Any, query: str) -> Any:
            return f"refunds {query}"

    funnel = Funnel(sample_conn, embedder=None, followup=TextOnly())
    with pytest.raises(ConfigError, match="^followup: .* must return a Resolution .* got str"):
        funnel.search("what about monthly plans?", history=["how do refunds work?"], k=3)


def test_a_history_turn_postgres_cannot_hold_is_refused_as_the_query_is(
        sample_conn: psycopg.Connection[Any]) -> None:
    # a NUL in the query was refused, naming query_text; one in a history turn was taken,
    # as the CLI's --history and an eval file's history refuse it
    from pgfunnel.errors import InvalidInputError
    from pgfunnel.explain import explain

    funnel = Funnel(sample_conn, embedder=None)
    for history, said in ((["how do refunds work?", "re\x00funds"], r"^history\[1\]: contains "
                           "a NUL byte, which Postgres text cannot hold$"),
                          (["a\ud800"], r"^history\[0\]: ")):
        with pytest.raises(InvalidInputError, match=said):
            funnel.search("what about monthly plans?", history=history, k=3, principals=[])
        with pytest.raises(InvalidInputError, match=said):
            explain(funnel, "what about monthly plans?", 1, history=history, k=3,
                    principals=[])
    assert funnel.search("what about monthly plans?", history=["how do refunds work?"], k=3,
                         principals=[]).results


def test_explain_follows_the_text_a_follow_up_or_a_rewrite_searches(
        sample_conn: psycopg.Connection[Any], embedder: Any) -> None:
    # explain took no history (an unknown search parameter) and ignored the rewriter: the
    # chunk a resolved or rewritten search returned was explained for text no search ran
    from pgfunnel.explain import explain

    history = ["how do refunds work?"]
    funnel = Funnel(sample_conn, embedder=embedder)
    resp = funnel.search("what about monthly plans?", history=history, k=1, principals=[])
    top = resp.results[0]
    assert top.citekey == "refunds-monthly"
    e = explain(funnel, "what about monthly plans?", top.chunk_id, history=history, k=1,
                principals=[])
    assert e.verdict == "returned" and e.final_rank == 1
    said = " ".join(e.notices)
    assert "'refunds what about monthly plans?'" in said and \
        "'what about monthly plans?'" in said and "followup: follow-up cue" in said
    rewriting = Funnel(sample_conn, embedder=embedder,
                       rewriter=lambda q: "refunds on monthly plans")
    e = explain(rewriting, "money back monthly", top.chunk_id, k=1, principals=[])
    assert e.verdict == "returned" and "'refunds on monthly plans'" in " ".join(e.notices)
    # nothing changed, nothing said
    assert explain(funnel, "refunds monthly", top.chunk_id, history=[], k=1,
                   principals=[]).notices == []


def test_result_fields_are_typed(sample_conn: psycopg.Connection[Any], embedder: Any) -> None:
    r = Funnel(sample_conn, embedder=embedder).search("refund", k=1, principals=[]).results[0]
    assert isinstance(r, Result) and r.item_key == f"{r.citekey}#{r.ordinal}"
    assert r.fused_rank >= 1 and (r.lexical_rank is not None or r.dense_rank is not None)


@pytest.mark.parametrize("kw,name", [
    ({"k": 10.5}, "k"), ({"k": "10"}, "k"), ({"k": True}, "k"),
    ({"overfetch": 2.0}, "overfetch"), ({"lexical_depth": "80"}, "lexical_depth"),
    ({"rrf_k": "60"}, "rrf_k"), ({"k1": None}, "k1"), ({"fusion": None}, "fusion"),
    ({"collection": 3}, "collection"), ({"tenant": 5}, "tenant"), ({"trace": 1}, "trace"),
    ({"weights": ["a", 1]}, "weights"), ({"weights": "11"}, "weights"),
])
def test_search_params_of_the_wrong_type_name_the_parameter(kw: dict[str, Any],
                                                            name: str) -> None:
    # a float k used to reach Postgres as an argument no function takes, reported as a
    # missing schema ("run pgfunnel init")
    from pgfunnel.errors import ConfigError
    from pgfunnel.search import SearchParams

    with pytest.raises(ConfigError) as exc:
        SearchParams.build(**kw)
    assert exc.value.parameter == name
    # made directly, as callers of candidates() and final() make one, or replaced: the same
    import dataclasses

    with pytest.raises(ConfigError) as exc:
        SearchParams(**kw)
    assert exc.value.parameter == name
    with pytest.raises(ConfigError) as exc:
        dataclasses.replace(SearchParams(), **kw)
    assert exc.value.parameter == name


@pytest.mark.parametrize("weights", [[1, 2, 3], [1], [], (0.5,), np.array([1.0, 0.5, 0.2])])
def test_weights_that_are_not_two_numbers_are_refused_in_python_terms(
        sample_db: str, weights: Any) -> None:
    """weights=[1, 2, 3] passed SearchParams and was refused by funnel_search in SQL's
    words ('must be two numbers {lexical,dense} ... got {1,2,3}'); SearchParams says it
    itself, in Python's."""
    expected = (r"^weights: must be two numbers \[lexical, dense\], got "
                rf"{len(weights)} number")
    with pytest.raises(ConfigError, match=expected) as exc:
        SearchParams(weights=weights)
    assert exc.value.parameter == "weights" and "{" not in str(exc.value), str(exc.value)
    with Funnel(sample_db) as f:
        with pytest.raises(ConfigError, match=expected):
            f.search("refund", weights=weights)
        # refused before the model was needed
        assert f._embedder is None


def test_a_funnel_refuses_hooks_it_cannot_call_and_searches_no_more_once_closed(
        sample_db: str) -> None:
    from pgfunnel.errors import ConfigError, ConnectionFailedError

    # a followup of the wrong kind failed only at a search with history (AttributeError)
    with pytest.raises(ConfigError, match="^followup: "):
        Funnel(sample_db, embedder=None, followup=5)
    with pytest.raises(ConfigError, match="^rewriter: "):
        Funnel(sample_db, embedder=None, rewriter="x")

    class OwnGuard:  # a rewrite() method of its own: let in, then refused at the search
        def rewrite(self, query: str) -> str:
            return query

    with pytest.raises(ConfigError, match="^rewriter: .* got OwnGuard"):
        Funnel(sample_db, embedder=None, rewriter=OwnGuard())
    with Funnel(sample_db, embedder=None) as f:
        assert f.search("refund", k=1).results
        # "no" is a true value: it asked for a rerank this Funnel cannot do
        with pytest.raises(ConfigError, match="^rerank: must be True, False or None"):
            f.search("refund", rerank="no")  # type: ignore[arg-type]
    # after the with block a search reopened a connection that nothing closed again
    with connect(sample_db, autocommit=True) as watcher:
        before = watcher.execute("select count(*) from pg_stat_activity "
                                 "where datname = current_database()").fetchone()
        with pytest.raises(ConnectionFailedError, match="closed"):
            f.search("refund", k=1)
        assert watcher.execute("select count(*) from pg_stat_activity "
                               "where datname = current_database()").fetchone() == before


def _admits(hint: Any, value: Any) -> bool:
    """Whether a value is of the annotated type, as far as a type checker reads its outer
    types (a union's members, a generic's origin: ``Sequence[str]`` admits a list)."""
    import types
    import typing

    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return any(_admits(member, value) for member in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is Any:
        return True
    origin = typing.get_origin(hint) or hint
    return isinstance(value, origin)


@pytest.mark.parametrize(("name", "value"), [
    ("principals", ["alice", "team-a"]),        # docs: "principals=['alice']"
    ("principals", ("alice",)),
    ("weights", [1, 0.5]),                        # docs: "a list, tuple or 1-D numpy array"
    ("weights", (1.0, 0.5)),
    ("weights", np.array([1.0, 0.5])),
    ("weights", None),
])
def test_search_params_annotations_admit_the_documented_values(name: str, value: Any) -> None:
    """SearchParams(principals=['alice']) and weights=[1, 0.5] (or a numpy array), as the
    docs give them to candidates() and final() callers, were refused by mypy --strict
    (`expected "tuple[str, ...]"`, `expected "tuple[float, float] | None"`), though the
    constructor takes them; so was dataclasses.replace(p, principals=[...])."""
    import typing

    hints = typing.get_type_hints(SearchParams)
    assert _admits(hints[name], value), (name, hints[name])
    made = SearchParams(**{name: value})
    # kept as a tuple whatever sequence was given
    assert getattr(made, name) is None if value is None else \
        isinstance(getattr(made, name), tuple)


def test_search_params_made_directly_check_the_readers_identity() -> None:
    # principals="support-staff" was searched as the principals s, u, p, o, r, t, ...
    from pgfunnel.errors import ConfigError, MissingIdentityError
    from pgfunnel.search import SearchParams

    with pytest.raises(ConfigError, match="not one string"):
        SearchParams(principals="support-staff")
    with pytest.raises(MissingIdentityError):
        SearchParams(principals=None)  # type: ignore[arg-type]
    assert SearchParams(principals=["a", "b"]).principals == ("a", "b")


def test_search_params_accept_numpy_numbers_and_none_where_optional() -> None:
    import numpy as np

    from pgfunnel.search import SearchParams

    p = SearchParams.build(k=np.int64(5), rrf_k=np.float32(30), k1=1, lexical_depth=None,
                           tenant=None, weights=(np.float64(1), 0))
    assert (p.k, p.rrf_k, p.k1, p.weights) == (5, 30.0, 1.0, (1.0, 0.0))
    assert type(p.k) is int and type(p.rrf_k) is float


@pytest.mark.parametrize("threshold", [None, 5])
def test_a_connection_that_prepares_nothing_gets_nothing_prepared(
        sample_db: str, embedder: Any, tiny_reranker: Reranker, threshold: int | None) -> None:
    # behind a transaction pooler (PgBouncer in transaction mode) psycopg's advice is
    # prepare_threshold=None: a statement prepared in one backend is missing in the next.
    # Funnel's statements follow the connection's choice (psycopg's prepare=True yields to
    # it), plain and reranked searches alike.
    from pgvector.psycopg import register_vector

    with psycopg.connect(sample_db, autocommit=True, prepare_threshold=threshold) as conn:
        register_vector(conn)
        plain = Funnel(conn, embedder=embedder)
        reranked = Funnel(conn, embedder=embedder, reranker=tiny_reranker)
        for q in ["refund window", "err 4029", "export my data"] * 2:
            assert plain.search(q, k=3).results
            assert reranked.search(q, k=3).reranked
        prepared = conn.execute("select count(*) from pg_prepared_statements").fetchone()
        assert prepared is not None
        assert (prepared[0] == 0) == (threshold is None)


@pytest.mark.parametrize("setting", [None, "none", "off", "3"])
def test_pgfunnel_prepare_threshold_reaches_the_connections_pgfunnel_opens(
        sample_db: str, embedder: Any, monkeypatch: pytest.MonkeyPatch,
        setting: str | None) -> None:
    """The CLI (and a Funnel made from a DSN) opens its own connections, so behind a
    transaction-mode pooler there was no way to turn psycopg's automatic prepared
    statements off: an eval's or a long job's sixth search prepared its statement on one
    server connection and the pooler ran the next on another. PGFUNNEL_PREPARE_THRESHOLD
    reaches every connection pgfunnel.db.connect opens."""
    if setting is None:
        monkeypatch.delenv("PGFUNNEL_PREPARE_THRESHOLD", raising=False)
    else:
        monkeypatch.setenv("PGFUNNEL_PREPARE_THRESHOLD", setting)
    with Funnel(sample_db, embedder=embedder) as funnel:
        for q in ["refund window", "err 4029", "export my data"] * 2:
            assert funnel.search(q, k=3).results
        with funnel.connection() as conn:
            prepared = conn.execute("select count(*) from pg_prepared_statements").fetchone()
    assert prepared is not None
    assert (prepared[0] == 0) == (setting in ("none", "off")), (setting, prepared)


@pytest.mark.parametrize("setting", ["yes", "-1", "2.5"])
def test_a_bad_pgfunnel_prepare_threshold_is_refused_naming_it(
        sample_db: str, monkeypatch: pytest.MonkeyPatch, setting: str) -> None:
    from pgfunnel.errors import ConfigError

    monkeypatch.setenv("PGFUNNEL_PREPARE_THRESHOLD", setting)
    with pytest.raises(ConfigError, match=r"^PGFUNNEL_PREPARE_THRESHOLD: must be none"):
        connect(sample_db).close()


def test_one_string_where_a_list_belongs_is_refused(sample_db: str) -> None:
    """Iterated, "kb-ab" would be the citekeys k, b, -, a: one string is an error."""
    from pgfunnel.errors import ConfigError
    from pgfunnel.ingest import delete_documents

    with connect(sample_db, autocommit=True) as conn:
        before = conn.execute("select count(*) from pgfunnel.document").fetchone()
        with pytest.raises(ConfigError, match=r"^citekeys: must be a list of strings"):
            delete_documents(conn, "default", "kb-ab")
        with pytest.raises(ConfigError, match=r"^citekeys: must hold only strings"):
            delete_documents(conn, "default", [1, 2])  # type: ignore[list-item]
        assert conn.execute("select count(*) from pgfunnel.document").fetchone() == before
        f = Funnel(conn, embedder=None)
        with pytest.raises(ConfigError, match=r"^phrasings: must be a list of strings"):
            f.search_multi("refund")
        with pytest.raises(ConfigError, match=r"^history: must be a list of strings"):
            f.search("and for annual plans?", history="how do refunds work?")
        assert f.search("refund", history=["how do refunds work?"]).results


def test_a_funnel_on_one_connection_serves_threads_one_search_at_a_time(
        sample_db: str) -> None:
    """A Funnel built from a DSN holds one connection; threads sharing it used to
    interleave their transactions on it (raw errors, or a transaction left open)."""
    import threading

    errors: list[BaseException] = []
    with Funnel(sample_db, embedder=None) as f:
        expected = [r.chunk_id for r in f.search("refund annual plan", k=5).results]

        def work() -> None:
            try:
                for _ in range(15):
                    got = [r.chunk_id for r in f.search("refund annual plan", k=5,
                                                        trace=True).results]
                    assert got == expected
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors[:3]
        with f.connection() as conn:
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    # every traced search committed: another session sees all 60 logs
    with connect(sample_db, autocommit=True) as other:
        assert other.execute("select count(*) from pgfunnel.search_log").fetchone() == (60,)


def test_rerank_depth_must_be_a_positive_integer(sample_db: str) -> None:
    from pgfunnel.errors import ConfigError

    bads: list[Any] = [0, 2.5, "3", True]
    for bad in bads:
        with pytest.raises(ConfigError, match=r"^rerank_depth: must be an integer"):
            Funnel(sample_db, embedder=None, rerank_depth=bad)
    # a good value without a reranker would change nothing, silently
    for name, value in (("rerank_depth", 5), ("rerank_gate_margin", 0.1)):
        setting: dict[str, Any] = {name: value}
        with pytest.raises(ConfigError, match=rf"^{name}: applies only with a reranker"):
            Funnel(sample_db, embedder=None, **setting)


def test_translate_unwraps_sqlalchemy_errors(sample_db: str) -> None:
    import sqlalchemy as sa

    from pgfunnel.errors import NotFoundError, translate
    from pgfunnel.sqla import engine_from_dsn

    engine = engine_from_dsn(sample_db)
    try:
        with engine.connect() as conn, pytest.raises(sa.exc.DBAPIError) as exc:
            conn.execute(sa.text("select * from funnel_search('refund', collection => 'nope')"))
        err = translate(exc.value)
        assert isinstance(err, NotFoundError) and "nope" in str(err)
    finally:
        engine.dispose()


def test_a_metadata_filter_jsonb_cannot_hold_is_named(sample_db: str) -> None:
    import datetime as dt

    from pgfunnel.errors import ConfigError

    with Funnel(sample_db, embedder=None) as f:
        for bad in ({"on": dt.date(2026, 1, 1)}, {"score": float("nan")}):
            with pytest.raises(ConfigError, match=r"^metadata_filter: is not JSON"):
                f.search("refund", metadata_filter=bad)
        assert f.search("refund", metadata_filter={}).results


def test_a_metadata_filter_key_that_is_not_a_string_is_named(sample_db: str) -> None:
    # json.dumps sent {1: 1} as {"1": 1} without a word: a filter on the key "1"
    from pgfunnel.errors import ConfigError

    with Funnel(sample_db, embedder=None) as f:
        with pytest.raises(ConfigError) as err:
            f.search("refund", metadata_filter={1: 1})
        assert str(err.value) == (
            "metadata_filter: has the key 1 (int); JSON object keys are strings, and it "
            "would be sent as '1': pass '1' if that is the key meant")
        # at any depth, in a mapping or a list, named where it is
        for bad, said in (
                ({"plan": {2.5: "x"}}, r"has the key 2\.5 \(float\) in metadata_filter"
                                       r"\['plan'\]; JSON object keys are strings, and it "
                                       r"would be sent as '2\.5'"),
                ({"tags": [{"a": 1}, {True: 1}]},
                 r"has the key True \(bool\) in metadata_filter\['tags'\]\[1\]; .* sent as "
                 r"'true'"),
                ({None: "x"}, r"has the key None \(NoneType\); .* sent as 'null'")):
            with pytest.raises(ConfigError, match="^metadata_filter: " + said):
                f.search("refund", metadata_filter=bad)
        # the key as a string is a filter like any other
        assert f.search("refund", metadata_filter={"1": 1}).results == []
        assert f.search("refund", metadata_filter={"plan": {"2.5": "x"}}).results == []


def test_search_values_ingest_would_refuse_or_sql_cannot_take_are_named(
        sample_db: str) -> None:
    import datetime as dt

    from pgfunnel.errors import ConfigError

    with Funnel(sample_db, embedder=None) as f:
        for kw, param in (({"tenant": ""}, "tenant"), ({"language": ""}, "language"),
                          ({"as_of": "yesterday"}, "as_of"), ({"as_of": 5}, "as_of")):
            with pytest.raises(ConfigError, match=f"^{param}: "):
                f.search("refund", **kw)
        assert f.search("refund", as_of=dt.datetime.now(dt.UTC)).results
        for k in ("x", None, 2.5):
            with pytest.raises(ConfigError, match="^k: must be an integer"):
                f.search_multi(["refund", "money back"], k=k)


def test_funnel_on_an_applications_own_psycopg_connection(sample_db: str, embedder: Any) -> None:
    """A connection opened with psycopg.connect (no pgvector types registered, autocommit
    off): searches that send a vector work, each search commits its trace, and neither a
    lookup nor a search leaves the connection in a transaction."""
    with psycopg.connect(sample_db) as conn:
        funnel = Funnel(conn, "default", embedder=embedder)
        first = funnel.search("refund on an annual plan", k=3, trace=True)
        again = funnel.search("refund on an annual plan", k=3,
                              query_embedding=embedder.embed_query("refund on an annual plan"))
        assert [r.chunk_id for r in first.results] == [r.chunk_id for r in again.results]
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        with psycopg.connect(sample_db, autocommit=True) as other:
            assert other.execute("select count(*) from pgfunnel.search_log where id = %s",
                                 (first.search_id,)).fetchone() == (1,)


def test_query_hooks_leave_an_applications_connection_idle_with_no_identity(
        sample_db: str) -> None:
    """A rewriter, history (follow-ups) and decomposition read the collection's settings
    first. That lookup began a transaction on a connection without autocommit that
    nothing committed: the search became a savepoint in it, the reader's transaction-local
    identity stayed set on the application's connection for its next request, and the
    trace was never committed."""
    from pgfunnel.errors import SchemaMissingError

    with psycopg.connect(sample_db) as conn:
        funnel = Funnel(conn, "default", embedder=None, rewriter=lambda q: q)
        logged = []
        searches: list[Callable[[], SearchResponse]] = [
                lambda: funnel.search("refund annual plan", principals=["alice"], k=2,
                                      trace=True),
                lambda: funnel.search("and for monthly?", principals=["alice"], k=2,
                                      trace=True, history=["refund annual plan"]),
                lambda: funnel.search_decomposed(
                    "refund on annual plans and storage on trial plans",
                    principals=["alice"], k=2, trace=True)]
        for search in searches:
            logged.append(search().search_id)
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            assert conn.execute("select current_setting('pgfunnel.principals', true)"
                                ).fetchone() in ((None,), ("",))
            conn.rollback()
        logged = logged[:2]  # search_decomposed answers with no search id of its own
        with psycopg.connect(sample_db, autocommit=True) as other:
            assert other.execute("select count(*) from pgfunnel.search_log where id = any(%s)",
                                 (logged,)).fetchone() == (2,)
    # and before `pgfunnel init` the lookup is the first statement: a pgfunnel error
    with psycopg.connect(sample_db, autocommit=True) as conn:
        conn.execute("drop schema pgfunnel cascade")
    with pytest.raises(SchemaMissingError):
        Funnel(sample_db, embedder=None).search("refund", history=["billing"])


def test_session_statement_timeout_stands_unless_the_search_sets_one(sample_db: str) -> None:
    with connect(sample_db, autocommit=True) as conn:
        funnel = Funnel(conn, "default", embedder=None)
        conn.execute("set statement_timeout = '60s'")  # a DBA's guard against runaways
        with funnel._transaction(conn, SearchParams.build()):
            assert conn.execute("show statement_timeout").fetchone() == ("1min",)
        with funnel._transaction(conn, SearchParams.build(statement_timeout_ms=1500)):
            assert conn.execute("show statement_timeout").fetchone() == ("1500ms",)
        assert conn.execute("show statement_timeout").fetchone() == ("1min",)


def test_principals_from_a_generator_are_read_once(sample_db: str) -> None:
    with Funnel(sample_db, "default", embedder=None) as funnel:
        as_list = funnel.search("refund annual plan", k=5, principals=["alice"])
        as_generator = funnel.search("refund annual plan", k=5,
                                     principals=(p for p in ["alice"]))
    assert [r.chunk_id for r in as_generator.results] == [r.chunk_id for r in as_list.results]
    with pytest.raises(ConfigError, match="principals"):
        SearchParams.build(principals=42)


def test_a_pool_registers_the_vector_type_once_per_connection(
        sample_db: str, embedder: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # the function pgfunnel.db imported (and does not re-export)
    from pgvector.psycopg import register_vector as real
    from psycopg_pool import ConnectionPool

    import pgfunnel.db

    registered: list[int] = []

    def counted(conn: psycopg.Connection[Any]) -> None:
        registered.append(id(conn))
        real(conn)

    monkeypatch.setattr(pgfunnel.db, "register_vector", counted)
    with ConnectionPool(sample_db, min_size=1, max_size=1, kwargs={"autocommit": True}) as pool:
        funnel = Funnel(pool, "default", embedder=embedder)
        for _ in range(3):
            assert funnel.search("refund on an annual plan", k=3).results
    assert len(registered) == 1


def test_an_exhausted_pool_is_a_pgfunnel_error(sample_db: str) -> None:
    from psycopg_pool import ConnectionPool

    from pgfunnel.errors import ConnectionFailedError

    with ConnectionPool(sample_db, min_size=1, max_size=1, timeout=0.2,
                        kwargs={"autocommit": True}) as pool, pool.connection():
        funnel = Funnel(pool, "default", embedder=None)
        with pytest.raises(ConnectionFailedError, match="no connection free in the pool"):
            funnel.search("refund", k=3)


def test_a_pool_not_open_is_told_as_such(sample_db: str) -> None:
    # a pool made with open=False (or closed already) was "lost the connection to
    # Postgres: the pool ... is not open yet": no connection had been lost
    from psycopg_pool import ConnectionPool

    from pgfunnel.errors import ConnectionFailedError

    pool = ConnectionPool(sample_db, open=False)
    funnel = Funnel(pool, "default", embedder=None)
    with pytest.raises(ConnectionFailedError) as exc:
        funnel.search("refund", k=3)
    said = str(exc.value)
    assert "is not open yet" in said and "pool.open()" in said
    assert "lost the connection" not in said
    pool.open()
    assert funnel.search("refund", k=3).results
    pool.close()
    with pytest.raises(ConnectionFailedError, match="is already closed: open the pool"):
        funnel.search("refund", k=3)


def test_rerank_gate_margin_is_checked_when_the_funnel_is_built(sample_db: str) -> None:
    bads: list[Any] = ["0.5", -1.0, float("nan"), True]
    for bad in bads:
        with pytest.raises(ConfigError, match="rerank_gate_margin"):
            Funnel(sample_db, "default", embedder=None, rerank_gate_margin=bad)


def test_results_carry_the_headings_their_section_sits_under(
        conn: psycopg.Connection[Any], embedder: Any) -> None:
    text = ("# Backups\n\nHow backups work.\n\n## Glacier\n\nCold storage tier.\n\n"
            "### Restore limits\n\nA glacier restore takes up to twelve hours.")
    Ingester(conn, "default", embedder=embedder).ingest(
        [DocumentRecord("backups", text, title="Backups")])
    vector = embedder.embed_query("glacier restore hours")
    (sql_path,) = conn.execute(
        "select section_path from funnel_search('glacier restore hours', %s, 1)",
        (vector,)).fetchone()  # type: ignore[misc]
    assert sql_path == "Backups > Glacier"
    funnel = Funnel(conn, embedder=embedder)
    resp = funnel.search("glacier restore hours", k=3, principals=[])
    top = resp.results[0]
    assert (top.heading, top.section_path) == ("Restore limits", "Backups > Glacier")
    # the reranked path (candidates, then final) returns the same, and so does its pool
    reranked = Funnel(conn, embedder=embedder, reranker=PreferMarker("twelve")).search(
        "glacier restore hours", k=3, principals=[])
    assert reranked.results[0].section_path == "Backups > Glacier"
    assert {c.chunk_id: c.section_path for c in reranked.pool}[top.chunk_id] == \
        "Backups > Glacier"


def test_api_input_mistakes_found_by_qa_are_named_errors(sample_db: str) -> None:
    """Each of these used to pass silently or raise a raw error (QA pass on the API)."""
    from pgfunnel.errors import InvalidInputError, NotFoundError, PgfunnelError

    # a bytes principal was stored as "b'alice'", matching nothing
    with pytest.raises(ConfigError, match="principals: must hold only strings"):
        SearchParams.build(principals=[b"alice"])
    with pytest.raises(ConfigError, match="principals: must hold only strings"):
        SearchParams.build(principals=["alice", 1])
    # iterated, a mapping gave its keys: the reader searched as "user", not "alice"
    with pytest.raises(ConfigError, match="principals: must be a list of strings, got a dict"):
        SearchParams.build(principals={"user": "alice"})
    assert SearchParams.build(principals={"alice", "team-a"}).principals  # a set is a list
    # Postgres' refusal of a timeout past its maximum came back as a garbled ConfigError
    with pytest.raises(ConfigError, match="statement_timeout_ms: .* up to 2147483647"):
        SearchParams.build(statement_timeout_ms=10**12)
    with Funnel(sample_db, embedder=None) as funnel:
        # the public pool / final methods raised psycopg's own errors
        with funnel.connection() as conn:
            with pytest.raises(NotFoundError):
                funnel.candidates(conn, "refund", None, SearchParams.build(collection="nope"))
            conn.rollback()
            with pytest.raises(ConfigError, match="k"):
                funnel.candidates(conn, "refund", None, SearchParams(k=0))
            conn.rollback()
            with pytest.raises(PgfunnelError):
                funnel.final(conn, "refund", [], SearchParams(k=0), reranked=False)
            conn.rollback()
        # checked before any phrasing is searched, under its own name
        with pytest.raises(ConfigError, match="merge_rrf_k: must be a positive integer"):
            funnel.search_multi(["a refund", "money back"], merge_rrf_k=0, k=3)
        with pytest.raises(InvalidInputError, match="query: must be a string"):
            funnel.search_decomposed(None)  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="qualifiers: must be a list of strings"):
            funnel.search_decomposed("refund and invoices", qualifiers="monthly")


def test_an_empty_query_is_checked_like_any_other(sample_db: str) -> None:
    from pgfunnel.errors import ConfigError

    with Funnel(sample_db, embedder=None) as f:
        for empty in ("", "  \n"):
            for kw, param in (({"k": 0}, "k"), ({"fusion": "bogus"}, "fusion"),
                              ({"weights": [-1, 1]}, "weights")):
                with pytest.raises(ConfigError, match=f"^{param}: "):
                    f.search(empty, **kw)
            with pytest.warns(UserWarning, match="the query is empty"):
                response = f.search(empty)
            assert response.results == []
            assert any("the query is empty" in n for n in response.notices)


def test_a_dense_weight_of_zero_needs_no_query_embedding(sample_db: str) -> None:
    # embedder "auto" loads the model on the first search that needs a vector
    with Funnel(sample_db) as f:
        lexical = f.search("refund annual plan", weights=[1, 0], k=5)
        assert f._embedder is None
        assert lexical.results and all(r.dense_rank is None for r in lexical.results)
        ranks = [r.lexical_rank for r in lexical.results if r.lexical_rank is not None]
        assert len(ranks) == len(lexical.results) and ranks == sorted(ranks)


def test_a_bad_value_is_told_before_the_model_loads(sample_db: str) -> None:
    from pgfunnel.errors import ConfigError, NotFoundError

    with Funnel(sample_db) as f:
        for kw, param in (({"k": 0}, "k"), ({"fusion": "bogus"}, "fusion"),
                          ({"rrf_k": 0}, "rrf_k"), ({"weights": [0, 0]}, "weights"),
                          ({"lexical_depth": 0}, "lexical_depth"), ({"b": 2}, "b")):
            with pytest.raises(ConfigError, match=f"^{param}: "):
                f.search("refund", **kw)
        with pytest.raises(NotFoundError, match="'nosuch'"):
            f.search("refund", collection="nosuch")
        # nothing above needed the model, and it was not loaded
        assert f._embedder is None
        assert f.search("refund", k=3).results and f._embedder is not None


def test_values_the_driver_or_sql_cannot_take_are_named_before_any_sql(
        sample_db: str) -> None:
    from pgfunnel.errors import ConfigError

    with Funnel(sample_db, embedder=None) as f:
        for kw, param in (({"tenant": "a\ud800"}, "tenant"), ({"collection": "d\ud800"},
                                                              "collection"),
                          ({"principals": ["\udcff"]}, "principals"),
                          ({"language": "e\x00n"}, "language"),
                          ({"principals": ["a\x00"]}, "principals"),
                          ({"metadata_filter": {"a": "b\x00"}}, "metadata_filter"),
                          ({"metadata_filter": {"a": ["\ud800"]}}, "metadata_filter"),
                          # beyond int32 the call used to match no function and say so
                          ({"per_source_cap": 2**35}, "per_source_cap"),
                          ({"k": 2**40}, "k"), ({"lexical_depth": -2**33}, "lexical_depth")):
            with pytest.raises(ConfigError, match=f"^{param}: "):
                f.search("refund", **kw)


def test_a_source_the_funnel_cannot_use_is_refused_at_construction(sample_db: str) -> None:
    """A web app has a SQLAlchemy engine (or async pieces) at hand: given one, the Funnel
    was built, and its first search raised a bare TypeError from the DSN parsing."""
    from psycopg_pool import AsyncConnectionPool
    from sqlalchemy.orm import Session

    from pgfunnel.sqla import engine_from_dsn

    engine = engine_from_dsn(sample_db)
    try:
        with pytest.raises(ConfigError, match="source: .*SQLAlchemy engine.*funnel_search_tvf"):
            Funnel(engine, embedder=None)
        # a SQLAlchemy raw connection, Connection or Session has a `connection` attribute
        # as pools do: it was taken for one, and the first search failed with "TypeError:
        # 'Connection' object is not callable"
        raw = engine.raw_connection()
        try:
            with engine.connect() as sa_conn, Session(engine) as session:
                for source in (raw, sa_conn, session):
                    with pytest.raises(ConfigError, match="source: .*SQLAlchemy connection "
                                                          "or session.*dbapi_connection"):
                        Funnel(source, embedder=None)
            # what the message points to works
            funnel = Funnel(raw.dbapi_connection, embedder=None)
            assert funnel.search("refund", k=1, principals=[]).results
        finally:
            raw.close()
    finally:
        engine.dispose()
    pool = AsyncConnectionPool(sample_db, open=False)
    with pytest.raises(ConfigError, match="source: a Funnel is synchronous"):
        Funnel(pool, embedder=None)
    with pytest.raises(ConfigError, match="source: must be a DSN"):
        Funnel(42, embedder=None)
    # what it takes still works
    with Funnel(sample_db, embedder=None) as funnel:
        assert funnel.search("refund", k=1, principals=[]).results


@pytest.mark.parametrize("reranker", ["cross-encoder/ms-marco-MiniLM-L6-v2", 3, object()])
def test_funnel_refuses_a_reranker_without_rank(reranker: Any) -> None:
    # a model id given as the reranker failed only at the first search, with
    # "AttributeError: 'str' object has no attribute 'rank'"
    from pgfunnel.errors import ConfigError
    from pgfunnel.search import Funnel

    with pytest.raises(ConfigError) as exc:
        Funnel("postgresql:///unused", reranker=reranker)
    assert exc.value.parameter == "reranker"
    if isinstance(reranker, str):
        assert "Reranker('cross-encoder/ms-marco-MiniLM-L6-v2')" in str(exc.value)


def test_funnel_refuses_the_reranker_class_itself() -> None:
    # Reranker without parentheses has a rank attribute as well (an unbound method): it
    # was taken, and the first search failed with "TypeError: Reranker.rank() missing 1
    # required positional argument: 'documents'"
    from pgfunnel.errors import ConfigError
    from pgfunnel.rerank import Reranker
    from pgfunnel.search import Funnel

    with pytest.raises(ConfigError, match=r"the class Reranker itself.*Reranker\(\.\.\.\)") as exc:
        Funnel("postgresql:///unused", reranker=Reranker)
    assert exc.value.parameter == "reranker"


def test_a_lost_connection_is_raised_without_psycopg_log_lines(sample_db: str) -> None:
    # the server ending a Funnel's connection raised ConnectionFailedError, and printed
    # "error ignored terminating <psycopg.Pipeline [BAD] ...>: the connection is lost"
    # twice to stderr above it, as if a second problem
    import subprocess
    import sys

    script = ("import psycopg\n"
              "from pgfunnel.errors import ConnectionFailedError\n"
              "from pgfunnel.search import Funnel\n"
              f"dsn = {sample_db!r}\n"
              "with psycopg.connect(dsn, autocommit=True) as conn, \\\n"
              "        psycopg.connect(dsn, autocommit=True) as admin:\n"
              "    funnel = Funnel(conn, embedder=None)\n"
              "    funnel.search('refund', principals=[])\n"
              "    admin.execute('select pg_terminate_backend(%s)', (conn.info.backend_pid,))\n"
              "    try:\n"
              "        funnel.search('refund', principals=[])\n"
              "    except ConnectionFailedError as exc:\n"
              "        print(type(exc).__name__)\n")
    res = subprocess.run([sys.executable, "-W", "ignore", "-c", script], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0 and res.stdout.strip() == "ConnectionFailedError", res
    assert res.stderr == "", res.stderr


class _ReversingReranker:
    """Puts the pool in reverse fused order: the reranked search returns other chunks."""

    model_name = "reverse"

    def rank(self, query: str, documents: Sequence[str], **_: Any) -> list[dict[str, Any]]:
        n = len(documents)
        return [{"corpus_id": n - 1 - i, "score": float(n - i)} for i in range(n)]


def test_explain_follows_the_funnels_reranker(sample_conn: psycopg.Connection[Any]) -> None:
    # explain() on a reranking Funnel answered "cut at k" for the chunk that Funnel's
    # search returned, and "returned" for one it did not, with a notice that it did not
    # follow the reranker
    import warnings

    from pgfunnel.explain import RERANK_NOT_FOLLOWED, explain

    query = "refund on an annual plan"
    funnel = Funnel(sample_conn, embedder=None, reranker=_ReversingReranker())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the analyzer's note on the words not searched
        returned = funnel.search(query, k=1, principals=[]).results[0]
        unreranked = funnel.search(query, k=1, principals=[], rerank=False).results[0]
    assert returned.chunk_id != unreranked.chunk_id
    e = explain(funnel, query, returned.chunk_id, k=1, principals=[])
    assert e.verdict == "returned" and e.final_rank == 1 and e.rerank_rank == 1
    assert RERANK_NOT_FOLLOWED not in e.notices
    e = explain(funnel, query, unreranked.chunk_id, k=1, principals=[])
    assert e.verdict in ("capped", "cut at k") and "after the rerank" in e.reason
    # rerank=False: the search without the reranker, as search(rerank=False) returns it
    e = explain(funnel, query, unreranked.chunk_id, k=1, principals=[], rerank=False)
    assert e.verdict == "returned" and not e.reranked and e.rerank_rank is None


def test_connections_and_pools_with_another_row_factory(sample_db: str) -> None:
    # an application's connection (or pool) opened with row_factory=dict_row failed every
    # search with KeyError 0, and one with namedtuple_row with "duplicate field name:
    # 'set_config'": the Funnel reads its rows by position
    from psycopg.rows import dict_row, namedtuple_row
    from psycopg_pool import ConnectionPool

    from pgfunnel.explain import explain

    expected = [r.chunk_id for r in Funnel(sample_db, embedder=None).search(
        "refund", k=5, principals=[]).results]
    for factory in (dict_row, namedtuple_row):
        with psycopg.connect(sample_db, row_factory=factory) as conn:
            funnel = Funnel(conn, embedder=None, reranker=_ReversingReranker())
            plain = funnel.search("refund", k=5, principals=[], rerank=False, trace=True)
            assert [r.chunk_id for r in plain.results] == expected
            reranked = funnel.search("refund", k=5, principals=[])
            assert reranked.reranked and reranked.results
            assert funnel.search_multi(["refund", "money back"], k=3, principals=[]).results
            assert funnel.active_model()[1] == 384
            # explain follows the reranked search, on the application's connection too
            e = explain(funnel, "refund", reranked.results[0].chunk_id, k=5, principals=[])
            assert (e.verdict, e.final_rank, e.rerank_rank) == (
                "returned", 1, reranked.results[0].rerank_rank)
            p = SearchParams.build(k=5, principals=[])
            assert Funnel(conn).embedder_for(conn, "default") is not None
            pool = funnel.candidates(conn, "refund", None, p)
            assert [r.chunk_id for r in funnel.final(conn, "refund", pool, p,
                                                     reranked=False)] == expected
            # the application's own statements still get its rows
            assert conn.row_factory is factory
            # (a dict or a namedtuple, as the factory makes it)
            row: Any = one_row(conn.execute("select 1 as one"))
            assert (row["one"] if factory is dict_row else row.one) == 1
    with ConnectionPool(sample_db, kwargs={"row_factory": dict_row}, min_size=1,
                        max_size=2) as conn_pool:
        funnel = Funnel(conn_pool, embedder=None)
        assert [r.chunk_id for r in funnel.search("refund", k=5,
                                                  principals=[]).results] == expected
        with conn_pool.connection() as conn:
            # (the pool's type does not follow the row_factory its kwargs set)
            assert conn.execute("select 1 as one").fetchone() == {  # type: ignore[comparison-overlap]
                "one": 1}


def test_candidates_on_a_connection_no_search_has_used(sample_db: str, embedder: Any) -> None:
    # candidates(conn, query, vector, p) on the application's own connection, before any
    # search ran on it, failed with "cannot adapt type 'ndarray' using placeholder '%b'":
    # pgvector's types were registered only by the Funnel's own connection()
    vector = embedder.embed_query("refund")
    p = SearchParams.build(k=5, principals=[])
    with psycopg.connect(sample_db) as conn:
        funnel = Funnel(sample_db, embedder=None)
        pool = funnel.candidates(conn, "refund", vector, p)
        assert pool and any(c.dense_rank is not None for c in pool)
        got = [r.chunk_id for r in funnel.final(conn, "refund", pool, p, reranked=False)]
        conn.rollback()
        expected = funnel.search("refund", query_embedding=vector, k=5, principals=[])
        assert got == [r.chunk_id for r in expected.results]
        funnel.close()


def test_pgvector_off_the_search_path_leaves_the_applications_transaction_alone(
        sample_db: str) -> None:
    # a search (or candidates()) whose vector cannot be sent, pgvector being off the
    # connection's search_path, is a ConfigError naming search_path; it also rolled back
    # the transaction the application had open on the connection, its work with it
    off_path = psycopg.conninfo.make_conninfo(sample_db, options="-c search_path=pgfunnel")
    # a plain list, which candidates() takes as search() does (it is typed for an ndarray)
    vector: Any = [0.1] * 384
    p = SearchParams.build(k=5, principals=[])
    with psycopg.connect(off_path) as conn:
        funnel = Funnel(conn, embedder=None)
        conn.execute("create temporary table app_work (x int)")
        conn.execute("insert into pg_temp.app_work values (1)")
        for search in (lambda: funnel.search("refund", query_embedding=vector, principals=[]),
                       lambda: funnel.candidates(conn, "refund", vector, p)):
            with pytest.raises(ConfigError) as exc:
                search()
            assert exc.value.parameter == "search_path"
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
            assert conn.execute("select x from pg_temp.app_work").fetchall() == [(1,)]
        conn.rollback()
        # a connection without a transaction of the application's is left idle
        with pytest.raises(ConfigError):
            funnel.candidates(conn, "refund", vector, p)
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def test_a_connection_with_raw_cursors(sample_db: str) -> None:
    # an application's connection opened with cursor_factory=psycopg.RawCursor ($1
    # placeholders) failed every search with "TypeError: raw queries require a sequence of
    # parameters" and an ingest with a syntax error at "%": pgfunnel writes %s
    expected = [r.chunk_id for r in Funnel(sample_db, embedder=None).search(
        "refund", k=5, principals=[]).results]
    with psycopg.connect(sample_db, autocommit=True, cursor_factory=psycopg.RawCursor) as conn:
        funnel = Funnel(conn, embedder=None, reranker=_ReversingReranker())
        assert [r.chunk_id for r in funnel.search("refund", k=5, principals=[],
                                                  rerank=False).results] == expected
        assert funnel.search("refund", k=5, principals=[]).reranked
        import numpy as np

        vector = np.ones((1, 384), dtype=np.float32) / np.sqrt(384)
        stats = Ingester(conn, "raw").ingest(
            [DocumentRecord(citekey="a", text="refund policy for the annual plan")],
            vectors={"a": vector})
        assert stats.chunks_given == 1
        assert conn.cursor_factory is psycopg.RawCursor  # put back
        assert conn.execute("select $1::int", (7,)).fetchone() == (7,)


def test_a_search_in_an_aborted_transaction_says_to_roll_it_back(sample_db: str) -> None:
    # it raised psycopg's "current transaction is aborted" after psycopg had logged
    # 'error ignored in rollback of <psycopg.Transaction ...>: savepoint "_pg3_1" does not
    # exist' (and the same for the pipeline), two more errors that were not the problem
    from funnel_util import logged

    from pgfunnel.errors import PgfunnelError

    with logged("psycopg") as messages, psycopg.connect(sample_db) as conn:
        funnel = Funnel(conn, embedder=None)
        with pytest.raises(psycopg.errors.DivisionByZero):
            conn.execute("select 1/0")
        for call in (lambda: funnel.search("refund", k=3, principals=[]),
                     lambda: funnel.search_multi(["refund", "money back"], k=3,
                                                 principals=[]),
                     funnel.active_model):
            with pytest.raises(PgfunnelError, match=r"transaction is aborted.*roll it "
                                                    r"back \(conn\.rollback\(\)"):
                call()
        conn.rollback()
        assert funnel.search("refund", k=3, principals=[]).results
    assert messages == []


@pytest.mark.parametrize("embedder", [5, "", b"all-MiniLM-L6-v2", object()])
def test_funnel_refuses_an_embedder_of_the_wrong_kind(embedder: Any) -> None:
    # taken as a model id, embedder=5 failed only at the first search, as
    # "embedding_model='5' could not be loaded" (an object, under its repr)
    with pytest.raises(ConfigError) as exc:
        Funnel("postgresql:///unused", embedder=embedder)
    assert exc.value.parameter == "embedder"
    # what it takes: "auto", None, an Embedder, a model id or a local path
    for fine in ("auto", None, "all-MiniLM-L6-v2", Path("/models/e5")):
        Funnel("postgresql:///unused", embedder=fine)


def test_explain_lookups_on_a_connection_with_another_row_factory(sample_db: str) -> None:
    # pgfunnel.explain's document_chunks and resolve_target, called directly on an
    # application's connection opened with row_factory=dict_row, failed with KeyError 0
    from psycopg.rows import dict_row

    from pgfunnel.explain import document_chunks, resolve_target

    p = SearchParams.build(k=5, principals=[])
    with psycopg.connect(sample_db) as plain:
        expected_chunks = document_chunks(plain, "refunds-annual", p)
        expected_id = resolve_target(plain, "refunds-annual#0", "default")
    assert expected_chunks and expected_id is not None
    with psycopg.connect(sample_db, row_factory=dict_row) as conn:
        assert document_chunks(conn, "refunds-annual", p) == expected_chunks
        assert resolve_target(conn, "refunds-annual#0", "default") == expected_id
        assert conn.row_factory is dict_row  # put back


def test_a_cross_encoder_passed_as_is_is_named_in_the_trace(
        sample_conn: psycopg.Connection[Any], tiny_reranker: Reranker) -> None:
    # a sentence-transformers CrossEncoder given as the reranker (it has rank(), but no
    # pgfunnel model_name) left search_log.config->>'rerank_model' NULL
    from sentence_transformers import CrossEncoder

    path = tiny_reranker.model_name
    funnel = Funnel(sample_conn, embedder=None, reranker=CrossEncoder(path, device="cpu"))
    resp = funnel.search("refund annual plan", k=3, principals=[], trace=True)
    assert resp.reranked and resp.search_id is not None
    row = sample_conn.execute("select config->>'rerank_model' from pgfunnel.search_log "
                              "where id = %s", (resp.search_id,)).fetchone()
    assert row is not None and row[0] == path
    # a pgfunnel Reranker is named by its model_name, as before
    traced = Funnel(sample_conn, embedder=None, reranker=tiny_reranker).search(
        "refund annual plan", k=3, principals=[], trace=True)
    row = sample_conn.execute("select config->>'rerank_model' from pgfunnel.search_log "
                              "where id = %s", (traced.search_id,)).fetchone()
    assert row is not None and row[0] == path


def test_a_traced_search_logs_its_as_of_tenant_and_principals(
        sample_conn: psycopg.Connection[Any], tiny_reranker: Reranker) -> None:
    # the config Python logs (a reranked search's, through final()) named as_of in
    # Python's str() of the value and left tenant and principals out: one config and one
    # hash for searches as different readers, and an as_of no SQL search wrote alike
    import datetime as dt

    when = dt.datetime(2020, 3, 1, 12, tzinfo=dt.timezone(dt.timedelta(hours=1)))
    for reranker in (None, tiny_reranker):
        funnel = Funnel(sample_conn, embedder=None, reranker=reranker)
        resp = funnel.search("refund annual plan", k=3, principals=["bob", "alice"],
                             tenant="acme", as_of=when, trace=True)
        assert resp.reranked == (reranker is not None) and resp.search_id is not None
        row = sample_conn.execute("select config from pgfunnel.search_log where id = %s",
                                  (resp.search_id,)).fetchone()
        assert row is not None
        assert row[0]["as_of"] == "2020-03-01T11:00:00.000000Z"
        assert row[0]["tenant"] == "acme" and row[0]["principals"] == ["alice", "bob"]
        now = funnel.search("refund annual plan", k=3, principals=[], trace=True)
        row = sample_conn.execute("select config from pgfunnel.search_log where id = %s",
                                  (now.search_id,)).fetchone()
        assert row is not None and row[0]["as_of"] is None and row[0]["principals"] == []


def test_a_traced_search_that_finds_nothing_has_a_search_id(
        sample_db: str, sample_conn: psycopg.Connection[Any],
        tiny_reranker: Reranker) -> None:
    # SearchResponse.search_id came from the first result: a traced search that found
    # nothing was logged, but its id was None, and `search --trace` printed no id for it
    import json

    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    seen = set()
    for reranker in (None, tiny_reranker):
        funnel = Funnel(sample_conn, embedder=None, reranker=reranker)
        resp = funnel.search("quokka", k=3, principals=[], trace=True)
        assert resp.results == [] and resp.search_id is not None
        assert sample_conn.execute("select query_text from pgfunnel.search_log where id = %s",
                                   (resp.search_id,)).fetchone() == ("quokka",)
        seen.add(resp.search_id)
        # untraced: no id, whatever the session traced before
        assert funnel.search("quokka", k=3, principals=[]).search_id is None
    assert len(seen) == 2
    res = CliRunner().invoke(app, ["search", "quokka", "--lexical-only", "--trace",
                                   "--dsn", sample_db])
    assert res.exit_code == 0, res.output
    assert "no results." in res.stdout and "trace: search_id " in res.stdout
    logged = int(res.stdout.split("trace: search_id ")[1].split()[0])
    assert sample_conn.execute("select query_text from pgfunnel.search_log where id = %s",
                               (logged,)).fetchone() == ("quokka",)
    res = CliRunner().invoke(app, ["search", "quokka", "--lexical-only", "--trace", "--json",
                                   "--dsn", sample_db])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["search_id"] > logged


def test_a_reranker_that_fails_raises_a_rerank_error_and_the_funnel_goes_on(
        sample_db: str) -> None:
    """An exception from the reranker's own rank() (out of GPU memory, a tokenizer error)
    came out as it was, so an application catching PgfunnelError to fall back to the
    search without rerank did not catch it."""

    class OutOfMemory:
        def rank(self, query: str, documents: list[str]) -> list[dict[str, Any]]:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    with Funnel(sample_db, "default", reranker=OutOfMemory()) as funnel:
        with pytest.raises(RerankError, match=r"^the reranker failed on \d+ candidates: "
                                              r"RuntimeError: CUDA out of memory") as caught:
            funnel.search("refund on an annual plan", k=3, principals=[])
        assert isinstance(caught.value.__cause__, RuntimeError)
        # the search's transaction is gone: the same Funnel serves the fallback
        plain = funnel.search("refund on an annual plan", k=3, principals=[], rerank=False)
        assert plain.results and not plain.reranked


def test_rrf_k_given_for_another_fusion_is_refused(sample_db: str) -> None:
    # it was read by nothing: a search with fusion 'minmax' and rrf_k=5 ran as if rrf_k
    # were not given, without a word (the CLI's --rrf-k has refused it since)
    from pgfunnel.errors import ConfigError
    from pgfunnel.eval.harness import EvalConfig
    from pgfunnel.explain import explain

    with Funnel(sample_db) as f:
        for kw in ({"rrf_k": 5}, {"rrf_k": 60, "fusion": "zscore"}):
            with pytest.raises(ConfigError,
                               match="^rrf_k: applies only with fusion 'rrf'") as refused:
                f.search("refund", k=3, **kw)
            assert refused.value.parameter == "rrf_k"
            with pytest.raises(ConfigError, match="^rrf_k: applies only"):
                explain(f, "refund", "refunds-annual", **kw)
        assert f._embedder is None  # refused before the model loaded
        # given with rrf it is read; a Funnel's own rrf_k stays its default for rrf searches
        assert f.search("refund", k=3, fusion="rrf", rrf_k=5).results
    with pytest.raises(ConfigError, match="^rrf_k: "):
        Funnel(sample_db, rrf_k=5)
    with Funnel(sample_db, fusion="rrf", rrf_k=5) as f:
        assert f.search("refund", k=3, fusion="minmax").results
    with pytest.raises(ConfigError, match="config: bad: rrf_k: applies only"):
        EvalConfig.from_dict("bad", {"fusion": "minmax", "rrf_k": 10})
    assert EvalConfig.from_dict("ok", {"fusion": "rrf", "rrf_k": 10}).search["rrf_k"] == 10


def test_check_tells_a_bad_value_or_collection_without_searching(sample_db: str) -> None:
    # what `pgfunnel search --rerank` runs before the cross-encoder loads; a web app can
    # run it before its own slow work
    from pgfunnel.errors import ConfigError, InvalidInputError, NotFoundError

    with Funnel(sample_db) as f:
        f.check("refund", k=3)
        f.check(None, fusion="rrf", rrf_k=10)
        for kw, parameter in (({"k": 0}, "k"), ({"rrf_k": 5}, "rrf_k"),
                              ({"weights": [0, 0]}, "weights"), ({"b": 2}, "b")):
            with pytest.raises(ConfigError) as refused:
                f.check("refund", **kw)
            assert refused.value.parameter == parameter
        with pytest.raises(InvalidInputError, match="^query_text: contains a NUL byte"):
            f.check("a\x00b")
        with pytest.raises(NotFoundError, match="'nosuch'"):
            f.check("refund", collection="nosuch")
        assert f._embedder is None  # nothing loaded, nothing searched


# -- explain follows the reranker ---------------------------------------------------------


def _explained(funnel: Funnel, chunk_id: str | int, **params: Any) -> Any:
    from pgfunnel.explain import explain

    return explain(funnel, "glacier backup restore", chunk_id, k=4, principals=[],
                   per_source_cap=2, **params)


def _chunk(conn: psycopg.Connection[Any], citekey: str, ordinal: int) -> int:
    row = conn.execute("select ch.id from pgfunnel.chunk ch join pgfunnel.document d on "
                       "d.id = ch.document_id where d.citekey = %s and ch.ordinal = %s",
                       (citekey, ordinal)).fetchone()
    assert row is not None
    return int(row[0])


def test_explain_on_a_reranking_funnel_follows_the_reranked_order(
        cap_conn: psycopg.Connection[Any]) -> None:
    # explain followed the fused order and warned: a chunk the reranker lifted into the
    # results was "cut at k", one it pushed below k "returned"
    gamma, beta1 = _chunk(cap_conn, "gamma", 0), _chunk(cap_conn, "beta", 1)
    funnel = Funnel(cap_conn, embedder=None, reranker=PreferMarker("lighthouse"))
    resp = funnel.search("glacier backup restore", k=4, principals=[], per_source_cap=2,
                         trace=True)
    lifted = _explained(funnel, gamma)
    assert _explained(funnel, gamma, rerank=False).verdict == "cut at k"
    assert lifted.verdict == "returned" and lifted.final_rank == 1 and lifted.reranked
    assert lifted.rerank_rank == 1 and lifted.rerank_score == pytest.approx(9.92)
    assert lifted.fused_rank == 9 and lifted.notices == []
    assert lifted.reason.startswith("returned at rank 1 (reranked to 1 of 9 (score 9.92) "
                                    "from fused rank 9;")
    pushed = _explained(funnel, beta1)
    assert _explained(funnel, beta1, rerank=False).verdict == "returned"
    assert pushed.verdict == "cut at k" and pushed.final_rank is None
    assert pushed.rerank_rank == 7 and pushed.fused_rank == 6
    assert "before it after the rerank and the per-source cap and k is 4" in pushed.reason
    # every chunk of the pool: explain says what the search returned, and what its trace
    # recorded for each dropped candidate (the trace records the rerank stage per chunk)
    returned = {r.chunk_id: r.final_rank for r in resp.results}
    trace = {row[0]: row[1:] for row in cap_conn.execute(
        "select chunk_id, rerank_rank, final_rank, dropped from pgfunnel.search_trace "
        "where search_id = %s", (resp.search_id,))}
    for c in resp.pool:
        e = _explained(funnel, c.chunk_id)
        assert (e.final_rank, e.rerank_rank) == (returned.get(c.chunk_id), c.rerank_rank)
        assert trace[c.chunk_id] == (c.rerank_rank, e.final_rank,
                                     {"returned": None, "capped": "cap",
                                      "cut at k": "below k"}[e.verdict])


def test_explain_says_a_rerank_moved_a_chunk_across_the_cap(
        cap_conn: psycopg.Connection[Any]) -> None:
    alpha1, alpha3 = _chunk(cap_conn, "alpha", 1), _chunk(cap_conn, "alpha", 3)
    funnel = Funnel(cap_conn, embedder=None, reranker=PreferMarker("section 4"))
    assert _explained(funnel, alpha1, rerank=False).verdict == "returned"
    capped = _explained(funnel, alpha1)
    assert capped.verdict == "capped" and capped.rerank_rank == 4
    assert capped.reason == (
        "reranked to 4 of 9 (score -0.01) from fused rank 2, but 2 chunks of 'alpha' rank "
        "above it after the rerank and per_source_cap 2 keeps only the best 2 chunks per "
        "source")
    assert _explained(funnel, alpha3, rerank=False).verdict == "capped"
    kept = _explained(funnel, alpha3)
    assert kept.verdict == "returned" and kept.final_rank == 1 and kept.rerank_rank == 1
    # a whole document: its furthest chunk in the reranked order
    doc = _explained(funnel, "alpha")
    assert doc.chunk_id == alpha3 and doc.verdict == "returned"
    # and its chunks the cap dropped after the rerank, which are not the fused order's
    ids = [int(r[0]) for r in cap_conn.execute(
        "select ch.id from pgfunnel.chunk ch join pgfunnel.document d on d.id = "
        "ch.document_id where d.citekey = 'alpha' order by ch.ordinal")]
    for rerank in (True, False):
        each = {cid: _explained(funnel, cid, rerank=rerank) for cid in ids}
        capped = _explained(funnel, "alpha", rerank=rerank).capped_chunks
        assert {c["chunk_id"] for c in capped} == \
            {cid for cid, e in each.items() if e.verdict == "capped"}
        assert all(c["ordinal"] == ids.index(c["chunk_id"]) for c in capped)
        assert (alpha1 in {c["chunk_id"] for c in capped}) is rerank
    # explain without the reranker is asked for as a search asks for it
    with pytest.raises(ConfigError, match="^rerank: must be True, False or None"):
        _explained(funnel, alpha3, rerank="no")
    with pytest.raises(ConfigError, match="^rerank: rerank requested but this Funnel"):
        _explained(Funnel(cap_conn, embedder=None), alpha3, rerank=True)


def test_explain_names_the_rerank_depth_a_chunk_was_below(
        cap_conn: psycopg.Connection[Any]) -> None:
    # a chunk the reranker did not score and k cut: the two clauses are two ("at 9; not
    # capped"); run together they read "so it comes after them, at 9 and not capped"
    gamma = _chunk(cap_conn, "gamma", 0)
    funnel = Funnel(cap_conn, embedder=None, reranker=PreferMarker("lighthouse"),
                    rerank_depth=3)
    e = _explained(funnel, gamma)
    assert e.verdict == "cut at k" and e.rerank_rank is None and e.rerank_score is None
    assert e.reranked and e.reason.startswith(
        "not reranked: fused rank 9 is below the rerank depth 3 (the reranker scores the "
        "first 3 of the pool of 9, rerank_depth), so it comes after them, at 9; not "
        "capped, but 4 chunks come before it")
    # the trace of that search says the same: not reranked, dropped below k
    resp = funnel.search("glacier backup restore", k=4, principals=[], per_source_cap=2,
                         trace=True)
    assert cap_conn.execute(
        "select rerank_rank, rerank_score, final_rank, dropped from pgfunnel.search_trace "
        "where search_id = %s and chunk_id = %s", (resp.search_id, gamma)).fetchone() == (
        None, None, None, "below k")


def test_explain_runs_the_cross_encoder_the_search_runs(
        cap_conn: psycopg.Connection[Any], tiny_reranker: Reranker) -> None:
    funnel = Funnel(cap_conn, embedder=None, reranker=tiny_reranker)
    resp = funnel.search("glacier backup restore", k=4, principals=[], per_source_cap=2)
    assert resp.reranked
    returned = {r.chunk_id: r.final_rank for r in resp.results}
    for c in resp.pool:
        e = _explained(funnel, c.chunk_id)
        assert e.reranked and e.rerank_rank == c.rerank_rank
        assert e.rerank_score == pytest.approx(c.rerank_score)
        assert e.final_rank == returned.get(c.chunk_id)
        assert (e.verdict == "returned") == (c.chunk_id in returned)


def test_explain_says_when_the_gate_skipped_the_reranker(
        sample_conn: psycopg.Connection[Any], tiny_reranker: Reranker) -> None:
    from pgfunnel.explain import explain

    # the gate skipped the model: the fused order is explained, and a notice says why
    gated = Funnel(sample_conn, embedder=None, reranker=tiny_reranker, rerank_gate_margin=1e-12)
    top = gated.search("refund annual plan", k=5, principals=[]).results[0]
    e = explain(gated, "refund annual plan", top.chunk_id, k=5, principals=[])
    assert e.verdict == "returned" and not e.reranked and e.rerank_rank is None
    assert any("did not rerank (gate: top fused score leads" in n for n in e.notices)


class CountingMarker(PreferMarker):
    """PreferMarker that counts its calls, and runs ``during`` (once) while it ranks."""

    def __init__(self, marker: str, during: Any = None) -> None:
        super().__init__(marker)
        self.calls = 0
        self.during = during

    def rank(self, query: str, documents: Sequence[str]) -> list[dict[str, Any]]:
        self.calls += 1
        if self.during is not None:
            self.during()
            self.during = None
        return super().rank(query, documents)


def test_explain_resolves_the_text_and_reranks_once_for_every_target(
        cap_conn: psycopg.Connection[Any]) -> None:
    # a reranking explain ran the rewriter (an LLM call, in an application) twice, and
    # `pgfunnel explain Q A B C` searched and reranked once per chunk
    from pgfunnel.explain import explain, explain_many

    rewrites: list[str] = []

    def rewriter(q: str) -> str:
        rewrites.append(q)
        return "glacier backup restore"

    reranker = CountingMarker("lighthouse")
    funnel = Funnel(cap_conn, embedder=None, reranker=reranker, rewriter=rewriter)
    targets: list[str | int] = [_chunk(cap_conn, "gamma", 0), "beta#1", "alpha", "nosuch#0"]
    many = explain_many(funnel, "restoring glacier backups", targets, k=4, principals=[],
                        per_source_cap=2)
    assert (len(rewrites), reranker.calls) == (1, 1)
    assert [e.target for e in many] == [str(targets[0]), "beta#1", "alpha", "nosuch#0"]
    assert [e.verdict for e in many] == ["returned", "cut at k", "returned",
                                         "filtered out or does not exist"]
    assert all(e.transforms and e.transforms[0]["step"] == "rewrite" for e in many)
    # each answer is the one explain gives it alone, which rewrites and reranks once too
    for target, e in zip(targets, many, strict=True):
        rewrites.clear()
        reranker.calls = 0
        alone = explain(funnel, "restoring glacier backups", target, k=4, principals=[],
                        per_source_cap=2)
        assert (len(rewrites), reranker.calls) == (1, 1)
        # (the rewrite's record holds its time, elapsed_s)
        assert {**alone.as_dict(), "transforms": None} == {**e.as_dict(), "transforms": None}
    with pytest.raises(ConfigError, match="^chunk: give at least one chunk"):
        explain_many(funnel, "glacier", [])
    with pytest.raises(ConfigError, match="^chunk: targets must be a list"):
        explain_many(funnel, "glacier", "gamma")


def test_explain_reads_one_snapshot_for_the_explain_and_the_reranked_search(
        db: str, cap_conn: psycopg.Connection[Any]) -> None:
    # the SQL explain and the reranked search ran in transactions of their own: a delete
    # committed while the reranker scored made the chunk explained as 'returned' by the
    # SQL explain's pool fall out of the final step, and explain called it 'cut at k'
    from pgfunnel.explain import explain

    gamma = _chunk(cap_conn, "gamma", 0)

    def delete_gamma() -> None:
        with connect(db, autocommit=True) as other:
            other.execute("delete from pgfunnel.document where citekey = 'gamma'")

    funnel = Funnel(cap_conn, embedder=None,
                    reranker=CountingMarker("lighthouse", during=delete_gamma))
    e = explain(funnel, "glacier backup restore", gamma, k=4, principals=[], per_source_cap=2)
    assert e.verdict == "returned" and e.final_rank == 1 and e.rerank_rank == 1
    # the delete did commit: a search now does not find it
    assert "gamma" not in {r.citekey for r in funnel.search(
        "glacier backup restore", k=4, principals=[], per_source_cap=2).results}


# -- explain a logged search --------------------------------------------------------------


def _with_extra_documents(conn: psycopg.Connection[Any], embedder: Any) -> None:
    # a tenant's document the logged reader (no tenant) could not see, and one that
    # shares no word with the query
    Ingester(conn, "default", embedder=embedder, chunk_words=20).ingest([
        DocumentRecord("acme-glacier", "## Acme\n\nGlacier backup restore for Acme only.",
                       title="Acme", tenant="acme"),
        DocumentRecord("teapots", "## Teapots\n\nPorcelain kettles and cups.",
                       title="Teapots"),
    ])


def test_a_logged_chunk_cut_at_k_is_said_as_the_live_explain_says_it(
        cap_conn: psycopg.Connection[Any], embedder: Any) -> None:
    """Without a rerank the log's sentence lost its "after": "not capped, but 10 chunks
    came before it and the per-source cap and k was 10", and it counted the chunks
    returned, where the live explain of the same search counts those the cap kept above
    it (17 of them, for a chunk at fused rank 21 with three capped above it)."""
    import re

    from pgfunnel.explain import explain

    q = "glacier backup restore"
    funnel = Funnel(cap_conn, embedder=embedder)
    resp = funnel.search(q, k=2, principals=[], per_source_cap=2, trace=True)
    assert resp.search_id is not None
    said = re.compile(r"but (\d+) chunks? (?:come|came) before it after the per-source cap "
                      r"and k (?:is|was) 2$")
    counts: list[int] = []
    # without a reranker the response holds no pool: the trace lists the candidates
    for (chunk_id,) in cap_conn.execute("select chunk_id from pgfunnel.search_trace "
                                        "where search_id = %s", (resp.search_id,)).fetchall():
        live = explain(funnel, q, chunk_id, k=2, principals=[], per_source_cap=2)
        if live.verdict != "cut at k":
            continue
        logged = explain(Funnel(cap_conn, embedder=None), None, chunk_id,
                         search_id=resp.search_id)
        assert logged.verdict == "cut at k"
        live_n, logged_n = said.search(live.reason), said.search(logged.reason)
        assert live_n is not None, live.reason
        assert logged_n is not None, logged.reason
        assert logged_n[1] == live_n[1], (live.reason, logged.reason)
        counts.append(int(logged_n[1]))
    # one of them below another that k cut: more chunks above it than were returned
    assert len(counts) >= 2 and max(counts) > 2, counts


def test_explain_a_logged_search_from_its_trace(cap_conn: psycopg.Connection[Any],
                                               embedder: Any) -> None:
    # "search 1234 did not return my page": explain had no way to answer from the log
    from pgfunnel.explain import explain, explain_many

    _with_extra_documents(cap_conn, embedder)
    funnel = Funnel(cap_conn, embedder=None, reranker=PreferMarker("section 4"))
    resp = funnel.search("glacier backup restore", k=4, principals=[], per_source_cap=2,
                         trace=True)
    sid = resp.search_id
    assert sid is not None
    # later searches, another reranker, other defaults: the log answers for search sid
    other = Funnel(cap_conn, embedder=None, k=1)
    verdicts = set()
    for c in resp.pool:
        live = explain(funnel, "glacier backup restore", c.chunk_id, k=4, principals=[],
                       per_source_cap=2)
        logged = explain(other, None, c.chunk_id, search_id=sid)
        verdicts.add(logged.verdict)
        assert (logged.verdict, logged.final_rank, logged.rerank_rank, logged.fused_rank) == (
            live.verdict, live.final_rank, live.rerank_rank, live.fused_rank)
        # the depth each leg read, as the log notes record it (lexical only: no dense
        # depth); it was None for a depth the search was not given
        assert (logged.lexical_depth, logged.dense_depth) == (
            live.lexical_depth, live.dense_depth) == (40, None)
        assert logged.rerank_score == pytest.approx(live.rerank_score)
        assert logged.search_id == sid and logged.replayed_on is None and logged.reranked
        assert logged.reason.startswith(f"search {sid} logged it: {logged.verdict}")
        assert logged.searched == "glacier backup restore"
    assert verdicts == {"returned", "capped", "cut at k"}
    alpha1 = _chunk(cap_conn, "alpha", 1)
    capped = explain(other, None, "alpha#1", search_id=sid)
    assert capped.chunk_id == alpha1 and capped.verdict == "capped"
    assert "2 chunks of 'alpha' ranked above it after the rerank and per_source_cap 2" \
        in capped.reason
    doc = explain(other, None, "alpha", search_id=sid)
    assert doc.verdict == "returned" and doc.final_rank == 1
    # not among the candidates: the logged query replayed as its reader, on its version
    # (explained by a reader in tenant acme, which reads the log of a search in no tenant)
    acme, teapots, absent = explain_many(other, None, ["acme-glacier", "teapots#0",
                                                       "nosuch"], search_id=sid, tenant="acme")
    assert acme.verdict == "filtered out or does not exist" and acme.chunk_id is None
    # the reader explaining sees the document: which of the logged filters hid it is said
    # (to a reader in no tenant, which cannot see it either, it does not exist)
    outside = explain(other, None, "acme-glacier", search_id=sid)
    assert outside.verdict == "filtered out or does not exist" and outside.citekey is None
    assert "document acme-glacier does not exist" in outside.reason, outside.reason
    assert acme.reason == (f"not among the {len(resp.pool)} candidates search {sid} logged: "
                           "document 'acme-glacier' is hidden from its reader by its tenant "
                           "None")
    assert acme.replayed_on == resp.index_version_id
    assert teapots.verdict == "in no leg at its depth" and teapots.citekey == "teapots"
    # replayed by a Funnel without an embedder, lexical only: no depth reaches it
    assert teapots.reason.endswith("no depth reaches it: a search needs one of its words, "
                                   "or a query embedding for the dense leg"), teapots.reason
    assert teapots.replayed_on == resp.index_version_id
    assert absent.verdict == "filtered out or does not exist"
    assert absent.reason.startswith(f"not among the {len(resp.pool)} candidates search {sid} "
                                    "logged; its query replayed on index version ")
    assert "document nosuch does not exist" in absent.reason
    # the logged version dropped: replayed on the active one, said so
    cap_conn.execute("update pgfunnel.search_log set index_version_id = 999999 "
                     "where id = %s", (sid,))
    gone = explain(other, None, "teapots#0", search_id=sid)
    assert gone.verdict == "in no leg at its depth"
    assert any("index version 999999, which search" in n and "was dropped: replayed on "
               f"the active version {resp.index_version_id}" in n for n in gone.notices)


def test_explain_a_logged_search_reranked_by_the_cross_encoder(
        cap_conn: psycopg.Connection[Any], tiny_reranker: Reranker) -> None:
    from pgfunnel.explain import explain_many

    funnel = Funnel(cap_conn, embedder=None, reranker=tiny_reranker)
    resp = funnel.search("glacier backup restore", k=2, principals=[], per_source_cap=2,
                         trace=True)
    assert resp.reranked
    ids = [c.chunk_id for c in resp.pool]
    logged = explain_many(Funnel(cap_conn, embedder=None), None, ids,
                          search_id=resp.search_id)
    live = explain_many(funnel, "glacier backup restore", ids, k=2, principals=[],
                        per_source_cap=2)
    assert [(e.verdict, e.final_rank, e.rerank_rank, e.lexical_depth, e.dense_depth)
            for e in logged] == \
        [(e.verdict, e.final_rank, e.rerank_rank, e.lexical_depth, e.dense_depth)
         for e in live]
    assert logged[0].lexical_depth == 40
    below = [e for e in logged if e.verdict == "cut at k"]
    assert below and all("after the rerank" in e.reason for e in below)


def test_explain_a_logged_search_refuses_what_it_cannot_answer(
        cap_conn: psycopg.Connection[Any]) -> None:
    from pgfunnel.errors import NotFoundError
    from pgfunnel.explain import explain

    funnel = Funnel(cap_conn, embedder=None)
    sid = funnel.search("glacier", k=2, principals=[], trace=True).search_id
    untraced = funnel.search("glacier", k=2, principals=[])
    assert untraced.search_id is None
    # it names the argument whose value named nothing, as an unknown version does
    with pytest.raises(NotFoundError) as unknown:
        explain(funnel, None, "alpha", search_id=987654)
    assert unknown.value.parameter == "search_id"
    assert unknown.value.detail.startswith("search 987654 is not in the search log: no "
                                           "traced search has that id"), unknown.value.detail
    assert str(unknown.value) == f"search_id: {unknown.value.detail}"
    cap_conn.execute("insert into pgfunnel.collection (name) values ('other')")
    with pytest.raises(ConfigError, match=r"^search_id: search \d+ searched collection "
                                          r"'default', not 'other'"):
        explain(Funnel(cap_conn, "other", embedder=None), None, "alpha", search_id=sid)
    bads: list[Any] = [0, -1, "12", True, 2**63]
    for bad in bads:
        with pytest.raises(ConfigError, match="^search_id: must be a traced search's id"):
            explain(funnel, None, "alpha", search_id=bad)
    with pytest.raises(ConfigError, match="^query: the logged search is explained with"):
        explain(funnel, "glacier", "alpha", search_id=sid)
    with pytest.raises(ConfigError, match="^k: the logged search is explained with"):
        explain(funnel, None, "alpha", search_id=sid, k=3)

    # a search by a vector alone cannot be replayed: the log keeps no vector
    vec = np.ones(_dims(cap_conn)) / np.sqrt(_dims(cap_conn))
    by_vector = funnel.search(None, query_embedding=vec, k=2, principals=[], trace=True)
    first = by_vector.results[0]
    assert explain(funnel, None, first.chunk_id, search_id=by_vector.search_id).verdict == \
        "returned"
    with pytest.raises(ConfigError, match=r"^search_id: search \d+ searched with a query "
                                          r"vector alone, which the log does not keep: .* "
                                          r"'nosuch' is not among them"):
        explain(funnel, None, "nosuch", search_id=by_vector.search_id)


def _dims(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("select dimensions from pgfunnel.index_version "
                       "where state = 'active'").fetchone()
    assert row is not None
    return int(row[0])


def test_explain_a_logged_search_replays_on_the_version_it_read(
        cap_conn: psycopg.Connection[Any], embedder: Any) -> None:
    from pgfunnel import versions
    from pgfunnel.explain import explain

    _with_extra_documents(cap_conn, embedder)
    funnel = Funnel(cap_conn, embedder=embedder)
    resp = funnel.search("glacier backup restore", k=2, principals=[], trace=True)
    logged_version = resp.index_version_id
    built = versions.reindex(cap_conn, "default", analyzer="simple_v1", embedder=embedder,
                             activate_after=True)
    assert built.version_id != logged_version
    e = explain(funnel, None, "teapots#0", search_id=resp.search_id)
    assert e.replayed_on == logged_version and e.notices == []
    assert e.verdict in ("in no leg at its depth", "not in pool")
    row = cap_conn.execute("select count(*) from pgfunnel.search_trace where search_id = %s",
                           (resp.search_id,)).fetchone()
    assert row is not None and e.pool_size == 8 == row[0]
    assert e.reason.startswith(f"not among the 8 candidates search {resp.search_id} logged; "
                               f"its query replayed on index version {logged_version}: ")
    # its advice is what another search would need: the logged search's explain takes
    # no dense_depth or overfetch to raise
    assert "raise" not in e.reason and "rephrase" not in e.reason, e.reason
    assert e.reason.endswith(" could reach it (explain its text without search_id to try "
                             "one)"), e.reason
    # the pin was rolled back: the new version is still the active one
    assert funnel.search("glacier", k=1, principals=[]).index_version_id == built.version_id


def test_explain_a_logged_search_says_its_candidates_since_reingested(
        cap_conn: psycopg.Connection[Any], embedder: Any) -> None:
    # a returned document edited since: its logged chunks are gone, and explain said only
    # "not among the 8 candidates search N logged", as if the search never had it
    from pgfunnel.explain import explain

    funnel = Funnel(cap_conn, embedder=None)
    resp = funnel.search("glacier backup restore", k=2, principals=[], trace=True)
    assert resp.results[0].citekey == "alpha"
    row = cap_conn.execute(
        "select count(*), count(*) filter (where d.citekey = 'alpha') "
        "from pgfunnel.search_trace t join pgfunnel.chunk ch on ch.id = t.chunk_id "
        "join pgfunnel.document d on d.id = ch.document_id where t.search_id = %s",
        (resp.search_id,)).fetchone()
    assert row is not None
    pool, logged_alpha = row
    Ingester(cap_conn, "default", embedder=embedder, chunk_words=20).ingest([
        DocumentRecord("alpha", _sections("Alpha", 4) + "\n\nEdited since.", title="Alpha")])
    e = explain(funnel, None, "alpha", search_id=resp.search_id)
    assert e.reason.startswith(
        f"not among the {pool} candidates search {resp.search_id} logged "
        f"({logged_alpha} of them deleted or re-ingested since, which the log cannot name); ")


def test_explain_a_logged_search_without_candidates_replays_no_dense_leg(
        cap_conn: psycopg.Connection[Any], embedder: Any) -> None:
    # a search without a query vector (--lexical-only, embedder=None) that matched no word
    # logged no candidate; its replay embedded the text and ran the dense leg it never had
    from pgfunnel.explain import explain

    resp = Funnel(cap_conn, embedder=None).search("zzzqqq", k=2, principals=[], trace=True)
    assert resp.results == [] and resp.search_id is not None
    e = explain(Funnel(cap_conn, embedder=embedder), None, "alpha#0",
                search_id=resp.search_id)
    assert e.verdict == "in no leg at its depth"
    assert e.dense_exact_score is None and e.dense_rank is None
    assert "(no query embedding)" in e.reason


def test_explain_a_logged_search_whose_dense_leg_found_nothing_replays_it(
        cap_conn: psycopg.Connection[Any], embedder: Any) -> None:
    # a hybrid search whose dense leg returned nothing logged no dense rank, and its replay
    # guessed from the trace that it had no query vector: lexical alone, without a word
    from pgfunnel.explain import explain

    _with_extra_documents(cap_conn, embedder)
    # the dense leg finds nothing while the search runs (its vectors set aside), as a
    # filter hiding every row its index reads would leave it
    cap_conn.execute("create temp table saved as select * from pgfunnel.embedding")
    cap_conn.execute("delete from pgfunnel.embedding")
    sids = []
    for reranker in (None, PreferMarker("section 4")):  # funnel_search, and final()
        resp = Funnel(cap_conn, embedder=embedder, reranker=reranker).search(
            "glacier backup restore", k=2, principals=[], trace=True)
        assert all(c.dense_rank is None for c in resp.pool)
        assert resp.results and all(r.dense_rank is None for r in resp.results)
        sids.append(resp.search_id)
    cap_conn.execute("insert into pgfunnel.embedding select * from saved")
    for sid in sids:
        row = cap_conn.execute("select notes from pgfunnel.search_log where id = %s",
                               (sid,)).fetchone()
        assert row is not None and row[0]["query_embedding"] is True
        e = explain(Funnel(cap_conn, embedder=embedder), None, "teapots#0", search_id=sid)
        # replayed with its query vector: the dense leg ran and scored the chunk
        assert e.dense_depth is not None and e.dense_exact_score is not None, e
        assert e.notices == []
    # a Funnel without an embedder replays it lexical-only, said in the library's words
    # (its parameter, not the CLI's --lexical-only flag)
    e = explain(Funnel(cap_conn, embedder=None), None, "teapots#0", search_id=sids[0])
    assert e.dense_exact_score is None
    assert e.notices == [f"pgfunnel: this Funnel has no query embedder (embedder=None): the "
                         f"replay of search {sids[0]} runs the lexical leg alone"]

    # a row logged before the record (no query_embedding in its notes) replays as before,
    # by the trace's guess, and says it guessed
    sid = sids[0]
    cap_conn.execute("update pgfunnel.search_log set notes = notes - 'query_embedding' "
                     "where id = %s", (sid,))
    e = explain(Funnel(cap_conn, embedder=embedder), None, "teapots#0", search_id=sid)
    assert e.dense_depth is None and e.dense_exact_score is None
    assert e.verdict == "in no leg at its depth"
    assert e.notices == [
        f"pgfunnel: search {sid}'s log row does not record whether it had a query embedding "
        "(it was logged before pgfunnel recorded that); none of the candidates readable in "
        "its trace came from the dense leg, so the replay runs the lexical leg alone, a "
        "guess: a dense leg that found nothing visible looks the same"]
    # an old row whose trace holds a dense rank was a hybrid search: no guess to say
    resp = Funnel(cap_conn, embedder=embedder).search("glacier backup restore", k=2,
                                                      principals=[], trace=True)
    cap_conn.execute("update pgfunnel.search_log set notes = notes - 'query_embedding' "
                     "where id = %s", (resp.search_id,))
    e = explain(Funnel(cap_conn, embedder=embedder), None, "teapots#0",
                search_id=resp.search_id)
    assert e.dense_exact_score is not None and e.notices == []
    # a search without a query vector records that, and replays lexical alone unasked
    resp = Funnel(cap_conn, embedder=None).search("glacier backup restore", k=2,
                                                  principals=[], trace=True)
    row = cap_conn.execute("select notes from pgfunnel.search_log where id = %s",
                           (resp.search_id,)).fetchone()
    assert row is not None and row[0]["query_embedding"] is False
    e = explain(Funnel(cap_conn, embedder=embedder), None, "teapots#0",
                search_id=resp.search_id)
    assert e.dense_exact_score is None and e.notices == []


def test_explain_a_logged_search_replays_while_a_version_is_activated(
        db: str, cap_conn: psycopg.Connection[Any], embedder: Any) -> None:
    # an activate (or anything updating the versions' rows) committing while the replay
    # waited to pin the logged version failed the explain with a serialization error
    import threading

    from pgfunnel import versions
    from pgfunnel.explain import Explanation, explain

    _with_extra_documents(cap_conn, embedder)
    funnel = Funnel(cap_conn, embedder=embedder)
    resp = funnel.search("glacier backup restore", k=2, principals=[], trace=True)
    built = versions.reindex(cap_conn, "default", analyzer="simple_v1", embedder=embedder,
                             activate_after=True)
    funnel.search("glacier", k=1, principals=[])  # the embedder loaded before the race
    pid = cap_conn.info.backend_pid
    out: list[Explanation | BaseException] = []

    def run() -> None:
        try:
            out.append(explain(funnel, None, "teapots#0", search_id=resp.search_id))
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            out.append(exc)

    with connect(db) as other:
        other.execute("update pgfunnel.index_version set state = state where id = %s",
                      (built.version_id,))
        thread = threading.Thread(target=run)
        thread.start()
        for _ in range(200):
            row = other.execute("select wait_event_type from pg_catalog.pg_stat_activity "
                                "where pid = %s", (pid,)).fetchone()
            if row is not None and row[0] == "Lock":
                break
            time.sleep(0.05)
        else:
            pytest.fail("the replay never waited for the versions' rows")
        other.commit()
    thread.join(60)
    assert len(out) == 1 and isinstance(out[0], Explanation), out
    assert out[0].replayed_on == resp.index_version_id and out[0].notices == []
    assert funnel.search("glacier", k=1, principals=[]).index_version_id == built.version_id


def test_every_traced_path_logs_the_weights_it_used_and_the_response_says_them(
        sample_db: str, sample_conn: psycopg.Connection[Any], embedder: Any) -> None:
    """A reranked (or transformed) traced search logged the weights as given: null when
    the search chose them, where funnel_search's log of the same search held the pair it
    chose; and nothing on the response said which pair had run."""
    from psycopg import sql

    from pgfunnel.versions import LOGGED_PARAMS, LOGGED_SEARCH_PARAMS

    query = "what does err 6358 mean"  # the number rule: identifier, {1,0.2}
    chosen = FusionUsed("minmax", ("lexical", "dense"), None, (1.0, 0.2), "identifier")
    with Funnel(sample_db, embedder=embedder, reranker=_ReversingReranker()) as f:
        reranked = f.search(query, k=3, trace=True)
        plain = f.search(query, k=3, trace=True, rerank=False)
        given = f.search(query, k=3, trace=True, weights=[1, 0.5])
        rrf = f.search(query, k=3, trace=True, fusion="rrf", rerank=False)
    assert reranked.reranked and not plain.reranked
    assert reranked.fusion == plain.fusion == chosen
    assert given.fusion == FusionUsed("minmax", ("lexical", "dense"), None, (1.0, 0.5), None)
    # funnel_search logs rrf_k for every fusion; the response names it under RRF only
    assert rrf.fusion is not None and (rrf.fusion.fusion, rrf.fusion.rrf_k) == ("rrf", 60.0)
    logged = {}
    for resp in (reranked, plain, given):
        row = sample_conn.execute("select config, notes from pgfunnel.search_log "
                                  "where id = %s", (resp.search_id,)).fetchone()
        assert row is not None
        logged[resp.search_id] = row
    for resp in (reranked, plain):
        config, notes = logged[resp.search_id]
        assert (config["weights"], notes["weights_given"]) == ([1, 0.2], False), config
        assert (config["fusion"], config["rrf_k"]) == ("minmax", 60), config
    config, notes = logged[given.search_id]
    assert (config["weights"], notes["weights_given"]) == ([1, 0.5], True), config
    # the replay (versions compare --last, explain --search-id) chooses chosen weights
    # again and keeps given ones
    ids = [reranked.search_id, plain.search_id, given.search_id]
    replayed = dict(sample_conn.execute(sql.SQL(
        "select sl.id, {} from pgfunnel.search_log sl where sl.id = any(%s)").format(
            sql.SQL(LOGGED_PARAMS)), (list(LOGGED_SEARCH_PARAMS), ids)).fetchall())
    assert [replayed[i]["weights"] for i in ids] == [None, None, [1, 0.5]], replayed


def test_candidates_say_the_weights_the_pool_used_and_final_logs_them(
        sample_db: str, sample_conn: psycopg.Connection[Any], embedder: Any) -> None:
    """A caller running candidates(), its own rerank and final() got the pool as a plain
    list: nothing said which weights the search had chosen (Funnel.search says them in
    SearchResponse.fusion), and a traced final() logged null for them."""
    query = "what does err 6358 mean"  # the number rule: identifier, {1,0.2}
    chosen = FusionUsed("minmax", ("lexical", "dense"), None, (1.0, 0.2), "identifier")
    vector = embedder.embed_query(query)
    p = SearchParams.build(k=3, principals=[], trace=True)
    with Funnel(sample_db, embedder=embedder, reranker=_ReversingReranker()) as f:
        assert f.search(query, k=3).fusion == chosen
        # an autocommit connection outside a transaction: the setting the search left
        # is its transaction's, so candidates() reads it in one of its own
        assert sample_conn.autocommit
        pool = f.candidates(sample_conn, query, vector, p)
        assert pool and pool.fusion == chosen
        given = f.candidates(sample_conn, query, vector,
                             dataclasses.replace(p, weights=(1.0, 0.5)))
        assert given.fusion == FusionUsed("minmax", ("lexical", "dense"), None,
                                          (1.0, 0.5), None)
        assert f.candidates(sample_conn, query, None, p).fusion == \
            FusionUsed("none", ("lexical",), None, None, None)
        # the application's own transaction, on a connection without autocommit
        with psycopg.connect(sample_db) as conn:
            in_tx = f.candidates(conn, query, vector, p)
            assert in_tx.fusion == chosen
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
            conn.rollback()
        ordered = list(reversed(pool))
        results = f.final(sample_conn, query, ordered, p, reranked=False,
                          fusion_used=pool.fusion)
        plain = f.final(sample_conn, query, ordered, p, reranked=False)
        with pytest.raises(ConfigError, match="^fusion_used: must be the pool's"):
            f.final(sample_conn, query, ordered, p, reranked=False,
                    fusion_used=(1.0, 0.2))  # type: ignore[arg-type]
    logged = {}
    for search_id in (results[0].search_id, plain[0].search_id):
        row = sample_conn.execute("select config, notes from pgfunnel.search_log "
                                  "where id = %s", (search_id,)).fetchone()
        assert row is not None
        logged[search_id] = row
    config, notes = logged[results[0].search_id]
    assert (config["weights"], notes["weights_given"]) == ([1, 0.2], False), (config, notes)
    config, notes = logged[plain[0].search_id]
    assert config["weights"] is None and "weights_given" not in notes, (config, notes)


def test_candidates_say_the_index_version_the_pool_was_read_from(
        sample_db: str, sample_conn: psycopg.Connection[Any]) -> None:
    """Funnel.search says the version it read (SearchResponse.index_version_id), and
    final(index_version_id=...) takes it for a trace, but a candidates() caller had no
    way to learn it but a query of its own."""
    active = sample_conn.execute(
        "select v.id from pgfunnel.index_version v join pgfunnel.collection c "
        "on c.id = v.collection_id where c.name = 'default' and v.state = 'active'"
    ).fetchone()
    assert active is not None
    p = SearchParams.build(k=3, principals=[], trace=True)
    with Funnel(sample_db, embedder=None) as f:
        assert f.search("refund", k=3).index_version_id == active[0]
        pool = f.candidates(sample_conn, "refund", None, p)
        assert pool and pool.index_version_id == active[0]
        results = f.final(sample_conn, "refund", pool, p, reranked=False,
                          index_version_id=pool.index_version_id)
        with psycopg.connect(sample_db) as conn:
            assert f.candidates(conn, "refund", None, p).index_version_id == active[0]
            # an empty pool is drawn from a version too
            empty = f.candidates(conn, "zzyzxqq", None, p)
            assert empty == [] and empty.index_version_id == active[0]
            conn.rollback()
    logged = sample_conn.execute("select index_version_id from pgfunnel.search_log "
                                 "where id = %s", (results[0].search_id,)).fetchone()
    assert logged == (active[0],)


def test_final_takes_the_index_version_id_as_a_numpy_integer(
        sample_db: str, sample_conn: psycopg.Connection[Any]) -> None:
    """final() checks index_version_id as an int or a numpy integer, but sent a numpy one
    as psycopg dumps it, a bigint: "arguments: function pgfunnel.final(... index_version_id
    => bigint ...) does not exist", a ConfigError blaming the arguments' types."""
    p = SearchParams.build(k=3, principals=[], trace=True)
    with Funnel(sample_db, embedder=None) as f:
        pool = f.candidates(sample_conn, "refund", None, p)
        assert pool.index_version_id is not None
        results = f.final(sample_conn, "refund", pool, p, reranked=False,
                          index_version_id=np.int64(pool.index_version_id))  # type: ignore[arg-type]
    assert results
    logged = sample_conn.execute("select index_version_id from pgfunnel.search_log "
                                 "where id = %s", (results[0].search_id,)).fetchone()
    assert logged == (pool.index_version_id,)


def test_final_puts_the_callers_limit_back_when_the_driver_refuses_a_value(
        sample_db: str) -> None:
    """final() with statement_timeout_ms in the caller's transaction: a rerank score
    psycopg cannot adapt failed the call before its statement was sent, the transaction
    still going, and every later statement of it ran under the call's limit (1234 ms)
    instead of the caller's own."""
    p = SearchParams.build(k=3, principals=[], statement_timeout_ms=1234)
    with Funnel(sample_db, embedder=None) as f, psycopg.connect(sample_db) as conn:
        conn.execute("select set_config('statement_timeout', '4321', true)")
        pool = f.candidates(conn, "refund", None, p)
        assert pool
        # final() checks rerank scores itself now; a fused score it leaves to the driver
        pool[0].fused_score = object()  # type: ignore[assignment]
        with pytest.raises(Exception, match="cannot adapt type 'object'"):
            f.final(conn, "refund", pool, p, reranked=True)
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        assert conn.execute("show statement_timeout").fetchone() == ("4321ms",)
        conn.rollback()


def test_candidates_report_the_query_words_not_searched_as_search_does(
        sample_db: str, sample_conn: psycopg.Connection[Any]) -> None:
    """Funnel.search reports the analyzer's notices (SearchResponse.notices and a
    SearchNoticeWarning each); candidates() on the caller's connection dropped them, and
    a question's dropped words went unsaid."""
    import warnings

    from pgfunnel.errors import SearchNoticeWarning

    query = "what does err 6358 mean"
    said = "pgfunnel: query words not searched: does, mean, what"
    with Funnel(sample_db, embedder=None) as f:
        with pytest.warns(SearchNoticeWarning, match=said):
            assert f.search(query, k=3).notices == [said]
        with pytest.warns(SearchNoticeWarning) as caught:
            pool = f.candidates(sample_conn, query, None, SearchParams.build(k=3))
        assert pool and pool.notices == [said]
        assert [str(w.message) for w in caught] == [said]
        # caught at the caller's line, as search()'s are
        assert caught[0].filename == __file__
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            quiet = f.candidates(sample_conn, "err 6358", None, SearchParams.build(k=3))
        assert quiet and quiet.notices == []


def test_the_response_says_one_leg_ran_and_nothing_fused(sample_db: str) -> None:
    with Funnel(sample_db, embedder=None) as f:
        resp = f.search("refund on a monthly plan", k=3)
        merged = f.search_multi(["refund on a monthly plan", "monthly refund"], k=3)
    assert resp.fusion == FusionUsed("none", ("lexical",), None, None, None)
    assert resp.fusion.as_dict() == {"fusion": "none", "legs": ["lexical"], "rrf_k": None,
                                     "weights": None, "weights_rule": None}
    assert merged.fusion is None  # several searches, each its own


def test_an_identifier_alone_that_no_chunk_holds_names_the_parts_ranked(
        sample_conn: psycopg.Connection[Any]) -> None:
    # `x9` is searched as `x9` and `9`; the notice said "the lexical leg ranked the query's
    # other words" of a query that has none
    said = ("pgfunnel: no chunk of collection 'default' holds x9; the lexical leg ranked "
            "only the parts of it that chunks hold: 9")
    with pytest.warns(UserWarning, match="parts of it that chunks hold: 9"):
        resp = Funnel(sample_conn, embedder=None).search("x9", k=3)
    assert resp.results and said in resp.notices
    # beside another word, both: it said only "the query's other words", where `9` was
    # ranked too
    said = ("pgfunnel: no chunk of collection 'default' holds x9; the lexical leg ranked "
            "the query's other words and the parts of it that chunks hold: 9")
    with pytest.warns(UserWarning, match="other words and the parts of it"):
        resp = Funnel(sample_conn, embedder=None).search("x9 password", k=3)
    assert resp.results and said in resp.notices


def test_a_one_leg_final_logs_the_weights_search_logs(
        sample_db: str, sample_conn: psycopg.Connection[Any]) -> None:
    """A traced one-leg search (no query vector) logged the weights the database reported
    through Funnel.search, and null through candidates() + final(fusion_used=pool.fusion)
    (a one-leg pool's fusion holds no weights): one search, two config hashes."""
    query = "refund annual plan"
    p = SearchParams.build(k=3, principals=[], trace=True)
    with Funnel(sample_db, embedder=None, reranker=_ReversingReranker()) as f:
        searched = f.search(query, k=3, principals=[], trace=True)
        assert searched.reranked and searched.search_id is not None
        pool = f.candidates(sample_conn, query, None, p)
        assert pool.fusion == FusionUsed("none", ("lexical",), None, None, None)
        results = f.final(sample_conn, query, searched.pool, p, reranked=True,
                          fusion_used=pool.fusion)
    logged = [one_row(sample_conn.execute("select config, notes from pgfunnel.search_log "
                                          "where id = %s", (search_id,)))
              for search_id in (searched.search_id, results[0].search_id)]
    assert logged[0] is not None and logged[1] is not None
    assert logged[0][0]["weights"] is not None, logged[0]
    assert logged[1][0]["weights"] == logged[0][0]["weights"], logged
    assert logged[1][1]["weights_given"] is logged[0][1]["weights_given"] is False, logged
    # and the depth each leg read (explain --search-id shows it), the same both ways
    for _, notes in logged:
        assert (notes["lexical_depth_used"], notes["dense_depth_used"]) == (40, None), notes


@pytest.mark.parametrize(("score", "said"), [
    ("high", "must be a number or None (chunk {id}, {key}), got str 'high'"),
    (float("nan"), "must be a finite number or None (chunk {id}, {key}), got nan"),
    (float("inf"), "must be a finite number or None (chunk {id}, {key}), got inf"),
    (True, "must be a number or None (chunk {id}, {key}), got bool True"),
    (10 ** 400, "must be a number within double precision"),
    # accepting Decimal and Fraction (below) lets no non-finite one through, nor a bool
    # or a complex number
    (Decimal("NaN"), "must be a finite number or None (chunk {id}, {key}), got "
                     "Decimal('NaN')"),
    (Decimal("sNaN"), "must be a finite number or None (chunk {id}, {key}), got "
                      "Decimal('sNaN')"),
    (Decimal("-Infinity"), "must be a finite number or None (chunk {id}, {key}), got "
                           "Decimal('-Infinity')"),
    # finite, but past what a float (the SQL's double precision) holds
    (Decimal("1E+400"), "must be a finite number or None (chunk {id}, {key}), got "
                        "Decimal('1E+400')"),
    (Fraction(10 ** 400, 3), "must be a number within double precision"),
    (np.bool_(True), "must be a number or None (chunk {id}, {key}), got bool np.True_"),
    (complex(1, 0), "must be a number or None (chunk {id}, {key}), got complex (1+0j)"),
    (np.float32("nan"), "must be a finite number or None (chunk {id}, {key}), got nan"),
], ids=["string", "nan", "inf", "bool", "int-past-double", "decimal-nan", "decimal-snan",
        "decimal-inf", "decimal-past-double", "fraction-past-double", "numpy-bool", "complex",
        "numpy-nan"])
def test_final_names_the_candidate_whose_rerank_score_is_not_a_score(
        sample_db: str, sample_conn: psycopg.Connection[Any], score: Any, said: str) -> None:
    """A caller's own rerank hands final() its scores on the candidates: a string failed
    in the driver ("cannot dump lists of mixed types; got: float, str"), NaN in SQL
    ("rerank_scores: must not contain NaN or Infinity"), neither naming the candidate."""
    p = SearchParams.build(k=3, principals=[])
    with Funnel(sample_db, embedder=None) as f:
        pool = f.candidates(sample_conn, "refund", None, p)
        assert len(pool) >= 2
        pool[0].rerank_score = 0.9
        pool[1].rerank_score = score
        with pytest.raises(ConfigError) as err:
            f.final(sample_conn, "refund", pool, p, reranked=True)
    assert err.value.parameter == "ordered[1].rerank_score"
    key = f"{pool[1].citekey}#{pool[1].ordinal}"
    assert said.format(id=pool[1].chunk_id, key=key) in err.value.detail, err.value.detail
    # refused before any SQL: the caller's transaction goes on
    assert sample_conn.info.transaction_status != psycopg.pq.TransactionStatus.INERROR
    with Funnel(sample_db, embedder=None) as f:
        # unscored, or not reranked, the same pool is taken as it is
        assert f.final(sample_conn, "refund", pool, p, reranked=False)


def test_final_takes_any_finite_real_rerank_score(
        sample_db: str, sample_conn: psycopg.Connection[Any]) -> None:
    """A Decimal score (read from a numeric column, or a JSON parsed with
    parse_float=Decimal) was refused as "must be a number", a Fraction too: any finite
    real number is a score, sent as a float."""
    scores: list[Any] = [Decimal("2.5"), Fraction(9, 4), 2, np.int64(1), np.float16(0.5),
                         np.float32(0.25), Decimal("-1E+2")]
    p = SearchParams.build(k=10, per_source_cap=10, principals=[])
    with Funnel(sample_db, embedder=None) as f:
        pool = f.candidates(sample_conn, "refund", None, p)
        assert len(pool) >= len(scores)
        for c in pool:
            c.rerank_score = None
        for c, score in zip(pool, scores, strict=False):
            c.rerank_score = score
        results = f.final(sample_conn, "refund", pool, p, reranked=True)
    got = {r.chunk_id: (r.rerank_rank, r.rerank_score) for r in results}
    for rank, (c, score) in enumerate(zip(pool, scores, strict=False), start=1):
        # (pytest types approx() as an Approx, not as the float it compares equal to)
        assert got[c.chunk_id] == (rank, pytest.approx(float(score))), (  # type: ignore[comparison-overlap]
            score, got)


def test_final_refuses_a_scored_candidate_below_an_unscored_one(
        sample_db: str, sample_conn: psycopg.Connection[Any]) -> None:
    """A None score above a set one gave the scored candidate a rerank_rank of 2 beside
    no rank 1: the SQL ranks the scored by their place in ``ordered``."""
    p = SearchParams.build(k=3, principals=[])
    with Funnel(sample_db, embedder=None) as f:
        pool = f.candidates(sample_conn, "refund", None, p)
        pool[1].rerank_score = 0.5
        with pytest.raises(ConfigError, match=r"ordered\[1\].rerank_score: is set .* below "
                                              r"ordered\[0\] .*whose rerank_score is None"):
            f.final(sample_conn, "refund", pool, p, reranked=True)
        # scored first (numpy's float32 as a model gives it, beside Python's), the tail
        # unscored: taken, and ranked in the order given
        pool[0].rerank_score = np.float32(0.75)  # type: ignore[assignment]
        pool[1].rerank_score = 0.5
        for c in pool[2:]:
            c.rerank_score = None
        results = f.final(sample_conn, "refund", pool, p, reranked=True)
    scored = [(r.rerank_rank, r.rerank_score) for r in results if r.rerank_score is not None]
    assert scored[0] == (1, pytest.approx(0.75))  # type: ignore[comparison-overlap]


def test_a_collection_that_does_not_exist_is_named_as_the_collection_argument(
        sample_db: str, sample_conn: psycopg.Connection[Any]) -> None:
    """NotFoundError.parameter was None for a collection that does not exist, whichever
    call named it: a caller could not tell the collection from the other arguments it
    passed (a version, a citekey) but by reading the message."""
    from pgfunnel.errors import NotFoundError
    from pgfunnel.ingest import delete_documents
    from pgfunnel.versions import drop_collection

    said = "collection 'nosuch' does not exist; this database has 'default'"
    p = SearchParams.build(k=3, principals=[], collection="nosuch")
    missing: list[NotFoundError] = []
    with Funnel(sample_db, embedder=None) as f:
        for call in (lambda: f.search("refund", collection="nosuch"),
                     lambda: f.check("refund", collection="nosuch"),
                     lambda: f.active_model("nosuch"),
                     lambda: f.candidates(sample_conn, "refund", None, p),
                     lambda: f.final(sample_conn, "refund", [], p, reranked=False)):
            with pytest.raises(NotFoundError) as err:
                call()
            sample_conn.rollback()
            missing.append(err.value)
    with pytest.raises(NotFoundError) as err:
        delete_documents(sample_conn, "nosuch", ["refunds-annual"])
    sample_conn.rollback()
    missing.append(err.value)
    for e in missing:
        assert e.parameter == "collection", e
        # said once: the message names the collection itself, not "collection: collection"
        assert str(e).startswith(said) and e.detail == str(e), e
    with pytest.raises(NotFoundError) as dropped:
        drop_collection(sample_conn, "nosuch")
    assert dropped.value.parameter == "collection"
    assert str(dropped.value) == "collection 'nosuch' does not exist: nothing to drop"


def test_a_collection_without_an_active_version_is_named_as_the_collection_argument(
        sample_db: str, sample_conn: psycopg.Connection[Any]) -> None:
    """A collection that exists but has no active index version (its versions retired or
    dropped around pgfunnel) raised NotFoundError with parameter None from every route
    (a search, explain, eval, a rollback, pgfunnel's SQL through translate), where one
    that does not exist names 'collection': the argument at fault is the same."""
    from pgfunnel.errors import NotFoundError, translate
    from pgfunnel.eval.harness import EvalConfig, Harness
    from pgfunnel.eval.qrels import JudgedQuery
    from pgfunnel.explain import explain
    from pgfunnel.versions import rollback

    sample_conn.execute("insert into pgfunnel.collection (name) values ('bare')")
    p = SearchParams.build(k=3, principals=[], collection="bare")

    def sql_search() -> None:
        try:
            sample_conn.execute("select * from pgfunnel.funnel_search('refund', null, "
                                "collection => 'bare')")
        except psycopg.Error as exc:
            raise translate(exc) from exc

    refused: dict[str, NotFoundError] = {}
    with Funnel(sample_db, "bare", embedder=None) as f:
        calls: dict[str, Any] = {
            "search": lambda: f.search("refund", principals=[]),
            "candidates": lambda: f.candidates(sample_conn, "refund", None, p),
            "active_model": lambda: f.active_model("bare"),
            "explain": lambda: explain(f, "refund", "refunds-annual#0", principals=[]),
            "sql": sql_search,
            "eval": lambda: Harness(sample_db, "bare", embedder=None).run(
                [JudgedQuery("q1", "refund", "all", {"refunds-annual": 1})],
                [EvalConfig("lexical", {}, legs="lexical")]),
            "rollback": lambda: rollback(sample_conn, "bare"),
        }
        for name, call in calls.items():
            with pytest.raises(NotFoundError) as err:
                call()
            refused[name] = err.value
    for name, e in refused.items():
        assert e.parameter == "collection", (name, e)
        # the message is as it was: it names the collection first, unprefixed
        assert str(e).startswith("collection 'bare' has no active "), (name, e)
        assert e.detail == str(e), (name, e)


def test_candidates_name_the_version_the_pool_was_drawn_from_across_a_switch(
        sample_db: str) -> None:
    """candidates() read the active version in a statement after the pool's: in a
    read-committed transaction a switch that committed between the two made
    CandidatePool.index_version_id name the new version, beside a pool drawn from the old
    one, and a trace given it by final() named a version the pool was not read from.
    Here the pool's statement starts (its snapshot taken), waits on a lock while a switch
    commits, then finishes."""
    import threading

    with connect(sample_db, autocommit=True) as admin:
        old = admin.execute(
            "select v.id from pgfunnel.index_version v join pgfunnel.collection c on "
            "c.id = v.collection_id where c.name = 'default' and v.state = 'active'"
        ).fetchone()
        assert old is not None
        new = admin.execute(
            "insert into pgfunnel.index_version (collection_id, version, embedding_model, "
            "dimensions, analyzer, params, state) select collection_id, version + 100, "
            "embedding_model, dimensions, analyzer, params, 'ready' "
            "from pgfunnel.index_version where id = %s returning id", old).fetchone()
        assert new is not None
    p = SearchParams.build(k=3, principals=[])
    found: list[Any] = []
    with connect(sample_db) as blocker, connect(sample_db) as switcher, \
            connect(sample_db) as reader, Funnel(sample_db, embedder=None) as f:
        pid = reader.info.backend_pid
        # the pool's function reads documents only once its statement is under way
        blocker.execute("lock table pgfunnel.document in access exclusive mode")
        reading = threading.Thread(
            target=lambda: found.append(f.candidates(reader, "refund", None, p)))
        reading.start()
        deadline = time.monotonic() + 30
        while switcher.execute("select wait_event_type from pg_stat_activity where pid = %s",
                               (pid,)).fetchone() != ("Lock",):
            switcher.rollback()
            assert time.monotonic() < deadline, "candidates() never waited on the lock"
            time.sleep(0.05)
        switcher.rollback()
        switcher.execute("update pgfunnel.index_version set state = 'retired' where id = %s",
                         old)
        switcher.execute("update pgfunnel.index_version set state = 'active' where id = %s",
                         new)
        switcher.commit()
        blocker.rollback()
        reading.join(30)
        reader.rollback()
    pool = found[0]
    assert pool, "the pool drawn from the old version has the corpus' chunks"
    assert pool.index_version_id == old[0] != new[0]


def test_results_carry_their_documents_id_on_every_path(
        sample_db: str, sample_conn: psycopg.Connection[Any], tiny_reranker: Reranker) -> None:
    """Result had no document_id (a Candidate has one): a web app linking a result to its
    own document row needed a query of its own per search."""
    owner = dict(sample_conn.execute("select id, document_id from pgfunnel.chunk").fetchall())
    sample_conn.rollback()
    p = SearchParams.build(k=5, principals=[], trace=True)
    answers: dict[str, list[Result]] = {}
    with Funnel(sample_db, embedder=None) as f:
        answers["search"] = f.search("refund annual plan", k=5).results
        answers["traced"] = f.search("refund annual plan", k=5, trace=True).results
        pool = f.candidates(sample_conn, "refund annual plan", None, p)
        answers["final"] = f.final(sample_conn, "refund annual plan", pool, p, reranked=False)
        sample_conn.commit()
    with Funnel(sample_db, embedder=None, reranker=tiny_reranker) as f:
        reranked = f.search("refund annual plan", k=5)
        assert reranked.reranked
        answers["reranked"] = reranked.results
    for route, results in answers.items():
        assert results, route
        assert [r.document_id for r in results] == [owner[r.chunk_id] for r in results], route
        assert all(isinstance(r.document_id, int) for r in results), route
    # the pool's candidates and the results name the same documents
    assert {c.chunk_id: c.document_id for c in pool}.items() >= \
        {r.chunk_id: r.document_id for r in answers["final"]}.items()


def test_final_takes_document_id_from_the_pool_it_is_given(
        sample_db: str, sample_conn: psycopg.Connection[Any]) -> None:
    """final() looked each result's document_id up in SQL, which a reader under RLS paid
    for per row (the chunk policy): it reads it from the candidates it is given. A
    candidate built without one (the default 0, no document's id) gave None; final()
    reads those alone from their chunks."""
    p = SearchParams.build(k=5, principals=[])
    with Funnel(sample_db, embedder=None) as f:
        pool = f.candidates(sample_conn, "refund annual plan", None, p)
        assert len(pool) >= 2
        bare = [dataclasses.replace(c, document_id=0) for c in pool]
        bare[0] = pool[0]
        results = f.final(sample_conn, "refund annual plan", bare, p, reranked=False)
        sample_conn.commit()
    assert "pgfunnel.chunk" not in _FINAL_SQL
    stored = dict(sample_conn.execute(
        "select id, document_id from pgfunnel.chunk where id = any(%s)",
        ([r.chunk_id for r in results],)).fetchall())
    got = {r.chunk_id: r.document_id for r in results}
    assert got == stored and all(got.values())
    assert len(got) >= 2
    assert got == {c.chunk_id: c.document_id for c in pool if c.chunk_id in got}
