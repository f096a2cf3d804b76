"""An item shown on its own, not as one of the results: picked or opened from "What to annotate next" (its row
when the results hold it, else the item read from the service off the GUI thread)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QModelIndex

from app.tasks import off_thread, start
from engine.types import SearchHit

if TYPE_CHECKING:  # the engine loads with the library, after the window (app/main.py)
    from engine.workspace import Workspace


def select_media(window: Any, media_id: int) -> None:
    """Show ``media_id`` in the inspector and annotation panel (picked from "What to annotate next"):
    its row when the results hold it, else the item on its own."""
    service = window.service
    if service is None:
        return
    row = window.results_model.row_of(media_id)
    if row is not None:
        window.results.select_row(row)
        window.annotate.set_item(window.session.query, window.results_model.hit(row), from_suggestion=True)
        return
    start(_select_item(window, service, media_id))


async def _select_item(window: Any, service: Workspace, media_id: int) -> None:
    try:
        hit = await off_thread(window, service.library.item, media_id, pool=window.pool, priority=9)
    except Exception as exc:  # noqa: BLE001 - said to the user
        window._status(f"Cannot show item {media_id}: {exc}")
        return
    window.results.setCurrentIndex(QModelIndex())  # the item is not one of the results
    window.inspector.show_hit(window.session.query, hit)
    window.annotate.set_item(window.session.query, hit, from_suggestion=True)


def open_media(window: Any, media_id: int) -> None:
    """Show ``media_id`` large (Enter / double-click on "What to annotate next"): as a result when the
    results hold it, else the item on its own, with what the user wrote about it."""
    service = window.service
    if service is None:
        return
    row = window.results_model.row_of(media_id)
    if row is not None and window.results_model.hit(row) is not None:
        window.open_viewer(window.results_model.hit(row))
        return
    start(_open_item(window, service, media_id))


async def _open_item(window: Any, service: Workspace, media_id: int) -> None:
    def load() -> tuple[SearchHit, Any]:
        return service.library.item(media_id), service.annotations.states([media_id]).get(media_id)

    try:
        hit, state = await off_thread(window, load, pool=window.pool, priority=9)
    except Exception as exc:  # noqa: BLE001 - said to the user
        window._status(f"Cannot open item {media_id}: {exc}")
        return
    window.open_viewer(hit, state)
