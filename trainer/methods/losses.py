"""Losses of the five papers as small modules that return named terms plus ``'total'``.

Primitive losses take tensors and are tested against loop-by-loop references; the method criteria at the
bottom take a model's :class:`PairOutput` and the :class:`PairBatch` and combine the primitives with the
config's weights. No loss holds learnable parameters: those live in the models.

Conventions: a similarity matrix ``sims`` (B, B) has visual items on rows and captions on columns, row i
matching column i; ``positives`` (B, B) marks every (visual, caption) match, so that other captions of
the same photo are never used as negatives.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from trainer.methods.a3vse import DOMAIN_PAIRS
from trainer.methods.config import (
    A3VSEConfig,
    InstanceConfig,
    PCMEConfig,
    PVSEConfig,
    TwoBranchEmbedConfig,
    TwoBranchSimConfig,
    VSEConfig,
)
from trainer.methods.functional import (
    cosine_matrix,
    euclidean_distances,
    max_cosine_matrix,
    rbf_kernel,
    squared_distances,
)
from trainer.methods.interface import MethodInputError, PairBatch, PairOutput, match_matrix

Terms = dict[str, Tensor]


def _eye_positives(sims: Tensor, positives: Tensor | None) -> Tensor:
    if positives is None:
        return torch.eye(sims.shape[0], dtype=torch.bool, device=sims.device)
    if positives.shape != sims.shape:
        raise MethodInputError(f"positives: expected shape {tuple(sims.shape)}, got {tuple(positives.shape)}")
    return positives


class TripletLoss(nn.Module):
    """Hinge triplet ranking loss in both directions (VSE++; A3VSE eq. 2; Zheng et al. eq. 4).

    For anchor visual i: ``[margin - s(i, i) + s(i, j)]_+`` over negative captions j; for anchor caption
    j: ``[margin - s(j, j) + s(i, j)]_+`` over negative visuals i. ``hardest=True`` keeps the hardest
    negative per anchor and averages over anchors (VSE++ max violation, A3VSE eq. 2); otherwise every
    negative is summed and divided by B^2 (PVSE eq. 6's 1/N^2 normalisation).
    """

    def __init__(self, margin: float, hardest: bool = True) -> None:
        super().__init__()
        self.margin, self.hardest = margin, hardest

    def forward(self, sims: Tensor, positives: Tensor | None = None) -> Terms:
        negatives = ~_eye_positives(sims, positives)
        diagonal = sims.diagonal()
        cost_i2t = (self.margin - diagonal[:, None] + sims).clamp(min=0) * negatives
        cost_t2i = (self.margin - diagonal[None, :] + sims).clamp(min=0) * negatives
        if self.hardest:
            i2t, t2i = cost_i2t.amax(1).mean(), cost_t2i.amax(0).mean()
        else:
            scale = sims.shape[0] ** 2
            i2t, t2i = cost_i2t.sum() / scale, cost_t2i.sum() / scale
        return {"i2t": i2t, "t2i": t2i, "total": i2t + t2i}


class MILLoss(nn.Module):
    """PVSE's multiple-instance ranking loss (eq. 6): the triplet loss on ``max_{p,q} cos(z_ip, z_jq)``,
    the best of the K x K embedding pairs, so only one pair of a matching item needs to align."""

    def __init__(self, margin: float, hardest: bool = True) -> None:
        super().__init__()
        self.triplet = TripletLoss(margin, hardest)

    def forward(self, visual: Tensor, text: Tensor, positives: Tensor | None = None) -> Terms:
        return self.triplet(max_cosine_matrix(visual, text), positives)


class DiversityLoss(nn.Module):
    """PVSE eq. 7: ``(||G^x - I|| + ||G^y - I||) / K^2`` with G the Gram matrix of the L2-normalised
    locally-guided features of one item (Frobenius norm), averaged over the batch. It is 0 when the K
    features are orthogonal and ``sqrt(K^2 - K) / K^2`` per modality when they are identical."""

    def forward(self, visual_local: Tensor, text_local: Tensor) -> Terms:
        visual, text = self._one(visual_local), self._one(text_local)
        return {"visual": visual, "text": text, "total": visual + text}

    @staticmethod
    def _one(local: Tensor) -> Tensor:
        unit = F.normalize(local, dim=-1)
        gram = unit @ unit.transpose(1, 2)
        eye = torch.eye(local.shape[1], dtype=local.dtype, device=local.device)
        return torch.linalg.matrix_norm(gram - eye).mean() / local.shape[1] ** 2


class MMDLoss(nn.Module):
    """PVSE's domain discrepancy loss: squared MMD with an RBF kernel between all K N visual and K N text
    embeddings, ``(sum k(x, x') - 2 sum k(x, y) + sum k(y, y')) / (K^2 N^2)``."""

    def __init__(self, sigma: float = 1.0) -> None:
        super().__init__()
        self.sigma = sigma

    def forward(self, visual: Tensor, text: Tensor) -> Terms:
        x, y = visual.flatten(0, -2), text.flatten(0, -2)
        value = (rbf_kernel(x, x, self.sigma).mean() - 2 * rbf_kernel(x, y, self.sigma).mean()
                 + rbf_kernel(y, y, self.sigma).mean())
        return {"total": value}


def soft_contrastive_nll(logits: Tensor, matched: Tensor) -> Tensor:
    """PCME eq. 1-2 for a batch of pairs: logits (..., S) are ``l = -a ||v^j - t^j'|| + b`` over the
    S = J^2 sample pairs; ``matched`` (...) says which pairs match. Returns (...):
    ``-log mean_s sigmoid(l_s)`` for matches and ``-log mean_s (1 - sigmoid(l_s))`` otherwise, computed
    with log-sum-exp. Its gradient on ``l_s`` is ``-w_s (1 - sigmoid(l_s))`` for a match and
    ``w_s sigmoid(l_s)`` otherwise, with ``w_s = p_s / sum p`` the share of sample pair s in the match
    probability: the weighting of PCME eq. 5 (our loss is the negative log-likelihood, hence the sign)."""
    signed = torch.where(matched[..., None], logits, -logits)
    return -(torch.logsumexp(F.logsigmoid(signed), -1) - math.log(logits.shape[-1]))


class SoftContrastiveLoss(nn.Module):
    """PCME's soft cross-modal contrastive loss over every pair of a batch (§3.2.1): the match
    probability of each (visual i, caption j) pair is estimated from J x J samples (eq. 2) with
    ``sigmoid(-a d + b)`` (eq. 3); the loss is :func:`soft_contrastive_nll` averaged over all B^2 pairs."""

    def forward(self, visual_samples: Tensor, text_samples: Tensor, scale: Tensor, shift: Tensor,
                positives: Tensor | None = None) -> Terms:
        dist = euclidean_distances(visual_samples[:, None], text_samples[None, :])  # (B, B, J, J)
        logits = (-scale * dist + shift).flatten(2)
        matched = _eye_positives(logits[..., 0], positives)
        nll = soft_contrastive_nll(logits, matched)
        pos, neg = nll[matched], nll[~matched]
        zero = nll.new_zeros(())
        return {"positive": pos.mean() if pos.numel() else zero,
                "negative": neg.mean() if neg.numel() else zero, "total": nll.mean()}


class GaussianKLLoss(nn.Module):
    """KL(N(mu, diag sigma^2) || N(0, I)) = 0.5 sum_d (sigma^2 + mu^2 - 1 - 2 log sigma), averaged over
    items (PCME §3.2.1, after HIB). ``logsigma`` is log of the standard deviation."""

    def forward(self, mu: Tensor, logsigma: Tensor) -> Terms:
        kl = 0.5 * (torch.exp(2 * logsigma) + mu * mu - 1 - 2 * logsigma).sum(-1)
        return {"total": kl.mean()}


class UniformityLoss(nn.Module):
    """Uniformity of Wang & Isola (PCME §3.2.1): ``log mean_{i<j} exp(-t ||x_i - x_j||^2)``."""

    def __init__(self, t: float = 2.0) -> None:
        super().__init__()
        self.t = t

    def forward(self, x: Tensor) -> Terms:
        if x.shape[0] < 2:
            return {"total": x.new_zeros(())}
        upper = torch.triu(torch.ones(x.shape[0], x.shape[0], dtype=torch.bool, device=x.device), 1)
        return {"total": torch.log(torch.exp(-self.t * squared_distances(x, x)[upper]).mean())}


def _top_violations(costs: Tensor, valid: Tensor, top_k: int | None) -> Tensor:
    """Sum per row of the ``top_k`` largest non-negative hinge costs among ``valid`` columns."""
    costs = costs.clamp(min=0) * valid
    if top_k is not None and top_k < costs.shape[-1]:
        costs = costs.topk(top_k, dim=-1).values
    return costs.sum(-1)


class BidirectionalRankingLoss(nn.Module):
    """Two-branch embedding loss, Wang et al. eq. 1-6, on Euclidean distances.

    ``lambda_1 * sum [m + d(x_i, y_j) - d(x_i, y_k)]_+`` (visual anchors, eq. 1) plus ``lambda_2 *`` the
    same for caption anchors (eq. 2), each keeping the ``top_k`` most violating negatives per (anchor,
    positive) as in the paper's triplet sampling; plus the neighbourhood constraints (eq. 4-5) weighted
    by lambda_3 (visuals described by the same caption) and lambda_4 (captions of the same visual) over
    all their triplets. Each term is divided by the batch size B.
    """

    def __init__(self, margin: float, lambdas: tuple[float, float, float, float], top_k: int | None) -> None:
        super().__init__()
        self.margin, self.lambdas, self.top_k = margin, lambdas, top_k

    def forward(self, visual: Tensor, text: Tensor, visual_ids: Tensor | None = None,
                text_ids: Tensor | None = None) -> Terms:
        size = visual.shape[0]
        ids_v = visual_ids if visual_ids is not None else torch.arange(size, device=visual.device)
        ids_t = text_ids if text_ids is not None else torch.arange(size, device=visual.device)
        match = match_matrix(size, ids_v, ids_t, visual.device)
        cross = euclidean_distances(visual, text)
        image_nbr, image_far = self._neighbours(ids_t, ids_v)
        text_nbr, text_far = self._neighbours(ids_v, ids_t)
        terms = {
            "i2t": self._ranking(cross, match, ~match, self.top_k),
            "t2i": self._ranking(cross.T, match.T, ~match.T, self.top_k),
            "image_nbr": self._ranking(euclidean_distances(visual, visual), image_nbr, image_far, None),
            "text_nbr": self._ranking(euclidean_distances(text, text), text_nbr, text_far, None),
        }
        l1, l2, l3, l4 = self.lambdas
        terms["total"] = (l1 * terms["i2t"] + l2 * terms["t2i"] + l3 * terms["image_nbr"]
                          + l4 * terms["text_nbr"])
        return terms

    @staticmethod
    def _neighbours(shared: Tensor, own: Tensor) -> tuple[Tensor, Tensor]:
        """Neighbours share the other side's id but are different items; non-neighbours share neither."""
        same_shared, same_own = shared[:, None] == shared[None, :], own[:, None] == own[None, :]
        return same_shared & ~same_own, ~same_shared & ~same_own

    def _ranking(self, dist: Tensor, positive: Tensor, negative: Tensor, top_k: int | None) -> Tensor:
        """Sum over anchors a (rows), positives p and negatives n (columns) of ``[m + d(a, p) - d(a, n)]_+``,
        keeping the ``top_k`` largest per (a, p), divided by the number of anchors."""
        anchor, pos = positive.nonzero(as_tuple=True)
        if anchor.numel() == 0:
            return dist.new_zeros(())
        costs = self.margin + dist[anchor, pos][:, None] - dist[anchor]
        return _top_violations(costs, negative[anchor], top_k).sum() / dist.shape[0]


class LogisticPairLoss(nn.Module):
    """Two-branch similarity network loss, Wang et al. eq. 7: ``log(1 + exp(-z p))`` averaged over the
    (balanced) pairs, z = +1 for matches and -1 otherwise."""

    def forward(self, scores: Tensor, labels: Tensor) -> Terms:
        loss = F.softplus(-labels * scores)
        pos, neg = loss[labels > 0], loss[labels < 0]
        zero = scores.new_zeros(())
        return {"positive": pos.mean() if pos.numel() else zero,
                "negative": neg.mean() if neg.numel() else zero, "total": loss.mean()}


class InstanceLoss(nn.Module):
    """Zheng et al. eq. 5-8: softmax cross-entropy of visual and textual features over all image/text
    groups through the shared classifier; returns the two terms and their sum."""

    def forward(self, visual_logits: Tensor, text_logits: Tensor, labels: Tensor) -> Terms:
        visual = F.cross_entropy(visual_logits, labels)
        textual = F.cross_entropy(text_logits, labels)
        return {"visual": visual, "textual": textual, "total": visual + textual}


class DomainAdversarialLoss(nn.Module):
    """A3VSE eq. 4 for one discriminator: ``l^d = mean log D(a) + mean log(1 - D(b))`` with D = sigmoid of
    the logits. The discriminator maximises l^d, so ``'total'`` is ``-l^d`` (binary cross-entropy) for
    minimisation; the gradient reversal layer in front of the discriminator makes the encoders maximise it,
    i.e. minimise l^d as eq. 10 asks. ``'accuracy'`` (no gradient) is the share of both domains the
    discriminator classifies correctly: near 1 it wins, near 0.5 the domains are confused, well below 0.5 the
    encoders have overshot and swapped the domains (maximising a BCE has no optimum at chance)."""

    def forward(self, logits_pos: Tensor, logits_neg: Tensor) -> Terms:
        log_likelihood = F.logsigmoid(logits_pos).mean() + F.logsigmoid(-logits_neg).mean()
        with torch.no_grad():
            accuracy = ((logits_pos > 0).float().mean() + (logits_neg < 0).float().mean()) / 2
        return {"log_likelihood": log_likelihood, "accuracy": accuracy, "total": -log_likelihood}


def domain_confusion(logits_pos: Tensor, logits_neg: Tensor) -> Tensor:
    """Cross-entropy between a discriminator's outputs on both domains and the uniform label 1/2 (Tzeng et al.
    2015), minus its minimum log 2, so 0 exactly when every output is at chance. Its gradient with respect to a
    logit is ``(sigmoid(logit) - 1/2) / n``: bounded, and it vanishes at chance instead of pushing past it."""
    logits = torch.cat([logits_pos, logits_neg])
    return F.binary_cross_entropy_with_logits(logits, torch.full_like(logits, 0.5)) - math.log(2.0)


# --- method criteria ------------------------------------------------------------------------------------


class VSECriterion(nn.Module):
    """VSE++ triplet loss on the global embeddings; with ``pseudo_weight`` > 0 and pseudo pairs in the batch,
    the triplet loss runs over the annotated pairs and the pseudo pairs together (every visual a negative of
    every other pair's caption and vice versa), each pseudo anchor's hinge weighted by ``pseudo_weight`` and
    the sum divided by the number of annotated pairs (A3VSE's D^u, §3.2, with VSE++'s max-violation loss)."""

    def __init__(self, config: VSEConfig) -> None:
        super().__init__()
        self.triplet = TripletLoss(config.margin, config.hardest_negative)
        self.margin, self.hardest, self.pseudo_weight = config.margin, config.hardest_negative, config.pseudo_weight

    def forward(self, out: PairOutput, batch: PairBatch) -> Terms:
        visual, text = out.visual.emb[:, 0], out.text.emb[:, 0]
        unlabelled, pseudo = out.extras.get("unlabelled_emb"), out.extras.get("pseudo_emb")
        if self.pseudo_weight <= 0 or unlabelled is None or pseudo is None:
            return self.triplet(cosine_matrix(visual, text), batch.positives())
        n, m = visual.shape[0], unlabelled.shape[0]
        sims = cosine_matrix(torch.cat([visual, unlabelled[:, 0]]), torch.cat([text, pseudo[:, 0]]))
        positives = torch.block_diag(batch.positives(), torch.eye(m, dtype=torch.bool, device=sims.device))
        negatives = ~positives
        diagonal = sims.diagonal()
        cost_i2t = (self.margin - diagonal[:, None] + sims).clamp(min=0) * negatives
        cost_t2i = (self.margin - diagonal[None, :] + sims).clamp(min=0) * negatives
        if self.hardest:
            per_i2t, per_t2i = cost_i2t.amax(1), cost_t2i.amax(0)
        else:
            per_i2t, per_t2i = cost_i2t.sum(1) / (n + m), cost_t2i.sum(0) / (n + m)
        weight = torch.cat([sims.new_ones(n), sims.new_full((m,), self.pseudo_weight)])
        i2t, t2i = (per_i2t * weight).sum() / n, (per_t2i * weight).sum() / n
        pseudo_part = (self.pseudo_weight * (per_i2t[n:].sum() + per_t2i[n:].sum()) / n).detach()
        return {"i2t": i2t, "t2i": t2i, "pseudo": pseudo_part, "total": i2t + t2i}


class PVSECriterion(nn.Module):
    """PVSE eq. 5: ``L_mil + lambda_1 L_div + lambda_2 L_mmd``."""

    def __init__(self, config: PVSEConfig) -> None:
        super().__init__()
        self.mil = MILLoss(config.margin, config.hardest_negative)
        self.div, self.mmd = DiversityLoss(), MMDLoss(config.mmd_sigma)
        self.div_weight, self.mmd_weight = config.div_weight, config.mmd_weight

    def forward(self, out: PairOutput, batch: PairBatch) -> Terms:
        mil = self.mil(out.visual.emb, out.text.emb, batch.positives())
        assert out.visual.local is not None and out.text.local is not None
        div = self.div(out.visual.local, out.text.local)["total"]
        mmd = self.mmd(out.visual.emb, out.text.emb)["total"]
        total = mil["total"] + self.div_weight * div + self.mmd_weight * mmd
        return {"mil": mil["total"], "mil_i2t": mil["i2t"], "mil_t2i": mil["t2i"], "div": div, "mmd": mmd,
                "total": total}


class PCMECriterion(nn.Module):
    """PCME: soft contrastive loss on the samples + KL weight * KL(both sides) + uniformity weight *
    uniformity of all samples."""

    def __init__(self, config: PCMEConfig) -> None:
        super().__init__()
        self.match, self.kl, self.uniformity = SoftContrastiveLoss(), GaussianKLLoss(), UniformityLoss(
            config.uniformity_t)
        self.kl_weight, self.uniformity_weight = config.kl_weight, config.uniformity_weight

    def forward(self, out: PairOutput, batch: PairBatch) -> Terms:
        ex = out.extras
        match = self.match(ex["visual_samples"], ex["text_samples"], ex["match_scale"], ex["match_shift"],
                           batch.positives())
        assert out.visual.logsigma is not None and out.text.logsigma is not None
        kl = self.kl(out.visual.emb, out.visual.logsigma)["total"] + self.kl(out.text.emb, out.text.logsigma)[
            "total"]
        dim = ex["visual_samples"].shape[-1]
        samples = torch.cat([ex["visual_samples"].reshape(-1, dim), ex["text_samples"].reshape(-1, dim)])
        uniformity = self.uniformity(samples)["total"] if self.uniformity_weight else kl.new_zeros(())
        total = match["total"] + self.kl_weight * kl + self.uniformity_weight * uniformity
        return {"match": match["total"], "match_pos": match["positive"], "match_neg": match["negative"],
                "kl": kl, "uniformity": uniformity, "total": total}


class A3VSECriterion(nn.Module):
    """A3VSE eq. 9: ``l^tri + l^adv`` with the beta-weighted triplet loss (eq. 3) and the lambda-weighted
    discriminator losses (eq. 5-8). Terms whose domains are missing from the batch are 0.

    As eq. 9-10 print it, lambda weights l^d for the discriminator as well as for the encoders, where DANN
    leaves the discriminator's loss unweighted; under Adam (the trainer's optimizer) a constant factor on a
    parameter's gradient does not change its steps, so the discriminators do not learn more slowly for it.

    Diagnostics without gradient, for the training log: ``acc_<name>`` (discriminator accuracy, see
    :class:`DomainAdversarialLoss`) for each discriminator that ran, and ``spread_v`` / ``spread_t``, the mean
    distance of the unit embeddings from their batch centroid (1 for directions spread over the sphere, 0 when
    the encoder maps every input to one vector). The reversed gradient rewards moving a whole modality along
    the discriminator's normal; a common component shared by a modality shrinks its spread, which is the way
    an encoder can "win" the v-t game at the cost of retrieval.
    """

    def __init__(self, config: A3VSEConfig) -> None:
        super().__init__()
        self.triplet_vt = TripletLoss(config.margin_vt, hardest=True)
        self.triplet_vs = TripletLoss(config.margin_vs, hardest=True)
        self.adversarial = DomainAdversarialLoss()
        self.beta = config.beta
        self.lambdas = {"v_vu": config.lambda_vvu, "t_s": config.lambda_ts, "v_t": config.lambda_vt,
                        "vu_s": config.lambda_vus, "v_s": config.lambda_vs, "vu_t": config.lambda_vut}

    def forward(self, out: PairOutput, batch: PairBatch) -> Terms:
        zero = out.visual.emb.new_zeros(())
        tri_vt = self.triplet_vt(cosine_matrix(out.visual.emb[:, 0], out.text.emb[:, 0]), batch.positives())
        terms: Terms = {"tri_vt": tri_vt["total"], "tri_vs": zero,
                        "spread_v": _spread(out.visual.emb[:, 0]), "spread_t": _spread(out.text.emb[:, 0])}
        if "unlabelled_emb" in out.extras:
            sims = cosine_matrix(out.extras["unlabelled_emb"][:, 0], out.extras["pseudo_emb"][:, 0])
            terms["tri_vs"] = self.triplet_vs(sims)["total"]
        terms["tri"] = self.beta * terms["tri_vt"] + (1 - self.beta) * terms["tri_vs"]
        adv = zero
        for name in DOMAIN_PAIRS:
            key = f"domain_{name}_pos"
            value = zero
            if key in out.extras:
                game = self.adversarial(out.extras[key], out.extras[f"domain_{name}_neg"])
                value, terms[f"acc_{name}"] = game["total"], game["accuracy"]
            if f"confusion_{name}_pos" in out.extras:  # the encoders' side of the confusion game
                confusion = domain_confusion(out.extras[f"confusion_{name}_pos"], out.extras[f"confusion_{name}_neg"])
                terms[f"conf_{name}"] = confusion
                value = value + out.extras["confusion_weight"] * confusion
            terms[f"adv_{name}"] = value
            adv = adv + self.lambdas[name] * value
        terms["adv"] = adv
        terms["total"] = terms["tri"] + adv
        return terms


def _spread(emb: Tensor) -> Tensor:
    """Mean distance of the rows of ``emb`` (N, D) from their centroid, without gradient (a collapse gauge)."""
    with torch.no_grad():
        return (emb - emb.mean(0)).norm(dim=-1).mean()


class TwoBranchEmbedCriterion(nn.Module):
    """Wang et al. eq. 6 on the embedding network's outputs."""

    def __init__(self, config: TwoBranchEmbedConfig) -> None:
        super().__init__()
        self.ranking = BidirectionalRankingLoss(
            config.margin, (config.lambda_i2t, config.lambda_t2i, config.lambda_image_nbr,
                            config.lambda_text_nbr), config.top_k)

    def forward(self, out: PairOutput, batch: PairBatch) -> Terms:
        return self.ranking(out.visual.emb[:, 0], out.text.emb[:, 0], batch.visual_ids, batch.text_ids)


class TwoBranchSimCriterion(nn.Module):
    """Wang et al. eq. 7 on the similarity network's sampled pair scores."""

    def __init__(self, config: TwoBranchSimConfig) -> None:
        super().__init__()
        self.logistic = LogisticPairLoss()

    def forward(self, out: PairOutput, batch: PairBatch) -> Terms:
        return self.logistic(out.extras["pair_scores"], out.extras["pair_labels"])


class InstanceCriterion(nn.Module):
    """Zheng et al. eq. 9: ``lambda_1 L_rank + lambda_2 L_visual + lambda_3 L_textual`` (eq. 4 ranking with
    cosine similarity and margin alpha)."""

    def __init__(self, config: InstanceConfig) -> None:
        super().__init__()
        self.rank = TripletLoss(config.margin, config.hardest_negative)
        self.instance = InstanceLoss()
        self.weights = (config.rank_weight, config.visual_weight, config.textual_weight)

    def forward(self, out: PairOutput, batch: PairBatch) -> Terms:
        rank = self.rank(cosine_matrix(out.visual.emb[:, 0], out.text.emb[:, 0]), batch.positives())["total"]
        ex = out.extras
        inst = self.instance(ex["visual_logits"], ex["text_logits"], ex["labels"])
        w_rank, w_visual, w_text = self.weights
        total = w_rank * rank + w_visual * inst["visual"] + w_text * inst["textual"]
        return {"rank": rank, "visual": inst["visual"], "textual": inst["textual"], "total": total}
