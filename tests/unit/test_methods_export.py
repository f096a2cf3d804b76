"""ONNX export of every method's encoders: onnxruntime agrees with torch for any batch and length."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from trainer.methods import ExportError, build_config, build_model, export_model, list_methods, load_manifest
from trainer.methods.export import _Encoder, dummy_inputs, quantize_encoders

torch.set_num_threads(1)
SHAPES = [(1, 2), (3, 7), (2, 11)]  # (batch, sequence length) unlike the traced (2, 5); 11 > CNN canvas


def _session(path: Path) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _trained_looking(method: str, text_encoder: str = "glove"):  # noqa: ANN202
    """A test-size model whose batch-norm statistics are not the defaults (as after training)."""
    torch.manual_seed(0)
    model = build_model(build_config(method, {"text_encoder": text_encoder}, preset="test"))
    for module in model.modules():
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 2.0)
    return model.eval()


EXPORTS = [(m, "glove") for m in list_methods()] + [
    ("pvse", "minilm-sentence"), ("vse", "minilm-sentence"), ("pcme", "minilm")]


@pytest.mark.parametrize(("method", "text_encoder"), EXPORTS)
def test_onnx_encoders_match_torch(tmp_path: Path, method: str, text_encoder: str) -> None:
    model = _trained_looking(method, text_encoder)
    manifest = export_model(model, tmp_path / "export", int8=False)  # the float graphs: exact (int8: below)
    assert manifest == load_manifest(tmp_path / "export")
    for modality, spec in manifest["encoders"].items():
        session = _session(tmp_path / "export" / spec["file"])
        assert [i.name for i in session.get_inputs()] == [s["name"] for s in spec["inputs"]]
        assert [o.name for o in session.get_outputs()] == [s["name"] for s in spec["outputs"]]
        wrapper = _Encoder(model, modality, tuple(s["name"] for s in spec["inputs"]),
                           tuple(s["name"] for s in spec["outputs"]))
        for batch, length in SHAPES:
            torch.manual_seed(batch * 10 + length)
            regions = model.config.image_regions
            args = dummy_inputs(spec["inputs"], batch=batch, length=length, regions=regions)
            got = session.run(None, {s["name"]: a.numpy() for s, a in zip(spec["inputs"], args, strict=True)})
            with torch.no_grad():
                want = wrapper(*args)
            for name, g, w in zip([s["name"] for s in spec["outputs"]], got, want, strict=True):
                assert g.shape == tuple(w.shape), (modality, name)
                assert np.abs(g - w.numpy()).max() < 1e-4, (modality, name, batch, length)


@pytest.mark.parametrize("method", ["pvse", "pcme"])
def test_models_that_attend_locally_export_int8_image_and_video_graphs_close_to_torch(tmp_path: Path,
                                                                                      method: str) -> None:
    model = _trained_looking(method)
    manifest = export_model(model, tmp_path / "export")
    assert manifest["int8"] == ["image", "video"] and manifest == load_manifest(tmp_path / "export")
    for modality, spec in manifest["encoders"].items():
        graph = onnx.load(str(tmp_path / "export" / spec["file"]))
        assert any(n.op_type == "MatMulInteger" for n in graph.graph.node) == (modality != "text"), modality
        session = _session(tmp_path / "export" / spec["file"])
        wrapper = _Encoder(model, modality, tuple(s["name"] for s in spec["inputs"]),
                           tuple(s["name"] for s in spec["outputs"]))
        torch.manual_seed(1)
        args = dummy_inputs(spec["inputs"], batch=4, length=6, regions=model.config.image_regions)
        got = session.run(None, {s["name"]: a.numpy() for s, a in zip(spec["inputs"], args, strict=True)})
        with torch.no_grad():
            want = [w.numpy() for w in wrapper(*args)]
        names = [s["name"] for s in spec["outputs"]]
        emb, ref = got[0].reshape(-1, got[0].shape[-1]), want[0].reshape(-1, want[0].shape[-1])
        cosine = (emb * ref).sum(-1) / np.linalg.norm(emb, axis=-1) / np.linalg.norm(ref, axis=-1)
        assert cosine.min() > 0.99, (modality, cosine.min())
        attention = names.index("attention")
        assert np.abs(got[attention] - want[attention]).max() < 0.05, modality
        if "log_sigma" in names:
            at = names.index("log_sigma")
            assert np.abs(got[at] - want[at]).mean() < 0.05, modality


def test_int8_is_for_models_that_attend_locally_and_quantizing_twice_changes_nothing(tmp_path: Path) -> None:
    assert "int8" not in export_model(_trained_looking("vse"), tmp_path / "vse")
    export_model(_trained_looking("pvse"), tmp_path / "pvse", int8=False)
    assert "int8" not in load_manifest(tmp_path / "pvse")
    first = quantize_encoders(tmp_path / "pvse")
    image = (tmp_path / "pvse" / "image.onnx").read_bytes()
    assert first["int8"] == ["image", "video"] and quantize_encoders(tmp_path / "pvse") == first
    assert (tmp_path / "pvse" / "image.onnx").read_bytes() == image
    assert sorted(p.name for p in (tmp_path / "pvse").iterdir()) == ["image.onnx", "manifest.json", "text.onnx",
                                                                      "video.onnx"]


def test_manifest_describes_the_method(tmp_path: Path) -> None:
    model = _trained_looking("pvse")
    manifest = export_model(model, tmp_path / "pvse")
    config = model.config
    assert manifest["method"] == "pvse" and manifest["version"] == 1
    assert manifest["feature_backbone"] == "efficientnet-lite0" and manifest["text_encoder"] == "glove"
    assert (manifest["num_embeddings"], manifest["embed_dim"], manifest["attention_heads"]) == (2, 8, 2)
    assert manifest["similarity"] == "max-cosine"
    image = manifest["encoders"]["image"]
    assert image["inputs"] == [
        {"name": "local", "shape": ["batch", "regions", config.image_dim], "dtype": "float32"},
        {"name": "pooled", "shape": ["batch", config.image_dim], "dtype": "float32"}]
    assert [o["name"] for o in image["outputs"]] == ["embeddings", "attention"]
    assert manifest["encoders"]["text"]["outputs"][1]["shape"] == ["batch", 2, "tokens"]
    assert manifest["config"] == config.to_dict()
    assert json.loads((tmp_path / "pvse" / "manifest.json").read_text()) == manifest


def test_pcme_manifest_names_its_gaussian_outputs_and_match_scalars(tmp_path: Path) -> None:
    model = _trained_looking("pcme")
    manifest = export_model(model, tmp_path / "pcme")
    assert [o["name"] for o in manifest["encoders"]["video"]["outputs"]] == ["mu", "log_sigma", "attention"]
    assert manifest["probabilistic"] is True and manifest["num_samples"] == model.config.num_samples
    assert manifest["match_scale"] == pytest.approx(model.match_scale.item())
    assert manifest["match_shift"] == pytest.approx(model.match_shift.item())


def test_similarity_network_export_matches_torch(tmp_path: Path) -> None:
    model = _trained_looking("twobranch-sim")
    manifest = export_model(model, tmp_path / "sim")
    assert manifest["similarity"] == "network"
    session = _session(tmp_path / "sim" / manifest["similarity_model"]["file"])
    visual, text = torch.randn(5, 8), torch.randn(5, 8)
    (got,) = session.run(None, {"visual": visual.numpy(), "text": text.numpy()})
    with torch.no_grad():
        want = model.pair_scores(visual, text)
    assert np.abs(got - want.numpy()).max() < 1e-5


def test_export_replaces_atomically_and_leaves_the_model_untouched(tmp_path: Path) -> None:
    model = build_model(build_config("vse", preset="test"))
    model.train()
    target = tmp_path / "models" / "vse"
    export_model(model, target)
    (target / "stale.txt").write_text("from an older export")
    export_model(model, target, modalities=("image", "text"))
    assert sorted(p.name for p in target.iterdir()) == ["image.onnx", "manifest.json", "text.onnx"]
    assert sorted(p.name for p in target.parent.iterdir()) == ["vse"]  # no temporary folders left behind
    assert model.training


def test_export_failure_leaves_no_partial_output(tmp_path: Path) -> None:
    model = build_model(build_config("vse", preset="test"))
    with pytest.raises(ExportError, match="modalities"):
        export_model(model, tmp_path / "out", modalities=("image", "audio"))
    assert not (tmp_path / "out").exists()
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "manifest.json").write_text('{"version": 99}')
    with pytest.raises(ExportError, match="version"):
        load_manifest(tmp_path / "bad")
