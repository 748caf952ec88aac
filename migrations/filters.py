"""What alembic compares: pgfunnel's own schema, minus indexes made at run time."""

from __future__ import annotations

import re
from typing import Any

from pgfunnel.models import SCHEMA

# per-version HNSW indexes are created at run time, one per index version
RUNTIME_INDEX_PREFIX = "embedding_hnsw_v"
# so are the posting partitions of index versions (posting_v<id>, and posting_legacy
# for the versions that existed when migration 0005 partitioned the table)
RUNTIME_TABLE = re.compile(r"posting_(v[0-9]+|legacy)")


def include_object(obj: Any, name: str | None, type_: str, reflected: bool,
                   compare_to: Any) -> bool:
    if type_ == "table":
        if reflected and name and RUNTIME_TABLE.fullmatch(name):
            return False
        return getattr(obj, "schema", None) == SCHEMA
    return not (type_ == "index" and name and name.startswith(RUNTIME_INDEX_PREFIX))


def include_name(name: str | None, type_: str, parent_names: Any) -> bool:
    if type_ == "schema":
        return name == SCHEMA
    return True
