"""``Workspace.annotations``: what the user wrote (captions, accepted / rejected pairs), the snapshots written
before anything deletes it, annotations in and out, and what to annotate next."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.library import browse
from engine.library.catalog import CaptionRecord, snapshots
from engine.library.catalog.snapshots import Restored
from engine.loop.annotations import export_annotations, import_annotations
from engine.loop.suggest import resolve_policy, suggest
from engine.state import LibraryState
from engine.types import CaptionSource

USER_PAIR_LABELS = {"accept": 1, "reject": -1}


class Annotations:
    """What the user wrote: captions, accepted / rejected pairs, snapshots, transfer, what to annotate next."""

    def __init__(self, state: LibraryState) -> None:
        self._state = state

    def captions(self, media_id: int) -> list[CaptionRecord]:
        return self._state.catalog.captions(media_id)

    def add_caption(self, media_id: int, text: str) -> int:
        return self._state.catalog.add_caption(media_id, _clean(text), CaptionSource.USER)

    def update_caption(self, caption_id: int, text: str) -> None:
        self._state.catalog.update_caption(caption_id, _clean(text))

    def delete_caption(self, caption_id: int) -> None:
        self._state.catalog.delete_caption(caption_id)

    def accept_pair(self, query: str, media_id: int) -> int:
        return self._state.catalog.add_pair(media_id, _clean(query), USER_PAIR_LABELS["accept"], CaptionSource.USER)

    def reject_pair(self, query: str, media_id: int) -> int:
        return self._state.catalog.add_pair(media_id, _clean(query), USER_PAIR_LABELS["reject"], CaptionSource.USER)

    def delete_pair(self, pair_id: int) -> None:
        self._state.catalog.delete_pair(pair_id)

    def states(self, media_ids: list[int], query: str | None = None) -> dict[int, Any]:
        """Caption sources and the verdict for ``query`` of each item
        (:func:`engine.library.browse.annotation_states`)."""
        return browse.annotation_states(self._state.catalog, media_ids, query)

    def progress(self) -> Any:
        """How many indexed items carry a human caption (:func:`engine.library.browse.annotation_progress`)."""
        return browse.annotation_progress(self._state.catalog)

    def version(self) -> tuple:
        """A value that changes whenever a caption or an accepted / rejected pair is added, edited or deleted."""
        return self._state.catalog.annotation_version()

    def snapshots(self) -> list[Path]:
        """The library's automatic annotation snapshots, oldest first (:mod:`engine.library.catalog.snapshots`)."""
        return snapshots.snapshots(snapshots.folder_of(self._state.catalog.path))

    def restore_snapshot(self, path: Path) -> Restored:
        """Put back the captions and pairs of a snapshot (:meth:`Catalog.restore_snapshot`)."""
        return self._state.catalog.restore_snapshot(Path(path))

    def export(self, dest: Path, fmt: str = "folder") -> int:
        """Write the library's annotations (captions with their provenance, accepted and rejected pairs with their
        queries) as a caption folder (``folder``) or a COCO JSON (``coco``); returns the number of captions written
        (:class:`engine.loop.annotations.AnnotationCounts`: also the pairs, and ``skipped``, the annotated items a
        caption folder could not link because their files are missing or offline)."""
        return export_annotations(self._state.catalog, Path(dest), fmt)

    def import_file(self, path: Path) -> int:
        """Put the annotations of a caption folder or COCO JSON on the matching items, with the provenance the file
        gives (a third party's captions: ``imported``); returns how many captions were added
        (:class:`engine.loop.annotations.AnnotationCounts`: also the pairs). An annotation snapshot
        (:mod:`engine.library.catalog.snapshots`) is restored instead, with its provenance and pairs
        (:meth:`restore_snapshot`)."""
        if snapshots.is_snapshot_file(Path(path)):
            return self.restore_snapshot(Path(path)).captions
        return import_annotations(self._state.catalog, Path(path))

    def suggest(self, n: int = 20, policy: str = "auto") -> list[tuple[int, float]]:
        """``(media_id, score)`` of the un-annotated items to annotate next, best first: ``uncertainty`` (the
        active PCME model's sigma), ``disagreement`` (the active model's K >= 2 heads), ``random``, or ``auto``
        (the first of these that applies); see :func:`engine.loop.suggest.suggest`."""
        return suggest(self._state.catalog, self._state.active_trained(), n, policy)

    def suggestion_policy(self, policy: str = "auto") -> str:
        """The policy :meth:`suggest` applies for ``policy`` now (``auto`` resolved against the active model:
        ``uncertainty``, ``disagreement`` or ``random``), so a list of suggestions can say why its order."""
        return resolve_policy(self._state.active_trained(), policy)


def _clean(text: str) -> str:
    text = " ".join(str(text).split())
    if not text:
        raise ValueError("a caption or query cannot be empty")
    return text
