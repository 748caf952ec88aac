"""Admin commands beside the writers and searches of a running application: `init` and
`migrate` (a function refresh) while an ingest or a delete is mid-transaction."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from funnel_util import doc, ingest
from test_bm25 import _recount, _stored

from pgfunnel import schema
from pgfunnel.db import connect


def _waiting_on_a_lock(conn: psycopg.Connection[Any], statement: str) -> bool:
    return conn.execute("select exists (select from pg_stat_activity where "
                        "wait_event_type = 'Lock' and query ilike %s)",
                        (f"%{statement}%",)).fetchone() == (True,)


def _init_in_thread(db: str, errors: list[BaseException]) -> threading.Thread:
    """`pgfunnel init` started in a thread; what it raises lands in errors."""
    def run_init() -> None:
        try:
            schema.init(db)
        except BaseException as exc:  # noqa: BLE001 - the caller asserts errors
            errors.append(exc)

    init = threading.Thread(target=run_init)
    init.start()
    return init


@pytest.mark.parametrize("rls", [False, True], ids=["plain", "rls"])
def test_init_beside_an_ingest_batch_neither_waits_nor_deadlocks(
        db: str, conn: psycopg.Connection[Any], rls: bool) -> None:
    """An ingest batch writes a document's rows, then its chunks, then their lexical
    rows, in one transaction. `pgfunnel init` on the running database replaced the three
    triggers with CREATE OR REPLACE TRIGGER, which locks each table (SHARE ROW
    EXCLUSIVE) even when nothing changes: lexical first, then chunk. With the batch
    holding chunk, init took lexical and waited for chunk; the batch then waited for
    lexical, and Postgres cancelled one of the two ("deadlock detected"). Unchanged
    triggers are now left alone: init takes no lock the batch holds."""
    if rls:
        # in RLS mode init also renews policies and grants
        schema.init(db, rls=True)
    ingest(conn, [doc(f"d{i}", f"shared words and unique{i}x") for i in range(3)])
    errors: list[BaseException] = []
    with connect(db) as batch:
        # what an ingest batch holds between its COPY into chunk and the one into lexical
        batch.execute("lock table pgfunnel.document, pgfunnel.chunk in row exclusive mode")

        init = _init_in_thread(db, errors)
        deadline = time.monotonic() + 30
        while init.is_alive() and time.monotonic() < deadline:
            if _waiting_on_a_lock(conn, "trigger"):
                break
            time.sleep(0.05)
        waited = init.is_alive()
        # the batch goes on to its lexical rows (bounded, so a deadlock cannot hang it)
        batch.execute("set local lock_timeout = '10s'")
        try:
            batch.execute("lock table pgfunnel.lexical in row exclusive mode")
        except psycopg.Error as exc:
            errors.append(exc)
        batch.rollback()
        init.join(60)
    assert (waited, errors) == (False, []), "init waited for the batch's table locks" \
        + "".join(f"; {type(e).__name__}: {e}" for e in errors)
    # the triggers are in place and working: a delete still keeps the statistics exact
    conn.execute("delete from pgfunnel.document where citekey = 'd0'")
    assert _stored(conn, "t") == _recount(conn, "t")


def test_init_puts_back_a_trigger_that_is_missing_or_defined_otherwise(
        db: str, conn: psycopg.Connection[Any]) -> None:
    # left alone when unchanged, but still (re)made where it differs, as before
    conn.execute("drop trigger lexical_deleted on pgfunnel.lexical")
    conn.execute("drop trigger document_collection on pgfunnel.document")
    conn.execute("create trigger document_collection before update of title "
                 "on pgfunnel.document for each row "
                 "execute function pgfunnel._indexed_update_refused()")
    conn.commit()
    schema.init(db)
    defs = dict(conn.execute(
        "select tgname, pg_get_triggerdef(oid) from pg_trigger where not tgisinternal and "
        "tgrelid in ('pgfunnel.lexical'::regclass, 'pgfunnel.document'::regclass)"))
    assert "AFTER DELETE ON pgfunnel.lexical" in defs["lexical_deleted"]
    assert "UPDATE OF collection_id" in defs["document_collection"]
    ingest(conn, [doc(f"d{i}", f"shared words and unique{i}x") for i in range(3)])
    conn.execute("delete from pgfunnel.document where citekey = 'd0'")
    assert _stored(conn, "t") == _recount(conn, "t")


def _waiting_sessions(conn: psycopg.Connection[Any], names: list[str],
                      timeout_s: float = 30) -> None:
    """Wait until every session named in ``names`` waits on a lock."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        row = conn.execute("select count(*) from pg_stat_activity where wait_event_type = "
                           "'Lock' and application_name = any(%s)", (names,)).fetchone()
        if row is not None and row[0] == len(names):
            return
        time.sleep(0.05)
    raise AssertionError(f"{names} never all waited for a lock")


def _run_named(db: str, name: str, job: Any, out: dict[str, Any]) -> threading.Thread:
    def target() -> None:
        with connect(db, autocommit=True) as c:
            c.execute("select set_config('application_name', %s, false)", (name,))
            try:
                out[name] = job(c)
            except Exception as exc:  # noqa: BLE001 - asserted by the caller
                out[name] = exc

    thread = threading.Thread(target=target)
    thread.start()
    return thread


def test_two_activations_of_one_version_at_once_the_second_changed_nothing(
        sample_db: str) -> None:
    """Two operators activate the same version while an ingest batch holds the
    collection's lock. The second switch found the version active already, and said
    "version 2 is active; version 2 retired (rollback returns to it)"."""
    from pgfunnel import versions
    from pgfunnel.ingest import ingest_lock

    with connect(sample_db, autocommit=True) as conn:
        assert versions.reindex(conn, "default", analyzer="simple_v1").version == 2
        out: dict[str, Any] = {}
        with connect(sample_db) as batch:
            ingest_lock(batch, "default")
            threads = [_run_named(sample_db, name, lambda c: versions.activate(c, "default", 2),
                                  out) for name in ("activate-a", "activate-b")]
            _waiting_sessions(conn, ["activate-a", "activate-b"])
            batch.commit()
            for t in threads:
                t.join(60)
        said = sorted(((a.replaced, a.already_active) if isinstance(a, versions.Activation)
                       else a for a in out.values()), key=repr)
        assert said == [(1, False), (None, True)], said
        assert conn.execute("select version from pgfunnel.index_version "
                            "where state = 'active'").fetchone() == (2,)


def test_a_rollback_overtaken_by_another_switch_refuses_rather_than_undo_it(
        sample_db: str) -> None:
    """`versions rollback` reads the version to return to, then waits for the
    collection's lock (an ingest batch holds it); another operator activates version 3
    meanwhile. The rollback then switched from 3 to 1: the other operator's switch was
    undone, and 1 is not what 3 replaced. It now refuses, naming what happened; and two
    rollbacks at once leave the second saying nothing changed."""
    from pgfunnel import versions
    from pgfunnel.errors import ConflictError
    from pgfunnel.ingest import ingest_lock

    with connect(sample_db, autocommit=True) as conn:
        versions.reindex(conn, "default", analyzer="simple_v1")
        versions.reindex(conn, "default", analyzer="simple_v2")
        versions.activate(conn, "default", 2)  # replaces 1: a rollback returns to 1
        out: dict[str, Any] = {}
        with connect(sample_db) as other:
            ingest_lock(other, "default")
            thread = _run_named(sample_db, "rollback",
                                lambda c: versions.rollback(c, "default"), out)
            _waiting_sessions(conn, ["rollback"])
            other.execute("select pgfunnel.activate_version('default', 3)")
            other.commit()
            thread.join(60)
        refused = out["rollback"]
        assert isinstance(refused, ConflictError), refused
        assert str(refused) == (
            "the active version of 'default' changed while this rollback ran: another "
            "session activated version 3 in place of version 2, whose switch this rollback "
            "was to undo; nothing was switched (`pgfunnel versions rollback -c default` "
            "undoes the switch in place now)")
        assert conn.execute("select version from pgfunnel.index_version "
                            "where state = 'active'").fetchone() == (3,)

        # two rollbacks at once: both mean to return to 2; the second finds it active
        out.clear()
        with connect(sample_db) as batch:
            ingest_lock(batch, "default")
            threads = [_run_named(sample_db, name, lambda c: versions.rollback(c, "default"),
                                  out) for name in ("rollback-a", "rollback-b")]
            _waiting_sessions(conn, ["rollback-a", "rollback-b"])
            batch.commit()
            for t in threads:
                t.join(60)
        said = sorted(((a.activated, a.replaced, a.already_active)
                       if isinstance(a, versions.Activation) else a
                       for a in out.values()), key=repr)
        assert said == [(2, 3, False), (2, None, True)], said
        assert conn.execute("select version from pgfunnel.index_version "
                            "where state = 'active'").fetchone() == (2,)


def test_init_beside_a_graph_walk_refresh_neither_deadlocks(
        db: str, conn: psycopg.Connection[Any]) -> None:
    """A reindex, an activation that builds a graph or a version drop rewrites
    pgfunnel._hnsw_walk under an advisory lock. `pgfunnel init` replaced the function
    from sql/ first and took that lock only afterwards, to write the walks back: with a
    reindex holding the lock, init waited for it while holding the function's row, and
    the reindex's rewrite waited for that row ("deadlock detected": `pgfunnel reindex
    --activate` failed beside an init). init now takes the lock before it replaces any
    function."""
    from pgfunnel.ingest import WALKS_LOCK_KEY, refresh_hnsw_walks

    ingest(conn, [doc(f"d{i}", f"shared words and unique{i}x") for i in range(3)])
    errors: list[BaseException] = []
    with connect(db) as reindex:
        # where a reindex's refresh_hnsw_walks stands: it holds the walks' lock
        reindex.execute("select pg_advisory_xact_lock(%s::bigint)", (WALKS_LOCK_KEY,))

        init = _init_in_thread(db, errors)
        deadline = time.monotonic() + 30
        while not _waiting_on_a_lock(conn, "pg_advisory_xact_lock"):
            assert time.monotonic() < deadline and init.is_alive(), errors
            time.sleep(0.05)
        reindex.execute("set local lock_timeout = '10s'")
        try:
            assert refresh_hnsw_walks(reindex)
            reindex.commit()
        except psycopg.Error as exc:
            errors.append(exc)
            reindex.rollback()
        init.join(60)
    assert errors == [], "".join(f"{type(e).__name__}: {e}; " for e in errors)
    # the walk init wrote back serves the collection's graph
    assert conn.execute("select (pgfunnel._hnsw_walk(v.id, array_fill(1, array[16])::vector, "
                        "1)).cached from pgfunnel.index_version v").fetchone() == (True,)


def test_a_migration_waiting_for_a_long_transaction_does_not_hold_up_searches(
        db: str, conn: psycopg.Connection[Any], monkeypatch: Any) -> None:
    """Migration 0016 alters pgfunnel.collection (ACCESS EXCLUSIVE). With a transaction
    open on that table (an idle session, a report), `pgfunnel migrate` queued for the
    lock, and every search, which reads the table, queued behind it until that
    transaction ended: searches hung for as long. The upgrade now waits for a lock only
    briefly (at most 300 ms a try) and tries again, so searches pass between its tries;
    and it gives up, naming the oldest holders, rather than wait without end.

    Each search runs under a lock_timeout ten times the longest try: one queued behind
    an upgrade that waits on, as it did, fails with LockNotAvailable (while the report
    stays open, so does such a wait), one queued behind a try passes when the try gives
    up. No search is timed: the clock below only bounds a test that hangs."""
    from pgfunnel.errors import ConflictError

    ingest(conn, [doc("d0", "shared words")])
    conn.commit()
    schema.downgrade(db, "0015")
    done: dict[str, Any] = {}
    with connect(db) as report:
        report.execute("select set_config('application_name', 'long-report', false)")
        report.execute("select count(*) from pgfunnel.collection")  # its transaction stays open
        init = threading.Thread(target=lambda: done.update(result=schema.migrate(db)))
        init.start()
        with connect(db, autocommit=True) as search:
            search.execute("set lock_timeout = '3s'")
            search.execute("set statement_timeout = '60s'")  # a hang guard only
            for _ in range(5):
                # each search sent while the upgrade's ALTER waits for the report's lock,
                # so that it queues behind that wait (unless the try just gave up)
                deadline = time.monotonic() + 60  # a hang guard: ends when the ALTER waits
                while not _waiting_on_a_lock(conn, "alter table%collection"):
                    assert init.is_alive() and time.monotonic() < deadline, done
                    time.sleep(0.01)
                try:
                    search.execute("select id from pgfunnel.collection where name = 't'")
                except psycopg.errors.LockNotAvailable as exc:
                    raise AssertionError("a search queued behind the waiting upgrade for "
                                         "all of its lock_timeout (3s)") from exc
        assert init.is_alive()  # still trying: the report's transaction is open
        report.commit()
        init.join(60)
    assert (done["result"]["revision_before"], done["result"]["revision"]) == ("0015", "0016")

    # a transaction that stays open past the upgrade's patience: a clear refusal
    schema.downgrade(db, "0015")
    monkeypatch.setattr(schema, "MIGRATION_LOCK_GIVE_UP_S", 1.0)
    with connect(db) as report:
        report.execute("select set_config('application_name', 'long-report', false)")
        report.execute("select count(*) from pgfunnel.collection")
        try:
            schema.migrate(db)
            raise AssertionError("migrate went through a lock held by an open transaction")
        except ConflictError as exc:
            said = str(exc)
        report.rollback()
    assert said.startswith("could not take the locks the schema upgrade needs in 1 s of "
                           "short tries"), said
    # the revision whose ALTER waited, by id and what it does: the give-up named the
    # holders alone, not which step of the upgrade it was in
    assert ("at migration 0016_default_analyzer_v8 (New collections default to analyzer "
            "english_v8): transactions hold them") in said, said
    assert "application_name 'long-report', idle in transaction" in said, said
    assert said.endswith("; nothing was upgraded: run it again when they end"), said
    assert schema.migrate(db)["revision"] == "0016"


def test_the_functions_install_gives_up_naming_who_holds_its_lock(
        db: str, conn: psycopg.Connection[Any], monkeypatch: Any) -> None:
    """The functions' install, after the revisions, takes the graph walks' lock that a
    reindex holds while it rewrites them. Past the upgrade's patience it failed with the
    generic "installing this release's SQL functions ... failed: canceling statement due
    to lock timeout", where a revision's lock wait names the transactions that hold the
    locks: both now give up alike, naming them."""
    from pgfunnel.errors import ConflictError
    from pgfunnel.ingest import WALKS_LOCK_KEY

    conn.commit()
    monkeypatch.setattr(schema, "MIGRATION_LOCK_GIVE_UP_S", 1.0)
    with connect(db) as reindex:
        reindex.execute("select set_config('application_name', 'walks-rewrite', false)")
        # where a reindex's refresh_hnsw_walks stands, its transaction open
        reindex.execute("select pg_advisory_xact_lock(%s::bigint)", (WALKS_LOCK_KEY,))
        with pytest.raises(ConflictError) as failed:
            schema.migrate(db)
        reindex.rollback()
    said = str(failed.value)
    assert said.startswith("could not take the locks the schema upgrade needs in 1 s of "
                           "short tries"), said
    assert ("at installing this release's SQL functions (after its revisions): "
            "transactions hold them") in said, said
    assert "application_name 'walks-rewrite', idle in transaction" in said, said
    assert said.endswith("; nothing was upgraded: run it again when they end"), said
    assert schema.migrate(db)["revision"] == schema.head_revision()


def test_a_migration_given_up_leaves_no_revision_half_applied(
        db: str, conn: psycopg.Connection[Any], monkeypatch: Any) -> None:
    """The upgrade's short tries run it again from the start after a lock wait gives up.
    That is safe only while every revision of a try runs in one transaction, rolled back
    whole: an earlier revision a try applied before a later one's lock wait gave up must
    not stay, or the next try would apply it again on top of itself. From 0013, 0014 adds
    a column to chunk (no lock anyone holds) and 0015 alters collection, which an open
    transaction holds: 0014's column is gone with the try, and the revision stays 0013."""
    from pgfunnel.errors import ConflictError

    def has_heading_level() -> bool:
        return conn.execute("select exists (select from information_schema.columns where "
                            "table_schema = 'pgfunnel' and table_name = 'chunk' and "
                            "column_name = 'heading_level')").fetchone() == (True,)

    conn.commit()
    schema.downgrade(db, "0013")
    assert not has_heading_level()
    conn.commit()
    monkeypatch.setattr(schema, "MIGRATION_LOCK_GIVE_UP_S", 1.0)
    with connect(db) as report:
        report.execute("select count(*) from pgfunnel.collection")  # holds it, open
        with pytest.raises(ConflictError, match="nothing was upgraded") as failed:
            schema.migrate(db)
        report.rollback()
    # 0014 went through in the last try, 0015 waited: the give-up names 0015, not the
    # revision the database stays at (0013) nor the one after it
    assert "at migration 0015_default_analyzer_v7 (New collections default" in str(
        failed.value), failed.value
    with connect(db) as fresh:
        assert schema.current_revision(fresh) == "0013"
    assert not has_heading_level()
    conn.commit()
    # and the next try, from the start, applies each revision once
    assert schema.migrate(db)["revision"] == schema.head_revision()
    assert has_heading_level()
    # no revision steps out of the one transaction (an autocommit block, a COMMIT, an
    # index built CONCURRENTLY), which would keep what it did past a rolled-back try
    for path in sorted((schema.migrations_dir() / "versions").glob("0*.py")):
        code = path.read_text()
        assert not re.search(r"autocommit_block|concurrently|\bcommit\b", code, re.I), path


def test_a_second_init_says_which_init_or_migrate_it_waits_for(
        db: str, conn: psycopg.Connection[Any]) -> None:
    """A second `pgfunnel init` (or migrate) started while one runs waits for the
    first's lock; it waited without a word, and under a lock_timeout (a role's, managed
    Postgres') failed with Postgres' bare "canceling statement due to lock timeout". It
    now says that another init or migrate runs, by its pid and application_name (each
    names its lock's session `pgfunnel init` / `pgfunnel migrate`), before it waits, and
    the lock_timeout refusal names it too."""
    from pgfunnel.cli.main import app
    from psycopg.conninfo import make_conninfo
    from typer.testing import CliRunner

    from pgfunnel.errors import ConflictError

    def lock_sessions() -> set[tuple[str, bool]]:
        return {(str(name), bool(granted)) for name, granted in conn.execute(
            "select a.application_name, l.granted from pg_locks l "
            "join pg_stat_activity a on a.pid = l.pid where l.locktype = 'advisory' "
            "and ((l.classid::bigint << 32) | l.objid::bigint) = hashtext(%s)::bigint",
            (schema.INIT_LOCK,)).fetchall()}

    with connect(db, autocommit=True) as first:
        first.execute("select set_config('application_name', 'pgfunnel migrate', false)")
        first.execute("select pg_advisory_lock(hashtext(%s))", (schema.INIT_LOCK,))
        pid = first.info.backend_pid
        said: list[str] = []
        done: list[Any] = []
        second = threading.Thread(target=lambda: done.append(
            schema.init(db, on_wait=said.append)))
        second.start()
        deadline = time.monotonic() + 30
        while ("pgfunnel init", False) not in lock_sessions() and time.monotonic() < deadline:
            time.sleep(0.05)
        # the waiting one is named too: a third is told which init it waits behind
        assert lock_sessions() == {("pgfunnel migrate", True), ("pgfunnel init", False)}
        assert said == [
            "waiting for another init or migrate of the pgfunnel schema on this database "
            f"to finish: pid {pid} (application_name 'pgfunnel migrate', connected for "
            f"{said[0].split('connected for ', 1)[1].split(')', 1)[0]}); this init goes on "
            f"when it has (pg_terminate_backend({pid}) ends one that is stuck)"], said
        assert second.is_alive()
        first.execute("select pg_advisory_unlock(hashtext(%s))", (schema.INIT_LOCK,))
        second.join(60)
        assert done and done[0]["revision"] == schema.head_revision()

        # the CLI says it on stderr, as a note, while it waits
        first.execute("select pg_advisory_lock(hashtext(%s))", (schema.INIT_LOCK,))
        ran: list[Any] = []
        cli = threading.Thread(target=lambda: ran.append(
            CliRunner().invoke(app, ["migrate", "--dsn", db], env={"COLUMNS": "300"})))
        cli.start()
        deadline = time.monotonic() + 60
        while ("pgfunnel migrate", False) not in lock_sessions() \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        first.execute("select pg_advisory_unlock(hashtext(%s))", (schema.INIT_LOCK,))
        cli.join(60)
        assert ran and ran[0].exit_code == 0, ran and ran[0].output
        assert ran[0].stderr.startswith(
            "note: waiting for another init or migrate of the pgfunnel schema on this "
            f"database to finish: pid {pid} (application_name 'pgfunnel migrate', "), \
            ran[0].stderr
        assert "schema already at revision" in ran[0].stdout, ran[0].stdout

        # under a lock_timeout: refused, naming the one it waited for
        first.execute("select pg_advisory_lock(hashtext(%s))", (schema.INIT_LOCK,))
        with pytest.raises(ConflictError) as refused:
            schema.migrate(make_conninfo(db, options="-c lock_timeout=200"))
        first.execute("select pg_advisory_unlock(hashtext(%s))", (schema.INIT_LOCK,))
    assert str(refused.value) == (
        "another init or migrate of the pgfunnel schema is running on this database: "
        f"pid {pid} (application_name 'pgfunnel migrate', connected for "
        f"{str(refused.value).split('connected for ', 1)[1].split(')', 1)[0]}); this migrate "
        "waited for it as long as the session's lock_timeout (200ms) allows and did "
        "nothing: run it again when that one has finished"), str(refused.value)


def test_the_clis_ingest_and_delete_name_their_sessions(
        sample_db: str, tmp_path: Path) -> None:
    """An operator whose `pgfunnel delete` or `ingest` waits (for an ingest batch, an
    activation) looks in pg_stat_activity: their sessions had no application_name, where
    reindex and versions drop name theirs; reindex's refusal of a second writer names
    the holder by it too."""
    from funnel_util import wait_for_lock_wait
    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    from pgfunnel.ingest import ingest_lock

    page = tmp_path / "late.md"
    page.write_text("# Late page\n\nA page ingested while the lock is held.\n")
    for name, command in (
            ("pgfunnel delete default", ["delete", "refunds-annual"]),
            ("pgfunnel ingest default", ["ingest", str(page)])):
        ran: list[Any] = []
        with connect(sample_db) as holder, connect(sample_db, autocommit=True) as watch:
            ingest_lock(holder, "default")
            thread = threading.Thread(target=lambda c=command, out=ran: out.append(
                CliRunner().invoke(app, [*c, "-c", "default", "--dsn", sample_db])))
            thread.start()
            try:
                wait_for_lock_wait(watch, name, timeout_s=120)
            finally:
                holder.commit()
                thread.join(120)
        assert ran and ran[0].exit_code == 0, ran and ran[0].output


def test_init_leaves_unchanged_triggers_alone_with_pgfunnel_on_the_search_path(
        db: str, conn: psycopg.Connection[Any]) -> None:
    """pg_get_triggerdef names the trigger's function unqualified when its schema is on
    the search_path, so with pgfunnel there (a role or database that sets it) no trigger
    matched this release's definition and init replaced all three on every run, taking
    the table locks that left it waiting for, or deadlocked with, an ingest batch."""
    from psycopg import sql

    conn.execute(sql.SQL("alter database {} set search_path = public, pgfunnel").format(
        sql.Identifier(str(conn.info.dbname))))
    conn.commit()
    with connect(db) as fresh:
        assert "pgfunnel" in str(fresh.execute("show search_path").fetchone())
    triggers = ("select tgname, xmin::text from pg_trigger where not tgisinternal and "
                "tgrelid in ('pgfunnel.lexical'::regclass, 'pgfunnel.chunk'::regclass, "
                "'pgfunnel.document'::regclass) order by 1")
    before = conn.execute(triggers).fetchall()
    conn.commit()
    assert len(before) == 3
    schema.init(db)
    assert conn.execute(triggers).fetchall() == before
    # and one that differs is still replaced, under that search_path too
    conn.execute("drop trigger document_collection on pgfunnel.document")
    conn.execute("create trigger document_collection before update of title "
                 "on pgfunnel.document for each row "
                 "execute function pgfunnel._indexed_update_refused()")
    conn.commit()
    schema.init(db)
    [(definition,)] = conn.execute(
        "select pg_get_triggerdef(oid) from pg_trigger "
        "where tgname = 'document_collection'").fetchall()
    assert "UPDATE OF collection_id" in definition


def test_an_activation_overtaken_after_it_caught_up_says_what_it_did(
        capsys: pytest.CaptureFixture[str]) -> None:
    """An activation that indexed the chunks its version lacked (or built its graph) and
    then found another session had switched to it printed "was already active; nothing
    changed", though those rows and that index were written and kept."""
    from pgfunnel.cli.versions import _print_activation

    from pgfunnel.versions import Activation

    _print_activation(Activation("docs", 2, None, 3, index_built=True, already_active=True),
                      False)
    said = capsys.readouterr().out.strip()
    assert said.startswith("version 2 of 'docs' was already active; 3 chunks ingested "
                           "since its build were indexed into it; its HNSW index"), said
    assert "nothing changed" not in said and "another session activated it" in said
    _print_activation(Activation("docs", 2, None, 0, already_active=True), False)
    assert capsys.readouterr().out.strip() == ("version 2 of 'docs' was already active; "
                                               "nothing changed")
