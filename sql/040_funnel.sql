-- pgfunnel: fusion, the candidate pool, the per-source cap, and funnel_search.
--
-- candidates() runs both legs and fuses them into a pool of k * overfetch chunks (wider
-- when the per-source cap could not fill k from it);
-- final() takes the pool in the order the caller settled on (fused order, or the
-- reranker's), applies the per-citekey cap, cuts to k and writes the trace.
-- funnel_search() is exactly final(candidates()) with no rerank in between.

-- check the search parameters shared by candidates() and final(); errors name the parameter
drop function if exists pgfunnel._check_search_params(integer, text[], integer, integer);
create or replace function pgfunnel._check_search_params(
    k integer, principals text[], overfetch integer, per_source_cap integer,
    metadata_filter jsonb)
returns void
language plpgsql immutable
security invoker
set search_path = pg_catalog, pgfunnel
as $$
declare
    -- not '\s', which follows the collation (_space_edged_pattern)
    edged constant text := pgfunnel._space_edged_pattern();
begin
    if k is null or k < 1 or k > 1000 then
        perform pgfunnel._bad_parameter('k', format('must be between 1 and 1000, got %s', coalesce(k::text, 'NULL')));
    end if;
    if principals is null then
        -- NULL must never mean "everyone": passing no principals ('{}') means public only
        raise exception using errcode = '22004',
            message = 'principals: must not be NULL; pass ''{}'' to see public documents only';
    end if;
    if array_ndims(principals) > 1 then
        -- Postgres' own refusal ("searching for elements in multidimensional arrays is not
        -- supported") would name neither the parameter nor the fix
        perform pgfunnel._bad_parameter('principals',
            format('must be a one-dimensional array of principals, got %s', principals));
    end if;
    if array_position(principals, null) is not null then
        -- a NULL among them is a caller's missing identity, not a principal to match
        raise exception using errcode = '22004',
            message = format('principals: must not contain NULL, got %s',
                             case when length(principals::text) > 1000
                                  then left(principals::text, 1000) || format(
                                       '... (%s principals)', cardinality(principals))
                                  else principals::text end);
    end if;
    if array_position(principals, '') is not null then
        -- so is an empty one (no document can name it: ingest refuses empty readers)
        perform pgfunnel._bad_parameter('principals',
            format('must not contain an empty string, got %s', principals));
    end if;
    if exists (select 1 from unnest(principals) as u(p) where u.p ~ edged) then
        -- nor one that begins or ends with whitespace, which ingest refuses as a reader
        perform pgfunnel._bad_parameter('principals',
            format('must not begin or end with whitespace, got %s', principals));
    end if;
    if metadata_filter is not null and jsonb_typeof(metadata_filter) <> 'object' then
        -- a document's metadata is an object, which never contains an array, a scalar or
        -- JSON null: such a filter would silently hide everything
        perform pgfunnel._bad_parameter('metadata_filter',
            format('must be a JSON object (or SQL NULL for no filter), got %s',
                   case when jsonb_typeof(metadata_filter) = 'null' then 'JSON null'
                        else format('a JSON %s: %s', jsonb_typeof(metadata_filter),
                                    metadata_filter) end));
    end if;
    if overfetch is null or overfetch < 1 or overfetch > 100 then
        perform pgfunnel._bad_parameter('overfetch', format('must be between 1 and 100, got %s', coalesce(overfetch::text, 'NULL')));
    end if;
    if per_source_cap is null or per_source_cap < 1 then
        perform pgfunnel._bad_parameter('per_source_cap', format('must be at least 1, got %s', coalesce(per_source_cap::text, 'NULL')));
    end if;
end
$$;

-- check the tenant and language filters: NULL (no filter) or a name. An empty string
-- matches no document (ingest refuses it for both), so a search would come back empty
-- without saying why.
create or replace function pgfunnel._check_scope_params(tenant text, language text)
returns void
language plpgsql immutable
security invoker
set search_path = pg_catalog, pgfunnel
as $$
declare
    -- not '\s', which follows the collation (_space_edged_pattern)
    edged constant text := pgfunnel._space_edged_pattern();
begin
    if tenant = '' then
        perform pgfunnel._bad_parameter('tenant', 'must be a non-empty string or NULL, got ''''');
    end if;
    if language = '' then
        perform pgfunnel._bad_parameter('language', 'must be a non-empty string or NULL, got ''''');
    end if;
    -- nor one with whitespace at either end: ingest refuses it, so nothing would match
    if tenant ~ edged then
        perform pgfunnel._bad_parameter('tenant',
            format('must not begin or end with whitespace, got %L', tenant));
    end if;
    if language ~ edged then
        perform pgfunnel._bad_parameter('language',
            format('must not begin or end with whitespace, got %L', language));
    end if;
end
$$;

-- every search parameter's value, checked as a search checks it (true, or an error naming
-- the parameter); the API runs it before the model loads on the first search, so a bad
-- value is not told only seconds later
create or replace function pgfunnel._check_funnel_params(
    query_text text, k integer, principals text[], overfetch integer, per_source_cap integer,
    metadata_filter jsonb, fusion text, rrf_k double precision, weights double precision[],
    lexical_depth integer, dense_depth integer, ef_search integer,
    k1 double precision, b double precision, as_of timestamptz)
returns boolean
language plpgsql immutable
security invoker
set search_path = pg_catalog, pgfunnel
as $$
begin
    perform pgfunnel._check_search_params(k, principals, overfetch, per_source_cap,
                                          metadata_filter);
    if length(query_text) > pgfunnel._query_limit() then
        perform pgfunnel._bad_parameter('query_text',
            format('is %s characters long; the limit is %s', length(query_text),
                   pgfunnel._query_limit()));
    end if;
    if fusion is null or fusion not in ('rrf', 'minmax', 'zscore') then
        perform pgfunnel._bad_parameter('fusion',
            format('unknown fusion %L (use rrf, minmax or zscore)', fusion));
    end if;
    -- NaN sorts above every number in Postgres, so it passes `> 0` and is named here; far
    -- above 1e6 a weight over (rrf_k + rank) underflows, which Postgres raises as an error
    if rrf_k is null or not (rrf_k > 0 and rrf_k <= 1e6) then
        perform pgfunnel._bad_parameter('rrf_k', format('must be a positive number up to 1e6, got %s', coalesce(rrf_k::text, 'NULL')));
    end if;
    -- NULL picks the defaults (_default_weights), which pass
    if weights is not null and (cardinality(weights) <> 2 or array_ndims(weights) <> 1
       or not coalesce(weights[1] >= 0 and weights[2] >= 0
                       -- weights are relative; far beyond this a weighted score overflows,
                       -- and far below 1e-6 one underflows (an error in Postgres)
                       and weights[1] <= 1e6 and weights[2] <= 1e6
                       and (weights[1] = 0 or weights[1] >= 1e-6)
                       and (weights[2] = 0 or weights[2] >= 1e-6)
                       and weights[1] + weights[2] > 0, false)) then
        perform pgfunnel._bad_parameter('weights',
            format('must be two numbers {lexical,dense}, each 0 or from 1e-6 to 1e6, not both zero; got %s',
                   coalesce(weights::text, 'NULL')));
    end if;
    if k1 is null or not (k1 >= 0) or k1 > 100 then
        perform pgfunnel._bad_parameter('k1', format('must be between 0 and 100, got %s', coalesce(k1::text, 'NULL')));
    end if;
    if b is null or not (b >= 0 and b <= 1) then
        perform pgfunnel._bad_parameter('b', format('must be between 0 and 1, got %s', coalesce(b::text, 'NULL')));
    end if;
    if ef_search is null or ef_search < 1 or ef_search > 1000 then
        perform pgfunnel._bad_parameter('ef_search', format('must be between 1 and 1000, got %s', coalesce(ef_search::text, 'NULL')));
    end if;
    if as_of is null then
        perform pgfunnel._bad_parameter('as_of', 'must not be NULL');
    end if;
    if lexical_depth < 1 or lexical_depth > 10000 then
        perform pgfunnel._bad_parameter('lexical_depth', format('must be between 1 and 10000, got %s', lexical_depth));
    end if;
    if dense_depth < 1 or dense_depth > 10000 then
        perform pgfunnel._bad_parameter('dense_depth', format('must be between 1 and 10000, got %s', dense_depth));
    end if;
    return true;
end
$$;

-- whether a traced search can write its trace, checked before it runs. In a read-only
-- transaction (a hot standby, default_transaction_read_only, set transaction read only)
-- it cannot: SQLSTATE 25006, the error Postgres gives there, instead of "cannot execute
-- INSERT in a read-only transaction" once the search is done. Under row-level security
-- a trace is written only as the reader in the settings (exactly those principals and
-- that tenant: another reader must not find rows in it that it could not have seen), so
-- a traced search that narrows them is refused as such (42501), instead of "new row
-- violates row-level security policy for table search_log".
drop function if exists pgfunnel._check_trace_writable();
create or replace function pgfunnel._check_trace_writable(principals text[], tenant text)
returns void
language plpgsql stable
security invoker
set search_path = pg_catalog, pgfunnel
as $$
declare
    reader text[];
begin
    if current_setting('transaction_read_only')::boolean then
        raise exception using errcode = '25006',
            message = 'trace: a traced search writes search_log and search_trace, and this '
                      'transaction is read-only (a hot standby, default_transaction_read_only '
                      '= on, or set transaction read only); search with tracing off here, '
                      'or trace on the primary';
    end if;
    -- (principals NULL: the read-only check alone, for a caller that sets the settings
    -- itself afterwards; a member of pgfunnel_writer may write any trace)
    if principals is not null and row_security_active('pgfunnel.search_log'::regclass)
       and not exists (select 1 from pg_catalog.pg_roles r
                        where r.rolname = 'pgfunnel_writer'
                          and pg_catalog.pg_has_role(r.oid, 'USAGE')) then
        reader := pgfunnel._rls_principals();
        if reader is null or not (principals operator(pg_catalog.<@) reader
                                  and principals operator(pg_catalog.@>) reader)
           or _check_trace_writable.tenant is distinct from pgfunnel._rls_tenant() then
            raise exception using errcode = '42501',
                message = format('trace: under row-level security a trace is written as the '
                                 'reader in the settings, pgfunnel.principals %s and '
                                 'pgfunnel.tenant %s, and this search was asked for '
                                 'principals %s and tenant %s; trace with exactly the '
                                 'settings'' reader (set the settings to the narrower one), '
                                 'or search untraced',
                                 coalesce(to_jsonb(reader)::text, 'unset'),
                                 coalesce(quote_literal(pgfunnel._rls_tenant()), 'unset'),
                                 to_jsonb(principals)::text,
                                 coalesce(quote_literal(_check_trace_writable.tenant), 'none'));
        end if;
    end if;
end
$$;

-- found_terms without those of ``terms`` that no chunk a search with these filters may
-- see holds, for the notice of _pool (the collection-wide df counts hidden chunks too).
-- A term a row of the lexical leg (``hits``, all visible) holds is seen after one index
-- probe a row; only a term none of them holds has its postings read, with the visibility
-- check, until one is visible.
create or replace function pgfunnel._terms_seen(
    version_id integer, found_terms text[], terms text[], hits bigint[], principals text[],
    tenant text, language text, as_of timestamptz, metadata_filter jsonb)
returns text[]
language plpgsql stable
security invoker
set search_path = pg_catalog, pgfunnel
as $$
declare
    unseen text[] := '{}';
    t text;
    held boolean;
    -- past 8 posting partitions each statement is planned per call, pruned to the
    -- version's partition before anything is locked (see _lexical_hits)
    per_search boolean := exists (select from pg_catalog.pg_inherits i
                                   where i.inhparent = 'pgfunnel.posting'::pg_catalog.regclass
                                  offset 8);
begin
    -- term by term, each read a statement of its own: as one statement with two NOT
    -- EXISTS, Postgres made both anti-joins and read every posting of every term with
    -- the visibility check (a common word's thousands) even where the first row held it
    foreach t in array coalesce(terms, '{}') loop
        if per_search then
            execute $q$
                select exists (select from unnest($1::bigint[]) as h(id)
                                 join pgfunnel.posting p on p.chunk_id = h.id
                                where p.index_version_id = $2 and p.term = $3 collate "C")$q$
               into held using coalesce(hits, '{}'), version_id, t;
        else
            select exists (select from unnest(coalesce(hits, '{}')) as h(id)
                             join pgfunnel.posting p on p.chunk_id = h.id
                            where p.index_version_id = _terms_seen.version_id
                              and p.term = t collate "C")
              into held;
        end if;
        if not held then
            if per_search then
                execute $q$
                    select exists (select from pgfunnel.posting p
                                     join pgfunnel.chunk ch on ch.id = p.chunk_id
                                     join pgfunnel.document d on d.id = ch.document_id
                                    where p.index_version_id = $1 and p.term = $2 collate "C"
                                      and pgfunnel._document_visible(d, $3, $4, $5, $6, $7))$q$
                   into held using version_id, t, principals, tenant, language, as_of,
                                   metadata_filter;
            else
                select exists (select from pgfunnel.posting p
                                 join pgfunnel.chunk ch on ch.id = p.chunk_id
                                 join pgfunnel.document d on d.id = ch.document_id
                                where p.index_version_id = _terms_seen.version_id
                                  and p.term = t collate "C"
                                  and pgfunnel._document_visible(d, principals,
                                          _terms_seen.tenant, _terms_seen.language,
                                          as_of, metadata_filter))
                  into held;
            end if;
        end if;
        if not held then
            unseen := unseen || t;
        end if;
    end loop;
    if cardinality(unseen) = 0 then
        return found_terms;
    end if;
    return array(select f.term from unnest(found_terms) as f(term)
                  where f.term <> all (unseen));
end
$$;

-- both legs, fused: the pool of k * overfetch chunks as arrays in fused order, with
-- every per-leg rank and score and each chunk's document. Stable, so both legs read one
-- snapshot.
--
-- A pool the per-source cap cannot fill k from (its chunks come from too few documents:
-- one long document can hold every row of a leg) is widened while there may be more to
-- find: the full legs are read four times deeper (those whose depth the caller left to
-- the default) and the pool is four times larger, at most twice, and no further once a
-- round brings no new document. Without that, a lexical-only search on pydocs for
-- `test.support.warnings_helper module` returned 7 rows at k 10 while thousands of
-- chunks of other pages match `module`. `refill` false keeps the depths and pool as
-- given (explain, which replays a search at the depths it used). The depths and pool
-- size used come back with the pool.
-- whether a query is one identifier as typed (snake_case, dotted, ::, camelCase or an
-- acronym run into a word, a trailing "()"): `get_attribute_history`, `os.path.join`,
-- `DBAPIError`, `BZ2Compressor`, `dumps()`; `unpickle` and two words are not
create or replace function pgfunnel._identifier_query(query_text text)
returns boolean
language plpgsql immutable parallel safe
security invoker
set search_path = pg_catalog
as $$
begin
    return coalesce(btrim(query_text) ~ '^\S+$'
           and (btrim(query_text) ~ '[[:alnum:]]_[[:alnum:]]|\w\.\w|::|[a-z][A-Z]|\(\)$'
                or btrim(query_text) ~ '^[A-Z][A-Z0-9]*[A-Z][a-z]'), false);
end
$$;

-- the weight pairs {lexical,dense} a search chooses when it is given none, each named by
-- its rule: `default`, `identifier` (a query that is one identifier, or one whose best
-- lexical match holds its rare number) and `dense_leads` (the best lexical match holds
-- little of the query). _default_weights and _pool's second rule read them here, and so
-- does the replay of a search logged before its notes said whether its weights were given
-- (LOGGED_PARAMS in pgfunnel/versions.py, through the listing below): a pair that is one
-- of these was chosen, so the replay chooses again; a pair written anywhere else would be
-- replayed as given. plpgsql, as _default_weights below (which says why): a search calls
-- it. A rule's pair by its name rather than by scanning the listing: the scan (a
-- set-returning call, `select ... into strict ... where rule = ...`) took 4.0 us a lookup
-- against this form's 0.55 us, and funnel_search (a search calls it once or twice)
-- 1.217 ms against 1.202 ms, slower in 34 of 40 interleaved rounds (median ratio 1.013;
-- the sample corpus on the embedded Postgres, four queries with their embeddings)
create or replace function pgfunnel._automatic_weights(rule text)
returns double precision[]
language plpgsql immutable parallel safe
security invoker
set search_path = pg_catalog
as $$
begin
    -- a rule name that is not here is an error (case_not_found), not NULL weights
    case rule
        when 'default' then return '{1,0.7}'::double precision[];
        when 'identifier' then return '{1,0.2}'::double precision[];
        when 'dense_leads' then return '{0.7,1}'::double precision[];
    end case;
end
$$;

-- every rule with its pair, for what lists them (LOGGED_PARAMS, the tests)
create or replace function pgfunnel._automatic_weights()
returns table (rule text, weights double precision[])
language plpgsql immutable parallel safe
security invoker
set search_path = pg_catalog
as $$
begin
    return query select r.rule, pgfunnel._automatic_weights(r.rule)
                   from unnest(array['default', 'identifier', 'dense_leads']) as r(rule);
end
$$;

-- the fusion weights a search uses when it gives none: {1,0.7}, and for min-max fusion of
-- a query that is one identifier {1,0.2}. The dense model reads a bare identifier poorly
-- (nDCG@10 of the dense leg alone on identifier queries: 0.32 - 0.81 over five doc sets),
-- while BM25 finds the chunk that defines it, and at 0.7 a chunk that both legs rank
-- moderately outscored it (docs/tuning.md has the measurements).
-- This helper, _identifier_query, _term_df and analyzers() are plpgsql rather than sql:
-- with a SET clause Postgres cannot inline them, and before 18 it plans a sql function's
-- body again at every call, where plpgsql keeps the plan for the session
create or replace function pgfunnel._default_weights(query_text text, fusion text)
returns double precision[]
language plpgsql immutable parallel safe
security invoker
set search_path = pg_catalog, pgfunnel
as $$
begin
    return pgfunnel._automatic_weights(
        case when fusion = 'minmax' and pgfunnel._identifier_query(query_text)
             then 'identifier' else 'default' end);
end
$$;

drop function if exists pgfunnel._pool(text, @vector_schema@.vector, integer, text, text[], text,
    text, timestamptz, jsonb, text, double precision, double precision[], integer, integer,
    integer, integer, integer, double precision, double precision);
-- the form before weights_used joined its results (a new out column cannot be replaced in
-- place)
do $$
begin
    if exists (select from pg_catalog.pg_proc p
                where p.pronamespace = 'pgfunnel'::regnamespace and p.proname = '_pool'
                  and not ('weights_used' = any (p.proargnames))) then
        drop function pgfunnel._pool(text, @vector_schema@.vector, integer, text, text[], text,
            text, timestamptz, jsonb, text, double precision, double precision[], integer,
            integer, integer, integer, integer, double precision, double precision, boolean);
    end if;
end
$$;
create or replace function pgfunnel._pool(
    query_text text, query_embedding @vector_schema@.vector, k integer, collection text,
    principals text[], tenant text, language text, as_of timestamptz, metadata_filter jsonb,
    fusion text, rrf_k double precision, weights double precision[],
    lexical_depth integer, dense_depth integer, overfetch integer, per_source_cap integer,
    ef_search integer, k1 double precision, b double precision, refill boolean default true,
    out chunk_ids bigint[], out fused_ranks integer[], out fused_scores double precision[],
    out lexical_ranks integer[], out lexical_scores double precision[],
    out dense_ranks integer[], out dense_scores double precision[],
    out document_ids bigint[], out lexical_depth_used integer, out dense_depth_used integer,
    out pool_size integer, out weights_used double precision[])
language plpgsql stable
security invoker
set search_path = pg_catalog, pgfunnel
-- a custom plan would be re-made on every search (see 030_legs.sql)
set plan_cache_mode = force_generic_plan
set jit = off
as $$
declare
    coll_id integer;
    version_id integer;
    dims integer;
    analyzer_name text;
    lex_depth integer;
    den_depth integer;
    q_terms text[] := '{}';
    q_positions integer[];
    -- a query of nothing but question words, read as words (below)
    bare_terms text[];
    bare_positions integer[];
    bare_dropped text[];
    -- the clitics the first pass dropped (`gibt's`), which the second drops too
    clitic_positions integer[];
    n_chunks bigint;
    -- the share of the query's idf the version holds, and the share its best lexical
    -- match holds (see below)
    coverage double precision;
    best_coverage double precision;
    rarest_missed double precision;
    rarest_number_held double precision;
    check_held boolean;
    check_best boolean;
    best_terms text[];
    weights_given boolean := weights is not null;
    -- the rule that chose the weights (_automatic_weights), NULL for weights given
    weights_rule text;
    dropped text[];
    q_norm double precision;
    w_lex double precision;
    w_den double precision;
    lex record;
    den record;
    l_lo double precision;
    l_hi double precision;
    l_mu double precision;
    l_sd double precision;
    d_lo double precision;
    d_hi double precision;
    d_mu double precision;
    d_sd double precision;
    all_visible boolean;
    checked boolean;
    lexical_on boolean;
    dense_on boolean;
    run_lexical boolean;
    run_dense boolean;
    capacity integer;
    n_sources integer;
    prev_sources integer := -1;
    widened integer := 0;
    absent_codes text[];
    -- the query words with an absent code, the terms the version holds of those words,
    -- and whether it holds a term of any other word
    code_words integer[];
    code_parts text[];
    other_held boolean;
    -- the query terms a chunk the search may see holds (the notice below)
    seen_terms text[];
begin
    checked := pgfunnel._check_funnel_params(query_text, k, principals, overfetch, per_source_cap,
                                             metadata_filter, fusion, rrf_k, weights,
                                             lexical_depth, dense_depth, ef_search, k1, b,
                                             as_of);
    perform pgfunnel._check_scope_params(tenant, language);
    if query_text is null and query_embedding is null then
        perform pgfunnel._bad_parameter('query_text',
            'query_text and query_embedding are both NULL; give at least one');
    end if;
    if weights is null then
        weights := pgfunnel._default_weights(query_text, fusion);
        -- named by its pair, so that the identifier test is not run a second time
        weights_rule := case when weights = pgfunnel._automatic_weights('identifier')
                             then 'identifier' else 'default' end;
    end if;
    -- A leg with weight 0 has no vote: its rows could only fill the pool behind the
    -- others at a fused score of 0, in chunk-id order, so it is not run (`{1,0}` is the
    -- lexical leg alone, as `query_embedding => null` would be). When that leaves no leg
    -- to run, the weights are what is wrong.
    lexical_on := query_text is not null and weights[1] > 0;
    dense_on := query_embedding is not null and weights[2] > 0;
    if not (lexical_on or dense_on) then
        perform pgfunnel._bad_parameter('weights',
            format('%s gives weight 0 to the %s leg, the only one this search can run (%s is NULL)',
                   weights, case when query_text is null then 'dense' else 'lexical' end,
                   case when query_text is null then 'query_text' else 'query_embedding' end));
    end if;

    pool_size := k * overfetch;
    -- the default depth follows the pool up to the most a leg reads (k 1000 x overfetch
    -- 11 is a pool of 11,000 that two legs of 10,000 still fill)
    lex_depth := coalesce(lexical_depth, least(greatest(pool_size, 40), 10000));
    den_depth := coalesce(dense_depth, least(greatest(pool_size, 40), 10000));

    select c.id, v.id, v.dimensions, v.analyzer, v.chunk_count
      into coll_id, version_id, dims, analyzer_name, n_chunks
      from pgfunnel.collection c
      join pgfunnel.index_version v on v.collection_id = c.id and v.state = 'active'
     where c.name = collection;
    if version_id is null then
        -- raises the error that names what is missing: the collection or its active version
        perform pgfunnel._active_version(pgfunnel._collection_id(collection));
    end if;

    if query_embedding is not null then
        if @vector_schema@.vector_dims(query_embedding) <> dims then
            -- most often a vector from another model: the hint names the one to use, read
            -- here rather than with the version above, which every search pays for
            raise exception using errcode = '2200G',
                message = format('query_embedding: has %s dimensions; the active index '
                                 'version of %L expects %s',
                                 @vector_schema@.vector_dims(query_embedding), collection, dims),
                hint = format('embed the query with that version''s model, %s: `pgfunnel '
                              'embed TEXT -c %s` prints the vector as a literal',
                              (select v.embedding_model from pgfunnel.index_version v
                                where v.id = version_id),
                              pgfunnel._shell_word(collection));
        end if;
        q_norm := @vector_schema@.vector_norm(query_embedding);
        if q_norm = 0 then
            perform pgfunnel._bad_vector('query_embedding',
                'is the zero vector, which has no cosine similarity to anything');
        end if;
        -- pgvector compares in single precision: the squares of a much shorter or longer
        -- vector underflow or overflow, and every chunk would score the same
        if not (q_norm between 1e-12 and 1e12) then
            perform pgfunnel._bad_vector('query_embedding',
                format('has length (L2 norm) %s; cosine similarity in single precision needs '
                       'between 1e-12 and 1e12 (normalise the vector)', q_norm));
        end if;
    end if;

    all_visible := pgfunnel._all_visible(coll_id, language, metadata_filter);
    if lexical_on then
        -- one pass of the analyzer gives both the terms and the words not searched: those
        -- of which no part is left (`s3` loses its stop word `s` but is searched)
        select coalesce(array_agg(t.term order by t.token_position)
                            filter (where t.term is not null), '{}'),
               coalesce(array_agg(t.token_position order by t.token_position)
                            filter (where t.term is not null), '{}'),
               coalesce(array_agg(distinct
                                  case when length(t.token) > 100
                                       then format('%s... (%s characters; a term has at most 100)',
                                                   left(t.token, 20), length(t.token))
                                       else t.token end) filter (where t.unsearched), '{}'),
               coalesce(array_agg(t.token_position)
                            filter (where t.dropped = 'letter after an apostrophe'), '{}')
          into q_terms, q_positions, dropped, clitic_positions
          from (select e.token_position, e.token, e.term, e.dropped,
                       bool_and(e.term is null) over (partition by e.token_position) as unsearched
                  from pgfunnel._analyze_pass(array[query_text], analyzer_name,
                                              pgfunnel._question_words(analyzer_name)) e) t;
        if cardinality(q_terms) = 0 and cardinality(dropped) > 0 then
            -- nothing left: question words (`explain`, `tell`) are then searched as
            -- words, as analyze_each(..., for_query => true) reads such a text; the
            -- clitics stay dropped (`Gibt's` alone searched `s`). The words this read
            -- leaves unsearched, stop words with the clitics (`explain it`: `it`), are
            -- the notice's, as dropped_query_words names them
            select coalesce(array_agg(w.term order by w.token_position)
                                filter (where not w.clitic and w.term is not null), '{}'),
                   coalesce(array_agg(w.token_position order by w.token_position)
                                filter (where not w.clitic and w.term is not null), '{}'),
                   coalesce(array_agg(distinct
                                      case when length(w.token) > 100
                                           then format('%s... (%s characters; a term has at '
                                                       'most 100)', left(w.token, 20),
                                                       length(w.token))
                                           else w.token end)
                                filter (where w.unsearched), '{}')
              into bare_terms, bare_positions, bare_dropped
              from (select e.token_position, e.token, e.term, c.clitic,
                           bool_and(c.clitic or e.term is null)
                               over (partition by e.token_position) as unsearched
                      from pgfunnel._analyze_pass(array[query_text], analyzer_name, '{}') e,
                           lateral (select e.token_position = any (clitic_positions)
                                               as clitic) c) w;
            if cardinality(bare_terms) > 0 then
                q_terms := bare_terms;
                q_positions := bare_positions;
                dropped := bare_dropped;
            end if;
        end if;
        if cardinality(q_terms) = 0 then
            raise warning using message = format(
                'pgfunnel: no searchable term left in query_text (dropped: %s); the lexical leg is empty%s',
                coalesce(nullif(array_to_string(dropped, ', '), ''),
                         case when pg_catalog.btrim(query_text, E' \t\n\r\f\v') = ''
                              then 'the query is empty' else 'nothing but punctuation' end),
                -- and with no dense leg nothing else runs: said, not left to an empty
                -- result to tell. A query embedding given at weight 0 is not "no query
                -- embedding"
                case when dense_on then ''
                     when query_embedding is null
                         then ' and no query embedding was given: no results'
                     else format(' and weights %s give the dense leg weight 0, so it does '
                                 'not run: no results', weights) end);
        elsif cardinality(dropped) > 0 then
            raise notice using message = format('pgfunnel: query words not searched: %s',
                                                array_to_string(dropped, ', '));
        end if;
    end if;
    -- a leg that does not run (no text, no vector, weight 0) is empty; the others are
    -- read below
    if not lexical_on then
        select '{}'::bigint[] as chunk_ids, '{}'::float8[] as scores, 1::float8 as visible_share,
               '{}'::text[] as found_terms, '{}'::float8[] as found_idf
          into lex;
    end if;
    if not dense_on then
        select '{}'::bigint[] as chunk_ids, '{}'::float8[] as scores into den;
    end if;
    run_lexical := lexical_on;
    run_dense := dense_on;

    loop
        if run_lexical then
            lex := pgfunnel._lexical_hits(version_id, q_terms, lex_depth, k1, b, principals, tenant,
                                          language, as_of, metadata_filter, coll_id, all_visible);
        end if;
        if run_dense then
            den := pgfunnel._dense_hits(version_id, query_embedding, den_depth, ef_search,
                                        principals, tenant, language, as_of, metadata_filter, coll_id,
                                        coalesce(lex.visible_share, 1), n_chunks, all_visible);
        end if;

        -- Two shares of the query's idf, counted per word, read in one pass when either
        -- rule below needs one: `coverage`, what the version holds, and `best_coverage`,
        -- what the best lexical match holds. A word with an indexed term (an identifier
        -- counts when its whole form or any part is indexed) brings the idf of its rarest
        -- indexed term, an absent word the idf of a term in no chunk.
        --
        -- Default weights, second rule (min-max fusion; the first, for a query that is one
        -- identifier, is _default_weights): when the best lexical match holds under 0.4 of
        -- the query's idf, less than one half of a two-part question, BM25 matched the
        -- query's leftovers (`coupon for the enterprise plan` -> `enterprise plan`), and the
        -- legs swap roles: {0.7,1}. So they do when the best match lacks the query's rarest
        -- word that the version holds, and that word is 0.4 or more of the query's idf:
        -- the query's common words outvoted the one that decides it (`clang command line
        -- option -fPIE`: chunks holding the four common words scored 13 - 14, the
        -- option's own four-word chunk 10.8). One probe of the postings of that chunk; a
        -- one-word query's best match holds its word, so it is not probed. Measured on six
        -- sets (docs/tuning.md): the help center's paraphrases 0.778 -> 0.809 (dense alone
        -- 0.813), no slice of the five documentation sets moved (their queries are index
        -- entries, which the best match nearly always holds). The other way round, when
        -- the best match holds the query's rarest word, and that word is a number and 0.3
        -- or more of the query's idf, BM25 found the number that decides the query (`RFC
        -- RFC 6125`), which the dense model reads poorly: the identifier weights {1,0.2}.
        -- (0.3, not 0.4: Sphinx words a PEP's index entry `Python Enhancement Proposals
        -- PEP 487`, where the number is the rarest word by far but 0.38 of the idf.)
        --
        -- Vocabulary mismatch: BM25 ranks on the query words the version holds and is blind
        -- to the rest, so a query whose words are partly absent (a synonym, a product name
        -- the documents never use) gets a lexical ranking built from its leftovers, usually
        -- its commonest words. The lexical weight is scaled by the share of the query's idf
        -- that the version holds. Absent words tend to be the informative ones, so a count
        -- of words overstated what BM25 could still see when only "plan" and "monthly"
        -- were left. Only when both legs run: alone, a leg's weight changes no order.
        -- (every query term held: every word covered, a share of exactly 1, no read needed)
        check_best := not weights_given and fusion = 'minmax' and widened = 0
                      and dense_on and cardinality(lex.chunk_ids) > 0
                      and q_positions[1] <> q_positions[cardinality(q_positions)];
        check_held := lexical_on and dense_on and cardinality(q_terms) > 0
                      and not q_terms operator(pg_catalog.<@) lex.found_terms;
        best_coverage := null;
        rarest_missed := null;
        rarest_number_held := null;
        if check_best then
            -- the query terms the best match holds, read apart from the shares below: it
            -- reads the partitioned posting table, so past 8 partitions it is planned per
            -- search, pruned to the version's partition before anything is locked (see
            -- _lexical_hits); the cached plan locked every version's partition on every
            -- search (400 with a collection per customer). Both forms must stay the same
            -- statement.
            if exists (select from pg_catalog.pg_inherits i
                        where i.inhparent = 'pgfunnel.posting'::pg_catalog.regclass
                       offset 8) then
                execute $q$
                    select coalesce(array_agg(p.term), '{}') from pgfunnel.posting p
                     where p.index_version_id = $1 and p.term = any ($2)
                       and p.chunk_id = $3$q$
                   into best_terms using version_id, q_terms, lex.chunk_ids[1];
            else
                select coalesce(array_agg(p.term), '{}') into best_terms
                  from pgfunnel.posting p
                 where p.index_version_id = version_id and p.term = any (q_terms)
                   and p.chunk_id = lex.chunk_ids[1];
            end if;
        end if;
        if check_best or check_held then
            select sum(w.idf) filter (where w.held) / sum(w.idf),
                   sum(w.idf) filter (where w.in_best) / sum(w.idf),
                   -- the share of the rarest held word when the best match lacks it (of
                   -- two equally rare words, one it holds counts as the rarest)
                   (array_agg(case when w.in_best then 0 else w.idf end
                              order by w.idf desc, w.in_best desc)
                       filter (where w.held))[1] / sum(w.idf),
                   -- and of the rarest held word when it is a number and the best match
                   -- holds it
                   (array_agg(case when w.in_best and w.is_number then w.idf else 0 end
                              order by w.idf desc, w.in_best desc)
                       filter (where w.held))[1] / sum(w.idf)
              into coverage, best_coverage, rarest_missed, rarest_number_held
              from (select bool_or(f.idf is not null) as held,
                           bool_or(check_best and f.idf is not null
                                   and q.term = any (best_terms)) as in_best,
                           -- `6125`, `3.11`; not `IMAP4_SSL` nor `v2`, though parts of them are
                           bool_and(q.term ~ '^[0-9.]+$') as is_number,
                           coalesce(max(f.idf), pgfunnel._bm25_idf(0, n_chunks)) as idf
                      from unnest(q_terms, q_positions) as q(term, word)
                      left join unnest(lex.found_terms, lex.found_idf) as f(term, idf)
                        on f.term = q.term
                     group by q.word) w;
        end if;
        if best_coverage < 0.4 or (check_best and rarest_missed >= 0.4) then
            weights_rule := 'dense_leads';
            weights := pgfunnel._automatic_weights(weights_rule);
        elsif check_best and rarest_number_held >= 0.3 then
            weights_rule := 'identifier';
            weights := pgfunnel._automatic_weights(weights_rule);
        end if;
        weights_used := weights;
        -- a leg that does not run has no vote
        w_lex := case when lexical_on then weights[1] else 0 end;
        w_den := case when dense_on then weights[2] else 0 end;
        if check_held then
            w_lex := w_lex * coalesce(coverage, 0);
        end if;
        -- each leg's scores come best first, so its range is its two ends. A lexical leg
        -- that returned fewer rows than its depth listed every visible chunk with a BM25
        -- score; every other chunk scores 0, which is then its floor (its last row is a real
        -- match, not a cut-off, and must not be scaled down to the level of non-matches)
        l_hi := lex.scores[1];
        l_lo := case when cardinality(lex.scores) < lex_depth then 0
                     else lex.scores[cardinality(lex.scores)] end;
        d_hi := den.scores[1];
        d_lo := den.scores[cardinality(den.scores)];
        if fusion = 'zscore' then
            if cardinality(lex.scores) < lex_depth then
                -- a short lexical list: its depth rows are its matches and, past them,
                -- chunks of BM25 0, which the mean and spread count too. Over the matches
                -- alone, one match (or equal ones) had no spread and every z-score was 0:
                -- the only chunk holding a word the dense leg missed added nothing. And
                -- every chunk it did not return sat (0 - mean) / stddev below, far under
                -- any dense z-score
                select sum(x) / lex_depth,
                       sqrt(greatest(sum(x * x) / lex_depth - (sum(x) / lex_depth) ^ 2, 0))
                  into l_mu, l_sd from unnest(lex.scores) x;
            else
                select avg(x), stddev_pop(x) into l_mu, l_sd from unnest(lex.scores) x;
            end if;
            select avg(x), stddev_pop(x) into d_mu, d_sd from unnest(den.scores) x;
        end if;

        -- the pool, with each chunk's document (the cap counts per document)
        select coalesce(array_agg(g.chunk_id order by g.f_rank), '{}'),
               coalesce(array_agg(g.f_rank order by g.f_rank), '{}'),
               coalesce(array_agg(g.fused order by g.f_rank), '{}'),
               coalesce(array_agg(g.l_rank order by g.f_rank), '{}'),
               coalesce(array_agg(g.l_score order by g.f_rank), '{}'),
               coalesce(array_agg(g.d_rank order by g.f_rank), '{}'),
               coalesce(array_agg(g.d_score order by g.f_rank), '{}'),
               coalesce(array_agg(g.document_id order by g.f_rank), '{}'),
               count(distinct g.document_id)
          into chunk_ids, fused_ranks, fused_scores, lexical_ranks, lexical_scores,
               dense_ranks, dense_scores, document_ids, n_sources
          from (select f.*, ch.document_id
                  from (select j.*, (row_number() over (order by j.fused desc, j.chunk_id))::integer as f_rank
                          from (select coalesce(l.id, d.id) as chunk_id,
                                       l.rk::integer as l_rank, l.sc as l_score,
                                       d.rk::integer as d_rank, d.sc as d_score,
                                       case fusion
                                           -- rrf: a leg that missed the chunk contributes 0
                                           when 'rrf' then
                                               coalesce(w_lex / (rrf_k + l.rk), 0) + coalesce(w_den / (rrf_k + d.rk), 0)
                                           -- minmax: scores scaled to [0,1] per leg from its floor (1 when
                                           -- a leg's scores are all equal); a leg that missed the chunk
                                           -- contributes 0
                                           when 'minmax' then
                                               w_lex * coalesce(case when l_hi > l_lo then (l.sc - l_lo) / (l_hi - l_lo)
                                                                     else 1.0 end * (l.sc is not null)::int, 0)
                                             + w_den * coalesce(case when d_hi > d_lo then (d.sc - d_lo) / (d_hi - d_lo)
                                                                     else 1.0 end * (d.sc is not null)::int, 0)
                                           -- zscore: standardised per leg (0 when a leg's scores are all
                                           -- equal); a leg that missed the chunk contributes the z-score
                                           -- of its floor (the lowest listed score, or 0 as above)
                                           else
                                               w_lex * coalesce(case when l_sd > 0 then (coalesce(l.sc, l_lo) - l_mu) / l_sd
                                                                     else 0 end, 0)
                                             + w_den * coalesce(case when d_sd > 0 then (coalesce(d.sc, d_lo) - d_mu) / d_sd
                                                                     else 0 end, 0)
                                       end as fused
                                  from unnest(lex.chunk_ids, lex.scores) with ordinality as l(id, sc, rk)
                                  full join unnest(den.chunk_ids, den.scores) with ordinality as d(id, sc, rk)
                                    on d.id = l.id) j
                         order by j.fused desc, j.chunk_id
                         limit pool_size) f
                  join pgfunnel.chunk ch on ch.id = f.chunk_id) g;
        -- what the cap can return: at least one chunk per document, so k documents are
        -- enough; fewer are counted out (at most per_source_cap chunks of each)
        capacity := n_sources;
        if n_sources < k then
            select count(*) into capacity
              from (select row_number() over (partition by d.id order by d.pos) as src_rank
                      from unnest(document_ids) with ordinality as d(id, pos)) s
             where s.src_rank <= per_source_cap;
        end if;

        -- a leg that returned fewer rows than its depth returned all it could find; a
        -- depth the caller set is kept (the pool still widens within it)
        run_lexical := lexical_on and lexical_depth is null
                       and coalesce(cardinality(lex.chunk_ids), 0) >= lex_depth
                       and lex_depth < 10000;
        run_dense := dense_on and dense_depth is null
                     and coalesce(cardinality(den.chunk_ids), 0) >= den_depth
                     and den_depth < 10000;
        exit when capacity >= k or not refill or widened = 2 or n_sources <= prev_sources
                  or (cardinality(chunk_ids) < pool_size and not run_lexical and not run_dense);
        widened := widened + 1;
        prev_sources := n_sources;
        pool_size := pool_size * 4;
        if run_lexical then
            lex_depth := least(lex_depth * 4, 10000);
        end if;
        if run_dense then
            den_depth := least(den_depth * 4, 10000);
        end if;
    end loop;
    -- A number or code the version holds nowhere (`ERR-4029` where no chunk has 4029):
    -- BM25 then ranks the query's other words (`err` finds every error page) and the
    -- results read as matches for the code unless this says so. Terms with a digit only:
    -- an absent plain word (a synonym) is the dense leg's to answer, and common.
    -- Said of the chunks the search may see: found_terms counts every chunk (the
    -- collection-wide df), and a notice that went away once a hidden chunk held the code
    -- told any searcher, an application's end user too, that a chunk they may not see
    -- holds it. Where some chunk may be hidden, the codes the version holds are looked
    -- for among the lexical leg's rows first (one index probe a row until one holds it:
    -- the rare code ranks its chunks first), and in the rest of their postings only when
    -- no row holds them.
    seen_terms := lex.found_terms;
    if lexical_on and not all_visible
       and exists (select from unnest(q_terms) as q(term)
                    where q.term ~ '[0-9]' and q.term = any (lex.found_terms)) then
        seen_terms := pgfunnel._terms_seen(
            version_id, lex.found_terms,
            array(select distinct q.term from unnest(q_terms) as q(term)
                   where q.term ~ '[0-9]' and q.term = any (lex.found_terms)),
            lex.chunk_ids, principals, tenant, language, as_of, metadata_filter);
    end if;
    if lexical_on and cardinality(q_terms) > 0 and not q_terms operator(pg_catalog.<@) seen_terms then
        select array_agg(distinct q.term order by q.term), array_agg(distinct q.word)
          into absent_codes, code_words
          from unnest(q_terms, q_positions) as q(term, word)
         where q.term ~ '[0-9]' and q.term <> all (seen_terms);
        if absent_codes is not null and not all_visible then
            -- the other terms the notice says were ranked: those held by hidden chunks
            -- alone ranked nothing this search returns, and naming them told of those
            seen_terms := pgfunnel._terms_seen(
                version_id, seen_terms,
                array(select distinct q.term from unnest(q_terms) as q(term)
                       where q.term !~ '[0-9]' and q.term = any (seen_terms)),
                lex.chunk_ids, principals, tenant, language, as_of, metadata_filter);
        end if;
        if absent_codes is not null then
            -- `x9` alone is searched as `x9` and `9`: the rows are the chunks holding `9`,
            -- and "the query's other words" named words the query does not have
            select array_agg(distinct q.term order by q.term)
                       filter (where q.word = any (code_words)),
                   coalesce(bool_or(q.word <> all (code_words)), false)
              into code_parts, other_held
              from unnest(q_terms, q_positions) as q(term, word)
             where q.term = any (seen_terms);
            -- ten at most: a query of 10,000 characters can hold two thousand numbers
            raise notice using message = format(
                'pgfunnel: no chunk of collection %L holds %s%s; %s', collection,
                array_to_string(absent_codes[1:10], ', '),
                case when cardinality(absent_codes) > 10
                     then format(' and %s more', cardinality(absent_codes) - 10) else '' end,
                -- `x9 section` ranks `section` and `9`: "the query's other words" alone
                -- left out the part of the code that ranked too
                case when code_parts is not null
                     then format('the lexical leg ranked %sthe parts of %s that chunks hold: %s%s',
                                 case when other_held then 'the query''s other words and '
                                      else 'only ' end,
                                 case when cardinality(absent_codes) > 1 then 'them' else 'it' end,
                                 array_to_string(code_parts[1:10], ', '),
                                 case when cardinality(code_parts) > 10
                                      then format(' and %s more', cardinality(code_parts) - 10)
                                      else '' end)
                     when other_held
                     then 'the lexical leg ranked the query''s other words'
                     else 'the lexical leg found nothing' end);
        end if;
    end if;
    lexical_depth_used := case when lexical_on then lex_depth end;
    dense_depth_used := case when dense_on then den_depth end;
    -- what the search ran, for a caller of funnel_search or candidates, whose rows do not
    -- say it (their columns are the documented ones, which `select *` must keep): the
    -- Python search reads it in the search's transaction (SearchResponse.fusion) instead
    -- of calling this function once more. Transaction-local: no later transaction of a
    -- pooled connection reads one search's as its own. json, not jsonb: 2.7 us a search
    -- against 5.5 (a loop of set_config calls; a search takes 1 - 6 ms)
    -- the depths too: a default one grows with the pool when it widens, so the config a
    -- trace logs (the depths given, NULL) does not say what each leg read
    perform pg_catalog.set_config('pgfunnel.fusion_used', pg_catalog.json_build_object(
        'weights', weights_used, 'weights_rule', weights_rule,
        'lexical', lexical_on, 'dense', dense_on,
        'lexical_depth', lexical_depth_used, 'dense_depth', dense_depth_used)::text, true);
end
$$;

-- the forms without section_path: a function's result columns cannot change in place.
-- In public, pgfunnel's wrapper only (its body calls pgfunnel.funnel_search), as the
-- grants tell it: an application's own funnel_search there was dropped by every init
do $$
declare
    f regprocedure;
begin
    for f in select p.oid::regprocedure from pg_catalog.pg_proc p
              where ((p.pronamespace = 'pgfunnel'::regnamespace
                      and p.proname in ('candidates', 'final', 'funnel_search'))
                     or (p.pronamespace = pg_catalog.to_regnamespace('public')
                         and p.proname = 'funnel_search'
                         and p.prosrc like '%pgfunnel.funnel_search(%'
                         and pg_catalog.pg_has_role(p.proowner, 'USAGE')))
                and p.proretset
                and not ('section_path' = any (p.proargnames))
    loop
        execute format('drop function %s', f);
    end loop;
end
$$;

-- raise again an error a search function caught, with its SQLSTATE, message, detail and
-- hint. Raised where it was, Postgres follows an error with the text of every statement
-- it passed through: psql printed 20 - 40 lines of the funnel's own SQL after a message
-- such as `fusion: unknown fusion 'x'`; raised from here, the context is this function,
-- its call and the search function. The search's block that catches it costs a
-- subtransaction that writes nothing: 0.998x the time of a search without it (pydocs,
-- 400 searches, paired median). A cancel (57014) is not one of `others` and passes as it
-- was.
create or replace function pgfunnel._raise_again(err_state text, err_message text, err_detail text,
                                                 err_hint text)
returns void
language plpgsql
security invoker
set search_path = pg_catalog
as $$
begin
    -- an empty detail or hint would still print its own empty line
    if err_detail <> '' and err_hint <> '' then
        raise exception using errcode = err_state, message = err_message, detail = err_detail,
                              hint = err_hint;
    elsif err_hint <> '' then
        raise exception using errcode = err_state, message = err_message, hint = err_hint;
    elsif err_detail <> '' then
        raise exception using errcode = err_state, message = err_message, detail = err_detail;
    end if;
    raise exception using errcode = err_state, message = err_message;
end
$$;

-- both legs, fused: the candidate pool with every per-leg rank and score
create or replace function pgfunnel.candidates(
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
    b double precision default 0.75
)
returns table (
    chunk_id bigint, document_id bigint, citekey text, title text, heading text, text text,
    ordinal integer, metadata jsonb,
    lexical_rank integer, lexical_score double precision,
    dense_rank integer, dense_score double precision,
    fused_rank integer, fused_score double precision, section_path text)
-- plpgsql, as funnel_search: before Postgres 18 a SQL function with a SET clause is
-- parsed and planned again at every call, while plpgsql keeps its plan per session
language plpgsql stable
security invoker
set search_path = pg_catalog, pgfunnel
set plan_cache_mode = force_generic_plan
set jit = off
as $$
declare
    err_state text;
    err_message text;
    err_detail text;
    err_hint text;
begin
    return query
    select u.id, ch.document_id, doc.citekey, doc.title, ch.heading, ch.text, ch.ordinal,
           doc.metadata, u.lr, u.ls, u.dr, u.ds, u.fr, u.fs, ch.section_path
      from pgfunnel._pool(query_text, query_embedding, k, collection, principals, tenant,
                          language, as_of, metadata_filter, fusion, rrf_k, weights,
                          lexical_depth, dense_depth, overfetch, per_source_cap, ef_search,
                          k1, b) p,
           unnest(p.chunk_ids, p.fused_ranks, p.fused_scores, p.lexical_ranks,
                  p.lexical_scores, p.dense_ranks, p.dense_scores)
               as u(id, fr, fs, lr, ls, dr, ds)
      join pgfunnel.chunk ch on ch.id = u.id
      join pgfunnel.document doc on doc.id = ch.document_id
     order by u.fr;
exception when others then
    -- the same error without the statements it passed through (see _raise_again)
    get stacked diagnostics err_state = returned_sqlstate, err_message = message_text,
                            err_detail = pg_exception_detail, err_hint = pg_exception_hint;
    perform pgfunnel._raise_again(err_state, err_message, err_detail, err_hint);
end
$$;

-- the id of this session's last traced search (its search_log row), NULL before one: a
-- traced search returns it in every row's search_id, and a search that found nothing has
-- no row to return it in. As lastval(): session-wide, taken back with a rolled-back search
create or replace function pgfunnel.last_search_id()
returns bigint
language sql volatile
security invoker
set search_path = pg_catalog
as $$
    select nullif(current_setting('pgfunnel.last_search_id', true), '')::bigint
$$;

-- the pool in its final order -> cap per citekey -> first k; optionally traced
-- (index_version_id came later: the trace names the version the pool was read from; then
-- log_notes: what the caller wants kept with the search_log row, outside its config)
drop function if exists pgfunnel.final(bigint[], integer[], double precision[], integer[],
    double precision[], integer[], double precision[], double precision[], integer, text,
    text[], text, text, timestamptz, jsonb, integer, boolean, text, jsonb);
drop function if exists pgfunnel.final(bigint[], integer[], double precision[], integer[],
    double precision[], integer[], double precision[], double precision[], integer, text,
    text[], text, text, timestamptz, jsonb, integer, boolean, text, jsonb, integer);
create or replace function pgfunnel.final(
    chunk_ids bigint[],
    fused_ranks integer[],
    fused_scores double precision[],
    lexical_ranks integer[],
    lexical_scores double precision[],
    dense_ranks integer[],
    dense_scores double precision[],
    rerank_scores double precision[] default null,
    k integer default 10,
    collection text default 'default',
    principals text[] default '{}',
    tenant text default null,
    language text default null,
    as_of timestamptz default now(),
    metadata_filter jsonb default null,
    per_source_cap integer default 3,
    trace boolean default false,
    query_text text default null,
    config jsonb default '{}',
    index_version_id integer default null,
    log_notes jsonb default null)
returns table (
    chunk_id bigint, citekey text, title text, heading text, text text, ordinal integer,
    metadata jsonb,
    lexical_rank integer, lexical_score double precision,
    dense_rank integer, dense_score double precision,
    fused_rank integer, fused_score double precision,
    rerank_rank integer, rerank_score double precision,
    final_rank integer, search_id bigint, section_path text)
language plpgsql volatile
security invoker
set search_path = pg_catalog, pgfunnel
set plan_cache_mode = force_generic_plan
set jit = off
as $$
declare
    coll_id integer;
    n integer := coalesce(cardinality(chunk_ids), 0);
    version_id integer;
    log_id bigint;
    log_config jsonb;
    dup_id bigint;
begin
    perform pgfunnel._check_search_params(k, principals, 1, per_source_cap, metadata_filter);
    perform pgfunnel._check_scope_params(tenant, language);
    if chunk_ids is null then
        -- as a NULL inside the pool is; an empty pool is '{}'
        perform pgfunnel._bad_parameter('chunk_ids', 'must not be NULL; pass ''{}'' for an empty pool');
    end if;
    if trace is null then
        perform pgfunnel._bad_parameter('trace', 'must be true or false, not NULL');
    end if;
    if as_of is null then
        perform pgfunnel._bad_parameter('as_of', 'must not be NULL');
    end if;
    if array_ndims(chunk_ids) > 1 then
        perform pgfunnel._bad_parameter('chunk_ids',
            format('must be a one-dimensional array, got %s dimensions', array_ndims(chunk_ids)));
    end if;
    -- the text a search takes, no more: a traced final() logs it, and `versions compare
    -- --last` replays what was logged
    if length(query_text) > pgfunnel._query_limit() then
        perform pgfunnel._bad_parameter('query_text',
            format('is %s characters long; the limit is %s', length(query_text),
                   pgfunnel._query_limit()));
    end if;
    if log_notes is not null and jsonb_typeof(log_notes) <> 'object' then
        perform pgfunnel._bad_parameter('log_notes',
            format('must be a JSON object, got %s', jsonb_typeof(log_notes)));
    end if;
    -- a NULL array beside a pool of rows is a missing argument, not a length mismatch
    if n > 0 and num_nulls(fused_ranks, fused_scores, lexical_ranks, lexical_scores,
                           dense_ranks, dense_scores) > 0 then
        perform pgfunnel._bad_parameter(
            case when fused_ranks is null then 'fused_ranks'
                 when fused_scores is null then 'fused_scores'
                 when lexical_ranks is null then 'lexical_ranks'
                 when lexical_scores is null then 'lexical_scores'
                 when dense_ranks is null then 'dense_ranks'
                 else 'dense_scores' end,
            'must not be NULL; pass an array of NULLs for a leg that did not rank a chunk');
    end if;
    if config is not null and jsonb_typeof(config) <> 'object' then
        perform pgfunnel._bad_parameter('config',
            format('must be a JSON object, got %s', jsonb_typeof(config)));
    end if;
    if coalesce(cardinality(fused_ranks), 0) <> n or coalesce(cardinality(fused_scores), 0) <> n
       or coalesce(cardinality(lexical_ranks), 0) <> n or coalesce(cardinality(lexical_scores), 0) <> n
       or coalesce(cardinality(dense_ranks), 0) <> n or coalesce(cardinality(dense_scores), 0) <> n
       or (rerank_scores is not null and cardinality(rerank_scores) <> n) then
        perform pgfunnel._bad_parameter('chunk_ids',
            'the pool arrays (ids, ranks, scores, rerank scores) must all have the same length');
    end if;
    -- a chunk twice in the pool would come back twice, under two final ranks
    if array_position(chunk_ids, null) is not null then
        perform pgfunnel._bad_parameter('chunk_ids', 'must not contain NULL');
    end if;
    -- every pool chunk has a fused rank and score (a traced search failed on the trace's
    -- not-null column; an untraced one returned the NULL)
    if array_position(fused_ranks, null) is not null then
        perform pgfunnel._bad_parameter('fused_ranks', 'must not contain NULL');
    end if;
    -- ±Infinity is no score either: no fusion gives one, and a chunk traced with it
    -- read as ranked so (as NaN is refused, and rerank_scores' below)
    if array_position(fused_scores, null) is not null
       or 'NaN'::float8 = any (fused_scores) or 'Infinity'::float8 = any (fused_scores)
       or '-Infinity'::float8 = any (fused_scores) then
        perform pgfunnel._bad_parameter('fused_scores',
                                        'must not contain NULL, NaN or Infinity');
    end if;
    -- NULL is a chunk left unscored (the widened tail of a pool); NaN is no score, and
    -- neither is ±Infinity (the reranker's own scores are refused unless finite)
    if 'NaN'::float8 = any (rerank_scores) or 'Infinity'::float8 = any (rerank_scores)
       or '-Infinity'::float8 = any (rerank_scores) then
        perform pgfunnel._bad_parameter('rerank_scores', 'must not contain NaN or Infinity');
    end if;
    -- the legs' ranks and scores are returned and traced as given: a rank below 1 or a
    -- NaN or infinite score was written to search_trace as if a leg had ranked it so
    -- (NULL: the leg did not rank the chunk)
    if exists (select 1 from unnest(fused_ranks) as u(r) where u.r < 1) then
        perform pgfunnel._bad_parameter('fused_ranks', 'must be 1 or more');
    end if;
    if exists (select 1 from unnest(lexical_ranks) as u(r) where u.r < 1) then
        perform pgfunnel._bad_parameter('lexical_ranks', 'must be 1 or more, or NULL');
    end if;
    if exists (select 1 from unnest(dense_ranks) as u(r) where u.r < 1) then
        perform pgfunnel._bad_parameter('dense_ranks', 'must be 1 or more, or NULL');
    end if;
    if 'NaN'::float8 = any (lexical_scores) or 'Infinity'::float8 = any (lexical_scores)
       or '-Infinity'::float8 = any (lexical_scores) then
        perform pgfunnel._bad_parameter('lexical_scores', 'must not contain NaN or Infinity');
    end if;
    if 'NaN'::float8 = any (dense_scores) or 'Infinity'::float8 = any (dense_scores)
       or '-Infinity'::float8 = any (dense_scores) then
        perform pgfunnel._bad_parameter('dense_scores', 'must not contain NaN or Infinity');
    end if;
    select u.id into dup_id
      from unnest(chunk_ids) as u(id)
     group by u.id
    having count(*) > 1
     limit 1;
    if dup_id is not null then
        perform pgfunnel._bad_parameter('chunk_ids', format('chunk %s appears more than once', dup_id));
    end if;
    coll_id := pgfunnel._collection_id(collection);

    -- visibility is checked again: the ids come from the caller and must not become a
    -- way to read chunks the caller could not have found. The cap counts chunks per
    -- source document (citekey) in pool order, so a capped chunk's slot goes to the
    -- next chunk of another source. Static SQL (plan cached per session).
    if not trace then
        return query
        with pool as (
            select u.pos::integer as pos, u.id, ch.document_id, d.citekey, d.title, ch.heading,
                   ch.section_path, ch.text, ch.ordinal, d.metadata,
                   u.lr, u.ls, u.dr, u.ds, u.fr, u.fs, u.rs,
                   (row_number() over (partition by ch.document_id order by u.pos))::integer as src_rank
              from unnest(chunk_ids, fused_ranks, fused_scores, lexical_ranks, lexical_scores,
                          dense_ranks, dense_scores,
                          coalesce(rerank_scores, array_fill(null::float8, array[n])))
                   with ordinality as u(id, fr, fs, lr, ls, dr, ds, rs, pos)
              join pgfunnel.chunk ch on ch.id = u.id
              join pgfunnel.document d on d.id = ch.document_id
             where d.collection_id = coll_id
               and pgfunnel._document_visible(d, principals, final.tenant, final.language,
                                              as_of, metadata_filter)
        ),
        ranked as (
            select p.*, (row_number() over (partition by p.src_rank <= per_source_cap
                                            order by p.pos))::integer as cap_rank
              from pool p
        )
        select r.id, r.citekey, r.title, r.heading, r.text, r.ordinal, r.metadata,
               r.lr, r.ls, r.dr, r.ds, r.fr, r.fs,
               case when r.rs is not null then r.pos end, r.rs,
               r.cap_rank, null::bigint, r.section_path
          from ranked r
         where r.src_rank <= per_source_cap and r.cap_rank <= k
         order by r.cap_rank;
        return;
    end if;

    perform pgfunnel._check_trace_writable(principals, final.tenant);
    if final.index_version_id is not null then
        -- the version the caller read the pool from: a switch that committed while a
        -- reranker ran must not relabel the trace
        select v.id into version_id from pgfunnel.index_version v
         where v.id = final.index_version_id and v.collection_id = coll_id;
        if version_id is null then
            perform pgfunnel._bad_parameter('index_version_id',
                format('%s is not an index version of %L', final.index_version_id, collection));
        end if;
    else
        -- the active one, or P0002 as for a search: a trace names a version that exists
        select a.version_id into version_id from pgfunnel._active_version(coll_id) a;
    end if;
    -- the scope the search applied goes into its config, and so into its hash: two
    -- searches that differ only in as_of, tenant or principals were logged with one config
    -- and one hash, and the log held no as_of to replay them with. as_of is NULL for the
    -- search's own time (now(), the log's `at`) and otherwise the time in UTC; principals
    -- sorted and distinct, as access compares them (readable exactly as the log's own
    -- principals column is: the same row, under the same policy)
    log_config := coalesce(config, '{}'::jsonb) || jsonb_build_object(
        'as_of', case when final.as_of = now() then null
                      when not isfinite(final.as_of) then final.as_of::text
                      else to_char(final.as_of at time zone 'UTC',
                                   'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') end,
        'tenant', final.tenant,
        'principals', array(select distinct u.p from unnest(principals) as u(p) order by 1));
    insert into pgfunnel.search_log (collection_id, index_version_id, config_hash, config,
                                     query_text, principals, tenant, notes)
    values (coll_id, version_id, md5(log_config::text), log_config, query_text, principals,
            tenant, coalesce(log_notes, '{}'::jsonb))
    returning id into log_id;
    -- the id for pgfunnel.last_search_id(): a search that found nothing returns no row to
    -- carry it in its search_id column, and its trace is the one a caller wants to read.
    -- Session-wide, as lastval() is, so that the next statement reads it; a rollback
    -- takes it back with the log row
    perform set_config('pgfunnel.last_search_id', log_id::text, false);

    return query
    with pool as (
        select u.pos::integer as pos, u.id, ch.document_id, d.citekey, d.title, ch.heading,
               ch.section_path, ch.text, ch.ordinal, d.metadata,
               u.lr, u.ls, u.dr, u.ds, u.fr, u.fs, u.rs,
               (row_number() over (partition by ch.document_id order by u.pos))::integer as src_rank
          from unnest(chunk_ids, fused_ranks, fused_scores, lexical_ranks, lexical_scores,
                      dense_ranks, dense_scores,
                      coalesce(rerank_scores, array_fill(null::float8, array[n])))
               with ordinality as u(id, fr, fs, lr, ls, dr, ds, rs, pos)
          join pgfunnel.chunk ch on ch.id = u.id
          join pgfunnel.document d on d.id = ch.document_id
         where d.collection_id = coll_id
           and pgfunnel._document_visible(d, principals, final.tenant, final.language,
                                          as_of, metadata_filter)
    ),
    ranked as (
        select p.*, case when p.src_rank <= per_source_cap then
                    (row_number() over (partition by p.src_rank <= per_source_cap
                                        order by p.pos))::integer
                    end as cap_rank
          from pool p
    ),
    finalized as (
        select r.*, case when r.cap_rank <= k then r.cap_rank end as f_rank
          from ranked r
    ),
    traced as (
        insert into pgfunnel.search_trace (search_id, chunk_id, lexical_rank, lexical_score,
                                           dense_rank, dense_score, fused_rank, fused_score,
                                           rerank_rank, rerank_score, final_rank, dropped)
        select log_id, f.id, f.lr, f.ls, f.dr, f.ds, f.fr, f.fs,
               case when f.rs is not null then f.pos end, f.rs, f.f_rank,
               case when f.f_rank is not null then null
                    when f.src_rank > per_source_cap then 'cap'
                    else 'below k' end
          from finalized f
    )
    select f.id, f.citekey, f.title, f.heading, f.text, f.ordinal, f.metadata,
           f.lr, f.ls, f.dr, f.ds, f.fr, f.fs,
           case when f.rs is not null then f.pos end, f.rs,
           f.f_rank, log_id, f.section_path
      from finalized f
     where f.f_rank is not null
     order by f.f_rank;
end
$$;

-- the whole funnel without rerank: candidates, cap per citekey, first k
create or replace function pgfunnel.funnel_search(
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
language plpgsql volatile
security invoker
set search_path = pg_catalog, pgfunnel
set plan_cache_mode = force_generic_plan
set jit = off
as $$
declare
    err_state text;
    err_message text;
    err_detail text;
    err_hint text;
    -- the traced search's pool (_pool's row) and the version it was read from
    pooled record;
begin
    if trace is null then
        -- `not null` is null: the traced branch would run and write a trace
        perform pgfunnel._bad_parameter('trace', 'must be true or false, not NULL');
    end if;
    if not trace then
        begin
            -- final() over this pool, without what only an untrusted pool needs: the pool
            -- comes from _pool in this statement, which kept only visible chunks, so the
            -- visibility check is not repeated, and only the k chunks that are returned are
            -- joined to their text and document (the cap needs just each chunk's document,
            -- which _pool looked up to size the pool).
            -- Same rows as final(candidates()) (tested); 5 - 6% of a search on pydocs.
            -- The check comes first because `limit 0` would never run _pool, which checks.
            perform pgfunnel._check_search_params(k, principals, overfetch, per_source_cap,
                                                  metadata_filter);
            perform pgfunnel._check_scope_params(tenant, language);
            return query
            with pool as (
                select u.pos::integer as pos, u.id, u.lr, u.ls, u.dr, u.ds, u.fr, u.fs,
                       (row_number() over (partition by u.doc order by u.pos))::integer as src_rank
                  from pgfunnel._pool(query_text, query_embedding, k, collection, principals,
                                      tenant, language, as_of, metadata_filter, fusion, rrf_k,
                                      weights, lexical_depth, dense_depth, overfetch,
                                      per_source_cap, ef_search, k1, b) p,
                       unnest(p.chunk_ids, p.fused_ranks, p.fused_scores, p.lexical_ranks,
                              p.lexical_scores, p.dense_ranks, p.dense_scores, p.document_ids)
                           with ordinality as u(id, fr, fs, lr, ls, dr, ds, doc, pos)
            ),
            kept as (
                select p.*, (row_number() over (order by p.pos))::integer as final_rank
                  from pool p
                 where p.src_rank <= per_source_cap
                 order by p.pos
                 limit k
            )
            select r.id, d.citekey, d.title, ch.heading, ch.text, ch.ordinal, d.metadata,
                   r.lr, r.ls, r.dr, r.ds, r.fr, r.fs, null::integer, null::float8,
                   r.final_rank, null::bigint, ch.section_path
              from kept r
              join pgfunnel.chunk ch on ch.id = r.id
              join pgfunnel.document d on d.id = ch.document_id
             order by r.final_rank;
            return;
        exception when others then
            -- the same error without 20 - 40 lines of this function's and _pool's SQL in
            -- its context (see _raise_again). Not around the traced branch below: it
            -- writes its trace, so a subtransaction there would take a subtransaction id
            -- per search, and past 64 in one transaction every snapshot on the server
            -- slows.
            get stacked diagnostics err_state = returned_sqlstate, err_message = message_text,
                                    err_detail = pg_exception_detail, err_hint = pg_exception_hint;
            perform pgfunnel._raise_again(err_state, err_message, err_detail, err_hint);
        end;
    end if;
    -- A traced search reads its pool in a block of its own, which writes nothing (so it
    -- takes no subtransaction id), and what the pool refuses (a parameter, the collection,
    -- the query vector) is raised again with three lines of context, as the untraced
    -- branch raises it: raised inside the statement that writes the trace, an error had
    -- that statement's 40 lines of SQL after it. final() reads the next snapshot, as it
    -- does after a reranker: it checks the pool's chunks again, so one deleted or hidden
    -- in between is not returned. The version is read in the pool's own statement and
    -- handed to final(), so a switch that commits in between does not relabel the trace
    begin
        select p.*, (select v.id from pgfunnel.index_version v
                       join pgfunnel.collection c on c.id = v.collection_id
                      where c.name = funnel_search.collection and v.state = 'active')
                    as version_id
          into pooled
          from pgfunnel._pool(query_text, query_embedding, k, collection, principals,
                              funnel_search.tenant, funnel_search.language, as_of,
                              metadata_filter, fusion, rrf_k, weights, lexical_depth,
                              dense_depth, overfetch, per_source_cap, ef_search, k1, b) p;
    exception when others then
        get stacked diagnostics err_state = returned_sqlstate, err_message = message_text,
                                err_detail = pg_exception_detail, err_hint = pg_exception_hint;
        perform pgfunnel._raise_again(err_state, err_message, err_detail, err_hint);
    end;
    -- refused before final() writes, not by its insert
    perform pgfunnel._check_trace_writable(principals, funnel_search.tenant);
    return query
    select f.*
      from pgfunnel.final(pooled.chunk_ids, pooled.fused_ranks, pooled.fused_scores,
                          pooled.lexical_ranks, pooled.lexical_scores, pooled.dense_ranks,
                          pooled.dense_scores, null, k, collection, principals, tenant,
                          language, as_of, metadata_filter, per_source_cap, trace, query_text,
                          jsonb_build_object(
                              'fusion', fusion, 'rrf_k', rrf_k,
                              'weights', pooled.weights_used,
                              'lexical_depth', lexical_depth, 'dense_depth', dense_depth,
                              'overfetch', overfetch, 'per_source_cap', per_source_cap,
                              'ef_search', ef_search, 'k1', k1, 'b', b, 'k', k,
                              'rerank', false, 'metadata_filter', metadata_filter,
                              'language', language),
                          pooled.version_id,
                          -- whether the search had a query vector, which its trace cannot
                          -- tell when the dense leg found nothing (all filtered out) or a
                          -- reader may not read the trace: a replay of the logged search
                          -- needs it. In the row's notes, outside the config and its hash;
                          -- so is whether weights were given: the config holds the weights
                          -- used, and a replay (versions compare --last) of a search that
                          -- let them be chosen must let them be chosen again; and the depth
                          -- each leg read (NULL: it did not run): the config holds the ones given
                          jsonb_build_object('query_embedding',
                                             query_embedding is not null,
                                             'weights_given', weights is not null,
                                             'lexical_depth_used', pooled.lexical_depth_used,
                                             'dense_depth_used', pooled.dense_depth_used)) f;
end
$$;

