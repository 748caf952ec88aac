"""SQLAlchemy 2 models of the ``pgfunnel`` schema.

These models are the source of truth that alembic's autogenerate compares the
database against; the migrations under ``migrations/`` create exactly these
tables. Per-version HNSW indexes are created at run time (one partial index per
index version, each with its own dimension) and are therefore not declared here.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from pgvector.sqlalchemy import Vector
from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Identity,
    Index,
    Integer,
    MetaData,
    SmallInteger,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, TSVECTOR
from sqlalchemy.ext.mutable import MutableDict, MutableList
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

SCHEMA = "pgfunnel"


class Base(DeclarativeBase):
    metadata = MetaData(schema=SCHEMA)


class Collection(Base):
    """A named corpus and its defaults."""

    __tablename__ = "collection"

    id: Mapped[int] = mapped_column(Integer, Identity(), primary_key=True)
    name: Mapped[str] = mapped_column(Text, nullable=False, unique=True)
    private: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default=text("false"))
    analyzer: Mapped[str] = mapped_column(
        Text, nullable=False, server_default=text("'english_v8'")
    )
    embedding_model: Mapped[str | None] = mapped_column(Text)
    settings: Mapped[dict[str, Any]] = mapped_column(
        JSONB, nullable=False, server_default=text("'{}'::jsonb")
    )
    created_at: Mapped[dt.datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now()
    )

    # the database cascades deletes (and its trigger keeps the BM25 statistics exact);
    # without passive_deletes the ORM would first try to null the children's foreign key
    documents: Mapped[list[Document]] = relationship(
        back_populates="collection", cascade="all, delete-orphan", passive_deletes=True)


class Document(Base):
    """One source: the unit the per-source cap counts, and the unit of access."""

    __tablename__ = "document"
    __table_args__ = (
        UniqueConstraint("collection_id", "citekey"),
        Index("document_readers_gin", "readers", postgresql_using="gin"),
        Index("document_metadata_gin", "metadata", postgresql_using="gin",
              postgresql_ops={"metadata": "jsonb_path_ops"}),
        Index("document_tenant_idx", "collection_id", "tenant"),
        # with document_readers_gin, lets "is_public or readers && principals" be a
        # BitmapOr of two index scans instead of a scan of every document
        Index("document_public_idx", "collection_id", postgresql_where=text("is_public")),
        # empty for a collection whose every document any search may see (public, no
        # tenant, no validity bounds): one probe tells a search it can skip the
        # per-chunk visibility check (pgfunnel._all_visible)
        Index("document_restricted_idx", "collection_id",
              postgresql_where=text("not is_public or tenant is not null "
                                    "or valid_from is not null or valid_to is not null")),
        # readers restrict only a document that is not public; giving a public document
        # readers alone would leave it readable by everyone (migration 0007, NOT VALID)
        CheckConstraint("not is_public or cardinality(readers) = 0",
                        name="document_with_readers_is_not_public"),
        # what ingest refuses, refused for hand-written rows too: each would leave a
        # document no search finds (migration 0010, NOT VALID)
        CheckConstraint("tenant <> ''", name="document_tenant_not_empty"),
        CheckConstraint("language <> ''", name="document_language_not_empty"),
        CheckConstraint("array_position(readers, null) is null "
                        "and array_position(readers, '') is null",
                        name="document_readers_named"),
        CheckConstraint("valid_to > valid_from", name="document_validity_ordered"),
    )

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    collection_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("collection.id", ondelete="CASCADE"), nullable=False
    )
    citekey: Mapped[str] = mapped_column(Text, nullable=False)
    title: Mapped[str] = mapped_column(Text, nullable=False, server_default=text("''"))
    # Mutable*: an admin screen revokes a reader with doc.readers.remove(...); a plain
    # ARRAY would not see the change, and the session would write nothing (the reader
    # keeps access). MutableDict tracks the top level of the metadata, not nested values.
    metadata_: Mapped[dict[str, Any]] = mapped_column(
        "metadata", MutableDict.as_mutable(JSONB()), nullable=False,
        server_default=text("'{}'::jsonb")
    )
    tenant: Mapped[str | None] = mapped_column(Text)
    readers: Mapped[list[str]] = mapped_column(
        MutableList.as_mutable(ARRAY(Text)), nullable=False,
        server_default=text("'{}'::text[]")
    )
    is_public: Mapped[bool] = mapped_column(Boolean, nullable=False)
    language: Mapped[str | None] = mapped_column(Text)
    valid_from: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    valid_to: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    content_hash: Mapped[str] = mapped_column(Text, nullable=False)
    updated_at: Mapped[dt.datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now()
    )

    collection: Mapped[Collection] = relationship(back_populates="documents")
    chunks: Mapped[list[Chunk]] = relationship(
        back_populates="document", cascade="all, delete-orphan", passive_deletes=True)


class Chunk(Base):
    """The text unit a search returns."""

    __tablename__ = "chunk"
    __table_args__ = (UniqueConstraint("document_id", "ordinal"),)

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    document_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("document.id", ondelete="CASCADE"), nullable=False
    )
    collection_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("collection.id", ondelete="CASCADE"), nullable=False, index=True
    )
    ordinal: Mapped[int] = mapped_column(Integer, nullable=False)
    heading: Mapped[str] = mapped_column(Text, nullable=False, server_default=text("''"))
    # the level of the chunk's heading, 6 for a term (sources.TERM_HEADING_LEVEL); 0 for
    # none, and for rows written before it was kept (migration 0014) that hold no term
    heading_level: Mapped[int] = mapped_column(SmallInteger, nullable=False,
                                               server_default=text("0"))
    # the headings the chunk's section sits under, outermost first, joined by " > "
    section_path: Mapped[str] = mapped_column(Text, nullable=False, server_default=text("''"))
    text: Mapped[str] = mapped_column(Text, nullable=False)
    token_count: Mapped[int] = mapped_column(Integer, nullable=False)
    content_hash: Mapped[str] = mapped_column(Text, nullable=False)

    document: Mapped[Document] = relationship(back_populates="chunks")


class IndexVersion(Base):
    """One build of the dense and lexical index of a collection."""

    __tablename__ = "index_version"
    __table_args__ = (
        UniqueConstraint("collection_id", "version"),
        CheckConstraint(
            "state in ('building', 'ready', 'active', 'retired')", name="index_version_state"
        ),
        Index("index_version_one_active", "collection_id", unique=True,
              postgresql_where=text("state = 'active'")),
    )

    id: Mapped[int] = mapped_column(Integer, Identity(), primary_key=True)
    collection_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("collection.id", ondelete="CASCADE"), nullable=False
    )
    version: Mapped[int] = mapped_column(Integer, nullable=False)
    embedding_model: Mapped[str] = mapped_column(Text, nullable=False)
    dimensions: Mapped[int] = mapped_column(Integer, nullable=False)
    analyzer: Mapped[str] = mapped_column(Text, nullable=False)
    params: Mapped[dict[str, Any]] = mapped_column(
        JSONB, nullable=False, server_default=text("'{}'::jsonb")
    )
    state: Mapped[str] = mapped_column(Text, nullable=False, server_default=text("'building'"))
    created_at: Mapped[dt.datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now()
    )
    activated_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    retired_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    # BM25 corpus statistics, kept exact by every insert and delete of the version's chunks
    chunk_count: Mapped[int] = mapped_column(BigInteger, nullable=False, server_default=text("0"))
    total_length: Mapped[int] = mapped_column(BigInteger, nullable=False, server_default=text("0"))


class Embedding(Base):
    """(chunk, index version) -> vector; HNSW indexes are partial per version."""

    __tablename__ = "embedding"

    index_version_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("index_version.id", ondelete="CASCADE"), primary_key=True
    )
    chunk_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("chunk.id", ondelete="CASCADE"), primary_key=True, index=True
    )
    embedding: Mapped[Any] = mapped_column(Vector(), nullable=False)


class Lexical(Base):
    """What the analyzer of a version made of a chunk: its terms and length."""

    __tablename__ = "lexical"

    index_version_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("index_version.id", ondelete="CASCADE"), primary_key=True
    )
    chunk_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("chunk.id", ondelete="CASCADE"), primary_key=True, index=True
    )
    length: Mapped[int] = mapped_column(Integer, nullable=False)
    terms: Mapped[Any] = mapped_column(TSVECTOR, nullable=False)


class TermStat(Base):
    """Document frequency of a term within one index version."""

    __tablename__ = "term_stat"

    index_version_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("index_version.id", ondelete="CASCADE"), primary_key=True
    )
    # terms compare bytewise: a term dictionary has no use for linguistic order, and the
    # "C" collation keeps btree inserts and lookups on memcmp whatever the database's is
    term: Mapped[str] = mapped_column(Text(collation="C"), primary_key=True)
    df: Mapped[int] = mapped_column(Integer, nullable=False)


class Posting(Base):
    """(version, term, chunk) with the term frequency and the chunk's length.

    One index serves the lexical leg: an index-only scan of a query term's
    postings yields everything exact BM25 needs (tf, length; idf and the average
    length come from the statistics), so scores are exact with no join and no
    stored weight that could go stale. No foreign keys: per-row FK triggers
    doubled the cost of writing postings. A chunk's postings go with its lexical
    row (statement trigger ``lexical_deleted``, which also keeps the statistics),
    a version's with its partition.

    Partitioned by version (one partition per index version, made with it; see
    ``pgfunnel.ingest.create_version``), so a new version's postings go in before
    its index is built and a dropped version's go with one DROP. The parent has no
    index of its own: each partition has a unique index on (index_version_id,
    term, chunk_id) including tf and length, which is the key mapped here.
    """

    __tablename__ = "posting"
    __table_args__ = {"postgresql_partition_by": "LIST (index_version_id)"}
    __mapper_args__ = {"primary_key": ["index_version_id", "term", "chunk_id"]}

    index_version_id: Mapped[int] = mapped_column(Integer, nullable=False)
    term: Mapped[str] = mapped_column(Text(collation="C"), nullable=False)
    chunk_id: Mapped[int] = mapped_column(BigInteger, nullable=False)
    tf: Mapped[int] = mapped_column(SmallInteger, nullable=False)
    length: Mapped[int] = mapped_column(Integer, nullable=False)


class SearchLog(Base):
    """One traced search."""

    __tablename__ = "search_log"

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    at: Mapped[dt.datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now()
    )
    collection_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("collection.id", ondelete="CASCADE"), nullable=False
    )
    index_version_id: Mapped[int] = mapped_column(Integer, nullable=False)
    config_hash: Mapped[str] = mapped_column(Text, nullable=False)
    config: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False)
    query_text: Mapped[str | None] = mapped_column(Text)
    principals: Mapped[list[str]] = mapped_column(ARRAY(Text), nullable=False)
    tenant: Mapped[str | None] = mapped_column(Text)
    logged_by: Mapped[str] = mapped_column(
        Text, nullable=False, server_default=text("current_user")
    )
    notes: Mapped[dict[str, Any]] = mapped_column(
        JSONB, nullable=False, server_default=text("'{}'::jsonb")
    )


class SearchTrace(Base):
    """Per candidate of a traced search: every stage's rank and score, and its fate."""

    __tablename__ = "search_trace"

    search_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("search_log.id", ondelete="CASCADE"), primary_key=True
    )
    chunk_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    lexical_rank: Mapped[int | None] = mapped_column(Integer)
    lexical_score: Mapped[float | None] = mapped_column(Float)
    dense_rank: Mapped[int | None] = mapped_column(Integer)
    dense_score: Mapped[float | None] = mapped_column(Float)
    fused_rank: Mapped[int] = mapped_column(Integer, nullable=False)
    fused_score: Mapped[float] = mapped_column(Float, nullable=False)
    rerank_rank: Mapped[int | None] = mapped_column(Integer)
    rerank_score: Mapped[float | None] = mapped_column(Float)
    final_rank: Mapped[int | None] = mapped_column(Integer)
    dropped: Mapped[str | None] = mapped_column(Text)


class Qrel(Base):
    """A judged query, for evaluation inside the database."""

    __tablename__ = "qrel"

    collection_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("collection.id", ondelete="CASCADE"), primary_key=True
    )
    query_id: Mapped[str] = mapped_column(Text, primary_key=True)
    item: Mapped[str] = mapped_column(Text, primary_key=True)
    query: Mapped[str] = mapped_column(Text, nullable=False)
    slice: Mapped[str] = mapped_column(Text, nullable=False, server_default=text("''"))
    grade: Mapped[int] = mapped_column(Integer, nullable=False, server_default=text("1"))
