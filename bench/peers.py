"""Peers that the benchmarks measure pgfunnel against, on the same rows.

``hybrid_search`` reproduces the shape of the RRF hybrid search SQL function that
Supabase documents: a full-text leg ranked by ``ts_rank_cd`` over a GIN-indexed
``tsvector`` column, a dense leg ranked with ``row_number() over (order by embedding <#>
query)`` (negative inner product, HNSW index), each leg cut at ``least(match_count, 30) * 2``,
a full outer join, and RRF with k = 50. It has no access filter, no per-source cap and
no BM25: it is the common baseline, written from the documented SQL shape.

The peer table ``bench_peer.docs`` is filled from a pgfunnel collection's active index
version (chunk text and the same vectors), so both answer over identical data.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import psycopg
from psycopg import sql

from pgfunnel.schema import require_vector_schema

SETUP_SQL = sql.SQL("""
create schema if not exists bench_peer;
-- cascade: hybrid_search returns rows of this table and is recreated below
drop table if exists bench_peer.docs cascade;
create table bench_peer.docs (
    id bigint primary key,
    citekey text not null,
    ordinal integer not null,
    content text not null,
    fts tsvector generated always as (to_tsvector('english', content)) stored,
    embedding {vs}.vector({dim}) not null
);
""")

FUNCTION_SQL = sql.SQL("""
create or replace function bench_peer.hybrid_search(
    query_text text,
    query_embedding {vs}.vector({dim}),
    match_count int,
    full_text_weight float = 1,
    semantic_weight float = 1,
    rrf_k int = 50)
returns setof bench_peer.docs
language sql
set search_path = pg_catalog, bench_peer, {vs}
as $$
with full_text as (
    select id,
           row_number() over (order by ts_rank_cd(fts, websearch_to_tsquery(query_text)) desc)
               as rank_ix
      from bench_peer.docs
     where fts @@ websearch_to_tsquery(query_text)
     order by rank_ix
     limit least(match_count, 30) * 2
),
semantic as (
    select id, row_number() over (order by embedding <#> query_embedding) as rank_ix
      from bench_peer.docs
     order by rank_ix
     limit least(match_count, 30) * 2
)
select docs.*
  from full_text
  full outer join semantic on full_text.id = semantic.id
  join bench_peer.docs on coalesce(full_text.id, semantic.id) = docs.id
 order by coalesce(1.0 / (rrf_k + full_text.rank_ix), 0.0) * full_text_weight
        + coalesce(1.0 / (rrf_k + semantic.rank_ix), 0.0) * semantic_weight desc
 limit least(match_count, 30)
$$;
""")


def build_peer(conn: psycopg.Connection[Any], collection: str) -> int:
    """(Re)create ``bench_peer.docs`` from the collection and the hybrid_search function."""
    row = conn.execute(
        "select v.id, v.dimensions from pgfunnel.index_version v join pgfunnel.collection c "
        "on c.id = v.collection_id where c.name = %s and v.state = 'active'",
        (collection,)).fetchone()
    assert row is not None, f"collection {collection!r} has no active version"
    version_id, dim = int(row[0]), int(row[1])
    vs = sql.Identifier(require_vector_schema(conn))
    conn.execute(SETUP_SQL.format(vs=vs, dim=sql.Literal(dim)))
    conn.execute(
        "insert into bench_peer.docs (id, citekey, ordinal, content, embedding) "
        "select ch.id, d.citekey, ch.ordinal, ch.text, e.embedding "
        "from pgfunnel.chunk ch join pgfunnel.document d on d.id = ch.document_id "
        "join pgfunnel.embedding e on e.chunk_id = ch.id and e.index_version_id = %s",
        (version_id,))
    conn.execute("create index on bench_peer.docs using gin (fts)")
    conn.execute(sql.SQL("create index on bench_peer.docs using hnsw "
                         "(embedding {}.vector_ip_ops)").format(vs))
    conn.execute(FUNCTION_SQL.format(vs=vs, dim=sql.Literal(dim)))
    conn.execute("analyze bench_peer.docs")
    n = conn.execute("select count(*) from bench_peer.docs").fetchone()
    return int(n[0]) if n else 0


def hybrid_search(conn: psycopg.Connection[Any], text: str, vector: np.ndarray,
                  k: int = 10) -> list[tuple[str, int]]:
    """(citekey, ordinal) of the peer's top k, best first."""
    rows = conn.execute("select citekey, ordinal from bench_peer.hybrid_search(%s, %s, %s)",
                        (text, vector, k), prepare=True).fetchall()
    return [(str(c), int(o)) for c, o in rows]
