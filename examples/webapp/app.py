"""Example web app: a search endpoint served through SQLAlchemy and the ORM models.

Run it (after ``pgfunnel init`` and ``pgfunnel ingest``)::

    export PGFUNNEL_DSN=postgresql://user:pass@localhost/db
    uvicorn app:app --app-dir examples/webapp

    curl -H 'X-Principals: alice,team-a' 'http://127.0.0.1:8000/search?q=refund+annual&k=5'

The reader identity comes from the ``X-Principals`` header (comma-separated user and
group names; an empty value means "public documents only"). This trusts the caller:
in production the header must be set by an authenticating proxy that strips any
value sent by the client. A request without the header is refused (401) rather than
treated as "everyone".
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, HTTPException, Query, Request
from sqlalchemy import Engine, or_, select
from sqlalchemy.orm import Session

from pgfunnel.embedder import Embedder
from pgfunnel.errors import (
    ConfigError,
    InvalidInputError,
    NotFoundError,
    PgfunnelError,
    translate,
)
from pgfunnel.models import Chunk, Collection, Document, IndexVersion
from pgfunnel.sqla import engine_from_dsn, funnel_search_tvf, identity_statement

SNIPPET_CHARS = 300


def parse_principals(header: str | None) -> list[str]:
    """``"alice, team-a"`` -> ``["alice", "team-a"]``; a missing header is refused."""
    if header is None:
        raise HTTPException(status_code=401, detail="X-Principals header is required "
                            "(an empty value means public documents only)")
    return [p.strip() for p in header.split(",") if p.strip()]


def session(request: Request) -> Iterator[Session]:
    """One ORM session per request, on the app's engine."""
    engine: Engine = request.app.state.engine
    with Session(engine) as s:
        yield s


# module level: with postponed annotations FastAPI resolves these names in module globals
SessionDep = Annotated[Session, Depends(session)]
PrincipalsHeader = Annotated[str | None, Header(alias="X-Principals")]
TenantHeader = Annotated[str | None, Header(alias="X-Tenant")]


def create_app(dsn: str | None = None, *, embedder: Embedder | None = None,
               collection: str | None = None) -> FastAPI:
    """Build the app. Nothing connects until startup; ``dsn`` None means PGFUNNEL_DSN."""
    coll_name = collection or os.environ.get("PGFUNNEL_COLLECTION", "default")

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = engine_from_dsn(dsn)
        app.state.engine = engine
        app.state.embedder = embedder
        try:
            yield
        finally:
            engine.dispose()

    app = FastAPI(title="pgfunnel example", lifespan=lifespan)

    def query_embedder(request: Request, s: Session) -> Embedder:
        emb: Embedder | None = request.app.state.embedder
        if emb is None:
            # the model the active index version was built with, loaded once
            model = s.execute(
                select(IndexVersion.embedding_model)
                .join(Collection, Collection.id == IndexVersion.collection_id)
                .where(Collection.name == coll_name, IndexVersion.state == "active")
            ).scalar_one_or_none()
            if model is None:
                raise HTTPException(404, f"collection {coll_name!r} has no active index")
            emb = Embedder(model)
            request.app.state.embedder = emb
        return emb

    @app.exception_handler(PgfunnelError)
    async def pgfunnel_error(request: Request, exc: PgfunnelError) -> Any:
        from fastapi.responses import JSONResponse

        status = 400 if isinstance(exc, (ConfigError, InvalidInputError)) else (
            404 if isinstance(exc, NotFoundError) else 503)
        return JSONResponse({"detail": str(exc)}, status_code=status)

    @app.get("/search")
    def search(request: Request, s: SessionDep,
               q: Annotated[str, Query(min_length=1, max_length=10_000)],
               k: Annotated[int, Query(ge=1, le=100)] = 10,
               x_principals: PrincipalsHeader = None,
               x_tenant: TenantHeader = None) -> dict[str, Any]:
        principals = parse_principals(x_principals)
        vector = query_embedder(request, s).embed_query(q)
        fs = funnel_search_tvf(q, vector, k=k, collection=coll_name, principals=principals,
                               tenant=x_tenant)
        # the application's own tables join like any other: here chunk and document
        stmt = (select(fs.c.final_rank, fs.c.chunk_id, fs.c.citekey, fs.c.title,
                       fs.c.heading, fs.c.text, fs.c.fused_score, fs.c.lexical_rank,
                       fs.c.dense_rank, Document.language, Document.updated_at)
                .join(Chunk, Chunk.id == fs.c.chunk_id)
                .join(Document, Document.id == Chunk.document_id)
                .order_by(fs.c.final_rank))
        try:
            # same transaction: row-level security (if enabled) reads these settings
            s.execute(identity_statement(principals, x_tenant))
            rows = s.execute(stmt).all()
            s.commit()
        except PgfunnelError:
            raise
        except Exception as exc:
            orig = getattr(exc, "orig", None)
            if orig is not None:
                raise translate(orig) from exc
            raise
        return {
            "query": q,
            "k": k,
            "results": [
                {"rank": r.final_rank, "chunk_id": r.chunk_id, "citekey": r.citekey,
                 "title": r.title, "heading": r.heading, "snippet": r.text[:SNIPPET_CHARS],
                 "fused_score": r.fused_score, "lexical_rank": r.lexical_rank,
                 "dense_rank": r.dense_rank, "language": r.language,
                 "updated_at": r.updated_at.isoformat() if r.updated_at else None}
                for r in rows
            ],
        }

    @app.get("/documents/{citekey}")
    def document(citekey: str, s: SessionDep, x_principals: PrincipalsHeader = None,
                 x_tenant: TenantHeader = None) -> dict[str, Any]:
        principals = parse_principals(x_principals)
        s.execute(identity_statement(principals, x_tenant))
        doc = s.execute(
            select(Document).join(Collection, Collection.id == Document.collection_id)
            .where(Collection.name == coll_name, Document.citekey == citekey)
        ).scalar_one_or_none()
        if doc is None:
            raise HTTPException(404, f"no document {citekey!r}")
        visible = s.execute(
            select(Document.id).where(
                Document.id == doc.id,
                or_(Document.is_public, Document.readers.overlap(principals)),
                or_(Document.tenant.is_(None), Document.tenant == x_tenant))
        ).first() is not None
        if not visible:
            # saying "forbidden" reveals that the citekey exists; fine for this example,
            # return 404 instead where even existence is confidential
            raise HTTPException(403, "this reader may not see this document")
        chunks = sorted(doc.chunks, key=lambda c: c.ordinal)
        return {"citekey": doc.citekey, "title": doc.title, "language": doc.language,
                "metadata": doc.metadata_,
                "chunks": [{"ordinal": c.ordinal, "heading": c.heading, "text": c.text}
                           for c in chunks]}

    return app


app = create_app()
