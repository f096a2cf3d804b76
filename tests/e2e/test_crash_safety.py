"""Crash safety (issue #8): killing ``polyseek index`` at any moment loses at most the work in flight.

``polyseek index`` runs in a subprocess on a generated library of 150 small pictures and is SIGKILLed at six
seeded random moments spread over the work, restarted after each kill. After every kill both SQLite files
pass ``PRAGMA integrity_check``; at the end no path has two rows, no item is lost, and the ok items, their
pseudo captions and their features equal those of an uninterrupted run in another home. A caption whose
``add_caption`` returned (the writer printed "ack N") survives a SIGKILL of the writer.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw

from engine.features.featurestore import FIELDS, FeatureStore
from engine.library.catalog import Catalog
from engine.library.indexer import BATCH
from engine.workspace import Workspace

REPO = Path(__file__).resolve().parents[2]
N_ITEMS = 150
N_KILLS = 6
SEED = 20240608


def make_library(folder: Path, n: int, seed: int = 0, size: int = 64) -> Path:
    """``n`` distinct small JPEGs: random shapes on a random background."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True)
    for i in range(n):
        image = Image.new("RGB", (size, size), tuple(int(v) for v in rng.integers(0, 256, 3)))
        draw = ImageDraw.Draw(image)
        for _ in range(3):
            x, y = (int(v) for v in rng.integers(0, size - 8, 2))
            w, h = (int(v) for v in rng.integers(8, size // 2, 2))
            shape = draw.ellipse if rng.random() < 0.5 else draw.rectangle
            shape([x, y, x + w, y + h], fill=tuple(int(v) for v in rng.integers(0, 256, 3)))
        image.save(folder / f"item{i:04d}.jpg", quality=90)
    return folder


def environment(home: Path, assets: Path) -> dict[str, str]:
    return {**os.environ, "POLYSEEK_HOME": str(home), "POLYSEEK_ASSETS": str(assets), "PYTHONPATH": str(REPO)}


def index_to_the_end(library: Path, home: Path, assets: Path) -> tuple[float, dict]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "engine.cli", "index", str(library), "--json"],
                          capture_output=True, text=True, env=environment(home, assets), cwd=REPO,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return time.perf_counter() - start, json.loads(done.stdout)


def ok_rows(catalog_file: Path) -> int:
    """Indexed rows so far, read beside the running indexer (0 while the catalog is not there yet)."""
    try:
        with closing(sqlite3.connect(f"file:{catalog_file}?mode=ro", uri=True, timeout=0.2)) as conn:
            return conn.execute("SELECT COUNT(*) FROM media WHERE status = 'ok'").fetchone()[0]
    except sqlite3.Error:
        return 0


def kill_points(rng: random.Random, run_s: float) -> list[tuple[int, float]]:
    """``(rows, extra_s)`` per kill: once ``rows`` items are indexed, wait ``extra_s`` more, then kill.

    The first kill comes before anything is indexed (opening the files, scanning, hashing, the first batch);
    the others after a random number of rows in each further sixth of the library, so the kills are spread
    over the whole run. The extra wait is random within one batch's time, so a kill lands anywhere in the
    batch cycle, not just after a commit.
    """
    batch_s = run_s * BATCH / N_ITEMS
    rows = [0] + [int(N_ITEMS * (k + rng.random()) / N_KILLS) for k in range(1, N_KILLS)]
    return [(r, rng.uniform(0.0, batch_s)) for r in rows]


def kill_during_work(library: Path, home: Path, assets: Path, rows: int, extra_s: float) -> bool:
    """Start an index and SIGKILL it at the kill point; True when it was killed (had not finished)."""
    catalog_file = home / "libraries" / "default" / "catalog.sqlite"
    process = subprocess.Popen([sys.executable, "-m", "engine.cli", "index", str(library), "--json"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env=environment(home, assets), cwd=REPO)
    try:
        deadline = time.monotonic() + 300
        while process.poll() is None and ok_rows(catalog_file) < rows and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(extra_s)
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
    finally:
        process.kill()
        process.wait()
    return process.returncode == -signal.SIGKILL


def integrity(path: Path) -> list[tuple]:
    """``PRAGMA integrity_check`` on a raw connection (it also replays the WAL a killed writer left)."""
    with sqlite3.connect(path) as conn:
        return conn.execute("PRAGMA integrity_check").fetchall()


def snapshot(home: Path) -> dict[str, tuple]:
    """path name -> (status, kind, pseudo caption, features) of every row of the default library."""
    out = {}
    with Catalog(home / "libraries" / "default" / "catalog.sqlite") as catalog, \
            FeatureStore(home / "features.sqlite") as store:
        for media in catalog.iter_media():
            pseudo = [c.text for c in catalog.captions(media.id, sources=["pseudo"])]
            record = store.get(media.content_hash, media.features_backbone or "")
            features = {f: record.get(f) for f in FIELDS} if record is not None else None
            out[media.path.name] = (str(media.status), str(media.kind), pseudo, features)
    return out


def assert_same_features(got: dict | None, want: dict | None, name: str) -> None:
    assert got is not None and want is not None, name
    for field, array in want.items():
        if array is None:
            assert got[field] is None, (name, field)
        elif array.dtype.kind == "f":  # another batch split may change the last bits of a float16
            np.testing.assert_allclose(got[field], array, rtol=1e-2, atol=1e-3, err_msg=f"{name} {field}")
        else:
            np.testing.assert_array_equal(got[field], array, err_msg=f"{name} {field}")


@pytest.mark.slow
def test_killing_the_indexer_at_random_moments_loses_nothing(tmp_path, assets_dir):
    library = make_library(tmp_path / "library", N_ITEMS)
    reference_home, crashed_home = tmp_path / "reference", tmp_path / "crashed"
    run_s, _ = index_to_the_end(library, reference_home, assets_dir)
    catalog_file = crashed_home / "libraries" / "default" / "catalog.sqlite"
    progress = []
    for rows, extra_s in kill_points(random.Random(SEED), run_s):
        killed = kill_during_work(library, crashed_home, assets_dir, rows, extra_s)
        for path in (catalog_file, crashed_home / "features.sqlite"):
            if path.exists():
                assert integrity(path) == [("ok",)], (rows, extra_s, path)
        progress.append((rows, round(extra_s, 2), killed, ok_rows(catalog_file)))
    print(f"\nCRASH uninterrupted run {run_s:.2f}s; "
          f"kills (after rows, +s, killed, ok rows after): {progress}")
    assert sum(killed for *_, killed, _ in progress) >= N_KILLS // 2  # most kills hit a running indexer

    _, result = index_to_the_end(library, crashed_home, assets_dir)
    assert result["counts"]["total"] == result["counts"]["image"] == N_ITEMS and not result["failures"]
    with sqlite3.connect(catalog_file) as conn:
        rows = conn.execute("SELECT COUNT(*), COUNT(DISTINCT path) FROM media").fetchone()
    assert rows == (N_ITEMS, N_ITEMS)
    got, want = snapshot(crashed_home), snapshot(reference_home)
    assert sorted(got) == sorted(want) == sorted(p.name for p in library.iterdir())
    for name, (status, kind, pseudo, features) in want.items():
        assert got[name][:3] == (status, kind, pseudo), name
        assert_same_features(got[name][3], features, name)


class Crash(BaseException):
    """Stands for a kill: not an Exception, so nothing on the way up handles it; the open transaction rolls
    back exactly as SQLite discards an uncommitted one when its process dies."""


def test_a_crash_between_the_feature_and_catalog_commits_changes_nothing(tmp_path, assets_dir, monkeypatch):
    library = make_library(tmp_path / "library", 40)
    monkeypatch.setenv("POLYSEEK_HOME", str(tmp_path / "reference"))
    with closing(Workspace.open("default", assets_dir)) as reference:
        list(reference.library.index([library]))
    monkeypatch.setenv("POLYSEEK_HOME", str(tmp_path / "crashed"))
    original = Catalog.set_media_ok

    def crash_after_the_features_are_stored(self, *args, **kwargs):
        raise Crash

    monkeypatch.setattr(Catalog, "set_media_ok", crash_after_the_features_are_stored)
    with closing(Workspace.open("default", assets_dir)) as service, pytest.raises(Crash):
        list(service.library.index([library]))
    with FeatureStore(tmp_path / "crashed" / "features.sqlite") as store:
        assert store.stats().items > 0  # the crash came after the features were stored
    monkeypatch.setattr(Catalog, "set_media_ok", original)
    with closing(Workspace.open("default", assets_dir)) as service:
        list(service.models.reindex())
    got, want = snapshot(tmp_path / "crashed"), snapshot(tmp_path / "reference")
    assert {n: g[:3] for n, g in got.items()} == {n: w[:3] for n, w in want.items()}


WRITER = """
import sys
from engine.workspace import Workspace
service = Workspace.open("default")
media_id, start = int(sys.argv[1]), int(sys.argv[2])
for n in range(start, start + 100_000):
    service.annotations.add_caption(media_id, f"caption number {n}: it's a \\"test\\"; with quotes")
    print(f"ack {n}", flush=True)
"""


@pytest.mark.slow
def test_an_acknowledged_caption_survives_a_kill_of_the_writer(tmp_path, polyseek_home, assets_dir):
    library = make_library(tmp_path / "library", 1)
    with closing(Workspace.open("default", assets_dir)) as service:
        list(service.library.index([library]))
        media_id = next(service.state.catalog.iter_media()).id
    catalog_file = polyseek_home / "libraries" / "default" / "catalog.sqlite"
    rng = random.Random(SEED)
    acked: list[int] = []
    for round_ in range(3):
        # the writer is killed while it writes: it has printed its ack and is already on the next caption
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(media_id), str(round_ * 100_000)],
                                  stdout=subprocess.PIPE, env=environment(polyseek_home, assets_dir),
                                  cwd=REPO)
        kill_at = rng.randint(20, 300)
        try:
            for n_acks, line in enumerate(writer.stdout, 1):
                acked.append(int(line.split()[1]))
                if n_acks == kill_at:
                    writer.send_signal(signal.SIGKILL)
                    break
        finally:
            writer.kill()
            writer.communicate()
        assert integrity(catalog_file) == [("ok",)]
        with Catalog(catalog_file) as catalog:
            stored = {c.text for c in catalog.captions(media_id, sources=["user"])}
        missing = [n for n in acked if caption_text(n) not in stored]
        assert not missing and len(stored) >= len(acked), missing[:5]
    print(f"\nCRASH {len(acked)} acknowledged captions over 3 kills, all present")


def caption_text(n: int) -> str:
    return f"caption number {n}: it's a \"test\"; with quotes"
