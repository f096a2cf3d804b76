"""Text encoders behind one interface: MiniLM (ONNX Runtime) and GloVe word vectors.

Both run without torch. ``TextEncoder.encode`` returns per-sentence token vectors with a mask and, where the
encoder has one, a sentence embedding; the trained models consume the token vectors (PVSE §3.1: word vectors into
a bi-GRU), zero-shot search the sentence embedding.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
from tokenizers import Tokenizer

from engine.features.backbone import require_assets
from engine.features.onnx import open_session
from engine.features.regional import content_words


@dataclass(frozen=True, slots=True)
class EncodedText:
    tokens: list[list[str]]  # the tokens each row of ``vectors`` stands for
    vectors: np.ndarray  # (N, L, D) float32, zero past each sentence's length
    mask: np.ndarray  # (N, L) bool
    sentence: np.ndarray | None  # (N, D_s) L2-normalised, or None


class TextEncoder(Protocol):
    """Anything that turns sentences into token vectors (and maybe a sentence vector)."""

    name: str
    dim: int

    def encode(self, texts: list[str]) -> EncodedText: ...


class MiniLMEncoder:
    """all-MiniLM-L6-v2 (384-d token and sentence embeddings) on ONNX Runtime."""

    name = "minilm"
    dim = 384

    def __init__(self, root: Path | None = None, threads: int | None = None, max_tokens: int = 128,
                 graph: Path | None = None, name: str = "minilm") -> None:
        """The prepared assets' MiniLM, or ``graph``: a fine-tuned copy with the same inputs and outputs (a model
        folder's ``text_encoder.onnx``), read with the same tokenizer."""
        folder = require_assets(root) / "minilm"
        self.id = name
        self._tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self._tokenizer.enable_truncation(max_tokens)
        self._tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        self._session = open_session(graph or folder / "model.onnx", threads=threads)
        self._lock = threading.Lock()  # the tokenizer's padding state is not thread-safe

    def knows(self, word: str) -> bool:
        """Whether ``word`` is a whole token of the WordPiece vocabulary (not assembled from pieces)."""
        return self._tokenizer.token_to_id(word) is not None

    def encode(self, texts: list[str], batch_size: int = 64) -> EncodedText:
        if not texts:
            return EncodedText([], np.zeros((0, 0, self.dim), np.float32), np.zeros((0, 0), bool),
                               np.zeros((0, self.dim), np.float32))
        parts = [self._encode_batch(texts[i:i + batch_size]) for i in range(0, len(texts), batch_size)]
        length = max(p.vectors.shape[1] for p in parts)
        vectors = np.concatenate([_pad(p.vectors, length) for p in parts])
        mask = np.concatenate([_pad(p.mask, length) for p in parts])
        return EncodedText([t for p in parts for t in p.tokens], vectors, mask,
                           np.concatenate([p.sentence for p in parts]))

    def _encode_batch(self, texts: list[str]) -> EncodedText:
        with self._lock:
            encodings = self._tokenizer.encode_batch([t or " " for t in texts])
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        tokens, sentence = self._session.run(None, {"input_ids": ids, "attention_mask": mask})
        tokens = tokens * mask[..., None]
        words = [[t for t, m in zip(e.tokens, e.attention_mask, strict=True) if m] for e in encodings]
        return EncodedText(words, tokens.astype(np.float32), mask.astype(bool), sentence.astype(np.float32))


_WORD = re.compile(r"[a-z0-9]+|'[a-z]+|[^\sa-z0-9']")


def glove_tokenize(text: str) -> list[str]:
    """Lower-case words, numbers and single punctuation marks, the way GloVe 6B was tokenised."""
    return _WORD.findall(text.lower())


class GloveEncoder:
    """GloVe 6B 50-d word vectors; unknown words map to a zero vector (and stay unmasked)."""

    name = "glove"
    dim = 50

    def __init__(self, root: Path | None = None, max_tokens: int = 64) -> None:
        folder = require_assets(root) / "glove"
        words = (folder / "vocab.txt").read_text(encoding="utf-8").split("\n")
        self._index = {w: i for i, w in enumerate(words)}
        self._vectors = np.load(folder / "vectors.npy", mmap_mode="r")
        self.max_tokens = max_tokens

    def knows(self, word: str) -> bool:
        """Whether ``word`` has a GloVe vector (an unknown word reaches a model as zeros)."""
        return word in self._index

    def encode(self, texts: list[str]) -> EncodedText:
        tokens = [glove_tokenize(t)[: self.max_tokens] or ["."] for t in texts]
        length = max((len(t) for t in tokens), default=0)
        vectors = np.zeros((len(texts), length, self.dim), np.float32)
        mask = np.zeros((len(texts), length), bool)
        for row, words in enumerate(tokens):
            ids = [self._index.get(w, -1) for w in words]
            known = [i for i, v in enumerate(ids) if v >= 0]
            if known:
                vectors[row, known] = self._vectors[[ids[i] for i in known]]
            mask[row, : len(words)] = True
        return EncodedText(tokens, vectors, mask, None)


def carries_evidence(text: str, encoder: MiniLMEncoder | GloveEncoder,
                     lexicon: GloveEncoder | None = None) -> bool:
    """Whether ``text`` holds at least one content word (:func:`engine.features.regional.content_words`) that
    ``encoder`` knows, or ``lexicon`` where given. A query without one carries no evidence about any item.

    GloVe: a word outside its vocabulary becomes a zero vector, so a query of unknown words gives a model the same
    input, zeros, whatever its words: whatever the model answers is a property of its weights, not of the query.
    MiniLM never fails to tokenise: an unknown word becomes word pieces ("zxqv" -> z ##x ##q ##v). A word that is
    whole in its vocabulary is known; a split one is known when it is an English word, which the GloVe
    vocabulary (400,000 words of Wikipedia and Gigaword) passed as ``lexicon`` says ("snowboarder" -> snow ##board
    ##er is one). Stop words and 1-2 letter words carry no evidence for either.
    """
    return any(encoder.knows(w) or (lexicon is not None and lexicon.knows(w)) for w in content_words(text))


def text_encoder(name: str, root: Path | None = None) -> TextEncoder:
    """The text encoder registered under ``name`` ('minilm' or 'glove')."""
    if name == "minilm":
        return MiniLMEncoder(root)
    if name == "glove":
        return GloveEncoder(root)
    raise ValueError(f"unknown text encoder {name!r}: expected 'minilm' or 'glove'")


def _pad(array: np.ndarray, length: int) -> np.ndarray:
    extra = length - array.shape[1]
    if extra == 0:
        return array
    widths = [(0, 0), (0, extra)] + [(0, 0)] * (array.ndim - 2)
    return np.pad(array, widths)
