"""New collections default to analyzer english_v7.

english_v7 is english_v6 reading the Unicode hyphens and dashes that stand where a '-'
was meant (hyphen, non-breaking hyphen, figure dash, en dash, minus sign) as '-': an
identifier such as ERR-4029 that a web page or a word processor wrote with a
non-breaking hyphen is indexed as ERR-4029 is (err4029, err, 4029) instead of as two
words, and a query typed either way finds the other. Text without those characters gets
its english_v6 terms. Existing collections and their index versions keep the analyzer
they were built with (a change of analyzer is a new index version); `pgfunnel reindex
--analyzer english_v7 --activate` moves one (no model time).

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-05 19:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.alter_column("collection", "analyzer", server_default=sa.text("'english_v7'"),
                    existing_type=sa.Text(), existing_nullable=False, schema="pgfunnel")


def downgrade() -> None:
    op.alter_column("collection", "analyzer", server_default=sa.text("'english_v6'"),
                    existing_type=sa.Text(), existing_nullable=False, schema="pgfunnel")
