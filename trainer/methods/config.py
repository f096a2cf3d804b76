"""The base of every method's typed, validated configuration.

Each method's module defines a frozen dataclass whose defaults are the hyper-parameters its paper reports (the
docstring of each class cites where a value comes from) plus the feature dimensions Polyseek's cached
backbone features have (EfficientNet-Lite0: 49 local 1280-d features and a pooled 1280-d feature per
image or frame; GloVe 50-d or MiniLM 384-d token vectors, MiniLM's 384-d sentence vector).

A config validates itself on construction: an unknown field, a value of the wrong type or a value out of
range raises :class:`ConfigError` whose message names the field. Configs round-trip through JSON
(:meth:`MethodConfig.to_json` / :func:`config_from_json`) so the resolved config can sit next to every
checkpoint and export.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

TextEncoderKind = Literal["glove", "minilm", "minilm-sentence"]

TextGlobalKind = Literal["bigru", "cnn"]

ClipInput = Literal["video", "stills"]

AdversarialGame = Literal["reversal", "confusion"]

# Native token-vector sizes of the text feature extractors the engine ships.
NATIVE_WORD_DIM: dict[str, int] = {"glove": 50, "minilm": 384, "minilm-sentence": 384}

FEATURE_BACKBONE = "efficientnet-lite0"

class ConfigError(ValueError):
    """A configuration value is unknown, of the wrong type, or out of range; the message names it."""

def _bounds(lo: float | None = None, hi: float | None = None, *, lo_open: bool = False) -> dict[str, Any]:
    """Field metadata: inclusive ``lo``/``hi`` bounds (``lo_open`` makes the lower bound exclusive)."""
    return {"lo": lo, "hi": hi, "lo_open": lo_open}

def bounded(default: Any, lo: float | None = None, hi: float | None = None, *, lo_open: bool = False) -> Any:
    return field(default=default, metadata=_bounds(lo, hi, lo_open=lo_open))

@dataclass(frozen=True)
class MethodConfig:
    """Feature dimensions shared by every method.

    ``text_word_dim=None`` resolves to the native size of ``text_encoder`` (GloVe 50, MiniLM 384).
    ``max_frames`` is PVSE §3.5's clip length (8 frames, evenly spread at inference).
    ``clip_input``: how a GIF or video trains: ``video``, through the video encoder over its frames (PVSE §3.1);
    ``stills``, as its mean frame through the image encoder, the way the engine scores a clip whose video branch
    never learnt (its mean and each of its frames as photos, :meth:`engine.search.trained.TrainedSearch.score_ids`).
    ``pooled_regions``: the share of training photos (drawn afresh each batch) that read their pooled feature in
    place of every region, as the engine reads a clip's frames and a photo past the feature store's local-feature
    cap; without it a model that reads regions learns uniform regions as the mark of a video (the starter's clips
    train as stills) and ranks such photos and slideshows lower (docs/benchmarks.md, "Clips"). Like ``clip_input``
    it changes what training reads, not a weight's shape, so a warm start keeps it.
    """

    method: ClassVar[str] = ""

    image_dim: int = bounded(1280, 1)
    image_regions: int = bounded(49, 1)
    text_encoder: TextEncoderKind = "glove"
    text_word_dim: int | None = bounded(None, 1)
    sentence_dim: int = bounded(384, 1)
    max_frames: int = bounded(8, 1)
    clip_input: ClipInput = "video"
    pooled_regions: float = bounded(0.0, 0.0, 1.0)
    embed_dim: int = bounded(1024, 1)

    def __post_init__(self) -> None:
        hints = self._hints()
        for f in dataclasses.fields(self):
            object.__setattr__(self, f.name, _coerce(f, getattr(self, f.name), hints[f.name]))
        if self.text_word_dim is None:
            object.__setattr__(self, "text_word_dim", NATIVE_WORD_DIM[self.text_encoder])
        self.check()

    @classmethod
    def _hints(cls) -> dict[str, Any]:
        return typing.get_type_hints(cls)

    def check(self) -> None:
        """Cross-field rules; subclasses extend it. Raises :class:`ConfigError`."""

    @property
    def word_dim(self) -> int:
        """The resolved token-vector size."""
        assert self.text_word_dim is not None  # resolved in __post_init__
        return self.text_word_dim

    @property
    def uses_sentence_vector(self) -> bool:
        """True when the text's global feature comes from MiniLM's sentence embedding."""
        return self.text_encoder == "minilm-sentence"

    @property
    def learns_from_pseudo_pairs(self) -> bool:
        """Whether the trainer hands this method the un-annotated items with their regional-semantics pseudo
        captions (A3VSE's D^u); a method that learns from them says so."""
        return False

    def fitted_to(self, n_items: int) -> MethodConfig:
        """This config for training on ``n_items`` annotated items; a method whose shapes depend on the data
        (the instance loss: one class per item) returns its adapted copy."""
        return self

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict, with the method id under ``"method"``."""
        out: dict[str, Any] = {"method": self.method}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    def to_json(self) -> str:
        """Indented JSON of :meth:`to_dict`; :func:`config_from_json` reads it back."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

@dataclass(frozen=True)
class TextGlobalConfig(MethodConfig):
    """Methods whose text side has a global feature: a bi-GRU over tokens (PVSE §3.1), the residual text CNN
    of Zheng et al. §III-B (``cnn``), or MiniLM's sentence vector (``text_encoder='minilm-sentence'``, which
    takes precedence: ``text_global`` is then unused).

    The CNN reads a fixed canvas of ``text_cnn_length`` tokens (32 in Zheng et al.), a 1x1 stem of
    ``text_cnn_width`` channels (300, the word2vec lookup) and bottleneck blocks per stage (ResNet-50's
    3-4-6-3 with 256..2048 output channels) with 1x2 filters.
    """

    text_global: TextGlobalKind = "bigru"
    text_cnn_length: int = bounded(32, 1)
    text_cnn_width: int = bounded(300, 1)
    text_cnn_blocks: tuple[int, ...] = (3, 4, 6, 3)
    text_cnn_channels: tuple[int, ...] = (256, 512, 1024, 2048)
    text_position_shift: bool = True

    def check(self) -> None:
        super().check()
        if len(self.text_cnn_blocks) != len(self.text_cnn_channels) or not self.text_cnn_blocks:
            raise ConfigError("text_cnn_blocks: needs one entry per text_cnn_channels stage "
                              f"({len(self.text_cnn_blocks)} vs {len(self.text_cnn_channels)})")
        for name in ("text_cnn_blocks", "text_cnn_channels"):
            if any(v < 1 for v in getattr(self, name)):
                raise ConfigError(f"{name}: every entry must be >= 1")
        size_field = self.text_global_size_field
        if self.text_global == "bigru" and not self.uses_sentence_vector and getattr(self, size_field) % 2:
            raise ConfigError(f"{size_field}: the text bi-GRU splits it over two directions; must be even, "
                              f"got {getattr(self, size_field)}")
        if self.video_uses_bigru and self.embed_dim % 2:
            raise ConfigError(f"embed_dim: the video bi-GRU splits it over two directions; must be even, "
                              f"got {self.embed_dim}")

    @property
    def text_global_size_field(self) -> str:
        """The field that sets the global text feature's size."""
        return "embed_dim"

    @property
    def video_uses_bigru(self) -> bool:
        """True when clips are encoded by a bi-GRU of ``embed_dim`` (PVSE §3.1)."""
        return True

# method id -> config class, filled by the registry (trainer.methods.registry.register_method)
CONFIG_CLASSES: dict[str, type[MethodConfig]] = {}

def config_from_dict(data: dict[str, Any]) -> MethodConfig:
    """Rebuild a config from :meth:`MethodConfig.to_dict` output (validated)."""
    if not isinstance(data, dict) or "method" not in data:
        raise ConfigError("method: a serialised config needs a 'method' entry")
    method = data["method"]
    if method not in CONFIG_CLASSES:
        raise ConfigError(f"method: unknown method {method!r}; known: {sorted(CONFIG_CLASSES)}")
    values = {k: v for k, v in data.items() if k != "method"}
    cls = CONFIG_CLASSES[method]
    _reject_unknown(cls, values)
    return cls(**values)

def config_from_json(text: str) -> MethodConfig:
    """Parse :meth:`MethodConfig.to_json` output."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"config JSON is not valid: {exc}") from exc
    return config_from_dict(data)

def _reject_unknown(cls: type[MethodConfig], values: dict[str, Any]) -> None:
    known = {f.name for f in dataclasses.fields(cls)}
    for name in values:
        if name not in known:
            raise ConfigError(f"{name}: unknown field for method {cls.method!r}")

def _coerce(f: dataclasses.Field[Any], value: Any, hint: Any) -> Any:
    """Check ``value`` against the field's type hint and bounds; lists become tuples, ints become floats."""
    value = _coerce_type(f.name, value, hint)
    lo, hi = f.metadata.get("lo"), f.metadata.get("hi")
    if value is None or isinstance(value, (str, bool, tuple)):
        return value
    if not math.isfinite(value):
        raise ConfigError(f"{f.name}: must be finite, got {value!r}")
    if lo is not None and (value <= lo if f.metadata.get("lo_open") else value < lo):
        relation = ">" if f.metadata.get("lo_open") else ">="
        raise ConfigError(f"{f.name}: must be {relation} {lo}, got {value!r}")
    if hi is not None and value > hi:
        raise ConfigError(f"{f.name}: must be <= {hi}, got {value!r}")
    return value

def _coerce_type(name: str, value: Any, hint: Any) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _coerce_type(name, value, inner)
    if origin is Literal:
        choices = typing.get_args(hint)
        if value not in choices:
            raise ConfigError(f"{name}: must be one of {list(choices)}, got {value!r}")
        return value
    if origin is tuple:
        if not isinstance(value, (list, tuple)) or not all(_is_int(v) for v in value):
            raise ConfigError(f"{name}: must be a list of integers, got {value!r}")
        return tuple(int(v) for v in value)
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{name}: must be true or false, got {value!r}")
        return value
    if hint is int:
        if not _is_int(value):
            raise ConfigError(f"{name}: must be an integer, got {value!r}")
        return int(value)
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{name}: must be a number, got {value!r}")
        return float(value)
    raise ConfigError(f"{name}: unsupported field type {hint!r}")  # a bug in this module, not user input

def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
