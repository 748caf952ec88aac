"""pgfunnel: a hybrid retrieval funnel in Postgres."""
from __future__ import annotations

__version__ = "0.1.0"
