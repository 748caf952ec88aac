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

-- the document frequency of each of the terms asked for, in one index version.
-- One of the two pgfunnel functions that run with their owner's rights (the other is
-- _lexical_deleted, below), on purpose: readers may not read
-- term_stat itself, which would list every word of the collection, the words of documents
-- they cannot read included; a search needs the df of its own query terms only. Its body
-- is one fixed read with a pinned search_path, so running it with the owner's rights
-- lends nothing else. Both definer functions name pg_temp last in their path: unnamed,
-- Postgres searches the caller's temporary schema first for tables and types, and a
-- caller's domain pg_temp.text (checked by a function of its own) would run as the owner.
create or replace function pgfunnel._term_df(version_id integer, terms text[])
returns table (term text, df integer)
language plpgsql stable parallel safe
security definer
set search_path = pg_catalog, pgfunnel, pg_temp
set plan_cache_mode = force_generic_plan
set jit = off
as $$
begin
    return query
    select ts.term, ts.df
      from pgfunnel.term_stat ts
     where ts.index_version_id = _term_df.version_id and ts.term = any (_term_df.terms);
end
$$;

-- chunk terms were read through this before the trigger below took the deletes over
drop function if exists pgfunnel._chunk_terms(bigint[]);

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
    -- The version row first: every writer of a version's statistics (this, and the
    -- deletion trigger below) locks it before any term row, so writers of one version
    -- queue on it instead of deadlocking over term rows taken in different orders (a
    -- transaction that deletes chunks and then adds postings, as ingest's replacement
    -- does, would otherwise hold the version row while it waits for a term row).
    update pgfunnel.index_version v
       set chunk_count = v.chunk_count + n_chunks,
           total_length = v.total_length + _bm25_add.total_length
     where v.id = version_id;

    insert into pgfunnel.term_stat as ts (index_version_id, term, df)
    select version_id, t.term, t.df
      from unnest(terms, dfs) as t(term, df)
     order by t.term collate "C"
    on conflict (index_version_id, term) do update set df = ts.df + excluded.df;
end
$$;

-- take deleted lexical rows out of the postings and the BM25 statistics of their version
-- (statement trigger on pgfunnel.lexical; the deleted rows come as `gone_lexical`). A
-- chunk's lexical rows go whenever the chunk does: through pgfunnel (_remove_chunks) and
-- through a plain DELETE on pgfunnel.chunk or pgfunnel.document, which cascades here, so
-- the statistics stay exact either way. Rows of a version that is itself being deleted
-- (its postings and term_stat go with it) have nothing left to correct.
-- It runs with its owner's rights, the second exception: a role that may only delete
-- documents (an app's admin screen) starts the cascade, and before Postgres 18 an AFTER
-- trigger runs as the role that fires it, which may not update the statistics (42501 on
-- index_version); from 18 on it runs as the role that queued the event, the cascade's
-- owner. As the owner it behaves the same on every version. It changes only what the
-- deleted rows in its transition table account for, and a trigger function cannot be
-- called on its own.
create or replace function pgfunnel._lexical_deleted()
returns trigger
language plpgsql
security definer
set search_path = pg_catalog, pgfunnel, pg_temp
as $$
declare
    emptied_versions integer[];
    emptied_terms text[];
    gone_version integer;
begin
    -- the versions' rows first, in id order: see _bm25_add
    perform 1 from pgfunnel.index_version v
     where v.id in (select g.index_version_id from gone_lexical g)
     order by v.id
       for update;

    -- Each version's postings by a statement that names the version: planned with the
    -- version as a join key, the delete locked every version's posting partition, so a
    -- document deleted or replaced in one collection held a lock on every other
    -- collection's partition until commit, and waited for (or blocked) the index build
    -- and the drop of a version anywhere in the database.
    for gone_version in
        select distinct g.index_version_id
          from gone_lexical g
          join pgfunnel.index_version v on v.id = g.index_version_id
         order by 1
    loop
        execute format(
            'delete from pgfunnel.posting p
              using (select g.chunk_id, t.term
                       from gone_lexical g,
                            unnest(pg_catalog.tsvector_to_array(g.terms)) as t(term)
                      where g.index_version_id = %1$s) g
              where p.index_version_id = %1$s and p.term = g.term
                and p.chunk_id = g.chunk_id', gone_version);
    end loop;

    with gone as (
        select g.index_version_id, t.term
          from gone_lexical g
          join pgfunnel.index_version v on v.id = g.index_version_id,
               unnest(pg_catalog.tsvector_to_array(g.terms)) as t(term)
    ),
    counted as (
        select g.index_version_id, g.term, count(*) as n
          from gone g
         group by 1, 2
    ),
    lowered as (
        update pgfunnel.term_stat ts
           set df = ts.df - c.n
          from counted c
         where ts.index_version_id = c.index_version_id and ts.term = c.term
        returning ts.index_version_id, ts.term, ts.df
    )
    select array_agg(l.index_version_id), array_agg(l.term)
      into emptied_versions, emptied_terms
      from lowered l
     where l.df <= 0;
    -- a second statement: one statement cannot both update a row and delete it
    if emptied_terms is not null then
        delete from pgfunnel.term_stat ts
         using unnest(emptied_versions, emptied_terms) as e(version_id, term)
         where ts.index_version_id = e.version_id and ts.term = e.term;
    end if;

    update pgfunnel.index_version v
       set chunk_count = v.chunk_count - s.n,
           total_length = v.total_length - s.total
      from (select g.index_version_id, count(*) as n, sum(g.length) as total
              from gone_lexical g
             group by 1) s
     where v.id = s.index_version_id;
    return null;
end
$$;


-- refuse to change in place what a chunk's postings, statistics and vectors were made
-- from: its text, and which document and collection it belongs to. Search would go on
-- matching the old words. Ingest never updates these; it replaces a changed document's
-- chunks whole, index rows included.
create or replace function pgfunnel._indexed_update_refused()
returns trigger
language plpgsql
security invoker
set search_path = pg_catalog, pgfunnel
as $$
begin
    raise exception using
        errcode = '55000',
        message = format('%s %s: %s is indexed and cannot be updated in place',
                         tg_table_name, old.id,
                         case when tg_table_name = 'document' then 'its collection'
                              else 'its text, document or collection' end),
        hint = 're-ingest the document (pgfunnel ingest, or Ingester.ingest), which '
               'replaces its chunks and their index rows together';
end
$$;

-- The triggers, each (re)created only where it is missing, disabled or defined otherwise
-- (written as pg_get_triggerdef prints it). CREATE OR REPLACE TRIGGER takes a SHARE ROW
-- EXCLUSIVE lock on its table even when nothing changes, and `init` or `migrate` holds
-- it until the functions commit: every ingest and delete waited for it, and one whose
-- batch held chunk while init, holding lexical, waited for chunk deadlocked with it
-- (one of the two failed with "deadlock detected"). Compared under a search_path of
-- pg_catalog alone: pg_get_triggerdef leaves the function unqualified where its schema
-- is on the path, so a role or database with pgfunnel there matched none and had all
-- three replaced on every run.
do $$
declare
    definition text;
    caller_path text := pg_catalog.current_setting('search_path');
begin
    perform pg_catalog.set_config('search_path', 'pg_catalog', true);
    foreach definition in array array[
        'CREATE TRIGGER lexical_deleted AFTER DELETE ON pgfunnel.lexical '
        'REFERENCING OLD TABLE AS gone_lexical FOR EACH STATEMENT '
        'EXECUTE FUNCTION pgfunnel._lexical_deleted()',
        'CREATE TRIGGER chunk_indexed_columns BEFORE UPDATE OF text, document_id, '
        'collection_id ON pgfunnel.chunk FOR EACH ROW WHEN (((old.text IS DISTINCT FROM '
        'new.text) OR (old.document_id IS DISTINCT FROM new.document_id) OR '
        '(old.collection_id IS DISTINCT FROM new.collection_id))) '
        'EXECUTE FUNCTION pgfunnel._indexed_update_refused()',
        'CREATE TRIGGER document_collection BEFORE UPDATE OF collection_id ON '
        'pgfunnel.document FOR EACH ROW WHEN ((old.collection_id IS DISTINCT FROM '
        'new.collection_id)) EXECUTE FUNCTION pgfunnel._indexed_update_refused()']
    loop
        if not exists (select from pg_catalog.pg_trigger t
                        where t.tgrelid in ('pgfunnel.lexical'::pg_catalog.regclass,
                                            'pgfunnel.chunk'::pg_catalog.regclass,
                                            'pgfunnel.document'::pg_catalog.regclass)
                          and not t.tgisinternal and t.tgenabled = 'O'
                          and pg_catalog.pg_get_triggerdef(t.oid) = definition) then
            execute 'CREATE OR REPLACE' || pg_catalog.substr(definition, 7);
        end if;
    end loop;
    perform pg_catalog.set_config('search_path', caller_path, true);
end
$$;

-- remove chunks and everything indexed for them in every version: their lexical rows and
-- embeddings cascade, and the trigger above takes the lexical rows out of the postings and
-- statistics (once for the whole statement: Postgres collects a cascade's rows into one
-- transition table)
create or replace function pgfunnel._remove_chunks(chunk_ids bigint[])
returns integer
language plpgsql
security invoker
set search_path = pg_catalog, pgfunnel
as $$
declare
    removed integer;
begin
    delete from pgfunnel.chunk c where c.id = any (chunk_ids);
    get diagnostics removed = row_count;
    return removed;
end
$$;

-- BM25 statistics recounted from scratch, to check the maintained ones against
create or replace function pgfunnel.bm25_recount(version_id integer)
returns table (term text, df bigint)
language plpgsql stable
security invoker
set search_path = pg_catalog, pgfunnel
as $$
begin
    -- no rows would read as "no term_stat row differs" for a mistyped id
    perform pgfunnel._require_version(version_id);
    return query
        select p.term, count(*) from pgfunnel.posting p
         where p.index_version_id = bm25_recount.version_id group by p.term;
end
$$;
