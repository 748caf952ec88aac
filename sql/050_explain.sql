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

-- the second search explain runs, which it reads every leg row from: the legs at the
-- depths lex_d and den_d the search used, fused, in one pool that holds all their rows
-- (k of at most 1000, as a search's; the overfetch that makes k x overfetch hold them).
-- bench/explain_cost.py times that run with these, so the two cannot drift apart
create or replace function pgfunnel._wide_pool(lex_d integer, den_d integer,
                                               out k integer, out overfetch integer)
language sql immutable parallel safe
security invoker
set search_path = pg_catalog, pgfunnel
as $$
    select least(1000, lex_d + den_d),
           ceil((lex_d + den_d)::numeric / least(1000, lex_d + den_d))::integer
$$;

-- each chunk's way through the funnel for one query, from one run of it: a verdict, every
-- stage's rank and score, and a sentence saying why; a row per chunk id, in their order.
-- explain() is this for one chunk; explaining a document follows each of its chunks,
-- and a search run per chunk took a second for a document of a hundred. The chunks are
-- then followed in one statement, not a statement each (see below)
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
    wide_overfetch integer;
    messages text;
    -- the chunks asked about that the caller can see
    visible bigint[];
    -- the wide pool, in fused order (see below)
    w_ids bigint[];
    w_docs bigint[];
    w_lr integer[];
    w_ls double precision[];
    w_dr integer[];
    w_ds double precision[];
    w_fr integer[];
    w_fs double precision[];
    -- what final() returned of the pool
    kept_ids bigint[];
    kept_ranks integer[];
    lex_last double precision;
    den_last double precision;
    n_lex integer;
    n_den integer;
    q_terms text[];
    -- the legs the search ran: a leg with weight 0 is not run (see _pool)
    lexical_on boolean;
    dense_on boolean;
    -- whether the dense leg's depth can still be raised to reach a chunk
    den_up boolean;
    lexical_off text;
    dense_off text;
    err_state text;
    err_message text;
    err_detail text;
    err_hint text;
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

    -- the chunks the caller can see, checked as the legs check theirs, all in one call
    visible := (pgfunnel._visible_prefix(
                    chunk_ids, array_fill(0::float8, array[cardinality(chunk_ids)]),
                    cardinality(chunk_ids), principals, _explain_chunks.tenant,
                    _explain_chunks.language, as_of, metadata_filter, coll_id)).chunk_ids;

    -- the wide pool is read only when a chunk asked about is visible: a search for
    -- nothing the caller may see needs no second run
    if cardinality(visible) > 0 then
        -- the fused list of every leg row: the same depths (so the same leg answers and the
        -- same fused scores) with no widening, in a pool that holds all of them; its first
        -- pool_n rows are exactly the search's pool
        select w.k, w.overfetch into wide_k, wide_overfetch
          from pgfunnel._wide_pool(lex_d, den_d) w;
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
                              rrf_k, weights, lex_d, den_d, wide_overfetch,
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

        -- the pool through final(): the cap per citekey, then the cut at k; run once, and
        -- only when a chunk asked about is in the pool
        if exists (select from unnest(w_ids, w_fr) as e(id, fr)
                    where e.fr <= pool_n and e.id = any (visible)) then
            select coalesce(array_agg(f.chunk_id), '{}'), coalesce(array_agg(f.final_rank), '{}')
              into kept_ids, kept_ranks
              from pgfunnel.final(w_ids[:pool_n], w_fr[:pool_n], w_fs[:pool_n], w_lr[:pool_n],
                                  w_ls[:pool_n], w_dr[:pool_n], w_ds[:pool_n], null, k,
                                  collection, principals, tenant, _explain_chunks.language,
                                  as_of, metadata_filter, per_source_cap, false) f;
        end if;
    end if;
    den_up := dense_on and dense_depth_used < 10000;

    -- every chunk in one statement, in the order asked: a loop over the chunks ran a
    -- statement per chunk for its visibility, each exact score, its place in the fused
    -- list and final() (a document of 1,000 chunks: 424 ms against 150, 2.82x;
    -- bench/explain_cost.py)
    return query
    with seen as (
        select distinct c.id, d.citekey
          from unnest(visible) as c(id)
          join pgfunnel.chunk ch on ch.id = c.id
          join pgfunnel.document d on d.id = ch.document_id
    ),
    -- the fused list, with the chunks of a row's document ranked above it, and the
    -- chunks that stay above it once the cap has run: those before it whose rank in
    -- their document is within the cap (the rows before a row come first in every
    -- document's order, so counting among them alone gives the same)
    wide as (
        select o.id, o.lr, o.ls, o.dr, o.ds, o.fr, o.fs, o.ahead,
               count(*) filter (where o.src_rank <= per_source_cap)
                   over (order by o.fr range between unbounded preceding and 1 preceding)
                   as kept_above
          from (select e.id, e.lr, e.ls, e.dr, e.ds, e.fr, e.fs,
                       rank() over (partition by e.doc order by e.fr) - 1 as ahead,
                       row_number() over (partition by e.doc order by e.fr) as src_rank
                  from unnest(w_ids, w_docs, w_lr, w_ls, w_dr, w_ds, w_fr, w_fs)
                       as e(id, doc, lr, ls, dr, ds, fr, fs)) o
    ),
    -- exact scores, whatever the depth: a probe of each chunk's postings, as many as
    -- the chunks asked about whatever the collection holds; BM25 summed over the query
    -- terms in their order, so that a chunk's score does not hang on the plan
    exact as (
        select s.id,
               case when query_text is not null then coalesce(
                   (select sum(pgfunnel._bm25_idf(ts.df, ver.chunk_count) * p.tf * (k1 + 1)
                               / (p.tf + k1 * (1 - b + b * p.length / ver.avg_length))
                               order by p.term)
                      from pgfunnel.posting p
                      join pgfunnel._term_df(ver.version_id, q_terms) ts on ts.term = p.term
                      join pgfunnel.lexical l on l.index_version_id = p.index_version_id
                                             and l.chunk_id = p.chunk_id
                     where p.index_version_id = ver.version_id and p.chunk_id = s.id
                       and p.term = any (array(select distinct unnest(q_terms)))), 0) end
                   as les,
               case when query_embedding is not null then
                   1 - (em.embedding operator(@vector_schema@.<=>) query_embedding) end as des
          from seen s
          left join pgfunnel.embedding em on em.index_version_id = ver.version_id
                                         and em.chunk_id = s.id
    ),
    each_chunk as (
        select a.ord, a.id, s.citekey, w.id as hit, w.lr, w.ls, w.dr, w.ds, w.fr, w.fs,
               w.ahead, w.kept_above, x.les, x.des, kept_ranks[array_position(kept_ids, a.id)] as fin,
               s.id is not null as is_seen,
               lexical_on and x.les > 0 and lexical_depth_used < 10000 as lex_up
          from unnest(chunk_ids) with ordinality as a(id, ord)
          left join seen s on s.id = a.id
          left join wide w on w.id = s.id
          left join exact x on x.id = s.id
    )
    select r.id,
           case when not r.is_seen then 'filtered out or does not exist'
                when r.hit is null then 'in no leg at its depth'
                when r.fr > pool_n then 'not in pool'
                when r.fin is not null then 'returned'
                when r.ahead >= per_source_cap then 'capped'
                else 'cut at k' end,
           r.lr, r.ls, r.les, lexical_depth_used, r.dr, r.ds, r.des, dense_depth_used,
           r.fr, r.fs, pool_size, r.fin, r.citekey,
           case when not r.is_seen then
                format('chunk %s does not exist in collection %L, or is not visible with '
                       'these principals, tenant, language, as_of and metadata filter',
                       r.id, collection)
                when r.hit is null then
                -- a leg that did not run, or a chunk holding no query term, is not reached by
                -- any depth: the advice names the depths that could reach it
                format('not in the lexical top %s%s nor in the dense top %s%s; %s',
                    coalesce(lexical_depth_used::text, lexical_off),
                    case when not lexical_on then ''
                         when r.les = 0 then ' (it shares no query term)'
                         else format(' (its BM25 score %s; rank %s, the last the leg read, has %s)',
                                     round(r.les::numeric, 4), n_lex,
                                     coalesce(round(lex_last::numeric, 4)::text, '-')) end,
                    coalesce(dense_depth_used::text, dense_off),
                    case when not dense_on or r.des is null then ''
                         else format(' (its cosine similarity %s; rank %s, the last the leg read, has %s)',
                                     round(r.des::numeric, 4), n_den,
                                     coalesce(round(den_last::numeric, 4)::text, '-')) end,
                    -- a depth is raised up to 10000, the most a leg reads (a deeper one is an error)
                    case when r.lex_up and den_up
                             then 'raise lexical_depth/dense_depth or rephrase the query'
                         when r.lex_up then 'raise lexical_depth or rephrase the query'
                         when den_up then 'raise dense_depth or rephrase the query'
                         when dense_on or (r.les > 0 and lexical_on)
                             then 'rephrase the query (a leg reads at most 10000 rows, and the legs '
                                  'that could reach it read that many)'
                         when r.les > 0 then 'give the lexical leg a weight above 0'
                         else 'no depth reaches it: the query needs one of its words, or an embedding '
                              'for the dense leg' end)
                when r.fr > pool_n then
                format('lexical rank %s, dense rank %s, but fused rank %s is beyond the pool '
                       'of %s (k %s x overfetch %s%s); %s',
                       coalesce(r.lr::text, '-'), coalesce(r.dr::text, '-'),
                       r.fr, pool_n, k, overfetch,
                       case when pool_n > k * overfetch
                            then ', widened so that the per-source cap could fill k' else '' end,
                       -- overfetch above 100 is an error: the pool then grows with k only
                       case when overfetch < 100 then 'raise overfetch'
                            else 'overfetch is at its most (100), so raise k' end)
                when r.fin is not null then
                format('returned at rank %s (fused rank %s of a pool of %s%s; lexical rank %s, '
                       'dense rank %s)', r.fin, r.fr, pool_size,
                       pgfunnel._pool_asked(pool_size, pool_n, k, overfetch),
                       coalesce(r.lr::text, '-'), coalesce(r.dr::text, '-'))
                -- says what the cap keeps: "per_source_cap is 1" after "3 chunks rank above it"
                -- read as if three had been kept
                when r.ahead >= per_source_cap then
                format('fused rank %s is in the pool, but %s of %L %s above it and '
                       'per_source_cap %s keeps only %s per source', r.fr,
                       case when r.ahead = 1 then '1 chunk' else r.ahead || ' chunks' end,
                       r.citekey, case when r.ahead = 1 then 'ranks' else 'rank' end,
                       per_source_cap,
                       case when per_source_cap = 1 then 'the best chunk'
                            else 'the best ' || per_source_cap || ' chunks' end)
                else
                format('fused rank %s is in the pool and not capped, but %s before it '
                       'after the per-source cap and k is %s',
                       r.fr,
                       case when r.kept_above = 1 then '1 chunk comes'
                            else r.kept_above || ' chunks come' end,
                       k) end
      from each_chunk r
     order by r.ord;
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
