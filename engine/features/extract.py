"""From media files to cached backbone features and regional semantics.

One :class:`FeatureExtractor` decodes a batch of files, runs EfficientNet-Lite0 (ONNX Runtime) and turns its
outputs into a :class:`FeatureRecord` for the feature store plus the item's regional semantics
(:mod:`engine.features.regional`); decoding and that finishing run in a small thread pool, overlapping the backbone.
Still images keep their 49 local features; animations and videos keep the pooled features of
``FRAMES_PER_ITEM`` frames sampled uniformly (PVSE §3.5) and their mean as the global feature.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.features.backbone import Backbone, class_names
from engine.features.featurestore import FeatureRecord, FeatureStore
from engine.features.regional import Semantics, regional_semantics
from engine.files import content_hash
from engine.media import FRAMES_PER_ITEM, MediaError, MediaInfo, probe_and_decode
from engine.progress import Progress
from engine.types import MediaKind

log = logging.getLogger(__name__)

# Frames the backbone takes at once while the rest of a batch is still decoding (one GIF's or video's frames,
# or eight photos).
STREAM_FRAMES = 8


@dataclass(frozen=True, slots=True)
class Decoded:
    """A decoded file: its probe and its frames (1 for a still image) at the backbone's size."""

    path: Path
    info: MediaInfo
    frames: np.ndarray  # (F, S, S, 3) uint8


@dataclass(frozen=True, slots=True)
class Extracted:
    """Everything indexing stores for one file."""

    path: Path
    info: MediaInfo
    record: FeatureRecord
    semantics: Semantics


def default_decode_threads() -> int:
    """Decode threads beside the backbone: half the cores, at least 2.

    The backbone's intra-op threads use every core; a 12 MP JPEG's entropy decoding costs about as much CPU as
    the backbone's work for it, so half the cores keep both stages fed on a large machine, and 2 threads overlap
    the two stages on a small one (decoding one file is single-threaded).
    """
    return max(2, (os.cpu_count() or 2) // 2)


def decode_for_backbone(path: Path, size: int, n_frames: int = FRAMES_PER_ITEM) -> Decoded:
    """Probe and decode one file for the backbone (one pass over the file); raises MediaError."""
    info, frames = probe_and_decode(path, n_frames, size)
    return Decoded(path, info, frames)


class FeatureExtractor:
    """Backbone features and regional semantics for media files."""

    def __init__(self, backbone: Backbone, names: list[str] | None = None, decode_threads: int | None = None) -> None:
        self.backbone = backbone
        self.names = names or class_names()
        self._pool = ThreadPoolExecutor(max_workers=decode_threads or default_decode_threads(),
                                        thread_name_prefix="decode")

    @property
    def backbone_id(self) -> str:
        return self.backbone.id

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def decode_async(self, paths: Sequence[Path]) -> list[Future]:
        size = self.backbone.image_size
        return [self._pool.submit(decode_for_backbone, p, size) for p in paths]

    def extract(self, paths: Sequence[Path]) -> list[Extracted | MediaError]:
        """Extract one batch; a file that cannot be decoded comes back as its MediaError."""
        return self.run(self.decode_async(paths))

    def iter_batches(self, batches: Sequence[Sequence[Path]]) -> Iterator[list[Extracted | MediaError]]:
        """Extract batch after batch, in order.

        Three stages overlap: while the backbone runs on batch i, the pool decodes batch i+1 and finishes
        batch i-1 (regional semantics and feature records). The backbone, the one stage that uses every core,
        so runs back to back instead of waiting for Python work between its calls; the price is that a batch's
        results come back after the backbone has also run on the next one.
        """
        decoding = self.decode_async(batches[0]) if batches else []
        finishing: list[Future | MediaError] | None = None
        for i in range(len(batches)):
            current = decoding
            decoding = self.decode_async(batches[i + 1]) if i + 1 < len(batches) else []
            started = self._start(current)
            if finishing is not None:
                yield _collect(finishing)
            finishing = started
        if finishing is not None:
            yield _collect(finishing)

    def run(self, futures: Sequence[Future]) -> list[Extracted | MediaError]:
        """The results of decodes started by :meth:`decode_async`, in their order; a failed decode comes back
        as its MediaError."""
        return _collect(self._start(futures))

    def _start(self, futures: Sequence[Future]) -> list[Future | MediaError]:
        """Run the backbone on the decodes as they complete and hand their finishing to the pool: per file a
        future of its Extracted, or its MediaError.

        The backbone takes the decoded frames a few files at a time (:data:`STREAM_FRAMES`) instead of waiting
        for the whole batch, so decoding the rest of the batch overlaps it: with 12 MP photos, whose decoding
        costs more than the backbone, one batch was otherwise decoded with the backbone idle, then run with
        the decoders idle.
        """
        out: list[Future | MediaError | None] = [None] * len(futures)
        chunk: list[tuple[int, Decoded]] = []
        frames = 0
        for i, future in enumerate(futures):
            decoded = _decoded(future)
            if isinstance(decoded, MediaError):
                out[i] = decoded
                continue
            chunk.append((i, decoded))
            frames += len(decoded.frames)
            if frames >= STREAM_FRAMES:
                self._run_chunk(chunk, out)
                chunk, frames = [], 0
        if chunk:
            self._run_chunk(chunk, out)
        return out  # type: ignore[return-value] - every place is filled

    def _run_chunk(self, chunk: list[tuple[int, Decoded]], out: list[Future | MediaError | None]) -> None:
        """Run the backbone on the decoded files of ``chunk`` and put their finishing futures in their places."""
        result = self.backbone(np.concatenate([d.frames for _, d in chunk]))
        start = 0
        for i, d in chunk:
            stop = start + len(d.frames)
            out[i] = self._pool.submit(self._finish, d, result, slice(start, stop))
            start = stop

    def _finish(self, d: Decoded, out, rows: slice) -> Extracted:
        semantics = regional_semantics(out.probs[rows], out.region_max[rows], out.region_best[rows], d.frames,
                                       self.names)
        region_ids = out.region_top_ids[rows].reshape(-1, out.region_top_ids.shape[-1]).astype(np.int16)
        region_top = out.region_top_probs[rows].reshape(-1, out.region_top_probs.shape[-1]).astype(np.float16)
        record = FeatureRecord(
            global_=out.pooled[rows].mean(axis=0),
            local=out.local[rows][0] if d.info.kind is MediaKind.IMAGE else None,
            frames=None if d.info.kind is MediaKind.IMAGE else out.pooled[rows],
            region_top_ids=region_ids,
            region_top_probs=region_top,
            image_top_ids=semantics.class_ids,
            image_top_probs=semantics.class_probs,
        )
        return Extracted(d.path, d.info, record, semantics)


def _decoded(future: Future) -> Decoded | MediaError:
    """A decode's result, or the file's MediaError (a decoder bug is reported as the file's error)."""
    try:
        return future.result()
    except MediaError as error:
        return error
    except Exception as error:  # a decoder bug must not stop indexing; report it as the file's error
        log.exception("unexpected error decoding a file")
        return MediaError(f"could not decode: {type(error).__name__}: {error}")


def _collect(items: Sequence[Future | MediaError]) -> list[Extracted | MediaError]:
    """Wait for the finishing futures among ``items``; an error in finishing (a bug) propagates."""
    return [item.result() if isinstance(item, Future) else item for item in items]


def ensure_features(paths_: list[Path], store: FeatureStore, encoders, batch: int = 32) -> Iterator[Progress]:
    """Put every file's features into the store (skipping what is there); yields progress."""
    hashes = [content_hash(p) for p in paths_]
    backbone = encoders.backbone.id
    todo = set(store.missing(hashes, backbone))
    work = [(p, h) for p, h in zip(paths_, hashes, strict=True) if h in todo]
    extractor = encoders.extractor()
    batches = [work[i:i + batch] for i in range(0, len(work), batch)]
    done = 0
    for chunk, results in zip(batches, extractor.iter_batches([[p for p, _ in b] for b in batches]), strict=False):
        store.put_many(((h, r.record) for (_, h), r in zip(chunk, results, strict=True) if isinstance(r, Extracted)),
                       backbone)
        done += len(chunk)
        yield Progress(done, len(work), f"features for {done} of {len(work)} files")
