"""The current search: what the user asked, under which cutoff, and how to fetch its pages."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from app.service_api import SearchServiceLike
from engine.types import SearchHit


class SearchSession:
    """Holds the query (text or example file) and the relevance cutoff; builds the results' page fetcher.

    The fetcher captures the service, the query and the cutoff when the search starts, so a page that
    arrives late still belongs to the search that asked for it.
    """

    def __init__(self) -> None:
        self.service: SearchServiceLike | None = None
        self.query: str | Path | None = None
        self.min_probability: float | None = None

    def set_query(self, query: str | Path | None) -> None:
        self.query = Path(query) if isinstance(query, Path) else (query.strip() or None if query else None)

    def page_fetcher(self) -> Callable[[int, int], list[SearchHit]] | None:
        """``fetch(offset, top) -> list[SearchHit]`` for the current query, or None when there is none."""
        service, query, cutoff = self.service, self.query, self.min_probability
        if service is None or query is None:
            return None
        if isinstance(query, Path):
            def fetch_media(offset: int, top: int) -> list[SearchHit]:
                return service.search_media(query, top=top, offset=offset)
            return fetch_media

        def fetch_text(offset: int, top: int) -> list[SearchHit]:
            return service.search_text(query, top=top, offset=offset, min_probability=cutoff)
        return fetch_text

    def describe(self) -> str:
        """The query as the status bar shows it."""
        if isinstance(self.query, Path):
            return f"like {self.query.name}"
        return f"“{self.query}”" if self.query else ""
