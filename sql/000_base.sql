-- pgfunnel: base helpers shared by every other file.

-- the version of the installed SQL functions, so the Python layer can tell an old install apart
create or replace function pgfunnel.version()
returns text
language sql immutable parallel safe
security invoker
set search_path = pg_catalog, pgfunnel
as $$ select '0.1.0'::text $$;

-- the pattern of a value with whitespace at either end, whitespace as Python's str.isspace()
-- (and so ingest, which refuses such a tenant, language or reader) has it: '\s' follows the
-- collation, and under C.UTF-8 misses the no-break space U+00A0, U+0085 and U+001C..U+001F
-- (under plain C every space beyond ASCII), so such a value passed and matched nothing.
-- One definition for every check; immutable and without arguments, a call is folded to
-- its constant when the calling statement is planned (plpgsql plans a declaration once
-- per session), so it costs what the literal did.
create or replace function pgfunnel._space_edged_pattern()
returns text
language sql immutable parallel safe
security invoker
set search_path = pg_catalog, pgfunnel
as $$
    select '^[\t-\r\x1c-\x20\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]|'
           '[\t-\r\x1c-\x20\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]$'::text
$$;

-- a word of a command line as a POSIX shell reads it back, quoted as Python's shlex.quote
-- quotes it: a hint's `pgfunnel versions drop 2 -c my docs` pasted gave -c two words,
-- SQL's own quoting ('it''s') pasted as `its`, and a `$(...)` in a name ran. The Python
-- layer quotes with shlex.quote itself; this is for the hints and messages SQL words
create or replace function pgfunnel._shell_word(word text)
returns text
language sql immutable parallel safe
security invoker
set search_path = pg_catalog, pgfunnel
as $$
    select case when word = '' then ''''''
                when word ~ '^[A-Za-z0-9_@%+=:,./-]+$' then word
                else '''' || replace(word, '''', '''"''"''') || '''' end
$$;

-- raise invalid_parameter_value naming the parameter (Python maps 22023 to ConfigError)
create or replace function pgfunnel._bad_parameter(parameter text, message text)
returns void
language plpgsql
security invoker
set search_path = pg_catalog, pgfunnel
as $$
begin
    -- the value a message shows is cut to its first 1000 characters: a megabyte of query,
    -- tenant or principals came back whole in the error, and so in every log line of it
    raise exception using errcode = '22023', message = parameter || ': ' ||
        case when length(message) > 1000
             then left(message, 1000) || format('... (%s characters in all)', length(message))
             else message end;
end
$$;

-- raise most_specific_type_mismatch for an unusable vector, naming the parameter (Python
-- maps 2200G to InvalidVectorError, as it names a vector it refuses before any SQL runs)
create or replace function pgfunnel._bad_vector(parameter text, message text)
returns void
language plpgsql
security invoker
set search_path = pg_catalog, pgfunnel
as $$
begin
    raise exception using errcode = '2200G', message = parameter || ': ' || message;
end
$$;

-- an error for a NULL or unknown index version id: each function that takes one would
-- otherwise answer as if for a version with nothing in it (no rows, NULLs, "absent")
create or replace function pgfunnel._require_version(version_id integer)
returns void
language plpgsql stable
security invoker
set search_path = pg_catalog, pgfunnel
as $$
begin
    if version_id is null then
        perform pgfunnel._bad_parameter('version_id', 'must not be NULL');
    end if;
    if not exists (select 1 from pgfunnel.index_version v
                    where v.id = _require_version.version_id) then
        raise exception using errcode = 'P0002',
            message = format('index version id %s does not exist', version_id);
    end if;
end
$$;

-- the id of a collection by name, or an error that names it
create or replace function pgfunnel._collection_id(collection_name text)
returns integer
language plpgsql stable
security invoker
set search_path = pg_catalog, pgfunnel
as $$
declare
    found_id integer;
    ingest_into text;
begin
    if collection_name is null then
        perform pgfunnel._bad_parameter('collection', 'must not be NULL');
    end if;
    select c.id into found_id from pgfunnel.collection c where c.name = collection_name;
    if found_id is null then
        -- the ingest the hint suggests goes into the name asked for, quoted for a shell
        -- by _shell_word (shlex.quote's rule, as the other hints; it kept its own copy).
        -- Only a printable ASCII name with no space at either end is named here; any
        -- other keeps the placeholder NAME, and the Python layer and the CLI name it by
        -- their own check (pgfunnel.ingest.ingest_target): Unicode's lists of invisible
        -- characters are Python's to keep, not copied here
        ingest_into := case
            when length(collection_name) <= 200
             and collection_name ~ '^[!-~]([ -~]*[!-~])?$'
            then pgfunnel._shell_word(collection_name)
            else 'NAME'
        end;
        raise exception using errcode = 'P0002',
            message = case when length(collection_name) > 200
                           then format('collection %L... (%s characters) does not exist',
                                       left(collection_name, 200), length(collection_name))
                           else format('collection %L does not exist', collection_name) end,
            -- the ones that exist: a user of the demo's collection 'demo' who left out
            -- `collection =>` searched 'default' and was told only to ingest into it
            hint = coalesce('this database has '
                            || (select string_agg(pg_catalog.quote_literal(n.name), ', '
                                                  order by n.name)
                                  from (select c.name from pgfunnel.collection c
                                         order by c.name limit 10) n)
                            || (case when (select count(*) from pgfunnel.collection) > 10
                                     then ', ...' else '' end)
                            || ' (pass one as the collection: collection => ''NAME'' in '
                            || 'SQL, -c NAME in the CLI); or ',
                            'this database has none yet; ')
                   || 'ingest into it first: pgfunnel ingest PATH --collection '
                   || ingest_into;
    end if;
    return found_id;
end
$$;

-- the active index version of a collection (id, dimensions, analyzer)
create or replace function pgfunnel._active_version(collection_id integer,
    out version_id integer, out dimensions integer, out analyzer text,
    out chunk_count bigint, out avg_length double precision)
language plpgsql stable
security invoker
set search_path = pg_catalog, pgfunnel
as $$
begin
    select v.id, v.dimensions, v.analyzer, v.chunk_count,
           case when v.chunk_count > 0 then v.total_length::float8 / v.chunk_count else 0 end
      into version_id, dimensions, analyzer, chunk_count, avg_length
      from pgfunnel.index_version v
     where v.collection_id = _active_version.collection_id and v.state = 'active';
    if version_id is null then
        raise exception using errcode = 'P0002',
            message = format('collection %L has no active index version',
                             coalesce((select c.name from pgfunnel.collection c
                                        where c.id = _active_version.collection_id),
                                      'id ' || collection_id)),
            hint = 'pgfunnel versions activate N (pgfunnel versions list shows them); a new collection gets version 1 from its first ingest';
    end if;
end
$$;
