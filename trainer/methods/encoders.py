"""Building blocks shared by the methods: masked pooling, masked recurrent encoders, the residual text CNN,
global feature encoders (PVSE §3.1) and the gradient reversal layer.

Everything here is written so that ``torch.onnx.export`` (legacy exporter) traces it with dynamic batch
and sequence axes: no Python branches on tensor values, no packed sequences.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from trainer.methods.config import MethodConfig, TextGlobalConfig
from trainer.methods.interface import MethodInputError


def valid_mask(mask: Tensor) -> Tensor:
    """A bool view of a 0/1 (or bool) mask."""
    return mask > 0 if mask.dtype != torch.bool else mask


def lengths_of(mask: Tensor) -> Tensor:
    """(B,) number of valid positions per row, at least 1 so that empty rows still index safely."""
    return valid_mask(mask).long().sum(1).clamp(min=1)


def masked_softmax(scores: Tensor, mask: Tensor | None, dim: int = -1) -> Tensor:
    """Softmax over ``dim`` that gives exactly 0 to masked positions (``mask`` broadcasts to ``scores``)."""
    if mask is None:
        return torch.softmax(scores, dim)
    keep = valid_mask(mask)
    # finfo.min rather than -inf: a fully padded row then yields zeros instead of NaN.
    weights = torch.softmax(scores.masked_fill(~keep, torch.finfo(scores.dtype).min), dim)
    return weights * keep.to(weights.dtype)


def masked_mean(x: Tensor, mask: Tensor | None) -> Tensor:
    """Mean of ``x`` (B, T, C) over the valid positions of ``mask`` (B, T)."""
    if mask is None:
        return x.mean(1)
    weights = valid_mask(mask).to(x.dtype)
    return (x * weights[..., None]).sum(1) / weights.sum(1, keepdim=True).clamp(min=1.0)


def reverse_valid(x: Tensor, lengths: Tensor) -> Tensor:
    """Reverse each row's valid prefix of ``x`` (B, T, C) in place of it; padding stays where it is.

    The map is its own inverse, which is how backward-direction outputs are put back in order.
    """
    steps = torch.arange(x.shape[1], device=x.device)[None, :]
    index = torch.where(steps < lengths[:, None], lengths[:, None] - 1 - steps, steps)
    return torch.gather(x, 1, index[..., None].expand(-1, -1, x.shape[2]))


def take_last(x: Tensor, lengths: Tensor) -> Tensor:
    """(B, C): the output at each row's last valid step of ``x`` (B, T, C)."""
    index = (lengths - 1)[:, None, None].expand(-1, 1, x.shape[2])
    return torch.gather(x, 1, index).squeeze(1)


class MaskedRNN(nn.Module):
    """A GRU or LSTM over right-padded sequences, uni- or bidirectional, exact for every row's length.

    The backward direction runs a forward RNN on each row's reversed valid prefix, which matches a packed
    bidirectional RNN while staying traceable to ONNX. ``forward`` returns the per-step outputs (B, T, O)
    with padding zeroed, and the final states (B, O): the forward direction's state at the last valid step
    concatenated with the backward direction's state after reading back to the first step.
    """

    def __init__(self, input_dim: int, hidden_dim: int, *, cell: str = "gru", bidirectional: bool = True):
        super().__init__()
        rnn_cls = {"gru": nn.GRU, "lstm": nn.LSTM}.get(cell)
        if rnn_cls is None:
            raise MethodInputError(f"cell: expected 'gru' or 'lstm', got {cell!r}")
        self.forward_rnn = rnn_cls(input_dim, hidden_dim, batch_first=True)
        self.backward_rnn = rnn_cls(input_dim, hidden_dim, batch_first=True) if bidirectional else None
        self.output_dim = hidden_dim * (2 if bidirectional else 1)

    def forward(self, x: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        lengths = lengths_of(mask)
        keep = valid_mask(mask).to(x.dtype)[..., None]
        fwd, _ = self.forward_rnn(x)
        outputs, finals = [fwd], [take_last(fwd, lengths)]
        if self.backward_rnn is not None:
            bwd_reversed, _ = self.backward_rnn(reverse_valid(x, lengths))
            outputs.append(reverse_valid(bwd_reversed, lengths))
            finals.append(take_last(bwd_reversed, lengths))
        return torch.cat(outputs, -1) * keep, torch.cat(finals, -1)


class BiGRUEncoder(nn.Module):
    """Global feature of a sequence: the final states of a bi-GRU with ``out_dim / 2`` units per direction
    (PVSE §3.1, video and sentence encoders)."""

    def __init__(self, input_dim: int, out_dim: int) -> None:
        super().__init__()
        self.rnn = MaskedRNN(input_dim, out_dim // 2, cell="gru", bidirectional=True)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        return self.rnn(x, mask)[1]


def position_shift_offsets(mask: Tensor, canvas: int) -> Tensor:
    """Random left offsets for the position-shift augmentation of Zheng et al. §III-B.

    Each sentence of length n gets ``offset ~ U{0, ..., canvas - n}`` zeros in front, the rest behind.
    """
    room = (canvas - lengths_of(mask)).clamp(min=0)
    return torch.floor(torch.rand(room.shape, device=mask.device) * (room + 1).to(torch.float32)).long()


def place_on_canvas(tokens: Tensor, mask: Tensor, canvas: int, offsets: Tensor | None = None) -> Tensor:
    """(B, canvas, W): tokens written from ``offsets`` (default 0, left alignment), zeros elsewhere.

    Sentences longer than the canvas lose their final words (Zheng et al. §III-B).
    """
    batch = tokens.shape[0]
    if offsets is None:
        offsets = torch.zeros(batch, dtype=torch.long, device=tokens.device)
    source = torch.arange(canvas, device=tokens.device)[None, :] - offsets[:, None]
    inside = (source >= 0) & (source < lengths_of(mask)[:, None])  # lengths never exceed L
    gathered = torch.gather(tokens, 1, source.clamp(0, tokens.shape[1] - 1)[..., None].expand(
        -1, -1, tokens.shape[2]))
    # Rows whose mask is all zero still count one "valid" token in lengths_of; the mask drops it.
    real = torch.gather(valid_mask(mask), 1, source.clamp(0, tokens.shape[1] - 1))
    return gathered * (inside & real).to(tokens.dtype)[..., None]


class _Bottleneck(nn.Module):
    """Residual block of the text CNN: 1x1 - 1x2 - 1x1 convolutions with batch norm (Zheng et al. fig. 3)."""

    def __init__(self, in_ch: int, out_ch: int) -> None:
        super().__init__()
        mid = max(1, out_ch // 4)
        self.reduce = nn.Sequential(nn.Conv1d(in_ch, mid, 1, bias=False), nn.BatchNorm1d(mid), nn.ReLU())
        self.pair = nn.Conv1d(mid, mid, 2, bias=False)  # 1x2 filter: two neighbouring words
        self.pair_norm = nn.BatchNorm1d(mid)
        self.expand = nn.Sequential(nn.Conv1d(mid, out_ch, 1, bias=False), nn.BatchNorm1d(out_ch))
        self.shortcut = (nn.Identity() if in_ch == out_ch else
                         nn.Sequential(nn.Conv1d(in_ch, out_ch, 1, bias=False), nn.BatchNorm1d(out_ch)))

    def forward(self, x: Tensor) -> Tensor:
        h = self.reduce(x)
        h = F.relu(self.pair_norm(self.pair(F.pad(h, (0, 1)))))  # pad right: output keeps the length
        return F.relu(self.expand(h) + self.shortcut(x))


class TextCNN(nn.Module):
    """The deep text CNN of Zheng et al. §III-B on cached token vectors.

    Tokens are placed on a fixed canvas (position shift while training, left alignment otherwise), a 1x1
    stem maps them to ``width`` channels (the paper's word2vec lookup layer), bottleneck stages follow,
    and average pooling over the canvas gives a (B, channels[-1]) feature.
    """

    def __init__(self, word_dim: int, canvas: int, width: int, blocks: tuple[int, ...],
                 channels: tuple[int, ...], position_shift: bool = True) -> None:
        super().__init__()
        self.canvas = canvas
        self.position_shift = position_shift
        self.stem = nn.Sequential(nn.Conv1d(word_dim, width, 1, bias=False), nn.BatchNorm1d(width), nn.ReLU())
        layers: list[nn.Module] = []
        in_ch = width
        for count, out_ch in zip(blocks, channels, strict=True):
            for _ in range(count):
                layers.append(_Bottleneck(in_ch, out_ch))
                in_ch = out_ch
        self.blocks = nn.Sequential(*layers)
        self.output_dim = in_ch

    def forward(self, tokens: Tensor, mask: Tensor) -> Tensor:
        offsets = position_shift_offsets(mask, self.canvas) if self.training and self.position_shift else None
        x = place_on_canvas(tokens, mask, self.canvas, offsets).transpose(1, 2)
        return self.blocks(self.stem(x)).mean(-1)


def build_text_global(config: TextGlobalConfig, out_dim: int) -> nn.Module:
    """The global text encoder a config asks for, mapping text inputs to (B, out_dim).

    The returned module is called as ``module(tokens, mask, sentence)``.
    """
    if config.uses_sentence_vector:
        return SentenceGlobal(config.sentence_dim, out_dim)
    if config.text_global == "cnn":
        return TokenGlobal(CNNEncoder(config, out_dim))
    return TokenGlobal(BiGRUEncoder(config.word_dim, out_dim))


class SentenceGlobal(nn.Module):
    """Global text feature from MiniLM's sentence vector through one FC layer."""

    def __init__(self, sentence_dim: int, out_dim: int) -> None:
        super().__init__()
        self.fc = nn.Linear(sentence_dim, out_dim)

    def forward(self, tokens: Tensor | None, mask: Tensor | None, sentence: Tensor | None) -> Tensor:
        if sentence is None:
            raise MethodInputError("sentence: this model's text encoder needs the (B, S) sentence vector")
        return self.fc(sentence)


class TokenGlobal(nn.Module):
    """Global text feature from the token vectors through a sequence encoder (bi-GRU)."""

    def __init__(self, encoder: nn.Module) -> None:
        super().__init__()
        self.encoder = encoder

    def forward(self, tokens: Tensor | None, mask: Tensor | None, sentence: Tensor | None) -> Tensor:
        if tokens is None or mask is None:
            raise MethodInputError("tokens: this model's text encoder needs token vectors and their mask")
        return self.encoder(tokens, mask)


class CNNEncoder(nn.Module):
    """The residual text CNN followed by one FC layer to ``out_dim``: (tokens, mask) -> (B, out_dim)."""

    def __init__(self, config: TextGlobalConfig, out_dim: int) -> None:
        super().__init__()
        self.cnn = TextCNN(config.word_dim, config.text_cnn_length, config.text_cnn_width,
                           config.text_cnn_blocks, config.text_cnn_channels, config.text_position_shift)
        self.head = nn.Linear(self.cnn.output_dim, out_dim)

    def forward(self, tokens: Tensor, mask: Tensor) -> Tensor:
        return self.head(self.cnn(tokens, mask))


def check_shape(name: str, tensor: Tensor | None, dims: tuple[int | None, ...]) -> Tensor:
    """Raise :class:`MethodInputError` naming ``name`` unless ``tensor`` has ``len(dims)`` axes whose sizes
    match the non-None entries of ``dims``. Skipped while exporting, where shapes are symbolic."""
    if tensor is None:
        raise MethodInputError(f"{name}: required by this encoder but missing")
    if torch.jit.is_tracing() or torch.onnx.is_in_onnx_export():
        return tensor
    ok = tensor.dim() == len(dims) and all(
        d is None or s == d for s, d in zip(tensor.shape, dims, strict=True))
    if not ok:
        want = "(" + ", ".join("*" if d is None else str(d) for d in dims) + ")"
        raise MethodInputError(f"{name}: expected shape {want}, got {tuple(tensor.shape)}")
    return tensor


def check_frames(config: MethodConfig, frames: Tensor | None, mask: Tensor | None) -> None:
    """Shape checks for video inputs, (B, T, C) frames and a (B, T) mask."""
    frames = check_shape("frames", frames, (None, None, config.image_dim))
    check_shape("mask", mask, tuple(frames.shape[:2]))


def check_tokens(config: MethodConfig, tokens: Tensor | None, mask: Tensor | None) -> None:
    """Shape checks for token inputs, (B, L, W) vectors and a (B, L) mask."""
    tokens = check_shape("tokens", tokens, (None, None, config.word_dim))
    check_shape("mask", mask, tuple(tokens.shape[:2]))


def check_local(config: MethodConfig, local: Tensor | None) -> Tensor:
    """Shape check for image local features (B, R, C)."""
    return check_shape("local", local, (None, None, config.image_dim))


class _ReverseGradient(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, gamma: float) -> Tensor:  # type: ignore[override]
        ctx.gamma = gamma
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:  # type: ignore[override]
        return -ctx.gamma * grad, None


class GradientReversal(nn.Module):
    """Identity forward, gradient times ``-gamma`` backward (Ganin & Lempitsky; A3VSE §3.3, eq. 10).

    Placed between an encoder and a discriminator, one optimizer descending ``l^tri + lambda * BCE`` then moves
    the discriminator to a lower BCE (eq. 10's argmax of l^d = -BCE) and the encoder, whose gradient arrives
    multiplied by ``-gamma``, to a higher one (argmin of l^d): the encoder's adversarial gradient is exactly
    ``-gamma * lambda`` times the BCE's (tests/unit/test_a3vse_adversarial.py checks both directions).
    """

    def __init__(self, gamma: float = 1.0) -> None:
        super().__init__()
        self.gamma = gamma

    def forward(self, x: Tensor) -> Tensor:
        return _ReverseGradient.apply(x, self.gamma)


def grl_gamma(progress: float, eta: float = 10.0) -> float:
    """A3VSE §4.3 schedule (DANN's): gamma = 2 / (1 + exp(-eta * p)) - 1 for training progress p in [0, 1].

    It is 0 at the start, so the encoders first learn from the triplet loss while the discriminators warm up,
    and rises fast: with eta = 10 it is 0.46 a tenth of the way in and 0.76 at a fifth, so with the 12-epoch
    recipe the reversed gradient is already ~0.4-0.7 of full strength during the second epoch.
    """
    if not 0.0 <= progress <= 1.0:
        raise MethodInputError(f"progress: must be in [0, 1], got {progress!r}")
    return 2.0 / (1.0 + math.exp(-eta * progress)) - 1.0


class MultiHeadAttentionPool(nn.Module):
    """K attention maps by a two-layer perceptron, PVSE eq. 2: ``alpha = softmax(w2 tanh(w1 Psi^T))``.

    ``hidden`` is A (D/2 in the paper). Returns the maps (B, K, R), zero on masked inputs, and the attended
    features ``alpha Psi`` (B, K, C).
    """

    def __init__(self, in_dim: int, heads: int, hidden: int | None = None) -> None:
        super().__init__()
        hidden = hidden or max(1, in_dim // 2)
        self.w1 = nn.Linear(in_dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, heads, bias=False)
        self.heads = heads

    def forward(self, local: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        scores = self.w2(torch.tanh(self.w1(local))).transpose(1, 2)  # (B, K, R)
        attn = masked_softmax(scores, None if mask is None else mask[:, None, :])
        return attn, attn @ local

class GlobalEncoders(nn.Module):
    """The three global feature encoders of PVSE §3.1, each mapping to ``out_dim``."""

    def __init__(self, config: TextGlobalConfig, out_dim: int) -> None:
        super().__init__()
        self.image = nn.Linear(config.image_dim, out_dim)
        self.video = BiGRUEncoder(config.image_dim, out_dim)
        self.text = build_text_global(config, out_dim)
        self.config = config

    def encode_image(self, pooled: Tensor | None) -> Tensor:
        """phi(x) of a photo: the pooled feature (B, C) through one FC layer."""
        c = self.config
        return self.image(check_shape("pooled", pooled, (None, c.image_dim)))

    def encode_video(self, frames: Tensor, mask: Tensor) -> Tensor:
        """phi(x) of a clip: final states of the bi-GRU over its frame features."""
        check_frames(self.config, frames, mask)
        return self.video(frames, mask)

    def encode_text(self, tokens: Tensor | None, mask: Tensor | None, sentence: Tensor | None) -> Tensor:
        """phi(x) of a caption: bi-GRU final states, text CNN, or FC of the sentence vector (per config)."""
        if self.config.uses_sentence_vector:
            check_shape("sentence", sentence, (None, self.config.sentence_dim))
        else:
            check_tokens(self.config, tokens, mask)
        return self.text(tokens, mask, sentence)
