"""Every loss of trainer.methods (the shared losses.py and each method's module) against an independent
loop-by-loop reference on tiny tensors."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from trainer.methods import build_config, build_loss
from trainer.methods.a3vse import DomainAdversarialLoss
from trainer.methods.functional import closed_form_sampled_distance
from trainer.methods.instance import InstanceLoss
from trainer.methods.interface import EncoderOutput, ImageInput, PairBatch, PairOutput, TextInput
from trainer.methods.losses import MILLoss, TripletLoss
from trainer.methods.pcme import (
    ClosedFormMatchLoss,
    GaussianKLLoss,
    SoftContrastiveLoss,
    UniformityLoss,
    soft_contrastive_nll,
)
from trainer.methods.pvse import DiversityLoss, MMDLoss
from trainer.methods.twobranch import BidirectionalRankingLoss, LogisticPairLoss

torch.set_num_threads(1)
TOL = dict(rtol=1e-5, atol=1e-6)


def _cos(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a @ b) / (a.norm() * b.norm()))


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


# --- triplet / MIL ---------------------------------------------------------------------------------------


def ref_triplet(sims: torch.Tensor, positives: torch.Tensor, margin: float, hardest: bool) -> float:
    n = sims.shape[0]
    total = 0.0
    for direction in ("i2t", "t2i"):
        per_anchor = []
        for a in range(n):
            costs = []
            for other in range(n):
                neg_pair = (a, other) if direction == "i2t" else (other, a)
                if positives[neg_pair]:
                    continue
                costs.append(max(0.0, margin - float(sims[a, a]) + float(sims[neg_pair])))
            per_anchor.append(max(costs, default=0.0) if hardest else sum(costs))
        total += sum(per_anchor) / (n if hardest else n * n)
    return total


@pytest.mark.parametrize("hardest", [True, False])
@pytest.mark.parametrize("size", [2, 5])
def test_triplet_matches_reference(hardest: bool, size: int) -> None:
    torch.manual_seed(size)
    sims = torch.rand(size, size) * 2 - 1
    positives = torch.eye(size, dtype=torch.bool)
    if size > 2:
        positives[0, 1] = positives[1, 0] = True  # rows 0 and 1 show the same photo
    got = TripletLoss(0.2, hardest)(sims, positives)
    assert float(got["total"]) == pytest.approx(ref_triplet(sims, positives, 0.2, hardest), rel=1e-5)
    assert float(got["total"]) == pytest.approx(float(got["i2t"] + got["t2i"]))


def test_triplet_identical_items_cost_one_margin_per_direction() -> None:
    sims = torch.ones(3, 3)  # every embedding the same: every negative ties with the positive
    assert float(TripletLoss(0.2, hardest=True)(sims)["total"]) == pytest.approx(0.4)
    assert float(TripletLoss(0.2, hardest=False)(sims)["total"]) == pytest.approx(2 * 0.2 * 6 / 9)


def ref_max_cos(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    n, m = a.shape[0], b.shape[0]
    out = torch.zeros(n, m)
    for i in range(n):
        for j in range(m):
            out[i, j] = max(_cos(a[i, p], b[j, q]) for p in range(a.shape[1]) for q in range(b.shape[1]))
    return out


@pytest.mark.parametrize("heads", [1, 3])
@pytest.mark.parametrize("hardest", [True, False])
def test_mil_loss_uses_best_of_k_by_k(heads: int, hardest: bool) -> None:
    torch.manual_seed(heads)
    visual, text = torch.randn(4, heads, 6), torch.randn(4, heads, 6)
    positives = torch.eye(4, dtype=torch.bool)
    got = MILLoss(0.1, hardest)(visual, text)["total"]
    want = ref_triplet(ref_max_cos(visual, text), positives, 0.1, hardest)
    assert float(got) == pytest.approx(want, rel=1e-5)


def test_mil_with_one_head_is_the_triplet_loss_on_cosines() -> None:
    torch.manual_seed(1)
    visual, text = torch.randn(2, 1, 5), torch.randn(2, 1, 5)
    sims = F.normalize(visual[:, 0], dim=-1) @ F.normalize(text[:, 0], dim=-1).T
    assert torch.allclose(MILLoss(0.1)(visual, text)["total"], TripletLoss(0.1)(sims)["total"])


# --- diversity / MMD -------------------------------------------------------------------------------------


def ref_diversity_one(local: torch.Tensor) -> float:
    batch, k, _ = local.shape
    total = 0.0
    for b in range(batch):
        sq = 0.0
        for p in range(k):
            for q in range(k):
                g = _cos(local[b, p], local[b, q])
                sq += (g - (1.0 if p == q else 0.0)) ** 2
        total += math.sqrt(sq) / k**2
    return total / batch


def test_diversity_matches_reference() -> None:
    torch.manual_seed(2)
    x, y = torch.rand(3, 4, 6), torch.rand(3, 4, 6)
    got = DiversityLoss()(x, y)
    assert float(got["visual"]) == pytest.approx(ref_diversity_one(x), rel=1e-5)
    assert float(got["total"]) == pytest.approx(ref_diversity_one(x) + ref_diversity_one(y), rel=1e-5)


def test_diversity_zero_for_orthogonal_heads_and_maximal_for_identical_ones() -> None:
    k = 3
    orthogonal = torch.eye(k).repeat(2, 1, 1) * 5.0
    identical = torch.rand(1, 1, 7).repeat(2, k, 1)
    loss = DiversityLoss()
    assert float(loss(orthogonal, orthogonal)["total"]) == pytest.approx(0.0, abs=1e-6)
    maximum = 2 * math.sqrt(k * k - k) / k**2
    assert float(loss(identical, identical)["total"]) == pytest.approx(maximum, rel=1e-5)
    torch.manual_seed(3)
    for _ in range(20):  # non-negative features (sigmoid outputs) never exceed the identical case
        x = torch.rand(2, k, 7)
        assert float(loss(x, x)["total"]) <= maximum + 1e-6
    assert float(loss(torch.rand(2, 1, 4), torch.rand(2, 1, 4))["total"]) == pytest.approx(0.0, abs=1e-6)


def ref_mmd(x: torch.Tensor, y: torch.Tensor, sigma: float) -> float:
    def k(a: torch.Tensor, b: torch.Tensor) -> float:
        return math.exp(-float(((a - b) ** 2).sum()) / (2 * sigma**2))

    n, heads = x.shape[0], x.shape[1]
    sums = {"xx": 0.0, "xy": 0.0, "yy": 0.0}
    for i in range(n):
        for j in range(n):
            for p in range(heads):
                for q in range(heads):
                    sums["xx"] += k(x[i, p], x[j, q])
                    sums["xy"] += k(x[i, p], y[j, q])
                    sums["yy"] += k(y[i, p], y[j, q])
    return (sums["xx"] - 2 * sums["xy"] + sums["yy"]) / (heads**2 * n**2)


@pytest.mark.parametrize("heads", [1, 2])
def test_mmd_matches_reference(heads: int) -> None:
    torch.manual_seed(4)
    x, y = torch.randn(3, heads, 4), torch.randn(3, heads, 4) + 0.5
    assert float(MMDLoss(0.8)(x, y)["total"]) == pytest.approx(ref_mmd(x, y, 0.8), rel=1e-5)
    assert float(MMDLoss(0.8)(x, x)["total"]) == pytest.approx(0.0, abs=1e-6)


# --- PCME ------------------------------------------------------------------------------------------------


def ref_soft_contrastive(v: torch.Tensor, t: torch.Tensor, a: float, b: float) -> float:
    n, j1, j2 = v.shape[0], v.shape[1], t.shape[1]
    total = 0.0
    for i in range(n):
        for j in range(n):
            p = 0.0
            for s in range(j1):
                for u in range(j2):
                    p += _sigmoid(-a * float((v[i, s] - t[j, u]).norm()) + b)
            p /= j1 * j2
            total += -math.log(p) if i == j else -math.log(1 - p)
    return total / (n * n)


@pytest.mark.parametrize(("samples", "size"), [(1, 2), (3, 2), (4, 3)])
def test_soft_contrastive_matches_reference(samples: int, size: int) -> None:
    torch.manual_seed(samples)
    v, t = torch.randn(size, samples, 5) * 0.3, torch.randn(size, samples, 5) * 0.3
    got = SoftContrastiveLoss()(v, t, torch.tensor(2.0), torch.tensor(1.5))
    assert float(got["total"]) == pytest.approx(ref_soft_contrastive(v, t, 2.0, 1.5), rel=1e-5)


def test_soft_contrastive_is_stable_for_far_samples() -> None:
    v, t = torch.zeros(2, 2, 3), torch.full((2, 2, 3), 100.0)
    got = SoftContrastiveLoss()(v, t, torch.tensor(15.0), torch.tensor(15.0))["total"]
    assert torch.isfinite(got)


def test_soft_contrastive_gradient_follows_pcme_eq5() -> None:
    """dL/dl_s = -w_s (1 - s(l_s)) on a positive pair and w_s s(l_s) on a negative one, with w the
    normalised match probabilities: closer sample pairs weigh more for a positive pair, farther ones for
    a negative pair."""
    distances = torch.tensor([0.2, 0.5, 0.9, 1.4])  # four sample pairs, closest first
    for matched in (True, False):
        logits = (-3.0 * distances + 1.0).requires_grad_()
        soft_contrastive_nll(logits, torch.tensor(matched)).backward()
        probs = torch.sigmoid(logits.detach() if matched else -logits.detach())
        weights = probs / probs.sum()
        if matched:
            want = -weights * (1 - torch.sigmoid(logits.detach()))
        else:
            want = weights * torch.sigmoid(logits.detach())
        assert torch.allclose(logits.grad, want, atol=1e-6)
        order = torch.argsort(weights, descending=True)
        assert order.tolist() == ([0, 1, 2, 3] if matched else [3, 2, 1, 0])


def ref_csd(mu_a: torch.Tensor, ls_a: torch.Tensor, mu_b: torch.Tensor, ls_b: torch.Tensor) -> float:
    return sum(float((mu_a[d] - mu_b[d]) ** 2 + math.exp(2 * float(ls_a[d])) + math.exp(2 * float(ls_b[d])))
               for d in range(len(mu_a)))


def ref_closed_form_match(mu_v, ls_v, mu_t, ls_t, a: float, b: float, positives: torch.Tensor,
                          alpha: float) -> float:
    """PCME++: BCE of sigmoid(-a CSD + b) over all pairs; a negative pair no farther apart than the farthest
    positive of its photo (row) or its caption (column) is a pseudo-positive, trained as a match with weight
    alpha."""
    n = len(mu_v)
    dist = [[ref_csd(mu_v[i], ls_v[i], mu_t[j], ls_t[j]) for j in range(n)] for i in range(n)]
    total = 0.0
    for i in range(n):
        for j in range(n):
            p = _sigmoid(-a * dist[i][j] + b)
            if positives[i, j]:
                total += -math.log(p)
                continue
            row = max([dist[i][k] for k in range(n) if positives[i, k]], default=-math.inf)
            col = max([dist[k][j] for k in range(n) if positives[k, j]], default=-math.inf)
            if alpha > 0 and (dist[i][j] <= row or dist[i][j] <= col):
                total += -alpha * math.log(p)
            else:
                total += -math.log(1 - p)
    return total / (n * n)


def test_closed_form_sampled_distance_is_the_expected_squared_distance_of_samples() -> None:
    torch.manual_seed(13)
    mu_a, mu_b = torch.randn(2, 3, dtype=torch.float64), torch.randn(3, 3, dtype=torch.float64)
    ls_a, ls_b = torch.randn(2, 3, dtype=torch.float64) * 0.3, torch.randn(3, 3, dtype=torch.float64) * 0.3
    got = closed_form_sampled_distance(mu_a, ls_a, mu_b, ls_b)
    for i in range(2):
        for j in range(3):
            assert float(got[i, j]) == pytest.approx(ref_csd(mu_a[i], ls_a[i], mu_b[j], ls_b[j]), rel=1e-10)
    eps = torch.randn(2, 200_000, 3, 2, dtype=torch.float64)  # Monte Carlo: E||z_a - z_b||^2
    z_a, z_b = mu_a[0] + ls_a[0].exp() * eps[0, :, :, 0], mu_b[1] + ls_b[1].exp() * eps[0, :, :, 1]
    assert float(got[0, 1]) == pytest.approx(float(((z_a - z_b) ** 2).sum(-1).mean()), rel=1e-2)


@pytest.mark.parametrize("alpha", [0.0, 0.1, 0.5])
def test_closed_form_match_loss_matches_reference(alpha: float) -> None:
    torch.manual_seed(14)
    mu_v, mu_t = F.normalize(torch.randn(4, 5), dim=-1), F.normalize(torch.randn(4, 5), dim=-1)
    ls_v, ls_t = torch.randn(4, 5) * 0.4 - 1.5, torch.randn(4, 5) * 0.4 - 1.5
    positives = torch.eye(4, dtype=torch.bool)
    positives[1, 2] = positives[2, 1] = True  # two photos sharing captions: rows with two positives
    got = ClosedFormMatchLoss()(mu_v, ls_v, mu_t, ls_t, torch.tensor(3.0), torch.tensor(2.0), positives, alpha)
    want = ref_closed_form_match(mu_v, ls_v, mu_t, ls_t, 3.0, 2.0, positives, alpha)
    assert float(got["total"]) == pytest.approx(want, rel=1e-5)
    if alpha:  # the reference's choice of pseudo-positives is not vacuous here
        assert 0 < float(got["pseudo"]) < 1


def test_closed_form_loss_grows_sigma_of_confusable_items_and_shrinks_it_for_distinct_ones() -> None:
    """Why PCME++'s loss makes sigma an uncertainty: an item's variance V enters each of its pairs' logits as
    ``-a V``, so dL/dV = a (sum_pos (1 - p) - sum_neg p) / B^2. An item whose negatives look like matches (a
    photo between two captions) is pushed to a larger sigma; one whose positive is missed, to a smaller one."""
    a, b = 4.0, 2.0
    mu_v = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    mu_t = torch.tensor([[0.9, 0.4], [0.8, 0.6], [-1.0, 0.0]])  # caption 1 sits next to photo 0
    mu_v, mu_t = F.normalize(mu_v, dim=-1), F.normalize(mu_t, dim=-1)
    ls_v = torch.full((3, 2), -2.0, requires_grad=True)
    ls_t = torch.full((3, 2), -2.0)
    ClosedFormMatchLoss()(mu_v, ls_v, mu_t, ls_t, torch.tensor(a), torch.tensor(b))["total"].backward()
    with torch.no_grad():
        p = torch.sigmoid(-a * closed_form_sampled_distance(mu_v, ls_v, mu_t, ls_t) + b)
        eye = torch.eye(3, dtype=torch.bool)
        dl_dv = a * torch.where(eye, 1 - p, -p).sum(1) / 9  # dL/dV_i, V_i = sum_d exp(2 ls_id)
        want = dl_dv[:, None] * 2 * ls_v.exp() ** 2
    assert torch.allclose(ls_v.grad, want, atol=1e-7)
    assert ls_v.grad[0].sum() < 0 < ls_v.grad[1].sum()  # descent: photo 0 (confusable) grows, photo 1 shrinks


def test_gaussian_kl_matches_torch_distributions() -> None:
    torch.manual_seed(5)
    mu, logsigma = torch.randn(3, 1, 4), torch.randn(3, 1, 4) * 0.5
    want = 0.0
    for i in range(3):
        for d in range(4):
            q = torch.distributions.Normal(mu[i, 0, d], logsigma[i, 0, d].exp())
            want += float(torch.distributions.kl_divergence(q, torch.distributions.Normal(0.0, 1.0)))
    assert float(GaussianKLLoss()(mu, logsigma)["total"]) == pytest.approx(want / 3, rel=1e-5)
    assert float(GaussianKLLoss()(torch.zeros(2, 3), torch.zeros(2, 3))["total"]) == pytest.approx(0.0)


def test_uniformity_matches_reference() -> None:
    torch.manual_seed(6)
    x = torch.randn(4, 3)
    terms = [math.exp(-2.0 * float(((x[i] - x[j]) ** 2).sum())) for i in range(4) for j in range(i + 1, 4)]
    want = math.log(sum(terms) / len(terms))
    assert float(UniformityLoss(2.0)(x)["total"]) == pytest.approx(want, rel=1e-5)
    assert float(UniformityLoss()(torch.ones(3, 2))["total"]) == pytest.approx(0.0, abs=1e-6)


# --- two-branch ------------------------------------------------------------------------------------------


def ref_two_branch(x: torch.Tensor, y: torch.Tensor, vid: list[int], tid: list[int], margin: float,
                   lambdas: tuple[float, ...], top_k: int) -> dict[str, float]:
    n = x.shape[0]

    def d(a: torch.Tensor, b: torch.Tensor) -> float:
        return float((a - b).norm())

    def match(i: int, j: int) -> bool:
        return vid[i] == vid[j] or tid[i] == tid[j] or i == j

    def ranking(anchor_vec, other_vec, is_pos, is_neg, keep):  # noqa: ANN001, ANN202
        total = 0.0
        for a in range(n):
            for p in range(n):
                if not is_pos(a, p):
                    continue
                positive = d(anchor_vec[a], other_vec[p])
                costs = sorted((max(0.0, margin + positive - d(anchor_vec[a], other_vec[k]))
                                for k in range(n) if is_neg(a, k)), reverse=True)
                total += sum(costs[:keep] if keep else costs)
        return total / n

    out = {
        "i2t": ranking(x, y, match, lambda a, k: not match(a, k), top_k),
        "t2i": ranking(y, x, lambda a, p: match(p, a), lambda a, k: not match(k, a), top_k),
        "image_nbr": ranking(x, x, lambda a, p: tid[a] == tid[p] and vid[a] != vid[p],
                             lambda a, k: tid[a] != tid[k] and vid[a] != vid[k], None),
        "text_nbr": ranking(y, y, lambda a, p: vid[a] == vid[p] and tid[a] != tid[p],
                            lambda a, k: vid[a] != vid[k] and tid[a] != tid[k], None),
    }
    keys = ("i2t", "t2i", "image_nbr", "text_nbr")
    out["total"] = sum(w * out[k] for w, k in zip(lambdas, keys, strict=True))
    return out


@pytest.mark.parametrize("top_k", [1, 2, 50])
def test_bidirectional_ranking_matches_reference(top_k: int) -> None:
    torch.manual_seed(7)
    x, y = F.normalize(torch.randn(6, 4), dim=-1), F.normalize(torch.randn(6, 4), dim=-1)
    vid, tid = [0, 0, 1, 1, 2, 3], [0, 1, 2, 3, 4, 4]  # two photos with two captions; one caption, two photos
    lambdas = (1.0, 2.0, 0.5, 0.2)
    got = BidirectionalRankingLoss(0.3, lambdas, top_k)(x, y, torch.tensor(vid), torch.tensor(tid))
    want = ref_two_branch(x, y, vid, tid, 0.3, lambdas, top_k)
    for key, value in want.items():
        assert float(got[key]) == pytest.approx(value, rel=1e-5, abs=1e-6), key
    assert want["image_nbr"] > 0 and want["text_nbr"] > 0  # the neighbourhood terms were exercised


def test_bidirectional_ranking_batch_of_two_without_ids() -> None:
    x, y = torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    got = BidirectionalRankingLoss(0.1, (1.0, 2.0, 0.0, 0.2), 50)(x, y)
    assert float(got["total"]) == pytest.approx(0.0, abs=1e-5)  # already separated by more than m
    same = torch.ones(2, 2)
    got = BidirectionalRankingLoss(0.1, (1.0, 2.0, 0.0, 0.2), 50)(same, same)
    assert float(got["i2t"]) == pytest.approx(0.1, abs=1e-5)
    assert float(got["total"]) == pytest.approx(0.3, abs=1e-5)


def test_logistic_pair_loss_matches_reference() -> None:
    scores, labels = torch.tensor([2.0, -1.0, 0.5, 0.0]), torch.tensor([1.0, -1.0, -1.0, 1.0])
    want = sum(math.log(1 + math.exp(-float(z) * float(p))) for p, z in zip(scores, labels, strict=True)) / 4
    got = LogisticPairLoss()(scores, labels)
    assert float(got["total"]) == pytest.approx(want, rel=1e-6)
    assert float(got["positive"]) == pytest.approx((math.log(1 + math.exp(-2)) + math.log(2)) / 2, rel=1e-6)


# --- instance / adversarial ------------------------------------------------------------------------------


def test_instance_loss_matches_reference() -> None:
    torch.manual_seed(8)
    vl, tl, labels = torch.randn(3, 5), torch.randn(3, 5), torch.tensor([4, 0, 2])

    def ce(logits: torch.Tensor) -> float:
        total = 0.0
        for i in range(3):
            exps = [math.exp(float(v)) for v in logits[i]]
            total += -math.log(exps[int(labels[i])] / sum(exps))
        return total / 3

    got = InstanceLoss()(vl, tl, labels)
    assert float(got["visual"]) == pytest.approx(ce(vl), rel=1e-5)
    assert float(got["total"]) == pytest.approx(ce(vl) + ce(tl), rel=1e-5)


def test_domain_adversarial_loss_matches_eq4() -> None:
    pos, neg = torch.tensor([0.3, -1.0, 2.0]), torch.tensor([0.5, -0.2])
    want = (sum(math.log(_sigmoid(float(a))) for a in pos) / 3
            + sum(math.log(1 - _sigmoid(float(b))) for b in neg) / 2)
    got = DomainAdversarialLoss()(pos, neg)
    assert float(got["log_likelihood"]) == pytest.approx(want, rel=1e-6)
    assert float(got["total"]) == pytest.approx(-want, rel=1e-6)


# --- criteria combine the terms with the config's weights ------------------------------------------------


def _fake_batch(size: int) -> PairBatch:
    return PairBatch(ImageInput(torch.zeros(size, 4, 12), torch.zeros(size, 12)),
                     TextInput(torch.zeros(size, 3, 6), torch.ones(size, 3)))


def test_a3vse_criterion_weights_terms_as_the_paper() -> None:
    torch.manual_seed(9)
    config = build_config("a3vse", preset="test")
    assert (config.beta, config.margin_vt, config.margin_vs) == (0.8, 0.2, 0.3)
    emb = {k: F.normalize(torch.randn(3, 1, 16), dim=-1) for k in ("v", "t", "vu", "s")}
    names = ("v_vu", "t_s", "v_t", "vu_s", "v_s", "vu_t")
    extras = {"unlabelled_emb": emb["vu"], "pseudo_emb": emb["s"]}
    for name in names:
        extras[f"domain_{name}_pos"], extras[f"domain_{name}_neg"] = torch.randn(3), torch.randn(3)
    out = PairOutput(EncoderOutput(emb["v"]), EncoderOutput(emb["t"]), extras)
    got = build_loss(config)(out, _fake_batch(3))

    def tri(a: torch.Tensor, b: torch.Tensor, margin: float) -> float:
        sims = a[:, 0] @ b[:, 0].T
        return ref_triplet(sims, torch.eye(3, dtype=torch.bool), margin, hardest=True)

    lambdas = {"v_vu": 0.2, "t_s": 0.1, "v_t": 0.5, "vu_s": 0.5, "v_s": 0.3, "vu_t": 0.3}
    adv = sum(lambdas[n] * -float(DomainAdversarialLoss()(extras[f"domain_{n}_pos"],
                                                         extras[f"domain_{n}_neg"])["log_likelihood"])
              for n in names)
    want = 0.8 * tri(emb["v"], emb["t"], 0.2) + 0.2 * tri(emb["vu"], emb["s"], 0.3) + adv
    assert float(got["total"]) == pytest.approx(want, rel=1e-5)


def test_pvse_criterion_is_eq5() -> None:
    torch.manual_seed(10)
    config = build_config("pvse", preset="test")
    visual = EncoderOutput(F.normalize(torch.randn(3, 2, 8), dim=-1), local=torch.rand(3, 2, 8))
    text = EncoderOutput(F.normalize(torch.randn(3, 2, 8), dim=-1), local=torch.rand(3, 2, 8))
    got = build_loss(config)(PairOutput(visual, text), _fake_batch(3))
    want = (ref_triplet(ref_max_cos(visual.emb, text.emb), torch.eye(3, dtype=torch.bool), 0.1, True)
            + 0.1 * (ref_diversity_one(visual.local) + ref_diversity_one(text.local))
            + 0.01 * ref_mmd(visual.emb, text.emb, 1.0))
    assert float(got["total"]) == pytest.approx(want, rel=1e-5)


def test_pcme_criterion_combines_match_kl_and_uniformity() -> None:
    torch.manual_seed(11)
    config = build_config("pcme", {"kl_weight": 0.1, "uniformity_weight": 0.5}, preset="test")
    mu, logsigma = F.normalize(torch.randn(2, 1, 8), dim=-1), torch.randn(2, 1, 8) * 0.1
    v, t = torch.randn(2, 3, 8), torch.randn(2, 3, 8)
    extras = {"visual_samples": v, "text_samples": t, "match_scale": torch.tensor(2.0),
              "match_shift": torch.tensor(1.0)}
    out = PairOutput(EncoderOutput(mu, logsigma=logsigma), EncoderOutput(mu, logsigma=logsigma), extras)
    got = build_loss(config)(out, _fake_batch(2))
    kl = 2 * float(GaussianKLLoss()(mu, logsigma)["total"])
    uni = float(UniformityLoss(2.0)(torch.cat([v.reshape(-1, 8), t.reshape(-1, 8)]))["total"])
    want = ref_soft_contrastive(v, t, 2.0, 1.0) + 0.1 * kl + 0.5 * uni
    assert float(got["total"]) == pytest.approx(want, rel=1e-5)


def test_pcme_criterion_with_the_closed_form_distance() -> None:
    """match_distance='csd': PCME++'s match loss on the means and sigmas (no samples), + KL, + uniformity of
    the means; pseudo-positives with the config's alpha."""
    torch.manual_seed(15)
    config = build_config("pcme", {"kl_weight": 0.1, "uniformity_weight": 0.5, "match_distance": "csd",
                                   "pseudo_positive_weight": 0.2}, preset="test")
    mu_v, mu_t = F.normalize(torch.randn(3, 1, 8), dim=-1), F.normalize(torch.randn(3, 1, 8), dim=-1)
    ls_v, ls_t = torch.randn(3, 1, 8) * 0.2 - 1, torch.randn(3, 1, 8) * 0.2 - 1
    extras = {"match_scale": torch.tensor(2.0), "match_shift": torch.tensor(1.0)}
    out = PairOutput(EncoderOutput(mu_v, logsigma=ls_v), EncoderOutput(mu_t, logsigma=ls_t), extras)
    got = build_loss(config)(out, _fake_batch(3))
    kl = float(GaussianKLLoss()(mu_v, ls_v)["total"]) + float(GaussianKLLoss()(mu_t, ls_t)["total"])
    uni = float(UniformityLoss(2.0)(torch.cat([mu_v[:, 0], mu_t[:, 0]]))["total"])
    match = ref_closed_form_match(mu_v[:, 0], ls_v[:, 0], mu_t[:, 0], ls_t[:, 0], 2.0, 1.0,
                                  torch.eye(3, dtype=torch.bool), 0.2)
    assert float(got["total"]) == pytest.approx(match + 0.1 * kl + 0.5 * uni, rel=1e-5)


@pytest.mark.parametrize("weights", [(1.0, 1.0, 1.0), (0.7, 0.4, 1.3)])
def test_instance_criterion_is_eq9(weights: tuple[float, float, float]) -> None:
    """Zheng et al. eq. 9: lambda_1 L_rank (eq. 4, cosine, margin alpha) + lambda_2 L_visual + lambda_3 L_textual."""
    torch.manual_seed(12)
    w_rank, w_visual, w_text = weights
    config = build_config("instance", {"rank_weight": w_rank, "visual_weight": w_visual,
                                       "textual_weight": w_text, "margin": 0.5}, preset="test")
    visual, text = EncoderOutput(torch.randn(4, 1, 6)), EncoderOutput(torch.randn(4, 1, 6))
    labels = torch.tensor([0, 2, 2, 1])  # rows 1 and 2 show the same photo: they are each other's positives
    extras = {"visual_logits": torch.randn(4, 3), "text_logits": torch.randn(4, 3), "labels": labels}
    batch = _fake_batch(4)
    batch = PairBatch(batch.visual, batch.text, visual_ids=labels)
    got = build_loss(config)(PairOutput(visual, text, extras), batch)

    sims = torch.tensor([[_cos(visual.emb[i, 0], text.emb[j, 0]) for j in range(4)] for i in range(4)])
    rank = ref_triplet(sims, labels[:, None] == labels[None, :], 0.5, hardest=True)

    def ce(logits: torch.Tensor) -> float:
        return sum(-math.log(math.exp(float(logits[i, labels[i]])) / sum(math.exp(float(v)) for v in logits[i]))
                   for i in range(4)) / 4

    assert rank > 0.1  # the ranking term is large enough that leaving it out of the total shows
    assert float(got["rank"]) == pytest.approx(rank, rel=1e-5)
    want = w_rank * rank + w_visual * ce(extras["visual_logits"]) + w_text * ce(extras["text_logits"])
    assert float(got["total"]) == pytest.approx(want, rel=1e-5)


@pytest.mark.parametrize("weight", [0.0, 0.5, 1.0])
def test_vse_with_pseudo_pairs_is_the_weighted_triplet_over_both_kinds_of_pairs(weight: float) -> None:
    """VSE with A3VSE's D^u: hinge of every anchor against the hardest negative among ALL visuals / captions
    (annotated and pseudo), pseudo anchors weighted by ``pseudo_weight``, divided by the annotated count."""
    torch.manual_seed(11)
    config = build_config("vse", {"pseudo_weight": weight}, preset="test")
    n, m, margin = 3, 4, config.margin
    v, t = F.normalize(torch.randn(n, 1, 8), dim=-1), F.normalize(torch.randn(n, 1, 8), dim=-1)
    vu, s = F.normalize(torch.randn(m, 1, 8), dim=-1), F.normalize(torch.randn(m, 1, 8), dim=-1)
    out = PairOutput(EncoderOutput(v), EncoderOutput(t), {"unlabelled_emb": vu, "pseudo_emb": s})
    got = build_loss(config)(out, _fake_batch(n))
    if weight == 0:  # off: the plain VSE++ loss of the annotated pairs
        want = ref_triplet(v[:, 0] @ t[:, 0].T, torch.eye(n, dtype=torch.bool), margin, hardest=True)
        assert float(got["total"]) == pytest.approx(want, rel=1e-5)
        return
    visuals, captions = torch.cat([v, vu])[:, 0], torch.cat([t, s])[:, 0]
    total = 0.0
    for a in range(n + m):
        w = 1.0 if a < n else weight
        pos = _cos(visuals[a], captions[a])
        worst_caption = max(max(0.0, margin - pos + _cos(visuals[a], captions[j])) for j in range(n + m) if j != a)
        worst_visual = max(max(0.0, margin - pos + _cos(visuals[i], captions[a])) for i in range(n + m) if i != a)
        total += w * (worst_caption + worst_visual)
    assert float(got["total"]) == pytest.approx(total / n, rel=1e-5)
    assert float(got["pseudo"]) > 0
