"""Checkpoints and model folders: atomic files, exact round trips, safe loading, clear errors."""

from __future__ import annotations

import json
import os

import pytest
import torch

from trainer import checkpoint as ckpt
from trainer.methods import build_config, build_model


@pytest.fixture
def out(tmp_path):
    """A folder of its own (the test's tmp_path also holds the isolated Polyseek home)."""
    folder = tmp_path / "run"
    folder.mkdir()
    return folder


def tiny_model(seed: int = 0):
    torch.manual_seed(seed)
    return build_model(build_config("twobranch-embed", {}, preset="test"))  # has batch-norm buffers


def trained_optimizer(model) -> torch.optim.Optimizer:
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, amsgrad=True)
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    optimizer.step()
    return optimizer


def test_atomic_write_replaces_whole_files_and_leaves_no_temporaries(out):
    path = out / "f.json"
    ckpt.write_json(path, {"a": 1})
    ckpt.write_json(path, {"a": 2})
    assert json.loads(path.read_text()) == {"a": 2}
    assert [p.name for p in out.iterdir()] == ["f.json"]
    with pytest.raises(ValueError):
        ckpt.write_json(path, {"a": float("nan")})  # not JSON: refused before anything is written
    assert json.loads(path.read_text()) == {"a": 2}


def test_a_failed_replace_keeps_the_old_file(out, monkeypatch):
    path = out / "model.safetensors"
    ckpt.atomic_write_bytes(path, b"old")

    def broken(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(OSError, match="disk full"):
        ckpt.atomic_write_bytes(path, b"new")
    assert path.read_bytes() == b"old" and len(list(out.iterdir())) == 1


def test_checkpoint_round_trip_restores_weights_optimizer_and_rng(out):
    model = tiny_model(0)
    optimizer = trained_optimizer(model)
    state = ckpt.TrainerState(method=model.config.method, epoch=2, step=3, global_step=11, best_rsum=120.5,
                              history=[{"epoch": 1}])
    rng = torch.get_rng_state()
    ckpt.save_checkpoint(out, model, {"optimizer": optimizer.state_dict(), "torch_rng": rng}, state)

    restored = tiny_model(1)
    loaded_state, training = ckpt.load_checkpoint(out, restored)
    for (name, a), b in zip(model.state_dict().items(), restored.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, msg=name)
    assert (loaded_state.epoch, loaded_state.step, loaded_state.global_step) == (2, 3, 11)
    assert loaded_state.best_rsum == 120.5 and loaded_state.history == [{"epoch": 1}]
    fresh = torch.optim.Adam(restored.parameters(), lr=1e-3, amsgrad=True)
    fresh.load_state_dict(training["optimizer"])
    first = next(iter(fresh.state.values()))
    torch.testing.assert_close(first["max_exp_avg_sq"], next(iter(optimizer.state.values()))["max_exp_avg_sq"])
    assert torch.equal(training["torch_rng"], rng)


def test_new_checkpoints_replace_old_files_only_after_the_state_names_them(out):
    model = tiny_model()
    state = ckpt.TrainerState(method=model.config.method, global_step=1)
    ckpt.save_checkpoint(out, model, {"x": torch.zeros(1)}, state)
    first = dict(state.resume)
    state.global_step = 2
    ckpt.save_checkpoint(out, model, {"x": torch.ones(1)}, state)
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted([*state.resume.values(), ckpt.STATE_FILE])
    assert first["weights"] not in names
    assert ckpt.load_state(out).resume == state.resume


def test_optimizer_files_are_loaded_without_unpickling_code(out):
    model = tiny_model()
    state = ckpt.TrainerState(method=model.config.method)
    ckpt.save_checkpoint(out, model, {"x": torch.zeros(1)}, state)

    class Evil:
        def __reduce__(self):
            return (os.system, ("echo owned",))

    torch.save({"x": Evil()}, out / state.resume["optimizer"])
    with pytest.raises(ckpt.CheckpointError, match="optimizer state"):
        ckpt.load_checkpoint(out, model)


def test_model_folders_load_and_explain_what_is_wrong(out):
    model = tiny_model()
    ckpt.save_config(out, model.config)
    with pytest.raises(ckpt.CheckpointError, match="model.safetensors: missing"):
        ckpt.load_model(out)
    ckpt.save_weights(out / ckpt.WEIGHTS_FILE, model)
    loaded = ckpt.load_model(out)
    assert not loaded.training and loaded.config == model.config
    other = build_model(build_config("twobranch-embed", {"hidden_dim": 3}, preset="test"))
    ckpt.save_weights(out / ckpt.WEIGHTS_FILE, other)
    with pytest.raises(ckpt.CheckpointError, match="do not fit the model"):
        ckpt.load_model(out)
    (out / ckpt.CONFIG_FILE).write_text('{"method": "vse", "margin": "wide"}')
    with pytest.raises(ckpt.CheckpointError, match="margin: must be a number"):
        ckpt.load_model(out)
    with pytest.raises(ckpt.CheckpointError, match="no such model folder"):
        ckpt.load_model(out / "absent")


def test_trainer_state_json_round_trip_and_version_check(out):
    state = ckpt.TrainerState(method="pcme", epoch=3, best_epoch=2, lr_scale=0.5, options={"lr": 2e-4})
    assert ckpt.TrainerState.from_json(state.to_json()) == state
    data = json.loads(state.to_json())
    data["version"] = 99
    with pytest.raises(ckpt.CheckpointError, match="state version 99"):
        ckpt.TrainerState.from_json(json.dumps(data))
    assert ckpt.load_state(out) is None


def test_temporaries_of_a_killed_writer_are_removed(out):
    (out / ".model.safetensors.abc.tmp").write_bytes(b"half")
    (out / "model.safetensors").write_bytes(b"whole")
    assert ckpt.remove_temporaries(out) == 1
    assert [p.name for p in out.iterdir()] == ["model.safetensors"]
