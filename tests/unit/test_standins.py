"""The encoders' stand-in (tests/standins.py) behaves as the real encoders do where the engine reads them: the same
outputs of the same kinds and shapes (but for its feature and class counts), the same masks, normalisation and
unknown words; and what it sees is plain enough for a test to know what a search must find."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.features.encoders import Encoders
from tests.standins import COLOURS, FIRST_CLASS, StandinEncoders, draw_shape


def pictures(size: int) -> np.ndarray:
    """A red circle and a blue square, at the backbone's input size (uint8 RGB)."""
    return np.stack([np.asarray(draw_shape(COLOURS[c], s).resize((size, size)))
                     for c, s in (("red", "circle"), ("blue", "square"))])


def test_the_backbone_outputs_are_the_real_ones_in_kind_shape_and_meaning(assets_dir: Path) -> None:
    real_backbone, standin = Encoders(assets_dir).backbone, StandinEncoders().backbone
    real, fake = real_backbone(pictures(real_backbone.image_size)), standin(pictures(standin.image_size))
    for name in ("local", "pooled", "probs", "region_max", "region_best", "region_top_ids", "region_top_probs"):
        a, b = getattr(real, name), getattr(fake, name)
        assert a.ndim == b.ndim and a.dtype.kind == b.dtype.kind and a.shape[:-1] == b.shape[:-1], name
    assert fake.local.shape[1] == 49 and fake.region_top_ids.shape[1:] == real.region_top_ids.shape[1:] == (49, 3)
    np.testing.assert_allclose(fake.pooled, fake.local.mean(axis=1), rtol=1e-5)  # the regions' mean, as there
    np.testing.assert_allclose(real.pooled, real.local.mean(axis=1), rtol=1e-3, atol=1e-4)
    for out in (real, fake):
        np.testing.assert_allclose(out.probs.sum(axis=1), 1.0, rtol=1e-4)  # a softmax
        assert (out.region_max <= 1.0 + 1e-6).all() and ((out.region_best >= 0) & (out.region_best < 49)).all()
        assert (np.diff(out.region_top_probs, axis=-1) <= 1e-6).all()  # each region's classes, best first
    names = StandinEncoders().class_names
    assert len(names) == fake.probs.shape[1] and fake.probs.argmax(axis=1).tolist() == [
        names.index("red circle"), names.index("blue square")]
    assert all(i >= FIRST_CLASS for i in fake.region_top_ids.ravel())  # never an unused class


@pytest.mark.parametrize("kind", ["minilm", "glove"])
def test_the_text_encoders_give_what_the_real_ones_give(assets_dir: Path, kind: str) -> None:
    texts = ["a red circle on a white table", "blorf"]
    real_encoder, standin = (getattr(e, kind) for e in (Encoders(assets_dir), StandinEncoders()))
    real, fake = real_encoder.encode(texts), standin.encode(texts)
    assert fake.vectors.shape[2] == real.vectors.shape[2] == real_encoder.dim == standin.dim
    for out in (real, fake):
        assert out.vectors.dtype == np.float32 and out.mask.dtype == bool and out.mask.shape == out.vectors.shape[:2]
        assert not out.vectors[~out.mask].any()  # zeros past each sentence's length
        assert [len(t) for t in out.tokens] == out.mask.sum(axis=1).tolist()
    if kind == "minilm":
        for out in (real, fake):
            assert out.sentence.shape == (2, real_encoder.dim)
            np.testing.assert_allclose(np.linalg.norm(out.sentence, axis=1), 1.0, rtol=1e-4)
    else:
        assert real.sentence is None and fake.sentence is None
        assert not real.vectors[1].any() and not fake.vectors[1].any()  # an unknown word reaches a model as zeros
    for word in ("red", "circle", "table", "blorf"):
        assert standin.knows(word) == real_encoder.knows(word), word


def test_a_sentence_finds_the_class_it_names() -> None:
    encoders = StandinEncoders()
    sims = encoders.class_embeddings @ encoders.minilm.encode(["a red ball", "a blue box"]).sentence.T
    assert [encoders.class_names[i] for i in sims.argmax(axis=0)] == ["red circle", "blue square"]
