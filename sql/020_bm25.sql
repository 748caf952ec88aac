-- pgfunnel: BM25 statistics.
--
-- A posting is (version, term, chunk, tf, chunk length); the statistics are the
-- document frequency per term (term_stat) and the chunk count and total length per
-- version (index_version). Every insert, replacement and delete of chunks updates
-- them in the same transaction, so BM25 scores are always computed from exact
-- current statistics (see _lexical_leg).

-- BM25 idf (the non-negative form used by Lucene), in float8.
-- The one function without `set search_path`: a SET clause keeps Postgres from inlining a
-- SQL function, and this one is called per query term on every search, where each
-- non-inlined call cost about 9 us (inlined: 0.2 us). Every name in its body is
-- schema-qualified instead (operator(pg_catalog.+) and so on), so the caller's
-- search_path cannot change what it means. The explicit parentheses matter: operator()
-- syntax gives every operator the same precedence.
create or replace function pgfunnel._bm25_idf(df bigint, n bigint)
returns double precision
language sql immutable parallel safe
security invoker
as $$
    select pg_catalog.ln(
        1.0::pg_catalog.float8 operator(pg_catalog.+)
        (((n operator(pg_catalog.-) df)::pg_catalog.float8 operator(pg_catalog.+) 0.5::pg_catalog.float8)
         operator(pg_catalog./) (df::pg_catalog.float8 operator(pg_catalog.+) 0.5::pg_catalog.float8)))
$$;

-- the distinct terms of chunks, per version, read from their lexical rows (posting is
-- keyed by term first, so the chunk's terms come from lexical.terms)
create or replace function pgfunnel._chunk_terms(chunk_ids bigint[])
returns table (index_version_id integer, chunk_id bigint, term text)
language sql stable
security invoker
set search_path = pg_catalog, pgfunnel
as $$
    select l.index_version_id, l.chunk_id, t.term
      from pgfunnel.lexical l,
           unnest(pg_catalog.tsvector_to_array(l.terms)) as t(term)
     where l.chunk_id = any (chunk_ids)
$$;

-- the chunk-id form of 0.1.0; statistics now come with the postings that were written
drop function if exists pgfunnel._bm25_add(integer, bigint[]);

-- add freshly written postings of a version to its statistics: the document frequency
-- of each term they hold, and the number and total length of the chunks. The writer
-- passes the counts of exactly the rows it copied in the same transaction.
create or replace function pgfunnel._bm25_add(version_id integer, terms text[], dfs bigint[],
                                              n_chunks bigint, total_length bigint)
returns void
language plpgsql
security invoker
set search_path = pg_catalog, pgfunnel
as $$
begin
    if cardinality(terms) <> cardinality(dfs) then
        perform pgfunnel._bad_parameter('dfs', 'must have one count per term');
    end if;
    -- term rows are locked in term order so concurrent writers cannot deadlock
    insert into pgfunnel.term_stat as ts (index_version_id, term, df)
    select version_id, t.term, t.df
      from unnest(terms, dfs) as t(term, df)
     order by t.term collate "C"
    on conflict (index_version_id, term) do update set df = ts.df + excluded.df;

    update pgfunnel.index_version v
       set chunk_count = v.chunk_count + n_chunks,
           total_length = v.total_length + _bm25_add.total_length
     where v.id = version_id;
end
$$;

-- remove chunks (and everything indexed for them in every version), keeping statistics exact
create or replace function pgfunnel._remove_chunks(chunk_ids bigint[])
returns integer
language plpgsql
security invoker
set search_path = pg_catalog, pgfunnel
as $$
declare
    removed integer;
begin
    with gone as (
        select * from pgfunnel._chunk_terms(chunk_ids)
    ),
    dropped_postings as (
        delete from pgfunnel.posting p
         using gone g
         where p.index_version_id = g.index_version_id and p.term = g.term
           and p.chunk_id = g.chunk_id
    )
    update pgfunnel.term_stat ts
       set df = ts.df - g.n
      from (select g.index_version_id, g.term, count(*) as n
              from gone g
             group by 1, 2
             order by 1, 2) g
     where ts.index_version_id = g.index_version_id and ts.term = g.term;
    delete from pgfunnel.term_stat ts where ts.df <= 0;

    update pgfunnel.index_version v
       set chunk_count = v.chunk_count - s.n,
           total_length = v.total_length - s.total
      from (select l.index_version_id, count(*) as n, sum(l.length) as total
              from pgfunnel.lexical l
             where l.chunk_id = any (chunk_ids)
             group by 1) s
     where v.id = s.index_version_id;

    delete from pgfunnel.chunk c where c.id = any (chunk_ids);
    get diagnostics removed = row_count;
    return removed;
end
$$;

-- BM25 statistics recounted from scratch, to check the maintained ones against
create or replace function pgfunnel.bm25_recount(version_id integer)
returns table (term text, df bigint)
language sql stable
security invoker
set search_path = pg_catalog, pgfunnel
as $$
    select p.term, count(*) from pgfunnel.posting p
     where p.index_version_id = version_id group by p.term
$$;
