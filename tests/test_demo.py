"""`pgfunnel demo`, the README's main job, end to end on a fresh database."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import unicodedata
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pgfunnel.cli.main import (
    DEMO_CAP_QUERY,
    DEMO_INTERNAL,
    DEMO_STAFF,
    SAMPLE_CORPUS,
    demo_psql,
)


def test_the_staff_runbook_is_about_the_code_the_demo_searches() -> None:
    # the demo searches the first error code of the generated corpus; the staff-only
    # runbook must be about that code or the access step shows nothing
    code = next(json.loads(line)["citekey"] for line in SAMPLE_CORPUS.read_text().splitlines()
                if line.startswith('{"citekey": "err-')).split("-")[1]
    runbooks = [json.loads(line) for line in DEMO_INTERNAL.read_text().splitlines()]
    assert any(f"ERR-{code}" in d["text"] for d in runbooks)
    # the demo says "two of the documents are readable by 'support-staff' only" (and
    # docs/cli.md, and their titles, "support staff only"): one was readable by 'billing' too
    assert len(runbooks) == 2
    assert all(d["readers"] == [DEMO_STAFF] and not d.get("is_public") for d in runbooks)


def test_demo_runs_every_stage_and_hides_staff_documents(empty_db: str) -> None:
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    from pgfunnel.db import connect

    res = CliRunner().invoke(app, ["demo", "--dsn", empty_db], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    # its whole walkthrough is its result, on stdout, the query words its searches did not
    # search with them (docs/cli.md); stderr holds the ingest's progress alone
    text = res.stdout
    for stage in ("1. init", "2. ingest", "3. searches", "4. per-source cap", "5. access",
                  "The same search in SQL"):
        assert stage in text, stage
    assert "  pgfunnel: query words not searched: " in text, text
    assert all(line.startswith("ingest: ") for line in res.stderr.splitlines()), res.stderr
    _check_the_cap_step(text[text.index("4. per-source cap"):text.index("5. access")],
                        empty_db)
    access = text[text.index("5. access"):text.index("The same search in SQL")]
    public, staff = access.split(f"principals ['{DEMO_STAFF}']")
    assert "runbook-err-" not in public
    assert "runbook-err-" in staff
    # the access step says in words what its two tables show
    assert "staff-only documents returned with no principals: none; " in access
    assert re.search(rf"for '{DEMO_STAFF}': runbook-err-6358 at rank \d", access), access
    assert "paraphrase: 'money back' where the docs say 'refund'" in text
    # no refund chunk says 'money back': the dense leg puts the refund page first, where
    # BM25 alone ranks it below chunks that share the query's plan words
    paraphrase = re.search(r"^\s*1\s+(\S+)\s+lex (\S+)\s+dense (\S+)",
                           text[text.index("paraphrase: "):], re.M)
    assert paraphrase and paraphrase[1] == "refunds-monthly", text
    assert paraphrase[3] == "1" and paraphrase[2] != "1", paraphrase[0]
    # the identifier as the docs write it, with a space and run together: one chunk first
    firsts = [re.search(r"^\s*1\s+(\S+)", text[text.index(label):], re.M)
              for label in ("identifier, typed as the docs write it: 'ERR-6358'",
                            "identifier, typed with a space: 'err 6358'",
                            "identifier, typed without the hyphen: 'what does err6358 mean'")]
    assert [m[1] if m else None for m in firsts] == ["err-6358"] * 3, text
    # a log (docker compose's) gets each result whole on one line, as `search` prints it:
    # the tables cut a citekey to 22 characters ('guide-incidents-and-s…')
    assert re.search(r"^\d+  runbook-err-6358  lex \d+  dense \d+  fused \d+  ERR-6358 ",
                     staff, re.M), staff
    assert "…" not in text, text
    with connect(empty_db, autocommit=True) as conn:
        rows = conn.execute(
            "select citekey from funnel_search('err 6358', null, 5, collection => 'demo')"
        ).fetchall()
        assert rows and all(not r[0].startswith("runbook-") for r in rows)
        rows = conn.execute(
            "select citekey from funnel_search('err 6358', null, 5, collection => 'demo', "
            "principals => %s)", ([DEMO_STAFF],)).fetchall()
        assert rows[0][0] in ("err-6358", "runbook-err-6358")
        assert "runbook-err-6358" in [r[0] for r in rows]
    # the SQL it prints, with the vector `pgfunnel embed` prints, is the search it showed
    from pgfunnel.search import Funnel

    script = text[text.index("<<'SQL'") + len("<<'SQL'"):text.rindex("SQL")]
    query = re.search(r"pgfunnel embed --dsn .*? '([^']+)' -c demo", text)
    k = re.search(r"k => (\d+)", script)
    assert query is not None and k is not None, text
    # the commands as printed, as a shell splits them: both reach the database the demo
    # filled (embed without --dsn read the embedded server's 'demo', or started one)
    psql = shlex.split(text[text.index("  psql "):text.index(" -v q=")])
    embed = re.search(r'\$\((pgfunnel embed [^)]*)\)', text)
    assert embed is not None, text
    assert psql == [*shlex.split(demo_psql()[0]), empty_db]
    assert shlex.split(embed[1]) == ["pgfunnel", "embed", "--dsn", empty_db, query[1],
                                     "-c", "demo"], embed[1]
    literal = CliRunner().invoke(app, shlex.split(embed[1])[1:])
    assert literal.exit_code == 0, literal.output
    with connect(empty_db, autocommit=True) as conn:
        in_sql = [r[0] for r in conn.execute(script.replace(":'q'", "%s::vector"),
                                             (literal.stdout.strip(),))]
    with Funnel(empty_db, "demo") as funnel:
        shown = funnel.search(query[1], k=int(k[1]), principals=[DEMO_STAFF])
    assert in_sql == [r.citekey for r in shown.results] and "runbook-err-6358" in in_sql
    # the line names the search it repeats, the last one shown, and gives the columns its
    # lines print: the staff search's results, rank for rank
    assert (f"The same search in SQL as the last one above ('{query[1]}' for principal "
            f"'{DEMO_STAFF}'; ") in text, text
    with connect(empty_db, autocommit=True) as conn:
        ranks = conn.execute(script.replace(":'q'", "%s::vector"),
                             (literal.stdout.strip(),)).fetchall()
    def rank(cell: str) -> int | None:
        return None if cell == "-" else int(cell)

    printed = [(m[2], rank(m[3]), rank(m[4]), int(m[5]), int(m[1])) for m in re.finditer(
        r"^(\d+)  (\S+)  lex (\S+)  dense (\S+)  fused (\d+)  ", staff, re.M)]
    assert len(printed) == 5, staff
    assert [tuple(r) for r in ranks] == printed, (ranks, printed)
    # run twice: nothing is written again
    again = CliRunner().invoke(app, ["demo", "--dsn", empty_db], env={"COLUMNS": "200"})
    assert again.exit_code == 0, again.output
    assert "0 documents written, 109 unchanged (0 chunks written)" in again.output


def _check_the_cap_step(step: str, dsn: str) -> None:
    """The demo's cap step at its default k (5): the default cap skips fused ranks of the
    dominant guide's further chunks, says so with search's capped line, and another
    citekey's chunk takes the first rank after them."""
    from pgfunnel.search import Funnel

    assert f"'{DEMO_CAP_QUERY}'" in step and "--per-source-cap 3 (the default)" in step, step
    # the default cap acts at k 5 on its own: no second run with --per-source-cap 1
    assert "--per-source-cap 1\n" not in step and "no fused rank skipped" not in step, step
    rows = [(int(m[1]), m[2], int(m[3])) for m in re.finditer(
        r"^(\d+)  (\S+)  lex \S+  dense \S+  fused (\d+)  ", step, re.M)]
    assert [r[0] for r in rows] == [1, 2, 3, 4, 5], step
    fused = [r[2] for r in rows]
    missing = [m for m in range(1, max(fused) + 1) if m not in fused]
    assert missing, f"no fused rank skipped: {fused}"
    dominant = rows[0][1]
    assert [r[1] for r in rows[:3]] == [dominant] * 3, rows
    # the first chunk after the gap is another citekey's, moved up past the capped ones
    after = next(r for r in rows if r[2] > missing[0])
    assert after[1] != dominant and after[2] > after[0], rows
    assert (f"moved up past the capped chunks: {after[1]} from fused rank {after[2]} to "
            f"rank {after[0]}") in step, step
    ranks = ", ".join(str(m) for m in missing)
    assert re.search(rf"^  capped: fused ranks? {ranks} not shown: --per-source-cap 3 keeps "
                     rf"at most 3 chunks per citekey, .*\({re.escape(dominant)}\); a higher "
                     r"--per-source-cap shows", step, re.M), step
    # the line's explain command, pasted, names the chunks behind the skipped ranks (it
    # said `pgfunnel explain QUERY CITEKEY#ORDINAL` with no ordinal anywhere to use)
    command = re.search(r"and `(pgfunnel explain [^`]*)` names its capped chunks as "
                        r"CITEKEY#ORDINAL", step)
    assert command, step
    args = shlex.split(command[1])
    # the demo was given --dsn: the command names it, or it read another server
    at = args.index("--dsn")
    assert args[at + 1] == dsn, args
    assert args[:at] + args[at + 2:] == ["pgfunnel", "explain", DEMO_CAP_QUERY, dominant,
                                         "-c", "demo", "-k", "5"], args
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    res = CliRunner().invoke(app, args[1:], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    [listed] = [ln for ln in res.stdout.splitlines() if ln.startswith("  capped: ")]
    assert [int(r) for r in re.findall(r"#[0-9]+ \(fused rank ([0-9]+)\)", listed)] == \
        missing, listed
    # the skipped ranks are the dominant guide's chunks: uncapped, they are there
    with Funnel(dsn, "demo") as funnel:
        uncapped = funnel.search(DEMO_CAP_QUERY, k=max(fused), per_source_cap=100)
    by_rank = {r.fused_rank: r.citekey for r in uncapped.results}
    assert [by_rank[m] for m in missing] == [dominant] * len(missing), by_rank


def test_the_demos_cap_step_with_a_small_k(sample_db: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """At -k 2 or 3 the default cap skips no rank of the cap query: the step shows the same
    query with --per-source-cap 1 too, saying so; at -k 1 no cap can skip a rank."""
    from pgfunnel.cli.main import _demo_cap

    from pgfunnel.search import Funnel

    with Funnel(sample_db) as funnel:
        _demo_cap(funnel, 3)
        three = capsys.readouterr().out
        _demo_cap(funnel, 1)
        one = capsys.readouterr().out
    assert "  no fused rank skipped in the first 3 results at the default cap: the same " \
        "query with --per-source-cap 1, which keeps one chunk per citekey:" in three, three
    default, capped = three.split("\n--per-source-cap 1\n")
    assert "capped:" not in default and "moved up" not in default, default
    fused = [int(m) for m in re.findall(r"  fused (\d+)  ", capped)]
    assert len(fused) == 3 and fused[0] == 1 and fused[1] > 2, capped
    assert re.search(r"^  capped: fused ranks 2, .* --per-source-cap 1 keeps at most 1 chunk "
                     r"per citekey", capped, re.M), capped
    assert "  moved up past the capped chunks: " in capped, capped
    assert "--per-source-cap 1" not in one, one
    assert "  no fused rank can be skipped in the first result: the cap keeps each " \
        "citekey's first chunk" in one, one


def test_the_demos_psql_line_names_a_psql_that_runs(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # on a machine without psql the closing line failed with `psql: command not found`;
    # the embedded server's wheel ships one (README, docs/cli.md `dsn`)
    own = tmp_path / "own"
    own.mkdir()
    (own / "psql").write_text("#!/bin/sh\n")
    (own / "psql").chmod(0o755)
    monkeypatch.setenv("PATH", str(own))
    assert demo_psql() == ("psql", False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    psql, bundled = demo_psql()
    assert bundled and psql != "psql"
    res = subprocess.run([*shlex.split(psql), "--version"], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0 and res.stdout.startswith("psql (PostgreSQL) "), res


def test_embed_prints_the_vector_funnel_search_is_given(sample_db: str, embedder: Any) -> None:
    import numpy as np
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    from pgfunnel.db import connect
    from pgfunnel.search import Funnel

    query = "get my money back on a monthly subscription"
    res = CliRunner().invoke(app, ["embed", query, "--dsn", sample_db])
    assert res.exit_code == 0, res.output
    literal = res.stdout.strip()
    values = np.array([float(x) for x in literal.strip("[]").split(",")])
    assert values.shape == (384,)
    assert np.allclose(values, embedder.embed_query(query), atol=1e-6)
    # the literal, pasted into SQL, gives what the Python API gives for the text
    with connect(sample_db, autocommit=True) as conn:
        in_sql = [r[0] for r in conn.execute(
            "select chunk_id from funnel_search(%s, %s::vector, 10)", (query, literal))]
    funnel = Funnel(sample_db)
    first = funnel.search(query, k=10)
    assert in_sql == [r.chunk_id for r in first.results]
    # the model's load is timed apart from the query's embedding, on the search that loaded it
    assert first.timings_ms["model_load"] > 0 and first.timings_ms["embed"] > 0
    assert "model_load" not in funnel.search(query, k=10).timings_ms

    res = CliRunner().invoke(app, ["embed", query, "-c", "nope", "--dsn", sample_db])
    assert res.exit_code == 1 and "'nope' does not exist" in res.output
    for empty in ("", "  \n"):
        res = CliRunner().invoke(app, ["embed", empty, "--dsn", sample_db])
        assert res.exit_code == 1, res.output
        # it said "empty text: nothing to embed", naming no argument
        assert "error: TEXT: is empty or only white space: there is nothing to embed" in \
            " ".join(res.output.split()), res.output
        assert "[" not in res.stdout


def test_delete_says_which_citekeys_were_not_there(sample_db: str) -> None:
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    res = CliRunner().invoke(app, ["delete", "err-6358", "no-such-doc", "--dsn", sample_db])
    assert res.exit_code == 0, res.output
    assert "1 document deleted" in res.output
    # named, not only counted: which of several was a typo was the user's to find
    assert "1 of the citekeys given was not in collection 'default': 'no-such-doc'." \
        in res.output, res.output
    # a file's name given for the path from its folder that is its citekey is pointed at it
    with psycopg.connect(sample_db) as conn:
        conn.execute("update pgfunnel.document set citekey = 'billing/refunds-annual' "
                     "where citekey = 'refunds-annual'")
    res = CliRunner().invoke(app, ["delete", "refunds-annual", "no-such-doc", "no-such-doc",
                                   "--dsn", sample_db], env={"COLUMNS": "300"})
    assert res.exit_code == 0, res.output
    assert res.output == (
        "0 documents deleted.\n2 of the citekeys given were not in collection 'default': "
        "'refunds-annual' (stored under a longer path: 'billing/refunds-annual'), "
        "'no-such-doc'.\n"), res.output
    res = CliRunner().invoke(app, ["delete", "billing/refunds-annual", "gone", "--json",
                                   "--dsn", sample_db])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == {"collection": "default", "deleted": 1, "not_found": 1,
                                      "not_found_citekeys": ["gone"],
                                      "not_found_hints": [{"citekey": "gone", "other_forms": [],
                                                           "other_forms_more": 0,
                                                           "longer_paths": [],
                                                           "longer_paths_more": 0}]}


def test_delete_says_how_many_stored_citekeys_its_hint_does_not_name(
        sample_db: str, tmp_path: Path) -> None:
    """A hint names three stored citekeys of each kind: with five `*/setup` stored, the
    note and `--json` listed three with no word of the other two, as if they were all."""
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    folder = tmp_path / "guides"
    for name in "abcde":
        (folder / name).mkdir(parents=True)
        (folder / name / "setup.md").write_text(f"# Setup {name}\n\nInstall {name} first.\n")
    res = CliRunner().invoke(app, ["ingest", str(folder), "-c", "five", "--dsn", sample_db])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(app, ["delete", "setup", "-c", "five", "--dsn", sample_db],
                             env={"COLUMNS": "300"})
    assert res.exit_code == 0, res.output
    assert "'setup' (stored under a longer path: 'a/setup', 'b/setup', 'c/setup' and 2 " \
        "more)." in res.output, res.output
    res = CliRunner().invoke(app, ["delete", "setup", "--json", "-c", "five",
                                   "--dsn", sample_db])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["not_found_hints"] == [
        {"citekey": "setup", "other_forms": [], "other_forms_more": 0,
         "longer_paths": ["a/setup", "b/setup", "c/setup"], "longer_paths_more": 2}]
    # three stored: all named, none more
    res = CliRunner().invoke(app, ["delete", "a/setup", "b/setup", "-c", "five",
                                   "--dsn", sample_db])
    res = CliRunner().invoke(app, ["delete", "setup", "--json", "-c", "five",
                                   "--dsn", sample_db])
    assert json.loads(res.stdout)["not_found_hints"][0]["longer_paths_more"] == 0


def test_delete_reads_the_collection_and_encoding_once_for_its_hints(
        sample_db: str, monkeypatch: Any) -> None:
    """Each citekey not found looked up the collection's id and the server's encoding
    again, twice (the Unicode-form and the longer-path hint): a delete of five missing
    citekeys asked the same two questions ten times. Its statements no longer grow with
    the citekeys missing."""
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    from pgfunnel import db as pgfunnel_db

    statements: list[str] = []
    opened = pgfunnel_db.connect

    def counted_connect(*args: Any, **kwargs: Any) -> Any:
        conn = opened(*args, **kwargs)
        execute = conn.execute

        def counted(query: Any, *qargs: Any, **qkwargs: Any) -> Any:
            statements.append(query if isinstance(query, str) else repr(query))
            return execute(query, *qargs, **qkwargs)

        conn.execute = counted  # type: ignore[method-assign]
        return conn

    monkeypatch.setattr(pgfunnel_db, "connect", counted_connect)

    def asked(*missing: str) -> tuple[int, int]:
        statements.clear()
        res = CliRunner().invoke(app, ["delete", *missing, "--dsn", sample_db],
                                 env={"COLUMNS": "300"})
        assert res.exit_code == 0 and "not in collection 'default'" in res.output, res.output
        return (sum("server_encoding" in s for s in statements),
                sum("from pgfunnel.collection where name" in s for s in statements))

    encoding, collection = asked("gone-1")
    assert encoding == 1 and collection >= 1, statements
    assert asked("gone-1", "gone-2", "gone-3", "gone-4", "gone-5") == (encoding, collection), \
        statements


def test_delete_names_a_citekey_stored_in_another_unicode_form(sample_db: str,
                                                               tmp_path: Path) -> None:
    """A Mac writes file names decomposed (NFD), so a file's citekey holds `e` and a
    combining accent where a keyboard types `é`: `pgfunnel delete 'Résumé notes'` matched
    nothing and said only that it was not in the collection. The note now names the
    stored citekey, which prints alike, and says how it differs; it deletes when given."""
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    decomposed = "Re\u0301sume\u0301 notes"
    typed = unicodedata.normalize("NFC", decomposed)
    assert typed != decomposed
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / f"{decomposed}.md").write_text("# Notes\n\nA résumé of the quarter.\n")
    (folder / "work").mkdir()
    (folder / "work" / "Cafe\u0301.md").write_text("# Café\n\nThe café opens at nine.\n")
    res = CliRunner().invoke(app, ["ingest", str(folder), "-c", "notes", "--dsn", sample_db])
    assert res.exit_code == 0, res.output
    # under a folder too: the file's name typed is its path's end in the other form
    res = CliRunner().invoke(app, ["delete", "Caf\u00e9", "-c", "notes", "--dsn", sample_db],
                             env={"COLUMNS": "300"})
    assert "'Caf\u00e9' (stored under a longer path: 'work/Cafe\u0301')." in res.output, \
        ascii(res.output)
    res = CliRunner().invoke(app, ["delete", typed, "-c", "notes", "--dsn", sample_db],
                             env={"COLUMNS": "300"})
    assert res.exit_code == 0, res.output
    assert res.output == (
        "0 documents deleted.\n1 of the citekeys given was not in collection 'notes': "
        f"'{typed}' (stored with decomposed accents: '{decomposed}').\n"), ascii(res.output)
    # and the other way round: the citekey given decomposed, the one stored composed
    res = CliRunner().invoke(app, ["delete", "r\u00e9sume\u0301", "--dsn", sample_db])
    assert "not in collection 'default': 'r\u00e9sume\u0301'." in res.output, res.output
    with psycopg.connect(sample_db) as conn:
        conn.execute("update pgfunnel.document set citekey = 'r\u00e9sum\u00e9' "
                     "where citekey = 'refunds-annual'")
    res = CliRunner().invoke(app, ["delete", "re\u0301sume\u0301", "--dsn", sample_db],
                             env={"COLUMNS": "300"})
    assert "(stored with composed accents: 'r\u00e9sum\u00e9')." in res.output, \
        ascii(res.output)
    res = CliRunner().invoke(app, ["delete", decomposed, "-c", "notes", "--dsn", sample_db])
    assert res.exit_code == 0 and res.output == "1 document deleted.\n", res.output


def test_delete_json_gives_each_citekey_not_found_the_hints_the_text_gives(
        sample_db: str, tmp_path: Path) -> None:
    """`pgfunnel delete` names, for a citekey it did not find, the stored citekeys it may
    have meant (another Unicode form, a longer path); `--json` listed the citekeys alone,
    so a script had only the bare list. Each citekey not found now has an entry in
    `not_found_hints`, in the order given, with both lists always there, every one looked
    up (the text names five)."""
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    decomposed = "Re\u0301sume\u0301 notes"
    typed = unicodedata.normalize("NFC", decomposed)
    folder = tmp_path / "notes"
    (folder / "work").mkdir(parents=True)
    (folder / f"{decomposed}.md").write_text("# Notes\n\nA résumé of the quarter.\n")
    (folder / "work" / "setup.md").write_text("# Setup\n\nInstall it first.\n")
    res = CliRunner().invoke(app, ["ingest", str(folder), "-c", "notes", "--dsn", sample_db])
    assert res.exit_code == 0, res.output
    others = [f"gone-{i}" for i in range(5)]
    res = CliRunner().invoke(app, ["delete", typed, *others, "setup", "--json", "-c", "notes",
                                   "--dsn", sample_db])
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout)
    assert got["not_found_citekeys"] == [typed, *others, "setup"]
    none = {"other_forms_more": 0, "longer_paths_more": 0}
    assert got["not_found_hints"] == [
        {"citekey": typed, "other_forms": [decomposed], "longer_paths": [], **none},
        *({"citekey": key, "other_forms": [], "longer_paths": [], **none} for key in others),
        # the seventh citekey not found: past the five the text names, hinted all the same
        {"citekey": "setup", "other_forms": [], "longer_paths": ["work/setup"], **none}]
    # nothing missing: an empty list, not a missing field
    res = CliRunner().invoke(app, ["delete", "work/setup", "--json", "-c", "notes",
                                   "--dsn", sample_db])
    assert json.loads(res.stdout) == {"collection": "notes", "deleted": 1, "not_found": 0,
                                      "not_found_citekeys": [], "not_found_hints": []}


def test_the_demo_legend_names_the_columns_it_prints(empty_db: str,
                                                      monkeypatch: Any) -> None:
    """Piped, the demo's legend said "# = rank after the per-citekey cap" over results
    printed as lines, where no `#` header names the rank: the legend now says what each
    line holds, and each result is such a line however wide the pipe; on a terminal the
    tables' `#` column is the one the legend names."""
    from pgfunnel.cli.common import out
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    for columns in ("200", "2000"):
        res = CliRunner().invoke(app, ["demo", "--dsn", empty_db, "-k", "2"],
                                 env={"COLUMNS": columns})
        assert res.exit_code == 0, res.output
        legend = next(x for x in res.output.splitlines() if x.startswith("3. searches"))
        assert "# =" not in legend and "a line per result: its rank after the per-citekey " \
            "cap, its citekey, lex/dense N" in legend, legend
        results = res.output[res.output.index(legend):res.output.index("done in ")]
        # no table header (the cap step's words name citekeys, a header is a row of them)
        assert not re.search(r"^\W*#?\W*citekey\W+lex\W+dense", results, re.M), results
        assert re.search(r"^1  err-6358  lex \d+  dense \d+  fused \d+  ", results, re.M)
    # a terminal: the tables, whose `#` column the legend names
    monkeypatch.setattr(out, "_force_terminal", True)
    res = CliRunner().invoke(app, ["demo", "--dsn", empty_db, "-k", "2"],
                             env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    text = re.sub(r"\x1b\[[0-9;]*m", "", res.output)
    legend = next(x for x in text.splitlines() if x.startswith("3. searches"))
    assert "# = rank after the per-citekey cap" in legend, legend
    assert re.search(r"^\W*#\W+citekey\W+lex\W+dense\W+fused\W+text", text, re.M), text
