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
-- Each round fetches every query term's `fetch_depth` best postings by stored weight,
-- scores the union exactly, and stops once no unfetched chunk can beat the
-- depth-th score (threshold algorithm); otherwise it fetches deeper. When the
-- filter leaves few chunks visible it scores those chunks directly instead.
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
    avg_now double precision;
    avg_ref double precision;
    ratio double precision;
    q_terms text[];
    q_idf double precision[];
    max_df bigint;
    fetch_depth integer := greatest(depth * 2, 64);
    ids bigint[];
    scores double precision[];
    bound double precision;
    visible_count integer;
    vis text := pgfunnel._visible_sql();
    score_expr text := 'sum(q.idf * p.tf * ($10 + 1) / (p.tf + $10 * (1 - $11 + $11 * l.length / $12)))';
begin
    select v.chunk_count, v.total_length::float8 / nullif(v.chunk_count, 0), v.weights_avg_length
      into n_chunks, avg_now, avg_ref
      from pgfunnel.index_version v where v.id = version_id;
    if coalesce(n_chunks, 0) = 0 or cardinality(query_terms) = 0 then
        return;
    end if;
    ratio := greatest(1.0, avg_now / coalesce(avg_ref, avg_now));

    select array_agg(ts.term order by ts.term),
           array_agg(pgfunnel._bm25_idf(ts.df, n_chunks) order by ts.term),
           max(ts.df)
      into q_terms, q_idf, max_df
      from pgfunnel.term_stat ts
     where ts.index_version_id = version_id
       and ts.term = any (array(select distinct unnest(query_terms)));
    if q_terms is null then
        return;
    end if;

    loop
        execute format($q$
            with q as (select * from unnest($7::text[], $8::float8[]) as q(term, idf)),
            fetched as (
                select q.term, t.chunk_id, t.weight, t.pos
                  from q, lateral (
                      select p.chunk_id, p.weight, row_number() over (order by p.weight desc) as pos
                        from pgfunnel.posting p
                       where p.index_version_id = %1$s and p.term = q.term
                       order by p.weight desc
                       limit $9) t
            ),
            scored as (
                select c.chunk_id, %3$s as score
                  from (select distinct f.chunk_id from fetched f) c
                  join pgfunnel.lexical l on l.index_version_id = %1$s and l.chunk_id = c.chunk_id
                  join pgfunnel.posting p on p.index_version_id = %1$s and p.chunk_id = c.chunk_id
                  join q on q.term = p.term
                  join pgfunnel.chunk ch on ch.id = c.chunk_id
                  join pgfunnel.document d on d.id = ch.document_id
                 where %2$s
                 group by c.chunk_id
                 order by 2 desc, 1
                 limit $13
            )
            select (select array_agg(s.chunk_id order by s.score desc, s.chunk_id) from scored s),
                   (select array_agg(s.score order by s.score desc, s.chunk_id) from scored s),
                   (select coalesce(sum(q.idf * f.weight), 0)
                      from fetched f join q on q.term = f.term
                     where f.pos = $9)
            $q$, version_id, vis, score_expr)
          into ids, scores, bound
         using principals, tenant, language, as_of, metadata_filter, collection_id,
               q_terms, q_idf, fetch_depth, k1, b, avg_now, depth;
        -- a term whose postings were all fetched adds nothing to the bound; one cut at
        -- fetch_depth bounds every unfetched chunk by its fetch_depth-th weight
        bound := bound * ratio * (1 + 1e-9);
        exit when fetch_depth >= max_df;
        exit when coalesce(cardinality(ids), 0) >= depth and scores[depth] >= bound;

        if coalesce(cardinality(ids), 0) < depth then
            -- few visible chunks: count them (up to a limit) and, if few, score them all
            execute format('select count(*) from (select 1 from pgfunnel.document d
                              join pgfunnel.chunk ch on ch.document_id = d.id
                             where %s limit 5000) v', vis)
               into visible_count
              using principals, tenant, language, as_of, metadata_filter, collection_id;
            if visible_count < 5000 then
                return query execute format($q$
                    with q as (select * from unnest($7::text[], $8::float8[]) as q(term, idf)),
                    scored as (
                        select ch.id as chunk_id, %3$s as score
                          from pgfunnel.document d
                          join pgfunnel.chunk ch on ch.document_id = d.id
                          join pgfunnel.lexical l on l.index_version_id = %1$s and l.chunk_id = ch.id
                          join pgfunnel.posting p on p.index_version_id = %1$s and p.chunk_id = ch.id
                                                 and p.term = any ($7)
                          join q on q.term = p.term
                         where %2$s
                         group by ch.id)
                    select s.chunk_id, s.score,
                           (row_number() over (order by s.score desc, s.chunk_id))::integer
                      from scored s order by s.score desc, s.chunk_id limit $13
                    $q$, version_id, vis, score_expr)
                  using principals, tenant, language, as_of, metadata_filter, collection_id,
                        q_terms, q_idf, fetch_depth, k1, b, avg_now, depth;
                return;
            end if;
        end if;
        fetch_depth := fetch_depth * 4;
    end loop;

    return query
    select u.id, u.sc, u.ord::integer
      from unnest(ids, scores) with ordinality as u(id, sc, ord)
     where u.ord <= depth;
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
