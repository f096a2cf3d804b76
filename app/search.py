"""The current search: what the user asked, under which cutoff, and how to fetch its pages."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from engine.types import SearchHit

if TYPE_CHECKING:  # the engine loads with the library, after the window (app/main.py)
    from engine.workspace import Workspace

QUERY_CHARS = 80  # the most of a query the header and the status bar show: one line (the tooltip has it all)


def shown_query(text: str, limit: int = QUERY_CHARS) -> str:
    """A query as a one-line phrase: its whitespace (line breaks too) collapsed, and cut to ``limit`` characters
    with "…" when longer, so that a 2,000-character query does not push the grid down by a dozen lines."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"


@dataclass(frozen=True, slots=True)
class BrowseOptions:
    """How the library is listed when there is no query (``Library.browse``'s arguments)."""

    sort: str = "newest"  # "newest", "oldest", "modified", "modified-oldest", "name" (engine.library.browse.BrowseSort)
    kind: str | None = None  # a MediaKind value, None: every kind
    folder: Path | None = None  # one library folder, None: all
    annotation: str = "all"  # "all", "captioned", "uncaptioned", "judged"


class SearchSession:
    """Holds the query (text or example file) and the relevance cutoff; builds the results' page fetcher.

    The fetcher captures the service, the query and the cutoff when the search starts, so a page that
    arrives late still belongs to the search that asked for it. Without a query the fetcher browses the
    library with the current :class:`BrowseOptions`.
    """

    def __init__(self) -> None:
        self.service: Workspace | None = None
        self.query: str | Path | None = None
        self.min_probability: float | None = None
        self.browse = BrowseOptions()
        self.left_out: int | None = 0  # indexed items the query leaves out of its ranking (None: not known yet)

    @property
    def browsing(self) -> bool:
        """No query: the grid lists the library."""
        return self.query is None

    def set_query(self, query: str | Path | None) -> None:
        """Search ``query`` from now on; a new example's :attr:`left_out` is not known until the GUI has read it
        (:meth:`engine.workspace.search.Search.leaves_out`)."""
        query = Path(query) if isinstance(query, Path) else (query.strip() or None if query else None)
        if query != self.query:
            self.left_out = None if isinstance(query, Path) else 0
        self.query = query

    def page_fetcher(self) -> Callable[[int, int], list[SearchHit]] | None:
        """``fetch(offset, top) -> list[SearchHit]`` for the current query (or the library), None without a service."""
        service, query, cutoff, options = self.service, self.query, self.min_probability, self.browse
        if service is None:
            return None
        if query is None:
            def fetch_library(offset: int, top: int) -> list[SearchHit]:
                return service.library.browse(top=top, offset=offset, sort=options.sort, folder=options.folder,
                                      kind=options.kind, annotation=options.annotation)
            return fetch_library
        kind, folder = options.kind, options.folder  # a search keeps the listing's kind and folder filters
        if isinstance(query, Path):
            def fetch_media(offset: int, top: int) -> list[SearchHit]:
                return service.search.example(query, top=top, offset=offset, kind=kind, folder=folder,
                                            exclude_example=True)
            return fetch_media

        def fetch_text(offset: int, top: int) -> list[SearchHit]:
            return service.search.text(query, top=top, offset=offset, min_probability=cutoff, kind=kind,
                                       folder=folder)
        return fetch_text

    def listing_counter(self) -> Callable[[], int] | None:
        """``count() -> int``: how many items the library listing holds (None while searching: a search's
        length is only known once its pages run out)."""
        service, options = self.service, self.browse
        if service is None or self.query is not None:
            return None

        def count_library() -> int:
            return service.library.browse_count(folder=options.folder, kind=options.kind, annotation=options.annotation)
        return count_library

    def searched(self, indexed: int) -> int | None:
        """How many items the search ranks, the "of N items" of its places: the library's ``indexed`` items less
        those it leaves out (Find similar's own item, as its header counts); None when not known, or when the
        search is narrowed to a kind or a folder."""
        if self.scope() or self.left_out is None:
            return None
        return (indexed - self.left_out) or None

    def describe(self) -> str:
        """The query as the header and the status bar show it (on one line: :func:`shown_query`), with the kind
        and folder it is narrowed to."""
        if isinstance(self.query, Path):
            return f"like {shown_query(self.query.name)}{self.scope()}"
        return f"for “{shown_query(self.query)}”{self.scope()}" if self.query else "in the library"

    def full_query(self) -> str:
        """The whole query (an example's whole path) for the header's tooltip; "" while browsing."""
        return str(self.query) if self.query is not None else ""

    def scope(self) -> str:
        """" among GIFs in Holidays" when a search is narrowed ("" when it is not, or while browsing)."""
        if self.query is None:
            return ""
        kinds = {"image": "photos", "animation": "GIFs", "video": "videos"}
        kind = f" among {kinds.get(self.browse.kind or '', self.browse.kind)}" if self.browse.kind else ""
        folder = f" in {self.browse.folder.name or self.browse.folder}" if self.browse.folder else ""
        return kind + folder

    def no_good_match(self, best: SearchHit | None) -> bool:
        """Whether this is a text search whose best result is only a weak match (:attr:`SearchHit.match`)."""
        return isinstance(self.query, str) and best is not None and best.match == "weak"

    def summary(self, total: int, more: bool, busy: str, best: SearchHit | None = None) -> str:
        """The line above the grid: how many results (``more``: pages still to come), or why there are none;
        ``busy``: what the library is doing now ("" when idle); ``best``: the first result, whose calibrated word
        says when a search found no good match at all (the ranking is by that probability: the rest are weaker)."""
        described, plus = self.describe(), "+" if more else ""
        if self.browsing:
            if total:
                # indexed items, the set the caption progress beside it counts too (#44)
                return f"{total:,}{plus} indexed items {described}; type a description above to search"
            if busy:  # not empty: on its way (the demo being made, the first folder being indexed)
                return f"{busy} The items appear here as they are indexed."
            if self.browse != BrowseOptions():
                return "Nothing in the library matches these filters."
            return "The library is empty: add a folder (File ▸ Add folder…) or drop files here."
        if total and self.no_good_match(best):
            return f"No good match {described} — the closest items are shown, all weak"
        if total:
            return f"{total:,}{plus} results {described}"
        if busy:
            return f"No results {described} yet: {busy[0].lower()}{busy[1:]}"
        cutoff = self.min_probability
        if cutoff is not None and isinstance(self.query, str):
            if self.service is not None and not self.service.search.carries_evidence(self.query):
                return (f"No results {described}: the model knows none of its words, so it has no evidence "
                        "for any item at any cutoff. Try other words.")
            return (f"No result {described} reaches a match probability of {cutoff:.2f}: "
                    "lower the p ≥ cutoff (right of the search box) to see weaker matches.")
        return f"No results {described}"
