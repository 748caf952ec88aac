"""One error hierarchy for everything pgfunnel raises.

Every exception a caller can see derives from :class:`PgfunnelError`. Database
errors are translated by SQLSTATE (see :func:`translate`) so that callers never
have to import psycopg to tell "run `pgfunnel init`" apart from "bad parameter".
"""

from __future__ import annotations

import functools
import json
import numbers
import re
import shlex
import stat
import sys
import warnings
from pathlib import Path
from typing import Any

_PACKAGE_DIR = str(Path(__file__).resolve().parent)

#: what ``json.loads`` raises on text it cannot read: a syntax error, or nesting deeper
#: than Python's recursion limit (``[[[[...`` thousands deep), which is not a JSON error
JSON_ERRORS = (ValueError, RecursionError)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            # json.loads keeps the last silently: a record with "text" twice lost its first
            raise ValueError(f"key {key!r} appears twice in one object")
        obj[key] = value
    return obj


def loads_unique(text: str) -> Any:
    """``json.loads``, refusing an object that names a key twice (JSON_ERRORS)."""
    return json.loads(text, object_pairs_hook=_unique_keys)


def json_problem(exc: BaseException) -> str:
    """What was wrong with a JSON text, in a few words."""
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return str(getattr(exc, "msg", exc))


def read_file_bytes(path: Path) -> bytes:
    """A file's bytes. A path that is not a regular file (a named pipe, a device such as
    /dev/zero, a socket; a link to one) raises OSError without reading it: a pipe waits
    for a writer and a device may never end, so reading one hung."""
    mode = path.stat().st_mode
    if not stat.S_ISREG(mode):
        kind = ("a folder" if stat.S_ISDIR(mode) else "a named pipe" if stat.S_ISFIFO(mode)
                else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                else "a socket" if stat.S_ISSOCK(mode) else "not a file")
        raise OSError(f"not a regular file ({kind})")
    return path.read_bytes()


def read_file_text(path: Path) -> str:
    """A UTF-8 file's text with its line ends read as ``Path.read_text`` reads them (``\r\n``
    and ``\r`` as ``\n``), through :func:`read_file_bytes`; UnicodeDecodeError when it is
    not UTF-8."""
    return read_file_bytes(path).decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")


# C0 controls (ESC, BEL, CR, LF, ...), DEL and C1 controls (CSI, OSC, U+0085, ...)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def escape_controls(text: str) -> str:
    """``text`` for a terminal or a log: each control character written as ``\\xNN``. A
    file name, citekey or query holding an escape sequence, printed raw, recoloured the
    terminal, set its title or wrote its clipboard, and a newline split the line."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def warn_at_caller(message: str | Warning, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn`` naming the first line outside pgfunnel that led here (the
    caller's ``funnel.search(...)``, not a line inside pgfunnel), wherever in the package
    the warning starts; what Python 3.12's ``skip_file_prefixes`` does. A control
    character in the message (a file name's, a query's) is written as ``\\xNN``
    (:func:`escape_controls`): Python prints a warning to stderr as it is."""
    if isinstance(message, Warning):
        text = str(message)
        if (escaped := escape_controls(text)) != text:
            message = type(message)(escaped)
    else:
        message = escape_controls(message)
    level = 2  # the caller of this function
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        next_frame = frame.f_back
        if next_frame is None:
            break
        frame = next_frame
        level += 1
    warnings.warn(message, category, stacklevel=level)


class PgfunnelError(Exception):
    """Base class of every error pgfunnel raises on purpose."""

    #: process exit status the CLI uses for this class of error
    exit_code: int = 1


class ConfigError(PgfunnelError):
    """A setting or parameter has a value pgfunnel cannot use."""

    def __init__(self, parameter: str, message: str) -> None:
        self.parameter = parameter
        # what is wrong with the value, for a caller that names the parameter its own way
        # (the CLI names its flag)
        self.detail = message
        super().__init__(f"{parameter}: {message}")


class InvalidInputError(PgfunnelError):
    """Query text, a vector or an ingest record is malformed."""


class InvalidVectorError(InvalidInputError):
    """A vector has the wrong dimension, NaN/Inf values, is zero, or is missing.

    ``parameter`` names the argument that held it (``query_embedding``,
    ``vectors['doc-1'][0]``) when pgfunnel checked it itself; None when Postgres refused
    the value (pgvector's message names no argument)."""

    def __init__(self, message: str, *, parameter: str | None = None) -> None:
        self.parameter = parameter
        super().__init__(f"{parameter}: {message}" if parameter else message)


class InvalidDocumentError(InvalidInputError):
    """An ingest record lacks a required field or has a malformed one."""


class SchemaMissingError(PgfunnelError):
    """The database has no pgfunnel schema (or an outdated one)."""

    def __init__(self, detail: str = "") -> None:
        msg = "the pgfunnel schema is not installed in this database; run `pgfunnel init`"
        if detail:
            msg += f" ({detail})"
        super().__init__(msg)


class SchemaOutdatedError(SchemaMissingError):
    """The database's pgfunnel schema is an older release's: `pgfunnel migrate` upgrades it."""

    def __init__(self, revision: str, head: str, *, functions_only: bool = False) -> None:
        PgfunnelError.__init__(
            self, (f"the SQL functions in this database are not this pgfunnel's (schema "
                   f"revision {revision}): another release installed them, or the tables "
                   "were moved with `alembic upgrade` alone; run `pgfunnel migrate` first")
            if functions_only else
            f"the pgfunnel schema is at revision {revision}, older than this "
            f"pgfunnel's {head}: run `pgfunnel migrate` first")


class SchemaOutdatedWarning(UserWarning):
    """A search ran on the functions an older pgfunnel release installed: the package was
    upgraded and `pgfunnel migrate` has not run yet."""


class SearchNoticeWarning(UserWarning):
    """A notice Postgres raised during a search and ``Funnel.search`` re-raises as a
    warning, its text kept (``pgfunnel: query words not searched: ...``, ``pgfunnel: the
    query is empty ...``); the same text is in ``SearchResponse.notices``. A category of
    its own so an application can filter these apart from other warnings."""


class ConnectionFailedError(PgfunnelError):
    """The database could not be reached."""


class NotFoundError(PgfunnelError):
    """A named collection, index version or document does not exist.

    ``parameter`` names the argument whose value named nothing (``version``, or
    ``collection`` for a collection that does not exist or has no active index version)
    where one did, and ``detail`` is
    then the message without it: a caller that names the argument its own way (the CLI:
    ``VERSION``) says it so. A message that starts with the argument's name
    (``collection 'x' does not exist``) is not prefixed with it again."""

    def __init__(self, message: str, *, parameter: str | None = None) -> None:
        self.parameter = parameter
        self.detail = message
        prefixed = parameter is not None and not message.startswith(f"{parameter} ")
        super().__init__(f"{parameter}: {message}" if prefixed else message)


class AccessError(PgfunnelError):
    """The caller lacks a privilege, or passed no identity where one is required."""


class MissingIdentityError(AccessError, ConfigError):
    """A search was given no reader identity (``principals=None``, or a None among them):
    refused, never read as "everyone". Both an access error and a bad ``principals``."""

    def __init__(self, message: str) -> None:
        ConfigError.__init__(self, "principals", message)


class ConflictError(PgfunnelError):
    """Another writer holds the lock, or the operation contradicts current state."""


class MigrationError(PgfunnelError):
    """A schema upgrade (``pgfunnel init``/``migrate``) failed and was rolled back whole:
    the message names the revision or step that failed, its cause, and the revision the
    schema stays at."""


class ReadOnlyError(PgfunnelError):
    """The operation writes, and the connection's transaction is read-only: a hot standby
    (a read replica), ``default_transaction_read_only = on`` for the role or database, or
    ``SET TRANSACTION READ ONLY``. Untraced searches and ``explain`` run there; ingest,
    reindex, version commands, ``init`` and ``migrate`` need the primary."""


class TraceReadOnlyError(ReadOnlyError, ConfigError):
    """A traced search (``trace=True``) in a read-only transaction: the trace is written to
    search_log and search_trace. Both a read-only error and a ``trace`` the connection
    cannot honour, refused before the search runs."""

    def __init__(self, message: str) -> None:
        ConfigError.__init__(self, "trace", message)


class StatementTimeoutError(PgfunnelError):
    """A statement ran past ``statement_timeout`` (the session's, role's or database's)
    and was cancelled: an ingest, reindex or version command, an init or migrate, or a
    search."""


class SearchTimeoutError(StatementTimeoutError):
    """A search ran past its statement_timeout and was cancelled."""


class QueryCancelledError(PgfunnelError):
    """A statement was cancelled by a cancel request: another session's
    ``pg_cancel_backend``, the client's own cancel, or a SIGINT that reached the server
    process. No time limit did it, so it is not a :class:`StatementTimeoutError` (nor a
    :class:`SearchTimeoutError`), though Postgres gives both the same SQLSTATE (57014);
    its message, "canceling statement due to user request", tells them apart."""


class ModelLoadError(PgfunnelError):
    """An embedding or rerank model could not be loaded. Never silently skipped."""

    def __init__(self, setting: str, model: str, cause: BaseException | str) -> None:
        self.setting = setting
        self.model = model
        super().__init__(f"{setting}={model!r} could not be loaded: {cause}")


def model_load_detail(cause: BaseException, model: str, *, offline: bool) -> str:
    """One line on why a model did not load and what to do: the loader's first line (the
    libraries' messages run to several, with links), then the likely fix."""
    from pathlib import Path

    lines = str(cause).strip().splitlines()
    detail = f"{type(cause).__name__}: {lines[0] if lines else ''}"
    if Path(model).expanduser().exists():
        return detail
    if offline:
        return detail + (" -- running offline (HF_HUB_OFFLINE / local_files_only), so the model"
                         " must already be available locally: pass a local directory, or put"
                         " the model in the local Hugging Face cache before going offline")
    return detail + (" -- the model is not a local directory; make sure the id is right and"
                     " the model is available locally or can be fetched")


class RerankError(PgfunnelError):
    """The reranker failed (its own exception is the cause) or produced output that cannot
    be trusted (e.g. a wrong score count)."""


#: the document table's CHECK constraints (migrations 0007 and 0010), said as what to do
_CONSTRAINT_MESSAGES = {
    "document_with_readers_is_not_public": (
        "document: readers restrict only a document that is not public, and this one would "
        "be public with readers (readable by everyone); set is_public = false with the "
        "readers, or clear the readers to keep it public"),
    "document_tenant_not_empty": (
        "document: tenant must be NULL (no tenant) or a non-empty string; '' would be a "
        "tenant no search can ask for"),
    "document_language_not_empty": (
        "document: language must be NULL or a non-empty string; '' would be a language no "
        "search can ask for"),
    "document_readers_named": (
        "document: readers must be non-empty strings; a NULL or '' reader matches no "
        "principal"),
    "document_validity_ordered": (
        "document: valid_to must be after valid_from (the document would be valid at no "
        "time); set either to NULL for an open bound"),
}


# SQLSTATE -> class. Codes raised by pgfunnel's own SQL use the class "PF" prefix
# where Postgres lets us choose; the rest are Postgres' own.
_SQLSTATE_MAP: dict[str, type[PgfunnelError]] = {
    "3F000": SchemaMissingError,  # invalid_schema_name
    "42883": SchemaMissingError,  # undefined_function (pgfunnel.* missing)
    "42P01": SchemaMissingError,  # undefined_table
    "22023": ConfigError,  # invalid_parameter_value
    "22004": AccessError,  # null_value_not_allowed (NULL principals)
    "22000": InvalidInputError,  # data_exception
    "22P02": InvalidInputError,  # invalid_text_representation
    "22021": InvalidInputError,  # character_not_in_repertoire (NUL, bad UTF-8)
    "2200G": InvalidVectorError,  # most_specific_type_mismatch
    "42501": AccessError,  # insufficient_privilege
    "57014": SearchTimeoutError,  # query_canceled (statement_timeout)
    "55P03": ConflictError,  # lock_not_available
    "P0002": NotFoundError,  # no_data_found
    "23505": ConflictError,  # unique_violation
    "23514": InvalidInputError,  # check_violation
    "55000": ConflictError,  # object_not_in_prerequisite_state (version state, indexed column)
}


#: said after a deadlock or serialization failure, which rolled the transaction back; an
#: ingest or reindex commits batch by batch, so what earlier transactions wrote stays
RETRY_HINT = ("; a concurrent transaction took the same rows, and the transaction that "
              "failed was rolled back whole (what earlier ones committed stays): run it "
              "again")

#: said after Postgres' "cannot execute INSERT in a read-only transaction"
READ_ONLY_HINT = ("; the transaction is read-only (a hot standby, "
                  "default_transaction_read_only = on for the role or database, or SET "
                  "TRANSACTION READ ONLY): run it on the primary, in a read-write transaction")


#: said after Postgres' "permission denied for schema pgfunnel": a role granted nothing
SCHEMA_GRANT_HINT = ("; this role was granted nothing on pgfunnel: in RLS mode (set up by "
                     "init --rls), the schema's owner or a superuser grants it "
                     "pgfunnel_reader to search or pgfunnel_writer to ingest and manage "
                     "versions (`grant pgfunnel_reader to ROLE`); without RLS those roles "
                     "hold nothing here: connect as the role that owns the schema, or have "
                     "it run init --rls with its own connection string first "
                     "(docs/security.md, Roles and grants)")


# the server ended the session: admin_shutdown, crash_shutdown, cannot_connect_now,
# idle_session_timeout (the 08 class is the connection's own failures)
_CONNECTION_LOST = frozenset({"57P01", "57P02", "57P03", "57P05"})


def text_problem(value: str) -> str | None:
    """Why Postgres text cannot hold ``value`` (a NUL byte, a lone surrogate), said to
    follow the name of the field, or None. Each caller raises its own error class naming
    the field and place: the driver's own errors name neither."""
    if "\x00" in value:
        return "contains a NUL byte, which Postgres text cannot hold"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return unicode_problem(value, exc.start)
    return None


def text_value_problem(value: object, noun: str = "a string") -> str | None:
    """:func:`text_problem` for a value that may not be a string at all: "must be
    ``noun``, got int" for one that is not, said to follow the field's name."""
    if not isinstance(value, str):
        return f"must be {noun}, got {type(value).__name__}"
    return text_problem(value)


def unicode_problem(value: str, at: int) -> str:
    """What is wrong with the lone surrogate at ``value[at]``, said to follow the name of
    the field. A command line's, an environment variable's or a file name's byte that is
    not UTF-8 reaches Python as U+DC80 - U+DCFF (``-c $'\\xff'`` is ``'\\udcff'``): it is
    named as the byte it was, not by the encoder's "surrogates not allowed"."""
    code = ord(value[at])
    if 0xDC80 <= code <= 0xDCFF:
        return f"is not valid Unicode (byte 0x{code - 0xDC00:02x}, not UTF-8, at character {at})"
    return f"is not valid Unicode (a lone surrogate, U+{code:04X}, at character {at})"


def shown(value: object, width: int = 200) -> str:
    """``repr(value)`` for an error message, at most ``width`` characters: an integer of
    more than 4,300 digits (or a list holding one) has no repr in Python 3.11+, which
    raised a raw ValueError in place of the message."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"{'a negative' if value < 0 else 'an'} integer of {value.bit_length():,} bits"
    try:
        text = repr(value)
    except ValueError:
        return f"a {type(value).__name__} holding an integer too long to print"
    return text if len(text) <= width else text[:width - 3] + "..."


def check_sql_text(parameter: str, value: str) -> None:
    """Text Postgres cannot hold, a ConfigError naming ``parameter`` (:func:`text_problem`)."""
    if (problem := text_problem(value)) is not None:
        raise ConfigError(parameter, f"{problem}: {shown(value)}")


def positive_int(parameter: str, value: object) -> int:
    """``value`` as an int if it is a positive integer (a numpy one too, as search
    parameters take them; a bool is not one), else a ConfigError naming ``parameter``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise ConfigError(parameter, f"must be a positive integer, got {shown(value)}")
    return int(value)


def string_list(value: Any, parameter: str) -> list[str]:
    """``value`` as a list of strings, or a ConfigError naming ``parameter``. One string is
    refused: iterated, ``"kb-ab"`` would be the keys ``k``, ``b``, ``-``, ``a``."""
    if isinstance(value, (str, bytes)):
        raise ConfigError(parameter, f"must be a list of strings, not one string: [{value!r}]")
    try:
        items = list(value)
    except TypeError:
        raise ConfigError(parameter, f"must be a list of strings, got "
                          f"{type(value).__name__}") from None
    bad = [item for item in items if not isinstance(item, str)]
    if bad:
        raise ConfigError(parameter, f"must hold only strings, got {bad[0]!r}")
    return items


# "k: must be between 1 and 1000": a message of pgfunnel's SQL, the parameter named first
_NAMED_FIRST = re.compile(r"([A-Za-z_][A-Za-z0-9_.]*): (.+)", re.DOTALL)
# Postgres' own 22023 messages: 'invalid value for parameter "statement_timeout": "abc"'
_QUOTED_SETTING = re.compile(r'parameter "([^"]+)"')

# Postgres' "function pgfunnel.candidates(unknown, trace => boolean) does not exist", and
# for the wrapper in public that `select * from funnel_search(...)` calls, the same message
# without the schema
_WRONG_CALL = re.compile(r"function (pgfunnel\.)?(\w+)\((.*)\) does not exist")
# the functions whose second argument is the query vector
_TAKES_QUERY_EMBEDDING = frozenset({"funnel_search", "candidates", "explain"})
# what psycopg sends a Python list (or a numpy array where nothing dumps one) as: no
# pgfunnel function takes a vector in an array of numbers
_NUMBER_ARRAY = re.compile(r"(?:double precision|real|numeric|integer|bigint|smallint)\[\]")
# psycopg's refusal of a value it has no dumper for: pgvector's adapters not registered on
# the connection ("cannot adapt type 'ndarray' using placeholder '%s' (format: AUTO)")
_NO_VECTOR_DUMPER = re.compile(r"cannot adapt type '(ndarray|Vector|HalfVector|SparseVector)'")
#: how the SQL functions' hint for a missing collection tells a caller to name one
#: (sql/000_base.sql, ``_collection_id``): psql's reader passes it in SQL or the CLI
COLLECTION_FORMS_SQL = "collection => 'NAME' in SQL, -c NAME in the CLI"
#: the same, as Python's layer says it: a Funnel or SQLAlchemy caller who left out the
#: collection was shown two forms, neither the one their own call takes
COLLECTION_FORMS = "collection='NAME' in Python, " + COLLECTION_FORMS_SQL
#: the end of the SQL functions' hint for a missing collection: the ingest into it
_INGEST_INTO = "pgfunnel ingest PATH --collection "
_INGEST_PLACEHOLDER = _INGEST_INTO + "NAME"
# the SQL functions' message for it, the name as quote_literal gives it (one that holds a
# backslash comes as E'...', and one cut short at 200 characters ends in "...": neither
# is read back, and the hint's ingest stays as the SQL wrote it)
_MISSING_COLLECTION = re.compile(r"collection '((?:[^'\\]|'')*)' does not exist;")
ARRAY_HINT = ("; an array parameter (principals, weights) takes a list: from Python a "
              "list, not one string or a tuple (principals => :p with p = ['alice']); in "
              "SQL an array literal ('{alice}', '{1,0.5}')")
VECTOR_BINDING_HINT = (
    "send the vector as a numpy array or pgvector.Vector on a connection with pgvector's "
    "adapters registered (pgfunnel.sqla.engine_from_dsn's engines and pgfunnel.db.connect's "
    "connections have them; pgvector.psycopg.register_vector(conn) adds them to one of your "
    "own), or send it as a list and cast it in the SQL: cast(:v as vector)")


_INTEGER = frozenset({"integer", "smallint"})
_FLOAT = frozenset({"double precision", "real", "numeric", "integer", "smallint", "bigint"})
_TEXT = frozenset({"text", "character varying", "name"})
# funnel_search's arguments in order, with the types Postgres would take for each in a
# call (an untyped literal or parameter, "unknown", fits any)
_FUNNEL_SEARCH_ARGUMENTS: tuple[tuple[str, frozenset[str]], ...] = (
    ("query_text", _TEXT), ("query_embedding", frozenset({"vector"})), ("k", _INTEGER),
    ("collection", _TEXT), ("principals", frozenset({"text[]", "character varying[]"})),
    ("tenant", _TEXT), ("language", _TEXT),
    ("as_of", frozenset({"timestamp with time zone", "timestamp without time zone", "date"})),
    ("metadata_filter", frozenset({"jsonb"})), ("fusion", _TEXT), ("rrf_k", _FLOAT),
    ("weights", frozenset({"double precision[]", "real[]", "numeric[]", "integer[]"})),
    ("lexical_depth", _INTEGER), ("dense_depth", _INTEGER), ("overfetch", _INTEGER),
    ("per_source_cap", _INTEGER), ("ef_search", _INTEGER), ("k1", _FLOAT), ("b", _FLOAT),
    ("trace", frozenset({"boolean"})))


def _funnel_search_would_take(arguments: str) -> bool:
    """Whether public.funnel_search, as `pgfunnel init` creates it, takes a call of these
    argument types (``unknown, k => integer``): then Postgres found no such function at
    all, the pgfunnel schema (and its wrapper) not installed."""
    parts = [part.strip() for part in arguments.split(", ")] if arguments.strip() else []
    accepted = dict(_FUNNEL_SEARCH_ARGUMENTS)
    positional = [p for p in parts if " => " not in p]
    named = [p.split(" => ", 1) for p in parts if " => " in p]
    if len(positional) > len(_FUNNEL_SEARCH_ARGUMENTS) or not parts:
        return False
    given = list(zip((name for name, _ in _FUNNEL_SEARCH_ARGUMENTS), positional, strict=False))
    given += [(name, type_) for name, type_ in named]
    names = [name for name, _ in given]
    return (len(set(names)) == len(names) and all(
        name in accepted and (type_ == "unknown" or type_ in accepted[name])
        for name, type_ in given))


def _query_embedding_type(arguments: str) -> str | None:
    """The type Postgres names for the query vector in a failed call's argument list
    (``unknown, double precision[], k => integer``): the second positional argument, or
    ``query_embedding => ...``."""
    parts = [part.strip() for part in arguments.split(", ")]
    named = [p.split(" => ", 1)[1] for p in parts if p.startswith("query_embedding => ")]
    if named:
        return named[0]
    positional = [p for p in parts if " => " not in p]
    return positional[1] if len(positional) > 1 else None


@functools.cache
def _shipped_functions() -> frozenset[str]:
    """The names of the functions this release's sql/ files create in schema pgfunnel."""
    from pgfunnel.schema import sql_files

    return frozenset(name for path in sql_files() for name in re.findall(
        r"create or replace function pgfunnel\.(\w+)\(", path.read_text()))


@functools.cache
def _shipped_tables() -> frozenset[str]:
    """The names of the tables this release creates in schema pgfunnel (alembic's own
    version table included)."""
    from pgfunnel.models import Base

    return frozenset({table.name for table in Base.metadata.tables.values()}
                     | {"alembic_version"})


# Postgres' messages for a missing relation, schema or function, the name in group 1
_MISSING_RELATION = re.compile(r'relation "pgfunnel\.([^"]+)" does not exist')
_MISSING_SCHEMA = re.compile(r'schema "pgfunnel" does not exist')
_MISSING_FUNCTION = re.compile(r"function pgfunnel\.(\w+)\(")


def _pgfunnel_is_missing(sqlstate: str, primary: str) -> bool:
    """Whether a missing name (42P01, 3F000, 42883) says the pgfunnel schema (or the
    vector extension) is not installed: the schema itself, or a table this release
    creates in it, is missing. A name pgfunnel never creates (``pgfunnel.chunks``, a
    table of the caller's own, one named ``vectors``) says nothing of the schema."""
    if sqlstate == "3F000":
        return _MISSING_SCHEMA.match(primary) is not None
    if sqlstate == "42P01":
        table = _MISSING_RELATION.match(primary)
        return table is not None and table.group(1) in _shipped_tables()
    # 42883: a function or operator; pgfunnel's own are told apart by the caller
    if (called := _MISSING_FUNCTION.match(primary)) is not None:
        return called.group(1) in _shipped_functions()
    return re.search(r"\bvector\b", primary) is not None


def _not_pgfunnels(sqlstate: str, primary: str) -> str:
    """What follows Postgres' message for a name in schema pgfunnel that pgfunnel never
    creates: that it has none of that name, and the nearest it has."""
    import difflib

    named = (_MISSING_RELATION.match(primary) if sqlstate == "42P01"
             else _MISSING_FUNCTION.match(primary) if sqlstate == "42883" else None)
    if named is None or re.fullmatch(r"\w+_v\d+", named.group(1)):
        # (an index version's own partition or index, posting_v7, embedding_hnsw_v7: one
        # pgfunnel names, for a version that is gone)
        return ""
    kind, names = (("table", _shipped_tables()) if sqlstate == "42P01"
                   else ("function", _shipped_functions()))
    near = difflib.get_close_matches(named.group(1), sorted(names), n=1)
    return (f"; pgfunnel has no {kind} {named.group(1)!r}"
            + (f" (did you mean pgfunnel.{near[0]}?)" if near else ""))


def translate(exc: BaseException, *, searching: bool = True,
              bind: Any = None) -> PgfunnelError:
    """Map a psycopg error to the matching :class:`PgfunnelError` subclass.

    Messages raised by pgfunnel's SQL already name the parameter; they are kept
    verbatim (without psycopg's CONTEXT lines) so the caller sees one clear line.
    Outside a search (``searching=False``: ingest, reindex, versions) a statement
    timeout is a :class:`StatementTimeoutError` that names the setting and how to lift
    it for the job, not a :class:`SearchTimeoutError`.

    ``bind``: where the error was raised, a SQLAlchemy ``Engine``, ``Connection``,
    ``Session`` or ``scoped_session``, or a psycopg connection. For a role granted nothing
    on pgfunnel the advice is then the one for the mode this database is in (RLS or not),
    naming the role and the schema's owner, read from the catalogs on a connection opened
    for it beside the engine's pool (the refusal aborted the session's transaction, and the
    pool may have no connection free); without it, or where that read fails, the advice of
    both modes, each said with the mode it applies to.
    """
    err = _translated(exc, searching=searching)
    if bind is not None and type(err) is AccessError and SCHEMA_GRANT_HINT in str(err):
        from pgfunnel.security import with_access_hint_from

        named = with_access_hint_from(bind, err)
        if isinstance(named, PgfunnelError):
            return named
    return err


def _translated(exc: BaseException, *, searching: bool) -> PgfunnelError:
    if isinstance(exc, PgfunnelError):
        return exc
    orig = getattr(exc, "orig", None)
    if isinstance(orig, BaseException):
        # SQLAlchemy wraps the driver's error (DBAPIError.orig): the SQLSTATE is there, and
        # an error psycopg raised before sending anything (a NUL in a value) is its class
        err = translate(orig, searching=searching)
        err.__cause__ = exc
        return err
    sqlstate: str | None = getattr(exc, "sqlstate", None)
    diag: Any = getattr(exc, "diag", None)
    # (an exception with an empty message, TimeoutError() say, is named by its class)
    primary = (getattr(diag, "message_primary", None)
               or next(iter(str(exc).splitlines()), "") or type(exc).__name__)
    if sqlstate == "57014" and "user request" in primary:
        # a cancel, not a timeout: said as Postgres says it, on every path (an ingest's
        # or reindex's was a StatementTimeoutError, a search's a SearchTimeoutError)
        err = QueryCancelledError(
            f"{primary}: a cancel request stopped it (pg_cancel_backend in another "
            "session, the client's own cancel, or SIGINT sent to the server process)")
        err.__cause__ = exc
        return err
    if not searching and sqlstate == "57014":
        hint = (": it ran past statement_timeout (this session's, role's or database's "
                "setting, meant for queries); lift it for this job, e.g. "
                "PGOPTIONS='-c statement_timeout=0' for the CLI"
                if "statement timeout" in primary else "")
        err = StatementTimeoutError(primary + hint)
        err.__cause__ = exc
        return err
    if sqlstate is None:
        import psycopg

        if type(exc).__name__ == "TimeoutError" and type(exc).__module__ == "sqlalchemy.exc":
            # a SQLAlchemy engine's pool ("QueuePool limit of size 5 overflow 10 reached,
            # connection timed out"): as psycopg_pool's, a ConnectionFailedError (it was a
            # bare PgfunnelError, which an app's handler for pool exhaustion did not catch)
            detail = re.sub(r"\s*\(Background on this error at: [^)]*\)\s*$", "", primary)
            err = ConnectionFailedError(f"no connection free in the pool: {detail}")
            err.__cause__ = exc
            return err
        if type(exc).__name__ in ("PoolTimeout", "TooManyRequests"):
            # psycopg_pool's: the pool is exhausted, not the server unreachable
            err = ConnectionFailedError(f"no connection free in the pool: {primary}")
            err.__cause__ = exc
            return err
        if type(exc).__name__ == "PoolClosed":
            # the application's pool, not yet opened or closed already: no connection
            # was lost, and none was tried
            err = ConnectionFailedError(
                f"{primary}: open the pool (pool.open(), or `with ConnectionPool(...) as "
                "pool:`) before searching with it, and close it after")
            err.__cause__ = exc
            return err
        if isinstance(exc, psycopg.OperationalError):
            # no SQLSTATE: libpq's own failure, either opening a connection or on one that
            # was open ("the connection is closed", "consuming input failed: server closed
            # the connection unexpectedly") - the second is not a failure to connect
            opening = primary.startswith(("connection failed", "connection to server"))
            what = "cannot connect to Postgres" if opening else "lost the connection to Postgres"
            err = ConnectionFailedError(f"{what}: {primary}")
            err.__cause__ = exc
            return err
        if isinstance(exc, psycopg.ProgrammingError) and _NO_VECTOR_DUMPER.match(primary):
            # a numpy array or pgvector value bound on a connection that has no pgvector
            # adapters (an engine of the application's own, create_engine)
            err = PgfunnelError(f"{primary}: the connection has no pgvector adapters; "
                                + VECTOR_BINDING_HINT)
            err.__cause__ = exc
            return err
        if isinstance(exc, psycopg.DataError):
            # refused by the client before it reached the server (a NUL in a text value)
            err = InvalidInputError(primary)
            err.__cause__ = exc
            return err
        return PgfunnelError(primary)
    if sqlstate.startswith("08") or sqlstate in _CONNECTION_LOST:
        err = ConnectionFailedError(f"lost the connection to Postgres: {primary}")
        err.__cause__ = exc
        return err
    if sqlstate == "22000" and primary.endswith("not allowed in vector"):
        # pgvector's own check of a vector's values ("NaN not allowed in vector")
        err = InvalidVectorError(primary)
        err.__cause__ = exc
        return err
    if sqlstate in ("40P01", "40001"):  # deadlock_detected, serialization_failure
        # another session's transaction took the same rows in another order (an app's own
        # DELETE of documents an ingest rewrites) and Postgres rolled this one back
        err = ConflictError(f"{primary}{RETRY_HINT}")
        err.__cause__ = exc
        return err
    if sqlstate == "25P02":  # in_failed_sql_transaction
        # an earlier statement of the transaction failed (a search refused, say) and the
        # caller went on without rolling back: the bare message did not say what to do
        err = PgfunnelError(
            f"{primary}: an earlier statement in this transaction failed; roll it back "
            "(conn.rollback(), session.rollback() in SQLAlchemy) before running anything "
            "else on the connection")
        err.__cause__ = exc
        return err
    if sqlstate == "25006":  # read_only_sql_transaction
        # pgfunnel's own check of a traced search names `trace` (sql/040_funnel.sql)
        err = (TraceReadOnlyError(primary.split(":", 1)[1].strip())
               if primary.startswith("trace:") else ReadOnlyError(primary + READ_ONLY_HINT))
        err.__cause__ = exc
        return err
    cls = _SQLSTATE_MAP.get(sqlstate, PgfunnelError)
    if cls is SchemaMissingError:
        called = _WRONG_CALL.match(primary) if sqlstate == "42883" else None
        if called is not None and called.group(2) in _shipped_functions() and (
                called.group(1) or called.group(2) == "funnel_search"):
            name = called.group(2)
            vector_type = (_query_embedding_type(called.group(3))
                           if name in _TAKES_QUERY_EMBEDDING else None)
            if vector_type is not None and _NUMBER_ARRAY.fullmatch(vector_type):
                # a hand-written call (SQLAlchemy's text(), psycopg) given the vector as a
                # list: the bare message did not say that the vector was the argument wrong
                err = InvalidVectorError(
                    f"was sent as {vector_type} (a Python list), which no {name} takes; "
                    + VECTOR_BINDING_HINT, parameter="query_embedding")
                err.__cause__ = exc
                return err
            if not called.group(1) and _funnel_search_would_take(called.group(3)):
                # public.funnel_search would have taken this call: it is not there, the
                # schema not installed (or public is off the search_path)
                err = SchemaMissingError(
                    f"{primary}; `pgfunnel init` creates it in schema public, which a dump "
                    "of schema pgfunnel alone leaves out; where it is installed and public "
                    "is not on the search_path, call pgfunnel.funnel_search")
                err.__cause__ = exc
                return err
            # the function is one this release ships: the call's argument names or types
            # are wrong (or the database has an older release's functions), not the schema.
            # Called without the schema it is public.funnel_search, which `pgfunnel init`
            # creates: on a database without pgfunnel Postgres says the same
            unqualified = ("" if called.group(1)
                           else ", or `pgfunnel init` if it has no pgfunnel schema")
            err = ConfigError(
                "arguments", f"{primary}: no pgfunnel.{name} takes these "
                "arguments; check their names and types (docs/sql.md), and run `pgfunnel "
                f"migrate` if the database has an older release's functions{unqualified}")
            err.__cause__ = exc
            return err
        if _pgfunnel_is_missing(sqlstate, primary):
            return SchemaMissingError(primary)
        # the schema is there (or the name is not pgfunnel's): a typo in the caller's SQL
        # (pgfunnel.chunks for pgfunnel.chunk) or a table of the caller's own, named as it
        # is, not "the pgfunnel schema is not installed; run `pgfunnel init`"
        err = PgfunnelError(primary + _not_pgfunnels(sqlstate, primary))
        err.__cause__ = exc
        return err
    if cls is ConfigError:
        # pgfunnel's SQL names the parameter first ("k: must be between 1 and 1000");
        # Postgres' own messages name a setting in quotes ('invalid value for parameter
        # "statement_timeout": "abc"'), which is not a name to put before a colon
        named = _NAMED_FIRST.match(primary)
        if named is not None:
            return ConfigError(named.group(1), named.group(2))
        setting = _QUOTED_SETTING.search(primary)
        err = ConfigError(setting.group(1) if setting else "parameter", primary)
        err.__cause__ = exc
        return err
    if cls is InvalidVectorError:
        # pgfunnel's SQL names the argument first, as in "query_embedding: has 385 ..."
        named = re.fullmatch(r"([a-z_]+): (.+)", primary, re.DOTALL)
        err = (InvalidVectorError(named.group(2), parameter=named.group(1)) if named
               else InvalidVectorError(primary))
        err.__cause__ = exc
        return err
    primary = _CONSTRAINT_MESSAGES.get(getattr(diag, "constraint_name", None) or "", primary)
    if sqlstate == "22P02" and primary.startswith("malformed array literal"):
        # principals => 'alice', or a text() query given one string or a tuple for it
        # (psycopg sends a tuple as a record, "(alice)"): Postgres' message named neither
        # the parameter nor what it takes
        primary += ARRAY_HINT
    if sqlstate == "42501" and primary == "permission denied for schema pgfunnel":
        # Postgres' bare refusal named neither the role's missing grant nor its fix
        primary += SCHEMA_GRANT_HINT
    sql_hint = getattr(diag, "message_hint", None)
    missing_collection = sqlstate == "P0002" and primary.startswith("collection ") \
        and primary.endswith(" does not exist")
    if missing_collection and sql_hint:
        # pgfunnel's SQL names the collections there are in the hint: the one line a
        # caller shows would otherwise only say what is missing. The hint names the forms
        # of psql's reader; this one called from Python, so its form is named first
        primary = f"{primary}; {sql_hint.replace(COLLECTION_FORMS_SQL, COLLECTION_FORMS)}"
        # the ingest it suggests, into the collection asked for, as Python's own lookup
        # words it: the SQL hint names the name quoted as shlex quotes it, or NAME (an
        # older release's functions, and a name its check refuses)
        named = _MISSING_COLLECTION.match(primary)
        if named is not None:
            from pgfunnel.ingest import ingest_target

            name = named.group(1).replace("''", "'")
            tail = next((t for t in (_INGEST_PLACEHOLDER, _INGEST_INTO + shlex.quote(name))
                         if primary.endswith(t)), None)
            if tail is not None:
                primary = primary[:-len(tail)] + _INGEST_INTO + ingest_target(name)
    # a collection that does not exist, or has no active index version to search (pgfunnel's
    # SQL says either under no_data_found): the argument that named it, as a caller tells
    # its arguments apart by
    versionless = sqlstate == "P0002" and primary.startswith("collection ") \
        and primary.endswith(" has no active index version")
    err = (NotFoundError(primary, parameter="collection")
           if missing_collection or versionless else cls(primary))
    err.__cause__ = exc
    return err
