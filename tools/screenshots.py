"""Launch the real window, drive it through a search, and save PNG screenshots of each part.

Run under a virtual X server so the window is real::

    xvfb-run -a python tools/screenshots.py --fake --out /tmp/shots
    xvfb-run -a python tools/screenshots.py --library default --query "a dog on the beach" --out /tmp/shots

``--fake`` drives the in-memory ``tests.gui.fakes.FakeService`` over generated media (no model assets);
without it the real engine service opens ``--library``. Settings and caches go to a temporary
``POLYSEEK_HOME`` unless ``--keep-home`` is given, so screenshots never disturb a real profile.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


class ScreenshotError(Exception):
    """The window did not reach the state a screenshot needs."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the PNG files")
    parser.add_argument("--fake", action="store_true", help="use the in-memory fake service")
    parser.add_argument("--library", default="default", help="library for the real service")
    parser.add_argument("--query", default=None, help="text query (default: one that suits the data)")
    parser.add_argument("--keep-home", action="store_true", help="use the real POLYSEEK_HOME")
    parser.add_argument("--size", default="1440x900", help="window size, WIDTHxHEIGHT")
    return parser.parse_args(argv)


def wait_until(predicate: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
    """Run the event loop until ``predicate()`` holds."""
    from PySide6.QtWidgets import QApplication

    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise ScreenshotError(f"timed out waiting for {what}")
        QApplication.processEvents()
        time.sleep(0.01)
    for _ in range(5):  # let the last repaint land
        QApplication.processEvents()
        time.sleep(0.02)


def fake_service(workdir: Path):  # noqa: ANN201 - tests.gui.fakes.FakeService
    from tests.gui.fakes import FakeService, make_media_folder

    media = make_media_folder(workdir / "media", n_images=14, n_gifs=3)
    service = FakeService(workdir / "fake", name="demo (fake)")
    service.add_root(media)
    for _ in service.index_paths():
        pass
    service.add_caption(service.search_text("red circle", top=1)[0].media_id, "a red ball on a white table")
    service.set_active_model("fake-pcme")
    return service


def save(widget, out: Path, name: str) -> Path:  # noqa: ANN001 - any QWidget
    path = out / name
    if not widget.grab().save(str(path)):
        raise ScreenshotError(f"could not write {path}")
    print(f"saved {path} ({widget.width()}x{widget.height()})")
    return path


def thumbnails_loaded(window) -> bool:  # noqa: ANN001
    from PySide6.QtCore import Qt

    model = window.results_model
    rows = min(model.rowCount(), 12)
    return rows > 0 and all(model.data(model.index(r), Qt.ItemDataRole.DecorationRole) is not None
                            for r in range(rows))


def search_and_inspect(window, query: str, out: Path, prefix: str) -> None:  # noqa: ANN001
    window.search_bar.edit.setText(query)
    window.search_bar.submit()
    wait_until(lambda: window.results_model.rowCount() > 0, f"results for {query!r}")
    wait_until(lambda: thumbnails_loaded(window), "thumbnails")
    wait_until(lambda: window.inspector.explanation is not None, "the explanation")
    save(window, out, f"{prefix}-window.png")
    save(window.inspector.widget(), out, f"{prefix}-inspector.png")


def select_first(window, kind: str) -> bool:  # noqa: ANN001
    model = window.results_model
    for row in range(model.rowCount()):
        if model.hit(row).kind.value == kind:
            window.results.select_row(row)
            wait_until(lambda: window.inspector.explanation is not None, f"the {kind} explanation")
            return True
    return False


def run(args: argparse.Namespace) -> int:
    from PySide6.QtWidgets import QApplication

    from app import qtcompat  # noqa: F401
    from app.mainwindow import MainWindow
    from app.settings import GuiSettings

    app = QApplication.instance() or QApplication(sys.argv[:1])
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="polyseek-shots-"))
    if args.fake:
        service = fake_service(workdir)
        query = args.query or "red circle"
    else:
        from app.main import open_service

        service = open_service(args.library)
        query = args.query or "a dog running on the grass"
    window = MainWindow(GuiSettings(), service)
    width, height = (int(v) for v in args.size.split("x"))
    window.resize(width, height)
    window.show()
    wait_until(lambda: window.library.counts_label.text() != "no media indexed yet", "library counts")
    search_and_inspect(window, query, out, "01-photo")
    save(window.library, out, "02-library.png")
    save(window.annotate, out, "03-annotate.png")
    if select_first(window, "animation"):
        save(window, out, "04-gif-window.png")
        save(window.inspector.widget(), out, "04-gif-inspector.png")
    if args.fake:
        window.activate_model(None)
        wait_until(lambda: window.search_bar.model_combo.currentData() == "zero-shot", "zero-shot model")
        wait_until(lambda: window.inspector.explanation is not None, "the zero-shot explanation")
        save(window, out, "05-zero-shot-window.png")
    models = window.open_models()
    wait_until(lambda: models.table.rowCount() > 0, "the models table")
    save(models, out, "06-models.png")
    models.close()
    shoot_training(window, out)
    window.close()
    app.processEvents()
    return 0


def shoot_training(window, out: Path) -> None:  # noqa: ANN001
    fake_trainer = REPO / "tests" / "gui" / "fake_trainer.py"
    window.settings.trainer_command = [sys.executable, str(fake_trainer)]
    dialog = window.open_training()
    dialog.data.setText(str(out))
    dialog.epochs.setValue(4)
    dialog.start()
    wait_until(lambda: dialog.state in {"done", "failed"}, "the fake training run", timeout_s=60)
    save(dialog, out, "07-training.png")
    dialog.close()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.keep_home:
        os.environ["POLYSEEK_HOME"] = tempfile.mkdtemp(prefix="polyseek-home-")
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
