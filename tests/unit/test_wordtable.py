"""The word table (engine/features/wordtable.py): single words' MiniLM embeddings computed once per asset set, so a
text query no longer runs MiniLM a second time over its words; the ranking is the one the words' own encoding gives.
"""

from __future__ import annotations

import logging
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from engine.features import wordtable
from engine.features.wordtable import WordEmbeddings, build_table, table_path
from engine.workspace import Workspace
from tests.mediagen import make_animated_gif, make_jpeg

DIM = 8


class SpyEncode:
    """Vectors that depend only on the text (seeded by it); records every call's texts."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        return np.stack([np.random.default_rng(zlib.crc32(t.encode())).standard_normal(DIM).astype(np.float32)
                         for t in texts])

    @property
    def texts(self) -> list[str]:
        return [t for call in self.calls for t in call]


@pytest.fixture
def fake_assets(tmp_path: Path) -> Path:
    """An asset set with the two MiniLM files the table's fingerprint reads."""
    root = tmp_path / "assets"
    (root / "minilm").mkdir(parents=True)
    (root / "minilm" / "model.onnx").write_bytes(b"graph one")
    (root / "minilm" / "tokenizer.json").write_text("{}")
    return root


def test_table_words_are_read_and_other_words_encoded_once_per_session(fake_assets: Path):
    list(build_table(fake_assets, SpyEncode(), ["dog", "beach", "red"]))
    encode = SpyEncode()
    words = WordEmbeddings(encode, fake_assets)
    got = words.embed(["dog", "frisbee", "dog", "beach"], DIM)
    assert encode.calls == [["frisbee"]]  # one call, for the word outside the table only
    np.testing.assert_array_equal(got, SpyEncode()(["dog", "frisbee", "dog", "beach"]))
    words.embed(["frisbee", "red"], DIM)
    assert encode.calls == [["frisbee"]]  # kept for the session
    assert words.embed([], DIM).shape == (0, DIM)


def test_a_table_of_another_minilm_or_a_damaged_one_is_not_used(fake_assets: Path, caplog):
    list(build_table(fake_assets, SpyEncode(), ["dog"]))
    (fake_assets / "minilm" / "model.onnx").write_bytes(b"graph two")  # the assets were prepared again
    encode = SpyEncode()
    assert WordEmbeddings(encode, fake_assets).table_size == 0
    WordEmbeddings(encode, fake_assets).embed(["dog"], DIM)
    assert encode.texts == ["dog"]
    table_path(fake_assets).write_bytes(b"PK\x03\x04 not a zip")
    with caplog.at_level(logging.WARNING, logger="engine.features.wordtable"):
        assert WordEmbeddings(encode, fake_assets).table_size == 0
    assert "unreadable" in caplog.text


def test_a_cancelled_build_writes_nothing(fake_assets: Path):
    from engine.progress import Cancelled, CancelToken

    cancel = CancelToken()
    cancel.cancel()
    with pytest.raises(Cancelled):
        list(build_table(fake_assets, SpyEncode(), ["dog"], cancel=cancel))
    assert not table_path(fake_assets).exists()


QUERIES = ["a red ball on the green grass", "a dog running through the snow", "blue water near a sandy beach",
           "a zxqvword in a teapot", "two people"]
OUTSIDE = {"teapot", "zxqvword"}  # left out of the test's table: encoded as before


def _library(folder: Path) -> None:
    rng = np.random.default_rng(0)
    for i in range(6):  # noise of different colours and grain: distinct regional semantics
        pixels = rng.integers(0, 255, (40 // (i + 1) + 2, 48 // (i + 1) + 2, 3)) * (0.3 + 0.12 * i)
        Image.fromarray(pixels.clip(0, 255).astype(np.uint8)).resize((64, 48)).save(folder / f"noise{i}.jpg")
    make_jpeg(folder / "red.jpg", (64, 48), (200, 30, 30))
    make_jpeg(folder / "sky.jpg", (64, 48), (90, 140, 230))
    make_animated_gif(folder / "clip.gif", [(200, 30, 30), (30, 200, 30), (30, 30, 200)])


def _rankings(service: Workspace) -> list[tuple[list[int], np.ndarray, np.ndarray]]:
    out = []
    for query in QUERIES:
        ids, ranking, _, _ = service.search.rank_text(query)
        order = ranking.order()
        out.append((ids[ranking.rows[order]].tolist(), ranking.total[order], ranking.parts["zero_shot"][order]))
    return out


def _assets_without_table(assets_dir: Path, dest: Path) -> Path:
    """The test's assets seen through links, with a ``zeroshot`` folder of their own (no word table)."""
    dest.mkdir(parents=True)
    for entry in assets_dir.iterdir():
        if entry.name != "zeroshot":
            (dest / entry.name).symlink_to(entry)
    (dest / "zeroshot").mkdir()
    (dest / "zeroshot" / "class_embeddings.npy").symlink_to(assets_dir / "zeroshot" / "class_embeddings.npy")
    return dest


@pytest.mark.slow
@pytest.mark.parametrize("starter", ["off", "on"])  # the zero-shot ranking alone; fused with the starter
def test_the_ranking_with_the_word_table_is_the_ranking_without_it(assets_dir: Path, tmp_path: Path, monkeypatch,
                                                                   starter: str):
    from engine.features.regional import content_words
    from engine.features.text import MiniLMEncoder

    monkeypatch.setenv("POLYSEEK_STARTER", starter)
    folder = tmp_path / "media"
    folder.mkdir()
    _library(folder)
    plain = _assets_without_table(assets_dir, tmp_path / "plain")
    service = Workspace.open("words", plain)
    list(service.library.index([folder]))
    assert service.state.encoders.word_embeddings.table_size == 0
    before = _rankings(service)
    service.close()

    tabled = _assets_without_table(assets_dir, tmp_path / "tabled")
    vocabulary = sorted({w for q in QUERIES for w in content_words(q)} - OUTSIDE) + ["kite", "harbour"]
    minilm = MiniLMEncoder(tabled)
    list(build_table(tabled, lambda words: minilm.encode(words).sentence, vocabulary))
    service = Workspace.open("words", tabled)
    encoded: list[str] = []
    stock = service.state.encoders.minilm
    real = stock.encode
    monkeypatch.setattr(stock, "encode", lambda texts, *a, **k: (encoded.extend(texts), real(texts, *a, **k))[1])
    assert service.state.encoders.word_embeddings.table_size == len(vocabulary)
    after = _rankings(service)
    assert (service.models.active_trained() is not None) == (starter == "on")
    service.close()

    assert not set(encoded) & set(vocabulary)  # the table's words never went through MiniLM again
    assert OUTSIDE <= set(encoded)  # the others did
    for (ids_b, total_b, zs_b), (ids_a, total_a, zs_a) in zip(before, after, strict=True):
        assert ids_a == ids_b
        np.testing.assert_allclose(total_a, total_b, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(zs_a, zs_b, rtol=1e-5, atol=1e-5)


def test_the_vocabulary_holds_everyday_visual_words_of_the_starters_captions(assets_dir: Path):
    words = wordtable.common_words(assets_dir)
    assert {"dog", "beach", "frisbee", "skateboard"} <= set(words)  # the last two: the starter's captions only
    assert "the" not in words and len(words) == len(set(words))


def test_the_apps_own_assets_get_their_word_table_once_at_preparation(assets_dir: Path, polyseek_home: Path,
                                                                       monkeypatch):
    from types import SimpleNamespace

    from engine import paths
    from engine.features.encoders import Encoders

    monkeypatch.delenv("POLYSEEK_ASSETS")  # the app's own folder: no override, the platform's data folder
    monkeypatch.delenv("POLYSEEK_HOME")
    data = polyseek_home / "platform-data"
    monkeypatch.setattr(paths, "_platform", lambda: SimpleNamespace(user_data_path=data))
    own = _assets_without_table(assets_dir, paths.assets_dir())
    assert own == data / "assets"
    monkeypatch.setattr(wordtable, "common_words", lambda root: ["dog", "beach"])  # the real one: ~22,600 words
    first = list(Encoders().prepare())
    assert first and first[-1].message == wordtable.MESSAGE and first[-1].fraction == 1.0
    assert WordEmbeddings(SpyEncode(), own).table_size == 2
    assert list(Encoders().prepare()) == []  # once


def test_an_assets_folder_named_by_the_environment_is_used_as_it_is(assets_dir: Path, polyseek_home: Path,
                                                                     monkeypatch):
    from engine.features.encoders import Encoders

    named = _assets_without_table(assets_dir, polyseek_home / "named")
    monkeypatch.setenv("POLYSEEK_ASSETS", str(named))  # a shared or test set: never written to
    assert list(Encoders().prepare()) == []
    monkeypatch.delenv("POLYSEEK_ASSETS")  # a home named by the environment (tests, benchmarks): its assets too
    _assets_without_table(assets_dir, polyseek_home / "assets")
    assert list(Encoders().prepare()) == []
    assert not table_path(named).exists() and not table_path(polyseek_home / "assets").exists()
