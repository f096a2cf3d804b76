"""Trainer evaluation: PCME test-time similarities against naive references, chunking, reports, re-ranking."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.distributions import MultivariateNormal, Normal, kl_divergence

from trainer import evaluation
from trainer.data import PairSet, TextFeatures, VisualFeatures
from trainer.evaluation import (
    Encoded,
    EvaluationError,
    _reranked,
    csd,
    elk,
    encode_pairs,
    evaluate_pairs,
    js_like,
    mean_only,
    report_from_scores,
    rerank_report,
    resolve_similarity,
    similarity_matrix,
    wasserstein,
)
from trainer.methods import EncoderOutput, build_config, build_model

torch.set_num_threads(1)
CPU = torch.device("cpu")


def gaussians(n: int, d: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    mu = torch.nn.functional.normalize(torch.randn(n, d, generator=g), dim=-1)
    return mu, 0.3 * torch.randn(n, d, generator=g) - 1.0


def fake_pairs(config, n_items: int, per_item: int, seed: int = 0, clips: int = 0) -> PairSet:
    """Random features with the test preset's sizes: ``clips`` of the items are clips, the rest photos."""
    rng = np.random.default_rng(seed)
    c, r, w, s = config.image_dim, config.image_regions, config.word_dim, config.sentence_dim
    is_clip = np.arange(n_items) >= n_items - clips
    kind_row = np.zeros(n_items, np.int64)
    kind_row[~is_clip], kind_row[is_clip] = np.arange((~is_clip).sum()), np.arange(is_clip.sum())
    visual = VisualFeatures(is_clip, kind_row, rng.normal(size=(n_items, c)).astype(np.float16),
                            rng.normal(size=((~is_clip).sum(), r, c)).astype(np.float16),
                            rng.normal(size=(clips, 3, c)).astype(np.float16), np.ones((clips, 3), bool))
    n_caps = n_items * per_item
    lengths = rng.integers(2, 6, n_caps)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    text = TextFeatures(n_caps, w, rng.normal(size=(n_caps, s)).astype(np.float32),
                        rng.normal(size=(offsets[-1], w)).astype(np.float16), offsets)
    return PairSet([f"f{i}" for i in range(n_items)], visual, [f"caption {i}" for i in range(n_caps)],
                   np.repeat(np.arange(n_items), per_item), text)


# ------------------------------------------------------------------------------ closed-form similarities


def test_elk_is_the_log_gaussian_overlap_up_to_a_constant():
    (mu1, ls1), (mu2, ls2) = gaussians(3, 4, 0), gaussians(5, 4, 1)
    got = elk(mu1, ls1, mu2, ls2)
    for i in range(3):
        for j in range(5):
            cov = torch.diag((2 * ls1[i]).exp() + (2 * ls2[j]).exp())
            reference = MultivariateNormal(mu2[j], cov).log_prob(mu1[i]) + 2 * math.log(2 * math.pi)
            assert got[i, j] == pytest.approx(float(reference), rel=1e-5)


def test_js_like_is_minus_the_symmetrised_kl():
    (mu1, ls1), (mu2, ls2) = gaussians(3, 4, 2), gaussians(4, 4, 3)
    got = js_like(mu1, ls1, mu2, ls2)
    for i in range(3):
        for j in range(4):
            p, q = Normal(mu1[i], ls1[i].exp()), Normal(mu2[j], ls2[j].exp())
            reference = -0.5 * (kl_divergence(p, q).sum() + kl_divergence(q, p).sum())
            assert got[i, j] == pytest.approx(float(reference), rel=1e-5)


def test_wasserstein_and_csd_match_their_definitions():
    (mu1, ls1), (mu2, ls2) = gaussians(3, 6, 4), gaussians(2, 6, 5)
    w2, distance = wasserstein(mu1, ls1, mu2, ls2), csd(mu1, ls1, mu2, ls2)
    for i in range(3):
        for j in range(2):
            mean_part = float(((mu1[i] - mu2[j]) ** 2).sum())
            sigma_part = float(((ls1[i].exp() - ls2[j].exp()) ** 2).sum())
            spread = float(((2 * ls1[i]).exp() + (2 * ls2[j]).exp()).sum())
            assert w2[i, j] == pytest.approx(-(mean_part + sigma_part), rel=1e-4, abs=1e-5)
            assert distance[i, j] == pytest.approx(-(mean_part + spread), rel=1e-4, abs=1e-5)


def test_the_closed_forms_prefer_the_same_gaussian():
    mu, ls = gaussians(6, 8, 6)
    for fn in (mean_only, elk, js_like, wasserstein):
        scores = fn(mu, ls, mu, ls)
        assert torch.equal(scores.argmax(1), torch.arange(6)), fn.__name__


# ------------------------------------------------------------------------------ matrices and chunking


@pytest.fixture(scope="module")
def pcme():
    torch.manual_seed(0)
    model = build_model(build_config("pcme", {"text_encoder": "minilm-sentence"}, preset="test")).eval()
    return model, fake_pairs(model.config, 7, 2, seed=1, clips=2)


@pytest.mark.parametrize("name", ["mean", "elk", "js", "wasserstein", "avg-l2", "match-prob", "csd"])
def test_pcme_matrices_do_not_depend_on_chunking(pcme, name, monkeypatch):
    model, pairs = pcme
    encoded = encode_pairs(model, pairs, CPU)
    whole = similarity_matrix(model, encoded, name)
    monkeypatch.setattr(evaluation, "CHUNK_ELEMENTS", 1)  # one item per chunk
    assert whole.shape == (7, 14)
    np.testing.assert_allclose(similarity_matrix(model, encoded, name), whole, rtol=1e-5, atol=1e-6)


def test_match_probability_ranks_far_pairs_without_ties(pcme):
    model, pairs = pcme
    encoded = encode_pairs(model, pairs, CPU)
    scale = model.match_scale.item()
    try:
        with torch.no_grad():
            model.match_scale.fill_(500.0)  # every sigmoid of every pair underflows to exactly 0 in float32
        got = similarity_matrix(model, encoded, "match-prob")
    finally:
        with torch.no_grad():
            model.match_scale.fill_(scale)  # the fixture is shared by the module's tests
    assert np.isfinite(got).all() and len(np.unique(got)) == got.size


def test_match_probability_is_the_mean_sigmoid_over_sample_pairs(pcme):
    model, pairs = pcme
    encoded = encode_pairs(model, pairs, CPU)
    got = similarity_matrix(model, encoded, "match-prob")
    j = model.config.num_samples
    generator = torch.Generator().manual_seed(evaluation.SAMPLE_SEED)
    draws = []
    for side in (encoded.visual, encoded.text):  # same order and generator as the implementation
        mu, ls = side.emb[:, 0], side.logsigma[:, 0]
        draws.append(mu[:, None] + ls.exp()[:, None] * torch.randn(mu.shape[0], j, mu.shape[1], generator=generator))
    v, t = draws
    a, b = model.match_scale.item(), model.match_shift.item()
    for i in (0, 6):
        for c in (0, 13):
            dist = torch.cdist(v[i], t[c])
            expected = float(torch.sigmoid((-a * dist + b).double()).mean().log())  # the log of eq. 2, in float64
            assert got[i, c] == pytest.approx(expected, rel=1e-4, abs=1e-5)
    assert (got <= 0).all()  # log-probabilities


def test_pvse_matrix_is_the_best_head_pair_whatever_the_chunks(monkeypatch):
    torch.manual_seed(1)
    model = build_model(build_config("pvse", {"text_encoder": "minilm-sentence"}, preset="test")).eval()
    pairs = fake_pairs(model.config, 5, 3, seed=2)
    encoded = encode_pairs(model, pairs, CPU)
    reference = model.similarity(encoded.visual, encoded.text).numpy()
    monkeypatch.setattr(evaluation, "CHUNK_ELEMENTS", 1)
    np.testing.assert_allclose(similarity_matrix(model, encoded), reference, rtol=1e-5, atol=1e-6)


def test_items_are_encoded_in_item_order_whatever_their_kind():
    torch.manual_seed(2)
    model = build_model(build_config("vse", {"text_encoder": "minilm-sentence"}, preset="test")).eval()
    pairs = fake_pairs(model.config, 6, 1, seed=3, clips=3)
    encoded = encode_pairs(model, pairs, CPU)
    with torch.no_grad():
        clip = model.encode_visual(pairs.visual.batch([4], CPU)).emb
        photo = model.encode_visual(pairs.visual.batch([1], CPU)).emb
    torch.testing.assert_close(encoded.visual.emb[4], clip[0])
    torch.testing.assert_close(encoded.visual.emb[1], photo[0])


def test_similarity_options_are_checked():
    model = build_model(build_config("vse", {}, preset="test"))
    assert resolve_similarity(model, "default") == "default"
    with pytest.raises(EvaluationError, match="--similarity elk"):
        resolve_similarity(model, "elk")
    with pytest.raises(EvaluationError, match="unknown"):
        resolve_similarity(model, "cosine-ish")
    pcme = build_model(build_config("pcme", {}, preset="test"))
    assert resolve_similarity(pcme, "default") == "match-prob"


# ------------------------------------------------------------------------------ reports


def test_report_of_a_known_tiny_case():
    # 3 media, 2 captions each; caption 3 (of media 1) prefers media 2, everything else is right.
    caption_item = np.array([0, 0, 1, 1, 2, 2])
    scores = np.eye(3)[:, caption_item].astype(np.float32)
    scores[:, 3] = [0.0, 0.5, 0.9]
    report = report_from_scores(scores, caption_item)
    assert report["t2i"]["r1"] == pytest.approx(100 * 5 / 6)
    assert report["i2t"]["r1"] == 100.0  # media 1 still finds its caption 2 first
    assert report["t2i"]["r5"] == report["i2t"]["r5"] == 100.0
    assert report["rsum"] == pytest.approx(100 * 5 / 6 + 500)
    # media 1's row: caption 2 = 1, caption 3 = 0.5, the others 0 -> both of its captions in its top 2
    assert report["r_precision"]["i2t"] == 100.0
    assert report["r_precision"]["t2i"] == pytest.approx(100 * 5 / 6)
    assert "five_fold_1k" not in report


def test_five_fold_protocol_appears_for_five_folds(monkeypatch):
    monkeypatch.setattr(evaluation, "FOLD", 2)
    caption_item = np.repeat(np.arange(10), 2)
    scores = np.random.default_rng(0).normal(size=(10, 20)).astype(np.float32)
    report = report_from_scores(scores, caption_item)
    assert report["five_fold_1k"]["n_folds"] == 5
    assert report["five_fold_1k"]["n_media"] == 2


def test_pcme_report_has_uncertainty_deciles(pcme):
    model, pairs = pcme
    report = evaluate_pairs(model, pairs, CPU)
    assert report["similarity"] == "match-prob"
    curves = report["r1_by_uncertainty_decile"]
    assert sum(curves["i2t"]["counts"]) == 7 and sum(curves["t2i"]["counts"]) == 14
    assert {"r1", "bin_edges", "rho_bins", "rho_queries"} <= set(curves["t2i"])


# ------------------------------------------------------------------------------ re-ranking


def test_reranking_lifts_the_top_candidates_in_network_order():
    first = np.array([[0.9, 0.8, 0.1, 0.0], [0.0, 0.2, 0.3, 0.4]], np.float32)
    network = np.array([[0.0, 5.0, 9.0, 9.0], [1.0, 1.0, -3.0, -2.0]], np.float32)
    out = _reranked(first, 2, lambda rows, cols: network[rows, cols])
    assert list(np.argsort(-out[0])) == [1, 0, 2, 3]  # top 2 of row 0 re-ordered by the network
    assert list(np.argsort(-out[1])) == [3, 2, 1, 0]  # network order among {2, 3}, then the first stage


def test_rerank_of_everything_is_the_network_ranking():
    torch.manual_seed(3)
    model = build_model(build_config("twobranch-sim", {"text_encoder": "minilm-sentence"}, preset="test")).eval()
    pairs = fake_pairs(model.config, 6, 2, seed=4)
    full = evaluate_pairs(model, pairs, CPU)
    reranked = rerank_report(model, pairs, CPU, top_n=12)
    for way in ("i2t", "t2i"):
        assert reranked[way] == pytest.approx(full[way])
    assert reranked["rsum"] == pytest.approx(full["rsum"])
    with pytest.raises(EvaluationError, match="--rerank"):
        rerank_report(build_model(build_config("vse", {}, preset="test")), pairs, CPU, 3)


def test_encoded_record_holds_both_sides(pcme):
    model, pairs = pcme
    encoded = encode_pairs(model, pairs, CPU)
    assert isinstance(encoded, Encoded) and isinstance(encoded.visual, EncoderOutput)
    assert encoded.visual.logsigma.shape == (7, 1, model.config.embed_dim)
    assert encoded.text.emb.shape[0] == 14
