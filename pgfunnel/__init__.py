"""pgfunnel: a hybrid retrieval funnel in Postgres."""
from __future__ import annotations

from pgfunnel.errors import SearchNoticeWarning

__version__ = "0.1.0"

__all__ = ["SearchNoticeWarning", "__version__"]
