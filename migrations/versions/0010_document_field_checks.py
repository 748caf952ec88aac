"""CHECK constraints for what ingest refuses in a document's access fields, so that an
UPDATE or INSERT written by hand (or by an app through SQLAlchemy) fails instead of
leaving a document that no search can find:

- a tenant or language of `''` (a tenant of its own that no search asks for: searches
  refuse an empty tenant or language);
- a reader that is NULL or `''` (it matches no principal);
- `valid_to` not after `valid_from` (valid at no time).

Added NOT VALID, as 0007 did: rows written before are left as they are (`pgfunnel doctor`
lists them, `unfindable_documents`) and every row written from now on is checked.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03 11:00:00
"""

from __future__ import annotations

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

CHECKS = {
    "document_tenant_not_empty": "tenant <> ''",
    "document_language_not_empty": "language <> ''",
    "document_readers_named": "array_position(readers, null) is null "
                              "and array_position(readers, '') is null",
    "document_validity_ordered": "valid_to > valid_from",
}


def upgrade() -> None:
    for name, condition in CHECKS.items():
        op.execute(f"alter table pgfunnel.document add constraint {name} "
                   f"check ({condition}) not valid")


def downgrade() -> None:
    for name in reversed(CHECKS):
        op.drop_constraint(name, "document", schema="pgfunnel", type_="check")
