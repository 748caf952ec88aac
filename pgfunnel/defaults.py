"""The SQL search functions' defaults that Python states too: ``SearchParams``' fields,
the CLI's option defaults and help, the eval harness's leg depths.

Each is a copy of a default in sql/ (the declared defaults of ``pgfunnel.funnel_search``,
``candidates``, ``explain`` and ``final``; the pairs of ``pgfunnel._automatic_weights()``;
the leg depth ``_pool`` computes, and the shares of the query's idf at which ``_pool``
picks a pair), kept here once rather than in each place that states
it, and tests/test_defaults.py fails when one differs from what the database declares:
a change in sql/ alone left the CLI's help, and the weight the CLI gave the leg not
typed, saying the old value. This module imports nothing heavy, so ``pgfunnel search
--help`` reads it without psycopg, numpy or a database.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

K = 10
COLLECTION = "default"
FUSION = "minmax"
RRF_K = 60.0
OVERFETCH = 4
PER_SOURCE_CAP = 3
EF_SEARCH = 100
K1 = 1.2
B = 0.75

#: a leg's depth when none is given: k x overfetch, at least DEPTH_FLOOR and at most
#: DEPTH_MOST (the most a leg reads)
DEPTH_FLOOR = 40
DEPTH_MOST = 10_000

#: the {lexical, dense} pairs a search chooses when it is given no weights, by the rule
#: that picks each (``pgfunnel._automatic_weights()``; docs/sql.md, the weights row)
AUTOMATIC_WEIGHTS: Mapping[str, tuple[float, float]] = MappingProxyType({
    "default": (1.0, 0.7),
    "identifier": (1.0, 0.2),
    "dense_leads": (0.7, 1.0),
})

#: the shares of the query's idf at which ``pgfunnel._pool`` picks a pair under min-max
#: fusion (docs/sql.md, the weights row): "dense_leads" when the best lexical match holds
#: under BEST_MATCH_UNDER of it, or lacks the query's rarest held word and that word is
#: RAREST_MISSED_AT or more of it; "identifier" when the best match holds the rarest word,
#: a number, and that word is RAREST_NUMBER_AT or more of it
BEST_MATCH_UNDER = 0.4
RAREST_MISSED_AT = 0.4
RAREST_NUMBER_AT = 0.3

#: the bounds the SQL checks (``pgfunnel._check_search_params``, ``_check_funnel_params``)
#: that Python checks too, where it must refuse before the database is asked: the CLI's
#: usage errors, the eval harness's configurations, the Python RRF of several phrasings,
#: query files read before any search; the advice a replayed explain translates names
#: two of them. A leg's depth is at most DEPTH_MOST.
K_MOST = 1000
OVERFETCH_MOST = 100
RRF_K_MOST = 1_000_000
#: a leg's weight is 0 or from WEIGHT_LEAST to WEIGHT_MOST
WEIGHT_LEAST = 1e-6
WEIGHT_MOST = 1e6
QUERY_CHARS_MOST = 10_000

#: an index version's HNSW graph settings (``reindex --m``, ``--ef-construction``): the
#: defaults, and the bounds pgvector takes (its ``m`` 2 - 100, ``ef_construction`` 4 -
#: 1000, and ``ef_construction`` at least twice ``m``), which reindex checks before any
#: chunk is embedded: pgvector refuses them only when the graph is built, at the end.
#: tests/test_index_builds.py pins them to pgvector's own refusals
HNSW_M = 16
HNSW_M_LEAST = 2
HNSW_M_MOST = 100
HNSW_EF_CONSTRUCTION = 64
HNSW_EF_CONSTRUCTION_LEAST = 4
HNSW_EF_CONSTRUCTION_MOST = 1000


def default_depth(k: int, overfetch: int) -> int:
    """The depth a leg reads when none is given (before the search widens a pool the
    per-source cap could not fill)."""
    return min(max(k * overfetch, DEPTH_FLOOR), DEPTH_MOST)


def number(value: float) -> str:
    """A default as help text writes it: ``0.7``, ``1``, ``60``, ``1e-6``, ``1e6``."""
    # "1e-06" and "1e+06" as %g writes them; the SQL's messages and the docs say 1e-6, 1e6
    mantissa, e, exponent = f"{value:g}".partition("e")
    return f"{mantissa}e{int(exponent)}" if e else mantissa
