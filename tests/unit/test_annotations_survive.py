"""Nothing the user wrote is lost by a scan (issue #21): unplugged drives, emptied mount points, vanished and
returning files, purges, snapshots and exports with files missing. Every test compares the exact annotations
(captions and pairs, with their provenance) before and after."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from engine.library.captionfolder import load_caption_folder
from engine.library.catalog import Catalog, MediaStatus, NotFound, snapshots
from engine.workspace import Workspace
from tests.mediagen import make_jpeg, make_png

COLORS = [(220, 30, 30), (30, 200, 30), (30, 30, 220), (230, 230, 40), (200, 40, 200)]


def annotations(catalog: Catalog) -> list[tuple]:
    """Every user/imported caption and pair, as (content hash, file name, what, text, label/source, created)."""
    by_id = {m.id: m for m in catalog.iter_media()}
    rows = [(by_id[c.media_id].content_hash, by_id[c.media_id].path.name, "caption", c.text, str(c.source),
             c.created_at) for c in catalog.iter_captions() if c.source != "pseudo"]
    rows += [(by_id[p.media_id].content_hash, by_id[p.media_id].path.name, "pair", p.query, p.label, str(p.source),
              p.created_at) for p in catalog.pairs()]
    return sorted(rows, key=repr)


def without_times(rows: list[tuple]) -> list[tuple]:
    return sorted((r[:-1] for r in rows), key=repr)


@pytest.fixture
def service(assets_dir: Path):
    svc = Workspace.open("survive", assets_dir)
    yield svc
    svc.close()


@pytest.fixture
def drives(tmp_path: Path) -> dict[str, Path]:
    """Two library folders: ``drive`` (three photos, the 'external drive') and ``home`` (two photos)."""
    drive, home = tmp_path / "drive", tmp_path / "home"
    drive.mkdir()
    home.mkdir()
    for i in range(3):
        make_jpeg(drive / f"d{i}.jpg", (64, 48), COLORS[i])
    for i in range(2):
        make_png(home / f"h{i}.png", (48, 48), COLORS[3 + i])
    return {"drive": drive, "home": home, "tmp": tmp_path}


def annotate(service: Workspace, drives: dict[str, Path]) -> list[tuple]:
    """Index both folders and annotate two drive photos and one home photo; returns the annotations."""
    list(service.library.index([drives["drive"], drives["home"]]))
    by_name = {m.path.name: m.id for m in service.state.catalog.iter_media()}
    service.annotations.add_caption(by_name["d0.jpg"], "a red square from the holiday")
    service.annotations.add_caption(by_name["d0.jpg"], "the red one")
    service.annotations.accept_pair("something red", by_name["d0.jpg"])
    service.annotations.reject_pair("a green field", by_name["d1.jpg"])
    service.state.catalog.add_caption(by_name["d1.jpg"], "imported green caption", "imported")
    service.annotations.add_caption(by_name["h0.png"], "yellow at home")
    before = annotations(service.state.catalog)
    assert len(before) == 6
    return before


def statuses(service: Workspace) -> dict[str, str]:
    return {m.path.name: str(m.status) for m in service.state.catalog.iter_media()}


def unplug(drive: Path, tmp: Path) -> Path:
    """Move the drive's files away; the mount point stays as an empty folder. Returns where they went."""
    away = tmp / "unplugged"
    shutil.move(drive, away)
    drive.mkdir()
    return away


def plug_back(drive: Path, away: Path) -> None:
    drive.rmdir()
    shutil.move(away, drive)


# ------------------------------------------------------------------------------------------ offline roots


def test_empty_mount_point_is_offline_and_keeps_every_annotation(service, drives):
    before = annotate(service, drives)
    ids = {m.path.name: m.id for m in service.state.catalog.iter_media()}
    away = unplug(drives["drive"], drives["tmp"])
    make_png(drives["home"] / "h-new.png", (40, 40), (90, 90, 90))  # the other folder still gets indexed

    list(service.models.reindex())

    assert annotations(service.state.catalog) == before
    [offline] = service.library.offline_roots()
    assert offline.path == drives["drive"] and offline.items == 3 and "empty" in offline.reason
    assert statuses(service) == {"d0.jpg": "missing", "d1.jpg": "missing", "d2.jpg": "missing", "h0.png": "ok",
                                 "h1.png": "ok", "h-new.png": "ok"}
    assert service.library.counts()["missing"] == 3
    hits = service.search.text("red", top=10)
    assert hits and {Path(h.path).parent for h in hits} == {drives["home"]}  # offline items are not results

    plug_back(drives["drive"], away)
    list(service.models.reindex())
    assert service.library.offline_roots() == []
    assert {m.path.name: m.id for m in service.state.catalog.iter_media() if m.path.name != "h-new.png"} == ids
    assert set(statuses(service).values()) == {"ok"}
    assert annotations(service.state.catalog) == before


def test_missing_root_among_present_ones_is_skipped_not_fatal(service, drives):
    before = annotate(service, drives)
    away = unplug(drives["drive"], drives["tmp"])
    drives["drive"].rmdir()  # the mount point itself is gone
    make_png(drives["home"] / "h-new.png", (40, 40), (90, 90, 90))

    list(service.models.reindex())  # used to raise "no such file or folder" and index nothing

    assert [(o.path, o.items) for o in service.library.offline_roots()] == [(drives["drive"], 3)]
    assert "not found" in service.library.offline_roots()[0].reason
    assert statuses(service)["h-new.png"] == "ok"
    assert annotations(service.state.catalog) == before

    shutil.move(away, drives["drive"])
    list(service.models.reindex())
    assert set(statuses(service).values()) == {"ok"} and annotations(service.state.catalog) == before


def test_a_single_file_added_to_the_library_and_then_gone_keeps_its_caption(service, drives):
    single = make_jpeg(drives["tmp"] / "single.jpg", (50, 50), (120, 60, 10))
    list(service.library.index([single, drives["home"]]))
    media_id = service.state.catalog.media_by_path(single).id
    service.annotations.add_caption(media_id, "one photo added on its own")
    before = annotations(service.state.catalog)
    single.unlink()
    list(service.models.reindex())
    assert [(o.path, o.reason) for o in service.library.offline_roots()] == [(single, "file not found")]
    assert statuses(service)["single.jpg"] == "missing" and annotations(service.state.catalog) == before


def test_a_path_that_never_was_a_library_folder_is_still_an_error(service, drives):
    with pytest.raises(FileNotFoundError, match="no such file"):
        list(service.library.index([drives["tmp"] / "typo"]))


def test_root_on_another_device_without_its_files_is_offline(service, drives):
    before = annotate(service, drives)
    root_id = service.state.catalog.root_id(drives["drive"])
    assert service.state.catalog.root_device(root_id) == os.stat(drives["drive"]).st_dev  # recorded when added
    away = unplug(drives["drive"], drives["tmp"])
    make_jpeg(drives["drive"] / "other-disk.jpg", (30, 30), (10, 10, 10))  # another drive, mounted there
    service.state.catalog.set_root_device(root_id, os.stat(drives["drive"]).st_dev + 1)  # what the drive was on

    list(service.models.reindex())

    [offline] = service.library.offline_roots()
    assert "another device" in offline.reason
    assert "other-disk.jpg" not in statuses(service)  # the stranger's files are not indexed into this folder
    assert annotations(service.state.catalog) == before

    # the drive comes back under a new device id (its files are there): online, and the new id is recorded
    shutil.rmtree(drives["drive"])
    shutil.move(away, drives["drive"])
    list(service.models.reindex())
    assert service.library.offline_roots() == []
    assert service.state.catalog.root_device(root_id) == os.stat(drives["drive"]).st_dev
    assert set(statuses(service).values()) == {"ok"} and annotations(service.state.catalog) == before


def test_a_folder_the_user_emptied_on_purpose_keeps_its_annotations_until_purged(service, drives):
    before = annotate(service, drives)
    for f in drives["home"].iterdir():
        f.unlink()
    list(service.models.reindex())
    assert [o.path for o in service.library.offline_roots()] == [drives["home"]]  # it looks unplugged: nothing is lost
    assert annotations(service.state.catalog) == before


# ------------------------------------------------------------------------------------------ files


def test_deleted_file_is_missing_and_gets_its_annotations_back_when_it_returns(service, drives):
    before = annotate(service, drives)
    d0 = service.state.catalog.media_by_path(drives["drive"] / "d0.jpg")
    kept = drives["tmp"] / "kept.jpg"
    shutil.move(drives["drive"] / "d0.jpg", kept)

    list(service.models.reindex())
    assert service.library.offline_roots() == []  # the folder still has files: a deleted file, not an unplugged drive
    assert statuses(service)["d0.jpg"] == "missing"
    assert annotations(service.state.catalog) == before
    assert all(Path(h.path).name != "d0.jpg" for h in service.search.text("red square", top=10))

    # it comes back renamed, in another folder of the library: the same row, by content
    shutil.move(kept, drives["home"] / "renamed.jpg")
    list(service.models.reindex())
    moved = service.state.catalog.media_by_path(drives["home"] / "renamed.jpg")
    assert moved.id == d0.id and moved.status == MediaStatus.OK
    assert without_times(annotations(service.state.catalog)) == without_times(
        [(*r[:1], "renamed.jpg" if r[1] == "d0.jpg" else r[1], *r[2:]) for r in before])
    assert [c.created_at for c in service.annotations.captions(d0.id) if c.source == "user"] == sorted(
        r[-1] for r in before if r[1] == "d0.jpg" and r[2] == "caption")


def test_export_with_files_missing_writes_what_it_can_and_names_the_rest(service, drives):
    annotate(service, drives)
    away = unplug(drives["drive"], drives["tmp"])
    list(service.models.reindex())

    folder = service.annotations.export(drives["tmp"] / "export")
    assert int(folder) == 1 and sorted(folder.skipped) == ["d0.jpg", "d1.jpg"]
    exported = load_caption_folder(drives["tmp"] / "export")
    assert [(i.file, t) for i, t in exported.item_captions()] == [("h0.png", ["yellow at home"])]

    coco = service.annotations.export(drives["tmp"] / "all.json", "coco")
    assert (int(coco), coco.accepted, coco.rejected, coco.skipped) == (4, 1, 1, ())
    data = json.loads((drives["tmp"] / "all.json").read_text())
    assert sorted(i["file_name"] for i in data["images"]) == ["d0.jpg", "d1.jpg", "h0.png"]
    assert sorted(a["caption"] for a in data["annotations"]) == [
        "a red square from the holiday", "imported green caption", "the red one", "yellow at home"]
    assert sorted((p["query"], p["kind"]) for p in data["pairs"]) == [("a green field", "reject"),
                                                                      ("something red", "accept")]
    plug_back(drives["drive"], away)


def test_a_backup_import_reaches_items_on_an_unplugged_drive(service, drives):
    annotate(service, drives)
    assert service.annotations.export(drives["tmp"] / "backup.json", "coco") == 4
    away = unplug(drives["drive"], drives["tmp"])
    list(service.models.reindex())
    d0 = service.state.catalog.media_by_path(drives["drive"] / "d0.jpg")
    for caption in service.annotations.captions(d0.id):
        if caption.source == "user":
            service.annotations.delete_caption(caption.id)  # the user deletes them by mistake while the drive is away

    assert service.annotations.import_file(drives["tmp"] / "backup.json") == 2

    assert sorted(c.text for c in service.annotations.captions(d0.id) if c.source == "user") == [  # the user's again
        "a red square from the holiday", "the red one"]
    plug_back(drives["drive"], away)


# ------------------------------------------------------------------------------------------ purge and snapshots


def test_purge_counts_then_snapshots_then_deletes_and_the_snapshot_restores_everything(service, drives):
    before = annotate(service, drives)
    away = unplug(drives["drive"], drives["tmp"])
    list(service.models.reindex())
    assert service.library.missing_summary() == (3, 3, 2)  # 3 items; 2 user + 1 imported captions; 1 + 1 pairs

    items, captions, pairs, snapshot = service.library.purge_missing()

    assert (items, captions, pairs) == (3, 3, 2)
    assert {m.path.name for m in service.state.catalog.iter_media()} == {"h0.png", "h1.png"}
    assert without_times(annotations(service.state.catalog)) == without_times([r for r in before if r[1] == "h0.png"])
    assert service.annotations.snapshots() == [snapshot]
    data = snapshots.read(snapshot)
    assert data["reason"] == "purge-missing" and len(data["items"]) == 3  # d0, d1 and h0: every annotation

    restored = service.annotations.restore_snapshot(snapshot)  # the drive is unplugged: the rows wait, marked missing
    assert (restored.captions, restored.pairs, restored.items_created) == (3, 2, 2)
    assert without_times(annotations(service.state.catalog)) == without_times(before)
    assert statuses(service)["d0.jpg"] == "missing"
    again = service.annotations.restore_snapshot(snapshot)
    assert (again.captions, again.pairs, again.items_created) == (0, 0, 0)  # restoring twice adds nothing

    plug_back(drives["drive"], away)
    list(service.models.reindex())
    assert set(statuses(service).values()) == {"ok"}
    assert without_times(annotations(service.state.catalog)) == without_times(before)


def test_purging_an_item_whose_copy_is_still_there_moves_its_annotations_to_the_copy(service, drives):
    before = annotate(service, drives)
    shutil.copy2(drives["drive"] / "d0.jpg", drives["home"] / "copy-of-d0.jpg")
    list(service.models.reindex())
    copy = service.state.catalog.media_by_path(drives["home"] / "copy-of-d0.jpg")
    service.annotations.add_caption(copy.id, "the red one")  # the copy already has one of the same captions
    (drives["drive"] / "d0.jpg").unlink()  # the original goes; the copy stays
    list(service.models.reindex())
    assert statuses(service)["d0.jpg"] == "missing"
    assert service.library.missing_summary() == (1, 0, 0)  # nothing would be lost

    items, captions, pairs, snapshot = service.library.purge_missing()

    assert (items, captions, pairs) == (1, 0, 0) and snapshot is not None
    on_copy = sorted((c.text, str(c.source)) for c in service.annotations.captions(copy.id) if c.source != "pseudo")
    assert on_copy == [("a red square from the holiday", "user"), ("the red one", "user")]
    assert [(p.query, p.label) for p in service.state.catalog.pairs(copy.id)] == [("something red", 1)]
    others = [r for r in before if r[1] != "d0.jpg"]
    assert [r for r in annotations(service.state.catalog) if r[1] != "copy-of-d0.jpg"] == others


def test_purge_with_nothing_missing_deletes_nothing(service, drives):
    before = annotate(service, drives)
    assert service.library.missing_summary() == (0, 0, 0)
    assert service.library.purge_missing() == (0, 0, 0, None)
    assert annotations(service.state.catalog) == before and service.annotations.snapshots() == []


def test_removing_a_folder_snapshots_its_annotations_first(service, drives):
    before = annotate(service, drives)
    service.library.remove_root(drives["drive"])
    assert {m.path.name for m in service.state.catalog.iter_media()} == {"h0.png", "h1.png"}
    [snapshot] = service.annotations.snapshots()
    assert snapshots.read(snapshot)["reason"] == "remove-root"
    service.library.add_root(drives["drive"])
    list(service.models.reindex())
    assert service.annotations.restore_snapshot(snapshot).captions == 3
    assert without_times(annotations(service.state.catalog)) == without_times(before)


def test_removing_a_folder_counts_what_goes_names_its_snapshot_and_the_import_menu_restores_it(service, drives):
    """Issue #44: the GUI asks with these counts, then says where the snapshot went; File > Import annotations
    (``import_annotations``, which reads a snapshot as one) brings every caption and verdict back."""
    before = annotate(service, drives)
    assert service.library.root_summary(drives["drive"]) == (3, 3, 2)  # d0: 2 captions, 1 pair; d1: 1 imported, 1 pair
    assert service.library.root_summary(drives["home"]) == (2, 1, 0)
    snapshot = service.library.remove_root(drives["drive"])
    assert snapshot is not None and service.annotations.snapshots() == [snapshot]
    assert snapshots.read(snapshot)["reason"] == "remove-root"
    with pytest.raises(NotFound):
        service.library.root_summary(drives["drive"])
    service.library.add_root(drives["drive"])
    list(service.models.reindex())
    assert service.annotations.import_file(snapshot) == 3
    assert without_times(annotations(service.state.catalog)) == without_times(before)
    assert service.annotations.import_file(snapshot) == 0  # twice adds nothing


def test_removing_a_folder_nobody_annotated_writes_no_snapshot(service, drives):
    annotate(service, drives)
    yellow = next(c.id for c in service.state.catalog.iter_captions() if c.text == "yellow at home")
    service.annotations.delete_caption(yellow)
    assert service.library.root_summary(drives["home"]) == (2, 0, 0)
    assert service.library.remove_root(drives["home"]) is None and service.annotations.snapshots() == []


def test_only_the_newest_snapshots_are_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(snapshots, "KEEP", 3)
    with Catalog(tmp_path / "catalog.sqlite") as catalog:
        media_id, _ = catalog.upsert_media(tmp_path / "a.jpg", 1, 1, "hash-a", None)
        catalog.add_caption(media_id, "first", "user")
        written = []
        for i in range(5):
            catalog.add_caption(media_id, f"caption {i}", "user")
            written.append(catalog.snapshot_annotations())
    kept = snapshots.snapshots(snapshots.folder_of(tmp_path / "catalog.sqlite"))
    assert kept == written[-3:]
    assert [c["text"] for c in snapshots.read(kept[-1])["items"][0]["captions"]] == [
        "first", "caption 0", "caption 1", "caption 2", "caption 3", "caption 4"]


def test_a_snapshot_that_cannot_be_written_stops_the_purge(tmp_path, monkeypatch):
    with Catalog(tmp_path / "catalog.sqlite") as catalog:
        media_id, _ = catalog.upsert_media(tmp_path / "a.jpg", 1, 1, "hash-a", None)
        catalog.add_caption(media_id, "keep me", "user")
        catalog.mark_missing([tmp_path / "a.jpg"])

        def full(*_args, **_kwargs):
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(snapshots, "atomic_write_text", full)
        with pytest.raises(Exception, match="nothing was deleted"):
            catalog.purge_missing()
        assert catalog.missing_summary() == (1, 1, 0)
        assert [c.text for c in catalog.iter_captions()] == ["keep me"]
        assert catalog.integrity_ok()


def test_catalog_v2_upgrades_to_v3_keeping_its_annotations(tmp_path):
    import sqlite3

    from engine.library.catalog import schema as catalog_schema

    path = tmp_path / "old.sqlite"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    for migration in catalog_schema.MIGRATIONS[:2]:
        migration(conn)
    conn.execute("INSERT INTO meta VALUES ('schema_version', '2')")
    conn.execute("INSERT INTO roots (path, added_at) VALUES ('/lib', 0)")
    conn.execute("INSERT INTO media (root_id, path, size, mtime_ns, content_hash, status) "
                 "VALUES (1, '/lib/a.jpg', 1, 1, 'h', 'ok')")
    conn.execute("INSERT INTO captions (media_id, text, source, created_at, updated_at) VALUES (1, 'x', 'user', 0, 0)")
    conn.close()
    with Catalog(path) as catalog:
        assert catalog.schema_version == catalog_schema.LATEST_SCHEMA_VERSION  # v3, then v4 (browse indexes)
        assert catalog.root_device(1) is None  # not known until the folder is next seen online
        assert catalog.add_root(Path("/lib"), device=77) == 1 and catalog.root_device(1) == 77
        assert [c.text for c in catalog.iter_captions()] == ["x"]
