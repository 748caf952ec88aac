-- public.funnel_search, in a file of its own: pgfunnel.schema.install_functions runs it
-- only where this role may create it (CREATE on schema public, and any funnel_search
-- there its own) and schema public exists. A schema owner whose database keeps public to
-- its owner (Postgres 15 and later grant PUBLIC no CREATE there), or a database without
-- public, had every `init` fail on this one function; without it searches call
-- pgfunnel.funnel_search(...), and init and doctor say so.

-- funnel_search where applications look for it: in public, so that
-- `select * from funnel_search(...)` works on a default search_path. Postgres inlines it
-- into the calling query (a plain SQL function: stable, no SET clause), so it costs
-- nothing over calling pgfunnel.funnel_search; with `set search_path` it ran as a function
-- of its own and copied every row once more (0.98x the time per search without it). Its
-- body names everything schema-qualified, so the caller's search_path cannot redirect it.
create or replace function public.funnel_search(
    query_text text,
    query_embedding @vector_schema@.vector default null,
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
    b double precision default 0.75,
    trace boolean default false)
returns table (
    chunk_id bigint, citekey text, title text, heading text, text text, ordinal integer,
    metadata jsonb,
    lexical_rank integer, lexical_score double precision,
    dense_rank integer, dense_score double precision,
    fused_rank integer, fused_score double precision,
    rerank_rank integer, rerank_score double precision,
    final_rank integer, search_id bigint, section_path text)
language sql stable
security invoker
as $$
    select f.* from pgfunnel.funnel_search(query_text, query_embedding, k, collection,
        principals, tenant, language, as_of, metadata_filter, fusion, rrf_k, weights,
        lexical_depth, dense_depth, overfetch, per_source_cap, ef_search, k1, b, trace) f
$$;
