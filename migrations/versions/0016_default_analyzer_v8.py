"""New collections default to analyzer english_v8.

english_v8 is english_v7 keeping the underscores that open or close an identifier
(__init__, __all__, _exit, sys.__stdout__) and the runs of them that join its parts
(author__name): such a token is indexed whole with its underscores (unstemmed) and in its
parts, so a query for `__init__` ranks the chunks that hold it above those that only say
`init`, and `__all__` (whose part is a stop word) is searchable at all. Text without such
identifiers gets its english_v7 terms. Existing collections and their index versions keep
the analyzer they were built with (a change of analyzer is a new index version);
`pgfunnel reindex --analyzer english_v8 --activate` moves one (no model time).

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06 03:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.alter_column("collection", "analyzer", server_default=sa.text("'english_v8'"),
                    existing_type=sa.Text(), existing_nullable=False, schema="pgfunnel")


def downgrade() -> None:
    op.alter_column("collection", "analyzer", server_default=sa.text("'english_v7'"),
                    existing_type=sa.Text(), existing_nullable=False, schema="pgfunnel")
