"""The level of a chunk's heading (`chunk.heading_level`, 1 - 6; 0 without one), kept so
that a version whose BM25 counts a term's heading twice (`params.lexical_input =
"title2_term2"`, the default for new versions) indexes a chunk the same way at ingest and
at reindex: a term is a section describing one named thing (an API object under its
signature, a glossary entry), which the HTML reader writes at level 6. Rows written
before it hold 0 and are indexed as any other chunk until their document is ingested
again: chunking version 11 rewrites the documents whose chunks have a term's heading
(their vectors kept), and leaves 0 on the others, where nothing reads it.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-05 04:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # a constant default: no table rewrite, so the upgrade takes a moment on any size
    op.add_column("chunk", sa.Column("heading_level", sa.SmallInteger(),
                                     server_default=sa.text("0"), nullable=False),
                  schema="pgfunnel")


def downgrade() -> None:
    op.drop_column("chunk", "heading_level", schema="pgfunnel")
