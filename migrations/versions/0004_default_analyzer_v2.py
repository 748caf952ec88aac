"""New collections default to analyzer english_v2.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 00:30:00

english_v2 also indexes the inner names of dotted identifiers (quote_all in
csv.quote_all, os.path in os.path.join). Existing collections and their index versions
keep the analyzer they were built with; `pgfunnel reindex --analyzer english_v2` moves
one (no model time).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.alter_column("collection", "analyzer", server_default=sa.text("'english_v2'"),
                    existing_type=sa.Text(), existing_nullable=False, schema="pgfunnel")


def downgrade() -> None:
    op.alter_column("collection", "analyzer", server_default=sa.text("'english_v1'"),
                    existing_type=sa.Text(), existing_nullable=False, schema="pgfunnel")
