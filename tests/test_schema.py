"""Schema install, migrations round trip, and the errors a missing schema gives."""

from __future__ import annotations

import json
import math
import shlex
import subprocess
from pathlib import Path
from typing import Any

import psycopg
import pytest
from funnel_util import conninfo_part, one_row

from pgfunnel import schema
from pgfunnel.db import connect, require_schema
from pgfunnel.errors import ConfigError, ConnectionFailedError, PgfunnelError, SchemaMissingError


def _pg_dump_schema(dsn: str) -> str:
    from funnel_util import pg_bin

    out = subprocess.run([pg_bin("pg_dump"), "--schema-only", "--no-owner", "--no-privileges",
                          "--schema=pgfunnel", dsn], check=True, capture_output=True, text=True)
    # restrict_key lines are random per dump (pg_dump >= 17.6); they are not schema
    return "\n".join(line for line in out.stdout.splitlines()
                     if not line.startswith(("\\restrict", "\\unrestrict")))


def _tables(conn: psycopg.Connection[Any]) -> set[str]:
    return {r[0] for r in conn.execute(
        "select table_name from information_schema.tables where table_schema = 'pgfunnel'")}


def test_init_is_idempotent(empty_db: str) -> None:
    first = schema.init(empty_db)
    assert first["created"] is True
    with connect(empty_db) as conn:
        before = _pg_dump_schema(empty_db)
        assert {"collection", "document", "chunk", "index_version", "embedding", "posting",
                "term_stat", "lexical", "search_log", "search_trace", "qrel"} <= _tables(conn)
    second = schema.init(empty_db)
    assert second["created"] is False and second["revision"] == first["revision"]
    assert _pg_dump_schema(empty_db) == before


def test_migrate_replaces_search_functions_whose_result_columns_changed(
        empty_db: str) -> None:
    schema.init(empty_db)
    args = ("text, vector, integer, text, text[], text, text, timestamptz, jsonb, text, "
            "double precision, double precision[], integer, integer, integer, integer, "
            "integer, double precision, double precision, boolean")
    fresh = _pg_dump_schema(empty_db)
    with connect(empty_db, autocommit=True) as conn:
        # public.funnel_search as a release before section_path returned it: create or
        # replace cannot change a result type, only a drop can (its body calls
        # pgfunnel.funnel_search, as every release's did, which tells it from an
        # application's own)
        conn.execute(f"drop function public.funnel_search({args})")
        conn.execute(f"create function public.funnel_search({args}) "
                     "returns table (chunk_id bigint, heading text) language sql "
                     "as 'select f.chunk_id, f.heading from pgfunnel.funnel_search($1) f'")
    schema.migrate(empty_db)
    with connect(empty_db, autocommit=True) as conn:
        names = conn.execute(
            "select p.proargnames from pg_proc p where p.oid = "
            f"'public.funnel_search({args})'::regprocedure").fetchone()
        assert names is not None and "section_path" in names[0]
    assert _pg_dump_schema(empty_db) == fresh


def test_migrations_round_trip(empty_db: str) -> None:
    with connect(empty_db, autocommit=True, register=False) as conn:
        schema.ensure_extension(conn)
        conn.execute("create schema pgfunnel")
    schema.upgrade(empty_db, "head")
    assert schema.autogenerate_diff(empty_db) == []
    schema.downgrade(empty_db, "base")
    with connect(empty_db, register=False) as conn:
        assert _tables(conn) <= {"alembic_version"}
        leftover = conn.execute(
            "select count(*) from pg_proc where pronamespace = 'pgfunnel'::regnamespace"
        ).fetchone()
        assert leftover is not None and leftover[0] == 0
    schema.upgrade(empty_db, "head")
    assert schema.autogenerate_diff(empty_db) == []


def test_upgraded_database_equals_fresh_one(server_dsn: str, empty_db: str, db: str) -> None:
    # empty_db: built by the stepwise alembic upgrade; db: cloned from a fresh `init`
    with connect(empty_db, autocommit=True, register=False) as conn:
        schema.ensure_extension(conn)
        conn.execute("create schema pgfunnel")
    schema.upgrade(empty_db, "base")
    for rev in _revisions_in_order():
        schema.upgrade(empty_db, rev)
    with connect(empty_db) as conn:
        schema.install_functions(conn)
        conn.commit()
    assert _pg_dump_schema(empty_db) == _pg_dump_schema(db)


def test_migrate_drops_the_first_releases_dense_hits(db: str) -> None:
    # a database made by the first release (revision 0001), then migrated to head, kept
    # that release's _dense_hits (dimensions, no expected_share): its pg_dump differed
    # from a fresh one's by that function
    first = ("pgfunnel._dense_hits(integer, integer, public.vector, integer, integer, "
             "text[], text, text, timestamptz, jsonb, integer)")
    with connect(db, autocommit=True) as conn:
        conn.execute(f"create function {first} returns bigint[] language sql "
                     "as 'select null::bigint[]'")
        assert conn.execute("select to_regprocedure(%s)", (first,)).fetchone() != (None,)
    schema.migrate(db)
    with connect(db, autocommit=True) as conn:
        assert conn.execute("select to_regprocedure(%s)", (first,)).fetchone() == (None,)


def _revisions_in_order() -> list[str]:
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(schema.alembic_config())
    return [rev.revision for rev in reversed(list(script.walk_revisions()))]


def test_pgvector_in_a_schema_of_its_own_serves_both_legs_and_the_cached_walk(
        empty_db: str) -> None:
    # hosted Postgres often keeps extensions in a schema of their own (Supabase:
    # `extensions`, on its default search_path); the functions and the generated graph
    # walks name that schema (docs/cli.md: it must be on the connection's path)
    import numpy as np
    from funnel_util import active, doc, ingest, unit

    with connect(empty_db, autocommit=True, register=False) as conn:
        conn.execute("create schema ext")
        conn.execute("create extension vector schema ext")
        name = conn.execute("select current_database()").fetchone()[0]  # type: ignore[index]
        conn.execute(f'alter database "{name}" set search_path = "$user", public, ext')
    schema.init(empty_db)
    with connect(empty_db, autocommit=True) as conn:
        assert schema.vector_schema(conn) == "ext"
        vecs = ingest(conn, [doc(f"d{i}", f"note {i} about refunds") for i in range(300)],
                      dims=8)
        vid, _, _ = active(conn, "t")
        q = unit(np.random.default_rng(1), 8)
        assert conn.execute("select cached from pgfunnel._hnsw_walk(%s, %s, 5)",
                            (vid, q)).fetchone() == (True,)
        rows = conn.execute("select lexical_rank, dense_rank from funnel_search('refunds', %s, "
                            "5, collection => 't')", (q,)).fetchall()
        assert len(rows) == 5 and all(r[0] is not None and r[1] is not None for r in rows)
        best = max(vecs, key=lambda c: float(vecs[c][0] @ q))
        assert conn.execute("select citekey from funnel_search(null, %s, 1, collection => 't')",
                            (q,)).fetchone() == (best,)


def test_pgvector_off_the_search_path_is_a_clear_error_before_anything_is_written(
        empty_db: str) -> None:
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    from pgfunnel.doctor import check_pgvector

    with connect(empty_db, autocommit=True, register=False) as conn:
        conn.execute("create schema ext")
        conn.execute("create extension vector schema ext")
    with pytest.raises(PgfunnelError) as info:
        schema.init(empty_db)
    message = str(info.value)
    assert 'schema "ext"' in message and "search_path" in message
    assert "alter role current_user set search_path" in message
    res = CliRunner().invoke(app, ["init", "--dsn", empty_db])
    assert res.exit_code == 1 and "Traceback" not in res.output, res.output
    assert "search_path" in res.output
    with connect(empty_db, autocommit=True, register=False) as conn:
        assert conn.execute("select to_regnamespace('pgfunnel')").fetchone() == (None,)
        [finding] = check_pgvector(conn)
        assert finding.level == "error" and "search_path" in finding.message
        # the fix the message gives, for this session: then init goes through
        path = conn.execute("show search_path").fetchone()[0]  # type: ignore[index]
        name = conn.execute("select current_database()").fetchone()[0]  # type: ignore[index]
        conn.execute(f'alter database "{name}" set search_path = {path}, ext')
    assert schema.init(empty_db)["created"] is True


def test_init_rls_on_an_installed_schema_says_it_is_on(sample_db: str) -> None:
    # it printed only "schema already installed ...; functions refreshed."
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    plain = CliRunner().invoke(app, ["init", "--dsn", sample_db])
    assert plain.exit_code == 0 and "row-level security" not in plain.output
    res = CliRunner().invoke(app, ["init", "--rls", "--dsn", sample_db])
    said = " ".join(res.output.split())
    assert res.exit_code == 0, said
    assert "schema already installed" in said and "row-level security is on" in said
    assert "grant pgfunnel_reader to ROLE" in said


def test_a_failing_migration_is_a_pgfunnel_error_not_a_traceback(empty_db: str) -> None:
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    with connect(empty_db, autocommit=True, register=False) as conn:
        conn.execute("create extension if not exists vector")
        conn.execute("create schema pgfunnel")
        conn.execute("create table pgfunnel.collection (something_else integer)")
    with pytest.raises(PgfunnelError, match="collection"):
        schema.init(empty_db)
    res = CliRunner().invoke(app, ["init", "--dsn", empty_db])
    assert res.exit_code == 1 and "Traceback" not in res.output, res.output
    assert "collection" in res.output


def test_a_failed_migrate_leaves_nothing_half_done_and_says_so(sample_db: str) -> None:
    """A migrate that failed said only its cause (`column "heading_level" ... already
    exists`): not which revision failed, nor that nothing was applied. And the functions
    were installed in a transaction after the revisions': a failure there left the tables
    at this release and the functions at the last one's. Both now say the step that
    failed and the revision the schema stays at, and a retry once the cause is gone
    upgrades it whole."""
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    head = schema.head_revision()

    def state() -> tuple[str | None, bool, str | None]:
        with connect(sample_db, autocommit=True, register=False) as conn:
            column = conn.execute("select exists (select from information_schema.columns "
                                  "where table_schema = 'pgfunnel' and table_name = 'chunk' "
                                  "and column_name = 'heading_level')").fetchone()
            return (schema.current_revision(conn), bool(column and column[0]),
                    schema.installed_functions_digest(conn))

    schema.downgrade(sample_db, "0013")
    with connect(sample_db, autocommit=True, register=False) as conn:
        conn.execute("comment on schema pgfunnel is 'pgfunnel SQL functions older (test)'")
        # a revision that fails: 0014 adds chunk.heading_level, here already there
        conn.execute("alter table pgfunnel.chunk add column heading_level text")
    res = CliRunner().invoke(app, ["migrate", "--dsn", sample_db], env={"COLUMNS": "300"})
    said = " ".join(res.output.split())
    assert res.exit_code == 1, res.output
    assert said.startswith("error: migration 0014_chunk_heading_level failed: column "
                           '"heading_level" of relation "chunk" already exists; nothing was '
                           "upgraded:"), said
    assert "the schema stays at revision 0013 with its functions as they were" in said, said
    assert state() == ("0013", True, "older")
    with connect(sample_db, autocommit=True, register=False) as conn:
        conn.execute("alter table pgfunnel.chunk drop column heading_level")
        # the functions fail: sql/030 drops this function, which a view depends on
        conn.execute("create function pgfunnel._visible_sql() returns text language sql "
                     "as 'select 1::text'")
        conn.execute("create view public.depends_on_it as select pgfunnel._visible_sql()")
    # a MigrationError, or the cause's own class where it is one a caller tells apart
    with pytest.raises(PgfunnelError) as failed:
        schema.migrate(sample_db)
    assert str(failed.value).startswith("installing this release's SQL functions (after its "
                                        "revisions) failed: "), failed.value
    assert "depends_on_it" in str(failed.value) or "depend" in str(failed.value)
    assert "the schema stays at revision 0013" in str(failed.value), failed.value
    # not at the head with the older functions: the revisions rolled back with them
    assert state() == ("0013", False, "older")
    with connect(sample_db, autocommit=True, register=False) as conn:
        conn.execute("drop view public.depends_on_it")
    res = CliRunner().invoke(app, ["migrate", "--dsn", sample_db], env={"COLUMNS": "300"})
    assert res.exit_code == 0, res.output
    assert " ".join(res.output.split()).startswith(
        f"schema upgraded to revision {head} (was 0013); functions refreshed."), res.output
    assert state() == (head, True, schema.functions_digest())


def test_a_statement_timeout_in_a_migration_is_said_as_a_migrations(sample_db: str) -> None:
    """A statement_timeout that cut an upgrade short was translated as a search's: a
    SearchTimeoutError, advice for a search. It is a StatementTimeoutError naming the
    step, with advice for the command that migrates. The timeout comes from inside the
    upgrade's transaction (init and migrate set 0 for their session): an event trigger
    sets one for the rest of the transaction at the first DDL and sleeps at each, so the
    second DDL statement runs past it."""
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    from pgfunnel.errors import SearchTimeoutError, StatementTimeoutError

    schema.downgrade(sample_db, "0013")
    with connect(sample_db, autocommit=True, register=False) as conn:
        conn.execute("create function public.slow_ddl() returns event_trigger "
                     "language plpgsql as $$ begin "
                     "perform pg_catalog.set_config('statement_timeout', '100ms', true); "
                     "perform pg_catalog.pg_sleep(0.3); end $$")
        conn.execute("create event trigger slow_ddl on ddl_command_start "
                     "execute function public.slow_ddl()")
        role = conn.execute("select current_user").fetchone()
    with pytest.raises(StatementTimeoutError) as failed:
        schema.migrate(sample_db)
    said = str(failed.value)
    assert not isinstance(failed.value, SearchTimeoutError), said
    assert said.startswith("migration 00"), said
    assert " failed: canceling statement due to statement timeout: a statement_timeout " \
        "reached the upgrade's transaction although init and migrate set 0" in said, said
    assert f'(alter role "{role[0] if role else None}" set statement_timeout = 0' in said, said
    assert "the schema stays at revision 0013" in said, said
    res = CliRunner().invoke(app, ["migrate", "--dsn", sample_db], env={"COLUMNS": "300"})
    assert res.exit_code == 1 and "Traceback" not in res.output, res.output
    assert " ".join(res.output.split()).startswith("error: migration 00"), res.output
    assert "search" not in res.output, res.output
    with connect(sample_db, autocommit=True, register=False) as conn:
        conn.execute("drop event trigger slow_ddl")
        assert schema.current_revision(conn) == "0013"
    assert schema.migrate(sample_db)["revision"] == schema.head_revision()


def test_missing_schema_says_run_init(empty_db: str) -> None:
    with connect(empty_db) as conn, pytest.raises(SchemaMissingError, match="pgfunnel init"):
        require_schema(conn)


def test_funnel_search_without_schema_says_run_init(empty_db: str) -> None:
    import numpy as np

    from pgfunnel.search import Funnel

    with pytest.raises(SchemaMissingError, match="pgfunnel init"):
        Funnel(empty_db, embedder=None).search("refund")
    # with a query vector the dimension check is the first statement to miss the schema
    with pytest.raises(SchemaMissingError, match="pgfunnel init"):
        Funnel(empty_db, embedder=None).search("refund", query_embedding=np.ones(384))
    # an empty query searches nothing, but still says that there is nothing to search in
    for empty in ("", "   "):
        with pytest.raises(SchemaMissingError, match="pgfunnel init"):
            Funnel(empty_db, embedder=None).search(empty)


def test_an_empty_query_on_a_missing_collection_is_an_error(db: str) -> None:
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    from pgfunnel.errors import NotFoundError
    from pgfunnel.search import Funnel

    with pytest.raises(NotFoundError, match="'nosuch' does not exist"):
        Funnel(db, "nosuch", embedder=None).search("")
    res = CliRunner().invoke(app, ["search", "", "-c", "nosuch", "--dsn", db])
    assert res.exit_code == 1 and "'nosuch' does not exist" in res.output, res.output


def test_search_with_pgvector_off_the_search_path_names_the_path(db: str) -> None:
    import numpy as np

    from pgfunnel.errors import ConfigError
    from pgfunnel.search import Funnel

    # hosted Postgres often keeps extensions in a schema of their own
    with connect(db, autocommit=True) as conn:
        conn.execute("create schema ext")
        conn.execute("alter extension vector set schema ext")
    off_path = psycopg.conninfo.make_conninfo(db, options="-c search_path=public")
    with pytest.raises(ConfigError, match='pgvector is installed in schema "?ext"?'):
        Funnel(off_path, embedder=None).search("refund", query_embedding=np.ones(384))


@pytest.mark.parametrize("command", [["search", "refund"], ["search", "refund", "--lexical-only"],
                                     ["search", ""], ["explain", "refund", "a#0"],
                                     ["eval", "QUERIES"], ["reindex"]])
def test_cli_without_schema_says_run_init(empty_db: str, tmp_path: Path,
                                          command: list[str]) -> None:
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    queries = tmp_path / "q.jsonl"
    queries.write_text('{"query_id": "q", "query": "refund", "slice": "s", '
                       '"relevant": {"a": 1}}\n')
    args = [str(queries) if a == "QUERIES" else a for a in command]
    res = CliRunner().invoke(app, [*args, "--dsn", empty_db])
    assert res.exit_code == 1, res.output
    # with the --dsn typed, that the init pasted reaches this database
    assert f"run `pgfunnel init --dsn {shlex.quote(empty_db)}`" in " ".join(res.output.split())
    assert "Traceback" not in res.output
    assert res.output.startswith("error:"), res.output  # no empty progress line above it


def test_cli_without_schema_prints_one_error_line(empty_db: str) -> None:
    # psycopg logs a note when the failed statement aborted its pipeline; with nothing
    # configuring logging, Python prints it to stderr above the CLI's own error line
    # (pytest's log capture hides it, so the command runs as a user runs it)
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-c", "from pgfunnel.cli.main import app; app()",
                          "search", "refund", "--lexical-only", "--dsn", empty_db],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 1
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: the pgfunnel schema is not "
                                                   "installed"), res.stderr


def test_python_search_without_schema_raises_without_a_psycopg_log_line(empty_db: str) -> None:
    # the same note, from a library user's script: only the raised error is printed
    import subprocess
    import sys

    script = ("from pgfunnel.search import Funnel\n"
              "try:\n"
              f"    Funnel({empty_db!r}, embedder=None).search('refund')\n"
              "except Exception as exc:\n"
              "    print(type(exc).__name__)\n")
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0 and res.stdout.strip() == "SchemaMissingError", res
    assert res.stderr == "", res.stderr
    # the note psycopg logs when an aborted pipeline closes (whether one is logged above
    # depends on when the pipeline is torn down): dropped once pgfunnel.search is loaded,
    # printed by Python's last-resort handler otherwise
    note = ("import logging\n{}logging.getLogger('psycopg').warning("
            "'error ignored terminating %r: %s', 'P', 'pipeline aborted')\n")
    for loaded, printed in (("", True), ("import pgfunnel.search\n", False)):
        res = subprocess.run([sys.executable, "-c", note.format(loaded)], capture_output=True,
                             text=True, timeout=120)
        assert ("error ignored terminating" in res.stderr) is printed, res.stderr


def test_unreachable_dsn_is_a_clear_error() -> None:
    # the cause libpq gives is kept, not only its closing hint
    with pytest.raises(ConnectionFailedError, match="cannot connect.*Connection refused"):
        connect("postgresql://nobody@127.0.0.1:1/none?connect_timeout=2")


@pytest.mark.parametrize("command", [["search", "x"], ["doctor"], ["versions", "list"]])
def test_a_malformed_dsn_is_one_clear_line_from_every_command(command: list[str]) -> None:
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    from pgfunnel.errors import ConfigError

    with pytest.raises(ConfigError, match="dsn: not a valid connection string"):
        connect("bogus")
    res = CliRunner().invoke(app, [*command, "--dsn", "bogus"])
    assert res.exit_code == 1, res.output
    assert "not a valid connection string" in res.output
    assert "Traceback" not in res.output


#: SQL functions left without `set search_path` so that Postgres inlines them; their
#: bodies qualify every name instead (checked below and in test_inlined_functions_inline)
INLINED_FUNCTIONS = {"pgfunnel._bm25_idf", "pgfunnel._document_visible", "public.funnel_search"}
#: a query calling each, for the plan check
_INLINE_PROBES = {
    "pgfunnel._bm25_idf": "select pgfunnel._bm25_idf(g, 10000) from generate_series(0, 3) g",
    "pgfunnel._document_visible": (
        "select d.id from pgfunnel.document d where pgfunnel._document_visible("
        "d, '{alice}', 't1', 'en', now(), '{\"a\": 1}')"),
    "public.funnel_search": "select * from public.funnel_search('refund', null, 3)",
}


def test_doctor_knows_the_inlined_functions() -> None:
    from pgfunnel.security import UNPINNED_BY_DESIGN

    # doctor checks schema pgfunnel; public.funnel_search is the one wrapper outside it
    assert {sig.split("(")[0] for sig in UNPINNED_BY_DESIGN} == {
        f for f in INLINED_FUNCTIONS if f.startswith("pgfunnel.")}


# functions that run with the owner's rights, and why: see their comment in sql/
DEFINER_FUNCTIONS = ("pgfunnel._term_df", "pgfunnel._lexical_deleted")


def test_sql_files_follow_the_conventions() -> None:
    import re

    for path in schema.sql_files():
        text = path.read_text()
        for m in re.finditer(r"create or replace function ([\w.]+)\(", text):
            body = text[m.start():text.find("$$;", m.start())]
            if m.group(1) in DEFINER_FUNCTIONS:
                # the exceptions, on purpose (sql/020_bm25.sql says why)
                assert "security definer" in body and "set search_path" in body
                continue
            assert "security invoker" in body, f"{path.name}: {m.group(1)} not security invoker"
            if m.group(1) in INLINED_FUNCTIONS:
                code = body[body.index("$$"):]
                assert "set search_path" not in body and "language sql" in body
                # every operator and function of the body names its schema
                assert not re.search(r"\s[-+*/]\s", code), f"{m.group(1)}: unqualified operator"
                for call in re.findall(r"([\w.]+)\(", code):
                    assert call.startswith(("pg_catalog.", "pgfunnel.")) or call == "operator", (
                        f"{m.group(1)}: unqualified call {call}")
            else:
                assert "set search_path" in body, f"{path.name}: {m.group(1)} has no search_path"
        assert text.lower().count("security definer") == sum(
            f"function {name}(" in text for name in DEFINER_FUNCTIONS)


def test_every_function_that_runs_per_search_turns_jit_off(conn: psycopg.Connection[Any]) -> None:
    # a generic plan over a large collection is priced far above what it runs, and where
    # the server has JIT it compiled statements of a 10 ms search for 350 - 400 ms
    from funnel_util import doc, ingest

    ingest(conn, [doc("d1", "refund policy")])  # a graph, so a generated cached walk
    config = {name: list(cfg or []) for name, cfg in conn.execute(
        "select proname, proconfig from pg_proc "
        "where pronamespace = 'pgfunnel'::regnamespace").fetchall()}
    per_search = {name for name, cfg in config.items()
                  if "plan_cache_mode=force_generic_plan" in cfg}
    assert {"funnel_search", "candidates", "final", "_pool", "_lexical_hits", "_dense_hits",
            "_hnsw_walk", "_hnsw_walk_planned"} <= per_search
    for name in per_search | {"explain"}:
        assert "jit=off" in config[name], name


def test_inlined_functions_inline(db: str) -> None:
    """The SQL functions without a SET clause are inlined, under a hostile search_path too."""
    with connect(db, autocommit=True) as conn:
        conn.execute("create schema hostile")
        # an operator that would shadow pg_catalog's if the body left + unqualified
        conn.execute("create function hostile.evil_add(float8, float8) returns float8 "
                     "language sql as 'select 1e6::float8'")
        conn.execute("create operator hostile.+ (function = hostile.evil_add, "
                     "leftarg = float8, rightarg = float8)")
        conn.execute("set search_path = hostile, pg_catalog")
        assert set(_INLINE_PROBES) == INLINED_FUNCTIONS
        for name, probe in _INLINE_PROBES.items():
            plan = "\n".join(r[0] for r in conn.execute(f"explain verbose {probe}"))
            if name == "public.funnel_search":
                # the wrapper is gone: the query calls what it wraps
                assert "Function Call: pgfunnel.funnel_search(" in plan, plan
            else:
                assert name.split(".")[1] not in plan, plan
        # inlined, the visibility test is the indexable predicate itself
        plan = "\n".join(r[0] for r in conn.execute(
            "explain select d.id from pgfunnel.document d where "
            "pgfunnel._document_visible(d, '{alice}', null, null, now(), null)"))
        assert "readers && '{alice}'::text[]" in plan, plan
        got = [r[0] for r in conn.execute(
            "select pgfunnel._bm25_idf(df, 10000) "
            "from unnest(array[0, 1, 500, 10000]::bigint[]) df")]
    want = [math.log(1 + (10000 - df + 0.5) / (df + 0.5)) for df in (0, 1, 500, 10000)]
    assert got == pytest.approx(want, rel=1e-12)


def test_stop_embedded_stops_and_the_next_connection_starts_it_again(tmp_path: Path) -> None:
    from pgfunnel.db import embedded_dsn, stop_embedded

    home = tmp_path / "home"
    with connect(embedded_dsn(home)) as conn:
        assert conn.execute("select 1").fetchone() == (1,)
    assert stop_embedded(home) is True
    assert not (home / "pgdata" / "postmaster.pid").exists()
    assert stop_embedded(home) is False
    with connect(embedded_dsn(home)) as conn:
        assert conn.execute("select 1").fetchone() == (1,)
    assert stop_embedded(home) is True


def test_a_dsn_of_a_stopped_embedded_server_says_how_to_start_it(tmp_path: Path) -> None:
    """`pgfunnel dsn`'s string in PGFUNNEL_DSN, then `pgfunnel stop`: every command failed
    with libpq's "Is the server running locally ...?", and none starts a server named by
    a DSN, so nothing said what to run. The error now names the stopped embedded server
    and that leaving the DSN out starts it, which it does."""
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    from pgfunnel.db import embedded_dsn, stop_embedded

    home = tmp_path / "home"
    dsn = embedded_dsn(home)
    assert stop_embedded(home) is True
    runner = CliRunner()
    res = runner.invoke(app, ["versions", "list"],
                        env={"PGFUNNEL_DSN": dsn, "PGFUNNEL_HOME": str(home),
                             "COLUMNS": "400"})
    assert res.exit_code == 1, res.output
    said = " ".join(res.output.split())
    assert said.startswith("error: cannot connect to Postgres at "), said
    assert (f"({home / 'pgdata'} is the data folder of an embedded Postgres that is not "
            "running: `pgfunnel stop` stops it, and nothing starts a server named by "
            "PGFUNNEL_DSN or --dsn; leave both out and the next command starts it)") in said
    # from another home, the advice names the one to set
    res = runner.invoke(app, ["versions", "list", "--dsn", dsn],
                        env={"PGFUNNEL_DSN": None, "PGFUNNEL_HOME": str(tmp_path / "other"),
                             "COLUMNS": "400"})
    assert res.exit_code == 1, res.output
    assert f"leave both out, with PGFUNNEL_HOME={home}, and the next" in " ".join(
        res.output.split()), res.output
    # the advice, followed: the server starts, at the same address
    res = runner.invoke(app, ["dsn"], env={"PGFUNNEL_DSN": None, "PGFUNNEL_HOME": str(home)})
    assert res.exit_code == 0, res.output
    assert res.stdout.strip() == dsn
    with connect(dsn) as conn:
        assert conn.execute("select 1").fetchone() == (1,)
    assert stop_embedded(home) is True


def _server_version(dsn: str) -> int:
    with connect(dsn, autocommit=True) as conn:
        row = conn.execute("select current_setting('server_version_num')::int").fetchone()
    assert row is not None
    return int(row[0])


def test_init_rls_refuses_up_front_an_owner_that_could_not_finish(empty_db: str) -> None:
    """On Postgres 16+, joining an existing pgfunnel_writer takes ADMIN OPTION on it: without
    it `init --rls` must stop before writing anything (it used to leave the schema installed
    and row-level security off), and name the grant that lets it through. With ADMIN OPTION
    alone (no INHERIT: what Postgres 16+ gives a CREATEROLE role for a role it creates) the
    owner must end up able to write and read its own rows under the forced policies."""
    import uuid

    from _security_helpers import Doc, ingest_docs, with_user
    from psycopg import sql as pgsql

    from pgfunnel.errors import AccessError
    from pgfunnel.security import ensure_roles, rls_enabled

    if _server_version(empty_db) < 160000:
        pytest.skip("before Postgres 16 CREATEROLE alone may grant any role: nothing to refuse")
    owner = f"pgf_owner_{uuid.uuid4().hex[:8]}"
    with connect(empty_db, autocommit=True) as su:
        ensure_roles(su)  # as after `init --rls` on another database of the cluster
        su.execute(pgsql.SQL("create role {} login createrole").format(pgsql.Identifier(owner)))
        su.execute(pgsql.SQL("alter database {} owner to {}").format(
            pgsql.Identifier(su.info.dbname), pgsql.Identifier(owner)))
        su.execute(pgsql.SQL("alter schema public owner to {}").format(pgsql.Identifier(owner)))
        su.execute("create extension if not exists vector")
    as_owner = with_user(empty_db, owner)
    with pytest.raises(AccessError, match="with admin option"):
        schema.init(as_owner, rls=True)
    with connect(empty_db, autocommit=True) as su:
        assert su.execute("select count(*) from pg_namespace where nspname = 'pgfunnel'"
                          ).fetchone() == (0,)
        su.execute(pgsql.SQL("grant pgfunnel_writer to {} with admin option, inherit false, "
                             "set false").format(pgsql.Identifier(owner)))
    schema.init(as_owner, rls=True)
    with connect(as_owner, autocommit=True) as conn:
        assert rls_enabled(conn)
        # membership without INHERIT passes no policy: this ingest used to fail with
        # "new row violates row-level security policy"
        assert conn.execute("select pg_has_role(current_user, 'pgfunnel_writer', 'USAGE')"
                            ).fetchone() == (True,)
    ingest_docs(as_owner, [Doc("mine", "the owner's own document", readers=["x"])])
    with connect(as_owner, autocommit=True) as conn:
        assert conn.execute("select citekey from pgfunnel.document").fetchall() == [("mine",)]


def test_a_delete_only_role_deletes_documents_with_statistics_kept_exact(sample_db: str
                                                                          ) -> None:
    """docs/security.md: USAGE on the schema plus SELECT and DELETE on pgfunnel.document is
    enough to delete documents. The cascade's deletion trigger updates statistics the role
    may not touch itself; before Postgres 18 an AFTER trigger ran as the role that fired
    it, so this failed there (42501 on index_version) until the trigger ran as its owner."""
    import uuid

    from _security_helpers import with_user
    from psycopg import sql as pgsql
    from test_bm25 import _orphan_postings
    from test_ingest import assert_stats_exact

    name = f"pgf_deleter_{uuid.uuid4().hex[:8]}"
    role = pgsql.Identifier(name)
    with connect(sample_db, autocommit=True) as su:
        su.execute(pgsql.SQL("create role {} login").format(role))
        su.execute(pgsql.SQL("grant usage on schema pgfunnel to {}").format(role))
        su.execute(pgsql.SQL("grant select, delete on pgfunnel.document to {}").format(role))
        citekey = su.execute("select citekey from pgfunnel.document order by citekey limit 1"
                             ).fetchone()
        assert citekey is not None
    try:
        with connect(with_user(sample_db, name), autocommit=True) as deleter:
            assert deleter.execute("delete from pgfunnel.document where citekey = %s",
                                   citekey).rowcount == 1
        with connect(sample_db, autocommit=True) as su:
            assert su.execute("select count(*) from pgfunnel.document where citekey = %s",
                              citekey).fetchone() == (0,)
            assert _orphan_postings(su) == 0
            assert_stats_exact(su)
    finally:
        with connect(sample_db, autocommit=True) as su:
            su.execute(pgsql.SQL("drop owned by {}").format(role))
            su.execute(pgsql.SQL("drop role {}").format(role))


def test_init_and_migrate_in_rls_mode_name_the_grant_an_owner_lacks(empty_db: str) -> None:
    """A database in RLS mode whose tables belong to a role outside pgfunnel_writer (what
    `pg_restore --no-owner` of an RLS database as a plain role gives): plain `init` and
    `migrate` renew the policies, so they check first, and name the grant rather than
    failing half-way with Postgres' bare "permission denied to grant role"."""
    import uuid

    from _security_helpers import with_user
    from psycopg import sql as pgsql

    from pgfunnel.errors import AccessError

    owner = f"pgf_owner_{uuid.uuid4().hex[:8]}"
    schema.init(empty_db, rls=True)  # as the superuser
    with connect(empty_db, autocommit=True) as su:
        ident = pgsql.Identifier(owner)
        su.execute(pgsql.SQL("create role {} login").format(ident))
        su.execute(pgsql.SQL("alter database {} owner to {}").format(
            pgsql.Identifier(su.info.dbname), ident))
        su.execute(pgsql.SQL("alter schema pgfunnel owner to {}").format(ident))
        rels = su.execute("select c.oid::regclass::text from pg_class c "
                          "where c.relnamespace = 'pgfunnel'::regnamespace "
                          "and c.relkind in ('r', 'p')").fetchall()
        for (rel,) in rels:
            su.execute(pgsql.SQL("alter table {} owner to {}").format(pgsql.SQL(rel), ident))
        funcs = su.execute("select p.oid::regprocedure::text from pg_proc p "
                           "where p.pronamespace = 'pgfunnel'::regnamespace "
                           "or p.oid = 'public.funnel_search'::regproc").fetchall()
        for (fn,) in funcs:
            su.execute(pgsql.SQL("alter function {} owner to {}").format(pgsql.SQL(fn), ident))
    as_owner = with_user(empty_db, owner)
    with pytest.raises(AccessError, match=f"grant pgfunnel_writer to {owner}"):
        schema.init(as_owner)
    with pytest.raises(AccessError, match=f"grant pgfunnel_writer to {owner}"):
        schema.migrate(as_owner)
    with connect(empty_db, autocommit=True) as su:
        su.execute(pgsql.SQL("grant pgfunnel_writer to {}").format(pgsql.Identifier(owner)))
    schema.init(as_owner)
    schema.migrate(as_owner)


def test_init_puts_pgvector_in_public_rather_than_the_apps_first_schema(empty_db: str) -> None:
    with connect(empty_db, autocommit=True) as conn:
        conn.execute("create schema app")
        conn.execute(psycopg.sql.SQL("alter database {} set search_path = app, public").format(
            psycopg.sql.Identifier(conn.info.dbname)))
    assert schema.init(empty_db)["vector_schema"] == "public"
    with connect(empty_db, autocommit=True) as conn:
        conn.execute("drop schema app cascade")  # the application's own schema, say in a test
        row = conn.execute("select to_regclass('pgfunnel.chunk') is not null").fetchone()
        assert row == (True,)


def test_a_wrong_call_of_a_shipped_function_is_not_a_missing_schema(db: str) -> None:
    """42883 on a function this release ships means the call's arguments are wrong; it was
    reported as "the pgfunnel schema is not installed; run `pgfunnel init`"."""
    from pgfunnel.errors import ConfigError, translate

    with connect(db, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.UndefinedFunction) as wrong:
            conn.execute("select * from pgfunnel.candidates('x', trace => true)")
        with pytest.raises(psycopg.errors.UndefinedFunction) as missing:
            conn.execute("select pgfunnel.no_such_function(1)")
    err = translate(wrong.value)
    assert isinstance(err, ConfigError) and "no pgfunnel.candidates takes these" in str(err)
    # a function no release ships, in a database where pgfunnel is installed: named, not
    # "not installed; run `pgfunnel init`", which init would never have mended
    err = translate(missing.value)
    assert not isinstance(err, SchemaMissingError)
    assert "pgfunnel has no function 'no_such_function'" in str(err)


def test_a_missing_relation_is_not_installed_only_when_pgfunnel_is_missing(
        db: str, empty_db: str) -> None:
    """42P01 was "the pgfunnel schema is not installed; run `pgfunnel init`" for any name
    holding "pgfunnel" or "vector": a typo in an application's SQL (pgfunnel.chunks for
    pgfunnel.chunk) or a missing table of its own (vectors) sent its author to init, which
    had run. Now that is said only where the schema (or a table it creates) is missing;
    otherwise the missing relation is named."""
    import sqlalchemy as sa

    from pgfunnel.errors import PgfunnelError, translate
    from pgfunnel.sqla import engine_from_dsn

    def caught(dsn: str, statement: str) -> PgfunnelError:
        with connect(dsn, autocommit=True) as conn, pytest.raises(psycopg.Error) as raw:
            conn.execute(statement)
        return translate(raw.value)

    typo = caught(db, "select * from pgfunnel.chunks")
    assert type(typo) is PgfunnelError
    assert str(typo) == ('relation "pgfunnel.chunks" does not exist; pgfunnel has no table '
                         "'chunks' (did you mean pgfunnel.chunk?)")
    for own in ("select * from vectors", "select * from app.pgfunnel_notes"):
        err = caught(db, own)
        assert not isinstance(err, SchemaMissingError) and "does not exist" in str(err)
    assert "not installed" not in str(caught(db, "select pgfunnel_vector_fn()"))
    # a version's partition, of a version that is gone: named, nothing suggested for it
    gone = caught(db, "select * from pgfunnel.posting_v999999")
    assert str(gone) == 'relation "pgfunnel.posting_v999999" does not exist', str(gone)
    # the same through SQLAlchemy, as a web application runs its SQL
    engine = engine_from_dsn(db)
    try:
        with engine.connect() as sa_conn, pytest.raises(sa.exc.DBAPIError) as wrapped:
            sa_conn.execute(sa.text("select count(*) from pgfunnel.chunks"))
    finally:
        engine.dispose()
    assert 'relation "pgfunnel.chunks" does not exist' in str(translate(wrapped.value))
    assert not isinstance(translate(wrapped.value), SchemaMissingError)
    # where pgfunnel is not installed, its own names still say so
    for statement in ("select * from pgfunnel.chunk", "select pgfunnel.version()",
                      "select * from pgfunnel.funnel_search('x', null, 5)"):
        assert isinstance(caught(empty_db, statement), SchemaMissingError), statement


def test_migrate_names_older_rows_its_check_constraints_let_stay(sample_db: str) -> None:
    """Migrations 0007 and 0010 add their checks NOT VALID: a document written by hand
    before them stays, and the next UPDATE of it (of any column) is refused. The upgrade
    says so, naming the document, instead of leaving it to a later doctor run."""
    with connect(sample_db, autocommit=True) as conn:
        first, second = (r[0] for r in conn.execute(
            "select citekey from pgfunnel.document order by citekey limit 2"))
        assert schema.migrate(sample_db)["notes"] == []
        # two rows as a release before the constraints wrote them
        defs = dict(conn.execute(
            "select conname, pg_get_constraintdef(oid) from pg_constraint "
            "where conname in ('document_with_readers_is_not_public', "
            "'document_tenant_not_empty')").fetchall())
        assert len(defs) == 2
        for name in defs:
            conn.execute(f"alter table pgfunnel.document drop constraint {name}")
        conn.execute("update pgfunnel.document set is_public = true, readers = '{hr}' "
                     "where citekey = %s", (first,))
        conn.execute("update pgfunnel.document set tenant = '' where citekey = %s", (second,))
        for name, definition in defs.items():
            conn.execute(f"alter table pgfunnel.document add constraint {name} {definition}")
        # what the notes warn of: an unrelated update of such a row fails
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute("update pgfunnel.document set metadata = '{\"a\": 1}' "
                         "where citekey = %s", (second,))
    notes = schema.migrate(sample_db)["notes"]
    assert len(notes) == 2, notes
    assert repr(first) in notes[0] and "is_public = false" in notes[0]
    assert repr(second) in notes[1] and "with tenant ''" in notes[1]
    assert all("UPDATE of such a document" in n for n in notes)


def test_migrate_says_whether_it_upgraded(sample_db: str) -> None:
    """On a current schema migrate said "schema at revision 0013 (was 0013)"."""
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    head = schema.head_revision()
    ran = CliRunner().invoke(app, ["migrate", "--dsn", sample_db])
    assert ran.exit_code == 0, ran.output
    said = " ".join(ran.output.split())
    assert said == f"schema already at revision {head}, this release's; functions refreshed.", said
    schema.downgrade(sample_db, "0009")
    ran = CliRunner().invoke(app, ["migrate", "--dsn", sample_db])
    assert ran.exit_code == 0, ran.output
    said = " ".join(ran.output.split())
    assert said.startswith(f"schema upgraded to revision {head} (was 0009); functions "
                           "refreshed."), said


def test_init_on_an_older_schema_says_it_upgraded_it(sample_db: str) -> None:
    """`pgfunnel init` is idempotent, and on an older release's schema it is an upgrade:
    it said "already installed (revision 0010)" after migrating, and gave none of the
    notes migrate gives."""
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    head = schema.head_revision()
    schema.downgrade(sample_db, "0009")
    with connect(sample_db, autocommit=True) as conn:
        # a document as a release before chunking version 7 stored it
        conn.execute("update pgfunnel.document set content_hash = substring(content_hash "
                     "from position(':' in content_hash) + 1) "
                     "where id = (select min(id) from pgfunnel.document)")
    ran = CliRunner().invoke(app, ["init", "--dsn", sample_db])
    assert ran.exit_code == 0, ran.output
    said = " ".join(ran.output.split())
    assert f"upgraded to revision {head} (was 0009)" in said, said
    assert "note: collection 'default': 1 document(s) were chunked by an older" in said
    # the result on stdout, the note on stderr (`pgfunnel init > log` holds the result)
    assert f"upgraded to revision {head}" in ran.stdout and "note:" not in ran.stdout
    assert " ".join(ran.stderr.split()).startswith("note: collection 'default': 1 document")
    again = CliRunner().invoke(app, ["init", "--dsn", sample_db, "--json"])
    assert again.exit_code == 0 and '"notes": []' in again.output


def test_ingest_on_an_older_schema_says_to_migrate(db: str, tmp_path: Path) -> None:
    """Ingest with this release on a schema an older one installed: a new collection took
    this release's default analyzer, which the older functions lack, and failed after
    loading the model and embedding, as `--analyzer: unknown analyzer 'english_v6'` (a flag
    ingest does not have). Now ingest names the revisions and `pgfunnel migrate`."""
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    from pgfunnel.errors import SchemaOutdatedError
    from pgfunnel.ingest import Ingester

    head = schema.head_revision()
    schema.downgrade(db, "0011")
    (tmp_path / "a.md").write_text("# Notes\n\nA refund takes five days.\n")
    ran = CliRunner().invoke(app, ["ingest", str(tmp_path), "-c", "fresh", "--dsn", db])
    said = " ".join(ran.output.split())
    assert ran.exit_code == 1, said
    assert (f"the pgfunnel schema is at revision 0011, older than this pgfunnel's {head}: "
            f"run `pgfunnel migrate --dsn {shlex.quote(db)}` first") in said
    assert "--analyzer" not in said
    with connect(db, autocommit=True) as conn:
        with pytest.raises(SchemaOutdatedError, match="pgfunnel migrate"):
            Ingester(conn, "fresh")
        assert conn.execute("select count(*) from pgfunnel.collection").fetchone() == (0,)
    schema.migrate(db)
    with connect(db, autocommit=True) as conn:
        Ingester(conn, "fresh")  # refused no more


def test_search_on_an_older_schema_says_to_migrate(sample_db: str) -> None:
    """`pgfunnel search` after upgrading the package but before `pgfunnel migrate` ran the
    older release's functions and said nothing of it (only doctor did)."""
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    head = schema.head_revision()
    schema.downgrade(sample_db, "0011")
    args = ["search", "refund", "--lexical-only", "--dsn", sample_db]
    ran = CliRunner().invoke(app, args)
    said = " ".join(ran.output.split())
    assert ran.exit_code == 0, said
    assert (f"the pgfunnel schema is at revision 0011, older than this pgfunnel's {head}: "
            "this search runs those functions; run `pgfunnel migrate --dsn "
            f"{shlex.quote(sample_db)}`") in said
    ran = CliRunner().invoke(app, [*args, "--json"])
    assert ran.exit_code == 0, ran.output
    assert (f"run `pgfunnel migrate --dsn {shlex.quote(sample_db)}`"
            in json.loads(ran.stdout)["notices"][-1]), ran.stdout
    # explain follows those functions too: it said nothing of it
    explain = ["explain", "refund", "refunds-monthly#0", "--lexical-only", "--dsn", sample_db]
    ran = CliRunner().invoke(app, explain)
    assert ran.exit_code == 0, ran.output
    assert (f"warning: pgfunnel: the pgfunnel schema is at revision 0011, older than this "
            f"pgfunnel's {head}: this explain runs those functions; run `pgfunnel migrate "
            f"--dsn {shlex.quote(sample_db)}`") in ran.stderr, ran.output
    ran = CliRunner().invoke(app, [*explain, "--json"])
    assert ran.exit_code == 0, ran.output
    assert (f"run `pgfunnel migrate --dsn {shlex.quote(sample_db)}`"
            in json.loads(ran.stdout)[0]["notices"][-1]), ran.stdout
    schema.migrate(sample_db)
    for command in (args, explain):
        ran = CliRunner().invoke(app, command)
        assert ran.exit_code == 0 and "migrate" not in ran.output, ran.output


def test_a_search_needing_what_an_older_schema_lacks_says_to_migrate(sample_db: str) -> None:
    """A function this release calls that an older release's schema lacks (or one with
    other arguments or columns) is an outdated schema, not "no pgfunnel.funnel_search
    takes these arguments; check their names and types"."""
    from pgfunnel.errors import SchemaOutdatedError, SchemaOutdatedWarning
    from pgfunnel.search import Funnel

    schema.downgrade(sample_db, "0009")
    with Funnel(sample_db, embedder=None) as funnel:
        with pytest.warns(SchemaOutdatedWarning):
            assert funnel.search("refund").results
        with connect(sample_db, autocommit=True) as conn:
            conn.execute("drop function pgfunnel.funnel_search")
        with pytest.raises(SchemaOutdatedError, match="revision 0009, .* run `pgfunnel "
                                                      "migrate` first"):
            funnel.search("refund")
    schema.migrate(sample_db)
    with Funnel(sample_db, embedder=None) as funnel:
        assert funnel.search("refund").results


def test_funnel_on_an_older_schema_warns_once(sample_db: str) -> None:
    """The Python API said nothing either: searches ran the older functions unsaid."""
    import warnings

    from pgfunnel.errors import SchemaOutdatedWarning
    from pgfunnel.search import Funnel

    head = schema.head_revision()
    schema.downgrade(sample_db, "0011")
    with Funnel(sample_db, embedder=None) as funnel:
        with pytest.warns(SchemaOutdatedWarning, match=f"revision 0011, older than this "
                          f"pgfunnel's {head}: .* run `pgfunnel migrate`"):
            assert funnel.search("refund").results
        # once per Funnel: the check is a catalog read a web app need not pay per search
        with warnings.catch_warnings():
            warnings.simplefilter("error", SchemaOutdatedWarning)
            assert funnel.search("refund").results
    schema.migrate(sample_db)
    with Funnel(sample_db, embedder=None) as funnel, warnings.catch_warnings():
        warnings.simplefilter("error", SchemaOutdatedWarning)
        assert funnel.search("refund").results


def test_concurrent_inits_on_a_new_database_all_succeed(empty_db: str) -> None:
    """Two operators (or deploy jobs) running `pgfunnel init` at once on a new database:
    all but one failed with `duplicate key value violates unique constraint
    "pg_extension_name_index"` (their CREATE EXTENSION IF NOT EXISTS raced). A second
    init now waits for the first, then finds the schema installed."""
    import threading

    from pgfunnel import schema as pgschema

    barrier = threading.Barrier(3)
    errors: list[BaseException] = []
    results: list[dict[str, Any]] = []

    def run(rls: bool) -> None:
        barrier.wait()
        try:
            results.append(pgschema.init(empty_db, rls=rls))
        except Exception as exc:  # noqa: BLE001 - collected and asserted on below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i == 1,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [], errors
    assert sorted(r["created"] for r in results) == [False, False, True]


def test_reindex_on_an_older_schema_says_to_migrate(sample_db: str) -> None:
    """`pgfunnel reindex` after upgrading the package but before `pgfunnel migrate`: this
    release's version reads chunk columns (heading_level) and analyzers the older schema
    lacks, and failed on them by name, or built with the older release's functions. Now
    it names the revisions and `pgfunnel migrate`, and no version is begun."""
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    from pgfunnel import versions
    from pgfunnel.errors import SchemaOutdatedError

    head = schema.head_revision()
    schema.downgrade(sample_db, "0013")
    ran = CliRunner().invoke(app, ["reindex", "-c", "default", "--dsn", sample_db])
    said = " ".join(ran.output.split())
    assert ran.exit_code == 1, said
    assert (f"the pgfunnel schema is at revision 0013, older than this pgfunnel's {head}: "
            f"run `pgfunnel migrate --dsn {shlex.quote(sample_db)}` first") in said
    with connect(sample_db, autocommit=True) as conn:
        with pytest.raises(SchemaOutdatedError, match="pgfunnel migrate"):
            versions.reindex(conn, "default", analyzer="simple_v1")
        with pytest.raises(SchemaOutdatedError, match="pgfunnel migrate"):
            versions.activate(conn, "default", 1)
        assert conn.execute("select count(*) from pgfunnel.index_version").fetchone() == (1,)
    schema.migrate(sample_db)
    with connect(sample_db, autocommit=True) as conn:
        assert versions.reindex(conn, "default", analyzer="simple_v1").state == "ready"


@pytest.mark.parametrize("folder", ["my data", "a;touch pwned", "x$(id)", "q'uote"])
def test_a_home_the_embedded_server_cannot_start_in_is_refused_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, folder: str) -> None:
    """pgserver hands the data folder to pg_ctl through a shell, unquoted: a home with a
    space failed after twenty lines of pg_ctl output (`postgres: invalid argument`), and
    `;` or `$(...)` in it were run as shell syntax. Refused before anything is created."""
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    from pgfunnel.db import embedded_dsn

    home = tmp_path / folder
    with pytest.raises(ConfigError, match="^PGFUNNEL_HOME: the embedded Postgres cannot live "
                                          "in .*no spaces or shell characters"):
        embedded_dsn(home)
    monkeypatch.setenv("PGFUNNEL_HOME", str(home))
    monkeypatch.delenv("PGFUNNEL_DSN", raising=False)
    ran = CliRunner().invoke(app, ["dsn"])
    assert ran.exit_code == 1
    assert "PGFUNNEL_HOME: the embedded Postgres cannot live in" in " ".join(ran.output.split())
    assert list(tmp_path.iterdir()) == []


def test_a_home_that_is_a_file_or_cannot_be_created_is_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    from pgfunnel.db import embedded_dsn

    a_file = tmp_path / "afile"
    a_file.write_text("not a folder")
    with pytest.raises(ConfigError, match="^PGFUNNEL_HOME: cannot use .*afile.*: it is a "
                                          "file, not a folder"):
        embedded_dsn(a_file)
    # under a file: the folder cannot be made (root may write anywhere, so a file stands
    # in for a read-only parent)
    with pytest.raises(ConfigError, match="^PGFUNNEL_HOME: cannot use .*afile/home"):
        embedded_dsn(a_file / "home")
    monkeypatch.setenv("PGFUNNEL_HOME", str(a_file))
    monkeypatch.delenv("PGFUNNEL_DSN", raising=False)
    ran = CliRunner().invoke(app, ["dsn"])
    assert ran.exit_code == 1 and "Traceback" not in ran.output
    assert "PGFUNNEL_HOME: cannot use" in " ".join(ran.output.split())
    assert a_file.read_text() == "not a folder"


def test_functions_of_another_release_at_the_same_revision_are_named_until_migrate(
        sample_db: str, tmp_path: Path) -> None:
    """`alembic upgrade head` (or an upgrade of the package with no new revision) leaves
    the functions another release installed: searches failed on a function whose
    arguments changed, ingest on a default analyzer they lack, and doctor said all was
    well, since it compared the revision alone."""
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    from pgfunnel.doctor import run_checks
    from pgfunnel.errors import SchemaOutdatedError
    from pgfunnel.ingest import Ingester
    from pgfunnel.search import Funnel

    with connect(sample_db, autocommit=True) as conn:
        assert schema.installed_functions_digest(conn) == schema.functions_digest()
        assert not schema.functions_outdated(conn)
        assert not [f for f in run_checks(conn) if f.check == "schema" and f.level == "error"]
        # what a database whose functions came from elsewhere looks like
        conn.execute("comment on schema pgfunnel is null")
        assert schema.functions_outdated(conn)
        [error] = [f for f in run_checks(conn) if f.check == "schema" and f.level == "error"]
        assert "the SQL functions are not this pgfunnel's" in error.message
        assert "run `pgfunnel migrate`" in error.message
        with pytest.raises(SchemaOutdatedError, match="SQL functions in this database are "
                                                      "not this pgfunnel's"):
            Ingester(conn, "fresh")
        with pytest.warns(UserWarning, match="not this pgfunnel's .* run `pgfunnel migrate`"):
            Funnel(conn, embedder=None).search("refund")
    ran = CliRunner().invoke(app, ["search", "refund", "--lexical-only", "--dsn", sample_db])
    assert ran.exit_code == 0
    assert "SQL functions in this database are not this pgfunnel's" in " ".join(
        ran.output.split())
    migrated = CliRunner().invoke(app, ["migrate", "--dsn", sample_db])
    assert migrated.exit_code == 0, migrated.output
    with connect(sample_db, autocommit=True) as conn:
        assert not schema.functions_outdated(conn)
        Ingester(conn, "fresh")  # refused no more
    ran = CliRunner().invoke(app, ["search", "refund", "--lexical-only", "--dsn", sample_db])
    assert ran.exit_code == 0 and "migrate" not in ran.output


def test_the_schema_check_before_a_search_reads_the_revision_once(sample_db: str) -> None:
    # stale_schema (each CLI search) and require_current_schema (each ingest) read the
    # revision, its privilege and the functions' digest: once, not again for each question
    with connect(sample_db, autocommit=True) as conn:
        statements: list[str] = []
        execute = conn.execute

        def counted(query: Any, *args: Any, **kwargs: Any) -> Any:
            statements.append(str(query))
            return execute(query, *args, **kwargs)

        conn.execute = counted  # type: ignore[method-assign]
        assert schema.stale_schema(conn) is None
        assert len(statements) == 3, statements
        statements.clear()
        schema.require_current_schema(conn)
        assert len(statements) == 3, statements
        # the answers are those of the separate checks
        conn.execute("comment on schema pgfunnel is null")
        statements.clear()
        assert schema.stale_schema(conn) == schema.OTHER_FUNCTIONS
        assert len(statements) == 3
        assert schema.schema_status(conn) == (None, True)
        assert schema.functions_outdated(conn) and schema.outdated_revision(conn) is None


def _dba_made_schema_for(dsn: str, *, create_in_public: bool) -> str:
    """What a DBA does for an application's owner in a database the DBA keeps: a login
    role, the vector extension, `create schema pgfunnel authorization ROLE`, and nothing
    on the database itself (Postgres 15+ grants PUBLIC no CREATE on a database, nor on
    schema public). The role's DSN."""
    import uuid

    from _security_helpers import with_user
    from psycopg import sql as pgsql

    role = f"pgf_app_{uuid.uuid4().hex[:8]}"
    with connect(dsn, autocommit=True, register=False) as su:
        su.execute(pgsql.SQL("create role {} login").format(pgsql.Identifier(role)))
        su.execute("create extension if not exists vector")
        su.execute("revoke create on schema public from public")
        su.execute(pgsql.SQL("create schema pgfunnel authorization {}").format(
            pgsql.Identifier(role)))
        if create_in_public:
            su.execute(pgsql.SQL("grant create on schema public to {}").format(
                pgsql.Identifier(role)))
    return with_user(dsn, role)


def test_init_by_the_owner_of_a_schema_a_dba_made_needs_no_create_on_the_database(
        empty_db: str) -> None:
    """`create schema if not exists` checks CREATE on the database before it looks for the
    schema: the owner of a pgfunnel schema made for it was refused every `init`, the first
    and each re-run, with "permission denied for database" and advice to run it as the
    schema's owner, which it was."""
    as_owner = _dba_made_schema_for(empty_db, create_in_public=True)
    with connect(as_owner, autocommit=True, register=False) as conn:
        assert conn.execute("select has_database_privilege(current_database(), 'CREATE')"
                            ).fetchone() == (False,)
    first = schema.init(as_owner)
    assert first["created"] is True
    assert schema.init(as_owner)["created"] is False
    from _security_helpers import Doc, ingest_docs

    ingest_docs(as_owner, [Doc("refunds", "how a refund is paid back")])
    with connect(as_owner, autocommit=True) as conn:
        assert conn.execute("select pg_get_userbyid(relowner) = current_user "
                            "from pg_class where oid = 'pgfunnel.document'::regclass"
                            ).fetchone() == (True,)
        assert conn.execute("select citekey from funnel_search('refund')").fetchall() == [
            ("refunds",)]


def test_an_owner_that_may_not_create_in_public_gets_every_function_but_the_wrapper(
        empty_db: str) -> None:
    """Postgres 15+ keeps CREATE on schema public to the database's owner: the owner of a
    pgfunnel schema a DBA made could not create public.funnel_search, and every `init`
    failed with `permission denied for schema public` (every function rolled back with
    it). Now init installs the rest, says why the wrapper is missing and what to do, and
    doctor repeats it; granted CREATE there, the next init makes the wrapper."""
    from _security_helpers import Doc, ingest_docs
    from psycopg import sql as pgsql

    from pgfunnel.doctor import run_checks

    as_owner = _dba_made_schema_for(empty_db, create_in_public=False)
    result = schema.init(as_owner)
    role = conninfo_part(as_owner, "user")
    assert result["created"] is True
    assert [n for n in result["notes"] if "public.funnel_search" in n] == [
        f"role {role} may not create objects in schema public, so public.funnel_search, the "
        "wrapper that lets `funnel_search(...)` run on a default search_path, was not "
        "created: call `pgfunnel.funnel_search(...)` instead, as the Python API and the CLI "
        f"do, or have the database's owner run `grant create on schema public to {role}` "
        "and run `pgfunnel init` again"]
    assert schema.migrate(as_owner)["notes"] == result["notes"]
    ingest_docs(as_owner, [Doc("refunds", "how a refund is paid back")])
    with connect(as_owner, autocommit=True) as conn:
        assert conn.execute("select citekey from pgfunnel.funnel_search('refund')"
                            ).fetchall() == [("refunds",)]
        assert conn.execute("select to_regprocedure('public.funnel_search(text, vector, "
                            "integer, text, text[], text, text, timestamptz, jsonb, text, "
                            "double precision, double precision[], integer, integer, "
                            "integer, integer, integer, double precision, double precision, "
                            "boolean)')").fetchone() == (None,)
        assert [(f.level, f.message) for f in run_checks(conn) if f.check == "schema"
                and "funnel_search" in f.message] == [("warning", result["notes"][-1])]
    with connect(empty_db, autocommit=True) as su:
        su.execute(pgsql.SQL("grant create on schema public to {}").format(
            pgsql.Identifier(role)))
    assert schema.init(as_owner)["notes"] == []
    with connect(as_owner, autocommit=True) as conn:
        assert conn.execute("select citekey from funnel_search('refund')").fetchall() == [
            ("refunds",)]
    # CREATE revoked again: the wrapper made above stays and runs, and the note says so
    # (it said "was not created" of a function the owner could call)
    with connect(empty_db, autocommit=True) as su:
        su.execute(pgsql.SQL("revoke create on schema public from {}").format(
            pgsql.Identifier(role)))
    assert [n for n in schema.init(as_owner)["notes"] if "public.funnel_search" in n] == [
        f"role {role} may not create objects in schema public, so public.funnel_search, the "
        "wrapper that lets `funnel_search(...)` run on a default search_path, was left as an "
        "earlier init made it, not renewed: have the database's owner run `grant create on "
        f"schema public to {role}` and run `pgfunnel init` again"]
    with connect(as_owner, autocommit=True) as conn:
        assert conn.execute("select citekey from funnel_search('refund')").fetchall() == [
            ("refunds",)]


def test_a_database_without_schema_public_installs_and_searches(empty_db: str) -> None:
    """Some DBAs drop schema public and keep extensions in a schema of their own: `init`
    failed with `schema "public" does not exist` (the wrapper, and a cast of 'public' to
    regnamespace in the SQL files and doctor's checks)."""
    from _security_helpers import Doc, ingest_docs
    from psycopg import sql as pgsql

    from pgfunnel.doctor import run_checks

    with connect(empty_db, autocommit=True, register=False) as su:
        su.execute("drop schema public")
        su.execute("create schema extensions")
        su.execute("create extension vector schema extensions")
        su.execute(pgsql.SQL("alter database {} set search_path = extensions").format(
            pgsql.Identifier(su.info.dbname)))
    result = schema.init(empty_db, rls=True)
    assert result["vector_schema"] == "extensions"
    assert [n for n in result["notes"] if "public.funnel_search" in n] == [
        "there is no schema public in this database, so public.funnel_search, the wrapper "
        "that lets `funnel_search(...)` run on a default search_path, was not created: call "
        "`pgfunnel.funnel_search(...)` instead, as the Python API and the CLI do"]
    ingest_docs(empty_db, [Doc("refunds", "how a refund is paid back")])
    with connect(empty_db, autocommit=True) as conn:
        assert conn.execute("select citekey from pgfunnel.funnel_search('refund')"
                            ).fetchall() == [("refunds",)]
        findings = run_checks(conn)
    assert [f for f in findings if f.level == "error"] == []
    assert [f.level for f in findings if "public.funnel_search" in f.message] == ["info"]


def test_the_search_path_fix_for_an_empty_path_is_a_statement_postgres_takes(
        db: str) -> None:
    """A hardened `search_path = ''` was shown as `""` and the fix read `set search_path =
    "", "public"`, which Postgres refuses (a zero-length identifier): the operator pasted
    a statement that failed. The fix given for any path must run."""
    import re

    for path in ("''", "pg_catalog", '"$user"'):
        with connect(db, autocommit=True, register=False) as conn:
            conn.execute(f"set search_path = {path}")
            problem = schema.vector_path_problem(conn)
            assert problem is not None
            fix = re.search(r"alter role current_user set search_path = (.*?)   \(or", problem)
            assert fix is not None, problem
            conn.execute(f"set search_path = {fix.group(1)}")
            assert schema.vector_path_problem(conn) is None, (path, fix.group(1))


def test_pgvector_in_a_schema_the_role_may_not_use_says_so_not_off_the_path(
        empty_db: str) -> None:
    """current_schemas() leaves out a schema the role lacks USAGE on: with pgvector in
    `extensions`, named on the path but not granted, the role was told the schema was not
    on its search_path and to set a path naming it twice, which changed nothing."""
    import uuid

    from _security_helpers import with_user
    from psycopg import sql as pgsql

    role = f"pgf_app_{uuid.uuid4().hex[:8]}"
    with connect(empty_db, autocommit=True, register=False) as su:
        su.execute("create schema extensions")
        su.execute("create extension vector schema extensions")
        su.execute(pgsql.SQL("alter database {} set search_path = \"$user\", public, "
                             "extensions").format(pgsql.Identifier(su.info.dbname)))
        su.execute(pgsql.SQL("create role {} login").format(pgsql.Identifier(role)))
    as_role = with_user(empty_db, role)
    with connect(as_role, autocommit=True, register=False) as conn:
        assert schema.vector_path_problem(conn) == (
            f'pgvector is installed in schema "extensions", which this role ({role}) may not '
            "use (it lacks USAGE on it, so Postgres skips it on the search_path); pgfunnel "
            "needs pgvector's types there. Ask its owner or a superuser to run `grant usage "
            f'on schema "extensions" to {role}` (and to each role that searches), then run '
            "it again")
    # off the path as well: told both, not the grant alone (after which it was still
    # missing from the path), with the statement that adds it
    with connect(as_role, autocommit=True, register=False) as conn:
        conn.execute("set search_path = \"$user\", public")
        assert schema.vector_path_problem(conn) == (
            f'pgvector is installed in schema "extensions", which this role ({role}) may not '
            "use (it lacks USAGE on it) and is not on this connection's search_path "
            '("$user", public); pgfunnel needs pgvector\'s types there. Ask its owner or a '
            'superuser to run `grant usage on schema "extensions" to '
            f"{role}` (and to each role that searches), add it to the path for the role or "
            "the database, then reconnect: alter role current_user set search_path = "
            '"$user", public, "extensions"   (or: alter database ... set search_path = ...)')
        # a quoted or upper-case spelling on the path is the same schema
        conn.execute('set search_path = public, "extensions"')
        assert "so Postgres skips it on the search_path" in str(schema.vector_path_problem(conn))
        conn.execute("set search_path = public, EXTENSIONS")
        assert "so Postgres skips it on the search_path" in str(schema.vector_path_problem(conn))
    with connect(empty_db, autocommit=True, register=False) as su:
        su.execute(pgsql.SQL("grant usage on schema extensions to {}").format(
            pgsql.Identifier(role)))
    with connect(as_role, autocommit=True, register=False) as conn:
        assert schema.vector_path_problem(conn) is None


def test_migrate_runs_past_the_databases_statement_timeout(db: str) -> None:
    """A statement_timeout set for the role or the database (managed Postgres sets one,
    meant for queries) cancelled a migration that waited for a long-running search's
    table lock, or rewrote a large table, halfway: `migrate` failed and an upgrade never
    went through. init and migrate now run without it, as index builds do; the setting
    stays the database's.

    The report lets go of the table only once the server shows migration 0016's ALTER
    waiting for it for longer than the 200 ms statement_timeout, uncancelled (each of the
    upgrade's tries waits up to 300 ms, half of deadlock_timeout)."""
    import threading
    import time

    from psycopg import sql as pgsql

    schema.downgrade(db, "0015")
    with connect(db, autocommit=True, register=False) as su:
        su.execute(pgsql.SQL("alter database {} set statement_timeout = '200ms'").format(
            pgsql.Identifier(su.info.dbname)))
    # a report holding the table migration 0016 alters, for longer than the timeout
    holder = connect(db, register=False)
    holder.execute("lock table pgfunnel.collection in access share mode")
    out: dict[str, Any] = {}

    def run_migrate() -> None:
        try:
            out["result"] = schema.migrate(db)
        except BaseException as exc:  # noqa: BLE001 - asserted below
            out["error"] = exc

    upgrade = threading.Thread(target=run_migrate)
    upgrade.start()
    try:
        with connect(db, autocommit=True, register=False) as watch:
            watch.execute("set statement_timeout = 0")
            deadline = time.monotonic() + 50  # a hang guard, inside the upgrade's 60 s
            while not one_row(watch.execute(
                    "select exists (select from pg_stat_activity where wait_event_type = "
                    "'Lock' and query ilike 'alter table%collection%' and "
                    "clock_timestamp() - query_start > interval '200ms')"))[0]:
                assert upgrade.is_alive() and time.monotonic() < deadline, out
                time.sleep(0.02)
    finally:
        holder.rollback()
        upgrade.join(60)
        holder.close()
    assert "error" not in out, out
    result = out["result"]
    assert (result["revision_before"], result["revision"]) == ("0015", "0016")
    assert schema.init(db)["revision"] == "0016"
    with connect(db, autocommit=True) as conn:
        assert conn.execute("show statement_timeout").fetchone() == ("200ms",)


def test_a_role_that_may_not_create_pgvector_is_told_which_database_needs_it(
        empty_db: str) -> None:
    """An extension belongs to one database; a superuser told only to run `create
    extension vector` ran it in psql's default database, and init failed again."""
    import uuid

    from _security_helpers import with_user
    from psycopg import sql as pgsql

    from pgfunnel.errors import AccessError

    role = f"pgf_app_{uuid.uuid4().hex[:8]}"
    with connect(empty_db, autocommit=True, register=False) as su:
        su.execute(pgsql.SQL("create role {} login").format(pgsql.Identifier(role)))
        su.execute(pgsql.SQL("grant create on database {} to {}").format(
            pgsql.Identifier(su.info.dbname), pgsql.Identifier(role)))
        dbname = su.info.dbname
    with pytest.raises(AccessError) as refused:
        schema.init(with_user(empty_db, role))
    assert str(refused.value) == (
        f"the vector extension is not installed in database {dbname!r} and this role may "
        "not create it; ask a superuser to run `create extension vector` in that database "
        f"(`psql -d {dbname}`), then run it again")


def test_plain_alembic_upgrade_on_an_empty_database_says_to_run_init(empty_db: str) -> None:
    """The plain `alembic upgrade head` on a database without the pgfunnel schema failed
    with a SQLAlchemy traceback ending in `schema "pgfunnel" does not exist`."""
    import os
    import sys

    alembic = Path(sys.executable).parent / "alembic"
    ini = schema.migrations_dir() / "alembic.ini"
    done = subprocess.run([str(alembic), "-c", str(ini), "upgrade", "head"],
                          capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "PGFUNNEL_DSN": empty_db})
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "pgfunnel: this database has no schema pgfunnel: run `pgfunnel init` on it (it "
        "creates the vector extension, the schema, the tables through these migrations and "
        "the SQL functions); `alembic upgrade` moves the tables of an installed schema only")
    with connect(empty_db, autocommit=True, register=False) as conn:
        assert conn.execute("select to_regnamespace('pgfunnel')").fetchone() == (None,)
    # a libpq key=value DSN, which pgfunnel takes, failed in SQLAlchemy's URL parser
    assert "://" not in empty_db
    schema.init(empty_db)
    done = subprocess.run([str(alembic), "-c", str(ini), "current"],
                          capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "PGFUNNEL_DSN": empty_db})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{schema.head_revision()} (head)"


def test_init_leaves_an_applications_own_funnel_search_in_public(empty_db: str) -> None:
    """sql/040_funnel.sql drops the forms of the search functions without section_path
    (their result columns cannot change in place); in public it took any set-returning
    funnel_search the role owned, an application's own included, at every init. The
    grants and the wrapper checks tell pgfunnel's by its body; so does the drop."""
    with connect(empty_db, autocommit=True, register=False) as su:
        su.execute("create function public.funnel_search(ticket integer) returns setof "
                   "integer language sql as $$ select ticket $$")
    schema.init(empty_db)
    schema.init(empty_db)
    with connect(empty_db, autocommit=True) as conn:
        assert conn.execute("select funnel_search(7)").fetchall() == [(7,)]
        # pgfunnel's own wrapper, beside it
        from pgfunnel.db import public_wrappers

        assert [owner for _, owner, _ in public_wrappers(conn)] == [conn.info.user]
        # nor does it pass for pgfunnel's wrapper where that is missing (doctor found
        # nothing wrong)
        from pgfunnel.doctor import run_checks

        conn.execute("drop function public.funnel_search(text, vector, integer, text, text[], "
                     "text, text, timestamptz, jsonb, text, double precision, "
                     "double precision[], integer, integer, integer, integer, integer, "
                     "double precision, double precision, boolean)")
        assert [f.level for f in run_checks(conn) if f.check == "schema"
                and f.message.startswith("public.funnel_search is missing")] == ["warning"]
