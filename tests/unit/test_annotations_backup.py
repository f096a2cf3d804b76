"""An annotation export is a complete backup (issue #31): captions with their provenance, accepted and rejected
pairs with their queries, in both formats; importing it into a fresh library of the same photos restores exactly
what was there, importing again adds nothing, and files the target lacks are reported, not fatal."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from engine.files import content_hash
from engine.library.captionfolder import (
    CaptionFolderError,
    load_caption_folder,
    read_annotation_tables,
    write_caption_folder,
)
from engine.library.catalog import Catalog
from engine.library.importers import read_coco_captions
from engine.loop.annotations import export_annotations, import_annotations
from engine.types import CaptionSource, MediaKind

FORMATS = ["folder", "coco"]


def index_folder(root: Path, db: Path) -> Catalog:
    """A catalog of every file under ``root`` (nothing here decodes them), each with the machine's caption."""
    catalog = Catalog(db)
    root_id = catalog.add_root(root)
    for path in sorted(p for p in root.rglob("*.jpg")):
        st = path.stat()
        media_id, _ = catalog.upsert_media(path, st.st_size, st.st_mtime_ns, content_hash(path), root_id)
        catalog.set_media_ok(media_id, MediaKind.IMAGE, "jpeg", 8, 8, 1, None, "test-backbone")
        catalog.set_pseudo_caption(media_id, f"a machine caption of {path.stem}")
    return catalog


def make_photos(root: Path, n: int) -> Path:
    for i in range(n):
        path = root / ("trip" if i % 2 else "home") / f"IMG_{i:03d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(f"picture number {i}".encode())
    return root


def state(catalog: Catalog, only: set[str] | None = None) -> dict[str, list[tuple]]:
    """Per file (relative to the library folder): every caption as (text, provenance) and every pair as
    (query, label, provenance), sorted; items with nothing but a machine caption are left out."""
    root = catalog.roots()[0]
    out: dict[str, list[tuple]] = {}
    by_id = {m.id: m.path.relative_to(root).as_posix() for m in catalog.iter_media()}
    for c in catalog.iter_captions():
        out.setdefault(by_id[c.media_id], []).append(("caption", c.text, str(c.source)))
    for p in catalog.pairs():
        out.setdefault(by_id[p.media_id], []).append(("pair", p.query, p.label, str(p.source)))
    return {key: sorted(rows) for key, rows in sorted(out.items())
            if any(r[0] == "pair" or r[-1] != "pseudo" for r in rows) and (only is None or key in only)}


def annotate_every_kind(catalog: Catalog) -> None:
    ids = {m.path.name: m.id for m in catalog.iter_media()}
    catalog.add_caption(ids["IMG_000.jpg"], "a cat on a sofa", CaptionSource.USER)
    catalog.add_caption(ids["IMG_000.jpg"], "my cat", CaptionSource.IMPORTED)
    catalog.set_pseudo_caption(ids["IMG_000.jpg"], "the model's own guess")  # differs from a fresh index's
    catalog.add_caption(ids["IMG_003.jpg"], "a beach at dusk", CaptionSource.USER)
    catalog.add_caption(ids["IMG_003.jpg"], "sunset", CaptionSource.USER)  # also an accepted query: both stay
    catalog.add_pair(ids["IMG_003.jpg"], "sunset", 1, CaptionSource.USER)
    catalog.add_pair(ids["IMG_004.jpg"], "not this", -1, CaptionSource.USER)  # a rejected pair alone
    catalog.add_pair(ids["IMG_005.jpg"], "a dog", 1, CaptionSource.USER)  # an accepted pair alone
    catalog.add_pair(ids["IMG_005.jpg"], "a cat", -1, CaptionSource.USER)
    catalog.add_pair(ids["IMG_006.jpg"], "imported query", 1, CaptionSource.IMPORTED)
    catalog.add_pair(ids["IMG_007.jpg"], "the machine's pair", -1, CaptionSource.PSEUDO)


def target(tmp_path: Path, photos: Path) -> Catalog:
    """A fresh library of the same photos, elsewhere on disk (a restored machine)."""
    return index_folder(shutil.copytree(photos, tmp_path / "restored" / photos.name), tmp_path / "fresh.sqlite")


def dest_of(tmp_path: Path, fmt: str) -> Path:
    return tmp_path / ("backup.json" if fmt == "coco" else "backup")


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_kind_comes_back_with_its_provenance_and_twice_adds_nothing(tmp_path, fmt):
    source = index_folder(make_photos(tmp_path / "Photos", 12), tmp_path / "a.sqlite")
    annotate_every_kind(source)
    wrote = export_annotations(source, dest_of(tmp_path, fmt), fmt)
    assert (int(wrote), wrote.accepted, wrote.rejected, wrote.machine, wrote.skipped) == (4, 3, 3, 6, ())

    fresh = target(tmp_path, tmp_path / "Photos")
    try:
        added = import_annotations(fresh, dest_of(tmp_path, fmt))
        assert (int(added), added.accepted, added.rejected, added.skipped) == (4, 3, 3, ())
        assert added.machine == 1  # the one machine caption that differed from the fresh index's
        expected = state(source)
        assert state(fresh) == expected
        assert any(row == ("caption", "the model's own guess", "pseudo") for row in state(fresh)["home/IMG_000.jpg"])
        again = import_annotations(fresh, dest_of(tmp_path, fmt))
        assert (int(again), again.accepted, again.rejected, again.machine) == (0, 0, 0, 0)
        assert state(fresh) == expected
    finally:
        fresh.close()
        source.close()


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_issue_scenario_100_captions_5_accepted_5_rejected_come_back_identical(tmp_path, fmt):
    """#31: 100 captions + 5 accepted + 5 rejected, exported, imported into a fresh library of the same photos
    (today: 105 captions, 0 accepted, 0 rejected)."""
    source = index_folder(make_photos(tmp_path / "Photos", 60), tmp_path / "a.sqlite")
    media = list(source.iter_media())
    for record in media[:50]:
        source.add_caption(record.id, f"first caption of {record.path.stem}", CaptionSource.USER)
        source.add_caption(record.id, f"second caption of {record.path.stem}", CaptionSource.USER)
    for record in media[45:50]:
        source.add_pair(record.id, f"accepted for {record.path.stem}", 1, CaptionSource.USER)
    for record in media[50:55]:
        source.add_pair(record.id, f"rejected for {record.path.stem}", -1, CaptionSource.USER)
    export_annotations(source, dest_of(tmp_path, fmt), fmt)

    fresh = target(tmp_path, tmp_path / "Photos")
    try:
        import_annotations(fresh, dest_of(tmp_path, fmt))
        user_captions = list(fresh.iter_captions(CaptionSource.USER))
        assert len(user_captions) == 100 and not list(fresh.iter_captions(CaptionSource.IMPORTED))
        assert sorted(p.label for p in fresh.pairs()) == [-1] * 5 + [1] * 5
        assert state(fresh) == state(source)
    finally:
        fresh.close()
        source.close()


@pytest.mark.parametrize("fmt", FORMATS)
def test_files_the_target_library_lacks_are_reported_and_the_rest_restored(tmp_path, fmt):
    source = index_folder(make_photos(tmp_path / "Photos", 12), tmp_path / "a.sqlite")
    annotate_every_kind(source)
    export_annotations(source, dest_of(tmp_path, fmt), fmt)
    restored = shutil.copytree(tmp_path / "Photos", tmp_path / "restored" / "Photos")
    for name in ("home/IMG_004.jpg", "trip/IMG_005.jpg"):  # lost with the old disk
        (restored / name).unlink()
    fresh = index_folder(restored, tmp_path / "fresh.sqlite")
    try:
        added = import_annotations(fresh, dest_of(tmp_path, fmt))
        assert sorted(added.skipped) == ["home/IMG_004.jpg", "trip/IMG_005.jpg"]
        assert (int(added), added.accepted, added.rejected) == (4, 2, 1)
        kept = set(state(source)) - {"home/IMG_004.jpg", "trip/IMG_005.jpg"}
        assert state(fresh) == state(source, kept) != {}
    finally:
        fresh.close()
        source.close()


def _folder_backup(tmp_path: Path) -> Path:
    """A library of 12 photos with every kind of annotation, exported as a caption folder (the library closed)."""
    source = index_folder(make_photos(tmp_path / "Photos", 12), tmp_path / "a.sqlite")
    annotate_every_kind(source)
    export_annotations(source, tmp_path / "backup", "folder")
    source.close()
    return tmp_path / "backup"


def test_a_folder_backup_stays_a_caption_folder_other_readers_take(tmp_path):
    _folder_backup(tmp_path)
    folder = load_caption_folder(tmp_path / "backup")  # the dataset reader every part (and the trainer) uses
    assert folder.warnings == []
    # captions.tsv: the user's and imported captions only; no machine guess, no query
    assert sorted(t for _, t in folder.captions) == [
        "a beach at dusk", "a cat on a sofa", "my cat", "sunset"]
    tables = read_annotation_tables(tmp_path / "backup")
    assert ("home/IMG_000.jpg", "caption", "the model's own guess", "pseudo") in [
        (a.file, a.kind, a.text, str(a.source)) for a in tables]
    pairs = (tmp_path / "backup" / "pairs.tsv").read_text().splitlines()
    assert pairs[0] == "file\tquery\tverdict\tsource"
    assert "home/IMG_004.jpg\tnot this\treject\tuser" in pairs and "trip/IMG_003.jpg\tsunset\taccept\tuser" in pairs


def test_a_coco_backup_keeps_the_standard_keys_valid(tmp_path):
    source = index_folder(make_photos(tmp_path / "Photos", 12), tmp_path / "a.sqlite")
    annotate_every_kind(source)
    export_annotations(source, tmp_path / "backup.json", "coco")
    source.close()
    data = json.loads((tmp_path / "backup.json").read_text())
    assert data["info"]["format"] == "polyseek-annotations"
    ids = {image["id"] for image in data["images"]}
    assert all({"id", "file_name", "content_hash"} <= set(image) for image in data["images"])
    assert all(a["image_id"] in ids and isinstance(a["caption"], str) for a in data["annotations"])
    assert {(a["kind"], a["source"]) for a in data["annotations"]} == {("caption", "user"), ("caption", "imported")}
    assert {a["source"] for a in data["machine_captions"]} == {"pseudo"}
    assert {(p["kind"], p["source"]) for p in data["pairs"]} == {
        ("accept", "user"), ("reject", "user"), ("accept", "imported"), ("reject", "pseudo")}
    grouped, warnings = read_coco_captions(tmp_path / "backup.json")  # a plain COCO reader sees the captions
    assert warnings == [] and sorted(t for texts in grouped.values() for t in texts) == [
        "a beach at dusk", "a cat on a sofa", "my cat", "sunset"]


def test_third_party_captions_come_in_as_imported(tmp_path):
    photos = make_photos(tmp_path / "Photos", 6)
    catalog = index_folder(photos, tmp_path / "a.sqlite")
    try:
        write_caption_folder(tmp_path / "theirs", [photos / "home/IMG_000.jpg", photos / "trip/IMG_001.jpg"],
                             [(0, "a red thing"), (1, "a blue thing"), (1, "a blue thing")], copy_media=True)
        added = import_annotations(catalog, tmp_path / "theirs")
        assert (int(added), added.accepted, added.rejected) == (2, 0, 0)
        coco = {"images": [{"id": 7, "file_name": "IMG_002.jpg"}], "annotations": [{"image_id": 7, "caption": "x"}]}
        (tmp_path / "theirs.json").write_text(json.dumps(coco))
        assert import_annotations(catalog, tmp_path / "theirs.json") == 1
        assert {(row[1], row[2]) for rows in state(catalog).values() for row in rows if row[2] != "pseudo"} == {
            ("a red thing", "imported"), ("a blue thing", "imported"), ("x", "imported")}
    finally:
        catalog.close()


def test_a_hand_added_row_of_a_backup_folder_comes_in_as_imported_and_bad_tables_are_named(tmp_path):
    _folder_backup(tmp_path)
    with (tmp_path / "backup" / "captions.tsv").open("a") as f:
        f.write("trip/IMG_003.jpg\twritten by hand\n")
    fresh = target(tmp_path, tmp_path / "Photos")
    try:
        import_annotations(fresh, tmp_path / "backup")
        assert ("caption", "written by hand", "imported") in state(fresh)["trip/IMG_003.jpg"]
        header = "file\tquery\tverdict\tsource\n"
        (tmp_path / "backup" / "pairs.tsv").write_text(header + "home/IMG_000.jpg\tq\tmaybe\tuser\n")
        with pytest.raises(ValueError, match=r"pairs.tsv:2: verdict 'maybe'"):
            import_annotations(fresh, tmp_path / "backup")
        (tmp_path / "backup" / "pairs.tsv").write_text(header + "home/IMG_000.jpg\tq\taccept\tsomeone\n")
        with pytest.raises(CaptionFolderError, match="provenance 'someone'"):
            read_annotation_tables(tmp_path / "backup")
    finally:
        fresh.close()
