"""The feature cache: fp16 and 8-bit round trips, lookups by content hash, the local-features cap, clean-up, old
stores and damaged rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.features.featurestore import (
    FeatureRecord,
    FeatureStore,
    FeatureStoreError,
    _half,
    decode_local_codes,
    encode_local_codes,
    top_k_classes,
)

D = 1280
BACKBONE = "effnet-lite0@224"


@pytest.fixture
def store(tmp_path: Path) -> FeatureStore:
    with FeatureStore(tmp_path / "features.sqlite") as fs:
        yield fs


def _photo(seed: int, dim: int = D) -> FeatureRecord:
    """What the extractor produces for a still image: pooled, 7x7 local map, region and image top classes."""
    rng = np.random.default_rng(seed)
    region_probs = rng.dirichlet(np.ones(1000), size=49)
    region_ids, region_top = top_k_classes(region_probs, 3)
    image_ids, image_top = top_k_classes(region_probs.mean(axis=0), 5)
    return FeatureRecord(
        global_=rng.random(dim, dtype=np.float32) * 6,
        local=rng.random((49, dim), dtype=np.float32) * 6,
        region_top_ids=region_ids,
        region_top_probs=region_top,
        image_top_ids=image_ids,
        image_top_probs=image_top,
    )


def _clip(seed: int, n_frames: int) -> FeatureRecord:
    """An animation or video: pooled plus per-frame features, no local map."""
    rng = np.random.default_rng(seed)
    frames = rng.random((n_frames, D), dtype=np.float32)
    return FeatureRecord(global_=frames.mean(axis=0), frames=frames)


def _close(got: np.ndarray | None, want: np.ndarray) -> bool:
    return got is not None and got.shape == want.shape and np.allclose(got, want, rtol=1e-3, atol=1e-3)


def _code_error_bound(want: np.ndarray) -> np.ndarray:
    """How far the square-root codes may put each value: with y = (x - min) / range, the code's square root is
    off by at most 1/510, so x by range (2 sqrt(y) + 1/510) / 510."""
    low = want.min(axis=1, keepdims=True)
    span = want.max(axis=1, keepdims=True) - low
    y = np.divide(want - low, span, out=np.zeros_like(want), where=span > 0)
    return span * (2 * np.sqrt(y) + 1 / 510) / 510


def _within_codes(got: np.ndarray | None, want: np.ndarray) -> bool:
    """Within the 8-bit codes' error (plus float16 rounding of the result)."""
    return got is not None and got.shape == want.shape and bool(
        np.all(np.abs(got.astype(np.float32) - want) <= _code_error_bound(want) * (1 + 1e-5) + 1e-3 * np.abs(want)
               + 1e-6))


def test_photo_record_round_trips_within_fp16_and_8_bit_tolerance(store: FeatureStore) -> None:
    record = _photo(0)
    store.put("hash-a", BACKBONE, record)
    got = store.get("hash-a", BACKBONE)
    assert got.global_.dtype == np.float16 and got.local.dtype == np.float16
    assert _close(got.global_, record.global_) and _within_codes(got.local, record.local)
    assert not _close(got.local, record.local)  # 8-bit codes, not float16
    assert got.region_top_ids.dtype == np.int16 and np.array_equal(got.region_top_ids, record.region_top_ids)
    assert np.array_equal(got.region_top_probs, record.region_top_probs)
    assert np.array_equal(got.image_top_ids, record.image_top_ids) and got.image_top_ids.shape == (5,)
    assert np.array_equal(got.image_top_probs, record.image_top_probs)
    assert got.frames is None
    got.global_[0] = 1.0  # callers get writable arrays


def test_clip_record_round_trips(store: FeatureStore) -> None:
    record = _clip(1, n_frames=7)
    store.put("hash-gif", BACKBONE, record)
    got = store.get("hash-gif", BACKBONE)
    assert _close(got.frames, record.frames) and _close(got.global_, record.global_)
    assert got.local is None and got.region_top_ids is None and got.image_top_probs is None


def test_keys_are_content_hash_and_backbone(store: FeatureStore) -> None:
    store.put("same", BACKBONE, _photo(0, dim=8))
    store.put("same", "other-backbone", _photo(1, dim=16))
    assert store.get("same", BACKBONE).global_.shape == (8,)
    assert store.get("same", "other-backbone").global_.shape == (16,)
    assert store.get("absent", BACKBONE) is None
    assert store.has("same", BACKBONE) and not store.has("same", "third-backbone")


def test_put_replaces_the_whole_record(store: FeatureStore) -> None:
    store.put("h", BACKBONE, _photo(0, dim=8))
    store.put("h", BACKBONE, FeatureRecord(global_=np.ones(8), frames=np.ones((3, 8))))
    got = store.get("h", BACKBONE)
    assert got.local is None and got.frames.shape == (3, 8) and got.region_top_ids is None
    assert store.stats().items == 1


def test_missing_keeps_request_order_and_drops_duplicates(store: FeatureStore) -> None:
    store.put_many([(h, _photo(i, dim=8)) for i, h in enumerate(["b", "d"])], BACKBONE)
    assert store.missing(["e", "b", "a", "e", "d", "c"], BACKBONE) == ["e", "a", "c"]
    assert store.missing(["b"], "other-backbone") == ["b"]
    assert store.missing([], BACKBONE) == []


def test_get_many_and_stack_follow_the_requested_order(store: FeatureStore) -> None:
    hashes = [f"h{i:04d}" for i in range(1200)]  # more than one IN-list chunk
    records = {h: FeatureRecord(global_=np.full(8, i, np.float32)) for i, h in enumerate(hashes)}
    store.put_many(records.items(), BACKBONE)
    wanted = hashes[::-1][:700] + ["not-there"]
    got = store.get_many(wanted, BACKBONE)
    assert set(got) == set(wanted[:-1]) and got["h0600"].local is None
    stacked = store.stack(wanted[:-1], BACKBONE)
    assert stacked.shape == (700, 8) and stacked[:, 0].tolist() == [float(1199 - i) for i in range(700)]
    with pytest.raises(FeatureStoreError, match="not-there"):
        store.stack(wanted, BACKBONE)
    with pytest.raises(FeatureStoreError, match="no local features"):
        store.stack(["h0001"], BACKBONE, "local")
    with pytest.raises(FeatureStoreError, match="unknown feature fields"):
        store.get_many(["h0001"], BACKBONE, ("logits",))


def test_locals_into_decodes_float32_into_the_rows_asked_and_leaves_the_rest(store: FeatureStore) -> None:
    store.put_many([("a", _photo(1)), ("b", _photo(2)), ("pooled-only", FeatureRecord(global_=np.ones(D, np.float32)))],
                   BACKBONE)
    out = np.full((5, 49, D), -1.0, np.float32)
    written = store.locals_into(["b", "pooled-only", "a", "not-there", "b"], BACKBONE, out)
    assert written.tolist() == [True, False, True, False, True]
    stored = store.get_many(["a", "b"], BACKBONE, ("local",))
    for row, key in ((0, "b"), (2, "a"), (4, "b")):  # the float16 record's values, without the float16 rounding
        np.testing.assert_allclose(out[row], stored[key].local.astype(np.float32), rtol=1e-3, atol=1e-3)
    assert (out[[1, 3]] == -1.0).all()
    assert not store.locals_into(["a"], BACKBONE, np.zeros((1, 16, D), np.float32)).any()  # another region count


def test_get_many_loads_only_the_fields_asked_for(store: FeatureStore) -> None:
    store.put("p", BACKBONE, _photo(3, dim=8))
    got = store.get_many(["p"], BACKBONE, ("local", "image_top_ids"))["p"]
    assert got.global_ is None and got.local.shape == (49, 8) and got.image_top_ids.shape == (5,)
    assert got.region_top_probs is None


def test_local_features_are_capped(tmp_path: Path) -> None:
    with FeatureStore(tmp_path / "features.sqlite", max_local_items=2) as store:
        dropped = store.put_many([(f"p{i}", _photo(i, dim=8)) for i in range(3)], BACKBONE)
        assert dropped == 1
        assert [store.get(f"p{i}", BACKBONE).local is not None for i in range(3)] == [True, True, False]
        assert store.get("p2", BACKBONE).region_top_ids is not None  # the rest is still kept
        assert store.put_many([("p0", _photo(10, dim=8))], BACKBONE) == 0  # replacing stays within the cap
        store.put("p1", BACKBONE, FeatureRecord(global_=np.ones(8)))  # frees a slot
        assert store.put_many([("p2", _photo(2, dim=8))], BACKBONE) == 0
        stats = store.stats()
        assert (stats.items, stats.local_items, stats.max_local_items) == (3, 2, 2)
        assert stats.local_bytes == 2 * 49 * (8 + 2 * 4) and stats.global_bytes == 3 * 8 * 2  # codes, offsets, ranges
        assert stats.file_bytes > 0


def test_bad_record_rolls_back_the_whole_batch(store: FeatureStore) -> None:
    good = _photo(0, dim=8)
    bad_local = FeatureRecord(global_=np.ones(8), local=np.ones((49, 9)))
    with pytest.raises(FeatureStoreError, match="local features of bad"):
        store.put_many([("good", good), ("bad", bad_local)], BACKBONE)
    assert store.missing(["good", "bad"], BACKBONE) == ["good", "bad"]
    bad_records = [
        ("no global", FeatureRecord(local=np.ones((49, 8)))),
        ("not finite", FeatureRecord(global_=np.full(8, 1e6))),
        ("not finite", FeatureRecord(global_=np.ones(8), frames=np.full((2, 8), np.nan))),
        ("both ids and probabilities", FeatureRecord(global_=np.ones(8), image_top_ids=np.arange(5))),
        (
            "outside 0..32767",
            FeatureRecord(
                global_=np.ones(8), image_top_ids=np.array([40000]), image_top_probs=np.array([0.5])
            ),
        ),
    ]
    for message, record in bad_records:
        with pytest.raises(FeatureStoreError, match=message):
            store.put("x", BACKBONE, record)
    assert store.stats().items == 0


def test_delete_unreferenced_keeps_only_listed_hashes(store: FeatureStore) -> None:
    store.put_many([(h, _photo(i, dim=8)) for i, h in enumerate("abc")], BACKBONE)
    store.put("a", "other-backbone", _photo(9, dim=8))
    assert store.delete_unreferenced(["a", "zzz"]) == 2
    assert store.missing(["a", "b", "c"], BACKBONE) == ["b", "c"] and store.has("a", "other-backbone")
    assert store.stats().local_items == 2 and store.integrity_ok()


def test_features_survive_reopening(tmp_path: Path) -> None:
    record = _clip(5, n_frames=4)
    with FeatureStore(tmp_path / "f.sqlite") as store:
        store.put("v", BACKBONE, record)
    with FeatureStore(tmp_path / "f.sqlite") as store:
        assert _close(store.get("v", BACKBONE).frames, record.frames)
        assert store._live().execute("PRAGMA auto_vacuum").fetchone()[0] == 2  # incremental


def test_top_k_classes_matches_a_full_sort() -> None:
    probs = np.random.default_rng(0).dirichlet(np.ones(50), size=6)
    ids, top = top_k_classes(probs, 4)
    naive = np.argsort(-probs, axis=1)[:, :4]
    assert ids.dtype == np.int16 and top.dtype == np.float16
    assert np.array_equal(ids, naive)
    assert np.allclose(top, np.take_along_axis(probs, naive, axis=1), atol=1e-3)
    assert top_k_classes(probs[0], 2)[0].tolist() == naive[0, :2].tolist()
    with pytest.raises(FeatureStoreError):
        top_k_classes(probs, 51)


@pytest.mark.parametrize("shape", [(49, D), (3, D), (D,), (2, 49, 64), (20, 17)])
def test_stored_halves_are_numpys_float16_bit_for_bit(store: FeatureStore, shape: tuple[int, ...]) -> None:
    # the store converts big arrays with OpenCV (vectorised): the bytes must be those of ndarray.astype(float16),
    # subnormals, rounding ties, the largest finite half and -0.0 included
    rng = np.random.default_rng(7)
    bits = rng.integers(0, 2**32, size=int(np.prod(shape)), dtype=np.uint64).astype(np.uint32).view(np.float32)
    values = np.where(np.isfinite(bits) & (np.abs(bits) <= 65504.0), bits, rng.standard_normal(bits.size) * 1e-6)
    values[:8] = [0.0, -0.0, 65504.0, -65504.0, 65503.0, 2.0**-24, 2.0**-25, 1.0 + 2.0**-11]
    values = values.astype(np.float32).reshape(shape)
    got = _half("k", "test", values, len(shape))
    assert got.dtype == np.float16 and got.shape == shape
    assert np.array_equal(got.view(np.uint16), values.astype(np.float16).view(np.uint16))
    transposed = values.T if values.ndim == 2 else values
    assert np.array_equal(_half("k", "test", transposed, transposed.ndim).view(np.uint16),
                          transposed.astype(np.float16).view(np.uint16))
    if shape == (49, D):
        store.put("h", BACKBONE, FeatureRecord(global_=values[0], frames=values))
        assert np.array_equal(store.get("h", BACKBONE).frames.view(np.uint16), got.view(np.uint16))


def _counted(store: FeatureStore) -> tuple[int, int]:
    conn = store._live()
    return (conn.execute("SELECT n FROM counts WHERE name = 'locals'").fetchone()[0],
            conn.execute("SELECT COUNT(*) FROM locals").fetchone()[0])


def test_the_local_count_follows_every_write(tmp_path: Path) -> None:
    """The cap reads a trigger-kept count instead of counting the table: it must never drift."""
    with FeatureStore(tmp_path / "features.sqlite", max_local_items=3) as store:
        store.put_many([(f"p{i}", _photo(i, dim=8)) for i in range(4)], BACKBONE)  # one dropped by the cap
        assert _counted(store) == (3, 3)
        store.put_many([("p0", _photo(10, dim=8)), ("c", _clip(1, 2))], BACKBONE)  # replaced; a clip has none
        assert _counted(store) == (3, 3)
        with pytest.raises(FeatureStoreError):
            store.put_many([("p1", FeatureRecord(global_=np.ones(8))),
                            ("bad", FeatureRecord(global_=np.ones(8), local=np.ones((49, 9))))], BACKBONE)
        assert _counted(store) == (3, 3)  # rolled back with the batch
        store.put("p1", BACKBONE, FeatureRecord(global_=np.ones(8)))  # no local any more
        assert _counted(store) == (2, 2)
        assert store.delete_unreferenced(["p0"]) == 4  # cascaded deletes of items
        assert _counted(store) == (1, 1)
        store.put_many([(f"q{i}", _photo(20 + i, dim=8)) for i in range(3)], BACKBONE)
        assert _counted(store) == (3, 3) and store.get("q2", BACKBONE).local is None


def test_a_version_1_store_gets_its_count_on_opening(tmp_path: Path) -> None:
    from engine.features.featureschema import MIGRATIONS as _MIGRATIONS
    from engine.sqlitestore import SQLiteStore

    path = tmp_path / "features.sqlite"
    with FeatureStore(path) as store:
        store.put_many([(f"p{i}", _photo(i, dim=8)) for i in range(3)], BACKBONE)
        conn = store._live()
        for statement in ("DROP TRIGGER locals_added", "DROP TRIGGER locals_removed", "DROP TABLE counts",
                          "ALTER TABLE locals DROP COLUMN codec",
                          "UPDATE meta SET value = '1' WHERE key = 'schema_version'"):
            conn.execute(statement)  # back to the file an older Polyseek wrote
    old = SQLiteStore(path, _MIGRATIONS[:1])
    assert old.schema_version == 1
    old.close()
    with FeatureStore(path, max_local_items=4) as store:
        assert store.schema_version == 3 and _counted(store) == (3, 3)
        assert store.put_many([(f"n{i}", _photo(10 + i, dim=8)) for i in range(2)], BACKBONE) == 1


def test_a_new_store_uses_large_pages_and_an_old_one_keeps_its_own(tmp_path: Path) -> None:
    """Local features are 125 KB blobs: a new store writes them on 64 KB pages; a store made with SQLite's
    default 4 KB pages opens as it is (the page size of a WAL database cannot change) and still works."""
    import sqlite3

    with FeatureStore(tmp_path / "new.db") as store:
        assert store._read("page size", "PRAGMA page_size")[0][0] == 65536
    old = tmp_path / "old.db"
    conn = sqlite3.connect(old)
    conn.execute("PRAGMA page_size=4096")
    conn.execute("CREATE TABLE placeholder (x)")  # fixes the page size, as an older Polyseek's store did
    conn.close()
    with FeatureStore(old) as store:
        assert store._read("page size", "PRAGMA page_size")[0][0] == 4096
        store.put("abc", "b0", _photo(0))
        assert store.get("abc", "b0").local.shape == (49, D)


# ---------------------------------------------------------------------------------------- 8-bit local features


def test_local_codes_keep_zeros_exact_small_values_alive_and_every_value_within_the_bound() -> None:
    rng = np.random.default_rng(3)
    relu = np.clip(rng.normal(0, 2, (49, 64)), 0, 6).astype(np.float32)  # the backbone's ReLU6 outputs
    relu[5] = 0.0  # an all-zero region
    relu[7, :8] = [6.0, 0.001, 0.004, 0.008, 0.01, 0.02, 0.05, 0.1]  # small activations beside a large one
    signed = rng.normal(1, 3, (7, 64)).astype(np.float32)  # another backbone: rows with negative minima
    signed[2] = 4.25  # a constant row
    for local in (relu, signed):
        low, span, codes = encode_local_codes("k", local, 64)
        assert codes.dtype == np.uint8 and codes.shape == local.shape and low.dtype == span.dtype == np.float32
        assert np.array_equal(span, local.max(axis=1) - local.min(axis=1))
        blob = low.tobytes() + span.tobytes() + codes.tobytes()
        got = decode_local_codes(blob, len(local), 64).astype(np.float32)
        # exact arithmetic: within the square-root scale's bound (float16 rounding of the result aside)
        exact = low[:, None] + span[:, None] * (codes.astype(np.float64) / 255) ** 2
        assert np.all(np.abs(exact - local) <= _code_error_bound(local) * (1 + 1e-5) + 1e-6)
        assert _within_codes(got, local)
    decoded = decode_local_codes(*_blob(relu), 64)
    assert np.array_equal(decoded[relu == 0], np.zeros((relu == 0).sum(), np.float16))
    # a linear 8-bit scale over 0..6 (step 0.0235) rounds all of these to 0 or 0.0235; the square-root scale keeps
    # each one nonzero and within a third of its value
    small = decoded[7, 1:8].astype(np.float32)
    assert np.all(small > 0) and np.all(np.abs(small - relu[7, 1:8]) <= relu[7, 1:8] / 3)
    assert np.all(decode_local_codes(*_blob(signed), 64)[2] == np.float16(4.25))
    assert np.all(encode_local_codes("k", relu, 64)[2].max(axis=1)[relu.max(axis=1) > 0] == 255)


def test_local_codes_decode_as_float32_into_the_given_buffer_strided_or_not() -> None:
    relu = np.clip(np.random.default_rng(4).normal(0, 2, (49, 64)), 0, 6).astype(np.float32)
    blob, n = _blob(relu)
    want = decode_local_codes(blob, n, 64).astype(np.float32)
    batch = np.full((3, 49, 64), -1.0, np.float32)
    decode_local_codes(blob, n, 64, out=batch[1])  # a batch's row: contiguous, written in place
    strided = np.full((49, 128), -1.0, np.float32)
    decode_local_codes(blob, n, 64, out=strided[:, ::2])  # not contiguous: still written there
    for got in (batch[1], strided[:, ::2]):
        assert got.dtype == np.float32 and _within_codes(got, relu)
        assert np.allclose(got, want, atol=4e-3)
    assert np.all(batch[[0, 2]] == -1) and np.all(strided[:, 1::2] == -1)


def _blob(local: np.ndarray) -> tuple[bytes, int]:
    low, span, codes = encode_local_codes("k", local, local.shape[1])
    return low.tobytes() + span.tobytes() + codes.tobytes(), len(local)


def test_local_codes_refuse_what_is_not_finite(store: FeatureStore) -> None:
    for bad in (np.nan, np.inf, -np.inf):
        local = np.ones((49, 8), np.float32)
        local[3, 4] = bad
        with pytest.raises(FeatureStoreError, match="local features of h .* not finite"):
            store.put("h", BACKBONE, FeatureRecord(global_=np.ones(8), local=local))
    assert store.get("h", BACKBONE) is None


def _old_store(path: Path) -> dict[str, np.ndarray]:
    """A schema v2 file as Polyseek wrote it before 8-bit codes: float16 local rows, three columns."""
    from engine.features.featureschema import MIGRATIONS as _MIGRATIONS
    from engine.sqlitestore import SQLiteStore

    rng = np.random.default_rng(11)
    locals_ = {f"old{i}": (rng.random((49, 8), dtype=np.float32) * 6).astype(np.float16) for i in range(3)}
    old = SQLiteStore(path, _MIGRATIONS[:2])
    with old.transaction() as conn:
        for key, local in locals_.items():
            item_id = conn.execute(
                "INSERT INTO items (content_hash, backbone, dim, global_feature, created_at) VALUES (?, ?, 8, ?, 0) "
                "RETURNING id", (key, BACKBONE, local.mean(axis=0).astype(np.float16).tobytes())).fetchone()[0]
            conn.execute("INSERT INTO locals VALUES (?, ?, ?)", (item_id, 49, local.tobytes()))
    assert old.schema_version == 2
    old.close()
    return locals_


def test_a_version_2_store_keeps_its_float16_local_features(tmp_path: Path) -> None:
    path = tmp_path / "features.sqlite"
    old = _old_store(path)
    with FeatureStore(path, max_local_items=5) as store:
        assert store.schema_version == 3
        for key, local in old.items():  # read bit for bit as they were written
            assert np.array_equal(store.get(key, BACKBONE).local.view(np.uint16), local.view(np.uint16))
        new = _photo(4, dim=8)
        assert store.put_many([("new", new), ("new2", _photo(5, dim=8)), ("new3", _photo(6, dim=8))],
                              BACKBONE) == 1  # the old rows count towards the cap
        assert _within_codes(store.get("new", BACKBONE).local, new.local)
        both = store.get_many(["old0", "new"], BACKBONE, ("local",))
        assert both["old0"].local.shape == both["new"].local.shape == (49, 8)
        assert store.stats().local_bytes == 3 * 49 * 8 * 2 + 2 * 49 * (8 + 8)
    with FeatureStore(path) as store:  # and again after the migration
        assert np.array_equal(store.get("old1", BACKBONE).local.view(np.uint16), old["old1"].view(np.uint16))


def test_a_damaged_local_row_is_reported_and_read_as_missing(store: FeatureStore,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    store.put_many([(f"p{i}", _photo(i, dim=8)) for i in range(4)], BACKBONE)
    conn = store._live()
    ids = dict(conn.execute("SELECT content_hash, id FROM items").fetchall())
    conn.execute("UPDATE locals SET data = substr(data, 1, 100) WHERE item_id = ?", (ids["p1"],))  # truncated
    conn.execute("UPDATE locals SET data = zeroblob(10000) WHERE item_id = ?", (ids["p2"],))  # overwritten
    conn.execute("UPDATE locals SET codec = 7 WHERE item_id = ?", (ids["p3"],))  # a format from the future
    with caplog.at_level("WARNING", logger="engine.features.featurestore"):
        got = store.get_many([f"p{i}" for i in range(4)], BACKBONE, ("global", "local"))
    assert got["p0"].local is not None and [got[f"p{i}"].local for i in (1, 2, 3)] == [None, None, None]
    assert all(got[f"p{i}"].global_ is not None for i in range(4))  # the rest of the record is still there
    assert [h for h in ("p1", "p2", "p3") if any(h in r.getMessage() for r in caplog.records)] == ["p1", "p2", "p3"]
    assert "damaged" in caplog.records[0].getMessage()
