"""Feature-backed training data: batches, ragged captions, kinds, splits, the text cache, real features."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from engine.features.encoders import Encoders
from engine.features.featurestore import FeatureStore
from engine.features.text import EncodedText
from engine.library.captionfolder import load_caption_folder
from tests.synthetic import make_motion_gif_folder, make_toy_photo_folder
from trainer.data import (
    DataError,
    FeatureNeeds,
    FeatureSource,
    PairSet,
    TextFeatures,
    VisualFeatures,
    _even_frames,
)
from trainer.sparse import SparseConfig
from trainer.splits import load_training_data, resolve_splits
from trainer.train import epoch_batches

CPU = torch.device("cpu")


def ragged(lengths: list[int], width: int = 3) -> TextFeatures:
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    tokens = np.arange(offsets[-1] * width, dtype=np.float16).reshape(-1, width)
    return TextFeatures(len(lengths), width, np.eye(len(lengths), 4, dtype=np.float32), tokens, offsets)


def mixed_visual(kinds: str, dim: int = 4) -> VisualFeatures:
    """'p' for a photo, 'c' for a clip (clip i has i + 1 valid frames of value i)."""
    is_clip = np.array([k == "c" for k in kinds])
    kind_row = np.zeros(len(kinds), np.int64)
    kind_row[~is_clip], kind_row[is_clip] = np.arange((~is_clip).sum()), np.arange(is_clip.sum())
    n_clips = int(is_clip.sum())
    frames = np.zeros((n_clips, 3, dim), np.float16)
    mask = np.zeros((n_clips, 3), bool)
    for i in range(n_clips):
        frames[i, : min(3, i + 1)] = np.arange(min(3, i + 1))[:, None] + 10 * i
        mask[i, : min(3, i + 1)] = True
    local = np.arange((~is_clip).sum() * 2 * dim, dtype=np.float16).reshape(-1, 2, dim)
    return VisualFeatures(is_clip, kind_row, np.arange(len(kinds) * dim, dtype=np.float16).reshape(-1, dim),
                          local, frames, mask)


def test_text_batch_pads_ragged_tokens_with_a_prefix_mask():
    text = ragged([2, 4, 1])
    batch = text.batch([2, 0, 1], CPU)
    assert batch.tokens.shape == (3, 4, 3) and batch.mask.tolist() == [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1]]
    torch.testing.assert_close(batch.tokens[0, 0], torch.tensor([18.0, 19.0, 20.0]))  # caption 2's one token
    assert float(batch.tokens[0, 1:].abs().sum()) == 0.0
    torch.testing.assert_close(batch.sentence, torch.eye(3, 4)[[2, 0, 1]])


def test_sentence_only_text_still_has_a_batch_size():
    text = TextFeatures(3, 384, np.ones((3, 384), np.float32))
    batch = text.batch([0, 2], CPU)
    assert batch.tokens.shape == (2, 1, 384) and len(batch) == 2 and batch.sentence.shape == (2, 384)


def test_visual_batches_are_one_kind_and_shuffling_keeps_each_clips_frames():
    visual = mixed_visual("pcpcc")
    photos = visual.batch([0, 2], CPU)
    torch.testing.assert_close(photos.pooled, torch.from_numpy(visual.pooled[[0, 2]].astype(np.float32)))
    assert photos.local.shape == (2, 2, 4)
    clips = visual.batch([4, 1], CPU)
    assert clips.mask.tolist() == [[1, 1, 1], [1, 0, 0]]
    shuffled = visual.batch([4], CPU, shuffle_frames=np.random.default_rng(0)).frames
    assert sorted(shuffled[0, :, 0].tolist()) == sorted(clips.frames[0, :, 0].tolist())
    with pytest.raises(DataError, match="mixes photos and clips"):
        visual.batch([0, 1], CPU)


def test_subset_reindexes_items_and_their_captions():
    pairs = PairSet(["a", "b", "c", "d"], mixed_visual("pcpc"), ["a0", "b0", "b1", "c0", "d0"],
                    np.array([0, 1, 1, 2, 3]), ragged([1, 2, 3, 4, 5]))
    sub = pairs.subset([3, 1])
    assert sub.files == ["d", "b"] and sub.captions == ["b0", "b1", "d0"]
    assert sub.caption_item.tolist() == [1, 1, 0]
    assert sub.text.offsets.tolist() == [0, 2, 5, 10]
    np.testing.assert_array_equal(sub.text.tokens[5:10], pairs.text.tokens[10:15])  # caption "d0"
    assert sub.visual.is_clip.tolist() == [True, True]
    np.testing.assert_array_equal(sub.visual.frames, pairs.visual.frames[[1, 0]])


def _pairs_for_batching(kinds: str, captions_per_item: int) -> PairSet:
    n = len(kinds)
    item = np.repeat(np.arange(n), captions_per_item)
    return PairSet([str(i) for i in range(n)], mixed_visual(kinds), [str(c) for c in range(len(item))], item,
                   ragged([1] * len(item)))


def test_epoch_batches_cover_every_caption_once_never_mixing_kinds():
    pairs = _pairs_for_batching("ppcpcppcpp", 3)
    batches = epoch_batches(pairs, epoch=0, seed=1, batch_size=4)
    flat = np.concatenate(batches)
    assert sorted(flat.tolist()) == list(range(30))
    for rows in batches:
        assert len(set(pairs.visual.is_clip[pairs.caption_item[rows]])) == 1 and len(rows) >= 2
    again = epoch_batches(pairs, epoch=0, seed=1, batch_size=4)
    assert all(np.array_equal(a, b) for a, b in zip(batches, again, strict=True))
    other = epoch_batches(pairs, epoch=1, seed=1, batch_size=4)
    assert not all(np.array_equal(a, b) for a, b in zip(batches, other, strict=False))


def test_an_epoch_reads_its_own_number_of_captions_of_a_clip_trained_as_a_still():
    """--clip-captions (issue #41): MSR-VTT's clips carry 20 captions, a photo 1 to 5; an epoch may read more of a
    clip's than of a photo's. Clips trained as stills batch with photos, and each still counts as a clip here."""
    import dataclasses

    pairs = _pairs_for_batching("pppppp", 8)
    visual = dataclasses.replace(pairs.visual, stills=np.array([False, True, False, True, False, False]))
    pairs = dataclasses.replace(pairs, visual=visual)
    def counts(**kw):
        flat = np.concatenate(epoch_batches(pairs, epoch=0, seed=0, batch_size=4, per_item=2, **kw))
        return np.bincount(pairs.caption_item[flat], minlength=6).tolist()
    assert counts() == [2] * 6  # as many as a photo unless told
    assert counts(per_clip=5) == [2, 5, 2, 5, 2, 2]
    assert counts(per_clip=None) == [2, 8, 2, 8, 2, 2]  # every caption of a clip


def test_grouped_batches_keep_captions_of_an_item_together():
    pairs = _pairs_for_batching("pppppp", 4)
    for rows in epoch_batches(pairs, epoch=0, seed=0, batch_size=4, group=2):
        items = pairs.caption_item[rows]
        assert len(rows) == 4 and all((items == i).sum() % 2 == 0 for i in set(items.tolist()))


def test_a_lone_caption_of_a_kind_is_not_a_batch():
    pairs = _pairs_for_batching("pppc", 1)
    batches = epoch_batches(pairs, epoch=0, seed=0, batch_size=8)
    assert [sorted(b.tolist()) for b in batches] == [[0, 1, 2]]


def test_even_frames_spreads_over_the_clip():
    frames = np.arange(12)[:, None]
    assert _even_frames(frames, 4)[:, 0].tolist() == [0, 4, 7, 11]
    assert len(_even_frames(frames[:3], 8)) == 3


# ------------------------------------------------------------------------------ splits


def test_splits_are_read_or_held_out(tmp_path):
    with_splits = load_caption_folder(make_toy_photo_folder(tmp_path / "a", 10, seed=0, dev_fraction=0.3).root)
    train, val = resolve_splits(with_splits, "train", "dev")
    assert {i.split for i in train.items} == {"train"} and {i.split for i in val.items} == {"dev"}
    plain = load_caption_folder(make_toy_photo_folder(tmp_path / "b", 20, seed=0).root)
    train, val = resolve_splits(plain, "train", "dev", seed=3)
    assert len(val.items) == 2 and len(train.items) == 18
    assert not {i.file for i in train.items} & {i.file for i in val.items}
    assert len(train.captions) == 36 and len(val.captions) == 4
    with pytest.raises(DataError, match="no split 'test'"):
        resolve_splits(with_splits, "test", "dev")


# ------------------------------------------------------------------------------ the text cache


class CountingEncoder:
    """A stand-in text encoder: token i of a caption is (len(caption), i, 0, ...)."""

    def __init__(self, width: int = 384) -> None:
        self.calls = 0
        self.width = width

    def encode(self, texts: list[str]) -> EncodedText:
        self.calls += 1
        words = [t.split() for t in texts]
        length = max(len(w) for w in words)
        vectors = np.zeros((len(texts), length, self.width), np.float32)
        mask = np.zeros((len(texts), length), bool)
        for row, w in enumerate(words):
            vectors[row, : len(w), 0] = len(texts[row])
            vectors[row, : len(w), 1] = np.arange(len(w))
            mask[row, : len(w)] = True
        return EncodedText(words, vectors, mask, vectors[:, 0, :] + 1.0)


class FakeEncoders:
    def __init__(self) -> None:
        self.minilm = CountingEncoder()


def test_text_features_are_cached_in_caption_order(tmp_path, assets_dir):
    encoders = FakeEncoders()
    with FeatureStore(tmp_path / "f.sqlite") as store:
        source = FeatureSource(store, encoders, tmp_path / "cache", assets_dir)
        captions = ["a much longer caption here", "short one", "mid sized words"]
        needs = FeatureNeeds(False, True, True, "minilm", 8)
        first = source.text(captions, needs)
        assert encoders.minilm.calls == 1
        batch = first.batch([0, 1, 2], CPU)
        assert batch.mask.sum(1).tolist() == [5, 2, 3]
        assert batch.tokens[:, 0, 0].tolist() == [len(c) for c in captions]
        again = source.text(captions, needs)
        assert encoders.minilm.calls == 1  # served from the cache
        np.testing.assert_array_equal(again.tokens, first.tokens)
        np.testing.assert_array_equal(again.sentence, first.sentence)
        sentence_only = source.text(captions, FeatureNeeds(False, False, True, "minilm", 8))
        assert encoders.minilm.calls == 1 and sentence_only.tokens is None  # one pass cached both parts
        np.testing.assert_array_equal(sentence_only.sentence, first.sentence)
        source.text(captions[:2], needs)
        assert encoders.minilm.calls == 1  # a subset of cached captions is read per caption, not re-encoded
        assert source.text(captions, FeatureNeeds(False, False, False, "minilm", 8)).tokens is None


# ------------------------------------------------------------------------------ real features


def _mixed_folder(folder: Path, photos: int, broken: bool = False) -> Path:
    """A caption folder of ``photos`` toy photos, two moving GIFs and (``broken``) a file that is no picture."""
    make_toy_photo_folder(folder / "p", photos, seed=1)
    make_motion_gif_folder(folder / "g", 2, seed=1)
    media = folder / "media"
    media.mkdir()
    rows = ["file\tcaption"]
    for sub in ("p", "g"):
        for path in (folder / sub / "media").iterdir():
            path.rename(media / path.name)
        rows += (folder / sub / "captions.tsv").read_text().splitlines()[1:]
    if broken:
        (media / "broken.png").write_bytes(b"not a picture")
        rows.append("broken.png\ta broken file")
    (folder / "captions.tsv").write_text("\n".join(rows) + "\n")
    return folder


def test_real_features_for_photos_clips_and_a_broken_file(tmp_path, assets_dir):
    view = load_caption_folder(_mixed_folder(tmp_path / "mixed", photos=3, broken=True))
    with FeatureStore(tmp_path / "f.sqlite") as store:
        source = FeatureSource(store, Encoders(assets_dir), tmp_path / "cache", assets_dir)
        pairs = source.pairs(view.item_captions(), FeatureNeeds(True, True, True, "minilm", 4))
    assert "broken.png" not in pairs.files and len(pairs.files) == 5
    clips = [f.endswith(".gif") for f in pairs.files]
    assert pairs.visual.is_clip.tolist() == clips
    assert pairs.visual.local.shape == (3, 49, 1280) and pairs.visual.frames.shape == (2, 4, 1280)
    assert pairs.visual.frame_mask.all()
    assert len(pairs.captions) == 10 and pairs.text.sentence.shape == (10, 384)
    assert pairs.text.offsets[-1] == len(pairs.text.tokens)


def test_clips_train_as_the_still_of_their_mean_frame_when_the_config_says_stills(tmp_path, assets_dir):
    """clip_input "stills" (issue #41): a GIF reaches the image encoder as a photo whose pooled feature is its
    mean frame and whose regions repeat it, as the engine scores a clip whose video branch never learnt."""
    view = load_caption_folder(_mixed_folder(tmp_path / "mixed", photos=2))
    with FeatureStore(tmp_path / "f.sqlite") as store:
        source = FeatureSource(store, Encoders(assets_dir), tmp_path / "cache", assets_dir)
        video = source.pairs(view.item_captions(), FeatureNeeds(True, False, True, "minilm", 4))
        stills = source.pairs(view.item_captions(), FeatureNeeds(True, False, True, "minilm", 4,
                                                                 clips_as_stills=True))
    gifs = np.array([f.endswith(".gif") for f in stills.files])
    assert video.visual.is_clip.tolist() == gifs.tolist() and not stills.visual.is_clip.any()
    assert stills.visual.local.shape == (4, 49, 1280) and stills.visual.frames.shape[0] == 0
    np.testing.assert_array_equal(stills.visual.pooled, video.visual.pooled)
    for row in np.flatnonzero(gifs):
        np.testing.assert_array_equal(stills.visual.local[row], np.repeat(stills.visual.pooled[row][None], 49, 0))


def test_sparse_training_data_pairs_unannotated_items_with_pseudo_captions(tmp_path, assets_dir):
    folder = make_toy_photo_folder(tmp_path / "toy", 10, seed=2, dev_fraction=0.2).root
    with FeatureStore(tmp_path / "f.sqlite") as store:
        source = FeatureSource(store, Encoders(assets_dir), tmp_path / "cache", assets_dir)
        data = load_training_data(Path(folder), "train", "dev", SparseConfig(0.5, 1, 0),
                                  FeatureNeeds(True, True, False, "glove", 8), source, with_pseudo=True)
    assert data.train.n_items == 4 and len(data.train.captions) == 4  # half of 8, one caption each
    assert data.pseudo is not None and data.pseudo.n_items == 4 and len(data.pseudo.captions) == 4
    assert all(caption for caption in data.pseudo.captions)
    assert not set(data.pseudo.files) & set(data.train.files)
    assert data.val.n_items == 2 and len(data.val.captions) == 4


def test_pseudo_captions_carried_over_from_annotated_look_alikes_are_their_captions(tmp_path, assets_dir):
    folder = make_toy_photo_folder(tmp_path / "toy", 10, seed=2, dev_fraction=0.2).root
    with FeatureStore(tmp_path / "f.sqlite") as store:
        source = FeatureSource(store, Encoders(assets_dir), tmp_path / "cache", assets_dir)
        data = load_training_data(Path(folder), "train", "dev", SparseConfig(0.5, 1, 0),
                                  FeatureNeeds(True, True, False, "glove", 8), source, with_pseudo=True,
                                  pseudo_captions="neighbours")
        own = source.text(data.pseudo.captions, FeatureNeeds(True, True, False, "glove", 8))
    assert data.pseudo is not None and data.pseudo.n_items == 4 and len(data.pseudo.captions) == 4
    assert set(data.pseudo.captions) <= set(data.train.captions)  # a person's caption of a look-alike
    assert not set(data.pseudo.files) & set(data.train.files)
    np.testing.assert_array_equal(data.pseudo.text.offsets, own.offsets)  # the features of those very captions
    np.testing.assert_array_equal(data.pseudo.text.tokens, own.tokens)


def test_a_sparse_epoch_repeats_its_pairs_to_the_full_corpus_length():
    pairs = _pairs_for_batching("pppppp", 2)  # 6 annotated items of a split of 30
    plain = epoch_batches(pairs, epoch=0, seed=0, batch_size=4, per_item=1)
    long = epoch_batches(pairs, epoch=0, seed=0, batch_size=4, per_item=1, min_units=30)
    assert sum(map(len, plain)) == 6
    flat = np.concatenate(long)
    assert len(flat) == 30  # 5 fresh draws of one caption per item
    assert np.bincount(pairs.caption_item[flat], minlength=6).tolist() == [5] * 6
    assert sum(map(len, epoch_batches(pairs, epoch=0, seed=0, batch_size=4, per_item=1, min_units=3))) == 6
