"""Alembic environment for pgfunnel.

pgfunnel runs alembic programmatically (``pgfunnel init`` / ``pgfunnel migrate``) and
hands it an open SQLAlchemy connection through ``config.attributes["connection"]``.
The plain ``alembic`` command works too, with ``sqlalchemy.url`` or PGFUNNEL_DSN, on a
database that already has the ``pgfunnel`` schema and the vector extension (what
``pgfunnel init`` creates first; on an empty database run that instead). Alembic moves
the tables only: ``pgfunnel migrate`` also installs the SQL functions of the release, so
run it after ``alembic upgrade`` (until then searches run the functions that were there,
and ``pgfunnel doctor`` reports them as another release's). ``alembic downgrade`` undoes
revisions with their data: ``downgrade base`` drops every pgfunnel table, documents,
vectors and index versions included, and pgfunnel never runs it.
"""

from __future__ import annotations

import os
import re

from alembic import context
from pgfunnel.migrations.filters import include_name, include_object
from sqlalchemy import Connection, Engine, create_engine, pool

from pgfunnel.models import SCHEMA, Base

config = context.config
target_metadata = Base.metadata

def _note_applied(*, step: object, **_: object) -> None:
    config.attributes.setdefault("applied", []).append(getattr(step, "up_revision_id", None))


def run_with(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        include_schemas=True,
        include_object=include_object,
        include_name=include_name,
        version_table_schema=SCHEMA,
        compare_type=True,
        compare_server_default=False,
        # pgfunnel runs every revision of an upgrade in the one transaction it opens
        # (pgfunnel.schema._sa_connection's engine.begin()), so that an attempt its
        # lock-wait retry gives up (_upgrade_in_short_waits) leaves nothing applied and the
        # next starts from the same revision. Given a connection already in a transaction,
        # alembic opens none of its own, transaction_per_migration or not; what would break
        # it is that connection not in one while transaction_per_migration is set, or a
        # revision with an autocommit_block, a COMMIT or CONCURRENTLY (each makes
        # tests/test_concurrent_admin.py's test_a_migration_given_up_leaves_no_revision_*
        # fail)
        # each revision applied is noted, so that a failed upgrade names the one that
        # failed (the next): pgfunnel.schema reads config.attributes["applied"]
        on_version_apply=_note_applied,
    )
    with context.begin_transaction():
        context.run_migrations()


def _engine() -> Engine:
    """The plain `alembic` command's engine, from ``sqlalchemy.url`` or PGFUNNEL_DSN: a
    URL, or a libpq key=value string (which pgfunnel takes too, and SQLAlchemy cannot
    parse: it failed with 'Could not parse SQLAlchemy URL')."""
    url = config.get_main_option("sqlalchemy.url") or os.environ.get("PGFUNNEL_DSN", "")
    if not url.strip():
        raise SystemExit("pgfunnel: set PGFUNNEL_DSN (or sqlalchemy.url) to the database's "
                         "connection string")
    url = re.sub(r"^postgres(?:ql)?://", "postgresql+psycopg://", url)
    if "://" in url:
        return create_engine(url, poolclass=pool.NullPool)
    import psycopg

    conninfo = url
    return create_engine("postgresql+psycopg://", poolclass=pool.NullPool,
                         creator=lambda: psycopg.connect(conninfo))


def _refuse_without_schema(conn: Connection) -> None:
    """Stop the plain `alembic upgrade` on a database without the pgfunnel schema with one
    line that says what to run: it failed with a SQLAlchemy traceback ending in
    `schema "pgfunnel" does not exist`, since the migrations build on the schema and the
    vector extension that `pgfunnel init` creates. Any command that connects (`current`,
    `downgrade`) says the same there: the schema holds alembic's own version table."""
    from sqlalchemy import text

    if context.is_offline_mode():
        return
    found = conn.execute(text("select to_regnamespace(:s) is not null"), {"s": SCHEMA})
    if not found.scalar():
        raise SystemExit(
            f"pgfunnel: this database has no schema {SCHEMA}: run `pgfunnel init` on it "
            "(it creates the vector extension, the schema, the tables through these "
            "migrations and the SQL functions); `alembic upgrade` moves the tables of an "
            "installed schema only")


connection = config.attributes.get("connection")
if connection is not None:
    run_with(connection)
else:
    engine = _engine()
    with engine.connect() as conn:
        _refuse_without_schema(conn)
        run_with(conn)
