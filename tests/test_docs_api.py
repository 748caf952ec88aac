"""docs/python-api.md documents every name ``pgfunnel`` exports, as it is."""
from __future__ import annotations

import importlib.metadata
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

import pgfunnel

DOC = Path(__file__).resolve().parent.parent / "docs" / "python-api.md"


def _flat(text: str) -> str:
    # the page wraps long signatures over lines; compare them as one line
    return re.sub(r"\s+", " ", text)


def test_every_exported_name_is_documented_as_it_is() -> None:
    doc = _flat(DOC.read_text())
    missing = [name for name in pgfunnel.__all__ if f"pgfunnel.{name}" not in doc]
    assert not missing, f"docs/python-api.md does not name {missing} (pgfunnel.__all__)"
    for name in pgfunnel.__all__:
        obj = getattr(pgfunnel, name)
        if inspect.isclass(obj):
            # a class is documented with the base an application catches or filters it by
            base = obj.__mro__[1].__name__
            assert re.search(rf"pgfunnel\.{name}`?, an? `{base}`", doc), (
                f"docs/python-api.md does not say pgfunnel.{name} is a {base}")
            if obj.__init__ is not object.__init__ and obj.__module__.startswith("pgfunnel") \
                    and "__init__" in vars(obj):
                sig = _flat(f"{name}{inspect.signature(obj)}")
                assert sig in doc, f"docs/python-api.md lacks the signature {sig}"
        elif callable(obj):
            sig = _flat(f"{name}{inspect.signature(obj)}")
            assert sig in doc, f"docs/python-api.md lacks the signature {sig}"


def test_version_is_the_installed_distributions() -> None:
    # the page says pgfunnel.__version__ is the version pip installed
    assert pgfunnel.__version__ == importlib.metadata.version("pgfunnel")


def test_the_ingester_example_leaves_the_collection_as_it_found_it(
        sample_db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # run as written on the database the page starts from, the example left a collection
    # 'handbook' behind (empty, with an active version), which the page never mentioned
    from pgfunnel.db import connect

    section = DOC.read_text().split("## Ingest from Python: `Ingester`", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.setenv("PGFUNNEL_DSN", sample_db)
    query = ("select c.name, count(d.id), count(distinct v.id) from pgfunnel.collection c "
             "left join pgfunnel.document d on d.collection_id = c.id left join "
             "pgfunnel.index_version v on v.collection_id = c.id group by c.name order by 1")
    with connect(sample_db) as conn:
        before = conn.execute(query).fetchall()
    namespace: dict[str, Any] = {}
    exec(compile(code, "python-api.md", "exec"), namespace)  # noqa: S102 - the doc's own code
    with connect(sample_db) as conn:
        assert conn.execute(query).fetchall() == before
    # what its comments say: the second ingest found kb-42 unchanged and wrote no vector
    stats = namespace["stats"]
    assert stats.documents_unchanged == 1 and stats.chunks_embedded == 0, stats
    assert any("'kb-42'" in note for note in stats.notes), stats.notes


def _call_as_written(name: str, fn: Any) -> str:
    """``fn``'s signature as the page writes a call: defaults as Python literals (strings in
    double quotes), no annotations, ``*`` before the keyword-only parameters."""
    parts: list[str] = []
    star = False
    for p in inspect.signature(fn).parameters.values():
        if p.name == "self":
            continue
        if p.kind is inspect.Parameter.KEYWORD_ONLY and not star:
            parts.append("*")
            star = True
        if p.default is inspect.Parameter.empty:
            parts.append(p.name)
        else:
            value = f'"{p.default}"' if isinstance(p.default, str) else repr(p.default)
            parts.append(f"{p.name}={value}")
    return f"{name}({', '.join(parts)})"


def test_the_ingester_section_gives_every_parameter_of_ingester_and_ingest() -> None:
    # the page wrote Ingester(conn, collection="default", *, embedder=None, ...) and told of
    # progress(stage, n, total) among ingest()'s bullets: passed to ingest(), as read, it
    # was a TypeError; progress, chunk_words, batch sizes and prepare_ahead are Ingester's
    from pgfunnel.ingest import Ingester

    section = _flat(DOC.read_text().split("## Ingest from Python: `Ingester`", 1)[1]
                    .split("\n## ", 1)[0])
    for call in (_call_as_written("Ingester", Ingester.__init__),
                 _call_as_written("ingest", Ingester.ingest)):
        assert f"`{call}`" in section, f"docs/python-api.md lacks {call}"
    assert "`Ingester(..., progress=fn)`" in section
