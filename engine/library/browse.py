"""The library without a query: its items listed, sorted and filtered, and what the user has annotated.

A person opening the app (or clearing the search box) sees their library, as in a photo manager: newest first by
date taken (the file's date where a photo has none), by the files' dates or by name, one folder, one kind, or only
the items still to caption. The same module says which items carry captions (and from whom) and which the user
accepted or rejected for a query, so a grid can badge them.
Everything here reads the catalog, a page or a count at a time in SQL; nothing is embedded or decoded.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from engine.library.catalog import Catalog
from engine.types import CaptionSource, MediaDetails, MediaKind, SearchHit


class BrowseSort(StrEnum):
    """The order of a browsed library."""

    NEWEST = "newest"  # date taken (EXIF; the file's modification time where there is none), newest first
    OLDEST = "oldest"
    MODIFIED = "modified"  # the file's modification time, newest first
    MODIFIED_OLDEST = "modified-oldest"
    NAME = "name"  # file name, A to Z (then the folder)


class AnnotationFilter(StrEnum):
    """Which items a browsed library shows by what the user wrote about them."""

    ALL = "all"
    CAPTIONED = "captioned"  # has a caption a person wrote or imported
    UNCAPTIONED = "uncaptioned"  # none (a pseudo caption does not count)
    JUDGED = "judged"  # accepted or rejected for some query


# Captions a person stands behind; a pseudo caption is the model's guess.
HUMAN_SOURCES = frozenset({CaptionSource.USER, CaptionSource.IMPORTED})


@dataclass(frozen=True, slots=True)
class AnnotationState:
    """What is known about one item: its captions' sources and the user's verdict for one query.

    ``judgement`` is +1 (accepted) / -1 (rejected) for the query asked about (the latest verdict wins), 0 when
    there is none or no query was given; ``judged`` says whether it was judged for any query; ``verdicts`` says
    for which: ``(query, +1 / -1)``, one per query (its latest verdict), the most recent first.
    """

    sources: frozenset[str] = frozenset()
    judgement: int = 0
    judged: bool = False
    verdicts: tuple[tuple[str, int], ...] = ()

    @property
    def captioned(self) -> bool:
        return bool(self.sources & HUMAN_SOURCES)


@dataclass(frozen=True, slots=True)
class AnnotationProgress:
    """How much of the library carries a caption a person wrote or imported."""

    captioned: int
    total: int


def latest_verdicts(pairs: Iterable[tuple[str, int]]) -> tuple[tuple[str, int], ...]:
    """``(query, label)`` of pairs given oldest first, one per query (compared without case or outer spaces):
    each query's latest verdict, the most recent first."""
    latest: dict[str, tuple[str, int]] = {}
    for query, label in pairs:
        key = query.strip().casefold()
        latest.pop(key, None)  # re-inserted: the dict keeps the order of each query's latest verdict
        latest[key] = (query.strip(), int(label))
    return tuple(reversed(latest.values()))


def annotation_states(catalog: Catalog, media_ids: Iterable[int], query: str | None = None
                      ) -> dict[int, AnnotationState]:
    """The :class:`AnnotationState` of each of ``media_ids`` (verdicts for the text ``query``, if given)."""
    wanted = {int(m) for m in media_ids}
    captions, pairs = catalog.captions_of(wanted), catalog.pairs_of(wanted)
    key = query.strip().casefold() if query else None
    out: dict[int, AnnotationState] = {}
    for media_id in wanted:
        sources = frozenset(str(c.source) for c in captions.get(media_id, ()))
        judged = pairs.get(media_id, [])
        verdicts = [p.label for p in judged if key is not None and p.query.strip().casefold() == key]
        out[media_id] = AnnotationState(sources, verdicts[-1] if verdicts else 0, bool(judged),
                                        latest_verdicts((p.query, p.label) for p in judged))
    return out


def browse_count(catalog: Catalog, folder: Path | None = None, kind: MediaKind | str | None = None,
                 annotation: AnnotationFilter | str = AnnotationFilter.ALL) -> int:
    """How many items :func:`browse` lists with these filters, in all its pages (one COUNT in SQL)."""
    kind = MediaKind(kind) if kind is not None else None
    return catalog.count_browse_media(Path(folder) if folder is not None else None, kind,
                                      AnnotationFilter(annotation).value)


def annotation_progress(catalog: Catalog) -> AnnotationProgress:
    """Indexed items with a human caption, of all indexed items."""
    return AnnotationProgress(*catalog.count_captioned())


def browse(catalog: Catalog, offset: int = 0, top: int = 60, sort: BrowseSort | str = BrowseSort.NEWEST,
           folder: Path | None = None, kind: MediaKind | str | None = None,
           annotation: AnnotationFilter | str = AnnotationFilter.ALL) -> list[SearchHit]:
    """One page of the indexed library as hits (score 0), sorted and filtered.

    ``folder`` keeps the items under it, ``kind`` one media kind, ``annotation`` filters by what the user wrote.
    The page is read in SQL (:meth:`Catalog.browse_media`), so its cost does not grow with the library.
    """
    sort, annotation = BrowseSort(sort), AnnotationFilter(annotation)
    kind = MediaKind(kind) if kind is not None else None
    page = catalog.browse_media(offset, top, sort.value, Path(folder) if folder is not None else None, kind,
                                annotation.value)
    captions = catalog.captions_of(m.id for m in page)
    hits = []
    for m in page:
        written, guess = split_captions(captions.get(m.id, ()))
        hits.append(SearchHit(m.id, str(m.path), m.kind or MediaKind.IMAGE, 0.0, written, guess=guess))
    return hits


def split_captions(captions: Iterable[Any]) -> tuple[tuple[str, ...], str | None]:
    """``(what people wrote, the model's guess)`` of an item's caption records: a hit never passes the
    regional-semantics pseudo caption off as a caption (issue #32)."""
    captions = list(captions)
    written = tuple(c.text for c in captions if c.source != CaptionSource.PSEUDO)
    guess = next((c.text for c in captions if c.source == CaptionSource.PSEUDO), None)
    return written, guess


def media_details(catalog: Catalog, media_id: int) -> MediaDetails:
    """What the viewer's details panel shows of one item, from its catalog row (nothing is decoded)."""
    media = catalog.media(media_id)
    return MediaDetails(media.id, media.path, media.kind or MediaKind.IMAGE, media.format, media.size,
                        media.mtime_ns, media.width, media.height, media.n_frames, media.duration_s,
                        catalog.capture(media_id))
