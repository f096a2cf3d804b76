"""The training loop on tiny generated caption folders: every method trains, resumes exactly, reports JSON.

Features come from the prepared assets (the real backbone and MiniLM) once per module; models use the
``test`` preset, so an epoch takes milliseconds.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from engine.features.encoders import Encoders
from engine.features.featurestore import FeatureStore
from tests.synthetic import make_motion_gif_folder, make_toy_photo_folder
from trainer import checkpoint as ckpt
from trainer.cli import parse_overrides
from trainer.data import FeatureNeeds, FeatureSource
from trainer.evaluation import encode_pairs, similarity_matrix
from trainer.methods import ConfigError, list_methods, load_manifest
from trainer.sparse import SparseConfig
from trainer.splits import split_view
from trainer.train import (
    RECIPES,
    Interrupted,
    Recipe,
    Reporter,
    StopRequest,
    TrainingError,
    TrainOptions,
    learning_rate,
    load_optimizer,
    make_optimizer,
    resolve_config,
    train,
    update_after_validation,
)

torch.set_num_threads(1)


def options(folder: Path, out: Path, assets: Path, method: str = "vse", **changes) -> TrainOptions:
    base = dict(method=method, data=folder, out=out, epochs=1, preset="test", batch_size=6, assets=assets,
                device="cpu")
    return TrainOptions(**{**base, **changes})


class Lines:
    """Collects a Reporter's JSON lines."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, line: str) -> None:
        self.lines.append(line)

    def events(self, kind: str | None = None) -> list[dict]:
        parsed = [json.loads(line) for line in self.lines]
        return [e for e in parsed if kind is None or e["event"] == kind]


@pytest.mark.parametrize("method", list_methods())
def test_every_method_trains_one_epoch_and_leaves_a_complete_model_folder(workspace, tmp_path, method):
    folder, source, assets = workspace
    out = tmp_path / method
    lines = Lines()
    sparse = SparseConfig(0.75, None, 0) if method == "a3vse" else SparseConfig()
    report = train(options(folder, out, assets, method, sparse=sparse), source=source,
                   reporter=Reporter(True, write=lines))
    assert report["n_media"] == 4 and report["n_captions"] == 8
    recalls = [report[d][k] for d in ("i2t", "t2i") for k in ("r1", "r5", "r10")]
    assert all(0 <= r <= 100 for r in recalls) and report["rsum"] == pytest.approx(sum(recalls))
    for name in ("config.json", "model.safetensors", "trainer_state.json", "metrics.json", "onnx/manifest.json"):
        assert (out / name).is_file(), name
    assert len(list(out.glob("last-*.safetensors"))) == 1 and len(list(out.glob("optimizer-*.pt"))) == 1
    manifest = load_manifest(out / "onnx")
    assert manifest["method"] == method
    # what each visual branch learnt from: this folder holds photos only, so the video encoder is marked unused
    assert manifest["trained_on"]["image"] > 0 and manifest["trained_on"]["video"] == 0
    words = json.loads((out / "caption_words.json").read_text())  # what its training captions said, counted
    assert words["captions"] > 0 and words["words"] and all(n >= 1 for n in words["words"].values())
    state = ckpt.load_state(out)
    assert state.finished and state.epoch == 1 and len(state.history) == 1
    assert json.loads((out / "metrics.json").read_text())["rsum"] == pytest.approx(report["rsum"])
    model = ckpt.load_model(out)
    assert model.config.method == method and not model.training
    steps, epochs, done = lines.events("step"), lines.events("epoch"), lines.events("done")
    assert steps and {"epoch", "step", "total", "loss", "lr", "eta_s"} <= set(steps[-1])
    assert steps[-1]["step"] == steps[-1]["total"] and "total" in steps[-1]["loss"]
    assert len(epochs) == 1 and epochs[0]["best"] is True and "rsum" in epochs[0]["val"]
    assert done == [{"event": "done", "model_dir": str(out), "val": done[0]["val"]}]


def test_training_learns_a_separable_toy_set_far_above_chance(tmp_path, assets_dir):
    """40 toy photos whose captions name their colour, shape, size and background; 16 held out (dev).

    Chance on 16 photos x 32 captions is rsum ~188 (R@1 6.25 both ways); one epoch stays near it, 30 epochs
    of VSE on frozen features reach ~530. A loop that does not learn (no optimizer step, a loss that does not
    reach the parameters, captions scored against the wrong photos) stays near chance.
    """
    folder = tmp_path / "toy"
    make_toy_photo_folder(folder, 40, seed=5, dev_fraction=0.4)
    store = FeatureStore(tmp_path / "features.sqlite")
    try:
        source = FeatureSource(store, Encoders(assets_dir), tmp_path / "text-cache", assets_dir)
        report = train(options(folder, tmp_path / "vse", assets_dir, epochs=30, batch_size=8), source=source,
                       reporter=Reporter(True, enabled=False))
    finally:
        store.close()
    assert report["n_media"] == 16 and report["n_captions"] == 32
    assert report["rsum"] >= 400, report
    assert report["i2t"]["r1"] >= 30 and report["t2i"]["r1"] >= 30, report


def test_a3vse_reads_pseudo_pairs_for_unannotated_items(workspace, tmp_path, monkeypatch):
    folder, source, assets = workspace
    seen: list[int] = []
    import trainer.train as loop

    original = loop.make_batch

    def spy(data, rows, device, progress, rng, pictures=None, tokens=None, **more):
        batch = original(data, rows, device, progress, rng, pictures, tokens, **more)
        seen.append(0 if batch.pseudo_text is None else len(batch.pseudo_text))
        return batch

    monkeypatch.setattr(loop, "make_batch", spy)
    train(options(folder, tmp_path / "a", assets, "a3vse", sparse=SparseConfig(0.5, 1, 0)), source=source,
          reporter=Reporter(True, enabled=False))
    assert seen and all(n > 0 for n in seen)
    seen.clear()
    train(options(folder, tmp_path / "b", assets, "a3vse", sparse=SparseConfig(0.5, 1, 0), pseudo_pairs=False),
          source=source, reporter=Reporter(True, enabled=False))
    assert seen and not any(seen)


def test_pooled_regions_give_a_share_of_photos_their_pooled_feature_for_every_region(workspace, tmp_path,
                                                                                     monkeypatch):
    """``--set pooled_regions=P``: a training photo reads its pooled feature in place of its regions with probability P
    (as the engine reads a clip's frames and a photo past the local-feature cap); validation reads real regions."""
    folder, source, assets = workspace
    import trainer.train as loop

    original, shares = loop.make_batch, []

    def spy(*args, **more):
        batch = original(*args, **more)
        local, pooled = batch.visual.local, batch.visual.pooled
        shares.append(float(torch.isclose(local, pooled[:, None, :].expand_as(local)).all(-1).all(-1).float().mean()))
        return batch

    monkeypatch.setattr(loop, "make_batch", spy)
    for p in (0.0, 1.0, 0.5):
        shares.clear()
        train(options(folder, tmp_path / f"p{p}", assets, "pvse", epochs=2, overrides={"pooled_regions": p}),
              source=source, reporter=Reporter(True, enabled=False))
        if p == 0.0:
            assert shares and max(shares) == 0.0
        elif p == 1.0:
            assert shares and min(shares) == 1.0
        else:
            assert 0.2 < float(np.mean(shares)) < 0.8
    # a warm start (the app's retrain) keeps the start's share: it is the start's config
    shares.clear()
    train(options(folder, tmp_path / "warm", assets, "pvse", epochs=1, init_from=tmp_path / "p0.5"), source=source,
          reporter=Reporter(True, enabled=False))
    assert json.loads((tmp_path / "warm" / "config.json").read_text())["pooled_regions"] == 0.5
    assert 0.2 < float(np.mean(shares)) < 0.8
    with pytest.raises(ConfigError, match="pooled_regions"):
        resolve_config("pvse", {"pooled_regions": 1.5}, "test", assets)


def test_pool_regions_leaves_clips_and_regionless_inputs_alone():
    from trainer.batches import pool_regions
    from trainer.methods.interface import ImageInput, VideoInput

    local, pooled = torch.randn(4, 3, 5), torch.randn(4, 5)
    same = pool_regions(ImageInput(local, pooled), np.random.default_rng(0), 0.0)
    assert torch.equal(same.local, local)
    every = pool_regions(ImageInput(local, pooled), np.random.default_rng(0), 1.0)
    assert torch.equal(every.local, pooled[:, None, :].expand(4, 3, 5)) and torch.equal(every.pooled, pooled)
    assert torch.equal(local[0], ImageInput(local, pooled).local[0])  # the input is not changed in place
    video = VideoInput(torch.randn(2, 3, 5), torch.ones(2, 3))
    assert pool_regions(video, np.random.default_rng(0), 1.0) is video
    regionless = ImageInput(torch.zeros(4, 0, 5), pooled)
    assert pool_regions(regionless, np.random.default_rng(0), 1.0) is regionless


def _stop_after(steps: int, stop: StopRequest, lines: Lines):
    def write(line: str) -> None:
        lines(line)
        event = json.loads(line)
        if event["event"] == "step" and event["epoch"] == 2 and event["step"] >= steps:
            stop.request(15)

    return write


def test_an_interrupted_run_resumes_mid_epoch_to_the_same_weights(workspace, tmp_path, monkeypatch):
    folder, source, assets = workspace
    monkeypatch.setattr("trainer.reporting.STEP_EVENT_INTERVAL_S", 0.0)
    straight = tmp_path / "straight"
    train(options(folder, straight, assets, "pcme", epochs=3), source=source, reporter=Reporter(True, enabled=False))

    out, stop, lines = tmp_path / "interrupted", StopRequest(), Lines()
    with pytest.raises(Interrupted) as caught:
        train(options(folder, out, assets, "pcme", epochs=3), stop=stop, source=source,
              reporter=Reporter(True, write=_stop_after(1, stop, lines)))
    assert caught.value.signum == 15
    state = ckpt.load_state(out)
    assert (state.epoch, state.step, state.finished) == (1, 1, False)
    assert not (out / "metrics.json").exists()

    with pytest.raises(TrainingError, match="--resume"):
        train(options(folder, out, assets, "pcme", epochs=3), source=source, reporter=Reporter(True, enabled=False))
    train(options(folder, out, assets, "pcme", epochs=3, resume=True), source=source,
          reporter=Reporter(True, enabled=False))
    state, reference = ckpt.load_state(out), ckpt.load_state(straight)
    assert state.finished and [h["epoch"] for h in state.history] == [1, 2, 3]
    assert state.global_step == reference.global_step
    resumed, uninterrupted = ckpt.load_model(out).state_dict(), ckpt.load_model(straight).state_dict()
    for name, tensor in uninterrupted.items():
        torch.testing.assert_close(resumed[name], tensor, msg=name)


def test_resume_of_a_finished_run_with_more_epochs_goes_on(workspace, tmp_path):
    folder, source, assets = workspace
    out = tmp_path / "run"
    quiet = Reporter(True, enabled=False)
    train(options(folder, out, assets, epochs=1, patience=5), source=source, reporter=quiet)
    train(options(folder, out, assets, epochs=2, patience=5, resume=True), source=source, reporter=quiet)
    assert [h["epoch"] for h in ckpt.load_state(out).history] == [1, 2]
    with pytest.raises(TrainingError, match="--method"):
        train(options(folder, out, assets, "pvse", resume=True), source=source, reporter=quiet)


def test_config_overrides_are_validated_and_name_the_field(workspace):
    _, _, assets = workspace
    with pytest.raises(ConfigError, match="^num_embeds: must be >= 1"):
        resolve_config("pvse", {"num_embeds": 0}, "test", assets)
    with pytest.raises(ConfigError, match="^no_such_field: unknown field"):
        resolve_config("vse", {"no_such_field": 1}, "test", assets)
    with pytest.raises(ConfigError, match="^image_dim: fixed by the cached features"):
        resolve_config("vse", {"image_dim": 3}, "test", assets)
    config = resolve_config("pvse", {"num_embeds": 4}, "test", assets)
    assert (config.num_embeds, config.image_dim, config.word_dim, config.text_encoder) == (4, 1280, 384,
                                                                                           "minilm-sentence")
    assert parse_overrides(["num_embeds=4", "text_encoder=glove", "text_cnn_blocks=[1, 2]", "x=true"]) == {
        "num_embeds": 4, "text_encoder": "glove", "text_cnn_blocks": [1, 2], "x": True}
    with pytest.raises(ConfigError, match="--set"):
        parse_overrides(["num_embeds"])


def test_learning_rate_schedules():
    state = ckpt.TrainerState(method="vse")
    cosine = Recipe({}, schedule="cosine")
    step = Recipe({}, schedule="step", schedule_factor=0.1, step_epoch=16)
    assert learning_rate(cosine, 1.0, 0, 10, state) == 1.0
    assert learning_rate(cosine, 1.0, 5, 10, state) == pytest.approx(0.5)
    assert learning_rate(step, 1.0, 15, 30, state) == 1.0
    assert learning_rate(step, 1.0, 16, 30, state) == pytest.approx(0.1)
    assert learning_rate(Recipe({}, schedule="constant"), 1.0, 9, 10, state) == 1.0
    assert RECIPES["a3vse"].step_epoch == 8 and RECIPES["pvse"].optimizer == "amsgrad"
    plateau = Recipe({}, schedule="plateau", schedule_factor=0.5, schedule_patience=1)
    assert update_after_validation(plateau, state, 100.0, patience=3)
    assert not update_after_validation(plateau, state, 90.0, patience=3)  # schedule patience 1: halve
    assert learning_rate(plateau, 2e-4, 2, 10, state) == pytest.approx(1e-4)
    assert not update_after_validation(plateau, state, 95.0, patience=3)
    assert not state.stopped_early
    assert not update_after_validation(plateau, state, 99.0, patience=3)
    assert state.stopped_early and state.best_rsum == 100.0 and state.lr_scale == pytest.approx(0.125)


def test_with_later_ties_an_epoch_equal_to_the_best_becomes_the_best():
    """The app's warm retrain validates on a few held-aside captions, whose rsum soon stops moving: without
    ``--later-ties`` the first epoch that reached it would be all the run kept (#43)."""
    recipe = Recipe({}, schedule="constant")
    for later, kept in ((False, 1), (True, 3)):
        state = ckpt.TrainerState(method="pvse")
        for epoch, rsum in enumerate((400.0, 433.3, 433.3, 433.3, 420.0)):
            state.epoch = epoch
            update_after_validation(recipe, state, rsum, patience=20, later_ties=later)
        assert (state.best_epoch, state.best_rsum) == (kept, 433.3)
        assert state.bad_epochs == (1 if later else 3)


def test_with_keep_last_the_last_epoch_is_the_model_whatever_its_rsum():
    """A stage that cannot move the rsum (PCME's sigma stage: the means are frozen) keeps where it ended."""
    state = ckpt.TrainerState(method="pcme")
    for epoch, rsum in enumerate((400.0, 433.3, 420.0)):
        state.epoch = epoch
        assert update_after_validation(Recipe({}, schedule="constant"), state, rsum, patience=1, keep_last=True)
    assert (state.best_epoch, state.best_rsum, state.bad_epochs, state.stopped_early) == (2, 420.0, 0, False)


def test_early_stopping_keeps_the_best_epoch(workspace, tmp_path, monkeypatch):
    folder, source, assets = workspace
    rsums = iter([50.0, 80.0, 70.0, 60.0, 10.0])

    def fake_validation(model, pairs, device, distractors=None):
        return {"i2t": {"r1": 0.0}, "t2i": {"r1": 0.0}, "rsum": next(rsums)}

    monkeypatch.setattr("trainer.train.quick_rsum", fake_validation)
    out = tmp_path / "early"
    train(options(folder, out, assets, epochs=5, patience=2), source=source, reporter=Reporter(True, enabled=False))
    state = ckpt.load_state(out)
    assert state.epoch == 4 and state.stopped_early and state.best_epoch == 2
    assert [h["best"] for h in state.history] == [True, True, False, False]


@pytest.mark.slow
def test_video_encoder_reads_frame_order(tmp_path, assets_dir):
    """Order twins (same frames, events swapped) are told apart only through frame order: retrieval of the
    right twin is near perfect with ordered frames and falls to chance when evaluation shuffles them."""
    folder = tmp_path / "motion"
    make_motion_gif_folder(folder, 12, seed=3)
    with FeatureStore(tmp_path / "features.sqlite") as store:
        source = FeatureSource(store, Encoders(assets_dir), tmp_path / "text", assets_dir)
        out = tmp_path / "model"
        torch.manual_seed(0)
        train(TrainOptions(method="vse", data=folder, out=out, train_split="all", val_split="all", epochs=150,
                           preset="test", batch_size=8, lr=1e-2, schedule="constant", patience=1000, epoch_captions=0,
                           assets=assets_dir, device="cpu", overrides={"text_encoder": "glove", "embed_dim": 32}),
              source=source, reporter=Reporter(True, enabled=False))
        model = ckpt.load_model(out)
        pairs = source.pairs(split_view(folder, None).item_captions(), FeatureNeeds.of(model))
    twin = np.array([pairs.files.index(f[:-5] + ("b" if f[-5] == "a" else "a") + ".gif") for f in pairs.files])

    def twin_accuracy(shuffle: np.random.Generator | None) -> float:
        scores = similarity_matrix(model, encode_pairs(model, pairs, torch.device("cpu"), shuffle))
        own = pairs.caption_item
        columns = np.arange(len(own))
        return float(np.mean(scores[own, columns] > scores[twin[own], columns]))

    assert twin_accuracy(None) >= 0.85
    shuffled = [twin_accuracy(np.random.default_rng(seed)) for seed in range(4)]
    assert 0.3 <= float(np.mean(shuffled)) <= 0.7


def test_similarity_network_reranks_the_embedding_networks_candidates(workspace, tmp_path):
    from trainer.cli import evaluate_folder

    folder, source, assets = workspace
    quiet = Reporter(True, enabled=False)
    for method in ("twobranch-embed", "twobranch-sim"):
        train(options(folder, tmp_path / method, assets, method, epochs=2), source=source, reporter=quiet)
    cpu = torch.device("cpu")
    plain = evaluate_folder(tmp_path / "twobranch-sim", folder, "dev", cpu)
    everything = evaluate_folder(tmp_path / "twobranch-sim", folder, "dev", cpu, rerank=8,
                                 candidates=tmp_path / "twobranch-embed")
    assert everything["similarity"] == "network, re-ranking the top 8"
    assert everything["i2t"] == pytest.approx(plain["i2t"]) and everything["t2i"] == pytest.approx(plain["t2i"])
    top_one = evaluate_folder(tmp_path / "twobranch-sim", folder, "dev", cpu, rerank=1,
                              candidates=tmp_path / "twobranch-embed")
    first_stage = evaluate_folder(tmp_path / "twobranch-embed", folder, "dev", cpu)
    assert top_one["t2i"]["r1"] == pytest.approx(first_stage["t2i"]["r1"])  # re-ranking one keeps the order
    assert top_one["i2t"]["r1"] == pytest.approx(first_stage["i2t"]["r1"])


@pytest.mark.parametrize("method", ["vse", "pvse", "pcme"])
def test_a_checkpointed_optimizer_keeps_this_devices_implementation(method):
    """A state saved by the fused (CUDA) optimizer resumes with the CPU one here, moments and steps intact."""
    recipe = RECIPES[method]
    weights = [torch.nn.Parameter(torch.randn(4, 3)), torch.nn.Parameter(torch.randn(3))]
    saving = type(make_optimizer(recipe, weights, 1e-3))(weights, lr=1e-3, fused=True)  # as made on CUDA
    for p in weights:
        p.grad = torch.ones_like(p)
    saving.step()
    mine = make_optimizer(recipe, weights, 1e-3)
    assert not mine.defaults.get("fused")  # CPU parameters: the plain implementation
    load_optimizer(mine, saving.state_dict(), 1e-3)
    assert all(not g["fused"] and g["base_lr"] == 1e-3 for g in mine.param_groups)
    assert torch.equal(mine.state[weights[0]]["exp_avg"], saving.state[weights[0]]["exp_avg"])
    mine.step()  # runs (a fused group on CPU parameters would take another code path)
    assert float(mine.state[weights[0]]["step"]) == 2
