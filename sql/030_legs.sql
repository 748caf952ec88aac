-- pgfunnel: the two retrieval legs. Access filters are applied inside each leg,
-- before ranking, so a hidden chunk can neither appear nor push a visible one out.

-- the visibility predicate over document alias d. Parameters, by position:
-- $1 principals text[], $2 tenant, $3 language, $4 as_of, $5 metadata filter, $6 collection id
create or replace function pgfunnel._visible_sql()
returns text
language sql immutable parallel safe
security invoker
set search_path = pg_catalog, pgfunnel
as $$
    select '(d.collection_id = $6'
        || ' and (d.is_public or d.readers operator(pg_catalog.&&) $1)'
        || ' and (d.tenant is null or d.tenant = $2)'
        || ' and ($3::text is null or d.language = $3)'
        || ' and (d.valid_from is null or d.valid_from <= $4)'
        || ' and (d.valid_to is null or d.valid_to > $4)'
        || ' and ($5::jsonb is null or d.metadata operator(pg_catalog.@>) $5))'
$$;

-- lexical leg: exact BM25 top-`depth` over the visible chunks of a version.
-- One index-only scan over each query term's postings yields tf and chunk length, so
-- every matching chunk is scored exactly from the current statistics, with no join
-- and no stored score to go stale. Visibility is checked on the best-scored chunks
-- in score order; when too few of them are visible, it fetches deeper.
create or replace function pgfunnel._lexical_leg(
    version_id integer, query_terms text[], depth integer,
    k1 double precision, b double precision,
    principals text[], tenant text, language text, as_of timestamptz,
    metadata_filter jsonb, collection_id integer)
returns table (chunk_id bigint, score double precision, rank integer)
language plpgsql stable
security invoker
set search_path = pg_catalog, pgfunnel
as $$
declare
    n_chunks bigint;
    avg_len double precision;
    q_terms text[];
    q_idf double precision[];
    cand_ids bigint[];
    cand_scores double precision[];
    n_cand integer;
    fetch_n integer := greatest(2 * depth, 64);
    checked integer := 0;
    ids bigint[] := '{}';
    scores double precision[] := '{}';
begin
    select v.chunk_count, v.total_length::float8 / nullif(v.chunk_count, 0)
      into n_chunks, avg_len
      from pgfunnel.index_version v where v.id = _lexical_leg.version_id;
    if coalesce(n_chunks, 0) = 0 or coalesce(cardinality(query_terms), 0) = 0 then
        return;
    end if;

    -- each distinct query term once, with its idf
    select array_agg(ts.term order by ts.term),
           array_agg(pgfunnel._bm25_idf(ts.df, n_chunks) order by ts.term)
      into q_terms, q_idf
      from pgfunnel.term_stat ts
     where ts.index_version_id = _lexical_leg.version_id and ts.term = any (query_terms);
    if q_terms is null then
        return;
    end if;

    -- exact scores of the chunks holding a query term, the best `fetch_n` first; when
    -- the filter hides too many of them, fetch deeper and check the next ones
    loop
        select array_agg(a.chunk_id order by a.s desc, a.chunk_id),
               array_agg(a.s order by a.s desc, a.chunk_id)
          into cand_ids, cand_scores
          from (select p.chunk_id,
                       sum(q.idf * p.tf * (k1 + 1)
                           / (p.tf + k1 * (1 - b + b * p.length / avg_len))) as s
                  from unnest(q_terms, q_idf) as q(term, idf),
                       lateral (select p.chunk_id, p.tf, p.length from pgfunnel.posting p
                                 where p.index_version_id = _lexical_leg.version_id
                                   and p.term = q.term) p
                 group by p.chunk_id
                 order by 2 desc, 1
                 limit fetch_n) a;
        n_cand := coalesce(cardinality(cand_ids), 0);

        select ids || coalesce(array_agg(v.id order by v.ord), '{}'),
               scores || coalesce(array_agg(v.sc order by v.ord), '{}')
          into ids, scores
          from (select c.id, c.sc, c.ord
                  from unnest(cand_ids[checked + 1:n_cand], cand_scores[checked + 1:n_cand])
                       with ordinality as c(id, sc, ord)
                  join pgfunnel.chunk ch on ch.id = c.id
                  join pgfunnel.document d on d.id = ch.document_id
                 where d.collection_id = _lexical_leg.collection_id
                   and (d.is_public or d.readers operator(pg_catalog.&&) principals)
                   and (d.tenant is null or d.tenant = _lexical_leg.tenant)
                   and (_lexical_leg.language is null or d.language = _lexical_leg.language)
                   and (d.valid_from is null or d.valid_from <= as_of)
                   and (d.valid_to is null or d.valid_to > as_of)
                   and (metadata_filter is null
                        or d.metadata operator(pg_catalog.@>) metadata_filter)
                 order by c.ord
                 limit depth - cardinality(ids)) v;
        exit when cardinality(ids) >= depth or n_cand < fetch_n;
        checked := n_cand;
        fetch_n := fetch_n * 4;
    end loop;

    return query
    select u.id, u.sc, u.ord::integer
      from unnest(ids, scores) with ordinality as u(id, sc, ord);
end
$$;

-- dense leg: cosine similarity top-`depth` over the visible chunks of a version,
-- through the version's partial HNSW index with an iterative scan; when the
-- filter leaves too few rows for the index scan to find, an exact scan answers.
create or replace function pgfunnel._dense_leg(
    version_id integer, dimensions integer, query_embedding @vector_schema@.vector,
    depth integer, ef_search integer,
    principals text[], tenant text, language text, as_of timestamptz,
    metadata_filter jsonb, collection_id integer)
returns table (chunk_id bigint, score double precision, rank integer)
language plpgsql volatile
security invoker
set search_path = pg_catalog, pgfunnel, @vector_schema@
as $$
declare
    vis text := pgfunnel._visible_sql();
    ids bigint[];
    scores double precision[];
begin
    -- transaction-local, so a pooled connection keeps no setting from this search
    perform set_config('hnsw.ef_search', least(greatest(ef_search, depth), 1000)::text, true);
    perform set_config('hnsw.iterative_scan', 'relaxed_order', true);

    execute format($q$
        select array_agg(s.chunk_id order by s.dist, s.chunk_id),
               array_agg(1 - s.dist order by s.dist, s.chunk_id)
          from (select e.chunk_id, e.embedding::vector(%1$s) <=> $7::vector(%1$s) as dist
                  from pgfunnel.embedding e
                  join pgfunnel.chunk ch on ch.id = e.chunk_id
                  join pgfunnel.document d on d.id = ch.document_id
                 where e.index_version_id = %2$s and %3$s
                 order by e.embedding::vector(%1$s) <=> $7::vector(%1$s)
                 limit $8) s
        $q$, dimensions, version_id, vis)
      into ids, scores
      using principals, tenant, language, as_of, metadata_filter, collection_id,
            query_embedding, depth;

    if coalesce(cardinality(ids), 0) >= depth then
        return query
        select u.id, u.sc, u.ord::integer from unnest(ids, scores) with ordinality as u(id, sc, ord);
        return;
    end if;

    -- the index scan came up short (a selective filter): rank the visible rows exactly
    return query execute format($q$
        select e.chunk_id, 1 - (e.embedding <=> $7),
               (row_number() over (order by e.embedding <=> $7, e.chunk_id))::integer
          from pgfunnel.embedding e
          join pgfunnel.chunk ch on ch.id = e.chunk_id
          join pgfunnel.document d on d.id = ch.document_id
         where e.index_version_id = %1$s and %2$s
         order by e.embedding <=> $7, e.chunk_id
         limit $8
        $q$, version_id, vis)
      using principals, tenant, language, as_of, metadata_filter, collection_id,
            query_embedding, depth;
end
$$;
