-- pgfunnel: explain, the answer to "why did chunk X (not) come back for this query".
--
-- It reruns the funnel with the caller's parameters and follows one chunk through it:
-- the legs at their depths, fusion, the pool of k * overfetch (or the wider one the
-- search took), the per-citekey cap and the cut at k. It runs with the caller's rights
-- and visibility: a chunk the caller cannot see gets exactly the answer a chunk id that
-- does not exist gets.

-- what explain's reason says of a pool that held fewer chunks than the search asked for
-- (nothing when it held them all): the size asked, and why it was that size
create or replace function pgfunnel._pool_asked(held integer, asked integer, k integer,
                                                overfetch integer)
returns text
language plpgsql immutable
security invoker
set search_path = pg_catalog
as $$
begin
    return case when held >= asked then ''
                else format(', where k %s x overfetch %s%s asked for %s: the legs at their '
                            'depths held no more', k, overfetch,
                            case when asked > k * overfetch
                                 then ', widened so that the per-source cap could fill k,'
                                 else '' end, asked) end;
end
$$;

-- each chunk's way through the funnel for one query, from one run of it: a verdict, every
-- stage's rank and score, and a sentence saying why; a row per chunk id, in their order.
-- explain() is this for one chunk; explaining a document follows each of its chunks,
-- and a search run per chunk took a second for a document of a hundred
create or replace function pgfunnel._explain_chunks(
    query_text text,
    query_embedding @vector_schema@.vector,
    chunk_ids bigint[],
    k integer default 10,
    collection text default 'default',
    principals text[] default '{}',
    tenant text default null,
    language text default null,
    as_of timestamptz default now(),
    metadata_filter jsonb default null,
    fusion text default 'minmax',
    rrf_k double precision default 60,
    weights double precision[] default null,
    lexical_depth integer default null,
    dense_depth integer default null,
    overfetch integer default 4,
    per_source_cap integer default 3,
    ef_search integer default 100,
    k1 double precision default 1.2,
    b double precision default 0.75)
returns table (
    chunk_id bigint,
    verdict text,
    lexical_rank integer, lexical_score double precision, lexical_exact_score double precision,
    lexical_depth_used integer,
    dense_rank integer, dense_score double precision, dense_exact_score double precision,
    dense_depth_used integer,
    fused_rank integer, fused_score double precision, pool_size integer,
    final_rank integer, citekey text, reason text)
language plpgsql volatile
security invoker
set search_path = pg_catalog, pgfunnel
-- it reruns the search (see 030_legs.sql on jit)
set jit = off
as $$
declare
    coll_id integer;
    ver record;
    pool_n integer;
    lex_d integer;
    den_d integer;
    wide_k integer;
    messages text;
    found_doc bigint;
    found_key text;
    ids bigint[];
    row_pos integer;
    hit record;
    pool record;
    -- the wide pool, in fused order (see below)
    w_ids bigint[];
    w_docs bigint[];
    w_lr integer[];
    w_ls double precision[];
    w_dr integer[];
    w_ds double precision[];
    w_fr integer[];
    w_fs double precision[];
    lex_last double precision;
    den_last double precision;
    n_lex integer;
    n_den integer;
    ahead integer;
    kept_above integer;
    q_terms text[];
    -- the legs the search ran: a leg with weight 0 is not run (see _pool)
    lexical_on boolean;
    dense_on boolean;
    -- the legs whose depth can still be raised to reach the chunk
    lex_up boolean;
    den_up boolean;
    lexical_off text;
    dense_off text;
    err_state text;
    err_message text;
    err_detail text;
    err_hint text;
    cid bigint;
    -- the wide pool below is read once, for the first chunk that is visible
    wide_read boolean := false;
begin
    perform pgfunnel._check_search_params(k, principals, overfetch, per_source_cap,
                                          metadata_filter);
    perform pgfunnel._check_scope_params(tenant, language);
    if chunk_ids is null or array_position(chunk_ids, null) is not null then
        perform pgfunnel._bad_parameter('chunk_id', 'must not be NULL');
    end if;
    coll_id := pgfunnel._collection_id(collection);
    select * into ver from pgfunnel._active_version(coll_id);
    pool_n := k * overfetch;
    lex_d := coalesce(_explain_chunks.lexical_depth, least(greatest(pool_n, 40), 10000));
    den_d := coalesce(_explain_chunks.dense_depth, least(greatest(pool_n, 40), 10000));

    -- the depths and pool the search used: wider than asked when the per-source cap
    -- could not fill k from the pool asked for (see _pool). Parameters are validated
    -- here as in a search.
    -- pool_n is the pool the search asked for (k * overfetch, or wider), pool_size the
    -- chunks it held: fewer when the legs matched fewer (few matches, filters), and
    -- "fused rank 1 of a pool of 40" then claimed 40 candidates where there were 16
    select p.lexical_depth_used, p.dense_depth_used, p.pool_size, cardinality(p.chunk_ids)
      into lexical_depth_used, dense_depth_used, pool_n, pool_size
      from pgfunnel._pool(query_text, query_embedding, k, collection, principals, tenant,
                          _explain_chunks.language, as_of, metadata_filter, fusion, rrf_k,
                          weights, _explain_chunks.lexical_depth,
                          _explain_chunks.dense_depth, overfetch, per_source_cap, ef_search,
                          k1, b) p;
    -- _pool reports a depth only for a leg it ran (no text, no vector or weight 0: not run)
    lexical_on := lexical_depth_used is not null;
    dense_on := dense_depth_used is not null;
    lex_d := coalesce(lexical_depth_used, lex_d);
    den_d := coalesce(dense_depth_used, den_d);
    lexical_off := case when query_text is null then '(no query text)' else '(not run: weight 0)' end;
    dense_off := case when query_embedding is null then '(no query embedding)' else '(not run: weight 0)' end;

    foreach cid in array chunk_ids loop
        chunk_id := cid;
        found_doc := null;
        found_key := null;
        verdict := null;
        lexical_rank := null;
        lexical_score := null;
        lexical_exact_score := null;
        dense_rank := null;
        dense_score := null;
        dense_exact_score := null;
        fused_rank := null;
        fused_score := null;
        final_rank := null;
        citekey := null;
        reason := null;
        -- the legs' own visibility check: invisible and nonexistent are one answer
        select d.id, d.citekey into found_doc, found_key
          from pgfunnel._visible_prefix(array[cid], array[0::float8], 1, principals,
                                        _explain_chunks.tenant, _explain_chunks.language,
                                        as_of, metadata_filter, coll_id) v
          join pgfunnel.chunk ch on ch.id = v.chunk_ids[1]
          join pgfunnel.document d on d.id = ch.document_id;

        if found_doc is null then
            verdict := 'filtered out or does not exist';
            reason := format('chunk %s does not exist in collection %L, or is not visible with '
                             'these principals, tenant, language, as_of and metadata filter',
                             cid, collection);
            return next;
            continue;
        end if;

        if not wide_read then
            -- the fused list of every leg row: the same depths (so the same leg answers and the
            -- same fused scores) with no widening, in a pool that holds all of them; its first
            -- pool_n rows are exactly the search's pool
            wide_k := least(1000, lex_d + den_d);
            -- the first run has said what it had to about the query (dropped words); this one
            -- would say it again
            messages := current_setting('client_min_messages');
            perform set_config('client_min_messages', 'error', true);
            -- held in arrays, not a temporary table, so that explain runs where searches do: in
            -- a read-only transaction and on a hot standby. Their order is the fused order.
            select p.chunk_ids, p.document_ids, p.lexical_ranks, p.lexical_scores, p.dense_ranks,
                   p.dense_scores, p.fused_ranks, p.fused_scores
              into w_ids, w_docs, w_lr, w_ls, w_dr, w_ds, w_fr, w_fs
              from pgfunnel._pool(query_text, query_embedding, wide_k, collection, principals, tenant,
                                  _explain_chunks.language, as_of, metadata_filter, fusion,
                                  rrf_k, weights, lex_d, den_d, ceil((lex_d + den_d)::numeric / wide_k)::integer,
                                  per_source_cap, ef_search, k1, b, false) p;
            perform set_config('client_min_messages', messages, true);

            select max(e.lexical_score) filter (where e.lexical_rank = lex_d),
                   max(e.dense_score) filter (where e.dense_rank = den_d),
                   count(e.lexical_rank), count(e.dense_rank)
              into lex_last, den_last, n_lex, n_den
              from unnest(w_ids, w_docs, w_lr, w_ls, w_dr, w_ds, w_fr, w_fs)
                   as e(chunk_id, document_id, lexical_rank, lexical_score, dense_rank, dense_score,
                      fused_rank, fused_score);
            if query_text is not null then
                select coalesce(array_agg(t.term), '{}') into q_terms
                  from pgfunnel.analyze_tokens(query_text, ver.analyzer, true) t where t.term is not null;
            end if;
            wide_read := true;
        end if;

        citekey := found_key;

        -- exact scores, whatever the depth
        if query_text is not null then
            select sum(pgfunnel._bm25_idf(ts.df, ver.chunk_count) * p.tf * (k1 + 1)
                       / (p.tf + k1 * (1 - b + b * p.length / ver.avg_length)))
              into lexical_exact_score
              from pgfunnel.posting p
              join pgfunnel._term_df(ver.version_id, q_terms) ts on ts.term = p.term
              join pgfunnel.lexical l on l.index_version_id = p.index_version_id
                                     and l.chunk_id = p.chunk_id
             where p.index_version_id = ver.version_id and p.chunk_id = cid
               and p.term = any (array(select distinct unnest(q_terms)));
            lexical_exact_score := coalesce(lexical_exact_score, 0);
        end if;
        if query_embedding is not null then
            select 1 - (e.embedding operator(@vector_schema@.<=>) query_embedding) into dense_exact_score
              from pgfunnel.embedding e
             where e.index_version_id = ver.version_id and e.chunk_id = cid;
        end if;

        select * into hit
          from unnest(w_ids, w_docs, w_lr, w_ls, w_dr, w_ds, w_fr, w_fs)
               as e(chunk_id, document_id, lexical_rank, lexical_score, dense_rank, dense_score,
                  fused_rank, fused_score)
         where e.chunk_id = cid;
        if hit.chunk_id is null then
            verdict := 'in no leg at its depth';
            lex_up := lexical_on and lexical_exact_score > 0 and lexical_depth_used < 10000;
            den_up := dense_on and dense_depth_used < 10000;
            -- a leg that did not run, or a chunk holding no query term, is not reached by
            -- any depth: the advice names the depths that could reach it
            reason := format('not in the lexical top %s%s nor in the dense top %s%s; %s',
                coalesce(lexical_depth_used::text, lexical_off),
                case when not lexical_on then ''
                     when lexical_exact_score = 0 then ' (it shares no query term)'
                     else format(' (its BM25 score %s; rank %s, the last the leg read, has %s)',
                                 round(lexical_exact_score::numeric, 4), n_lex,
                                 coalesce(round(lex_last::numeric, 4)::text, '-')) end,
                coalesce(dense_depth_used::text, dense_off),
                case when not dense_on or dense_exact_score is null then ''
                     else format(' (its cosine similarity %s; rank %s, the last the leg read, has %s)',
                                 round(dense_exact_score::numeric, 4), n_den,
                                 coalesce(round(den_last::numeric, 4)::text, '-')) end,
                -- a depth is raised up to 10000, the most a leg reads (a deeper one is an error)
                case when lex_up and den_up
                         then 'raise lexical_depth/dense_depth or rephrase the query'
                     when lex_up then 'raise lexical_depth or rephrase the query'
                     when den_up then 'raise dense_depth or rephrase the query'
                     when dense_on or (lexical_exact_score > 0 and lexical_on)
                         then 'rephrase the query (a leg reads at most 10000 rows, and the legs '
                              'that could reach it read that many)'
                     when lexical_exact_score > 0 then 'give the lexical leg a weight above 0'
                     else 'no depth reaches it: the query needs one of its words, or an embedding '
                          'for the dense leg' end);
            return next;
            continue;
        end if;

        lexical_rank := hit.lexical_rank;
        lexical_score := hit.lexical_score;
        dense_rank := hit.dense_rank;
        dense_score := hit.dense_score;
        fused_rank := hit.fused_rank;
        fused_score := hit.fused_score;

        if hit.fused_rank > pool_n then
            verdict := 'not in pool';
            reason := format('lexical rank %s, dense rank %s, but fused rank %s is beyond the pool '
                             'of %s (k %s x overfetch %s%s); %s',
                             coalesce(hit.lexical_rank::text, '-'), coalesce(hit.dense_rank::text, '-'),
                             hit.fused_rank, pool_n, k, overfetch,
                             case when pool_n > k * overfetch
                                  then ', widened so that the per-source cap could fill k' else '' end,
                             -- overfetch above 100 is an error: the pool then grows with k only
                             case when overfetch < 100 then 'raise overfetch'
                                  else 'overfetch is at its most (100), so raise k' end);
            return next;
            continue;
        end if;

        -- the pool through final(): the cap per citekey, then the cut at k
        select w_ids[:pool_n] as ids, w_fr[:pool_n] as fr, w_fs[:pool_n] as fs,
               w_lr[:pool_n] as lr, w_ls[:pool_n] as ls, w_dr[:pool_n] as dr,
               w_ds[:pool_n] as ds
          into pool;
        select f.final_rank into final_rank
          from pgfunnel.final(pool.ids, pool.fr, pool.fs, pool.lr, pool.ls, pool.dr, pool.ds,
                              null, k, collection, principals, tenant, _explain_chunks.language, as_of,
                              metadata_filter, per_source_cap, false) f
         where f.chunk_id = cid;

        if final_rank is not null then
            verdict := 'returned';
            reason := format('returned at rank %s (fused rank %s of a pool of %s%s; lexical rank %s, '
                             'dense rank %s)', final_rank, hit.fused_rank, pool_size,
                             pgfunnel._pool_asked(pool_size, pool_n, k, overfetch),
                             coalesce(hit.lexical_rank::text, '-'), coalesce(hit.dense_rank::text, '-'));
            return next;
            continue;
        end if;

        select count(*) into ahead
          from unnest(w_ids, w_docs, w_lr, w_ls, w_dr, w_ds, w_fr, w_fs)
               as e(chunk_id, document_id, lexical_rank, lexical_score, dense_rank, dense_score,
                  fused_rank, fused_score)
         where e.fused_rank < hit.fused_rank and e.document_id = hit.document_id;
        if ahead >= per_source_cap then
            verdict := 'capped';
            -- says what the cap keeps: "per_source_cap is 1" after "3 chunks rank above it"
            -- read as if three had been kept
            reason := format('fused rank %s is in the pool, but %s of %L %s above it and '
                             'per_source_cap %s keeps only %s per source', hit.fused_rank,
                             case when ahead = 1 then '1 chunk' else ahead || ' chunks' end,
                             found_key, case when ahead = 1 then 'ranks' else 'rank' end,
                             per_source_cap,
                             case when per_source_cap = 1 then 'the best chunk'
                                  else 'the best ' || per_source_cap || ' chunks' end);
        else
            verdict := 'cut at k';
            -- the chunks that stay in the window above it once the cap has run
            select count(*) into kept_above
              from (select row_number() over (partition by e.document_id
                                              order by e.fused_rank) as src_rank
                      from unnest(w_ids, w_docs, w_lr, w_ls, w_dr, w_ds, w_fr, w_fs)
                           as e(chunk_id, document_id, lexical_rank, lexical_score, dense_rank, dense_score,
                              fused_rank, fused_score)
                     where e.fused_rank < hit.fused_rank) o
             where o.src_rank <= per_source_cap;
            reason := format('fused rank %s is in the pool and not capped, but %s before it '
                             'after the per-source cap and k is %s',
                             hit.fused_rank,
                             case when kept_above = 1 then '1 chunk comes'
                                  else kept_above || ' chunks come' end,
                             k);
        end if;
        return next;
    end loop;
exception when others then
    -- the same error without the statements it passed through, _pool's among them (see
    -- _raise_again); explain writes nothing, so its block takes no subtransaction id
    get stacked diagnostics err_state = returned_sqlstate, err_message = message_text,
                            err_detail = pg_exception_detail, err_hint = pg_exception_hint;
    perform pgfunnel._raise_again(err_state, err_message, err_detail, err_hint);
end
$$;

-- one chunk's way through the funnel for one query: a verdict, every stage's rank and
-- score, and a sentence saying why
create or replace function pgfunnel.explain(
    query_text text,
    query_embedding @vector_schema@.vector default null,
    chunk_id bigint default null,
    k integer default 10,
    collection text default 'default',
    principals text[] default '{}',
    tenant text default null,
    language text default null,
    as_of timestamptz default now(),
    metadata_filter jsonb default null,
    fusion text default 'minmax',
    rrf_k double precision default 60,
    weights double precision[] default null,
    lexical_depth integer default null,
    dense_depth integer default null,
    overfetch integer default 4,
    per_source_cap integer default 3,
    ef_search integer default 100,
    k1 double precision default 1.2,
    b double precision default 0.75)
returns table (
    verdict text,
    lexical_rank integer, lexical_score double precision, lexical_exact_score double precision,
    lexical_depth_used integer,
    dense_rank integer, dense_score double precision, dense_exact_score double precision,
    dense_depth_used integer,
    fused_rank integer, fused_score double precision, pool_size integer,
    final_rank integer, citekey text, reason text)
language plpgsql volatile
security invoker
set search_path = pg_catalog, pgfunnel
set jit = off
as $$
declare
    err_state text;
    err_message text;
    err_detail text;
    err_hint text;
begin
    return query
        select e.verdict, e.lexical_rank, e.lexical_score, e.lexical_exact_score,
               e.lexical_depth_used, e.dense_rank, e.dense_score, e.dense_exact_score,
               e.dense_depth_used, e.fused_rank, e.fused_score, e.pool_size, e.final_rank,
               e.citekey, e.reason
          from pgfunnel._explain_chunks(explain.query_text, explain.query_embedding,
                                        array[explain.chunk_id], explain.k,
                                        explain.collection, explain.principals, explain.tenant,
                                        explain.language, explain.as_of,
                                        explain.metadata_filter, explain.fusion, explain.rrf_k,
                                        explain.weights, explain.lexical_depth,
                                        explain.dense_depth, explain.overfetch,
                                        explain.per_source_cap, explain.ef_search, explain.k1,
                                        explain.b) e;
exception when others then
    -- raised again here too: the context then names explain, not the helper's lines
    get stacked diagnostics err_state = returned_sqlstate, err_message = message_text,
                            err_detail = pg_exception_detail, err_hint = pg_exception_hint;
    perform pgfunnel._raise_again(err_state, err_message, err_detail, err_hint);
end
$$;
