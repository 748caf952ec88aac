"""The SQL search functions' defaults that Python and the docs state too (pgfunnel.defaults,
SearchParams, the CLI's options and help, the docs' tables) are the ones the database
declares: a default changed in sql/ alone, or in one of these alone, fails here."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import psycopg
import pytest
import typer
from pgfunnel.cli.common import leg_weights
from pgfunnel.cli.main import app
from typer.testing import CliRunner

from pgfunnel import defaults
from pgfunnel.search import SearchParams

DOCS = Path(__file__).resolve().parent.parent / "docs"

# the search's functions that declare its knobs, with those each declares
_SEARCH_KNOBS = ("k", "collection", "fusion", "rrf_k", "overfetch", "per_source_cap",
                 "ef_search", "k1", "b")
_FUNCTIONS = {
    "pgfunnel.funnel_search": _SEARCH_KNOBS,
    "public.funnel_search": _SEARCH_KNOBS,
    "pgfunnel.candidates": _SEARCH_KNOBS,
    "pgfunnel.explain": _SEARCH_KNOBS,
    "pgfunnel.final": ("k", "collection", "per_source_cap"),
}
_PYTHON = {"k": defaults.K, "collection": defaults.COLLECTION, "fusion": defaults.FUSION,
           "rrf_k": defaults.RRF_K, "overfetch": defaults.OVERFETCH,
           "per_source_cap": defaults.PER_SOURCE_CAP, "ef_search": defaults.EF_SEARCH,
           "k1": defaults.K1, "b": defaults.B}


def _value(expression: str) -> Any:
    """A declared default as pg_get_function_arguments writes it: `10`, `1.2`,
    `'minmax'::text`; anything else is the test's to learn, not to guess."""
    if m := re.fullmatch(r"'([^']*)'::text", expression):
        return m.group(1)
    if re.fullmatch(r"-?\d+", expression):
        return int(expression)
    if re.fullmatch(r"-?\d+\.\d*(?:e-?\d+)?", expression):
        return float(expression)
    raise AssertionError(f"a default this test cannot read: {expression}")


def _declared(conn: psycopg.Connection[Any], function: str) -> dict[str, Any]:
    """The declared default of each of ``function``'s arguments that has one (the
    function has one form: the old ones are dropped)."""
    schema, name = function.split(".")
    rows = conn.execute(
        "select pg_catalog.pg_get_function_arguments(p.oid) from pg_catalog.pg_proc p "
        "where p.pronamespace = %s::regnamespace and p.proname = %s",
        (schema, name)).fetchall()
    assert len(rows) == 1, f"{function}: {len(rows)} forms"
    declared = {}
    # an argument is `name type DEFAULT expression`; none of these defaults holds ", "
    for argument in str(rows[0][0]).split(", "):
        if m := re.fullmatch(r"(\w+) .*? DEFAULT (.+)", argument):
            declared[m.group(1)] = m.group(2)
    return declared


@pytest.fixture()
def sql_defaults(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """Each search knob's declared default, the same in every function that declares it."""
    found: dict[str, Any] = {}
    for function, knobs in _FUNCTIONS.items():
        declared = _declared(conn, function)
        for knob in knobs:
            assert knob in declared, f"{function} declares no default for {knob}"
            value = _value(declared[knob])
            assert found.setdefault(knob, value) == value, (
                f"{function}'s {knob} defaults to {value}, another function's to "
                f"{found[knob]}")
    return found


@pytest.fixture()
def automatic(conn: psycopg.Connection[Any]) -> dict[str, tuple[float, float]]:
    rows = conn.execute("select rule, weights from pgfunnel._automatic_weights()").fetchall()
    return {rule: (float(w[0]), float(w[1])) for rule, w in rows}


def test_python_states_the_sql_functions_defaults(sql_defaults: dict[str, Any]) -> None:
    assert sql_defaults == _PYTHON
    params = SearchParams()
    assert {knob: getattr(params, knob) for knob in _PYTHON} == sql_defaults


def test_python_states_the_weight_pairs_the_search_chooses(
        automatic: dict[str, tuple[float, float]]) -> None:
    assert dict(defaults.AUTOMATIC_WEIGHTS) == automatic
    # a weight typed alone: the other leg's is its weight in the search's default pair
    lexical, dense = automatic["default"]
    assert leg_weights(None, 0.25, False) == (lexical, 0.25)
    assert leg_weights(0.25, None, False) == (0.25, dense)
    assert leg_weights(None, None, False) is None


def test_the_cli_defaults_and_help_are_the_sql_functions(
        sql_defaults: dict[str, Any], automatic: dict[str, tuple[float, float]]) -> None:
    root: Any = typer.main.get_command(app)
    for command in ("search", "explain"):
        params = {p.name: p for p in root.commands[command].params}
        for knob in ("k", "collection", "fusion", "overfetch", "per_source_cap"):
            assert params[knob].default == sql_defaults[knob], (command, knob)
        helps = {name: " ".join((p.help or "").split()) for name, p in params.items()}
        assert f"(default {defaults.number(sql_defaults['rrf_k'])})" in helps["rrf_k"]
        for name, leg in (("lexical_weight", 0), ("dense_weight", 1)):
            assert f"(default {defaults.number(automatic['default'][leg])};" in helps[name]
            # each pair the search chooses that moves this leg's weight is named
            for rule in ("identifier", "dense_leads"):
                weight = automatic[rule][leg]
                if weight != automatic["default"][leg]:
                    assert f" {defaults.number(weight)} " in helps[name], (name, rule)
        for name in ("lexical_depth", "dense_depth"):
            assert f"at least {defaults.DEPTH_FLOOR})" in helps[name]


def test_python_states_the_shares_at_which_the_search_picks_a_pair(
        conn: psycopg.Connection[Any]) -> None:
    # the thresholds are literals in _pool's body, not declared defaults: read the body
    # the database runs, each comparison where the search makes it
    rows = conn.execute(
        "select pg_catalog.pg_get_functiondef(p.oid) from pg_catalog.pg_proc p "
        "where p.pronamespace = 'pgfunnel'::regnamespace and p.proname = '_pool'").fetchall()
    assert len(rows) == 1, f"pgfunnel._pool: {len(rows)} forms"
    body = str(rows[0][0])
    for comparison, stated in ((r"best_coverage < ", defaults.BEST_MATCH_UNDER),
                               (r"rarest_missed >= ", defaults.RAREST_MISSED_AT),
                               (r"rarest_number_held >= ", defaults.RAREST_NUMBER_AT)):
        found = re.findall(rf"\b{comparison}(\d+(?:\.\d+)?)\b", body)
        assert len(found) == 1, f"pgfunnel._pool compares {comparison!r} {len(found)} times"
        assert float(found[0]) == stated, (comparison, found[0], stated)
    # and the weight options' help says each share as pgfunnel.defaults states it
    root: Any = typer.main.get_command(app)
    params = {p.name: p for p in root.commands["search"].params}
    helps = " ".join(" ".join((params[name].help or "").split())
                     for name in ("lexical_weight", "dense_weight"))
    assert f"a number and {defaults.number(defaults.RAREST_NUMBER_AT)} or more" in helps
    assert f"holds under {defaults.number(defaults.BEST_MATCH_UNDER)} of" in helps
    assert f"that word is {defaults.number(defaults.RAREST_MISSED_AT)} or more" in helps


def test_every_command_defaults_to_the_same_collection() -> None:
    # --collection is declared per command: each one's default is pgfunnel.defaults'
    def commands(group: Any, path: str) -> Any:
        for name, command in group.commands.items():
            if hasattr(command, "commands"):
                yield from commands(command, f"{path} {name}")
            else:
                yield f"{path} {name}", command
    seen = []
    for name, command in commands(typer.main.get_command(app), "pgfunnel"):
        for param in command.params:
            if param.name == "collection" and not param.required:
                seen.append(name)
                assert param.default == defaults.COLLECTION, (name, param.default)
    assert {"pgfunnel search", "pgfunnel ingest", "pgfunnel versions list"} <= set(seen), seen


def test_the_cli_help_needs_no_database(tmp_path: Path) -> None:
    # the defaults in the help are Python's: nothing connects to print it
    env = {"COLUMNS": "300", "PGFUNNEL_DSN": f"host={tmp_path} dbname=nowhere",
           "PGFUNNEL_HOME": str(tmp_path / "home")}
    for command in (["search"], ["explain"], ["versions", "compare"]):
        res = CliRunner().invoke(app, [*command, "--help"], env=env)
        assert res.exit_code == 0, res.output
        assert "--dense-weight" in res.output
    assert not (tmp_path / "home").exists()


def test_a_leg_reads_the_default_depth(sample_conn: psycopg.Connection[Any]) -> None:
    # the depth a leg reads when none is given, as Python states it (the eval harness's
    # per-leg depths, the CLI's help): below the floor, above it, and at the most
    row = sample_conn.execute("select min(id) from pgfunnel.chunk").fetchone()
    assert row is not None
    for k, overfetch in ((1, 4), (defaults.DEPTH_FLOOR, 2), (1000, 11)):
        # a query few chunks match: a leg that filled its depth could be read deeper
        used = sample_conn.execute(
            "select lexical_depth_used from pgfunnel.explain('refund', chunk_id => %s, "
            "k => %s, overfetch => %s)", (row[0], k, overfetch)).fetchone()
        assert used == (defaults.default_depth(k, overfetch),), (k, overfetch)
    assert defaults.default_depth(1000, 11) == defaults.DEPTH_MOST


def _table_defaults(page: str) -> dict[str, str]:
    """A docs page's parameter tables: each name in a row's first cell (`` `k1`, `b` ``)
    with the word its second cell gives it, in the same order (``1.2, 0.75``)."""
    found = {}
    for line in (DOCS / page).read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not re.fullmatch(r"`\w+`(?:, `\w+`)*", cells[0]):
            continue
        names = re.findall(r"`(\w+)`", cells[0])
        values = cells[1].split(", ", len(names) - 1)
        for name, value in zip(names, values, strict=False):
            found[name] = value.split(" ")[0].strip("`\"'")
    return found


@pytest.mark.parametrize("page", ["sql.md", "python-api.md"])
def test_the_docs_tables_state_the_sql_functions_defaults(
        page: str, sql_defaults: dict[str, Any]) -> None:
    stated = _table_defaults(page)
    numeric = ("rrf_k", "overfetch", "per_source_cap", "ef_search", "k1", "b")
    for knob in numeric:
        assert knob in stated, f"docs/{page} has no row for {knob}"
        assert float(stated[knob]) == sql_defaults[knob], (page, knob, stated[knob])
    if "fusion" in stated:
        assert stated["fusion"] == sql_defaults["fusion"], page


def test_the_sql_docs_signature_and_weights_row_are_the_databases(
        sql_defaults: dict[str, Any], automatic: dict[str, tuple[float, float]]) -> None:
    page = (DOCS / "sql.md").read_text()
    signature = " ".join(page.split("```sql\nselect * from funnel_search(", 1)[1]
                         .split(");", 1)[0].split())
    for knob in ("rrf_k", "overfetch", "per_source_cap", "ef_search", "k1", "b"):
        m = re.search(rf"\b{knob} => ([\d.]+)", signature)
        assert m is not None and float(m.group(1)) == sql_defaults[knob], (knob, signature)
    row = next(line for line in page.splitlines() if line.startswith("| `weights` |"))
    for rule, (lexical, dense) in automatic.items():
        pair = f"'{{{defaults.number(lexical)},{defaults.number(dense)}}}'"
        assert pair in row, (rule, pair)
    # the option list of docs/cli.md, search
    cli = " ".join((DOCS / "cli.md").read_text().split())
    assert f"`--rrf-k` (default {defaults.number(sql_defaults['rrf_k'])};" in cli
    assert f"k x overfetch, at least {defaults.DEPTH_FLOOR})" in cli
    for lexical, dense in automatic.values():
        assert f"`{{{defaults.number(lexical)},{defaults.number(dense)}}}`" in cli
    lexical, dense = automatic["default"]
    assert (f"the other is {lexical:.1f} for the lexical leg or {defaults.number(dense)} "
            "for the dense leg") in cli


def test_the_search_params_fields_name_every_knob() -> None:
    # a knob added to SearchParams with a default the SQL declares belongs in _PYTHON
    with_default = {f.name for f in dataclasses.fields(SearchParams)
                    if f.default not in (None, (), False, dataclasses.MISSING)}
    assert with_default == set(_PYTHON)


def test_the_docs_prose_states_the_sql_functions_defaults(
        sql_defaults: dict[str, Any], automatic: dict[str, tuple[float, float]]) -> None:
    # where a page says a default in its own words, each phrase as the page writes it
    n = {knob: defaults.number(value) for knob, value in sql_defaults.items()
         if isinstance(value, (int, float))}
    depth = f"greatest(k * overfetch, {defaults.DEPTH_FLOOR}), {defaults.DEPTH_MOST})"
    phrases = {
        "tuning.md": [f"`rrf_k` {n['rrf_k']}", f"`k1` {n['k1']} and `b` {n['b']}",
                      f"`rrf_k` ({n['rrf_k']})", f"`depth = least({depth}`",
                      f"**`per_source_cap`** ({n['per_source_cap']})",
                      f"`ef_search` ({n['ef_search']})",
                      f"Defaults {n['k1']} / {n['b']}"],
        "sql.md": [f"`least({depth}`"],
        "python-api.md": [f"`min(max(k*overfetch, {defaults.DEPTH_FLOOR}), "
                          f"{defaults.DEPTH_MOST})`",
                          *(f"`({defaults.number(lexical)}, {defaults.number(dense)})`"
                            for lexical, dense in automatic.values())],
        "index-versions.md": [f"default `ef_search` ({n['ef_search']})"],
    }
    for page, said in phrases.items():
        text = " ".join((DOCS / page).read_text().split())
        missing = [phrase for phrase in said if phrase not in text]
        assert not missing, f"docs/{page} no longer says {missing}"


def test_the_python_entry_points_default_to_the_same_collection() -> None:
    # each class that takes a collection declares its own default: pgfunnel.defaults'
    import inspect

    from pgfunnel import ingest
    from pgfunnel.eval.harness import Harness
    from pgfunnel.search import Funnel

    for entry in (Funnel, ingest.Ingester, Harness):
        parameters = inspect.signature(entry.__init__).parameters
        assert parameters["collection"].default == defaults.COLLECTION, entry.__name__
    assert ingest.DEFAULT_COLLECTION == defaults.COLLECTION
    assert inspect.signature(Harness.__init__).parameters["k"].default == defaults.K
    # the Python RRF of several phrasings takes the search's constant when given none
    from pgfunnel.transform import rrf_merge
    assert inspect.signature(rrf_merge).parameters["k"].default == defaults.RRF_K


def _passage(page: str, start: str, end: str) -> str:
    """The words of ``page`` from ``start`` up to ``end`` (each found once), on one line."""
    text = " ".join((DOCS / page).read_text().split())
    assert text.count(start) == 1, f"docs/{page}: {start!r} found {text.count(start)} times"
    passage = text.split(start, 1)[1]
    assert end in passage, f"docs/{page}: nothing ends the passage at {end!r}"
    return start + passage.split(end, 1)[0]


# each idf share a passage says, by the words around it: "holds under 0.4 of the query",
# "a number ... and 0.3 or more of its idf", "that word is 0.4 or more of the query's idf"
_SHARES = ((r"\b[Uu]nder (\d+(?:\.\d+)?)\b(?! ?%)", "BEST_MATCH_UNDER"),
           (r"\band (\d+(?:\.\d+)?) or more of\b", "RAREST_NUMBER_AT"),
           (r"\b(?:is|one of) (\d+(?:\.\d+)?) or more of\b", "RAREST_MISSED_AT"))
# a weight pair as the pages write it: `{1,0.7}`, '{1,0.7}', `(1, 0.7)`
_PAIR = r"[{(](\d+(?:\.\d+)?), ?(\d+(?:\.\d+)?)[)}]"

# the passages that say in words how a search picks its weights: the page, the words that
# open the passage and those that follow it, and the pairs it names
_WEIGHT_PASSAGES = (
    ("cli.md", "`--lexical-weight`, `--dense-weight` (when neither", "`--overfetch` (pool",
     ("default", "identifier", "dense_leads")),
    ("python-api.md", "| `fusion`, `rrf_k`, `weights` |", "| `lexical_depth`",
     ("default", "identifier", "dense_leads")),
    ("sql.md", "| `weights` |", "| `lexical_depth`", ("default", "identifier", "dense_leads")),
    ("sql.md", "**Best-match coverage**", "The trace's `config.weights`",
     ("identifier", "dense_leads")),
)


@pytest.mark.parametrize(("page", "start", "end", "rules"), _WEIGHT_PASSAGES,
                         ids=[f"{p[0]}:{p[1][:20]}" for p in _WEIGHT_PASSAGES])
def test_the_docs_say_the_shares_and_pairs_the_search_picks_by(
        page: str, start: str, end: str, rules: tuple[str, ...],
        automatic: dict[str, tuple[float, float]]) -> None:
    passage = _passage(page, start, end)
    for pattern, name in _SHARES:
        found = [float(v) for v in re.findall(pattern, passage)]
        assert found, f"docs/{page} ({start}): no {name} share found by {pattern!r}"
        assert set(found) == {getattr(defaults, name)}, (page, start, name, found)
    pairs = {(float(a), float(b)) for a, b in re.findall(_PAIR, passage)}
    assert pairs == {automatic[rule] for rule in rules}, (page, start, pairs)
    # "fused with the dense leg at 0.2" (sql.md's weights row): the identifier pair's
    for said in re.findall(r"with the dense leg at (\d+(?:\.\d+)?)", passage):
        assert float(said) == automatic["identifier"][1], (page, start, said)
    assert set(automatic) == {"default", "identifier", "dense_leads"}


def test_the_cli_page_states_the_search_defaults(sql_defaults: dict[str, Any]) -> None:
    # each place docs/cli.md says what a search takes when an option is left out
    text = " ".join((DOCS / "cli.md").read_text().split())
    stated = (
        (r"`--fusion minmax\|rrf\|zscore` \(default (\w+)\)", "fusion"),
        (r"`--rrf-k` \(default (\d+(?:\.\d+)?);", "rrf_k"),
        (r"under the default cap \((\d+)\)", "per_source_cap"),
        (r"with the default \(k (\d+)\)", "k"),
        (r"with the default \(per_source_cap (\d+)\)", "per_source_cap"),
    )
    for pattern, knob in stated:
        found = re.findall(pattern, text)
        assert len(found) == 1, f"docs/cli.md: {pattern!r} found {len(found)} times"
        value = found[0] if knob == "fusion" else float(found[0])
        assert value == sql_defaults[knob], (knob, found[0])
    # a weight given alone: the example error names the other leg at its default
    lexical, dense = defaults.AUTOMATIC_WEIGHTS["default"]
    assert f"`--lexical-weight / --dense-weight: [0.0, {defaults.number(dense)}] gives" in text
    # and the bounds it states, which the CLI checks before a search (the SQL's: below)
    assert (f"each is 0 or a number from {defaults.number(defaults.WEIGHT_LEAST)} to "
            f"{defaults.number(defaults.WEIGHT_MOST)}, else a usage error") in text
    assert f"once `--overfetch` is {defaults.OVERFETCH_MOST})" in text


_CHECK = ("select pgfunnel._check_funnel_params(%(query_text)s, %(k)s, '{}', %(overfetch)s, "
          "%(per_source_cap)s, null, %(fusion)s, %(rrf_k)s, %(weights)s, %(lexical_depth)s, "
          "%(dense_depth)s, %(ef_search)s, %(k1)s, %(b)s, now())")


def _sql_refuses(conn: psycopg.Connection[Any], **given: Any) -> str | None:
    """The parameter the SQL's own check names for ``given`` (the others at their
    defaults), or None when it takes them."""
    values = {**_PYTHON, "query_text": "refund", "weights": None, "lexical_depth": None,
              "dense_depth": None, **given}
    try:
        conn.execute(_CHECK, values)
    except psycopg.errors.DataError as exc:
        return str(exc).split(":", 1)[0]
    return None


def test_python_refuses_where_the_sql_does(conn: psycopg.Connection[Any]) -> None:
    # each bound Python checks before the database is asked: the SQL takes the bound and
    # refuses one past it, naming the same parameter
    from pgfunnel.cli.common import _weight, in_range

    from pgfunnel.errors import ConfigError
    from pgfunnel.eval.harness import Harness
    from pgfunnel.search import query_text_problem
    from pgfunnel.transform import check_rrf_constant

    past: dict[str, int | str] = {
        "k": defaults.K_MOST + 1, "overfetch": defaults.OVERFETCH_MOST + 1,
        "rrf_k": defaults.RRF_K_MOST + 1, "lexical_depth": defaults.DEPTH_MOST + 1,
        "dense_depth": defaults.DEPTH_MOST + 1,
        "query_text": "x" * (defaults.QUERY_CHARS_MOST + 1)}
    for knob, value in past.items():
        at = value - 1 if isinstance(value, int) else value[:-1]
        assert _sql_refuses(conn, **{knob: at}) is None, knob
        assert _sql_refuses(conn, **{knob: value}) == knob, knob
    for weight, taken in ((0.0, True), (defaults.WEIGHT_LEAST, True),
                          (defaults.WEIGHT_LEAST / 2, False), (defaults.WEIGHT_MOST, True),
                          (defaults.WEIGHT_MOST + 1, False)):
        refused = _sql_refuses(conn, weights=[weight, 1.0])
        assert refused == (None if taken else "weights"), weight
        try:
            _weight(repr(weight))
        except typer.BadParameter:
            assert not taken, weight
        else:
            assert taken, weight
    # the Python copies: the CLI's -k and weights, the harness's k, the Python RRF's
    # constant, a query file's text
    demo_k = in_range(1, defaults.K_MOST)
    assert demo_k(defaults.K_MOST) == defaults.K_MOST
    with pytest.raises(typer.BadParameter, match=f"between 1 and {defaults.K_MOST}"):
        demo_k(defaults.K_MOST + 1)
    root: Any = typer.main.get_command(app)
    demo = {p.name: p for p in root.commands["demo"].params}
    assert f"(1 to {defaults.K_MOST})" in (demo["k"].help or "")
    with pytest.raises(ConfigError, match=f"between 1 and {defaults.K_MOST}"):
        Harness(conn, k=defaults.K_MOST + 1, embedder=None)
    assert check_rrf_constant("rrf_k", defaults.RRF_K_MOST) == defaults.RRF_K_MOST
    with pytest.raises(ConfigError, match="rrf_k"):
        check_rrf_constant("rrf_k", defaults.RRF_K_MOST + 1)
    assert query_text_problem("x" * defaults.QUERY_CHARS_MOST) is None
    assert query_text_problem("x" * (defaults.QUERY_CHARS_MOST + 1)) is not None



def test_the_query_limit_is_written_once_and_python_holds_the_same(
        conn: psycopg.Connection[Any]) -> None:
    """funnel_search's and final()'s query_text check and analyze's and analyze_each's
    for_query check each wrote 10000 into their test and message; all read
    pgfunnel._query_limit() now, which is defaults.QUERY_CHARS_MOST, and each message
    says the number it reads."""
    [(limit,)] = conn.execute("select pgfunnel._query_limit()").fetchall()
    assert limit == defaults.QUERY_CHARS_MOST
    sql_dir = Path(__file__).resolve().parent.parent / "sql"
    for path in sorted(sql_dir.glob("*.sql")):
        text = path.read_text()
        # a depth's 10000 (DEPTH_MOST) is another limit; a text's length is this one
        assert not re.search(r"length\([\w.]+\) > 10000|limit (for a query )?is 10000",
                             text), path.name
    for name in ("_check_funnel_params", "final", "analyze_each", "_check_analyze_input"):
        [(body,)] = conn.execute(
            "select p.prosrc from pg_catalog.pg_proc p where p.pronamespace = "
            "'pgfunnel'::regnamespace and p.proname = %s", (name,)).fetchall()
        assert "pgfunnel._query_limit()" in body, name
    past = "x" * (limit + 1)
    calls = [("select count(*) from pgfunnel.funnel_search(%s)",
              f"query_text: is {limit + 1} characters long; the limit is {limit}"),
             ("select count(*) from pgfunnel.final('{}', '{}', '{}', '{}', '{}', '{}', '{}', "
              "query_text => %s)",
              f"query_text: is {limit + 1} characters long; the limit is {limit}"),
             ("select pgfunnel.analyze(%s, for_query => true)",
              f"input: is {limit + 1} characters long; the limit for a query is {limit}, "),
             ("select count(*) from pgfunnel.analyze_each(array[%s], for_query => true)",
              f"inputs[1]: is {limit + 1} characters long; the limit for a query is "
              f"{limit}, ")]
    for stmt, said in calls:
        with pytest.raises(psycopg.errors.InvalidParameterValue) as err:
            conn.execute(stmt, (past,))
        conn.rollback()
        assert str(err.value).splitlines()[0].startswith(said), err.value

def test_a_replayed_explain_translates_the_advice_the_sql_gives(
        conn: psycopg.Connection[Any]) -> None:
    # the replay finds the SQL explain's advice by its words, bounds among them ("at most
    # 10000 rows", "at its most (100)"): advice the SQL no longer gives is never translated.
    # explain() is _explain_chunks for one chunk, so the advice is written there
    from pgfunnel.explain_log import _ADVICE

    rows = conn.execute(
        "select pg_catalog.pg_get_functiondef(p.oid) from pg_catalog.pg_proc p "
        "where p.pronamespace = 'pgfunnel'::regnamespace "
        "and p.proname in ('explain', '_explain_chunks')").fetchall()
    # adjacent string literals on separate lines are one string in SQL
    body = " ".join(re.sub(r"'\s*\n\s*'", "", str(row[0])) for row in rows)
    for asked, _said in _ADVICE:
        assert f"'{asked}'" in body or f"{asked}'" in body, asked
    assert f"overfetch is at its most ({defaults.OVERFETCH_MOST})" in body
    assert f"at most {defaults.DEPTH_MOST} rows" in body


def test_a_rules_pair_by_its_name_is_the_listings(
        conn: psycopg.Connection[Any], automatic: dict[str, tuple[float, float]]) -> None:
    # the search reads a rule's pair by name; the replay of an old log, the listing
    for rule, pair in automatic.items():
        row = conn.execute("select pgfunnel._automatic_weights(%s)", (rule,)).fetchone()
        assert row is not None and tuple(row[0]) == pair, rule
    # a rule that is not there is an error, not NULL weights (a search without a pair)
    with pytest.raises(psycopg.errors.CaseNotFound):
        conn.execute("select pgfunnel._automatic_weights('dense_lead')")


def test_the_sql_docs_state_the_bounds_python_checks() -> None:
    # the parameter table of docs/sql.md says each bound Python checks as well (above)
    n = defaults.number
    rows = {m.group(1): line for line in (DOCS / "sql.md").read_text().splitlines()
            if (m := re.match(r"\| `(\w+)`[^|]* \|", line))}
    stated = {
        "query_text": f"At most {defaults.QUERY_CHARS_MOST:,} characters".replace(",", " "),
        "k": f"Rows returned, 1..{defaults.K_MOST}.",
        "overfetch": f"1..{defaults.OVERFETCH_MOST} (",
        "lexical_depth": f"Rows each leg ranks, 1..{defaults.DEPTH_MOST} (",
        "rrf_k": f"> 0 and at most {n(defaults.RRF_K_MOST)} (",
        "weights": f"each 0 or from {n(defaults.WEIGHT_LEAST)} to {n(defaults.WEIGHT_MOST)},",
    }
    for knob, said in stated.items():
        assert said in rows[knob], f"docs/sql.md's {knob} row no longer says {said!r}"


def test_the_python_api_page_states_the_bounds_the_code_checks() -> None:
    # docs/python-api.md's ranges, each as the page writes it, from the numbers the code
    # checks (the SQL's, pinned above, and the follow-up resolver's): a bound changed in
    # defaults.py or transform.py left the page saying the old one
    from pgfunnel.transform import MAX_HISTORY_CHARS, MAX_HISTORY_TURNS, MAX_RRF_K

    text = " ".join((DOCS / "python-api.md").read_text().split())
    said = [
        f"Ranges (`k` 1..{defaults.K_MOST},",
        f"| `k` | {defaults.K} | results wanted (1..{defaults.K_MOST}) |",
        f"an integer from 1 to {defaults.RRF_K_MOST:,} as `rrf_k` is",
        f"text (at most {defaults.QUERY_CHARS_MOST:,} characters, no NUL",
        f"takes at most {MAX_HISTORY_TURNS:,} turns (`MAX_HISTORY_TURNS`) and "
        f"{MAX_HISTORY_CHARS:,} characters in all (`MAX_HISTORY_CHARS`, ten times a "
        "search's `query_text` limit;",
        f"a history holds at most {MAX_HISTORY_CHARS:,} in all`",
    ]
    missing = [phrase for phrase in said if phrase not in text]
    assert not missing, f"docs/python-api.md no longer says {missing}"
    assert MAX_HISTORY_CHARS == 10 * defaults.QUERY_CHARS_MOST  # "ten times"
    assert MAX_RRF_K == defaults.RRF_K_MOST  # "as `rrf_k` is"


def test_the_docs_state_the_hnsw_build_bounds_reindex_checks() -> None:
    # pinned to pgvector's own refusals in tests/test_index_builds.py
    m_lo, m_hi = defaults.HNSW_M_LEAST, defaults.HNSW_M_MOST
    ef_lo, ef_hi = defaults.HNSW_EF_CONSTRUCTION_LEAST, defaults.HNSW_EF_CONSTRUCTION_MOST
    cli = " ".join((DOCS / "cli.md").read_text().split())
    assert (f"with `--m` ({m_lo} to {m_hi}) and `--ef-construction` ({ef_lo} to {ef_hi}, "
            "and at least 2 x m)") in cli
    assert f"`error: --m: must be between {m_lo} and {m_hi}, got {m_hi + 1}`" in cli
    assert f"[--m {defaults.HNSW_M}] [--ef-construction {defaults.HNSW_EF_CONSTRUCTION}]" in cli
    tuning = " ".join((DOCS / "tuning.md").read_text().split())
    assert (f"m {m_lo} to {m_hi}, ef_construction {ef_lo} to {ef_hi} and at least 2 x m"
            in tuning)
    assert (f"default (m {defaults.HNSW_M}, `ef_construction` {defaults.HNSW_EF_CONSTRUCTION},"
            in tuning)
    res = CliRunner().invoke(app, ["reindex", "--help"], env={"COLUMNS": "300"})
    said = " ".join(res.output.split())
    assert f"HNSW m (links per node), {m_lo} to {m_hi}. [default: {defaults.HNSW_M}]" in said
    assert (f"{ef_lo} to {ef_hi} and at least 2 x m. "
            f"[default: {defaults.HNSW_EF_CONSTRUCTION}]") in said
    res = CliRunner().invoke(app, ["reindex", "--m", str(m_hi + 1), "--dsn",
                                   "postgresql:///nowhere"])
    assert res.exit_code == 1 and \
        f"error: --m: must be between {m_lo} and {m_hi}, got {m_hi + 1}" in res.output
