"""Terms compare bytewise: collation "C" on term_stat.term and posting.term.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30 08:30:00

A term dictionary needs equality and a stable order, not linguistic order; under the
database's collation (often a libc locale) every btree comparison of a term went through
strcoll. Rewrites both tables and their indexes.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    for table in ("term_stat", "posting"):
        op.alter_column(table, "term", type_=sa.Text(collation="C"), existing_nullable=False,
                        schema="pgfunnel")


def downgrade() -> None:
    for table in ("term_stat", "posting"):
        op.alter_column(table, "term", type_=sa.Text(), existing_nullable=False,
                        schema="pgfunnel")
