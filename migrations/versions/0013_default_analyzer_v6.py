"""New collections default to analyzer english_v6.

english_v6 is english_v5 saying itself what a word is (a letter, mark or digit of any
script) instead of asking the database's locale, which under a "C" collation counts ASCII
letters only (café was indexed as caf, Greek or Russian not at all) and in no locale counts
every mark a word is written with (Thai tone marks and the Hindi virama cut words apart).
It lowers case under a collation that knows every script's letters, and reads Thai, Lao,
Burmese and Khmer, written without spaces between words, as pairs of characters. Text of
letters and digits in a UTF-8 locale gets its english_v5 terms. Existing collections and
their index versions keep the analyzer they were built with (a change of analyzer is a new
index version); `pgfunnel reindex --analyzer english_v6 --activate` moves one (no model
time).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03 23:20:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.alter_column("collection", "analyzer", server_default=sa.text("'english_v6'"),
                    existing_type=sa.Text(), existing_nullable=False, schema="pgfunnel")


def downgrade() -> None:
    op.alter_column("collection", "analyzer", server_default=sa.text("'english_v5'"),
                    existing_type=sa.Text(), existing_nullable=False, schema="pgfunnel")
