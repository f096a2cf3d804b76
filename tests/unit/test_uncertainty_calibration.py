"""PCME's uncertainty read against the model's own validation split (engine.search.readings.calibrated_reading)."""

from __future__ import annotations

import pytest

from engine.search.readings import calibrated_reading

EDGES = [0.01, 0.02, 0.03, 0.04, 0.05]  # four groups


def _curve(r1: list[float], rho: float) -> dict:
    return {"bin_edges": EDGES, "r1": r1, "counts": [10] * len(r1), "rho_bins": rho}


@pytest.mark.parametrize(("value", "group", "r1"), [(0.005, 1, 40), (0.015, 1, 40), (0.025, 2, 30),
                                                     (0.035, 3, 20), (0.045, 4, 10), (0.09, 4, 10)])
def test_the_value_reads_the_r1_of_its_own_uncertainty_group(value: float, group: int, r1: int) -> None:
    text = calibrated_reading(value, _curve([40, 30, 20, 10], -1.0), "photo", "starter-val")
    assert f"{r1} % of the time (uncertainty group {group} of 4" in text
    assert "the most certain group 40 %, the least 10 %" in text
    assert "starter-val, never trained on" in text


def test_it_says_whether_uncertainty_predicted_misses_there() -> None:
    predicted = calibrated_reading(0.025, _curve([40, 30, 20, 10], -0.8), "search", "val")
    assert "more uncertainty meant more misses (Spearman -0.80)" in predicted
    assert "a search this uncertain found its photo first" in predicted
    unrelated = calibrated_reading(0.025, _curve([20, 25, 18, 22], 0.19), "photo", "val")
    assert "did not predict misses (Spearman +0.19)" in unrelated and "not as a chance of error" in unrelated
    some = calibrated_reading(0.025, _curve([30, 25, 28, 20], -0.4), "photo", "val")
    assert "somewhat more misses (Spearman -0.40)" in some


@pytest.mark.parametrize("curve", [None, {}, {"bin_edges": EDGES, "r1": [1.0]}, {"bin_edges": [0.1], "r1": [],
                                                                                  "rho_bins": 0.0},
                                   {"bin_edges": ["x"], "r1": [1.0], "rho_bins": 0.0}])
def test_a_missing_or_malformed_record_reads_nothing(curve) -> None:
    assert calibrated_reading(0.02, curve, "photo", "val") is None


def test_a_record_of_a_few_items_gives_no_figures_as_facts() -> None:
    """#44: after a retrain with 2 held-aside items the inspector said "found first 100 % of the time" and
    "Spearman -1.00" as facts."""
    tiny = {"bin_edges": [0.01, 0.02, 0.03], "r1": [100.0, 0.0], "counts": [1, 1], "rho_bins": -1.0}
    text = calibrated_reading(0.015, tiny, "photo", "held-aside")
    assert "only 2 photos" in text and "too few" in text
    assert "%" not in text and "Spearman" not in text


def test_a_clip_is_read_against_the_photos_of_the_split() -> None:
    """The validation split's items are photos: a GIF's or video's sigma is placed among theirs, and says so."""
    text = calibrated_reading(0.025, _curve([40, 30, 20, 10], -0.8), "clip", "starter-val")
    assert "a photo as uncertain as this clip was found first by one of its captions 30 %" in text
