"""The A3VSE sparse sampler: fractions, counts, determinism, nesting and disjointness."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from engine.library.captionfolder import CaptionFolder, Item
from trainer.sparse import (
    SparseConfig,
    SparseSplitError,
    add_sparse_arguments,
    sparse_config_from_args,
    sparse_split,
    sparse_split_folder,
)


def corpus(n: int, per_item: int = 5) -> list[tuple[Item, list[str]]]:
    return [(Item(f"{i:04d}.jpg", Path(f"/x/{i:04d}.jpg"), "train"),
             [f"caption {j} of {i}" for j in range(per_item)]) for i in range(n)]


def files(items) -> set[str]:
    return {item.file for item in items}


@pytest.mark.parametrize("fraction,n_captions,expected_items", [
    (0.1, 1, 20), (0.2, 2, 40), (0.5, 5, 100), (1.0, None, 200), (0.0, 1, 0), (0.001, 1, 1)])
def test_counts_follow_fraction_and_captions_per_image(fraction, n_captions, expected_items):
    data = corpus(200)
    split = sparse_split(data, fraction, n_captions, seed=3)
    assert len(split.annotated) == expected_items
    assert len(split.annotated) + len(split.unannotated) == 200
    per_item = 5 if n_captions is None else n_captions
    assert all(len(captions) == per_item for _, captions in split.annotated)
    assert split.n_pairs == expected_items * per_item


def test_disjoint_in_input_order_and_captions_are_the_items_own():
    data = corpus(50)
    split = sparse_split(data, 0.3, 2, seed=0)
    annotated = [item for item, _ in split.annotated]
    assert files(annotated).isdisjoint(files(split.unannotated))
    assert files(annotated) | files(split.unannotated) == files(item for item, _ in data)
    assert [item.file for item in annotated] == sorted(item.file for item in annotated)
    own = dict((item.file, caps) for item, caps in data)
    for item, captions in split.annotated:
        assert len(set(captions)) == 2 and set(captions) <= set(own[item.file])
        assert captions == [c for c in own[item.file] if c in captions]  # original order kept


def test_deterministic_with_seed_and_different_across_seeds():
    data = corpus(100)
    first, again, other = (sparse_split(data, 0.2, 1, seed=s) for s in (7, 7, 8))
    assert first == again
    assert files(i for i, _ in first.annotated) != files(i for i, _ in other.annotated)


def test_nested_across_fractions_and_caption_counts():
    data = corpus(120)
    small, large = sparse_split(data, 0.1, 1, seed=1), sparse_split(data, 0.5, 5, seed=1)
    assert files(i for i, _ in small.annotated) <= files(i for i, _ in large.annotated)
    two = dict((item.file, caps) for item, caps in sparse_split(data, 0.1, 2, seed=1).annotated)
    for item, captions in small.annotated:
        assert set(captions) <= set(two[item.file])


def test_items_without_captions_are_never_annotated():
    data = corpus(10) + [(Item("bare.gif", Path("/x/bare.gif"), "train"), [])]
    split = sparse_split(data, 1.0, 3, seed=0)
    assert "bare.gif" in files(split.unannotated) and len(split.annotated) == 10
    short = sparse_split(corpus(4, per_item=2), 1.0, 5, seed=0)
    assert all(len(caps) == 2 for _, caps in short.annotated)  # fewer captions than asked: keep them all


def test_bad_settings_are_rejected():
    with pytest.raises(SparseSplitError, match="fraction 1.5"):
        sparse_split(corpus(3), 1.5, 1, seed=0)
    with pytest.raises(SparseSplitError, match="at least 1"):
        SparseConfig(0.5, 0)


def test_folder_and_command_line_helpers():
    items = [Item(f"{i}.jpg", Path(f"/x/{i}.jpg"), "train") for i in range(4)]
    folder = CaptionFolder(Path("/x"), Path("/x/images"), items, [(0, "a"), (0, "b"), (2, "c"), (3, "d")])
    parser = argparse.ArgumentParser()
    add_sparse_arguments(parser)
    args = parser.parse_args(["--annotated-fraction", "0.5", "--captions-per-image", "1"])
    config = sparse_config_from_args(args)
    assert config == SparseConfig(0.5, 1, 0)
    split = sparse_split_folder(folder, config)
    assert len(split.annotated) == 2 and split.n_pairs == 2  # 0.5 x 3 captioned items, rounded half up
    assert "1.jpg" in files(split.unannotated)
