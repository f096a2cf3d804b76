"""A clip's frames pooled into shots (engine/search/shots.py, issue #40): near-identical frames are one view."""

import numpy as np
import pytest

from engine.search.shots import SHOT_COSINE, pooled_distributions, shot_labels, shot_scores


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


def test_a_clip_scores_its_best_shots_mean_and_opens_at_that_shots_best_frame():
    scores = np.array([[0.9, 0.5, 0.6, 0.6],  # a zoom's lucky crop (0.9) in a shot of mean 0.7; a still shot at 0.6
                       [0.3, 0.8, 0.8, 0.8]], np.float32)
    labels = np.array([[0, 0, 1, 1],
                       [0, 1, -1, -1]])  # the second clip has two frames; its last one repeats as padding
    best, frame = shot_scores(scores, labels)
    assert best == pytest.approx([0.7, 0.8])
    assert frame.tolist() == [0, 1]
    alone = shot_scores(np.array([[0.4, 0.9]], np.float32), np.array([[0, 1]]))
    assert alone[0] == pytest.approx([0.9]) and alone[1].tolist() == [1]  # every frame its own shot: the best


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


def test_a_short_clips_repeated_last_frame_belongs_to_no_shot():
    from engine.search.trained import _even_frames, _shot_labels

    a, b = np.eye(2, dtype=np.float32)
    short = np.stack([a, a, b])
    assert _shot_labels(_even_frames(short, 5), len(short)).tolist() == [0, 0, 1, -1, -1]
    many = np.stack([a] * 10 + [b] * 10)  # longer than the sampled count: evenly spread, no padding
    assert _shot_labels(_even_frames(many, 4), len(many)).tolist() == [0, 0, 1, 1]
