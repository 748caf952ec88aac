"""Tests for pgfunnel.eval: metrics (via ir-measures), bootstrap, split, floors, reports."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any, Literal

import pytest

from pgfunnel.errors import ConfigError, InvalidInputError
from pgfunnel.eval.metrics import (
    BootstrapResult,
    FloorViolation,
    aggregate,
    check_floors,
    collapse_to_documents,
    load_floors,
    paired_bootstrap,
    pool_recall,
    pool_recall_curve,
    score_run,
)
from pgfunnel.eval.qrels import JudgedQuery, citekey_of, judging_level, load_queries, split_of
from pgfunnel.eval.report import (
    build_report,
    plot_pool_recall,
    plot_slices,
    read_json,
    to_markdown,
    write_json,
)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
LOG2_3 = math.log2(3)


def jq(qid: str, slice_: str, relevant: dict[str, int], split: str | None = None) -> JudgedQuery:
    return JudgedQuery(qid, f"text of {qid}", slice_, relevant, split=split)  # type: ignore[arg-type]


# Hand-computed reference (trec_eval definitions: gain = grade, discount log2(rank + 1)).
#  q1: judged {a:2, b:1, c:0}, ranked [x, a, b]
#      DCG@3 = 2/log2(3) + 1/log2(4);  IDCG@3 = 2/log2(2) + 1/log2(3)
#      recall@2 = |{a}| / |{a, b}| = 0.5;  RR = 1/2 (first relevant at rank 2)
#  q2: judged {d:1}, ranked [d, e] -> nDCG 1, recall 1, RR 1
#  q3: judged {f:3, g:1}, ranked [g, h, f]
#      DCG@3 = 1/1 + 3/log2(4) = 2.5;  IDCG@3 = 3/1 + 1/log2(3);  recall@2 = 0.5;  RR = 1
QUERIES = [
    jq("q1", "paraphrase", {"a": 2, "b": 1, "c": 0}),
    jq("q2", "identifier", {"d": 1}),
    jq("q3", "paraphrase", {"f": 3, "g": 1}),
    jq("q4", "no-answer", {}),
    jq("q5", "no-answer", {"z": 0}),  # judged but not relevant: still no-answer
]
RUN = {"q1": ["x", "a", "b"], "q2": ["d", "e"], "q3": ["g", "h", "f"], "q4": ["y"]}


def test_ir_measures_values_pinned_at_3() -> None:
    got = score_run(RUN, QUERIES, k=3)
    assert set(got) == {"q1", "q2", "q3"}
    expected_ndcg = {
        "q1": (2 / LOG2_3 + 1 / 2) / (2 + 1 / LOG2_3),
        "q2": 1.0,
        "q3": 2.5 / (3 + 1 / LOG2_3),
    }
    for qid, value in expected_ndcg.items():
        assert got[qid]["ndcg@3"] == pytest.approx(value, abs=1e-9)
    assert got["q1"]["mrr@3"] == pytest.approx(0.5, abs=1e-9)
    assert got["q2"]["mrr@3"] == pytest.approx(1.0, abs=1e-9)
    assert got["q3"]["mrr@3"] == pytest.approx(1.0, abs=1e-9)
    assert got["q1"]["recall@3"] == pytest.approx(1.0, abs=1e-9)
    assert got["q1"]["all_found@3"] == 1.0
    assert got["q3"]["all_found@3"] == 1.0


def test_ir_measures_values_pinned_at_2() -> None:
    got = score_run(RUN, QUERIES, k=2)
    assert got["q1"]["recall@2"] == pytest.approx(0.5, abs=1e-9)
    assert got["q2"]["recall@2"] == pytest.approx(1.0, abs=1e-9)
    assert got["q3"]["recall@2"] == pytest.approx(0.5, abs=1e-9)
    assert got["q1"]["all_found@2"] == 0.0
    assert got["q2"]["all_found@2"] == 1.0
    # nDCG@2 of q1: (2/log2 3) / (2 + 1/log2 3)
    assert got["q1"]["ndcg@2"] == pytest.approx((2 / LOG2_3) / (2 + 1 / LOG2_3), abs=1e-9)


def test_order_is_the_given_order_not_item_ids() -> None:
    # with equal scores trec_eval would tie-break by id; our scores are strictly descending
    qs = [jq("q", "s", {"a": 1})]
    assert score_run({"q": ["z", "a"]}, qs, k=10)["q"]["mrr@10"] == pytest.approx(0.5)
    assert score_run({"q": ["a", "z"]}, qs, k=10)["q"]["mrr@10"] == pytest.approx(1.0)


def test_missing_or_empty_run_scores_zero_and_duplicates_are_rejected() -> None:
    qs = [jq("q1", "s", {"a": 1}), jq("q2", "s", {"b": 1})]
    got = score_run({"q2": []}, qs, k=5)
    for qid in ("q1", "q2"):
        assert got[qid] == {"ndcg@5": 0.0, "recall@5": 0.0, "mrr@5": 0.0, "all_found@5": 0.0}
    with pytest.raises(InvalidInputError, match="more than once"):
        score_run({"q1": ["a", "a"]}, qs, k=5)
    with pytest.raises(ConfigError, match="^k:"):
        score_run({}, qs, k=0)


def test_noanswer_queries_are_counted_not_scored() -> None:
    per_query = score_run(RUN, QUERIES, k=3)
    rows = aggregate(per_query, QUERIES)
    assert list(rows) == ["paraphrase", "identifier", "no-answer", "all"]
    assert rows["no-answer"] == {"n_queries": 2.0, "n_noanswer": 2.0}
    assert rows["all"]["n_queries"] == 5.0
    assert rows["all"]["n_noanswer"] == 2.0
    assert rows["paraphrase"]["n_queries"] == 2.0
    assert rows["paraphrase"]["mrr@3"] == pytest.approx(0.75)
    assert rows["all"]["mrr@3"] == pytest.approx((0.5 + 1 + 1) / 3)
    # pool recall likewise skips them
    assert set(pool_recall(RUN, QUERIES)) == {"q1", "q2", "q3"}
    # a set made only of no-answer queries works everywhere
    only = [QUERIES[3], QUERIES[4]]
    assert score_run(RUN, only) == {}
    assert aggregate({}, only)["all"] == {"n_queries": 2.0, "n_noanswer": 2.0}


def test_aggregate_rejects_unknown_query_ids() -> None:
    with pytest.raises(InvalidInputError, match="not in the judged set"):
        aggregate({"nope": {"ndcg@10": 1.0}}, QUERIES)


def test_pool_recall_and_curve() -> None:
    pools = {"q1": ["b", "x", "y", "a"], "q2": [], "q3": ["f"]}
    assert pool_recall(pools, QUERIES) == {"q1": 1.0, "q2": 0.0, "q3": 0.5}
    assert pool_recall(pools, QUERIES, depth=2) == {"q1": 0.5, "q2": 0.0, "q3": 0.5}
    curve = pool_recall_curve(pools, QUERIES, [1, 4])
    assert [d for d, _ in curve] == [1, 4]
    assert [r for _, r in curve] == pytest.approx([1 / 3, 0.5])


def test_collapse_to_documents() -> None:
    assert collapse_to_documents(["d1#3", "d2#0", "d1#1", "d3"]) == ["d1", "d2", "d3"]


def test_bootstrap_against_itself_is_exactly_zero() -> None:
    a = {f"q{i}": (i * 0.37) % 1 for i in range(50)}
    assert paired_bootstrap(a, dict(a)) == (0.0, 0.0, 0.0, 50)
    result = paired_bootstrap(a, a)
    assert isinstance(result, BootstrapResult)
    assert not result.excludes_zero


def test_bootstrap_uniformly_better() -> None:
    a = {f"q{i}": (i * 0.37) % 0.8 for i in range(40)}
    b = {q: v + 0.1 for q, v in a.items()}
    r = paired_bootstrap(a, b)
    assert r.mean_diff == pytest.approx(0.1)
    assert r.low == pytest.approx(0.1) and r.high == pytest.approx(0.1)
    assert r.low > 0 and r.excludes_zero


def test_bootstrap_of_too_few_queries_decides_nothing() -> None:
    """One query resamples to a single point, which "excluded 0"; a handful give an
    interval far narrower than the real uncertainty. Under MIN_BOOTSTRAP_QUERIES the
    interval is still reported, but it never says the configurations differ."""
    from pgfunnel.eval.metrics import MIN_BOOTSTRAP_QUERIES
    from pgfunnel.eval.report import _decision

    one = paired_bootstrap({"q": 0.5}, {"q": 0.37})
    assert one.low == one.high == pytest.approx(-0.13) and one.n == 1
    assert one.too_few_queries and not one.excludes_zero
    assert _decision(one) == "no: 1 query, too few to tell"
    few = {f"q{i}": 0.1 * i for i in range(MIN_BOOTSTRAP_QUERIES - 1)}
    r = paired_bootstrap(few, {q: v + 0.2 + 0.01 * (int(q[1:]) % 3) for q, v in few.items()})
    assert r.low > 0 and not r.excludes_zero and _decision(r).startswith("no: 9 queries")
    enough = {f"q{i}": 0.05 * i for i in range(MIN_BOOTSTRAP_QUERIES)}
    r = paired_bootstrap(enough, {q: v + 0.2 for q, v in enough.items()})
    assert r.excludes_zero and _decision(r) == "yes"


def test_bootstrap_noisy_difference_is_seeded_and_brackets_the_mean() -> None:
    a = {f"q{i}": 0.5 for i in range(30)}
    b = {f"q{i}": 0.5 + (0.3 if i % 3 else -0.2) for i in range(30)}
    r1 = paired_bootstrap(a, b, seed=7)
    r2 = paired_bootstrap(a, b, seed=7)
    assert r1 == r2
    assert r1.low < r1.mean_diff < r1.high
    assert r1.mean_diff == pytest.approx((20 * 0.3 - 10 * 0.2) / 30)
    assert r1.low > 0  # 20 of 30 queries improve by more than the 10 lose


def test_bootstrap_needs_the_same_queries() -> None:
    with pytest.raises(InvalidInputError, match="same query ids"):
        paired_bootstrap({"a": 1.0}, {"b": 1.0})
    with pytest.raises(InvalidInputError):
        paired_bootstrap({}, {})


def test_split_of_is_deterministic_and_balanced() -> None:
    ids = [f"query-{i}" for i in range(1000)]
    first = [split_of(q) for q in ids]
    assert first == [split_of(q) for q in ids]
    n_test = first.count("test")
    assert 430 <= n_test <= 570
    assert 150 <= [split_of(q, test_fraction=0.2) for q in ids].count("test") <= 250
    assert [split_of(q, salt="other") for q in ids] != first


def test_explicit_split_wins() -> None:
    ids = [f"query-{i}" for i in range(20)]
    for qid in ids:
        forced = "dev" if split_of(qid) == "test" else "test"
        assert split_of(jq(qid, "s", {}, split=forced)) == forced
        assert split_of(jq(qid, "s", {})) == split_of(qid)
    with pytest.raises(ConfigError, match="test_fraction"):
        split_of("x", test_fraction=1.5)


def test_floor_above_measured_value_is_a_violation(tmp_path: Path) -> None:
    rows = aggregate(score_run(RUN, QUERIES, k=3), QUERIES)
    path = tmp_path / "floors.json"
    path.write_text(
        json.dumps(
            {
                "paraphrase": {"mrr@3": 0.9, "ndcg@3": 0.1},
                "identifier": {"ndcg@3": 1.0},
                "missing-slice": {"ndcg@3": 0.2},
            }
        )
    )
    floors = load_floors(path)
    violations = check_floors(rows, floors)
    assert violations == [
        FloorViolation("paraphrase", "mrr@3", 0.9, pytest.approx(0.75)),  # type: ignore[arg-type]
        FloorViolation("missing-slice", "ndcg@3", 0.2, None),
    ]
    assert "paraphrase" in str(violations[0]) and "mrr@3" in str(violations[0])
    assert "not measured" in str(violations[1])
    assert check_floors(rows, {"paraphrase": {"mrr@3": 0.75}}) == []


def test_a_mean_equal_to_its_floor_meets_it_whatever_the_float_rounding() -> None:
    # recall 1, 1 and 0.4 average to 0.7999999999999999 as floats: a floor of 0.8 failed,
    # saying "recall@3 = 0.8000 is below its floor of 0.8"
    queries = [jq(f"q{i}", "s", {"d#0": 1}) for i in range(3)]
    per_query = {"q0": {"recall@3": 1.0}, "q1": {"recall@3": 1.0}, "q2": {"recall@3": 0.4}}
    rows = aggregate(per_query, queries)
    assert rows["s"]["recall@3"] != 0.8  # the rounding this is about
    assert check_floors(rows, {"s": {"recall@3": 0.8}, "all": {"recall@3": 0.8}}) == []
    [below] = check_floors(rows, {"s": {"recall@3": 0.8000001}})
    # said with the decimals that show it below the floor
    assert str(below) == "slice 's': recall@3 = 0.8000 is below its floor of 0.8000001"
    [below] = check_floors({"s": {"ndcg@3": 0.90649}}, {"s": {"ndcg@3": 0.9065}})
    assert str(below) == "slice 's': ndcg@3 = 0.90649 is below its floor of 0.9065"


def test_load_floors_rejects_bad_values(tmp_path: Path) -> None:
    path = tmp_path / "floors.json"
    path.write_text('{"paraphrase": {"ndcg@10": "high"}}')
    with pytest.raises(ConfigError, match="floors.*ndcg@10"):
        load_floors(path)
    # a percentage could never be met (every run failed the gate), a negative floor never
    # missed: both were taken
    path.write_text('{"paraphrase": {"ndcg@10": 85}}')
    with pytest.raises(ConfigError, match="slice 'paraphrase' metric 'ndcg@10': the floor 85 "
                                          "is not between 0 and 1"):
        load_floors(path)
    path.write_text('{"all": {"recall@10": -0.1}}')
    with pytest.raises(ConfigError, match="'recall@10': the floor -0.1 is not between 0 and 1"):
        load_floors(path)
    path.write_text('{"all": {"recall@10": 1, "ndcg@10": 0}}')
    assert load_floors(path) == {"all": {"recall@10": 1.0, "ndcg@10": 0.0}}
    # a gate of no floor passed every run: "floors: all 0 met"
    for empty in ('{}', '{"all": {}}', '{"all": {}, "identifier": {}}'):
        path.write_text(empty)
        with pytest.raises(ConfigError, match="names no floor"):
            load_floors(path)
    path.write_text('{\n  "paraphrase": {"ndcg@10": 0.5},\n}\n')
    with pytest.raises(ConfigError, match=r"not valid JSON \(line 3, column 1\)"):
        load_floors(path)


def test_files_written_with_a_byte_order_mark_read_as_without(tmp_path: Path) -> None:
    """Windows editors start UTF-8 files with a BOM; ingest skips it, and so does eval
    (its first line was 'invalid JSON: Unexpected UTF-8 BOM', its qrels header a score)."""
    from pgfunnel.eval.qrels import load_beir

    line = '{"query_id": "a", "query": "x", "slice": "s", "relevant": {"d": 1}}'
    (tmp_path / "q.jsonl").write_text(line + "\r\n", encoding="utf-8-sig")
    assert [q.query_id for q in load_queries(tmp_path / "q.jsonl")] == ["a"]
    (tmp_path / "floors.json").write_text('{"s": {"ndcg@10": 0.5}}', encoding="utf-8-sig")
    assert load_floors(tmp_path / "floors.json") == {"s": {"ndcg@10": 0.5}}
    (tmp_path / "queries.jsonl").write_text('{"_id": "q1", "text": "x"}\n', encoding="utf-8-sig")
    (tmp_path / "test.tsv").write_text("query-id\tcorpus-id\tscore\r\nq1\td1\t2\r\n",
                                       encoding="utf-8-sig")
    judged = load_beir(tmp_path / "queries.jsonl", tmp_path / "test.tsv")
    assert [(q.query_id, dict(q.relevant)) for q in judged] == [("q1", {"d1": 2})]
    # versions compare --queries: judged, not the first line's JSON searched as text
    from pgfunnel.versions import read_query_file

    queries, is_judged = read_query_file(tmp_path / "q.jsonl")
    assert is_judged and [q.query_id for q in queries] == ["a"]


def _write_jsonl(path: Path, lines: list[str]) -> None:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_a_query_longer_than_a_search_takes_is_refused_with_its_line(tmp_path: Path) -> None:
    # it stopped the run at its search, minutes in, without naming the query
    path = tmp_path / "q.jsonl"
    _write_jsonl(path, [json.dumps({"query": "refund", "slice": "s", "relevant": ["a"]}),
                        json.dumps({"query": "x" * 10_001, "slice": "s", "relevant": ["a"]})])
    with pytest.raises(InvalidInputError, match=r"q.jsonl: line 2: field 'query' is 10,001 "
                                                 r"characters long; a search takes at most "):
        load_queries(path)


def test_load_queries_reads_and_ignores_unknown_keys(tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    _write_jsonl(
        path,
        [
            json.dumps(
                {
                    "query_id": "a",
                    "query": "x",
                    "slice": "s",
                    "relevant": {"d#1": 2},
                    "history": ["h"],
                    "split": "test",
                    "note": "ignored",
                    # like a field, but the line has that field: a note too
                    "Split": "judged twice",
                    "relevance": "checked by two judges",
                }
            ),
            "",
            json.dumps({"query_id": "b", "query": "y", "slice": "s", "relevant": {}}),
        ],
    )
    qs = load_queries(path)
    assert [q.query_id for q in qs] == ["a", "b"]
    assert qs[0].history == ("h",) and qs[0].split == "test" and qs[0].line == 1
    assert qs[1].is_noanswer and qs[1].line == 3
    assert judging_level(qs) == "chunk"


def test_load_queries_takes_lists_of_items_and_lines_without_ids(tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    _write_jsonl(path, [
        json.dumps({"query": "reset password", "slice": "s", "relevant": ["faq", "account"]}),
        json.dumps({"query": "reset password", "slice": "t", "relevant": {"faq": 2.0}}),
        json.dumps({"query": "and on mobile?", "slice": "s", "relevant": [],
                    "history": ["reset password"]}),
        json.dumps({"query_id": "x1", "query": "refund", "slice": "s", "relevant": {"b": 1}}),
    ])
    qs = load_queries(path)
    assert dict(qs[0].relevant) == {"faq": 1, "account": 1}
    assert dict(qs[1].relevant) == {"faq": 2}
    assert qs[2].is_noanswer and qs[3].query_id == "x1"
    # ids made from the text (and history): the same wherever the line sits, and a
    # repeat of a text is told apart
    first = qs[0].query_id
    assert first.startswith("q-") and len(first) == 14
    assert qs[1].query_id == f"{first}-2"
    assert qs[2].query_id not in (first, f"{first}-2")
    _write_jsonl(path, [json.dumps({"query": "refund", "slice": "s", "relevant": []}),
                        json.dumps({"query": "reset password", "slice": "s",
                                    "relevant": ["faq"]})])
    assert load_queries(path)[1].query_id == first
    assert split_of(load_queries(path)[1]) == split_of(qs[0])


@pytest.mark.parametrize(
    ("bad_line", "pattern"),
    [
        (
            '{"query_id": "", "query": "x", "slice": "s", "relevant": {}}',
            "line 2: field 'query_id' must not be empty",
        ),
        # it searched nothing and scored 0 without a word
        (
            '{"query_id": "b", "query": "  ", "slice": "s", "relevant": {"d": 1}}',
            "line 2: field 'query' must not be empty",
        ),
        (
            '{"query_id": "b", "query": "x", "relevant": {}}',
            "line 2: missing required field 'slice'",
        ),
        (
            '{"query_id": "b", "query": "x", "slice": "s"}',
            "line 2: missing required field 'relevant'",
        ),
        (
            '{"query_id": "b", "query": "x", "slice": "s", "relevant": {"d": 1.5}}',
            "line 2: .*grade",
        ),
        # past a C long it was a traceback from trec_eval after every search; past a
        # Postgres integer, --store-qrels failed with "integer out of range", no line named
        (
            '{"query_id": "b", "query": "x", "slice": "s", "relevant": {"d": 2147483648}}',
            "line 2: field 'relevant' gives item 'd' the grade 2147483648; a grade is at most",
        ),
        (
            '{"query_id": "b", "query": "x", "slice": "s", "relevant": {"d": 1e30}}',
            "line 2: field 'relevant' gives item 'd' the grade 1e\\+30; a grade is at most",
        ),
        (
            '{"query_id": "b", "query": "x", "slice": "s", "relevant": "d", "x": 1}',
            "line 2: .*relevant.*list of item ids, got str",
        ),
        (
            '{"query_id": "b", "query": "x", "slice": "s", "relevant": ["d", 7]}',
            "line 2: field 'relevant' lists 7",
        ),
        (
            '{"query_id": "b", "query": "x", "slice": "s", "relevant": {}, "split": "x"}',
            "line 2: .*split",
        ),
        ('{"query_id": "a", "query": "x", "slice": "s", "relevant": {}}', "line 2: duplicate"),
        ('{"query_id": "b", "query": 3, "slice": "s", "relevant": {}}', "line 2: field 'query'"),
        # text Postgres cannot hold: named here, not by the driver (NUL) or a traceback
        # (a lone surrogate, when the query id was made from the text)
        ('{"query": "x\\u0000y", "slice": "s", "relevant": {}}',
         "line 2: field 'query' contains a NUL"),
        ('{"query": "x\\ud800y", "slice": "s", "relevant": {}}',
         "line 2: field 'query' is not valid Unicode"),
        ('{"query": "x", "slice": "s\\ud800", "relevant": {}}', "line 2: field 'slice'"),
        ('{"query": "x", "slice": "s", "relevant": ["d\\u0000"]}', "line 2: field 'relevant'"),
        ('{"query": "x", "slice": "s", "relevant": [], "history": ["\\udfff"]}',
         "line 2: field 'history'"),
        ('{"query_id": "b\\u0000", "query": "x", "slice": "s", "relevant": {}}',
         "line 2: field 'query_id'"),
        ("{not json", "line 2: invalid JSON"),
        # a BEIR queries file without --qrels: "missing 'query'" did not say what it was
        ('{"_id": "q2", "text": "x", "metadata": {}}',
         "line 2: missing required field 'query'; the line reads as BEIR's queries.jsonl.*"
         "--qrels"),
        # a misspelt optional field was a note, ignored: the query went to the hashed split,
        # or a follow-up was searched without its history, and nothing said so
        ('{"query_id": "b", "query": "x", "slice": "s", "relevant": {}, "Split": "dev"}',
         "line 2: unknown field 'Split'; did you mean 'split'\\?"),
        ('{"query": "x", "slice": "s", "relevant": {}, "histroy": ["y"]}',
         "line 2: unknown field 'histroy'; did you mean 'history'\\?"),
        ('{"query-id": "b", "query": "x", "slice": "s", "relevant": {}}',
         "line 2: unknown field 'query-id'; did you mean 'query_id'\\?"),
        # json.loads kept the second and dropped the first, unsaid
        ('{"query_id": "b", "query": "x", "slice": "s", "relevant": {}, "query_id": "c"}',
         "line 2: invalid JSON: key 'query_id' appears twice in one object"),
    ],
)
def test_load_queries_error_names_the_line(tmp_path: Path, bad_line: str, pattern: str) -> None:
    path = tmp_path / "q.jsonl"
    good = '{"query_id": "a", "query": "x", "slice": "s", "relevant": {"d": 1}}'
    _write_jsonl(path, [good, bad_line])
    with pytest.raises(InvalidInputError, match=pattern):
        load_queries(path)


def test_a_file_that_mixes_levels_or_holds_nothing_is_named_with_its_lines(
        tmp_path: Path) -> None:
    """The errors named a query id, which for a line without one was made up (q-3f2a...);
    an empty file said only 'no judged queries to evaluate', naming no file."""
    from pgfunnel.eval.qrels import load_beir

    path = tmp_path / "q.jsonl"
    _write_jsonl(path, ['{"query": "x", "slice": "s", "relevant": ["a#1"]}',
                        '{"query": "y", "slice": "s", "relevant": ["b"]}'])
    with pytest.raises(InvalidInputError, match=r"q\.jsonl: judged queries mix .*line 1 "
                       r"\(query 'q-[0-9a-f]{12}'\) judges chunk 'a#1', line 2 .* judges "
                       "document 'b'"):
        load_queries(path)
    # a citekey may hold a '#' (C# docs): only '#' and digits at the end make a chunk key
    _write_jsonl(path, ['{"query": "x", "slice": "s", "relevant": ["c#-intro", "faq#b"]}'])
    assert judging_level(load_queries(path)) == "document"
    assert [citekey_of(i) for i in ("c#-intro", "c#-intro#2", "doc#3", "#3", "a#b#")] == \
        ["c#-intro", "c#-intro", "doc", "#3", "a#b#"]
    assert collapse_to_documents(["c#-intro#0", "c#-intro#4", "d#1"]) == ["c#-intro", "d"]
    _write_jsonl(path, ['{"query": "x", "slice": "s", "relevant": ["a#1", "a#b"]}'])
    with pytest.raises(InvalidInputError, match=r"mix .*judges chunk 'a#1'.*document 'a#b'"):
        load_queries(path)
    path.write_text("\n  \n", encoding="utf-8")
    with pytest.raises(InvalidInputError, match=r"q\.jsonl: no judged queries in the file"):
        load_queries(path)
    (tmp_path / "queries.jsonl").write_text('{"_id": "q1", "text": "x"}\n')
    (tmp_path / "test.tsv").write_text("query-id\tcorpus-id\tscore\n")
    with pytest.raises(InvalidInputError, match=r"test\.tsv: no judgments in the file"):
        load_beir(tmp_path / "queries.jsonl", tmp_path / "test.tsv")


@pytest.mark.parametrize(("qrels", "said"), [
    ("q1\td1\t0.7\n", r"line 1: score '0.7' is not a whole number"),  # was cut to 0
    ("q1\td1\tinf\n", r"line 1: score 'inf' is not a whole number"),  # was a traceback
    ("q1\td1\tnan\n", r"line 1: score 'nan' is not a whole number"),
    ("q1\td1\tx\n", r"line 1: score 'x' is not a number"),
    # a traceback from trec_eval past a C long; "integer out of range" from --store-qrels
    ("q1\td1\t2147483648\n", r"line 1: score 2147483648 is above the largest grade"),
    # one of the two grades was taken without a word
    ("q1\td1\t1\nq1\td2\t1\nq1\td1\t2\n",
     r"line 3: query 'q1' judges 'd1' 2, where line 1 judged it 1"),
    # the levels mixed were named by the lines of the queries file, without a file
    ("q1\td1\t1\nq1\td2#0\t1\n",
     r"test.tsv: the qrels mix chunk-level and document-level items: line 2 \(query 'q1'\) "
     r"judges chunk 'd2#0', line 1 \(query 'q1'\) judges document 'd1'"),
])
def test_beir_scores_that_are_not_grades_are_refused(tmp_path: Path, qrels: str,
                                                      said: str) -> None:
    from pgfunnel.eval.qrels import load_beir

    (tmp_path / "queries.jsonl").write_text('{"_id": "q1", "text": "x"}\n')
    (tmp_path / "test.tsv").write_text(qrels)
    with pytest.raises(InvalidInputError, match=said):
        load_beir(tmp_path / "queries.jsonl", tmp_path / "test.tsv")


def test_beir_trailing_tab_and_duplicate_query_ids(tmp_path: Path) -> None:
    from pgfunnel.eval.qrels import load_beir

    (tmp_path / "queries.jsonl").write_text('{"_id": "q1", "text": "x"}\n'
                                            '{"_id": "q2", "text": "y"}\n')
    (tmp_path / "test.tsv").write_text("q1\td1\t2.0\t\n")  # a trailing tab, a float grade
    judged = load_beir(tmp_path / "queries.jsonl", tmp_path / "test.tsv")
    assert [(q.query_id, dict(q.relevant)) for q in judged] == [("q1", {"d1": 2})]
    # a judged id twice: the second line was dropped without a word
    (tmp_path / "queries.jsonl").write_text('{"_id": "q1", "text": "x"}\n'
                                            '{"_id": "q1", "text": "y"}\n')
    with pytest.raises(InvalidInputError, match=r"line 2: duplicate _id 'q1' \(first seen "
                                                r"on line 1\)"):
        load_beir(tmp_path / "queries.jsonl", tmp_path / "test.tsv")
    # the same judgment twice is one judgment; a query of no text is refused, as in JSONL
    (tmp_path / "queries.jsonl").write_text('{"_id": "q1", "text": "x"}\n')
    (tmp_path / "test.tsv").write_text("q1\td1\t1\nq1\td1\t1\n")
    assert [dict(q.relevant) for q in load_beir(tmp_path / "queries.jsonl",
                                                tmp_path / "test.tsv")] == [{"d1": 1}]
    (tmp_path / "queries.jsonl").write_text('{"_id": "q1", "text": "  "}\n')
    with pytest.raises(InvalidInputError, match=r"line 1: query 'q1' has empty text"):
        load_beir(tmp_path / "queries.jsonl", tmp_path / "test.tsv")


def test_judging_level() -> None:
    assert judging_level(QUERIES) == "document"
    assert judging_level([jq("a", "s", {"doc#0": 1})]) == "chunk"
    assert judging_level([jq("a", "s", {})]) == "document"
    with pytest.raises(InvalidInputError, match="mix"):
        judging_level([jq("a", "s", {"doc#0": 1}), jq("b", "s", {"doc": 1})])
    assert judging_level([jq("a", "s", {"doc#x": 1})]) == "document"  # a citekey with '#'
    with pytest.raises(InvalidInputError, match="mix"):
        judging_level([jq("a", "s", {"doc#0": 1, "doc#x": 1})])


def _report_inputs() -> tuple[list[JudgedQuery], dict[str, dict[str, list[str]]]]:
    queries = [
        jq("i1", "identifier", {"kb#1": 1}),
        jq("i2", "identifier", {"kb#2": 2, "kb#3": 1}),
        jq("p1", "para|phrase", {"faq#0": 1}),
        jq("p2", "para|phrase", {"faq#4": 1}),
        jq("n1", "no-answer", {}),
    ]
    runs = {
        "bm25": {"i1": ["kb#1"], "i2": ["x#0", "kb#3"], "p1": ["y#0"], "p2": ["faq#4"]},
        "hybrid": {"i1": ["kb#1"], "i2": ["kb#2", "kb#3"], "p1": ["faq#0"], "p2": ["faq#4"]},
    }
    return queries, runs


def test_report_writers(tmp_path: Path) -> None:
    queries, runs = _report_inputs()
    pools = {
        name: {"fused": {q: r + ["kb#2", "faq#0"] for q, r in run.items()}, "capped": run}
        for name, run in runs.items()
    }
    report = build_report(
        runs, queries, k=3, pools=pools, n_resamples=500, metadata={"index_version": 4}
    )
    assert report.judging_level == "chunk"
    assert report.baseline == "bm25"
    assert report.configs["bm25"].pool_recall["fused"]["all"] == pytest.approx(1.0)
    overall = report.comparisons["hybrid"]["ndcg@3"]["all"]
    assert overall.mean_diff > 0

    json_path = tmp_path / "report.json"
    write_json(report, json_path)
    data = json.loads(json_path.read_text(encoding="utf-8"))
    assert data["judging_level"] == "chunk"
    assert data["configs"]["hybrid"]["aggregates"]["no-answer"]["n_noanswer"] == 1
    assert read_json(json_path) == report

    md = to_markdown(report)
    assert "per chunk" in md
    for name in ("identifier", "para\\|phrase", "no-answer", "**all**", "`hybrid`"):
        assert name in md
    assert "pool recall: fused" in md and "pool recall: capped" in md
    assert "95% interval" in md

    slices_png = tmp_path / "slices.png"
    plot_slices(report, slices_png)
    pool_png = tmp_path / "pool.png"
    curves = {"lexical": [(10, 0.4), (40, 0.7)], "dense": [(40, 0.8), (10, 0.5)]}
    plot_pool_recall(curves, pool_png)
    for out in (slices_png, pool_png):
        assert out.exists()
        assert out.read_bytes()[:8] == PNG_SIGNATURE


def test_report_on_one_split_and_single_config() -> None:
    queries, runs = _report_inputs()
    report = build_report({"bm25": runs["bm25"]}, queries, k=3, split="dev")
    kept = {q.query_id for q in queries if split_of(q) == "dev" and not q.is_noanswer}
    assert set(report.configs["bm25"].per_query) == kept
    assert report.split == "dev"
    assert report.comparisons == {}
    assert "nothing to compare" in to_markdown(report)
    with pytest.raises(ConfigError, match="baseline"):
        build_report(runs, queries, baseline="nope")


def test_report_stage_columns_in_funnel_order() -> None:
    # `--preset lexical --preset dense`: the dense leg's column came after "capped", and a
    # rerank configuration after a plain one put "reranked" after "capped" too, though the
    # columns are read left to right, leg to cut
    queries, runs = _report_inputs()
    pools = {
        "bm25": {"lexical": runs["bm25"], "fused": runs["bm25"], "capped": runs["bm25"]},
        "hybrid": {"dense": runs["hybrid"], "fused": runs["hybrid"],
                   "reranked": runs["hybrid"], "capped": runs["hybrid"]},
    }
    report = build_report(runs, queries, k=3, pools=pools, n_resamples=50)
    assert report.stages == ["lexical", "dense", "fused", "reranked", "capped"]
    header = next(line for line in to_markdown(report).splitlines()
                  if line.startswith("| slice"))
    assert header.index("pool recall: dense") < header.index("pool recall: fused") \
        < header.index("pool recall: reranked") < header.index("pool recall: capped")
    from pgfunnel.eval.harness import STAGES
    from pgfunnel.eval.report import _FUNNEL_ORDER

    assert _FUNNEL_ORDER == STAGES


def test_the_slice_chart_legend_covers_no_bar() -> None:
    """Five configurations scoring near 1.0 in every slice leave no free corner inside the
    axes: the legend, placed "best", covered the last slice's bars."""
    from pgfunnel.eval.report import _slices_figure

    slices = ["identifier", "paraphrase", "exact", "followup", "twopart"]
    queries = [jq(f"{s}{i}", s, {f"{s}{i}": 1}) for s in slices for i in range(3)]
    runs = {name: {q.query_id: [q.query_id] for q in queries}
            for name in ("default", "lexical", "dense", "rrf", "zscore")}
    fig = _slices_figure(build_report(runs, queries, k=10, n_resamples=10))
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    legend = ax.get_legend().get_window_extent(renderer)
    bars = [patch.get_window_extent(renderer) for patch in ax.patches]
    assert len(bars) == 5 * 6
    assert not any(legend.overlaps(bar) for bar in bars)
    # one pair of parentheses: it read "(judged per document (citekey))"
    assert ax.get_title() == "nDCG@10 per slice, judged per document (citekey)"


def test_the_pool_recall_chart_shows_every_line_where_lines_coincide() -> None:
    """A one-leg configuration's final order is often its leg's own list, and two
    configurations can rank alike: whichever of two identical lines was drawn second hid
    the other (the leg's dashed line hid the lexical and dense presets' lines in
    `--preset all-fusions`). And depths grow by doubling: on a linear axis 1, 3, 5 and 10
    shared the first tenth of its width."""
    import numpy as np
    from matplotlib.colors import to_rgb

    from pgfunnel.eval.report import _pool_recall_figure

    lexical = [(1, 0.6), (3, 0.8), (5, 0.9), (10, 0.95), (40, 1.0)]
    dense = [(1, 0.4), (3, 0.5), (5, 0.6), (10, 0.7), (40, 0.8)]
    fused = [(1, 0.2), (3, 0.3), (5, 0.4), (10, 0.5), (40, 0.6)]
    curves = {"lexical leg": lexical, "dense leg": dense,
              "default (final order)": fused, "lexical (final order)": lexical,
              "dense (final order)": dense, "rrf (final order)": fused}
    fig = _pool_recall_figure(curves, "t")
    ax = fig.axes[0]
    fig.canvas.draw()
    image = np.asarray(fig.canvas.buffer_rgba())[:, :, :3].astype(int)
    x0, y0, x1, y1 = (int(v) for v in ax.bbox.extents)
    height = image.shape[0]
    plot = image[height - y1:height - y0, x0:x1]  # the axes only: not the legend

    def pixels(rgb: tuple[float, float, float], alpha: float) -> int:
        # the colour as drawn over the white axes, to within anti-aliasing's rounding
        want = np.array([round(255 * (alpha * c + 1 - alpha)) for c in rgb])
        return int((np.abs(plot - want).max(axis=2) <= 3).sum())

    lines = dict(zip(curves, ax.get_lines(), strict=True))
    for name, line in lines.items():
        shown = pixels(to_rgb(line.get_color()), line.get_alpha() or 1.0)
        # a configuration's line alone shows about 1,000 pixels of its colour; the
        # presets' lines showed 258, in the gaps of the leg's dashes, and rrf's hid
        # default's (0)
        assert shown >= 400, (name, shown)
    # which is which: every line is in the legend, each configuration with a marker of
    # its own
    assert [t.get_text() for t in ax.get_legend().get_texts()] == list(curves)
    markers = [lines[n].get_marker() for n in curves if not n.endswith(" leg")]
    assert len(set(markers)) == len(markers), markers
    assert ax.get_xscale() == "log"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "3", "5", "10", "40"]


def test_the_pool_recall_chart_labels_no_depth_over_another() -> None:
    """Each line ends at its own longest list, so on a corpus of long pages the axis held
    39, 40, 44 and 45 side by side (a leg at its depth of 40, pools the per-source cap
    widened), and on a log scale their labels ran together as '394045'. The round depths
    (where the table's pool recall and recall@k are read) keep their labels; a line's end
    keeps one only where it has room."""
    from pgfunnel.eval.report import _pool_recall_figure

    def line(end: int) -> list[tuple[int, float]]:
        return [(d, 0.5 + d / 100) for d in (1, 3, 5, 10, 20, 40) if d <= end] + [(end, 0.95)]

    curves = {"lexical leg": line(40), "dense leg": line(39),
              "default (final order)": line(45), "rrf (final order)": line(44),
              "zscore (final order)": line(35)}
    fig = _pool_recall_figure(curves, "t")
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    labels = [t for t in ax.get_xticklabels() if t.get_visible() and t.get_text()]
    boxes = sorted((box.x0, box.x1, t.get_text())
                   for t in labels for box in [t.get_window_extent(renderer)])
    for (_, right, a), (left, _, b) in itertools.pairwise(boxes):
        assert left >= right + 2, (a, b, [text for *_, text in boxes])
    shown = [text for *_, text in boxes]
    assert {"1", "3", "5", "10", "20", "40"} <= set(shown), shown
    # the longest line's end: the last point drawn is still where the axis ends
    assert ax.get_xlim()[1] >= 45


def test_charts_of_no_answer_queries_only_draw_no_line_at_zero() -> None:
    """With nothing to find, the pool-recall chart drew every line flat at 0 ("mean over
    answerable queries", of which there were none), as if every pool had missed, and the
    slice chart was a blank frame."""
    from pgfunnel.eval.report import _pool_recall_figure, _slices_figure

    queries = [jq("n1", "noanswer", {}), jq("n2", "noanswer", {"d#0": 0})]
    pools = {"n1": ["d#0"], "n2": ["d#0"]}
    assert pool_recall_curve(pools, queries, [1, 5]) == []
    fig = _pool_recall_figure({"lexical leg": [], "default (final order)": []}, "t")
    ax = fig.axes[0]
    assert ax.get_lines() == []
    assert any("no answerable queries" in t.get_text() for t in ax.texts)
    report = build_report({"a": {"n1": ["d#0"], "n2": []}}, queries, k=10)
    ax = _slices_figure(report).axes[0]
    assert any("no answerable queries" in t.get_text() for t in ax.texts)


def test_the_pool_recall_chart_legend_covers_no_point() -> None:
    """A weak configuration's lines run along the bottom of the chart, where the legend
    (placed lower right) covered them."""
    from pgfunnel.eval.report import _pool_recall_figure

    low = [(1, 0.02), (3, 0.04), (10, 0.06), (20, 0.08), (40, 0.1), (80, 0.12), (160, 0.14)]
    fig = _pool_recall_figure({"lexical leg": low, "dense leg": low,
                               "a (final order)": low, "b (final order)": low}, "t")
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    legend = ax.get_legend().get_window_extent(renderer)
    points = [ax.transData.transform(xy) for line in ax.get_lines() for xy in line.get_xydata()]
    assert not any(legend.contains(x, y) for x, y in points)


def test_both_charts_draw_each_configuration_in_one_colour() -> None:
    """slices.png and pool_recall.png are read side by side. The bars took the colour
    cycle from the first configuration, the pool-recall chart from its two leg bands:
    `--preset all-fusions` drew `default` blue and `lexical` orange as bars, and the
    lexical leg blue and the dense leg orange as bands, `default` green."""
    from matplotlib.colors import to_hex

    from pgfunnel.eval.report import _pool_recall_figure, _slices_figure

    names = ["default", "lexical", "dense", "rrf", "zscore"]
    queries = [jq("q1", "s", {"d1#0": 1}), jq("q2", "s", {"d2#0": 1})]
    runs = {n: {"q1": ["d1#0"], "q2": ["d2#0"] if i % 2 else ["x#0"]}
            for i, n in enumerate(names)}
    report = build_report(runs, queries, k=10, n_resamples=10)
    bars = _slices_figure(report).axes[0].containers
    bar_colour = {n: to_hex(c.patches[0].get_facecolor()) for n, c in zip(names, bars,
                                                                          strict=True)}
    line = [(1, 0.5), (3, 0.7), (10, 0.9)]
    curves = {"lexical leg": line, "dense leg": line,
              **{f"{n} (final order)": line for n in names}}
    drawn = dict(zip(curves, _pool_recall_figure(curves, "t").axes[0].get_lines(),
                     strict=True))
    for n in names:
        assert to_hex(drawn[f"{n} (final order)"].get_color()) == bar_colour[n], n
    legs = {to_hex(drawn[leg].get_color()) for leg in ("lexical leg", "dense leg")}
    assert len(legs) == 2 and not legs & set(bar_colour.values()), (legs, bar_colour)


def test_the_charts_of_one_split_say_which() -> None:
    """`eval --split dev` and `--split test` wrote charts with the same titles, so the
    two PNGs of a tuning round could not be told apart once copied out of their folders
    (report.md and the tables say the split)."""
    from pgfunnel.eval.report import _slices_figure, pool_recall_title

    queries = [jq("q1", "s", {"d1#0": 1}, split="dev"), jq("q2", "s", {"d2#0": 1},
                                                           split="test")]
    runs = {"a": {"q1": ["d1#0"], "q2": []}}
    splits: list[tuple[Literal["dev", "test"] | None, str | None]] = [
        ("dev", "dev split"), ("test", "test split"), (None, None)]
    for split, said in splits:
        report = build_report(runs, queries, k=10, n_resamples=10, split=split)
        titles = (_slices_figure(report).axes[0].get_title(), pool_recall_title(report))
        for title in titles:
            if said is None:
                assert "split" not in title, title
            else:
                assert title.endswith(f", {said}") or f", {said})" in title, title
    assert pool_recall_title(report) == "Pool recall vs depth (chunk judging)"


def test_charts_show_slice_and_configuration_names_as_written(tmp_path: Path) -> None:
    """Matplotlib reads `$...$` in a label as math and hides a legend label that starts
    with `_`: a slice named 'a $\\frac$ b' stopped `pgfunnel eval --out` with a
    ParseException traceback after every search had run (report.md written, no charts),
    'cost $5 or $10' was drawn as '5 or ' in italics, and a configuration named '_base'
    had no legend entry."""
    from pgfunnel.eval.report import _pool_recall_figure, _slices_figure

    slices = ["a $\\frac$ b", "cost $5 or $10"]
    queries = [jq(f"q{i}", s, {f"d{i}#0": 1}) for i, s in enumerate(slices)]
    runs = {name: {q.query_id: [f"d{i}#0"] for i, q in enumerate(queries)}
            for name in ("_base", "$x$")}
    report = build_report(runs, queries, k=10, n_resamples=10)
    plot_slices(report, tmp_path / "slices.png")
    curves = {"lexical leg": [(1, 1.0)], "_base (final order)": [(1, 1.0)],
              "$x$ (final order)": [(1, 1.0)]}
    plot_pool_recall(curves, tmp_path / "pool.png")

    def shown(text: Any) -> str:
        # what is drawn: the text itself, unless matplotlib reads it as math
        s, math = text._preprocess_math(text.get_text())
        assert not math, text.get_text()
        return str(s).replace("\\$", "$")

    ax = _slices_figure(report).axes[0]
    assert [shown(t) for t in ax.get_xticklabels()] == [*slices, "all"]
    assert [shown(t) for t in ax.get_legend().get_texts()] == ["_base", "$x$"]
    ax = _pool_recall_figure(curves, "t").axes[0]
    assert [shown(t) for t in ax.get_legend().get_texts()] == list(curves)


@pytest.mark.parametrize(("text", "said"), [
    # a JSON array or a pretty-printed object: the first line alone read "invalid JSON:
    # Expecting value", and an array on one line "expected a JSON object, got list"
    ('[\n  {"query": "x", "slice": "s", "relevant": ["d"]},\n  {"query": "y", "slice": "s", '
     '"relevant": ["d"]}\n]\n',
     "line 1: invalid JSON at column 2: Expecting value; the file is one JSON array of judged "
     "queries over several lines, not JSON Lines: drop the brackets and write each object "
     "whole on a line of its own (JSON Lines)"),
    ('{\n  "query": "x",\n  "slice": "s",\n  "relevant": ["d"]\n}\n',
     "line 1: invalid JSON at column 2: Expecting property name enclosed in double quotes; "
     "the file is one JSON object over several lines, not JSON Lines: write each object "
     "whole on a line of its own (JSON Lines)"),
    ('[{"query": "x", "slice": "s", "relevant": ["d"]}]\n',
     "line 1: a JSON array of objects, not one object: drop the brackets and write each "
     "object whole on a line of its own (JSON Lines)"),
    # a line that is not JSON in a JSON Lines file: said where, with no hint
    ('{"query": "x", "slice": "s", "relevant": ["d"]}\n{"query": "y", "slice": }\n',
     "line 2: invalid JSON at column 25: Expecting value"),
])
def test_a_judged_queries_file_that_is_not_json_lines_says_so(
        tmp_path: Path, text: str, said: str) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InvalidInputError) as exc:
        load_queries(path)
    assert str(exc.value) == f"{path}: {said}"


def test_the_pool_recall_chart_keeps_the_label_of_the_depth_the_legs_read_to() -> None:
    """With legs 200 deep (--lexical-depth 200) the harness's curves step 1 ... 160 and
    end at 200, where the table's pool recall is read: the round 160 took its place and
    200, the axis's end, had no label. The legs' depth keeps it; the crowded 160 goes."""
    from pgfunnel.eval.report import _pool_recall_figure

    def line(end: int) -> list[tuple[int, float]]:
        return [(d, 0.4 + d / 400) for d in (1, 3, 5, 10, 20, 40, 80, 160) if d < end] + [
            (end, 0.95)]

    curves = {"lexical leg": line(200), "dense leg": line(200),
              "default (final order)": line(200)}
    fig = _pool_recall_figure(curves, "t")
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    labels = [t for t in ax.get_xticklabels() if t.get_visible() and t.get_text()]
    boxes = sorted((box.x0, box.x1, t.get_text())
                   for t in labels for box in [t.get_window_extent(renderer)])
    shown = [text for *_, text in boxes]
    assert shown[-1] == "200", shown
    assert {"1", "3", "5", "10", "20", "40", "80"} <= set(shown), shown
    for (_, right, a), (left, _, b) in itertools.pairwise(boxes):
        assert left >= right + 2, (a, b, shown)
