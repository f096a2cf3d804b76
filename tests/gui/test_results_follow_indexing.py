"""#44 (point 17): results and counts do not change under the user during indexing. A search re-run when a job
ends keeps its grid (no empty grid between) and its selected item; the library listing shows the items indexed
meanwhile; the listing's header and the caption progress count the same set, the indexed items."""

from __future__ import annotations

import re
import time
from pathlib import Path

from PySide6.QtCore import QTimer

from tests.gui.conftest import indexed_service, replace_call, shown_window
from tests.standins import make_media_folder


def header_count(window) -> int:
    match = re.match(r"([\d,]+) indexed items in the library", window.empty_label.text())
    assert match, window.empty_label.text()
    return int(match.group(1).replace(",", ""))


def test_a_search_rerun_after_indexing_keeps_its_grid_and_selection(qtbot, tmp_path: Path, monkeypatch) -> None:
    service = indexed_service(tmp_path / "fake", make_media_folder(tmp_path / "a", n_images=8, n_gifs=0,
                                                                   video=False, broken=False))
    window = shown_window(qtbot, service)
    try:
        window.search("red")
        qtbot.waitUntil(lambda: window.results_model.rowCount() >= 3 and not window.results_model.is_loading,
                        timeout=5000)
        window.results.select_row(2)
        chosen = window.results.current_hit().media_id
        def slowly(search):  # the re-run's first page takes a moment, as on a big library
            def text(*args, **kwargs):
                time.sleep(0.3)
                return search(*args, **kwargs)
            return text
        replace_call(service, monkeypatch, "search.text", slowly)
        rows: list[int] = []  # the grid's length, sampled while the re-run is on its way
        sampler = QTimer(interval=5)
        sampler.timeout.connect(lambda: rows.append(window.results_model.rowCount()))
        service.state.encoders.delay_s = 0.02  # a slow machine's backbone
        with qtbot.waitSignal(window.library.indexing_finished, timeout=10000):
            window.library.add_folder(make_media_folder(tmp_path / "b", n_images=4, n_gifs=0, video=False,
                                                        broken=False))
        sampler.start()
        qtbot.waitUntil(lambda: not window.results_model.is_loading and len(rows) > 20, timeout=10000)
        sampler.stop()
        assert min(rows) > 0  # never an empty grid
        current = window.results.current_hit()
        assert current is not None and current.media_id == chosen  # the same item, found again by its id
    finally:
        window.shutdown()


def test_browsing_shows_items_as_they_are_indexed_and_both_headers_agree(qtbot, tmp_path: Path) -> None:
    service = indexed_service(tmp_path / "fake", make_media_folder(tmp_path / "a", n_images=4, n_gifs=0,
                                                                   video=False, broken=False))
    window = shown_window(qtbot, service)
    try:
        qtbot.waitUntil(lambda: window.results_model.rowCount() == 4, timeout=5000)
        service.state.encoders.delay_s = 0.05
        # three of the indexer's batches of 32 (engine.library.indexer.BATCH), each committed as it is done
        window.library.add_folder(make_media_folder(tmp_path / "b", n_images=70, n_gifs=0, video=False,
                                                    broken=False))
        # while the job runs, the listing grows with what is indexed (it waited for the job's end)
        qtbot.waitUntil(lambda: window.library.is_indexing and window.results_model.rowCount() > 10, timeout=10000)
        assert window.library.is_indexing

        def agree() -> bool:  # the listing's header and the caption progress: the same number, indexed items
            progress = re.match(r"0 of ([\d,]+) indexed items captioned", window.browse_bar.progress.text())
            return bool(progress) and not window.results_model.is_loading and \
                header_count(window) == int(progress.group(1)) == window.results_model.rowCount()
        qtbot.waitUntil(lambda: not window.library.is_indexing and service.library.counts()["image"] == 74,
                        timeout=20000)
        # the listing follows the job's last batches a moment after it ends: all three then say every item
        qtbot.waitUntil(lambda: agree() and header_count(window) == 74, timeout=5000)
    finally:
        window.shutdown()
