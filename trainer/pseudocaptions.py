"""Pseudo captions of A3VSE's un-annotated items (its sparse corpus D^u, §3.2): where their text comes from.

- ``regions``: the regional semantics of §3.2, each item's top ImageNet classes as phrases
  (:func:`engine.features.regional.pseudo_caption_from_record`), what the paper's detector of attributes and
  classes stands in for here.
- ``colours``: the regional semantics as indexing writes them, each phrase with its region's colour ("black wok,
  green cabbage"), A3VSE's attribute + class per region; the pixels are decoded again for them (the feature store
  keeps the classes, not the colours), once per photo: :func:`regional_captions` caches them by content.
- ``neighbours``: a caption carried over from the annotated items that look most alike (caption transfer, Devlin
  et al. 2015, "Exploring nearest neighbor approaches for image captioning"): the ``NEIGHBOURS`` annotated items
  nearest an un-annotated one in the backbone's pooled features (centred on the training items' mean, cosine) put
  their captions forward, and the one kept is the consensus caption: the candidate whose MiniLM sentence vector is
  closest to the candidates', each weighted by its item's likeness.

``regions`` is the default: on Flickr8k at 10 % annotations ``colours`` measured no better and ``neighbours`` worse
(docs/benchmarks.md, "A3VSE's sparse corpus").
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

import numpy as np

PseudoSource = Literal["regions", "colours", "neighbours"]
PSEUDO_SOURCES: tuple[str, ...] = ("regions", "colours", "neighbours")
NEIGHBOURS = 5  # annotated look-alikes whose captions are candidates
_BLOCK = 4096  # un-annotated items per block of similarities


def nearest_annotated(annotated: np.ndarray, unannotated: np.ndarray, k: int = NEIGHBOURS
                      ) -> tuple[np.ndarray, np.ndarray]:
    """``(items (U, k), likeness (U, k))``: each un-annotated item's ``k`` nearest annotated items, nearest first,
    by the cosine of pooled features centred on the mean of both sets."""
    annotated = np.asarray(annotated, np.float32)
    unannotated = np.asarray(unannotated, np.float32)
    # here, not at the top: the vector index's package loads FAISS, which a trainer run needs only for this source
    from engine.search.vectorindex.scoring import normalise

    if not len(annotated) or not len(unannotated):
        raise ValueError("nearest_annotated: needs annotated and un-annotated items")
    centre = np.concatenate([annotated, unannotated]).mean(0)
    a, k = normalise(annotated - centre), min(k, len(annotated))
    items = np.empty((len(unannotated), k), np.int64)
    likeness = np.empty((len(unannotated), k), np.float32)
    for start in range(0, len(unannotated), _BLOCK):
        sims = normalise(unannotated[start:start + _BLOCK] - centre) @ a.T
        top = np.argpartition(-sims, k - 1, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(sims, top, 1), axis=1)
        items[start:start + len(sims)] = np.take_along_axis(top, order, 1)
        likeness[start:start + len(sims)] = np.take_along_axis(sims, items[start:start + len(sims)], 1)
    return items, likeness


def consensus_captions(neighbours: np.ndarray, likeness: np.ndarray, caption_item: np.ndarray,
                       sentences: np.ndarray) -> np.ndarray:
    """For each row of ``neighbours`` (U, k) annotated items: the index of the caption (into ``caption_item``
    and ``sentences`` (C, S), unit MiniLM vectors) among those items' captions with the highest consensus: the
    sum over the candidates, itself included, of its cosine to them, each weighted by its item's likeness
    (clipped at 0): the caption where the look-alikes' captions are densest, a near look-alike's counting most."""
    by_item: dict[int, list[int]] = {}
    for caption, item in enumerate(np.asarray(caption_item).tolist()):
        by_item.setdefault(item, []).append(caption)
    chosen = np.empty(len(neighbours), np.int64)
    for row, (items, weights) in enumerate(zip(neighbours.tolist(), likeness.tolist(), strict=True)):
        candidates = [c for item in items for c in by_item.get(item, [])]
        if not candidates:
            raise ValueError(f"consensus_captions: annotated items {items} have no captions")
        weight = np.array([max(w, 0.0) + 1e-6 for item, w in zip(items, weights, strict=True)
                           for _ in by_item.get(item, [])], np.float32)  # each candidate, its item's likeness
        vectors = sentences[candidates]
        chosen[row] = candidates[int(np.argmax((vectors @ vectors.T) @ weight))]
    return chosen


def regional_captions(paths: Sequence[Path], hashes: Sequence[str], extract: Callable[[list[Path]], list],
                      cache: Path, batch: int = 256) -> list[str | None]:
    """The full regional semantics' caption of each file (``extract``: an extractor's ``extract``; a file it
    cannot decode gets None), read from and added to the JSON ``cache`` (content hash -> caption)."""
    known: dict[str, str] = json.loads(cache.read_text(encoding="utf-8")) if cache.is_file() else {}
    todo = [i for i, h in enumerate(hashes) if h not in known]
    for start in range(0, len(todo), batch):
        part = todo[start:start + batch]
        for i, result in zip(part, extract([paths[i] for i in part]), strict=True):
            semantics = getattr(result, "semantics", None)
            if semantics is not None and semantics.caption:
                known[hashes[i]] = semantics.caption
    if todo:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_name(cache.name + ".tmp")
        tmp.write_text(json.dumps(known), encoding="utf-8")
        os.replace(tmp, cache)
    return [known.get(h) for h in hashes]
