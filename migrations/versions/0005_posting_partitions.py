"""Postings are partitioned by index version.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 06:00:00

`pgfunnel.posting` becomes a list-partitioned table with one partition per index
version (`posting_v<id>`, made with the version). A new version's partition takes its
first postings without an index, and the index is built once at the end of that first
ingest or reindex: at 100k chunks the per-row inserts into a shared, already large
index were a third of the database's ingest time. Dropping a version drops its
partition.

Postings written before this revision stay where they are: the old table becomes the
partition `posting_legacy` for the versions that exist now, with its primary key, so
nothing is copied. The partitioned parent has no index of its own (so that a partition
can be filled before it has one); every partition carries a unique index on
(index_version_id, term, chunk_id) including tf and length.
"""

from __future__ import annotations

from alembic import op
from sqlalchemy import text

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_PARENT = """
create table pgfunnel.posting (
    index_version_id integer not null,
    term text collate "C" not null,
    chunk_id bigint not null,
    tf smallint not null,
    length integer not null
) partition by list (index_version_id)
"""


def _access_of_posting() -> list[str]:
    """The statements that give a new table named pgfunnel.posting the row-level security,
    policies and grants the current one has. Read before the current one is renamed:
    Postgres prints a policy's columns qualified by the table's name at that moment."""
    bind = op.get_bind()
    out: list[str] = []
    # names come back quoted by Postgres itself, so that any role or policy name survives;
    # a restrictive policy made permissive would be OR-ed in and widen what a role reads
    for name, permissive, cmd, to, qual, check in bind.execute(text(
            "select quote_ident(policyname), permissive, cmd, "
            "(select string_agg(quote_ident(r), ', ') from unnest(roles) r), qual, with_check "
            "from pg_policies where schemaname = 'pgfunnel' and tablename = 'posting' "
            "order by policyname")):
        kind = "restrictive" if permissive == "RESTRICTIVE" else "permissive"
        statement = (f"create policy {name} on pgfunnel.posting as {kind} "
                     f"for {cmd.lower()} to {to}")
        if qual is not None:
            statement += f" using ({qual})"
        if check is not None:
            statement += f" with check ({check})"
        out.append(statement)
    rls, force = bind.execute(text(
        "select relrowsecurity, relforcerowsecurity from pg_class "
        "where oid = cast('pgfunnel.posting' as regclass)")).one()
    if rls:
        out.append("alter table pgfunnel.posting enable row level security")
    if force:
        out.append("alter table pgfunnel.posting force row level security")
    # a grant option dropped here would take away what the role may pass on
    for grantee, privilege, grantable in bind.execute(text(
            "select quote_ident(g.rolname), a.privilege_type, a.is_grantable from pg_class c, "
            "aclexplode(c.relacl) a join pg_roles g on g.oid = a.grantee "
            "where c.oid = cast('pgfunnel.posting' as regclass) and a.grantee <> c.relowner")):
        option = " with grant option" if grantable else ""
        out.append(f"grant {privilege} on pgfunnel.posting to {grantee}{option}")
    return out


def upgrade() -> None:
    bind = op.get_bind()
    # the version ids the old table holds, read by walking its primary key
    ids = [int(r[0]) for r in bind.execute(text(
        "with recursive v(id) as ("
        "  select min(index_version_id) from pgfunnel.posting"
        "  union all"
        "  select (select min(p.index_version_id) from pgfunnel.posting p"
        "           where p.index_version_id > v.id) from v where v.id is not null)"
        " select id from v where id is not null"))]
    access = _access_of_posting()
    op.execute("alter table pgfunnel.posting rename to posting_legacy")
    op.execute("alter index pgfunnel.posting_pkey rename to posting_legacy_pkey")
    op.execute(_PARENT)
    for statement in access:
        op.execute(statement)
    if ids:
        op.execute("alter table pgfunnel.posting attach partition pgfunnel.posting_legacy "
                   f"for values in ({', '.join(str(i) for i in ids)})")
    else:
        op.execute("drop table pgfunnel.posting_legacy")
    # versions that exist now but hold no postings get a partition of their own
    for (vid,) in bind.execute(text("select id from pgfunnel.index_version order by id")).all():
        if int(vid) not in ids:
            op.execute(f"create table pgfunnel.posting_v{int(vid)} partition of "
                       f"pgfunnel.posting for values in ({int(vid)})")
            op.execute(f"create unique index posting_v{int(vid)}_key on "
                       f"pgfunnel.posting_v{int(vid)} (index_version_id, term, chunk_id) "
                       "include (tf, length)")


def downgrade() -> None:
    bind = op.get_bind()
    parts = [str(r[0]) for r in bind.execute(text(
        "select c.relname from pg_inherits i join pg_class c on c.oid = i.inhrelid "
        "where i.inhparent = cast('pgfunnel.posting' as regclass) order by 1"))]
    access = _access_of_posting()
    op.execute("alter table pgfunnel.posting rename to posting_partitioned")
    for part in parts:
        op.execute(f"alter table pgfunnel.posting_partitioned detach partition pgfunnel.{part}")
    if "posting_legacy" in parts:
        op.execute("alter table pgfunnel.posting_legacy rename to posting")
        op.execute("alter index pgfunnel.posting_legacy_pkey rename to posting_pkey")
        # what was set on the parent since (`pgfunnel init --rls`, grants) is what holds
        for (name,) in bind.execute(text(
                "select quote_ident(policyname) from pg_policies where schemaname = 'pgfunnel' "
                "and tablename = 'posting'")).all():
            op.execute(f"drop policy {name} on pgfunnel.posting")
        op.execute("alter table pgfunnel.posting no force row level security")
        op.execute("alter table pgfunnel.posting disable row level security")
        for (grantee,) in bind.execute(text(
                "select distinct quote_ident(g.rolname) from pg_class c, aclexplode(c.relacl) a "
                "join pg_roles g on g.oid = a.grantee "
                "where c.oid = cast('pgfunnel.posting' as regclass) "
                "and a.grantee <> c.relowner")).all():
            # every grantee's grants go and the parent's come back below, so cascading to
            # what a grantee with grant option passed on takes nothing that stays
            op.execute(f"revoke all on pgfunnel.posting from {grantee} cascade")
        for statement in access:
            op.execute(statement)
    else:
        op.execute(_PARENT.replace(" partition by list (index_version_id)", ""))
        op.execute("alter table pgfunnel.posting add constraint posting_pkey primary key "
                   "(index_version_id, term, chunk_id) include (tf, length)")
        for statement in access:
            op.execute(statement)
    for part in parts:
        if part != "posting_legacy":
            op.execute(f"insert into pgfunnel.posting select * from pgfunnel.{part}")
            op.execute(f"drop table pgfunnel.{part}")
    op.execute("drop table pgfunnel.posting_partitioned")
