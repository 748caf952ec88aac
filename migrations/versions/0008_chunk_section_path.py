"""The headings a chunk's section sits under (`chunk.section_path`, outermost first,
joined by " > "), kept so that a reindex embeds a chunk from the same input as ingest did
(`params.embed_input = "section"`: the document title, then this path, above the chunk).
Rows written before it hold '' and embed as before until their document is re-ingested.
The search functions return the column: after a downgrade below this revision, install the
earlier release's functions (its `pgfunnel init`), or searches fail on the missing column.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02 07:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # a constant default: no table rewrite, so the upgrade takes a moment on any size
    op.add_column("chunk", sa.Column("section_path", sa.Text(), server_default=sa.text("''"),
                                     nullable=False), schema="pgfunnel")


def downgrade() -> None:
    op.drop_column("chunk", "section_path", schema="pgfunnel")
