"""Hostile media (issue #8): indexing completes on every kind of bad file, records why, and stays bounded.

The corpus is generated here, category by category (:data:`CASES`): truncated and corrupt files, empty and
random files, headers declaring 50,000 x 50,000 pixels, a GIF of 10,000 frames and GIFs with broken frames,
bad videos, an image posing as a video, non-UTF-8 and emoji names, symlink loops and a FIFO. Races (a file
deleted, replaced or growing between the scan and the decoder) and an unreadable folder are simulated with
hooks, since the tests run as root, where permissions do not bite.

Expected outcomes: ``ok`` (indexed), ``failed`` (a catalog failure whose reason contains the given text) or
``skipped`` (not media by content, a link or a pipe: never a catalog row). Each category also runs through
``polyseek index --json`` in a subprocess whose wall time and peak RSS are printed and bounded generously
(120 s, 3 GB): a hostile file must not hang the indexer or blow up its memory. The peak is the child's own
``VmHWM``, written at exit: ``ru_maxrss`` from ``wait4`` is useless here, because a child started with vfork
inherits the high-water mark of the (large) pytest process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from engine import paths
from engine.library.catalog import Catalog, MediaRecord, MediaStatus
from engine.media import limits
from engine.workspace import Workspace
from tests.mediagen import (
    BLACK,
    BLUE,
    GREEN,
    RED,
    WHITE,
    GifFrame,
    gif_frame_offsets,
    make_animated_gif,
    make_huge_header_jpeg,
    make_huge_header_png,
    make_jpeg,
    make_mp4,
    make_png,
    make_random_bytes,
    truncate,
    write_gif,
)

REPO = Path(__file__).resolve().parents[2]
MAX_WALL_S = 120.0
MAX_RSS_BYTES = 3 * 1024**3
NON_UTF8_NAME = os.fsdecode(b"caf\xe9-latin1-\xff.jpg")  # Latin-1 bytes: not valid UTF-8
QUOTED_NAME = "it's \"quoted\"; '); DROP TABLE media; --.jpg"


@dataclass(frozen=True)
class Case:
    """One hostile file: how to make it and what indexing must make of it."""

    category: str
    name: str
    make: Callable[[Path], object]
    outcome: str  # "ok", "failed" or "skipped"
    reason: str = ""  # text the failure reason must contain
    kind: str | None = None  # the kind an "ok" file is indexed as


def noise(seed: int, size: int = 64) -> np.ndarray:
    """A random picture: JPEG/PNG data that cannot be guessed from a prefix."""
    return np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)


def gif_with_garbled_frame(path: Path, frame: int) -> Path:
    """A five-frame GIF whose frame ``frame`` holds an LZW stream of invalid codes."""
    make_animated_gif(path, [RED, GREEN, BLUE, WHITE, BLACK], size=(16, 16))
    data = bytearray(path.read_bytes())
    start = gif_frame_offsets(path)[frame] + 10 + 2  # descriptor, min code size, first block length
    data[start : start + 40] = b"\xff" * 40
    path.write_bytes(bytes(data))
    return path


def gif_of_many_frames(path: Path, n_frames: int = 10_000) -> Path:
    """A 2x2 GIF of ``n_frames`` frames cycling through four colours (written in about 0.1 s)."""
    palette = [(0, 0, 0), (200, 40, 40), (40, 200, 40), (40, 40, 200)]
    frames = [GifFrame(np.full((2, 2), i % 4, np.uint8), delay_cs=2) for i in range(n_frames)]
    return write_gif(path, (2, 2), frames, palette)


def jpeg_magic_then_noise(path: Path) -> None:
    path.write_bytes(b"\xff\xd8\xff\xe0" + np.random.default_rng(7).bytes(5000))


def symlink_loops(path: Path) -> None:
    os.symlink(".", path)  # a link back up the tree
    os.symlink(path.parent / "eloop-b", path.parent / "eloop-a")  # two links pointing at each other
    os.symlink(path.parent / "eloop-a", path.parent / "eloop-b")


CASES = [
    Case("truncated", "truncated.jpg", lambda p: truncate(make_jpeg(p, pixels=noise(1)), 0.5), "failed",
         "truncated JPEG"),
    Case("truncated", "truncated.png", lambda p: truncate(make_png(p, pixels=noise(2)), 0.5), "failed",
         "truncated PNG"),
    Case("truncated", "cut-in-frame-3.gif",
         lambda p: truncate(make_animated_gif(p, [RED, GREEN, BLUE], size=(16, 16)), 0.7), "ok",
         kind="animation"),
    Case("empty-or-random", "zero-bytes.jpg", lambda p: p.write_bytes(b""), "failed", "empty file"),
    Case("empty-or-random", "random-bytes.jpg", make_random_bytes, "failed", "not a media file"),
    Case("empty-or-random", "notes.txt", lambda p: p.write_text("not media, not named as media"), "skipped"),
    Case("empty-or-random", "jpeg-magic-then-noise.jpg", jpeg_magic_then_noise, "failed", "JPEG"),
    Case("huge-header", "50000x50000.png", make_huge_header_png, "failed", "too large"),
    Case("huge-header", "50000x50000.jpg", make_huge_header_jpeg, "failed", "too large"),
    Case("huge-header", "50000x50000-canvas.gif",
         lambda p: write_gif(p, (50_000, 50_000), [GifFrame(np.zeros((2, 2), np.uint8))], [RED, GREEN]),
         "failed", "too large"),
    Case("animation", "10000-frames.gif", gif_of_many_frames, "ok", kind="animation"),
    Case("animation", "broken-frame-3.gif", lambda p: gif_with_garbled_frame(p, 3), "ok", kind="animation"),
    Case("animation", "broken-first-frame.gif", lambda p: gif_with_garbled_frame(p, 0), "failed",
         "corrupt GIF"),
    Case("video", "corrupt.mp4", lambda p: truncate(make_mp4(p, 20), 0.4), "failed", "MP4"),
    Case("video", "no-frames.mp4", lambda p: make_mp4(p, 0), "failed", "MP4"),
    Case("video", "really-a-png.mp4", lambda p: make_png(p, (64, 64), GREEN), "ok", kind="image"),
    Case("names", NON_UTF8_NAME, lambda p: make_jpeg(p, (64, 64), BLUE), "ok", kind="image"),
    Case("names", "emoji 📷🐱 photo.jpg", lambda p: make_jpeg(p, (64, 64), GREEN), "ok", kind="image"),
    Case("names", QUOTED_NAME, lambda p: make_png(p, (64, 64), RED), "ok", kind="image"),
    Case("links-and-pipes", "loop", symlink_loops, "skipped"),
    Case("links-and-pipes", "pipe.jpg", lambda p: os.mkfifo(p), "skipped"),  # reading it would block
]
CATEGORIES = sorted({case.category for case in CASES})


def build(folder: Path, cases: list[Case]) -> Path:
    """Write ``cases`` plus one good control photo into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    make_jpeg(folder / "good.jpg", (64, 64), RED)
    for case in cases:
        case.make(folder / case.name)
    return folder


def rows_by_name(catalog: Catalog) -> dict[str, MediaRecord]:
    return {m.path.name: m for m in catalog.iter_media()}


def check_outcomes(rows: dict[str, MediaRecord], cases: list[Case]) -> None:
    """Every case has its expected outcome; the control photo is indexed."""
    assert rows["good.jpg"].status == MediaStatus.OK
    for case in cases:
        row = rows.get(case.name)
        if case.outcome == "skipped":
            assert row is None, f"{case.name!r} should not be in the catalog"
            continue
        assert row is not None, f"{case.name!r} is not in the catalog"
        assert row.status == case.outcome, f"{case.name!r}: {row.status} ({row.error})"
        if case.outcome == "failed":
            assert case.reason.lower() in row.error.lower(), f"{case.name!r}: {row.error!r}"
        elif case.kind:
            assert str(row.kind) == case.kind, case.name


# ---------------------------------------------------------------------------------------------- in process


@pytest.fixture
def service(assets_dir: Path) -> Workspace:
    svc = Workspace.open("hostile", assets_dir)
    yield svc
    svc.close()


def count_decodes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record the name of every file the extractor decodes from now on."""
    import engine.features.extract as extract

    decoded: list[str] = []
    original = extract.decode_for_backbone

    def counting(path: Path, *args, **kwargs):
        decoded.append(Path(path).name)
        return original(path, *args, **kwargs)

    monkeypatch.setattr(extract, "decode_for_backbone", counting)
    return decoded


def test_every_hostile_file_is_recorded_and_failures_are_retried_only_when_changed(
    service, tmp_path, monkeypatch
):
    library = build(tmp_path / "library", CASES)
    list(service.library.index([library]))
    check_outcomes(rows_by_name(service.state.catalog), CASES)
    many = service.state.catalog.media_by_path(library / "10000-frames.gif")
    assert many.n_frames == limits.MAX_ANIMATION_FRAMES  # counted up to the cap, not all 10,000
    assert service.state.catalog.media_by_path(library / "really-a-png.mp4").format == "png"
    assert service.search.text("a red picture", top=3)  # the library is searchable next to the bad files

    failures = sorted(service.library.failures())
    decoded = count_decodes(monkeypatch)
    list(service.models.reindex())
    assert decoded == [] and sorted(service.library.failures()) == failures  # nothing changed: nothing retried

    make_jpeg(library / "truncated.jpg", pixels=noise(99))  # the user repairs it (content new to the store)
    os.utime(library / "truncated.jpg", ns=(10**18, 10**18))
    list(service.models.reindex())
    assert decoded == ["truncated.jpg"]
    assert service.state.catalog.media_by_path(library / "truncated.jpg").status == MediaStatus.OK


def test_a_non_utf8_file_name_round_trips_through_the_catalog(service, tmp_path):
    library = build(tmp_path / "library", [c for c in CASES if c.category == "names"])
    list(service.library.index([library]))
    row = service.state.catalog.media_by_path(library / NON_UTF8_NAME)
    assert row is not None and row.path == library / NON_UTF8_NAME and row.path.exists()
    assert service.library.thumbnail(row.id).is_file()
    service.annotations.add_caption(row.id, "a blue square")
    list(service.models.reindex())  # unchanged, so not "missing": the row and its caption stay
    assert [c.text for c in service.annotations.captions(row.id) if c.source == "user"] == ["a blue square"]


def race_hook(monkeypatch: pytest.MonkeyPatch, actions: dict[str, Callable[[Path], None]]) -> None:
    """Run ``actions[name](path)`` just before the extractor decodes that file (once per file)."""
    import engine.features.extract as extract

    original = extract.decode_for_backbone

    def racing(path: Path, *args, **kwargs):
        action = actions.pop(Path(path).name, None)
        if action is not None:
            action(Path(path))
        return original(path, *args, **kwargs)

    monkeypatch.setattr(extract, "decode_for_backbone", racing)


def grow(path: Path) -> None:
    with open(path, "ab") as file:  # a download or copy still in progress
        file.write(b"\0" * 4096)


def replace_with_other_picture(path: Path) -> None:
    other = make_jpeg(path.with_name("other.tmp"), (64, 64), GREEN)
    os.replace(other, path)


def test_files_deleted_replaced_or_growing_after_the_scan(service, tmp_path, monkeypatch):
    library = tmp_path / "library"
    library.mkdir()
    for seed, name in enumerate(["vanishes.jpg", "replaced.jpg", "grows.jpg", "good.jpg"]):
        make_jpeg(library / name, pixels=noise(seed))
    old_hash = {}
    race_hook(monkeypatch, {"vanishes.jpg": os.remove, "replaced.jpg": replace_with_other_picture,
                            "grows.jpg": grow})
    list(service.library.index([library]))
    rows = rows_by_name(service.state.catalog)
    assert rows["good.jpg"].status == MediaStatus.OK
    assert "disappeared" in rows["vanishes.jpg"].error
    for name in ("replaced.jpg", "grows.jpg"):
        assert rows[name].status == MediaStatus.FAILED and "changed while" in rows[name].error
        old_hash[name] = rows[name].content_hash
        # the new content's features must not be filed under the old content's hash
        assert service.state.features.get(old_hash[name], service.state.encoders.backbone.id) is None

    monkeypatch.undo()
    list(service.models.reindex())
    rows = rows_by_name(service.state.catalog)
    assert rows["vanishes.jpg"].status == MediaStatus.MISSING  # gone: kept as missing until the user purges it
    assert rows["replaced.jpg"].status == rows["grows.jpg"].status == MediaStatus.OK  # retried: it changed
    assert rows["replaced.jpg"].content_hash != old_hash["replaced.jpg"]


def test_a_file_vanishing_between_listing_and_hashing_is_skipped(service, tmp_path, monkeypatch):
    import engine.library.indexer as indexer

    library = build(tmp_path / "library", [])
    make_jpeg(library / "vanishes.jpg", (64, 64), BLUE)
    original = indexer.content_hash

    def vanish_first(path: Path) -> str:
        if Path(path).name == "vanishes.jpg":
            os.remove(path)
        return original(path)

    monkeypatch.setattr(indexer, "content_hash", vanish_first)
    list(service.library.index([library]))
    assert set(rows_by_name(service.state.catalog)) == {"good.jpg"}


def fail_listing(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """Make ``os.scandir(folder)`` fail as an unreadable folder does (the tests run as root)."""
    original = os.scandir

    def scandir(path="."):
        if os.path.abspath(path) == str(folder):
            raise PermissionError(13, "Permission denied", str(path))
        return original(path)

    monkeypatch.setattr(os, "scandir", scandir)


def test_an_unreadable_folder_is_skipped_and_keeps_its_indexed_items(service, tmp_path, monkeypatch):
    library = build(tmp_path / "library", [])
    (library / "private").mkdir()
    make_jpeg(library / "private" / "secret.jpg", (64, 64), BLUE)
    make_jpeg(library / "zzz-after.jpg", (64, 64), GREEN)
    list(service.library.index([library]))
    secret = service.state.catalog.media_by_path(library / "private" / "secret.jpg")
    caption = service.annotations.add_caption(secret.id, "my private photo")

    fail_listing(monkeypatch, library / "private")
    make_jpeg(library / "new.jpg", (64, 64), WHITE)
    list(service.models.reindex())  # the walk goes on past the folder it cannot list
    assert set(rows_by_name(service.state.catalog)) == {"good.jpg", "secret.jpg", "zzz-after.jpg", "new.jpg"}
    # not listable is not deleted: the row and the user's caption survive
    assert caption in [c.id for c in service.annotations.captions(secret.id)]

    monkeypatch.undo()
    (library / "private" / "secret.jpg").unlink()
    list(service.models.reindex())  # readable again and really gone: missing now, the caption still kept
    assert rows_by_name(service.state.catalog)["secret.jpg"].status == MediaStatus.MISSING
    assert caption in [c.id for c in service.annotations.captions(secret.id)]


# ---------------------------------------------------------------------------------------------- the CLI

PRELUDE = """
import atexit, os, runpy, sys
peak_file = os.environ.get("HOSTILE_PEAK_FILE")
def write_peak():
    with open("/proc/self/status") as status:
        peak_kib = next(line for line in status if line.startswith("VmHWM:")).split()[1]
    with open(peak_file, "w") as out:
        out.write(peak_kib)
if peak_file and os.path.exists("/proc/self/status"):
    atexit.register(write_peak)
unreadable = os.environ.get("HOSTILE_UNREADABLE")
if unreadable:
    listing = os.scandir
    def scandir(path="."):
        if os.path.abspath(path) == unreadable:
            raise PermissionError(13, "Permission denied", str(path))
        return listing(path)
    os.scandir = scandir
races = os.environ.get("HOSTILE_RACES")
if races:
    import engine.features.extract as extract
    decode, pending = extract.decode_for_backbone, set(races.split(","))
    def racing(path, *args, **kwargs):
        name = os.path.basename(path)
        if name in pending:
            pending.discard(name)
            if name.startswith("vanishes"):
                os.remove(path)
            else:
                with open(path, "ab") as file:
                    file.write(bytes(4096))
        return decode(path, *args, **kwargs)
    extract.decode_for_backbone = racing
sys.argv = ["polyseek", *sys.argv[1:]]
runpy.run_module("engine.cli", run_name="__main__")
"""


@dataclass(frozen=True)
class Run:
    """A finished subprocess: exit status, output, wall time and peak resident memory (None off Linux)."""

    returncode: int
    stdout: str
    stderr: str
    wall_s: float
    peak_rss_bytes: int | None


def run_polyseek(args: list[str], home: Path, assets: Path, tmp: Path,
                 env: dict[str, str] | None = None) -> Run:
    """``polyseek ARGS`` through :data:`PRELUDE`; killed (and failed) after :data:`MAX_WALL_S`."""
    peak_file = tmp / "peak-kib.txt"
    peak_file.unlink(missing_ok=True)
    environment = {**os.environ, "POLYSEEK_HOME": str(home), "POLYSEEK_ASSETS": str(assets),
                   "PYTHONPATH": str(REPO), "HOSTILE_PEAK_FILE": str(peak_file), **(env or {})}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", PRELUDE, *args], capture_output=True, text=True,
                          errors="replace", env=environment, cwd=REPO, timeout=MAX_WALL_S)
    wall = time.perf_counter() - start
    peak = int(peak_file.read_text()) * 1024 if peak_file.is_file() else None
    return Run(done.returncode, done.stdout, done.stderr, wall, peak)


def index_with_cli(folder: Path, home: Path, assets: Path, tmp: Path, env=None) -> tuple[Run, dict]:
    run = run_polyseek(["index", str(folder), "--json"], home, assets, tmp, env)
    assert run.returncode == 0, run.stderr
    assert run.peak_rss_bytes is None or run.peak_rss_bytes < MAX_RSS_BYTES, run
    return run, json.loads(run.stdout)


def report(category: str, run: Run, n_files: int) -> None:
    peak = f"{run.peak_rss_bytes / 1024**2:7.1f}MiB" if run.peak_rss_bytes else "n/a"
    print(f"\nHOSTILE {category:16s} files={n_files:2d} wall={run.wall_s:6.2f}s peak_rss={peak}")


@pytest.mark.slow
@pytest.mark.parametrize("category", CATEGORIES)
def test_cli_indexes_each_category_within_bounds(category, tmp_path, polyseek_home, assets_dir):
    cases = [c for c in CASES if c.category == category]
    folder = build(tmp_path / category, cases)
    run, result = index_with_cli(folder, polyseek_home, assets_dir, tmp_path)
    report(category, run, len(cases))
    failed = {Path(f["path"]).name: f["error"] for f in result["failures"]}
    assert set(failed) == {c.name for c in cases if c.outcome == "failed"}
    assert all(failed[c.name] for c in cases if c.outcome == "failed")  # a reason for each
    assert result["counts"]["total"] == 1 + sum(c.outcome != "skipped" for c in cases)
    with Catalog(paths.library_dir("default") / "catalog.sqlite") as catalog:
        check_outcomes(rows_by_name(catalog), cases)


@pytest.mark.slow
def test_cli_survives_an_unreadable_folder_and_races(tmp_path, polyseek_home, assets_dir):
    folder = build(tmp_path / "library", [])
    (folder / "private").mkdir()
    make_jpeg(folder / "private" / "secret.jpg", (64, 64), BLUE)
    for seed, name in enumerate(["vanishes.jpg", "grows.jpg"]):
        make_jpeg(folder / name, pixels=noise(seed))
    env = {"HOSTILE_UNREADABLE": str(folder / "private"), "HOSTILE_RACES": "vanishes.jpg,grows.jpg"}
    run, result = index_with_cli(folder, polyseek_home, assets_dir, tmp_path, env)
    report("unreadable+races", run, 3)
    failed = {Path(f["path"]).name: f["error"] for f in result["failures"]}
    assert set(failed) == {"vanishes.jpg", "grows.jpg"}
    assert "disappeared" in failed["vanishes.jpg"] and "changed while" in failed["grows.jpg"]
    assert result["counts"]["image"] == 1  # good.jpg; the private folder was not listed

    run, result = index_with_cli(folder, polyseek_home, assets_dir, tmp_path)  # no hooks: all readable
    assert result["failures"] == [] and result["counts"]["image"] == 3  # good, grows (retried), secret


def test_a_file_replaced_by_known_content_gets_that_contents_pseudo_caption(service, tmp_path):
    library = tmp_path / "library"
    library.mkdir()
    make_jpeg(library / "a.jpg", (64, 64), RED)
    make_jpeg(library / "b.jpg", (64, 64), BLUE)
    list(service.library.index([library]))
    pseudo = {m.path.name: service.state.catalog.captions(m.id, sources=["pseudo"])[0].text
              for m in service.state.catalog.iter_media()}
    assert pseudo["a.jpg"] != pseudo["b.jpg"]
    os.replace(make_jpeg(library / "copy.tmp", (64, 64), BLUE), library / "a.jpg")  # now b's content
    list(service.models.reindex())  # a.jpg's features come from the store (b's): its old caption must not survive
    a = service.state.catalog.media_by_path(library / "a.jpg")
    assert a.status == MediaStatus.OK
    [caption] = [c.text for c in service.annotations.captions(a.id) if c.source == "pseudo"]
    assert caption != pseudo["a.jpg"]
    assert all(phrase in pseudo["b.jpg"] for phrase in caption.split(", "))  # b's classes (no colours)


@pytest.mark.slow
def test_cli_text_output_survives_a_non_utf8_path(tmp_path, polyseek_home, assets_dir):
    folder = build(tmp_path / "names", [c for c in CASES if c.name == NON_UTF8_NAME])
    index_with_cli(folder, polyseek_home, assets_dir, tmp_path)
    strict = {"PYTHONIOENCODING": "utf-8:strict"}  # what a UTF-8 locale other than C.UTF-8 gives
    run = run_polyseek(["search", "a blue square", "--top", "5"], polyseek_home, assets_dir, tmp_path, strict)
    assert run.returncode == 0, run.stderr
    assert "latin1" in run.stdout
