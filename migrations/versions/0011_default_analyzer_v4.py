"""New collections default to analyzer english_v4.

english_v4 is english_v3 reading each run of Han, Hiragana or Katakana characters as its
overlapping pairs of characters, so that a Chinese or Japanese word finds the sentences
that hold it (under v3 a sentence in those scripts, written without spaces, was one
term). It gives the same terms as english_v3 to text without those characters. Existing
collections and their index versions keep the analyzer they were built with (a change of
analyzer is a new index version); `pgfunnel reindex --analyzer english_v4 --activate`
moves one (no model time).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03 17:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.alter_column("collection", "analyzer", server_default=sa.text("'english_v4'"),
                    existing_type=sa.Text(), existing_nullable=False, schema="pgfunnel")


def downgrade() -> None:
    op.alter_column("collection", "analyzer", server_default=sa.text("'english_v3'"),
                    existing_type=sa.Text(), existing_nullable=False, schema="pgfunnel")
