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

from alembic import context
from pgfunnel.migrations.filters import include_name, include_object
from sqlalchemy import Connection, create_engine, pool

from pgfunnel.models import SCHEMA, Base

config = context.config
target_metadata = Base.metadata

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
    )
    with context.begin_transaction():
        context.run_migrations()


def _url() -> str:
    url = config.get_main_option("sqlalchemy.url") or os.environ.get("PGFUNNEL_DSN", "")
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url[len("postgresql://"):]
    return url


connection = config.attributes.get("connection")
if connection is not None:
    run_with(connection)
else:
    engine = create_engine(_url(), poolclass=pool.NullPool)
    with engine.connect() as conn:
        run_with(conn)
