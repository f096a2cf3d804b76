"""Browsing the library without a query: sort, filters, annotation states and progress (issue #20)."""

from __future__ import annotations

from pathlib import Path

from engine.library.browse import annotation_progress, annotation_states, browse
from engine.library.catalog import Catalog
from engine.types import CaptionSource, MediaKind


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


def test_annotation_states_and_progress(tmp_path: Path) -> None:
    catalog, ids = _catalog(tmp_path)
    catalog.add_caption(ids["mango"], "a mango", CaptionSource.USER)
    catalog.add_caption(ids["apple"], "imported", CaptionSource.IMPORTED)
    catalog.add_caption(ids["kiwi"], "a guess", CaptionSource.PSEUDO)
    catalog.add_pair(ids["zebra"], "Stripes", +1, CaptionSource.USER)
    catalog.add_pair(ids["zebra"], "stripes ", -1, CaptionSource.USER)  # the latest verdict wins
    states = annotation_states(catalog, ids.values(), "stripes")
    assert states[ids["zebra"]].judgement == -1 and states[ids["zebra"]].judged
    assert states[ids["mango"]].captioned and states[ids["apple"]].captioned
    assert not states[ids["kiwi"]].captioned and states[ids["kiwi"]].sources == {"pseudo"}
    assert annotation_states(catalog, [ids["zebra"]], "other")[ids["zebra"]].judgement == 0
    progress = annotation_progress(catalog)
    assert (progress.captioned, progress.total) == (2, 4)
