"""New collections default to analyzer english_v5.

english_v5 is english_v4 reading each run of Hangul inside a word as its overlapping pairs
of characters, so that a Korean word finds its forms with particles and endings written
onto it (under v4, 데이터베이스 and 데이터베이스를 were two unrelated terms). It gives the
same terms as english_v4 to text without Hangul. Existing collections and their index
versions keep the analyzer they were built with (a change of analyzer is a new index
version); `pgfunnel reindex --analyzer english_v5 --activate` moves one (no model time).

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03 19:20:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.alter_column("collection", "analyzer", server_default=sa.text("'english_v5'"),
                    existing_type=sa.Text(), existing_nullable=False, schema="pgfunnel")


def downgrade() -> None:
    op.alter_column("collection", "analyzer", server_default=sa.text("'english_v4'"),
                    existing_type=sa.Text(), existing_nullable=False, schema="pgfunnel")
