"""A3VSE's adversarial game (eq. 4, 9, 10; GRL of Ganin & Lempitsky, the paper's [9]): who minimises what.

Eq. 10 asks the discriminators to maximise l^d (the log-likelihood of eq. 4, i.e. minimise its binary
cross-entropy) and the encoders to minimise it (maximise the BCE). One optimizer descends ``total`` for every
parameter; the gradient reversal layer flips the sign for the encoders only. These tests check each half of
that on first-order steps, the gamma schedule of §4.3, and that the lambdas scaling the discriminators' own
loss does not slow them down under Adam (the trainer's optimizer).
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from trainer.methods import (
    EncoderOutput,
    ImageInput,
    MethodInputError,
    PairBatch,
    TextInput,
    build_config,
    build_loss,
    build_model,
)
from trainer.methods.a3vse import DomainAdversarialLoss
from trainer.methods.encoders import GradientReversal, grl_gamma

torch.set_num_threads(1)


def _pair_batch(config, size: int = 6, progress: float = 0.5) -> PairBatch:  # noqa: ANN001
    """A fully annotated batch (no pseudo pairs): only the v-t discriminator runs, as on Flickr8k."""
    image = ImageInput(torch.randn(size, config.image_regions, config.image_dim), None)
    text = TextInput(torch.randn(size, 5, config.word_dim), torch.ones(size, 5))
    return PairBatch(image, text, progress=progress)


def _adv_loss(model, criterion, batch) -> torch.Tensor:  # noqa: ANN001
    return criterion(model(batch), batch)["adv_v_t"]


def _step_along_gradient(params: list[nn.Parameter], lr: float) -> None:
    with torch.no_grad():
        for p in params:
            p -= lr * p.grad


def test_reversal_is_identity_forward_and_scales_the_gradient_by_minus_gamma() -> None:
    x = torch.randn(3, 4, requires_grad=True)
    grl = GradientReversal(0.7)
    y = grl(x)
    assert torch.equal(y, x)
    weights = torch.randn(3, 4)
    (y * weights).sum().backward()
    assert torch.allclose(x.grad, -0.7 * weights)


def test_gamma_schedule_follows_section_4_3() -> None:
    assert grl_gamma(0.0) == 0.0
    values = [grl_gamma(p / 10) for p in range(11)]
    assert all(a < b for a, b in zip(values, values[1:], strict=False))
    assert grl_gamma(1.0) == pytest.approx(2 / (1 + math.exp(-10)) - 1)
    assert grl_gamma(0.1) == pytest.approx(2 / (1 + math.exp(-1)) - 1)  # 0.46: a tenth of the way in
    with pytest.raises(MethodInputError, match="progress"):
        grl_gamma(1.5)


def test_only_the_v_t_discriminator_runs_on_a_fully_annotated_batch() -> None:
    torch.manual_seed(0)
    config = build_config("a3vse", {}, preset="test")
    out = build_model(config)(_pair_batch(config))
    assert sorted(k for k in out.extras if k.startswith("domain_")) == ["domain_v_t_neg", "domain_v_t_pos"]


def test_a_discriminator_step_decreases_the_bce_and_an_encoder_step_increases_it() -> None:
    """Eq. 10: gradient descent on ``total`` moves the discriminator towards a lower BCE (max l^d) and, through
    the reversal layer, the encoders towards a higher BCE (min l^d)."""
    torch.manual_seed(0)
    config = build_config("a3vse", {"adversarial_game": "reversal"}, preset="test")
    model, criterion = build_model(config), build_loss(config)
    batch = _pair_batch(config)
    before = _adv_loss(model, criterion, batch)
    criterion(model(batch), batch)["total"].backward()
    encoders = [p for name, p in model.named_parameters() if not name.startswith("discriminators.")]
    discriminator = list(model.discriminators["v_t"].parameters())
    assert all(p.grad is None for name, p in model.named_parameters()
               if name.startswith("discriminators.") and not name.startswith("discriminators.v_t"))

    state = {k: v.clone() for k, v in model.state_dict().items()}
    _step_along_gradient(discriminator, 1e-2)
    after_disc = _adv_loss(model, criterion, batch)
    model.load_state_dict(state)
    _step_along_gradient([p for p in encoders if p.grad is not None], 1e-2)
    after_enc = _adv_loss(model, criterion, batch)
    assert after_disc.item() < before.item() - 1e-6
    assert after_enc.item() > before.item() + 1e-6


def test_the_encoders_adversarial_gradient_is_minus_gamma_lambda_times_the_bce_gradient(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The encoder-side gradient of ``adv`` is exactly ``-gamma * lambda_vt`` times that of the plain BCE
    (what an encoder would get from the discriminator without the reversal layer)."""
    torch.manual_seed(0)
    config = build_config("a3vse", {"adversarial_game": "reversal"}, preset="test")
    model, criterion = build_model(config), build_loss(config)
    batch = _pair_batch(config, progress=0.3)
    criterion(model(batch), batch)["adv"].backward()
    reversed_grad = model.region_fc.weight.grad.clone()
    model.zero_grad()
    monkeypatch.setattr(model.grl, "forward", lambda x: x)  # no reversal: the plain gradient of the BCE
    criterion(model(batch), batch)["adv_v_t"].backward()
    expected = -grl_gamma(0.3, config.grl_eta) * config.lambda_vt * model.region_fc.weight.grad
    assert reversed_grad.abs().max().item() > 0.0
    assert torch.allclose(reversed_grad, expected, atol=1e-7, rtol=1e-4)


def test_at_progress_zero_the_encoders_get_no_adversarial_gradient_but_the_discriminator_learns() -> None:
    torch.manual_seed(0)
    config = build_config("a3vse", {"adversarial_game": "reversal"}, preset="test")
    model, criterion = build_model(config), build_loss(config)
    batch = _pair_batch(config, progress=0.0)
    criterion(model(batch), batch)["adv"].backward()
    assert model.region_fc.weight.grad.abs().max().item() == 0.0
    assert model.discriminators["v_t"][0].weight.grad.abs().max().item() > 0.0


def test_lambda_on_the_discriminators_own_loss_does_not_slow_it_under_adam() -> None:
    """Eq. 9 weights l^d by lambda for the discriminator too, where DANN leaves its loss unweighted. Adam
    divides each step by the gradient's running RMS, so a constant factor on the loss leaves the
    discriminator's updates unchanged (up to Adam's epsilon): this is not a reason for it to lag."""
    torch.manual_seed(0)
    features = torch.randn(16, 8)
    labels = torch.arange(16) < 8
    criterion = DomainAdversarialLoss()

    def train(scale: float, optimizer: type[torch.optim.Optimizer]) -> torch.Tensor:
        torch.manual_seed(1)
        disc = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
        opt = optimizer(disc.parameters(), lr=1e-2)
        for _ in range(20):
            logits = disc(features).squeeze(-1)
            loss = scale * criterion(logits[labels], logits[~labels])["total"]
            opt.zero_grad()
            loss.backward()
            opt.step()
        return torch.cat([p.detach().flatten() for p in disc.parameters()])

    adam = train(1.0, torch.optim.Adam), train(0.1, torch.optim.Adam)
    assert (adam[0] - adam[1]).abs().max().item() < 1e-4
    sgd = train(1.0, torch.optim.SGD), train(0.1, torch.optim.SGD)  # where the factor would matter (DANN's SGD)
    assert (sgd[0] - sgd[1]).abs().max().item() > 1e-3


def test_discriminator_accuracy_reads_who_is_winning() -> None:
    loss = DomainAdversarialLoss()
    assert loss(torch.tensor([2.0, 1.0]), torch.tensor([-1.0, -3.0]))["accuracy"].item() == 1.0
    assert loss(torch.tensor([-2.0, -1.0]), torch.tensor([1.0, 3.0]))["accuracy"].item() == 0.0  # swapped
    assert loss(torch.tensor([2.0, -1.0]), torch.tensor([-1.0, 3.0]))["accuracy"].item() == 0.5


def test_criterion_reports_the_spread_of_each_modality_and_the_v_t_accuracy() -> None:
    torch.manual_seed(0)
    config = build_config("a3vse", {}, preset="test")
    model, criterion = build_model(config), build_loss(config)
    batch = _pair_batch(config)
    out = model(batch)
    terms = criterion(out, batch)
    assert 0.0 <= terms["acc_v_t"].item() <= 1.0 and "acc_v_vu" not in terms
    assert terms["spread_v"].item() > 0.0 and not terms["spread_v"].requires_grad
    collapsed = out.text.emb[:1].expand_as(out.text.emb)
    out.text = EncoderOutput(emb=collapsed, attn=out.text.attn)
    assert criterion(out, batch)["spread_t"].item() == pytest.approx(0.0, abs=1e-6)


def test_confusion_game_each_side_moves_only_its_own_parameters_and_stops_at_chance() -> None:
    """The default game: the discriminator's BCE reaches only the discriminator, the encoders' confusion
    term (cross-entropy to the label 1/2) reaches only the encoders, and an encoder step lowers it."""
    from trainer.methods.a3vse import domain_confusion

    torch.manual_seed(0)
    config = build_config("a3vse", {}, preset="test")
    assert config.adversarial_game == "confusion"
    model, criterion = build_model(config), build_loss(config)
    batch = _pair_batch(config, progress=0.5)
    assert "acc_v_t" in criterion(model(batch), batch)  # the discriminator's accuracy is still reported
    bce = DomainAdversarialLoss()(*(model(batch).extras[f"domain_v_t_{s}"] for s in ("pos", "neg")))["total"]
    bce.backward()
    assert model.region_fc.weight.grad is None  # the discriminator learns on detached embeddings
    assert model.discriminators["v_t"][0].weight.grad.abs().max().item() > 0.0
    model.zero_grad()
    out = model(batch)
    conf = domain_confusion(out.extras["confusion_v_t_pos"], out.extras["confusion_v_t_neg"])
    conf.backward()
    assert model.discriminators["v_t"][0].weight.grad is None  # held fixed for the encoders' term
    assert model.region_fc.weight.grad.abs().max().item() > 0.0
    before = conf.item()
    _step_along_gradient([p for p in model.parameters() if p.grad is not None], 1e-2)
    out = model(batch)
    assert domain_confusion(out.extras["confusion_v_t_pos"], out.extras["confusion_v_t_neg"]).item() < before
    # inside adv_v_t the confusion term is weighted by the GRL's gamma schedule (and lambda_vt in adv)
    gamma = grl_gamma(0.5, config.grl_eta)
    assert out.extras["confusion_weight"].item() == pytest.approx(gamma)
    game = DomainAdversarialLoss()(*(out.extras[f"domain_v_t_{s}"] for s in ("pos", "neg")))["total"]
    terms = criterion(out, batch)
    assert terms["adv_v_t"].item() == pytest.approx(game.item() + gamma * terms["conf_v_t"].item(), rel=1e-5)
    assert terms["adv"].item() == pytest.approx(config.lambda_vt * terms["adv_v_t"].item(), rel=1e-5)


def test_domain_confusion_is_zero_at_chance_and_its_gradient_vanishes_there() -> None:
    from trainer.methods.a3vse import domain_confusion

    zero = torch.zeros(4, requires_grad=True)
    value = domain_confusion(zero[:2], zero[2:])
    value.backward()
    assert value.item() == pytest.approx(0.0, abs=1e-7) and zero.grad.abs().max().item() == 0.0
    sure = torch.tensor([5.0, 5.0]), torch.tensor([-5.0, -5.0])  # a winning discriminator: confusion > 0
    swapped = torch.tensor([-5.0, -5.0]), torch.tensor([5.0, 5.0])  # a fooled one: just as far from chance
    assert domain_confusion(*sure).item() > 1.0
    assert domain_confusion(*sure).item() == pytest.approx(domain_confusion(*swapped).item())
