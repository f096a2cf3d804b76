"""The words a model learnt from: how often each content word occurs in the captions it trained on.

A trained model writes ``caption_words.json`` beside its weights (the trainer: the captions of its training pairs,
plus the counts of the model it warm-started from). The search reads it to tell a word the user wrote on items
that the model already knows ("dog", "girl": thousands of training captions) from one that is the user's own
("Biscuit", a dog's name: none or a handful), :func:`novelty`. Counts of words are all the file holds, never a
caption.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from engine.features.regional import content_words
from engine.files import atomic_write_text

CAPTION_WORDS_FILE = "caption_words.json"
FAMILIAR = 30.0  # training captions with a word at which its novelty is one half


def count_caption_words(captions: Iterable[str]) -> Counter[str]:
    """In how many of ``captions`` each content word occurs (:func:`engine.features.regional.content_words`)."""
    counts: Counter[str] = Counter()
    for caption in captions:
        counts.update(set(content_words(caption)))
    return counts


def write_caption_words(folder: Path, counts: Counter[str] | dict[str, int], captions: int) -> Path:
    """Write the counts (most frequent first) and the number of captions they came from, atomically."""
    ordered = dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    path = Path(folder) / CAPTION_WORDS_FILE
    atomic_write_text(path, json.dumps({"captions": int(captions), "words": ordered}, ensure_ascii=False) + "\n")
    return path


def read_caption_words(folder: Path) -> tuple[dict[str, int], int] | None:
    """``(counts, captions)`` of a model folder, or None when the model carries none (or the file is unreadable)."""
    try:
        data = json.loads((Path(folder) / CAPTION_WORDS_FILE).read_text(encoding="utf-8"))
        return {str(w): int(n) for w, n in data["words"].items()}, int(data["captions"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def novelty(count: int) -> float:
    """How new a word is to a model that saw it in ``count`` training captions: 1 for a word it never saw, one half
    at :data:`FAMILIAR` captions, near 0 for the words of everyday captions (hundreds to thousands)."""
    return 1.0 / (1.0 + max(0, int(count)) / FAMILIAR)
