"""Pseudo captions carried over from annotated look-alikes (trainer.pseudocaptions)."""

from __future__ import annotations

import numpy as np
import pytest

from trainer.pseudocaptions import consensus_captions, nearest_annotated


def _unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def test_nearest_annotated_finds_the_look_alikes_nearest_first() -> None:
    rng = np.random.default_rng(0)
    annotated = rng.normal(size=(40, 16)).astype(np.float32)
    # each un-annotated item is a small change of annotated item 3 * j
    unannotated = annotated[[0, 3, 6, 9]] + 0.05 * rng.normal(size=(4, 16)).astype(np.float32)
    items, likeness = nearest_annotated(annotated, unannotated, k=3)
    assert items.shape == likeness.shape == (4, 3)
    assert items[:, 0].tolist() == [0, 3, 6, 9]
    assert np.all(np.diff(likeness, axis=1) <= 0) and np.all(likeness[:, 0] > 0.9)


def test_nearest_annotated_needs_both_sets() -> None:
    with pytest.raises(ValueError, match="needs annotated"):
        nearest_annotated(np.zeros((0, 4)), np.ones((2, 4)))


def test_the_consensus_caption_agrees_with_the_look_alikes_not_the_odd_one_out() -> None:
    dog, beach, odd = np.eye(3)[0], np.eye(3)[1], np.eye(3)[2]
    # item 0: two captions about a dog and one odd caption; item 1: a dog; item 2: a beach
    sentences = _unit(np.stack([dog + 0.1 * odd, odd, dog, dog + 0.05 * beach, beach]))
    caption_item = np.array([0, 0, 0, 1, 2])
    chosen = consensus_captions(np.array([[0, 1], [2, 0]]), np.array([[0.9, 0.8], [0.9, 0.1]], np.float32),
                                caption_item, sentences)
    assert chosen[0] in (0, 2, 3)  # a dog caption, never the odd one
    assert chosen[1] == 4  # the near beach item's caption; the dog item is barely alike
    # two candidates: the nearer item's caption wins, not the one its far neighbour happens to resemble
    assert consensus_captions(np.array([[2, 1]]), np.array([[0.9, -0.5]], np.float32), caption_item,
                              sentences).tolist() == [4]


def test_regional_captions_decode_each_file_once_and_keep_what_failed_as_none(tmp_path) -> None:
    from types import SimpleNamespace

    from trainer.pseudocaptions import regional_captions

    calls: list[list[str]] = []

    def extract(paths):
        calls.append([p.name for p in paths])
        return [ValueError("cannot decode") if p.name == "bad.jpg"
                else SimpleNamespace(semantics=SimpleNamespace(caption=f"black dog ({p.stem})")) for p in paths]

    files = [tmp_path / n for n in ("a.jpg", "bad.jpg", "b.jpg")]
    cache = tmp_path / "cache" / "pseudo.json"
    first = regional_captions(files, ["ha", "hbad", "hb"], extract, cache, batch=2)
    assert first == ["black dog (a)", None, "black dog (b)"] and calls == [["a.jpg", "bad.jpg"], ["b.jpg"]]
    again = regional_captions(files[:1] + files[2:], ["ha", "hb"], extract, cache)
    assert again == ["black dog (a)", "black dog (b)"] and len(calls) == 2  # from the cache, nothing decoded
