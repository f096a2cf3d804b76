"""Typed, validated configurations for every registered method.

Each method has a frozen dataclass whose defaults are the hyper-parameters its paper reports (the
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
AdversarialGame = Literal["reversal", "confusion"]

# Native token-vector sizes of the text feature extractors the engine ships.
NATIVE_WORD_DIM: dict[str, int] = {"glove": 50, "minilm": 384, "minilm-sentence": 384}
FEATURE_BACKBONE = "efficientnet-lite0"


class ConfigError(ValueError):
    """A configuration value is unknown, of the wrong type, or out of range; the message names it."""


def _bounds(lo: float | None = None, hi: float | None = None, *, lo_open: bool = False) -> dict[str, Any]:
    """Field metadata: inclusive ``lo``/``hi`` bounds (``lo_open`` makes the lower bound exclusive)."""
    return {"lo": lo, "hi": hi, "lo_open": lo_open}


def _f(default: Any, lo: float | None = None, hi: float | None = None, *, lo_open: bool = False) -> Any:
    return field(default=default, metadata=_bounds(lo, hi, lo_open=lo_open))


@dataclass(frozen=True)
class MethodConfig:
    """Feature dimensions shared by every method.

    ``text_word_dim=None`` resolves to the native size of ``text_encoder`` (GloVe 50, MiniLM 384).
    ``max_frames`` is PVSE §3.5's clip length (8 frames, evenly spread at inference).
    """

    method: ClassVar[str] = ""

    image_dim: int = _f(1280, 1)
    image_regions: int = _f(49, 1)
    text_encoder: TextEncoderKind = "glove"
    text_word_dim: int | None = _f(None, 1)
    sentence_dim: int = _f(384, 1)
    max_frames: int = _f(8, 1)
    embed_dim: int = _f(1024, 1)

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
    text_cnn_length: int = _f(32, 1)
    text_cnn_width: int = _f(300, 1)
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


@dataclass(frozen=True)
class VSEConfig(TextGlobalConfig):
    """Global features only (PVSE's K=0 baseline) trained with the VSE++ triplet loss.

    Margin 0.2 and hardest negatives are VSE++'s settings (Faghri et al., as used by PVSE §5).
    """

    method: ClassVar[str] = "vse"
    margin: float = _f(0.2, 0.0)
    hardest_negative: bool = True
    # A3VSE's un-annotated corpus D^u (Huang et al. §3.2) for VSE: > 0 adds the library's un-annotated items with
    # their regional-semantics pseudo captions to every batch, as pairs of this weight and as negatives of the
    # annotated pairs (what a warm-started retrain on a few captions needs to tell them from the rest).
    pseudo_weight: float = _f(0.0, 0.0)


@dataclass(frozen=True)
class PVSEConfig(TextGlobalConfig):
    """PVSE / PIE-Net (Song & Soleymani 2019).

    K=3 is the best K on COCO and TGIF (§5.3, fig. 5; MRW prefers 5). H=1024 and rho=0.1 are inside the
    cross-validated ranges of §3.5; lambda_1 (diversity) = 0.1 and lambda_2 (MMD) = 0.01 are the released
    settings. ``hardest_negative`` picks the hardest negative per anchor instead of eq. 6's sum over j.
    ``mmd_sigma`` is the RBF kernel's bandwidth.
    """

    method: ClassVar[str] = "pvse"
    num_embeds: int = _f(3, 1)
    margin: float = _f(0.1, 0.0)
    hardest_negative: bool = True
    div_weight: float = _f(0.1, 0.0)
    mmd_weight: float = _f(0.01, 0.0)
    mmd_sigma: float = _f(1.0, 0.0, lo_open=True)


@dataclass(frozen=True)
class PCMEConfig(TextGlobalConfig):
    """PCME (Chun et al. 2021).

    D=1024 and J=7 samples are the COCO settings (§4.1, released config); a and b of eq. 3 start at 15
    (released COCO config, learnable). The KL weight 1e-5 is the released COCO value; the uniformity loss
    weight is 0 there (10 on CUB). One attention head in each local attention branch (fig. 3).
    ``logsigma_init`` is where the sigma heads start (not given in the paper; see pcme.PCMEBranch):
    -4 keeps the initial sample noise (sigma * sqrt(D) ~ 0.4 at D=512) below the distances between means.
    """

    method: ClassVar[str] = "pcme"
    num_samples: int = _f(7, 1)
    match_scale_init: float = _f(15.0, 0.0, lo_open=True)
    match_shift_init: float = _f(15.0)
    kl_weight: float = _f(1e-5, 0.0)
    uniformity_weight: float = _f(0.0, 0.0)
    uniformity_t: float = _f(2.0, 0.0, lo_open=True)
    attention_heads: int = _f(1, 1)
    logsigma_init: float = _f(-4.0)


@dataclass(frozen=True)
class A3VSEConfig(MethodConfig):
    """A3VSE (Huang et al. 2019), §4.3: H=512 shared by the context vectors, K=3 heads, alpha_vt=0.2,
    alpha_vs=0.3, beta=0.8, GRL gamma = 2/(1+exp(-eta p)) - 1 with eta=10; lambda_vvu=0.2, lambda_ts=0.1,
    lambda_vt=0.5, lambda_vus=0.5, lambda_vs=lambda_vut=0.3.

    The softmax temperature lambda_v of eq. 1 is not given in the paper; 10 lets the tanh-bounded scores
    concentrate. The discriminator width is not given either (``disc_hidden``). The embedding is the
    concatenation of the K attended vectors, so its size is ``num_heads * embed_dim``.

    Two switches reproduce the ablations of Table 5 (§4.6): ``attention=False`` is "s, without attention"
    (mean pooling over the encoded entities replaces eq. 1: every head's map is uniform over the valid
    entities, so shapes and the export stay those of the full model); ``adversarial=False`` is "s, without
    L_adv" (eq. 9 without l^adv: no discriminator runs and no gradient goes through the reversal layer).
    "No s" is not a config switch: it is training without pseudo pairs (the trainer's ``pseudo_pairs``).

    ``adversarial_game`` says how the encoders play eq. 10. ``"reversal"`` is the paper's gradient reversal
    layer: the encoders ascend the discriminators' BCE. On Flickr8k, fully annotated (only the v-t
    discriminator runs), that ascent has no optimum at chance: the encoders overshoot until the discriminator
    is confidently wrong (accuracy 0.32 in epoch 2), the embeddings' spread halves and dev rsum fell 59 -> 35
    (with lambda_vt 0.05 instead of 0.5: 147 at epoch 3, then 116 as accuracy reached 0.5 and the BCE kept
    rising). ``"confusion"`` (default; Tzeng et al. 2015's domain confusion) keeps eq. 4 for the discriminators,
    on embeddings they cannot move, and gives the encoders the cross-entropy between the discriminators'
    outputs (parameters held fixed) and the uniform label 1/2, weighted by the same lambda and the GRL's gamma
    schedule: its gradient vanishes exactly when a discriminator is at chance, the equilibrium eq. 10 aims for.

    ``global_residual`` (ours, default on) adds to every head's attended vector a linear projection of the
    item's mean raw entity (the pooled backbone feature of a photo, the mean frame of a clip, the mean MiniLM
    token vector of a caption, i.e. MiniLM's sentence embedding before its normalisation), as PVSE fuses
    global and local features by residual learning (§3.3). The paper's encoders learn from detector regions
    and word vectors with backbones trained end to end; ours see frozen features only, and the caption LSTM
    starts from scratch on 30,000 captions, so without this path the full model reached a Flickr8k dev rsum of
    ~150-160 against 287 for two linear maps (``vse``). Off reproduces the paper's encoders exactly.
    """

    method: ClassVar[str] = "a3vse"
    embed_dim: int = _f(512, 1)
    num_heads: int = _f(3, 1)
    context_dim: int = _f(512, 1)
    temperature: float = _f(10.0, 0.0, lo_open=True)
    margin_vt: float = _f(0.2, 0.0)
    margin_vs: float = _f(0.3, 0.0)
    beta: float = _f(0.8, 0.0, 1.0)
    grl_eta: float = _f(10.0, 0.0)
    lambda_vvu: float = _f(0.2, 0.0)
    lambda_ts: float = _f(0.1, 0.0)
    lambda_vt: float = _f(0.5, 0.0)
    lambda_vus: float = _f(0.5, 0.0)
    lambda_vs: float = _f(0.3, 0.0)
    lambda_vut: float = _f(0.3, 0.0)
    disc_hidden: int = _f(512, 1)
    attention: bool = True
    adversarial: bool = True
    adversarial_game: AdversarialGame = "confusion"
    global_residual: bool = True

    def check(self) -> None:
        super().check()
        if self.uses_sentence_vector:
            raise ConfigError("text_encoder: a3vse attends over token vectors; use 'glove' or 'minilm'")


@dataclass(frozen=True)
class TwoBranchEmbedConfig(MethodConfig):
    """Two-branch embedding network (Wang, Li & Lazebnik 2018), image-sentence settings of §5:
    FC sizes 2048 and 512, dropout 0.5 after the ReLU, m=0.1, lambda_1=1, lambda_2=2, lambda_3=0
    (no image neighbourhoods in caption data), lambda_4=0.2, keep the K=50 top violating triplets.
    """

    method: ClassVar[str] = "twobranch-embed"
    embed_dim: int = _f(512, 1)
    hidden_dim: int = _f(2048, 1)
    dropout: float = _f(0.5, 0.0, 1.0)
    margin: float = _f(0.1, 0.0)
    lambda_i2t: float = _f(1.0, 0.0)
    lambda_t2i: float = _f(2.0, 0.0)
    lambda_image_nbr: float = _f(0.0, 0.0)
    lambda_text_nbr: float = _f(0.2, 0.0)
    top_k: int = _f(50, 1)


@dataclass(frozen=True)
class TwoBranchSimConfig(MethodConfig):
    """Two-branch similarity network (§3.3, §4.3): the embedding branches, an element-wise product, then FC
    layers 512x512, 512x256 and 256x1 (``sim_hidden`` lists the hidden sizes). One sampled negative per
    positive keeps the logistic loss balanced (eq. 7).
    """

    method: ClassVar[str] = "twobranch-sim"
    embed_dim: int = _f(512, 1)
    hidden_dim: int = _f(2048, 1)
    dropout: float = _f(0.5, 0.0, 1.0)
    sim_hidden: tuple[int, ...] = (512, 256)
    negatives_per_positive: int = _f(1, 1)

    def check(self) -> None:
        super().check()
        if any(v < 1 for v in self.sim_hidden):
            raise ConfigError("sim_hidden: every layer size must be >= 1")


@dataclass(frozen=True)
class InstanceConfig(TextGlobalConfig):
    """Dual-path model with the instance loss (Zheng et al.): FC 2048 - BN - ReLU - FC 2048 on the image
    feature (§III-A), the residual text CNN (§III-B), dropout 0.75 (§VI-B), ranking margin alpha=1, stage II
    weights lambda_1=lambda_2=lambda_3=1 (set ``rank_weight=0`` for stage I, §V).

    ``num_classes`` is the number of image/text groups (29,783 on Flickr30k); the trainer sets it to the
    library's group count.
    """

    method: ClassVar[str] = "instance"
    embed_dim: int = _f(2048, 1)
    hidden_dim: int = _f(2048, 1)
    dropout: float = _f(0.75, 0.0, 1.0)
    num_classes: int = _f(29783, 1)
    text_global: TextGlobalKind = "cnn"
    margin: float = _f(1.0, 0.0)
    hardest_negative: bool = True
    rank_weight: float = _f(1.0, 0.0)
    visual_weight: float = _f(1.0, 0.0)
    textual_weight: float = _f(1.0, 0.0)

    @property
    def text_global_size_field(self) -> str:
        return "hidden_dim"

    @property
    def video_uses_bigru(self) -> bool:
        return False  # clips are the mean of their frames through the visual path


CONFIG_CLASSES: dict[str, type[MethodConfig]] = {
    cls.method: cls
    for cls in (VSEConfig, PVSEConfig, PCMEConfig, A3VSEConfig, TwoBranchEmbedConfig, TwoBranchSimConfig,
                InstanceConfig)
}


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
