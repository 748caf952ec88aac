"""Index versions: build a new one beside the active one, validate, switch, roll back, compare.

A version is one build of a collection's dense and lexical index (embedding model,
dimensions, analyzer). Its life::

    building --validate--> ready --activate--> active --(another activated)--> retired
                                                 ^                              |
                                                 +---------- activate ----------+

* :func:`reindex` creates a version in state ``building`` (or resumes the one a killed
  run left), embeds and indexes every chunk that has no row in it yet, one committed
  batch at a time, builds its partial HNSW index with ``CREATE INDEX CONCURRENTLY``,
  validates it and marks it ``ready``. The active version serves searches throughout.
* :func:`activate` first embeds chunks ingested since the build (ingest writes only the
  active version), then switches in one transaction (``pgfunnel.activate_version``).
* :func:`rollback` activates the version the active one replaced.
* :func:`compare` runs the funnel pinned to each of two versions: inside a transaction
  that activates the version and is always rolled back, so nobody else ever sees it.

One writer per collection: :func:`reindex` holds a session advisory lock; a second one
fails at once with :class:`ConflictError` naming the holder.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import numbers
import shlex
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, ParamSpec, TypeVar

import numpy as np
import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from pgfunnel.db import (
    require_table_owner,
    require_writer,
    rows_by_position,
    try_register_vector,
    tuple_rows,
)
from pgfunnel.defaults import (
    EF_SEARCH,
    HNSW_EF_CONSTRUCTION,
    HNSW_EF_CONSTRUCTION_LEAST,
    HNSW_EF_CONSTRUCTION_MOST,
    HNSW_M,
    HNSW_M_LEAST,
    HNSW_M_MOST,
)
from pgfunnel.embedder import Embedder
from pgfunnel.errors import (
    JSON_ERRORS,
    AccessError,
    ConfigError,
    ConflictError,
    InvalidInputError,
    NotFoundError,
    PgfunnelError,
    check_sql_text,
    read_file_text,
    shown,
    translate,
)
from pgfunnel.ingest import (
    DEFAULT_ANALYZER,
    DEFAULT_HNSW_TYPE,
    POSTING_DETACH_LOCK,
    TermAnalyzer,
    active_version,
    collection_id,
    cosine_distance,
    create_hnsw_index,
    create_posting_index,
    create_version,
    drop_hnsw_index_concurrently,
    hnsw_index_name,
    hnsw_key,
    hnsw_type_of,
    index_build_session_lock,
    index_state,
    ingest_lock,
    posting_partition_name,
    refresh_hnsw_walks,
    refresh_stats_after_write,
    release_index_build_lock,
    require_collection,
    try_index_build_lock,
    version_hnsw_type,
    watch_index_build,
    write_chunk_index,
)
from pgfunnel.schema import require_current_schema, require_vector_schema
from pgfunnel.sources import (
    DEFAULT_EMBED_INPUT,
    DEFAULT_LEXICAL_INPUT,
    EMBED_TEXT_ALONE,
    check_embed_input,
    check_lexical_input,
    embedding_input,
    lexical_input,
    version_embed_input,
    version_lexical_input,
)

#: first key of the two-key advisory lock that serialises reindex per collection ("pgfu")
REINDEX_LOCK_CLASS = 0x70676675
DEFAULT_MODEL = "all-MiniLM-L6-v2"
MIN_RECALL = 0.95
RECALL_SAMPLE = 50
RECALL_K = 10
#: ef_search the validation uses: the funnel's own default, so recall is what searches get
VALIDATION_EF_SEARCH = EF_SEARCH

ProgressFn = Callable[[str, int, int | None], None]
NoticeFn = Callable[[str], None]


class ValidationFailed(PgfunnelError):
    """A version failed its checks (invalid index, counts, recall); it stays 'building'."""

    exit_code = 3


@dataclass
class VersionInfo:
    id: int
    version: int
    state: str
    embedding_model: str
    dimensions: int
    analyzer: str
    chunk_count: int
    created_at: Any
    activated_at: Any
    retired_at: Any
    params: dict[str, Any]
    index_name: str
    index_present: bool
    index_valid: bool
    index_bytes: int
    missing_chunks: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Validation:
    ok: bool
    index_valid: bool
    collection_chunks: int
    lexical_rows: int
    embedding_rows: int
    counted_chunks: int
    missing: int
    recall: float | None
    sample: int
    index_used: bool
    problems: list[str] = field(default_factory=list)


@dataclass
class ReindexResult:
    collection: str
    version: int
    version_id: int
    embedding_model: str
    dimensions: int
    analyzer: str
    resumed: bool
    chunks_before: int
    #: chunks the model embedded this run (a reindex that copies vectors embeds none)
    chunks_embedded: int
    state: str
    validation: Validation | None = None
    activated: bool = False
    replaced: int | None = None
    notices: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    #: chunks written into the version this run, embedded or with copied vectors
    chunks_indexed: int = 0
    #: of those, chunks whose vector was copied from an earlier version of the same model
    chunks_copied: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class VectorSources:
    """What a catch-up took its vectors from, counted across its calls."""

    embedded: int = 0
    copied: int = 0


@dataclass
class Activation:
    collection: str
    activated: int
    replaced: int | None
    caught_up: int
    #: the version's HNSW index was missing or invalid and was built before the switch
    index_built: bool = False
    #: it was the active version already: nothing changed
    already_active: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# -- helpers -------------------------------------------------------------------------

def as_array(value: Any) -> np.ndarray:
    """A fetched vector as float32 numpy (pgvector's adapter returns a Vector object)."""
    if hasattr(value, "to_numpy"):
        value = value.to_numpy()
    return np.asarray(value, dtype=np.float32)


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _translated(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """``fn`` whose database errors are PgfunnelErrors: the CLI reports those in one
    line, and any other error escaped it with a traceback."""
    @functools.wraps(fn)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return fn(*args, **kwargs)
        except psycopg.Error as exc:
            raise translate(exc, searching=False) from exc
    return wrapper


def _db(conn: psycopg.Connection[Any], fn: Callable[[], _R]) -> _R:
    """``fn()`` reading ``conn``'s rows by position, its database errors translated (a
    body too short for a function); a role refused the schema is told what gives it
    access in this database's mode."""
    from pgfunnel.security import schema_access_named

    with tuple_rows(conn), schema_access_named(conn):
        return _translated(fn)()


def _version_row(conn: psycopg.Connection[Any], coll_id: int, version: int,
                 parameter: str = "version") -> VersionInfo:
    if isinstance(version, bool) or not isinstance(version, numbers.Integral):
        # "1" (a number read from a file or a form) was "collection 'docs' has no index
        # version 1" while version 1 was there
        raise ConfigError(parameter, "must be a version number, an integer as `pgfunnel "
                          f"versions list` shows it, got {type(version).__name__} "
                          f"{shown(version)}")
    for info in _versions(conn, coll_id):
        if info.version == version:
            return info
    # named, since a version number forgotten with its -c is looked up in 'default'
    row = conn.execute("select name from pgfunnel.collection where id = %s",
                       (coll_id,)).fetchone()
    name = row[0] if row else str(coll_id)
    raise NotFoundError(f"collection {name!r} has no index version {version} "
                        f"(`pgfunnel versions list -c {shlex.quote(name)}` shows them)",
                        parameter=parameter)


def _versions(conn: psycopg.Connection[Any], coll_id: int) -> list[VersionInfo]:
    rows = conn.execute(
        "select v.id, v.version, v.state, v.embedding_model, v.dimensions, v.analyzer, "
        "       v.chunk_count, v.created_at, v.activated_at, v.retired_at, v.params, "
        "       i.index_name, i.present, i.valid, i.size_bytes, c.missing "
        "from pgfunnel.index_version v, pgfunnel.version_index(v.id) i, "
        "     pgfunnel.version_coverage(v.id) c "
        "where v.collection_id = %s order by v.version", (coll_id,)).fetchall()
    return [VersionInfo(*r) for r in rows]


def list_versions(conn: psycopg.Connection[Any], collection: str) -> list[VersionInfo]:
    """Every version of a collection with its index state and how many chunks it misses."""
    return list(_db(conn, lambda: _versions(conn, require_collection(conn, collection))))


def _lock_key(coll_id: int) -> tuple[int, int]:
    return REINDEX_LOCK_CLASS, coll_id


@rows_by_position
def lock_holder(conn: psycopg.Connection[Any], coll_id: int) -> dict[str, Any] | None:
    """Who holds the reindex lock of a collection: pid, application_name, since."""
    k1, k2 = _lock_key(coll_id)
    row = conn.execute(
        "select a.pid, a.application_name, a.backend_start, a.client_addr::text, a.state "
        "from pg_locks l join pg_stat_activity a on a.pid = l.pid "
        "where l.locktype = 'advisory' and l.granted and l.classid = %s::oid "
        "  and l.objid = %s::oid and l.objsubid = 2 and l.database = "
        "      (select oid from pg_database where datname = current_database())",
        (k1, k2)).fetchone()
    if row is None:
        return None
    return {"pid": row[0], "application_name": row[1], "since": row[2], "client_addr": row[3],
            "state": row[4]}


@contextmanager
def writer_lock(conn: psycopg.Connection[Any], collection: str) -> Iterator[int]:
    """Hold the collection's reindex lock (session-scoped), or fail at once naming the holder."""
    def take() -> tuple[int, bool]:
        coll_id = require_collection(conn, collection)
        got = conn.execute("select pg_catalog.pg_try_advisory_lock(%s::integer, %s::integer)",
                           _lock_key(coll_id)).fetchone()
        return coll_id, bool(got and got[0])

    # the caller's block runs with its own row factory; only the lock's own reads by
    # position. A role refused the schema got psycopg's InsufficientPrivilege, where the
    # rest of the API raises an AccessError naming what gives it access in this mode
    coll_id, got = _db(conn, take)
    k1, k2 = _lock_key(coll_id)
    if not got:
        holder = lock_holder(conn, coll_id)
        # the name quoted: the CLI gives each `pgfunnel <command>` of a message the -c and
        # --dsn typed, and a bare "pgfunnel reindex docs" read "pgfunnel reindex -c docs docs"
        who = "an unknown session"
        if holder is not None:
            name = holder["application_name"]
            named = f"application_name {name!r}" if name else "no application_name"
            who = (f"pid {holder['pid']} ({named}, "
                   f"connected since {holder['since']:%Y-%m-%d %H:%M:%S %Z})")
        raise ConflictError(
            f"collection {collection!r}: another reindex (or version drop) is running, held "
            f"by {who}; wait for it, or end it with pg_terminate_backend(pid) if it is stuck")
    try:
        yield coll_id
    finally:
        if not conn.closed:
            conn.execute("select pg_catalog.pg_advisory_unlock(%s::integer, %s::integer)", (k1, k2))


def name_session(conn: psycopg.Connection[Any], what: str) -> None:
    """Name the session that will hold the writer lock (a second writer's error names it),
    and have its backend notice within seconds that a killed CLI is gone: a DROP INDEX
    CONCURRENTLY or a build waiting on old transactions held the lock until they ended."""
    # as Postgres keeps an application_name (printable ASCII, '?' for any other
    # character), so a collection name the driver cannot send (a lone surrogate from an
    # undecodable command line, a NUL) is refused by the check that names its flag, not here
    shown = "".join(c if " " <= c <= "~" else "?" for c in what)
    conn.execute("select set_config('application_name', %s, false)", (shown[:63],))
    with suppress(psycopg.Error):
        conn.execute("set client_connection_check_interval = '2s'")


class _PendingChunk(NamedTuple):
    """A chunk a version has not indexed yet, with what its embedding input is made of."""

    id: int
    text: str
    title: str
    section_path: str
    heading_level: int


def _missing_chunks(conn: psycopg.Connection[Any], coll_id: int, version_id: int,
                    limit: int | None = None) -> list[_PendingChunk]:
    """The chunks the version has not indexed yet, in id order."""
    rows = conn.execute(
        "select c.id, c.text, d.title, c.section_path, c.heading_level from pgfunnel.chunk c "
        "join pgfunnel.document d on d.id = c.document_id where c.collection_id = %s "
        "and not exists (select 1 from pgfunnel.lexical l "
        "                where l.index_version_id = %s and l.chunk_id = c.id) "
        "order by c.id limit %s", (coll_id, version_id, limit)).fetchall()
    return [_PendingChunk(int(a), str(b), str(t), str(p), int(lv)) for a, b, t, p, lv in rows]


def _batch_vectors(conn: psycopg.Connection[Any], embedder: Embedder | Callable[[], Embedder],
                   batch: list[_PendingChunk], reuse_from: tuple[int, str] | None,
                   embed_input: str, sources: VectorSources | None = None) -> list[np.ndarray]:
    """A vector for each chunk of a batch: copied from ``reuse_from`` (the id and embedding
    input of a version made with the same model, so an analyzer-only reindex costs no
    model time) where that version embedded the same text for the chunk, else from the
    model."""
    found: dict[int, np.ndarray] = {}
    if reuse_from is not None:
        source_id, source_input = reuse_from
        # a version that embedded another input holds vectors of other text, except for
        # the chunks where both inputs come out the same (no section path, say)
        same = {ch.id for ch in batch
                if source_input == embed_input or
                embedding_input(ch.title, ch.text, source_input, ch.section_path)
                == embedding_input(ch.title, ch.text, embed_input, ch.section_path)}
        if same:
            found = {int(c): as_array(v) for c, v in conn.execute(
                "select chunk_id, embedding from pgfunnel.embedding "
                "where index_version_id = %s and chunk_id = any(%s)",
                (source_id, list(same))).fetchall()}
    todo = [i for i, ch in enumerate(batch) if ch.id not in found]
    vectors: list[np.ndarray | None] = [found.get(ch.id) for ch in batch]
    if todo:
        model = embedder() if callable(embedder) and not isinstance(embedder, Embedder) \
            else embedder
        texts = [embedding_input(batch[i].title, batch[i].text, embed_input,
                                 batch[i].section_path) for i in todo]
        for i, vec in zip(todo, model.embed(texts), strict=True):
            vectors[i] = vec
    if sources is not None:
        sources.embedded += len(todo)
        sources.copied += len(batch) - len(todo)
    complete: list[np.ndarray] = []
    for vector in vectors:
        if vector is None:
            raise PgfunnelError("internal: a chunk of the batch got no vector")
        complete.append(vector)
    return complete


def _index_batch(conn: psycopg.Connection[Any], version_id: int, analyzer: TermAnalyzer,
                 batch: list[_PendingChunk], vectors: list[np.ndarray],
                 lexical_mode: str) -> int:
    """Index a batch of chunks with their vectors into a version, in the caller's
    transaction; returns how many were written."""
    # one catch-up of a version writes at a time: two (two activations of it, or one and
    # a `versions compare`) read the same chunks as missing, and the second failed on
    # the first's rows ("duplicate key value violates unique constraint")
    conn.execute("select pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext(%s))",
                 (f"pgfunnel:catch-up:{version_id}",))
    # a chunk deleted (re-ingested) meanwhile must not be written, nor one that another
    # catch-up wrote meanwhile; the ones still there are locked against deletion until
    # this batch commits
    alive = {int(r[0]) for r in conn.execute(
        "select c.id from pgfunnel.chunk c where c.id = any(%s) and not exists (select 1 "
        "from pgfunnel.lexical l where l.index_version_id = %s and l.chunk_id = c.id) "
        "for key share of c", ([ch.id for ch in batch], version_id)).fetchall()}
    keep = [i for i, ch in enumerate(batch) if ch.id in alive]
    if not keep:
        return 0
    write_chunk_index(conn, version_id, analyzer, [batch[i].id for i in keep],
                      [lexical_input(batch[i].title, batch[i].text, lexical_mode,
                                     batch[i].heading_level)
                       for i in keep],
                      np.stack([vectors[i] for i in keep]))
    return len(keep)


@rows_by_position
def catch_up(conn: psycopg.Connection[Any], coll_id: int, version_id: int,
             embedder: Embedder | None = None, analyzer: str | None = None,
             batch_size: int = 256, progress: ProgressFn | None = None,
             in_transaction: bool = False, reuse_from: int | None = None,
             sources: VectorSources | None = None) -> int:
    """Embed and index every chunk of the collection the version lacks; returns how many
    (``sources`` counts how many vectors the model made and how many were copied).

    With ``in_transaction`` the caller's transaction holds everything (used right before a
    switch, under the ingest lock); otherwise each batch commits on its own, so a killed
    run keeps what it finished.
    """
    # vectors copied from another version come back as numpy only with pgvector's types
    # registered; an application's own connection may not have them
    try_register_vector(conn)
    row = conn.execute("select embedding_model, analyzer, dimensions, params "
                       "from pgfunnel.index_version where id = %s", (version_id,)).fetchone()
    assert row is not None
    embed_input = version_embed_input(row[3] or {})
    lexical_mode = version_lexical_input(row[3] or {})
    # the version copied from and what it embedded, read once for every batch
    source: tuple[int, str] | None = None
    if reuse_from is not None:
        params = conn.execute("select params from pgfunnel.index_version where id = %s",
                              (reuse_from,)).fetchone()
        source = (reuse_from, version_embed_input(params[0] if params and params[0] else {}))
    done = 0
    term_analyzer = TermAnalyzer(conn, analyzer or str(row[1]))
    loaded: list[Embedder] = [embedder] if embedder is not None else []

    def model() -> Embedder:
        # loaded on first need: a reindex that reuses vectors may never need the model
        if not loaded:
            loaded.append(Embedder(str(row[0])))
        if loaded[0].dimensions != int(row[2]):
            raise InvalidInputError(
                f"embedding_model: {loaded[0].model_name!r} makes {loaded[0].dimensions}-dim "
                f"vectors but the version has {row[2]} dimensions")
        return loaded[0]

    while True:
        batch = _missing_chunks(conn, coll_id, version_id, batch_size)
        if not batch:
            return done
        # the model runs before the batch's transaction opens: minutes idle in a
        # transaction are what managed Postgres and poolers end
        # (idle_in_transaction_session_timeout). In the caller's transaction (right before
        # a switch) the chunks left are the few ingested since the catch-up before it.
        counts = VectorSources()
        vectors = _batch_vectors(conn, model, batch, source, embed_input, counts)
        if sources is not None:
            sources.embedded += counts.embedded
            sources.copied += counts.copied
        if progress is not None:
            # said before the batch's "embedding": a progress display names what it is
            # doing (a reindex whose every vector was copied showed "embedding chunks")
            if counts.copied:
                progress("copied", counts.copied, None)
            progress("embedding", len(batch), None)
        if in_transaction:
            done += _index_batch(conn, version_id, term_analyzer, batch, vectors,
                                     lexical_mode)
        else:
            with conn.transaction():
                done += _index_batch(conn, version_id, term_analyzer, batch, vectors,
                                     lexical_mode)


@rows_by_position
def cleanup_invalid_indexes(conn: psycopg.Connection[Any]) -> list[str]:
    """Drop the invalid HNSW indexes a killed concurrent build left in schema pgfunnel.

    An index that another session is building concurrently is invalid too, until its
    build ends: its builder holds the index's build lock, so it is left alone (dropping
    it waited for the build to finish and then removed the finished graph of another
    collection's reindex or activation)."""
    names = [str(r[0]) for r in conn.execute(
        "select c.relname from pg_index i join pg_class c on c.oid = i.indexrelid "
        "where c.relnamespace = 'pgfunnel'::regnamespace "
        "and c.relname like 'embedding\\_hnsw\\_v%%' "
        "and not (i.indisvalid and i.indisready)").fetchall()]
    dropped = []
    for name in names:
        if not try_index_build_lock(conn, name):
            continue
        try:
            # the build may have ended (valid) between the list and the lock
            if index_state(conn, name) is False:
                # concurrently: the drop must not block searches on the embedding table
                drop_hnsw_index_concurrently(conn, name)
                dropped.append(name)
        finally:
            release_index_build_lock(conn, name)
    return dropped


def _set_maintenance_work_mem(conn: psycopg.Connection[Any], value: str | None) -> None:
    if value is None:
        return
    check_sql_text("maintenance_work_mem", value)
    try:
        conn.execute("select set_config('maintenance_work_mem', %s, false)", (value,))
    except psycopg.Error as exc:
        raise ConfigError("maintenance_work_mem",
                          f"{value!r} is not a valid memory size (e.g. 256MB, 2GB): "
                          f"{getattr(exc.diag, 'message_primary', exc)}") from exc


def check_hnsw_settings(m: int, ef_construction: int) -> None:
    """An HNSW graph's ``m`` and ``ef_construction`` within pgvector's bounds
    (pgfunnel.defaults), else a ConfigError naming the setting: pgvector checks them only
    when the graph is built, after every chunk was embedded."""
    if not HNSW_M_LEAST <= m <= HNSW_M_MOST:
        raise ConfigError("m", f"must be between {HNSW_M_LEAST} and {HNSW_M_MOST}, got {m}")
    if not HNSW_EF_CONSTRUCTION_LEAST <= ef_construction <= HNSW_EF_CONSTRUCTION_MOST:
        raise ConfigError("ef_construction", f"must be between {HNSW_EF_CONSTRUCTION_LEAST} "
                                             f"and {HNSW_EF_CONSTRUCTION_MOST}, got "
                                             f"{ef_construction}")
    if ef_construction < 2 * m:
        raise ConfigError("ef_construction", f"must be at least 2 x m ({2 * m} for m {m}), "
                                             f"got {ef_construction}")


@rows_by_position
def build_index(conn: psycopg.Connection[Any], version_id: int, dimensions: int, *,
                m: int = HNSW_M, ef_construction: int = HNSW_EF_CONSTRUCTION,
                maintenance_work_mem: str | None = None,
                progress: ProgressFn | None = None, notice: NoticeFn | None = None,
                chunks: int | None = None) -> list[str]:
    """Build the version's partial HNSW index concurrently; returns the server's notices.

    ``conn`` must be in autocommit mode (CREATE INDEX CONCURRENTLY cannot run in a
    transaction). Progress comes from pg_stat_progress_create_index, read on a second
    connection while the build runs, between a report of 0 of ``chunks`` before it and
    of ``chunks`` after it (as an ingest's build reports): a build quicker than a poll
    was never shown, in a log or on a terminal.
    """
    if not conn.autocommit:
        raise ConfigError("conn", "building an index concurrently needs an autocommit connection")
    _set_maintenance_work_mem(conn, maintenance_work_mem)
    notices: list[str] = []

    def on_notice(diag: psycopg.errors.Diagnostic) -> None:
        text = str(diag.message_primary or "")
        for extra in (diag.message_detail, diag.message_hint):
            if extra:
                text += f" ({extra})"
        notices.append(text)
        if notice is not None:
            notice(text)

    report = (None if progress is None
              else lambda n, total: progress("index", n, total))
    conn.add_notice_handler(on_notice)
    if report is not None:
        report(0, chunks)
    try:
        with watch_index_build(conn, report):
            # an explicit maintenance_work_mem is the caller's to keep, even when small
            create_hnsw_index(conn, version_id, dimensions, concurrently=True, m=m,
                              ef_construction=ef_construction,
                              size_memory=maintenance_work_mem is None)
    except psycopg.Error as exc:
        raise translate(exc, searching=False) from exc
    finally:
        conn.remove_notice_handler(on_notice)
    if report is not None:
        report(chunks or 0, chunks)
    return notices


@rows_by_position
def validate(conn: psycopg.Connection[Any], version_id: int, *, sample: int = RECALL_SAMPLE,
             k: int = RECALL_K, min_recall: float = MIN_RECALL,
             ef_search: int = VALIDATION_EF_SEARCH) -> Validation:
    """Index valid, counts equal to the chunks, HNSW recall@k vs an exact scan >= min_recall.

    The queries are the vectors of a fixed sample of the version's own chunks. A HNSW
    result counts as found when its distance is within the exact k-th distance (ties
    between equal vectors are not misses).
    """
    cov = conn.execute("select * from pgfunnel.version_coverage(%s)", (version_id,)).fetchone()
    idx = conn.execute("select * from pgfunnel.version_index(%s)", (version_id,)).fetchone()
    dims_row = conn.execute("select dimensions from pgfunnel.index_version where id = %s",
                            (version_id,)).fetchone()
    assert cov is not None and idx is not None and dims_row is not None
    dims = int(dims_row[0])
    v = Validation(ok=False, index_valid=bool(idx[2]), collection_chunks=int(cov[0]),
                   lexical_rows=int(cov[1]), embedding_rows=int(cov[2]),
                   counted_chunks=int(cov[3]), missing=int(cov[4]), recall=None, sample=0,
                   index_used=False)
    if not v.index_valid:
        v.problems.append(f"index {idx[0]} is {'invalid' if idx[1] else 'missing'}")
    if v.missing or len({v.collection_chunks, v.lexical_rows, v.embedding_rows,
                         v.counted_chunks}) != 1:
        v.problems.append(
            f"counts differ: {v.collection_chunks} chunks, {v.lexical_rows} lexical rows, "
            f"{v.embedding_rows} embeddings, chunk_count {v.counted_chunks}, "
            f"{v.missing} chunks missing")
    if v.index_valid and v.embedding_rows:
        v.recall, v.sample, v.index_used = _recall(conn, version_id, dims, sample, k, ef_search)
        if not v.index_used:
            v.problems.append("the HNSW index was not used by the recall probe")
        if v.recall < min_recall:
            v.problems.append(f"HNSW recall@{k} {v.recall:.3f} < {min_recall} "
                              f"on {v.sample} sample queries (raise ef_construction or m)")
    v.ok = not v.problems
    return v


def _recall(conn: psycopg.Connection[Any], version_id: int, dims: int, sample: int, k: int,
            ef_search: int) -> tuple[float, int, bool]:
    probes = conn.execute(
        "select embedding from pgfunnel.embedding where index_version_id = %s "
        "order by hashint8(chunk_id), chunk_id limit %s", (version_id, sample)).fetchall()
    # ranked by the graph's own type, scored on the stored vectors as the dense leg does
    hnsw_type = hnsw_type_of(conn, version_id)
    vschema = require_vector_schema(conn)
    distance = cosine_distance(vschema)
    ann = sql.SQL(
        "select embedding {d} %(q)s from pgfunnel.embedding where index_version_id = {v} "
        "order by {key} {d} {query} limit {k}"
    ).format(v=sql.Literal(version_id), k=sql.Literal(k), d=distance,
             key=hnsw_key(hnsw_type, dims, sql.Identifier("embedding"), vschema),
             query=hnsw_key(hnsw_type, dims, sql.Placeholder("q"), vschema))
    exact = sql.SQL(
        "select embedding {d} %(q)s from pgfunnel.embedding where index_version_id = {v} "
        "order by 1 limit {k}").format(v=sql.Literal(version_id), k=sql.Literal(k),
                                        d=distance)
    total = 0.0
    with conn.transaction(force_rollback=True):
        conn.execute("select set_config('hnsw.ef_search', %s, true), "
                     "set_config('hnsw.iterative_scan', 'off', true)", (str(ef_search),))
        # a small version's primary key scan plus a sort can look cheaper than the graph
        # to the planner; the probe checks that the graph answers, so it rules both out
        conn.execute("set local enable_seqscan = off")
        conn.execute("set local enable_bitmapscan = off")
        conn.execute("set local enable_sort = off")
        plan = conn.execute(sql.SQL("explain (format json) ") + ann,
                            {"q": probes[0][0]}).fetchone()
        used = plan is not None and hnsw_index_name(version_id) in json.dumps(plan[0])
        ann_dists = [[float(r[0]) for r in conn.execute(ann, {"q": p[0]}).fetchall()]
                     for p in probes]
        conn.execute("set local enable_indexscan = off")
        conn.execute("set local enable_seqscan = on")
        conn.execute("set local enable_sort = on")
        for p, got in zip(probes, ann_dists, strict=True):
            truth = [float(r[0]) for r in conn.execute(exact, {"q": p[0]}).fetchall()]
            if not truth:
                continue
            bound = truth[-1] + 1e-6
            total += min(sum(1 for d in got if d <= bound), len(truth)) / len(truth)
    return (total / len(probes) if probes else 1.0), len(probes), used


# -- reindex -------------------------------------------------------------------------

@rows_by_position
def building_version(conn: psycopg.Connection[Any], collection: str) -> int | None:
    """The number of ``collection``'s version being built (state 'building'; at most one),
    or None."""
    row = conn.execute(
        "select v.version from pgfunnel.index_version v join pgfunnel.collection c "
        "on c.id = v.collection_id where c.name = %s and v.state = 'building'",
        (collection,)).fetchone()
    return int(row[0]) if row else None


def _building_version(conn: psycopg.Connection[Any], coll_id: int) -> VersionInfo | None:
    for info in _versions(conn, coll_id):
        if info.state == "building":
            return info
    return None


def _detach_posting_partition(conn: psycopg.Connection[Any], version_id: int) -> None:
    """Detach a version's posting partition from ``pgfunnel.posting`` concurrently.

    ``posting`` is shared by every collection: dropping an attached partition takes an
    ACCESS EXCLUSIVE lock on it, which waits for every open transaction that read or wrote
    any collection's postings, and every search and ingest of every collection queued
    behind it meanwhile. DETACH ... CONCURRENTLY takes a lock that searches and writes
    pass, and waits for them instead. A detach cut short leaves the partition pending;
    it is finished here (FINALIZE) on the next try. Postgres holds one partition of a
    table pending detach at a time, and refused a second collection's drop meanwhile
    ("already pending detach"): drops take turns on :data:`POSTING_DETACH_LOCK`, polled
    outside any transaction. Autocommit connection."""
    with index_build_session_lock(conn, POSTING_DETACH_LOCK):
        _detach_in_turn(conn, version_id)


def _detach_in_turn(conn: psycopg.Connection[Any], version_id: int) -> None:
    # Every detach runs under the lock held here, so a partition found pending is one a
    # drop cut short left (Ctrl-C, a lost connection): finished first, or this drop
    # would fail on it ('already pending detach'), and every other collection's with it,
    # until that version's drop ran again. Its version stays marked as being dropped, and
    # running its drop again removes the table and rows.
    for (other,) in conn.execute(
            "select c.relname from pg_catalog.pg_inherits i "
            "join pg_catalog.pg_class c on c.oid = i.inhrelid "
            "where i.inhparent = 'pgfunnel.posting'::regclass and i.inhdetachpending "
            "and c.relname <> %s", (posting_partition_name(version_id),)).fetchall():
        conn.execute(sql.SQL("alter table pgfunnel.posting detach partition {} finalize")
                     .format(sql.Identifier("pgfunnel", str(other))))
    row = conn.execute(
        "select i.inhdetachpending from pg_catalog.pg_inherits i "
        "join pg_catalog.pg_class c on c.oid = i.inhrelid "
        "where i.inhparent = 'pgfunnel.posting'::regclass "
        "and c.relnamespace = 'pgfunnel'::regnamespace and c.relname = %s",
        (posting_partition_name(version_id),)).fetchone()
    if row is None:
        return
    conn.execute(sql.SQL("alter table pgfunnel.posting detach partition {} {}").format(
        sql.Identifier("pgfunnel", posting_partition_name(version_id)),
        sql.SQL("finalize" if row[0] else "concurrently")))


@rows_by_position
def drop_version_rows(conn: psycopg.Connection[Any], version_id: int) -> None:
    """Drop a version's HNSW index (concurrently), detach its posting partition
    (concurrently), and then its rows. Autocommit connection."""
    drop_hnsw_index_concurrently(conn, hnsw_index_name(version_id))
    _detach_posting_partition(conn, version_id)
    with conn.transaction():
        # posting has no foreign keys (they doubled ingest cost): the version's partition
        # goes whole, and a version from before partitioning loses its rows of
        # posting_legacy; the rest cascades to embedding, lexical and term_stat rows
        conn.execute(sql.SQL("drop table if exists {}").format(
            sql.Identifier("pgfunnel", posting_partition_name(version_id))))
        conn.execute("delete from pgfunnel.posting where index_version_id = %s", (version_id,))
        conn.execute("delete from pgfunnel.index_version where id = %s", (version_id,))
    refresh_hnsw_walks(conn)


@rows_by_position
@_translated
def reindex(conn: psycopg.Connection[Any], collection: str, *, model: str | None = None,
            analyzer: str | None = None, activate_after: bool = False,
            maintenance_work_mem: str | None = None, batch_size: int = 256, m: int = HNSW_M,
            ef_construction: int = HNSW_EF_CONSTRUCTION, embedder: Embedder | None = None,
            progress: ProgressFn | None = None, notice: NoticeFn | None = None,
            min_recall: float = MIN_RECALL, reembed: bool = False,
            embed_input: str | None = None, lexical_input: str | None = None) -> ReindexResult:
    """Build (or resume) a new index version of ``collection`` beside the active one.

    ``embed_input`` is what the new version embeds per chunk (``sources.EMBED_INPUTS``;
    default: the active version's, or the title for a version that embedded the chunk
    alone). ``lexical_input`` is what its BM25 indexes per chunk (``sources.LEXICAL_INPUTS``;
    default: the title above the chunk, whatever the active version indexes: a version
    that indexed the chunk alone predates the choice).

    ``progress(stage, n, total)`` gets ``copy-from`` (``n`` the version whose vectors it
    copies, where that version embedded the same input) before ``embedding-total``, then
    per batch ``copied`` and ``embedding``, then ``index``.

    ``conn`` must be an autocommit connection; it holds the collection's reindex lock for
    the whole run. Raises :class:`ValidationFailed` (exit code 3) when the built version
    fails validation; it then stays in state 'building' for inspection or a rerun.
    """
    if not conn.autocommit:
        raise ConfigError("conn", "reindex needs a connection in autocommit mode")
    _check_count("batch_size", batch_size)
    check_hnsw_settings(m, ef_construction)
    if embed_input is not None:
        check_embed_input(embed_input)
    if lexical_input is not None:
        check_lexical_input(lexical_input)
    if model is not None:
        # '' was taken as no model: a version of the active model was built, unsaid
        from pgfunnel.embedder import check_model_name

        check_model_name(model)
    from pgfunnel.db import refuse_read_only, require_schema, require_staging

    require_schema(conn)
    # a version built by this release reads chunk columns and analyzers that an older
    # schema lacks: it failed on a column by name after the model had loaded
    require_current_schema(conn)
    # on a read replica the version row's insert would fail after the model loaded
    refuse_read_only(conn, "reindex")
    require_writer(conn, "reindex", "index_version", "INSERT")
    owns = conn.execute("select pg_catalog.pg_has_role(c.relowner, 'USAGE') "
                        "from pg_catalog.pg_class c "
                        "where c.oid = 'pgfunnel.embedding'::pg_catalog.regclass").fetchone()
    if owns is not None and owns[0]:
        # before the model loads; a role that does not own the tables is refused, by
        # its own message, where the new version's partition is made
        require_staging(conn, "reindex")
    _set_maintenance_work_mem(conn, maintenance_work_mem)
    # a killed CLI must not leave its backend running a long statement with the lock held
    # (a name the driver cannot send is named here, not in the session name's error)
    check_sql_text("collection", collection)
    name_session(conn, f"pgfunnel reindex {collection}")
    times: dict[str, float] = {}
    with writer_lock(conn, collection) as coll_id:
        notes: list[str] = []
        dropped = cleanup_invalid_indexes(conn)
        notes.extend(f"dropped invalid index {n} (left by an interrupted build)" for n in dropped)
        active = active_version(conn, coll_id)
        if analyzer is not None:
            known = {str(r[0]) for r in conn.execute(
                "select name from pgfunnel.analyzers()").fetchall()}
            if analyzer not in known:
                # (a name this package knows but an older schema lacks was refused above,
                # by require_current_schema, with `pgfunnel migrate`)
                raise ConfigError("analyzer", f"unknown analyzer {analyzer!r} "
                                              f"(known: {', '.join(sorted(known))})")
        coll_row = conn.execute("select analyzer from pgfunnel.collection where id = %s",
                                (coll_id,)).fetchone()
        want_model = model if model is not None else (
            active.embedding_model if active else DEFAULT_MODEL)
        want_analyzer = analyzer if analyzer is not None else (active.analyzer if active else
                                     str(coll_row[0]) if coll_row else DEFAULT_ANALYZER)
        # a version that embedded the chunk alone predates titles: its reindex moves on
        want_input = embed_input or (
            active.embed_input if active and active.embed_input != EMBED_TEXT_ALONE
            else DEFAULT_EMBED_INPUT)
        want_lexical = lexical_input or DEFAULT_LEXICAL_INPUT
        wanted = (want_model, want_analyzer, m, ef_construction, want_input,
                  DEFAULT_HNSW_TYPE, want_lexical)
        building = _building_version(conn, coll_id)
        resumed = False
        same_note: int | None = None  # the note on a build like another version, if made
        if building is not None:
            if _build_settings(building) == wanted:
                resumed = True
                # a build begun with --reembed goes on embedding: resumed by the command
                # `versions list` names (or one without the flag), it copied the old
                # vectors for every chunk the interrupted run had not reached
                reembed = reembed or bool(building.params.get("reembed"))
                notes.append(f"resuming version {building.version} "
                             f"({building.chunk_count} chunks already indexed)")
            else:
                notes.append(f"dropped half-built version {building.version} "
                             f"({building.embedding_model}, {building.analyzer}): "
                             "this run asks for other settings")
                drop_version_rows(conn, building.id)
                building = None
        # vectors of a version made with the same model are copied, not computed again,
        # for every chunk whose embedding input is the same text in both (all of them when
        # the version embedded the same kind of input)
        # read once: the vectors' source and the note on a build like the active one
        infos = _versions(conn, coll_id)
        source = None if reembed else next(
            (v for v in sorted(infos,
                               key=lambda v: (version_embed_input(v.params) != want_input,
                                              v.state != "active"))
             if v.embedding_model == want_model and v.state in ("active", "ready", "retired")
             and (building is None or v.id != building.id)), None)
        t0 = time.perf_counter()
        if embedder is not None and embedder.model_name != want_model:
            raise ConfigError("model", f"embedder is {embedder.model_name!r}, not {want_model!r}")
        if embedder is None and source is None:
            embedder = Embedder(want_model)
        dims = embedder.dimensions if embedder is not None else (
            source.dimensions if source is not None else 0)
        times["load_model"] = time.perf_counter() - t0
        if building is None:
            with conn.transaction():
                vid = create_version(conn, coll_id, want_model, dims, want_analyzer,
                                     "building", {"m": m, "ef_construction": ef_construction,
                                                  "embed_input": want_input,
                                                  "lexical_input": want_lexical,
                                                  **({"reembed": True} if reembed else {})})
            building = _version_row(conn, coll_id, _number_of(conn, vid))
            notes.append(f"created version {building.version} (building)")
            # the active version first; a ready or retired one too: the same reindex run
            # twice made a second copy of the first, unsaid
            same_as = next((v for v in sorted(infos, key=lambda v: v.state != "active")
                            if v.state in ("active", "ready", "retired")
                            and not v.params.get("dropping")
                            and _build_settings(v) == wanted), None)
            if same_as is not None and not reembed:
                # a rebuild is sometimes the point (a damaged index); usually a flag was
                # forgotten, and the user should hear it before comparing the two
                same_note = len(notes)
                notes.append(
                    f"version {building.version} has the {same_as.state} version "
                    f"{same_as.version}'s settings (model, analyzer, embedding and "
                    "lexical inputs, m, ef_construction) and its vectors: it will rank as "
                    "that one does. To change what is indexed, pass --analyzer, --model, "
                    "--embed-input or --lexical-input; pgfunnel versions drop "
                    f"{building.version} -c {shlex.quote(collection)} removes it")
        if building.dimensions != dims:
            raise ConfigError("model", f"{want_model!r} makes {dims}-dim vectors; "
                                       f"version {building.version} has {building.dimensions}")
        if source is not None:
            same_input = version_embed_input(source.params) == want_input
            notes.append(f"vectors copied from version {source.version} (same model "
                         f"{want_model}"
                         + ("" if same_input else
                            f", for chunks whose embedding input is the same under its "
                            f"{version_embed_input(source.params)!r} input")
                         + "); --reembed computes them again")
        result = ReindexResult(
            collection=collection, version=building.version, version_id=building.id,
            embedding_model=want_model, dimensions=dims, analyzer=want_analyzer,
            resumed=resumed, chunks_before=building.chunk_count, chunks_embedded=0,
            state="building", notes=notes)
        total = int(conn.execute("select count(*) from pgfunnel.chunk where collection_id = %s",
                                 (coll_id,)).fetchone()[0])  # type: ignore[index]
        if progress is not None:
            if source is not None and version_embed_input(source.params) == want_input:
                # said before the first batch: a display that learned it only from that
                # batch's "copied" showed "embedding chunks 0/N" meanwhile
                progress("copy-from", source.version, None)
            progress("embedding-total", building.chunk_count, total)
        t0 = time.perf_counter()
        reuse = source.id if source is not None else None
        sources = VectorSources()
        result.chunks_indexed = catch_up(conn, coll_id, building.id, embedder, want_analyzer,
                                         batch_size=batch_size, progress=progress,
                                         reuse_from=reuse, sources=sources)
        times["embed_and_index_rows"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        with conn.transaction():
            create_posting_index(conn, building.id)
        times["posting_index"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        refresh_stats_after_write(conn, building.id,
                                  building.chunk_count + result.chunks_indexed)
        times["analyze"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        result.notices = build_index(conn, building.id, dims, m=m,
                                     ef_construction=ef_construction,
                                     maintenance_work_mem=maintenance_work_mem,
                                     progress=progress, notice=notice,
                                     chunks=building.chunk_count + result.chunks_indexed)
        times["hnsw_build"] = time.perf_counter() - t0
        # chunks ingested during the build: the index takes them as ordinary inserts
        result.chunks_indexed += catch_up(conn, coll_id, building.id, embedder, want_analyzer,
                                          batch_size=batch_size, progress=progress,
                                          reuse_from=reuse, sources=sources)
        t0 = time.perf_counter()
        with conn.transaction():
            # an ingest that committed after that catch-up would fail the count check
            # ("counts differ", the version left 'building'): under the ingest lock none
            # can, and whatever arrived since is caught up first (usually nothing)
            ingest_lock(conn, collection)
            result.chunks_indexed += catch_up(conn, coll_id, building.id, embedder,
                                              want_analyzer, batch_size=batch_size,
                                              in_transaction=True, reuse_from=reuse,
                                              sources=sources)
            result.validation = validate(conn, building.id, min_recall=min_recall)
        result.chunks_embedded, result.chunks_copied = sources.embedded, sources.copied
        times["validate"] = time.perf_counter() - t0
        result.seconds = times
        if not result.validation.ok:
            raise ValidationFailed(
                f"version {building.version} of {collection!r} failed validation: "
                + "; ".join(result.validation.problems)
                + " (it stays 'building'; pgfunnel versions drop it or rerun reindex)")
        with conn.transaction():
            conn.execute(
                "update pgfunnel.index_version set state = 'ready', params = params || %s "
                "where id = %s and state = 'building'",
                (Jsonb({"validation": {"recall": result.validation.recall,
                                       "sample": result.validation.sample,
                                       "chunks": result.validation.collection_chunks,
                                       "at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}}),
                 building.id))
        result.state = "ready"
        if activate_after:
            act = activate(conn, collection, building.version, embedder=embedder)
            result.activated = True
            result.replaced = act.replaced
            result.state = "active"
            if same_note is not None and act.replaced is not None:
                # active now: its drop is refused until the version it replaced is back
                coll = shlex.quote(collection)
                notes[same_note] = notes[same_note].replace(
                    f"pgfunnel versions drop {building.version} -c {coll} removes it",
                    f"it is active now: pgfunnel versions rollback -c {coll} returns to "
                    f"version {act.replaced}, then pgfunnel versions drop "
                    f"{building.version} -c {coll} removes it")
        return result


def _build_settings(info: VersionInfo) -> tuple[Any, ...]:
    """What a version's build was asked for, in the order `reindex` compares them: model,
    analyzer, m, ef_construction, embedding input, HNSW type, lexical input."""
    return (info.embedding_model, info.analyzer, info.params.get("m", HNSW_M),
            info.params.get("ef_construction", HNSW_EF_CONSTRUCTION),
            version_embed_input(info.params),
            version_hnsw_type(info.params), version_lexical_input(info.params))


def resume_hint(collection: str, info: VersionInfo) -> str:
    """How to finish a ``building`` version: the ``pgfunnel reindex`` with its own settings.

    A plain ``pgfunnel reindex`` asks for the active version's model and analyzer (and
    collection 'default' without ``-c``): given a version built with others, it dropped
    the half-built version and began another.
    """
    coll = shlex.quote(collection)
    if version_hnsw_type(info.params) != DEFAULT_HNSW_TYPE:
        # made by an older release: this one builds another graph type, so no reindex
        # resumes it
        return (f"no reindex of this release resumes it (its HNSW graph is "
                f"{version_hnsw_type(info.params)!r}); `pgfunnel versions drop "
                f"{info.version} -c {coll}` discards it")
    args = ["pgfunnel", "reindex", "-c", collection, "--model", info.embedding_model,
            "--analyzer", info.analyzer, "--embed-input", version_embed_input(info.params),
            "--lexical-input", version_lexical_input(info.params)]
    m = int(info.params.get("m", HNSW_M))
    ef = int(info.params.get("ef_construction", HNSW_EF_CONSTRUCTION))
    if m != HNSW_M:
        args += ["--m", str(m)]
    if ef != HNSW_EF_CONSTRUCTION:
        args += ["--ef-construction", str(ef)]
    if info.params.get("reembed"):
        args.append("--reembed")
    return (f"`{shlex.join(args)}` resumes and validates it (a reindex with other "
            f"settings drops it); `pgfunnel versions drop {info.version} -c {coll}` "
            "discards it")


def _number_of(conn: psycopg.Connection[Any], version_id: int) -> int:
    row = conn.execute("select version from pgfunnel.index_version where id = %s",
                       (version_id,)).fetchone()
    assert row is not None
    return int(row[0])


#: the most a count a command line passes on to SQL may be (a LIMIT, a batch)
_MAX_COUNT = 2_147_483_647


def _check_count(name: str, value: int) -> None:
    """A batch size or a number of searches, 1 to 2,147,483,647: a larger one reached SQL
    as "bigint out of range", which named no parameter, and a reindex had by then made
    its version (left 'building')."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
            or not 1 <= value <= _MAX_COUNT:
        raise ConfigError(name, f"must be an integer from 1 to {_MAX_COUNT:,}, got "
                                f"{shown(value)}")


# -- switching -----------------------------------------------------------------------

def activate(conn: psycopg.Connection[Any], collection: str, version: int, *,
             embedder: Embedder | None = None, batch_size: int = 256) -> Activation:
    """Make ``version`` the active one, after indexing chunks it is missing.

    Chunks ingested since the version was built are embedded first (committed batches,
    no lock), then again under the ingest lock inside the switch transaction, so the
    coverage check in ``pgfunnel.activate_version`` cannot fail on a race.
    """
    return _activate(conn, collection, version, embedder=embedder, batch_size=batch_size)


def _activate(conn: psycopg.Connection[Any], collection: str, version: int, *,
              embedder: Embedder | None = None, batch_size: int = 256,
              rolling_back: tuple[int, int] | None = None) -> Activation:
    """:func:`activate`; ``rolling_back``, (id, number) of the active version whose
    switch a rollback undoes, refuses the switch when another version is active by
    the time it is made."""
    _check_count("batch_size", batch_size)

    def body() -> Activation:
        coll_id = require_collection(conn, collection)
        # the chunks it catches up are written as this release writes them (see reindex)
        require_current_schema(conn)
        require_writer(conn, "activate a version", "index_version", "UPDATE")
        info = _version_row(conn, coll_id, version)
        if info.state == "active":
            return Activation(collection, version, None, 0, already_active=True)
        if info.state == "building":
            raise ConflictError(f"version {version} of {collection!r} is still building: "
                                + resume_hint(collection, info))
        if info.params.get("dropping"):
            raise ConflictError(
                f"version {version} of {collection!r} is being dropped (or its drop was "
                f"interrupted: `pgfunnel versions drop {version} -c "
                f"{shlex.quote(collection)}` finishes it)")
        index_built = False
        if not info.index_valid and conn.autocommit:
            # a ready or retired version whose graph was dropped by hand or whose rebuild
            # was cut short: no reindex would build it (that makes a new version), so the
            # switch does, as it catches up chunks, under the lock drop and reindex take
            with writer_lock(conn, collection):
                if info.index_present:
                    drop_hnsw_index_concurrently(conn, hnsw_index_name(info.id))
                build_index(conn, info.id, info.dimensions, m=int(info.params.get("m", HNSW_M)),
                            ef_construction=int(info.params.get("ef_construction",
                                                                HNSW_EF_CONSTRUCTION)))
            index_built = True
        def dropped_meanwhile() -> ConflictError | None:
            # the catch-up runs before any lock is taken: another operator's `versions
            # drop` may mark or remove the version meanwhile (by id: a version built since
            # may hold its number)
            row = conn.execute("select params ? 'dropping' from pgfunnel.index_version "
                               "where id = %s", (info.id,)).fetchone()
            if row is not None and not row[0]:
                return None
            return ConflictError(
                f"version {version} of {collection!r} was dropped by another session while "
                "this activation indexed the chunks it lacked; nothing was switched")

        caught = 0
        model = embedder if embedder is not None and \
            embedder.model_name == info.embedding_model else None
        reuse = _vector_source(conn, coll_id, info.embedding_model)
        if info.missing_chunks and conn.autocommit:
            try:
                caught += catch_up(conn, coll_id, info.id, model, batch_size=batch_size,
                                   reuse_from=reuse)
            except (psycopg.Error, PgfunnelError) as exc:
                gone = dropped_meanwhile()
                if gone is not None:
                    raise gone from exc
                raise
        with conn.transaction():
            ingest_lock(conn, collection)
            gone = dropped_meanwhile()
            if gone is not None:
                raise gone
            if rolling_back is not None:
                moved = _switched_meanwhile(conn, coll_id, collection, rolling_back, info.id)
                if isinstance(moved, ConflictError):
                    raise moved
                if moved:
                    return Activation(collection, version, None, caught, index_built,
                                      already_active=True)
            if _missing_chunks(conn, coll_id, info.id, 1):
                caught += catch_up(conn, coll_id, info.id, model, batch_size=batch_size,
                                   in_transaction=True, reuse_from=reuse)
            row = conn.execute("select pgfunnel.activate_version(%s, %s)",
                               (collection, version)).fetchone()
        replaced = None if row is None or row[0] is None else int(row[0])
        if replaced == version:
            # activate_version's answer for a version active already: another session
            # switched to it while this one caught up or waited for the lock. Reported as
            # a switch, it read "version V is active; version V retired"
            return Activation(collection, version, None, caught, index_built,
                              already_active=True)
        return Activation(collection, version, replaced, caught, index_built)

    return _db(conn, body)


def _switched_meanwhile(conn: psycopg.Connection[Any], coll_id: int, collection: str,
                        rolling_back: tuple[int, int], target_id: int) -> ConflictError | bool:
    """Under the ingest lock, before a rollback's switch: False when the version it
    rolls back is still active; True when the target is active already (two rollbacks
    at once: nothing to change); else the refusal. A rollback reads its target outside
    any lock, and another operator's switch committed meanwhile (while the target's
    missed chunks were indexed, or behind an ingest batch) was undone without a word:
    the rollback retired the version just activated."""
    row = conn.execute("select id, version from pgfunnel.index_version "
                       "where collection_id = %s and state = 'active'", (coll_id,)).fetchone()
    if row is not None and int(row[0]) in (rolling_back[0], target_id):
        return int(row[0]) == target_id
    said = (f"the active version of {collection!r} changed while this rollback ran: "
            + ("no version of it is active now" if row is None
               else f"another session activated version {int(row[1])}")
            + f" in place of version {rolling_back[1]}, whose switch this rollback was to "
            "undo; nothing was switched")
    if row is not None:
        said += (f" (`pgfunnel versions rollback -c {shlex.quote(collection)}` undoes the "
                 "switch in place now)")
    return ConflictError(said)


def _last_replaced(params: Mapping[str, Any]) -> tuple[int, int | None] | None:
    """The version a version's last activation replaced, as (number, id), from the
    `activations` history in its params; None where it replaced none. The id is None in
    an entry from before ids were recorded: such an entry is matched by number (as
    pgfunnel.previous_version does). Rollback and the way out named by drop's and
    retire's refusals read it here, so that they name the same version."""
    history = params.get("activations")
    entry = history[-1] if isinstance(history, list) and history else None
    if not isinstance(entry, dict) or entry.get("replaced") is None:
        return None
    replaced_id = entry.get("replaced_id")
    return int(entry["replaced"]), None if replaced_id is None else int(replaced_id)


@rows_by_position
def rollback(conn: psycopg.Connection[Any], collection: str, *,
             embedder: Embedder | None = None) -> Activation:
    """Activate the version the active one replaced (again: toggles between the two)."""
    active: list[tuple[int, int]] = []

    def previous() -> tuple[int, int | None]:
        coll = require_collection(conn, collection)
        require_writer(conn, "roll back a version switch", "index_version", "UPDATE")
        row = conn.execute("select v.params, v.id, v.version from pgfunnel.index_version v "
                           "where v.collection_id = %s and v.state = 'active'", (coll,)).fetchone()
        if row is None:
            # retired around pgfunnel, or a drop-collection cut short: "the active version
            # replaced no other version" named a version that is not there
            raise NotFoundError(
                f"collection {collection!r} has no active version, so there is no switch to "
                "roll back; activate one (pgfunnel versions list shows them: pgfunnel "
                f"versions activate N -c {shlex.quote(collection)})", parameter="collection")
        active.append((int(row[1]), int(row[2])))
        last = _last_replaced(row[0] if isinstance(row[0], dict) else {})
        if last is None:
            raise NotFoundError(f"collection {collection!r}: the active version replaced no "
                                "other version; there is nothing to roll back to")
        return last

    prev, prev_id = _db(conn, previous)
    coll_id = require_collection(conn, collection)
    # by id where the history has it: a dropped version's number goes to the next build,
    # which is not the version the active one replaced
    found = _versions(conn, coll_id)
    if not any(v.version == prev and (prev_id is None or v.id == prev_id) for v in found):
        # `versions list` may well show a version of that number: say which one it is
        reused = any(v.version == prev for v in found)
        raise NotFoundError(
            f"collection {collection!r}: version {prev}, which the active version replaced, "
            "was dropped" + (f" (the version {prev} listed now is a later build that took "
                             "its number)" if reused else "") + "; nothing to roll back to")
    return _activate(conn, collection, prev, embedder=embedder, rolling_back=active[-1])


def retire(conn: psycopg.Connection[Any], collection: str, version: int) -> VersionInfo:
    """Mark a ready version retired (kept, droppable, re-activatable). Not the active one."""
    def body() -> VersionInfo:
        coll_id = require_collection(conn, collection)
        require_writer(conn, "retire a version", "index_version", "UPDATE")
        info = _version_row(conn, coll_id, version)
        if info.state == "active":
            # the way out names the collection, as drop's refusal does: a bare
            # `pgfunnel versions rollback` rolled back the default collection
            raise ConflictError(f"version {version} of {collection!r} is active; activate "
                                "another version first: "
                                + _switch_away(conn, coll_id, collection, info.id))
        if info.state == "building":
            raise ConflictError(f"version {version} of {collection!r} is building; "
                                "drop it instead")
        with conn.transaction():
            # the state is checked again by the update itself: an activation of this
            # version that commits after the read above would otherwise be retired, and
            # the collection left with no active version
            done = conn.execute(
                "update pgfunnel.index_version set state = 'retired', "
                "retired_at = coalesce(retired_at, now()) "
                "where id = %s and state in ('ready', 'retired') returning id",
                (info.id,)).fetchone()
        if done is None:
            now = _version_row(conn, coll_id, version)
            # the way out as the first refusal names it: "activate another version
            # first" named no command, and no collection to run it on
            raise ConflictError(f"version {version} of {collection!r} is {now.state} now "
                                "(a concurrent switch); only a ready version can be "
                                "retired" + (": activate another version first: "
                                             + _switch_away(conn, coll_id, collection, now.id)
                                             if now.state == "active" else ""))
        return _version_row(conn, coll_id, version)

    return _db(conn, body)


def _switch_away(conn: psycopg.Connection[Any], coll_id: int, collection: str,
                 active_id: int) -> str:
    """The command that makes another version active, so that the active one can be
    dropped: the rollback where the version it replaced is still there, else an
    activation of the latest other version, else a reindex (there is no other)."""
    coll = shlex.quote(collection)
    infos = _versions(conn, coll_id)
    others = [v for v in infos if v.id != active_id and v.state in ("ready", "retired")
              and not v.params.get("dropping")]
    active = next((v for v in infos if v.id == active_id), None)
    last = _last_replaced(active.params) if active is not None else None
    replaced = None if last is None else next(
        (v for v in others if v.version == last[0] and last[1] in (None, v.id)), None)
    if replaced is not None:
        return (f"`pgfunnel versions rollback -c {coll}` returns to version "
                f"{replaced.version}, which it replaced")
    if others:
        latest = max(others, key=lambda v: v.version)
        return (f"`pgfunnel versions activate {latest.version} -c {coll}` switches to "
                f"version {latest.version} ({latest.state})")
    return (f"it is the collection's only version: `pgfunnel reindex -c {coll}` builds "
            "another to switch to")


def drop(conn: psycopg.Connection[Any], collection: str, version: int) -> VersionInfo:
    """Drop a version's HNSW index and rows. Refuses the active version, and any version
    while a reindex of the collection runs."""
    def body() -> VersionInfo:
        coll_id = require_collection(conn, collection)
        info = _version_row(conn, coll_id, version)
        if info.state == "active":
            # the refusal names the way out, as retire's does
            raise ConflictError(f"version {version} of {collection!r} is the active version; "
                                "activate another one before dropping it: "
                                + _switch_away(conn, coll_id, collection, info.id))
        require_table_owner(conn, "versions drop")
        name_session(conn, f"pgfunnel versions drop {collection}")
        with writer_lock(conn, collection):
            with conn.transaction():
                # the ingest lock waits for an activation in flight, and the mark keeps
                # any later one off this version (pgfunnel.activate_version refuses it):
                # the state read above may be stale, and dropping a version activated
                # meanwhile left the collection with no active version
                ingest_lock(conn, collection)
                row = conn.execute("select state from pgfunnel.index_version where id = %s "
                                   "for update", (info.id,)).fetchone()
                if row is not None and row[0] == "active":
                    raise ConflictError(
                        f"version {version} of {collection!r} is the active version now (a "
                        "concurrent switch); activate another one before dropping it: "
                        + _switch_away(conn, coll_id, collection, info.id))
                conn.execute("update pgfunnel.index_version set params = params || "
                             "jsonb_build_object('dropping', now()) where id = %s", (info.id,))
            drop_version_rows(conn, info.id)
        return info

    if not conn.autocommit:
        raise ConfigError("conn", "drop needs an autocommit connection (DROP INDEX CONCURRENTLY)")
    return _db(conn, body)


@rows_by_position
def collection_to_drop(conn: psycopg.Connection[Any], collection: str) -> int:
    """The id of the collection a drop names, or NotFoundError: "ingest into it first", as
    a search is told, is no advice for a drop."""
    coll_id = collection_id(conn, collection)
    if coll_id is None:
        raise NotFoundError(f"collection {collection!r} does not exist: nothing to drop",
                            parameter="collection")
    return coll_id


def drop_collection(conn: psycopg.Connection[Any], collection: str) -> dict[str, Any]:
    """Drop a collection whole: each index version's HNSW index and posting partition (what
    a plain DELETE of the collection row would leave behind), then its documents, chunks,
    traces and judged queries. Refuses while a reindex of it runs. Autocommit connection."""
    def body() -> dict[str, Any]:
        coll_id = collection_to_drop(conn, collection)
        require_table_owner(conn, "versions drop-collection")
        name_session(conn, f"pgfunnel versions drop-collection {collection}")
        with writer_lock(conn, collection):
            infos = _versions(conn, coll_id)
            for info in infos:
                drop_version_rows(conn, info.id)
            with conn.transaction():
                # an ingest of the collection finishes its batch first
                ingest_lock(conn, collection)
                row = conn.execute("select count(*) from pgfunnel.document "
                                   "where collection_id = %s", (coll_id,)).fetchone()
                conn.execute("delete from pgfunnel.collection where id = %s", (coll_id,))
        return {"collection": collection, "versions": [i.version for i in infos],
                "documents": int(row[0]) if row else 0}

    if not conn.autocommit:
        raise ConfigError("conn", "drop_collection needs an autocommit connection "
                                  "(DROP INDEX CONCURRENTLY)")
    return _db(conn, body)


# -- compare -------------------------------------------------------------------------

@rows_by_position
def require_pin_privilege(conn: psycopg.Connection[Any]) -> None:
    """Refuse a role that cannot pin a version (see :func:`pinned`) before any work is done.

    A reader would otherwise fail only at the first pinned search, and with row-level
    security on, ``compare --last`` would first tell it that nothing was ever logged."""
    row = conn.execute("select pg_catalog.has_table_privilege("
                       "'pgfunnel.index_version', 'UPDATE'), current_user").fetchone()
    if row is not None and not row[0]:
        raise AccessError(
            f"role {row[1]!r} cannot compare versions: a comparison makes each version "
            "active inside a rolled-back transaction, which needs UPDATE on "
            "pgfunnel.index_version. Run it as the tables' owner or a member of "
            "pgfunnel_writer")


@contextmanager
def pinned(conn: psycopg.Connection[Any], coll_id: int, version_id: int) -> Iterator[None]:
    """Run searches on ``version_id`` as if it were active, in a transaction always rolled back.

    Activation is transactional, so the temporary switch is invisible to every other
    session; they keep seeing the committed active version. While it lasts, the rows of
    the two versions involved are locked (an ingest or activation waits for it to end).
    """
    with conn.transaction(force_rollback=True):
        conn.execute("update pgfunnel.index_version set state = 'retired' "
                     "where collection_id = %s and state = 'active' and id <> %s",
                     (coll_id, version_id))
        conn.execute("update pgfunnel.index_version set state = 'active' where id = %s",
                     (version_id,))
        yield


@dataclass
class QueryDiff:
    query_id: str
    query: str
    overlap: float
    top1_same: bool
    only_a: list[str]
    only_b: list[str]
    ndcg_a: float | None = None
    ndcg_b: float | None = None
    #: the reader a logged search (``--last``) was replayed as, ``{"principals": [...],
    #: "tenant": ..., "as_of": ...}`` (``as_of`` alone when one reader was named for
    #: all); None for queries that are not logged searches
    reader: dict[str, Any] | None = None
    #: the two top-k lists are the same, in the same order
    identical: bool = True
    #: how far, on average, the items both lists hold moved (|rank in A - rank in B|);
    #: 0.0 when none moved or none is shared. A query with overlap 1.0 that is not
    #: identical has the same results in a different order
    rank_shift: float = 0.0
    #: the legs a logged search (``--last``) was replayed with, as it searched:
    #: ``"both"``, ``"lexical"`` (logged without a query embedding) or ``"dense"`` (its
    #: text was not given to the lexical leg: `pgfunnel eval` with a dense-only
    #: configuration); ``"both"`` for queries that are not logged searches
    legs: str = "both"
    #: the log row does not record whether the search had a query embedding (logged
    #: before pgfunnel recorded it), so ``legs`` is a guess from its trace, as explain's
    #: replay makes it: lexical alone when no candidate came from the dense leg
    legs_guessed: bool = False
    #: the cutoff of its overlap@k (and nDCG@k): the k it was searched with, which for a
    #: logged search (``--last``) is the k it was logged with unless the caller gave one
    k: int = 10
    #: the search parameters a logged search (``--last``) was replayed with: those its
    #: logged config records, then the caller's (which replace them), then the defaults
    #: of those it does not record; None for queries that are not logged searches
    config: dict[str, Any] | None = None
    #: the parameters its logged config does not record (a row logged before pgfunnel
    #: recorded them; the k of a search `pgfunnel eval` logged), replayed with their
    #: defaults: a guess
    config_guessed: list[str] = field(default_factory=list)
    #: the parameters its logged config records that the caller's replaced (another value)
    overridden: list[str] = field(default_factory=list)
    #: the logged search (``--last``) reranked its pool, which the replay does not: its
    #: overlap compares the funnel's results before a rerank, not the list its user saw
    logged_reranked: bool = False
    #: the parameters the caller gave that this logged search does not read, so it kept
    #: its own: ``rrf_k`` for a search replayed with a fusion other than rrf
    not_applied: list[str] = field(default_factory=list)


@dataclass
class Comparison:
    collection: str
    version_a: int
    version_b: int
    #: the cutoff of overlap@k and nDCG@k; None when logged searches (``--last``) replayed
    #: with the k each was logged with differ in it (each :attr:`QueryDiff.k` says its own)
    k: int | None
    n_queries: int
    mean_overlap: float
    identical: int
    top1_changed: int
    judged: bool
    #: queries that neither version returned anything for (their overlap counts as 1):
    #: a private collection searched with no principals compares nothing
    empty_in_both: int = 0
    #: queries whose top-k lists hold the same results in a different order (overlap 1.0,
    #: not identical)
    reordered: int = 0
    #: judged items written as file names and matched to their citekeys, as `eval` does
    judged_items_respelled: dict[str, str] = field(default_factory=dict)
    #: judged items no document (or chunk) of the collection has, or hidden from the reader
    judged_items_missing: list[str] = field(default_factory=list)
    #: chunks a compared version lacked (ingested since its build: ingest writes only the
    #: active version) and that were indexed into it before the searches, by version
    caught_up: dict[int, int] = field(default_factory=dict)
    #: logged searches (``--last``) replayed lexical-only by a guess (:attr:`QueryDiff.
    #: legs_guessed`), by query id
    legs_guessed: list[str] = field(default_factory=list)
    #: logged searches replayed with a default for a parameter their config does not
    #: record (:attr:`QueryDiff.config_guessed`), by query id
    config_guessed: list[str] = field(default_factory=list)
    #: the search parameters the caller gave that replaced a logged search's own (each
    #: query's :attr:`QueryDiff.overridden` says which of its own), with the values given
    overridden: dict[str, Any] = field(default_factory=dict)
    #: logged searches that reranked their pool, compared without the reranker
    #: (:attr:`QueryDiff.logged_reranked`), by query id
    logged_reranked: list[str] = field(default_factory=list)
    #: logged searches that a parameter the caller gave did not apply to (``rrf_k`` to one
    #: fused otherwise: :attr:`QueryDiff.not_applied`), by query id
    not_applied: list[str] = field(default_factory=list)
    ndcg_a: float | None = None
    ndcg_b: float | None = None
    ndcg_diff: float | None = None
    ndcg_low: float | None = None
    ndcg_high: float | None = None
    per_query: list[QueryDiff] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def search_pinned(conn: psycopg.Connection[Any], collection: str, version: int,
                  queries: Sequence[str], k: int = 10, embedder: Embedder | None = None,
                  readers: Sequence[Mapping[str, Any]] | None = None,
                  legs: Sequence[str] | None = None,
                  **params: Any) -> list[list[Any]]:
    """The funnel's results (no rerank) for each query on one version, as if it were active.
    ``readers``, one per query, adds that query's own parameters (its principals and
    tenant, as a logged search ran, and the search parameters it was logged with, its k
    among them) to ``params``, replacing theirs; ``legs``, one per query, says what it
    searches with: ``"both"`` (its text and its embedding), ``"lexical"`` (its text
    alone, no embedding) or ``"dense"`` (its embedding alone), as a logged search did."""
    if readers is not None and len(readers) != len(queries):
        raise ConfigError("readers", f"must give one mapping per query ({len(queries)}), "
                                     f"got {len(readers)}")
    if legs is not None and (len(legs) != len(queries)
                             or any(g not in ("both", "lexical", "dense") for g in legs)):
        raise ConfigError("legs", f"must give one of 'both', 'lexical', 'dense' per query "
                                  f"({len(queries)}), got {list(legs)!r}")
    modes = list(legs) if legs is not None else ["both"] * len(queries)
    from pgfunnel.search import Funnel

    def body() -> list[list[Any]]:
        coll_id = require_collection(conn, collection)
        require_pin_privilege(conn)
        info = _version_row(conn, coll_id, version)
        if info.state == "building":
            raise ConflictError(f"version {version} of {collection!r} is still building: "
                                + resume_hint(collection, info))
        # a search logged without a query embedding is replayed without one: embedded,
        # a lexical-only search was compared as a hybrid one
        wanted = [i for i, g in enumerate(modes) if g != "lexical"]
        vectors: list[Any] = [None] * len(queries)
        if wanted:
            model = embedder if embedder is not None \
                and embedder.model_name == info.embedding_model \
                else _cached_embedder(info.embedding_model)
            for i, vec in zip(wanted, model.embed([queries[i] for i in wanted]),
                              strict=True):
                vectors[i] = vec
        out: list[list[Any]] = []
        funnel = Funnel(conn, collection, embedder=None)
        import warnings

        with pinned(conn, coll_id, info.id), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # notices about dropped query words
            for i, (q, vec) in enumerate(zip(queries, vectors, strict=True)):
                own = {} if readers is None else dict(readers[i])
                # a dense-only one (its text given to no lexical leg) without its text
                # a query's own parameters (a logged search's k too) replace the others
                out.append(funnel.search(None if modes[i] == "dense" else q,
                                         query_embedding=vec,
                                         **{"k": k, **params, **own}).results)
        return out

    return _db(conn, body)


def _vector_source(conn: psycopg.Connection[Any], coll_id: int, model: str) -> int | None:
    """The version whose vectors a catch-up of a version of ``model`` copies: the active
    one, which has a vector of every chunk ingest wrote, when it is of the same model."""
    cur = active_version(conn, coll_id)
    return cur.id if cur is not None and cur.embedding_model == model else None


def _catch_up_compared(conn: psycopg.Connection[Any], collection: str,
                       numbers: Sequence[int]) -> dict[int, int]:
    """Index into each compared version the chunks it lacks, as its activation would first:
    a version built a while ago misses the chunks ingested since (ingest writes only the
    active version), and compared as it was, it was charged with every one of them as
    a change users would see (`only in` the active version), where the activation that
    follows indexes them. Returns the chunks indexed, by version."""
    def infos() -> list[VersionInfo]:
        coll_id = require_collection(conn, collection)
        # a reader is told what it lacks before anything is written (as the pin tells it)
        require_pin_privilege(conn)
        # each named by compare's argument that gave it (the same number twice: version_a)
        named = {numbers[-1]: "version_b", numbers[0]: "version_a"}
        return [_version_row(conn, coll_id, n, named[n]) for n in dict.fromkeys(numbers)]

    found = _db(conn, infos)
    # a building version is refused by the search that follows; a version being dropped
    # is searched as it stands
    todo = [i for i in found if i.missing_chunks and i.state in ("ready", "retired")
            and not i.params.get("dropping")]
    if not todo or any(i.state == "building" for i in found):
        return {}

    def body() -> dict[int, int]:
        from pgfunnel.db import refuse_read_only

        # the chunks are written as this release writes them (as activate does), and
        # on a replica not at all: said before the model embeds them
        require_current_schema(conn)
        refuse_read_only(conn, "versions compare (it indexes the chunks a version lacks)")
        coll_id = require_collection(conn, collection)
        done: dict[int, int] = {}
        for info in todo:
            done[info.version] = catch_up(
                conn, coll_id, info.id, _cached_embedder(info.embedding_model),
                reuse_from=_vector_source(conn, coll_id, info.embedding_model))
        return done

    return _db(conn, body)


def _same_value(logged: Any, given: Any) -> bool:
    """Whether a parameter the caller gives is the value a log records (JSON's list for
    a tuple of weights, its 60 for 60.0)."""
    if isinstance(logged, (list, tuple)) and isinstance(given, (list, tuple)):
        return len(logged) == len(given) and all(
            _same_value(a, b) for a, b in zip(logged, given, strict=True))
    return bool(logged == given)


@functools.lru_cache(maxsize=2)
def _cached_embedder(model: str) -> Embedder:
    # compare embeds the queries once per version; two versions often share a model
    return Embedder(model)


@rows_by_position
def last_queries(conn: psycopg.Connection[Any], collection: str, n: int) -> list[str]:
    """The texts of the last ``n`` distinct logged searches of a collection (newest first).
    A text a search could not take (over its 10,000 characters: ``final()`` logs whatever
    ``query_text`` its caller passes) is left out; replayed, it failed the whole compare."""
    return [str(r[0]) for r in _last_logged(conn, collection, n, ("query_text",))]


#: whether a logged search had a query embedding: its notes record it (a row logged
#: before they did: a guess from its trace, as explain's replay makes it: none of its
#: candidates came from the dense leg, which returns its nearest rows whenever it runs)
#: what the notes record of it, NULL where they do not (explain's replay reads this too)
LOGGED_EMBEDDING_RECORDED = (
    "case when jsonb_typeof(notes -> 'query_embedding') = 'boolean' "
    "then (notes ->> 'query_embedding')::boolean end")
_LOGGED_EMBEDDED = sql.SQL(
    "coalesce({}, exists (select from pgfunnel.search_trace t where t.search_id = sl.id "
    "and t.dense_rank is not null))").format(sql.SQL(LOGGED_EMBEDDING_RECORDED))
#: the logged config's keys that are a replay's search parameters (the reader, the time
#: and the collection come from the log row itself): `versions compare --last` and
#: explain's replay search with them
LOGGED_SEARCH_PARAMS = ("k", "language", "metadata_filter", "fusion", "rrf_k", "weights",
                        "lexical_depth", "dense_depth", "overfetch", "per_source_cap",
                        "ef_search", "k1", "b")
#: the search parameters a logged config records, as a jsonb object: the keys above that
#: it holds, but the k of a search `pgfunnel eval` logged, whose final() is given the
#: pool's length as its k: its notes' eval_k, the k the eval scored at, stands in (always
#: one of the keys above); a key it lacks (a row logged before pgfunnel recorded it, an
#: eval's before its notes kept eval_k) is replayed with its default, and said guessed.
#: funnel_search (which the Python search without a reranker runs) logs the weights it
#: used, chosen by the query when none were given: its notes say whether they were given
#: (weights_given), and where they do not (a row logged before they did), weights that
#: are one of those the search chooses (``pgfunnel._automatic_weights()``, which the
#: search's own rules read) are not taken as given (the search chooses again).
#: An expression over a search_log row named ``sl``, its one placeholder the keys
#: (:data:`LOGGED_SEARCH_PARAMS`): explain's replay reads a logged search's with it too
LOGGED_PARAMS = (
    "(select case when sl.notes -> 'weights_given' = 'false'::jsonb then p.params "
    "|| '{\"weights\": null}'::jsonb when coalesce(sl.notes ? 'weights_given', false) "
    "or sl.config ? 'trace' or p.params -> 'weights' not in (select "
    "pg_catalog.to_jsonb(a.weights) from pgfunnel._automatic_weights() a) "
    "then p.params else p.params - 'weights' end "
    "from (select coalesce(jsonb_object_agg(e.key, e.value), '{}'::jsonb) "
    "|| case when coalesce(sl.notes ? 'judged_query', false) "
    "and jsonb_typeof(sl.notes -> 'eval_k') = 'number' "
    "then jsonb_build_object('k', sl.notes -> 'eval_k') else '{}'::jsonb end as params "
    "from jsonb_each(case when jsonb_typeof(sl.config) = 'object' then sl.config "
    "else '{}'::jsonb end) e where e.key = any(%s::text[]) and not (e.key = 'k' and "
    "coalesce(sl.notes ? 'judged_query', false))) p)")
#: whether its text was given to the lexical leg: not when its notes say so
#: (query_text_searched false), nor for an eval of a dense-only configuration logged
#: before they did (its config's legs); explain's replay reads this too
LOGGED_TEXT_SEARCHED = (
    "not (coalesce(notes -> 'query_text_searched' = 'false'::jsonb, false) "
    "or coalesce(config ->> 'legs' = 'dense', false))")


def _last_logged(conn: psycopg.Connection[Any], collection: str, n: int,
                 columns: Sequence[str]) -> list[tuple[Any, ...]]:
    """The last ``n`` distinct ``columns`` of a collection's logged searches (newest first),
    each followed by the time the latest of its searches ran (``at``), whether its
    embedding was guessed and whether one of its searches reranked, leaving out texts a
    search could not take (empty, or over its 10,000 characters)."""
    from pgfunnel.search import MAX_QUERY_CHARS

    _check_count("n", n)
    coll_id = _db(conn, lambda: require_collection(conn, collection))
    listed = sql.SQL(", ").join(map(sql.Identifier, columns))
    # as_of is the one a traced search's config records (final() writes it there; NULL, or
    # no key in a log written before it did, for the search's own time)
    # then whether the embedding was guessed (guessed: the row does not record it), and
    # whether any of its searches reranked its pool (its config's rerank, final()'s)
    return conn.execute(sql.SQL(
        "select {cols}, at, guessed, reranked from (select {cols}, max(at) as at, "
        "bool_and(guessed) as guessed, bool_or(reranked) as reranked "
        "from (select query_text, principals, tenant, "
        "config ->> 'as_of' as as_of, {params} as params, {embedded} as embedded, "
        "{searched} as text_searched, jsonb_typeof(notes -> 'query_embedding') "
        "is distinct from 'boolean' as guessed, "
        "coalesce(config -> 'rerank' = 'true'::jsonb, false) as reranked, "
        "at from pgfunnel.search_log sl "
        "where collection_id = %s and query_text is not null and query_text <> '' "
        "and length(query_text) <= %s) l group by {cols}) s order by at desc limit %s"
    ).format(cols=listed, params=sql.SQL(LOGGED_PARAMS), embedded=_LOGGED_EMBEDDED,
             searched=sql.SQL(LOGGED_TEXT_SEARCHED)),
        (list(LOGGED_SEARCH_PARAMS), coll_id, MAX_QUERY_CHARS, n)).fetchall()


class ReplayConfig(NamedTuple):
    """The search parameters a logged search is replayed with (:func:`replay_config`)."""

    #: every one of :data:`LOGGED_SEARCH_PARAMS` (``rrf_k`` only for RRF fusion)
    config: dict[str, Any]
    #: those its log does not record, replayed with their defaults: a guess
    guessed: list[str]
    #: those its log records that the caller gave another value for
    overridden: list[str]
    #: those the caller gave that this search does not read, left out of ``config``:
    #: ``rrf_k`` beside a fusion other than rrf (the search would refuse it)
    not_applied: list[str]


def replay_config(logged: Mapping[str, Any], given: Mapping[str, Any]) -> ReplayConfig:
    """The parameters a logged search is replayed with, by the one rule `versions compare
    --last` and `explain --search-id` follow: ``logged`` (what :data:`LOGGED_PARAMS`
    reads from its row), with the caller's ``given`` in their place and the defaults of
    those neither holds (the k of a search `pgfunnel eval` logged; a key a row logged
    before pgfunnel recorded it lacks), said to be guessed."""
    from pgfunnel.search import SearchParams

    defaults = SearchParams()
    own = {n: logged[n] for n in LOGGED_SEARCH_PARAMS if n in logged}
    replay = {n: given[n] if n in given else own[n] if n in own else getattr(defaults, n)
              for n in LOGGED_SEARCH_PARAMS}
    not_applied: list[str] = []
    if replay["fusion"] != "rrf":
        # every log records rrf_k (60 by default), which a search fused otherwise never
        # read, and which a search refuses beside another fusion; one given applies to
        # the searches that fuse with rrf (`compare --last --rrf-k 30`), and the others
        # are said to keep theirs rather than fail one query into the compare
        del replay["rrf_k"]
        if "rrf_k" in given:
            not_applied.append("rrf_k")
    return ReplayConfig(replay, [n for n in replay if n not in own and n not in given],
                        [n for n in replay if n in own and n in given
                         and not _same_value(own[n], given[n])], not_applied)


def param_shown(name: str, value: Any) -> str:
    """A search parameter as a message says it: weights as ``1,0.2``, None as ``default``
    (weights: ``chosen per query``, by the search for its query)."""
    if value is None:
        return "chosen per query" if name == "weights" else "default"
    if isinstance(value, (list, tuple)):
        return ",".join(f"{x:g}" if isinstance(x, float) else str(x) for x in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def guessed_said(names: Sequence[str], config: Mapping[str, Any]) -> str:
    """The parameters a replay guessed, and the defaults it took, as messages say them:
    ``per_source_cap 3, k 10``."""
    return ", ".join(f"{n} {param_shown(n, config.get(n))}" for n in names)


def _logged_as_of(text: str | None) -> dt.datetime | None:
    """The ``as_of`` a logged config records, as a search takes it: None for the search's
    own time (or a config that names none, or none this reads), ``infinity`` as the latest
    time Python holds (and ``-infinity`` the earliest)."""
    if text is None:
        return None
    if text in ("infinity", "-infinity"):
        edge = dt.datetime.max if text == "infinity" else dt.datetime.min
        return edge.replace(tzinfo=dt.UTC)
    try:
        # final() writes '2020-03-01T11:00:00.000000Z'; a log written by Python before it
        # did holds str() of the datetime (or date) the search was given
        return dt.datetime.fromisoformat(text)
    except ValueError:
        return None


class LoggedSearch(NamedTuple):
    """A logged search as `versions compare --last` replays it: its text, the reader
    it ran as and the time it searched as of (the ``as_of`` its config records, or for a
    search made as of its own time, the time it ran: as explain's replay of a logged
    search takes it; None only for one made by hand without it: the time it is
    replayed), and the legs it searched with (``"both"``; ``"lexical"`` when its log row
    records no query embedding; ``"dense"`` when its text was not given to the lexical
    leg, ``notes.query_text_searched`` false), with ``legs_guessed`` when the row does
    not record the embedding and the legs were guessed from its trace, as explain's
    replay guesses them. ``config`` holds the search parameters its logged config records
    (:data:`LOGGED_SEARCH_PARAMS`: fusion, weights, depths, overfetch, per_source_cap, k,
    k1, b, ...), which :func:`compare` replays it with; None (one made by hand without
    them) replays it with the comparison's parameters."""

    query_text: str
    principals: tuple[str, ...]
    tenant: str | None
    as_of: dt.datetime | None = None
    legs: str = "both"
    legs_guessed: bool = False
    config: dict[str, Any] | None = None
    #: it reranked its pool (its config's ``rerank``; of a text searched several times
    #: with one configuration, any of them), which :func:`compare` does not: the results
    #: it compares are the funnel's before a rerank
    reranked: bool = False


@rows_by_position
def last_searches(conn: psycopg.Connection[Any], collection: str,
                  n: int) -> list[LoggedSearch]:
    """The last ``n`` distinct logged searches of a collection (newest first), each with
    the principals and tenant it ran as and the time it searched as of: the ``as_of`` its
    config records, or (NULL: the search's own time) the time it ran, the latest such
    search's when one reader searched a text several times. Replayed without them, a
    search of documents that are not public found nothing on either version, which
    compared as identical, and a search as of another time, or one made before a
    document was withdrawn, searched the documents valid now. Texts a search could not
    take are left out, as by :func:`last_queries`. One text searched with other legs (with
    and without a query embedding), or with another configuration (fusion, k, ...), is
    two searches."""
    return [LoggedSearch(str(t), tuple(p or ()), None if tn is None else str(tn),
                         _logged_as_of(None if a is None else str(a)) or at,
                         "dense" if not searched else "both" if embedded else "lexical",
                         bool(guessed) and not embedded, dict(params or {}),
                         bool(reranked))
            for t, p, tn, a, params, embedded, searched, at, guessed, reranked in _last_logged(
                conn, collection, n, ("query_text", "principals", "tenant", "as_of",
                                      "params", "embedded", "text_searched"))]


def read_query_file(path: str | Path) -> tuple[list[Any], bool]:
    """Queries from a JSONL file: judged (the eval format) when every line has judgments,
    else the ``query`` field of each line (or the line itself when it is not JSON)."""
    from pgfunnel.eval.qrels import load_queries, over_limit_history

    p = Path(path)
    try:
        text = read_file_text(p)
    except OSError as exc:
        raise InvalidInputError(f"queries: cannot read {p}: {exc}") from exc
    # with a BOM the first line was no JSON, so a judged file was read as plain queries
    # and that line's JSON searched as text
    # (line number in the file, line): blank lines are skipped, and not counted out of
    # the numbers an error names
    lines = [(n, ln) for n, ln in enumerate(text.removeprefix("\ufeff").splitlines(), 1)
             if ln.strip()]
    objs: list[Any] = []
    for _, ln in lines:
        try:
            objs.append(json.loads(ln))
        except JSON_ERRORS:
            objs.append(ln)
    if objs and all(isinstance(o, dict) and "relevant" in o for o in objs):
        judged = load_queries(p)
        # compare makes every follow-up stand-alone, as eval does by default: a history
        # over the resolver's limit is refused here, with its line, before any search
        for q in judged:
            if (problem := over_limit_history(q)) is not None:
                raise InvalidInputError(problem)
        return judged, True
    texts = [o.get("query") if isinstance(o, dict) else o for o in objs]
    bad = [n for (n, _), t in zip(lines, texts, strict=True)
           if not isinstance(t, str) or not t.strip()]
    if bad:
        raise InvalidInputError(f"queries: {p}: line {bad[0]} has no query text")
    # as the judged format's lines are checked (eval.qrels.parse_query): with the line, not
    # by the search minutes in ("query_text: contains a NUL byte", naming no line) or by
    # the tokenizer's TypeError for a lone surrogate
    from pgfunnel.search import query_text_problem

    for (n, _), t in zip(lines, map(str, texts), strict=True):
        if (problem := query_text_problem(t)) is not None:
            raise InvalidInputError(f"queries: {p}: line {n}: the query {problem}")
    return [str(t) for t in texts], False


def _refuse_weights_without_a_leg(weights: Any, texts: Sequence[str],
                                  legs: Sequence[str]) -> None:
    """Weights given that leave a logged search no leg to run (weight 0 to the lexical
    leg of one logged without a query embedding, or to the dense leg of one whose text
    no lexical leg read): a ConfigError naming those searches, before anything is
    searched, not the search's own refusal one query into the compare."""
    try:
        lexical, dense = (float(w) for w in weights)
    except (TypeError, ValueError):
        return  # none given, or a value the search itself refuses, by its name
    for weight, leg, why in ((lexical, "lexical", "logged without a query embedding"),
                             (dense, "dense", "logged with no text given to the lexical leg")):
        stuck = [t for t, g in zip(texts, legs, strict=True) if g == leg]
        if weight == 0 and stuck:
            one = len(stuck) == 1
            names = ", ".join(shown(t) for t in stuck[:5]) + (", ..." if len(stuck) > 5 else "")
            raise ConfigError("weights", f"{shown(list(weights))} gives weight 0 to the {leg} "
                              f"leg, the only one {len(stuck)} logged "
                              f"{'search' if one else 'searches'} ({names}) can run ({why}); "
                              f"give the {leg} leg a weight, or compare "
                              f"{'that query' if one else 'those queries'} with --queries")


@rows_by_position
def compare(conn: psycopg.Connection[Any], collection: str, version_a: int, version_b: int,
            queries: Sequence[Any], *, k: int | None = None, n_resamples: int = 2000,
            **params: Any) -> Comparison:
    """What users would see differently: overlap@k per query between two versions, and with
    judged queries (:class:`~pgfunnel.eval.qrels.JudgedQuery`) the nDCG@k change with its
    paired-bootstrap 95% interval. A judged query with a history is made stand-alone first,
    as `pgfunnel eval` does by default, so both give a version the same nDCG@k.

    A logged search (:class:`LoggedSearch` with its ``config``) is replayed with the search
    parameters it was logged with, its k (the cutoff of its overlap@k) among them; ``k``
    and the search parameters given in ``params`` replace them (said per query in
    :attr:`QueryDiff.overridden`), and a parameter its log does not record takes its
    default (:attr:`QueryDiff.config_guessed`). ``k`` None: 10, or a logged search's own.
    Nothing is reranked: a logged search that reranked its pool is compared on the
    funnel's results before the rerank, said per query (:attr:`QueryDiff.logged_reranked`)."""
    from pgfunnel.eval.harness import Harness, standalone_query
    from pgfunnel.eval.metrics import collapse_to_documents, paired_bootstrap, score_run
    from pgfunnel.eval.qrels import JudgedQuery, judging_level

    if k is not None and k < 1:
        raise ConfigError("k", f"must be at least 1, got {k}")
    if not queries:
        raise InvalidInputError("queries: no queries to compare on")
    judged = all(isinstance(q, JudgedQuery) for q in queries)
    respelled: dict[str, str] = {}
    missing: list[str] = []
    if judged:
        # judged items named as `eval` reads them (a file name matched to its citekey),
        # looked up as the searches' reader: the docs promise both tools one nDCG@k, and
        # compare scored `guides/setup.md` as never found where eval found it
        jq = [q for q in queries if isinstance(q, JudgedQuery)]
        reader = Harness(conn, collection, k=10 if k is None else k,
                         principals=params.get("principals") or (),
                         tenant=params.get("tenant"), embedder=None)
        jq, respelled, missing = reader.with_citekey_spellings(conn, jq, judging_level(jq))
        queries = jq
    # searched as `pgfunnel eval` searches them by default, so both give a version one score:
    # a follow-up resolved with the collection's qualifiers, as eval and a search with
    # history resolve it (without them "and on monthly plans?" carried "annual" too)
    qualifiers: list[str] = []
    if any(isinstance(q, JudgedQuery) and q.history for q in queries):
        from pgfunnel.query_plans import _terms, collection_settings

        qualifiers = _terms(collection_settings(conn, collection), "qualifiers")
    texts = [standalone_query(q, qualifiers) if isinstance(q, JudgedQuery)
             else q.query_text if isinstance(q, LoggedSearch) else str(q) for q in queries]
    ids = [q.query_id if isinstance(q, JudgedQuery) else f"q{i + 1}"
           for i, q in enumerate(queries)]
    # a logged search runs as the reader it ran as, unless the caller names one for all,
    # and as of the time it searched as of, unless the caller names one
    named_reader = "principals" in params or "tenant" in params
    readers = None if not any(isinstance(q, LoggedSearch) for q in queries) else [
        {**({} if named_reader else {"principals": list(q.principals), "tenant": q.tenant}),
         **({} if "as_of" in params or q.as_of is None else {"as_of": q.as_of})}
        if isinstance(q, LoggedSearch) else {} for q in queries]
    # and with the legs it searched with: a search logged without a query embedding was
    # compared as a hybrid one, its text embedded
    legs = [q.legs if isinstance(q, LoggedSearch) else "both" for q in queries]
    guessed = [isinstance(q, LoggedSearch) and q.legs_guessed for q in queries]
    # a reranked one is compared without its reranker, which is no part of an index
    # version (and which its log may not name: a custom one): said per query
    reranked = [isinstance(q, LoggedSearch) and q.reranked for q in queries]
    # and with the configuration it was logged with (it was replayed with the caller's, so
    # a search made with rrf, or k 3, was compared as another search): the parameters the
    # caller gives replace the logged ones, and one the log lacks takes its default
    given = {**{n: params[n] for n in LOGGED_SEARCH_PARAMS if n in params},
             **({} if k is None else {"k": k})}
    configs: list[dict[str, Any] | None] = []
    config_guessed: list[list[str]] = []
    overridden: list[list[str]] = []
    not_applied: list[list[str]] = []
    for q in queries:
        logged = q.config if isinstance(q, LoggedSearch) else None
        if logged is None:
            configs.append(None)
            config_guessed.append([])
            overridden.append([])
            not_applied.append([])
            continue
        replay = replay_config(logged, given)
        configs.append(replay.config)
        config_guessed.append(replay.guessed)
        overridden.append(replay.overridden)
        not_applied.append(replay.not_applied)
    _refuse_weights_without_a_leg(given.get("weights"), texts, legs)
    cutoffs = [int(c["k"]) if c is not None else 10 if k is None else k for c in configs]
    # a logged search's own parameters hold the caller's that apply to it, and lack those
    # that do not (rrf_k beside another fusion): the caller's are not given it again
    searched = {n: v for n, v in params.items() if n not in LOGGED_SEARCH_PARAMS} \
        if readers is not None else params
    own_params = None if readers is None else [
        {**r, **(c if c is not None else given)} for r, c in zip(readers, configs, strict=True)]
    caught_up = _catch_up_compared(conn, collection, (version_a, version_b))
    res_a = search_pinned(conn, collection, version_a, texts, k=10 if k is None else k,
                          readers=own_params, legs=legs, **searched)
    res_b = search_pinned(conn, collection, version_b, texts, k=10 if k is None else k,
                          readers=own_params, legs=legs, **searched)
    rank_a = {qid: [r.item_key for r in rs] for qid, rs in zip(ids, res_a, strict=True)}
    rank_b = {qid: [r.item_key for r in rs] for qid, rs in zip(ids, res_b, strict=True)}
    diffs: list[QueryDiff] = []
    for i, (qid, text) in enumerate(zip(ids, texts, strict=True)):
        cut = cutoffs[i]
        a, b = rank_a[qid][:cut], rank_b[qid][:cut]
        denom = max(len(a), len(b))
        overlap = len(set(a) & set(b)) / denom if denom else 1.0
        at_b = {x: n for n, x in enumerate(b)}
        shifts = [abs(n - at_b[x]) for n, x in enumerate(a) if x in at_b]
        diffs.append(QueryDiff(qid, text, overlap, a[:1] == b[:1],
                               [x for x in a if x not in b], [x for x in b if x not in a],
                               reader=(readers[i] or None) if readers is not None else None,
                               identical=a == b,
                               rank_shift=float(np.mean(shifts)) if shifts else 0.0,
                               legs=legs[i],
                               legs_guessed=guessed[i], k=cut, config=configs[i],
                               config_guessed=config_guessed[i], overridden=overridden[i],
                               logged_reranked=reranked[i], not_applied=not_applied[i]))
    cutoff = k if k is not None else cutoffs[0] if len(set(cutoffs)) == 1 else None
    cmp = Comparison(collection, version_a, version_b, cutoff, len(diffs),
                     float(np.mean([d.overlap for d in diffs])),
                     sum(1 for d in diffs if d.identical),
                     sum(1 for d in diffs if not d.top1_same), judged,
                     empty_in_both=sum(1 for qid in ids if not rank_a[qid] and not rank_b[qid]),
                     reordered=sum(1 for d in diffs if d.overlap == 1.0 and not d.identical),
                     judged_items_respelled=respelled, judged_items_missing=missing,
                     caught_up=caught_up,
                     legs_guessed=[d.query_id for d in diffs if d.legs_guessed],
                     config_guessed=[d.query_id for d in diffs if d.config_guessed],
                     overridden={n: given[n] for n in LOGGED_SEARCH_PARAMS
                                 if any(n in d.overridden for d in diffs)},
                     logged_reranked=[d.query_id for d in diffs if d.logged_reranked],
                     not_applied=[d.query_id for d in diffs if d.not_applied])
    if judged:
        jq = list(queries)
        if judging_level(jq) == "document":
            rank_a = {q: collapse_to_documents(r) for q, r in rank_a.items()}
            rank_b = {q: collapse_to_documents(r) for q, r in rank_b.items()}
        # judged queries are no logged searches: one cutoff for all
        at = cutoffs[0]
        sa, sb = score_run(rank_a, jq, at), score_run(rank_b, jq, at)
        name = f"ndcg@{at}"
        a_nd = {q: s[name] for q, s in sa.items()}
        b_nd = {q: s[name] for q, s in sb.items()}
        if a_nd:
            boot = paired_bootstrap(a_nd, b_nd, n_resamples=n_resamples)
            cmp.ndcg_a = float(np.mean(list(a_nd.values())))
            cmp.ndcg_b = float(np.mean(list(b_nd.values())))
            cmp.ndcg_diff, cmp.ndcg_low, cmp.ndcg_high = boot.mean_diff, boot.low, boot.high
        for d in diffs:
            d.ndcg_a, d.ndcg_b = a_nd.get(d.query_id), b_nd.get(d.query_id)
    # most changed first: the fewest shared results, then (a query whose results only
    # moved, overlap 1.0, among them) the most moved; identical lists last
    cmp.per_query = sorted(diffs, key=lambda d: (d.overlap, d.identical, -d.rank_shift,
                                                 d.query_id))
    return cmp


__all__ = [
    "LOGGED_PARAMS", "LOGGED_SEARCH_PARAMS", "Activation", "Comparison", "LoggedSearch",
    "ReindexResult", "ReplayConfig", "Validation", "ValidationFailed", "VersionInfo",
    "activate", "build_index", "catch_up", "check_hnsw_settings", "cleanup_invalid_indexes",
    "compare", "drop",
    "guessed_said", "last_queries", "last_searches", "list_versions", "lock_holder",
    "param_shown", "read_query_file", "reindex", "replay_config", "require_pin_privilege",
    "retire", "rollback", "search_pinned", "validate", "writer_lock",
]
