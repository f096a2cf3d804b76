"""Date taken and camera (issue #32): read from EXIF once, when a file is indexed, stored in the catalog (schema v5),
listed by date taken (the file's mtime standing in), and shown as the item's details without decoding it again."""

from __future__ import annotations

import os
import sqlite3
from contextlib import closing
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from PIL import Image

from engine.library.browse import browse
from engine.library.catalog import Catalog
from engine.library.catalog import schema as catalog_schema
from engine.media import probe, read_capture
from engine.media.exif import DATETIME_ORIGINAL, EXIF_IFD, MAKE, MODEL, parse_exif_date
from engine.progress import CancelToken
from engine.types import CaptureInfo, MediaKind
from engine.workspace import Workspace
from tests import mediagen as mg


def test_a_jpeg_says_when_and_with_what_it_was_taken(tmp_path: Path) -> None:
    path = mg.make_jpeg_with_exif(tmp_path / "p.jpg")
    capture = probe(path).capture
    assert capture == read_capture(path)
    assert capture.taken_at == "2014-06-21T18:05:09+02:00"
    want = datetime(2014, 6, 21, 18, 5, 9, tzinfo=timezone(timedelta(hours=2)))
    assert capture.taken_ns == int(want.timestamp()) * 10**9
    assert (capture.camera_make, capture.camera_model) == ("Canon", "Canon EOS 5D Mark III")
    assert capture.camera == "Canon EOS 5D Mark III"  # the model already names its maker


def test_without_an_offset_the_date_is_local_time_and_the_camera_joins_make_and_model(tmp_path: Path) -> None:
    capture = read_capture(mg.make_jpeg_with_exif(tmp_path / "p.jpg", offset=None, make="NIKON CORPORATION",
                                           model="COOLPIX P7000"))
    assert capture.taken_at == "2014-06-21T18:05:09"
    assert capture.taken_ns == int(datetime(2014, 6, 21, 18, 5, 9).timestamp()) * 10**9
    assert capture.camera == "NIKON CORPORATION COOLPIX P7000"


@pytest.mark.parametrize("value", ["0000:00:00 00:00:00", "    :  :     :  :  ", "", "2014:13:40 10:00:00", None])
def test_an_unknown_or_impossible_date_is_no_date(value: str | None) -> None:
    assert parse_exif_date(value) is None


def test_no_exif_tells_nothing_and_the_last_edit_date_stands_in_for_a_missing_original(tmp_path: Path) -> None:
    assert read_capture(mg.make_jpeg(tmp_path / "plain.jpg")) == CaptureInfo()
    assert read_capture(mg.make_png(tmp_path / "plain.png")) == CaptureInfo()
    edited = read_capture(mg.make_jpeg_with_exif(tmp_path / "e.jpg", taken=None, offset=None, make=None, model=None))
    assert edited.taken_at == "2020-01-01T00:00:00" and edited.camera is None


def test_a_broken_file_tells_nothing_and_raises_nothing(tmp_path: Path) -> None:
    broken = tmp_path / "cut.jpg"
    broken.write_bytes(b"\xff\xd8\xff\xe0 not really")
    assert read_capture(broken) == CaptureInfo()


def test_a_heic_says_when_it_was_taken(tmp_path: Path) -> None:
    pytest.importorskip("pillow_heif")
    from pillow_heif import register_heif_opener

    register_heif_opener()
    exif = Image.Exif()
    exif[MODEL] = "iPhone 12"
    exif[MAKE] = "Apple"
    exif.get_ifd(EXIF_IFD)[DATETIME_ORIGINAL] = "2021:08:01 09:10:11"
    path = tmp_path / "phone.heic"
    Image.new("RGB", (64, 48), (20, 90, 200)).save(path, "HEIF", exif=exif.tobytes(), quality=90)
    capture = probe(path).capture
    assert capture.taken_at == "2021-08-01T09:10:11" and capture.camera == "Apple iPhone 12"


# --- the catalog: stored at indexing, sorted by, upgraded


def _set_mtime(path: Path, when: datetime) -> None:
    os.utime(path, (when.timestamp(), when.timestamp()))


@pytest.fixture
def service(assets_dir: Path):
    with closing(Workspace.open("capture", assets_dir)) as svc:
        yield svc


def test_indexing_stores_the_date_taken_and_browsing_sorts_by_it(service: Workspace, tmp_path: Path) -> None:
    folder = tmp_path / "photos"
    folder.mkdir()
    # modified in the order a, b, c; taken: a in 2014, c (no EXIF: its mtime, 2019) and b in 2022
    a = mg.make_jpeg_with_exif(folder / "a.jpg", taken="2014:06:21 18:05:09", colour=(200, 0, 0))
    b = mg.make_jpeg_with_exif(folder / "b.jpg", taken="2022:03:04 05:06:07", colour=(0, 200, 0))
    c = mg.make_jpeg(folder / "c.jpg", color=(0, 0, 200))
    _set_mtime(a, datetime(2023, 1, 1))
    _set_mtime(c, datetime(2019, 1, 1))
    _set_mtime(b, datetime(2018, 1, 1))
    list(service.library.index([folder]))

    def names(sort: str) -> list[str]:
        return [Path(h.path).stem for h in service.library.browse(sort=sort)]

    # issue #44: newest first is by date taken (the README says so), not by the files' dates
    assert names("newest") == ["b", "c", "a"]
    assert names("oldest") == ["a", "c", "b"]
    assert names("modified") == ["a", "c", "b"]  # by file date
    assert names("modified-oldest") == ["b", "c", "a"]
    media = service.state.catalog.media_by_path(a)
    details = service.library.details(media.id)
    assert details.path == a and details.kind is MediaKind.IMAGE and details.size_bytes == a.stat().st_size
    assert (details.width, details.height) == (48, 32) and details.format == "jpeg"
    assert details.capture.taken_at == "2014-06-21T18:05:09+02:00" and details.capture.camera == "Canon EOS 5D Mark III"
    assert service.library.details(service.state.catalog.media_by_path(c).id).capture == CaptureInfo()


def test_the_details_are_read_from_the_catalog_not_the_file(service: Workspace, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "photos"
    folder.mkdir()
    path = mg.make_jpeg_with_exif(folder / "a.jpg")
    list(service.library.index([folder]))
    media_id = service.state.catalog.media_by_path(path).id

    def no_decoding(*_args, **_kwargs):
        raise AssertionError("the details decoded the file")

    monkeypatch.setattr("engine.media.exif.capture_info", no_decoding)
    monkeypatch.setattr("engine.media.exif.read_capture", no_decoding)
    assert service.library.details(media_id).capture.camera == "Canon EOS 5D Mark III"


def _v4_catalog(path: Path, photo: Path) -> None:
    """A catalog as schema v4 left it: one indexed photo, the user's caption and an accepted and rejected pair."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    for migration in catalog_schema.MIGRATIONS[:4]:
        migration(conn)
    conn.execute("INSERT INTO meta VALUES ('schema_version', '4')")
    conn.execute("INSERT INTO roots (path, added_at) VALUES (?, 0)", (str(photo.parent),))
    st = photo.stat()
    conn.execute("INSERT INTO media (root_id, path, name_key, size, mtime_ns, content_hash, kind, format, width, "
                 "height, n_frames, status, indexed_at) VALUES (1, ?, 'a.jpg', ?, ?, 'h', 'image', 'jpeg', 48, 32, "
                 "1, 'ok', 1)", (str(photo), st.st_size, st.st_mtime_ns))
    conn.execute("INSERT INTO captions (media_id, text, source, created_at, updated_at) "
                 "VALUES (1, 'my sister at the lake', 'user', 0, 0)")
    conn.execute("INSERT INTO pairs (media_id, query, label, source, created_at) VALUES (1, 'lake', 1, 'user', 0)")
    conn.execute("INSERT INTO pairs (media_id, query, label, source, created_at) VALUES (1, 'sea', -1, 'user', 0)")
    conn.close()


def test_a_v4_catalog_upgrades_keeping_its_annotations_and_the_next_scan_reads_the_dates(tmp_path: Path) -> None:
    from engine.library.indexer import Indexer

    (tmp_path / "lib").mkdir()
    photo = mg.make_jpeg_with_exif(tmp_path / "lib" / "a.jpg")
    path = tmp_path / "catalog.sqlite"
    _v4_catalog(path, photo)
    with Catalog(path) as catalog:
        assert catalog.schema_version == catalog_schema.LATEST_SCHEMA_VERSION >= 5
        assert [(c.text, c.source) for c in catalog.iter_captions()] == [("my sister at the lake", "user")]
        assert sorted((p.query, p.label) for p in catalog.pairs()) == [("lake", 1), ("sea", -1)]
        assert catalog.capture(1) == CaptureInfo()  # a migration never opens media files
        assert [m.id for m in catalog.media_without_capture()] == [1]
        assert [h.media_id for h in browse(catalog, sort="newest")] == [1]  # listed by its mtime meanwhile
        indexer = Indexer(catalog, features=None, extractor=lambda: None)  # type: ignore[arg-type]
        list(indexer._read_captures(CancelToken()))
        assert catalog.capture(1).camera == "Canon EOS 5D Mark III" and not catalog.media_without_capture()
        assert [c.text for c in catalog.iter_captions()] == ["my sister at the lake"]
        assert len(catalog.pairs()) == 2
        version = catalog.version()
        list(indexer._read_captures(CancelToken()))
        assert catalog.version() == version  # read once: a second scan writes nothing


@pytest.mark.parametrize(("order", "index"), [("newest", "media_browse_by_taken"), ("oldest", "media_browse_by_taken"),
                                              ("modified", "media_browse_by_time"),
                                              ("modified-oldest", "media_browse_by_time")])
def test_a_page_by_date_is_read_from_its_index_not_sorted(tmp_path: Path, order: str, index: str) -> None:
    """At 100,000 items a sort of every row per page would cost what the v4 browse indexes saved."""
    with Catalog(tmp_path / "catalog.sqlite") as catalog:
        seen: list[tuple[str, tuple]] = []
        catalog._read = _spy(catalog._read, seen)  # type: ignore[method-assign]
        catalog.browse_media(0, 60, order)
        sql, params = seen[-1]
        plan = " ".join(str(row[-1]) for row in Catalog._read(catalog, "plan", f"EXPLAIN QUERY PLAN {sql}", params))
    assert index in plan and "TEMP B-TREE" not in plan


def _spy(read, seen: list[tuple[str, tuple]]):
    """``read``, recording each statement it runs."""

    def spying(what: str, sql: str, params: tuple = ()):
        seen.append((sql, params))
        return read(what, sql, params)

    return spying
