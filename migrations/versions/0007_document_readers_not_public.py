"""A document with readers is not public: a CHECK constraint, so that giving a public
document readers (an UPDATE of `readers` alone) fails instead of leaving it readable by
everyone.

Visibility is `is_public or readers && principals`, so readers restrict only a document
that is not public. Ingest never writes both (`is_public` is "no readers and the
collection is not private"); a hand-written UPDATE could, and the document then stayed
public while its readers suggested otherwise. The constraint is added NOT VALID: rows
written before it are left as they are (`pgfunnel doctor` lists them) and every row
written from now on is checked.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02 00:10:00
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

NAME = "document_with_readers_is_not_public"


def upgrade() -> None:
    op.execute(f"alter table pgfunnel.document add constraint {NAME} "
               "check (not is_public or cardinality(readers) = 0) not valid")


def downgrade() -> None:
    op.drop_constraint(NAME, "document", schema="pgfunnel", type_="check")
