"""A clip's frames pooled into shots (engine/search/shots.py, issue #40): near-identical frames are one view."""

import numpy as np
import pytest

from engine.search.shots import SHOT_COSINE, pooled_distributions, pooled_shots, shot_labels


def _unit(*vectors):
    v = np.array(vectors, np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_a_slideshow_is_one_shot_per_photo():
    a, b, c = np.eye(3, dtype=np.float32)
    frames = np.stack([a, a, b, b, b, c])
    assert shot_labels(frames).tolist() == [0, 0, 1, 1, 1, 2]


def test_a_slow_zoom_is_one_shot_and_a_drift_past_the_threshold_starts_another():
    # each frame turns 5 degrees further from the first: a zoom's crops stay near it for a while
    angles = np.radians(np.arange(0, 100, 5))
    frames = np.stack([np.cos(angles), np.sin(angles), np.zeros_like(angles)], axis=1)
    labels = shot_labels(frames)
    limit = np.degrees(np.arccos(SHOT_COSINE))
    first_cut = int(np.ceil(limit / 5 + 1e-9))  # the first frame whose angle to frame 0 is past the threshold
    assert labels[:first_cut].tolist() == [0] * first_cut
    assert labels[first_cut] == 1
    assert np.all(np.diff(labels) >= 0)  # shots run in time order
    assert shot_labels(frames, threshold=-1.0).max() == 0  # everything one shot
    assert shot_labels(frames, threshold=1.01).tolist() == list(range(len(frames)))  # every frame its own


def test_a_single_frame_and_no_frames():
    assert shot_labels(np.ones((1, 4))).tolist() == [0]
    assert shot_labels(np.zeros((0, 4))).tolist() == []


def test_a_shot_is_the_mean_of_its_frames_shown_by_the_frame_nearest_it():
    frames = _unit([1, 0.1, 0], [1, 0, 0], [1, -0.3, 0], [0, 0, 1])
    labels = np.array([0, 0, 0, 1])
    means, representative = pooled_shots(frames, labels)
    assert means.shape == (2, 3)
    assert means[0] == pytest.approx(frames[:3].mean(axis=0))
    assert means[1] == pytest.approx(frames[3])
    assert representative.tolist() == [1, 3]  # frame 1 lies nearest the first shot's mean


def test_a_shots_class_distribution_is_the_mean_of_its_frames():
    per_frame = [(np.array([3, 5]), np.array([0.5, 0.5], np.float32)),
                 (np.array([3, 7]), np.array([0.9, 0.1], np.float32)),
                 (np.array([9, 1]), np.array([1.0, 0.0], np.float32))]
    pooled = pooled_distributions(per_frame, np.array([0, 0, 1]), k=2)
    assert len(pooled) == 2
    ids, probs = pooled[0]
    assert ids.tolist() == [3, 5]  # 3: (0.5 + 0.9) / 2 = 0.7; 5: 0.25; 7: 0.05 falls out of the top 2
    assert probs == pytest.approx(np.array([0.7, 0.25]) / 0.95)
    assert pooled[1][0][0] == 9 and pooled[1][1][0] == pytest.approx(1.0)


def test_the_ranking_scores_a_clips_shots_and_shows_the_frame_nearest_each():
    from engine.search.trained import _shots

    a, b = np.eye(2, dtype=np.float32)
    means, shown = _shots(np.stack([a, a, b]), 4)  # two frames of one picture, then another picture
    assert means.shape == (4, 2)
    assert means[0] == pytest.approx(a) and all(m == pytest.approx(b) for m in means[1:])  # the last shot repeats
    assert shown.tolist() == [0, 2, 2, 2]
