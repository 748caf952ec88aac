-- pgfunnel: row-level security helpers and explicit EXECUTE grants.
--
-- The policies themselves are created by pgfunnel.security.enable_rls() (`pgfunnel init
-- --rls`); this file only defines the functions they call, so it is safe to re-run on
-- every init/migrate. The reader's identity comes from two transaction-local settings,
-- set with set_config(..., true) / SET LOCAL, never from a session-level one:
--   pgfunnel.principals  JSON array of strings, e.g. '["alice","team-a"]'
--   pgfunnel.tenant      the tenant, '' for none
-- A missing or empty principals setting makes every policy false: no rows, never all.

-- the reader's principals from the transaction-local setting; NULL when it is not set
create or replace function pgfunnel._rls_principals()
returns text[]
language plpgsql stable parallel safe
security invoker
set search_path = pg_catalog, pgfunnel
as $$
declare
    raw text := current_setting('pgfunnel.principals', true);
    parsed jsonb;
    -- whitespace as ingest (Python) has it, not as '\s' and the collation do
    edged constant text := pgfunnel._space_edged_pattern();
begin
    if raw is null or raw = '' then
        return null;
    end if;
    begin
        parsed := raw::jsonb;
    exception when others then
        parsed := null;
    end;
    -- an empty string, or one that begins or ends with whitespace, is refused here as
    -- the principals argument refuses it: no document names it (ingest refuses such a
    -- reader), and a reader who is '' or ' alice' is a bug upstream
    if parsed is null or jsonb_typeof(parsed) <> 'array'
       or exists (select 1 from jsonb_array_elements(parsed) e
                   where jsonb_typeof(e) <> 'string' or e operator(pg_catalog.=) '""'::jsonb
                      or (e operator(pg_catalog.#>>) '{}') operator(pg_catalog.~) edged) then
        raise exception using errcode = '22023',
            message = 'pgfunnel.principals: must be a JSON array of non-empty strings without '
                      'whitespace at either end, e.g. ''["alice"]'' (set it with '
                      'set_config(''pgfunnel.principals'', ..., true))';
    end if;
    -- the tenant setting is checked here too: a policy reads it only for a row that has a
    -- tenant, so checked where it is read, ' acme' hid the tenant's rows without a word
    -- wherever the rows seen had none
    if current_setting('pgfunnel.tenant', true) operator(pg_catalog.~) edged then
        raise exception using errcode = '22023',
            message = format('pgfunnel.tenant: must not begin or end with whitespace, got %L',
                             left(current_setting('pgfunnel.tenant', true), 200));
    end if;
    return array(select jsonb_array_elements_text(parsed));
end
$$;

-- the reader's tenant from the transaction-local setting; NULL when unset or ''
create or replace function pgfunnel._rls_tenant()
returns text
language sql stable parallel safe
security invoker
set search_path = pg_catalog, pgfunnel
as $$ select nullif(current_setting('pgfunnel.tenant', true), '') $$;

-- the document policy: may the reader in the transaction-local settings see this row?
-- (policies inline the same expression with the settings read once per statement)
create or replace function pgfunnel._rls_document_visible(
    is_public boolean, readers text[], tenant text)
returns boolean
language sql stable parallel safe
security invoker
set search_path = pg_catalog, pgfunnel
as $$
    select pgfunnel._rls_principals() is not null
       and (is_public or readers operator(pg_catalog.&&) pgfunnel._rls_principals())
       and (tenant is null or tenant = pgfunnel._rls_tenant())
$$;

-- EXECUTE is granted explicitly: nothing in schema pgfunnel runs for PUBLIC. Readers get
-- the search path (every function except the ones that write index data); writers get
-- all. The roles are created by pgfunnel.security.ensure_roles(); until they exist only
-- the owner (and superusers) can call the functions.
do $$
declare
    writer_only text[] := array['_bm25_add', '_remove_chunks', '_lexical_deleted',
                                '_indexed_update_refused'];
    f record;
    has_reader boolean := exists (select 1 from pg_catalog.pg_roles where rolname = 'pgfunnel_reader');
    has_writer boolean := exists (select 1 from pg_catalog.pg_roles where rolname = 'pgfunnel_writer');
    -- the wrapper (sql/045_public_funnel_search.sql) where this role made it: public may
    -- be missing, or hold another role's, which this one may not grant, or a
    -- funnel_search of the application's own beside it (the body tells pgfunnel's)
    wrappers regprocedure[] := array(
        select p.oid::regprocedure from pg_catalog.pg_proc p
         where p.pronamespace = pg_catalog.to_regnamespace('public')
           and p.proname = 'funnel_search'
           and p.prosrc like '%pgfunnel.funnel_search(%'
           and pg_catalog.pg_has_role(p.proowner, 'USAGE'));
    wrapper regprocedure;
begin
    execute 'revoke execute on all functions in schema pgfunnel from public';
    foreach wrapper in array wrappers loop
        execute format('revoke execute on function %s from public', wrapper);
    end loop;
    for f in
        select p.oid::regprocedure as sig, p.proname
          from pg_catalog.pg_proc p
         where p.pronamespace = 'pgfunnel'::regnamespace
    loop
        if has_writer then
            execute format('grant execute on function %s to pgfunnel_writer', f.sig);
        end if;
        if has_reader and not (f.proname = any (writer_only)) then
            execute format('grant execute on function %s to pgfunnel_reader', f.sig);
        end if;
    end loop;
    foreach wrapper in array wrappers loop
        if has_reader then
            execute format('grant execute on function %s to pgfunnel_reader', wrapper);
        end if;
        if has_writer then
            execute format('grant execute on function %s to pgfunnel_writer', wrapper);
        end if;
    end loop;
end
$$;
