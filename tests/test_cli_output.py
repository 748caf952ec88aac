"""How the CLI lays out results: a table never runs past the console, whatever it holds."""
from __future__ import annotations

import json
import re
import shlex
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psycopg
import psycopg.sql
import pytest
from funnel_util import one_row
from pgfunnel.cli.main import _results_table
from rich.console import Console
from typer.testing import CliRunner


def _result(rank: int, citekey: str) -> SimpleNamespace:
    return SimpleNamespace(final_rank=rank, citekey=citekey, lexical_rank=rank, dense_rank=None,
                           fused_rank=rank, rerank_rank=rank,
                           text="a long chunk text that cannot fit on one line " * 5)


@pytest.mark.parametrize("width", [80, 100, 200])
@pytest.mark.parametrize("show_rerank", [False, True])
@pytest.mark.parametrize("citekey", ["short", "library/some-rather-long/path-of-a-page"])
def test_results_table_fits_the_console(width: int, show_rerank: bool, citekey: str) -> None:
    console = Console(width=width, file=None, record=True, force_terminal=False)
    with console.capture() as captured:
        console.print(_results_table("q", [_result(1, citekey), _result(12, "b")],
                                     show_rerank=show_rerank, width=width))
    lines = [line for line in captured.get().splitlines()[1:] if line.strip()]
    assert lines
    for line in lines:
        # the right border is there: nothing was cropped
        assert len(line.rstrip()) <= width and line.rstrip()[-1] in "┓┃┩│┘", line
    assert "a long chunk" in captured.get()


@pytest.mark.parametrize(("width", "whole"), [(80, False), (100, True), (120, True)])
def test_results_table_shows_the_citekey_whole_where_the_console_has_room(
        width: int, whole: bool) -> None:
    """A 120-column terminal cut `guide-payments-and-plans` to `guide-payments-and-pl…`
    (22 columns) beside 60 columns of text, while the demo's capped line asks for the
    citekey to pass to `pgfunnel explain`. At 80 columns the text keeps its room."""
    citekey = "guide-payments-and-plans"
    console = Console(width=width, file=None, record=True, force_terminal=False)
    with console.capture() as captured:
        console.print(_results_table("q", [_result(1, citekey)], width=width))
    table = captured.get()
    assert (f" {citekey} " in table) is whole, table
    if not whole:
        assert " guide-payments-and-pl… " in table, table
    # the text column keeps at least 40 columns of text where the console has them
    row = next(line for line in table.splitlines() if "a long chunk" in line)
    if width == 100:
        # a citekey longer than the room is cut to what leaves the text 40 (docs/cli.md,
        # demo: "25 at 100"), not to 22
        console = Console(width=width, file=None, record=True, force_terminal=False)
        with console.capture() as captured:
            console.print(_results_table("q", [_result(1, "library/some-rather-long/path")],
                                         width=width))
        assert " library/some-rather-long… " in captured.get(), captured.get()
    text_cell = row.rstrip().rstrip("│").rsplit("│", 1)[-1]
    assert len(text_cell.strip()) >= (40 if width >= 100 else 20), row


def test_version_flag() -> None:
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    import pgfunnel

    res = CliRunner().invoke(app, ["--version"])
    assert res.exit_code == 0 and res.output.strip() == f"pgfunnel {pgfunnel.__version__}"


@pytest.mark.parametrize("command", ["search", "explain", "embed"])
def test_a_flag_given_as_query_text_gets_a_hint(command: str) -> None:
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    res = CliRunner().invoke(app, [command, "--line-length"])
    assert res.exit_code == 2
    text = " ".join(res.output.replace("│", " ").split())
    assert "No such option: --line-length" in text
    assert f"put -- before it: pgfunnel {command} -- --line-length" in text
    # what the command does with the text: embed does not search for it
    verb = "embed" if command == "embed" else "search for"
    assert f"to {verb} text that starts with '-'" in text, text
    # the rest of the command is kept, before the --
    res = CliRunner().invoke(app, [command, "--line-length", "-c", "demo"])
    text = " ".join(res.output.replace("│", " ").split())
    assert f"put -- before it: pgfunnel {command} -c demo -- --line-length" in text, text
    if command == "explain":
        return  # its second argument (the chunk) takes a word after the query
    # options typed after the -- are query words: say to move them
    res = CliRunner().invoke(app, [command, "--", "--line-length", "-c", "demo"])
    text = " ".join(res.output.replace("│", " ").split())
    assert res.exit_code == 2
    assert (f"everything after -- is query text, so options go before it: "
            f"pgfunnel {command} -c demo -- --line-length") in text, text
    # a misspelt option of the command keeps click's suggestion and gets no hint
    res = CliRunner().invoke(app, [command, "--colection", "x", "q"])
    text = " ".join(res.output.replace("│", " ").split())
    assert res.exit_code == 2 and "--collection" in text and "put --" not in text


def test_query_text_after_double_dash_is_searched(sample_db: str) -> None:
    import json

    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    res = CliRunner().invoke(app, ["search", "--dsn", sample_db, "--lexical-only", "--json",
                                   "--k", "3", "--", "--refund-policy"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output[res.output.index("{"):])["results"]
    assert rows and all(r["lexical_rank"] is not None for r in rows)


def test_search_language_keeps_the_documents_of_that_language(db: str) -> None:
    # a collection of French and German pages: the CLI searched it whole, having no
    # --language (funnel_search and Funnel.search took one)
    from funnel_util import doc, ingest
    from pgfunnel.cli.main import app

    from pgfunnel.db import connect

    with connect(db, autocommit=True) as conn:
        ingest(conn, [doc("fr/apropos", "apropos cherche dans les pages de manuel",
                          language="fr"),
                      doc("de/apropos", "apropos durchsucht die Handbuchseiten",
                          language="de")], collection="man")

    def citekeys(*args: str) -> list[str]:
        res = CliRunner().invoke(app, ["search", "apropos", "-c", "man", "--lexical-only",
                                       "--json", "--dsn", db, *args])
        assert res.exit_code == 0, res.output
        return [r["citekey"] for r in json.loads(res.output[res.output.index("{"):])["results"]]

    assert sorted(citekeys()) == ["de/apropos", "fr/apropos"]
    assert citekeys("--language", "de") == ["de/apropos"]
    assert citekeys("--language", "fr") == ["fr/apropos"]
    assert citekeys("--language", "DE") == []
    res = CliRunner().invoke(app, ["search", "apropos", "-c", "man", "--language", " de",
                                   "--dsn", db], env={"COLUMNS": "200"})
    assert res.exit_code == 1, res.output
    assert "error: --language: must not begin or end with whitespace" in res.output


@pytest.mark.parametrize("flag", ["--lexical-weight", "--dense-weight"])
def test_a_negative_weight_is_a_usage_error_naming_the_flag(flag: str) -> None:
    # it reached the library and came back as "weights: ... got {-1,0.7}"
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    res = CliRunner().invoke(app, ["search", "refund", flag, "-1", "--dsn", "bogus"],
                             env={"COLUMNS": "200"})
    assert res.exit_code == 2, res.output
    assert flag in res.output and "weights:" not in res.output


@pytest.mark.parametrize(("command", "args", "said"), [
    ("search", ["--per-source-cap", "0"], "--per-source-cap: must be at least 1"),
    ("search", ["--timeout-ms", "0"], "--timeout-ms: must be a positive number"),
    ("search", ["-k", "0"], "--k: must be between 1 and 1000"),
    ("search", ["--fusion", "rrf", "--rrf-k", "0"], "--rrf-k: must be a positive number"),
    ("search", ["-p", ""], "--principal: must not contain an empty string"),
    ("search", ["--lexical-weight", "0", "--dense-weight", "0"],
     "--lexical-weight / --dense-weight: must be two numbers"),
    ("explain", ["--overfetch", "0"], "--overfetch: must be between 1 and 100"),
    ("search", ["--lexical-depth", "0"], "--lexical-depth: must be between 1 and 10000"),
    ("explain", ["--dense-depth", "20000"], "--dense-depth: must be between 1 and 10000"),
    ("search", ["--tenant", ""], "--tenant: must be a non-empty string or left out, got ''"),
    # "collection '' does not exist (run `pgfunnel ingest` into it first)", which ingest
    # then refused as a name
    ("search", ["-c", ""], "--collection: must be a non-empty name, got ''"),
    ("explain", ["-c", " "], "--collection: must be a non-empty name, got ' '"),
    ("embed", ["-c", ""], "--collection: must be a non-empty name, got ''"),
])
def test_a_bad_search_option_is_named_by_its_flag(sample_db: str, command: str,
                                                  args: list[str], said: str) -> None:
    # the library checks the values and names its parameters (per_source_cap); the CLI
    # names the flag the user typed instead
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    target = ["refund", "refunds-annual#0"] if command == "explain" else ["refund"]
    # lexical only spares loading the model; a dense leg's option is refused with it
    # (below), and checked before the model loads without it
    legs = [] if {"--dense-weight", "--dense-depth"} & set(args) or command == "embed" \
        else ["--lexical-only"]
    res = CliRunner().invoke(app, [command, *target, *legs, *args,
                                   "--dsn", sample_db], env={"COLUMNS": "200"})
    assert res.exit_code == 1, res.output
    assert f"error: {said}" in res.output, res.output


@pytest.mark.parametrize("command", ["search", "explain"])
def test_an_overlong_query_is_named_as_the_argument_typed(sample_db: str, command: str) -> None:
    # the library's length check names its parameter, query_text, which the command line
    # has no such name for: it said "error: query_text: is 21,000 characters long"
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    query = "refund " * 3_000
    target = [query, "refunds-annual#0"] if command == "explain" else [query]
    res = CliRunner().invoke(app, [command, *target, "--lexical-only", "--dsn", sample_db],
                             env={"COLUMNS": "200"})
    assert res.exit_code == 1, res.output
    assert res.output.startswith(f"error: QUERY: is {len(query):,} characters long; a search "
                                 "takes at most 10,000"), res.output
    assert "query_text" not in res.output


@pytest.mark.parametrize(("command", "args"), [
    ("search", ["--dense-weight", "1"]), ("search", ["--dense-depth", "50"]),
    ("explain", ["--dense-depth", "50"]),
])
def test_a_dense_leg_option_with_lexical_only_is_refused(command: str, args: list[str]) -> None:
    # the dense leg does not run: the option was dropped without a word
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    target = ["refund", "refunds-annual#0"] if command == "explain" else ["refund"]
    res = CliRunner().invoke(app, [command, *target, "--lexical-only", *args, "--dsn", "bogus"],
                             env={"COLUMNS": "200"})
    assert res.exit_code == 1, res.output
    assert (f"error: {args[0]}: applies only to the dense leg, which --lexical-only turns off"
            in res.output), res.output


@pytest.mark.parametrize(("value", "said"), [("nan", "not NaN"), ("-1", "got -1"),
                                             ("2e6", "got 2e6"), ("x", "'x' is not a number"),
                                             # passed here, then failed in the search with
                                             # exit 1 and another range
                                             ("1e-9", "0 or a number from 1e-6 to 1e6, got 1e-9")])
def test_a_weight_out_of_range_says_what_is_wrong(value: str, said: str) -> None:
    # NaN failed the range check as "must be at most 1000000"
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    res = CliRunner().invoke(app, ["search", "refund", "--lexical-weight", value, "--dsn",
                                   "bogus"], env={"COLUMNS": "200"})
    assert res.exit_code == 2, res.output
    text = " ".join(res.output.replace("│", " ").split())
    assert "--lexical-weight" in text and said in text, text


@pytest.mark.parametrize(("args", "said"), [
    (["ingest", "x.md", "--chunk-words", "3"],
     "Invalid value for '--chunk-words': must be at least 20, got 3"),
    (["demo", "--k", "0"], "Invalid value for '--k' / '-k': must be between 1 and 1000, got 0"),
    (["demo", "-k", "1001"],
     "Invalid value for '--k' / '-k': must be between 1 and 1000, got 1001"),
    (["versions", "compare", "1", "2", "--last", "5", "--show", "-1"],
     "Invalid value for '--show': must be at least 0, got -1"),
])
def test_an_option_out_of_its_declared_range_names_the_value_typed(
        args: list[str], said: str) -> None:
    # typer's min=/max= said "Input should be greater than or equal to 20": neither the
    # value typed nor this CLI's words for a range ("must be ..., got X")
    from pgfunnel.cli.main import app

    res = CliRunner().invoke(app, [*args, "--dsn", "bogus"], env={"COLUMNS": "200"})
    assert res.exit_code == 2, res.output
    text = " ".join(res.output.replace("│", " ").split())
    assert said in text, text


def test_no_option_declares_its_range_to_typer() -> None:
    # the bounds are said by cli.common.in_range, one wording for every option
    import re

    for path in (Path(__file__).resolve().parent.parent / "cli").glob("*.py"):
        text = path.read_text()
        assert not re.search(r"typer\.(Option|Argument)\([^)]*\b(min|max)=", text), (
            f"{path.name} declares a range to typer")


def test_a_zero_lexical_weight_with_lexical_only_names_the_flags() -> None:
    # the search's own error named SQL's arguments: "{0,0.7} gives weight 0 to the lexical
    # leg, the only one this search can run (query_embedding is NULL)"
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    for command, target in (("search", ["refund"]), ("explain", ["refund", "refunds-annual"])):
        res = CliRunner().invoke(app, [command, *target, "--lexical-weight", "0",
                                       "--lexical-only", "--dsn", "bogus"],
                                 env={"COLUMNS": "200"})
        assert res.exit_code == 1, res.output
        assert ("error: --lexical-weight: is 0, which turns off the lexical leg, the only one "
                "--lexical-only leaves") in res.output, res.output


def test_explain_follows_the_weights_and_rrf_k_search_was_given(sample_db: str,
                                                                embedder: Any) -> None:
    # `pgfunnel explain` had no --lexical-weight, --dense-weight or --rrf-k: a search run
    # with them could not be explained as it ranked
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    from pgfunnel.explain import explain
    from pgfunnel.search import Funnel

    # a chunk the two legs rank apart, so that each setting moves its fused rank
    query, target = "storage quota on the trial plan", "discounts-trial"
    cases: list[tuple[list[str], dict[str, Any], dict[str, Any]]] = [
        (["--lexical-weight", "0.01"], {"weights": (0.01, 0.7)}, {}),
        (["--dense-weight", "3"], {"weights": (1.0, 3.0)}, {}),
        (["--fusion", "rrf", "--rrf-k", "1"], {"fusion": "rrf", "rrf_k": 1.0},
         {"fusion": "rrf"})]
    for flags, params, unlike in cases:
        res = CliRunner().invoke(app, ["explain", query, target, *flags, "--json",
                                       "--dsn", sample_db], env={"COLUMNS": "200"})
        assert res.exit_code == 0, res.output
        [said] = json.loads(res.output[res.output.index("["):])
        with Funnel(sample_db, "default", embedder=embedder) as funnel:
            expected = explain(funnel, query, target, **params)
            without = explain(funnel, query, target, **unlike)
        assert expected.fused_rank != without.fused_rank, flags  # the flag matters here
        assert (said["fused_rank"], said["final_rank"], said["verdict"]) == (
            expected.fused_rank, expected.final_rank, expected.verdict), flags


def test_an_unknown_option_hint_is_a_command_that_runs(sample_db: str) -> None:
    # it kept the words before the option and put the option alone after --, which
    # failed again with "unexpected extra argument" and the same advice
    import json
    import shlex

    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    res = CliRunner().invoke(app, ["search", "refund", "-c", "default", "--bogus", "1",
                                   "--dsn", sample_db], env={"COLUMNS": "400"})
    assert res.exit_code == 2
    [line] = [x for x in res.output.splitlines() if "put -- before it" in x]
    hint = line.replace("│", " ").split("put -- before it: pgfunnel ")[1].strip()
    argv = shlex.split(hint)
    assert argv[-2:] == ["--", "refund --bogus 1"], argv
    rerun = CliRunner().invoke(app, [*argv[:-2], "--lexical-only", "--json", *argv[-2:]])
    assert rerun.exit_code == 0, rerun.output
    assert json.loads(rerun.output[rerun.output.index("{"):])["query"] == "refund --bogus 1"


def test_the_leg_depths_explain_advises_are_options(sample_db: str) -> None:
    import json

    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    res = CliRunner().invoke(app, ["search", "refund monthly plan", "--lexical-only", "--json",
                                   "--lexical-depth", "3", "-k", "10", "--dsn", sample_db])
    assert res.exit_code == 0, res.output
    ranks = [r["lexical_rank"] for r in json.loads(res.stdout)["results"]]
    assert ranks and max(ranks) <= 3
    res = CliRunner().invoke(app, ["explain", "refund monthly plan", "refunds-annual#0",
                                   "--lexical-only", "--lexical-depth", "1", "--json",
                                   "--dsn", sample_db])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)[0]["lexical_depth"] == 1


def test_explain_advises_the_depth_and_pool_options_by_their_flags(sample_db: str) -> None:
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    # a chunk the lexical leg holds below depth 1
    res = CliRunner().invoke(app, ["explain", "refund monthly plan", "refunds-annual#0",
                                   "--lexical-only", "--lexical-depth", "1", "--dsn", sample_db],
                             env={"COLUMNS": "300"})
    assert res.exit_code == 0, res.output
    said = " ".join(res.output.split())
    assert "in no leg at its depth" in said, said
    assert "raise --lexical-depth" in said and "lexical_depth" not in said, said
    # and the pool's: --overfetch, or -k once --overfetch is at its most (100)
    res = CliRunner().invoke(app, ["explain", "refund monthly plan", "refunds-annual#0",
                                   "--lexical-only", "-k", "1", "--overfetch", "1",
                                   "--dsn", sample_db], env={"COLUMNS": "300"})
    said = " ".join(res.output.split())
    assert res.exit_code == 0 and "not in pool" in said, said
    assert said.endswith("(k 1 x overfetch 1); raise --overfetch"), said
    res = CliRunner().invoke(app, ["explain", "refund monthly plan", "cancellations-enterprise#1",
                                   "--lexical-only", "--lexical-depth", "200", "-k", "1",
                                   "--overfetch", "100", "--dsn", sample_db],
                             env={"COLUMNS": "300"})
    said = " ".join(res.output.split())
    assert res.exit_code == 0 and "not in pool" in said, said
    assert said.endswith("(k 1 x overfetch 100); overfetch is at its most (100), so raise -k"), \
        said


@pytest.mark.parametrize(("args", "flag"), [
    (["--rerank-model", "/some/cross-encoder"], "--rerank-model"),
    (["--rerank-depth", "5"], "--rerank-depth"),
])
def test_rerank_options_without_rerank_are_an_error(args: list[str], flag: str) -> None:
    # they were ignored: the results were never reranked and nothing said so
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    for command in ("search", "explain"):
        res = CliRunner().invoke(app, [command, "refund", *(["1"] if command == "explain"
                                                            else []), *args, "--dsn", "bogus"],
                                 env={"COLUMNS": "200"})
        assert res.exit_code == 1, res.output
        assert f"{flag}: applies only with --rerank" in res.output


def test_explain_rerank_follows_what_search_rerank_returns(sample_db: str,
                                                           tmp_path: Path) -> None:
    # explain had no --rerank: a chunk `search --rerank` returned could only be explained
    # in fused order, where it may have been "cut at k" or "capped"
    from pgfunnel.cli.main import app

    from pgfunnel.tiny_models import build_tiny_cross_encoder

    model = str(build_tiny_cross_encoder(tmp_path / "ce"))
    rerank = ["--rerank", "--rerank-model", model, "-k", "2", "--per-source-cap", "1",
              "--lexical-only", "--dsn", sample_db]
    env = {"COLUMNS": "300", "HF_HUB_OFFLINE": "1"}
    res = CliRunner().invoke(app, ["search", "refund plan", *rerank, "--json"], env=env)
    assert res.exit_code == 0, res.output
    found = json.loads(res.stdout)
    assert found["reranked"] is True
    returned = {r["chunk_id"]: r for r in found["results"]}
    plain = CliRunner().invoke(app, ["search", "refund plan", *rerank[3:], "--json"], env=env)
    assert plain.exit_code == 0, plain.output
    fused = {r["chunk_id"] for r in json.loads(plain.stdout)["results"]}
    assert fused != set(returned)  # the rerank changed what came back
    chunks = [str(c) for c in sorted(fused | set(returned))]
    res = CliRunner().invoke(app, ["explain", "refund plan", *chunks, *rerank, "--json"],
                             env=env)
    assert res.exit_code == 0, res.output
    for e in json.loads(res.stdout):
        cid = e["chunk_id"]
        assert e["reranked"] is True and e["rerank_rank"] is not None
        assert e["final_rank"] == (returned[cid]["final_rank"] if cid in returned else None)
        assert (e["verdict"] == "returned") == (cid in returned), e
        if cid in returned:
            assert e["rerank_rank"] == returned[cid]["rerank_rank"]
            assert e["rerank_score"] == pytest.approx(returned[cid]["rerank_score"])
        else:
            assert "after the rerank" in e["reason"], e
    res = CliRunner().invoke(app, ["explain", "refund plan", chunks[0], *rerank], env=env)
    assert res.exit_code == 0, res.output
    assert "rerank rank " in res.output and "RERANK" not in res.output
    # a chunk below --rerank-depth: the reason names the option
    last = str(found["results"][-1]["chunk_id"])
    res = CliRunner().invoke(app, ["explain", "refund plan", last, *rerank, "--rerank-depth",
                                   "1"], env=env)
    said = " ".join(res.output.split())
    assert res.exit_code == 0 and "rerank rank - (score -)" in said, said
    assert "is below the rerank depth 1 (the reranker scores the first 1 of the pool" in said
    assert ", --rerank-depth)" in said, said


def test_explain_of_several_chunks_searches_and_reranks_once(
        sample_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # each chunk argument re-ran the search and the cross-encoder
    from pgfunnel.cli.main import app

    from pgfunnel.rerank import Reranker
    from pgfunnel.tiny_models import build_tiny_cross_encoder

    calls: list[int] = []
    real = Reranker.rank

    def counted(self: Reranker, query: str, documents: Any, **kw: Any) -> Any:
        calls.append(len(documents))
        return real(self, query, documents, **kw)

    monkeypatch.setattr(Reranker, "rank", counted)
    model = str(build_tiny_cross_encoder(tmp_path / "ce"))
    res = CliRunner().invoke(app, ["explain", "refund plan", "refunds-annual", "1", "2", "3",
                                   "--rerank", "--rerank-model", model, "--lexical-only",
                                   "--dsn", sample_db, "--json"],
                             env={"COLUMNS": "300", "HF_HUB_OFFLINE": "1"})
    assert res.exit_code == 0, res.output
    assert len(json.loads(res.stdout)) == 4 and len(calls) == 1


@pytest.mark.parametrize("depth", ["0", "-3"])
def test_a_bad_rerank_depth_is_told_before_anything_loads(depth: str) -> None:
    # --rerank-depth 0 was told only once the cross-encoder had loaded (seconds), and
    # behind any error before it: a rerank model that does not load, a database that
    # cannot be reached
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    res = CliRunner().invoke(app, ["search", "refund", "--rerank", "--rerank-depth", depth,
                                   "--rerank-model", "/no/such/cross-encoder",
                                   "--dsn", "bogus"],
                             env={"COLUMNS": "200", "HF_HUB_OFFLINE": "1"})
    assert res.exit_code == 1, res.output
    said = " ".join(res.output.split())
    assert said == f"error: --rerank-depth: must be an integer of at least 1, got {depth}", said


def test_ctrl_c_says_what_was_kept_and_how_to_go_on(capsys: pytest.CaptureFixture[str]) -> None:
    """A long ingest or reindex stopped with Ctrl-C said only "interrupted"; it now says
    what stays written and which command goes on."""
    import typer
    from pgfunnel.cli.common import handle_errors

    with pytest.raises(typer.Exit) as stop, handle_errors(interrupted="rerun to resume"):
        raise KeyboardInterrupt
    assert stop.value.exit_code == 130
    assert capsys.readouterr().err.strip() == "interrupted: rerun to resume"
    with pytest.raises(typer.Exit), handle_errors():
        raise KeyboardInterrupt
    assert capsys.readouterr().err.strip() == "interrupted"


def test_embed_names_the_model_flag_when_the_model_does_not_load(tmp_path: Path) -> None:
    """An error about a value the user typed names the flag it was typed with (docs/cli.md,
    exit codes): `--model`, not the library's `embedding_model`."""
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    missing = tmp_path / "no-such-model"
    # --model given: the model is loaded before any database is reached
    res = CliRunner().invoke(app, ["embed", "hello", "--model", str(missing),
                                   "--dsn", "host=/nonexistent dbname=none"],
                             env={"HF_HUB_OFFLINE": "1", "COLUMNS": "300"})
    assert res.exit_code == 1, res.output
    text = " ".join(res.output.split())
    assert text.startswith("error: --model: "), text
    assert "embedding_model" not in text


@pytest.mark.parametrize("k", ["0", "1001"])
def test_demo_refuses_a_k_out_of_range_before_it_starts(k: str) -> None:
    """`demo -k 0` used to init and ingest (seconds of embedding) and then fail on the
    first search with `k: ...`, not naming the flag; it is refused as it is parsed."""
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    res = CliRunner().invoke(app, ["demo", "-k", k, "--dsn", "host=/nonexistent dbname=none"],
                             env={"COLUMNS": "300"})
    assert res.exit_code == 2, res.output
    assert "Invalid value for '--k' / '-k'" in res.output, res.output


def test_text_that_looks_like_rich_markup_prints_as_written(sample_db: str,
                                                           tmp_path: Path) -> None:
    """A collection name, query, citekey or title holding '[/x]' made rich raise MarkupError
    (a traceback), and '[red]x' printed as a red 'x': output is no longer read as markup."""
    from pgfunnel.cli.main import app

    corpus = tmp_path / "markup.jsonl"
    corpus.write_text('{"citekey": "[/x]", "title": "[red]t[/y]", "text": "refund markup"}\n')
    for args, shown in ((["ingest", str(corpus), "--dry-run"], ("[/x]", "[red]t[/y]")),
                        (["search", "refund", "-c", "[/x]", "--lexical-only", "--dsn",
                          sample_db], ("collection '[/x]' does not exist",)),
                        (["search", "refund", "-c", "[red]nope", "--lexical-only", "--dsn",
                          sample_db], ("collection '[red]nope' does not exist",)),
                        (["explain", "refund", "[/x]#0", "--lexical-only", "--dsn",
                          sample_db], ("[/x]#0",))):
        res = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
        assert res.exception is None or isinstance(res.exception, SystemExit), \
            (args, res.exception)
        for text in shown:
            assert text in res.output, (args, res.output)
    # the CLI's own styling still renders: doctor's levels are styled, not printed as tags
    res = CliRunner().invoke(app, ["doctor", "--dsn", sample_db], env={"COLUMNS": "200"})
    assert "info" in res.output and "[/" not in res.output, res.output


def test_progress_on_a_log_is_a_line_now_and_then() -> None:
    # rich draws nothing on a pipe until the work is done: an hour's ingest into a log
    # showed nothing for an hour
    import io

    from pgfunnel.cli import common
    from rich.console import Console

    now = [0.0]
    saved = common.console
    common.console = Console(file=io.StringIO(), width=200, markup=False)
    try:
        with common.LogProgress("reindex", every=10, clock=lambda: now[0]) as progress:
            task = progress.add_task("embedding chunks", total=400)
            for _ in range(40):
                now[0] += 1.5
                progress.advance(task, 10)
            other = progress.add_task("building HNSW index", total=None)
            progress.update(other, completed=7)
        lines = common.console.file.getvalue().splitlines()
    finally:
        common.console = saved
    # a line once 10 s have passed since the last (at 10.5, 21, ... 52.5 s of 60), then
    # each task's last count once
    assert lines[0] == "reindex: embedding chunks 70/400 (18%), 0:10 elapsed", lines
    assert len(lines) == 5 + 2, lines
    assert lines[-2:] == ["reindex: embedding chunks 400/400 (100%), 1:00 elapsed",
                          "reindex: building HNSW index 7, 1:00 elapsed"], lines



def test_ingest_counts_the_documents_it_reads_before_it_embeds(tmp_path: Path,
                                                                 monkeypatch: Any) -> None:
    # every file is read before anything is written: 520 pages of Python's HTML manual
    # took 80 s here, and the terminal (or a log) showed nothing until the embedding began
    import io

    from pgfunnel.cli import common, main
    from rich.console import Console

    for n in range(3):
        (tmp_path / f"p{n}.md").write_text(f"# Page {n}\n\nText {n}.\n")
    now = [0.0]
    saved = common.console
    common.console = Console(file=io.StringIO(), width=200, markup=False)

    def slow_log(label: str, transient: bool = False, *, end_line: bool = True) -> Any:
        return common.LogProgress(label, every=10, clock=lambda: now[0], end_line=end_line)

    import pgfunnel.sources as sources

    reading = sources.read_paths

    def read_slowly(*args: Any, **kwargs: Any) -> Any:
        for record in reading(*args, **kwargs):
            now[0] += 6.0  # each page 6 s: a line at the second
            yield record

    # read_documents imports read_paths where it runs
    monkeypatch.setattr(sources, "read_paths", read_slowly)
    monkeypatch.setattr(main, "progress_display", slow_log)
    try:
        plan = main.dry_run([tmp_path], 200, None, None, show_progress=True)
        lines = common.console.file.getvalue().splitlines()
    finally:
        common.console = saved
    assert [d["citekey"] for d in plan["documents"]] == ["p0", "p1", "p2"]
    assert lines == ["ingest: reading files (documents so far) 2, 0:12 elapsed",
                     "ingest: reading files (documents so far) 3, 0:18 elapsed"], lines
    # a stage over within the first ten seconds says nothing in a log, as before
    common.console = Console(file=io.StringIO(), width=200, markup=False)
    try:
        with common.LogProgress("ingest", every=10, clock=lambda: 0.0,
                                end_line=False) as quick:
            quick.advance(quick.add_task("reading files (documents so far)", total=None))
        assert common.console.file.getvalue() == ""
    finally:
        common.console = saved

@pytest.mark.parametrize("command", [
    ["ingest", "pgfunnel/data/helpcenter.jsonl", "-c", "x"],
    ["search", "refund", "--lexical-only"],
    ["versions", "list"],
    ["init"],
])
def test_a_role_without_usage_on_the_schema_gets_one_line_not_a_traceback(
        db: str, command: list[str]) -> None:
    """A login role that was granted nothing (not a reader, not a writer) runs a command:
    Postgres refuses it `permission denied for schema pgfunnel`, which reached the user
    as a psycopg traceback from the schema checks (`to_regclass` raises on a schema the
    role may not use) instead of one `error:` line and exit 1. The line then said only
    that, naming neither the grant the role lacks nor where to read of it; it says both
    now (init and migrate: to run them as the schema's owner)."""
    import uuid

    import psycopg
    from _security_helpers import with_user
    from pgfunnel.cli.main import app
    from psycopg import sql as pgsql
    from typer.testing import CliRunner

    role = f"pgf_app_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(db, autocommit=True) as su:
        su.execute(pgsql.SQL("create role {} login").format(pgsql.Identifier(role)))
    res = CliRunner().invoke(app, [*command, "--dsn", with_user(db, role)])
    assert res.exit_code == 1, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert "error: permission denied for schema pgfunnel" in res.output
    assert len(res.output.strip().splitlines()) == 1, res.output
    if command == ["init"]:
        # (with the --dsn typed: the init pasted reaches the same database)
        assert (f"run `pgfunnel init --dsn {shlex.quote(with_user(db, role))}` as the role "
                "that owns") in res.output, res.output
        assert "pgfunnel_reader" not in res.output, res.output
    else:
        # this database is not in RLS mode, where pgfunnel_reader holds nothing: the line
        # said to grant it, and pasted this role's own --dsn into `pgfunnel init --rls`,
        # which only the schema's owner may run
        owner = psycopg.connect(db, autocommit=True).execute(
            "select pg_get_userbyid(nspowner) from pg_namespace "
            "where nspname = 'pgfunnel'").fetchone()
        assert owner is not None
        assert "not in RLS mode" in res.output, res.output
        assert f"connect as {owner[0]!r} (the schema's owner)" in res.output, res.output
        assert "`pgfunnel init --rls --dsn OWNER_DSN`" in res.output, res.output
        assert f"then `grant pgfunnel_reader to {role}`" in res.output, res.output
        assert "docs/security.md" in res.output, res.output


def test_a_role_granted_nothing_in_rls_mode_is_told_the_grant_and_who_runs_it(
        db: str) -> None:
    """In RLS mode the advice is the grant of pgfunnel_reader, named for this role."""
    import uuid

    import psycopg
    from _security_helpers import with_user
    from pgfunnel.cli.main import app
    from psycopg import sql as pgsql
    from typer.testing import CliRunner

    from pgfunnel.security import enable_rls

    with psycopg.connect(db) as owner:
        enable_rls(owner)
        owner.commit()
    role = f"pgf_app_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(db, autocommit=True) as su:
        su.execute(pgsql.SQL("create role {} login").format(pgsql.Identifier(role)))
    res = CliRunner().invoke(app, ["versions", "list", "--dsn", with_user(db, role)])
    assert res.exit_code == 1, res.output
    assert f"run `grant pgfunnel_reader to {role}` to search" in res.output, res.output
    assert "not in RLS mode" not in res.output, res.output
    assert "init --rls" not in res.output, res.output


def test_command_summaries_are_one_line() -> None:
    """`pgfunnel --help` lists each command by its help's first paragraph; a line break in
    it broke the summary mid-sentence in the listing (`stop`, `doctor`)."""
    import typer
    from pgfunnel.cli.main import app

    def walk(group: Any, prefix: str = "") -> list[str]:
        broken = []
        for name, command in group.commands.items():
            summary = (command.help or "").strip().split("\n\n")[0]
            if "\n" in summary:
                broken.append(prefix + name)
            if hasattr(command, "commands"):  # a group: `versions`
                broken += walk(command, prefix + name + " ")
        return broken

    root = typer.main.get_command(app)
    assert "versions drop" in walk_names(root)
    assert walk(root) == []


def test_help_paragraphs_wrap_at_the_width_not_at_the_source_lines() -> None:
    """Typer 0.20 on kept each docstring line break of a help's later paragraphs, then
    wrapped the lines at 80 columns too: `reindex --help` read "model" alone on a line
    ("... a version of the same" / "model" / "instead, unless --reembed), ..."), and so
    did stop, doctor, versions activate, compare and drop-collection. Each paragraph now
    fills its lines: a line of a paragraph that another line follows ends near the
    width."""
    import typer
    from pgfunnel.cli.main import app

    root = typer.main.get_command(app)
    every = [name.split() for name in walk_names(root)]
    assert ["reindex"] in every and ["versions", "compare"] in every
    short: list[tuple[str, str]] = []
    for path in [[], *every]:
        res = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "80"})
        assert res.exit_code == 0, (path, res.output)
        lines = res.output.splitlines()
        # the help's text: after the usage line, before the first panel
        start = next(i for i, line in enumerate(lines) if "Usage:" in line) + 1
        end = next(i for i, line in enumerate(lines) if line.startswith("╭"))
        text = [line.rstrip() for line in lines[start:end]]
        for line, after in zip(text, text[1:], strict=False):
            if line.strip() and after.strip() and len(line) < 60:
                short.append((" ".join(path), line))
    assert short == [], short


@pytest.mark.parametrize(("command", "option"), [
    (["search"], "--tenant"), (["search"], "--timeout-ms"), (["explain"], "--tenant"),
    (["eval"], "--split"), (["eval"], "--qualifiers")])
def test_a_value_option_says_what_leaving_it_out_does(command: list[str], option: str) -> None:
    """`search --help` said of --tenant only "The reader's tenant." (left out, a search
    sees no tenant's documents), of --timeout-ms nothing of what applies without it, and
    `eval --help` nothing of which split runs without --split or whose qualifiers without
    --qualifiers: every other value option of these commands shows its default."""
    import typer
    from pgfunnel.cli.main import app

    group = typer.main.get_command(app)
    cmd = group
    for name in command:
        cmd = cmd.commands[name]  # type: ignore[attr-defined]
    (param,) = [p for p in cmd.params if option in getattr(p, "opts", [])]
    # (help is typer's: click's Parameter has none)
    shown = getattr(param, "help", None)
    text = (shown or "").lower()
    assert "default" in text or "none given" in text, (option, shown)


def walk_names(group: Any, prefix: str = "") -> list[str]:
    names = []
    for name, command in group.commands.items():
        names.append(prefix + name)
        if hasattr(command, "commands"):
            names += walk_names(command, prefix + name + " ")
    return names


@pytest.mark.parametrize("command", [["search", "refund"], ["explain", "refund", "doc-1"]])
def test_rrf_k_without_rrf_fusion_is_an_error(command: list[str]) -> None:
    # only RRF reads the constant: with the default min-max fusion --rrf-k 10 was
    # accepted and changed nothing, unsaid
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    res = CliRunner().invoke(app, [*command, "--rrf-k", "10", "--dsn", "bogus"],
                             env={"COLUMNS": "200"})
    assert res.exit_code == 1, res.output
    assert "--rrf-k: applies only with --fusion rrf (this search fuses by minmax" in \
        " ".join(res.output.split())
    # with RRF it is taken: the command goes on (to the bogus DSN)
    res = CliRunner().invoke(app, [*command, "--fusion", "rrf", "--rrf-k", "10", "--dsn",
                                   "bogus"], env={"COLUMNS": "200"})
    assert res.exit_code == 1 and "--rrf-k" not in res.output, res.output
def test_the_weight_flags_say_every_rule_that_picks_the_weights() -> None:
    """--lexical-weight / --dense-weight say when the search picks each pair (docs/cli.md,
    search): `{0.7,1}` also when the best lexical match lacks the query's rarest word, and
    `{1,0.2}` only for a number of 0.3 or more of the query's idf. The help named the
    first rule alone and the second without its share."""
    import typer
    from pgfunnel.cli.main import app

    root: Any = typer.main.get_command(app)
    search = root.commands["search"]
    helps = {p.name: " ".join((p.help or "").split()) for p in search.params}
    assert "lacks its rarest word" in helps["lexical_weight"]
    assert "lacks its rarest word" in helps["dense_weight"]
    assert "0.3 or more of the query's idf" in helps["dense_weight"]


def test_a_file_given_as_root_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    """`ingest guide.md --root guide.md` (the file itself as --root) made a citekey of '.'
    and stopped with a ValueError traceback; it is an error naming --root, exit 1."""
    from pgfunnel.cli.main import app

    from pgfunnel.errors import InvalidDocumentError
    from pgfunnel.sources import read_path

    guide = tmp_path / "guide.md"
    guide.write_text("# Guide\n\nRead this first.\n")
    for root in (guide, tmp_path / "other.md"):
        root.touch()
        res = CliRunner().invoke(app, ["ingest", str(guide), "--root", str(root),
                                       "--dry-run"], env={"COLUMNS": "300"})
        assert res.exit_code == 1, res.output
        assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
        assert f"error: {root}: not a folder (--root)" in res.output, res.output
        with pytest.raises(InvalidDocumentError, match=r"not a folder \(--root\)"):
            list(read_path(tmp_path, root=root))
    # the folder holding it is the root that works
    assert [d.citekey for d in read_path(guide, root=tmp_path)] == ["guide"]


def _as_a_user_without_read_rights(path: Path) -> list[str]:
    """The command prefix that runs a command which cannot read ``path`` (mode 000): as
    is for a user; for root, under setpriv without the capabilities that read any file.
    Skips where neither holds."""
    import os
    import shutil
    import subprocess

    path.chmod(0)
    if not os.access(path, os.R_OK):
        return []
    setpriv = shutil.which("setpriv")
    drop = "-dac_override,-dac_read_search"
    prefix = [setpriv, f"--bounding-set={drop}", f"--inh-caps={drop}"] if setpriv else []
    if not prefix or subprocess.run([*prefix, "cat", str(path)], capture_output=True
                                    ).returncode == 0:
        pytest.skip("running as root, and cannot drop the right to read any file")
    return prefix


@pytest.mark.parametrize(("command", "said"), [
    (["ingest", "{path}", "--dry-run"], "error: {path}: cannot read it: Permission denied"),
    (["eval", "{path}", "--dsn", "bogus"], "error: {path}: cannot read judged queries"),
])
def test_an_unreadable_file_is_an_error_of_its_own_not_a_usage_error(
        tmp_path: Path, command: list[str], said: str) -> None:
    """A file given that cannot be read stopped at the parser, with the usage line and
    exit 2 ("Invalid value for 'paths': path ... is not readable"), where the same file in
    a folder was an error of its own, exit 1. Both are now exit 1, one line, as
    docs/cli.md says of a value pgfunnel refuses."""
    import os
    import subprocess
    import sys

    path = tmp_path / "notes.jsonl"
    path.write_text('{"citekey": "a", "text": "some text", "query": "q"}\n')
    prefix = _as_a_user_without_read_rights(path)
    try:
        res = subprocess.run([*prefix, sys.executable, "-m", "pgfunnel.cli.main",
                              *(a.format(path=path) for a in command)],
                             capture_output=True, text=True, timeout=120,
                             env={**os.environ, "COLUMNS": "300"})
    finally:
        path.chmod(0o644)
    assert res.returncode == 1, res.stderr
    assert res.stdout == ""
    assert res.stderr.startswith(said.format(path=path)), res.stderr
    assert "Usage:" not in res.stderr


def test_a_pipe_gets_each_line_whole(sample_db: str) -> None:
    """Piped or logged, stdout is 80 columns wide to rich, which broke every line longer
    than that: `versions list` too narrow for its table printed "one line per version"
    as three, so `pgfunnel versions list | grep active` lost the index and activation
    of the version, and reindex's summary and validation lines were cut the same way."""
    from pgfunnel.cli.main import app

    res = CliRunner().invoke(app, ["versions", "list", "--dsn", sample_db],
                             env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0] == "index versions of 'default'", res.stdout
    version = [line for line in lines if line.startswith("  version 1 (active): ")]
    assert len(version) == 1 and len(version[0]) > 80, res.stdout
    assert "hnsw index valid" in version[0] and "activated 20" in version[0], res.stdout
    assert len(lines) == 2, res.stdout


@pytest.mark.parametrize("args", [
    ["ingest", "", "--dry-run"], ["ingest", "{folder}", "--root", "", "--dry-run"],
    ["eval", ""], ["eval", "{folder}/q.jsonl", "--out", ""],
    ["eval", "{folder}/q.jsonl", "--floors", ""], ["eval", "{folder}/q.jsonl", "--qrels", ""],
    ["versions", "compare", "1", "2", "--queries", ""],
])
def test_an_empty_path_is_refused_not_read_as_the_current_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]) -> None:
    """`pgfunnel ingest "$DOCS"` with the variable unset got the path '' which a Path reads
    as '.': the ingest read the whole current folder (and eval --out "" wrote its report
    there). An empty path is a usage error naming its argument, before anything runs."""
    from pgfunnel.cli.main import app

    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "guide.md").write_text("# Guide\n\nRead this first.\n")
    monkeypatch.chdir(folder)  # what '' read
    dsn = [] if args[0] == "ingest" else ["--dsn", "host=/nonexistent dbname=none"]
    res = CliRunner().invoke(app, [*(a.format(folder=folder) for a in args), *dsn],
                             env={"COLUMNS": "300"})
    said = " ".join(res.output.replace("│", " ").split())
    assert res.exit_code == 2, said
    assert "is empty (an unset variable?); give a path ('.' is the current folder)" in said
    assert "guide" not in res.stdout
    # '.' itself is a path like any other
    res = CliRunner().invoke(app, ["ingest", ".", "--dry-run", "--json"])
    assert res.exit_code == 0 and '"citekey": "guide"' in res.stdout, res.output


def test_a_missing_collection_is_told_with_the_collections_there_are(
        sample_db: str, conn: psycopg.Connection[Any]) -> None:
    """After `pgfunnel demo` (collection 'demo'), `pgfunnel search refund` searched
    'default' and said only to ingest into it; the error now names the collections the
    database has, from the CLI, Python and SQL alike."""
    from pgfunnel.cli.main import app

    from pgfunnel.errors import NotFoundError
    from pgfunnel.ingest import require_collection

    for args in (["search", "refund", "-c", "demo", "--lexical-only"],
                 ["versions", "list", "-c", "demo"]):
        res = CliRunner().invoke(app, [*args, "--dsn", sample_db], env={"COLUMNS": "200"})
        assert res.exit_code == 1, (args, res.output)
        flat = " ".join(res.output.split())
        assert ("collection 'demo' does not exist; this database has 'default' (pass one as "
                "the collection: collection='NAME' in Python, collection => 'NAME' in SQL, "
                "-c NAME in the CLI); or ingest "
                f"into it first: pgfunnel ingest --dsn {shlex.quote(sample_db)} PATH "
                "--collection demo") in flat, (args, flat)
    # the ingest it suggests is into the name typed, quoted to paste; a name an ingest
    # would refuse keeps the placeholder
    res = CliRunner().invoke(app, ["versions", "list", "-c", "my docs", "--dsn", sample_db],
                             env={"COLUMNS": "200"})
    assert res.exit_code == 1, res.output
    assert " ".join(res.output.split()).endswith(
        "PATH --collection 'my docs'"), res.output
    with pytest.raises(NotFoundError, match="'demo ' does not exist; .*ingest into it "
                                            "first: pgfunnel ingest PATH --collection NAME$"):
        require_collection(conn, "demo ")
    # an empty database says it has none
    with pytest.raises(NotFoundError, match="'demo' does not exist; this database has no "
                                            "collections yet; ingest into it first: "
                                            "pgfunnel ingest PATH --collection demo$"):
        require_collection(conn, "demo")
    # psql: the hint of the SQL functions' refusal
    for i in range(12):
        conn.execute("insert into pgfunnel.collection (name) values (%s)", (f"c{i:02d}",))
    with pytest.raises(psycopg.errors.NoDataFound) as exc, conn.transaction():
        conn.execute("select * from pgfunnel.funnel_search('refund', null, 5, "
                     "collection => 'demo')")
    hint = exc.value.diag.message_hint or ""
    assert hint.startswith("this database has 'c00', 'c01', ") and "'c09', ... (pass one" in hint
    assert hint.endswith("or ingest into it first: pgfunnel ingest PATH --collection demo")


def test_psqls_hint_for_a_missing_collection_ingests_into_the_name_typed(
        conn: psycopg.Connection[Any]) -> None:
    """psql's hint ended `pgfunnel ingest PATH --collection NAME` where the Python and CLI
    paths name the collection asked for: it now names a printable ASCII name too, quoted
    as they quote it, and keeps NAME for any other (those paths still name it)."""
    from pgfunnel.errors import NotFoundError, translate
    from pgfunnel.ingest import ingest_target

    names = ["demo", "my docs", "it's", "a\\b", "naïve", "ok-1.2/x:y@z%+=,", "demo ",
             " demo", "\u00a0demo", "demo\u3000", "", "x" * 200, "x" * 201, "tab\there",
             "c1\x85", "x\u200by", "\u200dx", "x\u200d", "x\u200dy", "rtl\u202eam",
             "tag\U000e0041", "soft\u00adhyphen", "\u2028line"]
    for name in names:
        with pytest.raises(psycopg.errors.NoDataFound) as exc, conn.transaction():
            conn.execute("select pgfunnel._collection_id(%s)", (name,))
        hint = exc.value.diag.message_hint or ""
        # what the Python layer and the CLI say for the name, from their own check,
        # where the name is printable ASCII
        plain = re.fullmatch(r"[!-~]([ -~]*[!-~])?", name) is not None and len(name) <= 200
        said = ingest_target(name) if plain else "NAME"
        assert hint == ("this database has none yet; ingest into it first: pgfunnel "
                        f"ingest PATH --collection {said}"), (name, hint)
        # and translated from Python, the same
        err = translate(exc.value)
        assert isinstance(err, NotFoundError)
        assert str(err).endswith(f"--collection {ingest_target(name)}"), (name, err)
    assert [ingest_target(n) for n in ("my docs", "it's", "demo ", "x\u200dy")] == [
        "'my docs'", "'it'\"'\"'s'", "NAME", "'x\u200dy'"]


# `pgfunnel ARGS` as the console script runs it, with SIGINT handled as in a terminal.
# A child inherits an ignored SIGINT (a test run started in the background, `cmd &` in a
# script, under nohup, or by a runner that ignores it), and Python installs no
# KeyboardInterrupt handler over an ignored SIGINT: the Ctrl-C the tests send was lost,
# the ingest went on waiting for the lock the test holds, and the test failed at its
# communicate() timeout, 180 s later, depending on how the suite was started.
_CLI_WITH_CTRL_C = ("import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
                    "sys.argv[0] = 'pgfunnel'; from pgfunnel.cli.main import main; main()")


# how long the Ctrl-C tests give a pgfunnel subprocess to reach the wait where they stop
# it (it imports torch and the CLI, loads a model, writes a first batch); each wait ends
# as soon as it is reached. 240 s ran out on a 2-core machine at load average 15.
_CLI_START_S = 600


def _cli_popen(args: list[str], env: dict[str, str]) -> Any:
    """`pgfunnel ARGS` in a subprocess whose Ctrl-C (SIGINT) raises KeyboardInterrupt,
    whatever the test run's own SIGINT disposition; text stdout and stderr piped."""
    import subprocess
    import sys

    return subprocess.Popen([sys.executable, "-c", _CLI_WITH_CTRL_C, *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)


# the documents of collection 'big', which the two tests below ingest
_BIG_COUNT = ("select count(*) from pgfunnel.document d join pgfunnel.collection c "
              "on c.id = d.collection_id where c.name = 'big'")
# the backends of an ingest of 'big' waiting for its writer lock
_BIG_WAITING = ("select pid from pg_stat_activity where wait_event = 'advisory' and "
                "query like '%pgfunnel:ingest:%' and pid <> pg_backend_pid()")


@contextmanager
def _ingest_waiting_at_its_second_batch(
        db: str, tmp_path: Path, n_docs: int
) -> Iterator[tuple[Any, psycopg.Connection[Any], list[tuple[int]], float]]:
    """`pgfunnel ingest` of ``n_docs`` one-chunk files into collection 'big' (batches of
    1,000), in a subprocess, held by the collection's writer lock once its first batch
    has committed: yields the process, the connection holding the lock, the backends of
    the ingest waiting for it, and the deadline (time.monotonic) the tests keep to. The
    process is killed on the way out if it still runs."""
    import os
    import time

    from pgfunnel.tiny_models import build_tiny_bi_encoder

    model = build_tiny_bi_encoder(tmp_path / "bi", dim=32)
    folder = tmp_path / "docs"
    folder.mkdir()
    for i in range(n_docs):
        (folder / f"page{i:04d}.md").write_text(
            f"# Page {i}\n\n" + " ".join(f"word{i}x{j}" for j in range(24)) + "\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = _cli_popen(["ingest", str(folder), "-c", "big", "--chunk-words", "20", "--model",
                       str(model), "--dsn", db], env)
    # session-level, so that no transaction of the watcher's holds up the ingest's
    # concurrent index build
    lock = "select pg_try_advisory_lock(hashtext('pgfunnel:ingest:' || 'big'))"
    try:
        with psycopg.connect(db, autocommit=True) as watcher:
            # after the first batch commits, hold the collection's writer lock so that
            # the ingest waits at its next batch, where the test stops it
            deadline = time.monotonic() + _CLI_START_S
            while not (watcher.execute(_BIG_COUNT).fetchone() or (0,))[0] or not (
                    watcher.execute(lock).fetchone() or (False,))[0]:
                assert proc.poll() is None and time.monotonic() < deadline, proc.poll()
                time.sleep(0.02)
            while not (pids := watcher.execute(_BIG_WAITING).fetchall()):
                assert proc.poll() is None and time.monotonic() < deadline, proc.poll()
                time.sleep(0.02)
            yield proc, watcher, pids, deadline
    finally:
        if proc.poll() is None:
            proc.kill()


def test_ctrl_c_during_an_ingest_of_a_folder_says_how_many_documents_are_in(
        db: str, tmp_path: Path) -> None:
    """Ctrl-C (SIGINT) while `pgfunnel ingest` reads a folder of many files: exit 130 and
    one line, no traceback, naming how many documents its committed batches stored (it
    said "the batches written before it stay" whether or not any had); each of those
    documents is whole (chunks, terms, vectors) and none of the rest is half-written."""
    import signal

    with _ingest_waiting_at_its_second_batch(db, tmp_path, 4000) as (proc, watcher, _, _):
        stored = (watcher.execute(_BIG_COUNT).fetchone() or (0,))[0]
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=180)
    assert proc.returncode == 130, err
    assert "Traceback" not in err, err
    said = [line for line in err.splitlines() if line.startswith("interrupted")]
    assert said == [f"interrupted: {stored:,} of 4,000 documents stored in collection 'big', "
                    "each whole (each batch of documents is all or nothing); the same "
                    "ingest again skips them, unchanged, and goes on"], err
    assert 0 < stored < 4000 and stored % 1000 == 0
    with psycopg.connect(db) as conn:
        assert conn.execute(_BIG_COUNT).fetchone() == (stored,)
        # every stored document whole: its chunks, each with its vector and its terms
        assert conn.execute(
            "select count(*) from pgfunnel.document d where not exists (select from "
            "pgfunnel.chunk ch where ch.document_id = d.id)").fetchone() == (0,)
        assert conn.execute(
            "select count(*) from pgfunnel.chunk ch where not exists (select from "
            "pgfunnel.embedding e where e.chunk_id = ch.id)").fetchone() == (0,)


def test_ctrl_c_during_the_hnsw_build_says_the_index_is_not_built(
        db: str, tmp_path: Path) -> None:
    """Ctrl-C while the first ingest of a collection builds its HNSW graph said "3 of 3
    documents stored ...; the same ingest again skips them, unchanged, and goes on", as if
    the ingest were done: the graph was not built, and the dense leg scanned every vector
    until someone ran doctor. It says the index is not built and that the same ingest
    builds it, which it does."""
    import os
    import signal
    import time

    from pgfunnel.tiny_models import build_tiny_bi_encoder

    model = build_tiny_bi_encoder(tmp_path / "bi", dim=32)
    folder = tmp_path / "docs"
    folder.mkdir()
    for i in range(3):
        (folder / f"page{i}.md").write_text(f"# Page {i}\n\nText of page {i}.\n")
    args = ["ingest", str(folder), "-c", "hb", "--model", str(model), "--dsn", db]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    hnsw = "select count(*) from pg_indexes where indexname like 'embedding_hnsw_v%'"
    with psycopg.connect(db) as watcher:
        # the build's SHARE lock waits behind this; the batches' writes do not
        watcher.execute("lock table pgfunnel.embedding in row exclusive mode")
        proc = _cli_popen(args, env)
        try:
            with psycopg.connect(db, autocommit=True) as seer:
                deadline = time.monotonic() + _CLI_START_S
                while not seer.execute(
                        "select exists (select from pg_stat_activity where wait_event_type "
                        "= 'Lock' and query ilike 'create index%%embedding_hnsw%%')"
                ).fetchone()[0]:  # type: ignore[index]
                    if proc.poll() is not None:
                        # what ended the ingest before its build waited, not its code alone
                        pytest.fail(f"ingest exited {proc.returncode} before the build "
                                    f"waited: {proc.communicate()[1][-2000:]}")
                    assert time.monotonic() < deadline
                    time.sleep(0.02)
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=180)
        finally:
            if proc.poll() is None:
                proc.kill()
        watcher.rollback()
    assert proc.returncode == 130, err
    said = [line for line in err.splitlines() if line.startswith("interrupted")]
    assert said == ["interrupted: 3 of 3 documents stored in collection 'hb', each whole "
                    "(each batch of documents is all or nothing), but not its HNSW index, "
                    "which was being built (dense searches scan every vector until it is); "
                    "the same ingest again skips the documents, unchanged, and builds it"], err
    with psycopg.connect(db) as conn:
        assert conn.execute("select count(*) from pgfunnel.document").fetchone() == (3,)
        assert conn.execute(hnsw).fetchone() == (0,)
    from pgfunnel.cli.main import app

    res = CliRunner().invoke(app, args, env={"COLUMNS": "300"})
    assert res.exit_code == 0, res.output
    assert "0 documents written, 3 unchanged" in res.output, res.output
    with psycopg.connect(db) as conn:
        assert conn.execute(hnsw).fetchone() == (1,)


def test_an_ingest_cancelled_after_a_batch_committed_says_how_many_documents_are_in(
        db: str, tmp_path: Path) -> None:
    """`pgfunnel ingest` whose statement a cancel request stopped (pg_cancel_backend from
    another session) after its first batch committed printed the error alone, not what
    was stored, as Ctrl-C says it; the error line now ends with what was kept, in Ctrl-C's
    words, so that an operator knows a rerun goes on from there."""
    import time

    with _ingest_waiting_at_its_second_batch(db, tmp_path, 2000) as (
            proc, watcher, pids, deadline):
        stored = (watcher.execute(_BIG_COUNT).fetchone() or (0,))[0]
        # each statement that waits on the lock is cancelled until the ingest stops
        while proc.poll() is None and time.monotonic() < deadline:
            for (pid,) in pids:
                watcher.execute("select pg_cancel_backend(%s)", (pid,))
            time.sleep(0.1)
            pids = watcher.execute(_BIG_WAITING).fetchall()
        _, err = proc.communicate(timeout=180)
    assert proc.returncode == 1, err
    assert "Traceback" not in err, err
    said = [line for line in err.splitlines() if line.startswith("error")]
    assert len(said) == 1, err
    assert "user request" in said[0], err
    assert said[0].endswith(
        f"; {stored:,} of 2,000 documents stored in collection 'big', each whole (each "
        "batch of documents is all or nothing); the same ingest again skips them, "
        "unchanged, and goes on"), err
    assert 0 < stored < 2000
    with psycopg.connect(db) as conn:
        assert conn.execute(_BIG_COUNT).fetchone() == (stored,)


def test_every_help_shows_a_flag_without_a_type_and_a_value_as_typed() -> None:
    """Under typer 0.16 on, --help showed `--json <bool>`, `--help <bool>`, `--exclude
    <list[str]>`, `--chunk-words <int range>` and `paths... <list[Path]>`: a flag takes no
    value, a repeatable option one value at a time, and a path is a `<path>`."""
    import re

    import typer
    from pgfunnel.cli.main import app

    def commands(group: Any, path: list[str]) -> list[list[str]]:
        found = [path]
        for name, sub in getattr(group, "commands", {}).items():
            found.extend(commands(sub, [*path, name]))
        return found

    every = commands(typer.main.get_command(app), [])
    assert ["ingest"] in every and ["versions", "compare"] in every
    for path in every:
        res = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
        assert res.exit_code == 0, (path, res.output)
        shown = set(re.findall(r"<[^<>\s]+(?: range)?>", res.output))
        assert shown <= {"<str>", "<int>", "<float>", "<path>"}, (path, shown)
        for line in res.output.splitlines():
            if "--json" in line or "--help" in line:
                assert "<" not in line, (path, line)
    ingest = CliRunner().invoke(app, ["ingest", "--help"], env={"COLUMNS": "200"}).output
    # the range is said in the help text (in_range checks it, with the value typed)
    assert re.search(r"--chunk-words\s+<int>\s+Target chunk size in words \(at least 20\)",
                     ingest), ingest
    assert re.search(r"--exclude\s+<str>", ingest), ingest
    assert re.search(r"PATHS\.\.\.\s+<path>", ingest), ingest


def test_every_usage_line_names_its_arguments_as_click_does() -> None:
    """Typer 0.16 on wrote a required argument in braces in the usage line and in lower
    case in the Arguments panel (`Usage: pgfunnel search [OPTIONS] {query}`, `{paths}...`),
    unlike click and every older typer (`QUERY`, `PATHS...`), and the help's own text
    (`Print TEXT's embedding`). Every command's usage line, Arguments panel and
    missing-argument error now name an argument in capitals."""
    import re

    import typer
    from pgfunnel.cli.main import app

    def commands(group: Any, path: list[str]) -> list[tuple[list[str], Any]]:
        found = [(path, group)]
        for name, sub in getattr(group, "commands", {}).items():
            found.extend(commands(sub, [*path, name]))
        return found

    usages = {}
    for path, command in commands(typer.main.get_command(app), []):
        res = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
        assert res.exit_code == 0, (path, res.output)
        usage = next(line.strip() for line in res.output.splitlines() if "Usage:" in line)
        assert "{" not in usage and "}" not in usage, (path, usage)
        usages[" ".join(path)] = usage
        for param in command.params:
            if param.param_type_name == "argument":
                name = param.name.upper()
                more = "..." if param.nargs != 1 else ""
                # click brackets an optional one: `explain [OPTIONS] QUERY [CHUNKS]...`
                shown = f"{name}{more}" if param.required else f"[{name}]{more}"
                assert f" {shown}" in usage, (path, usage)
                # the Arguments panel's row: `*    QUERY      <str>  The query text.` (the
                # star marks a required one)
                star = r"\*\s+" if param.required else ""
                assert re.search(rf"{star}{re.escape(name + more)}\s+<", res.output), \
                    (path, res.output)
    assert usages["search"] == "Usage: pgfunnel search [OPTIONS] QUERY"
    assert usages["ingest"] == "Usage: pgfunnel ingest [OPTIONS] PATHS..."
    # CHUNKS is optional to click: with --search-id, QUERY holds the first chunk
    assert usages["explain"] == "Usage: pgfunnel explain [OPTIONS] QUERY [CHUNKS]..."
    assert usages["versions compare"] == (
        "Usage: pgfunnel versions compare [OPTIONS] VERSION_A VERSION_B")
    assert usages["init"] == "Usage: pgfunnel init [OPTIONS]"
    missing = CliRunner().invoke(app, ["search"])
    assert missing.exit_code == 2 and "Missing argument 'QUERY'" in missing.output, \
        missing.output


def test_a_table_in_a_pipe_keeps_each_row_on_one_line(tmp_path: Path, sample_db: str) -> None:
    """Piped (`pgfunnel ingest DOCS --dry-run | grep faq`, `pgfunnel doctor | grep error`),
    a table whose cells do not fit 80 columns wrapped them over lines and cut a long
    citekey to `some-rather-long-folder-name/an…`: grep found a third of a finding and no
    whole citekey. Such a table is now one whole line per row; one that fits stays."""
    from pgfunnel.cli.main import app

    page = tmp_path / "some-rather-long-folder-name" / "another-nested-folder" / "a-page.md"
    page.parent.mkdir(parents=True)
    title = "A rather long title of a page that goes on and on about refunds and invoices"
    page.write_text(f"# {title}\n\nrefund words here\n")
    res = CliRunner().invoke(app, ["ingest", str(tmp_path), "--dry-run"],
                             env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    assert ("some-rather-long-folder-name/another-nested-folder/a-page  (1 chunk, 20 words)  "
            f"{title}") in res.output.splitlines(), res.output
    # a table that fits is drawn as before
    (tmp_path / "short").mkdir()
    (tmp_path / "short" / "faq.md").write_text("# FAQ\n\nrefund words here\n")
    res = CliRunner().invoke(app, ["ingest", str(tmp_path / "short"), "--dry-run"],
                             env={"COLUMNS": "80"})
    assert res.output.splitlines()[0].split() == ["citekey", "title", "chunks", "words"]
    assert res.output.splitlines()[1].split()[:3] == ["faq", "FAQ", "1"], res.output

    # (the DSN from PGFUNNEL_DSN: one typed is added to the commands the text's findings
    # name, not to the JSON's)
    env = {"PGFUNNEL_DSN": sample_db}
    found = CliRunner().invoke(app, ["doctor", "--json"], env=env)
    findings = json.loads(found.stdout)["findings"]
    res = CliRunner().invoke(app, ["doctor"], env={**env, "COLUMNS": "80"})
    lines = res.output.splitlines()
    for f in findings:
        assert f"{f['level']}  {f['check']}: {f['message']}" in lines, (f, res.output)


def test_activating_the_active_version_says_nothing_changed(sample_db: str) -> None:
    """`versions activate 1` of the active version 1 said "version 1 of 'default' is
    active", as a switch does; it now says that nothing changed."""
    from pgfunnel.cli.main import app

    res = CliRunner().invoke(app, ["versions", "activate", "1", "--dsn", sample_db],
                             env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert res.output.strip() == "version 1 of 'default' was already active; nothing changed"
    res = CliRunner().invoke(app, ["versions", "activate", "1", "--dsn", sample_db, "--json"])
    assert json.loads(res.stdout) == {"collection": "default", "activated": 1,
                                      "replaced": None, "caught_up": 0, "index_built": False,
                                      "already_active": True}


def test_ctrl_c_before_a_command_catches_it_says_interrupted(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C while the CLI's modules load printed Python's traceback, and one while a
    command imported the library (before its own error handling) ended with exit 130
    and nothing said; both now say "interrupted" in one line."""
    import subprocess
    import sys

    import pgfunnel.cli.main
    from pgfunnel.cli.main import app

    def ctrl_c() -> None:
        raise KeyboardInterrupt  # as if typed while `search` imports the library

    monkeypatch.setattr(pgfunnel.cli.main, "_quiet_warnings", ctrl_c)
    res = CliRunner().invoke(app, ["search", "refund", "--dsn", "bogus"])
    assert res.exit_code == 130 and res.output.strip() == "interrupted", res.output
    # the console script's first import installs the hook; a Ctrl-C while the rest loads
    loading = subprocess.run(
        [sys.executable, "-c", "import pgfunnel.cli\nraise KeyboardInterrupt"],
        capture_output=True, text=True, timeout=60)
    assert loading.stderr == "interrupted\n" and loading.returncode in (-2, 130), loading


def test_versions_drop_counts_the_chunks_as_the_other_lines_do(sample_db: str) -> None:
    """`versions drop` said "(8000 chunks' rows; ..." (and "1 chunks' rows") where every
    other line writes 8,000 chunks; it now says "the rows of 8,000 chunks"."""
    from pgfunnel.cli.main import app

    from pgfunnel import versions
    from pgfunnel.db import connect

    with connect(sample_db, autocommit=True) as conn:
        made = versions.reindex(conn, "default", analyzer="simple_v1")
        chunks = conn.execute("select count(*) from pgfunnel.chunk").fetchone()
    assert chunks is not None
    res = CliRunner().invoke(app, ["versions", "drop", str(made.version), "--dsn", sample_db],
                             env={"COLUMNS": "300"})
    assert res.exit_code == 0, res.output
    assert res.output.startswith(f"version {made.version} of 'default' dropped (the rows of "
                                 f"{chunks[0]:,} chunks; its HNSW index "), res.output


def test_search_in_a_pipe_prints_each_result_whole(tmp_path: Path, sample_db: str) -> None:
    """Piped (`pgfunnel search QUERY | grep KEY`), search drew its box table 80 columns
    wide with the citekey cut to 22 characters (`some-rather-long-fold…`) and the text to
    what was left of the line: grep found no whole citekey. It now prints one whole line
    per result, its ranks named; the dropped query words are a warning on stderr."""
    from pgfunnel.cli.main import app

    page = tmp_path / "some-rather-long-folder-name" / "another-nested-folder" / "a-page.md"
    page.parent.mkdir(parents=True)
    page.write_text("# Quokka refunds\n\nA quokka asks for a refund of its monthly plan.\n")
    res = CliRunner().invoke(app, ["ingest", str(tmp_path), "-c", "pipes", "--dsn", sample_db])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(app, ["search", "what is a quokka refund", "-c", "pipes",
                                   "--lexical-only", "--dsn", sample_db],
                             env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines == ["fusion: none (one leg: lexical)", "'what is a quokka refund'",
                     "1  some-rather-long-folder-name/another-nested-folder/a-page  lex 1  "
                     "dense -  fused 1  Quokka refunds A quokka asks for a refund of its "
                     "monthly plan."], res.stdout
    assert "warning: pgfunnel: query words not searched: a, is, what" in res.stderr, res.stderr


def test_search_of_an_identifier_alone_that_no_chunk_holds_warns_of_the_parts_ranked(
        sample_db: str) -> None:
    from pgfunnel.cli.main import app

    res = CliRunner().invoke(app, ["search", "x9", "-c", "default", "--lexical-only",
                                   "--dsn", sample_db])
    assert res.exit_code == 0, res.output
    assert ("warning: pgfunnel: no chunk of collection 'default' holds x9; the lexical leg "
            "ranked only the parts of it that chunks hold: 9") in res.stderr, res.stderr


def test_control_characters_in_a_document_do_not_reach_the_terminal(tmp_path: Path,
                                                                    sample_db: str) -> None:
    """A chunk's text or citekey holding an escape sequence (a page scraped with its ANSI
    colours, a hostile document) went to the terminal raw from `search` and `explain`:
    it recoloured the terminal or set its title. Control characters are now shown as
    `\\xNN`, in the box table, in a pipe's lines and in explain's reason."""
    from pgfunnel.cli.main import app

    corpus = tmp_path / "esc.jsonl"
    corpus.write_text(json.dumps({"citekey": "esc\x1b[31m-key", "title": "t",
                                  "text": "quokka \x1b[31mred\x1b[0m \x1b]0;title\x07 \x9b1m"
                                          + " filler" * 500})  # two chunks and more
                      + "\n")
    res = CliRunner().invoke(app, ["ingest", str(corpus), "-c", "esc", "--dsn", sample_db])
    assert res.exit_code == 0, res.output
    shown = "quokka \\x1b[31mred\\x1b[0m \\x1b]0;title\\x07 \\x9b1m"
    for width in ("80", "400"):  # a pipe's lines; the table, which fits 400 columns
        res = CliRunner().invoke(app, ["search", "quokka", "-c", "esc", "--lexical-only",
                                       "--dsn", sample_db], env={"COLUMNS": width})
        assert res.exit_code == 0, res.output
        assert not any(c in res.stdout for c in "\x1b\x07\x9b"), repr(res.stdout)
        assert "esc\\x1b[31m-key" in res.stdout and shown in res.stdout, res.stdout
    res = CliRunner().invoke(app, ["explain", "quokka", "esc\x1b[31m-key", "-c", "esc",
                                   "--lexical-only", "--dsn", sample_db])
    assert res.exit_code == 0, res.output
    assert "\x1b" not in res.stdout, repr(res.stdout)
    assert res.stdout.startswith("esc\\x1b[31m-key: returned"), res.stdout
    assert "chunks of 'esc\\x1b[31m-key'" in res.stdout, res.stdout


def test_ingest_json_holds_the_fields_docs_cli_md_lists(sample_db: str, tmp_path: Path) -> None:
    """docs/cli.md said of `ingest --json` only "one object, notes in it" and named two
    of its sixteen fields; it lists them all now, and the dry run's, and this keeps the
    list and the output the same."""
    import re

    from pgfunnel.cli.main import app

    doc = (Path(__file__).resolve().parent.parent / "docs" / "cli.md").read_text()
    listed = re.search(r'With `--json`: `\{("documents_seen".*?)\}`', doc, re.S)
    dry = re.search(r'`--dry-run`: `\{"documents": \[\{(.*?)\}\], (.*?)\}`', doc, re.S)
    assert listed and dry, "docs/cli.md lists no ingest --json fields"

    def names(text: str) -> list[str]:
        return re.findall(r'"(\w+)"', text)

    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "setup.md").write_text("# Setup\n\nInstall the glacier client first.\n")
    res = CliRunner().invoke(app, ["ingest", str(folder), "-c", "keys", "--json",
                                   "--dsn", sample_db])
    assert res.exit_code == 0, res.output
    assert list(json.loads(res.stdout)) == names(listed.group(1))
    res = CliRunner().invoke(app, ["ingest", str(folder), "--dry-run", "--json"])
    assert res.exit_code == 0, res.output
    plan = json.loads(res.stdout)
    assert list(plan) == ["documents", *names(dry.group(2))]
    assert list(plan["documents"][0]) == names(dry.group(1))


def test_search_json_names_the_version_as_versions_list_does(sample_db: str,
                                                             tmp_path: Path) -> None:
    """`search --json` gave only `index_version_id`, the version's id across the
    database: version 1 of a second collection answered as 2, which `versions list`
    (version numbers per collection) shows nowhere, so an operator checking that a search
    used the active version saw another number. `index_version` is the number."""
    from pgfunnel.cli.main import app

    source = tmp_path / "other.jsonl"
    source.write_text(json.dumps({"citekey": "glacier", "text": "Glaciers move slowly "
                                  "downhill under their own weight."}) + "\n")
    res = CliRunner().invoke(app, ["ingest", str(source), "-c", "other", "--dsn", sample_db])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(app, ["search", "glacier", "-c", "other", "--lexical-only",
                                   "--json", "--dsn", sample_db])
    assert res.exit_code == 0, res.output
    found = json.loads(res.stdout)
    listed = json.loads(CliRunner().invoke(app, ["versions", "list", "-c", "other", "--json",
                                                 "--dsn", sample_db]).stdout)
    (active,) = [v for v in listed if v["state"] == "active"]
    assert found["index_version_id"] == active["id"] != active["version"]
    assert found["index_version"] == active["version"] == 1


def test_search_and_explain_json_hold_every_documented_field(sample_db: str) -> None:
    """`search --json` said nothing of whether the results were reranked, why a rerank was
    skipped, or which index version answered; every field docs/cli.md names is there,
    and the JSON is strict (no NaN or Infinity)."""
    from pgfunnel.cli.main import app

    def strict(text: str) -> Any:
        def refuse(constant: str) -> Any:
            raise AssertionError(f"{constant} in the JSON")
        return json.loads(text, parse_constant=refuse)

    res = CliRunner().invoke(app, ["search", "what is a refund window", "--lexical-only",
                                   "--json", "--dsn", sample_db])
    assert res.exit_code == 0, res.output
    found = strict(res.stdout)
    assert list(found) == ["query", "notices", "search_id", "timings_ms", "reranked",
                           "rerank_skipped_reason", "index_version", "index_version_id",
                           "history", "searched", "followup", "results", "fusion"], found
    assert (found["history"], found["searched"], found["followup"]) == (
        [], "what is a refund window", None)
    assert found["reranked"] is False and found["rerank_skipped_reason"] is None
    assert isinstance(found["index_version_id"], int)
    assert found["index_version"] == 1
    assert found["notices"] == ["pgfunnel: query words not searched: a, is, what"]
    assert found["results"] and set(found["results"][0]) == {
        "chunk_id", "citekey", "title", "heading", "section_path", "text", "ordinal",
        "metadata", "lexical_rank", "lexical_score", "dense_rank", "dense_score",
        "fused_rank", "fused_score", "rerank_rank", "rerank_score", "final_rank",
        "search_id"}
    assert found["results"][0]["dense_rank"] is None
    chunk = f"{found['results'][0]['citekey']}#{found['results'][0]['ordinal']}"
    res = CliRunner().invoke(app, ["explain", "what is a refund window", chunk,
                                   "--lexical-only", "--json", "--dsn", sample_db])
    assert res.exit_code == 0, res.output
    (explained,) = strict(res.stdout)
    assert set(explained) == {
        "target", "chunk_id", "verdict", "lexical_rank", "lexical_score",
        "lexical_exact_score", "lexical_depth", "dense_rank", "dense_score",
        "dense_exact_score", "dense_depth", "fused_rank", "fused_score", "pool_size",
        "final_rank", "citekey", "reason", "notices", "transforms", "reranked",
        "rerank_rank", "rerank_score", "search_id", "replayed_on", "search_config",
        "config_guessed", "capped_chunks", "history", "searched", "followup"}, explained
    assert (explained["transforms"], explained["history"], explained["followup"]) == (
        [], [], None)
    assert (explained["search_id"], explained["replayed_on"], explained["search_config"],
            explained["config_guessed"]) == (None, None, None, [])
    assert explained["final_rank"] == 1 and explained["notices"] == found["notices"]


def test_ingest_dry_run_and_versions_compare_show_control_characters(tmp_path: Path,
                                                                     sample_db: str) -> None:
    """`ingest --dry-run` printed a file's citekey and title, and `versions compare` the
    citekeys that changed, with their control characters raw: a
    file named with an escape sequence recoloured the terminal or set its title. They are
    shown as `\\xNN`, as search and explain show them."""
    from pgfunnel.cli.main import app

    from pgfunnel import versions
    from pgfunnel.db import connect

    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "esc\x1b[31m.md").write_text("# Title \x1b]0;pwned\x07 here\n\nquokka text\n")
    for width in ("80", "400"):  # a pipe's lines; the table, which fits 400 columns
        res = CliRunner().invoke(app, ["ingest", str(folder), "--dry-run"],
                                 env={"COLUMNS": width})
        assert res.exit_code == 0, res.output
        assert not any(c in res.stdout for c in "\x1b\x07"), repr(res.stdout)
        assert "esc\\x1b[31m" in res.stdout and "Title \\x1b]0;pwned\\x07 here" in res.stdout

    corpus = tmp_path / "esc.jsonl"
    docs = [{"citekey": "a\x1b[31m-key", "title": "Quokka",
             "text": "A small marsupial of Rottnest Island."},
            {"citekey": "b-key", "title": "Trucks", "text": "Diesel trucks; a quokka decal."},
            {"citekey": "c-key", "title": "Cars",
             "text": "Engines, gearboxes and tyres of cars; a quokka sticker. " * 5}]
    corpus.write_text("".join(json.dumps(d) + "\n" for d in docs))
    res = CliRunner().invoke(app, ["ingest", str(corpus), "-c", "esc", "--dsn", sample_db])
    assert res.exit_code == 0, res.output
    with connect(sample_db, autocommit=True) as conn:
        # without titles in BM25 the first document loses the query's word
        versions.reindex(conn, "esc", lexical_input="text")
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"query": "quokka"}\n')
    for width in ("80", "400"):
        res = CliRunner().invoke(app, ["versions", "compare", "1", "2", "-c", "esc", "-k", "1",
                                       "--queries", str(queries), "--dsn", sample_db],
                                 env={"COLUMNS": width})
        assert res.exit_code == 0, res.output
        assert "\x1b" not in res.stdout, repr(res.stdout)
        assert "a\\x1b[31m-key" in res.stdout, res.stdout


def test_an_error_naming_a_file_shows_its_control_characters_escaped(tmp_path: Path) -> None:
    """An error line (here ingest's "no text to ingest" and "not valid UTF-8", which name
    the file) printed a file name's escape sequence raw to the terminal. Errors, warnings
    and notes show control characters as \\xNN, as the rest of the output does."""
    from pgfunnel.cli.main import app

    empty = tmp_path / "a\x1b[31mred\x1b]0;pwned\x07.md"
    empty.write_text("")
    latin = tmp_path / "b\x9b2J.md"
    latin.write_bytes(b"caf\xe9\n")
    for path, said in ((empty, "a\\x1b[31mred\\x1b]0;pwned\\x07.md: no text to ingest"),
                       (latin, "b\\x9b2J.md: not valid UTF-8")):
        res = CliRunner().invoke(app, ["ingest", str(path), "--dry-run"])
        assert res.exit_code == 1, res.output
        assert not any(c in res.output for c in "\x1b\x07\x9b"), repr(res.output)
        assert said in res.output, res.output
        assert len(res.output.strip().splitlines()) == 1, res.output


def test_ingest_prune_makes_the_collection_match_the_folder(db: str, tmp_path: Path) -> None:
    """`pgfunnel ingest DIR --prune` deletes the collection's documents this run did not
    read (a file removed, or --exclude'd); `--dry-run --prune` lists them and deletes
    nothing; each output names them, escaped; a folder of no document is refused."""
    from pgfunnel.cli.main import app

    from pgfunnel.tiny_models import build_tiny_bi_encoder

    model = build_tiny_bi_encoder(tmp_path / "bi", dim=32)
    folder = tmp_path / "docs"
    (folder / "drafts").mkdir(parents=True)
    for name in ("setup", "billing", "old\x1b[31m"):
        (folder / f"{name}.md").write_text(f"# {name}\n\nText about {name} here.\n")
    (folder / "drafts" / "plan.md").write_text("# Plan\n\nA roadmap.\n")
    (folder / "faq.jsonl").write_text(json.dumps({"citekey": "faq-1", "text": "Refunds."}) + "\n")

    def run(*args: str) -> Any:
        return CliRunner().invoke(app, ["ingest", *args, "-c", "hb", "--dsn", db],
                                  env={"COLUMNS": "200"})

    def stored() -> list[str]:
        with psycopg.connect(db) as conn:
            return [k for (k,) in conn.execute("select citekey from pgfunnel.document "
                                               "order by 1")]

    res = run(str(folder), "--model", str(model))
    assert res.exit_code == 0, res.output
    everything = ["billing", "drafts/plan", "faq-1", "old\x1b[31m", "setup"]
    assert stored() == everything
    (folder / "old\x1b[31m.md").unlink()
    res = run(str(folder), "--exclude", "drafts", "--prune", "--dry-run", "--json")
    assert res.exit_code == 0, res.output
    plan = json.loads(res.stdout)
    assert (plan["documents_pruned"], plan["pruned"]) == (2, ["drafts/plan", "old\x1b[31m"])
    res = run(str(folder), "--exclude", "drafts", "--prune", "--dry-run")
    assert res.exit_code == 0, res.output
    said = res.stdout.splitlines()
    tail = said[said.index("2 documents of collection 'hb' would be pruned (dry run: "
                           "nothing deleted):"):]
    assert tail == ["2 documents of collection 'hb' would be pruned (dry run: nothing "
                    "deleted):", "  drafts/plan", "  old\\x1b[31m"], res.stdout
    assert stored() == everything
    # a path that holds no document: refused, nothing deleted
    (tmp_path / "empty").mkdir()
    res = run(str(tmp_path / "empty"), "--prune")
    assert res.exit_code == 1 and "nothing to ingest" in res.output, res.output
    assert stored() == everything
    res = run(str(folder), "--exclude", "drafts", "--prune")
    assert res.exit_code == 0, res.output
    assert "\x1b" not in res.stdout, repr(res.stdout)
    assert res.stdout.splitlines()[-3:] == [
        "2 documents of collection 'hb' pruned (not read by this ingest):",
        "  drafts/plan", "  old\\x1b[31m"], res.stdout
    assert stored() == ["billing", "faq-1", "setup"]
    res = run(str(folder), "--exclude", "drafts", "--prune", "--json")
    assert res.exit_code == 0, res.output
    done = json.loads(res.stdout)
    assert (done["documents_pruned"], done["pruned"], done["documents_unchanged"]) == (0, [], 3)
    # a file edited into a copy of another is left out of a folder's ingest, but one
    # stored is written (its old text would stay): not pruned, and the dry run agrees
    (folder / "billing.md").write_text((folder / "setup.md").read_text())
    res = run(str(folder), "--exclude", "drafts", "--prune", "--dry-run", "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["pruned"] == [], res.output
    res = run(str(folder), "--exclude", "drafts", "--prune", "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["pruned"] == [], res.output
    assert stored() == ["billing", "faq-1", "setup"]
    # without --prune, nothing is pruned and the keys say so
    res = run(str(folder / "setup.md"), "--root", str(folder), "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["pruned"] == [], res.output
    assert stored() == ["billing", "faq-1", "setup"]


def test_ctrl_c_during_an_ingest_with_prune_says_nothing_was_pruned(
        db: str, tmp_path: Path) -> None:
    """Ctrl-C while `ingest --prune` waits to write its batch: exit 130, one line saying
    nothing was written and nothing was pruned, and the document it would have pruned is
    still there (the prune runs only once every batch has committed)."""
    import os
    import signal
    import time

    from pgfunnel.cli.main import app

    from pgfunnel.tiny_models import build_tiny_bi_encoder

    model = build_tiny_bi_encoder(tmp_path / "bi", dim=32)
    folder = tmp_path / "docs"
    folder.mkdir()
    for name in ("kept", "stale"):
        (folder / f"{name}.md").write_text(f"# {name}\n\nText about {name}.\n")
    res = CliRunner().invoke(app, ["ingest", str(folder), "-c", "hb", "--model", str(model),
                                   "--dsn", db])
    assert res.exit_code == 0, res.output
    (folder / "stale.md").unlink()
    (folder / "kept.md").write_text("# kept\n\nChanged text about kept.\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    with psycopg.connect(db, autocommit=True) as watcher:
        # the collection's writer lock, held so that the ingest waits at its batch
        watcher.execute("select pg_advisory_lock(hashtext('pgfunnel:ingest:' || 'hb'))")
        proc = _cli_popen(["ingest", str(folder), "-c", "hb", "--prune", "--dsn", db], env)
        try:
            deadline = time.monotonic() + _CLI_START_S
            while not watcher.execute(
                    "select exists (select from pg_stat_activity where wait_event = "
                    "'advisory' and query like '%pgfunnel:ingest:%')").fetchone()[0]:  # type: ignore[index]
                assert proc.poll() is None and time.monotonic() < deadline, proc.poll()
                time.sleep(0.02)
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=180)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 130, err
    said = [line for line in err.splitlines() if line.startswith("interrupted")]
    assert said == ["interrupted: no document was written to collection 'hb' (each batch of "
                    "documents is all or nothing); nothing was pruned; run the same ingest "
                    "again"], err
    with psycopg.connect(db) as conn:
        assert [k for (k,) in conn.execute("select citekey from pgfunnel.document "
                                           "order by 1")] == ["kept", "stale"]


def _run_into_a_closed_pipe(args: list[str], closed: str = "stdout",
                            read_first: int = 0) -> tuple[int, str]:
    """`pgfunnel ARGS` whose reader of ``closed`` (stdout or stderr) goes away, as `| head`
    does: at once, or after reading ``read_first`` bytes. Its exit status, and what it
    wrote on the other stream."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    other = "stderr" if closed == "stdout" else "stdout"
    proc = subprocess.Popen([sys.executable, "-m", "pgfunnel.cli.main", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        pipe = getattr(proc, closed)
        if read_first:
            pipe.read(read_first)
        pipe.close()
        said = getattr(proc, other).read().decode()
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, said


@pytest.mark.parametrize("args", [
    ["search", "refund", "--lexical-only"],
    ["search", "the refund", "--lexical-only", "--json"],
    ["explain", "refund", "refunds-annual", "--lexical-only"],
    ["versions", "list"],
    ["versions", "list", "--json"],
    ["doctor"],
    ["ingest", "{data}/helpcenter.jsonl", "--dry-run"],
    ["ingest", "{data}/helpcenter.jsonl", "--dry-run", "--json"],
    ["search", "--help"],
])
def test_a_reader_that_closes_the_pipe_ends_the_command_quietly(sample_db: str,
                                                                args: list[str]) -> None:
    """`pgfunnel search ... | head -1`: the reader closes the pipe, and the command exited
    1 with nothing said (rich's and click's handling), or 0, or wrote a BrokenPipeError
    traceback or "Exception ignored ... BrokenPipeError" at exit. It now stops quietly
    with 141 (128 + SIGPIPE, what a shell says of git or grep so stopped)."""
    import pgfunnel.data

    data = str(Path(pgfunnel.data.__file__).parent)
    args = [a.format(data=data) for a in args]
    if args[-1] != "--help" and "--dry-run" not in args:
        args += ["--dsn", sample_db]
    status, said = _run_into_a_closed_pipe(args)
    assert status == 141, (status, said)
    assert "Traceback" not in said and "BrokenPipe" not in said and "error" not in said, said


def test_a_long_output_whose_reader_goes_part_way_ends_quietly(tmp_path: Path) -> None:
    """A reader that reads the first bytes of a long output and goes (`| head -c 100`):
    the output is more than the pipe holds, and Python gave up on the rest of the write
    without a word, exit 0; the command now ends as for a pipe closed at once, 141."""
    for i in range(1500):
        (tmp_path / f"page{i:04d}.md").write_text(f"# Page {i}\n\nsome words of page {i}\n")
    status, said = _run_into_a_closed_pipe(["ingest", str(tmp_path), "--dry-run", "--json"],
                                           read_first=100)
    assert status == 141, (status, said)
    assert said == "", said


def test_a_reader_of_stderr_that_goes_ends_the_command_quietly(sample_db: str) -> None:
    """`pgfunnel search 'the refund' 2>&1 >/dev/null | head -0`: the warning line had
    nowhere to go."""
    status, said = _run_into_a_closed_pipe(
        ["search", "the refund", "--lexical-only", "--dsn", sample_db], closed="stderr")
    assert status == 141, (status, said)


def test_a_python_warning_is_one_warning_line(monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path) -> None:
    """A warning the command does not say in its own words (pgfunnel's `this role may not
    replace pgfunnel._hnsw_walk`, a library's while a model loads) was printed by Python's
    handler: `/path/to/pgfunnel/...py:382: UserWarning: ...` and a second line of source.
    It is now one `warning:` line on stderr, its control characters escaped, as the
    CLI's own warnings are; stdout holds only the command's output."""
    from pgfunnel.cli.main import app

    import pgfunnel.db
    from pgfunnel.errors import warn_at_caller

    def stop_warning(home: Path | None = None) -> bool:
        # the trigger only (reaching the walk's privilege warning takes a role that may
        # build an index but not replace a function); the warning is the library's own
        warn_at_caller("pgfunnel: this role may not replace pgfunnel._hnsw_walk\x1b[31m, "
                       "so ...")
        warn_at_caller(FutureWarning("a library's\nfuture"), FutureWarning)
        return False

    monkeypatch.setattr(pgfunnel.db, "stop_embedded", stop_warning)
    res = CliRunner().invoke(app, ["stop"], env={"PGFUNNEL_HOME": str(tmp_path)})
    assert res.exit_code == 0, res.output
    assert res.stderr.splitlines() == [
        "warning: pgfunnel: this role may not replace pgfunnel._hnsw_walk\\x1b[31m, so ...",
        "warning: FutureWarning: a library's\\x0afuture"], res.stderr
    assert res.stdout.startswith("no embedded Postgres running in "), res.stdout


# a follow-up turn of the help-center queries (pgfunnel/data/helpcenter_queries.jsonl)
_FOLLOWUP = "what about monthly plans?"
_HISTORY = ["do you offer nonprofit discounts?"]
_RESOLVED = "offer nonprofit discounts what about monthly plans?"


def test_search_with_history_searches_the_follow_up_as_the_library_does(
        sample_db: str) -> None:
    # `pgfunnel search` had no way to pass the earlier turns: a chat app's follow-up
    # (Funnel.search(history=...)) could not be reproduced from the shell
    from pgfunnel.cli.main import app

    from pgfunnel.search import Funnel

    args = ["search", _FOLLOWUP, "--lexical-only", "-k", "3", "--dsn", sample_db]
    history = [a for turn in _HISTORY for a in ("--history", turn)]
    res = CliRunner().invoke(app, [*args, *history, "--json"])
    assert res.exit_code == 0, res.output
    said = json.loads(res.output[res.output.index("{"):])
    assert said["query"] == _FOLLOWUP and said["history"] == _HISTORY
    assert said["searched"] == _RESOLVED
    assert said["followup"] == {
        "step": "followup", "original": _FOLLOWUP, "query": _RESOLVED,
        "carried_terms": ["offer", "nonprofit", "discounts"],
        "reason": "follow-up cue 'what about'; carried offer, nonprofit, discounts from an "
                  "earlier turn"}
    with Funnel(sample_db, "default", embedder=None) as funnel:
        expected = funnel.search(_FOLLOWUP, history=_HISTORY, k=3)
        alone = funnel.search(_FOLLOWUP, k=3)
    got = [r["chunk_id"] for r in said["results"]]
    assert got == [r.chunk_id for r in expected.results]
    assert got != [r.chunk_id for r in alone.results]  # the history matters here
    assert said["results"][0]["citekey"] == "discounts-monthly"

    # without --history: the keys are there, saying nothing was resolved
    res = CliRunner().invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    said = json.loads(res.output[res.output.index("{"):])
    assert (said["history"], said["searched"], said["followup"]) == ([], _FOLLOWUP, None)
    assert [r["chunk_id"] for r in said["results"]] == [r.chunk_id for r in alone.results]

    # the text output says what was searched, with the resolver's reason
    res = CliRunner().invoke(app, [*args, *history], env={"COLUMNS": "400"})
    assert res.exit_code == 0, res.output
    assert (f"follow-up: searched {_RESOLVED!r}, not {_FOLLOWUP!r} as given (follow-up cue "
            "'what about'; carried offer, nonprofit, discounts from an earlier turn)"
            ) in res.output, res.output
    assert "discounts-monthly" in res.output
    # a turn with a topic of its own is searched as typed, and the line says so
    res = CliRunner().invoke(app, ["search", "how long are audit logs kept?", "--lexical-only",
                                   "--dsn", sample_db, *history], env={"COLUMNS": "400"})
    assert res.exit_code == 0, res.output
    assert ("follow-up: searched 'how long are audit logs kept?' as given (has its own "
            "topic; unchanged)") in res.output, res.output


def test_explain_with_history_follows_the_text_the_search_searched(sample_db: str) -> None:
    from pgfunnel.cli.main import app

    from pgfunnel.explain import explain
    from pgfunnel.search import Funnel

    args = ["explain", _FOLLOWUP, "discounts-monthly#0", "--lexical-only", "-k", "3",
            "--dsn", sample_db, "--history", _HISTORY[0]]
    res = CliRunner().invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    [said] = json.loads(res.output[res.output.index("["):])
    with Funnel(sample_db, "default", embedder=None) as funnel:
        expected = explain(funnel, _FOLLOWUP, "discounts-monthly#0", history=_HISTORY, k=3)
        alone = explain(funnel, _FOLLOWUP, "discounts-monthly#0", k=3)
    assert (said["verdict"], said["final_rank"]) == (expected.verdict, expected.final_rank)
    assert said["final_rank"] == 1 and alone.final_rank != 1  # the history matters here
    assert said["history"] == _HISTORY and said["searched"] == _RESOLVED
    assert said["followup"]["query"] == _RESOLVED
    assert said["followup"]["carried_terms"] == ["offer", "nonprofit", "discounts"]
    assert said["transforms"] == expected.transforms == [said["followup"]]

    res = CliRunner().invoke(app, args, env={"COLUMNS": "400"})
    assert res.exit_code == 0, res.output
    assert f"follow-up: searched {_RESOLVED!r}, not {_FOLLOWUP!r} as given" in res.output
    assert "discounts-monthly#0: returned" in res.output, res.output


@pytest.mark.parametrize("command", [["search", "refund"], ["explain", "refund", "1"]])
@pytest.mark.parametrize(("turn", "said"), [
    ("", "turn 2 of 2 is empty; each --history is one earlier turn's text: ''"),
    ("   ", "turn 2 of 2 is empty; each --history is one earlier turn's text: '   '"),
    ("a\x00b", "turn 2 of 2 contains a NUL byte, which Postgres text cannot hold: 'a\\x00b'"),
    ("red \x1b[31mtext", "turn 2 of 2 holds the control character \\x1b: "
                         "'red \\x1b[31mtext'"),
])
def test_a_bad_history_turn_is_one_error_line_naming_the_flag(
        sample_db: str, command: list[str], turn: str, said: str) -> None:
    from pgfunnel.cli.main import app

    res = CliRunner().invoke(app, [*command, "--lexical-only", "--dsn", sample_db,
                                   "--history", "refunds", "--history", turn])
    assert res.exit_code == 1, res.output
    assert res.output == f"error: --history: {said}\n", res.output


def test_explain_search_id_prints_the_traces_cosine_for_a_dense_candidate(
        sample_db: str) -> None:
    """A logged candidate's answer has no exact scores: its line read `cosine -` for a chunk
    the trace had scored in the dense leg. It prints the trace's cosine similarity, the
    one the search returned, and its BM25 score beside it."""
    from pgfunnel.cli.main import app

    env = {"COLUMNS": "300", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    res = CliRunner().invoke(app, ["search", "refund plan", "-k", "3", "--trace", "--json",
                                   "--dsn", sample_db], env=env)
    assert res.exit_code == 0, res.output
    found = json.loads(res.stdout)
    both = [r for r in found["results"]
            if r["dense_score"] is not None and r["lexical_score"] is not None]
    assert both, found["results"]
    top = both[0]
    res = CliRunner().invoke(app, ["explain", "--search-id", str(found["search_id"]),
                                   str(top["chunk_id"]), "--dsn", sample_db], env=env)
    assert res.exit_code == 0, res.output
    assert f"cosine {top['dense_score']:.4f})" in res.output, res.output
    assert f"BM25 {top['lexical_score']:.4f})" in res.output, res.output


def test_explain_search_id_answers_from_the_logged_search(sample_db: str) -> None:
    # `pgfunnel explain --search-id 1234 CHUNK`: a complaint about a logged search could
    # only be explained by retyping its query and options, and for today's data
    from pgfunnel.cli.main import app

    env = {"COLUMNS": "300", "HF_HUB_OFFLINE": "1"}
    res = CliRunner().invoke(app, ["search", "refund plan", "-k", "1", "--lexical-only",
                                   "--trace", "--json", "--dsn", sample_db], env=env)
    assert res.exit_code == 0, res.output
    found = json.loads(res.stdout)
    sid, top = found["search_id"], found["results"][0]
    assert sid is not None
    res = CliRunner().invoke(app, ["explain", "--search-id", str(sid), str(top["chunk_id"]),
                                   "nosuch#0", "--dsn", sample_db, "--json"], env=env)
    assert res.exit_code == 0, res.output
    returned, missing = json.loads(res.stdout)
    assert returned["verdict"] == "returned" and returned["final_rank"] == 1
    assert returned["search_id"] == sid and returned["searched"] == "refund plan"
    assert missing["verdict"] == "filtered out or does not exist"
    assert missing["replayed_on"] is not None
    res = CliRunner().invoke(app, ["explain", "--search-id", str(sid), str(top["chunk_id"]),
                                   "--dsn", sample_db], env=env)
    assert res.exit_code == 0, res.output
    assert f"search {sid} searched 'refund plan'" in res.output
    assert f"search {sid} logged it: returned at rank 1" in res.output
    # the trace's BM25 score, not "BM25 -" (a logged candidate has no exact score)
    assert f"BM25 {top['lexical_score']:.4f})" in res.output, res.output
    assert "cosine -)" in res.output, res.output
    for extra, flag in ((["-k", "3"], "--k/-k"), (["--rerank"], "--rerank")):
        res = CliRunner().invoke(app, ["explain", "--search-id", str(sid), "1", *extra,
                                       "--dsn", sample_db], env=env)
        assert res.exit_code == 1 and f"--search-id: takes no {flag}: the logged search" \
            in res.output, res.output
    res = CliRunner().invoke(app, ["explain", "--search-id", "987654", "1", "--dsn",
                                   sample_db], env=env)
    # the option named as typed, as for its other refusals
    assert res.exit_code == 1 and "error: --search-id: search 987654 is not in the search " \
        "log: no traced search has that id" in res.output, res.output
    res = CliRunner().invoke(app, ["explain", "refund plan", "--dsn", sample_db], env=env)
    assert res.exit_code == 1 and "give one or more chunks to explain" in res.output


def test_explain_search_id_shows_the_depth_each_leg_read(sample_db: str) -> None:
    """A logged candidate's line read `depth -` for both legs (the config holds the depths
    given, NULL by default); it shows the depth each leg read, the one explain without
    --search-id shows for the same search, a depth widened with the pool too."""
    from pgfunnel.cli.main import app

    env = {"COLUMNS": "300", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    # one chunk a source and a pool of k: too few sources widen the pool and the depths
    options = ["-k", "10", "--overfetch", "1", "--per-source-cap", "1"]
    for legs in ([], ["--lexical-only"]):
        res = CliRunner().invoke(app, ["search", "refund plan", *options, *legs, "--trace",
                                       "--json", "--dsn", sample_db], env=env)
        assert res.exit_code == 0, res.output
        found = json.loads(res.stdout)
        chunk = str(found["results"][0]["chunk_id"])
        res = CliRunner().invoke(app, ["explain", "--search-id", str(found["search_id"]),
                                       chunk, "--json", "--dsn", sample_db], env=env)
        assert res.exit_code == 0, res.output
        logged = json.loads(res.stdout)[0]
        res = CliRunner().invoke(app, ["explain", "refund plan", chunk, *options, *legs,
                                       "--json", "--dsn", sample_db], env=env)
        assert res.exit_code == 0, res.output
        live = json.loads(res.stdout)[0]
        assert logged["replayed_on"] is None and logged["lexical_depth"] is not None
        assert (logged["lexical_depth"], logged["dense_depth"]) == (
            live["lexical_depth"], live["dense_depth"])
        if legs:
            assert logged["dense_depth"] is None
        else:
            # the pool widened: a depth past the first one (40), which the config cannot tell
            assert max(logged["lexical_depth"], logged["dense_depth"]) > 40, logged
        res = CliRunner().invoke(app, ["explain", "--search-id", str(found["search_id"]),
                                       chunk, "--dsn", sample_db], env=env)
        assert res.exit_code == 0, res.output
        assert f"(depth {logged['lexical_depth']}, BM25 " in res.output, res.output
        dense = "-" if logged["dense_depth"] is None else logged["dense_depth"]
        assert f"(depth {dense}, cosine " in res.output, res.output
    # a row logged before the depths were recorded: the depth given, else `-`
    with psycopg.connect(sample_db, autocommit=True) as conn:
        conn.execute("update pgfunnel.search_log set notes = notes - 'lexical_depth_used' "
                     "- 'dense_depth_used' where id = %s", (found["search_id"],))
    res = CliRunner().invoke(app, ["explain", "--search-id", str(found["search_id"]), chunk,
                                   "--json", "--dsn", sample_db], env=env)
    assert res.exit_code == 0, res.output
    old = json.loads(res.stdout)[0]
    assert (old["lexical_depth"], old["dense_depth"]) == (None, None)


def test_explain_search_id_replay_advises_only_what_can_be_done(sample_db: str) -> None:
    # a chunk the logged search did not log was replayed, and its advice read "raise
    # --dense-depth or rephrase the query": a flag the --search-id form refuses
    from pgfunnel.cli.main import app

    env = {"COLUMNS": "300", "HF_HUB_OFFLINE": "1"}
    res = CliRunner().invoke(app, ["search", "refund plan", "-k", "1", "--trace", "--json",
                                   "--dsn", sample_db], env=env)
    assert res.exit_code == 0, res.output
    sid = json.loads(res.stdout)["search_id"]
    with psycopg.connect(sample_db, autocommit=True) as conn:
        # chunks it did not log: for each, the replay's advice
        rows = conn.execute("select ch.id from pgfunnel.chunk ch where not exists (select "
                            "from pgfunnel.search_trace t where t.search_id = %s and "
                            "t.chunk_id = ch.id) order by ch.id", (sid,)).fetchall()
    unlogged = [str(r[0]) for r in rows]
    res = CliRunner().invoke(app, ["explain", "--search-id", str(sid), *unlogged, "--json",
                                   "--dsn", sample_db], env=env)
    assert res.exit_code == 0, res.output
    verdicts = {e["verdict"] for e in json.loads(res.stdout)}
    assert verdicts <= {"in no leg at its depth", "not in pool"}, verdicts
    res = CliRunner().invoke(app, ["explain", "--search-id", str(sid), *unlogged,
                                   "--dsn", sample_db], env=env)
    assert res.exit_code == 0, res.output
    reasons = [line for line in res.stdout.splitlines()
               if line.startswith("  not among the ")]
    assert len(reasons) == len(unlogged)
    for reason in reasons:
        assert "raise" not in reason and "rephrase" not in reason, reason
    # the depth advice names a search's flag, and how to try it: not this form's
    assert any("a search with a deeper --dense-depth" in r for r in reasons), reasons
    assert all(r.endswith("(explain its text without --search-id to try one)")
               for r in reasons if "could reach it" in r and "only a search" not in r)


def test_explain_search_id_replays_lexical_only_without_a_model(sample_db: str) -> None:
    # a logged search's replay could only run with the version's embedding model (the
    # --search-id form refused --lexical-only), though a search logged without a query
    # vector never needs it and a machine without the model could not replay one
    from pgfunnel.cli.main import app

    env = {"COLUMNS": "300", "HF_HUB_OFFLINE": "1"}
    sids = {}
    for mode in ("lexical", "hybrid"):
        res = CliRunner().invoke(app, ["search", "refund plan", "-k", "1", "--trace", "--json",
                                       "--dsn", sample_db,
                                       *(["--lexical-only"] if mode == "lexical" else [])],
                                 env=env)
        assert res.exit_code == 0, res.output
        sids[mode] = json.loads(res.stdout)["search_id"]
    with psycopg.connect(sample_db, autocommit=True) as conn:
        # the version's model is nowhere to be loaded from: a replay that embeds fails
        conn.execute("update pgfunnel.index_version set embedding_model = %s",
                     ("/nonexistent/pgfunnel-test-model",))
    base = ["explain", "nosuch#0", "--dsn", sample_db, "--json"]
    res = CliRunner().invoke(app, [*base, "--search-id", str(sids["lexical"])], env=env)
    assert res.exit_code == 0, res.output
    (lexical,) = json.loads(res.stdout)
    assert lexical["replayed_on"] is not None and lexical["dense_depth"] is None
    res = CliRunner().invoke(app, [*base, "--search-id", str(sids["hybrid"])], env=env)
    assert res.exit_code == 1 and "pgfunnel-test-model" in res.output, res.output
    # the error names what this form can do about it
    assert res.output.startswith("error: --search-id: the replay embeds the logged text "), \
        res.output
    assert res.output.rstrip().endswith("; --lexical-only replays the lexical leg alone, "
                                        "without it"), res.output
    res = CliRunner().invoke(app, [*base, "--search-id", str(sids["hybrid"]),
                                   "--lexical-only"], env=env)
    assert res.exit_code == 0, res.output
    (hybrid,) = json.loads(res.stdout)
    assert hybrid["replayed_on"] is not None and hybrid["dense_depth"] is None
    # in the flag typed, not the Funnel parameter it sets ("embedder=None" read as Python)
    said = (f"pgfunnel: --lexical-only: the replay of search {sids['hybrid']} runs the "
            "lexical leg alone, loading no embedding model")
    assert hybrid["notices"] == [said]
    res = CliRunner().invoke(app, [*base[:-1], "--search-id", str(sids["hybrid"]),
                                   "--lexical-only"], env=env)
    assert res.exit_code == 0, res.output
    assert f"warning: {said}" in " ".join(res.stderr.split()), res.stderr
    assert "embedder" not in res.output


def test_explain_search_id_without_a_chunk_asks_for_the_chunks() -> None:
    # `explain --search-id 7` said "Missing argument 'QUERY'": that form takes no query
    from pgfunnel.cli.main import app

    for given in (["--search-id", "7"], ["--search-id=7"], ["--search-id", "7", "--json"]):
        res = CliRunner().invoke(app, ["explain", *given])
        assert res.exit_code == 1, res.output
        assert res.output == (
            "error: --search-id: give the chunks to explain after the id: pgfunnel explain "
            "--search-id 7 CHUNKS... (chunk ids, CITEKEY#ORDINAL or a document's CITEKEY); "
            "the search's own text and options are used\n"), res.output
    # without --search-id (or with it as query text, after --) the query is still asked for
    for given in ([], ["--", "--search-id"]):
        res = CliRunner().invoke(app, ["explain", *given])
        assert res.exit_code != 0 and "--search-id: give the chunks" not in res.output
    assert "Missing argument 'QUERY'" in CliRunner().invoke(app, ["explain"]).output


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def test_reindex_and_versions_print_results_on_stdout_and_notes_on_stderr(
        sample_db: str, tmp_path: Path, embedder: Any) -> None:
    """`reindex` printed its notes ("created version 2 (building)", "vectors copied from
    version 1 ...") on stdout, indented, before its summary; `versions list` its notes on
    an interrupted build or drop; `versions compare` the chunks it indexed first: `pgfunnel
    versions list | grep ...` or `reindex > log` got them mixed with the results. They are
    now `note:` lines on stderr, and with --json stdout is one JSON document."""
    from pgfunnel.cli.main import app

    from pgfunnel import versions
    from pgfunnel.db import connect
    from pgfunnel.ingest import Ingester
    from pgfunnel.sources import DocumentRecord

    env = {"COLUMNS": "300", "HF_HUB_OFFLINE": "1"}
    res = CliRunner().invoke(app, ["reindex", "--analyzer", "simple_v1", "--dsn", sample_db],
                             env=env)
    assert res.exit_code == 0, res.output
    out = _lines(res.stdout)
    assert [line.split(":")[0].split(" is ")[0] for line in out] == [
        "version 2 of 'default'", "validated", "version 2"], res.stdout
    assert out[2].startswith("version 2 is ready."), res.stdout
    assert "note: created version 2 (building)" in res.stderr, res.stderr
    assert "note: vectors copied from version 1 (same model" in res.stderr, res.stderr
    assert "note" not in res.stdout and "copied from" not in res.stdout, res.stdout

    # a chunk ingested since version 2's build: compare indexes it first, and says so
    with connect(sample_db, autocommit=True) as conn:
        Ingester(conn, "default", embedder=embedder).ingest([DocumentRecord(
            citekey="late-doc", title="Late", text="A quokka guide to refunds. " * 5)])
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"query": "quokka refunds"}\n{"query": "refund"}\n')
    res = CliRunner().invoke(app, ["versions", "compare", "1", "2", "--queries", str(queries),
                                   "--dsn", sample_db], env=env)
    assert res.exit_code == 0, res.output
    assert _lines(res.stdout)[0].startswith("2 queries, k=10: mean overlap@10 "), res.stdout
    assert "lacked" not in res.stdout, res.stdout
    assert "note: version 2 lacked 1 chunk ingested since its build" in res.stderr, res.stderr

    def stop(stage: str, n: int, total: int | None) -> None:
        if stage == "embedding":
            raise KeyboardInterrupt  # a reindex cut short: version 3 stays 'building'

    with connect(sample_db, autocommit=True) as conn:
        with pytest.raises(KeyboardInterrupt):
            versions.reindex(conn, "default", analyzer="simple_v6", batch_size=4,
                             progress=stop)
        # a drop of version 2 cut short leaves it marked
        conn.execute("update pgfunnel.index_version set params = params || "
                     "'{\"dropping\": true}' where version = 2")
    res = CliRunner().invoke(app, ["versions", "list", "--dsn", sample_db], env=env)
    assert res.exit_code == 0, res.output
    out = _lines(res.stdout)
    assert out[0].strip() == "index versions of 'default'", res.stdout
    assert "note" not in res.stdout and "finishes it" not in res.stdout, res.stdout
    assert "ready, drop unfinished" in res.stdout, res.stdout
    notes = _lines(res.stderr)
    assert len(notes) == 2, res.stderr
    # the commands to paste carry the --dsn typed (shell-quoted), as every hint does
    dsn = shlex.quote(sample_db)
    assert notes[0].startswith("note: version 3 is not being built (its reindex was "
                               f"interrupted): `pgfunnel reindex --dsn {dsn} -c default"), \
        res.stderr
    assert notes[1] == ("note: the drop of version 2 did not finish, and it cannot be "
                        f"activated; `pgfunnel versions drop --dsn {dsn} 2 -c default` "
                        "finishes it"), notes

    # --json: stdout is one JSON document, whatever the text output would have noted
    for args in (["versions", "list"], ["versions", "compare", "1", "2", "--queries",
                                         str(queries)], ["doctor"]):
        res = CliRunner().invoke(app, [*args, "--dsn", sample_db, "--json"], env=env)
        assert res.exit_code in (0, 3), res.output
        json.loads(res.stdout)
        assert res.stderr == "", res.stderr
    # versions list --json left out the notes the text output gives: each version has its
    # own, with the --dsn typed, as in the text
    res = CliRunner().invoke(app, ["versions", "list", "--dsn", sample_db, "--json"], env=env)
    said = {v["version"]: v["notes"] for v in json.loads(res.stdout)}
    assert said[1] == [], said
    assert said[2] == [notes[1].removeprefix("note: ")], said
    assert said[3] == [notes[0].removeprefix("note: ")], said


def test_reindex_progress_says_whether_it_copies_or_embeds(sample_db: str) -> None:
    """A reindex whose every vector was copied from a version of the same model (the
    summary: "0 embedded, N with vectors copied") showed "embedding chunks N/N": the
    progress now names what is being done."""
    from pgfunnel.cli.main import app

    env = {"COLUMNS": "300", "HF_HUB_OFFLINE": "1"}
    res = CliRunner().invoke(app, ["reindex", "--analyzer", "simple_v1", "--dsn", sample_db],
                             env=env)
    assert res.exit_code == 0, res.output
    assert "with vectors copied" in res.stdout, res.stdout
    said = [line for line in res.stderr.splitlines() if line.startswith("reindex: ")]
    assert said and said[0].startswith("reindex: copying vectors "), res.stderr
    assert "embedding chunks" not in res.stderr, res.stderr

    res = CliRunner().invoke(app, ["reindex", "--analyzer", "simple_v6", "--reembed",
                                   "--dsn", sample_db], env=env)
    assert res.exit_code == 0, res.output
    said = [line for line in res.stderr.splitlines() if line.startswith("reindex: ")]
    assert said and said[0].startswith("reindex: embedding chunks "), res.stderr
    assert "copying" not in res.stderr, res.stderr


def test_reindex_progress_names_both_when_it_copies_some_vectors() -> None:
    # chunks whose embedding input differs under the source version's are embedded, the
    # rest copied: the bar names both
    from pgfunnel.cli.versions import _Bars

    bars = _Bars(enabled=False)
    bars("embedding-total", 0, 8)
    bars("copied", 4, None)
    bars("embedding", 4, None)
    assert bars.progress.tasks[bars.tasks["embedding"]].description == "copying vectors"
    bars("embedding", 4, None)
    assert bars.progress.tasks[bars.tasks["embedding"]].description == \
        "embedding chunks and copying vectors"


def test_reindex_progress_starts_as_copying_when_it_copies_from_a_version(
        sample_db: str) -> None:
    # the bar began as "embedding chunks 0/N" and was renamed by the first batch's
    # "copied": the library now says, before "embedding-total", which version it copies
    from pgfunnel.cli.versions import _Bars

    from pgfunnel import versions
    from pgfunnel.db import connect

    seen: list[tuple[str, int, int | None]] = []
    with connect(sample_db, autocommit=True) as conn:
        versions.reindex(conn, "default", analyzer="simple_v1",
                         progress=lambda s, n, t: seen.append((s, n, t)))
        stages = [s for s, _, _ in seen]
        assert stages.index("copy-from") < stages.index("embedding-total"), stages
        assert ("copy-from", 1, None) in seen, seen
        seen.clear()
        versions.reindex(conn, "default", analyzer="simple_v6", reembed=True,
                         progress=lambda s, n, t: seen.append((s, n, t)))
        assert "copy-from" not in [s for s, _, _ in seen], seen

    bars = _Bars(enabled=False)
    bars("copy-from", 1, None)
    bars("embedding-total", 0, 8)
    assert bars.progress.tasks[bars.tasks["embedding"]].description == "copying vectors"
    bars("embedding", 8, None)
    # the batch embedded every chunk after all: the bar says what happened
    assert bars.progress.tasks[bars.tasks["embedding"]].description == "embedding chunks"


def test_eval_prints_its_tables_on_stdout_and_where_it_wrote_them_on_stderr(
        sample_db: str, tmp_path: Path) -> None:
    """`eval --out DIR` ended its tables with `wrote DIR/report.json, ...` on stdout, so
    `pgfunnel eval ... --out DIR > table.txt` held that line too; it now goes to stderr,
    as `stored N judgments ...` of --store-qrels does."""
    from pgfunnel.cli.main import app

    queries = tmp_path / "q.jsonl"
    queries.write_text('{"query_id": "q1", "query": "what does ERR-5245 mean", '
                       '"slice": "identifier", "relevant": {"err-5245": 1}}\n')
    res = CliRunner().invoke(app, ["eval", str(queries), "--preset", "lexical", "--out",
                                   str(tmp_path / "r"), "--dsn", sample_db],
                             env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert _lines(res.stdout)[0].startswith("judging: per "), res.stdout
    assert "wrote" not in res.stdout, res.stdout
    assert f"wrote {tmp_path / 'r'}/report.json" in res.stderr, res.stderr
    assert (tmp_path / "r" / "report.md").exists()


def test_dsn_prints_the_connection_string_alone(sample_db: str) -> None:
    """`psql "$(pgfunnel dsn)"` takes stdout whole: the DSN and nothing else."""
    from pgfunnel.cli.main import app

    res = CliRunner().invoke(app, ["dsn", "--dsn", sample_db])
    assert res.exit_code == 0, res.output
    assert (res.stdout, res.stderr) == (sample_db + "\n", ""), res.output


def test_compare_line_says_how_a_logged_search_was_replayed() -> None:
    # the reader and the legs a --last query was replayed with; a lexical-only search of
    # no named reader read "(as lexical leg only)"
    from pgfunnel.cli.versions import replayed_as

    from pgfunnel.versions import QueryDiff

    def diff(**kw: object) -> QueryDiff:
        return QueryDiff(query_id="q", query="refund", overlap=0.5, top1_same=False,
                         only_a=[], only_b=[], **kw)  # type: ignore[arg-type]

    assert replayed_as(diff()) == ""
    assert replayed_as(diff(legs="lexical")) == " (lexical leg only)"
    assert replayed_as(diff(reader={"principals": ["support-staff"], "tenant": "acme"},
                            legs="dense")) == (" (as principals support-staff; tenant acme; "
                                               "dense leg only)")
    assert replayed_as(diff(reader={"as_of": "2026-01-01T00:00:00Z"})) == ""


def test_a_queries_file_that_cannot_be_used_is_named_by_its_flag(
        db: str, tmp_path: Path) -> None:
    """versions compare named a queries file it could not read as 'queries: ...', the
    library's argument, not --queries (eval --out naming a file: test_harness.py)."""
    from pgfunnel.cli.main import app

    env = {"COLUMNS": "300"}
    missing = tmp_path / "missing.jsonl"
    res = CliRunner().invoke(app, ["versions", "compare", "1", "1", "--queries", str(missing),
                                   "--dsn", db], env=env)
    assert res.exit_code == 1, res.output
    assert res.output.startswith(f"error: --queries: cannot read {missing}: "), res.output
    blank = tmp_path / "blank.jsonl"
    blank.write_text('{"query": "refund"}\n{"query": " "}\n')
    res = CliRunner().invoke(app, ["versions", "compare", "1", "1", "--queries", str(blank),
                                   "--dsn", db], env=env)
    assert res.exit_code == 1, res.output
    assert res.output.startswith(f"error: --queries: {blank}: line 2 has no query text"), \
        res.output


@pytest.mark.parametrize("args", [["activate", "-1"], ["retire", "-2", "-c", "docs"],
                                  ["drop", "-1"], ["compare", "-1", "2", "--last", "5"]])
def test_a_negative_version_number_is_said_to_be_one(args: list[str]) -> None:
    """A negative version, which the parser takes for an option, was answered "No such
    option: -1" (exit 2), naming no version."""
    from pgfunnel.cli.main import app

    res = CliRunner().invoke(app, ["versions", *args], env={"COLUMNS": "300"})
    said = " ".join(res.output.split())
    assert res.exit_code == 2, said
    number = next(a for a in args if a.startswith("-") and a[1:].isdigit())
    assert (f"{number} is not a version number: versions are numbered from 1 "
            "(`pgfunnel versions list` shows them)") in said, said
    assert "No such option" not in said


@pytest.mark.parametrize("name", ["", "  "])
def test_an_empty_collection_is_refused_alike_by_every_command(name: str) -> None:
    """search said "--collection: must be a non-empty name" while versions list, delete
    and rollback looked the name up and said "collection '' does not exist"."""
    import typer
    from pgfunnel.cli.main import app

    root = typer.main.get_command(app)
    taking = [n for n in walk_names(root)
              if any("-c" in p.opts for p in getattr(_command(root, n), "params", []))]
    assert {"search", "delete", "versions list", "versions rollback"} <= set(taking)
    for command in taking:
        res = CliRunner().invoke(app, [*command.split(), "-c", name])
        assert res.exit_code == 1, (command, res.output)
        assert f"--collection: must be a non-empty name, got {name!r}" in res.output, command
    # drop-collection takes the name as its argument: named so, by the same rule
    res = CliRunner().invoke(app, ["versions", "drop-collection", name, "--yes"])
    assert res.exit_code == 1, res.output
    assert f"error: COLLECTION: must be a non-empty name, got {name!r}" in res.output


def _command(group: Any, name: str) -> Any:
    for word in name.split():
        group = group.commands[word]
    return group


@pytest.mark.parametrize("keys", [[""], ["err-6358", " "]])
def test_delete_of_an_empty_citekey_is_a_usage_error(sample_db: str, keys: list[str]) -> None:
    """`delete ""` counted the empty key "not in collection" and exited 0; a citekey that
    no document has is still that (test_demo)."""
    from pgfunnel.cli.main import app

    res = CliRunner().invoke(app, ["delete", *keys, "--dsn", sample_db])
    assert res.exit_code == 2, res.output
    text = " ".join(res.output.replace("│", " ").split())
    assert "Invalid value for 'CITEKEYS...': a citekey is empty" in text
    with psycopg.connect(sample_db) as conn:
        row = conn.execute("select count(*) from pgfunnel.document where citekey = 'err-6358'"
                           ).fetchone()
    assert row is not None and row[0] == 1  # nothing was deleted


@pytest.mark.parametrize("command", ["search", "explain", "embed"])
def test_an_option_without_its_value_gets_no_query_text_hint(command: str) -> None:
    """`search -c` was told "Option '-c' requires an argument.; to search for text that
    starts with '-', put -- before it: pgfunnel search -c -- ''", a command searching ''."""
    from pgfunnel.cli.main import app

    res = CliRunner().invoke(app, [command, "-c"])
    assert res.exit_code == 2
    text = " ".join(res.output.replace("│", " ").split())
    assert "Option '-c' requires an argument" in text, text
    assert "put -- before it" not in text, text


def test_search_says_which_fused_ranks_the_cap_dropped(
        sample_db: str, sample_conn: psycopg.Connection[Any]) -> None:
    """`pgfunnel search --per-source-cap 1` printed fused ranks 1, 3, 4 with nothing to say
    why 2 was missing: the cap acted unseen. The line names the ranks the cap dropped, and
    they are the pool's capped rows, read from `candidates()` here."""
    from pgfunnel.cli.main import app

    query = "refund on a monthly plan"
    res = CliRunner().invoke(app, ["search", query, "--dsn", sample_db, "--lexical-only",
                                   "-k", "5", "--per-source-cap", "1"],
                             env={"COLUMNS": "300"})
    assert res.exit_code == 0, res.output
    pool = sample_conn.execute(
        "select fused_rank, citekey from pgfunnel.candidates(%s, null, k => 5, "
        "per_source_cap => 1) order by fused_rank", (query,)).fetchall()
    kept: list[int] = []
    seen: set[str] = set()
    dropped: list[int] = []
    dropped_keys: set[str] = set()
    for rank, citekey in pool:
        if len(kept) == 5:
            break
        if citekey in seen:
            dropped.append(rank)
            dropped_keys.add(citekey)
        else:
            kept.append(rank)
        seen.add(citekey)
    assert dropped, pool  # the corpus has two chunks per refund page: the cap acts here
    ranks = ", ".join(str(r) for r in dropped)
    flat = " ".join(res.output.split())
    label = "ranks" if len(dropped) > 1 else "rank"
    assert (f"capped: fused {label} {ranks} not shown: --per-source-cap 1 keeps at most "
            "1 chunk per citekey") in flat, flat
    # the citekeys it names hold the dropped chunks' own
    named = flat.split("already at the cap (", 1)[1].split(")", 1)[0]
    named_keys = set(named.removeprefix("one of ").split(", "))
    assert dropped_keys <= named_keys, (dropped_keys, flat)
    assert "a higher --per-source-cap shows" in flat, flat
    # a search the cap did not touch says nothing about it, and shows the ranks it dropped
    args = ["search", query, "--dsn", sample_db, "--lexical-only", "-k", "5",
            "--per-source-cap", "10"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0 and "capped:" not in res.output, res.output
    res = CliRunner().invoke(app, [*args, "--json"])
    got = json.loads(res.output[res.output.index("{"):])["results"]
    assert [r["fused_rank"] for r in got] == [1, 2, 3, 4, 5]


@pytest.mark.parametrize(("query", "options", "said"), [
    # the three pairs the search chooses, each named by its rule
    ("what does err 6358 mean", [],
     "fusion: minmax; weights: lexical 1, dense 0.2 (chosen: identifier)"),
    ("coupon for the enterprise plan", [],
     "fusion: minmax; weights: lexical 0.7, dense 1 (chosen: dense_leads)"),
    ("refund on a monthly plan", ["--fusion", "rrf"],
     "fusion: rrf, rrf_k 60; weights: lexical 1, dense 0.7 (chosen: default)"),
    ("refund on a monthly plan", ["--fusion", "zscore", "--dense-weight", "0.5"],
     "fusion: zscore; weights: lexical 1, dense 0.5 (given)"),
    ("refund on a monthly plan", ["--lexical-only"], "fusion: none (one leg: lexical)"),
])
def test_search_says_which_fusion_and_weights_it_used(
        sample_db: str, sample_conn: psycopg.Connection[Any], query: str,
        options: list[str], said: str) -> None:
    """With the weights left to the search, nothing said which pair it had chosen (three
    rules, by the query's lexical matches), nor which fusion ran. The line gives what the
    database chose, the weights its trace records for that search."""
    from pgfunnel.cli.main import app

    res = CliRunner().invoke(app, ["search", query, "--dsn", sample_db, "-k", "3", "--trace",
                                   *options], env={"COLUMNS": "300"})
    assert res.exit_code == 0, res.output
    assert said in res.stdout.splitlines(), res.stdout
    assert res.stdout.index("fusion: ") < res.stdout.index(f"'{query}'"), res.stdout
    search_id = int(res.stdout.split("trace: search_id ")[1].split()[0])
    config, notes = one_row(sample_conn.execute(
        "select config, notes from pgfunnel.search_log where id = %s", (search_id,)))
    assert config["fusion"] == said.split()[1].rstrip(";,") or "--lexical-only" in options
    if "weights:" in said:
        lexical, dense = config["weights"]
        assert f"weights: lexical {lexical:g}, dense {dense:g} (" in said, (config, said)
        assert notes["weights_given"] == ("(given)" in said)
    res = CliRunner().invoke(app, ["search", query, "--dsn", sample_db, "-k", "3", "--json",
                                   *options])
    assert res.exit_code == 0, res.output
    used = json.loads(res.stdout)["fusion"]
    if "--lexical-only" in options:
        assert used == {"fusion": "none", "legs": ["lexical"], "rrf_k": None,
                        "weights": None, "weights_rule": None}
    else:
        assert used["legs"] == ["lexical", "dense"] and used["weights"] == config["weights"]
        assert used["weights_rule"] == (said.split("chosen: ")[1].rstrip(")")
                                        if "chosen" in said else None)
        assert used["rrf_k"] == (60 if "rrf" in options else None)


def test_search_runs_its_pool_once_for_the_fusion_line(
        sample_db: str, sample_conn: psycopg.Connection[Any]) -> None:
    """The fusion line embedded the query and ran the pool (both legs) a second time,
    outside --timeout-ms; it now reads what the search's own pool said."""
    from pgfunnel.cli.main import app

    dbname = sample_conn.info.dbname
    sample_conn.execute(psycopg.sql.SQL("alter database {} set track_functions = 'pl'").format(
        psycopg.sql.Identifier(dbname)))

    def pool_calls() -> int:
        sample_conn.execute("select pg_stat_clear_snapshot()")
        row = sample_conn.execute(
            "select coalesce(sum(calls), 0) from pg_stat_user_functions "
            "where schemaname = 'pgfunnel' and funcname = '_pool'").fetchone()
        return int(row[0]) if row else 0

    before = pool_calls()
    res = CliRunner().invoke(app, ["search", "what does err 6358 mean", "--dsn", sample_db,
                                   "-k", "3", "--timeout-ms", "60000"],
                             env={"COLUMNS": "300"})
    assert res.exit_code == 0, res.output
    assert "fusion: minmax; weights: lexical 1, dense 0.2 (chosen: identifier)" in \
        res.stdout.splitlines(), res.stdout
    # the CLI's connections are closed, and a closed backend's counts are flushed
    deadline = time.monotonic() + 60  # ends as soon as the count moves
    while pool_calls() == before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pool_calls() - before == 1


def test_capped_line_points_at_an_explain_that_names_the_capped_chunks(sample_db: str) -> None:
    """The capped: line said `pgfunnel explain QUERY CITEKEY#ORDINAL` follows one chunk,
    and nothing search printed gave a capped chunk's ordinal. It points at explain with
    the citekey alone, whose capped: line names the chunks behind the skipped fused
    ranks as CITEKEY#ORDINAL, each of which explain then follows to verdict capped."""
    import re

    from pgfunnel.cli.main import app

    query = "refund on a monthly plan"
    options = ["--dsn", sample_db, "--lexical-only", "-k", "5", "--per-source-cap", "1"]
    res = CliRunner().invoke(app, ["search", query, *options], env={"COLUMNS": "300"})
    assert res.exit_code == 0, res.output
    flat = " ".join(res.output.split())
    line = re.search(r"capped: fused ranks? ([0-9, ]+) not shown: .*?already at the cap "
                     r"\((?:one of )?([^)]*)\)", flat)
    assert line, flat
    dropped = {int(r) for r in line[1].split(", ")}
    assert ("`pgfunnel explain QUERY CITEKEY` (with this search's options) names the "
            "citekey's capped chunks as CITEKEY#ORDINAL") in flat, flat
    named: dict[int, str] = {}
    for citekey in line[2].split(", "):
        res = CliRunner().invoke(app, ["explain", query, citekey, *options],
                                 env={"COLUMNS": "300"})
        assert res.exit_code == 0, res.output
        for listed in [ln for ln in res.stdout.splitlines() if ln.startswith("  capped: ")]:
            for chunk, rank in re.findall(r"(\S+#[0-9]+) \(fused rank ([0-9]+)\)", listed):
                named[int(rank)] = chunk
    assert set(named) == dropped, (named, dropped)
    res = CliRunner().invoke(app, ["explain", query, *named.values(), *options, "--json"])
    assert res.exit_code == 0, res.output
    assert [(e["verdict"], e["fused_rank"]) for e in json.loads(res.stdout)] == \
        [("capped", rank) for rank in named]


def test_capped_line_names_at_most_five_citekeys() -> None:
    """Under cap 1 every citekey shown is at the cap: k 100 named up to 100 of them."""
    from pgfunnel.cli.main import _capped_note

    rows = [SimpleNamespace(citekey=f"doc-{i}", fused_rank=2 * i + 1) for i in range(8)]
    note = _capped_note(rows, 1)
    assert note is not None
    assert note.startswith("capped: fused ranks 2, 4, 6, 8, 10, 12, 14 not shown: ")
    assert "(one of doc-0, doc-1, doc-2, doc-3, doc-4 and 2 more)" in note
    # the last dropped rank, 14, lies before doc-7's only chunk: doc-7 was not at the cap
    rows = [SimpleNamespace(citekey="a", fused_rank=1), SimpleNamespace(citekey="b", fused_rank=3)]
    assert "at the cap (a);" in (_capped_note(rows, 1) or "")
    assert _capped_note(rows[:1], 1) is None and _capped_note([], 3) is None


def test_search_on_functions_whose_pool_does_not_say_its_fusion(
        sample_db: str, sample_conn: psycopg.Connection[Any]) -> None:
    """Before `pgfunnel migrate`, an older release's pool sets no pgfunnel.fusion_used:
    the search runs and returns its rows as before, and only the fusion line is left
    out (SearchResponse.fusion and --json's fusion are None)."""
    import re

    from pgfunnel.cli.main import app

    from pgfunnel.schema import render_sql, require_vector_schema, sql_dir
    from pgfunnel.search import Funnel

    text = (sql_dir() / "040_funnel.sql").read_text()
    start = text.index("create or replace function pgfunnel._pool(")
    body = text[start:text.index("$$;", text.index("as $$", start)) + 3]
    older, n = re.subn(r"\n    perform pg_catalog\.set_config\('pgfunnel\.fusion_used'.*?, true\);",
                       "", body, flags=re.S)
    assert n == 1
    query = "what does err 6358 mean"
    with Funnel(sample_db, embedder=None) as f:
        current = f.search(query, k=3)
    assert current.fusion is not None
    sample_conn.execute(render_sql(older, require_vector_schema(sample_conn)).encode())
    with Funnel(sample_db, embedder=None) as f:
        before = f.search(query, k=3)
    assert before.fusion is None
    assert [r.chunk_id for r in before.results] == [r.chunk_id for r in current.results]

    class Reversing:
        model_name = "reverse"

        def rank(self, query: str, documents: list[str]) -> list[dict[str, Any]]:
            n = len(documents)
            return [{"corpus_id": n - 1 - i, "score": float(n - i)} for i in range(n)]

    # a reranked traced search logs what it logged before: the weights as given, and no
    # weights_given, which the replay reads as it did (null: chosen again)
    with Funnel(sample_db, embedder=None, reranker=Reversing()) as f:
        reranked = f.search(query, k=3, trace=True)
    assert reranked.reranked and reranked.fusion is None
    row = sample_conn.execute("select config -> 'weights', notes ? 'weights_given' "
                              "from pgfunnel.search_log where id = %s",
                              (reranked.search_id,)).fetchone()
    assert row == (None, False), row
    res = CliRunner().invoke(app, ["search", query, "--dsn", sample_db, "-k", "3"],
                             env={"COLUMNS": "300"})
    assert res.exit_code == 0, res.output
    assert "fusion:" not in res.stdout and f"'{query}'" in res.stdout, res.stdout
    res = CliRunner().invoke(app, ["search", query, "--dsn", sample_db, "-k", "3", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["fusion"] is None and out["results"], out
