"""Partial index on public documents, so the visibility filter can use indexes for both arms.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 08:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("document_public_idx", "document", ["collection_id"], unique=False,
                    schema="pgfunnel", postgresql_where=sa.text("is_public"))


def downgrade() -> None:
    op.drop_index("document_public_idx", table_name="document", schema="pgfunnel",
                  postgresql_where=sa.text("is_public"))
