"""Run ``app.main.main()`` over the fake service: search, reject the first result, then quit at once.

Used by ``test_quit.py`` in a child process, so the app's real teardown (window deleted when ``main``
returns, then interpreter exit) happens. An error dialog would hang a real user's quit; here it prints
``ERROR DIALOG`` and the exit code becomes 3.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


def run(workdir: Path) -> int:
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    import app.main as entry
    from tests.gui.fakes import FakeService, make_media_folder

    dialogs: list[str] = []

    def record(title: str, text: str) -> None:
        dialogs.append(f"{title}: {text}")
        print("ERROR DIALOG", title, text, file=sys.stderr)

    service = FakeService(workdir / "fake")
    service.library.add_root(make_media_folder(workdir / "media"))
    for _ in service.library.index():
        pass
    import engine.workspace

    engine.workspace.Workspace.open = staticmethod(lambda _library: service)  # what open_service calls
    real_hook = entry.install_excepthook
    entry.install_excepthook = lambda log_file, show=record: real_hook(log_file, show)

    def window() -> Any:  # looked up each time: holding it here would keep it alive past main()
        return next(w for w in QApplication.topLevelWidgets() if hasattr(w, "annotate"))

    def drive() -> None:
        if window().service is None:
            QTimer.singleShot(20, drive)
            return
        window().results_model.page_loaded.connect(lambda _n: annotate())
        window().search_bar.edit.setText("red")
        window().search_bar.submit()

    def annotate() -> None:
        panel = window().annotate
        if panel.hit is None or panel.undo_stack.count():
            return
        panel.writes_done.connect(lambda: window().close())  # what Ctrl+Q's action does
        panel.judge(-1)

    QTimer.singleShot(0, drive)
    code = entry.main(["--no-demo"])
    return 3 if dialogs else code


if __name__ == "__main__":
    sys.exit(run(Path(sys.argv[1])))
