"""Run a model exported by the trainer (``trainer/methods/export.py``) with ONNX Runtime, numpy only.

An export is a folder with ``manifest.json`` and one ONNX graph per encoder (``image.onnx``, ``video.onnx``,
``text.onnx``; ``similarity.onnx`` for the two-branch similarity network). :meth:`ModelRunner.load`
validates the manifest and checks each graph's input and output names against it, so a mismatch is
reported with the file at fault before any search runs. Encoders return an :class:`Encoded` record:
``emb`` (N, K, D) unit vectors (PCME: the means), ``attention`` (N, H, R|T|L) or None, and PCME's ``mu``
and ``log_sigma`` (N, D).

PCME's arithmetic on those arrays (uncertainty, match probability) is :mod:`engine.search.pcme`.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from engine.features.backbone import Backbone
from engine.features.onnx import open_session
from engine.features.text import MiniLMEncoder
from engine.trainercontract.exportformat import (
    MANIFEST_FILE,
    MANIFEST_VERSION,
    MATCH_DISTANCES,
    MODALITIES,
    SIMILARITY_KINDS,
)

TEXT_THREADS = 1  # intra-op threads of a model's text graph (below)


class ModelLoadError(RuntimeError):
    """An export folder is missing a file or does not match its manifest; the message names the file."""


class ModelInputError(ValueError):
    """Features handed to an encoder have the wrong shape or values; the message names the input."""


@dataclass(frozen=True)
class TensorSpec:
    """One graph input or output: ``shape`` holds ints for fixed axes and names for symbolic ones."""

    name: str
    shape: tuple[int | str, ...]


@dataclass(frozen=True)
class GraphSpec:
    """One ONNX file of an export and its declared inputs and outputs, in graph order."""

    file: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.inputs)

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.outputs)


def _trained_on_entry(value: Any, path: Path) -> dict[str, int] | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not all(isinstance(v, int) and v >= 0 for v in value.values()):
        raise ModelLoadError(f"{path}: trained_on: expected counts of photos and clips, got {value!r}")
    return {str(k): int(v) for k, v in value.items()}


@dataclass(frozen=True)
class ModelManifest:
    """The parsed ``manifest.json`` of an export (field meanings: ``trainer/methods/export.py``)."""

    method: str
    feature_backbone: str
    text_encoder: str
    num_embeddings: int
    embed_dim: int
    attention_heads: int
    similarity: str
    probabilistic: bool
    max_frames: int
    encoders: dict[str, GraphSpec]
    config: dict[str, Any]
    match_scale: float | None = None
    match_shift: float | None = None
    num_samples: int | None = None
    match_distance: str = "sampled"  # PCME: 'sampled' (eq. 2-3) or 'csd' (PCME++); exports before it: sampled
    similarity_model: GraphSpec | None = None
    backbone: dict[str, Any] | None = None  # a fine-tuned backbone of the model's own: id, file, image_size
    text_model: dict[str, Any] | None = None  # a fine-tuned MiniLM of the model's own: id, file
    trained_on: dict[str, int] | None = None  # photos and clips each visual branch learnt from (None: not recorded)

    @property
    def video_trained(self) -> bool:
        """Whether the video encoder ever saw a clip. Exports that do not say so (written before the trainer
        recorded it, like the first starter) are taken as not: their video branch may be its initial weights."""
        return bool(self.trained_on and self.trained_on.get("video", 0) > 0)

    @classmethod
    def parse(cls, data: Any, path: Path) -> ModelManifest:
        """Validate a decoded manifest; :class:`ModelLoadError` names ``path`` and the bad entry."""
        if not isinstance(data, dict):
            raise ModelLoadError(f"{path}: expected a JSON object")
        if data.get("version") != MANIFEST_VERSION:
            raise ModelLoadError(f"{path}: manifest version {data.get('version')!r}, "
                                 f"expected {MANIFEST_VERSION}")
        get = _Getter(data, path)
        encoders = get.of("encoders", dict)
        unknown = sorted(set(encoders) - set(MODALITIES))
        if unknown or not encoders:
            raise ModelLoadError(f"{path}: encoders: expected some of {list(MODALITIES)}, "
                                 f"got {sorted(encoders)}")
        manifest = cls(
            method=get.of("method", str), feature_backbone=get.of("feature_backbone", str),
            text_encoder=get.of("text_encoder", str), num_embeddings=get.count("num_embeddings", 1),
            embed_dim=get.count("embed_dim", 1), attention_heads=get.count("attention_heads", 0),
            similarity=get.choice("similarity", SIMILARITY_KINDS), probabilistic=get.of("probabilistic", bool),
            max_frames=get.count("max_frames", 1), config=get.of("config", dict),
            encoders={m: _graph_spec(spec, path, f"encoders.{m}") for m, spec in encoders.items()},
            match_scale=get.number("match_scale") if data.get("probabilistic") else None,
            match_shift=get.number("match_shift") if data.get("probabilistic") else None,
            num_samples=get.count("num_samples", 1) if data.get("probabilistic") else None,
            match_distance=get.choice("match_distance", MATCH_DISTANCES) if "match_distance" in data else "sampled",
            similarity_model=(_graph_spec(get.of("similarity_model", dict), path, "similarity_model")
                              if data.get("similarity") == "network" else None),
            backbone=_backbone_entry(data.get("backbone"), data.get("feature_backbone"), path),
            text_model=_text_entry(data.get("text_model"), data.get("text_encoder"), path),
            trained_on=_trained_on_entry(data.get("trained_on"), path))
        manifest._check_outputs(path)
        return manifest

    def _check_outputs(self, path: Path) -> None:
        needed = {"mu", "log_sigma"} if self.probabilistic else {"embeddings"}
        for modality, spec in self.encoders.items():
            if not needed <= set(spec.output_names):
                raise ModelLoadError(f"{path}: encoders.{modality}: outputs {list(spec.output_names)} lack "
                                     f"{sorted(needed)}")


class _Getter:
    """Typed access to manifest entries with errors naming the file and the key."""

    def __init__(self, data: dict[str, Any], path: Path) -> None:
        self.data, self.path = data, path

    def of(self, key: str, kind: type) -> Any:
        value = self.data.get(key)
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            raise ModelLoadError(f"{self.path}: {key}: expected {kind.__name__}, got {value!r}")
        return value

    def count(self, key: str, least: int) -> int:
        value = self.of(key, int)
        if value < least:
            raise ModelLoadError(f"{self.path}: {key}: must be >= {least}, got {value}")
        return value

    def number(self, key: str) -> float:
        value = self.data.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
            raise ModelLoadError(f"{self.path}: {key}: expected a finite number, got {value!r}")
        return float(value)

    def choice(self, key: str, choices: tuple[str, ...]) -> str:
        value = self.of(key, str)
        if value not in choices:
            raise ModelLoadError(f"{self.path}: {key}: expected one of {list(choices)}, got {value!r}")
        return value


def _graph_spec(data: Any, path: Path, where: str) -> GraphSpec:
    try:
        file = data["file"]
        inputs = tuple(TensorSpec(s["name"], tuple(s["shape"])) for s in data["inputs"])
        outputs = tuple(TensorSpec(s["name"], tuple(s["shape"])) for s in data["outputs"])
    except (KeyError, TypeError) as exc:
        raise ModelLoadError(f"{path}: {where}: malformed graph entry ({exc!r})") from exc
    if not isinstance(file, str) or Path(file).name != file or file in ("", ".", ".."):
        raise ModelLoadError(f"{path}: {where}.file: must be a plain file name in the export folder, "
                             f"got {file!r}")
    return GraphSpec(file, inputs, outputs)


@dataclass(frozen=True)
class Encoded:
    """Encoder outputs for N items.

    ``emb`` (N, K, D): unit embeddings (PCME: the means, K = 1). ``attention`` (N, H, R|T|L): per head,
    weights over regions, frames or tokens (None for methods without attention). ``mu`` and ``log_sigma``
    (N, D): PCME's Gaussian (None otherwise).
    """

    emb: np.ndarray
    attention: np.ndarray | None = None
    mu: np.ndarray | None = None
    log_sigma: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.emb)


class ModelRunner:
    """A loaded export: encoders for photos, GIFs/videos and captions, plus the similarity network."""

    def __init__(self, folder: Path, manifest: ModelManifest, sessions: dict[str, ort.InferenceSession],
                 model_id: str) -> None:
        self.folder, self.manifest, self._sessions, self.model_id = folder, manifest, sessions, model_id

    @classmethod
    def load(cls, model_dir: str | os.PathLike[str], threads: int | None = None,
             backbone_id: str | None = None) -> ModelRunner:
        """Open the export in ``model_dir``; only files inside that folder are read.

        ``backbone_id``, when given, must equal the manifest's ``feature_backbone`` (the features the
        engine caches must be the ones the model was trained on). ``model_id`` is the method plus a hash of
        the manifest and every graph, so a vector index can tell which model version made its vectors.
        """
        folder = Path(model_dir).resolve()
        path = folder / MANIFEST_FILE
        try:
            raw = path.read_bytes()
            manifest = ModelManifest.parse(json.loads(raw), path)
        except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ModelLoadError(f"{path}: cannot read the manifest: {exc}") from exc
        if manifest.backbone is None and backbone_id is not None and manifest.feature_backbone != backbone_id:
            raise ModelLoadError(f"{path}: feature_backbone {manifest.feature_backbone!r} but the engine "
                                 f"extracts {backbone_id!r} features")
        graphs = dict(manifest.encoders)
        if manifest.similarity_model is not None:
            graphs["similarity"] = manifest.similarity_model
        digest = hashlib.sha256(raw)
        for own in (manifest.backbone, manifest.text_model):
            if own is not None:
                digest.update(_inside(folder, own["file"]).read_bytes())
        sessions = {}
        for key, spec in graphs.items():
            file = _inside(folder, spec.file)
            digest.update(file.read_bytes())
            # a text graph runs once a query on one sentence (~0.1 ms): waking a pool of threads costs more
            sessions[key] = _open_checked(file, spec, TEXT_THREADS if key == "text" else threads)
        return cls(folder, manifest, sessions, f"{manifest.method}-{digest.hexdigest()[:16]}")

    @property
    def method(self) -> str:
        return self.manifest.method

    def own_backbone(self, threads: int | None = None):
        """The model's fine-tuned :class:`engine.features.backbone.Backbone`, or None when it reads the stock one."""
        if self.manifest.backbone is None:
            return None

        entry = self.manifest.backbone
        return Backbone(graph=_inside(self.folder, entry["file"]), meta=entry, threads=threads)

    def own_text_encoder(self, assets: Path | None = None, threads: int | None = TEXT_THREADS):
        """The model's fine-tuned :class:`engine.features.text.MiniLMEncoder` (the stock tokenizer from
        ``assets``), or None when it reads the stock MiniLM's features. One intra-op thread by default: it encodes
        a query beside the stock MiniLM's encoding of it (:mod:`engine.search.ranking`), and the two, each on one
        core, took 13 ms at 100,000 items where both on every core took 17 (docs/benchmarks.md)."""
        if self.manifest.text_model is None:
            return None

        entry = self.manifest.text_model
        return MiniLMEncoder(assets, threads=threads, graph=_inside(self.folder, entry["file"]),
                             name=entry["id"])

    @property
    def num_embeddings(self) -> int:
        """K, embeddings per item."""
        return self.manifest.num_embeddings

    @property
    def embed_dim(self) -> int:
        """D, the size of each embedding."""
        return self.manifest.embed_dim

    @property
    def probabilistic(self) -> bool:
        """True for PCME exports (``mu`` and ``log_sigma`` are filled in)."""
        return self.manifest.probabilistic

    def encode_image(self, local: np.ndarray | None, pooled: np.ndarray | None,
                     batch_size: int = 64) -> Encoded:
        """Encode photos from local (N, R, 1280) and pooled (N, 1280) backbone features (either may be None
        when the method does not read it: see ``manifest.encoders['image'].inputs``)."""
        return self._encode("image", {"local": local, "pooled": pooled}, batch_size)

    def encode_video(self, frames: np.ndarray, mask: np.ndarray, batch_size: int = 64) -> Encoded:
        """Encode GIFs/videos from frame features (N, T, 1280) and a frame mask (N, T), valid frames first."""
        return self._encode("video", {"frames": frames, "mask": mask}, batch_size)

    def encode_text(self, tokens: np.ndarray | None, mask: np.ndarray | None,
                    sentence: np.ndarray | None = None, batch_size: int = 64) -> Encoded:
        """Encode captions from token vectors (N, L, W), a token mask (N, L) with valid tokens first, and
        (``text_encoder='minilm-sentence'`` exports) MiniLM sentence vectors (N, 384)."""
        return self._encode("text", {"tokens": tokens, "mask": mask, "sentence": sentence}, batch_size)

    def pair_scores(self, visual: np.ndarray, text: np.ndarray) -> np.ndarray:
        """The two-branch similarity network's score (N,) of each row pair of (N, D) embeddings."""
        session = self._sessions.get("similarity")
        if session is None:
            raise ModelInputError(f"{self.method}: this model has no similarity network")
        visual, text = _as_float(visual, "visual"), _as_float(text, "text")
        if visual.ndim != 2 or visual.shape != text.shape or visual.shape[1] != self.embed_dim:
            raise ModelInputError(f"visual/text: expected two (N, {self.embed_dim}) arrays, "
                                  f"got {visual.shape} and {text.shape}")
        return session.run(["scores"], {"visual": visual, "text": text})[0]

    def _encode(self, modality: str, given: dict[str, np.ndarray | None], batch_size: int) -> Encoded:
        spec = self.manifest.encoders.get(modality)
        if spec is None:
            raise ModelInputError(f"{modality}: this export has no {modality} encoder")
        feeds = _feeds(spec, given)
        total = len(next(iter(feeds.values())))
        if total == 0:
            raise ModelInputError(f"{modality}: nothing to encode (batch of 0 items)")
        session = self._sessions[modality]
        parts = [session.run(list(spec.output_names), {k: v[i:i + batch_size] for k, v in feeds.items()})
                 for i in range(0, total, max(1, batch_size))]
        # every batch shares the padded sequence length, so attention maps concatenate too
        outputs = {name: np.concatenate([p[j] for p in parts]) for j, name in enumerate(spec.output_names)}
        if self.probabilistic:
            mu, log_sigma = outputs["mu"], outputs["log_sigma"]
            return Encoded(mu, outputs.get("attention"), mu[:, 0], log_sigma[:, 0])
        return Encoded(outputs["embeddings"], outputs.get("attention"))


def _backbone_entry(entry: Any, feature_backbone: Any, path: Path) -> dict[str, Any] | None:
    """The manifest's ``backbone`` (a fine-tuned backbone shipped with the model), checked, or None."""
    if entry is None:
        return None
    if not isinstance(entry, dict):
        raise ModelLoadError(f"{path}: backbone: expected an object, got {type(entry).__name__}")
    for key, kind in (("id", str), ("file", str), ("image_size", int)):
        if not isinstance(entry.get(key), kind) or isinstance(entry.get(key), bool):
            raise ModelLoadError(f"{path}: backbone.{key}: expected {kind.__name__}, got {entry.get(key)!r}")
    if entry["id"] != feature_backbone:
        raise ModelLoadError(f"{path}: feature_backbone {feature_backbone!r} is not the model's own backbone "
                             f"{entry['id']!r}")
    return dict(entry)


def _text_entry(entry: Any, text_encoder: Any, path: Path) -> dict[str, Any] | None:
    """The manifest's ``text_model`` (a fine-tuned MiniLM shipped with the model), checked, or None."""
    if entry is None:
        return None
    if not isinstance(entry, dict):
        raise ModelLoadError(f"{path}: text_model: expected an object, got {type(entry).__name__}")
    for key in ("id", "file"):
        if not isinstance(entry.get(key), str):
            raise ModelLoadError(f"{path}: text_model.{key}: expected str, got {entry.get(key)!r}")
    if text_encoder == "glove":
        raise ModelLoadError(f"{path}: text_model: a GloVe model cannot carry a MiniLM text encoder")
    return dict(entry)


def _inside(folder: Path, name: str) -> Path:
    file = (folder / name).resolve()
    if file.parent != folder:
        raise ModelLoadError(f"{folder / name}: resolves outside the export folder {folder}")
    if not file.is_file():
        raise ModelLoadError(f"{file}: missing (listed in {folder / MANIFEST_FILE})")
    return file


def _open_checked(file: Path, spec: GraphSpec, threads: int | None) -> ort.InferenceSession:
    try:
        session = open_session(file, threads=threads)
    except Exception as exc:  # onnxruntime raises its own exception types for unreadable graphs
        raise ModelLoadError(f"{file}: ONNX Runtime cannot open it: {exc}") from exc
    inputs = tuple(i.name for i in session.get_inputs())
    outputs = tuple(o.name for o in session.get_outputs())
    if inputs != spec.input_names or outputs != spec.output_names:
        raise ModelLoadError(f"{file}: graph has inputs {list(inputs)} and outputs {list(outputs)}, "
                             f"the manifest says {list(spec.input_names)} and {list(spec.output_names)}")
    return session


def _as_float(array: np.ndarray, name: str) -> np.ndarray:
    out = np.ascontiguousarray(array, dtype=np.float32)
    if not np.isfinite(out).all():
        raise ModelInputError(f"{name}: contains NaN or infinite values")
    return out


def _feeds(spec: GraphSpec, given: dict[str, np.ndarray | None]) -> dict[str, np.ndarray]:
    """float32 inputs for a graph, checked against the declared shapes (symbolic axes must agree)."""
    feeds: dict[str, np.ndarray] = {}
    axes: dict[str, int] = {}
    for tensor in spec.inputs:
        value = given.get(tensor.name)
        if value is None:
            raise ModelInputError(f"{tensor.name}: required by {spec.file}")
        array = _as_float(value, tensor.name)
        if array.ndim != len(tensor.shape):
            raise ModelInputError(f"{tensor.name}: expected {len(tensor.shape)} axes {list(tensor.shape)}, "
                                  f"got shape {array.shape}")
        for axis, size in zip(tensor.shape, array.shape, strict=True):
            if axes.setdefault(str(axis), size if isinstance(axis, str) else axis) != size:
                raise ModelInputError(f"{tensor.name}: axis {axis!r} is {size}, expected {axes[str(axis)]}")
        if tensor.name == "mask":
            _check_mask(array)
        feeds[tensor.name] = array
    return feeds


def _check_mask(mask: np.ndarray) -> None:
    """Masks are 1 on valid positions, which must be a non-empty prefix of every row."""
    if mask.shape[1] == 0 or not ((mask == 0.0) | (mask == 1.0)).all():
        raise ModelInputError("mask: expected 0/1 values over a non-empty sequence axis")
    if (mask[:, 0] == 0).any() or (np.diff(mask, axis=1) > 0).any():
        raise ModelInputError("mask: valid positions must come first in every row, and at least one")
