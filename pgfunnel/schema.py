"""Install, upgrade and remove the pgfunnel schema.

Tables come from alembic migrations (``migrations/``); SQL functions come from the
files in ``sql/``, installed with ``create or replace`` after every upgrade so the
functions always match the installed package.
"""

from __future__ import annotations

import hashlib
import math
import re
import shlex
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any

import psycopg
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, create_engine, pool

from pgfunnel.db import (
    SCHEMA,
    connect,
    public_wrappers,
    resolve_dsn,
    search_path_schemas,
    sql_ascii_problem,
    try_register_vector,
)
from pgfunnel.errors import (
    SCHEMA_GRANT_HINT,
    AccessError,
    ConfigError,
    ConflictError,
    ConnectionFailedError,
    InvalidInputError,
    MigrationError,
    PgfunnelError,
    QueryCancelledError,
    ReadOnlyError,
    SchemaOutdatedError,
    StatementTimeoutError,
    translate,
)

PACKAGE_DIR = Path(__file__).resolve().parent


def _resource_dir(name: str) -> Path:
    # installed wheel: pgfunnel/<name>; source checkout: <repo>/<name>
    for candidate in (PACKAGE_DIR / name, PACKAGE_DIR.parent / name):
        if candidate.is_dir() and any(candidate.iterdir()):
            return candidate
    raise PgfunnelError(f"pgfunnel's {name}/ directory is missing from the installation")


def sql_dir() -> Path:
    return _resource_dir("sql")


def migrations_dir() -> Path:
    return _resource_dir("migrations")


def sql_files() -> list[Path]:
    return sorted(p for p in sql_dir().glob("*.sql"))


def render_sql(text: str, vector_schema: str, case_collation: str = "default") -> str:
    return (text.replace("@vector_schema@", psycopg.sql.Identifier(vector_schema).as_string())
            .replace("@case_collation@", psycopg.sql.Identifier(case_collation).as_string()))


# collations that lower every script's letters, in the order they are tried where the
# database's own does not: Postgres' built-in one (17 and later, the same everywhere),
# the C library's UTF-8 one under its two spellings, ICU's root locale
CASE_COLLATIONS = ("pg_c_utf8", "C.utf8", "C.UTF-8", "und-x-icu")


def case_collation(conn: psycopg.Connection[Any]) -> str:
    """The collation the v6 analyzers lower text under: the database's own when it lowers
    letters beyond ASCII (any UTF-8 locale, ICU or the built-in provider), else the first
    of ``CASE_COLLATIONS`` that does. A database created with locale "C" lowers ASCII
    only, so without this ``CAFÉ`` would not find ``café``. When none does (no ICU, a C
    library without a UTF-8 locale, before Postgres 17) the database's is kept, and
    `pgfunnel doctor` says what that costs."""
    def lowers(collation: str | None) -> bool:
        # É, lowered to é (U+00C9, U+00E9)
        text: psycopg.sql.Composable = psycopg.sql.SQL("pg_catalog.chr(201)")
        if collation is not None:
            text = psycopg.sql.SQL("{} collate {}").format(text, psycopg.sql.Identifier(collation))
        query = psycopg.sql.SQL("select pg_catalog.lower({}) = pg_catalog.chr(233)").format(text)
        try:
            with conn.transaction():
                row = conn.execute(query).fetchone()
        except psycopg.Error:
            return False  # missing, for another encoding, or ICU not built in
        return bool(row and row[0])

    row = conn.execute("select pg_catalog.getdatabaseencoding() = 'UTF8'").fetchone()
    if not (row and row[0]) or lowers(None):
        return "default"
    return next((name for name in CASE_COLLATIONS if lowers(name)), "default")


def alembic_config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    return cfg


def _maintenance_connect(target: str, *, autocommit: bool = False,
                         register: bool = True) -> psycopg.Connection[Any]:
    """A connection for init, migrate and alembic's upgrades, without the session's
    ``statement_timeout``: a timeout set for the role or the database is meant for
    queries (managed Postgres sets one), and a migration that rewrites a large table, or
    an ALTER waiting for a long search to let go of its table, was cancelled halfway and
    rolled back. As index builds do (``ingest.unbounded_statements``) and pg_dump does
    for its own statements; ``lock_timeout`` stays, which keeps an ALTER from queueing
    searches behind it for long. Types registered after, so their lookups run unbounded
    too."""
    conn = connect(target, autocommit=autocommit, register=False)
    try:
        conn.execute("select pg_catalog.set_config('statement_timeout', '0', false)")
        if not autocommit:
            conn.commit()
        if register:
            try_register_vector(conn)
    except BaseException:
        conn.close()
        raise
    return conn


@contextmanager
def _sa_connection(dsn: str, lock_wait_ms: int | None = None) -> Iterator[Connection]:
    def creator() -> psycopg.Connection[Any]:
        conn = _maintenance_connect(dsn, register=False)
        if lock_wait_ms is not None:
            conn.execute("select pg_catalog.set_config('lock_timeout', %s, false)",
                         (f"{lock_wait_ms}ms",))
            conn.commit()
        return conn

    engine = create_engine("postgresql+psycopg://", poolclass=pool.NullPool, creator=creator)
    with engine.begin() as conn:
        yield conn
    engine.dispose()


#: how long an upgrade goes on trying to take the locks its migrations need, in short
#: waits, before it gives up (monkeypatched by tests)
MIGRATION_LOCK_GIVE_UP_S = 60.0


def _lock_wait_ms(target: str) -> int:
    """How long one attempt of an upgrade waits for any lock: half of deadlock_timeout
    (10 - 300 ms), or the session's own lock_timeout where that is shorter. A migration
    queued for a table (ALTER takes ACCESS EXCLUSIVE) queues every search behind it, for
    as long as the transaction it waits for stays open (an idle session, a report): with
    no lock_timeout set, searches hung for all of it."""
    with _maintenance_connect(target, autocommit=True, register=False) as conn:
        row = conn.execute(
            "select least(300, greatest(10, pg_catalog.date_part('epoch', "
            "pg_catalog.current_setting('deadlock_timeout')::interval) * 500))::int, "
            "pg_catalog.date_part('epoch', pg_catalog.current_setting('lock_timeout')"
            "::interval) * 1000").fetchone()
    wait, own = (int(row[0]), float(row[1])) if row else (300, 0.0)
    return max(1, min(wait, int(own))) if own > 0 else wait


def _lock_holders(target: str) -> str:
    """The oldest transactions holding locks an upgrade waits for, for the give-up: on
    pgfunnel's tables (the revisions' ALTERs) or functions (the install's DROPs), or the
    graph walks' advisory lock, which the functions' install takes as a reindex does."""
    from pgfunnel.ingest import WALKS_LOCK_KEY

    try:
        with _maintenance_connect(target, autocommit=True, register=False) as conn:
            rows = conn.execute(
                "select distinct a.pid, a.application_name, a.state, a.xact_start, "
                "       pg_catalog.to_char(pg_catalog.now() - a.xact_start, 'HH24:MI:SS') "
                "  from pg_catalog.pg_locks l "
                "  join pg_catalog.pg_stat_activity a on a.pid = l.pid "
                " where l.granted and l.pid <> pg_catalog.pg_backend_pid() "
                "   and a.xact_start is not null "
                "   and l.database = (select d.oid from pg_catalog.pg_database d "
                "                      where d.datname = pg_catalog.current_database()) "
                "   and ((l.locktype = 'relation' and exists (select from pg_catalog.pg_class c "
                "          where c.oid = l.relation "
                "            and c.relnamespace = 'pgfunnel'::regnamespace)) "
                "     or (l.locktype = 'object' and l.classid = 'pg_catalog.pg_proc'::regclass "
                "         and exists (select from pg_catalog.pg_proc p where p.oid = l.objid "
                "                        and p.pronamespace = 'pgfunnel'::regnamespace)) "
                # pg_advisory_xact_lock(bigint) keeps its key's high half in classid
                "     or (l.locktype = 'advisory' and l.objsubid = 1 "
                "         and ((l.classid::bigint << 32) | l.objid::bigint) = %s::bigint)) "
                " order by a.xact_start limit 3", (WALKS_LOCK_KEY,)).fetchall()
    except psycopg.Error:
        return ""
    return "; ".join(f"pid {pid} (application_name {name!r}, {state}, in a transaction for "
                     f"{age})" for pid, name, state, _, age in rows)


def _upgrade_in_short_waits(target: str, revision: str,
                            then: Callable[[psycopg.Connection[Any]], None] | None = None
                            ) -> None:
    """Run the upgrade with each lock wait cut short, again and again until it gets
    through or MIGRATION_LOCK_GIVE_UP_S pass: searches queue behind a waiting
    migration only for a moment at a time. A failed attempt is rolled back whole.

    Each attempt starts again from the revision the database is at, and that is safe:
    every revision of an attempt runs in the one transaction ``_sa_connection`` opens
    (``engine.begin()``; alembic finds the connection in a transaction and opens none of
    its own, per revision or otherwise, ``transaction_per_migration`` or not), so a lock
    wait that gives up in revision N rolls back N-1 and the ones before it with it,
    alembic_version included. No revision steps out
    of that transaction (no ``autocommit_block``, no COMMIT, no CREATE INDEX
    CONCURRENTLY), so none is left half applied to be applied again on top of itself;
    tests/test_concurrent_admin.py checks both. What a failed attempt costs is its time:
    the revisions it got through are run again by the next.

    ``then``, given the transaction's psycopg connection after the last revision, runs in
    it too (init and migrate install the functions there): the tables and the functions
    of a release are committed together or not at all. Any other failure is a
    MigrationError that names the revision (or ``then``) that failed, its cause, and the
    revision the schema stays at."""
    from sqlalchemy.exc import DBAPIError

    cfg = alembic_config()
    wait_ms = _lock_wait_ms(target)
    deadline = time.monotonic() + MIGRATION_LOCK_GIVE_UP_S
    attempt = 0
    while True:
        attempt += 1
        cfg.attributes["applied"] = []
        try:
            with _sa_connection(target, lock_wait_ms=wait_ms) as conn:
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, revision)
                if then is not None:
                    cfg.attributes["applied"].append(_FUNCTIONS_STEP)
                    raw = conn.connection.driver_connection
                    assert isinstance(raw, psycopg.Connection)
                    try_register_vector(raw)
                    then(raw)
            return
        except (DBAPIError, psycopg.Error) as exc:
            # ``then`` runs on the driver's connection, whose errors SQLAlchemy does not wrap
            wrapped = isinstance(exc, DBAPIError)
            cause = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
            if isinstance(cause, psycopg.errors.InsufficientPrivilege):
                # the driver's error: init and migrate say which role to run them as
                if wrapped:
                    raise cause from exc
                raise
            if not isinstance(cause, psycopg.errors.LockNotAvailable):
                raise _failed_upgrade(target, cfg.attributes["applied"], cause) from exc
            # a revision's lock wait or the functions' install's: tried again, and given
            # up past the deadline naming who holds the locks either waits for
            if time.monotonic() > deadline:
                holders = _lock_holders(target)
                step = _waiting_step(target, cfg.attributes["applied"])
                raise ConflictError(
                    "could not take the locks the schema upgrade needs in "
                    f"{MIGRATION_LOCK_GIVE_UP_S:g} s of short tries (searches would have "
                    f"queued behind a longer wait), at {step}: transactions hold them "
                    "(pgfunnel's "
                    "tables or functions, or the lock a reindex takes to rewrite the graph "
                    "walks)"
                    + (f", the oldest {holders}" if holders else "")
                    + "; nothing was upgraded: run it again when they end") from exc
        time.sleep(min(0.05 * attempt, 0.5))


#: what ``applied`` notes once the revisions are through and ``then`` runs
_FUNCTIONS_STEP = "functions"


def _step_name(applied: list[str | None], now: str | None, *, described: bool) -> str:
    """The step an upgrade's attempt was in: the functions' install, or the revision after
    the last one ``applied`` noted (after ``now``, the database's, where it noted none),
    by its file's name (0014_chunk_heading_level) and, ``described``, the first sentence
    of its docstring, cut short: some run on for lines."""
    if applied and applied[-1] == _FUNCTIONS_STEP:
        return "installing this release's SQL functions (after its revisions)"
    last = applied[-1] if applied else now
    step = next((s for s in ScriptDirectory.from_config(alembic_config()).walk_revisions()
                 if s.down_revision == last), None)
    if step is None:
        return "a migration"
    name = f"migration {Path(step.path).stem}"
    if not described:
        return name
    sentence = re.split(r"(?<=\.)\s", " ".join(str(step.doc or "").split()), maxsplit=1)[0]
    sentence = sentence.rstrip(".")
    if len(sentence) > 90:
        sentence = sentence[:90].rsplit(" ", 1)[0].rstrip(",;:") + " ..."
    return f"{name} ({sentence})" if sentence else name


def _waiting_step(target: str, applied: list[str | None]) -> str:
    """_step_name, described, for a give-up: where the attempt noted no revision, the
    database's (read again; the attempt was rolled back) says which one it was in."""
    now = None
    if not applied:
        try:
            with _maintenance_connect(target, autocommit=True, register=False) as conn:
                now = current_revision(conn)
        except psycopg.Error:
            return "a migration"
    return _step_name(applied, now, described=True)


#: the classes a failed upgrade keeps of its cause (as translate() gives it; each takes a
#: message alone): those a caller tells apart, a replica's ReadOnlyError or an
#: AccessError naming the role to run it as. The class itself, not its subclasses
#: (TraceReadOnlyError, MissingIdentityError, InvalidVectorError say something else)
_KEPT_CAUSES: tuple[type[PgfunnelError], ...] = (
    AccessError, ConflictError, ConnectionFailedError, InvalidInputError,
    QueryCancelledError, ReadOnlyError, StatementTimeoutError)


def _failed_upgrade(target: str, applied: list[str | None],
                    exc: BaseException) -> PgfunnelError:
    """The error for an upgrade that failed and was rolled back: which step failed (the
    revision after the last one ``applied`` noted, or the functions' install), why, and
    the revision the schema is at now, read again: every step ran in one transaction, so
    it is the one the upgrade started from. Of the cause's class where that is one a
    caller tells apart and takes a message alone (a ReadOnlyError on a replica, an
    AccessError, a ConnectionFailedError), else a MigrationError."""
    # not a search: a statement timeout is a StatementTimeoutError, said below as one
    translated = translate(exc, searching=False) if isinstance(exc, psycopg.Error) else None
    cause = str(translated) if translated is not None else str(exc)
    role = None
    try:
        with _maintenance_connect(target, autocommit=True, register=False) as conn:
            now = current_revision(conn)
            row = conn.execute("select current_user").fetchone()
            role = str(row[0]) if row else None
        stays = (f"the schema stays at revision {now}" if now is not None
                 else "the schema has no revision yet")
    except psycopg.Error:
        now, stays = None, "the schema stays at the revision it had"
    if isinstance(exc, psycopg.Error) and type(translated) is StatementTimeoutError:
        # init and migrate run with statement_timeout 0 (_maintenance_connect): one that
        # still cut the upgrade short was set inside its transaction, or the session's
        # setting was lost (a transaction pooler gives each transaction another server
        # connection); translate's advice, PGOPTIONS for the session, would change nothing
        cause = (f"{exc.diag.message_primary or cause}: a statement_timeout reached the "
                 "upgrade's transaction although init and migrate set 0 for their session "
                 "(a SET LOCAL or a function's own setting in the database, or the session's "
                 "lost through a transaction pooler); raise it for the role that migrates "
                 f"(alter role {psycopg.sql.Identifier(role or 'ROLE').as_string()} set "
                 "statement_timeout = 0, as that role or a superuser) and run it on a direct "
                 "connection to the server")
    what = _step_name(applied, now, described=False)
    message = (f"{what} failed: {cause}; nothing was upgraded: every revision and the "
               f"functions run in one transaction, rolled back whole, so {stays} with its "
               "functions as they were; fix the cause and run it again")
    if translated is not None and type(translated) in _KEPT_CAUSES:
        return type(translated)(message)
    return MigrationError(message)


def vector_schema(conn: psycopg.Connection[Any]) -> str | None:
    row = conn.execute(
        "select n.nspname from pg_extension e join pg_namespace n on n.oid = e.extnamespace "
        "where e.extname = 'vector'"
    ).fetchone()
    return None if row is None else str(row[0])


def require_vector_schema(conn: psycopg.Connection[Any]) -> str:
    """The schema pgvector lives in; refused where the extension is missing."""
    schema = vector_schema(conn)
    if schema is None:
        raise PgfunnelError("the vector extension is missing; run `pgfunnel init`")
    return schema


def ensure_extension(conn: psycopg.Connection[Any]) -> str:
    """Create pgvector if missing; return the schema it lives in."""
    schema = vector_schema(conn)
    if schema is not None:
        return schema
    # in public when it is on the path: otherwise Postgres picks the path's first schema,
    # which with `search_path = app, public` is the application's own, and a `drop
    # schema app cascade` in its migrations or tests would take pgvector, and pgfunnel's
    # tables with it
    row = conn.execute("select 'public' = any (current_schemas(false))").fetchone()
    in_public = bool(row and row[0])
    try:
        conn.execute("create extension if not exists vector schema public" if in_public
                     else "create extension if not exists vector")
    except psycopg.errors.InsufficientPrivilege as exc:
        # an extension is a database's: run in another one (psql's default, the
        # superuser's own database), the statement changed nothing here
        raise AccessError(
            f"the vector extension is not installed in database {conn.info.dbname!r} and "
            "this role may not create it; ask a superuser to run `create extension "
            f"vector` in that database (`psql -d {shlex.quote(conn.info.dbname)}`), then "
            "run it again"
        ) from exc
    except psycopg.errors.UndefinedFile as exc:
        raise PgfunnelError(
            "pgvector (>= 0.8) is not available on this Postgres server; install it first"
        ) from exc
    schema = vector_schema(conn)
    assert schema is not None
    return schema


def vector_path_problem(conn: psycopg.Connection[Any]) -> str | None:
    """Why pgfunnel cannot use pgvector on this connection's search_path, or None.

    The tables, ingest and the driver's vector adapters name the type `vector`
    unqualified, so the schema pgvector lives in must be on the path (hosted Postgres
    often keeps extensions in a schema of their own)."""
    schema = vector_schema(conn)
    if schema is None:
        return None
    row = conn.execute("select %s = any (current_schemas(false)), "
                       "current_setting('search_path'), "
                       "pg_catalog.has_schema_privilege(pg_catalog.to_regnamespace(%s), "
                       "                                'USAGE'), "
                       "pg_catalog.quote_ident(current_user), current_user",
                       (schema, schema)).fetchone()
    assert row is not None
    on_path, path, usage, me, user = row
    if on_path:
        return None
    quoted = psycopg.sql.Identifier(str(schema)).as_string()
    # an empty path (a hardened `search_path = ''`) reads `""`, a zero-length identifier
    # that Postgres refuses in the statement given to paste
    kept = "" if str(path).strip() in ("", '""') else f"{path}, "
    add = (f"alter role current_user set search_path = {kept}{quoted}   (or: alter "
           "database ... set search_path = ...)")
    if not usage:
        # current_schemas() leaves out a schema the role may not use: one named on the
        # path was reported as missing from it, with a fix that named it twice. One the
        # path does not name needs both the grant and the path
        grant = (f"pgvector is installed in schema {quoted}, which this role ({me}) may not "
                 "use (it lacks USAGE on it")
        ask = (f"pgfunnel needs pgvector's types there. Ask its owner or a superuser to run "
               f"`grant usage on schema {quoted} to {me}` (and to each role that searches)")
        if str(schema) in _path_schemas(str(path), str(user)):
            return (f"{grant}, so Postgres skips it on the search_path); {ask}, then run it "
                    "again")
        return (f"{grant}) and is not on this connection's search_path ({path}); {ask}, add "
                f"it to the path for the role or the database, then reconnect: {add}")
    return (f"pgvector is installed in schema {quoted}, which is not on this connection's "
            f"search_path ({path}); pgfunnel needs it there. Add it for the role or the "
            f"database, then reconnect: {add}")


def _path_schemas(path: str, user: str) -> set[str]:
    """The schema names a search_path setting names (``"$user", public, "My Schema"``),
    ``$user`` the role's; none for a form search_path_schemas does not read."""
    return {user if name == "$user" else name for name in search_path_schemas(path) or ()}


#: how the schema's comment, which install_functions writes, begins: the digest of the
#: sql/ files whose functions are installed follows it
FUNCTIONS_MARK = "pgfunnel SQL functions "


@lru_cache(maxsize=1)
def functions_digest() -> str:
    """A digest of this package's sql/ files: the release of the installed functions,
    which a schema revision does not tell (releases change functions without one, and
    `alembic upgrade` moves the tables without installing any)."""
    digest = hashlib.sha256()
    for path in sql_files():
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def installed_functions_digest(conn: psycopg.Connection[Any]) -> str | None:
    """The digest install_functions recorded in the schema's comment; None when there is
    none (a release before the digest, or no schema)."""
    row = conn.execute("select pg_catalog.obj_description("
                       "pg_catalog.to_regnamespace('pgfunnel'), 'pg_namespace')").fetchone()
    text = str(row[0]) if row is not None and row[0] is not None else ""
    return text[len(FUNCTIONS_MARK):].split()[0] if text.startswith(FUNCTIONS_MARK) else None


#: a function sql/ creates: its name, then (after the header, which says whether it is
#: SECURITY DEFINER) the dollar-quoted body, as Postgres keeps it in pg_proc.prosrc
_FUNCTION_IN_SQL = re.compile(
    r"create or replace function\s+(pgfunnel\.\w+)\s*\((.*?)\bas\s+(\$\w*\$)(.*?)\3",
    re.S | re.I)

#: functions pgfunnel itself rewrites after the install (refresh_hnsw_walks writes each
#: version's walk into _hnsw_walk): their bodies differ from sql/ by design, their headers
#: do not
_REWRITTEN_FUNCTIONS = frozenset({"pgfunnel._hnsw_walk"})

#: what a header line that holds the attributes says besides `language <name>`: a line
#: with any other word (a parameter named `language`, a return type) is not read
_ATTRIBUTE_WORDS = frozenset({
    "immutable", "stable", "volatile", "strict", "called", "on", "null", "input",
    "returns", "parallel", "safe", "restricted", "unsafe", "leakproof", "not",
    "security", "invoker", "definer", "external"})
_SET_SEARCH_PATH = re.compile(r"^\s*set\s+search_path\s*(?:=|\bto\b)\s*(.+?)\s*$", re.I)
#: a header's other SET clause: a configuration parameter and one value, a word, a number
#: or a string literal, as pg_proc.proconfig keeps it (`name=value`)
_SET_OTHER = re.compile(r"^set\s+(\w+)\s*(?:=|\s+to\s+)\s*([a-z_]\w*|-?[0-9]+(?:\.[0-9]+)?"
                        r"|'(?:[^']|'')*')$", re.I)


#: a function's attributes doctor compares, in the words its finding names them by
_HEADER_ATTRIBUTES = ("SECURITY", "search_path", "volatility", "strictness",
                      "parallel safety", "leakproof", "COST", "ROWS")
#: the ROWS a set-returning function gets by default (0 for one that is not), as both
#: sides of the comparison write it
_DEFAULT_ROWS = "the default"


def _declared_header(header: str) -> dict[str, object]:
    """What a sql/ header (the text between the name and the body) declares of the
    attributes in _HEADER_ATTRIBUTES, as pg_proc keeps them; an attribute whose clause
    this cannot read for sure is left out, so it is not compared (no false alarm)."""
    lines = [line.split("--", 1)[0].strip() for line in header.splitlines()]
    attributes: list[list[str]] = []
    for line in lines:
        words = line.lower().split()
        if len(words) >= 2 and words[0] == "language" and set(words[2:]) <= _ATTRIBUTE_WORDS:
            attributes.append(words[2:])
        elif words and words[0] in _ATTRIBUTE_WORDS and set(words) <= _ATTRIBUTE_WORDS:
            attributes.append(words)
    words = [w for line in attributes for w in line]
    declared: dict[str, object] = {
        "SECURITY": re.search(r"\bsecurity\s+definer\b", header, re.I) is not None}
    if attributes:
        said = [w for w in words if w in ("immutable", "stable", "volatile")]
        declared["volatility"] = {"immutable": "i", "stable": "s"}.get(
            said[-1] if said else "volatile", "v")
        phrase = " ".join(words)
        declared["strictness"] = "strict" in words or "returns null on null input" in phrase
        kind = re.findall(r"\bparallel (safe|restricted|unsafe)\b", phrase)
        declared["parallel safety"] = {"safe": "s", "restricted": "r"}.get(
            kind[-1] if kind else "unsafe", "u")
        proof = re.findall(r"\b(not )?leakproof\b", phrase)
        declared["leakproof"] = bool(proof) and not proof[-1]
    # COST and ROWS: Postgres gives a SQL or PL/pgSQL function COST 100 and, when it
    # returns a set, ROWS 1000 unless the header says otherwise
    languages = re.findall(r"\blanguage\s+(\w+)", "\n".join(lines), re.I)
    clauses = [line.lower().split() for line in lines
               if line.lower().split()[:1] in (["cost"], ["rows"])]
    if languages and languages[-1].lower() in ("sql", "plpgsql") and all(
            len(c) == 2 and re.fullmatch(r"[0-9]+(?:\.[0-9]+)?", c[1]) for c in clauses):
        said_of = {c[0]: float(c[1]) for c in clauses}
        declared["COST"] = said_of.get("cost", 100.0)
        # a ROWS written as the default (1000: Postgres takes ROWS of a set-returning
        # function alone) reads as the installed one does
        rows = said_of.get("rows", 1000.0)
        declared["ROWS"] = _DEFAULT_ROWS if rows == 1000.0 else rows
    settings = {}
    for line in lines:
        if not re.match(r"set\s", line, re.I) or _SET_SEARCH_PATH.match(line):
            continue
        if (m := _SET_OTHER.match(line)) is None:
            # `set x from current`, a list: what proconfig holds for it is not read here,
            # so none of the function's other settings is compared
            break
        value = m.group(2)
        # as Postgres keeps it: a word folded to lower case, a string literal as written
        # (whether its case matters is the setting's type: _setting_value)
        settings[m.group(1).lower()] = (value[1:-1].replace("''", "'")
                                        if value.startswith("'") else value.lower())
    else:
        declared["settings"] = settings
    paths = [m.group(1) for line in lines if (m := _SET_SEARCH_PATH.match(line))]
    if len(paths) == 1 and (path := search_path_schemas(paths[0])) is not None:
        declared["search_path"] = path
    elif not paths and "search_path" not in header.lower():
        declared["search_path"] = ()
    return declared


#: the spellings Postgres reads as a boolean setting's value, in any case, and any prefix
#: of the first four long enough to tell them apart (its parse_bool)
_BOOLEAN_WORDS = (("true", "on"), ("false", "off"), ("yes", "on"), ("no", "off"))

#: Postgres' units, largest first, each as a count of the smallest of its kind (guc.c's
#: memory_unit_conversion_table and time_unit_conversion_table); matched in this case only
_MEMORY_UNITS = (("TB", 1 << 40), ("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10), ("B", 1))
_TIME_UNITS = (("d", 86_400_000_000), ("h", 3_600_000_000), ("min", 60_000_000),
               ("s", 1_000_000), ("ms", 1_000), ("us", 1))
#: what C's isspace() takes as white space, which is all Postgres skips around a number
_C_SPACE = " \t\n\v\f\r"
#: a number as C's strtol(value, &end, 0) reads it (hex after 0x, octal after a 0) and as
#: strtod does (hex after 0x, with a binary exponent; else decimal; infinity and NaN,
#: which Postgres refuses in the end, are not read)
_STRTOL = re.compile(r"[ \t\n\v\f\r]*([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)")
_STRTOD = re.compile(r"[ \t\n\v\f\r]*([+-]?)(?:(0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*"
                     r"|\.[0-9a-fA-F]+)(?:[pP][+-]?[0-9]+)?)"
                     r"|((?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?))")
_LONG_RANGE = (-(1 << 63), (1 << 63) - 1)
_INT_RANGE = (-(1 << 31), (1 << 31) - 1)


def _to_base_unit(number: float, written: str, base: str) -> float | None:
    """``number`` ``written`` (a unit) in the setting's ``base`` unit (pg_settings.unit:
    ``kB``, ``8kB`` for blocks, ``ms``, ``min`` ...), rounded as guc.c's
    convert_to_base_unit does to a whole number of the next smaller unit; None for a
    unit Postgres does not know for this setting."""
    m = re.fullmatch(r"([0-9]*)([A-Za-z]+)", base)
    table = next((t for t in (_MEMORY_UNITS, _TIME_UNITS)
                  if m is not None and m.group(2) in dict(t)), None)
    if m is None or table is None:
        return None
    size = int(m.group(1) or 1) * dict(table)[m.group(2)]
    names = [name for name, _ in table]
    if written not in names:
        return None

    def multiplier(unit_size: int) -> float:
        # as guc.c's tables write each: a whole factor, or one over one
        return (float(unit_size // size) if unit_size >= size
                else 1.0 / (size // unit_size))

    at = names.index(written)
    value = number * multiplier(table[at][1])
    if at + 1 < len(table) and math.isfinite(value):
        step = multiplier(table[at + 1][1])
        value = round(value / step) * step
    return value


def _parsed_number(value: str, kind: str) -> tuple[float, str] | None:
    """The number ``value`` starts with and what follows it, as parse_int (``kind``
    integer) or parse_real reads them; None where it starts with none."""
    if kind == "integer":
        whole = _STRTOL.match(value)
        rest = value[whole.end():] if whole else value
        # parse_int reads again as strtod where strtol stopped at a fraction or an
        # exponent, or overflowed; strtol's nothing read leaves rest the whole value
        if rest[:1] not in (".", "e", "E"):
            if whole is None:
                return None
            signed = int(whole.group(1) + _c_integer(whole.group(2)))
            if _LONG_RANGE[0] <= signed <= _LONG_RANGE[1]:
                return float(signed), rest
    real = _STRTOD.match(value)
    if real is None:
        return None
    sign, hexadecimal, decimal = real.groups()
    try:
        number = (float.fromhex(sign + hexadecimal) if hexadecimal
                  else float(sign + decimal))
    except OverflowError:
        # strtod's ERANGE, which Postgres refuses
        number = math.inf
    return number, value[real.end():]


def _number_value(value: str, kind: str, unit: str | None) -> str:
    """An integer or real setting's value as Postgres reads it (guc.c's parse_int and
    parse_real): in the setting's base unit, an integer rounded to the nearest, written
    as a plain number; ``value`` as written where Postgres would refuse it."""
    parsed = _parsed_number(value, kind)
    if parsed is None:
        return value
    number, rest = parsed
    written = rest.strip(_C_SPACE)
    if written:
        if unit is None or any(c in _C_SPACE for c in written):
            return value
        converted = _to_base_unit(number, written, unit)
        if converted is None:
            return value
        number = converted
    if not math.isfinite(number):
        return value
    if kind == "integer":
        rounded = round(number)
        return str(rounded) if _INT_RANGE[0] <= rounded <= _INT_RANGE[1] else value
    # one zero, whatever its sign
    return repr(number + 0.0)


def _c_integer(digits: str) -> str:
    """Digits as strtol's base 0 reads them, in decimal: ``0x1f`` is 31, ``010`` is 8."""
    if digits[:2].lower() == "0x":
        return str(int(digits[2:], 16))
    return str(int(digits, 8 if digits.startswith("0") else 10))


def _setting_value(value: str, kind: str | None, unit: str | None = None) -> str:
    """A SET clause's value as Postgres reads it for a setting of ``kind``
    (pg_settings.vartype) and ``unit`` (pg_settings.unit): a boolean's spellings
    (``OFF``, ``false``, ``0``, ``n``) as ``on`` or ``off``, an enum's in lower case
    (Postgres matches its names in any case), an integer's or a real's as a number in
    the setting's base unit (``64MB``, ``65536kB`` and ``65536`` of work_mem are all
    ``65536``; units are case-sensitive, so ``64mb`` is refused and stays as written);
    any other value as written, where case can matter (a string such as a role name or a
    time zone) or the setting is unknown."""
    if kind == "enum":
        return value.lower()
    if kind in ("integer", "real"):
        return _number_value(value, kind, unit)
    if kind != "bool":
        return value
    word = value.lower()
    if word in ("on", "1"):
        return "on"
    if word in ("of", "off", "0"):
        return "off"
    return next((meaning for full, meaning in _BOOLEAN_WORDS if word and full.startswith(word)),
                value)


def _set_clauses(attributes: dict[str, object]) -> dict[str, object]:
    """A function's SET clauses other than search_path, each as an attribute named
    ``SET <parameter>``."""
    settings = attributes.get("settings")
    return {f"SET {k}": v for k, v in settings.items()} if isinstance(settings, dict) else {}


def replaced_functions(conn: psycopg.Connection[Any]) -> list[tuple[str, str]]:
    """pgfunnel's functions whose body or header differ from what this package's sql/
    installs, by name, each with what differs as doctor words it: ``its body``, ``its
    SECURITY``, ``its search_path``, ``its volatility``, ``its strictness``, ``its
    parallel safety``, ``its leakproof``, ``its COST``, ``its ROWS`` (against Postgres'
    defaults where sql/ says none) or ``its SET <parameter>`` (another SET clause
    changed, reset or added; its value read by the setting's type, _setting_value),
    joined by "and"; or ``missing from the database`` (dropped).
    Changed by hand (`create or replace function`, `alter function ... security definer`,
    `alter function ... set jit = on`, `drop function`) after init or migrate installed
    them, which the release digest in the schema's comment does not tell. Meaningful
    where that digest is this package's."""
    vector = vector_schema(conn)
    if vector is None:
        return []
    collation = case_collation(conn)
    expected: dict[str, list[dict[str, object]]] = {}
    for path in sql_files():
        for m in _FUNCTION_IN_SQL.finditer(render_sql(path.read_text(), vector, collation)):
            declared = _declared_header(m.group(2))
            declared["body"] = m.group(4)
            expected.setdefault(m.group(1).lower(), []).append(declared)
    installed: dict[str, list[dict[str, object]]] = {}
    for (name, definer, body, config, volatility, strict, parallel, leakproof, cost,
         rows) in conn.execute(
            "select 'pgfunnel.' || p.proname, p.prosecdef, p.prosrc, p.proconfig, "
            "       p.provolatile, p.proisstrict, p.proparallel, p.proleakproof, "
            "       p.procost, case when p.prorows = case when p.proretset then 1000 "
            "                                             else 0 end "
            "                       then null else p.prorows end "
            "from pg_catalog.pg_proc p "
            "where p.pronamespace = 'pgfunnel'::regnamespace and p.proname = any(%s)",
            ([n.removeprefix("pgfunnel.") for n in expected],)).fetchall():
        settings = dict(str(item).partition("=")[::2] for item in config or ())
        pinned = settings.pop("search_path", None)
        installed.setdefault(str(name), []).append({
            "body": str(body), "SECURITY": bool(definer),
            "search_path": () if pinned is None else search_path_schemas(pinned),
            "volatility": str(volatility), "strictness": bool(strict),
            "parallel safety": str(parallel), "leakproof": bool(leakproof),
            "COST": float(cost), "ROWS": _DEFAULT_ROWS if rows is None else float(rows),
            "settings": {k.lower(): v for k, v in settings.items()}})
    # each setting's value read by its type, on both sides
    every = [said for functions in (*expected.values(), *installed.values())
             for each in functions if isinstance(said := each.get("settings"), dict)]
    names = sorted({str(k) for said in every for k in said})
    kinds = {str(name): (str(kind), None if unit is None else str(unit))
             for name, kind, unit in conn.execute(
                 "select name, vartype, unit from pg_catalog.pg_settings where name = any(%s)",
                 (names,)).fetchall()} if names else {}
    for said in every:
        for k, v in said.items():
            said[k] = _setting_value(str(v), *kinds.get(str(k), (None, None)))
    found = []
    for name in sorted(expected):
        want, have = expected[name], installed.get(name, [])
        if len(have) < len(want):
            # dropped by hand: its body, and all else, read as differing
            found.append((name, "missing from the database" if not have else
                          f"{len(want) - len(have)} of its {len(want)} overloads missing "
                          "from the database"))
            continue
        compared = (("body",) if name not in _REWRITTEN_FUNCTIONS else ()) + _HEADER_ATTRIBUTES
        # each SET clause other than search_path as an attribute of its own, named by the
        # parameter: one sql/ declares, or one added by hand
        if all("settings" in w for w in want):
            for each in want + have:
                each.update(_set_clauses(each))
            names = sorted({k for each in want + have for k in each if k.startswith("SET ")})
            for each in want:
                each.update({k: None for k in names if k not in each})
            compared += tuple(names)
        differ = [
            what for what in compared
            # with overloads, each attribute's values as a multiset; one sql/ does not
            # say for sure is not compared
            if all(what in w for w in want)
            and (len(want) != len(have)
                 or sorted(map(repr, (w[what] for w in want)))
                 != sorted(map(repr, (h.get(what) for h in have))))]
        if len(want) != len(have) and "body" in differ:
            differ = ["body"]
        if differ:
            found.append((name, "its " + (differ[0] if len(differ) == 1
                                          else ", ".join(differ[:-1]) + " and " + differ[-1])))
    return found


def functions_outdated(conn: psycopg.Connection[Any]) -> bool:
    """Whether a schema at this package's revision holds another release's functions.
    False where the revision differs (outdated_revision's to say), there is no schema
    (init's), or the role may not read the revision."""
    return schema_status(conn)[1]


def schema_status(conn: psycopg.Connection[Any]) -> tuple[tuple[str, str] | None, bool]:
    """(outdated_revision, functions_outdated) from one read of the revision: what a
    search or an ingest checks before it runs."""
    revision = _readable_revision(conn)
    if revision is None:
        return None, False
    head, known = _revisions()
    if revision != head:
        return (None if revision not in known else (revision, head)), False
    return None, installed_functions_digest(conn) != functions_digest()


def _readable_revision(conn: psycopg.Connection[Any]) -> str | None:
    """The schema's revision; None with no schema, or for a role that may not read it
    (without RLS mode an application's role holds only the grants it was given)."""
    row = conn.execute("select pg_catalog.has_table_privilege("
                       "pg_catalog.to_regclass('pgfunnel.alembic_version'), 'select')"
                       ).fetchone()
    if row is None or not row[0]:
        return None
    rev = conn.execute("select version_num from pgfunnel.alembic_version").fetchone()
    return None if rev is None else str(rev[0])


#: what a warning says of a schema at this revision that holds another release's functions
OTHER_FUNCTIONS = ("the SQL functions in this database are not this pgfunnel's (another "
                   "release installed them, or the tables were moved with `alembic upgrade` "
                   "alone)")


def stale_schema(conn: psycopg.Connection[Any]) -> str | None:
    """What is older (or other) than this release in the database, as a clause for a
    warning ("... : searches run ..."), or None."""
    behind, other_functions = schema_status(conn)
    if behind is not None:
        return (f"the pgfunnel schema is at revision {behind[0]}, older than this pgfunnel's "
                f"{behind[1]}")
    return OTHER_FUNCTIONS if other_functions else None


#: the sql/ file that creates public.funnel_search, run only where wrapper_problem is None
WRAPPER_FILE = "045_public_funnel_search.sql"

#: what the wrapper is, in the words of wrapper_problem's messages
_WRAPPER = ("public.funnel_search, the wrapper that lets `funnel_search(...)` run on a "
            "default search_path")
#: how to search meanwhile
_QUALIFIED = ("call `pgfunnel.funnel_search(...)` instead, as the Python API and the CLI "
              "do")


def wrapper_problem(conn: psycopg.Connection[Any]) -> str | None:
    """Why this role cannot create or replace public.funnel_search, or None when it can:
    schema public is missing, the role may not create objects in it (Postgres 15 and
    later grant PUBLIC no CREATE there, so an owner of schema pgfunnel that does not own
    the database may not), or pgfunnel's wrapper there belongs to another role."""
    row = conn.execute(
        "select n.oid is not null, "
        "       n.oid is not null and pg_catalog.has_schema_privilege(n.oid, 'CREATE'), "
        "       pg_catalog.quote_ident(current_user) "
        "from (select pg_catalog.to_regnamespace('public') as oid) n").fetchone()
    assert row is not None
    exists, may_create, me = row
    wrappers = public_wrappers(conn)
    other_owner = next((owner for _, owner, own in wrappers if not own), None)
    own_wrapper = any(own for _, _, own in wrappers)
    if not exists:
        return (f"there is no schema public in this database, so {_WRAPPER}, was not "
                f"created: {_QUALIFIED}")
    if not may_create:
        # replacing a function takes CREATE on its schema too, its owner's included: one
        # an earlier init made (before a DBA revoked it) stays and still runs, and "was
        # not created" sent its owner looking for a missing function
        done = ("was left as an earlier init made it, not renewed:" if own_wrapper
                else f"was not created: {_QUALIFIED}, or")
        return (f"role {me} may not create objects in schema public, so {_WRAPPER}, {done} "
                f"have the database's owner run `grant create on schema public to {me}` and "
                "run `pgfunnel init` again")
    if other_owner is not None:
        other = psycopg.sql.Identifier(str(other_owner)).as_string()
        return (f"{_WRAPPER}, belongs to role {other}, so it was left as it was (another "
                f"release's, perhaps): run `pgfunnel init` as {other} to renew it, or "
                f"`alter function public.funnel_search owner to {me}` as {other}; "
                f"meanwhile {_QUALIFIED}")
    return None


def install_functions(conn: psycopg.Connection[Any]) -> int:
    """(Re)install every SQL function from sql/ in one transaction, and record which
    release's they are in the schema's comment. public.funnel_search is left out where
    this role may not create it (:func:`wrapper_problem`): every other function is in
    schema pgfunnel, which the role owns."""
    from pgfunnel.ingest import WALKS_LOCK_KEY, refresh_hnsw_walks

    schema = require_vector_schema(conn)
    files = sql_files()
    collation = case_collation(conn)
    skip_wrapper = wrapper_problem(conn) is not None
    # sql/ replaces pgfunnel._hnsw_walk, whose rewrites (a reindex, an activation, a
    # version drop: refresh_hnsw_walks) hold this lock: taken after the files, as
    # refresh_hnsw_walks below took it, init held the function's row while it waited for
    # a reindex that waited for that row (deadlock detected). Until the transaction ends.
    conn.execute("select pg_catalog.pg_advisory_xact_lock(%s::bigint)", (WALKS_LOCK_KEY,))
    for path in files:
        if path.name == WRAPPER_FILE and skip_wrapper:
            continue
        conn.execute(render_sql(path.read_text(), schema, collation).encode())
    try:
        with conn.transaction():
            conn.execute(psycopg.sql.SQL("comment on schema pgfunnel is {}").format(
                psycopg.sql.Literal(f"{FUNCTIONS_MARK}{functions_digest()} (written by "
                                    "pgfunnel init and migrate; doctor compares it with "
                                    "the installed package's)")))
    except psycopg.errors.InsufficientPrivilege:
        # the functions' owner is not the schema's: doctor will say they are unrecorded
        pass
    # sql/ holds the walk function without any version's walk: write them back
    refresh_hnsw_walks(conn)
    return len(files)


def current_revision(conn: psycopg.Connection[Any]) -> str | None:
    row = conn.execute("select to_regclass('pgfunnel.alembic_version') is not null").fetchone()
    if not row or not row[0]:
        return None
    rev = conn.execute("select version_num from pgfunnel.alembic_version").fetchone()
    return None if rev is None else str(rev[0])


def head_revision() -> str:
    return _revisions()[0]


@lru_cache(maxsize=1)
def _revisions() -> tuple[str, frozenset[str]]:
    """This package's head revision and every revision its migrations hold, read from
    its migration scripts once (they do not change while it runs)."""
    script = ScriptDirectory.from_config(alembic_config())
    head = script.get_current_head()
    assert head is not None
    return head, frozenset(s.revision for s in script.walk_revisions())


def require_current_schema(conn: psycopg.Connection[Any]) -> None:
    """Raise SchemaOutdatedError when the schema is an older release's (one whose revision
    this package's migrations hold, short of their head): what writes with this release's
    code (ingest) needs its analyzers, columns and functions, which `pgfunnel migrate`
    installs. A schema from a newer release, or none, is left to the caller's checks."""
    behind, other_functions = schema_status(conn)
    if behind is None and not other_functions:
        return
    if not conn.autocommit:
        conn.rollback()
    if behind is None:
        raise SchemaOutdatedError(head_revision(), head_revision(), functions_only=True)
    raise SchemaOutdatedError(*behind)


def outdated_revision(conn: psycopg.Connection[Any]) -> tuple[str, str] | None:
    """(the schema's revision, this package's head) when the schema is an older release's:
    one whose revision this package's migrations hold, short of their head. None at the
    head, for a newer release's schema, none, or a role that may not read the revision
    (without RLS mode an application's role holds only the grants it was given)."""
    return schema_status(conn)[0]


@contextmanager
def _database_errors() -> Iterator[None]:
    """SQLAlchemy wraps the driver's errors; callers get the PgfunnelError of the cause."""
    from sqlalchemy.exc import DBAPIError

    try:
        yield
    except DBAPIError as exc:
        raise translate(exc.orig if exc.orig is not None else exc) from exc
    except psycopg.Error as exc:
        # a privilege the upgrade lacks, raised as the driver's (init and migrate name
        # the role to run them as)
        raise translate(exc) from exc


def upgrade(dsn: str | None = None, revision: str = "head",
            then: Callable[[psycopg.Connection[Any]], None] | None = None) -> None:
    """Upgrade the schema to ``revision``, then run ``then`` on the connection, all in one
    transaction (:func:`_upgrade_in_short_waits`)."""
    target = resolve_dsn(dsn)
    with _database_errors():
        _upgrade_in_short_waits(target, revision, then)


def downgrade(dsn: str | None = None, revision: str = "base") -> None:
    target = resolve_dsn(dsn)
    cfg = alembic_config()
    with _database_errors(), _sa_connection(target) as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, revision)


def autogenerate_diff(dsn: str | None = None) -> list[Any]:
    """What alembic's autogenerate would change; empty when the database matches the models."""
    from alembic.autogenerate import compare_metadata

    from pgfunnel.models import Base
    target = resolve_dsn(dsn)
    from pgfunnel.migrations.filters import include_name, include_object

    with _sa_connection(target) as conn:
        ctx = MigrationContext.configure(conn, opts={
            "include_schemas": True,
            "include_object": include_object,
            "include_name": include_name,
            "version_table_schema": SCHEMA,
            "compare_type": True,
        })
        return list(compare_metadata(ctx, Base.metadata))


def _rls_on(conn: psycopg.Connection[Any]) -> bool:
    """Whether an existing pgfunnel schema is in RLS mode (False when there is none)."""
    row = conn.execute("select to_regnamespace('pgfunnel') is not null").fetchone()
    if not (row and row[0]):
        return False
    from pgfunnel.security import rls_enabled

    return rls_enabled(conn)


def _refuse_sql_ascii(conn: psycopg.Connection[Any]) -> None:
    """Refuse a SQL_ASCII database before anything is written (``db.sql_ascii_problem``),
    with how to make one pgfunnel can use."""
    problem = sql_ascii_problem(conn)
    if problem is not None:
        raise ConfigError("database", problem)


@contextmanager
def _one_at_a_time(target: str, command: str,
                   on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold, on a connection of its own, the database's lock for ``init`` and ``migrate``:
    two run at once (two operators, two deploy jobs) raced each other's CREATE EXTENSION,
    CREATE SCHEMA, migrations and function replacements, and one failed with `duplicate
    key value violates unique constraint "pg_extension_name_index"`. The second now waits
    for the first, then finds the schema installed. Session-level, so it spans the
    several connections a run uses; released when its connection closes.

    The session is named ``pgfunnel <command>`` (``application_name``), so another one
    that finds the lock held names its holder: ``on_wait`` is given the line that says
    which session it waits for, before it waits (it waited without a word), and a
    lock_timeout that ends the wait is a ConflictError naming that session (it was
    Postgres' bare "canceling statement due to lock timeout")."""
    try:
        lock = _maintenance_connect(target, autocommit=True, register=False)
    except psycopg.Error as exc:
        raise translate(exc) from exc
    with lock:
        try:
            lock.execute("select pg_catalog.set_config('application_name', %s, false)",
                         (f"pgfunnel {command}",))
            got = lock.execute("select pg_catalog.pg_try_advisory_lock("
                               "pg_catalog.hashtext(%s))", (INIT_LOCK,)).fetchone()
            if not (got and got[0]):
                holder = _init_lock_holder(lock)
                if holder is not None and on_wait is not None:
                    # not "pgfunnel init or migrate": the CLI reads `pgfunnel init ...`
                    # in a line as a command to paste, and gives it the --dsn typed
                    on_wait("waiting for another init or migrate of the pgfunnel schema on "
                            f"this database to finish: {holder[0]}; this {command} goes on "
                            f"when it has (pg_terminate_backend({holder[1]}) ends one that "
                            "is stuck)")
                try:
                    lock.execute("select pg_catalog.pg_advisory_lock("
                                 "pg_catalog.hashtext(%s))", (INIT_LOCK,))
                except psycopg.errors.LockNotAvailable as exc:
                    holder = _init_lock_holder(lock) or holder
                    row = lock.execute("show lock_timeout").fetchone()
                    raise ConflictError(
                        "another init or migrate of the pgfunnel schema is running on this "
                        f"database: {holder[0] if holder else 'a session that has ended since'}"
                        f"; this {command} waited for it as long as the session's "
                        f"lock_timeout ({row[0] if row else '?'}) allows and did nothing: run "
                        "it again when that one has finished") from exc
        except psycopg.Error as exc:
            raise translate(exc) from exc
        yield


def _init_lock_holder(conn: psycopg.Connection[Any]) -> tuple[str, int] | None:
    """The session that holds the lock of init and migrate, as a message names it (pid,
    application_name, how long it has been connected), and its pid; None when none does
    (it let go meanwhile)."""
    return advisory_lock_holder(conn, INIT_LOCK)


def advisory_lock_holder(conn: psycopg.Connection[Any], key: str) -> tuple[str, int] | None:
    """The session that holds the advisory lock ``pg_advisory_lock(hashtext(key))``, as a
    message names it (pid, application_name, how long it has been connected), and its
    pid; None when none does (it let go meanwhile)."""
    # pg_advisory_lock(bigint) keeps its key's high half in classid, its low in objid
    row = conn.execute(
        "select a.pid, a.application_name, pg_catalog.to_char(pg_catalog.now() "
        "       - a.backend_start, 'HH24:MI:SS') "
        "  from pg_catalog.pg_locks l join pg_catalog.pg_stat_activity a on a.pid = l.pid "
        " where l.locktype = 'advisory' and l.granted and l.objsubid = 1 "
        "   and l.database = (select d.oid from pg_catalog.pg_database d "
        "                      where d.datname = pg_catalog.current_database()) "
        "   and ((l.classid::bigint << 32) | l.objid::bigint) "
        "       = pg_catalog.hashtext(%s)::bigint "
        " limit 1", (key,)).fetchone()
    if row is None:
        return None
    pid, name, age = row
    # another role's session shows no backend_start to a role without pg_read_all_stats
    named = f"application_name {name!r}" if name else "no application_name"
    return f"pid {pid} ({named}" + (f", connected for {age})" if age else ")"), int(pid)


#: the key (hashed) of the advisory lock that init and migrate take
INIT_LOCK = "pgfunnel:init"


def init(dsn: str | None = None, *, rls: bool = False,
         on_wait: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Create the extension, the schema and tables (alembic), and the functions. Idempotent.
    One init or migrate at a time per database: a second waits for the first, and
    ``on_wait``, when given, gets the line that names the session it waits for first."""
    target = resolve_dsn(dsn)
    with _one_at_a_time(target, "init", on_wait):
        return _init(target, rls=rls)


def _init(target: str, *, rls: bool) -> dict[str, Any]:
    try:
        with _maintenance_connect(target, register=False) as conn:
            _refuse_sql_ascii(conn)
            before = current_revision(conn)
            vschema = ensure_extension(conn)
            problem = vector_path_problem(conn)
            if problem is not None:
                raise PgfunnelError(problem)
            if rls or _rls_on(conn):
                from pgfunnel.security import check_rls_setup

                # a database already in RLS mode gets this release's policies below:
                # refuse a role that could not finish that, before anything is written
                check_rls_setup(conn)
            # only where it is missing: CREATE SCHEMA IF NOT EXISTS checks CREATE on the
            # database before it looks for the schema, so an owner whose schema a DBA made
            # (`create schema pgfunnel authorization app_owner` in a database it does not
            # own) was refused every init with "permission denied for database"
            exists = conn.execute("select pg_catalog.to_regnamespace(%s) is not null",
                                  (SCHEMA,)).fetchone()
            if not (exists and exists[0]):
                conn.execute(psycopg.sql.SQL("create schema {}").format(
                    psycopg.sql.Identifier(SCHEMA)))
            conn.commit()
        # as in migrate: the tables, the functions and the policies commit together; a
        # database already in RLS mode gets this release's policies and grants too
        _upgrade_in_short_waits(target, "head", _functions_and_policies(rls=rls))
        with _maintenance_connect(target) as conn:
            from pgfunnel.security import rls_enabled

            rls_on = rls_enabled(conn)
            after = current_revision(conn)
            # init on an older schema is an upgrade: it says what migrate would
            notes = _upgrade_notes(conn) if before is not None and before != after else []
            if (wrapper := wrapper_problem(conn)) is not None:
                notes.append(wrapper)
    except psycopg.Error as exc:
        error = translate(exc)
        if isinstance(exc, psycopg.errors.InsufficientPrivilege):
            # as in migrate: a reader or writer that does not own the schema got only
            # "permission denied for table alembic_version" (or "for database DB")
            raise type(error)(f"{str(error).removesuffix(SCHEMA_GRANT_HINT)}: run "
                              "`pgfunnel init` as the role that owns the "
                              "pgfunnel schema (the one that ran it first; on a new database, "
                              "a role that may create schemas in it)") from exc
        raise error from exc
    # "rls": whether row-level security is on now (asked for, or on from an earlier init)
    return {"revision_before": before, "revision": after, "vector_schema": vschema,
            "created": before is None, "rls": rls_on, "notes": notes}


#: said after an upgrade, beside the finding: migrations 0007 and 0010 add their checks
#: NOT VALID, so rows written before them stay, and any later UPDATE of one is refused
_REFUSED_ON_UPDATE = ("; until then any UPDATE of such a document (its metadata or readers, "
                      "say) fails on the check constraint that refuses these values")


def _upgrade_notes(conn: psycopg.Connection[Any]) -> list[str]:
    """What an upgrade leaves for the owner to act on, from doctor's checks: documents
    chunked by an older pgfunnel (the next ingest rewrites those it cuts otherwise), and documents
    written by hand with values the table's check constraints now refuse (they stay,
    unchecked, and an UPDATE of one fails until it is fixed). run_checks skips the counts
    for a role that row security would show only part of the documents."""
    from pgfunnel.doctor import (
        check_chunking,
        check_public_with_readers,
        check_unfindable_documents,
        run_checks,
    )

    checks = [("chunking", check_chunking),
              ("public_with_readers", check_public_with_readers),
              ("unfindable_documents", check_unfindable_documents)]
    notes = []
    for f in run_checks(conn, checks):
        if f.message.startswith("the check failed"):
            continue
        if f.check == "chunking":
            notes.append(f.message)
        elif f.check in ("public_with_readers", "unfindable_documents"):
            notes.append(f.message + _REFUSED_ON_UPDATE)
    return notes


def _functions_and_policies(*, rls: bool) -> Callable[[psycopg.Connection[Any]], None]:
    """What init and migrate do after the revisions, in their transaction: install this
    release's functions and, with ``rls`` or in a database already in RLS mode, its
    policies and grants."""
    def install(conn: psycopg.Connection[Any]) -> None:
        from pgfunnel.security import enable_rls, rls_enabled

        install_functions(conn)
        if rls or rls_enabled(conn):
            enable_rls(conn)

    return install


def migrate(dsn: str | None = None, *,
            on_wait: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Upgrade an existing installation to this package's head and reinstall functions.
    One init or migrate at a time per database: a second waits for the first, and
    ``on_wait``, when given, gets the line that names the session it waits for first."""
    target = resolve_dsn(dsn)
    with _one_at_a_time(target, "migrate", on_wait):
        return _migrate(target)


def _migrate(target: str) -> dict[str, Any]:
    try:
        with _maintenance_connect(target, register=False) as conn:
            _refuse_sql_ascii(conn)
            before = current_revision(conn)
            problem = vector_path_problem(conn)
            if problem is None and _rls_on(conn):
                from pgfunnel.security import check_rls_setup

                check_rls_setup(conn)
        if problem is not None:
            raise PgfunnelError(problem)
        if before is None:
            from pgfunnel.errors import SchemaMissingError

            raise SchemaMissingError("no alembic revision found")
        # the functions, and in RLS mode this release's policies and grants (they change
        # with releases), in the upgrade's transaction: a failure of either left the
        # tables at this release and the functions at the last one's
        # (an upgrade's refused privilege comes as the driver's error, reworded below)
        _upgrade_in_short_waits(target, "head", _functions_and_policies(rls=False))
        with _maintenance_connect(target) as conn:
            after = current_revision(conn)
            notes = _upgrade_notes(conn)
            if (wrapper := wrapper_problem(conn)) is not None:
                notes.append(wrapper)
    except psycopg.Error as exc:
        error = translate(exc)
        if isinstance(exc, psycopg.errors.InsufficientPrivilege):
            # a role that does not own the schema (a reader, a writer) cannot read
            # alembic_version, and could not alter the tables or replace the functions
            raise type(error)(f"{str(error).removesuffix(SCHEMA_GRANT_HINT)}: run "
                              "`pgfunnel migrate` as the role that owns the "
                              "pgfunnel schema (the one that ran `pgfunnel init`)") from exc
        raise error from exc
    return {"revision_before": before, "revision": after, "notes": notes}

