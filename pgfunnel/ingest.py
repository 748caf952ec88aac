"""Ingest: documents -> chunks -> vectors and BM25 postings, written with COPY.

Each batch of documents is one transaction, so a document is always wholly
present or wholly absent. Re-ingesting a citekey replaces its chunks; a chunk
whose text is unchanged keeps its vector (content hash), so only new text is
embedded. BM25 statistics are updated in the same transaction as the postings.
"""

from __future__ import annotations

import numbers
import os
import re
import shlex
import string
import sys
import threading
import time
import unicodedata
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import dataclass, field, replace
from itertools import chain
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import psycopg
from psycopg import sql
from psycopg.copy import QueuedLibpqWriter

from pgfunnel import defaults
from pgfunnel.db import (
    WRITER_NOT_FOR_SEARCHES,
    staging_refused,
    try_register_vector,
    tuple_rows,
)
from pgfunnel.embedder import (
    DEFAULT_EMBEDDING_MODEL,
    VECTOR_NORM_MAX,
    VECTOR_NORM_MIN,
    Embedder,
    check_model_name,
    check_vector,
    saved_embedding_dimension,
)
from pgfunnel.errors import (
    COLLECTION_FORMS,
    AccessError,
    ConfigError,
    ConflictError,
    InvalidDocumentError,
    InvalidInputError,
    InvalidVectorError,
    NotFoundError,
    PgfunnelError,
    check_sql_text,
    shown,
    string_list,
    translate,
    warn_at_caller,
)
from pgfunnel.sources import (
    CHUNKING_VERSION,
    DEFAULT_CHUNK_WORDS,
    DEFAULT_EMBED_INPUT,
    DEFAULT_LEXICAL_INPUT,
    EMBED_TEXT_ALONE,
    LEXICAL_TEXT_ALONE,
    TERM_HEADING_LEVEL,
    UNMARKED_CHUNKING,
    ChunkRecord,
    DocumentRecord,
    as_utc,
    check_embed_input,
    check_lexical_input,
    check_record,
    chunk_text,
    chunking_version,
    embedding_input,
    format_suffix,
    lexical_input,
    path_without_suffix,
    vector_key,
    version_embed_input,
    version_lexical_input,
)

# kept under its old name for code that imports it
DEFAULT_COLLECTION = defaults.COLLECTION
# english_v8: identifier-aware with the inner names of dotted identifiers, identifiers
# opened or closed by underscores (__init__, _exit) kept whole with them, over
# Unicode-folded text with Unicode hyphens read as '-', words of every script read alike
# whatever the database's locale, Chinese, Japanese, Korean, Thai, Lao, Burmese and Khmer
# words as pairs of characters (sql/010_analyzer.sql); versions built with an older
# analyzer keep it until reindexed
DEFAULT_ANALYZER = "english_v8"
# what TermAnalyzer strips from either end of a word before analysing it: characters no
# token opens or closes with, so a word's terms are those of the word stripped
_STRIP = string.punctuation + "\u201c\u201d\u2018\u2019\u00ab\u00bb"
# the analyzers to which an underscore at either end of an identifier is part of it
# (__init__, _exit): their words keep it
_UNDERSCORE_ANALYZERS = frozenset({"english_v8", "simple_v8", "german_v8"})
_STRIP_KEEPING_UNDERSCORES = _STRIP.replace("_", "")

ProgressFn = Callable[[str, int, int | None], None]


@dataclass
class IngestStats:
    documents_seen: int = 0
    documents_written: int = 0
    documents_unchanged: int = 0
    chunks_written: int = 0
    chunks_removed: int = 0
    chunks_embedded: int = 0
    # vectors kept from the chunk's previous version (same text), and vectors the caller
    # passed in (``ingest(vectors=...)``)
    chunks_reused: int = 0
    chunks_given: int = 0
    # texts the model read: chunks whose embedding input is the same text (an object
    # documented twice, a repeated boilerplate section) are embedded once
    texts_embedded: int = 0
    # of those, texts read ahead of a batch's transaction whose vectors turned out not
    # needed once it held the collection's lock: another ingest of the same documents had
    # written them meanwhile (the loser of two simultaneous ingests embeds everything and
    # writes nothing, and its summary read "0 embedded" beside the minutes it embedded)
    texts_unused: int = 0
    # the active version's number within its collection (1, 2, ...; what the CLI and
    # `pgfunnel versions` show) and its id (pgfunnel.index_version.id, what the SQL
    # functions that take a version, such as bm25_recount, expect)
    index_version: int | None = None
    index_version_id: int | None = None
    embed_seconds: float = 0.0
    # wall time of the batches less the model's time: chunking, analysis and writes,
    # including any part of the next batch's preparation the writer had to wait for,
    # and the build of a new version's posting index
    db_seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    # ``ingest(prune=True)``: the documents of the collection this ingest did not read,
    # deleted after it (their citekeys, sorted)
    documents_pruned: int = 0
    pruned: list[str] = field(default_factory=list)


@dataclass
class ActiveVersion:
    id: int
    version: int
    embedding_model: str
    dimensions: int
    analyzer: str
    # what the embedder reads per chunk (sources.embedding_input)
    embed_input: str = EMBED_TEXT_ALONE
    # what BM25 indexes per chunk (sources.lexical_input)
    lexical_input: str = LEXICAL_TEXT_ALONE


def collection_id(conn: psycopg.Connection[Any], name: str) -> int | None:
    if not isinstance(name, str) or not name.strip():
        # as the CLI and a search refuse it: delete_documents, list_versions and the other
        # admin functions said "collection None does not exist" (a name left out), or
        # Postgres' "operator does not exist: text = smallint" for a number
        raise ConfigError("collection", f"must be a non-empty name, got {shown(name)}")
    # an undecodable byte of a command line (-c $'\xff') raised a raw
    # UnicodeEncodeError from the driver; a NUL, its DataError
    check_sql_text("collection", name)
    row = conn.execute("select id from pgfunnel.collection where name = %s", (name,)).fetchone()
    return None if row is None else int(row[0])


def require_collection(conn: psycopg.Connection[Any], name: str) -> int:
    cid = collection_id(conn, name)
    if cid is None:
        raise _missing_collection(conn, name)
    return cid


def unread_citekeys(conn: psycopg.Connection[Any], coll: int, read: Iterable[str]) -> list[str]:
    """The citekeys of collection ``coll`` not in ``read``, sorted: what an ingest of
    ``read`` with ``prune`` deletes (``Ingester.ingest``, and the dry run that lists it)."""
    return [str(key) for (key,) in conn.execute(
        "select citekey from pgfunnel.document where collection_id = %s "
        "and not (citekey = any(%s)) order by citekey", (coll, list(read))).fetchall()]


#: how many of a database's collections the error for a missing one names
_COLLECTIONS_NAMED = 10


def ingest_target(name: str) -> str:
    """``name`` as the ``--collection`` of the `pgfunnel ingest` that a missing
    collection's error suggests, shell-quoted to paste (it kept the placeholder NAME
    beside the name asked for); NAME where an ingest would refuse it as a new
    collection's name."""
    try:
        check_new_collection_name(name)
    except PgfunnelError:
        return "NAME"
    return shlex.quote(name)


def _missing_collection(conn: psycopg.Connection[Any], name: str) -> NotFoundError:
    """The error for a collection that does not exist, naming those that do: a new user
    who ran `pgfunnel demo` (collection 'demo') and then `pgfunnel search ...` (collection
    'default') was told only to ingest into 'default'."""
    into = ingest_target(name)
    with tuple_rows(conn):
        names = [str(r[0]) for r in conn.execute(
            "select name from pgfunnel.collection order by name limit %s",
            (_COLLECTIONS_NAMED + 1,)).fetchall()]
    if not names:
        # "has none yet; or ingest into it first" offered an alternative to nothing
        return NotFoundError(f"collection {shown(name)} does not exist; this database has no "
                             "collections yet; ingest into it first: pgfunnel ingest PATH "
                             f"--collection {into}", parameter="collection")
    shown_names = ", ".join(repr(n) for n in names[:_COLLECTIONS_NAMED])
    more = ", ..." if len(names) > _COLLECTIONS_NAMED else ""
    others = (f"this database has {shown_names}{more} (pass one as the collection: "
              f"{COLLECTION_FORMS})")
    return NotFoundError(f"collection {shown(name)} does not exist; {others}; or ingest into it "
                         f"first: pgfunnel ingest PATH --collection {into}",
                         parameter="collection")


def active_version(conn: psycopg.Connection[Any], coll_id: int) -> ActiveVersion | None:
    row = conn.execute(
        "select id, version, embedding_model, dimensions, analyzer, params "
        "from pgfunnel.index_version where collection_id = %s and state = 'active'",
        (coll_id,)).fetchone()
    if row is None:
        return None
    vid, version, model, dimensions, analyzer, params = row
    return ActiveVersion(int(vid), int(version), str(model), int(dimensions), str(analyzer),
                         version_embed_input(params or {}), version_lexical_input(params or {}))


#: the names of a version's HNSW index and posting partition are these plus its id
HNSW_INDEX_PREFIX = "embedding_hnsw_v"
POSTING_PARTITION_PREFIX = "posting_v"


def hnsw_index_name(version_id: int) -> str:
    return f"{HNSW_INDEX_PREFIX}{version_id}"


def ingest_lock(conn: psycopg.Connection[Any], collection: str) -> None:
    """Wait for, then hold until the transaction ends, the collection's writer lock: one
    ingest batch, delete or version switch of a collection at a time (searches never
    wait). pgfunnel.activate_version takes the same lock in SQL."""
    # built-ins named in pg_catalog, their arguments typed: a function of the same name
    # that fits the arguments better in a schema on the search_path (public, where older
    # servers let every role create) would otherwise be called, as the owner
    conn.execute("select pg_catalog.pg_advisory_xact_lock("
                 "pg_catalog.hashtext('pgfunnel:ingest:' || %s::text))",
                 (collection,))


#: the key (hashed, the collection's name after it) of the lock :func:`one_ingest_at_a_time`
#: holds for the whole of a `pgfunnel ingest` run
INGEST_RUN_LOCK = "pgfunnel:ingest-run:"


@contextmanager
def one_ingest_at_a_time(conn: psycopg.Connection[Any], collection: str,
                         on_wait: Callable[[str], None] | None = None,
                         poll_s: float = 0.2) -> Iterator[None]:
    """Hold, for the session of ``conn`` (autocommit), the lock that lets one ingest run of
    ``collection`` at a time: taken before the run reads what is stored, released when
    the block ends or the session does (a crashed run's lock goes with its connection).

    Two runs at once (overlapping cron jobs, a CI job retried while the first still ran)
    each embedded every changed document (minutes on a CPU), and the one that lost the
    race for the per-batch writer lock threw its vectors away. The second now waits, then
    finds the first's documents unchanged and embeds nothing. ``on_wait`` gets the line
    that names the session it waits for (pid, application_name), before it waits.

    Taken by polling: a session blocked in pg_advisory_lock holds a snapshot, which the
    first run's concurrent HNSW build would wait for (a deadlock). The session's
    lock_timeout, when set, bounds the wait: a ConflictError naming the holder.

    `pgfunnel ingest` holds it from before it reads what is stored, and
    :meth:`Ingester.ingest` holds it for its call; session advisory locks stack, so the
    Ingester the command runs on the same session takes it again without waiting."""
    from pgfunnel.schema import advisory_lock_holder

    # checked before it goes into the key: one that is not valid Unicode (or holds a NUL)
    # is refused naming the collection, not as "a value given" quoting the whole key
    check_sql_text("collection", collection)
    key = INGEST_RUN_LOCK + collection

    def take() -> bool:
        row = conn.execute("select pg_catalog.pg_try_advisory_lock(pg_catalog.hashtext(%s))",
                           (key,)).fetchone()
        return bool(row and row[0])

    try:
        if not take():
            holder = advisory_lock_holder(conn, key)
            # shown with its unit ('200ms', '0'), so that it reads as an interval
            row = conn.execute(
                "select pg_catalog.current_setting('lock_timeout'), pg_catalog.date_part("
                "'epoch', pg_catalog.current_setting('lock_timeout')::interval)").fetchone()
            limit, limit_s = (str(row[0]), float(row[1])) if row else ("0", 0.0)
            if holder is not None and on_wait is not None:
                on_wait(f"waiting for another ingest of collection {collection!r} to finish: "
                        f"{holder[0]}; this ingest then embeds only what that one did not "
                        f"write (pg_terminate_backend({holder[1]}) ends one that is stuck)")
            started = time.monotonic()
            while not take():
                if limit_s and time.monotonic() - started >= limit_s:
                    holder = advisory_lock_holder(conn, key) or holder
                    raise ConflictError(
                        f"another ingest of collection {collection!r} is running: "
                        f"{holder[0] if holder else 'a session that has ended since'}; this "
                        f"ingest waited for it as long as the session's lock_timeout ({limit}) "
                        "allows and wrote nothing: run it again when that one has finished")
                time.sleep(poll_s)
    except psycopg.Error as exc:
        raise translate(exc) from exc
    try:
        yield
    finally:
        # a closed or broken connection has let go of the lock already
        with suppress(psycopg.Error):
            if not conn.closed:
                conn.execute("select pg_catalog.pg_advisory_unlock(pg_catalog.hashtext(%s))",
                             (key,))


# What the HNSW graph of a version stores, recorded in its params as "hnsw_type".
# Versions made by this release store half-precision copies: on the pydocs corpus
# (9,624 chunks, 384 dims) the index is 11 MB instead of 19, with the same walk time,
# recall@40 against an exact scan (0.943 / 0.941) and nDCG@10. The table keeps
# full-precision vectors: the returned rows are ranked and scored on those, so only the
# graph walk sees the rounding. A version without the key (made before) has a full
# precision graph and keeps it.
HNSW_HALFVEC = "halfvec"
HNSW_VECTOR = "vector"
HNSW_TYPES = (HNSW_HALFVEC, HNSW_VECTOR)
DEFAULT_HNSW_TYPE = HNSW_HALFVEC
# pgvector's limits for an HNSW index, per stored type
HNSW_MAX_DIMENSIONS = {HNSW_HALFVEC: 4000, HNSW_VECTOR: 2000}


def version_hnsw_type(params: dict[str, Any]) -> str:
    """The type an index version's HNSW graph stores (full precision when unrecorded)."""
    return str(params.get("hnsw_type", HNSW_VECTOR))


# pgvector holds the graph in memory while it fits in maintenance_work_mem; measured
# on pgvector 0.8, an element of a 384-dimension, m = 16 graph takes 2,250 bytes, about
# 4 bytes per dimension (2 for halfvec) plus 48 per link slot
_GRAPH_BYTES_PER_DIMENSION = {HNSW_VECTOR: 4, HNSW_HALFVEC: 2}
_GRAPH_BYTES_PER_LINK = 48
_GRAPH_SLACK_BYTES = 32 << 20
# the automatic size stops here; a larger graph needs an explicit maintenance_work_mem
HNSW_BUILD_MEMORY_CAP_BYTES = 8 << 30


def hnsw_build_memory(rows: int, dimensions: int, m: int,
                      hnsw_type: str = DEFAULT_HNSW_TYPE) -> int:
    """Bytes of maintenance_work_mem that hold the whole HNSW graph of ``rows`` vectors."""
    per_element = (_GRAPH_BYTES_PER_DIMENSION[hnsw_type] * dimensions
                   + _GRAPH_BYTES_PER_LINK * m)
    return min(rows * per_element + _GRAPH_SLACK_BYTES, HNSW_BUILD_MEMORY_CAP_BYTES)


def hnsw_build_memory_setting(conn: psycopg.Connection[Any], version_id: int,
                              dimensions: int, m: int, hnsw_type: str) -> str | None:
    """A maintenance_work_mem (in kB) large enough for the version's graph, or None when
    the session's setting already is. A graph that outgrows it is finished tuple by tuple
    on disk, 2x slower here on 40k vectors, and parallel workers stop helping."""
    row = conn.execute(
        "select v.chunk_count, s.setting::bigint * 1024 from pgfunnel.index_version v, "
        "pg_catalog.pg_settings s where v.id = %s and s.name = 'maintenance_work_mem'",
        (version_id,)).fetchone()
    if row is None:
        return None
    wanted = hnsw_build_memory(int(row[0]), dimensions, m, hnsw_type)
    return f"{wanted // 1024}kB" if wanted > int(row[1]) else None


def hnsw_key(hnsw_type: str, dimensions: int, value: sql.Composable,
             vector_schema: str) -> sql.Composed:
    """The expression an HNSW graph of ``hnsw_type`` indexes, applied to ``value`` (the
    embedding column, or a query vector), its function and type named in pgvector's
    schema. Half precision stops at 65,504, so halfvec graphs hold unit vectors: cosine
    distance does not change, and no vector of any scale overflows."""
    dim = sql.Literal(dimensions)
    vs = sql.Identifier(vector_schema)
    if hnsw_type == HNSW_HALFVEC:
        return sql.SQL("{vs}.l2_normalize({value})::{vs}.halfvec({dim})").format(
            vs=vs, value=value, dim=dim)
    return sql.SQL("{value}::{vs}.vector({dim})").format(vs=vs, value=value, dim=dim)


def cosine_distance(vector_schema: str) -> sql.Composed:
    """pgvector's cosine distance operator, named in its schema: a function whose path
    held that schema would let anyone who may create objects there (often everyone, in
    `public` before Postgres 15) shadow the operators it uses with their own code, run as
    the searcher."""
    return sql.SQL("operator({}.<=>)").format(sql.Identifier(vector_schema))


def hnsw_type_of(conn: psycopg.Connection[Any], version_id: int) -> str:
    """The HNSW type version ``version_id`` records; an unknown one is refused, since it
    is spliced into SQL as a type name."""
    row = conn.execute("select params from pgfunnel.index_version where id = %s",
                       (version_id,)).fetchone()
    hnsw_type = version_hnsw_type(row[0] if row is not None and row[0] else {})
    if hnsw_type not in HNSW_TYPES:
        raise PgfunnelError(f"index version {version_id} records an unknown hnsw_type "
                            f"{hnsw_type!r} (known: {', '.join(HNSW_TYPES)})")
    return hnsw_type


# the versions whose graph walk refresh_hnsw_walks caches: active versions first, then
# the newest others (ready, retired, building). One left out plans its walk per search:
# correct, but the plan weighs every version's partial HNSW index on the shared embedding
# table. With 200 more collections (each with its graph) a 2,000-chunk collection left out
# took 1.21 - 1.27 ms a dense leg against 0.90 - 0.97 ms cached, and funnel_search
# 3.3 - 3.6 against 3.05 - 3.14 ms (three rounds alternating, 280 searches each); a
# session's first search compiles the larger function, 16 - 18 against 12 - 14 ms, and
# each rewrite takes 23 ms instead of 7; each compiled branch holds ~13 KB of a session's
# memory (docs/tuning.md, "Many collections"). Newest-first alone let a database of many
# collections push their active versions out behind newer ready and retired ones.
MAX_CACHED_WALKS = 256
#: the FROM clause of the versions whose HNSW index exists and is valid (alias v)
VERSIONS_WITH_VALID_GRAPH = (
    "from pgfunnel.index_version v "
    "join pg_catalog.pg_class c on c.relname = 'embedding_hnsw_v' || v.id "
    " and c.relnamespace = 'pgfunnel'::regnamespace "
    "join pg_catalog.pg_index i on i.indexrelid = c.oid and i.indisvalid ")
# serialises rewrites of pgfunnel._hnsw_walk: concurrent CREATE OR REPLACE of one
# function fails with "tuple concurrently updated" (schema.install_functions takes it too)
WALKS_LOCK_KEY = 0x7067_6677  # "pgfw"

_WALK_BRANCH = sql.SQL("""
    {keyword} version_id = {vid} then{prelude}
        select array_agg(s.chunk_id order by s.dist, s.chunk_id),
               array_agg(1 - s.dist order by s.dist, s.chunk_id)
          into chunk_ids, scores
          from (select e.chunk_id, e.embedding {distance} query_embedding as dist
                  from pgfunnel.embedding e
                 where e.index_version_id = {vid}
                 order by {key_column} {distance} {key_query}
                 limit n) s;""")
# A halfvec graph's query key is computed once per walk, into query_key: written into the
# ORDER BY, the query vector's normalisation ran again for every row the walk returned
# (the sort key is projected per row), 40 l2_normalize calls of a search's 81; 0.95x the
# walk's time (pydocs, 150 queries x 4, paired median).
_WALK_QUERY_KEY = sql.SQL("""
        query_key := {vs}.l2_normalize(query_embedding)::{vs}.halfvec;""")

# enable_sort = off: the walks' plans are generic (cached), and a generic plan reads
# `limit n` as a tenth of the version's rows, which on a version of a few thousand chunks
# (at the ef_search of the session's first search) priced a sort of every row above the
# graph: 8 ms of l2_normalize and sort against 1.4 ms for the walk at 2,000 chunks,
# decided once per session. With sorting off the graph is always what is walked.
_WALK_FUNCTION = sql.SQL("""
create or replace function pgfunnel._hnsw_walk(
    version_id integer, query_embedding {vschema}.vector, n integer,
    out chunk_ids bigint[], out scores double precision[], out cached boolean)
language plpgsql stable
security invoker
set search_path = pg_catalog, pgfunnel
set plan_cache_mode = force_generic_plan
set jit = off
set enable_sort = off
as {body}""")


def refresh_hnsw_walks(conn: psycopg.Connection[Any]) -> bool:
    """Rewrite ``pgfunnel._hnsw_walk`` with one static graph walk per version that has a
    valid HNSW index, so the dense leg walks each from a plan cached per session instead
    of planning a query per search (0.2 ms of a 3 - 4 ms search on pydocs).

    A version's partial index serves only a query naming the version and its key
    expression literally, which is why the walks are written out per version. Runs in
    its own savepoint; returns False, with a warning, when the role may not replace the
    function (it is the schema owner's; searches then plan their walks, still correct).
    """
    from pgfunnel.schema import vector_schema

    vschema = vector_schema(conn)
    if vschema is None:
        return False
    try:
        with conn.transaction():
            conn.execute("select pg_catalog.pg_advisory_xact_lock(%s::bigint)",
                         (WALKS_LOCK_KEY,))
            rows = conn.execute(
                "select v.id, v.dimensions, coalesce(v.params ->> 'hnsw_type', 'vector') "
                + VERSIONS_WITH_VALID_GRAPH
                + "order by v.state = 'active' desc, v.id desc limit %s",
                (MAX_CACHED_WALKS,)).fetchall()
            branches = [
                _WALK_BRANCH.format(
                    keyword=sql.SQL("if" if i == 0 else "elsif"), vid=sql.Literal(int(vid)),
                    prelude=(_WALK_QUERY_KEY.format(vs=sql.Identifier(vschema))
                             if kind == HNSW_HALFVEC else sql.SQL("")),
                    distance=cosine_distance(vschema),
                    key_column=hnsw_key(str(kind), int(dims), sql.SQL("e.embedding"), vschema),
                    key_query=(sql.SQL("query_key") if kind == HNSW_HALFVEC
                               else hnsw_key(str(kind), int(dims), sql.SQL("query_embedding"),
                                             vschema)))
                for i, (vid, dims, kind) in enumerate(
                    r for r in rows if str(r[2]) in HNSW_TYPES)]
            body: sql.Composable = (
                sql.SQL("\ndeclare\n    query_key {vs}.halfvec;\nbegin\n    cached := true;"
                        "{branches}\n    else\n        cached := false;\n    end if;\nend\n"
                        ).format(vs=sql.Identifier(vschema), branches=sql.SQL("").join(branches))
                if branches else sql.SQL("\nbegin\n    cached := false;\nend\n"))
            conn.execute(_WALK_FUNCTION.format(
                vschema=sql.Identifier(vschema),
                body=sql.Literal(body.as_string(conn))))
    except psycopg.errors.InsufficientPrivilege:
        warn_at_caller("pgfunnel: this role may not replace pgfunnel._hnsw_walk, so the new "
                       "graph is walked by a query planned per search; run `pgfunnel init` as "
                       "the schema owner to cache it")
        return False
    return True


def create_hnsw_index(conn: psycopg.Connection[Any], version_id: int, dimensions: int, *,
                      concurrently: bool = False, m: int = defaults.HNSW_M,
                      ef_construction: int = defaults.HNSW_EF_CONSTRUCTION,
                      size_memory: bool = True) -> None:
    """The partial HNSW index of one version (its own dimension, its own rows), and its
    cached walk (:func:`refresh_hnsw_walks`).

    With ``size_memory``, maintenance_work_mem is raised for the build so the graph
    fits (see :func:`hnsw_build_memory`); it is never lowered. A parallel build keeps
    the graph in shared memory, which a container's small /dev/shm can refuse; the build
    is then run again without parallel workers, in the backend's own memory. The graph
    stores the type the version records (:func:`version_hnsw_type`).
    """
    with unbounded_statements(conn):
        _build_hnsw_index(conn, version_id, dimensions, concurrently=concurrently, m=m,
                          ef_construction=ef_construction, size_memory=size_memory)
    refresh_hnsw_walks(conn)


def hnsw_index_statement(version_id: int, dimensions: int, hnsw_type: str,
                         vector_schema: str, *, concurrently: bool,
                         m: int = defaults.HNSW_M,
                         ef_construction: int = defaults.HNSW_EF_CONSTRUCTION) -> sql.Composed:
    """The CREATE INDEX of one version's partial HNSW index (``doctor`` shows it as the
    fix for a missing one, so both build the same index). ``hnsw_type`` must be one of
    HNSW_TYPES: it is spliced in as a type name."""
    return sql.SQL(
        "create index {conc} if not exists {name} on pgfunnel.embedding "
        "using hnsw (({key}) {ops}) "
        "with (m = {m}, ef_construction = {efc}) where index_version_id = {vid}"
    ).format(conc=sql.SQL("concurrently") if concurrently else sql.SQL(""),
             name=sql.Identifier(hnsw_index_name(version_id)),
             key=hnsw_key(hnsw_type, dimensions, sql.Identifier("embedding"), vector_schema),
             ops=sql.SQL("{}.{}").format(sql.Identifier(vector_schema),
                                         sql.Identifier(f"{hnsw_type}_cosine_ops")),
             m=sql.Literal(m), efc=sql.Literal(ef_construction), vid=sql.Literal(version_id))


def _build_hnsw_index(conn: psycopg.Connection[Any], version_id: int, dimensions: int, *,
                      concurrently: bool, m: int, ef_construction: int,
                      size_memory: bool) -> None:
    from pgfunnel.schema import require_vector_schema

    name = hnsw_index_name(version_id)
    hnsw_type = hnsw_type_of(conn, version_id)
    statement = hnsw_index_statement(version_id, dimensions, hnsw_type,
                                     require_vector_schema(conn),
                                     concurrently=concurrently, m=m,
                                     ef_construction=ef_construction)
    memory = (hnsw_build_memory_setting(conn, version_id, dimensions, m, hnsw_type)
              if size_memory else None)
    if not concurrently:
        # transaction-local settings; the savepoint lets the serial retry run in the
        # caller's transaction
        with conn.transaction():
            take_index_build_lock(conn, name)
            if index_state(conn, name) is not None:
                return
            if memory is not None:
                conn.execute("select set_config('maintenance_work_mem', %s, true)", (memory,))
            try:
                with conn.transaction():
                    conn.execute(statement)
                return
            except (psycopg.errors.DiskFull, psycopg.errors.OutOfMemory):
                pass
            conn.execute("select set_config('max_parallel_maintenance_workers', '0', true)")
            conn.execute(statement)
        return
    # Then the lock of every concurrent build and drop on the embedding table, polled the
    # same way: only one CREATE INDEX CONCURRENTLY runs on a table at a time, and a second
    # one queued for the table's lock holds a snapshot that the first, once built, waits
    # for (a deadlock: one of two reindexes of two collections cancelled, its graph left
    # invalid). Queued here instead, outside any transaction, it waits its turn.
    with index_build_session_lock(conn, name), \
            index_build_session_lock(conn, EMBEDDING_DDL_LOCK):
        state = index_state(conn, name)
        if state:
            return
        if state is not None:
            # invalid, and nobody is building it (its builder would hold the lock): what
            # an interrupted concurrent build leaves, which IF NOT EXISTS would keep
            drop_hnsw_index_concurrently(conn, name)
        # CREATE INDEX CONCURRENTLY runs outside a transaction: session settings, restored
        restore = [(setting, str(value)) for setting, value in conn.execute(
            "select name, current_setting(name) from unnest(array['maintenance_work_mem', "
            "'max_parallel_maintenance_workers']) as name").fetchall()]
        try:
            if memory is not None:
                conn.execute("select set_config('maintenance_work_mem', %s, false)", (memory,))
            try:
                conn.execute(statement)
                return
            except (psycopg.errors.DiskFull, psycopg.errors.OutOfMemory):
                # the failed concurrent build left an invalid index behind
                drop_hnsw_index_concurrently(conn, name)
            conn.execute("select pg_catalog.set_config('max_parallel_maintenance_workers', "
                         "'0', false)")
            conn.execute(statement)
        finally:
            for setting, value in restore:
                conn.execute("select pg_catalog.set_config(%s::text, %s::text, false)",
                             (setting, value))


def drop_hnsw_index_concurrently(conn: psycopg.Connection[Any], name: str) -> None:
    """DROP INDEX CONCURRENTLY of an index on pgfunnel.embedding, in turn with the other
    sessions' concurrent builds and drops on the table (:data:`EMBEDDING_DDL_LOCK`: a drop
    queued behind another collection's build deadlocked as a second build did).
    Autocommit connection."""
    with index_build_session_lock(conn, EMBEDDING_DDL_LOCK):
        conn.execute(sql.SQL("drop index concurrently if exists {}").format(
            sql.Identifier("pgfunnel", name)))


def index_state(conn: psycopg.Connection[Any], index_name: str) -> bool | None:
    """Whether an index of schema pgfunnel is valid (True), there but invalid (False: a
    concurrent build in progress or cut short), or absent (None). Read by a query of its
    own, so from a snapshot taken after any wait for its build lock."""
    row = conn.execute(
        "select i.indisvalid and i.indisready from pg_catalog.pg_class c "
        "join pg_catalog.pg_index i on i.indexrelid = c.oid "
        "where c.relnamespace = 'pgfunnel'::pg_catalog.regnamespace and c.relname = %s",
        (index_name,)).fetchone()
    return None if row is None else bool(row[0])


#: the names under which :func:`index_build_session_lock` lets one session at a time run
#: concurrent DDL on a table every collection shares (no index has these names): builds and
#: drops of HNSW indexes on pgfunnel.embedding (each takes the table's SHARE UPDATE
#: EXCLUSIVE lock, and one queued for it holds a snapshot the running one waits for: a
#: deadlock), and detaches of posting partitions (Postgres refuses a second detach while
#: another partition of the table is pending detach)
EMBEDDING_DDL_LOCK = "embedding (concurrent index builds and drops)"
POSTING_DETACH_LOCK = "posting (concurrent partition detaches)"


def _index_build_key(index_name: str) -> str:
    return f"pgfunnel:index:{index_name}"


def take_index_build_lock(conn: psycopg.Connection[Any], index_name: str) -> None:
    """Hold, until the transaction ends, the lock that lets one session at a time build
    the named index. Two first ingests of a new collection finish at about the same
    time, and both find its indexes missing: without the lock the second CREATE INDEX
    IF NOT EXISTS misses the first one's uncommitted index and fails on its name
    (pg_class_relname_nsp_index) after the first commits."""
    conn.execute("select pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext(%s))",
                 (_index_build_key(index_name),))


def try_index_build_lock(conn: psycopg.Connection[Any], index_name: str) -> bool:
    """Take the index's build lock for the session if no other session holds it."""
    row = conn.execute("select pg_catalog.pg_try_advisory_lock(pg_catalog.hashtext(%s))",
                       (_index_build_key(index_name),)).fetchone()
    return bool(row and row[0])


def release_index_build_lock(conn: psycopg.Connection[Any], index_name: str) -> None:
    if not conn.closed and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
        conn.execute("select pg_catalog.pg_advisory_unlock(pg_catalog.hashtext(%s))",
                     (_index_build_key(index_name),))


@contextmanager
def index_build_session_lock(conn: psycopg.Connection[Any], index_name: str,
                             poll_seconds: float = 0.25) -> Iterator[None]:
    """Hold the index's build lock for the session while a concurrent build runs.

    Taken by polling, outside any transaction: a session blocked in
    pg_advisory_lock holds a snapshot, and the concurrent build it waits for waits in
    turn for every older snapshot to end (a deadlock). The lock also tells
    :func:`pgfunnel.versions.cleanup_invalid_indexes` that an invalid index is one being
    built, not one left by a killed build."""
    while not try_index_build_lock(conn, index_name):
        time.sleep(poll_seconds)
    try:
        yield
    finally:
        release_index_build_lock(conn, index_name)


def second_connection(conn: psycopg.Connection[Any]) -> psycopg.Connection[Any] | None:
    """An autocommit connection to the same server as ``conn``, or None when the server
    refuses one (at its connection limit, say)."""
    try:
        params = conn.info.get_parameters()
        if conn.info.password:
            params["password"] = conn.info.password
        conn2 = psycopg.connect(psycopg.conninfo.make_conninfo(**params), autocommit=True,
                                connect_timeout=5)
        # behind a transaction-mode pooler, as ``conn`` is (PGFUNNEL_PREPARE_THRESHOLD)
        conn2.prepare_threshold = conn.prepare_threshold
        return conn2
    except psycopg.Error:
        return None


@contextmanager
def watch_index_build(conn: psycopg.Connection[Any],
                      report: Callable[[int, int | None], None] | None) -> Iterator[None]:
    """While the block builds an index on ``conn``, report (tuples done, total) from
    pg_stat_progress_create_index every quarter second, read on a second connection.
    Progress is a nicety: without a second connection the build goes on unreported."""
    watcher = second_connection(conn) if report is not None else None
    if watcher is None or report is None:
        yield
        return
    backend_pid = conn.info.backend_pid
    done = threading.Event()

    def poll() -> None:
        with suppress(psycopg.Error):
            while not done.wait(0.25):
                row = watcher.execute(
                    "select tuples_done, tuples_total from pg_stat_progress_create_index "
                    "where pid = %s", (backend_pid,)).fetchone()
                if row is not None:
                    report(int(row[0] or 0), int(row[1] or 0) or None)

    thread = threading.Thread(target=poll, name="pgfunnel-index-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        watcher.close()


# what sends a call of the SQL analyzer down its general path (pgfunnel._analyze_pass, what
# analyze_each runs for a document's text, without its limit on a call's length: a batch's
# distinct words can be more);
# a Unicode digit this misses only costs that call the longer path, never a term
_DIGIT_OR_JOINER = re.compile("[0-9._\\-\u2010-\u2013\u2212]")


def _takes_general_path(word: str) -> bool:
    """Whether the analyzer reads ``word`` down its general path: a digit or a joiner
    in the word as v3 analyzers on read it, after Unicode folding (NFKC). A character
    that folds into one (``…`` is ``...``, ``²`` is ``2``) sent every word of the plain
    call down the general path, at about twice the cost: in the pydocs corpus, 33 of
    30,313 plain words, in every batch of 2,000 chunks."""
    return bool(_DIGIT_OR_JOINER.search(word)) or (
        not word.isascii()
        and _DIGIT_OR_JOINER.search(unicodedata.normalize("NFKC", word)) is not None)


class TermAnalyzer:
    """Turns chunk text into BM25 terms through the database's own analyzer.

    The SQL token pattern never spans whitespace, so a text's terms are the
    concatenation of its whitespace-separated words' terms; each distinct word is
    analysed once (in SQL, in bulk) and cached. Indexed terms and query terms thus
    come from the same implementation, at a fraction of the cost of analysing
    every chunk in SQL.
    """

    def __init__(self, conn: psycopg.Connection[Any], analyzer: str) -> None:
        self.conn = conn
        self.analyzer = analyzer
        # keyed by the raw whitespace-separated word, punctuation and all, so the hot
        # path is one dict lookup per word
        self.cache: dict[str, tuple[str, ...]] = {}
        self.strip = (_STRIP_KEEPING_UNDERSCORES if analyzer in _UNDERSCORE_ANALYZERS
                      else _STRIP)

    def prepare(self, texts: Iterable[str]) -> None:
        cache = self.cache
        # the distinct words in C: a set of every split less the cached ones, instead of
        # a Python-level membership test per word of the batch (0.6 -> 0.4 s per 10k chunks)
        unknown = set(chain.from_iterable(map(str.split, texts))).difference(cache)
        if not unknown:
            return
        strip = self.strip
        stripped = {w: w.strip(strip) for w in unknown}
        # A mark after what was stripped from the front can be part of it: Unicode
        # folding (v3 analyzers on) composes `<`, `=` or `>` and a combining long solidus
        # (U+0338) into one symbol (`≮`, no word character), so `<\u0338abc` is `abc`
        # to the analyzer, while the stripped `\u0338abc` is a word of its own. Such a
        # word keeps its front.
        for w, s in stripped.items():
            if s and s[0] != w[0] and unicodedata.category(s[0])[0] == "M":
                stripped[w] = w.rstrip(strip)
        distinct = sorted({s for s in stripped.values() if s})
        by_word: dict[str, tuple[str, ...]] = {}
        # words without a digit or a joiner go in a call of their own: the analyzer takes
        # a shorter path (about half the time) when no input of a call has one
        plain: list[str] = []
        general: list[str] = []
        for w in distinct:
            (general if _takes_general_path(w) else plain).append(w)
        for words in (plain, general):
            if not words:
                continue
            # one string each way, split by the server and by str.split: psycopg dumps a
            # list of 20,000 strings as a text[] in Python, element by element, and reading
            # the analyzer's rows back one by one into per-word lists was a Python loop
            # per term (about 1 s of the preparing thread's 5 per 10k chunks of
            # documentation, with the GIL held). Words hold no newline (split() ends them)
            # and terms no whitespace (the token pattern never spans it), so the reply is a
            # line per word, in order, its terms space-separated.
            row = self.conn.execute(
                "select pg_catalog.string_agg(coalesce(t.terms, ''), E'\\n' order by w.ord) "
                "  from pg_catalog.generate_series(1, %s) as w(ord) "
                "  left join (select e.input_ordinal, pg_catalog.string_agg(e.term, ' ') as terms "
                "               from pgfunnel._analyze_pass("
                "                    pg_catalog.string_to_array(%s, E'\\n'), %s, '{}') e "
                "              where e.term is not null "
                "              group by e.input_ordinal) t on t.input_ordinal = w.ord",
                (len(words), "\n".join(words), self.analyzer)).fetchone()
            lines = str(row[0] if row is not None else "").split("\n")
            if len(lines) != len(words):
                raise PgfunnelError(f"internal: the analyzer answered {len(lines)} lines for "
                                    f"{len(words)} words (a term holds a newline)")
            by_word.update(zip(words, [tuple(line.split(" ")) if line else ()
                                       for line in lines], strict=True))
        for raw, w in stripped.items():
            cache[raw] = by_word.get(w, ())

    def terms(self, text: str) -> Counter[str]:
        return Counter(chain.from_iterable(map(self.cache.__getitem__, text.split())))


def _tsvector_quote(term: str) -> str:
    """One lexeme of a tsvector literal."""
    return "'" + term.replace("\\", "\\\\").replace("'", "''") + "'"


#: a collection name is typed on command lines and in SQL calls: one short line
MAX_COLLECTION_NAME = 200


_JOINERS = frozenset("\u200c\u200d")  # zero-width non-joiner, zero-width joiner


def check_collection_name(name: object) -> None:
    """Refuse a name no one could type back: empty or blank, over MAX_COLLECTION_NAME
    characters, or holding a control character (C0 or C1: U+0085 ends a line) or an
    invisible format character (a bidirectional override shows the name reversed, a
    zero-width space not at all) (ConfigError). The zero-width joiner and non-joiner
    are letters' business between two letters (Persian writes ZWNJ inside words, emoji
    sequences join with ZWJ), so there they stay."""
    if not isinstance(name, str) or not name.strip():
        raise ConfigError("collection", f"must be a non-empty name, got {name!r}")
    if len(name) > MAX_COLLECTION_NAME:
        raise ConfigError("collection", f"must be at most {MAX_COLLECTION_NAME} characters, "
                          f"got {len(name)}")
    if any(unicodedata.category(ch) == "Cc" or unicodedata.category(ch) == "Cf" and not (
            ch in _JOINERS and 0 < i < len(name) - 1) for i, ch in enumerate(name)):
        raise ConfigError("collection", "must not hold control characters or invisible "
                          f"format characters, got {ascii(name)}")
    check_sql_text("collection", name)


def check_new_collection_name(name: object) -> None:
    """:func:`check_collection_name`, and for a collection about to be created no
    whitespace at either end (ConfigError): `-c "docs "` made a second collection beside
    `docs`, into which that ingest went and which searches of `docs` never read. A
    collection that has such a name already stays reachable by it."""
    check_collection_name(name)
    assert isinstance(name, str)
    if name != name.strip():
        raise ConfigError("collection", "a new collection's name must not begin or end with "
                          f"whitespace, got {name!r}")


def check_ingest_analyzer(conn: psycopg.Connection[Any], collection: str,
                          analyzer: str | None, cid: int | None,
                          version: ActiveVersion | None) -> None:
    """Refuse an analyzer asked of an ingest that it cannot use: one the database's
    functions do not know, or one other than the analyzer the collection is indexed with
    (its active ``version``'s, else the collection's own; none for a new collection,
    ``cid`` None). An ingest writes into the active version, whose terms must all come
    from one analyzer: a collection changes analyzer with a reindex (no model time)."""
    if analyzer is None:
        return
    existing = version.analyzer if version is not None else None
    if version is None and cid is not None:
        row = conn.execute("select analyzer from pgfunnel.collection where id = %s",
                           (cid,)).fetchone()
        existing = str(row[0]) if row is not None else None
    if not isinstance(analyzer, str) or not analyzer:
        raise ConfigError("analyzer", f"must be an analyzer's name, got {analyzer!r}")
    known = [str(r[0]) for r in conn.execute(
        "select name from pgfunnel.analyzers()").fetchall()]
    if analyzer not in known:
        raise ConfigError("analyzer", f"unknown analyzer {analyzer!r} (known: "
                                      f"{', '.join(known)})")
    if existing is not None and analyzer != existing:
        raise ConfigError(
            "analyzer", f"collection {collection!r} is indexed with analyzer {existing!r}, not "
            f"{analyzer!r}; leave it out, or move the collection with `pgfunnel reindex -c "
            f"{shlex.quote(collection)} --analyzer {analyzer} --activate` (no model time)")


def get_or_create_collection(conn: psycopg.Connection[Any], name: str, *, private: bool = False,
                             analyzer: str = DEFAULT_ANALYZER) -> int:
    cid = collection_id(conn, name)
    if cid is not None:
        return cid
    check_new_collection_name(name)
    row = conn.execute(
        "insert into pgfunnel.collection (name, private, analyzer) values (%s, %s, %s) "
        "on conflict (name) do update set name = excluded.name returning id",
        (name, private, analyzer)).fetchone()
    assert row is not None
    return int(row[0])


def create_version(conn: psycopg.Connection[Any], coll_id: int, model: str, dimensions: int,
                   analyzer: str, state: str, params: dict[str, Any] | None = None) -> int:
    from psycopg.types.json import Jsonb

    params = {"embed_input": DEFAULT_EMBED_INPUT, "lexical_input": DEFAULT_LEXICAL_INPUT,
              "hnsw_type": DEFAULT_HNSW_TYPE, **(params or {})}
    hnsw_type = version_hnsw_type(params)
    if hnsw_type not in HNSW_TYPES:
        raise ConfigError("hnsw_type", f"unknown {hnsw_type!r} (known: {', '.join(HNSW_TYPES)})")
    # refused before any row is written: pgvector would refuse the graph only after
    if not 1 <= dimensions <= HNSW_MAX_DIMENSIONS[hnsw_type]:
        raise ConfigError("dimensions", f"{model!r} makes {dimensions}-dimension vectors; an "
                          f"HNSW index of {hnsw_type} takes 1 to "
                          f"{HNSW_MAX_DIMENSIONS[hnsw_type]:,} dimensions")
    # the version row and its posting partition exist together or not at all: a version
    # without one could take no postings
    with conn.transaction():
        row = conn.execute(
            "insert into pgfunnel.index_version (collection_id, version, embedding_model, "
            " dimensions, analyzer, state, params, activated_at) "
            "select %s, coalesce(max(version), 0) + 1, %s, %s, %s, %s, %s, "
            "       case when %s = 'active' then now() end "
            "from pgfunnel.index_version where collection_id = %s returning id",
            (coll_id, model, dimensions, analyzer, state, Jsonb(params), state, coll_id),
        ).fetchone()
        assert row is not None
        version_id = int(row[0])
        # made apart and attached: ATTACH takes a lock on the parent that searches and
        # writes of other versions pass (CREATE TABLE ... PARTITION OF would block them)
        partition = sql.Identifier("pgfunnel", posting_partition_name(version_id))
        try:
            conn.execute(sql.SQL("create table {} (like pgfunnel.posting)").format(partition))
            conn.execute(sql.SQL("alter table pgfunnel.posting attach partition {} "
                                 "for values in ({})").format(partition,
                                                              sql.Literal(version_id)))
        except psycopg.errors.InsufficientPrivilege as exc:
            from pgfunnel.errors import AccessError

            raise AccessError(
                "a new index version (a collection's first ingest, or a reindex) creates "
                "its posting partition and indexes, which takes the owner of the pgfunnel "
                f"tables; {exc.diag.message_primary or exc} (run it as the owner: see "
                "docs/security.md, Roles and grants)") from exc
    return version_id


def same_model(a: str, b: str) -> bool:
    """Whether two embedding-model names name the same model: equal, or equal after the
    hub organisation or the folder (``sentence-transformers/all-MiniLM-L6-v2``,
    ``all-MiniLM-L6-v2`` and a local copy in ``.../all-MiniLM-L6-v2`` are one model)."""
    return a == b or Path(a.rstrip("/")).name == Path(b.rstrip("/")).name


def posting_partition_name(version_id: int) -> str:
    return f"{POSTING_PARTITION_PREFIX}{version_id}"


def posting_index_name(version_id: int) -> str:
    return f"{posting_partition_name(version_id)}_key"


@contextmanager
def unbounded_statements(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """Let index builds and VACUUM run as long as they need, then put the session's
    ``statement_timeout`` back. A timeout set for the role or the database is meant for
    queries (managed Postgres sets one); at 100k chunks the HNSW build alone takes
    minutes, and the end of an ingest or a reindex would be cancelled. pg_dump does the
    same for its own statements."""
    row = conn.execute("select pg_catalog.current_setting('statement_timeout')").fetchone()
    before = str(row[0]) if row else "0"
    if before == "0":
        yield
        return
    conn.execute("select pg_catalog.set_config('statement_timeout', '0', false)")
    try:
        yield
    finally:
        # a transaction that failed puts the setting back itself when it rolls back
        if conn.info.transaction_status != psycopg.pq.TransactionStatus.INERROR:
            conn.execute("select pg_catalog.set_config('statement_timeout', %s, false)",
                         (before,))


def create_posting_index(conn: psycopg.Connection[Any], version_id: int) -> bool:
    """The index of a version's posting partition, if it has none yet; True when built.

    A version's first postings go into its partition unindexed and the index is built
    once after them: in one sorted pass that costs a fraction of inserting each posting
    into an index (100k one-chunk documents: 4.5 s against 15 s). Until then the
    lexical leg reads the partition by a scan, with the same results. Versions whose
    postings predate partitioning (``posting_legacy``) have their index already.
    """
    partition = posting_partition_name(version_id)
    with conn.transaction():
        take_index_build_lock(conn, posting_index_name(version_id))
        row = conn.execute(
            "select (select count(*) from pg_catalog.pg_index i where i.indrelid = c.oid) "
            "from pg_catalog.pg_class c join pg_catalog.pg_namespace n "
            "on n.oid = c.relnamespace where n.nspname = 'pgfunnel' and c.relname = %s",
            (partition,)).fetchone()
        if row is None or int(row[0]) > 0:
            return False
        with unbounded_statements(conn):
            conn.execute(sql.SQL(
                "create unique index if not exists {name} on {table} "
                "(index_version_id, term, chunk_id) include (tf, length)").format(
                    name=sql.Identifier(posting_index_name(version_id)),
                    table=sql.Identifier("pgfunnel", partition)))
    return True


class IndexRows(NamedTuple):
    """The lexical and posting rows of chunks as COPY text blocks, and their statistics.

    Rows built before the index version is known (``version_id`` None) carry
    ``_VERSION_MARK`` where the version id goes; :func:`write_chunk_index` fills it in.
    """

    version_id: int | None
    lexical: list[str]
    postings: list[str]
    # the batch's distinct terms one per line and their dfs comma-separated: split by
    # the server, because dumping 20,000 strings as a text[] parameter cost the writing
    # thread about 15 ms per batch (terms hold no newline; index_rows checks)
    terms: str
    dfs: str
    total_length: int


# Postgres text never holds NUL, so the mark cannot clash with a term
_VERSION_MARK = "\x00"


#: the most bytes of lexemes a tsvector holds (Postgres' MAXSTRPOS): a chunk's lexical
#: row is a tsvector of its distinct terms
TSVECTOR_MAX_BYTES = (1 << 20) - 1
# terms are at most 100 characters (400 bytes): a chunk with no more distinct terms than
# this cannot reach the limit, and its terms' bytes are not counted
_TERMS_UNDER_TSVECTOR_LIMIT = TSVECTOR_MAX_BYTES // 400


class TermsPastTsvectorError(InvalidDocumentError):
    """A chunk whose distinct terms are more bytes than a tsvector holds
    (TSVECTOR_MAX_BYTES): a run of text without spaces, such as a base64 image inline in
    Markdown, is one chunk of thousands of terms. Raised before its lexical row is sent,
    where Postgres said only "string is too long for tsvector"."""

    def __init__(self, position: int, chunk_id: int, terms: int, size: int,
                 document: str | None = None) -> None:
        self.position, self.chunk_id, self.terms, self.size = position, chunk_id, terms, size
        super().__init__(
            f"{document or f'chunk {chunk_id}'}: holds {terms:,} distinct terms, "
            f"{size:,} bytes of them, more than a Postgres tsvector indexes "
            f"({TSVECTOR_MAX_BYTES:,} bytes): a run of text without spaces (a base64 image "
            "or other inline data, minified code) is read as that many words and chunks "
            "are cut only between words; take that text out of the document, or leave the "
            "document out")


def _in_document(exc: TermsPastTsvectorError,
                 chunked: Sequence[tuple[DocumentRecord, Sequence[ChunkRecord]]]
                 ) -> TermsPastTsvectorError:
    """``exc`` naming the document and chunk (CITEKEY#ORDINAL) its position is in."""
    rec, ch = [(rec, ch) for rec, chunks in chunked for ch in chunks][exc.position]
    return TermsPastTsvectorError(exc.position, exc.chunk_id, exc.terms, exc.size,
                                  f"document {rec.citekey!r}, chunk {rec.citekey}#{ch.ordinal}")


def index_rows(analyzer: TermAnalyzer, chunk_ids: Sequence[int], texts: Sequence[str],
               version_id: int | None) -> IndexRows:
    """The lexical and posting rows of chunks, built in Python alone (no query, so a
    second thread can build them while the server writes other rows);
    ``analyzer.prepare(texts)`` must have run. A chunk with more term bytes than its
    tsvector can hold raises TermsPastTsvectorError."""
    term_counts = [analyzer.terms(t) for t in texts]
    for i, counts in enumerate(term_counts):
        if len(counts) > _TERMS_UNDER_TSVECTOR_LIMIT and (
                size := sum(len(t.encode()) for t in counts)) > TSVECTOR_MAX_BYTES:
            raise TermsPastTsvectorError(i, chunk_ids[i], len(counts), size)
    lengths = [sum(counts.values()) for counts in term_counts]
    quoted = {t: _copy_text(_tsvector_quote(t)) for t in set(chain.from_iterable(term_counts))}
    prefix = (_VERSION_MARK if version_id is None else str(version_id)) + "\t"
    lexical = ["".join([f"{prefix}{cid}\t{length}\t"
                        + " ".join(map(quoted.__getitem__, sorted(counts))) + "\n"
                        for cid, counts, length in zip(chunk_ids[start:start + 2048],
                                                       term_counts[start:start + 2048],
                                                       lengths[start:start + 2048],
                                                       strict=True)])
               for start in range(0, len(chunk_ids), 2048)]
    # postings grouped by term, in index order (version, term, chunk), so the index is
    # written page by page instead of at random; a term's list length is its df
    by_term: dict[str, list[str]] = {}
    for cid, counts, length in sorted(zip(chunk_ids, term_counts, lengths, strict=True),
                                      key=lambda row: row[0]):
        # most terms occur once in a chunk: their line is the same string
        once = f"\t{cid}\t1\t{length}\n"
        for term, tf in counts.items():
            line = once if tf == 1 else f"\t{cid}\t{min(tf, 32767)}\t{length}\n"
            if (lines := by_term.get(term)) is None:
                by_term[term] = [line]
            else:
                lines.append(line)
    terms = sorted(by_term)
    # each line ends in a newline, so a term's rows are its head before each line: one
    # str.join per term instead of a concatenation per posting (0.20 -> 0.07 s per 10k
    # chunks of documentation)
    postings = ["".join([head + head.join(by_term[term]) for term in terms[start:start + 2048]
                         for head in (prefix + _copy_text(term),)])
                for start in range(0, len(terms), 2048)]
    if any("\n" in t for t in terms):
        raise PgfunnelError("internal: an analyzer term holds a newline")
    return IndexRows(version_id, lexical, postings, "\n".join(terms),
                     ",".join([str(len(by_term[t])) for t in terms]), sum(lengths))


def write_chunk_index(conn: psycopg.Connection[Any], version_id: int, analyzer: TermAnalyzer,
                      chunk_ids: Sequence[int], texts: Sequence[str],
                      vectors: np.ndarray | None, rows: IndexRows | None = None) -> None:
    """Vectors, lexical rows and postings of chunks for one version, then its statistics.

    ``rows`` are the chunks' :func:`index_rows` when the caller built them already."""
    if rows is None:
        analyzer.prepare(texts)
        rows = index_rows(analyzer, chunk_ids, texts, version_id)
    if vectors is not None:
        with _copy(conn, "embedding", ("index_version_id", "chunk_id", "embedding"),
                   binary=True) as cp:
            cp.set_types(["int4", "int8", "vector"])
            for cid, vec in zip(chunk_ids, vectors, strict=True):
                cp.write_row((version_id, cid, vec))
    stamp = str(version_id)
    for table, columns, blocks in (
            ("lexical", ("index_version_id", "chunk_id", "length", "terms"), rows.lexical),
            ("posting", ("index_version_id", "term", "chunk_id", "tf", "length"),
             rows.postings)):
        with _copy(conn, table, columns) as cp:
            for block in blocks:
                # str.replace runs at memory speed; a version mark only leads a line
                cp.write(block if rows.version_id is not None
                         else block.replace(_VERSION_MARK, stamp))
    conn.execute("select pgfunnel._bm25_add(%s, string_to_array(%s, E'\\n'), "
                 "string_to_array(%s, ',')::bigint[], %s, %s)",
                 (version_id, rows.terms, rows.dfs, len(chunk_ids), rows.total_length))


@contextmanager
def _copy(conn: psycopg.Connection[Any], table: str, columns: Sequence[str], *,
          binary: bool = False) -> Iterator[psycopg.Copy]:
    """COPY FROM STDIN into ``pgfunnel.<table>`` through a writer thread: the server works
    on one block (heap and index inserts) while this thread builds the next, instead of
    the two taking turns.

    Postgres refuses COPY FROM into a table whose row-level security applies to the
    caller: any role but a superuser once `pgfunnel init --rls` has FORCEd it, the owner
    and the `pgfunnel_writer` ingest roles included. For them the rows are copied into
    a temporary table and moved on by one INSERT ... SELECT, which the policies check.
    """
    cur = conn.cursor()
    target = sql.Identifier("pgfunnel", table)
    cols = sql.SQL(", ").join(sql.Identifier(c) for c in columns)
    options = sql.SQL(" (format binary)" if binary else "")
    active = conn.execute(
        "select pg_catalog.row_security_active(%s::regclass), "
        "pg_catalog.has_database_privilege(pg_catalog.current_database(), 'TEMPORARY')",
        (f"pgfunnel.{table}",)).fetchone()
    staged = bool(active and active[0])
    stage = sql.Identifier(f"pgfunnel_stage_{table}")
    if staged:
        # what ingest and reindex check up front (require_staging), for every write that
        # stages: the grant named, not Postgres' bare "permission denied to create
        # temporary tables". Read with row security above, so a batch that may stage
        # pays no round trip for it
        if not (active and active[1]):
            refused = staging_refused(conn, f"write to pgfunnel.{table}")
            if refused is not None:
                raise refused
        conn.execute(sql.SQL("create temporary table if not exists {} (like {}) "
                             "on commit delete rows").format(stage, target))
        conn.execute(sql.SQL("truncate {}").format(stage))
    with cur.copy(sql.SQL("copy {} ({}) from stdin{}").format(
            stage if staged else target, cols, options), writer=QueuedLibpqWriter(cur)) as cp:
        yield cp
    if staged:
        conn.execute(sql.SQL("insert into {} ({}) select {} from {}").format(
            target, cols, cols, stage))
        conn.execute(sql.SQL("truncate {}").format(stage))


def _copy_text(value: str) -> str:
    """A value in COPY's text format. The analyzer's terms never hold a backslash, tab or
    newline today; escaping keeps that a fact about the analyzer, not a requirement here."""
    if "\\" in value or "\t" in value or "\n" in value or "\r" in value:
        return (value.replace("\\", "\\\\").replace("\t", "\\t")
                .replace("\n", "\\n").replace("\r", "\\r"))
    return value


def _reserve_chunk_ids(conn: psycopg.Connection[Any], n: int) -> list[int]:
    return [int(r[0]) for r in conn.execute(
        "select nextval(pg_get_serial_sequence('pgfunnel.chunk', 'id')) "
        "from generate_series(1, %s)", (n,)).fetchall()]


class _Analysed(NamedTuple):
    """A batch hashed, and its new and changed documents chunked, their chunk ids
    reserved and their words analysed."""

    hashes: dict[str, str]
    chunked: list[tuple[DocumentRecord, list[ChunkRecord]]]
    # what BM25 reads of each chunk, under lexical_input
    texts: list[str]
    ids: list[int]
    lexical_input: str


class _Prepared(NamedTuple):
    """A batch hashed, and its new and changed documents (as they stood when it was
    prepared) chunked and analysed, ahead of its transaction."""

    analyzer: str
    lexical_input: str
    hashes: dict[str, str]
    chunked: list[tuple[DocumentRecord, list[ChunkRecord]]]
    ids: list[int]
    rows: IndexRows


def _result(future: Future[_Prepared] | None) -> _Prepared | None:
    """The prepared batch, or None (the batch is then prepared in the writing
    transaction, where a real problem with it is raised and named)."""
    if future is None:
        return None
    try:
        return future.result()
    except TermsPastTsvectorError:
        # the writing path would find it too, after the model had embedded the batch
        raise
    except Exception:  # noqa: BLE001 - the writing path reports it
        return None


# Python hands the GIL over every 5 ms by default. While the preparing thread turns a
# batch into rows (pure Python, CPU-bound), the threads that feed the server (the
# writing thread and its COPY writer) wait up to that long at every hand-over, and the
# server idles meanwhile. 10k one-chunk documents with given vectors, three interleaved
# runs each: 1,842 chunks/s at 5 ms, 1,994 at 0.5 ms, 2,206 at 1 ms, 2,099 at 0.1 ms;
# 30k: 1,866 -> 2,035.
INGEST_SWITCH_INTERVAL_S = 0.001
_switch_lock = threading.Lock()
_switch_holders = 0
_switch_saved = 0.0


@contextmanager
def _short_gil_switch() -> Iterator[None]:
    """Lower ``sys.setswitchinterval`` to INGEST_SWITCH_INTERVAL_S while any ingest of this
    process prepares ahead (never raising it), and put the previous value back when the
    last one ends."""
    global _switch_holders, _switch_saved
    with _switch_lock:
        if _switch_holders == 0:
            _switch_saved = sys.getswitchinterval()
            if _switch_saved > INGEST_SWITCH_INTERVAL_S:
                sys.setswitchinterval(INGEST_SWITCH_INTERVAL_S)
        _switch_holders += 1
    try:
        yield
    finally:
        with _switch_lock:
            _switch_holders -= 1
            if _switch_holders == 0:
                sys.setswitchinterval(_switch_saved)


class _Preparer:
    """Prepares batches ahead of their transaction on a second connection, for an
    Ingester, in two threads: one chunks a batch and analyses its words (mostly waiting
    on the server) while the other builds the rows of the batch before it (Python).
    Without a second connection it prepares nothing and batches are prepared in their
    transaction, as before."""

    # batches in flight ahead of the one being written: one in each thread
    AHEAD = 2

    def __init__(self, ingester: Ingester, *, enabled: bool = True) -> None:
        self.ingester = ingester
        self.enabled = enabled
        self.analysing: ThreadPoolExecutor | None = None
        self.building: ThreadPoolExecutor | None = None
        self.analyzer: TermAnalyzer | None = None  # on the second connection
        self.switch: AbstractContextManager[None] | None = None

    def __enter__(self) -> _Preparer:
        if not self.enabled:
            return self
        main = self.ingester.conn
        conn = second_connection(main)
        if conn is None:
            return self  # a server at its connection limit: ingest goes on in one thread
        # the analyzer the version has, or will be created with
        row = main.execute(
            "select coalesce((select v.analyzer from pgfunnel.index_version v "
            "                  where v.collection_id = c.id and v.state = 'active'), c.analyzer) "
            "from pgfunnel.collection c where c.name = %s", (self.ingester.collection,)).fetchone()
        self.analyzer = TermAnalyzer(conn, str(row[0]) if row is not None and row[0]
                                     else self.ingester._analyzer_given or DEFAULT_ANALYZER)
        # one thread each, so each stage takes the batches in order (chunk ids ascend
        # with them, as in a single-threaded ingest)
        self.analysing = ThreadPoolExecutor(max_workers=1,
                                            thread_name_prefix="pgfunnel-ingest-analyse")
        self.building = ThreadPoolExecutor(max_workers=1,
                                           thread_name_prefix="pgfunnel-ingest-rows")
        self.switch = _short_gil_switch()
        self.switch.__enter__()
        return self

    def submit(self, batch: list[DocumentRecord]) -> Future[_Prepared] | None:
        if self.analysing is None or self.building is None or self.analyzer is None:
            return None
        analysed = self.analysing.submit(self.ingester._analyse, self.analyzer, batch)
        return self.building.submit(self.ingester._prepare, self.analyzer, batch, analysed)

    def __exit__(self, *exc: object) -> None:
        try:
            for pool in (self.analysing, self.building):
                if pool is not None:
                    pool.shutdown(wait=True, cancel_futures=True)
        finally:
            if self.switch is not None:
                self.switch.__exit__(None, None, None)
            if self.analyzer is not None:
                self.analyzer.conn.close()


def check_connection(conn: Any) -> None:
    """A ConfigError naming ``conn`` unless it is a psycopg Connection: a DSN, a pool or a
    SQLAlchemy engine (what a Funnel takes) failed with a raw AttributeError ('str' object
    has no attribute 'row_factory')."""
    if isinstance(conn, psycopg.Connection):
        return
    kind = f"{type(conn).__module__}.{type(conn).__qualname__}"
    raise ConfigError("conn", f"must be a psycopg Connection in autocommit mode, got {kind}: "
                      "open one with pgfunnel.db.connect(dsn, autocommit=True)")


class Ingester:
    """Writes documents into one collection's active index version."""

    def __init__(self, conn: psycopg.Connection[Any], collection: str = DEFAULT_COLLECTION, *,
                 embedder: Embedder | str | os.PathLike[str] | None = None,
                 chunk_words: int = DEFAULT_CHUNK_WORDS,
                 private: bool = False, batch_documents: int = 2000,
                 batch_chunks: int = 2000, progress: ProgressFn | None = None,
                 prepare_ahead: bool = True, embed_input: str = DEFAULT_EMBED_INPUT,
                 lexical_input: str = DEFAULT_LEXICAL_INPUT,
                 analyzer: str | None = None,
                 on_wait: Callable[[str], None] | None = None) -> None:
        from pgfunnel.db import require_schema
        from pgfunnel.schema import require_current_schema

        check_connection(conn)
        if not conn.autocommit:
            # each batch commits on its own; inside a caller's transaction it could not.
            # Said before any statement: the lookups below left a connection without
            # autocommit idle in a transaction that nothing would end
            raise ConfigError("conn", "Ingester needs a connection in autocommit mode")
        from pgfunnel.security import with_schema_access_hint

        try:
            with tuple_rows(conn):
                require_schema(conn)
                # the application's own connection, however it was opened (as a Funnel
                # takes it): vectors are written through pgvector's types, and a connection
                # that pgfunnel.db.connect did not open failed with KeyError "couldn't find
                # the type 'vector' in the types registry"
                try_register_vector(conn)
                # this release's analyzers and columns: an older schema failed mid-ingest
                # (a new collection's default analyzer unknown, named as an --analyzer
                # ingest lacks)
                require_current_schema(conn)
        except psycopg.Error as exc:
            # a closed or lost connection was a raw psycopg OperationalError
            raise with_schema_access_hint(conn, translate(exc, searching=False)) from exc
        check_embed_input(embed_input)
        # what a new collection's first version embeds; a version keeps its own, and
        # `reindex --embed-input` changes it
        self.embed_input = embed_input
        check_lexical_input(lexical_input)
        # likewise what its BM25 indexes (`reindex --lexical-input`)
        self.lexical_input = lexical_input
        self.conn = conn
        self.collection = collection
        self.chunk_words = chunk_words
        # a batch is one transaction; it ends at batch_documents documents or at about
        # batch_chunks chunks, whichever comes first. Each batch costs a fixed set of round
        # trips and one statistics update per distinct term, so small batches of short
        # documents were slow (64 one-chunk documents per batch: 1,150 chunks/s against
        # 2,100 at 2,000)
        for name, value, least in (("batch_documents", batch_documents, 1),
                                   ("batch_chunks", batch_chunks, 1),
                                   ("chunk_words", chunk_words, 20)):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ConfigError(name, f"must be an integer >= {least}, got {value!r}")
        for name, flag in (("prepare_ahead", prepare_ahead), ("private", private)):
            if not isinstance(flag, bool):
                raise ConfigError(name, f"must be True or False, got {flag!r}")
        self.batch_documents = batch_documents
        self.batch_chunks = batch_chunks
        # chunk and analyse the next batch on a second connection while one is written
        self.prepare_ahead = prepare_ahead
        self.progress = progress
        if on_wait is not None and not callable(on_wait):
            raise ConfigError("on_wait", "must be a function taking one str, or None, got "
                              f"{type(on_wait).__name__}")
        # told the line naming another ingest of the collection that ingest() waits for
        self.on_wait = on_wait
        self.private = private
        if isinstance(embedder, (str, os.PathLike)):
            # a model id or local path (a pathlib.Path too), as a Funnel takes one (loaded
            # now: a missing model is a ModelLoadError before anything is read or
            # written); '' is refused, as a Funnel refuses it (it was the current folder,
            # read as a model)
            # a model that does not load is named as it was given, embedder=, not as the
            # collection's embedding_model
            embedder = Embedder(check_model_name(embedder, "embedder"), setting="embedder")
        elif embedder is not None and not hasattr(embedder, "dimensions"):
            raise ConfigError("embedder", "must be an Embedder, a model id or local path, or "
                              "None (the collection's own model), got "
                              f"{type(embedder).__name__} {embedder!r}"[:300])
        self._embedder = embedder
        # None: the collection's own model, loaded when first needed (and loaded again
        # when `versions activate` switches the collection to another model meanwhile)
        self._embedder_given = embedder is not None
        # the version a batch of this ingest made, before that batch committed
        self._made_version: int | None = None
        self.stats = IngestStats()
        self._embed_queued = 0
        self._collection_seen: int | None = None
        self._unchanged_given: list[str] = []
        self._rechunked = 0
        self._rehashed = 0
        self._kept_access: list[str] = []
        self._unreadable = 0
        # before the lookup (a NUL in it failed there with the driver's error), and so
        # before a model loads or a file is read
        check_collection_name(collection)
        with tuple_rows(conn):
            cid = collection_id(conn, collection)
            version = active_version(conn, cid) if cid is not None else None
        if cid is None:
            # before a model loads or a file is read, as the checks above
            check_new_collection_name(collection)
        with tuple_rows(conn):
            check_ingest_analyzer(conn, collection, analyzer, cid, version)
        # what a new collection is made with (None: the default); an existing one keeps its
        # own, which the check above holds it to
        self._analyzer_given = analyzer
        if version is not None and embedder is not None and (
                embedder.dimensions != version.dimensions):
            raise InvalidInputError(
                f"embedding_model: {embedder.model_name!r} makes {embedder.dimensions}-dim "
                f"vectors but collection {collection!r} is indexed with {version.embedding_model!r}"
                f" ({version.dimensions} dims); use that model or run `pgfunnel reindex`")
        if version is not None and embedder is not None and not same_model(
                embedder.model_name, version.embedding_model):
            # same size, other model: its vectors would sit beside the version's in one
            # graph, each near its own model's neighbours, and nothing would say so
            raise InvalidInputError(
                f"embedding_model: collection {collection!r} is indexed with "
                f"{version.embedding_model!r}, not {embedder.model_name!r}; ingest with that "
                "model, or change the collection's model with `pgfunnel reindex --model`")
        self._analyzers: dict[str, TermAnalyzer] = {}
        # what a batch prepared ahead of its transaction is analysed as: the version's
        # lexical input as last seen (checked again when the batch is written)
        self._lexical_seen = version.lexical_input if version is not None else lexical_input

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            with tuple_rows(self.conn):
                cid = collection_id(self.conn, self.collection)
                version = active_version(self.conn, cid) if cid is not None else None
            self._embedder = Embedder(version.embedding_model if version
                                      else DEFAULT_EMBEDDING_MODEL)
        return self._embedder

    def _vector_size(self, version: ActiveVersion | None) -> tuple[int | None, str | None]:
        """The size given vectors must have, and what to say of a vector of another size:
        the active version's, or for a new collection that of the model its first version
        will be made with, read from the model's files where it is not loaded yet (a
        768-dimension vector was refused only once the default model had loaded, as "the
        index version expects 384", naming neither the model nor what to do)."""
        if version is not None and self._made_version != version.id:
            return version.dimensions, (
                f"collection {self.collection!r} is indexed with {version.embedding_model!r}, "
                f"which makes {version.dimensions}-dimension vectors; give vectors of that "
                "model, or change the collection's model with `pgfunnel reindex --model`")
        if version is not None:
            model, dimensions = version.embedding_model, version.dimensions
        elif self._embedder is not None:
            model, dimensions = self._embedder.model_name, self._embedder.dimensions
        else:
            model = DEFAULT_EMBEDDING_MODEL
            found = saved_embedding_dimension(model)
            if found is None:
                return None, None
            dimensions = found
        given = ("the model given as embedder" if self._embedder_given
                 else "the default embedder")
        return dimensions, (
            f"collection {self.collection!r} is new, and its index version is made with "
            f"{given}, {model!r}, which makes {dimensions}-dimension vectors; pass the "
            "model that made these vectors as Ingester(embedder=...) (a model id or local "
            "path), or give vectors of that model")

    def _tick(self, stage: str, n: int, total: int | None = None) -> None:
        if self.progress is not None:
            self.progress(stage, n, total)

    def ingest(self, records: Iterable[DocumentRecord],
               vectors: dict[str, np.ndarray] | None = None, *,
               prune: bool = False) -> IngestStats:
        """Ingest documents. ``vectors`` (citekey -> array of chunk vectors) skips the model.

        ``prune=True`` takes the records as the whole collection: once every batch has
        committed (and the index is built), the collection's documents whose citekeys
        were not among them are deleted, in one transaction, as ``delete_documents``
        deletes them; ``stats.pruned`` names them. An ingest that fails or is interrupted
        deletes nothing, and one of no records is refused rather than empty the collection.

        Vectors you compute yourself should embed ``sources.embedding_input(title,
        chunk.text, embed_input, chunk.section_path)`` for each chunk of
        ``sources.chunk_text(text)``, with the active version's ``embed_input``
        (``"title"`` unless it was made otherwise): that is what the built-in embedder
        reads.
        """
        from pgfunnel.security import schema_access_named

        # refused before any wait for another ingest
        _check_ingest_arguments(records, vectors)
        if not isinstance(prune, bool):
            raise ConfigError("prune", f"must be True or False, got {prune!r}")
        waited: list[str] = []

        def waiting(line: str) -> None:
            waited.append(line)
            if self.on_wait is not None:
                self.on_wait(line)

        # rows are read by position, whatever row factory the connection was opened with.
        # One ingest of a collection at a time, as `pgfunnel ingest` runs (which holds the
        # run lock already on the same session: taken again, it is not waited for): a web
        # app's ingest beside a cron job's embedded every changed document twice, and one
        # threw its vectors away
        with tuple_rows(self.conn), schema_access_named(self.conn), \
                one_ingest_at_a_time(self.conn, self.collection, waiting):
            stats = self._ingest(records, vectors, prune)
        stats.notes[:0] = waited
        return stats

    def _ingest(self, records: Iterable[DocumentRecord],
                vectors: dict[str, np.ndarray] | None, prune: bool = False) -> IngestStats:
        # on a read replica the first write would fail after a batch was embedded
        from pgfunnel.db import refuse_read_only, require_staging, require_writer

        refuse_read_only(self.conn, "ingest")
        require_writer(self.conn, "ingest documents", "document", "INSERT")
        require_staging(self.conn, "ingest documents")
        if prune:
            # before any batch: a role that may write but not delete would otherwise
            # find out after the whole ingest
            require_writer(self.conn, "prune documents", "document", "DELETE")
        if self.private:
            # private is a collection's setting, made when it is created: documents
            # without readers asked to be private would go in public, unsaid
            row = self.conn.execute("select private from pgfunnel.collection where name = %s",
                                    (self.collection,)).fetchone()
            if row is not None and not row[0]:
                raise ConfigError(
                    "private", f"collection {self.collection!r} exists and is public, and "
                    "private applies when a collection is created (its documents without "
                    "readers would be public); give the documents readers, or ingest them "
                    "into a new collection")
        existing = collection_id(self.conn, self.collection)
        # the collection this ingest writes: one dropped meanwhile is not made again
        self._collection_seen = existing
        version = None if existing is None else active_version(self.conn, existing)
        if existing is not None and version is None:
            # before any model time is spent; the batch's transaction checks it again
            self._refuse_versionless(existing)
        # one an earlier ingest made has committed (or was taken back, and is not here)
        self._made_version = None
        if vectors:
            _check_vectors_up_front(vectors, *self._vector_size(version))
        # each call reports its own work: a stats object handed out before is not changed
        self.stats = IngestStats()
        self._embed_queued = 0
        self._unchanged_given = []
        self._rechunked = 0
        self._rehashed = 0
        self._kept_access = []
        self._unreadable = 0
        started = time.perf_counter()
        with _Preparer(self, enabled=self.prepare_ahead) as preparer:
            # while the server writes one batch, two threads (with a connection of their
            # own) build the rows of the next and analyse the one after: the cores work
            # at once instead of taking turns
            pending: deque[tuple[list[DocumentRecord], Future[_Prepared] | None]] = deque()
            citekeys: set[str] = set()
            stored = 0
            try:
                for batch in self._batches(records):
                    citekeys.update(r.citekey for r in batch)
                    pending.append((batch, preparer.submit(batch)))
                    if len(pending) > preparer.AHEAD:
                        written, prepared = pending.popleft()
                        self._ingest_batch(written, vectors, _result(prepared))
                        stored += len(written)
            except _RecordRefused as refused:
                # the records are checked as they stream in, so a bad one late in the
                # input stops the ingest with batches before it committed, and others,
                # read ahead, not: what is in the collection, said as it is
                raise refused.error(stored, self.collection) from refused.cause
            while pending:
                written, prepared = pending.popleft()
                self._ingest_batch(written, vectors, _result(prepared))
        self.stats.db_seconds += (time.perf_counter() - started
                                  - self.stats.embed_seconds)
        if prune and not citekeys:
            # a folder misspelt into an empty one would have emptied the collection
            raise InvalidInputError(
                f"prune: this ingest read no document, and pruning would delete every "
                f"document of collection {self.collection!r}; nothing was deleted")
        try:
            self._finish()
            if prune:
                # only now, every batch committed: an ingest that failed or was
                # interrupted has deleted nothing
                self._prune(citekeys)
        except psycopg.Error as exc:
            # the batches are committed; what failed is the index build or the statistics
            # refresh after them (a role's lock_timeout, say): a pgfunnel error, as a
            # batch's failure is, not the driver's
            raise translate(exc, searching=False) from exc
        if vectors is not None and (unused := sorted(set(vectors) - citekeys)):
            # a misspelt citekey would otherwise pass unnoticed: its document embedded by
            # the model instead, its vectors dropped
            note = (f"vectors given for {len(unused)} citekey(s) not in this ingest, not "
                    f"used: {', '.join(map(repr, unused[:5]))}{', ...' if len(unused) > 5 else ''}")
            self.stats.notes.append(note)
            warn_at_caller(f"pgfunnel ingest: {note}")
        if self._rehashed:
            self.stats.notes.append(
                f"{self._rehashed} document(s) chunked by an older pgfunnel come out the same "
                f"under chunking version {CHUNKING_VERSION}: only their stored hash was "
                "brought up to date")
        if self._rechunked:
            # sources that did not change are rewritten too: say why, once
            self.stats.notes.append(
                f"{self._rechunked} document(s) had been chunked by an older pgfunnel and "
                f"were chunked again (chunking version {CHUNKING_VERSION}); their vectors "
                "were kept wherever the model reads the same words")
        if kept_access := sorted(self._kept_access):
            shown = ", ".join(repr(c) for c in kept_access[:5]) + (
                f" and {len(kept_access) - 5} more" if len(kept_access) > 5 else "")
            self.stats.notes.append(
                f"{len(kept_access)} re-ingested document(s) keep readers, tenant or validity "
                f"stored in the database that their source does not give ({shown}): "
                "change those with UPDATE on pgfunnel.document (docs/security.md)")
        if self._unreadable:
            # a private collection's document without readers is for no one: files carry
            # none, and `ingest --private DIR` wrote documents no search could find
            self.stats.notes.append(
                f"{self._unreadable} document(s) of private collection "
                f"{self.collection!r} have no readers, so no search finds them: give them "
                "readers (a .jsonl line's \"readers\", or update pgfunnel.document set "
                "readers = '{...}' where citekey = ...; docs/security.md)")
        if kept := self._unchanged_given:
            # re-running a pipeline with its vectors is the usual case: a note, no warning
            self.stats.notes.append(
                f"vectors given for {len(kept)} unchanged document(s) were checked and "
                f"not written (their stored chunks and vectors are current): "
                f"{', '.join(map(repr, kept[:5]))}{', ...' if len(kept) > 5 else ''}")
        return self.stats

    def _batches(self, records: Iterable[DocumentRecord]) -> Iterator[list[DocumentRecord]]:
        batch: list[DocumentRecord] = []
        batch_chunks = 0
        for rec in _refused_apart(checked_records(records)):
            batch.append(rec)
            # an estimate from the word count (chunks end at headings too); it only sizes
            # the transaction
            batch_chunks += 1 + rec.text.count(" ") // self.chunk_words
            if len(batch) >= self.batch_documents or batch_chunks >= self.batch_chunks:
                yield batch
                batch = []
                batch_chunks = 0
        if batch:
            yield batch

    def _analyse(self, analyzer: TermAnalyzer, batch: list[DocumentRecord]) -> _Analysed:
        """The first half of preparing a batch: content hashes, and for the documents
        that are new or changed by them, chunks, chunk ids (sequence values are never
        rolled back, so reserving them outside the writing transaction is safe) and the
        analyzer's terms for the words not yet cached, read on the analyzer's own
        connection. Mostly a wait on the server, so it runs beside the second half of
        the batch before. Unchanged documents are left out before the costly part (a
        re-run over an unchanged 2 MB file analysed all of it to write nothing); the
        writing transaction decides again, and prepares the batch itself when it finds
        other documents changed."""
        hashes = {r.citekey: r.content_hash(self.chunk_words) for r in batch}
        stored = dict(analyzer.conn.execute(
            "select d.citekey, d.content_hash from pgfunnel.document d "
            "join pgfunnel.collection c on c.id = d.collection_id "
            "where c.name = %s and d.citekey = any(%s)",
            (self.collection, list(hashes))).fetchall())
        chunked = [(r, chunk_text(r.text, self.chunk_words)) for r in batch
                   if stored.get(r.citekey) != hashes[r.citekey]]
        mode = self._lexical_seen
        texts = [lexical_input(r.title, ch.text, mode, ch.heading_level)
                 for r, chunks in chunked for ch in chunks]
        ids = _reserve_chunk_ids(analyzer.conn, len(texts)) if texts else []
        analyzer.prepare(texts)
        return _Analysed(hashes, chunked, texts, ids, mode)

    def _prepare(self, analyzer: TermAnalyzer, batch: list[DocumentRecord],
                 analysed: Future[_Analysed] | None = None) -> _Prepared:
        """Everything about a batch that needs no lock and no transaction: its
        :meth:`_analyse` (``analysed`` when it ran in a thread of its own), content
        hashes, and the lexical and posting rows."""
        ready = analysed.result() if analysed is not None else self._analyse(analyzer, batch)
        try:
            rows = index_rows(analyzer, ready.ids, ready.texts, None)
        except TermsPastTsvectorError as exc:
            raise _in_document(exc, ready.chunked) from None
        return _Prepared(analyzer.analyzer, ready.lexical_input, ready.hashes, ready.chunked,
                         ready.ids, rows)

    def _version(self) -> tuple[int, ActiveVersion]:
        coll = get_or_create_collection(self.conn, self.collection, private=self.private,
                                        analyzer=self._analyzer_given or DEFAULT_ANALYZER)
        if self._collection_seen is not None and coll != self._collection_seen:
            # dropped (`versions drop-collection`) while this ingest embedded: making it
            # again would make it with this ingest's settings, public unless asked
            # otherwise, so a private collection's documents without readers came back
            # readable by everyone. Refused; the transaction takes the new row back
            raise ConflictError(
                f"collection {self.collection!r} was dropped while this ingest ran (`pgfunnel "
                "versions drop-collection`, or a DELETE of its row), with the batches this "
                "ingest had written; nothing more is written. Ingest again to make it anew "
                "(with --private for a private one)")
        self._collection_seen = coll
        version = active_version(self.conn, coll)
        if version is None:
            self._refuse_versionless(coll)
            analyzer_row = self.conn.execute(
                "select analyzer from pgfunnel.collection where id = %s", (coll,)).fetchone()
            analyzer = str(analyzer_row[0]) if analyzer_row else DEFAULT_ANALYZER
            emb = self.embedder
            vid = create_version(self.conn, coll, emb.model_name, emb.dimensions, analyzer,
                                 "active", {"embed_input": self.embed_input,
                                            "lexical_input": self.lexical_input})
            version = active_version(self.conn, coll)
            assert version is not None and version.id == vid
            # until its batch commits the collection is still new: a vector of another size
            # is said as for a new one (``_vector_size``)
            self._made_version = vid
            self.stats.notes.append(f"created index version {version.version} (active)")
        self._lexical_seen = version.lexical_input
        return coll, version

    def _refuse_versionless(self, coll: int) -> None:
        """A collection that has documents or versions but no active version (one retired
        or dropped by hand, a drop-collection cut short) is not new: the version its
        ingest would create would hold only this ingest's changed documents, and searches
        would lose every other one without a word."""
        states = [f"{v} {s}" for v, s in self.conn.execute(
            "select version, state from pgfunnel.index_version where collection_id = %s "
            "order by version", (coll,)).fetchall()]
        row = self.conn.execute("select count(*) from pgfunnel.chunk where collection_id = %s",
                                (coll,)).fetchone()
        chunks = int(row[0]) if row else 0
        if not states and not chunks:
            return
        name = self.collection
        raise ConflictError(
            f"collection {name!r} has no active index version but holds {chunks} chunk(s)"
            + (f" and versions ({', '.join(states)})" if states else "")
            + "; a new version from this ingest would cover only its own documents. "
            + (f"Activate one first (pgfunnel versions activate N -c {shlex.quote(name)}), "
               f"or build one over every chunk (pgfunnel reindex -c {shlex.quote(name)} "
               "--activate)" if states else
               "Build one over every chunk first (pgfunnel reindex -c "
               f"{shlex.quote(name)} --activate)"))

    def _changed_documents(self, coll: int, batch: list[DocumentRecord],
                           prepared: _Prepared | None
                           ) -> tuple[dict[str, tuple[int, str, str]], dict[str, str],
                                      list[DocumentRecord], dict[str, int]]:
        """The batch's documents already stored (citekey -> id, content hash, title), the
        content hash of each document, the documents that are new or changed, and those
        whose stored hash only needs bringing up to date (citekey -> document id).

        A document stored by an older chunking version whose fields are the same and whose
        chunks come out the same under this one is not changed: its stored hash is only
        brought up to date, so a new chunking version rewrites only the
        documents it cuts otherwise (version 9 changed Thai, Lao, Khmer and Burmese text
        only), not every document of every collection."""
        existing = {
            ck: (int(did), h, t) for ck, did, h, t in self.conn.execute(
                "select citekey, id, content_hash, title from pgfunnel.document "
                "where collection_id = %s and citekey = any(%s)",
                (coll, [r.citekey for r in batch])).fetchall()}
        hashes = (prepared.hashes if prepared is not None
                  else {r.citekey: r.content_hash(self.chunk_words) for r in batch})
        todo = [r for r in batch
                if r.citekey not in existing or existing[r.citekey][1] != hashes[r.citekey]]
        rehash = self._rechunked_alike(existing, todo, prepared)
        if rehash:
            todo = [r for r in todo if r.citekey not in rehash]
        return existing, hashes, todo, rehash

    def _rechunked_alike(self, existing: dict[str, tuple[int, str, str]],
                         todo: list[DocumentRecord], prepared: _Prepared | None
                         ) -> dict[str, int]:
        """Of the documents about to be rewritten, those (citekey -> document id) that an
        older chunking version stored with these very fields, and whose stored chunks
        this version's chunking gives again, heading, text, section path and word count
        alike, and a term's heading where it gave one (rows stored before version 11 hold
        no heading level, 0: a document with a term's heading is rewritten, so that a
        version counting it twice reads its level; the rest keep 0)."""
        older = {r.citekey: r for r in todo if r.citekey in existing
                 and UNMARKED_CHUNKING < (v := chunking_version(existing[r.citekey][1]))
                 < CHUNKING_VERSION
                 and r.content_hash(self.chunk_words, v) == existing[r.citekey][1]}
        if not older:
            return {}
        ids = {existing[ck][0]: ck for ck in older}
        stored: dict[str, list[tuple[str, bool, str, str, int]]] = {ck: [] for ck in older}
        for did, heading, level, text, path, words in self.conn.execute(
                "select document_id, heading, heading_level, text, section_path, token_count "
                "from pgfunnel.chunk where document_id = any(%s) order by document_id, ordinal",
                (list(ids),)).fetchall():
            stored[ids[did]].append((heading, level == TERM_HEADING_LEVEL, text, path, words))
        chunked = dict((r.citekey, chunks) for r, chunks in prepared.chunked) \
            if prepared is not None else {}
        return {ck: existing[ck][0] for ck, rec in older.items()
                if stored[ck] == [(ch.heading, ch.heading_level == TERM_HEADING_LEVEL, ch.text,
                                   ch.section_path, ch.token_count) for ch in chunked.get(ck)
                                  or chunk_text(rec.text, self.chunk_words)]}

    def _embed_outside(self, batch: list[DocumentRecord],
                       vectors: dict[str, np.ndarray] | None,
                       prepared: _Prepared | None) -> dict[str, np.ndarray]:
        """The model's part of a batch, done before its transaction opens: vectors for the
        chunks of new and changed documents that have none to reuse, by the text the
        embedder reads.

        Embedding a batch takes minutes on a CPU. Inside the transaction it held the
        collection's writer lock that long and sat idle in a transaction, which managed
        Postgres and poolers end (``idle_in_transaction_session_timeout``). The writing
        transaction decides again what needs a vector and embeds only what this did
        not foresee (a document changed in between)."""
        needs = [r for r in batch if vectors is None or vectors.get(r.citekey) is None]
        cid = collection_id(self.conn, self.collection) if needs else None
        version = active_version(self.conn, cid) if cid is not None else None
        if cid is None:
            existing: dict[str, tuple[int, str, str]] = {}
            todo = needs
        else:
            existing, _, todo, _ = self._changed_documents(cid, needs, prepared)
        if not todo:
            return {}
        embed_input = version.embed_input if version is not None else self.embed_input
        reuse = {} if version is None else self._reusable_vectors(version.id, embed_input,
                                                                  existing, todo)
        chunked = dict((r.citekey, chunks) for r, chunks in prepared.chunked) \
            if prepared is not None else {}
        texts = list(dict.fromkeys(
            embedding_input(r.title, ch.text, embed_input, ch.section_path) for r in todo
            for ch in chunked.get(r.citekey) or chunk_text(r.text, self.chunk_words)
            if _reused(reuse, r.title, ch, embed_input) is None))
        if not texts:
            return {}
        return dict(zip(texts, self._embed(texts), strict=True))

    def _embed(self, texts: list[str]) -> np.ndarray:
        """The model's vectors for ``texts``, with progress and the time it took."""
        # batches are chunked one at a time, so the number of chunks to embed is known
        # per batch: the total grows with each batch and comes first
        self._embed_queued += len(texts)
        self.stats.texts_embedded += len(texts)
        self._tick("embedding", 0, self._embed_queued)
        started = time.perf_counter()
        embedded = self.embedder.embed(
            texts, progress=lambda n: self._tick("embedding", n, self._embed_queued))
        self.stats.embed_seconds += time.perf_counter() - started
        return embedded

    def _ingest_batch(self, batch: list[DocumentRecord], vectors: dict[str, np.ndarray] | None,
                      prepared: _Prepared | None = None) -> None:
        self.stats.documents_seen += len(batch)
        # a version made by an earlier batch committed with it: the collection is not new
        self._made_version = None
        try:
            ahead = self._embed_outside(batch, vectors, prepared)
            with self.conn.transaction():
                ingest_lock(self.conn, self.collection)
                coll, version = self._version()
                if self._embedder is not None and not (
                        same_model(self._embedder.model_name, version.embedding_model)
                        and self._embedder.dimensions == version.dimensions):
                    self._follow_model_switch(version)
                    ahead = {}  # embedded with the model the collection no longer has
                self.stats.index_version = version.version
                self.stats.index_version_id = version.id
                existing, hashes, todo, rehash = self._changed_documents(coll, batch, prepared)
                if rehash:
                    self.conn.cursor().executemany(
                        "update pgfunnel.document set content_hash = %s where id = %s",
                        [(hashes[ck], did) for ck, did in rehash.items()])
                    self._rehashed += len(rehash)
                self._rechunked += sum(
                    1 for r in todo if r.citekey in existing
                    and chunking_version(existing[r.citekey][1]) < CHUNKING_VERSION)
                self.stats.documents_unchanged += len(batch) - len(todo)
                if vectors is not None and len(todo) < len(batch):
                    self._check_unchanged_given(batch, todo, vectors, version.dimensions,
                                                prepared)
                if not todo:
                    self.stats.texts_unused += len(ahead)
                    self._tick("documents", len(batch))
                    return
                if prepared is not None and (
                        [r.citekey for r, _ in prepared.chunked] != [r.citekey for r in todo]
                        or prepared.analyzer != version.analyzer
                        or prepared.lexical_input != version.lexical_input):
                    # rows were built for other documents than those that turn out new or
                    # changed, or with another analyzer or input than the version's (each
                    # changed meanwhile)
                    prepared = None
                chunked = (prepared.chunked if prepared is not None
                           else [(r, chunk_text(r.text, self.chunk_words)) for r in todo])
                new_texts: list[str] = []
                new_titles: list[str] = []
                new_paths: list[str] = []
                new_vectors: list[np.ndarray | None] = []
                reuse = self._reusable_vectors(version.id, version.embed_input, existing, todo)
                labels: dict[int, str] = {}
                for rec, chunks in chunked:
                    given = vectors.get(rec.citekey) if vectors is not None else None
                    if given is not None:
                        _check_vector_count(rec.citekey, given, chunks)
                    for i, ch in enumerate(chunks):
                        new_texts.append(ch.text)
                        new_titles.append(rec.title)
                        new_paths.append(ch.section_path)
                        if given is not None:
                            new_vectors.append(given[i])
                            labels[len(new_vectors) - 1] = f"vectors[{rec.citekey!r}][{i}]"
                        else:
                            new_vectors.append(_reused(reuse, rec.title, ch, version.embed_input))
                # what to say of a vector of another size is worked out only for one
                # refused: it was built for every batch, given vectors or none
                _check_given_vectors(new_vectors, labels, version.dimensions,
                                     lambda: self._vector_size(version)[1])
                missing = [i for i, v in enumerate(new_vectors) if v is None]
                self.stats.chunks_given += len(labels)
                self.stats.chunks_reused += len(new_vectors) - len(missing) - len(labels)
                unforeseen = []
                used: set[str] = set()
                for i in missing:
                    key = embedding_input(new_titles[i], new_texts[i], version.embed_input,
                                          new_paths[i])
                    vector = ahead.get(key)
                    if vector is None:
                        unforeseen.append(i)
                    else:
                        new_vectors[i] = vector
                        used.add(key)
                self.stats.texts_unused += len(ahead) - len(used)
                if unforeseen:
                    embedded = self._embed(
                        [embedding_input(new_titles[i], new_texts[i], version.embed_input,
                                         new_paths[i]) for i in unforeseen])
                    for i, vec in zip(unforeseen, embedded, strict=True):
                        new_vectors[i] = vec
                self.stats.chunks_embedded += len(missing)
                self._write(coll, version, chunked, new_texts, new_vectors,
                            {ck: v[0] for ck, v in existing.items()}, hashes, prepared)
        except psycopg.Error as exc:
            raise translate(exc, searching=False) from exc
        self._tick("documents", len(batch))

    def _follow_model_switch(self, version: ActiveVersion) -> None:
        """The collection's active version was switched to another model after this
        ingest loaded its own (`versions activate` or `rollback` between two batches, or
        while this one embedded): its vectors would go into the new version's graph,
        beside vectors of another model (of the same size, unsaid). The collection's own
        model is loaded in its place, and the batch embeds with it (nothing embedded
        ahead is kept); a model the caller gave is refused."""
        old = self._embedder
        if self._embedder_given and old is not None:
            raise ConflictError(
                f"collection {self.collection!r} was switched to index version "
                f"{version.version} ({version.embedding_model!r}, {version.dimensions} dims) "
                f"while this ingest ran with {old.model_name!r} ({old.dimensions} dims); "
                "the batches written before stay written. Ingest again with that model "
                "(or without one: the collection's own is used)")
        self._embedder = Embedder(version.embedding_model)
        self.stats.notes.append(
            f"the collection was switched to index version {version.version} "
            f"({version.embedding_model!r}) while this ingest ran; later batches were "
            "embedded with its model")

    def _check_unchanged_given(self, batch: list[DocumentRecord], todo: list[DocumentRecord],
                               vectors: Mapping[str, np.ndarray], dimensions: int,
                               prepared: _Prepared | None) -> None:
        """Vectors given for documents found unchanged are not written, but they are
        checked as for a changed one: a wrong count, size or NaN in them is a bug in the
        caller's pipeline whether or not this run needed them."""
        changed = {r.citekey for r in todo}
        chunked = dict((r.citekey, c) for r, c in prepared.chunked) if prepared else {}
        for rec in batch:
            given = vectors.get(rec.citekey)
            if rec.citekey in changed or given is None:
                continue
            chunks = chunked.get(rec.citekey) or chunk_text(rec.text, self.chunk_words)
            _check_vector_count(rec.citekey, given, chunks)
            _check_given_vectors(list(given), {i: f"vectors[{rec.citekey!r}][{i}]"
                                               for i in range(len(chunks))}, dimensions)
            self._unchanged_given.append(rec.citekey)

    def _reusable_vectors(self, version_id: int, embed_input: str,
                          existing: dict[str, tuple[int, str, str]],
                          todo: list[DocumentRecord]) -> dict[str, np.ndarray]:
        """The stored vectors of the changed documents' chunks by ``vector_key``: the
        hash of what the embedder read for them (title, section path and text as the
        version's ``embed_input`` has it), so a new chunk reuses a vector only when the
        model would read the same words for it."""
        document_ids = [existing[r.citekey][0] for r in todo if r.citekey in existing]
        if not document_ids:
            return {}
        rows = self.conn.execute(
            "select d.title, c.text, c.section_path, e.embedding from pgfunnel.chunk c "
            "join pgfunnel.document d on d.id = c.document_id "
            "join pgfunnel.embedding e on e.chunk_id = c.id and e.index_version_id = %s "
            "where c.document_id = any(%s)", (version_id, document_ids)).fetchall()
        return {vector_key(title, text, embed_input, path):
                np.asarray(v.to_numpy() if hasattr(v, "to_numpy") else v, dtype=np.float32)
                for title, text, path, v in rows}

    def _write(self, coll: int, version: ActiveVersion,
               chunked: list[tuple[DocumentRecord, list[ChunkRecord]]], texts: list[str],
               vectors: list[np.ndarray | None], existing: dict[str, int],
               hashes: dict[str, str], prepared: _Prepared | None = None) -> None:
        from psycopg.types.json import Jsonb

        conn = self.conn
        private_row = conn.execute("select private from pgfunnel.collection where id = %s",
                                   (coll,)).fetchone()
        private = bool(private_row and private_row[0])
        old_ids = [existing[r.citekey] for r, _ in chunked if r.citekey in existing]
        if old_ids:
            # the documents' rows before their chunks, as a DELETE of a document takes
            # them (its cascade reaches the chunks after): locking the chunks first, an app
            # deleting one of these documents meanwhile held its row while waiting for the
            # chunks, and the upsert below waited for that row (a deadlock). In citekey
            # order, as a DELETE ... WHERE citekey = ANY(...) takes them by the index.
            conn.execute("select 1 from pgfunnel.document where id = any(%s) "
                         "order by citekey for no key update", (old_ids,))
            removed = conn.execute(
                "select pgfunnel._remove_chunks(array(select id from pgfunnel.chunk "
                "where document_id = any(%s)))", (old_ids,)).fetchone()
            self.stats.chunks_removed += int(removed[0]) if removed else 0
        # one statement for the whole batch: a round trip per document cost more than
        # writing its chunks
        doc_rows = [{"citekey": rec.citekey, "title": rec.title, "metadata": rec.metadata,
                     "tenant": rec.tenant, "readers": list(rec.readers),
                     "is_public": not rec.readers and not private, "language": rec.language,
                     # a time without a zone is UTC, as in a JSONL line: sent naive,
                     # Postgres read it in the session's TimeZone
                     **{name: None if value is None else as_utc(value).isoformat()
                        for name, value in (("valid_from", rec.valid_from),
                                            ("valid_to", rec.valid_to))},
                     "content_hash": hashes[rec.citekey]} for rec, _ in chunked]
        written = conn.execute(
                "insert into pgfunnel.document as d (collection_id, citekey, title, metadata, "
                " tenant, readers, is_public, language, valid_from, valid_to, content_hash) "
                "select %s, r.citekey, r.title, r.metadata, r.tenant, r.readers, r.is_public, "
                "       r.language, r.valid_from, r.valid_to, r.content_hash "
                "  from jsonb_to_recordset(%s) as r(citekey text, title text, metadata jsonb, "
                "       tenant text, readers text[], is_public boolean, language text, "
                "       valid_from timestamptz, valid_to timestamptz, content_hash text) "
                "on conflict (collection_id, citekey) do update set title = excluded.title, "
                " metadata = excluded.metadata, "
                # Access the record does not give is kept as stored (noted below): a file
                # has no readers, tenant or validity, and a restriction set in SQL was
                # undone, the document public again, at the first edit of its text
                " tenant = coalesce(excluded.tenant, d.tenant), "
                " readers = case when cardinality(excluded.readers) = 0 and not d.is_public "
                "                then d.readers else excluded.readers end, "
                " is_public = excluded.is_public and d.is_public, "
                " language = excluded.language, "
                " valid_from = case when excluded.valid_from is null "
                "                    and excluded.valid_to is null "
                "                   then d.valid_from else excluded.valid_from end, "
                " valid_to = case when excluded.valid_from is null "
                "                  and excluded.valid_to is null "
                "                 then d.valid_to else excluded.valid_to end, "
                " content_hash = excluded.content_hash, "
                " updated_at = now() returning d.id, d.citekey, d.readers, d.is_public, "
                " d.tenant, d.valid_from is not null or d.valid_to is not null",
                (coll, Jsonb(doc_rows))).fetchall()
        doc_ids = {str(ck): int(did) for did, ck, *_ in written}
        records = {rec.citekey: rec for rec, _ in chunked}
        for _, ck, readers, is_public, tenant, has_validity in written:
            rec = records[str(ck)]
            # the row as written against what the record alone says: where they differ,
            # the write kept stored access (a new document is written as its record says)
            if (list(readers), is_public, tenant) != (
                    list(rec.readers), not rec.readers and not private, rec.tenant) \
                    or (has_validity and rec.valid_from is None and rec.valid_to is None):
                self._kept_access.append(str(ck))
            if private and not is_public and not readers:
                self._unreadable += 1
        n = len(texts)
        ids = prepared.ids if prepared is not None else _reserve_chunk_ids(conn, n)
        with _copy(conn, "chunk", ("id", "document_id", "collection_id", "ordinal",
                                   "heading", "heading_level", "section_path", "text",
                                   "token_count", "content_hash")) as cp:
            i = 0
            for rec, chunks in chunked:
                for ch in chunks:
                    cp.write_row((ids[i], doc_ids[rec.citekey], coll, ch.ordinal, ch.heading,
                                  ch.heading_level, ch.section_path, ch.text, ch.token_count,
                                  ch.content_hash()))
                    i += 1
        analyzer = self._analyzers.setdefault(version.analyzer,
                                              TermAnalyzer(conn, version.analyzer))
        # rows prepared ahead were analysed from these texts already
        lexical_texts = [] if prepared is not None else [
            lexical_input(rec.title, ch.text, version.lexical_input, ch.heading_level)
            for rec, chunks in chunked for ch in chunks]
        try:
            write_chunk_index(conn, version.id, analyzer, ids, lexical_texts,
                              np.stack([v for v in vectors if v is not None]) if n else None,
                              prepared.rows if prepared is not None else None)
        except TermsPastTsvectorError as exc:
            raise _in_document(exc, chunked) from None
        self.stats.documents_written += len(chunked)
        self.stats.chunks_written += n

    def _embedding_table_shared(self, version_id: int) -> bool:
        """Whether pgfunnel.embedding holds versions other than this one (of this or
        another collection)."""
        row = self.conn.execute("select exists (select from pgfunnel.index_version "
                                "where id <> %s)", (version_id,)).fetchone()
        return bool(row and row[0])

    def _prune(self, read: set[str]) -> None:
        """Delete, in one transaction under the collection's ingest lock, its documents
        whose citekeys are not in ``read``, as ``delete_documents`` deletes them."""
        with self.conn.transaction():
            coll = require_collection(self.conn, self.collection)
            ingest_lock(self.conn, self.collection)
            # chosen under the lock: a document another ingest wrote meanwhile is in the
            # collection, and not in this run, so it goes too (the run is the whole
            # collection)
            stale = unread_citekeys(self.conn, coll, read)
            if stale:
                _delete_locked(self.conn, coll, stale)
        self.stats.pruned = stale
        self.stats.documents_pruned = len(stale)
        # told once committed, for what a Ctrl-C after it says
        self._tick("pruned", len(stale))

    def _finish(self) -> None:
        cid = collection_id(self.conn, self.collection)
        version = active_version(self.conn, cid) if cid is not None else None
        if version is None:
            return
        # the lexical index of a version's first postings is database-side ingest work
        # (it stands in for per-posting index inserts), so it counts in db_seconds
        row = self.conn.execute("select chunk_count from pgfunnel.index_version where id = %s",
                                (version.id,)).fetchone()
        counted = int(row[0]) if row else None
        version_chunks = counted or 0
        started = time.perf_counter()
        with self.conn.transaction():
            first_postings = create_posting_index(self.conn, version.id)
        self.stats.db_seconds += time.perf_counter() - started
        state = index_state(self.conn, hnsw_index_name(version.id))
        # the first ingest of a version builds its graph here: minutes for 100k chunks.
        # Later ones leave it alone: CREATE INDEX, even IF NOT EXISTS, takes the table's
        # owner, and an ingest job in pgfunnel_writer adds documents without being one.
        # An invalid graph is a concurrent build in progress (waited for) or cut short
        # (built again).
        if not state:
            report = (None if self.progress is None
                      else lambda n, total: self._tick("index", n, total))
            total = counted
            if report is not None:
                report(0, total)
            # A plain CREATE INDEX holds a SHARE lock on pgfunnel.embedding until it
            # ends, and every write of every collection waits behind it. When the table
            # holds other versions, whose ingests, deletes and reindexes that would stall,
            # the graph is built concurrently: a second pass over the table, no lock on
            # their writes. An invalid graph can only be replaced that way too.
            concurrently = state is False or self._embedding_table_shared(version.id)
            with watch_index_build(self.conn, report):
                if concurrently:
                    create_hnsw_index(self.conn, version.id, version.dimensions,
                                      concurrently=True)
                else:
                    with self.conn.transaction():
                        create_hnsw_index(self.conn, version.id, version.dimensions)
            if report is not None:
                report(total or 0, total)
        self._tick("analyze", 0)
        # Refreshing the planner statistics of the shared tables costs about a second on
        # a 100k-chunk database, whatever was written (ANALYZE samples whole tables, the
        # posting table across every version's partition): ten times a one-document
        # ingest. So, as autovacuum would, only a write of a tenth of the version or more
        # refreshes them; a smaller one only vacuums its version's posting partition,
        # which keeps the lexical leg's scans index-only on the pages it wrote.
        # The same rule holds between a version and the database: the shared tables'
        # statistics describe every collection, and ANALYZE of the partitioned posting
        # table analyses every version's partition, so a new tenant's collection of 1,000
        # chunks in a database of 170 spent 2 - 5 s there, growing with the number of
        # collections. A write under a tenth of the database refreshes its own version's
        # partition (and, where the server can, the posting table's own statistics alone).
        written = self.stats.chunks_written
        if (first_postings or not state or written >= STATS_REFRESH_SHARE * version_chunks):
            skipped = refresh_stats_after_write(self.conn, version.id, written)
        else:
            skipped = vacuum_posting_partition(self.conn, version.id)
        if skipped:
            self.stats.notes.append(
                f"planner statistics of {', '.join('pgfunnel.' + t for t in skipped)} left "
                "to autovacuum: another session held it (an index build or a VACUUM, say)")


def _reused(stored: dict[str, np.ndarray], title: str, chunk: ChunkRecord,
            embed_input: str) -> np.ndarray | None:
    """The stored vector this chunk of a document titled ``title`` can keep, if any
    (``_reusable_vectors``' keys)."""
    return stored.get(chunk.vector_key(title, embed_input))


def _check_vector_count(citekey: str, given: Any, chunks: Sequence[ChunkRecord]) -> None:
    if len(given) != len(chunks):
        raise InvalidInputError(f"vectors for {citekey!r}: {len(given)} given for "
                                f"{len(chunks)} chunks")


def _check_vectors_up_front(vectors: Mapping[str, Any], dimensions: int | None,
                            expected: str | None = None) -> None:
    """Every given vector checked before the first batch is written (finite, non-zero,
    one row per chunk, the active index version's ``dimensions``, or for a new collection
    the same throughout): a bad vector for a document late in the input was refused only
    after the batches before it had committed. That each document has a vector per chunk
    is checked by its batch, before it writes.

    Float arrays of rows are checked together, a block of documents at a time (100,000
    one-chunk documents in under a second here); anything else document by document. A
    bad vector is named either way (``_check_given_vectors``); one of another size than
    ``dimensions`` is told ``expected``."""
    dims: tuple[int, str] | None = None if dimensions is None else (dimensions, "")
    block: list[tuple[str, np.ndarray]] = []
    rows_in_block = 0
    for citekey, given in vectors.items():
        if isinstance(given, np.ndarray) and given.ndim == 2 and given.dtype.kind == "f" \
                and given.shape[0] > 0 and (dims is None or given.shape[1] == dims[0]):
            if dims is None:
                dims = (given.shape[1], citekey)
            block.append((citekey, given))
            rows_in_block += given.shape[0]
            if rows_in_block >= 8192:
                _check_vector_block(block, dims[0], expected if dimensions else None)
                block, rows_in_block = [], 0
        else:
            dims = _check_document_vectors(citekey, given, dimensions, dims, expected)
    if block:
        assert dims is not None
        _check_vector_block(block, dims[0], expected if dimensions else None)


def _check_vector_block(block: list[tuple[str, np.ndarray]], dimensions: int,
                        expected: str | None = None) -> None:
    """Documents' float vectors of one size, checked in one array operation
    (``_check_given_vectors``)."""
    rows: list[np.ndarray | None] = [row for _, given in block for row in given]
    labels = dict(enumerate(f"vectors[{citekey!r}][{i}]"
                            for citekey, given in block for i in range(len(given))))
    _check_given_vectors(rows, labels, dimensions, expected)


def _check_document_vectors(citekey: str, given: Any, dimensions: int | None,
                            dims: tuple[int, str] | None,
                            expected: str | None = None) -> tuple[int, str] | None:
    """One document's vectors checked row by row, each error naming its vector; returns
    the size every vector must have from then on (the first one's, for a new
    collection)."""
    try:
        one_row = np.ndim(given) == 1 and len(given) > 0 and \
            isinstance(given[0], (numbers.Real, np.number))
    except (TypeError, ValueError):
        one_row = False
    if one_row:
        raise InvalidInputError(
            f"vectors for {citekey!r}: one vector of {len(given)} numbers; give an array "
            "with one row per chunk of the document (shape (chunks, dimensions)), even "
            "for a document of one chunk")
    try:
        rows = list(given)
    except TypeError:
        raise InvalidInputError(
            f"vectors for {citekey!r}: must be an array with one row per chunk, got "
            f"{type(given).__name__}") from None
    if not rows:
        return dims
    first = check_vector(rows[0], dimensions, parameter=f"vectors[{citekey!r}][0]",
                         expected=expected)
    if dims is None:
        dims = (first.size, citekey)
    elif first.size != dims[0]:
        raise InvalidVectorError(
            f"has {first.size} dimensions, while vectors[{dims[1]!r}] have {dims[0]}; every "
            "vector comes from one model", parameter=f"vectors[{citekey!r}][0]")
    _check_given_vectors(rows, {i: f"vectors[{citekey!r}][{i}]" for i in range(len(rows))},
                         dims[0], expected if dimensions else None)
    return dims


def _check_given_vectors(vectors: list[np.ndarray | None], labels: dict[int, str],
                         dimensions: int,
                         expected: str | Callable[[], str | None] | None = None) -> None:
    """Validate caller-given vectors in place, in one array operation when they are sound.

    Any failure is reported by check_vector on the first bad vector, so the error names
    it (``vectors['key'][i]``) exactly as a one-by-one check would. ``expected`` (what a
    wrong size is told, or a function that says it) is read only when some vector is
    not sound.
    """
    if not labels:
        return
    positions = sorted(labels)
    try:
        # a value past single precision becomes Inf in the cast, which the check below
        # names; numpy's own "overflow encountered in cast" warning came out beside it
        with np.errstate(over="ignore"):
            stacked = np.asarray([vectors[p] for p in positions], dtype=np.float32)
        sound = stacked.ndim == 2 and stacked.shape[1] == dimensions \
            and bool(np.isfinite(stacked).all())
        if sound:
            # the lengths check_vector allows, measured as it measures them
            wide = stacked.astype(np.float64)
            norms = np.sqrt(np.einsum("ij,ij->i", wide, wide))
            sound = bool(((norms >= VECTOR_NORM_MIN) & (norms <= VECTOR_NORM_MAX)).all())
    except (TypeError, ValueError):
        sound = False
    if not sound:
        said = expected() if callable(expected) else expected
        for p in positions:
            vectors[p] = check_vector(vectors[p], dimensions, parameter=labels[p],
                                      expected=said)
        return
    for p, row in zip(positions, stacked, strict=True):
        vectors[p] = row


#: the share of a version's chunks an ingest must write for it to refresh the planner
#: statistics of the shared tables (autovacuum's own default analyze threshold)
STATS_REFRESH_SHARE = 0.1


def vacuum_posting_partition(conn: psycopg.Connection[Any], version_id: int) -> list[str]:
    """VACUUM one version's posting partition (the pages an ingest just wrote become
    all-visible); returns it when another session held it and it was skipped. Versions
    whose postings predate partitioning are left to autovacuum."""
    partition = _own_posting_partition(conn, version_id)
    return [] if partition is None else _maintain("vacuum (skip_locked)", [partition], conn)


def _own_posting_partition(conn: psycopg.Connection[Any], version_id: int) -> str | None:
    """The name of the version's posting partition, or None for a version whose postings
    predate partitioning (they share ``posting_legacy``)."""
    partition = posting_partition_name(version_id)
    row = conn.execute("select pg_catalog.to_regclass(%s) is not null",
                       (f"pgfunnel.{partition}",)).fetchone()
    return partition if row and row[0] else None


def refresh_stats_after_write(conn: psycopg.Connection[Any], version_id: int,
                              written: int) -> list[str]:
    """After a write of ``written`` chunks into a version: every shared table's statistics
    (:func:`refresh_table_stats`) when that is a tenth of the database's chunks or more,
    else the version's own (:func:`refresh_version_stats`). Returns what was skipped."""
    row = conn.execute("select coalesce(sum(chunk_count), 0) from pgfunnel.index_version"
                       ).fetchone()
    if written >= STATS_REFRESH_SHARE * (int(row[0]) if row else 0):
        return refresh_table_stats(conn)
    return refresh_version_stats(conn, version_id)


def refresh_version_stats(conn: psycopg.Connection[Any], version_id: int) -> list[str]:
    """Planner statistics and visibility map of one version's posting partition after a
    write that is a small share of the database; returns what was skipped (held by
    another session).

    The partition is vacuumed and analysed alone; on Postgres 18 and later the posting
    table's own (inherited) statistics are refreshed too, from one sample across the
    partitions (``ANALYZE ONLY``), where a plain ANALYZE of it analyses every partition
    again. The shared tables are left to autovacuum, as after a small ingest. Versions
    whose postings predate partitioning, and connections inside a transaction, get
    :func:`refresh_table_stats`."""
    in_transaction = (conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE
                      or not conn.autocommit)
    partition = None if in_transaction else _own_posting_partition(conn, version_id)
    if partition is None:
        return refresh_table_stats(conn)
    skipped = _maintain("vacuum (analyze, skip_locked)", [partition], conn)
    if conn.info.server_version >= 180000:
        skipped += _maintain("analyze (skip_locked)", ["posting"], conn, only=True)
    return sorted(set(skipped))


def refresh_table_stats(conn: psycopg.Connection[Any]) -> list[str]:
    """Planner statistics and visibility maps after a bulk write; returns the tables
    skipped because another session held them.

    VACUUM marks the freshly written pages all-visible, so the lexical leg's scans of the
    posting index are index-only in fact, not only in plan (on 100k fresh chunks a
    common-term query read 54k heap pages without it: 43 ms instead of 29). It cannot run
    inside a transaction; there, ANALYZE alone is done and autovacuum catches up later.

    The tables are shared by every collection, so a table another session holds in a
    conflicting mode (another collection's concurrent HNSW build or index drop, another
    ingest's VACUUM, a posting partition being attached) is skipped, not waited for:
    waiting held up a one-document ingest for the whole of another collection's index
    build, or failed it under a ``lock_timeout``. Autovacuum catches up with a skipped one.
    """
    in_transaction = conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE
    command = ("analyze (skip_locked)" if in_transaction or not conn.autocommit
               else "vacuum (analyze, skip_locked)")
    return _maintain(command, ["posting", "lexical", "embedding", "chunk", "document"], conn)


def _maintain(command: str, tables: Sequence[str], conn: psycopg.Connection[Any], *,
              only: bool = False) -> list[str]:
    """Run a VACUUM or ANALYZE command with SKIP_LOCKED on each table of schema pgfunnel
    (``only``: without its partitions, Postgres 18+); the tables it skipped (the server's
    warning says so with SQLSTATE 55P03)."""
    skipped: list[str] = []
    current = ""

    def on_notice(diag: psycopg.errors.Diagnostic) -> None:
        if diag.sqlstate == "55P03":
            skipped.append(current)

    conn.add_notice_handler(on_notice)
    try:
        with unbounded_statements(conn):
            for current in tables:
                conn.execute(sql.SQL("{} {}{}").format(
                    sql.SQL(command), sql.SQL("only " if only else ""),
                    sql.Identifier("pgfunnel", current)))
    finally:
        conn.remove_notice_handler(on_notice)
    return sorted(set(skipped))


def _check_ingest_arguments(records: object, vectors: object) -> None:
    """Refuse ``ingest`` arguments of the wrong shape before anything is written: one
    record where an iterable of them belongs, vectors not keyed by citekey (each was a raw
    TypeError or AttributeError from deep inside a batch)."""
    if isinstance(records, DocumentRecord):
        raise ConfigError("records", "must be an iterable of DocumentRecord, got one "
                          "DocumentRecord: pass [record]")
    if isinstance(records, (str, bytes)) or not isinstance(records, Iterable):
        raise ConfigError("records", "must be an iterable of DocumentRecord, got "
                          f"{type(records).__name__}")
    if vectors is not None and not isinstance(vectors, Mapping):
        raise ConfigError("vectors", "must be a mapping citekey -> array of chunk vectors "
                          f"({{'a': [[...]]}}), got {type(vectors).__name__}")


def checked_records(records: Iterable[DocumentRecord]) -> Iterator[DocumentRecord]:
    """The records, each checked as an ingest checks it before its batch is written: the
    checks a JSONL line gets (a DocumentRecord built in Python included: a None reader
    used to surface as a TypeError), and a citekey given twice."""
    seen: dict[str, int] = {}
    for rec in records:
        n = len(seen) + 1
        if not isinstance(rec, DocumentRecord):
            raise InvalidInputError(
                f"document {n}: expected a pgfunnel.sources.DocumentRecord, got "
                f"{type(rec).__name__} (pgfunnel.sources.record_from_dict reads a dict as "
                "a JSONL line is read)")
        check_record(rec, f"document {n} (citekey {rec.citekey!r})")
        if rec.citekey in seen:
            # checked as the records stream in, batch by batch: Ingester adds what its
            # batches before this one stored
            raise InvalidInputError(
                f"citekey {rec.citekey!r} appears twice in this ingest (documents "
                f"{seen[rec.citekey]} and {n})")
        seen[rec.citekey] = n
        yield rec


class _RecordRefused(Exception):
    """A record refused by :func:`checked_records` inside an ingest, carried past the
    batch loop so that the loop's own errors (a batch's) are not taken for it."""

    def __init__(self, cause: InvalidInputError) -> None:
        super().__init__(str(cause))
        self.cause = cause

    def error(self, stored: int, collection: str) -> InvalidInputError:
        """The refusal, with what this ingest had stored when it came."""
        if stored:
            kept = (f"{stored:,} document(s) of this ingest, in the batches written before "
                    f"it, are stored in collection {collection!r}, each whole (a batch is "
                    "one transaction), and none of the documents read after them")
        else:
            kept = f"nothing of this ingest was written to collection {collection!r}"
        cause = self.cause
        if isinstance(cause, InvalidVectorError):
            return cause  # takes a parameter; checked_records raises none
        return type(cause)(f"{cause}; {kept}")


def _refused_apart(records: Iterator[DocumentRecord]) -> Iterator[DocumentRecord]:
    try:
        yield from records
    except InvalidInputError as exc:
        raise _RecordRefused(exc) from exc


def delete_documents(conn: psycopg.Connection[Any], collection: str,
                     citekeys: Sequence[str]) -> int:
    """Delete documents and their chunks, keeping BM25 statistics exact."""
    return _delete_documents(conn, collection, citekeys, hints=0).deleted


#: how many stored citekeys of each kind a CitekeyHint names
_HINT_KEYS = 3


@dataclass(frozen=True)
class CitekeyHint:
    """The stored citekeys that a citekey not found may have meant, the first
    ``_HINT_KEYS`` of each kind in citekey order."""

    #: equal to it under Unicode normalization (NFC) but stored in another form: `Résumé`
    #: typed, the file's name read from a Mac's folder with the accent a character of its
    #: own; only in a UTF8 database, the only one where Postgres normalizes
    other_forms: list[str] = field(default_factory=list)
    #: it under a folder (``guides/setup`` for ``setup``): a file ingested from a folder
    #: above has its path from there as its citekey; compared in one Unicode form
    longer: list[str] = field(default_factory=list)
    #: how many more of each kind the collection holds past the first ``_HINT_KEYS``
    #: named: a note or a script reading three of 40 took them for all there were
    more_other_forms: int = 0
    more_longer: int = 0

    def __bool__(self) -> bool:
        return bool(self.other_forms or self.longer)


@dataclass(frozen=True)
class DeleteReport:
    """What ``delete_documents_report`` deleted and what it did not find."""

    #: the documents deleted, as ``delete_documents`` returns it
    deleted: int
    #: the citekeys given that the collection did not hold, in the order given, once each
    missing: list[str]
    #: for the first ``hints`` citekeys of ``missing``, those it holds that each may have
    #: meant (an empty CitekeyHint where there is none)
    hints: dict[str, CitekeyHint]


def delete_documents_report(conn: psycopg.Connection[Any], collection: str,
                            citekeys: Sequence[str], *, hints: int = 5) -> DeleteReport:
    """Delete documents and their chunks as ``delete_documents`` does, and say which of
    ``citekeys`` the collection did not hold, with, for the first ``hints`` of those, the
    stored citekeys each may have meant (``CitekeyHint``). The delete and the lookups are
    one transaction: ``missing`` is exact though another ingest or delete runs."""
    if isinstance(hints, bool) or not isinstance(hints, numbers.Integral) or hints < 0:
        raise ConfigError("hints", f"must be an integer of at least 0, got {shown(hints)}")
    return _delete_documents(conn, collection, citekeys, hints=int(hints))


def _delete_documents(conn: psycopg.Connection[Any], collection: str,
                      citekeys: Sequence[str], *, hints: int) -> DeleteReport:
    check_connection(conn)
    citekeys = string_list(citekeys, "citekeys")
    for citekey in citekeys:
        check_sql_text("citekeys", citekey)
    from pgfunnel.security import schema_access_named

    with schema_access_named(conn):
        try:
            with tuple_rows(conn), conn.transaction():
                coll = require_collection(conn, collection)
                row = conn.execute("select current_user, pg_catalog.has_table_privilege("
                                   "'pgfunnel.document', 'DELETE'), "
                                   "pg_catalog.quote_ident(current_user)").fetchone()
                if row is not None and not row[1]:
                    # the first statement to fail would name an internal function; the grant
                    # is named as ingest, reindex and the version commands name it
                    raise AccessError(f"role {row[0]!r} may not delete documents: it lacks DELETE "
                                      "on pgfunnel.document (members of pgfunnel_writer have it: "
                                      f"grant pgfunnel_writer to {row[2]}, or write as a role of "
                                      f"its own{WRITER_NOT_FOR_SEARCHES}; see docs/security.md, "
                                      "Roles and grants)")
                ingest_lock(conn, collection)
                # one the database's encoding cannot spell (Chinese in a LATIN1 one) no
                # document has: sent, it failed the whole delete with a UnicodeEncodeError
                deleted = _delete_locked(conn, coll, _spellable(conn, citekeys))
                missing = [key for key in dict.fromkeys(citekeys) if key not in deleted]
                # looked up after the delete: a hint never names a document it took out
                found = _citekey_hints(conn, coll, missing[:hints]) if hints else {}
        except psycopg.Error as exc:
            raise translate(exc, searching=False) from exc
        return DeleteReport(deleted=len(deleted), missing=missing, hints=found)


def _citekey_hints(conn: psycopg.Connection[Any], coll: int,
                  citekeys: Sequence[str]) -> dict[str, CitekeyHint]:
    """For each of ``citekeys``, the citekeys of collection ``coll`` that it may have
    meant (``CitekeyHint``)."""
    found = {key: CitekeyHint() for key in citekeys}
    # a key the database cannot spell is in no stored citekey, and cannot be sent
    keys = _spellable(conn, list(found))
    if not keys:
        return found
    row = conn.execute("show server_encoding").fetchone()
    # Postgres normalizes only in a UTF8 database; elsewhere citekeys compare as stored
    utf8 = row is not None and row[0] == "UTF8"
    forms = [unicodedata.normalize("NFC", key) for key in keys] if utf8 else keys
    tail = sql.SQL("split_part({}, '/', -1)").format(sql.Identifier("citekey"))
    form: sql.Composable = sql.SQL("s.citekey")
    other_form: sql.Composable = sql.SQL("false")
    if utf8:
        # compared in one Unicode form: a Mac's file name, decomposed, is the name typed.
        # ASCII is its own NFC, so normalize() (some microseconds a row: 0.5 s a key on a
        # collection of 100,000 documents) reads only names with a byte past it
        tail = sql.SQL("case when octet_length({tail}) = length({tail}) then {tail} "
                       "else normalize({tail}, NFC) end").format(tail=tail)
        form = sql.SQL("case when octet_length(s.citekey) = length(s.citekey) then s.citekey "
                       "else normalize(s.citekey, NFC) end")
        other_form = sql.SQL("{form} = k.form and s.citekey <> k.key").format(form=form)
    # both hints end in the key's last name (another form of it normalizes to it, a '/'
    # neither composes nor decomposes): one pass over the collection's citekeys, its names
    # matched to the keys' by a hash, where each key's two hints compared each whole
    # citekey; only the few of that name are then compared whole
    query = sql.SQL(
        "select i, citekey, same_form, total from (select k.i, s.citekey, "
        "({other_form}) as same_form, row_number() over (partition by k.i, "
        "({other_form}) order by s.citekey) as n, count(*) over (partition by k.i, "
        "({other_form})) as total "
        "from (select citekey, {tail} as tail from pgfunnel.document "
        "where collection_id = %s) s "
        "join unnest(%s::text[], %s::text[], %s::text[]) with ordinality as k(key, form, tail, i) "
        "on s.tail = k.tail "
        "where ({other_form}) or right({form}, length(k.form) + 1) = '/' || k.form) h "
        "where n <= %s order by i, citekey").format(tail=tail, form=form, other_form=other_form)
    tails = [key.rsplit("/", 1)[-1] for key in forms]
    more: dict[tuple[str, bool], int] = {}
    for i, stored, same_form, total in conn.execute(query, (coll, keys, forms, tails,
                                                            _HINT_KEYS)):
        key = keys[int(i) - 1]
        hint = found[key]
        (hint.other_forms if same_form else hint.longer).append(str(stored))
        more[key, bool(same_form)] = max(0, int(total) - _HINT_KEYS)
    return {key: replace(hint, more_other_forms=more.get((key, True), 0),
                                     more_longer=more.get((key, False), 0))
            for key, hint in found.items()}


@dataclass(frozen=True)
class MovedFile:
    """A file an ingest wrote that its collection also holds under a longer citekey."""

    #: the citekey the ingest gave it (``setup``, for docs/guides/setup.md given alone)
    citekey: str
    #: the citekey an earlier ingest gave it: its path from a folder above
    #: (``guides/setup``, when ``docs`` was ingested)
    stored: str
    #: the file, as read_paths' ``origins`` holds it
    path: Path


def moved_files(conn: psycopg.Connection[Any], collection: str,
                origins: Mapping[str, Path]) -> list[MovedFile]:
    """The files of ``origins`` (citekey -> file, as ``read_paths(..., origins=...)``
    fills it) that ``collection`` also holds under a longer citekey, their path from a
    folder above: a file edited and ingested by itself, without ``root``, became a
    second document beside its old one, both searchable. Sorted by citekey; a file of
    one name in another folder (``api/index`` beside ``index``) is not one."""
    check_connection(conn)
    read = {key: path for key, path in origins.items() if format_suffix(path) != ".jsonl"}
    # the longer citekeys a file can have: its path from each folder above the one it was
    # read from (guides/setup, docs/guides/setup, ... for setup), those the ingest did not
    # itself write; looked up by the citekey index, where every citekey of the collection
    # was read (0.6 s, 100,000 documents) to find the few
    candidates: dict[str, list[tuple[str, Path]]] = {}
    for key, path in read.items():
        # the file itself lies at that longer path: not another folder's file of one name
        # (api/index beside index)
        parts = path_without_suffix(Path(os.path.abspath(path))).split("/")
        for i in range(1, len(parts)):
            other = "/".join(parts[i:])
            if other.endswith("/" + key) and other not in read:
                candidates.setdefault(other, []).append((key, path))
    # a folder above the ingest's root may have a name the database cannot spell (Chinese
    # in a LATIN1 one, bytes that are no UTF-8, which Python holds as surrogates): no
    # citekey is that path, and sent, it failed the ingest with a UnicodeEncodeError
    candidates = {other: candidates[other] for other in _spellable(conn, candidates)}
    if not candidates:
        return []
    from pgfunnel.security import schema_access_named

    # a role refused the schema is told what gives it access in this mode, as a caller
    # of delete_documents_report is
    with schema_access_named(conn):
        try:
            with tuple_rows(conn):
                coll = collection_id(conn, collection)
                if coll is None:
                    return []
                stored = [str(key) for (key,) in conn.execute(
                    "select citekey from pgfunnel.document where collection_id = %s "
                    "and citekey = any(%s)", (coll, list(candidates))).fetchall()]
        except psycopg.Error as exc:
            raise translate(exc, searching=False) from exc
    return sorted((MovedFile(key, other, path) for other in stored
                   for key, path in candidates[other]),
                  key=lambda moved: (moved.citekey, moved.stored))


def _spellable(conn: psycopg.Connection[Any], texts: Iterable[str]) -> list[str]:
    """Those of ``texts`` that the connection's encoding can send: the others (Chinese
    to a LATIN1 database, a file name's undecodable bytes, held as surrogates) are a
    UnicodeEncodeError as a parameter, and no stored text equals them."""
    encoding = conn.info.encoding
    spellable = []
    for text in texts:
        try:
            text.encode(encoding)
        except UnicodeEncodeError:
            continue
        spellable.append(text)
    return spellable


def _delete_locked(conn: psycopg.Connection[Any], coll: int, citekeys: Sequence[str]
                   ) -> set[str]:
    """Delete collection ``coll``'s documents of these citekeys, their chunks, postings and
    statistics with them; in the caller's transaction, which holds the ingest lock
    (``delete_documents``, and ``Ingester.ingest(prune=True)``). The citekeys deleted."""
    conn.execute(
        "select pgfunnel._remove_chunks(array(select c.id from pgfunnel.chunk c "
        "join pgfunnel.document d on d.id = c.document_id "
        "where d.collection_id = %s and d.citekey = any(%s)))", (coll, list(citekeys)))
    return {str(key) for (key,) in conn.execute(
        "delete from pgfunnel.document where collection_id = %s "
        "and citekey = any(%s) returning citekey", (coll, list(citekeys))).fetchall()}


__all__ = ["CitekeyHint", "DeleteReport", "Ingester", "IngestStats", "MovedFile",
           "PgfunnelError", "checked_records", "delete_documents", "delete_documents_report",
           "moved_files"]
