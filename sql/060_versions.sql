-- pgfunnel: index versions. Coverage of a version, the state of its HNSW index, and the
-- activation switch.
--
-- Activation is one transaction: the old active version becomes 'retired', the target
-- becomes 'active', and the target's params.activations records which version it
-- replaced (rollback follows that record). A search reads the active version once, in
-- the stable _pool() whose statements all share the calling statement's snapshot, so a
-- search that overlaps the commit runs wholly on the old or wholly on the new version.

-- how completely a version covers its collection's chunks (every count should be equal)
create or replace function pgfunnel.version_coverage(version_id integer,
    out collection_chunks bigint, out lexical_rows bigint, out embedding_rows bigint,
    out counted_chunks bigint, out missing bigint)
language plpgsql stable
security invoker
set search_path = pg_catalog, pgfunnel
as $$
begin
    -- a row of NULLs would read as "nothing missing"
    perform pgfunnel._require_version(version_id);
    select (select count(*) from pgfunnel.chunk c where c.collection_id = v.collection_id),
           (select count(*) from pgfunnel.lexical l where l.index_version_id = v.id),
           (select count(*) from pgfunnel.embedding e where e.index_version_id = v.id),
           v.chunk_count,
           (select count(*) from pgfunnel.chunk c
             where c.collection_id = v.collection_id
               and not exists (select 1 from pgfunnel.lexical l
                                where l.index_version_id = v.id and l.chunk_id = c.id))
      into collection_chunks, lexical_rows, embedding_rows, counted_chunks, missing
      from pgfunnel.index_version v
     where v.id = version_coverage.version_id;
end
$$;

-- the partial HNSW index of a version: its name, whether it exists, is valid, and its size
create or replace function pgfunnel.version_index(version_id integer,
    out index_name text, out present boolean, out valid boolean, out size_bytes bigint)
language plpgsql stable
security invoker
set search_path = pg_catalog, pgfunnel
as $$
begin
    -- present = false would read as "the version's index is missing"
    perform pgfunnel._require_version(version_id);
    select 'embedding_hnsw_v' || version_index.version_id,
           i.indexrelid is not null,
           coalesce(i.indisvalid and i.indisready, false),
           coalesce(pg_relation_size(i.indexrelid), 0)
      into index_name, present, valid, size_bytes
      from (select 1) one
      left join pg_class c
             on c.relname = 'embedding_hnsw_v' || version_index.version_id
            and c.relnamespace = 'pgfunnel'::regnamespace
      left join pg_index i on i.indexrelid = c.oid;
end
$$;

-- make a ready or retired version the active one of its collection; returns the version
-- number it replaced (NULL when none was active). Runs in the caller's transaction.
create or replace function pgfunnel.activate_version(collection_name text, version_number integer)
returns integer
language plpgsql volatile
security invoker
set search_path = pg_catalog, pgfunnel
as $$
declare
    coll_id integer;
    target pgfunnel.index_version;
    prev pgfunnel.index_version;
    cov record;
    idx record;
begin
    coll_id := pgfunnel._collection_id(collection_name);
    if version_number is null then
        perform pgfunnel._bad_parameter('version_number', 'must not be NULL');
    end if;
    -- the ingest lock: no chunk can be added between the coverage check and the switch
    perform pg_advisory_xact_lock(hashtext('pgfunnel:ingest:' || collection_name));
    select * into target from pgfunnel.index_version v
     where v.collection_id = coll_id and v.version = version_number for update;
    if target.id is null then
        raise exception using errcode = 'P0002',
            message = format('collection %L has no index version %s', collection_name, version_number),
            hint = 'pgfunnel versions list shows the versions';
    end if;
    if target.params ? 'dropping' then
        -- pgfunnel versions drop marks the version under this lock before it drops the
        -- index and the rows: activated meanwhile, the collection would lose its active one
        raise exception using errcode = '55000',
            message = format('version %s of %L is being dropped', version_number, collection_name),
            hint = format('a drop that was interrupted is finished by pgfunnel versions drop %s -c %s',
                          version_number, pgfunnel._shell_word(collection_name));
    end if;
    select * into prev from pgfunnel.index_version v
     where v.collection_id = coll_id and v.state = 'active' for update;
    if target.state = 'active' then
        return target.version;
    end if;
    if target.state not in ('ready', 'retired') then
        raise exception using errcode = '55000',
            message = format('version %s of %L is %s; only a validated (ready) or retired version can be activated',
                             version_number, collection_name, target.state),
            -- a plain `pgfunnel reindex` asks for the active version's settings (and
            -- collection 'default'): given this one's others, it drops it and starts again
            hint = format('a pgfunnel reindex with its own settings resumes and validates it; '
                          'pgfunnel versions list -c %s names that command',
                          pgfunnel._shell_word(collection_name));
    end if;
    select * into cov from pgfunnel.version_coverage(target.id);
    if cov.missing = 0 and (cov.lexical_rows <> cov.collection_chunks
                            or cov.embedding_rows <> cov.collection_chunks
                            or cov.counted_chunks <> cov.collection_chunks) then
        -- nothing to catch up, yet the version's rows or its BM25 chunk count disagree with
        -- the collection: rows deleted past the deletion trigger (TRUNCATE, the trigger
        -- disabled, replica mode). It said "0 chunks missing" and pointed at the catch-up,
        -- which cannot mend it.
        raise exception using errcode = '55000',
            message = format('version %s of %L does not match the collection: it has %s chunks, '
                             'the version %s lexical rows, %s embedding rows and a BM25 chunk '
                             'count of %s (rows deleted past its deletion trigger); nothing is '
                             'missing to catch up. Build a new version with its settings '
                             '(pgfunnel reindex -c %s, with the options pgfunnel versions list '
                             'shows for it), or drop it (pgfunnel versions drop %s -c %s)',
                             version_number, collection_name, cov.collection_chunks,
                             cov.lexical_rows, cov.embedding_rows, cov.counted_chunks,
                             pgfunnel._shell_word(collection_name), version_number,
                             pgfunnel._shell_word(collection_name));
    end if;
    if cov.missing <> 0 or cov.lexical_rows <> cov.collection_chunks
       or cov.embedding_rows <> cov.collection_chunks or cov.counted_chunks <> cov.collection_chunks then
        raise exception using errcode = '55000',
            message = format('version %s of %L does not cover the collection: %s chunks, %s lexical rows, '
                             '%s embedding rows, chunk_count %s, %s chunks missing',
                             version_number, collection_name, cov.collection_chunks, cov.lexical_rows,
                             cov.embedding_rows, cov.counted_chunks, cov.missing),
            hint = 'pgfunnel versions activate catches up missing chunks before it switches';
    end if;
    select * into idx from pgfunnel.version_index(target.id);
    if not idx.valid then
        raise exception using errcode = '55000',
            message = format('version %s of %L has no valid HNSW index (%s %s)', version_number,
                             collection_name, idx.index_name,
                             case when idx.present then 'is invalid' else 'is missing' end),
            hint = format('pgfunnel versions activate %s -c %s builds it before it switches',
                          version_number, pgfunnel._shell_word(collection_name));
    end if;

    if prev.id is not null then
        update pgfunnel.index_version v set state = 'retired', retired_at = now()
         where v.id = prev.id;
    end if;
    update pgfunnel.index_version v
       set state = 'active', activated_at = now(), retired_at = null,
           -- the last 20 activations are kept: rollback needs only the latest
           params = v.params || jsonb_build_object('activations',
               (select coalesce(jsonb_agg(h.e order by h.o), '[]'::jsonb)
                  from (select a.e, a.o
                          from jsonb_array_elements(coalesce(v.params -> 'activations', '[]'::jsonb))
                               with ordinality as a(e, o)
                         order by a.o desc limit 19) h)
               -- the id too: a dropped version's number is given again to the next build,
               -- and rollback must not take that one for the version it replaced
               || jsonb_build_array(jsonb_build_object('at', now(), 'replaced', prev.version,
                                                       'replaced_id', prev.id)))
     where v.id = target.id;
    return prev.version;
end
$$;

-- the version the active one replaced when it was last activated (what rollback returns to);
-- NULL when it replaced none or that version was dropped: a dropped version's number goes to
-- the next build, which the entry's id tells apart (an entry from before ids were recorded
-- is matched by number)
create or replace function pgfunnel.previous_version(collection_name text)
returns integer
language sql stable
security invoker
set search_path = pg_catalog, pgfunnel
as $$
    select p.version
      from pgfunnel.index_version v
      cross join lateral (select v.params -> 'activations' -> -1 as e) a
      join pgfunnel.index_version p
        on p.collection_id = v.collection_id
       and p.version = (a.e ->> 'replaced')::integer
       and (a.e ->> 'replaced_id' is null or p.id = (a.e ->> 'replaced_id')::bigint)
     where v.collection_id = pgfunnel._collection_id(collection_name) and v.state = 'active'
$$;
