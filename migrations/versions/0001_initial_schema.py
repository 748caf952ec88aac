"""Initial schema: collections, documents, chunks, index versions, BM25 statistics, traces.

Revision ID: 0001
Revises:
Create Date: 2026-11-30 04:44:07.721222
"""

from __future__ import annotations

import pgvector.sqlalchemy
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "collection",
        sa.Column("id", sa.Integer(), sa.Identity(always=False), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("private", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("analyzer", sa.Text(), server_default=sa.text("'english_v1'"), nullable=False),
        sa.Column("embedding_model", sa.Text(), nullable=True),
        sa.Column(
            "settings",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
        schema="pgfunnel",
    )
    op.create_table(
        "document",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("collection_id", sa.Integer(), nullable=False),
        sa.Column("citekey", sa.Text(), nullable=False),
        sa.Column("title", sa.Text(), server_default=sa.text("''"), nullable=False),
        sa.Column(
            "metadata",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("tenant", sa.Text(), nullable=True),
        sa.Column(
            "readers",
            postgresql.ARRAY(sa.Text()),
            server_default=sa.text("'{}'::text[]"),
            nullable=False,
        ),
        sa.Column("is_public", sa.Boolean(), nullable=False),
        sa.Column("language", sa.Text(), nullable=True),
        sa.Column("valid_from", sa.DateTime(timezone=True), nullable=True),
        sa.Column("valid_to", sa.DateTime(timezone=True), nullable=True),
        sa.Column("content_hash", sa.Text(), nullable=False),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(["collection_id"], ["pgfunnel.collection.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("collection_id", "citekey"),
        schema="pgfunnel",
    )
    op.create_index(
        "document_metadata_gin",
        "document",
        ["metadata"],
        unique=False,
        schema="pgfunnel",
        postgresql_using="gin",
        postgresql_ops={"metadata": "jsonb_path_ops"},
    )
    op.create_index(
        "document_readers_gin",
        "document",
        ["readers"],
        unique=False,
        schema="pgfunnel",
        postgresql_using="gin",
    )
    op.create_index(
        "document_tenant_idx",
        "document",
        ["collection_id", "tenant"],
        unique=False,
        schema="pgfunnel",
    )
    op.create_table(
        "index_version",
        sa.Column("id", sa.Integer(), sa.Identity(always=False), nullable=False),
        sa.Column("collection_id", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("embedding_model", sa.Text(), nullable=False),
        sa.Column("dimensions", sa.Integer(), nullable=False),
        sa.Column("analyzer", sa.Text(), nullable=False),
        sa.Column(
            "params",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("state", sa.Text(), server_default=sa.text("'building'"), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("activated_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("retired_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("chunk_count", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("total_length", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.CheckConstraint(
            "state in ('building', 'ready', 'active', 'retired')", name="index_version_state"
        ),
        sa.ForeignKeyConstraint(["collection_id"], ["pgfunnel.collection.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("collection_id", "version"),
        schema="pgfunnel",
    )
    op.create_index(
        "index_version_one_active",
        "index_version",
        ["collection_id"],
        unique=True,
        schema="pgfunnel",
        postgresql_where=sa.text("state = 'active'"),
    )
    op.create_table(
        "qrel",
        sa.Column("collection_id", sa.Integer(), nullable=False),
        sa.Column("query_id", sa.Text(), nullable=False),
        sa.Column("item", sa.Text(), nullable=False),
        sa.Column("query", sa.Text(), nullable=False),
        sa.Column("slice", sa.Text(), server_default=sa.text("''"), nullable=False),
        sa.Column("grade", sa.Integer(), server_default=sa.text("1"), nullable=False),
        sa.ForeignKeyConstraint(["collection_id"], ["pgfunnel.collection.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("collection_id", "query_id", "item"),
        schema="pgfunnel",
    )
    op.create_table(
        "search_log",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column(
            "at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.Column("collection_id", sa.Integer(), nullable=False),
        sa.Column("index_version_id", sa.Integer(), nullable=False),
        sa.Column("config_hash", sa.Text(), nullable=False),
        sa.Column("config", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("query_text", sa.Text(), nullable=True),
        sa.Column("principals", postgresql.ARRAY(sa.Text()), nullable=False),
        sa.Column("tenant", sa.Text(), nullable=True),
        sa.Column("logged_by", sa.Text(), server_default=sa.text("current_user"), nullable=False),
        sa.Column(
            "notes",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(["collection_id"], ["pgfunnel.collection.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        schema="pgfunnel",
    )
    op.create_table(
        "chunk",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("document_id", sa.BigInteger(), nullable=False),
        sa.Column("collection_id", sa.Integer(), nullable=False),
        sa.Column("ordinal", sa.Integer(), nullable=False),
        sa.Column("heading", sa.Text(), server_default=sa.text("''"), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("token_count", sa.Integer(), nullable=False),
        sa.Column("content_hash", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["collection_id"], ["pgfunnel.collection.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["document_id"], ["pgfunnel.document.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("document_id", "ordinal"),
        schema="pgfunnel",
    )
    op.create_index(
        op.f("ix_pgfunnel_chunk_collection_id"),
        "chunk",
        ["collection_id"],
        unique=False,
        schema="pgfunnel",
    )
    op.create_table(
        "search_trace",
        sa.Column("search_id", sa.BigInteger(), nullable=False),
        sa.Column("chunk_id", sa.BigInteger(), nullable=False),
        sa.Column("lexical_rank", sa.Integer(), nullable=True),
        sa.Column("lexical_score", sa.Float(), nullable=True),
        sa.Column("dense_rank", sa.Integer(), nullable=True),
        sa.Column("dense_score", sa.Float(), nullable=True),
        sa.Column("fused_rank", sa.Integer(), nullable=False),
        sa.Column("fused_score", sa.Float(), nullable=False),
        sa.Column("rerank_rank", sa.Integer(), nullable=True),
        sa.Column("rerank_score", sa.Float(), nullable=True),
        sa.Column("final_rank", sa.Integer(), nullable=True),
        sa.Column("dropped", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["search_id"], ["pgfunnel.search_log.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("search_id", "chunk_id"),
        schema="pgfunnel",
    )
    op.create_table(
        "term_stat",
        sa.Column("index_version_id", sa.Integer(), nullable=False),
        sa.Column("term", sa.Text(), nullable=False),
        sa.Column("df", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["index_version_id"], ["pgfunnel.index_version.id"], ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("index_version_id", "term"),
        schema="pgfunnel",
    )
    op.create_table(
        "embedding",
        sa.Column("index_version_id", sa.Integer(), nullable=False),
        sa.Column("chunk_id", sa.BigInteger(), nullable=False),
        sa.Column("embedding", pgvector.sqlalchemy.vector.VECTOR(), nullable=False),
        sa.ForeignKeyConstraint(["chunk_id"], ["pgfunnel.chunk.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(
            ["index_version_id"], ["pgfunnel.index_version.id"], ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("index_version_id", "chunk_id"),
        schema="pgfunnel",
    )
    op.create_index(
        op.f("ix_pgfunnel_embedding_chunk_id"),
        "embedding",
        ["chunk_id"],
        unique=False,
        schema="pgfunnel",
    )
    op.create_table(
        "lexical",
        sa.Column("index_version_id", sa.Integer(), nullable=False),
        sa.Column("chunk_id", sa.BigInteger(), nullable=False),
        sa.Column("length", sa.Integer(), nullable=False),
        sa.Column("terms", postgresql.TSVECTOR(), nullable=False),
        sa.ForeignKeyConstraint(["chunk_id"], ["pgfunnel.chunk.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(
            ["index_version_id"], ["pgfunnel.index_version.id"], ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("index_version_id", "chunk_id"),
        schema="pgfunnel",
    )
    op.create_index(
        op.f("ix_pgfunnel_lexical_chunk_id"),
        "lexical",
        ["chunk_id"],
        unique=False,
        schema="pgfunnel",
    )
    op.create_table(
        "posting",
        sa.Column("index_version_id", sa.Integer(), nullable=False),
        sa.Column("term", sa.Text(), nullable=False),
        sa.Column("chunk_id", sa.BigInteger(), nullable=False),
        sa.Column("tf", sa.SmallInteger(), nullable=False),
        sa.Column("length", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint(
            "index_version_id", "term", "chunk_id", postgresql_include=["tf", "length"]
        ),
        schema="pgfunnel",
    )


def downgrade() -> None:
    # the SQL functions are installed from sql/ outside alembic; they go with the tables
    op.execute(
        """
        do $$
        declare f regprocedure;
        begin
            for f in select p.oid::regprocedure from pg_proc p
                      where p.pronamespace = 'pgfunnel'::regnamespace
                         or (p.pronamespace = 'public'::regnamespace and p.proname = 'funnel_search')
            loop
                execute format('drop function if exists %s cascade', f);
            end loop;
        end $$
        """
    )
    op.drop_table("posting", schema="pgfunnel")
    op.drop_index(op.f("ix_pgfunnel_lexical_chunk_id"), table_name="lexical", schema="pgfunnel")
    op.drop_table("lexical", schema="pgfunnel")
    op.drop_index(op.f("ix_pgfunnel_embedding_chunk_id"), table_name="embedding", schema="pgfunnel")
    op.drop_table("embedding", schema="pgfunnel")
    op.drop_table("term_stat", schema="pgfunnel")
    op.drop_table("search_trace", schema="pgfunnel")
    op.drop_index(op.f("ix_pgfunnel_chunk_collection_id"), table_name="chunk", schema="pgfunnel")
    op.drop_table("chunk", schema="pgfunnel")
    op.drop_table("search_log", schema="pgfunnel")
    op.drop_table("qrel", schema="pgfunnel")
    op.drop_index(
        "index_version_one_active",
        table_name="index_version",
        schema="pgfunnel",
        postgresql_where=sa.text("state = 'active'"),
    )
    op.drop_table("index_version", schema="pgfunnel")
    op.drop_index("document_tenant_idx", table_name="document", schema="pgfunnel")
    op.drop_index(
        "document_readers_gin", table_name="document", schema="pgfunnel", postgresql_using="gin"
    )
    op.drop_index(
        "document_metadata_gin",
        table_name="document",
        schema="pgfunnel",
        postgresql_using="gin",
        postgresql_ops={"metadata": "jsonb_path_ops"},
    )
    op.drop_table("document", schema="pgfunnel")
    op.drop_table("collection", schema="pgfunnel")
