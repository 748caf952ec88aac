"""`pgfunnel doctor`: a list of independent checks, each returning findings.

A check is a function ``(conn) -> list[Finding]``. Levels: ``error`` (something is broken
or unsafe; the CLI exits 3), ``warning`` (works, but fix it), ``info`` (state worth
seeing). A check that itself fails becomes an ``error`` finding naming the check, so
one broken check never hides the others.
"""

from __future__ import annotations

import functools
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from pgfunnel.db import public_wrappers, rows_by_position
from pgfunnel.errors import ConfigError, translate
from pgfunnel.ingest import (
    HNSW_INDEX_PREFIX,
    HNSW_TYPES,
    HNSW_VECTOR,
    MAX_CACHED_WALKS,
    POSTING_PARTITION_PREFIX,
    VERSIONS_WITH_VALID_GRAPH,
    hnsw_build_memory_setting,
    hnsw_index_statement,
    version_hnsw_type,
)
from pgfunnel.schema import case_collation, require_vector_schema
from pgfunnel.sources import (
    CHUNKING_MARK,
    CHUNKING_PREFIX,
    CHUNKING_VERSION,
    CJK_CHAR_RANGES,
    EMBED_TEXT_ALONE,
    HANGUL_CHAR_RANGES,
    LEXICAL_TERM_TWICE,
    LEXICAL_TEXT_ALONE,
    LEXICAL_TITLE_TWICE,
    LEXICAL_WITH_TITLE,
    UNMARKED_CHUNKING,
    version_embed_input,
    version_lexical_input,
)

Level = Literal["error", "warning", "info"]
LEVELS: tuple[Level, ...] = ("error", "warning", "info")

MIN_PGVECTOR = (0, 8, 0)
#: HNSW fixes landed in 0.8.2 and 0.8.3 (iterative scan and build correctness)
RECOMMENDED_PGVECTOR = (0, 8, 3)


@dataclass(frozen=True)
class Finding:
    level: Level
    check: str
    message: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


Check = Callable[[psycopg.Connection[Any]], list[Finding]]


def _parse_version(text: str) -> tuple[int, ...]:
    parts: list[int] = []
    for p in text.split("."):
        digits = "".join(ch for ch in p if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def _is_embedded(conn: psycopg.Connection[Any]) -> bool:
    """Whether this is pgfunnel's embedded server: it listens on a socket in its own data
    directory."""
    host = conn.info.host or ""
    return host.startswith("/") and (Path(host) / "PG_VERSION").is_file()


@rows_by_position
def check_pgvector(conn: psycopg.Connection[Any]) -> list[Finding]:
    row = conn.execute("select extversion from pg_extension where extname = 'vector'").fetchone()
    if row is None:
        return [Finding("error", "pgvector", "the vector extension is not installed in this "
                        "database; run `pgfunnel init`")]
    version = str(row[0])
    from pgfunnel.schema import vector_path_problem

    problem = vector_path_problem(conn)
    if problem is not None:
        return [Finding("error", "pgvector", problem)]
    v = _parse_version(version)
    if v < MIN_PGVECTOR:
        return [Finding("error", "pgvector", f"pgvector {version} is too old: pgfunnel needs "
                        "0.8 or later (iterative index scans)")]
    if v < RECOMMENDED_PGVECTOR:
        if _is_embedded(conn):
            # nothing to upgrade in place: the embedded server's build comes with its wheel
            return [Finding("info", "pgvector", f"pgvector {version} (the embedded server's "
                            "build); on a server of your own use 0.8.3 or later for its HNSW "
                            "fixes")]
        return [Finding("warning", "pgvector", f"pgvector {version}: upgrade to 0.8.3 or later "
                        "for the HNSW fixes of 0.8.2 and 0.8.3")]
    return [Finding("info", "pgvector", f"pgvector {version}")]


@rows_by_position
def check_schema(conn: psycopg.Connection[Any]) -> list[Finding]:
    row = conn.execute("select to_regclass('pgfunnel.collection') is not null, "
                       "to_regprocedure('pgfunnel.version()') is not null").fetchone()
    if row is None or not row[0] or not row[1]:
        from pgfunnel.db import sql_ascii_problem

        problem = sql_ascii_problem(conn)
        return [Finding("error", "schema", "the pgfunnel schema is not installed; run "
                        "`pgfunnel init`" + (f" (init refuses this database: {problem})"
                                             if problem else ""))]
    from pgfunnel import schema

    found: list[Finding] = []
    current = schema.current_revision(conn)
    head = schema.head_revision()
    if current != head:
        found.append(Finding("error", "schema", f"schema revision {current} is behind {head}; "
                             "run `pgfunnel migrate`"))
    else:
        found.append(Finding("info", "schema", f"schema at revision {current}"))
    if current == head and schema.functions_outdated(conn):
        # the revision says nothing of them: releases change functions without one, and
        # `alembic upgrade` moves the tables alone
        installed = schema.installed_functions_digest(conn)
        found.append(Finding(
            "error", "schema",
            "the SQL functions are not this pgfunnel's ("
            + (f"installed digest {installed}, this package's {schema.functions_digest()}"
               if installed else "no release recorded: installed by a pgfunnel before the "
               "record, or the tables moved with `alembic upgrade` alone")
            + "); run `pgfunnel migrate` to install this release's"))
    elif current == head and (replaced := schema.replaced_functions(conn)):
        # the digest says which release init or migrate installed, not that the functions
        # are still those: a `create or replace` by hand leaves it as it was
        found.append(Finding(
            "error", "schema",
            f"{len(replaced)} of pgfunnel's SQL functions differ from this release's although "
            "the release recorded is this one (replaced by hand?): "
            + ", ".join(f"{name} ({what})" for name, what in replaced)
            + "; run `pgfunnel migrate` to install this release's again"))
    # the wrapper lives in schema public, so a dump of schema pgfunnel alone (pg_dump -n
    # pgfunnel) leaves it out, and `funnel_search(...)` on a default path finds nothing
    # pgfunnel's, told by its body: an application's own funnel_search there passed for it
    if not public_wrappers(conn):
        # where init could not create it, why, and what to do: "run init" alone sent the
        # owner round to the same note
        problem = schema.wrapper_problem(conn)
        # a database without schema public has nowhere to hold it: nothing to fix
        no_public = conn.execute("select pg_catalog.to_regnamespace('public') is null"
                                 ).fetchone() == (True,)
        found.append(Finding(
            "info" if no_public else "warning", "schema",
            problem if problem is not None else
            "public.funnel_search is missing, the wrapper that lets `funnel_search(...)` run "
            "on a default search_path (a dump of schema pgfunnel alone, `pg_dump -n "
            "pgfunnel`, leaves it out); `pgfunnel.funnel_search(...)` works meanwhile. Run "
            "`pgfunnel init` as the schema owner to create it"))
    return found


@rows_by_position
def check_invalid_indexes(conn: psycopg.Connection[Any]) -> list[Finding]:
    rows = conn.execute(
        "select c.relname from pg_index i join pg_class c on c.oid = i.indexrelid "
        "where c.relnamespace = 'pgfunnel'::regnamespace "
        "and not (i.indisvalid and i.indisready) order by 1").fetchall()
    return [Finding("error", "invalid_index",
                    f"index pgfunnel.{r[0]} is invalid (an interrupted concurrent build); "
                    "`pgfunnel reindex` drops and rebuilds it, or DROP INDEX CONCURRENTLY it")
            for r in rows]


@rows_by_position
def check_orphans(conn: psycopg.Connection[Any]) -> list[Finding]:
    """Posting partitions and HNSW indexes of index versions that no longer exist: what
    deleting a collection or version row around pgfunnel leaves behind (no foreign key
    reaches a table or an index)."""
    rows = conn.execute(
        "select c.relname, c.relkind from pg_catalog.pg_class c "
        "where c.relnamespace = 'pgfunnel'::regnamespace "
        "and c.relname ~ ('^(' || %s || '|' || %s || ')[0-9]+$') "
        "and not exists (select 1 from pgfunnel.index_version v "
        "                 where v.id = substring(c.relname from '[0-9]+$')::integer) "
        "order by 1", (POSTING_PARTITION_PREFIX, HNSW_INDEX_PREFIX)).fetchall()
    return [Finding("warning", "orphans",
                    f"{'table' if kind in ('r', 'p') else 'index'} pgfunnel.{name} belongs to "
                    "no index version (its collection or version was deleted around "
                    "pgfunnel; `pgfunnel versions drop-collection` and `versions drop` remove "
                    f"it with them): `drop {'table' if kind in ('r', 'p') else 'index'} "
                    f"pgfunnel.{name}` frees its space")
            for name, kind in rows]


@rows_by_position
def check_public_with_readers(conn: psycopg.Connection[Any]) -> list[Finding]:
    """Documents that are public and carry readers: readable by everyone, whatever their
    readers say. Written before migration 0007, whose constraint refuses them since."""
    rows = conn.execute(
        "select c.name, count(*), min(d.citekey) from pgfunnel.document d "
        "join pgfunnel.collection c on c.id = d.collection_id "
        "where d.is_public and cardinality(d.readers) > 0 group by c.name order by 1").fetchall()
    return [Finding("error", "public_with_readers",
                    f"collection {name!r}: {n} document(s) (first: {first!r}) are public and "
                    "have readers, so everyone can read them; readers restrict only a "
                    "document that is not public: `update pgfunnel.document set is_public = "
                    "false where is_public and cardinality(readers) > 0` (or clear their "
                    "readers to keep them public)")
            for name, n, first in rows]


#: the tables a role other than the owner reads every user's searches from when they have no
#: row security: (table, the column whose SELECT reads them or None for any column, what
#: reading it shows, what a traced search needs of it instead)
_SEARCH_LOG_TABLES: tuple[tuple[str, str | None, str, str], ...] = (
    ("search_log", "query_text",
     "every traced search's query text, principals and tenant",
     "a role that traces searches needs `grant select (id) on pgfunnel.search_log` alone"),
    ("search_trace", None,
     "the chunk ids and ranks of every traced search's pool",
     "a role that traces searches needs `grant insert on pgfunnel.search_trace` alone"),
)


# a NULL column asks of any column: each of search_trace's shows what the pool was
_PUBLIC_READS = (
    "select case when %(column)s::text is null"
    "  then pg_catalog.has_any_column_privilege('public'::name, c.oid, 'SELECT')"
    "  else pg_catalog.has_column_privilege('public'::name, c.oid, %(column)s::text, 'SELECT')"
    " end from pg_catalog.pg_class c where c.oid = pg_catalog.to_regclass(%(table)s)")
_ROLES_READING = (
    "select r.rolname from pg_catalog.pg_roles r, pg_catalog.pg_class c "
    " where c.oid = pg_catalog.to_regclass(%(table)s) and not r.rolsuper "
    # the predefined roles (pg_read_all_data) are named through their members
    "   and r.rolname !~ '^pg_' "
    "   and not pg_catalog.pg_has_role(r.oid, c.relowner, 'MEMBER') "
    "   and case when %(column)s::text is null"
    "     then pg_catalog.has_any_column_privilege(r.oid, c.oid, 'SELECT')"
    "     else pg_catalog.has_column_privilege(r.oid, c.oid, %(column)s::text, 'SELECT') end"
    " order by 1")


@rows_by_position
def check_search_log_readers(conn: psycopg.Connection[Any]) -> list[Finding]:
    """Roles other than the owner (its members and superusers) that may read search_log's
    query_text or any column of search_trace while that table has no row security: every
    traced search's text, principals and tenant, and the chunk ids and ranks of its pool,
    of every user (docs/security.md, who reads the search log). PUBLIC stands for every
    role. What a traced search needs (``select (id)`` on search_log, insert on
    search_trace) reads neither and is not named. One finding per table."""
    findings = []
    for table, column, shows, needs in _SEARCH_LOG_TABLES:
        qualified = f"pgfunnel.{table}"
        row = conn.execute("select c.relrowsecurity from pg_catalog.pg_class c "
                           "where c.oid = pg_catalog.to_regclass(%s)", (qualified,)).fetchone()
        if row is None or row[0]:
            # under row-level security the policies hold each reader to its own searches
            continue
        params = {"table": qualified, "column": column}
        if conn.execute(_PUBLIC_READS, params).fetchone() == (True,):
            readers = ["PUBLIC (every role)"]
        else:
            readers = [repr(name) for (name,) in conn.execute(_ROLES_READING, params)]
        if not readers:
            continue
        shown_roles = ", ".join(readers[:10]) + (f" and {len(readers) - 10} more"
                                                 if len(readers) > 10 else "")
        findings.append(Finding(
            "warning", "search_log_readers",
            f"roles other than the owner may read {qualified}, {shows}, of every user (no "
            f"row-level security on it): {shown_roles}; revoke the grant (`revoke select on "
            f"{qualified} from ROLE`, from the role it was granted to, or from PUBLIC): "
            f"{needs}; or set up RLS mode (`pgfunnel init --rls`)"))
    return findings


@rows_by_position
def check_unfindable_documents(conn: psycopg.Connection[Any]) -> list[Finding]:
    """Documents no search can find because of their own access fields: a tenant or
    language of '', a NULL or '' reader as their only reader, or a validity range that
    ends before it starts. Written before migration 0010, whose constraints refuse them
    since (ingest never wrote them)."""
    rows = conn.execute(
        "select c.name, count(*), min(d.citekey), "
        "       count(*) filter (where d.tenant = ''), count(*) filter (where d.language = ''), "
        "       count(*) filter (where array_position(d.readers, null) is not null "
        "                           or array_position(d.readers, '') is not null), "
        "       count(*) filter (where d.valid_to <= d.valid_from) "
        "  from pgfunnel.document d join pgfunnel.collection c on c.id = d.collection_id "
        " where d.tenant = '' or d.language = '' or d.valid_to <= d.valid_from "
        "    or array_position(d.readers, null) is not null "
        "    or array_position(d.readers, '') is not null "
        " group by c.name order by 1").fetchall()
    findings = []
    for name, n, first, tenant, language, readers, validity in rows:
        what = [f"{count} {label}" for count, label in (
            (tenant, "with tenant ''"), (language, "with language ''"),
            (readers, "with a NULL or '' reader"),
            (validity, "with valid_to not after valid_from")) if count]
        findings.append(Finding(
            "warning", "unfindable_documents",
            f"collection {name!r}: {n} document(s) (first: {first!r}; {', '.join(what)}) "
            "were written by hand with values ingest refuses: searches ask for no tenant or "
            "language '', a NULL or '' reader matches no principal, and a reversed validity "
            "range is valid at no time. Set them to NULL (or a real value), or re-ingest "
            "the documents"))
    return findings


@rows_by_position
def check_chunking(conn: psycopg.Connection[Any]) -> list[Finding]:
    """Documents chunked by another pgfunnel than this one. A release that changes how
    text is cut into chunks (its chunking version) rewrites each document once, at the
    next ingest of its source, even when the source did not change; this says so before
    that ingest takes longer than usual."""
    # a prefix test per document, the version read only from the hashes that fail it:
    # migrate runs this too, over every document
    rows = conn.execute(
        "select c.name, count(*) filter (where v.chunking < %(current)s), "
        "       count(*) filter (where v.chunking > %(current)s), min(v.chunking) "
        "  from pgfunnel.document d join pgfunnel.collection c on c.id = d.collection_id, "
        "       lateral (select coalesce(substring(d.content_hash from %(mark)s)::integer, "
        "                                %(unmarked)s) as chunking) v "
        " where not starts_with(d.content_hash, %(prefix)s) "
        " group by c.name order by 1",
        {"current": CHUNKING_VERSION, "mark": CHUNKING_MARK, "unmarked": UNMARKED_CHUNKING,
         "prefix": CHUNKING_PREFIX}).fetchall()
    findings: list[Finding] = []
    for name, older, newer, oldest in rows:
        if older:
            findings.append(Finding(
                "info", "chunking",
                f"collection {name!r}: {older} document(s) were chunked by an older pgfunnel "
                f"(chunking version "
                f"{f'{oldest} or older' if oldest <= UNMARKED_CHUNKING else oldest}, now "
                f"{CHUNKING_VERSION}); searches use them as they are, and the next ingest of "
                "their sources rewrites each that this version cuts otherwise, even if "
                "unchanged (vectors are kept wherever the model reads the same words), and "
                "only updates the stored hash of the others (from version 7 on)"))
        if newer:
            findings.append(Finding(
                "warning", "chunking",
                f"collection {name!r}: {newer} document(s) were chunked by a newer pgfunnel "
                f"than this one (chunking version {CHUNKING_VERSION}): ingesting their "
                "sources with this one rewrites them in its older chunking; upgrade "
                "pgfunnel where you ingest"))
    return findings


def _rebuild_hnsw_advice(conn: psycopg.Connection[Any], vid: int, dims: int,
                         params: dict[str, Any]) -> str:
    """How the owner rebuilds a version's missing HNSW index in place: the statement
    ingest and reindex run, concurrently so searches go on (a reindex would embed and
    index a whole new version)."""
    hnsw_type = version_hnsw_type(params)
    if hnsw_type not in HNSW_TYPES:
        return (f"the version records an unknown hnsw_type {hnsw_type!r}; "
                "`pgfunnel reindex` builds a new version")
    m, efc = int(params.get("m", 16)), int(params.get("ef_construction", 64))
    statement = hnsw_index_statement(vid, dims, hnsw_type, require_vector_schema(conn),
                                     concurrently=True, m=m,
                                     ef_construction=efc).as_string(conn)
    memory = hnsw_build_memory_setting(conn, vid, dims, m, hnsw_type)
    setting = f"`set maintenance_work_mem = '{memory}'`, then " if memory else ""
    return ("rebuild it for this version as the tables' owner, outside a transaction "
            f"(searches go on meanwhile): {setting}`{statement}`; then `pgfunnel init` "
            "caches its graph walk")


# the analyzers with the v6 rules (words of every script whatever the locale); v7 and v8
# keep them, v8 v7's
_V6_ANALYZERS = ("english_v6", "simple_v6", "english_v7", "simple_v7", "english_v8",
                 "simple_v8", "german_v8")
_V7_ANALYZERS = ("english_v7", "simple_v7", "english_v8", "simple_v8", "german_v8")
_V8_ANALYZERS = ("english_v8", "simple_v8", "german_v8")
# what doctor's analyzer notes suggest: the newest analyzer of the collection's family
_NEWEST_ANALYZER_VERSION = "v8"


def _has_v6_analyzer(version: dict[str, Any]) -> bool:
    """What the analyzer notes of doctor ask a reindex for, as a test of a version."""
    return version["analyzer"] in _V6_ANALYZERS


def _has_v7_analyzer(version: dict[str, Any]) -> bool:
    """What the note on words joined by Unicode dashes asks a reindex for."""
    return version["analyzer"] in _V7_ANALYZERS


def _has_v8_analyzer(version: dict[str, Any]) -> bool:
    """What the note on identifiers opened or closed by underscores asks a reindex for."""
    return version["analyzer"] in _V8_ANALYZERS


# the analyzer doctor suggests for a collection of German documents, and the rule: more
# than half of its documents say language `de` or `de-*` (a region, `de-AT`), compared as
# stored (`DE` or `German` is not counted), so that a collection where German is one
# language among others keeps the analyzer it has
_GERMAN_ANALYZER = "german_v8"


def _has_german_analyzer(version: dict[str, Any]) -> bool:
    """What the note on a collection of German documents asks a reindex for."""
    return str(version["analyzer"]).startswith("german_")


# an identifier opened or closed by underscores (__init__, _exit, class_), or whose parts
# a run of them joins (author__name), which v8 indexes whole with them and v6 and v7 as
# its bare parts (one underscore inside, jsonb_path_exists, every version keeps); looked
# for in the same sample of chunks as dashed words. A run of five or more (a fill-in
# blank, `Signature__________`) is no part of a name to v8 either
_UNDERSCORED_WORD = (r"(^|[^[:alnum:]_])_{1,4}[[:alnum:]]|[[:alnum:]]_{1,4}($|[^[:alnum:]_])"
                     r"|[[:alnum:]]_{2,4}[[:alnum:]]")


# Unicode hyphens and dashes between two letters or digits, which v7 reads as '-' and v6
# as a break between words (sql/010_analyzer.sql, _unicode_fold); looked for in at most
# this many of a collection's chunks, so that doctor stays quick on a large one
_DASHED_WORD = r"[[:alnum:]][\u2010-\u2013\u2212][[:alnum:]]"
_DASHED_WORD_SAMPLE = 20_000


# Thai, Lao, Burmese and Khmer letters and marks (which v6 reads as pairs of characters),
# and the scripts of India and Sri Lanka (whose words a virama or vowel sign cut apart
# before v6): the analyzer's own ranges, sql/010_analyzer.sql
_UNSPACED_CHAR_RANGES = (r"\u0e01-\u0e3a\u0e40-\u0e4e\u0e81-\u0edf\u1000-\u103f\u1050-\u108f"
                         r"\u109a-\u109d\u1780-\u17d3\u17d7\u17dc-\u17dd\uaa60-\uaa7f"
                         r"\ua9e0-\ua9fe")
_INDIC_CHAR_RANGES = r"\u0900-\u0dff"
# (probe, characters, terms longer than this count, analyzers that read them otherwise
# than v6, the text as doctor names it, what each of its terms is under those): each
# counts up to 1,000 of an active version's terms
_SCRIPT_PROBES: tuple[tuple[str, str, int, tuple[str, ...], str, str], ...] = (
    # a Chinese or Japanese run longer than a pair: v4 and later split it
    ("cjk", CJK_CHAR_RANGES, 2, ("english_v3", "simple_v3"),
     "Chinese or Japanese", "each a whole run of characters"),
    # a Korean word longer than a pair: v5 and later split it
    ("hangul", HANGUL_CHAR_RANGES, 2,
     ("english_v3", "simple_v3", "english_v4", "simple_v4"),
     "Korean", "each a word with its particles and endings"),
    # any term of these scripts: before v6 it is a fragment between two marks
    ("unspaced", f"{_UNSPACED_CHAR_RANGES}{_INDIC_CHAR_RANGES}", 1,
     ("english_v3", "simple_v3", "english_v4", "simple_v4", "english_v5", "simple_v5"),
     "Thai, Lao, Burmese, Khmer or Indic", "each a fragment of text between two marks"),
)


def _script_term_count(probe: str) -> sql.Composed:
    """The select-list item counting an active version's terms of one script probe."""
    return sql.SQL(
        "case when v.analyzer = any({analyzers}) "
        "      and pg_catalog.getdatabaseencoding() = 'UTF8' "
        "     then (select count(*) from (select 1 from pgfunnel.term_stat t "
        "            where t.index_version_id = v.id and char_length(t.term) > {shortest} "
        "              and t.term ~ {chars} limit 1000) x) "
        "     else 0 end as {alias}").format(
        analyzers=sql.Placeholder(f"{probe}_analyzers"),
        shortest=sql.Placeholder(f"{probe}_shortest"), chars=sql.Placeholder(probe),
        alias=sql.Identifier(f"{probe}_terms"))


@rows_by_position
def check_active_indexes(conn: psycopg.Connection[Any]) -> list[Finding]:
    """Each collection's active version: an HNSW index that exists, fits the version's
    dimensions and covers exactly its rows; and versions that miss chunks."""
    found: list[Finding] = []
    # a UTF-8 database of collation "C": Postgres' [[:alpha:]] and lower() then know
    # ASCII letters only (É and é written as chr(): a literal would have to be converted
    # to an encoding that may not hold them)
    row = conn.execute("select pg_catalog.getdatabaseencoding() = 'UTF8' and not ("
                       "pg_catalog.lower(pg_catalog.chr(201)) = pg_catalog.chr(233) "
                       "and pg_catalog.chr(233) ~ '[[:alpha:]]')").fetchone()
    ascii_only_locale = bool(row and row[0])
    # what the v6 analyzers then lower case under (`pgfunnel init` chose the same)
    lowers_ascii_only = ascii_only_locale and case_collation(conn) == "default"
    rows = conn.cursor(row_factory=dict_row).execute(sql.SQL(
        "select c.name, c.id as cid, v.id as vid, v.version, v.dimensions as dims, v.params, "
        "       i.present, i.valid, "
        "       pg_get_indexdef(to_regclass('pgfunnel.' || i.index_name)) as indexdef, "
        "       cov.missing, cov.embedding_rows, cov.collection_chunks as chunks, v.analyzer, "
        "       v.embedding_model as model, "
        "       (select count(*) from pgfunnel.chunk k where k.collection_id = c.id "
        "         and not exists (select 1 from pgfunnel.embedding e "
        "                          where e.index_version_id = v.id and e.chunk_id = k.id)"
        "       ) as without_vector, "
        # vectors whose chunk is gone or in another collection: the HNSW index and
        # the counts carry them, no search returns them
        "       (select count(*) from pgfunnel.embedding e where e.index_version_id = v.id "
        "         and not exists (select 1 from pgfunnel.chunk k "
        "                          where k.id = e.chunk_id and k.collection_id = c.id)"
        "       ) as orphan_vectors, "
        "       {script_terms}, "
        # words joined by Unicode dashes, which only v7 reads as one (a UTF-8 database)
        "       v.analyzer in ('english_v6', 'simple_v6') "
        "       and pg_catalog.getdatabaseencoding() = 'UTF8' and exists ("
        "         select 1 from (select k.text from pgfunnel.chunk k "
        "                         where k.collection_id = c.id limit %(dashed_sample)s) k "
        "          where k.text ~ %(dashed_word)s) as dashed_words, "
        # identifiers opened or closed by underscores, which only v8 keeps whole
        "       v.analyzer in ('english_v6', 'simple_v6', 'english_v7', 'simple_v7') "
        "       and exists ("
        "         select 1 from (select k.text from pgfunnel.chunk k "
        "                         where k.collection_id = c.id limit %(dashed_sample)s) k "
        "          where k.text ~ %(underscored_word)s) as underscored_words, "
        # non-ASCII text, which an analyzer before v6 mangles where the database's
        # collation reads ASCII letters only
        "       %(ascii_only_locale)s and exists ("
        "         select 1 from pgfunnel.chunk k where k.collection_id = c.id "
        "            and k.text ~ '[^\\u0001-\\u007f]') as non_ascii, "
        "       lang.documents, lang.german_documents "
        "from pgfunnel.collection c "
        "join pgfunnel.index_version v on v.collection_id = c.id and v.state = 'active' "
        # one aggregate over the collection's documents (by the index on collection_id
        # and citekey), skipped where the analyzer is German already
        "cross join lateral (select count(*) as documents, count(*) filter ("
        "         where d.language = 'de' or pg_catalog.starts_with(d.language, 'de-')"
        "       ) as german_documents from pgfunnel.document d "
        "        where d.collection_id = c.id "
        "          and not pg_catalog.starts_with(v.analyzer, 'german_')) lang "
        "cross join lateral pgfunnel.version_index(v.id) i "
        "cross join lateral pgfunnel.version_coverage(v.id) cov order by c.name"
    ).format(script_terms=sql.SQL(", ").join(
        _script_term_count(name) for name, *_ in _SCRIPT_PROBES)),
        {"ascii_only_locale": ascii_only_locale, "dashed_sample": _DASHED_WORD_SAMPLE,
         "dashed_word": _DASHED_WORD, "underscored_word": _UNDERSCORED_WORD,
         **{f"{name}{key}": value for name, chars, shortest, analyzers, *_ in _SCRIPT_PROBES
            for key, value in (("", f"[{chars}]"), ("_shortest", shortest),
                               ("_analyzers", list(analyzers)))}}).fetchall()
    # more versions with a graph than the walk cache holds: those left out plan their
    # walk per search, and `pgfunnel init` would not change that
    graphs = conn.execute("select count(*) " + VERSIONS_WITH_VALID_GRAPH).fetchone()
    over_cache = bool(graphs and int(graphs[0]) > MAX_CACHED_WALKS)
    past_cache: list[str] = []
    for r in rows:
        name, vid, dims, params = r["name"], r["vid"], int(r["dims"]), r["params"] or {}
        where = f"collection {name!r}, active version {r['version']}"
        if not r["present"]:
            # as after a first ingest stopped before its indexes: running it again
            # builds both (the unindexed postings below say the same)
            found.append(Finding("error", "active_index",
                                 f"{where}: HNSW index embedding_hnsw_v{vid} is missing; dense "
                                 "searches scan every vector; an ingest into the collection "
                                 "by the tables' owner builds it (run the ingest again: "
                                 f"`pgfunnel ingest PATH -c {shlex.quote(name)}`), or "
                                 + _rebuild_hnsw_advice(conn, vid, dims, params)))
            continue
        if not r["valid"]:
            continue  # reported by check_invalid_indexes
        text = str(r["indexdef"] or "")
        hnsw_type = version_hnsw_type(params)
        # pg_get_indexdef qualifies the type with pgvector's schema when that schema is
        # off this connection's search_path (reported by its own check): not a mismatch
        typed = re.search(rf"::(?:\S+\.)?{re.escape(hnsw_type)}\({int(dims)}\)", text)
        if typed is None or f"index_version_id = {vid}" not in text:
            found.append(Finding("error", "active_index",
                                 f"{where}: index embedding_hnsw_v{vid} does not match the "
                                 f"version ({dims} dims, {hnsw_type}): {text}"))
        # the probe vector goes as an untyped literal, so the vector extension's schema
        # need not be on this connection's search_path
        cached = conn.execute(
            "select to_regproc('pgfunnel._hnsw_walk') is null "
            "or (pgfunnel._hnsw_walk(%s, %s, 0)).cached",
            (vid, "[" + ",".join(["1"] * dims) + "]")).fetchone()
        if not (cached and cached[0]):
            if over_cache:
                past_cache.append(name)
            else:
                found.append(Finding("warning", "active_index",
                                     f"{where}: its graph walk is planned on every search "
                                     "(about 0.2 ms more), not cached; run `pgfunnel init` as "
                                     "the schema owner to cache it"))
        uncovered = max(int(r["missing"]), int(r["without_vector"]))
        if uncovered:
            found.append(Finding("warning", "active_index",
                                 f"{where}: {uncovered} of {r['chunks']} chunks have no rows in "
                                 f"it ({r['missing']} no postings, {r['without_vector']} no "
                                 "vector); re-ingest them or run `pgfunnel reindex`"))
        if r["orphan_vectors"]:
            delete = sql.SQL(
                "delete from pgfunnel.embedding e where e.index_version_id = {} and not exists "
                "(select 1 from pgfunnel.chunk k where k.id = e.chunk_id and "
                "k.collection_id = {})").format(sql.Literal(vid), sql.Literal(r["cid"]))
            found.append(Finding("warning", "active_index",
                                 f"{where}: {r['orphan_vectors']} of its {r['embedding_rows']} "
                                 "vectors belong to no chunk of the collection (their chunks "
                                 "were deleted past the cascades, as under "
                                 "session_replication_role = replica); no search returns them, "
                                 "they only fill its HNSW index: "
                                 f"`{delete.as_string(conn)}` removes them"))
    unindexed = conn.execute(
        "select c.name, v.version, v.id from pgfunnel.collection c "
        "join pgfunnel.index_version v on v.collection_id = c.id and v.state = 'active' "
        "where to_regclass('pgfunnel.posting_v' || v.id) is not null and not exists ("
        "select 1 from pg_index x where x.indrelid = to_regclass('pgfunnel.posting_v' || v.id)) "
        "order by 1").fetchall()
    for name, version, vid in unindexed:
        found.append(Finding("warning", "active_index",
                             f"collection {name!r}, active version {version}: its postings "
                             f"(pgfunnel.posting_v{vid}) have no index, so lexical searches "
                             "scan them (an ingest stopped before building it); run the "
                             "ingest again (`pgfunnel ingest PATH -c "
                             f"{shlex.quote(name)}`), which builds it"))
    none = conn.execute(
        "select c.name from pgfunnel.collection c where not exists (select 1 from "
        "pgfunnel.index_version v where v.collection_id = c.id and v.state = 'active') "
        "order by 1").fetchall()
    for (name,) in none:
        found.append(Finding("error", "active_index", f"collection {name!r} has no active index "
                             "version; searches fail (pgfunnel versions activate N -c "
                             f"{shlex.quote(name)})"))
    # (an HNSW index of no version is check_orphans' to report, with the posting tables)
    if not found and rows:
        found.append(Finding("info", "active_index",
                             f"{len(rows)} active version(s), each with a valid HNSW index"))
    if past_cache:
        found.append(Finding("info", "active_index",
                             f"{len(past_cache)} active version(s) plan their graph walk on "
                             f"every search, not cached: pgfunnel caches the walks of "
                             f"{MAX_CACHED_WALKS} versions, active ones first, and "
                             f"{int(graphs[0]) if graphs else 0} versions have a graph (e.g. "
                             f"{', '.join(map(repr, past_cache[:5]))}); that plan weighs every "
                             "graph, about 0.9 ms a search at 600. Customers kept in one "
                             "collection and told apart by tenant cost nothing of this "
                             "(docs/tuning.md, \"Many collections in one database\")"))
    # versions that predate a default: each is pointed to the reindex that brings it, or
    # to a retired version that has it (after a rollback, say), which needs no embedding
    retired: dict[int, list[dict[str, Any]]] = {}
    for v in conn.cursor(row_factory=dict_row).execute(
            "select collection_id as cid, version, analyzer, embedding_model as model, params "
            "from pgfunnel.index_version where state = 'retired' "
            "and not coalesce(params ? 'dropping', false) order by version desc"):
        retired.setdefault(int(v["cid"]), []).append(v)
    for r in rows:
        name, params, analyzer = r["name"], r["params"] or {}, r["analyzer"]
        where = f"collection {name!r}, active version {r['version']}"
        reindex = f"`pgfunnel reindex -c {shlex.quote(name)} --activate`"
        # what the findings below ask a reindex for, as tests of a version; a version
        # that records the input was built with it on purpose (--embed-input text,
        # --lexical-input text|title), one that records none predates the choice
        wanted: list[Callable[[dict[str, Any]], bool]] = []
        if version_embed_input(params) == EMBED_TEXT_ALONE:
            why = ("built with --embed-input text" if "embed_input" in params
                   else "it predates titles")
            wanted.append(lambda v: version_embed_input(v["params"] or {}) != EMBED_TEXT_ALONE)
            found.append(Finding("info", "active_index",
                                 f"{where} embeds chunks without their document title "
                                 f"({why}); {reindex} embeds them with it, which "
                                 "raised the dense leg's nDCG@10 on every benchmark here"))
        if version_lexical_input(params) == LEXICAL_TEXT_ALONE:
            why = ("built with --lexical-input text" if "lexical_input" in params
                   else "it predates that")
            wanted.append(
                lambda v: version_lexical_input(v["params"] or {}) != LEXICAL_TEXT_ALONE)
            found.append(Finding("info", "active_index",
                                 f"{where} indexes chunks for BM25 without their document "
                                 f"title ({why}); {reindex} indexes them with it, "
                                 "with no model time (docs/tuning.md: default nDCG@10 on "
                                 "Tornado's docs 0.794 -> 0.832, on mypy's 0.920 -> 0.962)"))
        elif version_lexical_input(params) == LEXICAL_WITH_TITLE:
            wanted.append(lambda v: version_lexical_input(v["params"] or {})
                          in (LEXICAL_TITLE_TWICE, LEXICAL_TERM_TWICE))
            found.append(Finding("info", "active_index",
                                 f"{where} counts the document title once in BM25 (the "
                                 f"default before title2, or --lexical-input title); "
                                 f"{reindex} counts it twice, with no "
                                 "model time (docs/tuning.md: default nDCG@10 on Tornado's "
                                 "docs 0.831 -> 0.868, pydocs 0.672 -> 0.677)"))
        elif version_lexical_input(params) == LEXICAL_TITLE_TWICE:
            wanted.append(
                lambda v: version_lexical_input(v["params"] or {}) == LEXICAL_TERM_TWICE)
            found.append(Finding("info", "active_index",
                                 f"{where} counts an API object's or glossary term's heading "
                                 f"once in BM25 (the default before title2_term2); {reindex} "
                                 "counts it twice, with no model time, once its documents "
                                 "are ingested again by this release, which keeps each "
                                 "heading's level (docs/tuning.md: default nDCG@10 on "
                                 "Tornado's docs 0.890 -> 0.916, Hypothesis' 0.853 -> "
                                 "0.882)"))
        # a collection of German documents is pointed to german_v8, and so is every other
        # analyzer note (german_v8 has v8's rules): one reindex brings all they ask for
        german = (not _has_german_analyzer(r)
                  and 2 * int(r["german_documents"]) > int(r["documents"]))
        newer = (_GERMAN_ANALYZER if german
                 else f"{analyzer.split('_')[0]}_{_NEWEST_ANALYZER_VERSION}")
        if german:
            wanted.append(_has_german_analyzer)
            found.append(Finding("info", "active_index",
                                 f"{where} uses analyzer {analyzer}, and {r['german_documents']} "
                                 f"of its {r['documents']} documents say language German "
                                 "(`de` or `de-*`); `pgfunnel reindex -c "
                                 f"{shlex.quote(name)} --analyzer {_GERMAN_ANALYZER} "
                                 "--activate` reads them with German stemming and stop words, "
                                 "with no model time (docs/tuning.md, \"Text in other "
                                 "languages\": on German man pages the default nDCG@10 rose "
                                 "0.035 over english_v8); German is best kept in a collection "
                                 "of its own"))
        if analyzer not in _V6_ANALYZERS and ascii_only_locale and r["non_ascii"]:
            wanted.append(_has_v6_analyzer)
            found.append(Finding("warning", "active_index",
                                 f"{where} uses analyzer {analyzer} and holds non-ASCII text, "
                                 "but this database's collation reads only ASCII letters as "
                                 "letters: accented letters are cut out of its words (café "
                                 "is indexed as caf) and words of other scripts are not "
                                 "indexed at all; `pgfunnel reindex -c "
                                 f"{shlex.quote(name)} --analyzer "
                                 f"{newer} --activate` reads every script whatever the "
                                 "locale, with no model time"))
        elif analyzer in _V6_ANALYZERS and ascii_only_locale and r["non_ascii"] \
                and lowers_ascii_only:
            found.append(Finding("warning", "active_index",
                                 f"{where} holds non-ASCII text, and neither this database's "
                                 "collation nor any other this server has lowers letters "
                                 "beyond ASCII (pg_c_utf8 comes with Postgres 17, C.utf8 "
                                 "with the C library's UTF-8 locale, und-x-icu with ICU): "
                                 f"its analyzer {analyzer} reads every script, but indexes "
                                 "upper-case letters beyond ASCII as written, so CAFÉ does "
                                 "not find café. A database created with a UTF-8 locale "
                                 "(`create database ... locale 'C.UTF-8'`) does not have "
                                 "this"))
        elif analyzer in ("english_v1", "simple_v1", "english_v2", "simple_v2"):
            wanted.append(_has_v6_analyzer)
            gains = ("also indexes the inner names of dotted identifiers (quote_all in "
                     "csv.QUOTE_ALL) and " if analyzer.endswith("_v1") else "")
            found.append(Finding("info", "active_index",
                                 f"{where} uses analyzer {analyzer}; `pgfunnel reindex -c "
                                 f"{name} --analyzer {newer} --activate` {gains}folds "
                                 "Unicode (an accent typed composed matches one stored "
                                 "decomposed, full-width letters their plain form) and reads "
                                 "Chinese, Japanese, Korean, Thai, Lao, Burmese and Khmer "
                                 "words as pairs of characters, with no model time"))
        elif held := [f"{what} text ({r[f'{probe}_terms']} terms of it, {each})"
                      for probe, *_, what, each in _SCRIPT_PROBES if r[f"{probe}_terms"]]:
            # v6 differs from v3 only on these scripts, from v4 on all but Chinese and
            # Japanese, from v5 on the last: only a collection holding some is told
            wanted.append(_has_v6_analyzer)
            found.append(Finding("info", "active_index",
                                 f"{where} uses analyzer {analyzer} and holds "
                                 f"{' and '.join(held)}, found only by the same whole form; "
                                 "`pgfunnel reindex -c "
                                 f"{shlex.quote(name)} --analyzer {newer} --activate` "
                                 "indexes it as v6 reads it (docs/sql.md), with no model "
                                 "time"))
        elif r["dashed_words"]:
            wanted.append(_has_v7_analyzer)
            found.append(Finding("info", "active_index",
                                 f"{where} uses analyzer {analyzer}, and its text joins "
                                 "words with Unicode hyphens or dashes (ERR-4029 written "
                                 "with a non-breaking hyphen or an en dash), which "
                                 f"{analyzer} reads as two words; `pgfunnel reindex -c "
                                 f"{shlex.quote(name)} --analyzer {newer} --activate` "
                                 "indexes them as the same words joined by '-', so "
                                 "either spelling finds them, with no model time"))
        elif r["underscored_words"]:
            wanted.append(_has_v8_analyzer)
            found.append(Finding("info", "active_index",
                                 f"{where} uses analyzer {analyzer}, and its text holds "
                                 "identifiers opened or closed by underscores (__init__, "
                                 f"_exit) or joined by a run of them (author__name), which "
                                 f"{analyzer} indexes without them (__init__ as init, "
                                 "__all__ not at all); `pgfunnel reindex -c "
                                 f"{shlex.quote(name)} --analyzer {newer} --activate` "
                                 "indexes them whole too, so the exact identifier outranks "
                                 "its bare word, with no model time"))
        if version_hnsw_type(params) == HNSW_VECTOR:
            found.append(Finding("info", "active_index",
                                 f"{where} has a full-precision HNSW graph (it predates "
                                 f"halfvec graphs); {reindex} builds one about 40% smaller "
                                 "at the same recall"))
            wanted.append(lambda v: version_hnsw_type(v["params"] or {}) != HNSW_VECTOR)
        # and what no note asks to change, as the active version has it: a retired
        # version of another model or analyzer family is not what a reindex would build
        family = _GERMAN_ANALYZER.split("_")[0] if german else analyzer.split("_")[0]
        has_all = [v for v in retired.get(int(r["cid"]), [])
                   if all(w(v) for w in wanted) and v["model"] == r["model"]
                   and (v["analyzer"] == analyzer
                        or ((_has_v6_analyzer in wanted or _has_v7_analyzer in wanted
                             or _has_v8_analyzer in wanted or german)
                            and v["analyzer"].split("_")[0] == family))]
        if wanted and has_all:
            v = has_all[0]
            found.append(Finding("info", "active_index",
                                 f"{where}: retired version {v['version']} (model "
                                 f"{v['model']}, analyzer {v['analyzer']}) already has what "
                                 "the notes above would reindex for; `pgfunnel versions "
                                 f"activate {v['version']} -c "
                                 f"{shlex.quote(name)}` switches to it without "
                                 "embedding the collection again (it first catches up chunks "
                                 "ingested since it was retired)"))
    return found


@rows_by_position
def check_index_memory(conn: psycopg.Connection[Any]) -> list[Finding]:
    """Active HNSW indexes should fit in shared_buffers, or searches read from disk."""
    row = conn.execute(
        "select coalesce(sum(i.size_bytes), 0), "
        "       (select setting::bigint * pg_size_bytes(coalesce(nullif(unit, ''), '1')) "
        "          from pg_settings where name = 'shared_buffers') "
        "from pgfunnel.index_version v cross join lateral pgfunnel.version_index(v.id) i "
        "where v.state = 'active'").fetchone()
    if row is None:
        return []
    size, buffers = int(row[0]), int(row[1])
    msg = (f"active HNSW indexes {size / 2**20:.1f} MiB; shared_buffers "
           f"{buffers / 2**20:.0f} MiB")
    if size > buffers:
        return [Finding("warning", "index_memory", msg + ": the indexes do not fit, searches "
                        "will read from disk; raise shared_buffers (or use halfvec)")]
    if size > 0.7 * buffers:
        return [Finding("warning", "index_memory", msg + ": over 70% of shared_buffers")]
    return [Finding("info", "index_memory", msg)]


@rows_by_position
def check_row_security(conn: psycopg.Connection[Any]) -> list[Finding]:
    rows = conn.execute(
        "select c.relname, c.relrowsecurity, c.relforcerowsecurity, "
        "       (select count(*) from pg_policy p where p.polrelid = c.oid) "
        "from pg_class c where c.relnamespace = 'pgfunnel'::regnamespace "
        # posting is partitioned (relkind p): its policies sit on the parent
        "and c.relkind in ('r', 'p') "
        "and c.relname in ('collection', 'document', 'chunk', 'embedding', 'lexical', "
        "                  'posting', 'search_log', 'search_trace') order by 1").fetchall()
    found: list[Finding] = []
    enabled = [r[0] for r in rows if r[1]]
    for rel, on, force, policies in rows:
        if on and not policies:
            found.append(Finding("error", "row_security", f"pgfunnel.{rel} has row security on "
                                 "but no policy: every non-owner read returns nothing"))
        elif on and not force:
            found.append(Finding("warning", "row_security", f"pgfunnel.{rel} has row security "
                                 "on but not FORCEd: the table owner bypasses it"))
    if not enabled:
        found.append(Finding("info", "row_security", "row-level security is off (access is "
                             "enforced by funnel_search's filters, inside the search "
                             "functions); `pgfunnel init --rls` adds policies"))
    else:
        found.append(Finding("info", "row_security",
                             f"row-level security on for {', '.join(enabled)}"))
    return found


@rows_by_position
def check_security(conn: psycopg.Connection[Any], app_role: str | None = None
                   ) -> list[Finding]:
    """Roles, grants and RLS details from pgfunnel.security, when that module is there.
    ``app_role`` is checked as an application role even when it is not a member of
    pgfunnel_reader."""
    try:
        from pgfunnel.security import security_findings
    except ImportError:
        return []
    out: list[Finding] = []
    for f in security_findings(conn, app_role=app_role):
        if getattr(f, "check", None) == "rls" and getattr(f, "level", None) == "info":
            continue  # "RLS mode is off": check_row_security's line says it
        level = str(getattr(f, "level", "warning"))
        out.append(Finding(level if level in LEVELS else "warning",  # type: ignore[arg-type,unused-ignore]
                           f"security.{getattr(f, 'check', 'finding')}",
                           str(getattr(f, "message", f))))
    return out


@rows_by_position
def check_orphan_rows(conn: psycopg.Connection[Any]) -> list[Finding]:
    """Rows whose parent is gone: what deleting with ``session_replication_role = replica``
    leaves, since that skips the foreign keys' cascades as well as the triggers. Such
    chunks still count in the BM25 statistics, and searches drop them from the results
    (a search then returns fewer than k)."""
    found: list[Finding] = []
    for table, parent, orphan in (
            ("chunk", "document", "pgfunnel.chunk c where not exists "
             "(select 1 from pgfunnel.document d where d.id = c.document_id)"),
            ("lexical", "chunk", "pgfunnel.lexical l where not exists "
             "(select 1 from pgfunnel.chunk c where c.id = l.chunk_id)"),
            ("embedding", "chunk", "pgfunnel.embedding e where not exists "
             "(select 1 from pgfunnel.chunk c where c.id = e.chunk_id)")):
        row = conn.execute(sql.SQL("select count(*) from {}").format(sql.SQL(orphan))
                           ).fetchone()
        n = int(row[0]) if row else 0
        if n:
            # a plain DELETE fires what replica mode skipped: a chunk's cascade to its
            # index rows, and the trigger on lexical that takes them out of the postings
            # and statistics, so nothing needs rebuilding afterwards
            found.append(Finding(
                "warning", "orphans",
                f"{n} row(s) of pgfunnel.{table} belong to no {parent} (deleted with "
                "session_replication_role = replica, which skips the cascades and the "
                f"triggers): `delete from {orphan}` removes them; run it with "
                "session_replication_role back to origin, and the cascades and the trigger "
                "on pgfunnel.lexical keep the BM25 statistics exact, so nothing needs rebuilding"))
    return found


@rows_by_position
def check_statistics(conn: psycopg.Connection[Any]) -> list[Finding]:
    """Chunks deleted past the trigger that keeps postings and BM25 statistics exact
    (TRUNCATE, the trigger disabled, session_replication_role = replica): their lexical
    rows go, their postings and statistics stay."""
    found: list[Finding] = []
    # the triggers that keep the index true to the rows (sql/020_bm25.sql)
    triggers = dict(conn.execute(
        "select t.tgname, t.tgenabled from pg_catalog.pg_trigger t "
        "where t.tgrelid in ('pgfunnel.lexical'::regclass, 'pgfunnel.chunk'::regclass, "
        "'pgfunnel.document'::regclass) and not t.tgisinternal").fetchall())
    for name, guards in (("lexical_deleted", "keeps postings and BM25 statistics exact "
                          "when chunks are deleted"),
                         ("chunk_indexed_columns", "refuses in-place updates of indexed "
                          "chunk text"),
                         ("document_collection", "refuses moving a document to another "
                          "collection in place")):
        state = triggers.get(name)
        if state is None or state == "D":
            found.append(Finding(
                "warning", "statistics",
                f"trigger {name} ({guards}) is {'missing' if state is None else 'disabled'}: "
                + ("run `pgfunnel migrate` to install it" if state is None else
                   f"`alter table ... enable trigger {name}`")))
    rows = conn.execute(
        "select c.name, v.version, v.chunk_count, "
        "       (select count(*) from pgfunnel.lexical l where l.index_version_id = v.id) "
        "from pgfunnel.collection c "
        "join pgfunnel.index_version v on v.collection_id = c.id and v.state = 'active' "
        "order by c.name").fetchall()
    for name, version, counted, indexed in rows:
        if counted != indexed:
            found.append(Finding(
                "warning", "statistics",
                f"collection {name!r}, active version {version}: BM25 statistics count "
                f"{counted} chunks but {indexed} are indexed; chunks were deleted past the "
                "trigger on pgfunnel.lexical that keeps postings and statistics exact "
                "(TRUNCATE, the trigger disabled, or session_replication_role = replica). "
                f"Run `pgfunnel reindex -c {shlex.quote(name)} --activate` to rebuild them"))
    found.extend(_term_stat_drift(conn))
    if not found and rows:
        found.append(Finding("info", "statistics",
                             "BM25 statistics match the indexed chunks and a recount of the "
                             "postings; their triggers are on"))
    return found


#: terms named per drifted version
_DRIFT_EXAMPLES = 5


def _term_stat_drift(conn: psycopg.Connection[Any]) -> list[Finding]:
    """Each active version's term_stat against a recount from its postings
    (pgfunnel.bm25_recount): they differ only when term_stat was written around pgfunnel.
    A term without its row is never searched (the lexical leg takes a query's terms from
    term_stat); a wrong df skews every score of the term. About 0.3 s per 10k chunks."""
    found: list[Finding] = []
    rows = conn.execute(
        "select c.name, v.version, d.n, d.unsearchable, d.terms, d.kept, d.counted "
        "from pgfunnel.collection c "
        "join pgfunnel.index_version v on v.collection_id = c.id and v.state = 'active' "
        "cross join lateral ("
        "  select count(*) as n, "
        "         count(*) filter (where coalesce(t.df, 0) <= 0 and r.df > 0) as unsearchable, "
        "         (array_agg(term order by term))[1:%(k)s] as terms, "
        "         (array_agg(t.df order by term))[1:%(k)s] as kept, "
        "         (array_agg(r.df order by term))[1:%(k)s] as counted "
        "    from pgfunnel.bm25_recount(v.id) r "
        "    full join (select s.term, s.df from pgfunnel.term_stat s "
        "                where s.index_version_id = v.id) t using (term) "
        "   where r.df is distinct from t.df) d "
        "where d.n > 0 order by c.name", {"k": _DRIFT_EXAMPLES}).fetchall()
    for name, version, n, unsearchable, terms, kept, counted in rows:
        examples = ", ".join(f"{term!r} ({'no row' if k is None else k} vs {c or 0})"
                             for term, k, c in zip(terms, kept, counted, strict=True))
        more = f" and {n - len(terms)} more" if n > len(terms) else ""
        hidden = (f"; {unsearchable} of them have no statistics row, so searches never match "
                  "them" if unsearchable else "")
        found.append(Finding(
            "error" if unsearchable else "warning", "statistics",
            f"collection {name!r}, active version {version}: {n} term(s) have a document "
            "frequency in pgfunnel.term_stat that differs from a recount of the postings "
            f"(pgfunnel.bm25_recount), e.g. {examples}{more} (term_stat vs recount){hidden}. "
            "term_stat was written around pgfunnel, which has no function that repairs it: "
            f"`pgfunnel reindex -c {shlex.quote(name)} --activate` builds a version with "
            "exact statistics "
            "(copying the vectors when the model is unchanged)"))
    return found


# What a role holds in schema pgfunnel, against what it should: one row per wanted
# privilege. %(tables)s/%(table_privileges)s pair tables with a privilege each; every table
# but a partition (reached through its parent) is wanted with %(every_table)s; functions
# with EXECUTE, but those named in %(skip_functions)s; sequences named in %(sequences)s
# (NULL: every one) with %(sequence_privileges)s.
_HELD_PRIVILEGES = """
select w.kind, w.object, w.privilege, w.held from (
  select 0 as ord, 'schema' as kind, 'pgfunnel' as object, 'USAGE' as privilege,
         pg_catalog.has_schema_privilege(%(role)s, 'pgfunnel', 'USAGE') as held
  union all
  select 1, 'table', c.oid::regclass::text, t.privilege,
         case when c.relname = 'search_log' and t.privilege = 'INSERT'
              then (select pg_catalog.bool_and(pg_catalog.has_column_privilege(
                               %(role)s, c.oid, l.col, 'INSERT'))
                      from unnest(%(log_columns)s::text[]) as l(col))
              else pg_catalog.has_table_privilege(%(role)s, c.oid, t.privilege) end
    from unnest(%(tables)s::text[], %(table_privileges)s::text[]) as t(relname, privilege)
    join pg_catalog.pg_class c on c.relname = t.relname
     and c.relnamespace = 'pgfunnel'::regnamespace
  union all
  select 1, 'table', c.oid::regclass::text, p.privilege,
         pg_catalog.has_table_privilege(%(role)s, c.oid, p.privilege)
    from pg_catalog.pg_class c, pg_catalog.unnest(%(every_table)s::text[]) as p(privilege)
   where c.relnamespace = 'pgfunnel'::regnamespace and c.relkind in ('r', 'p')
     and not c.relispartition
  union all
  select 2, 'sequence', c.oid::regclass::text, p.privilege,
         pg_catalog.has_sequence_privilege(%(role)s, c.oid, p.privilege)
    from pg_catalog.pg_class c, pg_catalog.unnest(%(sequence_privileges)s::text[])
         as p(privilege)
   where c.relnamespace = 'pgfunnel'::regnamespace and c.relkind = 'S'
     and (%(sequences)s::text[] is null or c.relname = any (%(sequences)s::text[]))
  union all
  select 3, 'function', p.oid::regprocedure::text, 'EXECUTE',
         pg_catalog.has_function_privilege(%(role)s, p.oid, 'EXECUTE')
    from pg_catalog.pg_proc p join pg_catalog.pg_namespace n on n.oid = p.pronamespace
   where (n.nspname = 'pgfunnel' and p.proname <> all (%(skip_functions)s::text[]))
      or (n.nspname = 'public' and p.proname = 'funnel_search')
) w order by w.ord, w.object, w.privilege
"""

#: functions listed per finding; past that, `pgfunnel migrate` is the one fix named
_LISTED_FUNCTIONS = 5


@dataclass(frozen=True)
class _Wanted:
    """The privileges one role needs in schema pgfunnel (what grant_privileges gives)."""

    tables: tuple[tuple[str, str], ...] = ()
    every_table: tuple[str, ...] = ()
    sequences: tuple[str, ...] = ()
    #: the sequences wanted with them (None: every one)
    sequence_names: tuple[str, ...] | None = None
    skip_functions: tuple[str, ...] = ()


def _wanted(role: str) -> _Wanted:
    from pgfunnel.security import (
        READER_SEQUENCE_PRIVILEGES,
        READER_SEQUENCES,
        READER_TABLE_PRIVILEGES,
        WRITER_ONLY_FUNCTIONS,
        WRITER_ROLE,
        WRITER_SEQUENCE_PRIVILEGES,
        WRITER_TABLE_PRIVILEGES,
    )

    if role == WRITER_ROLE:
        return _Wanted(every_table=WRITER_TABLE_PRIVILEGES, sequences=WRITER_SEQUENCE_PRIVILEGES)
    return _Wanted(tables=READER_TABLE_PRIVILEGES, sequences=READER_SEQUENCE_PRIVILEGES,
                   sequence_names=READER_SEQUENCES,
                   skip_functions=WRITER_ONLY_FUNCTIONS)


def _held_privileges(conn: psycopg.Connection[Any], role: str, wanted: _Wanted
                     ) -> list[tuple[str, str, str, bool]]:
    """(kind, object, privilege, held) for each privilege ``role`` should hold (INSERT on
    search_log: on the columns a traced search writes, as grant_privileges grants it)."""
    from pgfunnel.security import READER_LOG_COLUMNS

    return [(str(k), str(o), str(p), bool(h)) for k, o, p, h in conn.execute(
        _HELD_PRIVILEGES, {"role": role,
                           "tables": [t for t, _ in wanted.tables],
                           "table_privileges": [p for _, p in wanted.tables],
                           "every_table": list(wanted.every_table),
                           "sequence_privileges": list(wanted.sequences),
                           "sequences": (None if wanted.sequence_names is None
                                         else list(wanted.sequence_names)),
                           "skip_functions": list(wanted.skip_functions),
                           "log_columns": list(READER_LOG_COLUMNS)}).fetchall()]


def _grouped(missing: Sequence[tuple[str, str, str, bool]]
             ) -> dict[tuple[str, str], list[str]]:
    groups: dict[tuple[str, str], list[str]] = {}
    for kind, obj, privilege, _ in missing:
        groups.setdefault((kind, privilege), []).append(obj)
    return groups


def _quote_ident(conn: psycopg.Connection[Any], name: str) -> str:
    """``name`` as SQL, quoted only where Postgres needs it, for statements shown to
    people (sql.Identifier quotes every name)."""
    row = conn.execute("select pg_catalog.quote_ident(%s)", (name,)).fetchone()
    return str(row[0]) if row else sql.Identifier(name).as_string(conn)


def _grant(conn: psycopg.Connection[Any], kind: str, privilege: str, objects: Sequence[str],
           role: str) -> str:
    # the objects come from the catalog as regclass/regprocedure text, quoted as needed
    on = {"schema": "schema ", "sequence": "sequence ", "function": "function "}.get(kind, "")
    return f"grant {privilege.lower()} on {on}{', '.join(objects)} to {_quote_ident(conn, role)}"


def _role_privilege_findings(conn: psycopg.Connection[Any], role: str, rls: bool
                             ) -> list[Finding]:
    from pgfunnel.security import WRITER_ROLE

    held = _held_privileges(conn, role, _wanted(role))
    if not rls and not any(h for kind, _, _, h in held if kind in ("schema", "table")):
        # roles are cluster-wide: another database's `init --rls` made them, and this one
        # never granted them its tables, on purpose (see below)
        return [Finding("info", "privileges",
                        f"{role} holds no privilege on this database's pgfunnel tables: RLS "
                        "mode is off here, so its members cannot use pgfunnel in it "
                        "(`pgfunnel init --rls` grants them with the policies)")]
    uses = ("ingests, deletes and reindexes" if role == WRITER_ROLE else "searches")
    found: list[Finding] = []
    for (kind, privilege), objects in _grouped([h for h in held if not h[3]]).items():
        listed = objects[:_LISTED_FUNCTIONS] if kind == "function" else objects
        more = f" and {len(objects) - len(listed)} more" if len(objects) > len(listed) else ""
        need = ("traced searches (they log the search)"
                if role != WRITER_ROLE and (privilege == "INSERT" or kind == "sequence")
                else uses)
        if rls or kind == "function":
            # migrate reinstalls sql/090_security.sql, which grants EXECUTE whenever the
            # roles exist, and in RLS mode grants everything else again (enable_rls)
            fix = "run `pgfunnel migrate` as the schema owner, which grants it again"
        else:
            # migrate grants these only with the policies: without them, SELECT would let
            # every member of a cluster-wide role read every row of this database
            fix = ("RLS mode is off, where `pgfunnel migrate` grants the roles no table "
                   "privileges (without the policies they would read every row); as the "
                   f"schema owner: `{_grant(conn, kind, privilege, objects, role)}`")
        found.append(Finding(
            "error", "privileges",
            f"{role} lacks {privilege} on {kind} {', '.join(listed)}{more}: {need} by its "
            f"members fail with permission denied; {fix}"))
    return found


@rows_by_position
def check_privileges(conn: psycopg.Connection[Any], app_role: str | None = None
                     ) -> list[Finding]:
    """What pgfunnel_reader and pgfunnel_writer hold against what grant_privileges gives
    them (when they exist), and whether ``app_role`` may search: a member of one of them
    under row-level security (the policies name the roles), or holding the reader's
    privileges itself without it. A few catalog queries (has_*_privilege by role name)."""
    from pgfunnel.security import READER_ROLE, WRITER_ROLE, rls_enabled

    rls = rls_enabled(conn)
    roles = [r for (r,) in conn.execute(
        "select rolname from pg_catalog.pg_roles where rolname = any(%s) order by 1",
        ([READER_ROLE, WRITER_ROLE],)).fetchall()]
    found: list[Finding] = []
    for role in roles:
        found.extend(_role_privilege_findings(conn, role, rls))
    if app_role:
        found.extend(_app_role_findings(conn, app_role, rls, roles))
    if not found and roles:
        found.append(Finding("info", "privileges",
                             f"{' and '.join(roles)} hold every privilege pgfunnel grants them"))
    return found


def _app_role_findings(conn: psycopg.Connection[Any], app_role: str, rls: bool,
                       roles: Sequence[str]) -> list[Finding]:
    from pgfunnel.security import READER_ROLE, WRITER_ROLE

    row = conn.execute(
        "select r.rolsuper or pg_catalog.pg_has_role(r.oid, c.relowner, 'USAGE'), "
        "coalesce(pg_catalog.pg_has_role(r.oid, %s::name, 'USAGE'), false) "
        "or coalesce(pg_catalog.pg_has_role(r.oid, %s::name, 'USAGE'), false) "
        "from pg_catalog.pg_roles r, pg_catalog.pg_class c "
        "where r.rolname = %s and c.oid = 'pgfunnel.document'::regclass",
        (READER_ROLE if READER_ROLE in roles else None,
         WRITER_ROLE if WRITER_ROLE in roles else None, app_role)).fetchone()
    # a missing role, a superuser or an owner: security.app_role* says so
    if row is None or row[0]:
        return []
    member = bool(row[1])
    who = _quote_ident(conn, app_role)
    join = f"`grant {READER_ROLE} to {who}`"
    found = _app_role_login_findings(conn, app_role, who)
    if rls:
        if member or READER_ROLE not in roles:
            return found
        return found + [Finding("error", "privileges",
                        f"application role {app_role!r} is not a member of {READER_ROLE} (nor "
                        f"{WRITER_ROLE}): the row-level security policies name those roles, so "
                        f"its searches fail with permission denied or find nothing; {join}")]
    missing = [h for h in _held_privileges(conn, app_role, _wanted(READER_ROLE)) if not h[3]]
    if not missing:
        return found
    kind, obj, privilege, _ = missing[0]
    more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
    reader_complete = READER_ROLE in roles and not [
        h for h in _held_privileges(conn, READER_ROLE, _wanted(READER_ROLE)) if not h[3]]
    fix = (join if reader_complete and not member else
           f"as the schema owner, `pgfunnel init --rls` (it grants {READER_ROLE} what a search "
           f"needs, with the policies), then {join}")
    return found + [Finding("error", "privileges",
                            f"application role {app_role!r} lacks {privilege} on {kind} "
                            f"{obj}{more}: its searches fail with permission denied; {fix}")]


def _app_role_login_findings(conn: psycopg.Connection[Any], app_role: str,
                             who: str) -> list[Finding]:
    """Whether the application role can reach this database at all: it may log in, and
    CONNECT on the database is its (or PUBLIC's). A DBA who follows
    security.database_connect (`revoke connect on database DB from public`) and leaves a
    role out, or a role made with `create role` (NOLOGIN), had every privilege found in
    order while each of its connections was refused."""
    row = conn.execute(
        "select r.rolcanlogin, pg_catalog.has_database_privilege(r.oid, "
        "       pg_catalog.current_database(), 'CONNECT'), "
        "       pg_catalog.quote_ident(pg_catalog.current_database()) "
        "from pg_catalog.pg_roles r where r.rolname = %s", (app_role,)).fetchone()
    if row is None:
        return []
    can_login, may_connect, database = row
    found = []
    if not can_login:
        found.append(Finding(
            "error", "privileges",
            f"application role {app_role!r} may not log in (NOLOGIN, what `create role` "
            f"makes): its connections are refused; `alter role {who} login`"))
    if not may_connect:
        found.append(Finding(
            "error", "privileges",
            f"application role {app_role!r} may not connect to database {database} (CONNECT "
            f"is granted neither to it nor to PUBLIC): its connections are refused; `grant "
            f"connect on database {database} to {who}`"))
    return found


CHECKS: tuple[tuple[str, Check], ...] = (
    ("pgvector", check_pgvector),
    ("schema", check_schema),
    ("invalid_index", check_invalid_indexes),
    ("active_index", check_active_indexes),
    ("statistics", check_statistics),
    ("orphans", check_orphans),
    ("orphan_rows", check_orphan_rows),
    ("index_memory", check_index_memory),
    ("row_security", check_row_security),
    ("security", check_security),
    ("privileges", check_privileges),
    ("public_with_readers", check_public_with_readers),
    ("search_log_readers", check_search_log_readers),
    ("unfindable_documents", check_unfindable_documents),
    ("chunking", check_chunking),
)
#: checks that need the pgfunnel schema (skipped, not failed, when it is missing)
NEEDS_SCHEMA = {"invalid_index", "active_index", "statistics", "orphans", "orphan_rows",
                "index_memory", "row_security", "security", "privileges", "public_with_readers",
                "search_log_readers", "unfindable_documents", "chunking"}
#: checks that count rows, which row-level security would hide from the role running them
COUNTS_ROWS = {"schema", "active_index", "statistics", "orphans", "orphan_rows",
               "public_with_readers", "unfindable_documents", "chunking"}


@dataclass(frozen=True)
class _HeldRole:
    """The role running doctor, held to row-level security."""

    name: str
    #: it owns the tables, but their row security is FORCEd
    owner: bool
    writer_exists: bool


def _held_to_row_security(conn: psycopg.Connection[Any]) -> _HeldRole | None:
    """The current role when row-level security is on and hides rows from it (not a
    superuser, not BYPASSRLS, not a member of pgfunnel_writer, not the owner of a table
    whose row security is not FORCEd); else None."""
    from pgfunnel.security import WRITER_ROLE

    try:
        with conn.transaction(force_rollback=True):
            row = conn.execute(
                "select r.rolname, r.rolsuper or r.rolbypassrls "
                "or coalesce(pg_catalog.pg_has_role(r.oid, w.oid, 'USAGE'), false), "
                "c.relrowsecurity, pg_catalog.pg_has_role(r.oid, c.relowner, 'USAGE'), "
                "c.relforcerowsecurity, w.oid is not null "
                "from pg_roles r left join pg_roles w on w.rolname = %s, "
                "pg_catalog.pg_class c "
                "where r.rolname = current_user and c.oid = 'pgfunnel.chunk'::regclass",
                (WRITER_ROLE,)).fetchone()
    except psycopg.Error:
        return None  # no schema yet: the schema check says so
    if row is None:
        return None
    name, exempt, on, owner, forced, writer_exists = row
    if exempt or not on or (owner and not forced):
        return None
    return _HeldRole(str(name), bool(owner), bool(writer_exists))


def _held_role_finding(conn: psycopg.Connection[Any], held: _HeldRole) -> Finding:
    if not held.owner:
        return Finding(
            "error", "doctor_role",
            f"role {held.name!r} is held to row-level security, which hides the rows doctor "
            "counts: run `pgfunnel doctor` as the tables' owner or a member of "
            "pgfunnel_writer (the checks that count rows were skipped)")
    # the owner outside pgfunnel_writer: what `pg_restore --no-owner` of a database in
    # RLS mode leaves, since role memberships are not part of a dump. Running as the
    # owner cannot help, and joining pgfunnel_writer takes a superuser (or ADMIN OPTION
    # on it) from Postgres 16 on.
    from pgfunnel.security import READER_ROLE, WRITER_ROLE

    who = _quote_ident(conn, held.name)
    create = ("" if held.writer_exists else
              f"`create role {READER_ROLE} nologin; create role {WRITER_ROLE} nologin`, then ")
    return Finding(
        "error", "doctor_role",
        f"role {held.name!r} owns the pgfunnel tables, but their row-level security is "
        f"FORCEd and it is not a member of {WRITER_ROLE}, so the policies hide every row from "
        "it, its own searches and ingests included (as after `pg_restore --no-owner` of a "
        f"database in RLS mode): a superuser must run {create}`grant {WRITER_ROLE} to {who}`; "
        f"then `pgfunnel init` as {held.name} (the checks that count rows were skipped)")


@rows_by_position
def run_checks(conn: psycopg.Connection[Any],
               checks: Sequence[tuple[str, Check]] = CHECKS, *,
               app_role: str | None = None) -> list[Finding]:
    """Run every check; each in its own rolled-back transaction so one failure is contained.
    ``app_role``: the role an application connects as, checked like pgfunnel_reader's members."""
    if app_role is not None and (not isinstance(app_role, str) or not app_role.strip()):
        # an empty value (an unset variable in `--app-role "$APP_ROLE"`) would skip the
        # role's checks and pass
        raise ConfigError("app_role", f"must be a role name, got {app_role!r}")
    if app_role:
        takes_role: dict[Check, Check] = {
            check_security: functools.partial(check_security, app_role=app_role),
            check_privileges: functools.partial(check_privileges, app_role=app_role)}
        checks = [(name, takes_role.get(check, check)) for name, check in checks]
    findings: list[Finding] = []
    denied: dict[str, list[str]] = {}
    denied_at = 0
    have_schema = True
    held = _held_to_row_security(conn)
    if held is not None:
        # a reader sees no row without its principals: every count would be wrong, and a
        # "statistics count 7 chunks but 0 are indexed" would send it to reindex
        findings.append(_held_role_finding(conn, held))
    for name, check in checks:
        if name in NEEDS_SCHEMA and not have_schema:
            continue
        if held is not None and name in COUNTS_ROWS:
            continue
        try:
            with conn.transaction(force_rollback=True):
                got = check(conn)
        except psycopg.Error as exc:
            if conn.closed or conn.broken:
                # the server went away (stopped or restarted, the session terminated):
                # no finding of this check, and each check after it failed the same way,
                # so a stopped server was a table of "the check failed" errors and exit 3
                raise translate(exc, searching=False) from exc
            said = getattr(exc.diag, 'message_primary', None) or str(exc)
            if exc.sqlstate == "42501":
                # a role that may not read what the checks read failed each of them the
                # same way: one finding says what it lacks, where the first one failed
                if not denied:
                    denied_at = len(findings)
                denied.setdefault(said, []).append(name)
                continue
            got = [Finding("error", name, f"the check failed: {said}")]
        if name == "schema" and any(f.level == "error" and "not installed" in f.message
                                    for f in got):
            have_schema = False
        findings.extend(got)
    if denied:
        findings.insert(denied_at, _denied_finding(conn, denied))
    return findings


def _denied_finding(conn: psycopg.Connection[Any], denied: dict[str, list[str]]) -> Finding:
    """One error for the checks the role running doctor may not run (``denied``: each
    refusal's message, with the checks it stopped): what the role lacks, the checks
    skipped, and what to run instead."""
    from pgfunnel.security import schema_access

    skipped = [name for names in denied.values() for name in names]
    access = schema_access(conn)
    row = conn.execute("select current_user").fetchone()
    role = str(row[0]) if row else "?"
    if "permission denied for schema pgfunnel" in denied:
        lacks = f"role {role!r} lacks USAGE on schema pgfunnel"
    else:
        lacks = f"role {role!r} may not read what some checks read ({'; '.join(denied)})"
    were = "1 check was" if len(skipped) == 1 else f"{len(skipped)} checks were"
    message = f"{lacks}, so {were} skipped: {', '.join(skipped)}"
    if access is not None and access.owner == role:
        # the owner refused (a function or table a superuser left it, say): only a
        # superuser reads more
        message += "; run `pgfunnel doctor --dsn SUPERUSER_DSN` as a superuser to run them"
    elif access is not None:
        message += (f"; run `pgfunnel doctor --dsn OWNER_DSN` as {access.owner!r} (the "
                    f"schema's owner; OWNER_DSN: a connection string for it), and with "
                    f"`--app-role {role}` to check this role")
        if "permission denied for schema pgfunnel" in denied:
            message += f"; to give {role!r} access: {access.advice()}"
    return Finding("error", "doctor_access", message)


def worst(findings: Sequence[Finding]) -> Level | None:
    for level in LEVELS:
        if any(f.level == level for f in findings):
            return level
    return None


__all__ = ["CHECKS", "Finding", "check_active_indexes", "check_chunking", "check_index_memory",
           "check_invalid_indexes", "check_pgvector", "check_row_security", "check_schema",
           "check_orphans", "check_privileges", "check_public_with_readers", "check_security",
           "check_statistics", "check_unfindable_documents", "run_checks", "worst"]
