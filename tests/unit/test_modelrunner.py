"""ModelRunner: ONNX exports of tiny trainer models encode like torch; manifests are validated; PCME maths."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from engine.search.modelrunner import ModelInputError, ModelLoadError, ModelRunner
from engine.search.pcme import (
    closed_form_match_probability,
    match_probability,
    match_probability_from_samples,
    model_match_probability,
    sample_embeddings,
    uncertainty,
    uncertainty_percentile,
)
from trainer.methods import build_config, build_model, export_model

torch.set_num_threads(1)
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[torch.nn.Module, Path]]:
    """A tiny exported model per method (export takes a second; share it across tests)."""
    out = {}
    for method in ("pvse", "pcme", "vse", "twobranch-sim"):
        torch.manual_seed(1)
        model = build_model(build_config(method, preset="test")).eval()
        with torch.no_grad():  # make the match scalars differ from their inits so a mix-up shows
            for name, value in (("match_scale", 7.5), ("match_shift", -2.25)):
                if hasattr(model, name):
                    getattr(model, name).fill_(value)
        folder = tmp_path_factory.mktemp(method) / "export"
        export_model(model, folder, int8=False)  # the float graphs, to compare with torch exactly
        out[method] = (model, folder)
    return out


def _features(model: torch.nn.Module, batch: int = 3, length: int = 6) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    c = model.config
    mask = np.ones((batch, length), np.float32)
    mask[0, 4:] = 0.0  # a shorter sequence, padded on the right
    mask[-1, 2:] = 0.0
    return {
        "local": rng.standard_normal((batch, c.image_regions, c.image_dim)).astype(np.float32),
        "pooled": rng.standard_normal((batch, c.image_dim)).astype(np.float32),
        "frames": rng.standard_normal((batch, length, c.image_dim)).astype(np.float32),
        "tokens": rng.standard_normal((batch, length, c.word_dim)).astype(np.float32) * mask[..., None],
        "mask": mask,
    }


def _assert_close(got: np.ndarray | None, want: torch.Tensor | None, what: str) -> None:
    assert (got is None) == (want is None), what
    if want is not None:
        assert got is not None and got.shape == tuple(want.shape), what
        assert np.abs(got - want.numpy()).max() < TOLERANCE, what


@pytest.mark.parametrize("method", ["pvse", "pcme", "vse"])
def test_runner_encodes_like_torch(exports: dict, method: str) -> None:
    model, folder = exports[method]
    runner = ModelRunner.load(folder, threads=1)
    f = _features(model)
    t = {k: torch.from_numpy(v) for k, v in f.items()}
    with torch.no_grad():
        wanted = {"image": model.encode_image(t["local"], t["pooled"]),
                  "video": model.encode_video(t["frames"], t["mask"]),
                  "text": model.encode_text(t["tokens"], t["mask"])}
    got = {"image": runner.encode_image(f["local"], f["pooled"]),
           "video": runner.encode_video(f["frames"], f["mask"]),
           "text": runner.encode_text(f["tokens"], f["mask"], batch_size=2)}  # two ONNX calls
    for modality, want in wanted.items():
        out = got[modality]
        _assert_close(out.emb, want.emb, f"{modality} emb")
        _assert_close(out.attention, want.attn, f"{modality} attention")
        _assert_close(out.mu, None if want.logsigma is None else want.emb[:, 0], f"{modality} mu")
        sigma = None if want.logsigma is None else want.logsigma[:, 0]
        _assert_close(out.log_sigma, sigma, f"{modality} log sigma")
    assert got["image"].emb.shape[1:] == (runner.num_embeddings, runner.embed_dim)


def test_pcme_manifest_carries_the_match_scalars(exports: dict) -> None:
    model, folder = exports["pcme"]
    manifest = ModelRunner.load(folder, threads=1).manifest
    assert manifest.probabilistic
    assert manifest.match_scale == pytest.approx(7.5) and manifest.match_shift == pytest.approx(-2.25)
    assert manifest.num_samples == model.config.num_samples
    assert manifest.match_distance == model.config.match_distance == "sampled"


def test_a_csd_pcme_export_ranks_with_the_closed_form_probability_of_torch(tmp_path: Path) -> None:
    """A PCME trained on PCME++'s closed-form distance says so in its manifest, and the engine's match
    probability is then the model's own ``sigmoid(-a CSD + b)`` (not the sampled eq. 2-3)."""
    from trainer.methods.interface import EncoderOutput

    torch.manual_seed(2)
    model = build_model(build_config("pcme", {"match_distance": "csd"}, preset="test")).eval()
    with torch.no_grad():
        model.match_scale.fill_(3.0)
        model.match_shift.fill_(4.0)
    export_model(model, tmp_path / "export")
    manifest = ModelRunner.load(tmp_path / "export", threads=1).manifest
    assert manifest.match_distance == "csd"
    rng = np.random.default_rng(8)
    mu_q, mu_i = rng.standard_normal((2, 6)) * 0.3, rng.standard_normal((5, 6)) * 0.3
    ls_q, ls_i = rng.standard_normal((2, 6)) * 0.3 - 1, rng.standard_normal((5, 6)) * 0.3 - 1
    got = model_match_probability(manifest, mu_q, ls_q, mu_i, ls_i)
    with torch.no_grad():
        want = model.closed_form_match_probability(
            EncoderOutput(torch.tensor(mu_q[:, None]), logsigma=torch.tensor(ls_q[:, None])),
            EncoderOutput(torch.tensor(mu_i[:, None]), logsigma=torch.tensor(ls_i[:, None])))
    assert np.allclose(got, want.numpy(), atol=1e-9)
    sampled = model_match_probability(dataclasses.replace(manifest, match_distance="sampled"), mu_q, ls_q, mu_i,
                                      ls_i)
    assert not np.allclose(sampled, got, atol=1e-3)


def test_an_export_without_match_distance_is_sampled_and_a_bad_one_is_refused(exports: dict,
                                                                               tmp_path: Path) -> None:
    _, folder = exports["pcme"]
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    data = json.loads((copy / "manifest.json").read_text())
    del data["match_distance"]  # written before PCME++'s distance existed
    (copy / "manifest.json").write_text(json.dumps(data))
    assert ModelRunner.load(copy, threads=1).manifest.match_distance == "sampled"
    data["match_distance"] = "cosine"
    (copy / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(ModelLoadError, match="match_distance"):
        ModelRunner.load(copy, threads=1)


def test_similarity_network_scores_like_torch(exports: dict) -> None:
    model, folder = exports["twobranch-sim"]
    runner = ModelRunner.load(folder, threads=1)
    visual, text = torch.randn(4, runner.embed_dim), torch.randn(4, runner.embed_dim)
    with torch.no_grad():
        want = model.pair_scores(visual, text).numpy()
    assert np.abs(runner.pair_scores(visual.numpy(), text.numpy()) - want).max() < TOLERANCE
    with pytest.raises(ModelInputError, match="similarity network"):
        ModelRunner.load(exports["vse"][1], threads=1).pair_scores(visual.numpy(), text.numpy())


def test_model_id_follows_the_weights(exports: dict, tmp_path: Path) -> None:
    model, folder = exports["vse"]
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    assert ModelRunner.load(copy, threads=1).model_id == ModelRunner.load(folder, threads=1).model_id
    with torch.no_grad():
        retrained = build_model(model.config).eval()
    export_model(retrained, tmp_path / "retrained")
    other = ModelRunner.load(tmp_path / "retrained", threads=1).model_id
    assert other != ModelRunner.load(folder, threads=1).model_id and other.startswith("vse-")


Edit = Callable[[dict, Path], object]


def _broken_copy(folder: Path, tmp_path: Path, edit: Edit) -> Path:
    target = tmp_path / "broken"
    shutil.copytree(folder, target)
    manifest = json.loads((target / "manifest.json").read_text())
    edit(manifest, target)
    (target / "manifest.json").write_text(json.dumps(manifest))
    return target


@pytest.mark.parametrize(("edit", "names"), [
    (lambda m, _: m.update(version=2), "manifest.json"),
    (lambda m, _: m.pop("embed_dim"), "manifest.json"),
    (lambda m, _: m["encoders"]["text"]["outputs"][1].update(name="weights"), "text.onnx"),
    (lambda m, _: m["encoders"]["image"].update(file="../image.onnx"), "manifest.json"),
    (lambda m, t: (t / "video.onnx").unlink(), "video.onnx"),
    (lambda m, t: (t / "image.onnx").write_bytes(b"not a graph"), "image.onnx"),
])
def test_load_rejects_a_mismatch_naming_the_file(exports: dict, tmp_path: Path, edit: Edit,
                                                 names: str) -> None:
    folder = _broken_copy(exports["pvse"][1], tmp_path, edit)
    with pytest.raises(ModelLoadError, match=names.replace(".", r"\.")):
        ModelRunner.load(folder, threads=1)


def test_load_checks_the_backbone_and_the_folder(exports: dict, tmp_path: Path) -> None:
    folder = exports["vse"][1]
    assert ModelRunner.load(folder, threads=1, backbone_id="efficientnet-lite0").method == "vse"
    with pytest.raises(ModelLoadError, match="feature_backbone"):
        ModelRunner.load(folder, threads=1, backbone_id="resnet50")
    with pytest.raises(ModelLoadError, match="manifest.json"):
        ModelRunner.load(tmp_path, threads=1)


def test_inputs_are_checked_by_name(exports: dict) -> None:
    model, folder = exports["pvse"]
    runner = ModelRunner.load(folder, threads=1)
    f = _features(model)
    with pytest.raises(ModelInputError, match="pooled"):
        runner.encode_image(f["local"], f["pooled"][:, :5])
    with pytest.raises(ModelInputError, match="local"):
        runner.encode_image(None, f["pooled"])
    holes = f["mask"].copy()
    holes[1, 0] = 0.0  # padding before a valid token
    with pytest.raises(ModelInputError, match="mask"):
        runner.encode_text(f["tokens"], holes)
    with pytest.raises(ModelInputError, match="axis 'batch'"):
        runner.encode_video(f["frames"], f["mask"][:2])


def pad_batch(sequences: list[np.ndarray], length: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Test clips as one batch: variable-length (T_i, C) sequences stacked into a zero-padded (N, T, C) float32
    batch and its (N, T) 0/1 mask, valid positions first; ``length`` keeps at most that many positions."""
    if not sequences or any(np.ndim(x) != 2 or len(x) == 0 for x in sequences):
        raise ModelInputError("sequences: expected a non-empty list of non-empty (T, C) arrays")
    width = {np.shape(x)[1] for x in sequences}
    if len(width) != 1:
        raise ModelInputError(f"sequences: feature sizes differ: {sorted(width)}")
    length = length or max(len(x) for x in sequences)
    batch = np.zeros((len(sequences), length, width.pop()), np.float32)
    mask = np.zeros((len(sequences), length), np.float32)
    for row, sequence in enumerate(sequences):
        kept = min(len(sequence), length)
        batch[row, :kept], mask[row, :kept] = sequence[:kept], 1.0
    return batch, mask


def test_pad_batch_feeds_clips_of_different_lengths(exports: dict) -> None:
    model, folder = exports["pvse"]
    runner = ModelRunner.load(folder, threads=1)
    rng = np.random.default_rng(8)
    clips = [rng.standard_normal((t, model.config.image_dim)).astype(np.float32) for t in (3, 7, 5)]
    frames, mask = pad_batch(clips)
    assert frames.shape == (3, 7, model.config.image_dim) and mask.sum(1).tolist() == [3, 7, 5]
    together = runner.encode_video(frames, mask).emb
    alone = np.concatenate([runner.encode_video(*pad_batch([c])).emb for c in clips])
    assert np.abs(together - alone).max() < TOLERANCE  # padding changes nothing
    assert pad_batch(clips, length=4)[1].sum(1).tolist() == [3, 4, 4]
    with pytest.raises(ModelInputError, match="feature sizes"):
        pad_batch([clips[0], clips[1][:, :5]])


# -- PCME maths -----------------------------------------------------------------------------------------


def test_uncertainty_is_the_geometric_mean_of_sigma() -> None:
    log_sigma = np.log(np.array([[1.0, 4.0], [0.5, 0.5], [2.0, 8.0]]))
    assert np.allclose(uncertainty(log_sigma), [2.0, 0.5, 4.0])
    assert np.allclose(uncertainty(log_sigma[:, None, :]), [2.0, 0.5, 4.0])


def _loop_match_probability(zq: np.ndarray, zi: np.ndarray, a: float, b: float) -> np.ndarray:
    out = np.zeros((len(zq), len(zi)))
    for q in range(len(zq)):
        for n in range(len(zi)):
            terms = [1.0 / (1.0 + math.exp(a * np.linalg.norm(zq[q, j] - zi[n, k]) - b))
                     for j in range(zq.shape[1]) for k in range(zi.shape[1])]
            out[q, n] = sum(terms) / len(terms)
    return out


def test_match_probability_equals_a_loop_over_fixed_samples() -> None:
    rng = np.random.default_rng(3)
    zq, zi = rng.standard_normal((2, 4, 5)), rng.standard_normal((6, 3, 5))
    got = match_probability_from_samples(zq, zi, a=3.0, b=1.5)
    assert np.allclose(got, _loop_match_probability(zq, zi, 3.0, 1.5), atol=1e-12)


def test_match_probability_draws_query_samples_then_item_samples() -> None:
    rng = np.random.default_rng(4)
    mu_q, ls_q = rng.standard_normal((2, 5)), rng.standard_normal((2, 5)) - 1.0
    mu_i, ls_i = rng.standard_normal((3, 5)), rng.standard_normal((3, 5)) - 1.0
    got = match_probability(mu_q, ls_q, mu_i, ls_i, a=2.0, b=0.5, samples=4, rng=np.random.default_rng(9))
    replay = np.random.default_rng(9)
    zq, zi = sample_embeddings(mu_q, ls_q, 4, replay), sample_embeddings(mu_i, ls_i, 4, replay)
    assert np.allclose(got, _loop_match_probability(zq, zi, 2.0, 0.5), atol=1e-12)
    single = match_probability(mu_q[0], ls_q[0], mu_i, ls_i, 2.0, 0.5, 4, np.random.default_rng(9))
    replay = np.random.default_rng(9)
    zq, zi = sample_embeddings(mu_q[:1], ls_q[:1], 4, replay), sample_embeddings(mu_i, ls_i, 4, replay)
    assert single.shape == (3,) and np.allclose(single, _loop_match_probability(zq, zi, 2.0, 0.5)[0])


def test_match_probability_without_uncertainty_is_eq_3_on_the_means() -> None:
    rng = np.random.default_rng(5)
    mu_q, mu_i = rng.standard_normal((1, 6)), rng.standard_normal((4, 6))
    tiny = np.full((1, 6), -30.0)
    got = match_probability(mu_q, tiny, mu_i, np.full((4, 6), -30.0), a=5.0, b=2.0, samples=3, rng=rng)
    dist = np.linalg.norm(mu_q - mu_i, axis=1)
    assert np.allclose(got[0], 1.0 / (1.0 + np.exp(5.0 * dist - 2.0)))




def test_closed_form_match_probability_is_a_loop_over_dimensions() -> None:
    rng = np.random.default_rng(6)
    mu_q, ls_q = rng.standard_normal((2, 4)), rng.standard_normal((2, 4)) - 1.0
    mu_i, ls_i = rng.standard_normal((3, 4)), rng.standard_normal((3, 4)) - 1.0
    got = closed_form_match_probability(mu_q, ls_q, mu_i, ls_i, a=2.0, b=3.0)
    for q in range(2):
        for n in range(3):
            csd = sum((mu_q[q, d] - mu_i[n, d]) ** 2 + math.exp(2 * ls_q[q, d]) + math.exp(2 * ls_i[n, d])
                      for d in range(4))
            assert got[q, n] == pytest.approx(1.0 / (1.0 + math.exp(2.0 * csd - 3.0)), rel=1e-12)
    assert np.allclose(closed_form_match_probability(mu_q[0], ls_q[0], mu_i, ls_i, 2.0, 3.0), got[0])


def test_uncertainty_percentile_is_the_share_of_the_library_at_most_as_uncertain() -> None:
    library = np.sort(np.array([0.1, 0.2, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]))
    assert uncertainty_percentile(library, 0.9) == pytest.approx(100.0)  # the least certain item
    assert uncertainty_percentile(library, 0.85) == pytest.approx(90.0)
    assert uncertainty_percentile(library, 0.2) == pytest.approx(30.0)  # ties count as "at most"
    assert uncertainty_percentile(library, 0.05) == pytest.approx(0.0)
    with pytest.raises(ValueError):
        uncertainty_percentile(np.zeros(0), 0.3)
