"""Launch the real window, drive it through search, annotation and a training run, and save PNG screenshots.

Run under a virtual X server so the window is real::

    xvfb-run -a python tools/screenshots.py --out /tmp/shots --docs     # the demo library; README images
    xvfb-run -a python tools/screenshots.py --flickr8k 150 --out /tmp/f8k  # a Flickr8k sample (never docs/)
    xvfb-run -a python tools/screenshots.py --library NAME --keep-home --out /tmp/mine
    xvfb-run -a python tools/screenshots.py --fake --out /tmp/shots     # the encoders' stand-in, no model assets
    xvfb-run -a python tools/screenshots.py --model DIR --no-train --out /tmp/pcme  # the demo, a trained model

The default is the demo library (``resources.demo``) in a temporary ``POLYSEEK_HOME`` with the real engine,
seven of its items captioned by hand below, so "What to annotate next" has the rest to suggest. Before the
training shots, three more are captioned and ``--shapes`` generated shape photos are added with their captions
(File > Import annotations), so the training set can hold some annotations aside. The training shots come
from a real ``python -m trainer train`` run (A3VSE on the library's annotations, ``--preset test`` so it
takes seconds on a CPU: the plots are live, the numbers are those of a smoke-size model).

``--docs`` copies the demo shots to ``docs/``; it is refused for ``--flickr8k`` and ``--library``, whose
images come from data that must not appear in the README. ``--library`` writes into that library (captions it
already has are used as they are; the trained model is registered there); ``--no-train`` skips training.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
FLICKR8K = REPO.parent / "shared" / "datasets" / "flickr8k"
DOCS = REPO / "docs"
# what goes to docs/ under --docs: shot file -> README image
DOC_SHOTS = {
    "01-search-window.png": "screenshot-demo-search.png",
    "02-annotate-window.png": "screenshot-annotate.png",
    "03-training-running.png": "screenshot-training.png",
    "04-training-done.png": "screenshot-training-result.png",
}
# captions for part of the demo library (the rest is left for "What to annotate next")
DEMO_CAPTIONS = {
    "cat-on-a-rug.jpg": ["a tabby cat looking at the camera", "a close-up of a cat's face"],
    "cup-of-coffee.jpg": ["a cup of coffee on a saucer", "an espresso in a red cup"],
    "astronaut-portrait.jpg": ["an astronaut in an orange suit", "a woman in a space suit beside a flag"],
    "rocket-on-launch-pad.jpg": ["a rocket on a launch pad at night", "a space shuttle ready for launch"],
    "old-coins.jpg": ["rows of old coins", "a collection of silver coins on a dark background"],
    "bouncing-red-ball.gif": ["a red ball bouncing across a field", "a ball bouncing under a blue sky"],
    "cameraman.jpg": ["a man with a camera on a tripod", "a black and white photo of a photographer"],
}
# captioned after the annotation shot (as if the user had followed the suggestions), before training
DEMO_MORE_CAPTIONS = {
    "retina.jpg": ["a photo of the back of an eye", "a red retina with blood vessels"],
    "stained-tissue.jpg": ["stained tissue under a microscope", "brown and blue cells on a slide"],
    "deep-field-galaxies.jpg": ["many galaxies in deep space", "a starry black sky full of galaxies"],
}
# tiny layers and no early stop: a run of seconds whose curves are still real
TINY_TRAINING = ("--preset", "test", "--batch-size", "8", "--patience", "1000", "--schedule", "constant")


class ScreenshotError(Exception):
    """The window did not reach the state a screenshot needs."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the PNG files")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--fake", action="store_true", help="use the encoders' stand-in (tests/standins.py)")
    source.add_argument("--library", default=None, help="an existing library of the real service")
    source.add_argument("--flickr8k", type=int, default=None, metavar="N",
                        help="a temporary library of N Flickr8k images (../shared), 60%% of them captioned")
    parser.add_argument("--query", default=None, help="text query (default: one that suits the data)")
    parser.add_argument("--keep-home", action="store_true", help="use the real POLYSEEK_HOME")
    parser.add_argument("--size", default="1440x900", help="window size, WIDTHxHEIGHT")
    parser.add_argument("--epochs", type=int, default=40, help="epochs of the training run")
    parser.add_argument("--no-train", action="store_true", help="skip the training shots")
    parser.add_argument("--model", type=Path, default=None, metavar="DIR",
                        help="a trained model folder to register and activate before the search shots")
    parser.add_argument("--docs", action="store_true", help="copy the demo shots into docs/")
    parser.add_argument("--shapes", type=int, default=60, metavar="N",
                        help="demo: before training, add N generated captioned shape photos through "
                             "File > Import annotations, so some annotations can be held aside (0: none)")
    args = parser.parse_args(argv)
    if args.docs and (args.library or args.flickr8k or args.fake):
        parser.error("--docs takes only demo-library shots (README images must not show ../shared data)")
    return args


def wait_until(predicate: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
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


# ------------------------------------------------------------------------------------------ services
def fake_service(workdir: Path):  # noqa: ANN201 - engine.workspace.Workspace
    """The real workspace over the encoders' stand-in (tests/standins.py) and its tiny models, in a home of its own
    under ``workdir`` (nothing of the developer's is read or written)."""
    os.environ["POLYSEEK_HOME"] = str(workdir / "home")
    os.environ["POLYSEEK_STARTER"] = "off"
    from tests.gui.conftest import PCME, open_workspace
    from tests.standins import make_media_folder

    media = make_media_folder(workdir / "media", n_images=14, n_gifs=3)
    service = open_workspace("demo (stand-in)")
    service.library.add_root(media)
    for _ in service.library.index():
        pass
    for hit in service.search.text("red circle square", top=6):
        service.annotations.add_caption(hit.media_id, f"a {Path(hit.path).stem.split('_')[0]} shape on a white table")
    service.models.activate(PCME)
    return service


def index_all(service, folder: Path) -> None:  # noqa: ANN001
    service.library.add_root(folder)
    for _ in service.library.index([folder]):
        pass


def demo_service():  # noqa: ANN201 - engine.workspace.Workspace
    from app.main import open_service
    from resources.demo import ensure_demo_library

    service = open_service("default")
    folder = ensure_demo_library()
    index_all(service, folder)
    add_captions(service, DEMO_CAPTIONS)
    return service


def add_captions(service, captions: dict[str, list[str]]) -> None:  # noqa: ANN001
    """Caption the library's items by file name."""
    by_name = {Path(service.library.media(i).path).name: i for i in _media_ids(service)}
    for name, texts in captions.items():
        if name in by_name:
            for text in texts:
                service.annotations.add_caption(by_name[name], text)


def _media_ids(service) -> list[int]:  # noqa: ANN001
    return sorted({h.media_id for h in service.search.text("a photo", top=10_000)})


def flickr8k_service(n: int, workdir: Path):  # noqa: ANN201
    """A library of the first ``n`` Flickr8k test images (linked, not copied), 60% of them captioned."""
    from app.main import open_service
    from engine.library.captionfolder import load_caption_folder, write_caption_folder

    if not (FLICKR8K / "captions.tsv").is_file():
        raise ScreenshotError(f"{FLICKR8K} is absent on this machine")
    source = load_caption_folder(FLICKR8K)
    split = source.split("test") if "test" in source.splits() else source
    chosen = split.item_captions()[:n]
    media = write_caption_folder(workdir / "f8k", [item.path for item, _ in chosen], [], copy_media="link")
    captioned = [(i, text) for i, (_, texts) in enumerate(chosen[: int(0.6 * n)]) for text in texts[:2]]
    labels = write_caption_folder(workdir / "f8k-labels", [item.path for item, _ in chosen], captioned,
                                  copy_media="link")
    service = open_service("flickr8k-sample")
    index_all(service, media.media_dir)
    service.annotations.import_file(labels.root)
    return service


# ------------------------------------------------------------------------------------------ shots
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


def search_and_inspect(window, query: str, out: Path) -> None:  # noqa: ANN001
    window.search_bar.edit.setText(query)
    window.search_bar.submit()
    wait_until(lambda: window.results_model.rowCount() > 0, f"results for {query!r}")
    wait_until(lambda: thumbnails_loaded(window), "thumbnails")
    wait_until(lambda: window.inspector.explanation is not None, "the explanation")
    save(window, out, "01-search-window.png")
    save(window.inspector.widget(), out, "01-search-inspector.png")


def annotate_next(window, out: Path) -> None:  # noqa: ANN001
    panel = window.annotate
    panel.refresh_suggestions()
    wait_until(lambda: panel.suggestions.count() > 0 or "unavailable" in panel.suggest_heading.text()
               or "nothing left" in panel.suggest_heading.text(), "suggestions")
    if panel.suggestions.count():
        first = panel.suggested_ids()[0]
        window.select_media(first)
        wait_until(lambda: panel.hit is not None and panel.hit.media_id == first, "the suggested item")
        wait_until(lambda: not window.inspector.is_loading, "the suggested item's explanation")
        panel.caption_edit.setFocus()
    save(window, out, "02-annotate-window.png")
    save(panel, out, "02-annotate.png")


def import_shapes(window, folder: Path, n: int) -> None:  # noqa: ANN001
    """Add a folder of ``n`` generated shape photos to the library and import their captions through the
    window (the demo's 12 items are too few to hold any aside for the model comparison)."""
    from tests.synthetic import make_toy_photo_folder

    shapes = make_toy_photo_folder(folder, n, seed=7, size=96)
    index_all(window.service, shapes.media_dir)
    done: list[int] = []
    window.annotations_transferred.connect(lambda _what, count: done.append(count))
    window.import_annotations(shapes.root)
    wait_until(lambda: bool(done), "the caption import", timeout_s=120)
    window.library.refresh()
    print(f"imported {done[0]} captions of {n} generated shape photos")


def train(window, out: Path, args: argparse.Namespace) -> None:  # noqa: ANN001
    from app.widgets.training import SOURCE_LIBRARY

    if args.fake:
        window.settings.trainer_command = [sys.executable, str(REPO / "tests" / "gui" / "fake_trainer.py")]
        os.environ["FAKE_TRAINER_STEP_S"] = "0.05"
    else:
        from engine.trainercontract.command import TRAINER_PROGRAM

        window.settings.trainer_command = list(TRAINER_PROGRAM)
    dialog = window.open_training()
    dialog.extra_args = () if args.fake else TINY_TRAINING
    dialog.set_source(SOURCE_LIBRARY)
    dialog.device.setCurrentText("cpu")
    dialog.epochs.setValue(args.epochs)
    dialog.resize(900, 720)
    dialog.start()
    enough = max(3, args.epochs // 2)
    wait_until(lambda: len(dialog.rsums) >= enough or dialog.state in {"done", "failed"},
               "live training progress", timeout_s=900)
    save(dialog, out, "03-training-running.png")
    wait_until(lambda: dialog.comparison is not None or dialog.state == "failed", "the comparison",
               timeout_s=900)
    if dialog.state == "failed":
        print(dialog.log_view.toPlainText()[-3000:], file=sys.stderr)
        raise ScreenshotError(f"training failed: {dialog.status.text()}")
    save(dialog, out, "04-training-done.png")
    dialog.close()


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
        service, query = fake_service(workdir), args.query or "red circle"
    elif args.flickr8k:
        service, query = flickr8k_service(args.flickr8k, workdir), args.query or "a dog running on the grass"
    elif args.library:
        from app.main import open_service

        service, query = open_service(args.library), args.query or "a dog running on the grass"
    else:
        service, query = demo_service(), args.query or "a cat"
    if args.model is not None:
        service.models.activate(str(args.model.resolve()))
    window = MainWindow(GuiSettings(), service)
    width, height = (int(v) for v in args.size.split("x"))
    window.resize(width, height)
    window.show()
    wait_until(lambda: window.library.counts_label.text() != "no media indexed yet", "library counts")
    search_and_inspect(window, query, out)
    annotate_next(window, out)
    if not (args.fake or args.flickr8k or args.library):
        add_captions(service, DEMO_MORE_CAPTIONS)
        if args.shapes:
            import_shapes(window, workdir / "shapes", args.shapes)
    if not args.no_train:
        train(window, out, args)
    models = window.open_models()
    wait_until(lambda: models.table.rowCount() > 0, "the models table")
    save(models, out, "05-models.png")
    models.close()
    window.close()
    app.processEvents()
    if args.docs:
        for shot, doc in DOC_SHOTS.items():
            if (out / shot).is_file():
                shutil.copyfile(out / shot, DOCS / doc)
                print(f"copied {shot} to docs/{doc}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.keep_home:
        os.environ["POLYSEEK_HOME"] = tempfile.mkdtemp(prefix="polyseek-home-")
    if "POLYSEEK_ASSETS" not in os.environ and (REPO / ".cache" / "test-assets").is_dir():
        os.environ["POLYSEEK_ASSETS"] = str(REPO / ".cache" / "test-assets")
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
