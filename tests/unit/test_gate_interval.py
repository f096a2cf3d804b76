"""The gate's paired-bootstrap interval on a difference of rsum (engine/loop/interval.py, issue #43): on constructed
per-query ranks it says "better", "worse" or "cannot tell" as the ranks do, narrows as items grow, and repeats
itself for a seed."""

from __future__ import annotations

import numpy as np
import pytest

from engine.loop.interval import RESAMPLES, RsumInterval, paired_rsum_interval, report_interval
from engine.trainercontract.metrics import retrieval_report


def _ranks(i2t: list[int], t2i: list[int], captions_per_item: int = 2) -> dict:
    """Per-query ranks of ``len(i2t)`` items with ``captions_per_item`` captions each, in item order."""
    caption_media = np.repeat(np.arange(len(i2t)), captions_per_item).tolist()
    assert len(t2i) == len(caption_media)
    return {"i2t": list(i2t), "t2i": list(t2i), "caption_media": caption_media}


def _mixed(items: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return _ranks(rng.integers(1, 20, items).tolist(), rng.integers(1, 20, 2 * items).tolist())


def test_identical_models_cannot_be_told_apart():
    ranks = _mixed(24)
    interval = paired_rsum_interval(ranks, ranks)
    assert interval.difference == 0 and interval.low <= 0 <= interval.high
    assert interval.verdict == "cannot tell"
    assert (interval.items, interval.resamples) == (24, RESAMPLES)


def test_a_model_that_wins_on_every_item_is_better_and_a_loser_worse():
    old = _ranks([20] * 24, [20] * 48)  # nothing in the top 10
    new = _ranks([1] * 24, [3] * 48)  # every query in the top 5
    better = paired_rsum_interval(old, new)
    assert better.verdict == "better" and 0 < better.low <= better.difference <= better.high
    assert better.difference == pytest.approx(300 + 200)  # i2t R@1/5/10 all 100; t2i R@5/10 100
    worse = paired_rsum_interval(new, old)
    assert worse.verdict == "worse" and worse.high < 0
    assert worse.difference == pytest.approx(-better.difference)


def test_a_small_gain_on_few_items_cannot_tell_and_the_interval_narrows_as_items_grow():
    def pair(items: int) -> tuple[dict, dict]:
        old = _mixed(items, seed=1)
        new = {**old, "t2i": list(old["t2i"]), "i2t": list(old["i2t"])}
        for i in range(0, items, 4):  # a quarter of the items: their item-to-text query climbs to first
            new["i2t"][i] = 1
        return old, new

    widths = []
    for items in (24, 96, 384):
        interval = paired_rsum_interval(*pair(items))
        widths.append(interval.high - interval.low)
    assert widths[0] > widths[1] > widths[2]
    assert widths[0] > 2 * widths[2]  # about sqrt(16) = 4 times narrower


def test_the_interval_repeats_itself_for_a_seed():
    old, new = _mixed(30, seed=2), _mixed(30, seed=3)
    first, again = paired_rsum_interval(old, new), paired_rsum_interval(old, new)
    assert first == again
    assert paired_rsum_interval(old, new, seed=7) != first  # the seed is what fixes the resamples


def test_the_difference_is_the_reports_rsum_difference_and_items_carry_their_captions():
    rng = np.random.default_rng(4)
    c2m = np.array([0, 0, 0, 1, 2, 2, 3, 4, 4, 5])  # uneven captions per item; item 6 has none
    old_scores, new_scores = rng.random((7, 10)), rng.random((7, 10))
    new_scores[c2m, np.arange(10)] += 0.4
    old = retrieval_report(old_scores, c2m, per_query=True)
    new = retrieval_report(new_scores, c2m, per_query=True)
    interval = report_interval(old, new)
    assert isinstance(interval, RsumInterval) and interval.items == 6  # the captioned items are resampled
    assert interval.difference == pytest.approx(new["rsum"] - old["rsum"])
    assert interval.text().startswith(f"difference {new['rsum'] - old['rsum']:+.0f} (90 % interval ")
    assert interval.as_dict()["verdict"] == interval.verdict


def test_without_per_query_ranks_or_on_different_sets_there_is_no_interval():
    scores, c2m = np.eye(4), np.arange(4)
    plain = retrieval_report(scores, c2m)
    assert "ranks" not in plain  # the evaluate --json record is unchanged
    ranked = retrieval_report(scores, c2m, per_query=True)
    assert ranked["ranks"] == {"t2i": [1, 1, 1, 1], "i2t": [1, 1, 1, 1], "caption_media": [0, 1, 2, 3]}
    assert report_interval(plain, ranked) is None and report_interval(None, ranked) is None
    other = retrieval_report(np.eye(4)[:, :3], np.arange(3), per_query=True)
    assert report_interval(ranked, other) is None
    with pytest.raises(ValueError, match="same captions"):
        paired_rsum_interval(ranked["ranks"], other["ranks"])
