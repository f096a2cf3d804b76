"""A3VSE's Table 5 ablation switches: ``attention=False`` (mean pooling) and ``adversarial=False`` (no l^adv)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch

from trainer.methods import (
    ConfigError,
    ImageInput,
    PairBatch,
    TextInput,
    build_config,
    build_loss,
    build_model,
    config_from_json,
    export_model,
)
from trainer.methods.a3vse import uniform_attention
from trainer.methods.export import dummy_inputs

torch.set_num_threads(1)


def _config(**overrides):  # noqa: ANN202
    return build_config("a3vse", overrides, preset="test")


def _text(config, size: int = 4, length: int = 5) -> TextInput:  # noqa: ANN001
    mask = torch.ones(size, length)
    mask[0, 2:] = 0.0  # a short caption: its padding must get no weight
    return TextInput(torch.randn(size, length, config.word_dim), mask)


def _image(config, size: int = 4) -> ImageInput:  # noqa: ANN001
    return ImageInput(torch.randn(size, config.image_regions, config.image_dim), torch.randn(size, config.image_dim))


def _batch(config, size: int = 4) -> PairBatch:  # noqa: ANN001
    return PairBatch(_image(config, size), _text(config, size), progress=0.5,
                     unlabelled_visual=_image(config, size), pseudo_text=_text(config, size))


def test_switches_default_on_are_validated_and_round_trip() -> None:
    full = _config()
    assert full.attention is True and full.adversarial is True
    ablated = _config(attention=False, adversarial=False)
    assert config_from_json(ablated.to_json()) == ablated
    for name in ("attention", "adversarial"):
        with pytest.raises(ConfigError, match=name):
            _config(**{name: 1})


@pytest.mark.parametrize("global_residual", [False, True])
def test_without_attention_the_maps_are_uniform_and_heads_are_the_masked_mean(global_residual: bool) -> None:
    torch.manual_seed(0)
    config = _config(attention=False, global_residual=global_residual)
    model = build_model(config).eval()
    text = _text(config)
    with torch.no_grad():
        out = model.encode_text(text.tokens, text.mask)
        entities = model.text_rnn(text.tokens, text.mask)[0]
        lengths = text.mask.sum(1)
        mean = (entities * text.mask[..., None]).sum(1) / lengths[:, None]
        if global_residual:  # plus the linear map of the mean raw token vector, on every head
            mean = mean + model.text_global((text.tokens * text.mask[..., None]).sum(1) / lengths[:, None])
    want = text.mask / lengths[:, None]
    assert out.attn is not None and out.attn.shape == (4, config.num_heads, 5)
    assert torch.allclose(out.attn, want[:, None, :].expand_as(out.attn))
    expected = torch.nn.functional.normalize(mean.repeat(1, config.num_heads), dim=-1)
    assert torch.allclose(out.emb[:, 0], expected, atol=1e-6)
    with torch.no_grad():
        image = model.encode_image(_image(config).local, None)
    assert torch.allclose(image.attn, torch.full_like(image.attn, 1.0 / config.image_regions))


def test_uniform_attention_matches_a_naive_mean_per_row() -> None:
    x = torch.randn(3, 6, 4)
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0]], dtype=torch.float32)
    attn, heads = uniform_attention(x, mask, 2)
    for row, n in enumerate((6, 2, 1)):
        for k in range(2):
            assert torch.allclose(heads[row, k], x[row, :n].mean(0), atol=1e-6)
            assert attn[row, k, n:].abs().sum() == 0.0


def test_with_attention_the_maps_are_not_uniform() -> None:
    torch.manual_seed(0)
    config = _config()
    with torch.no_grad():
        out = build_model(config).eval().encode_image(_image(config).local, None)
    assert not torch.allclose(out.attn, torch.full_like(out.attn, 1.0 / config.image_regions))


def test_without_attention_the_attention_parameters_get_no_gradient() -> None:
    torch.manual_seed(0)
    config = _config(attention=False)
    model, criterion = build_model(config), build_loss(config)
    batch = _batch(config)
    criterion(model(batch), batch)["total"].backward()
    assert all(p.grad is None for p in model.attention.parameters())
    assert model.region_fc.weight.grad is not None and model.region_fc.weight.grad.abs().sum() > 0


def test_without_adversarial_loss_no_discriminator_runs_or_learns() -> None:
    torch.manual_seed(0)
    config = _config(adversarial=False)
    model, criterion = build_model(config), build_loss(config)
    batch = _batch(config)
    out = model(batch)
    assert not [k for k in out.extras if k.startswith("domain_")]
    assert {"unlabelled_emb", "pseudo_emb"} <= set(out.extras)  # the pseudo pairs still train (tri_vs)
    terms = criterion(out, batch)
    adversarial = {k: v for k, v in terms.items() if k.startswith("adv")}
    assert all(v.item() == 0.0 for v in adversarial.values()), adversarial
    assert terms["tri_vs"].item() > 0.0
    assert torch.allclose(terms["total"], terms["tri"])
    terms["total"].backward()
    assert all(p.grad is None for p in model.discriminators.parameters())
    assert model.region_fc.weight.grad is not None and model.region_fc.weight.grad.abs().sum() > 0


def test_with_adversarial_loss_the_discriminators_learn() -> None:
    torch.manual_seed(0)
    config = _config()
    model, criterion = build_model(config), build_loss(config)
    batch = _batch(config)
    terms = criterion(model(batch), batch)
    assert terms["adv"].item() > 0.0
    terms["total"].backward()
    assert all(p.grad is not None for p in model.discriminators.parameters())


@pytest.mark.parametrize("switches", [{"attention": False}, {"adversarial": False},
                                      {"attention": False, "adversarial": False}])
def test_ablated_models_export_to_onnx_and_match_torch(tmp_path: Path, switches: dict) -> None:
    torch.manual_seed(1)
    model = build_model(_config(**switches)).eval()
    manifest = export_model(model, tmp_path / "export")
    assert manifest["config"]["attention"] is switches.get("attention", True)
    for modality, spec in manifest["encoders"].items():
        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        session = ort.InferenceSession(str(tmp_path / "export" / spec["file"]), options,
                                       providers=["CPUExecutionProvider"])
        for batch, length in ((1, 2), (3, 7)):  # unlike the traced shapes: the axes must stay dynamic
            args = dummy_inputs(spec["inputs"], batch=batch, length=length, regions=model.config.image_regions)
            got = dict(zip([o.name for o in session.get_outputs()],
                           session.run(None, {s["name"]: a.numpy() for s, a in zip(spec["inputs"], args,
                                                                                   strict=True)}), strict=True))
            given = dict(zip([s["name"] for s in spec["inputs"]], args, strict=True))
            with torch.no_grad():
                if modality == "image":
                    want = model.encode_image(given["local"], None)
                elif modality == "video":
                    want = model.encode_video(given["frames"], given["mask"])
                else:
                    want = model.encode_text(given["tokens"], given["mask"])
            assert np.abs(got["embeddings"] - want.emb.numpy()).max() < 1e-4, (modality, batch, length)
            assert np.abs(got["attention"] - want.attn.numpy()).max() < 1e-5, (modality, batch, length)


def test_ablated_video_encoder_ignores_padded_frames() -> None:
    torch.manual_seed(2)
    config = _config(attention=False)
    model = build_model(config).eval()
    frames = torch.randn(2, 4, config.image_dim)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]], dtype=torch.float32)
    changed = frames.clone()
    changed[0, 2:] = 100.0
    with torch.no_grad():
        a, b = model.encode_video(frames, mask), model.encode_video(changed, mask)
    assert torch.allclose(a.emb, b.emb, atol=1e-6)
    assert torch.allclose(a.attn[0, :, :2], torch.full((config.num_heads, 2), 0.5))
