"""Partial index on the documents that some reader may not see, so a search can tell in
one index probe that a collection holds none (and skip checking its chunks one by one).

A document is restricted when it is not public, belongs to a tenant, or has a validity
bound: those are the columns whose values can hide it from a search that sets no language
or metadata filter.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 11:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

RESTRICTED = ("not is_public or tenant is not null or valid_from is not null "
              "or valid_to is not null")


def upgrade() -> None:
    op.create_index("document_restricted_idx", "document", ["collection_id"], unique=False,
                    schema="pgfunnel", postgresql_where=sa.text(RESTRICTED))


def downgrade() -> None:
    op.drop_index("document_restricted_idx", table_name="document", schema="pgfunnel",
                  postgresql_where=sa.text(RESTRICTED))
