"""A full disk (ENOSPC) loses nothing (issue #21): indexing, caption saves, purges, training checkpoints and model
registration on a POLYSEEK_HOME that fills up end with a clear message, an intact catalog and the last good
checkpoint, never a half-written file.

The home is a small tmpfs mounted for the test (``mount -t tmpfs``, which needs root); where mounting is not
permitted the tests skip and say so. The media themselves live on the ordinary disk, as a user's photos would."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.library.catalog import Catalog, CatalogError
from engine.workspace import Workspace
from tests.mediagen import make_jpeg
from tests.unit.test_annotations_survive import annotations

DISK_MIB = 24


@pytest.fixture
def small_disk(tmp_path: Path):
    """A DISK_MIB tmpfs mounted under ``tmp_path``; unmounted afterwards."""
    mount = tmp_path / "small-disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("the full-disk checks mount a small tmpfs, which needs root; not running as root here")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_MIB}m", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({done.stderr.strip() or done.returncode}); "
                    "the full-disk checks need one")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def fill(mount: Path, leave: int = 0) -> Path:
    """Fill the file system at ``mount`` but ``leave`` bytes; returns the filler file (delete it to free space)."""
    filler = mount / "filler"
    fill_rest(filler)
    if leave:
        os.truncate(filler, max(0, filler.stat().st_size - leave))
    else:
        assert os.statvfs(mount).f_bavail == 0
    return filler


def fill_rest(filler: Path) -> None:
    """Grow ``filler`` until its file system has no byte left."""
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for size in (1 << 20, 1 << 16, 1 << 12, 1 << 9, 1):
            while True:
                try:
                    os.write(fd, b"\0" * size)
                except OSError as error:
                    assert error.errno == errno.ENOSPC
                    break
    finally:
        os.close(fd)


def polyseek(*args: str, home: Path, assets: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "POLYSEEK_HOME": str(home), "POLYSEEK_ASSETS": str(assets), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "engine.cli", *args], capture_output=True, text=True, env=env,
                          timeout=300)


def photos(folder: Path, n: int, start: int = 0) -> list[Path]:
    folder.mkdir(exist_ok=True)
    return [make_jpeg(folder / f"p{i:03d}.jpg", (64, 48), ((i * 37) % 256, (i * 91) % 256, (i * 53) % 256))
            for i in range(start, start + n)]


def test_indexing_and_caption_saves_on_a_full_disk_lose_nothing(small_disk, tmp_path, assets_dir, monkeypatch):
    home = small_disk / "home"
    monkeypatch.setenv("POLYSEEK_HOME", str(home))
    folder = tmp_path / "photos"
    photos(folder, 3)
    service = Workspace.open("full", assets_dir)  # open all along, as the app is while the disk fills up
    try:
        list(service.library.index([folder]))
        first = service.state.catalog.media_by_path(folder / "p000.jpg").id
        service.annotations.add_caption(first, "a caption written before the disk filled up")
        service.annotations.accept_pair("the first photo", first)
        before = annotations(service.state.catalog)
        photos(folder, 60, start=3)  # about 7 MB of features to store: more than the disk will have left
        filler = fill(small_disk, leave=1 << 20)
        with pytest.raises(CatalogError, match="full"):  # the disk fills up in the middle of indexing
            list(service.library.index([folder]))
        fill_rest(filler)
        try:  # SQLite may still have room in its log for one small row; either way, nothing half-written
            service.annotations.add_caption(first, "a caption typed while the disk was full")
            acked = True
        except CatalogError as error:
            assert "full" in str(error)
            acked = False
        with pytest.raises(CatalogError, match="full"):  # the purge cannot write its snapshot: it deletes nothing
            service.state.catalog.mark_missing([folder / "p001.jpg"])
            service.library.purge_missing()
    finally:
        service.close()

    run = polyseek("index", str(folder), "--library", "full", home=home, assets=assets_dir)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "disk is full" in run.stderr and "Traceback" not in run.stderr

    filler.unlink()
    service = Workspace.open("full", assets_dir)
    try:
        assert service.state.catalog.integrity_ok() and service.state.features.integrity_ok()
        typed = "a caption typed while the disk was full"
        assert [r for r in annotations(service.state.catalog) if r[3] != typed] == before
        assert (typed in [r[3] for r in annotations(service.state.catalog)]) == acked
        list(service.library.index([folder]))  # with room again, the run finishes what the full disk stopped
        assert service.library.counts()["image"] == 63 and service.library.counts()["pending"] == 0
        assert [r for r in annotations(service.state.catalog) if r[3] != typed] == before
        assert not list(home.rglob("*.tmp"))
    finally:
        service.close()


def test_model_registration_on_a_full_disk_leaves_the_registry_as_it_was(small_disk):
    with Catalog(small_disk / "catalog.sqlite") as catalog:
        catalog.register_model("good", "vse", Path("/models/good"), {"rsum": 1.0})
        catalog.set_active_model("good")
        media_id, _ = catalog.upsert_media(Path("/lib/a.jpg"), 1, 1, "h", None)
        catalog.add_caption(media_id, "mine", "user")
        filler = fill(small_disk)
        outcomes = []
        for i in range(200):  # the log's spare room runs out; every failure must be clean
            try:
                catalog.register_model(f"new-{i}", "vse", Path(f"/models/new-{i}"), {"rsum": float(i)})
                catalog.set_active_model(f"new-{i}")
                outcomes.append("ok")
            except CatalogError as error:
                assert "full" in str(error), error
                outcomes.append("full")
                break
        assert outcomes[-1] == "full"
    filler.unlink()
    with Catalog(small_disk / "catalog.sqlite") as catalog:
        assert catalog.integrity_ok()
        names = [m.name for m in catalog.models()]
        assert names == ["good"] + [f"new-{i}" for i in range(outcomes.count("ok"))]
        active = catalog.active_model()
        assert active is not None and active.name == names[-1]  # the last one fully registered and activated
        assert [c.text for c in catalog.iter_captions()] == ["mine"]


def test_a_training_checkpoint_on_a_full_disk_keeps_the_last_good_one(small_disk):
    torch = pytest.importorskip("torch")
    from trainer.checkpoint import TrainerState, load_checkpoint, save_checkpoint

    out = small_disk / "run"
    out.mkdir()
    model = torch.nn.Linear(256, 256)
    save_checkpoint(out, model, {"epoch": 1}, TrainerState("vse", global_step=10, step=10))
    good = {k: v.clone() for k, v in model.state_dict().items()}
    filler = fill(small_disk)
    with torch.no_grad():
        model.weight.add_(1.0)
    with pytest.raises(OSError) as raised:
        save_checkpoint(out, model, {"epoch": 2}, TrainerState("vse", global_step=20, step=20))
    assert raised.value.errno == errno.ENOSPC
    assert not list(out.glob(".*.tmp"))  # no half-written file left behind
    fresh = torch.nn.Linear(256, 256)
    state, training = load_checkpoint(out, fresh)
    assert state.global_step == 10 and training == {"epoch": 1}
    assert all(torch.equal(fresh.state_dict()[k], v) for k, v in good.items())
    filler.unlink()
    save_checkpoint(out, model, {"epoch": 2}, TrainerState("vse", global_step=20, step=20))  # room again: it goes on
    assert load_checkpoint(out, fresh)[0].global_step == 20
