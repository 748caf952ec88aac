"""docs/python-api.md documents every name ``pgfunnel`` exports, as it is."""
from __future__ import annotations

import importlib.metadata
import inspect
import re
from pathlib import Path

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
