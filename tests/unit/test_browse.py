"""Browsing the library without a query: sort, filters, annotation states and progress (issue #20)."""

from __future__ import annotations

import re
from pathlib import Path

from engine.library.browse import annotation_progress, annotation_states, browse, browse_count
from engine.library.catalog import Catalog
from engine.types import CaptionSource, CaptureInfo, MediaKind


def _catalog(tmp_path: Path) -> tuple[Catalog, dict[str, int]]:
    catalog = Catalog(tmp_path / "catalog.sqlite")
    ids = {}
    rows = [("a/zebra.jpg", 3, MediaKind.IMAGE), ("a/apple.gif", 1, MediaKind.ANIMATION),
            ("b/mango.mp4", 2, MediaKind.VIDEO), ("b/kiwi.jpg", 4, MediaKind.IMAGE)]
    for n, (name, mtime, kind) in enumerate(rows):
        path = tmp_path / name
        media_id, _ = catalog.upsert_media(path, 10 + n, mtime, f"hash{n}", None)
        catalog.set_media_ok(media_id, kind, "x", 8, 8, 1, None, "bb")
        ids[path.stem] = media_id
    failed, _ = catalog.upsert_media(tmp_path / "a/broken.jpg", 1, 9, "hashx", None)
    catalog.set_media_failed(failed, "cannot decode")
    return catalog, ids


def names(hits) -> list[str]:
    return [Path(h.path).stem for h in hits]


def test_browse_sorts_pages_and_filters(tmp_path: Path) -> None:
    catalog, ids = _catalog(tmp_path)
    assert names(browse(catalog)) == ["kiwi", "zebra", "mango", "apple"]  # newest first; the failed file is out
    assert names(browse(catalog, sort="oldest", offset=1, top=2)) == ["mango", "zebra"]
    assert names(browse(catalog, sort="name")) == ["apple", "kiwi", "mango", "zebra"]
    assert names(browse(catalog, folder=tmp_path / "b")) == ["kiwi", "mango"]
    assert names(browse(catalog, kind="animation")) == ["apple"]
    catalog.add_caption(ids["mango"], "a mango", CaptionSource.USER)
    catalog.add_caption(ids["kiwi"], "a guess", CaptionSource.PSEUDO)  # the model's guess is not a caption
    catalog.add_pair(ids["zebra"], "stripes", -1, CaptionSource.USER)
    assert names(browse(catalog, annotation="captioned")) == ["mango"]
    assert names(browse(catalog, annotation="uncaptioned")) == ["kiwi", "zebra", "apple"]
    assert names(browse(catalog, annotation="judged")) == ["zebra"]
    assert browse(catalog, annotation="captioned")[0].captions == ("a mango",)


def test_browse_count_counts_every_page_of_the_same_listing(tmp_path: Path) -> None:
    catalog, ids = _catalog(tmp_path)
    catalog.add_caption(ids["mango"], "a mango", CaptionSource.USER)
    assert browse_count(catalog) == 4  # the failed file is not listed, so not counted
    assert browse_count(catalog, folder=tmp_path / "b") == 2
    assert browse_count(catalog, kind="animation") == 1
    assert browse_count(catalog, annotation="captioned") == 1
    assert browse_count(catalog, annotation="uncaptioned") == 3


def test_annotation_states_and_progress(tmp_path: Path) -> None:
    catalog, ids = _catalog(tmp_path)
    catalog.add_caption(ids["mango"], "a mango", CaptionSource.USER)
    catalog.add_caption(ids["apple"], "imported", CaptionSource.IMPORTED)
    catalog.add_caption(ids["kiwi"], "a guess", CaptionSource.PSEUDO)
    catalog.add_pair(ids["zebra"], "Stripes", +1, CaptionSource.USER)
    catalog.add_pair(ids["zebra"], "stripes ", -1, CaptionSource.USER)  # the latest verdict wins
    catalog.add_pair(ids["zebra"], "a horse", +1, CaptionSource.USER)
    states = annotation_states(catalog, ids.values(), "stripes")
    assert states[ids["zebra"]].judgement == -1 and states[ids["zebra"]].judged
    # which queries it was judged for: each one's latest verdict, the most recent first
    assert states[ids["zebra"]].verdicts == (("a horse", 1), ("stripes", -1))
    assert states[ids["mango"]].verdicts == ()
    assert states[ids["mango"]].captioned and states[ids["apple"]].captioned
    assert not states[ids["kiwi"]].captioned and states[ids["kiwi"]].sources == {"pseudo"}
    assert annotation_states(catalog, [ids["zebra"]], "other")[ids["zebra"]].judgement == 0
    progress = annotation_progress(catalog)
    assert (progress.captioned, progress.total) == (2, 4)


def _natural(name: str) -> str:
    """A reference natural-sort key, written another way than the catalog's: each number zero-padded to 20 digits."""
    return re.sub(r"[0-9]+", lambda digits: f"{int(digits.group()):020d}", name.casefold())


def _reference(catalog: Catalog, sort: str, folder: Path | None, kind: str | None, annotation: str) -> list[int]:
    """The whole catalog read and sorted in Python: what a page must be a slice of."""
    from engine.library.catalog import MediaStatus

    items = [m for m in catalog.iter_media(MediaStatus.OK) if (kind is None or m.kind == kind)
             and (folder is None or m.path == folder or folder in m.path.parents)]
    human = {c.media_id for c in catalog.iter_captions() if c.source != CaptionSource.PSEUDO}
    judged = {p.media_id for p in catalog.pairs()}
    keep = {"all": lambda m: True, "captioned": lambda m: m.id in human,
            "uncaptioned": lambda m: m.id not in human, "judged": lambda m: m.id in judged}[annotation]
    items = [m for m in items if keep(m)]
    if sort == "name":
        items.sort(key=lambda m: (_natural(m.path.name), str(m.path)))
    elif sort in ("newest", "oldest"):  # the date taken, the file's date where a photo has none
        taken = {m.id: catalog.capture(m.id).taken_ns for m in items}
        items.sort(key=lambda m: (taken[m.id] or m.mtime_ns, m.id), reverse=sort == "newest")
    else:
        items.sort(key=lambda m: (m.mtime_ns, m.id), reverse=sort == "modified")
    return [m.id for m in items]


def test_pages_read_in_sql_are_slices_of_the_whole_library_sorted_and_filtered(tmp_path: Path) -> None:
    import random

    rng = random.Random(3)
    catalog = Catalog(tmp_path / "catalog.sqlite")
    folders = [tmp_path / "a", tmp_path / "ab", tmp_path / "a" / "deep", tmp_path / "b"]  # "ab" is not under "a"
    kinds = [MediaKind.IMAGE, MediaKind.ANIMATION, MediaKind.VIDEO]
    for n in range(240):
        name = rng.choice(["IMG", "img", "Beach", "zoo", "Ärger"]) + f"_{rng.randint(0, 40)}_{n}.jpg"
        media_id, _ = catalog.upsert_media(rng.choice(folders) / name, n, rng.randint(1, 30), f"h{n}", None)
        if n % 11 == 0:
            catalog.set_media_failed(media_id, "broken")
            continue
        catalog.set_media_ok(media_id, rng.choice(kinds), "x", 8, 8, 1, None, "bb")
        if n % 3:  # a date taken, before or after the file's own date; every third photo has none
            catalog.set_capture(media_id, CaptureInfo("x", rng.randint(1, 30)))
        catalog.set_pseudo_caption(media_id, "a guess")
        if n % 5 == 0:
            catalog.add_caption(media_id, "mine", rng.choice([CaptionSource.USER, CaptionSource.IMPORTED]))
        if n % 7 == 0:
            catalog.add_pair(media_id, "q", rng.choice([1, -1]), CaptionSource.USER)
    for sort in ("newest", "oldest", "modified", "modified-oldest", "name"):
        for folder in (None, tmp_path / "a", tmp_path / "ab"):
            for kind in (None, "video"):
                for annotation in ("all", "captioned", "uncaptioned", "judged"):
                    want = _reference(catalog, sort, folder, kind, annotation)
                    got = [h.media_id for offset in range(0, len(want) + 25, 25)
                           for h in browse(catalog, offset, 25, sort, folder, kind, annotation)]
                    assert got == want, (sort, folder, kind, annotation)
    assert len(_reference(catalog, "name", tmp_path / "a", None, "all")) > 0


def test_a_v3_catalog_gets_its_file_names_for_sorting_when_it_is_opened(tmp_path: Path) -> None:
    import sqlite3

    catalog, _ = _catalog(tmp_path)
    catalog.close()
    conn = sqlite3.connect(tmp_path / "catalog.sqlite")
    for index in ("media_browse_by_time", "media_browse_by_name", "captions_by_source", "media_browse_by_taken"):
        conn.execute(f"DROP INDEX {index}")
    for column in ("name_key", "taken_at", "taken_ns", "camera_make", "camera_model", "capture_read"):  # v4, v5
        conn.execute(f"ALTER TABLE media DROP COLUMN {column}")
    conn.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    with Catalog(tmp_path / "catalog.sqlite") as upgraded:
        assert names(browse(upgraded, sort="name")) == ["apple", "kiwi", "mango", "zebra"]
        media_id, _ = upgraded.upsert_media(tmp_path / "c" / "Banana.jpg", 99, 5, "hash-b", None)
        upgraded.set_media_ok(media_id, MediaKind.IMAGE, "x", 8, 8, 1, None, "bb")
        assert names(browse(upgraded, sort="name")) == ["apple", "Banana", "kiwi", "mango", "zebra"]


def test_a_file_name_that_is_not_utf8_is_listed_and_sorted_by_name(tmp_path: Path) -> None:
    import os

    catalog, _ = _catalog(tmp_path)
    odd = Path(os.fsdecode(os.fsencode(str(tmp_path / "a")) + b"/caf\xe9.jpg"))
    media_id, _ = catalog.upsert_media(odd, 7, 8, "hash-odd", None)
    catalog.set_media_ok(media_id, MediaKind.IMAGE, "x", 8, 8, 1, None, "bb")
    assert names(browse(catalog, sort="name")) == ["apple", "caf\udce9", "kiwi", "mango", "zebra"]
    assert media_id in {h.media_id for h in browse(catalog, folder=tmp_path / "a")}


def _named(tmp_path: Path, names: list[str]) -> Catalog:
    catalog = Catalog(tmp_path / "catalog.sqlite")
    for n, name in enumerate(names):
        media_id, _ = catalog.upsert_media(tmp_path / "clips" / name, 10 + n, n, f"hash{n}", None)
        catalog.set_media_ok(media_id, MediaKind.VIDEO, "x", 8, 8, 1, None, "bb")
    return catalog


NATURAL_ORDER = ["IMG_9.jpg", "img_10.jpg", "video2.mp4", "Video114.mp4", "video1130.mp4", "video11300.mp4"]


def test_by_name_compares_the_numbers_in_names_as_numbers(tmp_path: Path) -> None:
    """Issue #44 (#20): "video1130" came before "video114" (the names compared digit by digit)."""
    catalog = _named(tmp_path, ["video1130.mp4", "img_10.jpg", "video11300.mp4", "Video114.mp4", "IMG_9.jpg",
                                "video2.mp4"])
    assert [Path(h.path).name for h in browse(catalog, sort="name")] == NATURAL_ORDER
    pages = [Path(h.path).name for offset in range(0, 6, 4) for h in browse(catalog, offset, 4, "name")]
    assert pages == NATURAL_ORDER  # the order holds across pages (read in SQL, from the name index)
    plan = catalog._live().execute(
        "EXPLAIN QUERY PLAN SELECT id FROM media WHERE status = 'ok' ORDER BY name_key, path, id LIMIT 4").fetchall()
    assert "media_browse_by_name" in str(plan) and "TEMP B-TREE" not in str(plan)


def test_a_v5_catalog_sorts_its_names_naturally_once_opened(tmp_path: Path) -> None:
    import sqlite3

    _named(tmp_path, ["video1130.mp4", "video114.mp4", "video2.mp4"]).close()
    conn = sqlite3.connect(tmp_path / "catalog.sqlite")
    conn.execute("UPDATE media SET name_key = lower(substr(path, length(rtrim(path, replace(path, '/', ''))) + 1))")
    conn.execute("UPDATE meta SET value = '5' WHERE key = 'schema_version'")  # as v5 wrote its names
    conn.commit()
    conn.close()
    with Catalog(tmp_path / "catalog.sqlite") as upgraded:
        assert [Path(h.path).name for h in browse(upgraded, sort="name")] == ["video2.mp4", "video114.mp4",
                                                                             "video1130.mp4"]
