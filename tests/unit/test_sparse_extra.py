"""Extra-annotated items of a sparse split (an active-learning round): all captions, nothing else changes."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.library.captionfolder import Item
from trainer.sparse import SparseConfig, SparseSplitError, sparse_split


def corpus(n: int, per_item: int = 5) -> list[tuple[Item, list[str]]]:
    return [(Item(f"{i:04d}.jpg", Path(f"/x/{i:04d}.jpg"), "train"),
             [f"caption {j} of {i}" for j in range(per_item)]) for i in range(n)]


def test_extra_items_gain_all_captions_and_the_rest_of_the_split_is_unchanged() -> None:
    data = corpus(60)
    base = sparse_split(data, 0.1, 1, seed=4)
    extra = [item.file for item in base.unannotated[:5]]
    grown = sparse_split(data, 0.1, 1, seed=4, extra_annotated=extra)
    before = {item.file: caps for item, caps in base.annotated}
    after = {item.file: caps for item, caps in grown.annotated}
    assert set(after) == set(before) | set(extra)
    assert all(after[f] == before[f] for f in before)  # the seeded fraction keeps its captions
    own = {item.file: caps for item, caps in data}
    assert all(after[f] == own[f] for f in extra)  # every caption, original order
    assert [i.file for i in grown.unannotated] == [i.file for i in base.unannotated if i.file not in extra]
    assert [item.file for item, _ in grown.annotated] == sorted(after)  # input order kept
    assert grown.n_pairs == base.n_pairs + 5 * 5


def test_an_already_annotated_extra_item_gets_all_its_captions() -> None:
    data = corpus(20)
    base = sparse_split(data, 0.2, 1, seed=0)
    file = base.annotated[0][0].file
    grown = sparse_split(data, 0.2, 1, seed=0, extra_annotated=[file])
    assert len(grown.annotated) == len(base.annotated)
    assert dict((i.file, c) for i, c in grown.annotated)[file] == dict((i.file, c) for i, c in data)[file]


def test_extra_items_work_at_fraction_zero_and_config_keeps_them_as_a_tuple() -> None:
    config = SparseConfig(0.0, None, 0, ["0003.jpg"])
    assert config.extra_annotated == ("0003.jpg",) and hash(config)
    split = sparse_split(corpus(10), 0.0, None, 0, config.extra_annotated)
    assert [item.file for item, _ in split.annotated] == ["0003.jpg"]
    assert len(split.unannotated) == 9


def test_unknown_or_captionless_extra_items_are_refused_by_name() -> None:
    data = corpus(10)
    with pytest.raises(SparseSplitError, match="nope.jpg"):
        sparse_split(data, 0.1, 1, 0, ["nope.jpg"])
    data[2] = (data[2][0], [])
    with pytest.raises(SparseSplitError, match="0002.jpg"):
        sparse_split(data, 0.1, 1, 0, ["0002.jpg"])
    with pytest.raises(SparseSplitError, match="sequence"):
        SparseConfig(0.1, 1, 0, "0001.jpg")  # type: ignore[arg-type]
