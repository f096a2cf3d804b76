"""The per-caption text-feature cache: only new captions are encoded, results equal a from-scratch encoding,
encoders never share rows, and damaged or half-written cache files are survived."""

from __future__ import annotations

import logging
import os
import sqlite3
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

from engine.features.featurestore import FeatureStore
from engine.features.text import EncodedText
from trainer import data
from trainer.data import FeatureNeeds, FeatureSource
from trainer.textcache import CachedCaption, TextCache, TextCacheError, caption_key, text_cache_path

BOTH = FeatureNeeds(False, True, True, "minilm", 8)
TOKENS = FeatureNeeds(False, True, False, "minilm", 8)
SENTENCE = FeatureNeeds(False, False, True, "minilm", 8)
GLOVE = FeatureNeeds(False, True, False, "glove", 8)
CAPTIONS = ["a dog runs on the beach", "two cats", "a red car parked near a tall tree", "snow"]


class SpyEncoder:
    """A text encoder whose vectors depend only on the caption (seeded by its text); records what it encodes."""

    def __init__(self, width: int, sentence: bool, fail_on_call: int | None = None) -> None:
        self.width, self.sentence, self.fail_on_call = width, sentence, fail_on_call
        self.encoded: list[str] = []
        self.calls = 0

    def encode(self, texts: list[str]) -> EncodedText:
        self.calls += 1
        if self.calls == self.fail_on_call:
            raise RuntimeError("encoder killed")
        self.encoded += texts
        words = [t.split() or ["."] for t in texts]
        length = max(len(w) for w in words)
        vectors = np.zeros((len(texts), length, self.width), np.float32)
        mask = np.zeros((len(texts), length), bool)
        sentence = np.zeros((len(texts), 384), np.float32)
        for row, (text, w) in enumerate(zip(texts, words, strict=True)):
            rng = np.random.default_rng(zlib.crc32(text.encode()))
            vectors[row, : len(w)] = rng.normal(size=(len(w), self.width))
            mask[row, : len(w)] = True
            sentence[row] = rng.normal(size=384)
        return EncodedText(words, vectors, mask, sentence if self.sentence else None)


def fake_assets(root: Path) -> Path:
    """Just enough of an assets folder for the encoders' fingerprints (size and mtime of their weights)."""
    (root / "glove").mkdir(parents=True)
    (root / "minilm").mkdir()
    (root / "manifest.json").write_text("{}")
    (root / "glove" / "vectors.npy").write_bytes(b"glove weights")
    (root / "minilm" / "model.onnx").write_bytes(b"minilm weights")
    return root


@pytest.fixture
def source(tmp_path):
    with FeatureStore(tmp_path / "features.sqlite") as store:
        src = FeatureSource(store, None, tmp_path / "text", fake_assets(tmp_path / "assets"))
        src._text_encoders.update(minilm=SpyEncoder(384, True), glove=SpyEncoder(50, False))
        yield src


def reference(captions: list[str], width: int = 384, sentence: bool = True) -> data.TextFeatures:
    return data._encode_text(SpyEncoder(width, sentence), captions, width, lambda _p: None)


def assert_same(got: data.TextFeatures, want: data.TextFeatures, tokens: bool = True, sentence: bool = True) -> None:
    assert got.count == want.count
    if tokens:
        assert got.tokens.dtype == np.float16 and got.offsets.dtype == np.int64
        np.testing.assert_array_equal(got.offsets, want.offsets)
        np.testing.assert_array_equal(got.tokens, want.tokens)
    else:
        assert got.tokens is None and got.offsets is None
    if sentence:
        assert got.sentence.dtype == np.float32
        np.testing.assert_array_equal(got.sentence, want.sentence)
    else:
        assert got.sentence is None


def test_only_captions_not_seen_before_are_encoded(source):
    minilm = source._text_encoders["minilm"]
    a, b, c, d = CAPTIONS
    assert_same(source.text([a, b, c], BOTH), reference([a, b, c]))
    assert sorted(minilm.encoded) == sorted([a, b, c])
    minilm.encoded.clear()
    assert_same(source.text([b, c, d], BOTH), reference([b, c, d]))
    assert minilm.encoded == [d]
    minilm.encoded.clear()
    again = [d, a, d, b, c]  # another order, with a repeat: all cached
    assert_same(source.text(again, BOTH), reference(again))
    assert minilm.encoded == []
    with _open(source) as cache:
        assert len(cache) == 4  # one row per distinct caption, however often it was asked for


def _path(source: FeatureSource) -> Path:
    return text_cache_path(source.text_cache, "minilm", data._encoder_fingerprint("minilm", source.assets))


def _open(source: FeatureSource) -> TextCache:
    return TextCache(_path(source), data._encoder_fingerprint("minilm", source.assets), 384)


def test_each_part_is_read_only_when_needed(source, monkeypatch):
    source.text(CAPTIONS, BOTH)
    asked = []
    original = TextCache.get_many
    monkeypatch.setattr(TextCache, "get_many", lambda self, keys, tokens, sentence: (
        asked.append((tokens, sentence)), original(self, keys, tokens, sentence))[1])
    assert_same(source.text(CAPTIONS, SENTENCE), reference(CAPTIONS), tokens=False)
    assert_same(source.text(CAPTIONS, TOKENS), reference(CAPTIONS), sentence=False)
    assert asked == [(False, True), (True, False)]
    assert source._text_encoders["minilm"].calls == 1
    assert source.text([], BOTH).tokens.shape == (0, 384)


def test_glove_and_minilm_never_share_rows(source):
    glove, minilm = source._text_encoders["glove"], source._text_encoders["minilm"]
    source.text(CAPTIONS, BOTH)
    assert_same(source.text(CAPTIONS, GLOVE), reference(CAPTIONS, 50, False), sentence=False)
    assert sorted(glove.encoded) == sorted(CAPTIONS)
    assert len(list(source.text_cache.glob("*.sqlite"))) == 2
    # re-prepared GloVe weights are another fingerprint: a new file, everything encoded again
    os.utime(source.assets / "glove" / "vectors.npy", ns=(1, 1))
    source.text(CAPTIONS, GLOVE)
    assert len(glove.encoded) == 2 * len(CAPTIONS) and minilm.calls == 1
    with pytest.raises(TextCacheError, match="fingerprint"):
        TextCache(_path(source), "glove:1:1", 384)


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_a_damaged_cache_file_is_reported_and_rebuilt(source, caplog, damage):
    captions = [f"caption number {i} " + "word " * (i % 7) for i in range(60)]
    source.text(captions, BOTH)
    path = _path(source)
    with _open(source):
        pass  # the last connection to close checkpoints the WAL into the main file
    size = path.stat().st_size
    if damage == "garbage":
        with path.open("r+b") as f:
            f.seek(0)
            f.write(os.urandom(size))
    else:
        with path.open("r+b") as f:
            f.truncate(size // 2)
    minilm = source._text_encoders["minilm"]
    minilm.encoded.clear()
    with caplog.at_level(logging.WARNING, logger="trainer.data"):
        assert_same(source.text(captions, BOTH), reference(captions))
    assert "damaged" in caplog.text and str(path) in caplog.text
    assert sorted(minilm.encoded) == sorted(captions)
    assert path.with_name(path.name + ".corrupt").is_file()
    minilm.encoded.clear()
    assert_same(source.text(captions, BOTH), reference(captions))
    assert minilm.encoded == []  # the rebuilt cache serves them


def test_a_damaged_row_is_re_encoded_alone(source, caplog):
    source.text(CAPTIONS, BOTH)
    with sqlite3.connect(_path(source)) as conn:
        conn.execute("UPDATE tokens SET vectors = ? WHERE key = ?", (b"\0" * 10, caption_key(CAPTIONS[2])))
    minilm = source._text_encoders["minilm"]
    minilm.encoded.clear()
    with caplog.at_level(logging.WARNING, logger="trainer.data"):
        assert_same(source.text(CAPTIONS, BOTH), reference(CAPTIONS))
    assert "1 damaged caption rows" in caplog.text
    assert minilm.encoded == [CAPTIONS[2]]


def test_a_writer_killed_mid_write_leaves_a_readable_cache(source, monkeypatch):
    monkeypatch.setattr(data, "TEXT_CHUNK", 2)
    minilm = SpyEncoder(384, True, fail_on_call=2)
    source._text_encoders["minilm"] = minilm
    with pytest.raises(RuntimeError, match="killed"):
        source.text(CAPTIONS, BOTH)
    # a transaction that raises half-way stores nothing of its rows
    with _open(source) as cache:
        assert len(cache) == 2  # the first chunk, committed before the encoder died
        good = CachedCaption(caption_key("x"), np.ones((2, 384), np.float16), np.ones(384, np.float32))
        bad = CachedCaption(caption_key("y"), np.ones((2, 7), np.float16), None)
        with pytest.raises(TextCacheError, match="width 384"):
            cache.put_many([good, bad])
        assert len(cache) == 2 and caption_key("x") not in cache.get_many([caption_key("x")], True, True)
    minilm.fail_on_call = None
    minilm.encoded.clear()
    assert_same(source.text(CAPTIONS, BOTH), reference(CAPTIONS))
    assert len(minilm.encoded) == 2  # only the chunk that was lost


def test_a_process_killed_inside_a_transaction_leaves_a_readable_cache(source):
    source.text(CAPTIONS[:2], BOTH)
    path = _path(source)
    # Plain sqlite3 keeps the child quick (no torch import); it writes the way TextCache.put_many does, and
    # enough rows (~8 MB) that SQLite spills uncommitted pages into the WAL before the process dies.
    script = (
        "import os, sqlite3, sys\n"
        "conn = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "conn.execute('PRAGMA journal_mode=WAL')\n"
        "conn.execute('BEGIN IMMEDIATE')\n"
        "for i in range(500):\n"
        "    conn.execute('INSERT INTO tokens (key, count, vectors) VALUES (?, 20, ?)',\n"
        "                 (str(i).encode(), bytes(20 * 384 * 2)))\n"
        "os._exit(9)\n"  # dies without committing or closing, like a killed process
    )
    done = subprocess.run([sys.executable, "-c", script, str(path)], timeout=60, capture_output=True, text=True)
    assert done.returncode == 9, done.stderr
    assert path.with_name(path.name + "-wal").stat().st_size > 1_000_000  # uncommitted pages were left behind
    source._text_encoders["minilm"].encoded.clear()
    assert_same(source.text(CAPTIONS, BOTH), reference(CAPTIONS))
    assert sorted(source._text_encoders["minilm"].encoded) == sorted(CAPTIONS[2:])
    with _open(source) as cache:
        assert len(cache) == 4


def test_a_cache_from_a_newer_app_is_left_alone_and_not_used(source, caplog):
    source.text(CAPTIONS[:2], BOTH)
    path = _path(source)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    minilm = source._text_encoders["minilm"]
    with caplog.at_level(logging.WARNING, logger="trainer.data"):
        assert_same(source.text(CAPTIONS, BOTH), reference(CAPTIONS))
    assert "not cached" in caplog.text and "newer" in caplog.text
    assert sorted(minilm.encoded) == sorted(CAPTIONS[:2] + CAPTIONS)  # nothing read from it, nothing written
    assert path.is_file() and not path.with_name(path.name + ".corrupt").exists()
