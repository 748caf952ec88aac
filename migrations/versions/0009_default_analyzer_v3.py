"""New collections default to analyzer english_v3.

english_v3 is english_v2 reading Unicode-folded text (NFKC, without soft hyphens and
zero-width characters), so a word typed composed matches one stored decomposed, and
full-width or ligature forms match their plain letters. Existing collections and their
index versions keep the analyzer they were built with (a change of analyzer is a new
index version); `pgfunnel reindex --analyzer english_v3 --activate` moves one (no model
time).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03 08:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.alter_column("collection", "analyzer", server_default=sa.text("'english_v3'"),
                    existing_type=sa.Text(), existing_nullable=False, schema="pgfunnel")


def downgrade() -> None:
    op.alter_column("collection", "analyzer", server_default=sa.text("'english_v2'"),
                    existing_type=sa.Text(), existing_nullable=False, schema="pgfunnel")
