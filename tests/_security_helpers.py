"""Shared helpers for the access, hostile-input, property and crash tests.

Corpora here use precomputed random vectors (``Ingester.ingest(vectors=...)``) in an
index version whose "model" is never loaded, so these tests need no embedding model.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from funnel_util import with_conninfo
from psycopg import sql

from pgfunnel.db import connect
from pgfunnel.ingest import Ingester, create_version, get_or_create_collection
from pgfunnel.sources import DocumentRecord, chunk_text

DIM = 16
MODEL = "random-vectors-16"


@dataclass
class Doc:
    citekey: str
    text: str
    readers: list[str] = field(default_factory=list)
    tenant: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    vector: np.ndarray | None = None


def unit(v: np.ndarray) -> np.ndarray:
    scaled: np.ndarray = (v / np.linalg.norm(v)).astype(np.float32)
    return scaled


def random_vectors(n: int, seed: int, dim: int = DIM) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.stack([unit(rng.normal(size=dim)) for _ in range(n)])


def ingest_docs(dsn: str, docs: Sequence[Doc], *, collection: str = "default", seed: int = 0,
                dim: int = DIM, private: bool = False) -> None:
    """Ingest docs with given (or random) vectors; every chunk of a doc gets its vector."""
    rng = np.random.default_rng(seed)
    with connect(dsn, autocommit=True) as conn:
        coll = get_or_create_collection(conn, collection, private=private)
        has = conn.execute("select 1 from pgfunnel.index_version where collection_id = %s "
                           "and state = 'active'", (coll,)).fetchone()
        if not has:
            analyzer = conn.execute("select analyzer from pgfunnel.collection where id = %s",
                                    (coll,)).fetchone()
            assert analyzer is not None
            create_version(conn, coll, MODEL, dim, str(analyzer[0]), "active")
        vectors: dict[str, np.ndarray] = {}
        records = []
        for d in docs:
            n = len(chunk_text(d.text, 200))
            base = d.vector if d.vector is not None else unit(rng.normal(size=dim))
            vectors[d.citekey] = np.stack([base] * n)
            records.append(DocumentRecord(citekey=d.citekey, text=d.text, title=d.citekey,
                                          readers=list(d.readers), tenant=d.tenant,
                                          metadata=dict(d.metadata)))
        Ingester(conn, collection, chunk_words=200).ingest(records, vectors=vectors)


def with_user(dsn: str, user: str) -> str:
    return with_conninfo(dsn, user=user)


def create_app_role(dsn: str, *, writer: bool = False) -> str:
    """A LOGIN role that is not owner, not superuser, not BYPASSRLS; returns its DSN."""
    from pgfunnel.security import ensure_roles, grant_app_role, grant_privileges

    name = f"pgf_app_{uuid.uuid4().hex[:8]}"
    with connect(dsn, autocommit=True) as conn:
        ensure_roles(conn)
        grant_privileges(conn)
        conn.execute(sql.SQL("create role {} login").format(sql.Identifier(name)))
        grant_app_role(conn, name, writer=writer)
    return with_user(dsn, name)


def citekeys(rows: Sequence[Any]) -> list[str]:
    return [r.citekey if hasattr(r, "citekey") else r[0] for r in rows]
