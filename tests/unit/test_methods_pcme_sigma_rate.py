"""PCME's sigma side can learn at its own rate (``sigma_lr_scale``) or alone (``--train-only sigma``): the parameter
groups a model hands the optimizer, and that the trainer and phase two use them."""

from __future__ import annotations

import pytest
import torch

from trainer.finetune import optimizer_groups
from trainer.methods import ImageInput, PairBatch, TextInput, build_config, build_loss, build_model
from trainer.runsettings import RECIPES, make_optimizer

torch.set_num_threads(1)


def _pcme(**overrides):
    torch.manual_seed(0)
    return build_model(build_config("pcme", {"embed_dim": 8, **overrides}, preset="test"))


def _sigma_ids(model) -> set[int]:
    return {id(p) for m in (model.sigma_globals, model.sigma_heads) for p in m.parameters()}


def test_one_group_of_every_parameter_by_default() -> None:
    """Scale 1 (and every other method) keeps one group, so runs saved before the option resume."""
    for model in (_pcme(), build_model(build_config("vse", {}, preset="test"))):
        (group,) = model.parameter_groups(2e-4)
        assert [id(p) for p in group["params"]] == [id(p) for p in model.parameters()]
        assert group["lr"] == group["base_lr"] == 2e-4


def test_the_sigma_side_gets_its_own_rate_and_the_rest_comes_last() -> None:
    model = _pcme(sigma_lr_scale=10.0)
    sigma, rest = model.parameter_groups(2e-4)
    assert {id(p) for p in sigma["params"]} == _sigma_ids(model)
    assert sigma["lr"] == sigma["base_lr"] == pytest.approx(2e-3)
    assert rest["lr"] == rest["base_lr"] == 2e-4
    everything = [id(p) for p in model.parameters()]
    assert sorted(id(p) for g in (sigma, rest) for p in g["params"]) == sorted(everything)
    assert model.sigma_heads["image"].offset is not None
    assert id(model.sigma_heads["image"].offset) in {id(p) for p in sigma["params"]}
    assert id(model.match_scale) in {id(p) for p in rest["params"]}


def test_phase_two_keeps_the_heads_groups_last() -> None:
    model = _pcme(sigma_lr_scale=5.0)
    groups = optimizer_groups(None, model, 1e-5, 2e-5)
    assert [g["name"] for g in groups] == ["sigma", "head"]
    assert [g["base_lr"] for g in groups] == pytest.approx([1e-4, 2e-5])


def _batch(model) -> PairBatch:
    config = model.config
    local = torch.randn(4, config.image_regions, config.image_dim)
    text = TextInput(torch.randn(4, 5, config.word_dim), torch.ones(4, 5), torch.randn(4, config.sentence_dim))
    return PairBatch(ImageInput(local, local.mean(1)), text, visual_ids=torch.arange(4))


@pytest.mark.parametrize("distance", ["sampled", "csd"])
def test_one_adam_step_moves_the_sigma_offset_scale_times_further(distance: str) -> None:
    """Adam's first step moves every parameter by ~lr whatever its gradient's size: the sigma offset moves
    ~scale x lr, the mean head's bias ~lr."""
    model = _pcme(sigma_lr_scale=20.0, match_distance=distance)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer = make_optimizer(RECIPES["pcme"], model.parameter_groups(1e-3), 1e-3)
    batch = _batch(model)
    build_loss(model.config)(model(batch), batch)["total"].backward()
    optimizer.step()
    moved = {n: float((p.detach() - before[n]).abs().max()) for n, p in model.named_parameters()}
    assert moved["sigma_heads.image.offset"] == pytest.approx(2e-2, rel=0.05)
    assert moved["mu_heads.image.fc.bias"] == pytest.approx(1e-3, rel=0.05)


def test_the_trainer_optimises_the_models_groups(workspace, tmp_path, monkeypatch) -> None:
    """``polyseek train --set sigma_lr_scale=...`` reaches the optimizer: the trainer builds it from
    ``model.parameter_groups``, not from one list of every parameter."""
    from trainer import train as training

    folder, source, assets = workspace
    made: list[list[dict]] = []
    real = training.make_optimizer

    def spy(recipe, params, lr):
        made.append(params)
        return real(recipe, params, lr)

    monkeypatch.setattr(training, "make_optimizer", spy)
    options = training.TrainOptions(method="pcme", data=folder, out=tmp_path / "run", epochs=1, preset="test",
                                    batch_size=6, assets=assets, device="cpu", lr=1e-3,
                                    overrides={"sigma_lr_scale": 4.0})
    training.train(options, source=source, reporter=training.Reporter(True, enabled=False))
    assert [(g["name"], g["base_lr"]) for g in made[0]] == [("sigma", pytest.approx(4e-3)), ("head", 1e-3)]


def test_the_sigma_side_learns_alone_and_the_means_keep_their_weights() -> None:
    """``--train-only sigma``: one group of the sigma side; every other parameter is frozen, so an optimizer step
    moves sigma and leaves the means and a, b of eq. 3 (the ranking) as they were."""
    model = _pcme()
    (group,) = model.trainable_groups(1e-3, "sigma")
    assert {id(p) for p in group["params"]} == _sigma_ids(model) and group["base_lr"] == 1e-3
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer = make_optimizer(RECIPES["pcme"], [group], 1e-3)
    batch = _batch(model)
    build_loss(model.config)(model(batch), batch)["total"].backward()
    optimizer.step()
    moved = {n for n, p in model.named_parameters() if not torch.equal(p.detach(), before[n])}
    assert "sigma_heads.image.offset" in moved
    assert moved and all(n.startswith(("sigma_globals.", "sigma_heads.")) for n in moved)


def test_a_model_without_that_part_refuses_to_train_it_alone(workspace, tmp_path) -> None:
    from trainer import train as training

    with pytest.raises(ValueError, match="no part 'sigma'"):
        build_model(build_config("vse", {}, preset="test")).trainable_groups(1e-3, "sigma")
    folder, source, assets = workspace
    options = training.TrainOptions(method="vse", data=folder, out=tmp_path / "run", epochs=1, preset="test",
                                    batch_size=6, assets=assets, device="cpu", train_only="sigma")
    with pytest.raises(training.TrainingError, match="--train-only"):
        training.train(options, source=source, reporter=training.Reporter(True, enabled=False))
