"""Roles, grants and row-level security (``pgfunnel init --rls``), and the security
checks ``pgfunnel doctor`` runs.

Two NOLOGIN group roles carry the privileges; application login roles are made
members of them (see docs/security.md):

- ``pgfunnel_reader``: search. SELECT on the tables, INSERT on search_trace and on the
  search_log columns a traced search writes (traces), EXECUTE on every pgfunnel function
  except the ones that write index data.
- ``pgfunnel_writer``: ingest, delete, reindex. Every privilege on the tables.

With RLS on, every row of document, chunk, embedding, lexical, posting, search_log
and search_trace passes a policy (FORCEd, so the table owner is held to it too
unless it is a superuser). Readers see only rows the principals in the
transaction-local setting ``pgfunnel.principals`` may see; writers see every row.
A missing setting means no rows.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Literal

import psycopg
from psycopg import sql

from pgfunnel.db import (
    own_transaction,
    public_wrappers,
    rows_by_position,
    search_path_schemas,
    tuple_rows,
)
from pgfunnel.errors import (
    SCHEMA_GRANT_HINT,
    AccessError,
    ConfigError,
    ConflictError,
    NotFoundError,
    translate,
)

READER_ROLE = "pgfunnel_reader"
WRITER_ROLE = "pgfunnel_writer"

#: tables whose rows carry (or derive from) a document's readers
RLS_TABLES = ("document", "chunk", "embedding", "lexical", "posting", "search_log",
              "search_trace")
#: tables a reader needs to read that hold no per-document content
SHARED_TABLES = ("collection", "index_version")
#: tables readers may not read at all, with what they would give away: term_stat lists
#: every word of a collection (those of documents a reader cannot see included; searches
#: read the df of their own terms through pgfunnel._term_df, one of the two SECURITY
#: DEFINER functions); qrel holds evaluation judgments, the citekeys of documents a reader
#: cannot see and the queries that should find them, and no search reads it
READER_DENIED_TABLES: dict[str, str] = {
    "term_stat": "which lists every word of a collection, those of documents a reader "
                 "cannot see included",
    "qrel": "which names judged documents (those a reader cannot see included) and the "
            "queries that should find them",
}
#: SECURITY DEFINER by design: _term_df (see READER_DENIED_TABLES) and the deletion
#: trigger (sql/020_bm25.sql says why)
DEFINER_BY_DESIGN = ("pgfunnel._term_df(integer,text[])", "pgfunnel._lexical_deleted()")
#: functions only writers may run (they modify index data)
WRITER_ONLY_FUNCTIONS = ("_bm25_add", "_remove_chunks", "_lexical_deleted",
                         "_indexed_update_refused")
#: the schemas a pgfunnel function's pinned search_path may name: pgvector's types,
#: functions and operators are named in its schema instead (see _create_in_shared_schemas)
PINNED_PATH_SCHEMAS = frozenset({"pg_catalog", "pgfunnel", "pg_temp"})
#: functions shipped without `set search_path` so Postgres inlines them (sql/020_bm25.sql,
#: sql/030_legs.sql)
UNPINNED_BY_DESIGN = ("pgfunnel._bm25_idf(bigint,bigint)",
                      "pgfunnel._document_visible(pgfunnel.document,text[],text,text,"
                      "timestamp with time zone,jsonb)")

# One reader predicate, inlined into the policies. The settings are read in scalar
# subqueries so Postgres evaluates them once per statement (an InitPlan), not per row.
_PRINCIPALS = "(select pgfunnel._rls_principals())"
_TENANT = "(select pgfunnel._rls_tenant())"
_DOCUMENT_PREDICATE = (
    f"{_PRINCIPALS} is not null"
    f" and (is_public or readers operator(pg_catalog.&&) {_PRINCIPALS})"
    f" and (tenant is null or tenant = {_TENANT})")
# Tables keyed by chunk defer to chunk's policy (which defers to document's): RLS
# applies inside policy subqueries, so one indexed lookup per row suffices.
_CHUNK_PREDICATE = ("exists (select 1 from pgfunnel.document d "
                    "where d.id = document_id)")
_BY_CHUNK_PREDICATE = "exists (select 1 from pgfunnel.chunk c where c.id = chunk_id)"
# A trace is readable by readers whose principals include all of the searcher's (so
# it shows nothing they could not have found) and in a compatible tenant; it is
# writable only under the principals actually searched with.
_LOG_READ = (f"{_PRINCIPALS} is not null and principals operator(pg_catalog.<@) {_PRINCIPALS}"
             f" and (tenant is null or tenant = {_TENANT})")
def _log_written_by_reader(log: str) -> str:
    """A search_log row (``log`` its alias, or '' for the row itself) that the reader in
    the settings could have written: exactly its principals and tenant, as itself."""
    return (f"{_PRINCIPALS} is not null"
            f" and {log}principals operator(pg_catalog.<@) {_PRINCIPALS}"
            f" and {log}principals operator(pg_catalog.@>) {_PRINCIPALS}"
            f" and {log}tenant is not distinct from {_TENANT}"
            f" and {log}logged_by = current_user")


# and under an id this session drew from the log's sequence (the column's default, or its
# own nextval): an id written by hand ahead of the sequence made another reader's next
# traced search fail on the primary key (currval is the value the default just drew)
_LOG_WRITE = (_log_written_by_reader("")
              + " and id operator(pg_catalog.=) "
              "pg_catalog.currval('pgfunnel.search_log_id_seq'::pg_catalog.regclass)")
_TRACE_READ = ("exists (select 1 from pgfunnel.search_log l where l.id = search_id) and "
               + _BY_CHUNK_PREDICATE)
# a trace row goes only into a search the reader logged itself, so no reader can add
# rows to another's trace (or learn from a duplicate key what that trace holds)
_TRACE_WRITE = ("exists (select 1 from pgfunnel.search_log l where l.id = search_id and "
                + _log_written_by_reader("l.") + ") and " + _BY_CHUNK_PREDICATE)

_READER_POLICIES: dict[str, tuple[str, str | None]] = {
    # table: (select USING, insert WITH CHECK or None)
    "document": (_DOCUMENT_PREDICATE, None),
    "chunk": (_CHUNK_PREDICATE, None),
    "embedding": (_BY_CHUNK_PREDICATE, None),
    "lexical": (_BY_CHUNK_PREDICATE, None),
    "posting": (_BY_CHUNK_PREDICATE, None),
    "search_log": (_LOG_READ, _LOG_WRITE),
    # final() logs the search in one statement and traces it in the next, which sees it
    "search_trace": (_TRACE_READ, _TRACE_WRITE),
}


@dataclass(frozen=True)
class SecurityFinding:
    """One result of :func:`security_findings`."""

    level: Literal["error", "warning", "info"]
    check: str
    message: str


def _ident(name: str) -> sql.Identifier:
    return sql.Identifier(name)


def _table(name: str) -> sql.Composed:
    return sql.SQL("pgfunnel.{}").format(_ident(name))


@rows_by_position
def ensure_roles(conn: psycopg.Connection[Any]) -> list[str]:
    """Create the NOLOGIN group roles if missing; return the ones created.

    Roles are cluster-wide, so this lives here and not in the SQL files that re-run
    on every init. Needs CREATEROLE (or a superuser).
    """
    created = []
    for role in (READER_ROLE, WRITER_ROLE):
        exists = conn.execute("select 1 from pg_roles where rolname = %s", (role,)).fetchone()
        if exists:
            continue
        try:
            conn.execute(sql.SQL("create role {} nologin").format(_ident(role)))
        except psycopg.errors.InsufficientPrivilege as exc:
            raise AccessError(
                f"cannot create role {role}: this role lacks CREATEROLE; ask an administrator to "
                f"run `create role {role} nologin` and re-run `pgfunnel init --rls`") from exc
        except psycopg.errors.DuplicateObject:
            pass  # created concurrently by another init on the same cluster
        created.append(role)
    return created


#: what the roles hold in schema pgfunnel besides USAGE on it and EXECUTE on its functions;
#: grant_privileges gives it and `pgfunnel doctor` checks it. The reader: SELECT on the
#: tables a search reads, INSERT where traced searches log
READER_TABLE_PRIVILEGES: tuple[tuple[str, str], ...] = (
    tuple((table, "SELECT") for table in RLS_TABLES + SHARED_TABLES)
    + (("search_log", "INSERT"), ("search_trace", "INSERT")))
READER_SEQUENCE_PRIVILEGES = ("USAGE",)
#: the search_log columns a reader may write: those a traced search (final()) writes. Not
#: `at`, `id` or `logged_by`, which take their defaults: with INSERT on the whole table a
#: reader wrote its rows with an `at` of its choosing, and `versions compare --last`, which
#: takes the newest by `at`, replayed them before every real search
READER_LOG_COLUMNS = ("collection_id", "index_version_id", "config_hash", "config",
                      "query_text", "principals", "tenant", "notes")
#: the sequences the reader draws from: a traced search's search_log id. No search takes
#: another value, and nextval on document_id_seq would tell a reader how many documents
#: were ever written, those it cannot see included (earlier releases granted every one)
READER_SEQUENCES = ("search_log_id_seq",)
#: the writer: these on every table of the schema
WRITER_TABLE_PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE")
WRITER_SEQUENCE_PRIVILEGES = ("USAGE", "SELECT", "UPDATE")


def _privileges(names: Sequence[str]) -> sql.Composable:
    return sql.SQL(", ").join(sql.SQL(name) for name in names)


@rows_by_position
def grant_privileges(conn: psycopg.Connection[Any]) -> None:
    """Grant the reader and writer roles exactly what they need in schema pgfunnel."""
    r, w = _ident(READER_ROLE), _ident(WRITER_ROLE)
    conn.execute(sql.SQL("grant usage on schema pgfunnel to {}, {}").format(r, w))
    for table, privilege in READER_TABLE_PRIVILEGES:
        if not _table_exists(conn, table):
            continue
        if (table, privilege) == ("search_log", "INSERT"):
            # the table-wide grant of earlier releases goes, its columns' with it
            conn.execute(sql.SQL("revoke insert on {} from {}").format(_table(table), r))
            conn.execute(sql.SQL("grant insert ({}) on {} to {}").format(
                sql.SQL(", ").join(_ident(c) for c in READER_LOG_COLUMNS), _table(table), r))
            continue
        conn.execute(sql.SQL("grant {} on {} to {}").format(
            sql.SQL(privilege), _table(table), r))
    for table in READER_DENIED_TABLES:
        # granted by earlier releases
        conn.execute(sql.SQL("revoke all on {} from {}").format(_table(table), r))
    conn.execute(sql.SQL("grant {} on all tables in schema pgfunnel to {}").format(
        _privileges(WRITER_TABLE_PRIVILEGES), w))
    conn.execute(sql.SQL("grant {} on all sequences in schema pgfunnel to {}").format(
        _privileges(WRITER_SEQUENCE_PRIVILEGES), w))
    for (sequence,) in conn.execute(
            "select c.relname from pg_catalog.pg_class c "
            "where c.relnamespace = 'pgfunnel'::regnamespace and c.relkind = 'S' "
            "order by 1").fetchall():
        if sequence in READER_SEQUENCES:
            conn.execute(sql.SQL("grant {} on sequence {} to {}").format(
                _privileges(READER_SEQUENCE_PRIVILEGES), _table(sequence), r))
        else:
            conn.execute(sql.SQL("revoke all on sequence {} from {}").format(
                _table(sequence), r))
    _grant_functions(conn)


def _grant_functions(conn: psycopg.Connection[Any]) -> None:
    # the same rule as sql/090_security.sql, for roles created after the functions
    rows = conn.execute(
        "select p.oid::regprocedure::text, p.proname from pg_proc p "
        "where p.pronamespace = 'pgfunnel'::regnamespace").fetchall()
    for sig, name in rows:
        conn.execute(sql.SQL("grant execute on function {} to {}").format(
            sql.SQL(sig), _ident(WRITER_ROLE)))
        if name not in WRITER_ONLY_FUNCTIONS:
            conn.execute(sql.SQL("grant execute on function {} to {}").format(
                sql.SQL(sig), _ident(READER_ROLE)))
    # the wrapper where this role made it: another role's may not be granted by this one
    # (Postgres warns "no privileges were granted"), and public may be missing
    for sig, _, own in public_wrappers(conn):
        if own:
            conn.execute(sql.SQL("grant execute on function {} to {}, {}").format(
                sql.SQL(sig), _ident(READER_ROLE), _ident(WRITER_ROLE)))


def _oids(conn: psycopg.Connection[Any], signatures: Sequence[str]) -> set[int]:
    """The functions' oids (the schema-qualified signatures of those that exist)."""
    rows = conn.execute("select pg_catalog.to_regprocedure(s)::oid "
                        "from pg_catalog.unnest(%s::text[]) s",
                        (list(signatures),)).fetchall()
    return {int(r[0]) for r in rows if r[0] is not None}


def _table_exists(conn: psycopg.Connection[Any], table: str) -> bool:
    row = conn.execute("select pg_catalog.to_regclass(%s::text) is not null",
                       (f"pgfunnel.{table}",)).fetchone()
    return bool(row and row[0])


@rows_by_position
def check_rls_setup(conn: psycopg.Connection[Any]) -> None:
    """Refuse, before anything is written, a role that could not finish ``enable_rls``: one
    that must create the roles without CREATEROLE, or that must be granted an existing
    ``pgfunnel_writer`` and may not grant it: without ADMIN OPTION on it (Postgres 16 and
    later), or without either that or CREATEROLE (15). A failure half-way would leave the
    schema installed and row-level security off."""
    row = conn.execute(
        "select r.rolsuper, r.rolcreaterole, current_user, "
        "pg_catalog.current_setting('server_version_num')::int, "
        "exists (select 1 from pg_roles w where w.rolname = %s), "
        "w.oid is not null, "
        "coalesce(pg_catalog.pg_has_role(r.oid, w.oid, 'USAGE'), false), "
        "exists (select 1 from pg_auth_members m "
        "        where m.roleid = w.oid and m.member = r.oid and m.admin_option) "
        "from pg_roles r left join pg_roles w on w.rolname = %s "
        "where r.rolname = current_user",
        (READER_ROLE, WRITER_ROLE)).fetchone()
    if row is None:
        return
    superuser, createrole, me, version, reader_exists, writer_exists, uses, admin = row
    if superuser:
        return
    if not (reader_exists and writer_exists) and not createrole:
        raise AccessError(
            f"`init --rls` creates the roles {READER_ROLE} and {WRITER_ROLE}, and role {me!r} "
            "lacks CREATEROLE: ask an administrator to create them (`create role "
            f"{READER_ROLE} nologin; create role {WRITER_ROLE} nologin`) or to grant "
            "CREATEROLE, then run it again")
    if writer_exists and not uses and not admin and (version >= 160000 or not createrole):
        raise AccessError(
            f"`init --rls` grants role {me!r} the privileges of {WRITER_ROLE} (so that "
            "forced row-level security does not lock the owner out of its tables), and "
            f"{me!r} may not grant that role: ask a superuser to run `grant {WRITER_ROLE} "
            f"to {me}` (or `... with admin option`), then run it again")


#: the policy names pgfunnel owns on each RLS table
_POLICY_NAMES = ("pgfunnel_reader_select", "pgfunnel_reader_insert", "pgfunnel_writer_all")


def _wanted_policies(table: str) -> dict[str, sql.Composed]:
    """The CREATE POLICY statements a table should carry, by policy name."""
    t = _table(table)
    using, check = _READER_POLICIES[table]
    wanted = {"pgfunnel_reader_select": sql.SQL(
        "create policy pgfunnel_reader_select on {} for select to {} using ({})").format(
            t, _ident(READER_ROLE), sql.SQL(using))}
    if check is not None:
        wanted["pgfunnel_reader_insert"] = sql.SQL(
            "create policy pgfunnel_reader_insert on {} for insert to {} with check ({})"
        ).format(t, _ident(READER_ROLE), sql.SQL(check))
    wanted["pgfunnel_writer_all"] = sql.SQL(
        "create policy pgfunnel_writer_all on {} for all to {} using (true) with check (true)"
    ).format(t, _ident(WRITER_ROLE))
    return wanted


def _installed_policies(conn: psycopg.Connection[Any], table: str) -> dict[str, tuple[str, str]]:
    """pgfunnel's policies on a table as installed: name -> (its comment, a digest of what
    Postgres holds: command, roles, USING and WITH CHECK as deparsed)."""
    rows = conn.execute(
        "select p.polname, coalesce(pg_catalog.obj_description(p.oid, 'pg_policy'), ''), "
        "pg_catalog.md5(concat_ws(e'\\x1f', p.polcmd::text, p.polpermissive::text, "
        "(select pg_catalog.string_agg(r::regrole::text, ',' order by r::regrole::text) "
        "   from pg_catalog.unnest(p.polroles) r), "
        "pg_catalog.pg_get_expr(p.polqual, p.polrelid), "
        "pg_catalog.pg_get_expr(p.polwithcheck, p.polrelid))) "
        "from pg_catalog.pg_policy p where p.polrelid = %s::regclass and p.polname = any(%s)",
        (f"pgfunnel.{table}", list(_POLICY_NAMES))).fetchall()
    return {name: (comment, digest) for name, comment, digest in rows}


def _statement_digest(conn: psycopg.Connection[Any], statement: sql.Composed) -> str:
    row = conn.execute("select pg_catalog.md5(%s)", (statement.as_string(conn),)).fetchone()
    assert row is not None
    return str(row[0])


def _rls_changes(conn: psycopg.Connection[Any]) -> dict[str, dict[str, sql.Composed | None]]:
    """What enable_rls must change, per table: policies to (re)create (or, as None, drop),
    with "" standing for row security to switch on. A policy is current when its
    comment names the digest of this release's statement and the digest of what
    Postgres held right after creating it, so one edited by hand is made again."""
    flags = dict(conn.execute(
        "select c.relname, c.relrowsecurity and c.relforcerowsecurity from pg_catalog.pg_class c "
        "where c.relnamespace = 'pgfunnel'::regnamespace and c.relname = any(%s)",
        (list(RLS_TABLES),)).fetchall())
    changes: dict[str, dict[str, sql.Composed | None]] = {}
    for table in RLS_TABLES:
        wanted = _wanted_policies(table)
        installed = _installed_policies(conn, table)
        todo: dict[str, sql.Composed | None] = {}
        for name in _POLICY_NAMES:
            statement = wanted.get(name)
            if statement is None:
                if name in installed:
                    todo[name] = None
                continue
            comment, digest = installed.get(name, ("", ""))
            if comment != f"pgfunnel {_statement_digest(conn, statement)} {digest}":
                todo[name] = statement
        if not flags.get(table, False):
            todo[""] = None
        if todo:
            changes[table] = todo
    return changes


def _lock_for_policy_change(conn: psycopg.Connection[Any], tables: list[str],
                            give_up_after: float = 60.0) -> None:
    """Take ACCESS EXCLUSIVE on the tables whose policies change, without deadlocking the
    searches that run meanwhile. A search takes its table locks one by one as it reaches
    each table, so a change that held `document` and waited for `chunk` while a search
    held `chunk` and waited for `document` was a deadlock, and Postgres cancelled the
    search. Here each attempt waits at most half of `deadlock_timeout` (so the wait
    gives up before any search's deadlock check runs), inside a savepoint that releases
    what it got, and tries again shortly."""
    row = conn.execute("select least(300, greatest(10, pg_catalog.date_part('epoch', "
                       "pg_catalog.current_setting('deadlock_timeout')::interval) * 500))::int"
                       ).fetchone()
    wait_ms = int(row[0]) if row else 300
    previous = conn.execute("select pg_catalog.current_setting('lock_timeout')").fetchone()
    statement = sql.SQL("lock table {} in access exclusive mode").format(
        sql.SQL(", ").join(_table(t) for t in tables))
    deadline = time.monotonic() + give_up_after
    attempt = 0
    while True:
        attempt += 1
        try:
            with conn.transaction():
                conn.execute("select pg_catalog.set_config('lock_timeout', %s, true)",
                             (f"{wait_ms}ms",))
                conn.execute(statement)
            break
        except psycopg.errors.LockNotAvailable as exc:
            if time.monotonic() > deadline:
                raise ConflictError(
                    f"could not lock {', '.join(tables)} for a moment in {give_up_after:g} s "
                    "to update their row-level security policies: long transactions hold "
                    "them; run it again when they end") from exc
            time.sleep(min(0.05 * attempt, 0.5))
    conn.execute("select pg_catalog.set_config('lock_timeout', %s, true)",
                 (previous[0] if previous else "0",))


@rows_by_position
def enable_rls(conn: psycopg.Connection[Any]) -> None:
    """Create roles, grant privileges, and turn on FORCEd row-level security policies.

    Idempotent: a policy that is already this release's is left alone, so running
    ``init`` or ``migrate`` again on a database in RLS mode takes no table lock that
    searches would wait for. Policies that change are replaced under a lock taken
    without deadlocking running searches (:func:`_lock_for_policy_change`). The role
    running this (the owner) is made a member of ``pgfunnel_writer`` so that FORCE does
    not lock it out of its own tables. Must run inside a transaction (the caller commits).
    """
    try:
        ensure_roles(conn)
        grant_privileges(conn)
        _grant_writer_to_owner(conn)
        changes = _rls_changes(conn)
        if not changes:
            return
        _lock_for_policy_change(conn, list(changes))
        for table, todo in changes.items():
            t = _table(table)
            for name, statement in todo.items():
                if not name:
                    continue
                conn.execute(sql.SQL("drop policy if exists {} on {}").format(_ident(name), t))
                if statement is None:
                    continue
                conn.execute(statement)
                installed = _installed_policies(conn, table)[name][1]
                conn.execute(sql.SQL("comment on policy {} on {} is {}").format(
                    _ident(name), t,
                    sql.Literal(f"pgfunnel {_statement_digest(conn, statement)} {installed}")))
            conn.execute(sql.SQL("alter table {} enable row level security").format(t))
            conn.execute(sql.SQL("alter table {} force row level security").format(t))
    except psycopg.Error as exc:
        raise translate(exc) from exc


def _grant_writer_to_owner(conn: psycopg.Connection[Any]) -> None:
    """Make sure the role running ``enable_rls`` holds pgfunnel_writer's privileges, so
    the forced policies do not lock it out of its own tables.

    The policies follow privileges (USAGE), not bare membership: on Postgres 16 and later
    a CREATEROLE role that creates pgfunnel_writer is made a member with ADMIN OPTION but
    without INHERIT, which counts as membership and passes no policy. Before this check
    read membership, such an owner could write nothing after ``init --rls``."""
    row = conn.execute("select rolsuper, pg_catalog.pg_has_role(current_user, %s, 'USAGE'), "
                       "pg_catalog.current_setting('server_version_num')::int "
                       "from pg_roles where rolname = current_user",
                       (WRITER_ROLE,)).fetchone()
    if row is None or row[0] or row[1]:
        return
    # 16 and later: explicit, so that a NOINHERIT owner gets the privileges too
    inherit = sql.SQL(" with inherit true") if int(row[2]) >= 160000 else sql.SQL("")
    conn.execute(sql.SQL("grant {} to current_user{}").format(_ident(WRITER_ROLE), inherit))
    held = conn.execute("select pg_catalog.pg_has_role(current_user, %s, 'USAGE')",
                        (WRITER_ROLE,)).fetchone()
    if not (held and held[0]):
        raise AccessError(
            f"`init --rls` granted {WRITER_ROLE} to the current role, which still does not "
            "hold its privileges, so forced row-level security would lock it out of its "
            f"own tables: ask a superuser to run `grant {WRITER_ROLE} to <this role>`")


@rows_by_position
def disable_rls(conn: psycopg.Connection[Any]) -> None:
    """Turn row-level security off again (policies are kept but inactive), and take back
    what ``pgfunnel_reader`` was granted in schema pgfunnel: without the policies its
    members would read every row (documents they may not see, every reader's logged
    queries and traces), as without ``--rls`` the role holds nothing here.
    ``enable_rls`` grants it again. The writer keeps its privileges: its policy reads
    every row anyway."""
    for table in RLS_TABLES:
        t = _table(table)
        conn.execute(sql.SQL("alter table {} no force row level security").format(t))
        conn.execute(sql.SQL("alter table {} disable row level security").format(t))
    if conn.execute("select 1 from pg_catalog.pg_roles where rolname = %s",
                    (READER_ROLE,)).fetchone() is None:
        return
    r = _ident(READER_ROLE)
    conn.execute(sql.SQL("revoke all on all tables in schema pgfunnel from {}").format(r))
    conn.execute(sql.SQL("revoke all on all sequences in schema pgfunnel from {}").format(r))
    conn.execute(sql.SQL("revoke usage on schema pgfunnel from {}").format(r))


@rows_by_position
def rls_enabled(conn: psycopg.Connection[Any]) -> bool:
    """Whether RLS mode is on (any pgfunnel content table has row security enabled)."""
    row = conn.execute(
        "select coalesce(bool_or(c.relrowsecurity), false) from pg_class c "
        "where c.relnamespace = 'pgfunnel'::regnamespace and c.relname = any(%s)",
        (list(RLS_TABLES),)).fetchone()
    return bool(row and row[0])


@rows_by_position
def grant_app_role(conn: psycopg.Connection[Any], role: str, *, writer: bool = False) -> None:
    """Make an existing login role an application reader (or writer). A reader that row-level
    security does not apply to (a superuser, a BYPASSRLS role, the tables' owner) is refused
    (ConfigError): as a member of pgfunnel_reader it would read every document. So is a
    database that ``init --rls`` has not set up: the group role missing (NotFoundError) or
    granted nothing on this database's tables (ConflictError)."""
    group = WRITER_ROLE if writer else READER_ROLE
    try:
        row = conn.execute(
            "select r.rolsuper, r.rolbypassrls, "
            "       r.oid = (select c.relowner from pg_catalog.pg_class c "
            "                 where c.oid = pg_catalog.to_regclass('pgfunnel.document')) "
            "  from pg_catalog.pg_roles r where r.rolname = %s", (role,)).fetchone()
        if row is None:
            raise NotFoundError(f"role {role!r} does not exist: create it first "
                                f"(create role ... login), then grant it {group}")
        if not writer and (unfiltered := [what for what, holds in zip(
                ("a superuser", "a BYPASSRLS role", "the owner of pgfunnel's tables"),
                row, strict=True) if holds]):
            raise ConfigError("role", f"{role!r} is {' and '.join(unfiltered)}: row-level "
                              "security does not apply to it, so as a member of "
                              f"{READER_ROLE} it would read every document; make the "
                              "application a role of its own (create role webapp login: "
                              "no superuser, no bypassrls) and grant that one")
        # `pgfunnel init` without --rls creates no group roles and grants them nothing (a
        # member would read every row, with no policy to hold it); the grant either failed
        # with Postgres' bare 'role "pgfunnel_reader" does not exist' or, where another
        # database of the cluster had made the roles, succeeded and left a role whose
        # every search was refused
        enable = ("run `pgfunnel init --rls` on this database first (or "
                  "pgfunnel.security.enable_rls(conn), then commit): it creates the roles "
                  f"and grants {group} what it needs here, with the row-level security "
                  f"policies; then grant {group} to {role}")
        if conn.execute("select 1 from pg_catalog.pg_roles where rolname = %s",
                        (group,)).fetchone() is None:
            raise NotFoundError(f"role {group!r} does not exist: {enable}")
        held = conn.execute(
            "select pg_catalog.has_schema_privilege(%s, 'pgfunnel', 'USAGE') "
            "   and pg_catalog.has_table_privilege(%s, 'pgfunnel.document', 'SELECT')",
            (group, group)).fetchone()
        if not (held and held[0]):
            raise ConflictError(
                f"{group} holds no privilege on this database's pgfunnel tables (row-level "
                "security is off here; the role was made by `init --rls` on another "
                f"database of the cluster), so {role!r} could not search: {enable}")
        me = conn.execute("select current_user::text, pg_catalog.quote_ident(%s)",
                          (role,)).fetchone()
        granter, role_ident = (str(me[0]), str(me[1])) if me else ("?", role)
        try:
            conn.execute(sql.SQL("grant {} to {}").format(_ident(group), _ident(role)))
        except psycopg.errors.InsufficientPrivilege as exc:
            # the tables' owner that a superuser made a member of the group (what `init
            # --rls` asks for) holds no ADMIN OPTION on it, and got Postgres' bare
            # 'permission denied to grant role "pgfunnel_reader"'
            raise AccessError(
                f"role {granter!r} may not grant {group} to {role!r} (that takes "
                f"ADMIN OPTION on {group}, or a superuser): ask a superuser to run `grant "
                f"{group} to {role_ident}`, or to give this role `... with "
                "admin option` once, then run it again") from exc
    except psycopg.Error as exc:
        raise translate(exc) from exc


@rows_by_position
def security_findings(conn: psycopg.Connection[Any],
                      app_role: str | None = None) -> list[SecurityFinding]:
    """What ``pgfunnel doctor`` reports about roles, RLS and grants.

    Application roles are the members of ``pgfunnel_reader`` (and ``app_role`` if
    given). Each must not own the tables, be a superuser, or have BYPASSRLS.
    """
    out: list[SecurityFinding] = []
    rls = rls_enabled(conn)
    owner_row = conn.execute(
        "select pg_get_userbyid(c.relowner) from pg_class c "
        "where c.oid = to_regclass('pgfunnel.document')").fetchone()
    owner = owner_row[0] if owner_row else None

    app_roles: set[str] = set()
    if conn.execute("select 1 from pg_roles where rolname = %s", (READER_ROLE,)).fetchone():
        # members through group roles too (a DBA's `grant pgfunnel_reader to app_group`,
        # `grant app_group to webapp`): by the memberships, not pg_has_role, which holds
        # for every superuser
        app_roles.update(r for (r,) in conn.execute(
            "with recursive members(oid) as ("
            "  select a.member from pg_catalog.pg_auth_members a "
            "  join pg_catalog.pg_roles g on g.oid = a.roleid where g.rolname = %s "
            "  union select a.member from pg_catalog.pg_auth_members a "
            "  join members m on m.oid = a.roleid) "
            "select r.rolname from members m join pg_catalog.pg_roles r on r.oid = m.oid "
            "where r.rolcanlogin",
            (READER_ROLE,)).fetchall())
    if app_role:
        app_roles.add(app_role)
    for role in sorted(app_roles):
        info = conn.execute(
            "select r.rolsuper, r.rolbypassrls, "
            "coalesce(pg_catalog.pg_has_role(r.oid, w.oid, 'USAGE'), false) "
            "from pg_catalog.pg_roles r left join pg_catalog.pg_roles w on w.rolname = %s "
            "where r.rolname = %s", (WRITER_ROLE, role)).fetchone()
        if info is None:
            out.append(SecurityFinding("error", "app_role", f"application role {role!r} does "
                                       "not exist"))
            continue
        if role == owner:
            out.append(SecurityFinding(
                "error", "app_role_owner",
                f"application role {role!r} owns the pgfunnel tables; owners can disable RLS and "
                "grant themselves anything. Use a separate role (see docs/security.md)"))
        if info[0]:
            out.append(SecurityFinding(
                "error", "app_role_superuser",
                f"application role {role!r} is a superuser and bypasses every policy"))
        elif info[1]:
            out.append(SecurityFinding(
                "error", "app_role_bypassrls",
                f"application role {role!r} has BYPASSRLS; row-level security does not apply"))
        elif info[2] and rls and role != owner:
            # (the owner holds the writer's privileges by design: app_role_owner says it)
            out.append(SecurityFinding(
                "error", "app_role_writer",
                f"application role {role!r} holds {WRITER_ROLE}'s privileges, whose policy "
                "reads every row, so row-level security does not hold its searches; search "
                f"with a role that is a member of {READER_ROLE} only, and give what writes "
                "(an ingest job, an admin screen that deletes) a role of its own "
                "(see docs/security.md)"))
    if not app_roles:
        out.append(SecurityFinding(
            "info", "app_role", f"no login role is a member of {READER_ROLE}; searches run as "
            "the owner (fine for one trusted application, see docs/security.md)"))

    if rls:
        rows = conn.execute(
            "select c.relname, c.relrowsecurity, c.relforcerowsecurity from pg_class c "
            "where c.relnamespace = 'pgfunnel'::regnamespace and c.relname = any(%s) "
            "order by 1", (list(RLS_TABLES),)).fetchall()
        for name, enabled, forced in rows:
            if not enabled:
                out.append(SecurityFinding("error", "rls_disabled",
                                           f"RLS mode is on but pgfunnel.{name} has row "
                                           "security disabled"))
            elif not forced:
                out.append(SecurityFinding("error", "rls_not_forced",
                                           f"pgfunnel.{name} has row security without FORCE; "
                                           "its owner bypasses the policies"))
    else:
        out.append(SecurityFinding("info", "rls", "RLS mode is off (access is enforced by "
                                   "funnel_search's filters; `pgfunnel init --rls` adds policies)"))

    # by oid: a signature's text drops "pgfunnel." (in its name and its types) when the
    # schema is on this connection's search_path
    definer_by_design = _oids(conn, DEFINER_BY_DESIGN)
    unpinned_by_design = _oids(conn, UNPINNED_BY_DESIGN)
    for oid, sig in conn.execute(
            "select p.oid, p.oid::regprocedure::text from pg_proc p "
            "where p.pronamespace = 'pgfunnel'::regnamespace and p.prosecdef order by 2"
            ).fetchall():
        if oid in definer_by_design:
            continue
        out.append(SecurityFinding("error", "security_definer",
                                   f"{sig} is SECURITY DEFINER; pgfunnel functions must be "
                                   "SECURITY INVOKER"))
    if conn.execute("select 1 from pg_roles where rolname = %s", (READER_ROLE,)).fetchone():
        for table in READER_DENIED_TABLES:
            if _table_exists(conn, table) and conn.execute(
                    "select pg_catalog.has_table_privilege(%s::text, %s::text, 'select')",
                    (READER_ROLE, f"pgfunnel.{table}")).fetchone() == (True,):
                out.append(SecurityFinding(
                    "warning", "reader_grants",
                    f"{READER_ROLE} may read pgfunnel.{table}, {READER_DENIED_TABLES[table]} "
                    "(granted by an earlier release): run `pgfunnel migrate` as the owner"))
    for oid, sig in conn.execute(
            "select p.oid, p.oid::regprocedure::text from pg_proc p "
            "where p.pronamespace = 'pgfunnel'::regnamespace "
            "and not exists (select 1 from pg_proc q where q.oid = p.oid "
            "  and q.proconfig is not null and exists (select 1 from unnest(q.proconfig) s "
            "  where s like 'search_path=%%')) order by 2").fetchall():
        if oid in unpinned_by_design:
            out.append(SecurityFinding("info", "search_path",
                                       f"{sig} has no pinned search_path by design: a SET clause "
                                       "would keep Postgres from inlining it, and every name in "
                                       "its body is schema-qualified"))
        else:
            out.append(SecurityFinding("warning", "search_path",
                                       f"{sig} has no pinned search_path"))
    # a pinned path that names any other schema lets whoever may create objects there
    # shadow, with an exact match, an operator or function the body reaches by an
    # implicit cast, and run as the searcher
    for sig, path in conn.execute(
            "select p.oid::regprocedure::text, substr(s, length('search_path=') + 1) "
            "from pg_proc p, unnest(p.proconfig) s "
            "where p.pronamespace = 'pgfunnel'::regnamespace and s like 'search_path=%%' "
            "order by 1").fetchall():
        names = search_path_schemas(str(path))
        if not names:
            # a path pgfunnel cannot read, or an empty one (Postgres then searches
            # pg_temp first), pins nothing it can vouch for. Shown as Postgres shows the
            # setting (SHOW search_path: as stored, an empty list as ""), not in Python's
            # quotes, which doubled or escaped the ones the setting holds
            shown = str(path) or '""'
            out.append(SecurityFinding(
                "warning", "search_path",
                f"{sig} pins search_path to {shown}, which pgfunnel cannot read as a list "
                "of its own schemas (run `pgfunnel migrate` to reinstall the functions)"))
            continue
        others = [name for name in names if name not in PINNED_PATH_SCHEMAS]
        if others:
            out.append(SecurityFinding(
                "warning", "search_path",
                f"{sig} pins search_path to {path}: {', '.join(others)} "
                f"{'is' if len(others) == 1 else 'are'} not pgfunnel's own (run `pgfunnel "
                "migrate` to reinstall the functions)"))
    out.extend(_create_in_shared_schemas(conn, owner))
    out.extend(_readers_of_other_databases(conn))
    if rls:
        out.extend(_identity_defaults(conn))
    for sig, name in conn.execute(
            "select p.oid::regprocedure::text, p.proname from pg_proc p "
            "where (p.pronamespace = 'pgfunnel'::regnamespace "
            "       or (p.pronamespace = pg_catalog.to_regnamespace('public') "
            "           and p.proname = 'funnel_search'))"
            " and has_function_privilege('public', p.oid, 'execute') order by 1").fetchall():
        level: Literal["error", "warning"] = (
            "error" if name in WRITER_ONLY_FUNCTIONS else "warning")
        out.append(SecurityFinding(level, "public_execute",
                                   f"EXECUTE on {sig} is granted to PUBLIC; grant it to "
                                   f"{READER_ROLE}/{WRITER_ROLE} instead "
                                   "(re-run `pgfunnel migrate`)"))
    return out


def _create_in_shared_schemas(conn: psycopg.Connection[Any],
                              owner: str | None) -> list[SecurityFinding]:
    """Roles other than superusers and the schemas' and tables' owners that may create
    objects in public (which holds funnel_search) or in pgvector's schema. Such a role can
    add a funnel_search, or an operator, that a caller's query resolves to before
    pgfunnel's own (an untyped literal from psql matches a text argument better than a
    vector one) and have its code run as whoever searches, superusers included."""
    rows = conn.execute(
        "select n.nspname, pg_catalog.quote_ident(n.nspname), coalesce(r.rolname, ''), "
        "pg_catalog.quote_ident(r.rolname) from pg_namespace n "
        "cross join lateral pg_catalog.aclexplode(coalesce(n.nspacl, "
        "  pg_catalog.acldefault('n', n.nspowner))) a "
        "left join pg_roles r on r.oid = a.grantee "
        "where (n.nspname = 'public' or n.oid = (select e.extnamespace from pg_extension e "
        "       where e.extname = 'vector')) "
        "and a.privilege_type = 'CREATE' and a.grantee <> n.nspowner "
        "and (r.oid is null or not (r.rolsuper or r.rolname like 'pg\\_%%' "
        "     or r.rolname = %s)) "
        "order by 1, 2", (owner or "",)).fetchall()
    found: list[SecurityFinding] = []
    for nspname, quoted_schema, role, quoted_role in rows:
        who = "every role (PUBLIC)" if role == "" else f"role {role!r}"
        grantee = quoted_role or "public"
        found.append(SecurityFinding(
            "warning", "schema_create",
            f"{who} may create objects in schema {quoted_schema}, which holds "
            f"{'funnel_search' if nspname == 'public' else 'pgvector'}: it can add a "
            "function or operator that searches resolve to and run its own code as whoever "
            f"searches; unless it is as trusted as the owner, `revoke create on schema "
            f"{quoted_schema} from {grantee}` (Postgres 15 and later no longer grant it to "
            "PUBLIC)"))
    return found


def _readers_of_other_databases(conn: psycopg.Connection[Any]) -> list[SecurityFinding]:
    """A warning when pgfunnel_reader may read this database's tables (RLS mode), other
    databases of the cluster grant it tables or policies too, and every login role may
    connect here (CONNECT is PUBLIC's by default). The role is one for the whole cluster:
    a login role made a member of it for another database's application then searches
    this one, under principals it sets itself (the policies trust the setting)."""
    row = conn.execute(
        "select pg_catalog.quote_ident(pg_catalog.current_database()), "
        "array(select d.datname::text from pg_catalog.pg_shdepend s "
        "      join pg_catalog.pg_database d on d.oid = s.dbid "
        "      where s.refclassid = 'pg_catalog.pg_authid'::pg_catalog.regclass "
        "        and s.refobjid = r.oid and s.deptype in ('a', 'r') "
        "        and s.classid in ('pg_catalog.pg_class'::pg_catalog.regclass, "
        "                          'pg_catalog.pg_policy'::pg_catalog.regclass) "
        "        and d.datname <> pg_catalog.current_database() "
        "      group by d.datname order by d.datname) "
        "from pg_catalog.pg_roles r where r.rolname = %s "
        "and pg_catalog.has_database_privilege('public', pg_catalog.current_database(), "
        "                                      'CONNECT') "
        "and coalesce(pg_catalog.has_table_privilege("
        "    r.oid, pg_catalog.to_regclass('pgfunnel.document'), 'SELECT'), false)",
        (READER_ROLE,)).fetchone()
    if row is None or not row[1]:
        return []
    here, others = str(row[0]), [str(name) for name in row[1]]
    named = ", ".join(repr(name) for name in others)
    return [SecurityFinding(
        "warning", "database_connect",
        f"{READER_ROLE} is one role for the whole cluster, and database"
        f"{'s' if len(others) > 1 else ''} {named} grant{'' if len(others) > 1 else 's'} it "
        f"tables too: a login role made a member of it for another database's application "
        f"may connect to this one (CONNECT on database {here} is granted to PUBLIC) and "
        "read its rows under principals it sets itself. Let only this database's own roles "
        f"connect: `revoke connect on database {here} from public`, then `grant connect on "
        f"database {here} to` each of them (docs/security.md)")]


def _identity_defaults(conn: psycopg.Connection[Any]) -> list[SecurityFinding]:
    """The reader settings given by default (`alter role ... set pgfunnel.principals`,
    `alter database ... set`, for this database or every one). A session of such a role
    starts as that reader, so a query that sets no reader (an ORM query, a report, a
    pooled connection's next request) reads its rows instead of none; a default tenant
    lets one that sets principals only read that tenant's documents."""
    rows = conn.execute(
        "select pg_catalog.split_part(c.setting, '=', 1), "
        "pg_catalog.substr(c.setting, pg_catalog.strpos(c.setting, '=') + 1), "
        "r.rolname, pg_catalog.quote_ident(r.rolname), "
        "d.datname, pg_catalog.quote_ident(d.datname) "
        "from pg_catalog.pg_db_role_setting s "
        "cross join lateral pg_catalog.unnest(s.setconfig) as c(setting) "
        "left join pg_catalog.pg_roles r on r.oid = s.setrole "
        "left join pg_catalog.pg_database d on d.oid = s.setdatabase "
        "where (s.setdatabase = 0 or d.datname = pg_catalog.current_database()) "
        "and pg_catalog.split_part(c.setting, '=', 1) "
        "    in ('pgfunnel.principals', 'pgfunnel.tenant') "
        "order by 1, 3 nulls first").fetchall()
    found: list[SecurityFinding] = []
    for name, value, role, quoted_role, database, quoted_database in rows:
        who = f"role {role!r}" if role is not None else "every role"
        where = f"database {database!r}" if database is not None else "every database"
        target = (f"role {quoted_role}" if role is not None else "role all") + (
            f" in database {quoted_database}" if database is not None and role is not None
            else "")
        if role is None and database is not None:
            target = f"database {quoted_database}"
        fix = (f"`alter {target} reset {name}`, and set it in each transaction instead "
               f"(set_config('{name}', ..., true), as pgfunnel does)")
        if name == "pgfunnel.principals":
            found.append(SecurityFinding(
                "error", "identity_default",
                f"{who} starts every session in {where} with pgfunnel.principals = {value}: "
                "a query that sets no reader (an ORM query, a report, the next request on a "
                "pooled connection) reads that reader's rows instead of none; " + fix))
        else:
            found.append(SecurityFinding(
                "warning", "identity_default",
                f"{who} starts every session in {where} with pgfunnel.tenant = {value}: a "
                "query that sets the principals but no tenant reads that tenant's documents; "
                + fix))
    return found


__all__ = ["SecurityFinding", "enable_rls", "disable_rls", "ensure_roles", "grant_privileges",
           "grant_app_role", "rls_enabled", "security_findings", "READER_ROLE", "WRITER_ROLE",
           "RLS_TABLES"]


@dataclass(frozen=True)
class SchemaAccess:
    """Who owns schema pgfunnel and which mode this database is in, as any role may read
    it (the catalogs): what a role refused access to the schema needs to be told."""

    owner: str
    role: str
    rls: bool
    roles_exist: bool
    #: ``role`` holds USAGE on the schema: a refusal read after the fact was another role's
    role_may_use: bool = False

    def advice(self) -> str:
        """What gives ``role`` access, for this database's mode, and who runs it."""
        if self.rls and self.roles_exist:
            return (f"as {self.owner!r} (the schema's owner, where it created the roles) or "
                    f"a superuser, run `grant {READER_ROLE} to {self.role}` to search, or "
                    f"`grant {WRITER_ROLE} to {self.role}` to ingest and manage versions "
                    "(docs/security.md, Roles and grants)")
        # without --rls the group roles hold nothing here (a member would read every row,
        # with no policy to hold it), so granting one would change nothing
        return (f"this database is not in RLS mode ({READER_ROLE} holds nothing here): "
                f"connect as {self.owner!r} (the schema's owner), or have {self.owner!r} run "
                "`pgfunnel init --rls --dsn OWNER_DSN` (OWNER_DSN: a connection string for "
                f"{self.owner!r}), which creates the roles and the row-level security "
                f"policies, and then `grant {READER_ROLE} to {self.role}` "
                "(docs/security.md, Roles and grants)")


def schema_access(conn: psycopg.Connection[Any]) -> SchemaAccess | None:
    """The schema's owner, the current role and the mode; None where there is no schema."""
    row = conn.execute(
        "select pg_catalog.pg_get_userbyid(n.nspowner), current_user, "
        "       coalesce((select bool_or(c.relrowsecurity) from pg_catalog.pg_class c "
        "                  where c.relnamespace = n.oid and c.relname = any(%s)), false), "
        "       exists (select 1 from pg_catalog.pg_roles where rolname = %s), "
        "       pg_catalog.has_schema_privilege(n.oid, 'USAGE') "
        "  from pg_catalog.pg_namespace n where n.nspname = 'pgfunnel'",
        (list(RLS_TABLES), READER_ROLE)).fetchone()
    return None if row is None else SchemaAccess(*row)


#: said after the role :func:`with_access_hint_from` names for an engine: the connection it
#: reads on is one of its own, as the engine's login role, and neither Postgres' refusal
#: (its message and diagnostics name no role) nor the refused connection (its transaction
#: aborted, and a rollback would undo a SET ROLE in it) can say which role was refused
LOGIN_ROLE_NOTE = (" (the engine's login role: a SET ROLE in the refused transaction is not "
                   "seen here, and where it ran, the role it set is the one to grant)")


def schema_access_hint(conn: psycopg.Connection[Any], *, role_note: str = "") -> str | None:
    """What a role refused "permission denied for schema pgfunnel" should have done, for the
    mode this database is in, naming the schema's owner (who alone can fix it); None where
    the schema is not there. ``role_note`` follows the role's name."""
    access = schema_access(conn)
    if access is None:
        return None
    if access.role_may_use:
        # read on another connection (the engine's own) or after a SET ROLE was undone:
        # the role read here was not the one refused, and granting it changes nothing
        other = replace(access, role="THAT_ROLE")
        who = "the engine's login role" if role_note else "this connection's role now"
        return (f"; role {access.role!r} ({who}) may use schema pgfunnel, "
                "so the statement refused ran as another role (a SET ROLE or SET SESSION "
                "AUTHORIZATION in its transaction), granted nothing on pgfunnel: "
                f"{other.advice()}")
    role = f"role {access.role!r}{role_note}"
    if access.rls and access.roles_exist:
        return f"; {role} was granted nothing on pgfunnel: {access.advice()}"
    return f"; {role} was granted nothing on pgfunnel, and {access.advice()}"


def with_schema_access_hint(conn: psycopg.Connection[Any], error: BaseException, *,
                            role_note: str = "") -> BaseException:
    """``error`` with the advice after "permission denied for schema pgfunnel" said for this
    database (:func:`schema_access_hint`: its mode, the role and the schema's owner, read
    on ``conn`` from the catalogs, which any role may read) in place of the words true in
    both modes (:data:`pgfunnel.errors.SCHEMA_GRANT_HINT`), as the CLI says it; ``error``
    itself when it holds no such advice or ``conn`` cannot read them (closed, or its
    transaction aborted). ``role_note`` follows the role's name (:data:`LOGIN_ROLE_NOTE`)."""
    if type(error) is not AccessError or SCHEMA_GRANT_HINT not in str(error) or conn.closed:
        return error
    if conn.info.transaction_status not in (psycopg.pq.TransactionStatus.IDLE,
                                            psycopg.pq.TransactionStatus.INTRANS):
        return error
    try:
        with tuple_rows(conn), own_transaction(conn):
            hint = schema_access_hint(conn, role_note=role_note)
    except psycopg.Error:
        return error
    if hint is None:
        return error
    named = AccessError(str(error).replace(SCHEMA_GRANT_HINT, hint, 1))
    named.__cause__ = error.__cause__
    return named


def with_access_hint_from(bind: Any, error: BaseException) -> BaseException:
    """:func:`with_schema_access_hint` where the refused connection is a SQLAlchemy one
    (``translate(exc, bind=...)``): a psycopg connection is read as it is; an ``Engine``,
    a ``Connection``, a ``Session`` or a ``scoped_session`` on a connection of the engine's
    own, as the refused one's transaction is aborted (a session's own, rolled back or not,
    is left alone). ``error`` itself where no connection can be had (a session bound to no
    engine; an async engine, which cannot connect from synchronous code; a server gone) or
    read. Read on the engine's connection, the role named is the engine's login role, and
    the advice says so (:data:`LOGIN_ROLE_NOTE`): a SET ROLE in the refused transaction is
    not seen there."""
    if isinstance(bind, psycopg.Connection):
        return with_schema_access_hint(bind, error)
    import sqlalchemy
    from sqlalchemy.orm import Session, scoped_session

    try:
        engine: Any = bind
        if isinstance(engine, (Session, scoped_session)):
            # inside the try: a session bound to no engine raised UnboundExecutionError
            # from translate(), in place of the refusal being translated
            engine = engine.get_bind()
        if isinstance(engine, sqlalchemy.Connection):
            engine = engine.engine
        if not isinstance(engine, sqlalchemy.Engine):
            return error
        # a pool beside the application's (same creator and connect events), not the
        # application's own: that one may have no connection free (the refused one still
        # checked out, on a small pool), and waiting for one held the error back for
        # pool_timeout (30 s by default)
        pool = engine.pool.recreate()
        try:
            own = pool.connect()
            try:
                raw = own.driver_connection
                if not isinstance(raw, psycopg.Connection):
                    return error
                return with_schema_access_hint(raw, error, role_note=LOGIN_ROLE_NOTE)
            finally:
                own.close()
        finally:
            pool.dispose()
    except (sqlalchemy.exc.SQLAlchemyError, psycopg.Error):
        # what fails here would hide the refusal the caller is being told of
        return error


@contextmanager
def schema_access_named(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """An :class:`AccessError` raised in the block that gives the library's advice after
    "permission denied for schema pgfunnel", true in both modes, raised instead with the
    advice for this database's mode, naming the role and the schema's owner
    (:func:`with_schema_access_hint`), as the CLI says it: an application's developer
    was told to find out which mode the database was in and who owned the schema."""
    try:
        yield
    except AccessError as exc:
        named = with_schema_access_hint(conn, exc)
        if named is exc:
            raise
        raise named from exc.__cause__
