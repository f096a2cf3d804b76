"""MiniLM embeddings of single words, computed once per asset set, for the zero-shot concept term.

The zero-shot ranking's concept term (:mod:`engine.search.zeroshot`) matches every content word of a query against
the class vocabulary by the word's own MiniLM sentence embedding (the word encoded as a sentence of its own). For a
query's new words that was a second MiniLM call per query after the sentence's: ~5 ms mean and ~11 ms at p95 of a
~24 ms text query at 100,000 items (docs/benchmarks.md, "One ranking"). The embeddings of the most frequent
words (:func:`common_words`: about 22,600 words, 35 MB) are therefore computed once, beside the class embeddings
in the assets' ``zeroshot`` folder (at the first indexing, :meth:`engine.features.encoders.Encoders.prepare`), and
looked up; a word outside the table is encoded as before and kept for the session.

The table holds the same encoder's embeddings of the same one-word texts, so a query ranks as it did (tested); it is
tied to the MiniLM it was made with (a content fingerprint of its graph and tokenizer) and ignored under another.
"""

from __future__ import annotations

import io
import logging
import os
import threading
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from engine import paths
from engine.features.regional import content_words
from engine.features.text import MiniLMEncoder
from engine.features.vocabulary import read_caption_words
from engine.files import atomic_write_bytes, content_hash
from engine.progress import CancelToken, Progress

log = logging.getLogger(__name__)

TABLE = "word_embeddings.npz"
VOCABULARY = 20_000  # GloVe's most frequent words read (94 % of Flickr8k dev captions' content words)
SESSION_LIMIT = 50_000  # words outside the table kept per session (bounded: a long session's vocabulary)
MESSAGE = "preparing the word table for search (once; under a minute)"
_CHUNK = 512  # words encoded per progress record

Encode = Callable[[list[str]], np.ndarray]  # texts -> MiniLM sentence embeddings (n, D)


def table_path(root: Path) -> Path:
    """Where the word table of the asset set ``root`` lives."""
    return root / "zeroshot" / TABLE


def minilm_fingerprint(root: Path) -> str:
    """The MiniLM of ``root`` (graph and tokenizer) the table's vectors belong to."""
    folder = root / "minilm"
    return f"{content_hash(folder / 'model.onnx')}-{content_hash(folder / 'tokenizer.json')}"


def common_words(root: Path, n: int = VOCABULARY) -> list[str]:
    """The table's words: the content words among GloVe's ``n`` most frequent words (its vocabulary is ordered by
    frequency), then those of the shipped starter's training captions that are not among them. Wikipedia's
    frequencies miss everyday visual words ("frisbee", "leash", "puddle": 59 of 200 Flickr8k dev captions had a
    word outside GloVe's 20,000 alone, 7 with the captions' words added)."""
    words = (root / "glove" / "vocab.txt").read_text(encoding="utf-8").split("\n")[:n]
    starter = paths.shipped_starter_dir()
    captions = read_caption_words(starter) if starter.is_dir() else None
    words += sorted(captions[0]) if captions is not None else []
    return list(dict.fromkeys(w for w in words if content_words(w) == [w]))


def build_table(root: Path, encode: Encode, words: list[str] | None = None,
                cancel: CancelToken | None = None) -> Iterator[Progress]:
    """Encode ``words`` (default :func:`common_words`) one sentence each and write the table atomically into
    ``root``, yielding progress; a cancelled build writes nothing."""
    vocabulary = list(dict.fromkeys(common_words(root) if words is None else words))
    parts = []
    for lo in range(0, len(vocabulary), _CHUNK):
        if cancel is not None:
            cancel.raise_if_cancelled()
        yield Progress(lo, len(vocabulary), MESSAGE)
        parts.append(np.asarray(encode(vocabulary[lo:lo + _CHUNK]), np.float32))
    vectors = np.concatenate(parts) if parts else np.zeros((0, 0), np.float32)
    buffer = io.BytesIO()
    np.savez(buffer, words=np.array(vocabulary, dtype=str), vectors=vectors,
             minilm=np.array(minilm_fingerprint(root)))
    atomic_write_bytes(table_path(root), buffer.getvalue())
    yield Progress(len(vocabulary), len(vocabulary), MESSAGE)


def own_assets() -> Path | None:
    """The app's own assets folder, where the table is built when missing (the first indexing, the CLI's first
    use); None when ``POLYSEEK_HOME`` or ``POLYSEEK_ASSETS`` names a folder (tests, benchmarks and shared sets are
    used as they are: ``polyseek prepare`` or :func:`ensure_table` builds theirs)."""
    if os.environ.get("POLYSEEK_ASSETS") or os.environ.get("POLYSEEK_HOME"):
        return None
    return paths.assets_dir()


def ensure_table(root: Path, encode: Encode | None = None, cancel: CancelToken | None = None) -> Iterator[Progress]:
    """:func:`build_table` when ``root`` has no table yet (``encode`` default: the stock MiniLM of ``root``)."""
    if table_path(root).is_file():
        return
    if encode is None:
        minilm = MiniLMEncoder(root)
        encode = lambda words: minilm.encode(words).sentence  # noqa: E731
    yield from build_table(root, encode, cancel=cancel)


class WordEmbeddings:
    """The MiniLM sentence embeddings of single words: from the asset set's table where it has them, else
    encoded with ``encode`` (one call for a query's new words) and kept for the session. Thread-safe."""

    def __init__(self, encode: Encode, root: Path | None) -> None:
        """``root``: the asset set whose table is read (on first use; None: no table)."""
        self._encode, self._root = encode, root
        self._lock = threading.Lock()
        self._loaded = False
        self._rows: dict[str, int] = {}
        self._vectors = np.zeros((0, 0), np.float32)
        self._session: dict[str, np.ndarray] = {}

    @property
    def table_size(self) -> int:
        """Words in the table (0: none, or one made with another MiniLM)."""
        self._load()
        return len(self._rows)

    def embed(self, words: list[str], dim: int) -> np.ndarray:
        """Embeddings (W, ``dim``) of ``words`` in order (repeats allowed)."""
        if not words:
            return np.zeros((0, dim), np.float32)
        self._load()
        todo = [w for w in dict.fromkeys(words) if w not in self._rows and w not in self._session]
        encoded = np.asarray(self._encode(todo), np.float32) if todo else None
        with self._lock:
            if todo:
                if len(self._session) > SESSION_LIMIT:
                    self._session.clear()
                self._session.update(zip(todo, encoded, strict=True))
            found = {w: self._session.get(w) for w in dict.fromkeys(words) if w not in self._rows}
        missing = [w for w, v in found.items() if v is None]  # cleared by another thread meanwhile (rare)
        if missing:
            found.update(zip(missing, np.asarray(self._encode(missing), np.float32), strict=True))
        out = np.empty((len(words), dim), np.float32)
        for i, w in enumerate(words):
            row = self._rows.get(w)
            out[i] = self._vectors[row] if row is not None else found[w]
        return out

    def _load(self) -> None:
        if self._loaded:
            return
        with self._lock:
            if self._loaded:
                return
            self._loaded = True
            path = table_path(self._root) if self._root is not None else None
            if path is None or not path.is_file():
                return
            try:
                with np.load(path) as table:
                    if str(table["minilm"]) != minilm_fingerprint(self._root):
                        log.info("word table %s belongs to another MiniLM: not used", path)
                        return
                    words, vectors = table["words"].tolist(), table["vectors"].astype(np.float32)
            except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as error:
                # damaged: the words are encoded as before
                log.warning("word table %s unreadable (%s): not used", path, error)
                return
            self._vectors = vectors
            self._rows = {w: i for i, w in enumerate(words)}
