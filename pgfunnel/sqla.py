"""SQLAlchemy 2 access to the funnel: ``funnel_search`` as a typed table-valued function.

>>> from sqlalchemy import select
>>> from pgfunnel.models import Document
>>> from pgfunnel.sqla import funnel_search_tvf
>>> fs = funnel_search_tvf("refund annual plan", vector, k=5, principals=["alice"])
>>> stmt = (select(fs.c.final_rank, fs.c.citekey, Document.language)
...         .join(Document, Document.citekey == fs.c.citekey)
...         .order_by(fs.c.final_rank))

The function is called with named arguments (``k => 5``), so only the parameters you
pass appear in the SQL and the rest keep the SQL defaults. Every value is a bound
parameter; parameter *names* are checked against the function's signature, never
interpolated from user input. Values may also be SQL expressions (e.g. a column of
another table inside a ``lateral`` join).

The result columns are typed (``chunk_id`` BigInteger, ``metadata`` JSONB, scores
Float, ...) so joins and comparisons with the application's own tables type-check.
Vectors go through pgvector's SQLAlchemy ``Vector`` type.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import psycopg
from pgvector.sqlalchemy import Vector
from sqlalchemy import (
    BigInteger,
    Boolean,
    DateTime,
    Engine,
    Float,
    Integer,
    Text,
    cast,
    column,
    create_engine,
    func,
    literal,
    null,
    select,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ClauseElement, ColumnElement
from sqlalchemy.sql.selectable import Select, TableValuedAlias
from sqlalchemy.sql.visitors import InternalTraversal
from sqlalchemy.types import TypeEngine

from pgfunnel.embedder import check_vector
from pgfunnel.errors import ConfigError, MissingIdentityError
from pgfunnel.search import SearchParams, check_principals, check_query_text

if TYPE_CHECKING:  # greenlet (the web extra) is needed only to use an async engine
    from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = [
    "FUNNEL_SEARCH_COLUMNS",
    "FUNNEL_SEARCH_PARAMETERS",
    "async_engine_from_dsn",
    "engine_from_dsn",
    "funnel_search_tvf",
    "identity_statement",
    "named_arg",
]

#: result columns of ``pgfunnel.funnel_search`` with their SQLAlchemy types, in order
FUNNEL_SEARCH_COLUMNS: tuple[tuple[str, TypeEngine[Any]], ...] = (
    ("chunk_id", BigInteger()),
    ("citekey", Text()),
    ("title", Text()),
    ("heading", Text()),
    ("text", Text()),
    ("ordinal", Integer()),
    ("metadata", JSONB()),
    ("lexical_rank", Integer()),
    ("lexical_score", Float()),
    ("dense_rank", Integer()),
    ("dense_score", Float()),
    ("fused_rank", Integer()),
    ("fused_score", Float()),
    ("rerank_rank", Integer()),
    ("rerank_score", Float()),
    ("final_rank", Integer()),
    ("search_id", BigInteger()),
    ("section_path", Text()),
)

#: parameters of ``pgfunnel.funnel_search`` (besides query_text/query_embedding) and types
FUNNEL_SEARCH_PARAMETERS: dict[str, TypeEngine[Any]] = {
    "k": Integer(),
    "collection": Text(),
    "principals": ARRAY(Text()),
    "tenant": Text(),
    "language": Text(),
    "as_of": DateTime(timezone=True),
    "metadata_filter": JSONB(),
    "fusion": Text(),
    "rrf_k": Float(),
    "weights": ARRAY(Float()),
    "lexical_depth": Integer(),
    "dense_depth": Integer(),
    "overfetch": Integer(),
    "per_source_cap": Integer(),
    "ef_search": Integer(),
    "k1": Float(),
    "b": Float(),
    "trace": Boolean(),
}


class named_arg(ColumnElement[Any]):  # noqa: N801 - reads like SQL, as func.* does
    """``name => value``: a named argument in a SQL function call."""

    __visit_name__ = "pgfunnel_named_arg"
    inherit_cache = True
    _traverse_internals = [
        ("name", InternalTraversal.dp_string),
        ("value", InternalTraversal.dp_clauseelement),
    ]

    def __init__(self, name: str, value: ColumnElement[Any]) -> None:
        if not name.isidentifier() or not name.islower():
            # the name is spliced into SQL text, so it must be a plain identifier
            raise ConfigError("name", f"not a valid parameter name: {name!r}")
        self.name = name
        self.value = value
        self.type = value.type


@compiles(named_arg)
def _compile_named_arg(element: named_arg, compiler: SQLCompiler, **kw: Any) -> str:
    return f"{element.name} => {compiler.process(element.value, **kw)}"


def _bind(name: str, value: Any, type_: TypeEngine[Any]) -> ColumnElement[Any]:
    if isinstance(value, ClauseElement):
        return value  # type: ignore[return-value]
    if value is None:
        # SQL NULL (the JSON types would otherwise bind None as the JSON value 'null')
        return cast(null(), type_)
    # an explicit cast pins the overloaded/defaulted parameter's type for the planner
    return cast(literal(value, type_), type_)


def funnel_search_tvf(query_text: Any, query_embedding: Any = None, *,
                      name: str = "fs", **params: Any) -> TableValuedAlias:
    """``pgfunnel.funnel_search(...)`` as a table-valued function usable in ``select()``.

    ``query_embedding`` is a sequence/ndarray of floats (bound as pgvector ``Vector``),
    a SQL expression, or None (text only). ``params`` are funnel_search's named
    parameters (``k``, ``principals``, ``collection``, ``metadata_filter``, ...), a
    None among them left to its SQL default;
    ``principals`` is required because NULL/absent identity must never mean "everyone"
    (pass ``[]`` for public documents only). ``name`` is the alias in the FROM clause.
    With ``trace=True`` the trace rows are written in the caller's transaction: a
    Session must commit to keep them (``with Session(engine)`` otherwise rolls back).
    """
    # None leaves a parameter to its SQL default (sending NULL refused k, fusion, trace
    # and the rest; Funnel.search refuses None for those); principals=None is refused below
    params = {key: value for key, value in params.items()
              if value is not None or key == "principals"}
    unknown = sorted(set(params) - set(FUNNEL_SEARCH_PARAMETERS))
    if "statement_timeout_ms" in unknown:
        # a SearchParams field (Funnel.search sets statement_timeout for its transaction),
        # not an argument of the SQL function: "unknown" did not say how to get the limit
        raise ConfigError("statement_timeout_ms", "is Funnel.search's, not a funnel_search "
                          "parameter: set the limit in the session's transaction before the "
                          "search, session.execute(select(func.set_config("
                          "'statement_timeout', '500', True))) (SET LOCAL statement_timeout "
                          "= 500); a search that runs past it raises DBAPIError, which "
                          "pgfunnel.errors.translate makes a SearchTimeoutError")
    if unknown:
        raise ConfigError(unknown[0], "unknown funnel_search parameter (known: "
                          f"{', '.join(FUNNEL_SEARCH_PARAMETERS)})")
    if "principals" not in params or params["principals"] is None:
        raise MissingIdentityError("is required; pass [] for public documents only")
    # values given as Python values are checked as Funnel.search checks them (types, the
    # ranges SQL's integers take, text Postgres can hold), and bound as it binds them: a
    # float k used to be rounded by the driver, "1,2" as weights failed in float()
    plain = {key: value for key, value in params.items()
             if not isinstance(value, ClauseElement) and key != "metadata_filter"}
    checked = SearchParams.build(**plain)
    if isinstance(params.get("metadata_filter"), Mapping):
        SearchParams.build(metadata_filter=params["metadata_filter"])
    if query_text is not None and not isinstance(query_text, ClauseElement):
        check_query_text(query_text)
    args: list[ColumnElement[Any]] = [named_arg("query_text", _bind("query_text", query_text,
                                                                     Text()))]
    if query_embedding is not None:
        if isinstance(query_embedding, ClauseElement):
            emb: ColumnElement[Any] = query_embedding  # type: ignore[assignment]
        else:
            values = [float(x) for x in check_vector(query_embedding)]
            emb = cast(literal(values, Vector(len(values))), Vector(len(values)))
        args.append(named_arg("query_embedding", emb))
    for key, value in params.items():
        if key in plain:
            value = getattr(checked, key)
            if isinstance(value, tuple):
                value = list(value)
        args.append(named_arg(key, _bind(key, value, FUNNEL_SEARCH_PARAMETERS[key])))
    fn = func.pgfunnel.funnel_search(*args)
    return fn.table_valued(*(column(n, t) for n, t in FUNNEL_SEARCH_COLUMNS), name=name)


def identity_statement(principals: Sequence[str], tenant: str | None = None) -> Select[Any]:
    """``select set_config('pgfunnel.principals', ..., true), ...`` for the current
    transaction: what row-level security (``pgfunnel init --rls``) reads. Execute it in
    the same transaction as the search; being transaction-local, a pooled connection
    carries nothing to the next request. It also clears ``pgfunnel.last_search_id()``,
    which is session-wide (as ``lastval()``): after it, that reads NULL until this
    request's own traced search, never an earlier request's id on the same pooled
    connection. ``tenant`` is checked as a search's is (``""`` also means none, as in
    the setting)."""
    if tenant is not None and tenant != "":
        # a NUL or a number reached the driver unnamed, as a DataError or a missing
        # set_config(text, integer, boolean)
        tenant = SearchParams.build(tenant=tenant).tenant
    return select(
        func.set_config("pgfunnel.principals", json.dumps(list(check_principals(principals))),
                        True),
        func.set_config("pgfunnel.tenant", tenant or "", True),
        # session-wide as final() sets it: a rollback of this request puts it back
        func.set_config("pgfunnel.last_search_id", "", False),
    )


def _connect_args(engine_kwargs: dict[str, Any]) -> dict[str, Any]:
    """``connect_args`` taken out of ``engine_kwargs``, for the driver's connect. SQLAlchemy
    hands them to the dialect's connect, which a ``creator`` replaces: they were dropped
    without a word (``prepare_threshold=None`` behind PgBouncer, ``application_name``)."""
    given = engine_kwargs.pop("connect_args", None)
    if given is None:
        given = {}
    if not isinstance(given, Mapping) or not all(isinstance(k, str) for k in given):
        raise ConfigError("connect_args", "must be a mapping of psycopg.connect keyword "
                          f"arguments, got {type(given).__name__}")
    if "autocommit" in given:
        # the engine's isolation_level says it; a creator's autocommit would confuse it
        raise ConfigError("connect_args", "autocommit is not taken here; use "
                          "isolation_level='AUTOCOMMIT' on the engine")
    args = dict(given)
    args.setdefault("connect_timeout", 10)
    if "prepare_threshold" not in args:
        # as pgfunnel.db.connect reads it: the async engine's connections do not go
        # through that function, and behind a transaction pooler kept preparing
        from pgfunnel.db import prepare_threshold_setting

        set_here, threshold = prepare_threshold_setting()
        if set_here:
            args["prepare_threshold"] = threshold
    return args


def async_engine_from_dsn(dsn: Any = None, **engine_kwargs: Any) -> AsyncEngine:
    """An asyncio SQLAlchemy engine (psycopg 3's async driver) for a pgfunnel DSN, as
    :func:`engine_from_dsn` takes it. Needs ``greenlet`` (the ``web`` extra). A connection
    that fails is a pgfunnel error, as from :func:`engine_from_dsn`, and
    ``connect_args`` go to ``psycopg.AsyncConnection.connect`` as they go to its.
    :func:`funnel_search_tvf` and :func:`identity_statement` build plain statements, so
    ``await session.execute(...)`` runs them; the query vector is bound through
    pgvector's SQLAlchemy type, which needs no adapter on the connection."""
    from sqlalchemy.ext.asyncio import create_async_engine

    from pgfunnel.db import connect_error, resolve_dsn

    target = resolve_dsn(dsn)
    connect_args = _connect_args(engine_kwargs)

    async def creator() -> psycopg.AsyncConnection[Any]:
        try:
            conn = await psycopg.AsyncConnection.connect(target, **connect_args)
        except (psycopg.OperationalError, psycopg.ProgrammingError) as exc:
            # as engine_from_dsn's: a pgfunnel error, the password redacted
            raise connect_error(target, exc) from exc
        # pgvector's adapters, as db.connect registers them on the sync engine's: a numpy
        # vector bound in a hand-written text() query could not be adapted without them
        from pgvector.psycopg import register_vector_async

        try:
            await register_vector_async(conn)
        except psycopg.ProgrammingError:
            pass  # no vector extension yet (before `pgfunnel init`)
        except BaseException:
            await conn.close()
            raise
        return conn

    engine_kwargs.setdefault("pool_pre_ping", True)
    return create_async_engine("postgresql+psycopg://", async_creator=creator, **engine_kwargs)


def engine_from_dsn(dsn: Any = None, **engine_kwargs: Any) -> Engine:
    """A SQLAlchemy engine (psycopg 3 driver) for a pgfunnel DSN.

    ``dsn`` may be a URL or a ``key=value`` conninfo string, or a SQLAlchemy URL
    (``postgresql+psycopg://...``, as a string or ``sqlalchemy.URL``; None: PGFUNNEL_DSN,
    then the embedded server). Connections are opened by :func:`pgfunnel.db.connect`, so pgvector
    adapters are registered and connection errors are pgfunnel errors. ``connect_args``
    (SQLAlchemy's name) go to ``psycopg.connect``: ``{"prepare_threshold": None}`` behind
    a transaction pooler, ``application_name``, ``connect_timeout`` (10 by default).
    """
    from pgfunnel.db import connect, resolve_dsn

    target = resolve_dsn(dsn)
    connect_args = _connect_args(engine_kwargs)

    def creator() -> psycopg.Connection[Any]:
        return connect(target, **connect_args)

    factory: Callable[[], Any] = creator
    engine_kwargs.setdefault("pool_pre_ping", True)
    return create_engine("postgresql+psycopg://", creator=factory, **engine_kwargs)
