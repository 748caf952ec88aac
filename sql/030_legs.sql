-- pgfunnel: the two retrieval legs. Access filters are applied inside each leg,
-- before ranking, so a hidden chunk can neither appear nor push a visible one out.

-- the dynamic-SQL predicate of 0.1.0; the selective-filter paths now use _visible_chunks
drop function if exists pgfunnel._visible_sql();

-- Why these functions force generic plans: a custom plan is estimated cheaper than a
-- generic one for every statement below (the planner knows the array lengths), so
-- plpgsql would re-plan each statement on every search, which costs more than running
-- it. The generic plans were checked: index scans driven by the id arrays.
--
-- Why they set jit = off: Postgres compiles a statement to machine code when its
-- estimated cost passes jit_above_cost (100,000), and a generic plan over a large
-- collection is estimated far above what it runs (a query for one rare identifier is
-- priced like one for every chunk). Where the server has JIT (on by default before
-- Postgres 19, in most packaged and managed servers), compiling took 350 - 400 ms of a
-- 10 ms search: on PostgreSQL 15 with JIT, 100k chunks, 97 help-center queries x 2,
-- funnel_search with jit on took p50 34.1 / p95 390 / mean 96 ms against 31.6 / 66 /
-- 29 ms with it off (`ERR-4321`: 390 against 9 ms). Every function that runs per search
-- sets it off for the statements it plans and runs; nested calls inherit it.
--
-- Helper functions are called in plpgsql assignments (`vis := pgfunnel._visible_prefix(...)`),
-- not `select ... into ... from f(...)`: an assignment evaluates the call directly, while
-- the select starts an executor and stores the one result row in a tuplestore. Across
-- the calls of one search that was 6 - 8% of funnel_search's time.
--
-- The leg functions are stable: the whole search reads one snapshot, so a search that
-- overlaps a version switch or an ingest commit sees either side of it, never both.

-- whether a search may see a document: public or shared with one of the principals, in
-- the tenant (or in none), in the language, valid at as_of, and holding the metadata
-- filter. The one definition the legs and final() use (RLS policies apply on top). Like
-- _bm25_idf it has no `set search_path`, so that Postgres inlines it into each query,
-- where the planner sees the indexable predicates (document_readers_gin,
-- document_public_idx) as if written there; every operator in it is schema-qualified.
create or replace function pgfunnel._document_visible(
    d pgfunnel.document, principals text[], tenant text, language text,
    as_of timestamptz, metadata_filter jsonb)
returns boolean
language sql stable parallel safe
security invoker
as $$
    select (d.is_public or d.readers operator(pg_catalog.&&) principals)
       and (d.tenant is null or d.tenant operator(pg_catalog.=) tenant)
       and (language is null or d.language operator(pg_catalog.=) language)
       and (d.valid_from is null or d.valid_from operator(pg_catalog.<=) as_of)
       and (d.valid_to is null or d.valid_to operator(pg_catalog.>) as_of)
       and (metadata_filter is null or d.metadata operator(pg_catalog.@>) metadata_filter)
$$;

-- whether every chunk of a collection is visible to a search with these filters: no
-- language or metadata filter, and no document that a reader could be kept from
-- (private, in a tenant, or with a validity bound; one probe of document_restricted_idx,
-- which is empty for such a collection). The legs then take their best rows as they come
-- instead of checking them one by one (two primary-key probes a row, about 0.25 ms per
-- leg). Off under row-level security: there the probe would pass every restricted
-- document it cannot see through the policy before answering (a reader of public
-- documents in a collection of 100k private ones: 100k policy checks per search).
create or replace function pgfunnel._all_visible(
    collection_id integer, language text, metadata_filter jsonb)
returns boolean
language plpgsql stable
security invoker
set search_path = pg_catalog, pgfunnel
set plan_cache_mode = force_generic_plan
set jit = off
as $$
begin
    if language is not null or metadata_filter is not null
       or row_security_active('pgfunnel.document') then
        return false;
    end if;
    return not exists (
        select from pgfunnel.document d
         where d.collection_id = _all_visible.collection_id
           and (not d.is_public or d.tenant is not null or d.valid_from is not null
                or d.valid_to is not null));
end
$$;

-- the visible chunks among `ids` (given in rank order), in that order, at most `need`.
-- The joins run in the order written (join_collapse_limit 1): each id probes chunk and
-- document by primary key, so the cost follows the ids checked. Left to choose, the
-- generic plan of a collection of about 2,000 documents that all have readers drove from
-- the documents the readers index matched (estimated at 1%) and compared every id with
-- each of them: 4,000 document rows read per search whose readers see them all, and
-- searches 3 - 5x slower at 2,000 chunks than at 5,000 (bench/perf.py --size 2000).
create or replace function pgfunnel._visible_prefix(
    ids bigint[], scores double precision[], need integer,
    principals text[], tenant text, language text, as_of timestamptz,
    metadata_filter jsonb, collection_id integer,
    out chunk_ids bigint[], out kept_scores double precision[])
language plpgsql stable
security invoker
set search_path = pg_catalog, pgfunnel
set plan_cache_mode = force_generic_plan
set jit = off
set join_collapse_limit = 1
as $$
begin
    select coalesce(array_agg(v.id order by v.ord), '{}'),
           coalesce(array_agg(v.sc order by v.ord), '{}')
      into chunk_ids, kept_scores
      from (select c.id, c.sc, c.ord
              from unnest(ids, scores) with ordinality as c(id, sc, ord)
              join pgfunnel.chunk ch on ch.id = c.id
              join pgfunnel.document d on d.id = ch.document_id
             where d.collection_id = _visible_prefix.collection_id
               and pgfunnel._document_visible(d, principals, _visible_prefix.tenant, _visible_prefix.language,
                                              as_of, metadata_filter)
             order by c.ord
             limit need) v;
end
$$;

-- the form without max_n
drop function if exists pgfunnel._visible_chunks(text[], text, text, timestamptz, jsonb, integer);

-- the visible chunks of a collection (at most max_n of them; NULL: all), for the paths
-- taken when a filter hides most chunks (the visible documents come from two index
-- scans: readers and public)
create or replace function pgfunnel._visible_chunks(
    principals text[], tenant text, language text, as_of timestamptz,
    metadata_filter jsonb, collection_id integer, max_n integer default null)
returns bigint[]
language plpgsql stable
security invoker
set search_path = pg_catalog, pgfunnel
set plan_cache_mode = force_generic_plan
set jit = off
as $$
declare
    ids bigint[];
begin
    select coalesce(array_agg(v.id), '{}') into ids
      from (select ch.id
              from pgfunnel.document d
              join pgfunnel.chunk ch on ch.document_id = d.id
             where d.collection_id = _visible_chunks.collection_id
               and pgfunnel._document_visible(d, principals, _visible_chunks.tenant, _visible_chunks.language,
                                              as_of, metadata_filter)
             limit max_n) v;
    return ids;
end
$$;

-- the forms without found_terms or found_idf: a function's result columns cannot
-- change in place
do $$
begin
    if exists (select from pg_catalog.pg_proc p
                where p.oid = pg_catalog.to_regprocedure(
                          'pgfunnel._lexical_hits(integer, text[], integer, double precision, '
                          'double precision, text[], text, text, timestamptz, jsonb, integer)')
                  and not ('found_idf' = any (p.proargnames))) then
        drop function pgfunnel._lexical_hits(integer, text[], integer, double precision,
            double precision, text[], text, text, timestamptz, jsonb, integer);
    end if;
end
$$;

-- lexical leg: exact BM25 top-`depth` over the visible chunks of a version, as arrays
-- in rank order, the share of the checked candidates that were visible (1 when fewer
-- than 20 were checked), and which query terms the version holds with their idf (the
-- funnel weighs the lexical leg by the share of the query's idf held). One index-only scan
-- over each query term's postings yields tf and chunk length, so every matching chunk
-- is scored exactly from the current statistics, with no join and no stored score to
-- go stale. Visibility is
-- checked on the best-scored chunks in score order, reading deeper while the visible
-- share seen promises enough rows. When it is so small that reading deeper would check
-- thousands of candidates one by one, only visible chunks are scored instead: by
-- probing the postings of each visible chunk when visible chunks x query terms is the
-- smaller number, or by scoring every match and checking each when postings are.
-- `all_visible` (NULL: found out here) says every chunk may be seen (_all_visible); the
-- best `depth` scored are then the answer, with no check.
drop function if exists pgfunnel._lexical_hits(integer, text[], integer, double precision,
    double precision, text[], text, text, timestamptz, jsonb, integer);
create or replace function pgfunnel._lexical_hits(
    version_id integer, query_terms text[], depth integer,
    k1 double precision, b double precision,
    principals text[], tenant text, language text, as_of timestamptz,
    metadata_filter jsonb, collection_id integer, all_visible boolean default null,
    out chunk_ids bigint[], out scores double precision[], out visible_share double precision,
    out found_terms text[], out found_idf double precision[])
language plpgsql stable
security invoker
set search_path = pg_catalog, pgfunnel
set plan_cache_mode = force_generic_plan
set jit = off
as $$
declare
    avg_len double precision;
    n_chunks bigint;
    sum_df bigint;
    q_terms text[];
    -- idf x (k1 + 1) x 2^32 per term, and the length normalisation's two constants, folded
    -- once here: per posting only tf / (tf + norm_base + norm_per_length x length) is left.
    -- Each posting's share is rounded to a whole number of 2^-32 (0.2e-9, far below what
    -- BM25 can tell apart), so a chunk's score is a sum of whole numbers: exact in float8
    -- (each is below 2^43 even at k1 = 100, so a thousand terms stay below 2^53) and the
    -- same in whatever order the plan adds a chunk's terms. Float sums
    -- otherwise differ in their last bit with that order (a sort-based aggregate gives each
    -- chunk its own), and copies of one text would rank by that bit instead of chunk id.
    q_weight double precision[];
    norm_base double precision := k1 * (1 - b);
    norm_per_length double precision;
    cand_ids bigint[];
    cand_scores double precision[];
    n_cand integer;
    fetch_n integer := greatest(2 * depth, 64);
    checked integer := 0;
    upto integer;
    vis record;
    sample bigint[];
    sample_share double precision;
    probe_max integer;
    next_n integer;
    visible bigint[];
    per_search boolean;
begin
    chunk_ids := '{}';
    scores := '{}';
    visible_share := 1;
    found_terms := '{}';
    found_idf := '{}';
    if coalesce(cardinality(query_terms), 0) = 0 then
        return;
    end if;
    -- the version's statistics and each distinct query term once, with its idf
    select v.total_length::float8 / nullif(v.chunk_count, 0), v.chunk_count, sum(ts.df),
           array_agg(ts.term order by ts.term),
           array_agg(pgfunnel._bm25_idf(ts.df, v.chunk_count) order by ts.term),
           array_agg(pgfunnel._bm25_idf(ts.df, v.chunk_count) * (k1 + 1) * 4294967296.0::float8
                     order by ts.term)
      into avg_len, n_chunks, sum_df, q_terms, found_idf, q_weight
      from pgfunnel.index_version v,
           pgfunnel._term_df(v.id, query_terms) ts
     where v.id = _lexical_hits.version_id
     group by v.id;
    if q_terms is null or avg_len is null then
        found_idf := '{}';
        return;
    end if;
    found_terms := q_terms;
    norm_per_length := k1 * b / avg_len;
    all_visible := coalesce(all_visible, pgfunnel._all_visible(collection_id, language,
                                                                metadata_filter));
    if all_visible then
        fetch_n := depth;
    end if;

    -- Three statements below read the partitioned posting table: the sample, the scoring
    -- and the scoring of the visible chunks. A cached generic plan prunes to the version's
    -- partition only when it runs, after locking and setting up every partition: about
    -- 18 us each, so with a collection per customer (400 versions) the scoring statement
    -- of a 2,000-chunk collection took 8 ms instead of 0.9, and the lexical leg of a
    -- search that sees 100 of 10,000 chunks (sample and probe) 10.8 ms instead of 2.4.
    -- Past a few partitions each is planned per search instead (about 0.08 ms), which
    -- prunes to the one partition before anything is locked. Each pair of forms must stay
    -- the same statement. Every search past this point runs at least one of them, so the
    -- partitions are counted here, once (up to the ninth).
    per_search := exists (select from pg_catalog.pg_inherits i
                           where i.inhparent = 'pgfunnel.posting'::pg_catalog.regclass
                          offset 8);

    -- Under a filter that hides nearly every chunk, the first pass below (every posting
    -- of every query term scored, about 0.6 us each) is wasted: it finds almost nothing
    -- visible, and the visible chunks are then probed one by one anyway (about 3 us per
    -- chunk and term, and 4 us to list each). Where that pass is costly, a sample comes
    -- first: the visibility of the first 40 chunks (by id) holding the rarest query term.
    -- When it puts the visible chunks under what one pass would cost in probes, they are
    -- listed (at most that many, so a sample that misjudged costs little) and probed
    -- directly; when they are not few, the sample sizes the first read instead. 20,000
    -- postings is about 12 ms of scoring; the sample costs about 0.3 ms. (Nothing to
    -- find out when every chunk is visible.)
    if not all_visible and sum_df >= 20000 then
        -- (planned per search past 8 partitions: see above)
        if per_search then
            execute $q$
                select array_agg(p.chunk_id)
                  from (select p.chunk_id from pgfunnel.posting p
                         where p.index_version_id = $1
                           and p.term = (select q.term from unnest($2, $3) as q(term, idf)
                                          order by q.idf desc, q.term limit 1)
                         order by p.chunk_id
                         limit 40) p$q$
               into sample using version_id, q_terms, found_idf;
        else
            select array_agg(p.chunk_id) into sample
              from (select p.chunk_id from pgfunnel.posting p
                     where p.index_version_id = _lexical_hits.version_id
                       and p.term = (select q.term from unnest(q_terms, found_idf) as q(term, idf)
                                      order by q.idf desc, q.term limit 1)
                     order by p.chunk_id
                     limit 40) p;
        end if;
        probe_max := floor(0.6 * sum_df / (3 * cardinality(q_terms) + 4))::integer;
        if cardinality(sample) >= 20 then
            vis := pgfunnel._visible_prefix(sample, array_fill(0::float8, array[cardinality(sample)]),
                                            cardinality(sample), principals, tenant, language,
                                            as_of, metadata_filter, collection_id);
            sample_share := cardinality(vis.chunk_ids)::float8 / cardinality(sample);
            if sample_share * n_chunks <= probe_max then
                visible := pgfunnel._visible_chunks(principals, tenant, language, as_of,
                                                    metadata_filter, collection_id,
                                                    probe_max + 1);
                if cardinality(visible) <= probe_max then
                    -- every visible chunk is listed: the share is exact now
                    visible_share := cardinality(visible)::float8 / greatest(n_chunks, 1);
                    fetch_n := 0;
                else
                    -- more than probe_max are visible: a share of at least that sizes the read
                    visible := null;
                    fetch_n := least(ceil(1.5 * depth * n_chunks / probe_max)::integer,
                                     50 * depth);
                end if;
            else
                -- not few: size the first read so that it likely holds `depth` visible
                -- chunks, rather than scoring every posting again for each deeper read
                -- (100k chunks, 10% visible: 107 -> 31 ms)
                fetch_n := least(greatest(fetch_n, ceil(1.5 * depth / sample_share)::integer),
                                 50 * depth);
            end if;
        end if;
    end if;

    loop
        -- the sample above listed every visible chunk: probe them
        exit when fetch_n = 0;
        -- (planned per search past 8 partitions: see above). In the grouping statement each
        -- term's postings are fenced (offset 0) to one index range read: where the terms are
        -- common, the cached plan turned from about 4 partitions on to reading every posting
        -- of the version's partition and joining the terms by hash (10,000 chunks, a reader
        -- who sees one in five: 18.9 ms against 9.2 with the fence at 5 partitions, the same
        -- at 1).
        -- Most of the statement's time is grouping the postings by chunk, not reading them.
        -- One query term needs no grouping: its share is the score. Two need no hash table:
        -- the index gives each term's postings in chunk order, so a merge full join pairs
        -- them (each side is one range read with no lateral join to turn into a hash join).
        -- On the bench/perf.py corpus at 100k chunks they took 0.6 - 0.8x the grouping's
        -- time. A chain of such joins for three terms or more was no faster (Postgres does
        -- not know the order a full join returns, so every join after the first is hashed
        -- or sorted), nor was grouping the pairs' sums. The scores are the same to the bit:
        -- each share is a whole number of 2^-32 (above), so its sum is exact in any order.
        if per_search then
            execute case cardinality(q_terms)
                    when 1 then $q$
                select array_agg(a.chunk_id order by a.s desc, a.chunk_id),
                       array_agg(a.s / 4294967296.0::float8 order by a.s desc, a.chunk_id)
                  from (select p.chunk_id,
                               round($2[1] * p.tf / (p.tf + $3 + $4 * p.length)) as s
                          from pgfunnel.posting p
                         where p.index_version_id = $5 and p.term = $1[1]
                         order by 2 desc, 1
                         limit $6) a$q$
                    when 2 then $q$
                select array_agg(a.chunk_id order by a.s desc, a.chunk_id),
                       array_agg(a.s / 4294967296.0::float8 order by a.s desc, a.chunk_id)
                  from (select coalesce(t1.chunk_id, t2.chunk_id) as chunk_id,
                               coalesce(t1.s, 0) + coalesce(t2.s, 0) as s
                          from (select p.chunk_id,
                                       round($2[1] * p.tf / (p.tf + $3 + $4 * p.length)) as s
                                  from pgfunnel.posting p
                                 where p.index_version_id = $5 and p.term = $1[1]) t1
                          full join (select p.chunk_id,
                                            round($2[2] * p.tf / (p.tf + $3 + $4 * p.length)) as s
                                       from pgfunnel.posting p
                                      where p.index_version_id = $5 and p.term = $1[2]) t2 on t2.chunk_id = t1.chunk_id
                         order by 2 desc, 1
                         limit $6) a$q$
                    else $q$
                select array_agg(a.chunk_id order by a.s desc, a.chunk_id),
                       array_agg(a.s / 4294967296.0::float8 order by a.s desc, a.chunk_id)
                  from (select p.chunk_id,
                               sum(round(q.weight * p.tf / (p.tf + $3 + $4 * p.length))) as s
                          from unnest($1, $2) as q(term, weight),
                               lateral (select p.chunk_id, p.tf, p.length from pgfunnel.posting p
                                         where p.index_version_id = $5
                                           and p.term = q.term offset 0) p
                         group by p.chunk_id
                         order by 2 desc, 1
                         limit $6) a$q$ end
               into cand_ids, cand_scores
              using q_terms, q_weight, norm_base, norm_per_length, version_id, fetch_n;
        elsif cardinality(q_terms) = 1 then
            select array_agg(a.chunk_id order by a.s desc, a.chunk_id),
                   array_agg(a.s / 4294967296.0::float8 order by a.s desc, a.chunk_id)
              into cand_ids, cand_scores
              from (select p.chunk_id,
                           round(q_weight[1] * p.tf / (p.tf + norm_base + norm_per_length * p.length)) as s
                      from pgfunnel.posting p
                     where p.index_version_id = _lexical_hits.version_id and p.term = q_terms[1]
                     order by 2 desc, 1
                     limit fetch_n) a;
        elsif cardinality(q_terms) = 2 then
            select array_agg(a.chunk_id order by a.s desc, a.chunk_id),
                   array_agg(a.s / 4294967296.0::float8 order by a.s desc, a.chunk_id)
              into cand_ids, cand_scores
              from (select coalesce(t1.chunk_id, t2.chunk_id) as chunk_id,
                           coalesce(t1.s, 0) + coalesce(t2.s, 0) as s
                      from (select p.chunk_id,
                                   round(q_weight[1] * p.tf / (p.tf + norm_base + norm_per_length * p.length)) as s
                              from pgfunnel.posting p
                             where p.index_version_id = _lexical_hits.version_id and p.term = q_terms[1]) t1
                      full join (select p.chunk_id,
                                        round(q_weight[2] * p.tf / (p.tf + norm_base + norm_per_length * p.length)) as s
                                   from pgfunnel.posting p
                                  where p.index_version_id = _lexical_hits.version_id and p.term = q_terms[2]) t2 on t2.chunk_id = t1.chunk_id
                     order by 2 desc, 1
                     limit fetch_n) a;
        else
            select array_agg(a.chunk_id order by a.s desc, a.chunk_id),
                   array_agg(a.s / 4294967296.0::float8 order by a.s desc, a.chunk_id)
              into cand_ids, cand_scores
              from (select p.chunk_id,
                           sum(round(q.weight * p.tf / (p.tf + norm_base + norm_per_length * p.length))) as s
                      from unnest(q_terms, q_weight) as q(term, weight),
                           lateral (select p.chunk_id, p.tf, p.length from pgfunnel.posting p
                                     where p.index_version_id = _lexical_hits.version_id
                                       and p.term = q.term offset 0) p
                     group by p.chunk_id
                     order by 2 desc, 1
                     limit fetch_n) a;
        end if;
        n_cand := coalesce(cardinality(cand_ids), 0);
        if all_visible then
            chunk_ids := coalesce(cand_ids, '{}');
            scores := coalesce(cand_scores, '{}');
            return;
        end if;
        if fetch_n is null then
            -- every match is scored (see below): keep the best visible ones
            vis := pgfunnel._visible_prefix(cand_ids, cand_scores, depth, principals, tenant,
                                            language, as_of, metadata_filter, collection_id);
            chunk_ids := vis.chunk_ids;
            scores := vis.kept_scores;
            return;
        end if;
        -- first check only as many as are wanted (most searches need no more); when the
        -- filter hid some of them, the rest of what was fetched is checked in one go
        while checked < n_cand and cardinality(chunk_ids) < depth loop
            upto := case when checked = 0 then least(n_cand, depth) else n_cand end;
            vis := pgfunnel._visible_prefix(cand_ids[checked + 1:upto], cand_scores[checked + 1:upto],
                                            depth - cardinality(chunk_ids), principals, tenant,
                                            language, as_of, metadata_filter, collection_id);
            chunk_ids := chunk_ids || vis.chunk_ids;
            scores := scores || vis.kept_scores;
            checked := upto;
            -- fewer than 20 checked tell too little to change course on (or to size
            -- the dense leg's first read by)
            visible_share := case when checked >= 20
                                  then cardinality(chunk_ids)::float8 / checked else 1 end;
            -- so few visible (under 3%) that no deeper read is taken (below): the rest of
            -- this one need not be checked
            exit when visible_share * 50 < 1.5;
        end loop;
        if cardinality(chunk_ids) >= depth or (checked >= n_cand and n_cand < fetch_n) then
            return;
        end if;
        -- read again, deep enough to expect `depth` visible chunks at the share seen, while
        -- that is at most 50 x depth candidates to check (a share of 3% or more; 10%
        -- visible used to take a four times deeper read, fall short of it and probe every
        -- visible chunk: 100k chunks, 107 ms)
        next_n := greatest(fetch_n * 2, ceil(1.5 * depth / greatest(visible_share, 0.001))::integer);
        if next_n <= 50 * depth then
            fetch_n := next_n;
            continue;
        end if;

        -- A filter that hides nearly every match read so far. Probe the visible chunks'
        -- postings when visible chunks x query terms is the smaller number; otherwise score
        -- every match (no limit) on the next turn and keep the visible ones. The visible
        -- chunks are counted (listed up to that bound), not estimated from the matches
        -- checked: those can hold none visible while a tenth of the collection is (100k
        -- chunks: probing 10,000 chunks took 225 ms where scoring the 7,500 postings and
        -- checking the matches takes a fraction of it).
        visible := pgfunnel._visible_chunks(principals, tenant, language, as_of,
                                            metadata_filter, collection_id,
                                            (sum_df / cardinality(q_terms))::integer + 1);
        if cardinality(visible) * cardinality(q_terms) > sum_df then
            visible := null;
            fetch_n := null;
            continue;
        end if;
        -- few visible chunks: probe them (below)
        exit;
    end loop;

    -- few visible chunks (all of them listed above): score them, planned per search past
    -- 8 partitions (see above). Where the query terms' postings far outnumber the visible
    -- chunks' (chunk, term) pairs, each pair is one index probe, fenced (offset 0) so the
    -- plan cannot turn to reading every posting of the terms: 10,000 chunks, 100 visible,
    -- four terms, 28,616 postings: about 1 ms against 3.2 - 10 ms for the hash join that a
    -- plan knowing the arrays' lengths, and the cached plan from two partitions on, chose.
    -- Otherwise the terms' postings are read by range and the visible chunks matched by
    -- hash, both sides fenced (left to choose, the cached plan probed 625 visible chunks of
    -- 5,000 one by one: 7,971 index searches). A probe costs about 1.4 us, a posting read
    -- and matched about 0.15 us (100,000 chunks, 1,000 visible, two terms, 3,182
    -- postings: 0.5 ms against 2.8 ms for the probes).
    if sum_df > 9 * cardinality(visible) * cardinality(q_terms) then
        if per_search then
            execute $q$
                select coalesce(array_agg(a.chunk_id order by a.s desc, a.chunk_id), '{}'),
                       coalesce(array_agg(a.s / 4294967296.0::float8 order by a.s desc, a.chunk_id), '{}')
                  from (select p.chunk_id,
                               sum(round(q.weight * p.tf / (p.tf + $3 + $4 * p.length))) as s
                          from unnest($7) as v(id)
                          cross join unnest($1, $2) as q(term, weight)
                          cross join lateral (select p.chunk_id, p.tf, p.length from pgfunnel.posting p
                                               where p.index_version_id = $5
                                                 and p.term = q.term and p.chunk_id = v.id
                                              offset 0) p
                         group by p.chunk_id
                         order by 2 desc, 1
                         limit $6) a$q$
               into chunk_ids, scores
              using q_terms, q_weight, norm_base, norm_per_length, version_id, depth, visible;
        else
            select coalesce(array_agg(a.chunk_id order by a.s desc, a.chunk_id), '{}'),
                   coalesce(array_agg(a.s / 4294967296.0::float8 order by a.s desc, a.chunk_id), '{}')
              into chunk_ids, scores
              from (select p.chunk_id,
                           sum(round(q.weight * p.tf / (p.tf + norm_base + norm_per_length * p.length))) as s
                      from unnest(visible) as v(id)
                      cross join unnest(q_terms, q_weight) as q(term, weight)
                      cross join lateral (select p.chunk_id, p.tf, p.length from pgfunnel.posting p
                                           where p.index_version_id = _lexical_hits.version_id
                                             and p.term = q.term and p.chunk_id = v.id
                                          offset 0) p
                     group by p.chunk_id
                     order by 2 desc, 1
                     limit depth) a;
        end if;
    elsif per_search then
        execute $q$
            select coalesce(array_agg(a.chunk_id order by a.s desc, a.chunk_id), '{}'),
                   coalesce(array_agg(a.s / 4294967296.0::float8 order by a.s desc, a.chunk_id), '{}')
              from (select p.chunk_id,
                           sum(round(q.weight * p.tf / (p.tf + $3 + $4 * p.length))) as s
                      from unnest($1, $2) as q(term, weight)
                      cross join lateral (select p.chunk_id, p.tf, p.length from pgfunnel.posting p
                                           where p.index_version_id = $5 and p.term = q.term
                                          offset 0) p
                      join (select unnest($7) as id offset 0) v on v.id = p.chunk_id
                     group by p.chunk_id
                     order by 2 desc, 1
                     limit $6) a$q$
           into chunk_ids, scores
          using q_terms, q_weight, norm_base, norm_per_length, version_id, depth, visible;
    else
        select coalesce(array_agg(a.chunk_id order by a.s desc, a.chunk_id), '{}'),
               coalesce(array_agg(a.s / 4294967296.0::float8 order by a.s desc, a.chunk_id), '{}')
          into chunk_ids, scores
          from (select p.chunk_id,
                       sum(round(q.weight * p.tf / (p.tf + norm_base + norm_per_length * p.length))) as s
                  from unnest(q_terms, q_weight) as q(term, weight)
                  cross join lateral (select p.chunk_id, p.tf, p.length from pgfunnel.posting p
                                       where p.index_version_id = _lexical_hits.version_id
                                         and p.term = q.term
                                      offset 0) p
                  join (select unnest(visible) as id offset 0) v on v.id = p.chunk_id
                 group by p.chunk_id
                 order by 2 desc, 1
                 limit depth) a;
    end if;
end
$$;

-- the lexical leg as rows (chunk, score, rank)
create or replace function pgfunnel._lexical_leg(
    version_id integer, query_terms text[], depth integer,
    k1 double precision, b double precision,
    principals text[], tenant text, language text, as_of timestamptz,
    metadata_filter jsonb, collection_id integer)
returns table (chunk_id bigint, score double precision, rank integer)
language sql stable
security invoker
set search_path = pg_catalog, pgfunnel
as $$
    select u.id, u.sc, u.ord::integer
      from pgfunnel._lexical_hits(version_id, query_terms, depth, k1, b, principals, tenant,
                                  language, as_of, metadata_filter, collection_id) h,
           unnest(h.chunk_ids, h.scores) with ordinality as u(id, sc, ord)
$$;

-- the nearest `n` rows of a version by its graph, by a query built and planned on this
-- call (about 0.2 ms). The version's partial HNSW index serves only a query that names
-- the version and its key expression literally. The graph walks what the version's index
-- stores (pgfunnel.ingest.hnsw_key): unit halfvecs for versions made now, full vectors
-- for older ones. The rows it returns are ranked and scored on the stored full-precision
-- vectors. Sorting is off here too: even with the limit known, a version of 2,000
-- 384-dimension chunks was planned as a sort of every row (4.8 ms against 0.4 ms).
create or replace function pgfunnel._hnsw_walk_planned(
    version_id integer, query_embedding @vector_schema@.vector, n integer,
    out chunk_ids bigint[], out scores double precision[])
language plpgsql stable
security invoker
set search_path = pg_catalog, pgfunnel
set plan_cache_mode = force_generic_plan
set jit = off
set enable_sort = off
as $$
declare
    hnsw_type text;
    hnsw_key text;
    dims integer;
begin
    -- the type read once, and the key made from it: the select read params ->> 'hnsw_type'
    -- twice
    select coalesce(v.params ->> 'hnsw_type', 'vector'), v.dimensions
      into hnsw_type, dims
      from pgfunnel.index_version v where v.id = _hnsw_walk_planned.version_id;
    hnsw_key := case hnsw_type
                    when 'halfvec' then '@vector_schema@.l2_normalize(%1$s)::@vector_schema@.halfvec('
                                        || dims || ')'
                    when 'vector' then '%1$s::@vector_schema@.vector(' || dims || ')'
                end;
    if hnsw_key is null then
        raise exception 'pgfunnel: index version % records an unknown hnsw_type', version_id;
    end if;
    -- a halfvec graph's query key comes in as $3, computed once: in the ORDER BY it was
    -- computed again for every row returned (see pgfunnel.ingest._WALK_QUERY_KEY)
    execute format($q$
        select array_agg(s.chunk_id order by s.dist, s.chunk_id),
               array_agg(1 - s.dist order by s.dist, s.chunk_id)
          from (select e.chunk_id, e.embedding operator(@vector_schema@.<=>) $1 as dist
                  from pgfunnel.embedding e
                 where e.index_version_id = %s
                 order by %s operator(@vector_schema@.<=>) %s
                 limit $2) s
        $q$, version_id, format(hnsw_key, 'e.embedding'),
             case when hnsw_type = 'halfvec' then '$3' else format(hnsw_key, '$1') end)
       into chunk_ids, scores
      using query_embedding, n,
            case when hnsw_type = 'halfvec'
                 then @vector_schema@.l2_normalize(query_embedding)::@vector_schema@.halfvec end;
end
$$;

-- the nearest `n` rows of a version by its graph, from a plan cached in the session;
-- cached is false when this function holds no walk for the version, and the caller then
-- walks with _hnsw_walk_planned. A cached walk is one static query per version:
-- pgfunnel.ingest.refresh_hnsw_walks replaces this definition with one that holds a walk
-- for each version with a graph (after every graph build or drop, and after `pgfunnel
-- init`). This definition holds none. Sorting is off in it (see
-- pgfunnel.ingest._WALK_FUNCTION): a generic plan would otherwise sort a small version's
-- every row instead of walking its graph.
create or replace function pgfunnel._hnsw_walk(
    version_id integer, query_embedding @vector_schema@.vector, n integer,
    out chunk_ids bigint[], out scores double precision[], out cached boolean)
language plpgsql stable
security invoker
set search_path = pg_catalog, pgfunnel
set plan_cache_mode = force_generic_plan
set jit = off
set enable_sort = off
as $$
begin
    cached := false;
end
$$;

-- the forms with dimensions (the walk reads them from the version), the first of them
-- without expected_share (the first release's; a database made by it kept it after every
-- upgrade), without n_chunks, and without all_visible
drop function if exists pgfunnel._dense_hits(integer, integer, @vector_schema@.vector, integer,
    integer, text[], text, text, timestamptz, jsonb, integer);
drop function if exists pgfunnel._dense_hits(integer, integer, @vector_schema@.vector, integer,
    integer, text[], text, text, timestamptz, jsonb, integer, double precision);
drop function if exists pgfunnel._dense_hits(integer, integer, @vector_schema@.vector, integer,
    integer, text[], text, text, timestamptz, jsonb, integer, double precision, bigint);
drop function if exists pgfunnel._dense_hits(integer, @vector_schema@.vector, integer,
    integer, text[], text, text, timestamptz, jsonb, integer, double precision, bigint);
drop function if exists pgfunnel._dense_leg(integer, integer, @vector_schema@.vector, integer,
    integer, text[], text, text, timestamptz, jsonb, integer);

-- dense leg: cosine similarity top-`depth` over the visible chunks of a version, as
-- arrays in rank order. The graph is walked from a cached plan (_hnsw_walk), or, for a
-- version that has none cached, by a query planned per call (_hnsw_walk_planned). `n_chunks` is the version's chunk
-- count when the caller has it (read here otherwise). When every chunk may be seen
-- (`all_visible`, found out here when NULL; see _all_visible) the walk's rows are the
-- answer. Otherwise visibility is checked
-- afterwards in distance order; when the filter hides part of the nearest rows the
-- index is read deeper (iterative scan), and when it hides nearly all of them an
-- exact scan of the visible rows answers, so the leg returns min(depth, visible) rows.
create or replace function pgfunnel._dense_hits(
    version_id integer, query_embedding @vector_schema@.vector,
    depth integer, ef_search integer,
    principals text[], tenant text, language text, as_of timestamptz,
    metadata_filter jsonb, collection_id integer, expected_share double precision default 1,
    n_chunks bigint default null, all_visible boolean default null,
    out chunk_ids bigint[], out scores double precision[])
language plpgsql stable
security invoker
set search_path = pg_catalog, pgfunnel
set plan_cache_mode = force_generic_plan
set jit = off
as $$
declare
    -- the first read is sized by the visible share the caller expects (the lexical leg
    -- has just measured it under the same filter); 1 when nothing is known
    n integer := ceil(depth / greatest(least(coalesce(expected_share, 1), 1), 0.001))::integer;
    n_raw integer;
    raw_ids bigint[];
    raw_scores double precision[];
    vis record;
    walk record;
    setting text;
    few integer;
    visible bigint[];
    walked boolean := false;
    -- the caller's values, put back at the end: its own transaction goes on with them
    -- (pgvector's defaults when it set none: the settings do not exist before pgvector
    -- loads). A function-level SET clause would do it, but Postgres refuses one on
    -- pgvector's settings to a schema owner that is not a superuser.
    caller_ef_search constant text := coalesce(current_setting('hnsw.ef_search', true), '40');
    caller_iterative_scan constant text := coalesce(current_setting('hnsw.iterative_scan', true),
                                                    'off');
begin
    -- transaction-local, so a pooled connection keeps no setting from this search. The
    -- first read asks for at most ef_search rows, which one plain HNSW search returns;
    -- pgvector's iterative scan (which costs about a quarter more per search) is turned
    -- on only for a deeper read
    setting := set_config('hnsw.ef_search', least(greatest(ef_search, depth), 1000)::text, true);
    setting := set_config('hnsw.iterative_scan', 'off', true);
    all_visible := coalesce(all_visible, pgfunnel._all_visible(collection_id, language,
                                                                metadata_filter));
    if all_visible then
        n := depth;
    end if;

    -- The caller saw a filter hide chunks. A walk finds `depth` visible rows by reading
    -- about depth / share rows and checking each, and a read past ef_search (iterative
    -- scan) costs 15 - 30 us a row (10k - 100k random vectors here); listing the visible
    -- chunks costs about 4 us each and ranking the listed ones exactly 2 - 3 us. So when
    -- the visible chunks may be few, up to `few` = sqrt(2 x depth x chunks) of them are
    -- listed (894 of 10k, 2,828 of 100k at depth 40), and if that is all of them they are
    -- ranked exactly. The caller's share comes from a few dozen checked rows and is
    -- coarse (1 visible of 40 reads as 0.025 when the truth is 0.01): a walk sized by it
    -- read 1,600 rows to find 16 (10k chunks, 1% visible: 21 ms against 1.2 ms). So
    -- listing is tried when that share puts the visible chunks under `few`, and the
    -- listing's bound caps what a wrong guess costs (tried up to 1.5 x `few`, searches
    -- with 20% visible lost 20% of the dense leg's time to lists that came out too long).
    if n_chunks is null then
        select v.chunk_count into n_chunks
          from pgfunnel.index_version v where v.id = _dense_hits.version_id;
    end if;
    few := ceil(sqrt(2 * depth * greatest(n_chunks, 1)))::integer;
    if not all_visible and coalesce(expected_share, 1) < 1 and expected_share * n_chunks <= few then
        visible := pgfunnel._visible_chunks(principals, tenant, language, as_of,
                                            metadata_filter, collection_id, few + 1);
        if cardinality(visible) > few then
            -- more than `few` are visible: walk, expecting at least that share
            n := least(n, ceil(depth * n_chunks::float8 / few)::integer);
            visible := null;
        end if;
    end if;

    for pass in 1..2 loop
        exit when cardinality(visible) <= few;
        exit when n > greatest(2000, 10 * depth);
        if n > least(greatest(ef_search, depth), 1000) then
            setting := set_config('hnsw.iterative_scan', 'relaxed_order', true);
        end if;
        walk := pgfunnel._hnsw_walk(version_id, query_embedding, n);
        if not walk.cached then
            walk := pgfunnel._hnsw_walk_planned(version_id, query_embedding, n);
        end if;
        raw_ids := walk.chunk_ids;
        raw_scores := walk.scores;
        n_raw := coalesce(cardinality(raw_ids), 0);
        if all_visible then
            -- (a deeper read, after a walk came back short, asks for more than depth)
            chunk_ids := coalesce(raw_ids[1:depth], '{}');
            scores := coalesce(raw_scores[1:depth], '{}');
        else
            vis := pgfunnel._visible_prefix(raw_ids, raw_scores, depth, principals, tenant,
                                            language, as_of, metadata_filter, collection_id);
            chunk_ids := vis.chunk_ids;
            scores := vis.kept_scores;
        end if;
        -- enough rows, or the walk read every row of the version (a walk can come back
        -- short of n while the version holds more: under row-level security)
        if cardinality(chunk_ids) >= depth or n_raw >= n_chunks then
            walked := true;
            exit;
        end if;
        -- read deep enough to expect `depth` visible rows at the visible share just
        -- seen (the loop's first line sends a share that small that this means
        -- thousands of rows, or none at all, to the exact scan), unless that share puts
        -- the visible chunks under `few`, where the exact scan is cheaper (see above)
        exit when cardinality(chunk_ids) = 0;
        -- (the share among the n rows asked for: a walk under row-level security
        -- returns only the rows the policies let through)
        exit when cardinality(chunk_ids)::float8 / greatest(n_raw, n) * n_chunks <= few;
        n := ceil(1.5 * depth * n / cardinality(chunk_ids))::integer;
    end loop;

    -- a selective filter: rank the visible rows exactly
    if not walked then
        select coalesce(array_agg(s.chunk_id order by s.dist, s.chunk_id), '{}'),
               coalesce(array_agg(1 - s.dist order by s.dist, s.chunk_id), '{}')
          into chunk_ids, scores
          from (select e.chunk_id, e.embedding operator(@vector_schema@.<=>) query_embedding as dist
                  from pgfunnel.embedding e
                 where e.index_version_id = _dense_hits.version_id
                   and e.chunk_id = any (coalesce(visible,
                                                  pgfunnel._visible_chunks(principals, tenant,
                                                                           language, as_of,
                                                                           metadata_filter,
                                                                           collection_id)))
                 order by 2, 1
                 limit depth) s;
    end if;
    setting := set_config('hnsw.ef_search', caller_ef_search, true);
    setting := set_config('hnsw.iterative_scan', caller_iterative_scan, true);
end
$$;

-- the dense leg as rows (chunk, score, rank)
create or replace function pgfunnel._dense_leg(
    version_id integer, query_embedding @vector_schema@.vector,
    depth integer, ef_search integer,
    principals text[], tenant text, language text, as_of timestamptz,
    metadata_filter jsonb, collection_id integer)
returns table (chunk_id bigint, score double precision, rank integer)
language sql stable
security invoker
set search_path = pg_catalog, pgfunnel
as $$
    select u.id, u.sc, u.ord::integer
      from pgfunnel._dense_hits(version_id, query_embedding, depth, ef_search,
                                principals, tenant, language, as_of, metadata_filter,
                                collection_id) h,
           unnest(h.chunk_ids, h.scores) with ordinality as u(id, sc, ord)
$$;
