"""The `pgfunnel ...` commands the CLI prints for the user to paste name the database the
user typed with --dsn: pasted without it, a command read PGFUNNEL_DSN or the embedded
server, not the database the command before it had worked on."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import psycopg
from typer.testing import CliRunner

from pgfunnel.db import connect

# no PGFUNNEL_DSN: a pasted command that lost the --dsn reads the embedded server
NO_ENV = {"COLUMNS": "300", "PGFUNNEL_DSN": None}


def _said(output: str) -> str:
    return " ".join(output.split())


def _pasted(said: str, start: str) -> list[str]:
    """The command that starts at ``start`` in ``said`` (up to a backtick, a ';' or the
    end), as a shell splits it, without its leading `pgfunnel`."""
    text = said[said.index(start):]
    for end in ("`", ";"):
        text = text.split(end)[0]
    args = shlex.split(text)
    assert args[0] == "pgfunnel", args
    return args[1:]


def test_reindex_hints_name_the_dsn_typed_and_run_as_pasted(sample_db: str) -> None:
    from pgfunnel.cli.main import app

    res = CliRunner().invoke(app, ["reindex", "--dsn", sample_db, "--analyzer", "simple_v1"],
                             env=NO_ENV)
    assert res.exit_code == 0, res.output
    said = _said(res.output)
    dsn = shlex.quote(sample_db)
    assert (f"Compare it: pgfunnel versions compare --dsn {dsn} 1 2 -c default --queries "
            "QUERIES.jsonl;") in said, said
    switch = _pasted(said, "pgfunnel versions activate")
    assert switch == ["versions", "activate", "--dsn", sample_db, "2", "-c", "default"]
    # pasted as printed, with no PGFUNNEL_DSN, it switches the database reindexed
    switched = CliRunner().invoke(app, switch, env=NO_ENV)
    assert switched.exit_code == 0, switched.output
    rollback = _pasted(_said(switched.output), "pgfunnel versions rollback")
    assert rollback == ["versions", "rollback", "--dsn", sample_db, "-c", "default"]
    with connect(sample_db, autocommit=True) as conn:
        assert conn.execute("select version from pgfunnel.index_version "
                            "where state = 'active'").fetchone() == (2,)
    # a DSN from PGFUNNEL_DSN is what a pasted command reads too: nothing is added
    res = CliRunner().invoke(app, ["reindex", "--analyzer", "simple_v2"],
                             env={**NO_ENV, "PGFUNNEL_DSN": sample_db})
    assert res.exit_code == 0, res.output
    said = _said(res.output)
    assert "Switch: pgfunnel versions activate 3 -c default" in said, said
    assert "--dsn" not in said


def test_an_error_hint_names_the_dsn_typed(empty_db: str) -> None:
    """The library's "run `pgfunnel init`" is printed with the user's --dsn: the init
    pasted from it installs the schema where the search failed."""
    from pgfunnel.cli.main import app

    res = CliRunner().invoke(app, ["search", "refund", "--lexical-only", "--dsn", empty_db],
                             env=NO_ENV)
    said = _said(res.output)
    assert res.exit_code == 1 and said.startswith("error: "), said
    assert f"run `pgfunnel init --dsn {shlex.quote(empty_db)}`" in said, said
    init = _pasted(said, "pgfunnel init")
    ran = CliRunner().invoke(app, init, env=NO_ENV)
    assert ran.exit_code == 0 and "schema installed" in ran.output, ran.output
    # and the next step it names, the ingest, is into that database too
    ran = CliRunner().invoke(app, ["search", "refund", "--lexical-only", "--dsn", empty_db],
                             env=NO_ENV)
    said = _said(ran.output)
    assert ran.exit_code == 1, said
    assert (f"pgfunnel ingest --dsn {shlex.quote(empty_db)} PATH --collection default"
            in said), said


def test_doctor_advice_names_the_dsn_typed_in_text_and_in_json(empty_db: str) -> None:
    """doctor --json gave its findings' `pgfunnel init` bare: pasted from a report, it
    installed the schema in PGFUNNEL_DSN's database or the embedded server."""
    from pgfunnel.cli.main import app

    res = CliRunner().invoke(app, ["doctor", "--dsn", empty_db], env=NO_ENV)
    assert res.exit_code == 3, res.output
    assert f"`pgfunnel init --dsn {shlex.quote(empty_db)}`" in _said(res.output), res.output
    res = CliRunner().invoke(app, ["doctor", "--dsn", empty_db, "--json"], env=NO_ENV)
    assert res.exit_code == 3, res.output
    messages = [f["message"] for f in json.loads(res.stdout)["findings"]]
    said = [m for m in messages if "pgfunnel init" in m]
    assert said and all(f"`pgfunnel init --dsn {shlex.quote(empty_db)}`" in m
                        for m in said), messages
    # pasted as the JSON gives it, with no PGFUNNEL_DSN, it mends the database checked
    ran = CliRunner().invoke(app, _pasted(said[0], "pgfunnel init"), env=NO_ENV)
    assert ran.exit_code == 0 and "schema installed" in ran.output, ran.output
    res = CliRunner().invoke(app, ["doctor", "--dsn", empty_db, "--json"], env=NO_ENV)
    report = json.loads(res.stdout)
    assert res.exit_code == 0 and report["ok"], res.stdout
    # what is left is the note on row security, whose `init --rls` names the DSN too
    assert [f["message"] for f in report["findings"] if "pgfunnel init" in f["message"]] == [
        m for m in (f["message"] for f in report["findings"])
        if f"`pgfunnel init --dsn {shlex.quote(empty_db)} --rls`" in m], res.stdout
    # a DSN from PGFUNNEL_DSN adds nothing: the library's words as they are
    res = CliRunner().invoke(app, ["doctor", "--json"], env={"PGFUNNEL_DSN": empty_db})
    assert "--dsn" not in res.stdout, res.stdout


def test_json_notices_name_the_dsn_typed_and_leave_documents_as_stored(
        sample_db: str) -> None:
    """search --json, explain --json and migrate --json gave "run `pgfunnel migrate`"
    without the --dsn typed; a document's own text or metadata is given as stored."""
    from pgfunnel.cli.main import app

    from pgfunnel import schema

    schema.downgrade(sample_db, "0011")
    hint = "run `pgfunnel init` first"
    with connect(sample_db, autocommit=True) as conn:
        conn.execute("update pgfunnel.document set metadata = %s::jsonb",
                     (json.dumps({"notes": [hint], "message": hint}),))
    dsn = ["--dsn", sample_db]
    migrate = f"run `pgfunnel migrate --dsn {shlex.quote(sample_db)}`"
    res = CliRunner().invoke(app, ["search", "refund", "--lexical-only", "--json", *dsn],
                             env=NO_ENV)
    assert res.exit_code == 0, res.output
    answer = json.loads(res.stdout)
    assert migrate in answer["notices"][-1], answer["notices"]
    assert answer["results"] and all(
        r["metadata"] == {"notes": [hint], "message": hint} for r in answer["results"])
    res = CliRunner().invoke(app, ["explain", "refund", "refunds-monthly#0", "--lexical-only",
                                   "--json", *dsn], env=NO_ENV)
    assert res.exit_code == 0, res.output
    assert migrate in json.loads(res.stdout)[0]["notices"][-1], res.stdout
    # pasted from the JSON, the migrate upgrades the database searched
    ran = CliRunner().invoke(app, _pasted(json.loads(res.stdout)[0]["notices"][-1],
                                          "pgfunnel migrate"), env=NO_ENV)
    assert ran.exit_code == 0, ran.output
    res = CliRunner().invoke(app, ["search", "refund", "--lexical-only", "--json", *dsn],
                             env=NO_ENV)
    assert not any("migrate" in n for n in json.loads(res.stdout)["notices"]), res.stdout


def test_a_dsn_with_a_password_is_not_printed(empty_db: str) -> None:
    from pgfunnel.cli.main import app

    secret = psycopg.conninfo.make_conninfo(empty_db, password="s3cret-pw")
    res = CliRunner().invoke(app, ["search", "refund", "--lexical-only", "--dsn", secret],
                             env=NO_ENV)
    said = _said(res.output)
    assert res.exit_code == 1, said
    assert "s3cret" not in res.output
    assert 'run `pgfunnel init --dsn "$PGFUNNEL_DSN"`' in said, said
    assert said.endswith("(set PGFUNNEL_DSN to your connection string first: the --dsn given "
                         "holds a password, which is not printed)"), said
    # nor is it in a --json answer's messages: doctor's findings say the same
    res = CliRunner().invoke(app, ["doctor", "--dsn", secret, "--json"], env=NO_ENV)
    assert res.exit_code == 3, res.output
    assert "s3cret" not in res.output
    messages = [f["message"] for f in json.loads(res.stdout)["findings"]
                if "pgfunnel init" in f["message"]]
    assert messages, res.stdout
    for message in messages:
        assert '`pgfunnel init --dsn "$PGFUNNEL_DSN"`' in message, message
        assert message.endswith("(set PGFUNNEL_DSN to your connection string first: the "
                                "--dsn given holds a password, which is not printed)"), message


def test_a_hint_for_a_command_of_the_collection_names_the_collection_typed(
        sample_db: str, tmp_path: Path) -> None:
    """ingest's `pgfunnel reindex --model` changes the model of the collection ingested
    into: pasted without its -c, it reindexed 'default'."""
    from pgfunnel.cli.main import app

    (tmp_path / "a.md").write_text("# Notes\n\nA refund takes five days.\n")
    res = CliRunner().invoke(app, ["ingest", str(tmp_path), "-c", "default", "--model",
                                   "some/other-model", "--dsn", sample_db], env=NO_ENV)
    said = _said(res.output)
    assert res.exit_code == 1, said
    assert (f"`pgfunnel reindex --dsn {shlex.quote(sample_db)} -c default --model`"
            in said), said
    # a hint that names its collection already is not given a second -c
    res = CliRunner().invoke(app, ["versions", "activate", "1", "-c", "default", "--dsn",
                                   sample_db, "--json"], env=NO_ENV)
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(app, ["reindex", "-c", "default", "--analyzer", "simple_v1",
                                   "--dsn", sample_db], env=NO_ENV)
    said = _said(res.output)
    assert res.exit_code == 0, said
    assert _pasted(said, "pgfunnel versions activate").count("-c") == 1, said


def test_the_demo_sql_line_names_the_dsn_only_as_typed(empty_db: str) -> None:
    """The demo's `pgfunnel embed` (inside its psql line) is built as every other
    suggestion: --dsn as typed, nothing from PGFUNNEL_DSN (which the pasted line reads
    too)."""
    from pgfunnel.cli.main import app

    res = CliRunner().invoke(app, ["demo", "--k", "1"],
                             env={**NO_ENV, "PGFUNNEL_DSN": empty_db})
    assert res.exit_code == 0, res.output
    # `psql`, or the embedded server's psql by its path where the PATH has none
    line = next(x for x in res.output.splitlines() if x.startswith("  ") and " -v q=" in x)
    assert "pgfunnel embed 'ERR-" in line and "--dsn" not in line, line
