"""Feature-backed training data: a caption folder's split becomes cached backbone and text features.

Nothing here runs a network on pixels twice. Media features come from the shared feature store
(:mod:`engine.features.featurestore`, keyed by content hash and backbone), filled on demand by
:func:`engine.features.extract.ensure_features`; photos give ``global`` (C,) and ``local`` (R, C), GIFs and videos
``global`` and ``frames`` (T, C). Caption features come from the configured text encoder (MiniLM token
vectors and sentence vector, or GloVe token vectors) and are cached per caption under
``engine.paths.cache_dir()/text`` (:mod:`trainer.textcache`), so a changed caption list (a sparse subset, one
caption added to a library before a retrain, another split) encodes only the captions never seen before.


Features stay float16 in memory (a Flickr8k train split's local features are ~750 MB that way) and become
float32 tensors one batch at a time (:meth:`VisualFeatures.batch`, :meth:`TextFeatures.batch`). Token
vectors are kept ragged (one flat array plus offsets) and padded per batch.

A folder may mix photos and clips; a batch never does (photos and clips have different encoders), so
:class:`PairSet` records which items are clips and the trainer groups its batches by kind.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from engine import paths
from engine.features.backbone import require_assets
from engine.features.encoders import Encoders
from engine.features.extract import Extracted, ensure_features
from engine.features.featurestore import FeatureStore
from engine.features.regional import pseudo_caption_from_record
from engine.features.text import GloveEncoder
from engine.files import content_hash
from engine.library.captionfolder import Item
from engine.progress import Progress
from trainer.methods import ImageInput, RetrievalModel, TextInput, VideoInput
from trainer.pseudocaptions import regional_captions
from trainer.textcache import SENTENCE_DIM, CachedCaption, caption_key, open_text_cache, read_cached, write_cached

log = logging.getLogger(__name__)

ProgressFn = Callable[[Progress], None]
TEXT_CHUNK = 256  # captions per MiniLM call: bounds the padded (chunk, L, 384) float32 block
STORE_CHUNK = 256  # items read from the feature store at once


class DataError(RuntimeError):
    """A caption folder cannot give training or evaluation data; the message names the folder or split."""


# ------------------------------------------------------------------------------------------ features


@dataclass(frozen=True)
class FeatureNeeds:
    """Which cached features a model reads: photo ``local`` features, caption ``tokens`` and/or ``sentence``
    vectors from ``text_encoder`` ('glove' or 'minilm'), and at most ``max_frames`` frames per clip;
    ``clips_as_stills``: a clip is read as a photo of its mean frame (the config's ``clip_input``)."""

    local: bool
    tokens: bool
    sentence: bool
    text_encoder: str
    max_frames: int
    clips_as_stills: bool = False

    @classmethod
    def of(cls, model: RetrievalModel) -> FeatureNeeds:
        """What ``model``'s encoders read (its ``image_inputs`` / ``text_inputs``)."""
        config = model.config
        return cls(local="local" in model.image_inputs, tokens="tokens" in model.text_inputs,
                   sentence="sentence" in model.text_inputs,
                   text_encoder="glove" if config.text_encoder == "glove" else "minilm",
                   max_frames=config.max_frames, clips_as_stills=config.clip_input == "stills")


def feature_dims(assets: Path | None = None) -> dict[str, int]:
    """The sizes the cached features have (backbone dim and regions, MiniLM sentence size), as config fields."""
    meta = json.loads((require_assets(assets) / "backbone" / "backbone.json").read_text())
    rows, cols = meta.get("local_grid", (7, 7))
    return {"image_dim": int(meta["dim"]), "image_regions": int(rows) * int(cols), "sentence_dim": 384}


def backbone_id(assets: Path | None = None) -> str:
    """The id the feature store files this backbone's features under (read without opening the model)."""
    return str(json.loads((require_assets(assets) / "backbone" / "backbone.json").read_text())["id"])


@dataclass
class TextFeatures:
    """Features of N captions: ``sentence`` (N, S) float32, and ragged ``tokens`` (total, W) float16 where
    caption i owns rows ``offsets[i]:offsets[i + 1]``. Either part may be None when no model reads it."""

    count: int
    width: int
    sentence: np.ndarray | None = None
    tokens: np.ndarray | None = None
    offsets: np.ndarray | None = None

    def __len__(self) -> int:
        return self.count

    def batch(self, rows: Sequence[int] | np.ndarray, device: torch.device) -> TextInput:
        """A :class:`TextInput` of the captions ``rows``: tokens right-padded with a 0/1 mask.

        Without token vectors the model reads only ``sentence``; tokens are then a (B, 1, W) zero block
        so the batch still has its size and device.
        """
        rows = np.asarray(rows, dtype=np.int64)
        sentence = None if self.sentence is None else _tensor(self.sentence[rows], device)
        if self.tokens is None or self.offsets is None:
            tokens = torch.zeros(len(rows), 1, self.width, device=device)
            return TextInput(tokens, torch.ones(len(rows), 1, device=device), sentence)
        starts, stops = self.offsets[rows], self.offsets[rows + 1]
        lengths = stops - starts
        block = np.zeros((len(rows), max(1, int(lengths.max(initial=1))), self.width), np.float32)
        mask = np.zeros(block.shape[:2], np.float32)
        for i, (start, stop) in enumerate(zip(starts, stops, strict=True)):
            block[i, : stop - start] = self.tokens[start:stop]
            mask[i, : stop - start] = 1.0
        return TextInput(_tensor(block, device), _tensor(mask, device), sentence)


@dataclass
class VisualFeatures:
    """Features of N media items. ``pooled`` (N, C) is there for every item; photos have ``local`` and
    clips ``frames`` in compact arrays indexed by ``kind_row`` (row of item i among its kind)."""

    is_clip: np.ndarray  # (N,) bool
    kind_row: np.ndarray  # (N,) int64
    pooled: np.ndarray  # (N, C) float16
    local: np.ndarray | None  # (n_photos, R, C) float16, or None when no model reads it
    frames: np.ndarray  # (n_clips, T, C) float16
    frame_mask: np.ndarray  # (n_clips, T) bool, a prefix of each row
    stills: np.ndarray | None = None  # (N,) bool: GIFs/videos read as the still of their mean frame (clip_input)

    def __len__(self) -> int:
        return len(self.is_clip)

    @property
    def moving(self) -> np.ndarray:
        """(N,) bool: the items that are GIFs or videos, whichever encoder they train through."""
        return self.is_clip if self.stills is None else self.is_clip | self.stills

    def batch(self, rows: Sequence[int] | np.ndarray, device: torch.device,
              shuffle_frames: np.random.Generator | None = None) -> ImageInput | VideoInput:
        """The inputs of items ``rows``, which must all be photos or all clips.

        ``shuffle_frames`` (a generator) permutes each clip's valid frames: an ablation that removes
        temporal order while keeping the frame content.
        """
        rows = np.asarray(rows, dtype=np.int64)
        clips = self.is_clip[rows]
        if clips.any() and not clips.all():
            raise DataError("a batch mixes photos and clips; group rows by kind first")
        kind_rows = self.kind_row[rows]
        if clips.all() and len(rows):
            frames, mask = self.frames[kind_rows].astype(np.float32), self.frame_mask[kind_rows]
            if shuffle_frames is not None:
                frames = _shuffle_valid(frames, mask, shuffle_frames)
            return VideoInput(_tensor(frames, device), _tensor(mask.astype(np.float32), device))
        pooled = _tensor(self.pooled[rows], device)
        if self.local is None:  # the model reads only the pooled feature
            return ImageInput(pooled.new_zeros(len(rows), 0, pooled.shape[1]), pooled)
        return ImageInput(_tensor(self.local[kind_rows], device), pooled)


def _shuffle_valid(frames: np.ndarray, mask: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    out = frames.copy()
    for i, length in enumerate(mask.sum(1)):
        out[i, :length] = frames[i, rng.permutation(int(length))]
    return out


def _tensor(array: np.ndarray, device: torch.device) -> Tensor:
    return torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32)).to(device)


@dataclass
class PairSet:
    """Media items with their features and the captions that describe them.

    ``caption_item[c]`` is the item of caption c (the metrics' ``caption_to_media``). Items may have no
    caption (evaluation candidates only).
    """

    files: list[str]
    visual: VisualFeatures
    captions: list[str]
    caption_item: np.ndarray
    text: TextFeatures

    @property
    def n_items(self) -> int:
        return len(self.files)

    def subset(self, items: Sequence[int]) -> PairSet:
        """The given items (in that order) and their captions."""
        items = np.asarray(items, dtype=np.int64)
        new_index = np.full(self.n_items, -1, np.int64)
        new_index[items] = np.arange(len(items))
        keep = np.flatnonzero(new_index[self.caption_item] >= 0)
        return PairSet([self.files[i] for i in items], _visual_subset(self.visual, items),
                       [self.captions[c] for c in keep], new_index[self.caption_item[keep]],
                       text_subset(self.text, keep))


def _visual_subset(v: VisualFeatures, items: np.ndarray) -> VisualFeatures:
    clips = v.is_clip[items]
    photo_rows, clip_rows = v.kind_row[items[~clips]], v.kind_row[items[clips]]
    kind_row = np.zeros(len(items), np.int64)
    kind_row[~clips] = np.arange(len(photo_rows))
    kind_row[clips] = np.arange(len(clip_rows))
    return VisualFeatures(clips, kind_row, v.pooled[items], None if v.local is None else v.local[photo_rows],
                          v.frames[clip_rows], v.frame_mask[clip_rows], None if v.stills is None else v.stills[items])


def text_subset(t: TextFeatures, rows: np.ndarray) -> TextFeatures:
    sentence = None if t.sentence is None else t.sentence[rows]
    if t.tokens is None or t.offsets is None:
        return TextFeatures(len(rows), t.width, sentence)
    pieces = [t.tokens[t.offsets[r]:t.offsets[r + 1]] for r in rows]
    offsets = np.zeros(len(rows) + 1, np.int64)
    offsets[1:] = np.cumsum([len(p) for p in pieces])
    tokens = np.concatenate(pieces) if pieces else t.tokens[:0]
    return TextFeatures(len(rows), t.width, sentence, tokens, offsets)


# ------------------------------------------------------------------------------------------ sources


class FeatureSource:
    """Where features come from: the shared feature store, the pretrained encoders and the text cache.

    ``encoders`` is an :class:`engine.features.encoders.Encoders` (or a fake with the same attributes); it is only
    touched when something is missing from the store or the cache.
    """

    def __init__(self, store: FeatureStore, encoders: Any, text_cache: Path, assets: Path | None = None,
                 progress: ProgressFn | None = None) -> None:
        self.store, self.encoders, self.text_cache, self.assets = store, encoders, text_cache, assets
        self.progress = progress or (lambda _p: None)
        self._text_encoders: dict[str, Any] = {}
        self.own_minilm: tuple[Any, str] | None = None  # (encoder, id): a fine-tuned MiniLM for the stock one

    def use_minilm(self, encoder: Any, encoder_id: str) -> None:
        """Encode captions with ``encoder`` (a fine-tuned MiniLM with the stock one's outputs, e.g. the text encoder
        of the model a run warm-starts from) instead of the prepared MiniLM; cached under ``encoder_id``."""
        self.own_minilm = (encoder, encoder_id)

    @classmethod
    def open(cls, assets: Path | None = None, progress: ProgressFn | None = None) -> FeatureSource:
        """The source under ``engine.paths.home()``: the feature store every library shares."""
        home = paths.home()
        home.mkdir(parents=True, exist_ok=True)
        return cls(FeatureStore(home / "features.sqlite"), Encoders(assets), paths.cache_dir() / "text", assets,
                   progress)

    def close(self) -> None:
        self.store.close()

    # -- media ------------------------------------------------------------------------------------------
    def visual(self, items: Sequence[Item], needs: FeatureNeeds) -> tuple[VisualFeatures, list[int]]:
        """Features of ``items`` (computed where the store lacks them) and the indices of the items kept:
        a file the decoder rejects is left out, with a warning."""
        hashes = [content_hash(item.path) for item in items]
        self._ensure([item.path for item in items], hashes)
        backbone = backbone_id(self.assets)
        present = set(hashes) - set(self.store.missing(hashes, backbone))
        kept = [i for i, h in enumerate(hashes) if h in present]
        if len(kept) < len(items):
            bad = [items[i].file for i, h in enumerate(hashes) if h not in present]
            log.warning("%d files have no features (could not be decoded) and are left out, e.g. %s",
                        len(bad), bad[0])
        features = self._read_visual([hashes[i] for i in kept], [items[i] for i in kept], needs, backbone)
        return features, kept

    def _ensure(self, files: list[Path], hashes: list[str]) -> None:
        if not self.store.missing(hashes, backbone_id(self.assets)):
            return  # do not open the backbone when everything is cached
        for step in ensure_features(files, self.store, self.encoders):
            self.progress(step)

    def _read_visual(self, hashes: list[str], items: list[Item], needs: FeatureNeeds,
                     backbone: str) -> VisualFeatures:
        fields = ["global", "frames"] + (["local"] if needs.local else [])
        pooled: list[np.ndarray] = []
        local: list[np.ndarray] = []
        frames: list[np.ndarray] = []
        is_clip = np.zeros(len(hashes), bool)
        stills = np.zeros(len(hashes), bool)
        regions = feature_dims(self.assets)["image_regions"] if needs.clips_as_stills and needs.local else 0
        missing_local: list[int] = []
        for start in range(0, len(hashes), STORE_CHUNK):
            chunk = hashes[start:start + STORE_CHUNK]
            records = self.store.get_many(chunk, backbone, fields)
            for offset, h in enumerate(chunk):
                record = records[h]
                pooled.append(record.global_)
                if record.frames is not None and needs.clips_as_stills:  # its mean frame stands in for regions
                    stills[start + offset] = True
                    if needs.local:
                        local.append(np.repeat(record.global_[None], regions, 0).astype(np.float16))
                elif record.frames is not None:
                    is_clip[start + offset] = True
                    frames.append(_even_frames(record.frames, needs.max_frames))
                elif needs.local:
                    if record.local is None:  # past the store's local-feature cap: recompute below
                        missing_local.append(len(local))
                    local.append(record.local)
        if missing_local:
            photos = [item for item, clip in zip(items, is_clip, strict=True) if not clip]
            self._recompute_local(local, missing_local, [photos[i] for i in missing_local])
        visual = _assemble_visual(is_clip, pooled, local if needs.local else None, frames, needs.max_frames)
        return dataclasses.replace(visual, stills=stills) if stills.any() else visual

    def _recompute_local(self, local: list[np.ndarray], where: list[int], items: list[Item]) -> None:
        """Local features the store dropped past its cap are recomputed, not stored (module docstring of
        :mod:`engine.features.featurestore`)."""
        results = self.encoders.extractor().extract([item.path for item in items])
        for position, item, result in zip(where, items, results, strict=True):
            if not isinstance(result, Extracted) or result.record.local is None:
                raise DataError(f"{item.path}: local features could not be recomputed")
            local[position] = result.record.local.astype(np.float16)

    def pseudo_captions(self, items: Sequence[Item], colours: bool = False) -> list[str]:
        """Regional-semantics pseudo captions (A3VSE §3.2) of items already in the store, rebuilt from their
        stored top ImageNet classes (:func:`engine.features.regional.pseudo_caption_from_record`); ``colours``:
        with each region's colour, decoded again (:func:`trainer.pseudocaptions.regional_captions`)."""
        hashes = [content_hash(item.path) for item in items]
        records = self.store.get_many(hashes, backbone_id(self.assets), ("image_top_ids",))
        names = self.encoders.class_names
        full = (regional_captions([item.path for item in items], hashes, self.encoders.extractor().extract,
                                  self.text_cache.parent / "pseudo" / f"{backbone_id(self.assets)}.json")
                if colours else [None] * len(items))
        return [f or pseudo_caption_from_record(records[h], names) or "a picture" for f, h in zip(full, hashes,
                                                                                                strict=True)]

    # -- text -------------------------------------------------------------------------------------------
    def text(self, captions: Sequence[str], needs: FeatureNeeds) -> TextFeatures:
        """Token and/or sentence features of ``captions``: read per caption from the text cache, and only the
        captions it lacks encoded (then cached).

        The result equals :func:`_encode_text` of the whole list (same arrays, same order) for an encoder whose
        output for a caption does not depend on the other captions of its batch. Token vectors are read only
        when ``needs.tokens`` asks for them and sentence vectors only when ``needs.sentence`` does.
        """
        width = 50 if needs.text_encoder == "glove" else 384
        if not (needs.tokens or needs.sentence):
            return TextFeatures(len(captions), width)
        if needs.text_encoder == "glove" and needs.sentence:
            raise DataError("text_encoder: GloVe has no sentence vector; use 'minilm-sentence'")
        own = self.own_minilm if needs.text_encoder == "minilm" else None
        fingerprint = f"minilm:{own[1]}" if own else _encoder_fingerprint(needs.text_encoder, self.assets)
        keys = [caption_key(text) for text in captions]
        unique = dict(zip(keys, captions, strict=True))  # one entry per distinct caption, first occurrence
        cache = open_text_cache(self.text_cache, needs.text_encoder, fingerprint, width)
        try:
            found, cache = read_cached(cache, list(unique), needs.tokens, needs.sentence)
            missing = [key for key in unique if key not in found]
            if missing:
                encoder = own[0] if own else self._text_encoder(needs.text_encoder)
                for chunk in _encode_chunks(encoder, [unique[key] for key in missing], self.progress):
                    rows = [CachedCaption(missing[i], tokens, sentence) for i, tokens, sentence in chunk]
                    cache = write_cached(cache, rows)  # each chunk is its own transaction: a crash keeps the rest
                    found.update((row.key, _trim(row, needs)) for row in rows)
        finally:
            if cache is not None:
                cache.close()
        return _assemble_text([found[key] for key in keys], width, needs)

    def _text_encoder(self, name: str) -> Any:
        if name not in self._text_encoders:
            if name == "minilm":
                self._text_encoders[name] = self.encoders.minilm
            else:
                self._text_encoders[name] = GloveEncoder(self.assets)
        return self._text_encoders[name]

    # -- pairs ------------------------------------------------------------------------------------------
    def pairs(self, items_with_captions: Sequence[tuple[Item, Sequence[str]]], needs: FeatureNeeds) -> PairSet:
        """A :class:`PairSet` of items and their captions (items the decoder rejects are dropped)."""
        items = [item for item, _ in items_with_captions]
        visual, kept = self.visual(items, needs)
        captions, caption_item = [], []
        for row, index in enumerate(kept):
            for text in items_with_captions[index][1]:
                captions.append(text)
                caption_item.append(row)
        return PairSet([items[i].file for i in kept], visual, captions, np.asarray(caption_item, np.int64),
                       self.text(captions, needs))


def _even_frames(frames: np.ndarray, limit: int) -> np.ndarray:
    """At most ``limit`` frames evenly spread over the clip (PVSE §3.5's inference sampling)."""
    if len(frames) <= limit:
        return frames
    return frames[np.linspace(0, len(frames) - 1, limit).round().astype(np.int64)]


def _assemble_visual(is_clip: np.ndarray, pooled: list[np.ndarray], local: list[np.ndarray] | None,
                     frames: list[np.ndarray], max_frames: int) -> VisualFeatures:
    dim = pooled[0].shape[-1] if pooled else 0
    kind_row = np.zeros(len(is_clip), np.int64)
    kind_row[is_clip] = np.arange(int(is_clip.sum()))
    kind_row[~is_clip] = np.arange(int((~is_clip).sum()))
    length = max([len(f) for f in frames], default=1)
    frame_block = np.zeros((len(frames), min(length, max_frames), dim), np.float16)
    frame_mask = np.zeros(frame_block.shape[:2], bool)
    for i, clip in enumerate(frames):
        frame_block[i, : len(clip)] = clip
        frame_mask[i, : len(clip)] = True
    local_block = np.stack(local).astype(np.float16) if local else None
    if local is not None and local_block is None:
        local_block = np.zeros((0, 1, dim), np.float16)
    pooled_block = np.stack(pooled).astype(np.float16) if pooled else np.zeros((0, dim), np.float16)
    return VisualFeatures(is_clip, kind_row, pooled_block, local_block, frame_block, frame_mask)


def _encoder_fingerprint(name: str, assets: Path | None) -> str:
    """Size and modification time of the encoder's weights: a re-prepared encoder invalidates the cache."""
    root = require_assets(assets)
    weights = root / ("glove/vectors.npy" if name == "glove" else "minilm/model.onnx")
    stat = weights.stat()
    return f"{name}:{stat.st_size}:{stat.st_mtime_ns}"


def _encode_chunks(encoder: Any, captions: list[str],
                   progress: ProgressFn) -> Iterator[list[tuple[int, np.ndarray, np.ndarray | None]]]:
    """Encode ``captions`` in chunks of similar lengths (less padding); each chunk is a list of
    ``(caption index, tokens (n, W) float16, sentence (S,) float32 or None)``."""
    order = sorted(range(len(captions)), key=lambda i: len(captions[i]))
    for start in range(0, len(order), TEXT_CHUNK):
        rows = order[start:start + TEXT_CHUNK]
        encoded = encoder.encode([captions[i] for i in rows])
        sentence = None if encoded.sentence is None else np.asarray(encoded.sentence, np.float32)
        yield [(i, encoded.vectors[j, encoded.mask[j]].astype(np.float16), None if sentence is None else sentence[j])
               for j, i in enumerate(rows)]
        progress(Progress(min(len(order), start + TEXT_CHUNK), len(order), "encoding captions"))


def _encode_text(encoder: Any, captions: list[str], width: int, progress: ProgressFn) -> TextFeatures:
    """Token vectors (and MiniLM's sentence vectors) of every caption, encoded from scratch, in caption order:
    the reference :meth:`FeatureSource.text` reproduces from its cache."""
    parts: list[CachedCaption] = [CachedCaption(b"", np.zeros((0, width), np.float16), None)] * len(captions)
    for chunk in _encode_chunks(encoder, captions, progress):
        for i, tokens, sentence in chunk:
            parts[i] = CachedCaption(b"", tokens, sentence)
    has_sentence = bool(parts) and parts[0].sentence is not None
    return _assemble_text(parts, width, FeatureNeeds(False, True, has_sentence, "", 0))


def _trim(row: CachedCaption, needs: FeatureNeeds) -> CachedCaption:
    """``row`` without the parts ``needs`` does not read (so freshly encoded parts are not kept twice)."""
    return CachedCaption(row.key, row.tokens if needs.tokens else None, row.sentence if needs.sentence else None)


def _assemble_text(rows: Sequence[CachedCaption], width: int, needs: FeatureNeeds) -> TextFeatures:
    """Ragged tokens (offsets in caption order) and/or stacked sentence vectors of ``rows``."""
    tokens = offsets = sentence = None
    if needs.tokens:
        pieces = [_part(row.tokens, "token vectors") for row in rows]
        offsets = np.zeros(len(rows) + 1, np.int64)
        offsets[1:] = np.cumsum([len(piece) for piece in pieces])
        tokens = np.concatenate(pieces) if pieces else np.zeros((0, width), np.float16)
    if needs.sentence:
        vectors = [_part(row.sentence, "a sentence vector") for row in rows]
        sentence = np.stack(vectors) if vectors else np.zeros((0, SENTENCE_DIM), np.float32)
    return TextFeatures(len(rows), width, sentence, tokens, offsets)


def _part(array: np.ndarray | None, what: str) -> np.ndarray:
    if array is None:  # the text encoder gave no such output (GloVe has no sentence vector)
        raise DataError(f"the text encoder gave no {what} for a caption")
    return array
