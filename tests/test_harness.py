"""The evaluation harness and `pgfunnel eval` on the sample help-center corpus."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pgfunnel.data import __file__ as _data_init
from pgfunnel.errors import ConfigError, InvalidInputError
from pgfunnel.eval.harness import EvalConfig, Harness, parse_config_arg, preset_configs
from pgfunnel.eval.qrels import JudgedQuery, load_queries

DATA = Path(_data_init).resolve().parent
QUERIES = DATA / "helpcenter_queries.jsonl"
FLOORS = DATA.parent / "eval" / "floors_helpcenter.json"


def _subset(per_slice: int = 2) -> list[JudgedQuery]:
    """A few queries of every slice: enough to exercise each path, fast to run."""
    seen: dict[str, int] = {}
    out = []
    for q in load_queries(QUERIES):
        if seen.get(q.slice, 0) < per_slice:
            seen[q.slice] = seen.get(q.slice, 0) + 1
            out.append(q)
    return out


def _write(path: Path, queries: list[JudgedQuery]) -> Path:
    rows = [{"query_id": q.query_id, "query": q.query, "slice": q.slice,
             "relevant": dict(q.relevant), "history": list(q.history)} for q in queries]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_config_validation_names_the_problem() -> None:
    assert parse_config_arg('mm={"fusion": "minmax", "weights": [1, 2]}').search == {
        "fusion": "minmax", "weights": [1, 2]}
    with pytest.raises(ConfigError, match="fuzion"):
        parse_config_arg('bad={"fuzion": "rrf"}')
    with pytest.raises(ConfigError, match="NAME=JSON"):
        parse_config_arg('{"fusion": "rrf"}')
    with pytest.raises(ConfigError, match="set by the harness"):
        EvalConfig.from_dict("x", {"k": 5})
    # an unknown key is told the keys a configuration takes: the harness's own ('legs')
    # among them, and not the five it sets (the list named 'k' and 'trace', not 'legs')
    with pytest.raises(ConfigError) as unknown:
        EvalConfig.from_dict("x", {"leg": "lexical"})
    said = str(unknown.value)
    assert "x: leg: unknown configuration key (known: " in said, said
    known = said.split("(known: ")[1].rstrip(")").split(", ")
    assert {"legs", "rerank", "followup", "fusion", "weights", "rrf_k"} <= set(known), said
    assert not {"k", "trace", "collection", "principals", "tenant"} & set(known), said
    with pytest.raises(ConfigError, match="preset"):
        preset_configs("nope")
    assert [c.name for c in preset_configs("all-fusions")] == [
        "default", "lexical", "dense", "rrf", "zscore"]
    # presets add up in order, a name two of them share once
    assert [c.name for c in preset_configs("lexical", "default", "all-fusions")] == [
        "lexical", "default", "dense", "rrf", "zscore"]
    # one preset twice ran it once, compared with nothing; the error says how to compare
    # a configuration with itself
    with pytest.raises(ConfigError, match="given twice.*--config same="):
        preset_configs("default", "default")
    assert parse_config_arg("same={}").search == {}
    # which legs run: both (the default), or one of them alone
    assert EvalConfig.from_dict("x", {}).legs == "both"
    assert [c.legs for c in preset_configs("lexical", "dense")] == ["lexical", "dense"]
    with pytest.raises(ConfigError, match="'legs' must be one of both, lexical, dense"):
        EvalConfig.from_dict("x", {"legs": "bm25"})


@pytest.mark.parametrize(("raw", "said"), [
    # bool("false") is True: follow-up resolution stayed on, the reranker was switched on
    ({"followup": "false"}, "x: 'followup' must be true or false, got 'false'"),
    ({"rerank": "no"}, "x: 'rerank' must be true or false, got 'no'"),
    ({"decompose": 1}, "x: 'decompose' must be true or false, got 1"),
    ({"qualifiers": 5}, "x: 'qualifiers' must be a list of strings"),  # was a TypeError
    ({"qualifiers": "pro"}, "x: 'qualifiers' must be a list of strings"),
    ({"rerank_depth": True}, "x: 'rerank_depth' must be a positive integer"),
    ({"rerank_model": 5}, "x: 'rerank_model' must be a model id"),
    ({"rerank_gate_margin": "0.1"}, "x: 'rerank_gate_margin' must be a finite number"),
])
def test_harness_keys_of_the_wrong_type_are_refused(raw: dict[str, Any], said: str) -> None:
    with pytest.raises(ConfigError, match=said):
        EvalConfig.from_dict("x", raw)


def test_a_configuration_of_the_wrong_type_is_a_one_line_cli_error() -> None:
    """Refused before any connection (the DSN here reaches nothing)."""
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    res = CliRunner().invoke(app, ["eval", str(QUERIES), "--dsn", "postgresql://nobody@/x",
                                   "--config", 'x={"qualifiers": 5}'])
    assert res.exit_code == 1, res.output
    assert "error: --config: x: 'qualifiers' must be a list of strings" in res.output


@pytest.mark.parametrize(("metric", "k"), [("ndgc@10", "10"), ("ndcg@20", "10")])
def test_a_floor_on_a_metric_eval_does_not_report_is_refused_before_any_search(
        tmp_path: Path, metric: str, k: str) -> None:
    """Refused before any connection (the DSN here reaches nothing); it used to be an
    unmet floor after every search had run."""
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    floors = tmp_path / "floors.json"
    floors.write_text(json.dumps({"all": {"recall@10": 0.5, metric: 0.5}}))
    res = CliRunner().invoke(app, ["eval", str(QUERIES), "--dsn", "postgresql://nobody@/x",
                                   "--floors", str(floors), "--k", k])
    assert res.exit_code == 1, res.output
    assert f"slice 'all': '{metric}' is not a metric eval reports at --k 10" in res.output


def test_eval_cli_tables_floors_and_self_bootstrap(sample_db: str, tmp_path: Path) -> None:
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    queries = _write(tmp_path / "q.jsonl", _subset())
    floors = tmp_path / "floors.json"
    # identifier lookups score well above 0 on this corpus; two-part questions never rank
    # both their pages first, so a floor of 1 is not met
    floors.write_text(json.dumps({"identifier": {"recall@10": 0.01},
                                  "twopart": {"ndcg@10": 1.0}}))
    out_dir = tmp_path / "out"
    res = CliRunner().invoke(app, [
        "eval", str(queries), "--dsn", sample_db, "--config", "a={}", "--config", "b={}",
        "--floors", str(floors), "--out", str(out_dir)])
    assert res.exit_code == 3, res.output
    text = res.output
    # a per-slice table with the pool recall of every stage next to the final metrics
    for word in ("identifier", "paraphrase", "followup", "twopart", "noanswer",
                 "pool recall per stage", "lexical", "dense", "fused", "capped",
                 "ndcg@10"):
        assert word in text, word
    assert "ndcg@10 = " in text and "below its floor of 1" in text
    # the tables' short names and the comparison's brackets are said on stdout, not only in
    # docs/evaluation.md and report.md
    assert ("n: judged queries (na: those with nothing to find, counted, not scored); "
            "lexical, dense, fused, capped: pool recall") in res.stdout
    assert "found@10: share of queries with every relevant item in the top 10" in res.stdout
    assert ("Against the baseline 'a': Δ, the mean per-query difference (configuration − "
            "baseline), and [its 95% paired-bootstrap interval]") in res.stdout
    same = next(line for line in res.stdout.splitlines() if line.startswith("b − a (ndcg@10): "))
    # a configuration against itself: [0, 0] everywhere, and nothing it could tell apart
    assert "all: +0.000 [+0.000, +0.000]" in same and "excludes 0" not in same, same
    # the floor names the configuration it gated (the first), on one line
    assert "floor: configuration 'a', slice 'twopart'" in text
    assert "recall@10" in text and "floor of 0.01" not in text
    for name in ("report.json", "report.md", "slices.png", "pool_recall.png"):
        assert (out_dir / name).stat().st_size > 0
    # no line ends in a space: the tables' titles were padded to the 150-column table
    assert "a: pool recall per stage | final metrics\n" in res.stdout
    for where, lines in (("stdout", res.stdout.splitlines()),
                         ("report.md", (out_dir / "report.md").read_text().splitlines())):
        padded = [line for line in lines if line.endswith(" ")]
        assert not padded, (where, padded)
    report: dict[str, Any] = json.loads((out_dir / "report.json").read_text())
    assert report["judging_level"] == "document"
    # a configuration against itself: every slice's interval is exactly [0, 0]
    by_slice = report["comparisons"]["b"]["ndcg@10"]
    assert set(by_slice) >= {"identifier", "paraphrase", "all"}
    for r in by_slice.values():
        assert (r["mean_diff"], r["low"], r["high"]) == (0.0, 0.0, 0.0)
    # pool recall never rises along the funnel (legs -> fused -> capped)
    pools = report["configs"]["a"]["pool_recall"]
    fused = pools["fused"]["all"]
    assert pools["capped"]["all"] <= fused <= 1.0
    assert max(pools["lexical"]["all"], pools["dense"]["all"]) > 0.5
    ndcg_all = report["configs"]["a"]["aggregates"]["all"]["ndcg@10"]
    assert 0.3 < ndcg_all <= 1.0
    # runs.jsonl: the ranked items behind every score, per configuration and query
    runs = [json.loads(line) for line in (out_dir / "runs.jsonl").read_text().splitlines()]
    assert {r["config"] for r in runs} == {"a", "b"}
    assert len(runs) == 2 * len(_subset())  # no-answer queries included
    first = next(r for r in runs if r["config"] == "a" and r["final"])
    assert len(first["final"]) <= 10 and set(first["stages"]) >= {"fused", "capped"}

    # the same run gated by a floor just below what it measured passes
    floors.write_text(json.dumps({"all": {"ndcg@10": round(ndcg_all - 0.01, 4)}}))
    res = CliRunner().invoke(app, ["eval", str(queries), "--dsn", sample_db, "--floors",
                                   str(floors), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["floor_violations"] == []


def test_eval_prints_which_differences_its_queries_can_tell(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The comparison line printed `[low, high]` with nothing saying what it was, nor
    which slices' intervals exclude 0 (only report.md had that column)."""
    from pgfunnel.cli.evaluate import _print_tables

    from pgfunnel.eval.report import build_report

    # 12 queries where 'b' finds the page first and 'a' never does, and 4 of the same
    queries = [JudgedQuery(f"m{i}", f"many {i}", "many", {f"p{i}": 1}) for i in range(12)]
    queries += [JudgedQuery(f"f{i}", f"few {i}", "few", {f"p{i}": 1}) for i in range(4)]
    runs = {"a": {q.query_id: ["other"] for q in queries},
            "b": {q.query_id: list(q.relevant) for q in queries}}
    _print_tables(build_report(runs, queries, k=10, baseline="a"), 10)
    line = next(x for x in capsys.readouterr().out.splitlines()
                if x.startswith("b − a (ndcg@10): "))
    assert "many: +1.000 [+1.000, +1.000] excludes 0" in line, line
    assert "few: +1.000 [+1.000, +1.000] (4 queries, too few to tell)" in line, line
    assert "all: +1.000 [+1.000, +1.000] excludes 0" in line, line


def test_judged_items_missing_from_the_collection_are_named(sample_db: str,
                                                           tmp_path: Path) -> None:
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    real = next(q for q in _subset(1) if q.relevant_items)
    known = sorted(real.relevant_items)[0]
    queries = [
        JudgedQuery("q1", real.query, "identifier", {known: 1, "no-such-page": 1}),
        JudgedQuery("q2", "vpn setup", "keyword", {"guides/vpn.html": 2, "gone": 0}),
    ]
    with pytest.warns(UserWarning, match=r"2 of 3 judged items are not in collection"):
        result = Harness(sample_db, "default").run(queries, preset_configs("default"))
    # grade-0 items are not looked for; the judged ones missing are listed in order
    assert result.missing_items == ["guides/vpn.html", "no-such-page"]
    assert result.report.metadata["judged_items_not_in_collection"] == result.missing_items

    chunk_level = [JudgedQuery("c1", real.query, "identifier",
                               {f"{known}#0": 1, f"{known}#9999": 1})]
    with pytest.warns(UserWarning, match="1 of 2"):
        result = Harness(sample_db, "default").run(chunk_level, preset_configs("default"))
    assert result.missing_items == [f"{known}#9999"]

    res = CliRunner().invoke(app, ["eval", str(_write(tmp_path / "q.jsonl", queries)),
                                   "--dsn", sample_db])
    assert res.exit_code == 0, res.output
    assert "warning: pgfunnel eval: 2 of 3 judged items" in " ".join(res.output.split())


def test_judged_items_written_as_file_names_are_matched_to_their_citekeys(
        sample_db: str) -> None:
    import warnings

    real = next(q for q in _subset(1) if q.relevant_items)
    known = sorted(real.relevant_items)[0]
    as_written = JudgedQuery("q1", real.query, "identifier", {known: 1})
    as_files = JudgedQuery("q1", real.query, "identifier",
                           {f"./{known}.md": 1, "no-such-page.md": 1})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = Harness(sample_db, "default").run([as_files], preset_configs("default"))
        baseline = Harness(sample_db, "default").run([as_written], preset_configs("default"))
    messages = " ".join(str(w.message) for w in caught)
    assert f"1 judged item was written as a file name and matched to its citekey " \
           f"('./{known}.md' -> '{known}')" in messages
    assert result.report.metadata["judged_items_respelled"] == {f"./{known}.md": known}
    # an item that names no document stays missing, under its own spelling
    assert result.missing_items == ["no-such-page.md"]
    # the renamed judgment scores as the citekey does (one more relevant item, never found)
    found = baseline.report.configs["default"].per_query["q1"]["recall@10"]
    assert found > 0
    assert result.report.configs["default"].per_query["q1"]["recall@10"] == found / 2


def test_eval_says_one_judged_item_matched_to_its_citekey_once(sample_db: str,
                                                               tmp_path: Path) -> None:
    """The CLI says the renaming once, as a note, in its own words; the library's warning
    is silenced. Its filter matched "judged items" only, so with one item renamed
    ("1 judged item was written as a file name ...") the same sentence came twice, first
    as `warning: pgfunnel eval: ...` and then as `note: pgfunnel eval: ...`."""
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    real = next(q for q in _subset(1) if q.relevant_items)
    known = sorted(real.relevant_items)[0]
    for items, said in (({f"{known}.md": 1}, "1 judged item was written as a file name"),
                        ({f"{known}.md": 1, f"./{known}.md": 1},
                         "2 judged items were written as file names")):
        path = _write(tmp_path / "q.jsonl", [JudgedQuery("q1", real.query, "identifier",
                                                         items)])
        res = CliRunner().invoke(app, ["eval", str(path), "--dsn", sample_db])
        assert res.exit_code == 0, res.output
        lines = [" ".join(x.split()) for x in res.output.splitlines() if said in x]
        assert lines == [f"note: pgfunnel eval: {said}" + lines[0].split(said, 1)[1]], \
            res.output


def test_the_report_counts_the_queries_the_rerank_gate_skipped(sample_db: str,
                                                               tmp_path: Path) -> None:
    """A rerank gate's margin is chosen on judged queries (docs/python-rerank.md), but
    the report said nothing of how often it fired: a margin that skipped the reranker on
    every query and one that never did read alike but for their scores. The metadata
    counts, per reranking configuration, the queries reranked and those the gate
    skipped, and runs.jsonl says it of each query."""
    from pgfunnel.eval.report import write_runs
    from pgfunnel.tiny_models import build_tiny_cross_encoder

    model = str(build_tiny_cross_encoder(tmp_path / "ce"))
    queries = [q for q in _subset(1) if q.relevant_items][:4]
    configs = [EvalConfig.from_dict("plain", {}),
               EvalConfig.from_dict("rr", {"rerank": True, "rerank_model": model,
                                           "rerank_depth": 5}),
               EvalConfig.from_dict("gated", {"rerank": True, "rerank_model": model,
                                              "rerank_depth": 5,
                                              "rerank_gate_margin": 1e-12})]
    result = Harness(sample_db, "default").run(queries, configs)
    counts = result.report.metadata["rerank"]
    assert set(counts) == {"rr", "gated"}, counts
    n = len(queries)
    assert counts["rr"] == {"queries": n, "reranked": n, "skipped_by_gate": 0}, counts
    # a margin of almost nothing: the best fused score leads the second by that much on
    # every query whose two best are not tied
    assert counts["gated"]["queries"] == n and counts["gated"]["skipped_by_gate"] >= 1
    assert counts["gated"]["reranked"] + counts["gated"]["skipped_by_gate"] == n, counts
    write_runs(result, tmp_path / "runs.jsonl")
    rows = [json.loads(line) for line in (tmp_path / "runs.jsonl").read_text().splitlines()]
    said = {(r["config"], r["query_id"]): r.get("reranked") for r in rows}
    assert all(said[("rr", q.query_id)] is True for q in queries), said
    assert all(("reranked" not in r) for r in rows if r["config"] == "plain"), rows
    assert sum(said[("gated", q.query_id)] is False for q in queries) == \
        counts["gated"]["skipped_by_gate"]


#: a paraphrase none of whose words is in the help center's BM25 index: the lexical
#: leg finds nothing, the dense leg finds the refund articles
NO_LEXICAL_MATCH = "how can I obtain a reimbursement"


def test_the_lexical_preset_never_returns_what_only_the_dense_leg_found(
        sample_db: str, embedder: Any) -> None:
    import warnings

    from pgfunnel.search import Funnel

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the query's stop words, named by a notice
        assert Funnel(sample_db, embedder=None).search(NO_LEXICAL_MATCH).results == []
    harness = Harness(sample_db, "default", embedder=embedder)
    # judged relevant: what the dense leg alone returns, so a list the dense leg filled
    # would score
    probe = JudgedQuery("p", NO_LEXICAL_MATCH, "paraphrase", {"refunds-annual": 1})
    found = harness.run([probe], preset_configs("dense")).runs["dense"]["p"].final
    assert found
    q = JudgedQuery("q", NO_LEXICAL_MATCH, "paraphrase", {item: 1 for item in found})
    kw = JudgedQuery("kw", "refund annual plan", "keyword", {"refunds-annual": 1})
    result = harness.run([q, kw], preset_configs("lexical", "dense"))

    lexical = result.runs["lexical"]
    # nothing matched lexically, so nothing comes back: no dense hit fills the list
    assert lexical["q"].final == []
    assert lexical["q"].stages == {"lexical": [], "fused": [], "capped": []}
    assert lexical["q"].top_score is None
    # one leg alone fuses by RRF, whose top score is 1/61 for every query: the report
    # gives the leg's own score instead (BM25; cosine similarity)
    assert lexical["kw"].top_score is not None and lexical["kw"].top_score > 1
    dense_tops = [r.top_score for r in result.runs["dense"].values()]
    assert len(set(dense_tops)) == 2 and all(t is not None and 0 < t <= 1
                                             for t in dense_tops), dense_tops
    assert result.report.configs["lexical"].per_query["q"]["ndcg@10"] == 0.0
    assert result.report.configs["dense"].per_query["q"]["ndcg@10"] == 1.0
    # a query the lexical leg does match returns its hits and nothing else
    assert lexical["kw"].final and set(lexical["kw"].final) <= set(lexical["kw"].stages["lexical"])
    # the leg that did not run has no pool recall (shown as not measured), the other has
    pools = result.report.configs["lexical"].pool_recall
    assert "lexical" in pools and "dense" not in pools
    assert result.report.metadata["leg_depths"]["lexical"] == {"lexical": 40, "fused": 40}
    # each leg's recall curve comes from the configuration that ran it
    assert {"lexical leg", "dense leg"} <= set(result.curves)


def test_the_dense_preset_never_returns_what_only_the_lexical_leg_found(
        sample_db: str, embedder: Any) -> None:
    from pgfunnel.eval.harness import DENSE_ONLY

    kw = JudgedQuery("kw", "refund annual plan", "keyword",
                     {"refunds-annual": 1, "refunds-enterprise": 1, "refunds-trial": 1})
    # a dense leg shorter than the pool (two chunks for a pool of 40): the lexical leg
    # finds every refund article, and none of those the dense leg missed may fill the list
    shallow = EvalConfig.from_dict("dense", {**DENSE_ONLY, "dense_depth": 2})
    both = EvalConfig.from_dict("both", {"fusion": "rrf", "dense_depth": 2})
    result = Harness(sample_db, "default", embedder=embedder).run([kw], [shallow, both])
    dense = result.runs["dense"]["kw"]
    lexical_only = set(result.runs["both"]["kw"].stages["lexical"]) - set(dense.stages["dense"])
    assert lexical_only and not lexical_only & set(dense.final)
    assert dense.final and set(dense.final) <= set(dense.stages["dense"])
    assert len(dense.final) <= 2
    assert "lexical" not in dense.stages
    pools = result.report.configs["dense"].pool_recall
    assert "dense" in pools and "lexical" not in pools
    # the single-leg configuration records which leg it ran; a two-leg one is unchanged
    configs = result.report.metadata["configs"]
    assert configs["dense"]["legs"] == "dense" and "legs" not in configs["both"]


def test_a_leg_of_weight_zero_has_no_pool_recall(sample_db: str) -> None:
    """A leg given weight 0 is not run: nothing of it reaches the pool. The report gave it
    a pool recall all the same (1.000 on the help center's identifier queries), as if it
    had held every relevant item."""
    queries = [q for q in _subset(2) if q.slice in ("identifier", "paraphrase")]
    configs = [EvalConfig.from_dict("lex", {"weights": [1, 0]}),
               EvalConfig.from_dict("dense", {"weights": [0, 1]})]
    result = Harness(sample_db, "default").run(queries, configs)
    pools = {name: set(c.pool_recall) for name, c in result.report.configs.items()}
    assert pools == {"lex": {"lexical", "fused", "capped"}, "dense": {"dense", "fused", "capped"}}
    assert set(result.runs["lex"][queries[0].query_id].stages) == {"lexical", "fused", "capped"}
    assert result.report.metadata["leg_depths"]["lex"] == {"lexical": 40, "fused": 40}
    # each leg's curve comes from the configuration that gives it weight
    assert {"lexical leg", "dense leg"} <= set(result.curves)


def test_the_report_says_a_one_leg_configuration_fused_nothing(sample_db: str) -> None:
    """The lexical and dense presets search one leg and fuse nothing; the report's metadata
    said `fusion: rrf` and `weights: [1, 0]`, as if an RRF fusion had run."""
    from pgfunnel.eval.report import to_dict, to_markdown

    queries = [q for q in _subset(1) if q.slice == "identifier"]
    configs = [*preset_configs("all-fusions"),
               EvalConfig.from_dict("zero", {"weights": [1, 0], "fusion": "zscore"})]
    result = Harness(sample_db, "default").run(queries, configs)
    meta = to_dict(result.report)["metadata"]["configs"]
    for name, leg in (("lexical", "lexical"), ("dense", "dense"), ("zero", "lexical")):
        assert meta[name]["fusion"] == f"none (one leg: {leg})", meta[name]
        assert "weights" not in meta[name] and "rrf_k" not in meta[name]
    # a configuration of two legs says what it was given, as before
    assert meta["rrf"]["fusion"] == "rrf" and "fusion" not in meta["default"]
    assert meta["lexical"]["legs"] == "lexical"
    # the hash is the configuration's as given: the one earlier reports recorded
    assert meta["lexical"]["hash"] == configs[1].config_hash()
    line = next(x for x in to_markdown(result.report).splitlines()
                if x.startswith("- configs: "))
    assert "'lexical': {'hash': " in line and "'fusion': 'none (one leg: lexical)'" in line
    assert "'weights': [1, 0]" not in line and "'weights': [0, 1]" not in line


def test_leg_depths_are_the_searchs_own(sample_db: str) -> None:
    """The harness read each leg at max(k x overfetch, 40), where the search caps that
    default at 10,000: k = 1000 with an overfetch of 11 (a search that runs) was refused
    as a lexical_depth of 11,000, a parameter the configuration never set. And a leg
    deeper than the search allows was refused as "legs deeper than 100,000 together",
    naming lexical_depth whichever leg it was."""
    q = JudgedQuery("q", "what does ERR-5245 mean", "identifier", {"err-5245": 1})
    result = Harness(sample_db, "default", k=1000).run(
        [q], [EvalConfig.from_dict("wide", {"overfetch": 11})])
    assert result.report.metadata["leg_depths"]["wide"] == {
        "lexical": 10_000, "dense": 10_000, "fused": 11_000}
    assert result.report.configs["wide"].per_query["q"]["recall@1000"] == 1.0
    with pytest.raises(ConfigError, match="x: dense_depth: must be between 1 and 10000, "
                                          "got 99999"):
        EvalConfig.from_dict("x", {"dense_depth": 99_999})


def test_seconds_per_query_charge_each_configuration_its_own_search(
        sample_db: str, embedder: Any) -> None:
    """The work a run shares (a query's embedding, each leg at its full depth for the
    stage pools) went to the first configuration that met it: on Werkzeug's docs the
    report gave the default 0.055 s a query and RRF, the same search, 0.0075 s."""
    import copy
    import time

    delay = 0.2
    slow = copy.copy(embedder)
    calls: list[int] = []

    # the run embeds its queries in batches, ahead of the searches: a text costs delay
    def embed(texts: Any, progress: Any = None) -> Any:
        calls.append(len(texts))
        time.sleep(delay * len(texts))
        return embedder.embed(texts, progress)

    slow.embed = embed
    configs = [EvalConfig.from_dict("lex", {"legs": "lexical"}),
               EvalConfig.from_dict("a", {}), EvalConfig.from_dict("b", {})]
    result = Harness(sample_db, "default", embedder=slow).run(_subset(1), configs)
    seconds = result.report.metadata["mean_seconds_per_query"]
    # both two-leg configurations search with the query's vector: each pays its
    # embedding once, whichever came first; the lexical leg alone needs none
    assert seconds["a"] >= delay and seconds["b"] >= delay, seconds
    assert abs(seconds["a"] - seconds["b"]) < delay / 2, seconds
    assert seconds["lex"] < delay, seconds
    assert len(calls) == 1, calls  # one batch, ahead of the searches


def test_queries_are_embedded_in_one_batch_ahead_with_the_vectors_of_one_at_a_time(
        sample_db: str, embedder: Any) -> None:
    """One embedding call per query was most of an eval's time (5.4x the batched time
    for the help center's 97 queries); the batch must search with the same vectors."""
    import copy

    import numpy as np

    queries = _subset(2)
    batches: list[list[str]] = []
    counting = copy.copy(embedder)

    def embed(texts: Any, progress: Any = None) -> Any:
        batches.append(list(texts))
        return embedder.embed(texts, progress)

    counting.embed = embed
    configs = [EvalConfig.from_dict("default", {}),
               EvalConfig.from_dict("resolved", {"followup": True, "decompose": True})]
    ticks: list[tuple[str, int, int]] = []
    harness = Harness(sample_db, "default", embedder=counting,
                      progress=lambda *tick: ticks.append(tick))
    result = harness.run(queries, configs)
    # every text the two configurations search with, each once, in one call
    assert len(batches) == 1, batches
    # and the embedding is shown as progress before the searches are
    assert ticks[0][0] == "queries (embedding)"
    assert ("queries (embedding)", len(batches[0]), len(batches[0])) in ticks
    assert ticks[-1] == ("resolved", 2 * len(queries), 2 * len(queries))
    searched = {part for by_q in result.runs.values() for r in by_q.values()
                for part in (r.parts or [r.text])}
    assert set(batches[0]) == searched and len(batches[0]) == len(searched)
    for text in searched:
        alone = embedder.embed_query(text)
        vector = harness._vectors[text]
        assert vector is not None and np.allclose(vector, alone, atol=1e-5), text


def test_stage_recall_in_database_matches_harness(sample_db: str) -> None:
    from pgfunnel.db import connect
    from pgfunnel.eval.harness import stage_recall_in_db, store_qrels

    # stand-alone queries only: the database matches a judged query to the traced search
    # with the same text, and a resolved follow-up is searched with other text
    queries = [q for q in _subset(3) if not q.history and q.slice in ("identifier",
                                                                       "paraphrase")]
    with connect(sample_db, autocommit=True) as conn:
        assert store_qrels(conn, "default", queries) == sum(len(q.relevant) for q in queries)
        result = Harness(conn, "default", k=5, trace=True).run(
            queries, [EvalConfig.from_dict("default", {"overfetch": 2})])
        in_db = stage_recall_in_db(conn, "default")
    pools = result.report.configs["default"].pool_recall
    assert in_db["all"]["n_queries"] == len(queries)
    for slice_name in ("identifier", "paraphrase", "all"):
        assert in_db[slice_name]["fused"] == pytest.approx(pools["fused"][slice_name])
        assert in_db[slice_name]["capped"] == pytest.approx(pools["capped"][slice_name])


def test_stage_recall_in_database_reads_the_configuration_asked_for(sample_db: str) -> None:
    """After a traced run of several configurations each judged query's latest search is
    the last configuration's: the baseline's stage recall could not be read at all."""
    from pgfunnel.db import connect
    from pgfunnel.errors import NotFoundError
    from pgfunnel.eval.harness import stage_recall_in_db, store_qrels

    queries = [q for q in _subset(4) if not q.history and q.slice == "paraphrase"]
    configs = [EvalConfig.from_dict("narrow", {"overfetch": 1, "legs": "lexical"}),
               EvalConfig.from_dict("dense", {"legs": "dense"}),
               EvalConfig.from_dict("wide", {})]
    with connect(sample_db, autocommit=True) as conn:
        store_qrels(conn, "default", queries)
        result = Harness(conn, "default", k=1, trace=True).run(queries, configs)
        in_db = {c.name: stage_recall_in_db(conn, "default", config=c.name) for c in configs}
        latest = stage_recall_in_db(conn, "default")
    pools = {name: c.pool_recall for name, c in result.report.configs.items()}
    assert pools["narrow"]["fused"]["all"] < pools["wide"]["fused"]["all"]  # they differ
    for name in ("narrow", "wide"):
        assert in_db[name]["all"]["n_queries"] == len(queries)
        for stage in ("fused", "capped"):
            assert in_db[name]["all"][stage] == pytest.approx(pools[name][stage]["all"]), name
    assert latest == in_db["wide"]  # without a name: each query's latest, the last run's
    # a leg the configuration did not run has no recall, as in the report, never 0.0
    assert "dense" not in pools["narrow"] and in_db["narrow"]["all"]["dense"] is None
    assert "lexical" not in pools["dense"] and in_db["dense"]["all"]["lexical"] is None
    assert in_db["wide"]["all"]["lexical"] is not None
    assert in_db["wide"]["all"]["dense"] is not None
    # a name eval never traced read as {}, as if nothing had been searched; the error
    # names the argument that named nothing, as a collection or version that does not
    # exist does
    with connect(sample_db, autocommit=True) as conn, pytest.raises(NotFoundError) as exc:
        stage_recall_in_db(conn, "default", config="default")
    assert exc.value.parameter == "config", exc.value
    assert exc.value.detail == ("no traced search of configuration 'default' in collection "
                                "'default'; eval traced 'dense', 'narrow', 'wide' there")
    assert str(exc.value) == f"config: {exc.value.detail}"


def test_stored_judgments_use_the_citekey_a_file_name_was_matched_to(sample_db: str) -> None:
    # `refunds-annual.md` was stored as written: the run matched it to `refunds-annual`
    # and reported 1.0 at every stage, the database 0.0
    import dataclasses

    from pgfunnel.db import connect
    from pgfunnel.eval.harness import stage_recall_in_db, store_qrels

    [q] = [q for q in _subset(3) if q.slice == "identifier"][:1]
    item = next(iter(q.relevant))
    as_file = dataclasses.replace(q, relevant={f"{item}.md": 1})
    with connect(sample_db, autocommit=True) as conn:
        result = Harness(conn, "default", k=5, trace=True).run(
            [as_file], [EvalConfig.from_dict("default", {})])
        respelled = result.report.metadata["judged_items_respelled"]
        assert respelled == {f"{item}.md": item}
        store_qrels(conn, "default", [as_file], respelled=respelled)
        assert conn.execute("select item from pgfunnel.qrel").fetchall() == [(item,)]
        in_db = stage_recall_in_db(conn, "default")
    pools = result.report.configs["default"].pool_recall
    assert in_db["all"]["fused"] == pytest.approx(pools["fused"]["all"]) == 1.0


def test_stage_recall_in_database_finds_followups_and_decomposed_parts(sample_db: str) -> None:
    """A resolved follow-up is searched with other text than the judged one, and a
    decomposed query with several searches: the database matched neither by text, so those
    queries dropped out of its stage recall without a word."""
    from pgfunnel.db import connect
    from pgfunnel.eval.harness import stage_recall_in_db, store_qrels

    plans = ["annual", "monthly", "enterprise", "trial"]
    queries = [q for q in _subset(2) if q.slice in ("followup", "twopart")]
    assert {q.slice for q in queries} == {"followup", "twopart"}
    cfg = EvalConfig.from_dict("t", {"decompose": True, "qualifiers": plans, "overfetch": 2})
    with connect(sample_db, autocommit=True) as conn:
        store_qrels(conn, "default", queries)
        result = Harness(conn, "default", k=5, trace=True).run(queries, [cfg])
        in_db = stage_recall_in_db(conn, "default")
    assert any(r.text != q.query for q in queries for r in [result.runs["t"][q.query_id]])
    assert any(r.parts for r in result.runs["t"].values())
    pools = result.report.configs["t"].pool_recall
    assert in_db["all"]["n_queries"] == len(queries)
    for slice_name in ("followup", "twopart", "all"):
        assert in_db[slice_name]["fused"] == pytest.approx(pools["fused"][slice_name])
        assert in_db[slice_name]["capped"] == pytest.approx(pools["capped"][slice_name])


def test_a_decomposed_query_is_scored_on_what_search_decomposed_returns(
        sample_db: str) -> None:
    """The harness merged the parts' document lists to k documents, where the search
    merges their chunks, caps them again and keeps k chunks (7 to 9 documents on these
    questions): a decomposed query was scored on a list no search returns."""
    import warnings

    from pgfunnel.eval.metrics import collapse_to_documents
    from pgfunnel.search import Funnel

    quals = ["monthly", "annual", "trial", "enterprise"]
    queries = [q for q in load_queries(QUERIES) if q.slice == "twopart"][:4]
    cfg = EvalConfig.from_dict("parts", {"decompose": True, "qualifiers": quals})
    result = Harness(sample_db, "default").run(queries, [cfg])
    funnel = Funnel(sample_db)
    for q in queries:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the parts' dropped words, as notices
            searched = funnel.search_decomposed(q.query, qualifiers=quals, k=10)
        run = result.runs["parts"][q.query_id]
        assert len(run.parts) == 2, run.parts
        assert run.final == collapse_to_documents(
            [f"{r.citekey}#{r.ordinal}" for r in searched.results]), q.query_id


def test_a_followup_is_resolved_with_the_collections_qualifiers(sample_db: str) -> None:
    """A search with history resolves a follow-up with the collection's qualifiers
    (collection.settings); eval resolved it without them, and measured another query."""
    import warnings

    from pgfunnel.db import connect
    from pgfunnel.search import Funnel

    with connect(sample_db, autocommit=True) as conn:
        conn.execute("""update pgfunnel.collection set settings = '{"qualifiers": '
                     '["monthly", "annual"]}' where name = 'default'""")
    history = ["how do refunds work on the monthly plan"]
    q = JudgedQuery("f", "and for annual?", "followup", {"refunds-annual": 1},
                    history=tuple(history))
    result = Harness(sample_db, "default").run([q], [EvalConfig.from_dict("d", {})])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the query's dropped words, as notices
        searched = Funnel(sample_db).search(q.query, history=history)
    resolved = next(t["query"] for t in searched.transforms if t["step"] == "followup")
    assert result.runs["d"]["f"].text == resolved == "refunds plan for annual?"
    assert result.report.metadata["configs"]["d"]["qualifiers"] == ["monthly", "annual"]


def test_followup_and_decomposition_change_the_searched_text(sample_db: str) -> None:
    plans = ["annual", "monthly", "enterprise", "trial"]
    queries = [q for q in _subset(1) if q.slice in ("followup", "twopart")]
    cfg = EvalConfig.from_dict("t", {"decompose": True, "qualifiers": plans})
    plain = EvalConfig.from_dict("p", {"followup": False})
    result = Harness(sample_db, "default").run(queries, [cfg, plain])
    follow = next(q for q in queries if q.slice == "followup")
    two = next(q for q in queries if q.slice == "twopart")
    assert result.runs["t"][follow.query_id].text != follow.query  # history carried in
    assert result.runs["p"][follow.query_id].text == follow.query
    assert len(result.runs["t"][two.query_id].parts) == 2


def test_a_history_over_the_followup_limit_is_refused_only_where_it_is_read(
        sample_db: str, tmp_path: Path) -> None:
    """A line whose history was over the follow-up limit was refused when the file was
    read, even for configurations with "followup": false, which never read it."""
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    from pgfunnel.db import connect
    from pgfunnel.versions import read_query_file

    real = next(q for q in _subset(1) if q.relevant_items and not q.history)
    marker = "zqxhistory"
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps({
        "query_id": "long", "query": real.query, "slice": real.slice,
        "relevant": dict(real.relevant), "history": [f"{marker} " * 10_000]}) + "\n",
        encoding="utf-8")
    (q,) = load_queries(path)
    assert q.history_problem == (f"{path}: line 1: field history[0]: is 110,000 characters "
                                 "long; a history holds at most 100,000 in all")
    off = EvalConfig.from_dict("off", {"followup": False, "legs": "lexical"})
    on = EvalConfig.from_dict("on", {"legs": "lexical"})
    with connect(sample_db, autocommit=True) as conn:
        def logged() -> int:
            return int(conn.execute("select count(*) from pgfunnel.search_log"
                                    ).fetchone()[0])  # type: ignore[index]

        before = logged()
        # a configuration that resolves follow-ups reads it: refused, before any search
        with pytest.raises(InvalidInputError, match=r"line 1: field history\[0\]: .*; "
                                                    r"configuration 'on' makes follow-ups"):
            Harness(sample_db, "default", trace=True).run([q], [off, on])
        assert logged() == before
        with pytest.warns(UserWarning) as caught:
            result = Harness(sample_db, "default", trace=True).run([q], [off])
        notes = [str(w.message) for w in caught if "not read" in str(w.message)]
        assert notes == [f"pgfunnel eval: {q.history_problem}; not read: no configuration "
                         "resolves follow-ups (\"followup\": false), so each query was "
                         "searched as written"]
        assert result.unread_history == [q.history_problem]
        assert result.runs["off"]["long"].text == real.query
        assert logged() > before
        # searched and traced, yet no word of the history reached the database
        assert conn.execute(
            "select count(*) from pgfunnel.search_log where "
            "strpos(concat(query_text, config::text, notes::text), %s) > 0",
            (marker,)).fetchone() == (0,)
    off_arg = 'off={"followup": false, "legs": "lexical"}'
    res = CliRunner().invoke(app, ["eval", str(path), "--dsn", sample_db, "--config", off_arg])
    said = " ".join(res.output.split())
    assert res.exit_code == 0, res.output
    assert said.count("not read") == 1 and "note: pgfunnel eval: " in said, said
    res = CliRunner().invoke(app, ["eval", str(path), "--dsn", sample_db,
                                   "--config", off_arg, "--config", 'on={"legs": "lexical"}'])
    said = " ".join(res.output.split())
    assert res.exit_code == 1 and "line 1: field history[0]: is 110,000" in said, said
    assert "Traceback" not in res.output
    # versions compare makes every follow-up stand-alone: refused with the line, as before
    with pytest.raises(InvalidInputError, match=r"q\.jsonl: line 1: field history\[0\]"):
        read_query_file(path)


@pytest.mark.slow
def test_helpcenter_benchmark_meets_its_floors(sample_db: str) -> None:
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    res = CliRunner().invoke(app, ["eval", str(QUERIES), "--dsn", sample_db,
                                   "--floors", str(FLOORS)])
    assert res.exit_code == 0, res.output


def test_a_beir_benchmark_is_ingested_and_evaluated_as_it_comes(db: str, tmp_path: Path) -> None:
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    from pgfunnel.eval.qrels import BEIR_SLICE, load_beir

    corpus = [
        {"_id": "d1", "title": "Refunds", "text": "Annual plans are refunded pro rata."},
        {"_id": "d2", "title": "Invoices", "text": "Invoices are emailed on the first day."},
        {"_id": 3, "title": "VPN", "text": "Connect to the VPN with the desktop client."},
    ]
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in corpus))
    (tmp_path / "queries.jsonl").write_text(
        '{"_id": "q1", "text": "refund for an annual plan", "metadata": {}}\n'
        '{"_id": "q2", "text": "when do invoices arrive", "metadata": {"slice": "billing"}}\n'
        '{"_id": "q3", "text": "not judged in this split"}\n')
    (tmp_path / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t2\n"
                                       "q2\t3\t0\n")
    judged = load_beir(tmp_path / "queries.jsonl", tmp_path / "test.tsv")
    assert [(q.query_id, q.slice, dict(q.relevant)) for q in judged] == [
        ("q1", BEIR_SLICE, {"d1": 1}), ("q2", "billing", {"d2": 2, "3": 0})]

    res = CliRunner().invoke(app, ["ingest", str(tmp_path / "corpus.jsonl"), "-c", "beir",
                                   "--dsn", db])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(app, ["eval", str(tmp_path / "queries.jsonl"), "--qrels",
                                   str(tmp_path / "test.tsv"), "-c", "beir", "--dsn", db,
                                   "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    aggregates = report["configs"]["default"]["aggregates"]
    assert aggregates["all"]["n_queries"] == 2
    assert aggregates["all"]["recall@10"] == 1.0  # three documents, k = 10
    assert report["metadata"]["judged_items_not_in_collection"] == []

    (tmp_path / "bad.tsv").write_text("q9\td1\t1\n")
    with pytest.raises(InvalidInputError, match=r"1 judged query ids are not in"):
        load_beir(tmp_path / "queries.jsonl", tmp_path / "bad.tsv")


@pytest.mark.parametrize(("args", "said"), [
    (["--k", "0"], "--k: must be an integer between 1 and 1000"),
    (["--split", "train"], "--split: must be dev or test"),
    (["--config", 'x={"fusion": "borda"}'], "--config: x: fusion: unknown fusion 'borda'"),
    (["--config", 'x={"weights": [1]}'], "--config: x: weights: must be two numbers"),
])
def test_a_bad_eval_option_is_named_by_its_flag_and_configuration(
        sample_db: str, args: list[str], said: str) -> None:
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    res = CliRunner().invoke(app, ["eval", str(QUERIES), "--dsn", sample_db, *args],
                             env={"COLUMNS": "200"})
    assert res.exit_code == 1, res.output
    assert f"error: {said}" in " ".join(res.output.split()), res.output


def test_a_configurations_bad_value_is_refused_before_the_queries_are_embedded(
        sample_db: str) -> None:
    """`--config bad='{"rrf_k": -1}'` was refused by the first search, after every query
    had been embedded (seconds on a large query set)."""
    queries = [JudgedQuery("q1", "how do I get a refund", "s", {"refunds-annual": 1})]
    configs = [EvalConfig.from_dict("default", {}),
               EvalConfig.from_dict("bad", {"fusion": "rrf", "rrf_k": -1})]
    ticks: list[tuple[str, int, int]] = []
    harness = Harness(sample_db, "default", progress=lambda *tick: ticks.append(tick))
    with pytest.raises(ConfigError) as refused:
        harness.run(queries, configs)
    assert str(refused.value).startswith("config: bad: rrf_k: must be a positive number"), \
        refused.value
    # nothing was embedded or searched: no progress at all, no vector kept
    assert ticks == [] and harness._vectors == {}


def test_an_out_path_that_cannot_be_a_folder_is_refused_before_searching(tmp_path: Path) -> None:
    """It was a FileExistsError traceback, after every search had run; now a one-line error
    before connecting (the DSN here reaches nothing)."""
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    a_file = tmp_path / "report"
    a_file.write_text("kept\n")
    res = CliRunner().invoke(app, ["eval", str(QUERIES), "--dsn", "postgresql://nobody@/x",
                                   "--out", str(a_file)], env={"COLUMNS": "300"})
    assert res.exit_code == 1, res.output
    # it said "cannot write the report in FILE: File exists", of the file it was given
    said = " ".join(res.output.split())
    assert said.startswith(f"error: --out: {a_file} is a file, not a folder: --out names "
                           "the folder the report's files (report.json, "), said
    assert "File exists" not in said and a_file.read_text() == "kept\n"


def test_a_report_file_that_cannot_be_replaced_is_named_before_searching(
        tmp_path: Path) -> None:
    """A folder named report.json (or slices.png ...) in --out was found only after every
    search had run, and the error named the folder: "cannot write the report in out: Is a
    directory"."""
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    (tmp_path / "out" / "slices.png").mkdir(parents=True)
    res = CliRunner().invoke(app, ["eval", str(QUERIES), "--dsn", "postgresql://nobody@/x",
                                   "--out", str(tmp_path / "out")], env={"COLUMNS": "300"})
    assert res.exit_code == 1, res.output
    assert f"error: --out: cannot write the report in {tmp_path / 'out'} (slices.png): Is a " \
           "directory" in " ".join(res.output.split())


def test_pool_recall_curves_reach_the_end_of_the_longest_pool() -> None:
    """A leg of 40 chunks collapses to fewer documents (34 here): the curve stopped at the
    last preset depth below that (20), so a relevant document at rank 25 never showed."""
    from pgfunnel.eval.harness import QueryRun

    pool = [f"d{i}" for i in range(1, 35)]
    runs = {"default": {"q": QueryRun(text="x", final=pool[:10], top_score=None,
                                      stages={"lexical": pool, "capped": pool})}}
    queries = [JudgedQuery("q", "x", "s", {"d25": 1})]
    curves = Harness.__new__(Harness)._curves(runs, queries)
    assert curves["lexical leg"][-1] == (34, 1.0)
    assert curves["default (final order)"][-2:] == [(20, 0.0), (34, 1.0)]


def test_pool_recall_curves_count_depth_in_ranked_chunks_under_document_judging() -> None:
    """Judged per document, the curves' depth counted collapsed documents: three chunks of
    one page then the relevant page's chunk put it at depth 2 (documents), where the top 3
    results (recall@3) did not hold it."""
    from pgfunnel.eval.harness import QueryRun

    chunks = ["a#0", "a#1", "a#2", "b#0", "c#0"]
    docs = ["a", "b", "c"]
    run = QueryRun(text="x", final=["a"], top_score=None,
                   stages={"lexical": docs, "capped": docs},
                   chunk_stages={"lexical": chunks, "capped": chunks})
    queries = [JudgedQuery("q", "x", "s", {"b": 1})]
    curves = Harness.__new__(Harness)._curves({"default": {"q": run}}, queries, "document", 3)
    final = dict(curves["default (final order)"])
    assert final[3] == 0.0 and final[5] == 1.0  # depth k = 3 is a point, and counts chunks
    assert curves["lexical leg"][-1] == (5, 1.0)  # the longest pool in chunks ends the line


def test_each_pool_recall_line_ends_at_its_own_depth() -> None:
    """The leg's line came from the first configuration that ran it and every line went
    on to the longest list of any: beside a configuration reading the leg 6 deep, a 3-deep
    leg's line ran flat at 0 to depth 6, as if the depth had found nothing."""
    from pgfunnel.eval.harness import QueryRun

    shallow = ["a#0", "b#0", "c#0"]
    deep = [*shallow, "d#0", "e#0", "f#0"]
    runs = {"short": {"q": QueryRun(text="x", final=shallow, top_score=None,
                                    stages={}, chunk_stages={"lexical": shallow,
                                                             "capped": shallow})},
            "long": {"q": QueryRun(text="x", final=deep[:3], top_score=None,
                                   stages={}, chunk_stages={"lexical": deep, "capped": deep})}}
    queries = [JudgedQuery("q", "x", "s", {"e#0": 1})]
    curves = Harness.__new__(Harness)._curves(runs, queries, "chunk", 3)
    assert curves["lexical leg"] == [(1, 0.0), (3, 0.0), (5, 1.0), (6, 1.0)]
    assert curves["short (final order)"] == [(1, 0.0), (3, 0.0)]
    assert curves["long (final order)"][-1] == (6, 1.0)


def test_the_final_order_curve_at_depth_k_is_the_tables_recall_at_k(sample_db: str) -> None:
    # two-part questions whose second page is among the first 10 documents, not among the
    # first 10 chunks: counted in documents, the line read 1.0 where recall@10 was 0.5
    k = 10
    queries = [q for q in load_queries(QUERIES)
               if q.query_id in ("twopart-02", "twopart-10", "identifier-01")]
    result = Harness(sample_db, "default", k=k).run(queries, preset_configs("default", "dense"))
    for name, config in result.report.configs.items():
        curve = dict(result.curves[f"{name} (final order)"])
        assert curve[k] == pytest.approx(config.aggregates["all"][f"recall@{k}"]), name


def _ingest_tickets(conn: Any) -> None:
    """Two documents whose citekeys end in `#` and digits, as ticket ids do."""
    from funnel_util import doc, ingest

    ingest(conn, [doc("tickets#42", "The export button times out on large workspaces."),
                  doc("tickets#7", "Refunds for annual plans are prorated.")],
           collection="tickets")


def test_a_citekey_ending_in_hash_and_digits_is_named_when_read_as_a_chunk_key(
        sample_db: str) -> None:
    """`tickets#42` (an issue or ticket id) judged per document reads as chunk 42 of
    `tickets`: the warning called it missing from the collection, which it is not."""
    from pgfunnel.db import connect

    with connect(sample_db, autocommit=True) as conn:
        _ingest_tickets(conn)
    queries = [JudgedQuery("q1", "export times out", "keyword", {"tickets#42": 1}),
               JudgedQuery("q2", "annual refund", "keyword", {"tickets#7": 1})]
    with pytest.warns(UserWarning) as caught:
        result = Harness(sample_db, "tickets").run(queries, preset_configs("lexical"))
    message = " ".join(str(w.message) for w in caught)
    assert result.citekeys_read_as_chunks == ["tickets#42", "tickets#7"]
    assert "2 of them are citekeys of documents in the collection ('tickets#42')" in message
    assert "chunk 42 of 'tickets'" in message and "'tickets#42#<ordinal>'" in message
    # judged per chunk, as the message says, they are found
    chunk_level = [JudgedQuery("q1", "export times out", "keyword", {"tickets#42#0": 1})]
    import warnings
    with warnings.catch_warnings(record=True) as recorded:
        warnings.simplefilter("always")
        found = Harness(sample_db, "tickets").run(chunk_level, preset_configs("lexical"))
    assert not [w for w in recorded if "judged items" in str(w.message)]
    assert found.missing_items == []
    assert found.report.configs["lexical"].per_query["q1"]["recall@10"] == 1.0


def test_stage_recall_in_database_reads_a_chunk_key_as_the_run_does(sample_db: str) -> None:
    """`tickets#42` is chunk 42 of `tickets` (docs/evaluation.md, judging level): the run
    counts it never found; the database matched it to the document `tickets#42` as well
    and reported it found at every stage."""
    from pgfunnel.db import connect
    from pgfunnel.eval.harness import stage_recall_in_db, store_qrels

    with connect(sample_db, autocommit=True) as conn:
        _ingest_tickets(conn)
        queries = [JudgedQuery("q1", "export times out", "keyword", {"tickets#42": 1}),
                   JudgedQuery("q2", "annual refund", "keyword", {"tickets#7#0": 1})]
        store_qrels(conn, "tickets", queries)
        with pytest.warns(UserWarning, match="read as chunk keys"):
            result = Harness(conn, "tickets", k=5, trace=True).run(
                queries, preset_configs("lexical"))
        in_db = stage_recall_in_db(conn, "tickets")
    pools = result.report.configs["lexical"].pool_recall
    assert pools["fused"]["all"] == 0.5  # q2 found, q1 a chunk the collection lacks
    assert in_db["all"]["fused"] == pytest.approx(pools["fused"]["all"])
    assert in_db["all"]["capped"] == pytest.approx(pools["capped"]["all"])


def test_eval_of_no_answer_queries_only_says_there_is_nothing_to_compare(
        sample_db: str, tmp_path: Path) -> None:
    # the comparison line ended at its colon: "b − a (ndcg@10): "
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    rows = [{"query_id": f"na{i}", "query": q, "slice": "noanswer", "relevant": []}
            for i, q in enumerate(["submarine periscope", "volcano lava temperature"])]
    queries = tmp_path / "q.jsonl"
    queries.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    res = CliRunner().invoke(app, ["eval", str(queries), "--dsn", sample_db, "--preset",
                                   "lexical", "--preset", "default"])
    assert res.exit_code == 0, res.output
    assert "nothing to compare: no query has a relevant item" in res.output
    assert not any(line.rstrip().endswith("):") for line in res.output.splitlines())


def test_store_qrels_with_a_split_stores_the_queries_that_split_evaluated(
        sample_db: str, tmp_path: Path) -> None:
    # `--split dev --store-qrels` stored every judged query of the file, the test split's
    # too, so the stage recall read in the database covered queries the run never searched
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    from pgfunnel.db import connect

    picked = [q for q in _subset(1) if q.relevant_items][:4]
    rows: list[dict[str, Any]] = [
        {"query_id": q.query_id, "query": q.query, "slice": q.slice,
         "relevant": dict(q.relevant), "history": list(q.history),
         "split": "dev" if i % 2 == 0 else "test"} for i, q in enumerate(picked)]
    queries = tmp_path / "q.jsonl"
    queries.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    dev = sorted(r["query_id"] for r in rows if r["split"] == "dev")
    res = CliRunner().invoke(app, ["eval", str(queries), "--dsn", sample_db, "--split", "dev",
                                   "--store-qrels", "--trace"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    with connect(sample_db, autocommit=True) as conn:
        stored = [r[0] for r in conn.execute(
            "select distinct query_id from pgfunnel.qrel order by 1")]
    assert stored == dev
    n = sum(len(r["relevant"]) for r in rows if r["split"] == "dev")
    assert f"stored {n} judgments of {len(dev)} queries (the dev split) in pgfunnel.qrel" \
        in " ".join(res.output.split())


def test_a_collection_that_does_not_exist_is_told_with_the_ones_that_do(
        sample_db: str) -> None:
    # `pgfunnel demo` makes collection 'demo': `eval -c handbook` said only "does not exist
    # or has no active index version", where a search names the collections there are
    from pgfunnel.db import connect
    from pgfunnel.errors import NotFoundError
    from pgfunnel.eval.harness import stage_recall_in_db, store_qrels

    queries = _subset(1)[:1]
    said = r"collection 'handbook' does not exist; this database has 'default'"
    with pytest.raises(NotFoundError, match=said):
        Harness(sample_db, "handbook").run(queries, preset_configs("lexical"))
    with connect(sample_db, autocommit=True) as conn:
        with pytest.raises(NotFoundError, match=said):
            store_qrels(conn, "handbook", queries)
        with pytest.raises(NotFoundError, match=said):
            stage_recall_in_db(conn, "handbook")
        conn.execute("update pgfunnel.index_version set state = 'retired'")
    with pytest.raises(NotFoundError, match=r"collection 'default' has no active index "
                                            r"version \(pgfunnel versions list -c default"):
        Harness(sample_db, "default").run(queries, preset_configs("lexical"))


def test_the_docs_name_every_file_eval_out_writes() -> None:
    # docs/evaluation.md said "PNG (plot_slices)" and docs/cli.md "PNG plots": a user who
    # ran --out found slices.png and pool_recall.png named nowhere in the docs
    from pgfunnel.cli.evaluate import OUT_FILES

    docs = Path(__file__).resolve().parents[1] / "docs"
    evaluation = (docs / "evaluation.md").read_text(encoding="utf-8")
    section = evaluation.split("## Files a run writes", 1)[1].split("\n## ", 1)[0]
    cli_eval = (docs / "cli.md").read_text(encoding="utf-8").split(
        "### `pgfunnel eval", 1)[1].split("\n## ", 1)[0]
    for name in OUT_FILES:
        assert f"`{name}`" in section, name
        assert name in cli_eval, name


def test_a_traced_eval_logs_the_weights_its_pool_used(sample_db: str) -> None:
    """An eval's traced search logged its configuration's weights as given: null where
    the search chose them, while funnel_search's log held the pair it chose."""
    from pgfunnel import defaults
    from pgfunnel.db import connect

    q = next(q for q in _subset(1) if q.relevant_items and not q.history)
    chosen = EvalConfig.from_dict("chosen", {})
    given = EvalConfig.from_dict("given", {"weights": [1, 0.5]})
    with connect(sample_db, autocommit=True) as conn:
        start = conn.execute("select coalesce(max(id), 0) from pgfunnel.search_log"
                             ).fetchone()[0]  # type: ignore[index]
        Harness(sample_db, "default", trace=True).run([q], [chosen, given])
        rows = conn.execute("select config -> 'weights', notes -> 'weights_given' "
                            "from pgfunnel.search_log where id > %s order by id",
                            (start,)).fetchall()
        # and the depth each leg read, as funnel_search logs it (explain --search-id)
        depths = conn.execute("select notes ? 'dense_depth_used', notes -> 'lexical_depth_used' "
                              "from pgfunnel.search_log where id > %s order by id",
                              (start,)).fetchall()
    pairs = [list(w) for w in defaults.AUTOMATIC_WEIGHTS.values()]
    assert rows and all(w in pairs for w, g in rows if g is False), rows
    assert [1, 0.5] in [w for w, g in rows if g is True], rows
    assert all(w is not None for w, _ in rows), rows
    assert all(dense is True and lexical >= 40 for dense, lexical in depths), depths
