"""Export a trained model's encoders to ONNX with a manifest the engine reads.

``export_model(model, out_dir)`` writes, atomically (a temporary folder renamed into place):

- ``image.onnx``, ``video.onnx``, ``text.onnx``: one graph per encoder, inputs named as the model's
  ``image_inputs`` / ``video_inputs`` / ``text_inputs`` (``local`` (B, R, C), ``pooled`` (B, C),
  ``frames`` (B, T, C), ``mask`` (B, T) or (B, L) float32 1/0, ``tokens`` (B, L, W), ``sentence`` (B, S)),
  with dynamic batch and sequence axes; outputs ``embeddings`` (B, K, D) and, where the method has them,
  ``attention`` (B, H, R|T|L); PCME outputs ``mu`` (B, 1, D), ``log_sigma`` (B, 1, D) and ``attention``.
- ``similarity.onnx`` for the two-branch similarity network: ``visual`` (N, D), ``text`` (N, D) ->
  ``scores`` (N,), the score of each row pair.
- ``manifest.json``: ``version`` (format version, 1), ``method``, ``feature_backbone``
  ('efficientnet-lite0'), ``text_encoder``, ``num_embeddings`` (K), ``embed_dim`` (D),
  ``attention_heads`` (H), ``similarity`` ('cosine' | 'max-cosine' | 'network'), ``probabilistic``,
  ``max_frames``, PCME's ``match_scale``/``match_shift``/``num_samples``/``match_distance``, ``encoders``
  (per modality: file, inputs and outputs with shapes, symbolic axes as strings), the full ``config`` and
  ``trained_on`` (how many photos and clips the image and video branches learnt from; the engine never ranks
  with a branch that learnt from nothing).
- for a model whose backbone was fine-tuned (:mod:`trainer.finetune`): ``backbone.onnx`` (the stock backbone's
  inputs and outputs) and ``backbone`` in the manifest (``id``, ``file``, ``image_size``, ``mean``, ``std``);
  ``feature_backbone`` is then that id.
- for a model whose text encoder was fine-tuned (:mod:`trainer.textencoder`): ``text_encoder.onnx`` (the stock
  ``minilm/model.onnx`` inputs and outputs) and ``text_model`` in the manifest (``id``, ``file``, ``base``,
  ``dim``, ``max_tokens``); the engine encodes the model's queries with it.
- ``int8``: the encoders whose matrix products were given int8 weights (:func:`quantize_encoders`), absent when
  none were.

The legacy TorchScript exporter (``dynamo=False``) is used: it traces these small graphs predictably.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from engine.trainercontract.exportformat import MANIFEST_FILE, MANIFEST_VERSION, MODALITIES
from trainer.methods.config import FEATURE_BACKBONE
from trainer.methods.interface import RetrievalModel

log = logging.getLogger(__name__)

OPSET = 17
# The graphs whose matrix products read every local feature (or frame) of an item: where a model that attends
# locally spends its indexing time, and what int8 weights make about 3x faster (PVSE/PCME starter companions on
# Flickr8k photos: 0.46 -> 0.16 and 0.85 -> 0.27 ms a photo, cosine to the float graph's embeddings >= 0.9997).
# The text graphs cost under 0.1 ms a query and stay float, as do models that read the pooled feature only.
INT8_MODALITIES = ("image", "video")


class ExportError(RuntimeError):
    """Export failed; the message names the encoder or path."""


class _Encoder(nn.Module):
    """Positional-input wrapper around one encoder of a model, returning its named outputs as a tuple."""

    def __init__(self, model: RetrievalModel, modality: str, inputs: tuple[str, ...],
                 outputs: tuple[str, ...]) -> None:
        super().__init__()
        self.model, self.modality, self.inputs, self.outputs = model, modality, inputs, outputs

    def forward(self, *args: Tensor) -> tuple[Tensor, ...]:
        given: dict[str, Tensor | None] = dict(zip(self.inputs, args, strict=True))
        if self.modality == "image":
            out = self.model.encode_image(given.get("local"), given.get("pooled"))
        elif self.modality == "video":
            out = self.model.encode_video(given["frames"], given["mask"])  # type: ignore[arg-type]
        else:
            out = self.model.encode_text(given.get("tokens"), given.get("mask"), given.get("sentence"))
        named = {"embeddings": out.emb, "mu": out.emb, "log_sigma": out.logsigma, "attention": out.attn}
        return tuple(named[name] for name in self.outputs)  # type: ignore[misc]


class _PairScores(nn.Module):
    def __init__(self, model: RetrievalModel) -> None:
        super().__init__()
        self.model = model

    def forward(self, visual: Tensor, text: Tensor) -> Tensor:
        return self.model.pair_scores(visual, text)  # type: ignore[operator]


def output_names(model: RetrievalModel) -> tuple[str, ...]:
    """The named outputs every encoder of ``model`` exports."""
    if model.probabilistic:
        return ("mu", "log_sigma", "attention")
    return ("embeddings", "attention") if model.attention_heads else ("embeddings",)


def _sequence_axis(modality: str) -> str:
    return {"image": "regions", "video": "frames", "text": "tokens"}[modality]


def _input_specs(model: RetrievalModel, modality: str) -> list[dict[str, Any]]:
    c = model.config
    seq = _sequence_axis(modality)
    shapes: dict[str, list[Any]] = {
        "local": ["batch", seq, c.image_dim], "pooled": ["batch", c.image_dim],
        "frames": ["batch", seq, c.image_dim], "tokens": ["batch", seq, c.word_dim],
        "mask": ["batch", seq], "sentence": ["batch", c.sentence_dim],
    }
    names = {"image": model.image_inputs, "video": model.video_inputs, "text": model.text_inputs}[modality]
    return [{"name": n, "shape": shapes[n], "dtype": "float32"} for n in names]


def _output_specs(model: RetrievalModel, modality: str) -> list[dict[str, Any]]:
    k, d, h = model.num_embeds, model.embed_size, model.attention_heads
    shapes = {"embeddings": ["batch", k, d], "mu": ["batch", 1, d], "log_sigma": ["batch", 1, d],
              "attention": ["batch", h, _sequence_axis(modality)]}
    return [{"name": n, "shape": shapes[n], "dtype": "float32"} for n in output_names(model)]


def dummy_inputs(specs: list[dict[str, Any]], batch: int = 2, length: int = 5,
                 regions: int = 4) -> tuple[Tensor, ...]:
    """Random tensors for input ``specs``: symbolic axes get ``batch`` (also for ``pairs``) and ``length``
    (``regions`` for image regions); masks mark every row valid except the last one's final position."""
    sizes = {"batch": batch, "frames": length, "tokens": length, "regions": regions, "pairs": batch}
    out = []
    for spec in specs:
        shape = [sizes[s] if isinstance(s, str) else s for s in spec["shape"]]
        if spec["name"] == "mask":
            mask = torch.ones(shape)
            mask[-1, -1] = 0.0
            out.append(mask)
        else:
            out.append(torch.randn(shape))
    return tuple(out)


def _export_graph(module: nn.Module, args: tuple[Tensor, ...], path: Path, inputs: list[dict[str, Any]],
                  outputs: list[dict[str, Any]]) -> None:
    dynamic = {spec["name"]: {i: s for i, s in enumerate(spec["shape"]) if isinstance(s, str)}
               for spec in inputs + outputs}
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        try:
            torch.onnx.export(module, args, str(path), input_names=[s["name"] for s in inputs],
                              output_names=[s["name"] for s in outputs], dynamic_axes=dynamic,
                              opset_version=OPSET, dynamo=False)
        except Exception as exc:  # the exporter raises many types; report which graph failed
            raise ExportError(f"{path.name}: ONNX export failed: {exc}") from exc
    for warning in caught:
        log.debug("onnx export %s: %s", path.name, warning.message)


def build_manifest(model: RetrievalModel, modalities: tuple[str, ...] = MODALITIES) -> dict[str, Any]:
    """The manifest describing ``model``'s exported encoders (see the module docstring)."""
    c = model.config
    manifest: dict[str, Any] = {
        "version": MANIFEST_VERSION, "method": c.method, "feature_backbone": FEATURE_BACKBONE,
        "text_encoder": c.text_encoder, "num_embeddings": model.num_embeds, "embed_dim": model.embed_size,
        "attention_heads": model.attention_heads, "similarity": model.similarity_kind,
        "probabilistic": model.probabilistic, "max_frames": c.max_frames,
        "encoders": {m: {"file": f"{m}.onnx", "inputs": _input_specs(model, m),
                         "outputs": _output_specs(model, m)} for m in modalities},
        "config": c.to_dict(),
    }
    if model.probabilistic:
        manifest.update(match_scale=model.match_scale.item(), match_shift=model.match_shift.item(),
                        num_samples=c.num_samples, match_distance=c.match_distance)  # type: ignore[attr-defined]
    if model.similarity_kind == "network":
        d = model.embed_size
        manifest["similarity_model"] = {
            "file": "similarity.onnx",
            "inputs": [{"name": n, "shape": ["pairs", d], "dtype": "float32"} for n in ("visual", "text")],
            "outputs": [{"name": "scores", "shape": ["pairs"], "dtype": "float32"}]}
    return manifest


def export_model(model: RetrievalModel, out_dir: str | os.PathLike[str],
                 modalities: tuple[str, ...] = MODALITIES,
                 backbone: Callable[[Path], dict[str, Any]] | None = None,
                 text: Callable[[Path], dict[str, Any]] | None = None,
                 trained_on: dict[str, int] | None = None, int8: bool | None = None) -> dict[str, Any]:
    """Export ``model``'s encoders and manifest into ``out_dir`` (replaced atomically); returns the manifest.

    The model is copied to the CPU and put in eval mode, so the caller's model is left as it was.
    ``backbone``, for a model trained with its own fine-tuned backbone, writes that backbone's graph into the
    staging folder it is given and returns its manifest entry (``id``, ``file``, ``image_size``, ...): the
    manifest then names it under ``backbone`` and its id as ``feature_backbone``. ``text`` does the same for a
    fine-tuned text encoder (:mod:`trainer.textencoder`): the manifest names it under ``text_model``.
    ``int8`` (default: whether the model attends locally) gives the image and video graphs int8 weights
    (:func:`quantize_encoders`).
    """
    unknown = [m for m in modalities if m not in MODALITIES]
    if unknown:
        raise ExportError(f"modalities: unknown {unknown}; expected a subset of {list(MODALITIES)}")
    target = Path(out_dir)
    target.parent.mkdir(parents=True, exist_ok=True)
    frozen = copy.deepcopy(model).cpu().eval()  # traced on CPU whatever device the model trained on
    manifest = build_manifest(frozen, modalities)
    if trained_on is not None:
        manifest["trained_on"] = {k: int(v) for k, v in trained_on.items()}
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        for modality in modalities:
            spec = manifest["encoders"][modality]
            names = tuple(s["name"] for s in spec["inputs"])
            wrapper = _Encoder(frozen, modality, names, tuple(s["name"] for s in spec["outputs"]))
            _export_graph(wrapper, dummy_inputs(spec["inputs"], regions=frozen.config.image_regions),
                          staging / spec["file"], spec["inputs"], spec["outputs"])
        if "similarity_model" in manifest:
            spec = manifest["similarity_model"]
            _export_graph(_PairScores(frozen), dummy_inputs(spec["inputs"]), staging / spec["file"],
                          spec["inputs"], spec["outputs"])
        if backbone is not None:
            manifest["backbone"] = backbone(staging)
            manifest["feature_backbone"] = manifest["backbone"]["id"]
        if text is not None:
            manifest["text_model"] = text(staging)
        if frozen.attends_locally if int8 is None else int8:
            _quantize_graphs(staging, manifest)
        _write_manifest(staging, manifest)
        _swap_into_place(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return manifest


def quantize_encoders(export_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Give the image and video graphs of an export folder int8 weights, in place; returns its manifest.

    ONNX Runtime's dynamic quantization of MatMul and Gemm weights: per output channel, 7-bit range (no
    saturation on CPUs without VNNI, where ONNX Runtime multiplies u8 by s8 with 16-bit sums); activations are
    quantized per call. Embeddings, attention maps and log sigma move by less than the models' own scatter
    (see ``INT8_MODALITIES``); inputs and outputs are unchanged, so the engine reads the folder as before.
    An encoder already quantized is left as it is.
    """
    folder = Path(export_dir)
    manifest = load_manifest(folder)
    _quantize_graphs(folder, manifest)
    _write_manifest(folder, manifest)
    return manifest


def drop_untrained_encoders(export_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Remove from an export folder the encoders whose branch learnt from nothing (its manifest's ``trained_on``;
    the engine never ranks with them: a model that saw no clip needs no video graph); returns the manifest."""
    folder = Path(export_dir)
    manifest = load_manifest(folder)
    trained_on = manifest.get("trained_on") or {}
    for modality in [m for m in ("video",) if m in manifest["encoders"] and trained_on.get(m, 0) == 0]:
        (folder / manifest["encoders"].pop(modality)["file"]).unlink(missing_ok=True)
    if "int8" in manifest:
        manifest["int8"] = [m for m in manifest["int8"] if m in manifest["encoders"]]
    _write_manifest(folder, manifest)
    return manifest


def _quantize_graphs(folder: Path, manifest: dict[str, Any]) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    done = set(manifest.get("int8", ()))
    for modality in INT8_MODALITIES:
        spec = manifest["encoders"].get(modality)
        if spec is None or modality in done:
            continue
        source = folder / spec["file"]
        quantized = source.with_name(f".{source.name}.int8")
        root = logging.getLogger()  # the quantizer logs its advice to pre-process the graph there
        was, root.disabled = root.disabled, True
        try:
            quantize_dynamic(source, quantized, weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul", "Gemm"],
                             per_channel=True, reduce_range=True)
        except Exception as exc:  # the quantizer raises many types; report which graph failed
            quantized.unlink(missing_ok=True)
            raise ExportError(f"{source.name}: int8 quantization failed: {exc}") from exc
        finally:
            root.disabled = was
        os.replace(quantized, source)
        done.add(modality)
    if done:
        manifest["int8"] = sorted(done)


def _write_manifest(folder: Path, manifest: dict[str, Any]) -> None:
    (folder / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def _swap_into_place(staging: Path, target: Path) -> None:
    """Rename ``staging`` to ``target``; an existing ``target`` is moved aside first and then deleted."""
    old = None
    if target.exists():
        old = target.with_name(f".{target.name}.old-{os.getpid()}")
        os.replace(target, old)
    try:
        os.replace(staging, target)
    except OSError as exc:
        if old is not None:
            os.replace(old, target)
        raise ExportError(f"{target}: could not move the export into place: {exc}") from exc
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def load_manifest(out_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Read ``manifest.json`` of an export; :class:`ExportError` if missing or of another version."""
    path = Path(out_dir) / MANIFEST_FILE
    try:
        manifest = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ExportError(f"{path}: cannot read manifest: {exc}") from exc
    if manifest.get("version") != MANIFEST_VERSION:
        raise ExportError(f"{path}: manifest version {manifest.get('version')!r}, "
                          f"expected {MANIFEST_VERSION}")
    return manifest
