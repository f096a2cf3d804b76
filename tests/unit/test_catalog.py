"""The catalog: schema and migrations, scanning (new/changed/moved/missing), annotations, models, vectors."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
from pathlib import Path

import numpy as np
import pytest

from engine.files import content_hash
from engine.library.catalog import (
    LATEST_SCHEMA_VERSION,
    Catalog,
    CatalogError,
    MediaStatus,
    NotFound,
)
from engine.library.catalog.schema import MIGRATIONS
from engine.library.indexer import Indexer
from engine.types import CaptionSource, MediaKind


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    with Catalog(tmp_path / "library" / "catalog.sqlite") as cat:
        yield cat


def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


class _Recorded:
    """What the real indexer's scan asked of the catalog: the plan it made and each file's upsert outcome."""

    def __init__(self, cat: Catalog) -> None:
        self.plans: list = []
        self.outcomes: dict[str, list[Path]] = {}
        self._plan_scan, self._upsert = cat.plan_scan, cat.upsert_media
        cat.plan_scan, cat.upsert_media = self.plan_scan, self.upsert_media  # type: ignore[method-assign]

    def plan_scan(self, *args, **kwargs):
        plan = self._plan_scan(*args, **kwargs)
        self.plans.append(plan)
        return plan

    def upsert_media(self, path: Path, *args, **kwargs):
        media_id, outcome = self._upsert(path, *args, **kwargs)
        self.outcomes.setdefault(outcome, []).append(path)
        return media_id, outcome


def _scan(cat: Catalog, folder: Path) -> _Recorded:
    """The real indexer's scan of ``folder`` (walk, plan, hash, record, mark missing; no feature extraction)."""
    recorded = _Recorded(cat)
    try:
        list(Indexer(cat, None, lambda: None).scan([folder]))  # type: ignore[arg-type]
    finally:
        del cat.plan_scan, cat.upsert_media  # the catalog's own methods again
    return recorded


def _apply(cat: Catalog, folder: Path) -> dict[str, list[Path]]:
    """The indexer's scan step (plan, mark missing, upsert new and changed files), then the user's purge of what
    stayed missing."""
    recorded = _scan(cat, folder)
    outcomes = recorded.outcomes
    outcomes["deleted"] = [m.path for m in cat.iter_media(MediaStatus.MISSING)]
    assert cat.purge_missing()[0] == len(outcomes["deleted"])
    outcomes["unchanged"] = [f.path for f in recorded.plans[0].unchanged]
    return outcomes


def _mark_ok(cat: Catalog, media_id: int) -> None:
    cat.set_media_ok(media_id, MediaKind.IMAGE, "jpeg", 64, 48, 1, None, "effnet-lite0")


# ------------------------------------------------------------------------------------------ schema


def test_new_catalog_has_latest_schema_and_durable_settings(catalog: Catalog) -> None:
    assert catalog.schema_version == LATEST_SCHEMA_VERSION
    conn = catalog._live()
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] > 0
    assert catalog.integrity_ok()


def _make_v1_catalog(path: Path) -> None:
    """A catalog as the first release wrote it, with rows that break rules v2 enforces."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    MIGRATIONS[0](conn)
    conn.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    conn.execute("INSERT INTO roots VALUES (1, '/photos', 1.0)")
    conn.execute(
        "INSERT INTO media (id, root_id, path, size, mtime_ns, content_hash, kind, status, indexed_at) "
        "VALUES (7, 1, '/photos/cat.jpg', 100, 5, 'abc', 'image', 'ok', 2.0)"
    )
    for caption_id, text, source in [
        (1, "a cat", "user"),
        (2, "old pseudo", "pseudo"),
        (3, "new pseudo", "pseudo"),
    ]:
        conn.execute("INSERT INTO captions VALUES (?, 7, ?, ?, 1.0, 1.0)", (caption_id, text, source))
    conn.execute("INSERT INTO pairs VALUES (1, 7, 'cat', 1, 'user', 1.0)")
    conn.execute("INSERT INTO models VALUES (1, 'first', 'vse', '/m/first', 1.0, '{\"rsum\": 200}', 1)")
    conn.execute("INSERT INTO models VALUES (2, 'second', 'pvse', '/m/second', 2.0, '{}', 1)")
    vector = np.arange(4, dtype="<f4")
    conn.execute("INSERT INTO embeddings VALUES (7, 1, 0, ?)", (vector.tobytes(),))
    conn.execute("INSERT INTO jobs VALUES (1, 'index', 'done', '{}', 3, 3, 'ok', 1.0, 2.0)")
    conn.close()


def test_v1_catalog_migrates_to_latest_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "catalog.sqlite"
    _make_v1_catalog(path)
    with Catalog(path) as cat:
        assert cat.schema_version == LATEST_SCHEMA_VERSION
        assert cat.roots() == [Path("/photos")]
        media = cat.media(7)
        assert (media.path, media.status, media.kind, media.features_backbone) == (
            Path("/photos/cat.jpg"),
            MediaStatus.OK,
            MediaKind.IMAGE,
            None,
        )
        # v2 allows one pseudo caption per item and one active model: the newest of each survives
        assert [(c.text, c.source) for c in cat.captions(7)] == [
            ("a cat", CaptionSource.USER),
            ("new pseudo", CaptionSource.PSEUDO),
        ]
        assert cat.active_model().name == "second"
        assert cat.model("first").metrics == {"rsum": 200}
        assert [p.query for p in cat.pairs(7)] == ["cat"]
        ids, vectors, extras = cat.get_embeddings(1)
        assert ids.tolist() == [7] and vectors.tolist() == [[[0.0, 1.0, 2.0, 3.0]]] and extras == {}
        assert cat.db.execute("SELECT state FROM jobs").fetchall() == [("done",)]  # v1's table, left as it was
        assert "embedding_extras" in cat.db.table_names()
        assert cat.integrity_ok()


def test_catalog_from_a_newer_app_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "catalog.sqlite"
    Catalog(path).close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    with pytest.raises(CatalogError, match="v99"):
        Catalog(path)


def test_a_file_that_is_not_a_catalog_raises_catalog_error(tmp_path: Path) -> None:
    path = _write(tmp_path / "catalog.sqlite", b"this is not sqlite" * 100)
    with pytest.raises(CatalogError, match="catalog.sqlite"):
        Catalog(path)


def test_closed_catalog_raises_catalog_error(tmp_path: Path) -> None:
    cat = Catalog(tmp_path / "c.sqlite")
    cat.close()
    with pytest.raises(CatalogError, match="closed"):
        cat.roots()


# ------------------------------------------------------------------------------------------ content hash


def test_content_hash_of_small_file_covers_every_byte(tmp_path: Path) -> None:
    data = os.urandom(5000)
    path = _write(tmp_path / "a.jpg", data)
    expected = hashlib.blake2b(len(data).to_bytes(8, "little") + data, digest_size=16).hexdigest()
    assert content_hash(path) == expected
    _write(path, data[:-1] + bytes([data[-1] ^ 1]))
    assert content_hash(path) != expected


def test_content_hash_of_big_file_samples_start_middle_end(tmp_path: Path) -> None:
    mib = 1 << 20
    data = bytearray(os.urandom(5 * mib))
    path = _write(tmp_path / "v.mp4", bytes(data))
    original = content_hash(path)
    data[int(1.5 * mib)] ^= 0xFF  # between the first and middle windows: not read (the documented trade-off)
    _write(path, bytes(data))
    assert content_hash(path) == original
    data[len(data) // 2] ^= 0xFF  # inside the middle window
    _write(path, bytes(data))
    assert content_hash(path) != original
    _write(path, bytes(data) + b"\0")  # size is hashed too
    assert content_hash(path) != original


# ------------------------------------------------------------------------------------------ scanning


def test_scan_cycle_new_changed_moved_deleted_unchanged(catalog: Catalog, tmp_path: Path) -> None:
    folder = tmp_path / "photos"
    a, b, c = (
        _write(folder / name, os.urandom(2000 + i)) for i, name in enumerate(["a.jpg", "b.gif", "c.mp4"])
    )
    catalog.add_root(folder)
    first = _apply(catalog, folder)
    assert sorted(first["new"]) == sorted([a, b, c])
    a_id = catalog.media_by_path(a).id
    _mark_ok(catalog, a_id)
    caption = catalog.add_caption(a_id, "a dog on a beach", "user")
    model = catalog.register_model("m", "vse", tmp_path / "m.pt")
    catalog.put_embeddings(model, [a_id], np.ones((1, 1, 4), np.float32))

    moved_a = folder / "trip" / "a-renamed.jpg"
    moved_a.parent.mkdir()
    a.rename(moved_a)
    _write(b, os.urandom(3000))
    d = _write(folder / "d.png", os.urandom(100))
    second = _apply(catalog, folder)
    assert second["moved"] == [moved_a] and second["changed"] == [b] and second["new"] == [d]
    assert second["unchanged"] == [c] and second["deleted"] == []
    moved = catalog.media(a_id)
    assert moved.path == moved_a and moved.status == MediaStatus.OK
    assert [x.id for x in catalog.captions(a_id)] == [caption]
    assert catalog.embedded_ids(model) == {a_id}
    assert catalog.media_by_path(a) is None

    d.unlink()
    third = _apply(catalog, folder)
    assert third["deleted"] == [d] and catalog.media_by_path(d) is None
    assert catalog.counts()["status"] == {"pending": 2, "ok": 1}
    assert catalog.integrity_ok()


def test_copy_whose_original_still_exists_is_new_not_moved(catalog: Catalog, tmp_path: Path) -> None:
    data = os.urandom(500)
    original, copy = _write(tmp_path / "x.jpg", data), _write(tmp_path / "copy" / "x.jpg", data)
    first, _ = catalog.upsert_media(original, 500, 1, content_hash(original), None)
    second, outcome = catalog.upsert_media(copy, 500, 1, content_hash(copy), None)
    assert outcome == "new" and second != first


def test_move_is_found_even_without_mark_missing(catalog: Catalog, tmp_path: Path) -> None:
    old = _write(tmp_path / "old.jpg", os.urandom(500))
    digest = content_hash(old)
    media_id, _ = catalog.upsert_media(old, 500, 1, digest, None)
    new = old.rename(tmp_path / "new.jpg")
    assert catalog.upsert_media(new, 500, 2, digest, None) == (media_id, "moved")
    assert catalog.media(media_id).mtime_ns == 2


def test_failed_file_is_retried_only_when_it_changes(catalog: Catalog, tmp_path: Path) -> None:
    bad = _write(tmp_path / "lib" / "bad.jpg", b"not a jpeg")
    catalog.add_root(tmp_path / "lib")
    _apply(catalog, tmp_path / "lib")
    media_id = catalog.media_by_path(bad).id
    catalog.set_media_failed(media_id, "cannot identify image file")
    assert catalog.failures() == [(bad, "cannot identify image file")]
    again = _apply(catalog, tmp_path / "lib")
    assert again["unchanged"] == [bad] and catalog.pending_media() == []
    _write(bad, b"still not a jpeg, but different")
    assert _apply(catalog, tmp_path / "lib")["changed"] == [bad]
    retried = catalog.media(media_id)
    assert (retried.status, retried.error) == (MediaStatus.PENDING, None)
    assert [m.id for m in catalog.pending_media()] == [media_id] and catalog.failures() == []


def test_changed_content_drops_vectors_but_a_touch_keeps_them(catalog: Catalog, tmp_path: Path) -> None:
    path = _write(tmp_path / "a.jpg", b"first version")
    media_id, _ = catalog.upsert_media(path, 13, 1, content_hash(path), None)
    model = catalog.register_model("m", "vse", tmp_path / "m.pt")
    catalog.put_embeddings(model, [media_id], np.ones((1, 1, 4), np.float32))
    catalog.add_caption(media_id, "kept either way", "user")
    assert catalog.upsert_media(path, 13, 2, content_hash(path), None) == (media_id, "changed")
    assert catalog.embedded_ids(model) == {media_id}
    _write(path, b"second version!")
    assert catalog.upsert_media(path, 15, 3, content_hash(path), None) == (media_id, "changed")
    assert catalog.embedded_ids(model) == set() and len(catalog.captions(media_id)) == 1


def test_file_marked_missing_that_comes_back_gets_its_status_back(catalog: Catalog, tmp_path: Path) -> None:
    path = _write(tmp_path / "a.jpg", os.urandom(100))
    st = path.stat()
    media_id, _ = catalog.upsert_media(path, st.st_size, st.st_mtime_ns, content_hash(path), None)
    _mark_ok(catalog, media_id)
    assert catalog.mark_missing([path]) == 1
    recorded = _scan(catalog, tmp_path)
    assert [f.path for f in recorded.plans[0].changed] == [path]
    assert recorded.outcomes == {"unchanged": [path]} and catalog.media_by_path(path).id == media_id
    assert catalog.media(media_id).status == MediaStatus.OK


def test_plan_scan_limits_missing_to_the_roots_scanned(catalog: Catalog, tmp_path: Path) -> None:
    one, two = catalog.add_root(tmp_path / "one"), catalog.add_root(tmp_path / "two")
    catalog.upsert_media(tmp_path / "one" / "a.jpg", 1, 1, "h1", one)
    catalog.upsert_media(tmp_path / "two" / "b.jpg", 1, 1, "h2", two)
    assert catalog.plan_scan([], root_ids=[one]).missing == [tmp_path / "one" / "a.jpg"]
    assert len(catalog.plan_scan([]).missing) == 2


def test_relative_paths_are_rejected(catalog: Catalog) -> None:
    with pytest.raises(CatalogError, match="not absolute"):
        catalog.upsert_media(Path("photos/a.jpg"), 1, 1, "h", None)


def test_removing_a_root_removes_its_media(catalog: Catalog, tmp_path: Path) -> None:
    root = catalog.add_root(tmp_path / "one")
    assert catalog.add_root(tmp_path / "one") == root
    media_id, _ = catalog.upsert_media(tmp_path / "one" / "a.jpg", 1, 1, "h1", root)
    catalog.add_caption(media_id, "x", "user")
    catalog.remove_root(tmp_path / "one")
    assert catalog.roots() == [] and list(catalog.iter_media()) == [] and list(catalog.iter_captions()) == []
    with pytest.raises(NotFound):
        catalog.remove_root(tmp_path / "one")


def test_iter_media_pages_through_every_row(catalog: Catalog) -> None:
    with catalog.transaction():
        for i in range(2500):
            catalog.upsert_media(Path(f"/lib/{i}.jpg"), i, i, f"h{i}", None)
    assert [m.size for m in catalog.iter_media()] == list(range(2500))
    assert len(list(catalog.iter_media(MediaStatus.PENDING))) == 2500
    assert list(catalog.iter_media("ok")) == []


# ------------------------------------------------------------------------------------------ transactions


def test_a_transaction_that_raises_leaves_no_partial_rows(catalog: Catalog) -> None:
    with pytest.raises(RuntimeError), catalog.transaction():
        media_id, _ = catalog.upsert_media(Path("/lib/a.jpg"), 1, 1, "h", None)
        catalog.add_caption(media_id, "half-written", "user")
        raise RuntimeError("crash mid-write")
    assert list(catalog.iter_media()) == [] and list(catalog.iter_captions()) == []
    catalog.upsert_media(Path("/lib/b.jpg"), 1, 1, "h2", None)  # the connection is still usable
    assert len(list(catalog.iter_media())) == 1


def test_a_failed_write_inside_a_transaction_undoes_only_itself(catalog: Catalog) -> None:
    with catalog.transaction():
        media_id, _ = catalog.upsert_media(Path("/lib/a.jpg"), 1, 1, "h", None)
        with pytest.raises(CatalogError, match="media 9999"):
            catalog.add_caption(9999, "no such item", "user")  # a nested savepoint rolls back alone
        catalog.add_caption(media_id, "kept", "user")
    assert [c.text for c in catalog.iter_captions()] == ["kept"] and catalog.integrity_ok()


def test_put_embeddings_failing_mid_way_keeps_the_old_vectors(catalog: Catalog) -> None:
    media_id, _ = catalog.upsert_media(Path("/lib/a.jpg"), 1, 1, "h", None)
    model = catalog.register_model("m", "vse", Path("/m"))
    old = np.full((1, 2, 3), 0.5, np.float32)
    catalog.put_embeddings(model, [media_id], old)
    # the second item does not exist: its insert violates the foreign key after the first row was written
    with pytest.raises(CatalogError, match="model"):
        catalog.put_embeddings(model, [media_id, 999], np.zeros((2, 2, 3), np.float32))
    ids, vectors, _ = catalog.get_embeddings(model)
    assert ids.tolist() == [media_id] and np.array_equal(vectors, old)


# ---------------------------------------------------------------------------------------- captions and pairs


@pytest.mark.parametrize(
    "text",
    [
        'it\'s a "quoted" caption; DROP TABLE captions; --',
        "nul\0inside\0text",
        "ünïcödé 🐈 \n\t tabs",
        "x" * (10 * 1024 * 1024),
    ],
    ids=["quotes-semicolons", "nul", "unicode", "10MB"],
)
def test_captions_round_trip_any_text(catalog: Catalog, text: str) -> None:
    media_id, _ = catalog.upsert_media(Path("/lib/a.jpg"), 1, 1, "h", None)
    caption_id = catalog.add_caption(media_id, text, CaptionSource.IMPORTED)
    assert catalog.captions(media_id)[0].text == text
    catalog.update_caption(caption_id, text[::-1])
    assert [c.text for c in catalog.iter_captions()] == [text[::-1]]
    assert catalog.integrity_ok()


def test_caption_editing_and_pseudo_replacement(catalog: Catalog) -> None:
    media_id, _ = catalog.upsert_media(Path("/lib/a.jpg"), 1, 1, "h", None)
    user = catalog.add_caption(media_id, "a cat", "user")
    catalog.set_pseudo_caption(media_id, "tabby, window")
    catalog.set_pseudo_caption(media_id, "tabby cat")
    assert [c.text for c in catalog.captions(media_id, sources=["pseudo"])] == ["tabby cat"]
    with pytest.raises(CatalogError):
        catalog.add_caption(media_id, "second pseudo", "pseudo")
    catalog.delete_caption(user)
    assert [c.source for c in catalog.captions(media_id)] == [CaptionSource.PSEUDO]
    assert [c.text for c in catalog.iter_captions("user")] == []
    with pytest.raises(NotFound, match=str(user)):
        catalog.update_caption(user, "gone")
    with pytest.raises(ValueError):
        catalog.add_caption(media_id, "x", "guessed")


def test_pairs(catalog: Catalog) -> None:
    a, _ = catalog.upsert_media(Path("/lib/a.jpg"), 1, 1, "ha", None)
    b, _ = catalog.upsert_media(Path("/lib/b.jpg"), 1, 1, "hb", None)
    yes = catalog.add_pair(a, "a red car", 1, "user")
    catalog.add_pair(b, "a red car", -1, "user")
    catalog.add_pair(b, "dog", 1, "pseudo")
    assert [(p.media_id, p.label) for p in catalog.pairs(source="user")] == [(a, 1), (b, -1)]
    assert [p.query for p in catalog.pairs(media_id=b)] == ["a red car", "dog"]
    with pytest.raises(CatalogError, match="label"):
        catalog.add_pair(a, "x", 0, "user")
    catalog.delete_pair(yes)
    assert len(catalog.pairs()) == 2


def test_deleting_media_cascades_to_annotations_and_vectors(catalog: Catalog) -> None:
    media_id, _ = catalog.upsert_media(Path("/lib/a.jpg"), 1, 1, "h", None)
    catalog.add_caption(media_id, "x", "user")
    catalog.add_pair(media_id, "x", 1, "user")
    model = catalog.register_model("m", "pcme", Path("/m"))
    catalog.put_embeddings(model, [media_id], np.ones((1, 1, 2), np.float32), {"sigma": np.ones((1, 1, 2))})
    catalog.mark_missing([Path("/lib/a.jpg")])
    assert catalog.purge_missing()[:3] == (1, 1, 1)
    assert catalog.pairs() == [] and list(catalog.iter_captions()) == []
    assert catalog.get_embeddings(model)[0].size == 0 and catalog.integrity_ok()


# ---------------------------------------------------------------------------------------- models and vectors


def test_embeddings_and_extras_round_trip_exactly(catalog: Catalog) -> None:
    ids = [catalog.upsert_media(Path(f"/lib/{i}.jpg"), 1, 1, f"h{i}", None)[0] for i in range(5)]
    model = catalog.register_model("pcme", "pcme", Path("/m"))
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((5, 3, 16)).astype(np.float32)
    vectors[0, 0, :3] = [np.finfo(np.float32).tiny, -0.0, np.finfo(np.float32).max]
    sigma = rng.random((5, 3, 16)).astype(np.float32)
    counts = np.arange(5, dtype=np.int64)
    catalog.put_embeddings(model, ids, vectors, {"sigma": sigma, "count": counts})

    got_ids, got, extras = catalog.get_embeddings(model)
    assert got_ids.tolist() == ids and got.dtype == np.float32 and got.tobytes() == vectors.tobytes()
    assert extras["sigma"].tobytes() == sigma.tobytes() and extras["count"].tolist() == counts.tolist()

    wanted = [ids[3], 12345, ids[1]]  # an id with no vectors is left out; order follows the request
    got_ids, got, extras = catalog.get_embeddings(model, wanted)
    assert got_ids.tolist() == [ids[3], ids[1]]
    assert np.array_equal(got, vectors[[3, 1]]) and np.array_equal(extras["sigma"], sigma[[3, 1]])

    catalog.put_embeddings(model, ids[:1], vectors[4:5])  # replace one item, without extras this time
    with pytest.raises(CatalogError, match="sigma"):
        catalog.get_embeddings(model)
    catalog.delete_embeddings(model, ids[:2])
    assert catalog.embedded_ids(model) == set(ids[2:])
    catalog.delete_embeddings(model)
    assert catalog.get_embeddings(model)[1].shape == (0, 0, 0)


def test_put_embeddings_checks_shapes(catalog: Catalog) -> None:
    media_id, _ = catalog.upsert_media(Path("/lib/a.jpg"), 1, 1, "h", None)
    model = catalog.register_model("m", "vse", Path("/m"))
    with pytest.raises(CatalogError, match="float32"):
        catalog.put_embeddings(model, [media_id], np.ones((1, 4), np.float32))
    with pytest.raises(CatalogError, match="float32"):
        catalog.put_embeddings(model, [media_id], np.ones((1, 1, 4), np.float64))
    with pytest.raises(CatalogError, match="media ids"):
        catalog.put_embeddings(model, [media_id, media_id], np.ones((2, 1, 4), np.float32))
    with pytest.raises(CatalogError, match="extra 'sigma'"):
        catalog.put_embeddings(model, [media_id], np.ones((1, 1, 4), np.float32), {"sigma": np.ones((2, 4))})


def test_switching_models_deletes_nothing_and_keeps_one_active(catalog: Catalog) -> None:
    media_id, _ = catalog.upsert_media(Path("/lib/a.jpg"), 1, 1, "h", None)
    vse = catalog.register_model("vse-1", "vse", Path("/m/vse"), {"rsum": np.float32(270.5)})
    pvse = catalog.register_model("pvse-1", "pvse", Path("/m/pvse"))
    catalog.put_embeddings(vse, [media_id], np.ones((1, 1, 8), np.float32))
    catalog.put_embeddings(pvse, [media_id], np.ones((1, 4, 8), np.float32))
    assert catalog.active_model() is None
    catalog.set_active_model("vse-1")
    catalog.set_active_model("pvse-1")
    assert [m.name for m in catalog.models() if m.is_active] == ["pvse-1"]
    assert catalog.get_embeddings(vse)[1].shape == (1, 1, 8) and catalog.get_embeddings(pvse)[1].shape == (
        1,
        4,
        8,
    )
    with pytest.raises(CatalogError, match="already registered"):
        catalog.register_model("vse-1", "vse", Path("/elsewhere"))
    with pytest.raises(NotFound, match="nope"):
        catalog.set_active_model("nope")
    with pytest.raises(CatalogError, match="metrics of model 'odd'"):
        catalog.register_model("odd", "vse", Path("/m/odd"), {"when": object()})
    assert catalog.active_model().name == "pvse-1"  # the failed switch rolled back

    catalog.delete_model("pvse-1")
    assert catalog.active_model() is None and catalog.embedded_ids(vse) == {media_id}
    assert catalog.model("vse-1").metrics == {"rsum": 270.5} and catalog.integrity_ok()
    catalog.set_active_model(None)


# ------------------------------------------------------------------------------------------ media state


def test_media_results_and_counts(catalog: Catalog) -> None:
    a, _ = catalog.upsert_media(Path("/lib/a.jpg"), 1, 1, "ha", None)
    b, _ = catalog.upsert_media(Path("/lib/b.gif"), 1, 1, "hb", None)
    c, _ = catalog.upsert_media(Path("/lib/c.mp4"), 1, 1, "hc", None)
    _mark_ok(catalog, a)
    catalog.set_media_ok(b, "animation", "gif", 320, 240, 24, 2.4, "effnet-lite0")
    catalog.set_media_failed(c, "truncated")
    gif = catalog.media(b)
    assert (gif.kind, gif.n_frames, gif.duration_s, gif.features_backbone) == (
        MediaKind.ANIMATION,
        24,
        2.4,
        "effnet-lite0",
    )
    assert catalog.counts() == {"status": {"ok": 2, "failed": 1}, "kind": {"image": 1, "animation": 1}}
    with pytest.raises(NotFound, match="999"):
        catalog.media(999)
    with pytest.raises(NotFound):
        catalog.set_media_failed(999, "x")


# ------------------------------------------------------------------------------------------ threads


def test_threads_share_one_catalog_and_a_second_catalog_sees_commits(catalog: Catalog) -> None:
    media_id, _ = catalog.upsert_media(Path("/lib/a.jpg"), 1, 1, "h", None)

    def annotate(worker: int) -> None:
        for i in range(50):
            catalog.add_caption(media_id, f"{worker}-{i}", "user")

    def annotate_on_own_connection(worker: int) -> None:
        with Catalog(catalog.path) as own:
            for i in range(50):
                own.add_caption(media_id, f"own {worker}-{i}", "user")

    threads = [threading.Thread(target=annotate, args=(w,)) for w in range(2)]
    threads += [threading.Thread(target=annotate_on_own_connection, args=(w,)) for w in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with Catalog(catalog.path) as other:
        assert len(other.captions(media_id)) == 200
        other.add_caption(media_id, "from the other connection", "user")
    assert len(catalog.captions(media_id)) == 201


def test_renaming_a_model_keeps_its_embeddings_and_active_state(catalog: Catalog) -> None:
    media_id, _ = catalog.upsert_media(Path("/lib/a.jpg"), 1, 1, "h", None)
    vse = catalog.register_model("vse-1", "vse", Path("/m/vse"))
    catalog.register_model("pvse-1", "pvse", Path("/m/pvse"))
    catalog.put_embeddings(vse, [media_id], np.ones((1, 1, 8), np.float32))
    catalog.set_active_model("vse-1")
    catalog.rename_model("vse-1", "holiday photos")
    assert [m.name for m in catalog.models()] == ["holiday photos", "pvse-1"]
    assert catalog.active_model().name == "holiday photos" and catalog.embedded_ids(vse) == {media_id}
    with pytest.raises(CatalogError, match="already registered"):
        catalog.rename_model("holiday photos", "pvse-1")
    with pytest.raises(NotFound, match="vse-1"):
        catalog.rename_model("vse-1", "other")
    assert [m.name for m in catalog.models()] == ["holiday photos", "pvse-1"]
