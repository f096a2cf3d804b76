"""Retrieval evaluation of a trained model on cached features.

:func:`evaluate_pairs` encodes every item and caption of a :class:`~trainer.data.PairSet`, builds the
(n_media, n_captions) similarity matrix and reports what ``polyseek evaluate --json`` prints: R@1/5/10,
median / mean rank, nMR and rsum both ways (:func:`engine.trainercontract.metrics.retrieval_report`), R-Precision, the
five-fold 1K protocol when a split has 5K media, and for probabilistic models (PCME) the R@1 per
uncertainty decile with its Spearman correlations.

PCME test-time similarities (PCME §3.2.3, table 1), higher is better, between Gaussians N(mu, diag sigma^2):

- ``mean``: cosine of the means ("mean only");
- ``elk``: log of the expected likelihood kernel, ``log N(mu1; mu2, S1 + S2)`` without its constant,
  ``-1/2 sum_d [(mu1 - mu2)^2 / (s1^2 + s2^2) + log(s1^2 + s2^2)]``;
- ``js``: the Jensen-Shannon divergence has no closed form between Gaussians; its closed-form stand-in is
  the symmetrised KL, ``-(KL(p||q) + KL(q||p)) / 2``;
- ``wasserstein``: minus the squared 2-Wasserstein distance, ``-(||mu1 - mu2||^2 + ||s1 - s2||^2)``;
- ``avg-l2``: minus the mean Euclidean distance over J x J samples;
- ``match-prob``: the Monte-Carlo match probability of eq. 2-3, mean over J x J samples of
  ``sigmoid(-a ||v - t|| + b)``;
- ``csd``: PCME++'s closed-form sampled distance, ``-(||mu1 - mu2||^2 + ||s1^2 + s2^2||_1)``.

Sampled similarities draw each item's J samples once, from a seeded generator, so a matrix computed in
row chunks is one consistent draw and repeated evaluations agree.

The two-branch similarity network scores pairs with its own network; with ``rerank=N`` it re-scores
only the top N candidates of a first-stage ranking (the cosine of a twobranch-embed model, or of its own
branch outputs) in each direction, the way the paper's similarity network is meant to be used.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from engine.trainercontract.events import nan_to_none as nan_to_none  # the trainer's callers import it here
from engine.trainercontract.metrics import (
    five_fold_1k,
    r_precision,
    ranks_i2t,
    ranks_t2i,
    recall_by_uncertainty_decile,
    retrieval_report,
)
from trainer.data import PairSet, TextFeatures, VisualFeatures
from trainer.methods import EncoderOutput, RetrievalModel
from trainer.methods.functional import cosine_matrix
from trainer.methods.pcme import PCMEModel

SIMILARITIES = ("default", "mean", "elk", "js", "wasserstein", "avg-l2", "match-prob", "csd")
PCME_DEFAULT_SIMILARITY = "match-prob"  # PCME's choice at test time (§4.3, table 1)
PCMEPP_DEFAULT_SIMILARITY = "csd"  # a model trained on PCME++'s closed-form distance ranks by it
ENCODE_BATCH = 256
CHUNK_ELEMENTS = 2 ** 25  # floats in one broadcast block of a similarity chunk (~128 MB)
FOLD = 1000
SAMPLE_SEED = 1234


class EvaluationError(ValueError):
    """An evaluation option does not apply to the model or the data; the message names the option."""


@dataclass
class Encoded:
    """Encodings of every item and caption of a pair set: (N, K, D) embeddings and PCME's log sigmas."""

    visual: EncoderOutput
    text: EncoderOutput


# ------------------------------------------------------------------------------------------ encoding


@torch.no_grad()
def encode_items(model: RetrievalModel, visual: VisualFeatures, device: torch.device,
                 shuffle_frames: np.random.Generator | None = None, batch: int = ENCODE_BATCH) -> EncoderOutput:
    """Encode all items in item order (photos and clips through their own encoders)."""
    n = len(visual)
    emb: Tensor | None = None
    logsigma: Tensor | None = None
    for rows in _kind_batches(visual.is_clip, batch):
        out = model.encode_visual(visual.batch(rows, device, shuffle_frames))
        if emb is None:
            emb = out.emb.new_zeros((n, *out.emb.shape[1:]))
            logsigma = None if out.logsigma is None else out.logsigma.new_zeros((n, *out.logsigma.shape[1:]))
        index = torch.as_tensor(rows, device=device)
        emb[index] = out.emb.float()
        if logsigma is not None and out.logsigma is not None:
            logsigma[index] = out.logsigma.float()
    if emb is None:
        raise EvaluationError("items: nothing to encode")
    return EncoderOutput(emb=emb, logsigma=logsigma)


@torch.no_grad()
def encode_captions(model: RetrievalModel, text: TextFeatures, device: torch.device,
                    batch: int = ENCODE_BATCH) -> EncoderOutput:
    """Encode all captions in order."""
    outs = [model.encode_caption(text.batch(np.arange(s, min(len(text), s + batch)), device))
            for s in range(0, len(text), batch)]
    if not outs:
        raise EvaluationError("captions: nothing to encode")
    logsigma = None if outs[0].logsigma is None else torch.cat([o.logsigma.float() for o in outs])  # type: ignore[union-attr]
    return EncoderOutput(emb=torch.cat([o.emb.float() for o in outs]), logsigma=logsigma)


def _kind_batches(is_clip: np.ndarray, batch: int) -> list[np.ndarray]:
    out = []
    for rows in (np.flatnonzero(~is_clip), np.flatnonzero(is_clip)):
        out += [rows[s:s + batch] for s in range(0, len(rows), batch)]
    return out


def encode_pairs(model: RetrievalModel, pairs: PairSet, device: torch.device,
                 shuffle_frames: np.random.Generator | None = None) -> Encoded:
    """Encode a pair set with ``model`` in eval mode (its training mode is restored after)."""
    was_training = model.training
    model.eval()
    try:
        return Encoded(encode_items(model, pairs.visual, device, shuffle_frames),
                       encode_captions(model, pairs.text, device))
    finally:
        model.train(was_training)


# ------------------------------------------------------------------------------------------ similarity


def resolve_similarity(model: RetrievalModel, name: str) -> str:
    """The similarity ``name`` stands for with this model ('default': the model's own, match probability
    for PCME, the closed-form sampled distance for a PCME trained on it); :class:`EvaluationError` if it
    needs Gaussians the model does not have."""
    if name not in SIMILARITIES:
        raise EvaluationError(f"--similarity: unknown {name!r}; known: {', '.join(SIMILARITIES)}")
    if name == "default":
        if not model.probabilistic:
            return "default"
        closed = getattr(model.config, "match_distance", "sampled") == "csd"
        return PCMEPP_DEFAULT_SIMILARITY if closed else PCME_DEFAULT_SIMILARITY
    if not model.probabilistic:
        raise EvaluationError(f"--similarity {name}: needs a probabilistic model (pcme), "
                              f"not {model.config.method!r}")
    return name


@torch.no_grad()
def similarity_matrix(model: RetrievalModel, encoded: Encoded, similarity: str = "default") -> np.ndarray:
    """(n_media, n_captions) scores, computed in row chunks small enough for memory."""
    similarity = resolve_similarity(model, similarity)
    visual, text = encoded.visual, encoded.text
    n_items, n_caps = visual.emb.shape[0], text.emb.shape[0]
    if similarity == "default":
        score = model.similarity
        # floats per query row: the K x K' head pairs, or the similarity network's hidden layers per pair
        per_pair = visual.emb.shape[1] * text.emb.shape[1]
        if hasattr(model, "pair_scores"):
            per_pair = max([visual.emb.shape[-1], *getattr(model.config, "sim_hidden", ())])
        width = n_caps * per_pair
    else:
        score = _pcme_scorer(model, similarity, visual, text)
        sampled = similarity in ("avg-l2", "match-prob")
        width = n_caps * (_samples(model, similarity) ** 2 if sampled else visual.emb.shape[-1])
    rows = max(1, CHUNK_ELEMENTS // max(1, width))
    out = np.empty((n_items, n_caps), np.float32)
    for start in range(0, n_items, rows):
        stop = min(n_items, start + rows)
        query = EncoderOutput(emb=visual.emb[start:stop],
                              logsigma=None if visual.logsigma is None else visual.logsigma[start:stop])
        out[start:stop] = score(query, text).float().cpu().numpy()
    return out


def _samples(model: RetrievalModel, similarity: str) -> int:
    return int(model.config.num_samples) if similarity in ("avg-l2", "match-prob") else 1  # type: ignore[attr-defined]


def _gaussian(out: EncoderOutput) -> tuple[Tensor, Tensor]:
    assert out.logsigma is not None
    return out.emb[:, 0], out.logsigma[:, 0]


def _pcme_scorer(model: RetrievalModel, name: str, visual: EncoderOutput,
                 text: EncoderOutput) -> Callable[[EncoderOutput, EncoderOutput], Tensor]:
    """A (query chunk, all captions) -> scores function for one PCME similarity (module docstring)."""
    if name in ("avg-l2", "match-prob"):
        j = _samples(model, name)
        generator = torch.Generator(device=visual.emb.device).manual_seed(SAMPLE_SEED)
        mu_v, ls_v = _gaussian(visual)
        mu_t, ls_t = _gaussian(text)
        samples_v = _draw(mu_v, ls_v, j, generator)
        samples_t = _draw(mu_t, ls_t, j, generator)
        offset = {"start": 0}
        scale, shift = model.match_scale.float(), model.match_shift.float()  # type: ignore[union-attr]

        def sampled(query: EncoderOutput, _items: EncoderOutput) -> Tensor:
            start = offset["start"]
            block = samples_v[start:start + query.emb.shape[0]]
            offset["start"] = start + query.emb.shape[0]
            dist = _sample_distances(block, samples_t)
            if name == "avg-l2":
                return -dist.mean((-1, -2))
            # log of the match probability: the same order, but far pairs keep distinct scores instead of
            # all underflowing to a sigmoid of exactly 0 (ties that would push a true match to the last rank)
            logits = (-scale * dist + shift).flatten(-2)
            return torch.logsumexp(torch.nn.functional.logsigmoid(logits), dim=-1) - math.log(logits.shape[-1])

        return sampled
    closed = {"mean": mean_only, "elk": elk, "js": js_like, "wasserstein": wasserstein, "csd": csd}[name]
    return lambda query, items: closed(*_gaussian(query), *_gaussian(items))


def _sample_distances(a: Tensor, b: Tensor) -> Tensor:
    """(Q, N, J, J') Euclidean distances between the samples a (Q, J, D) and b (N, J', D), through one matrix
    product rather than a (Q, N, J, J', D) difference block."""
    q, j, _ = a.shape
    n, k, _ = b.shape
    squared = _squared_distances(a.reshape(q * j, -1), b.reshape(n * k, -1)).reshape(q, j, n, k)
    return (squared.permute(0, 2, 1, 3) + 1e-12).sqrt()


def _draw(mu: Tensor, logsigma: Tensor, j: int, generator: torch.Generator) -> Tensor:
    eps = torch.randn((mu.shape[0], j, mu.shape[-1]), generator=generator, device=mu.device, dtype=mu.dtype)
    return mu[:, None] + logsigma.exp()[:, None] * eps


def mean_only(mu1: Tensor, ls1: Tensor, mu2: Tensor, ls2: Tensor) -> Tensor:
    """Cosine of the means, (Q, N)."""
    return cosine_matrix(mu1, mu2)


def elk(mu1: Tensor, ls1: Tensor, mu2: Tensor, ls2: Tensor) -> Tensor:
    """Log expected likelihood kernel without its constant (module docstring), (Q, N)."""
    var = (2 * ls1).exp()[:, None] + (2 * ls2).exp()[None]
    diff = mu1[:, None] - mu2[None]
    return -0.5 * (diff * diff / var + var.log()).sum(-1)


def js_like(mu1: Tensor, ls1: Tensor, mu2: Tensor, ls2: Tensor) -> Tensor:
    """Minus the symmetrised KL divergence of diagonal Gaussians, (Q, N):
    ``-1/4 sum_d [v1/v2 + v2/v1 - 2 + (mu1 - mu2)^2 (1/v1 + 1/v2)]``."""
    v1, v2 = (2 * ls1).exp()[:, None], (2 * ls2).exp()[None]
    diff = mu1[:, None] - mu2[None]
    return -0.25 * (v1 / v2 + v2 / v1 - 2 + diff * diff * (1 / v1 + 1 / v2)).sum(-1)


def _squared_distances(a: Tensor, b: Tensor) -> Tensor:
    """||a_i - b_j||^2 through one matrix product."""
    return ((a * a).sum(-1)[:, None] + (b * b).sum(-1)[None] - 2 * a @ b.T).clamp(min=0)


def wasserstein(mu1: Tensor, ls1: Tensor, mu2: Tensor, ls2: Tensor) -> Tensor:
    """Minus the squared 2-Wasserstein distance of diagonal Gaussians, (Q, N)."""
    return -(_squared_distances(mu1, mu2) + _squared_distances(ls1.exp(), ls2.exp()))


def csd(mu1: Tensor, ls1: Tensor, mu2: Tensor, ls2: Tensor) -> Tensor:
    """Minus PCME++'s closed-form sampled distance ``||mu1 - mu2||^2 + ||s1^2 + s2^2||_1``, (Q, N)."""
    spread = (2 * ls1).exp().sum(-1)[:, None] + (2 * ls2).exp().sum(-1)[None]
    return -(_squared_distances(mu1, mu2) + spread)


# ------------------------------------------------------------------------------------------ reports


def report_from_scores(scores: np.ndarray, caption_item: np.ndarray) -> dict:
    """The retrieval report of a score matrix plus R-Precision and, for 5K media, the 1K protocol."""
    report = retrieval_report(scores, caption_item)
    report["r_precision"] = r_precision(scores, caption_item)
    n_media = scores.shape[0]
    if n_media >= 5 * FOLD and n_media % FOLD == 0:
        report["five_fold_1k"] = five_fold_1k(scores, caption_item, fold_size=FOLD)
    return report


def uncertainty_report(model: RetrievalModel, encoded: Encoded, scores: np.ndarray,
                       caption_item: np.ndarray) -> dict:
    """R@1 per uncertainty decile (PCME fig. 6) of media queries (i2t) and caption queries (t2i)."""
    item_sigma = PCMEModel.uncertainty(encoded.visual).cpu().numpy()
    caption_sigma = PCMEModel.uncertainty(encoded.text).cpu().numpy()
    has_caption = np.bincount(caption_item, minlength=scores.shape[0]) > 0
    out = {}
    for way, ranks, sigma in (("i2t", ranks_i2t(scores, caption_item), item_sigma[has_caption]),
                              ("t2i", ranks_t2i(scores, caption_item), caption_sigma)):
        out[way] = recall_by_uncertainty_decile(ranks, sigma, min(10, len(ranks))).as_dict()
    return out


def evaluate_pairs(model: RetrievalModel, pairs: PairSet, device: torch.device, similarity: str = "default",
                   shuffle_frames: np.random.Generator | None = None, uncertainty: bool = True) -> dict:
    """The full report of ``model`` on ``pairs`` (module docstring)."""
    name = resolve_similarity(model, similarity)
    encoded = encode_pairs(model, pairs, device, shuffle_frames)
    scores = similarity_matrix(model, encoded, name)
    report = report_from_scores(scores, pairs.caption_item)
    report["similarity"] = _similarity_label(model, name)
    if model.probabilistic and uncertainty:
        report["r1_by_uncertainty_decile"] = uncertainty_report(model, encoded, scores, pairs.caption_item)
    return report


def _similarity_label(model: RetrievalModel, name: str) -> str:
    if name != "default":
        return name
    return model.similarity_kind


def quick_rsum(model: RetrievalModel, pairs: PairSet, device: torch.device,
               distractors: PairSet | None = None) -> dict:
    """The retrieval report used for validation while training: the model's own similarity (PCME: the
    cosine of the means, cheap and deterministic), no extras. ``distractors``: items each caption's item is
    also ranked among (text-to-item only; :func:`engine.trainercontract.metrics.retrieval_report`)."""
    encoded = encode_pairs(model, pairs, device)
    name = "mean" if model.probabilistic else "default"
    scores = similarity_matrix(model, encoded, name)
    others = None
    if distractors is not None and distractors.n_items:
        was_training = model.training
        model.eval()
        try:
            visual = encode_items(model, distractors.visual, device)
        finally:
            model.train(was_training)
        others = similarity_matrix(model, Encoded(visual, encoded.text), name)
    return retrieval_report(scores, pairs.caption_item, distractors=others)


# ------------------------------------------------------------------------------------------ re-ranking


def rerank_report(model: RetrievalModel, pairs: PairSet, device: torch.device, top_n: int,
                  first_stage: np.ndarray | None = None) -> dict:
    """Two-stage retrieval with the two-branch similarity network: in each direction the top ``top_n``
    candidates of ``first_stage`` (default: the cosine of the model's own branch outputs) are re-scored by
    the network and placed, in its order, above every other candidate."""
    if not hasattr(model, "pair_scores"):
        raise EvaluationError(f"--rerank: only twobranch-sim models re-rank, not {model.config.method!r}")
    if top_n < 1:
        raise EvaluationError(f"--rerank: must be at least 1, got {top_n}")
    encoded = encode_pairs(model, pairs, device)
    visual, text = encoded.visual.emb[:, 0], encoded.text.emb[:, 0]
    if first_stage is None:
        first_stage = cosine_matrix(visual, text).cpu().numpy()
    if first_stage.shape != (visual.shape[0], text.shape[0]):
        raise EvaluationError(f"--candidates: its scores have shape {first_stage.shape}, expected "
                              f"{(visual.shape[0], text.shape[0])}")
    score_pairs = _pair_scorer(model, visual, text)
    i2t = _reranked(first_stage, top_n, lambda rows, cols: score_pairs(rows, cols))
    t2i = _reranked(first_stage.T, top_n, lambda rows, cols: score_pairs(cols, rows)).T
    by_i2t = retrieval_report(i2t, pairs.caption_item)
    by_t2i = retrieval_report(t2i, pairs.caption_item)
    report = dict(by_i2t)
    report["t2i"] = by_t2i["t2i"]
    report["rsum"] = float(sum(report["i2t"][f"r{k}"] + report["t2i"][f"r{k}"] for k in (1, 5, 10)))
    report["similarity"] = f"network, re-ranking the top {top_n}"
    return report


def _pair_scorer(model: RetrievalModel, visual: Tensor, text: Tensor) -> Callable[[np.ndarray, np.ndarray],
                                                                                  np.ndarray]:
    @torch.no_grad()
    def score(rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        out = []
        for start in range(0, len(rows), 65536):
            r = torch.as_tensor(rows[start:start + 65536], device=visual.device)
            c = torch.as_tensor(cols[start:start + 65536], device=visual.device)
            out.append(model.pair_scores(visual[r], text[c]).float().cpu().numpy())  # type: ignore[operator]
        return np.concatenate(out) if out else np.zeros(0, np.float32)

    return score


def _reranked(first: np.ndarray, top_n: int, score: Callable[[np.ndarray, np.ndarray], np.ndarray]
              ) -> np.ndarray:
    """Per row, the top ``top_n`` columns of ``first`` get ``lift + network score``, above all the rest."""
    n = min(top_n, first.shape[1])
    top = np.argpartition(-first, n - 1, axis=1)[:, :n]
    rows = np.repeat(np.arange(first.shape[0]), n)
    rescored = score(rows, top.ravel())
    out = first.astype(np.float32).copy()
    lift = float(first.max()) + float(np.abs(rescored).max(initial=0.0)) + 1.0  # lift + score > first.max()
    out[rows, top.ravel()] = lift + rescored
    return out


