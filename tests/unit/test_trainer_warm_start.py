"""Warm starts (``train --init-from DIR``, issue #17): the run starts from the model's weights and config, the
starting model's validation score is epoch 0 (so a run never ends below its start), and L2-SP pulls the weights
toward the start (Li et al. 2018: alpha/2 * ||w - w0||^2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from trainer import checkpoint as ckpt
from trainer.train import TrainingError, TrainOptions, train

torch.set_num_threads(1)


def _options(folder: Path, out: Path, assets: Path, **changes) -> TrainOptions:
    base = dict(method="vse", data=folder, out=out, epochs=3, preset="test", batch_size=6, assets=assets,
                device="cpu")
    return TrainOptions(**{**base, **changes})


@pytest.fixture(scope="module")
def start(workspace, tmp_path_factory) -> Path:
    folder, source, assets = workspace
    out = tmp_path_factory.mktemp("warm") / "start"
    train(_options(folder, out, assets, epochs=4), source=source)
    return out


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    model = ckpt.load_model(folder)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_a_warm_start_begins_at_the_start_model_and_keeps_it_unless_an_epoch_beats_it(workspace, start, tmp_path):
    folder, source, assets = workspace
    out = tmp_path / "warm"
    from engine.trainercontract.events import EpochEnd, TrainerEvent
    from trainer.train import Reporter

    events: list[TrainerEvent] = []

    reporter = Reporter(False)
    reporter.emit = events.append  # type: ignore[method-assign]
    # a learning rate this high wrecks the weights: no epoch may beat the start, so the start is what is kept
    report = train(_options(folder, out, assets, init_from=start, lr=5.0, l2sp=0.0, schedule="constant"),
                   source=source, reporter=reporter)
    first = next(e for e in events if isinstance(e, EpochEnd))
    assert first.epoch == 0 and first.best
    state = ckpt.load_state(out)
    assert state is not None and state.options["init_from"] == str(start)
    assert state.best_epoch == 0 and report["best_epoch"] == 0
    start_w, kept = _weights(start), _weights(out)
    assert all(torch.equal(start_w[k], kept[k]) for k in start_w)
    assert json.loads((out / "config.json").read_text()) == json.loads((start / "config.json").read_text())


def test_l2sp_keeps_the_weights_nearer_the_start(workspace, start, tmp_path):
    folder, source, assets = workspace

    def drift(l2sp: float) -> float:
        out = tmp_path / f"l2sp-{l2sp}"
        train(_options(folder, out, assets, init_from=start, lr=1e-2, l2sp=l2sp, schedule="constant", epochs=2,
                       patience=10), source=source)
        model = ckpt.load_model(out)
        # the last epoch's weights, not the best (which may be the start itself)
        last = sorted(out.glob("last-*.safetensors"))[-1]
        ckpt.load_weights(last, model)
        w0 = _weights(start)
        return float(sum(((v - w0[k]) ** 2).sum() for k, v in model.state_dict().items() if k in w0))

    free, pulled = drift(0.0), drift(50.0)
    assert pulled < 0.5 * free


def test_a_warm_start_from_another_method_is_refused(workspace, start, tmp_path):
    folder, source, assets = workspace
    with pytest.raises(TrainingError, match="is a 'vse' model, not 'pvse'"):
        train(_options(folder, tmp_path / "x", assets, method="pvse", init_from=start), source=source)


def test_a_start_stored_without_its_untrained_video_branch_warm_starts_the_same(workspace, start, tmp_path):
    """A shipped model's weights leave out the branch that learnt from nothing (the starter's companion: its clips
    trained through the image side); loading builds that branch afresh, every other weight is the file's."""
    import shutil

    folder, source, assets = workspace
    slim = tmp_path / "slim"
    shutil.copytree(start, slim)
    tensors = ckpt.read_safetensors(slim / ckpt.WEIGHTS_FILE)
    prefixes = ckpt.untrained_prefixes(tensors, {"image": 10, "video": 0})
    assert prefixes and all("video" in p for p in prefixes)
    assert ckpt.untrained_prefixes(tensors, {"image": 10, "video": 3}) == ()  # a video side that learnt stays
    kept, metadata = ckpt.drop_untrained(tensors, prefixes)
    (slim / ckpt.WEIGHTS_FILE).write_bytes(ckpt.tensors_bytes(kept, metadata))
    full, loaded = _weights(start), _weights(slim)
    assert all(torch.equal(full[k], loaded[k]) for k in kept) and set(loaded) == set(full)

    report = train(_options(folder, tmp_path / "from-slim", assets, init_from=slim, epochs=1), source=source)
    reference = train(_options(folder, tmp_path / "from-full", assets, init_from=start, epochs=1), source=source)
    assert report["rsum"] == pytest.approx(reference["rsum"])

    del kept[next(iter(kept))]  # a trained weight missing is still an error
    (slim / ckpt.WEIGHTS_FILE).write_bytes(ckpt.tensors_bytes(kept, metadata))
    with pytest.raises(ckpt.CheckpointError, match="do not fit"):
        ckpt.load_model(slim)
