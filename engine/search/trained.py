"""Search with a trained model (ONNX export of the trainer): item embeddings, the vector index, explanations.

The active model's encoders turn the cached backbone features into K embeddings per item (PVSE) or a Gaussian
(PCME); they are kept in the catalog (one set per model, never mixed) and in a multi-vector index saved under
``<library>/index/<model>/``, rebuilt whenever the model version differs. Ranking:

- K x K max-cosine of unit embeddings (PVSE §3.4 inference; K = 1 is VSE++);
- PCME: candidates by the cosine of the means, re-ranked by the Monte-Carlo match probability (PCME eq. 2) with
  the model's own a, b and J; ``min_probability`` drops results the model does not believe in, so a query with
  no good answer returns nothing instead of a padded list. A query none of whose content words the model's text
  encoder knows carries no evidence (:meth:`TrainedSearch.carries_evidence`): under a cutoff it returns nothing,
  whatever probability the model's weights give its all-unknown input.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np

from engine.features.extract import ensure_features
from engine.features.featurestore import FeatureStore
from engine.features.text import carries_evidence
from engine.features.vocabulary import read_caption_words
from engine.library.catalog import Catalog, MediaRecord, MediaStatus, ModelRecord
from engine.progress import CancelToken, Progress
from engine.search import evidence
from engine.search.batchreads import BatchReads
from engine.search.explainmath import attention_or_none, frame_attention, heads_alike, normalise_rows, project_pair
from engine.search.modelrunner import Encoded, ModelRunner
from engine.search.pcme import model_match_probability, uncertainty, uncertainty_percentile
from engine.search.readings import calibrated_reading, query_words
from engine.search.shots import shot_labels, shot_scores
from engine.search.vectorindex import AnnParams, IndexFileError, ModelMismatchError, MultiVectorIndex, kxk_scores
from engine.trainercontract.exportformat import model_export_dir as model_export_dir  # callers import it here
from engine.trainercontract.metrics import UncertaintyCurve
from engine.trainercontract.runfolder import CheckpointError, read_metrics
from engine.types import Explanation, MediaKind

log = logging.getLogger(__name__)

BATCH = 256
SYNC_BATCH = 128  # items a batch of sync(): smaller batches keep its two threads busy for more of the run


def _encode_chain(work: list[tuple[TrainedSearch, list[MediaRecord]]], reads: BatchReads
                  ) -> list[tuple[TrainedSearch, list[int], Encoded]]:
    """Each model's encodings of its share of one batch (:meth:`TrainedSearch.sync`'s helper thread)."""
    out = []
    for model, media in work:
        if media:
            model._ensure_own_features(media)
            out.append((model, *model.encode_items(media, reads)))
    return out


class TrainedSearch:
    """One trained model applied to one library."""

    def __init__(self, record: ModelRecord, runner: ModelRunner, catalog: Catalog, features: FeatureStore,
                 encoders, index_dir: Path) -> None:
        self.record, self.runner = record, runner
        self.catalog, self.features, self.encoders = catalog, features, encoders
        self.index_dir = index_dir
        self._index: MultiVectorIndex | None = None
        self._library_uncertainties: np.ndarray | None = None
        self._frames: tuple[np.ndarray, np.ndarray] | None = None  # frame_vectors(), until the library changes
        self._shot_of = np.zeros((0, 1), np.int64)  # frame_vectors(): per clip and sampled frame, its shot
        # the words of its training captions, counted (engine.features.vocabulary); None: the model has no record
        self.caption_words: tuple[dict[str, int], int] | None = None
        # PCME: metrics.json's R@1 per uncertainty decile on the model's validation split, and that split's name
        # (read once, with the model; what the inspector reads a sigma against); None: no such record
        self._validation_curves: tuple[Mapping[str, UncertaintyCurve], str] | None = None
        # the model searched beside this one (engine.search.companion; its heads explain a K = 1 model's hits),
        # attached by LibraryState; embedded and synced with it
        self.companion: TrainedSearch | None = None

    @classmethod
    def open(cls, record: ModelRecord, catalog: Catalog, features: FeatureStore, encoders,
             library_dir: Path) -> TrainedSearch:
        folder = model_export_dir(record.path)
        runner = ModelRunner.load(folder, backbone_id=encoders.backbone.id)
        search = cls(record, runner, catalog, features, encoders.for_model(runner), library_dir / "index" / record.name)
        search.caption_words = read_caption_words(Path(record.path))
        search._validation_curves = _validation_curves(Path(record.path)) if runner.probabilistic else None
        return search

    # -- embeddings and index -----------------------------------------------------------------------------

    @property
    def index(self) -> MultiVectorIndex:
        """The library's vector index for this model, loaded (or built from the catalog) on first use: evaluating
        a model on a few hundred items (:func:`engine.loop.evaluate.evaluate_trained`) never reads it, and at
        100,000 items it is hundreds of MB."""
        if self._index is None:
            self._index = self._load_index()
        return self._index

    def _load_index(self) -> MultiVectorIndex:
        try:  # today's parameters, not the saved ones: an older structure is rebuilt by the next sync()
            return MultiVectorIndex.load(self.index_dir, model_id=self.runner.model_id, params=AnnParams())
        except (ModelMismatchError, IndexFileError, FileNotFoundError, OSError):
            log.info("no index for %s yet: built from the catalog's embeddings", self.runner.model_id)
        index = MultiVectorIndex(self.runner.embed_dim, self.runner.num_embeddings, model_id=self.runner.model_id,
                                 params=AnnParams())
        ids, vectors, _ = self.catalog.get_embeddings(self.record.id)
        if len(ids):
            index.add(ids, vectors)
        return index

    def embedded(self) -> int:
        """How many items this model (and its companion, if it has one) have both embedded."""
        count = len(self.index)
        return count if self.companion is None else min(count, self.companion.embedded())

    def sync(self, cancel: CancelToken | None = None) -> Iterator[Progress]:
        """Embed every indexed item the model and the models beside it (its companion, that one's own) have not
        embedded yet, batch by batch, each batch's features read from the store once for all of them
        (:class:`BatchReads`); drop vectors of items that are gone."""
        cancel = cancel or CancelToken()
        chain = [self, *(model for _, model in evidence.beside(self))]
        ok = {m.id: m for m in self.catalog.iter_media(MediaStatus.OK)}
        plans = [model._plan_sync(ok) for model in chain]
        todo = [m for i, m in ok.items() if any(i in wanted for wanted, _ in plans)]
        scratch: dict = {}  # float32 buffers of the batch being encoded (one batch at a time on the helper)
        # a batch is read and encoded on a helper thread while this one stores the one before (the catalog's
        # writes and the index's growth): ONNX Runtime and SQLite let go of the GIL, and the store alone left
        # a third of the two cores idle (docs/benchmarks.md, "What the companions cost at indexing")
        pending: tuple[int, Future] | None = None
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="polyseek-embed") as helper:
            for start in [*range(0, len(todo), SYNC_BATCH), None]:
                cancel.raise_if_cancelled()
                future = None
                if start is not None:
                    batch = todo[start:start + SYNC_BATCH]
                    work = [(model, [m for m in batch if m.id in wanted]) for model, (wanted, _) in zip(chain, plans,
                                                                                                       strict=True)]
                    future = helper.submit(_encode_chain, work, BatchReads(self.features, scratch))
                if pending is not None:
                    for model, ids, encoded in pending[1].result():
                        model._store(ids, encoded)
                    yield Progress(pending[0], len(todo), f"embedding with {self.record.name}")
                pending = None if future is None else (start + len(batch), future)
        for model, (wanted, stale) in zip(chain, plans, strict=True):
            model._finish_sync(bool(wanted), stale)

    def _plan_sync(self, ok: dict[int, MediaRecord]) -> tuple[set[int], bool]:
        """The ids of ``ok`` (the library's readable items) this model has to embed, and whether it had vectors of
        items that are gone (dropped here)."""
        done_ids = self.catalog.embedded_ids(self.record.id)
        stale = [i for i in done_ids if i not in ok]
        if stale:
            self.catalog.delete_embeddings(self.record.id, stale)
            self.index.remove([i for i in stale if i in self.index])
        wanted = {i for i in ok if i not in done_ids or i not in self.index}
        self.index.reserve(len(wanted))  # one growth of its arrays, not one per batch (peak memory)
        return wanted, bool(stale)

    def _store(self, ids: list[int], encoded: Encoded) -> None:
        """Items' vectors into the catalog and the index."""
        extras = {"log_sigma": encoded.log_sigma} if encoded.log_sigma is not None else None
        self.catalog.put_embeddings(self.record.id, ids, encoded.emb.astype(np.float32), extras)
        self.index.add(ids, encoded.emb)  # replaces the vectors of ids already there

    def _finish_sync(self, embedded: bool, stale: bool) -> None:
        built = (self.index.describe()["approximate"] or {}).get("kind")
        outdated = built is not None and built != self.index.params.kind
        if outdated:  # saved by an older version with another kind of approximate index
            log.info("rebuilding the %s index of %s as %s", built, self.record.name, self.index.params.kind)
            self.index.rebuild()
        if embedded or stale:
            self._library_uncertainties = None
            self._frames = None
        if embedded or stale or outdated:
            self.index.save(self.index_dir)

    def library_uncertainties(self) -> np.ndarray:
        """PCME: the uncertainty of every item this model has embedded in the library, sorted ascending (what an
        item's uncertainty is ranked against); empty for a deterministic model. Read once, until the next sync
        changes the library."""
        if not self.runner.probabilistic:
            return np.zeros(0)
        if self._library_uncertainties is None:
            _, _, extras = self.catalog.get_embeddings(self.record.id)
            log_sigma = extras.get("log_sigma")
            self._library_uncertainties = (np.sort(uncertainty(log_sigma)) if log_sigma is not None and len(log_sigma)
                                           else np.zeros(0))
        return self._library_uncertainties

    def _ensure_own_features(self, media: list[MediaRecord]) -> None:
        """A model with its own fine-tuned backbone reads features the indexer did not compute: they are
        computed here once per file (and kept in the shared store under that backbone's id)."""
        if self.runner.manifest.backbone is None:
            return

        backbone = self.encoders.backbone.id
        missing = set(self.features.missing([m.content_hash for m in media], backbone))
        todo = [Path(m.path) for m in media if m.content_hash in missing]
        if todo:
            for _ in ensure_features(todo, self.features, self.encoders):
                pass

    def encode_items(self, media: list[MediaRecord], reads: BatchReads | None = None) -> tuple[list[int], Encoded]:
        """Encodings of items from their cached features (photos and animations/videos batched apart).

        Only the fields the model's encoders read come out of the store, in one query per kind: a model that
        reads the pooled feature alone never loads a photo's 49 local features. ``reads``: what other models
        embedding the same batch read already."""
        reads = reads or BatchReads(self.features)
        backbone = self.encoders.backbone.id
        photos = [m for m in media if m.kind == MediaKind.IMAGE]
        moving = [m for m in media if m.kind != MediaKind.IMAGE]
        parts: list[tuple[list[int], Encoded]] = []
        if photos:
            wants_local = "local" in self.runner.manifest.encoders["image"].input_names
            rows, pooled, local = reads.photo_inputs([m.content_hash for m in photos], backbone, wants_local)
            if rows:
                parts.append(([photos[i].id for i in rows], self.runner.encode_image(local, pooled)))
        if moving:
            records = reads.records([m.content_hash for m in moving], backbone, ("global", "frames"))
            keep = [(m, records[m.content_hash]) for m in moving
                    if m.content_hash in records and records[m.content_hash].frames is not None]
            if keep:
                parts.append(([m.id for m, _ in keep], self._encode_clips([r for _, r in keep])))
        ids = [i for p in parts for i in p[0]]
        return ids, _concat([p[1] for p in parts])

    def _encode_clips(self, records: list) -> Encoded:
        """A clip's stored vectors: the video encoder's (PVSE §3.1) where that branch learnt from clips, otherwise
        the image encoder's of the clip's pooled feature (a branch that never saw training data of its kind is
        never used to rank: an untrained bi-GRU put every clip ~400th for its own photo's caption). Its frames
        are scored one by one besides (:meth:`frame_vectors`)."""
        if self.runner.manifest.video_trained:
            frames = np.stack([r.frames for r in records]).astype(np.float32)
            return self.runner.encode_video(frames, np.ones(frames.shape[:2], np.float32))
        pooled = np.stack([r.global_ for r in records]).astype(np.float32)
        return self._encode_pooled(pooled)

    def _encode_pooled(self, pooled: np.ndarray) -> Encoded:
        """The image encoder on pooled features alone (a clip's frames, a clip's mean): where it reads local
        features, the pooled one stands in for every region (as for a photo past the local-feature cap)."""
        wants_local = "local" in self.runner.manifest.encoders["image"].input_names
        local = np.repeat(pooled[:, None], 49, 1) if wants_local else None
        return self.runner.encode_image(local, pooled)

    def frame_vectors(self) -> tuple[np.ndarray, np.ndarray]:
        """``(ids, vectors (n, T * K, D))``: every clip of the library with each of its frames embedded by the
        image encoder (frames past a short clip's end repeat its last one and belong to no shot), so a GIF or a
        video is found by what any part of it shows: :meth:`score_ids` scores a clip by its best shot
        (:mod:`engine.search.shots`: near-identical frames together, by their mean score). Computed from the
        feature store on first use and kept until the library changes (:meth:`sync`)."""
        if self._frames is None:
            ids: list[int] = []
            blocks: list[np.ndarray] = []
            shot_of: list[np.ndarray] = []  # per clip, per sampled frame: its shot (engine.search.shots)
            clips = [m for m in self.catalog.iter_media(MediaStatus.OK) if m.kind != MediaKind.IMAGE]
            t_max, k = self.runner.manifest.max_frames, self.runner.num_embeddings
            for start in range(0, len(clips), BATCH):
                batch = clips[start:start + BATCH]
                records = self.features.get_many([m.content_hash for m in batch], self.encoders.backbone.id,
                                                  ("frames",))
                keep = [(m, records[m.content_hash].frames) for m in batch
                        if m.content_hash in records and records[m.content_hash].frames is not None]
                if not keep:
                    continue
                frames = np.stack([_even_frames(f, t_max) for _, f in keep]).astype(np.float32)  # (n, T, C)
                emb = self._encode_pooled(frames.reshape(-1, frames.shape[-1])).emb  # (n T, K, D)
                blocks.append(emb.reshape(len(keep), t_max * k, -1).astype(np.float16))
                shot_of.extend(_shot_labels(picked, len(f)) for picked, (_, f) in zip(frames, keep, strict=True))
                ids.extend(m.id for m, _ in keep)
            dim = self.runner.embed_dim
            self._shot_of = np.array(shot_of, np.int64).reshape(-1, t_max)
            self._frames = (np.array(ids, np.int64),
                            np.concatenate(blocks) if blocks else np.zeros((0, t_max * k, dim), np.float16))
        return self._frames

    # -- queries --------------------------------------------------------------------------------------------

    def encode_text(self, texts: list[str], minilm=None) -> tuple[Encoded, list[list[str]]]:
        """Encoded queries; ``minilm``: these texts' stock MiniLM encoding when the caller has it already (used only
        by a model that reads the stock MiniLM, not GloVe or a fine-tuned MiniLM of its own)."""
        kind = self.runner.manifest.text_encoder
        encoder = self.encoders.glove if kind == "glove" else self.encoders.minilm
        text = minilm if minilm is not None and kind != "glove" and self.runner.manifest.text_model is None \
            else encoder.encode(texts)
        sentence = text.sentence if kind == "minilm-sentence" else None
        encoded = self.runner.encode_text(text.vectors, text.mask.astype(np.float32), sentence)
        return encoded, text.tokens

    def carries_evidence(self, text: str) -> bool:
        """Whether the model's text encoder knows any content word of ``text`` (see
        :func:`engine.features.text.carries_evidence`): GloVe models read GloVe words only, MiniLM models any
        English word."""
        if self.runner.manifest.text_encoder == "glove":
            return carries_evidence(text, self.encoders.glove)
        return carries_evidence(text, self.encoders.minilm, lexicon=self.encoders.glove)

    def encode_media_features(self, record) -> Encoded:
        """One photo's or clip's stored vectors from its features (a clip: :meth:`_encode_clips`)."""
        if record.local is not None:
            return self.runner.encode_image(record.local[None].astype(np.float32),
                                            record.global_[None].astype(np.float32))
        if record.frames is not None:
            return self._encode_clips([record])
        return self._encode_pooled(record.global_[None].astype(np.float32))

    def encode_frames(self, record) -> np.ndarray:
        """A clip's frames embedded one by one (T, K, D) (see :meth:`frame_vectors`)."""
        return self._encode_pooled(record.frames.astype(np.float32)).emb

    def score_ids(self, query: Encoded, ids: np.ndarray, keep: bool = False
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(scores, frames, head_pairs)`` of library items ``ids`` for one encoded query: the K x K max cosine of
        the stored vectors (PCME: of the means), a clip's the best of those and of its shots; ``frames`` is
        the frame that matched best (-1: a photo, or the clip as a whole). Items the model has not embedded
        score -1. ``keep``: these ids are asked every query (a ranking's fixed sample): the index keeps their
        vectors (:meth:`MultiVectorIndex.scores_where_known`)."""
        ids = np.asarray(ids, np.int64)
        scores = np.full(len(ids), -1.0, np.float32)
        frames = np.full(len(ids), -1, np.int64)
        head_pairs = np.zeros((len(ids), 2), np.int64)
        q = query.emb[0]
        inside, found, pairs = self.index.scores_where_known(q, ids, keep=keep)
        scores[inside] = found
        head_pairs[inside] = pairs
        clip_ids, vectors = self.frame_vectors()
        if len(clip_ids):
            order = np.argsort(clip_ids)
            at = np.searchsorted(clip_ids, ids, sorter=order)
            at = np.minimum(at, len(clip_ids) - 1)
            hit = clip_ids[order[at]] == ids
            if hit.any():
                rows = order[at[hit]]
                k = self.runner.num_embeddings
                blocks = vectors[rows].astype(np.float32)  # (h, T * K, D)
                h, t = len(rows), blocks.shape[1] // k
                per_frame, frame_pairs = kxk_scores(q, blocks.reshape(h * t, k, -1))
                best, frame = shot_scores(per_frame.reshape(h, t), self._shot_of[rows])
                pairs = frame_pairs.reshape(h, t, 2)[np.arange(h), frame]
                where = np.flatnonzero(hit)
                better = best > scores[where]
                scores[where[better]] = best[better]
                frames[where[better]] = frame[better]
                head_pairs[where[better]] = pairs[better]
        return scores, frames, head_pairs

    def candidate_ids(self, query: Encoded, n: int) -> np.ndarray:
        """About the model's top ``n`` items (approximate, unscored: :meth:`MultiVectorIndex.candidates`) and every
        clip (scored by frame, which the index cannot)."""
        return np.union1d(self.index.candidates(query.emb[0], n), self.frame_vectors()[0])

    def match_probability(self, query: Encoded, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """PCME: ``(match probability (eq. 2), uncertainty)`` of items ``ids`` for one encoded query."""
        _, _, extras = self.catalog.get_embeddings(self.record.id, [int(i) for i in ids])
        item_mu = self.index.get(ids)[:, 0]
        item_logsig = extras["log_sigma"]
        prob = model_match_probability(self.runner.manifest, query.mu[0], query.log_sigma[0], item_mu, item_logsig)
        return prob, uncertainty(item_logsig)

    def explain(self, query_encoded: Encoded, query_tokens: tuple[str, ...], item: MediaRecord) -> Explanation:
        feats = self.features.get(item.content_hash, self.encoders.backbone.id)
        if feats is None:
            raise LookupError(f"{item.path} has no features yet (index it first)")
        enc = self._as_ranked(item.id, self.encode_media_features(feats))
        q, v = query_encoded.emb[0], enc.emb[0]
        similarity = (q @ v.T).astype(np.float32)
        pair = np.unravel_index(int(np.argmax(similarity)), similarity.shape)
        k = self.runner.num_embeddings
        query_att, query_tokens = attention_or_none(query_encoded.attention, len(query_tokens)), tuple(query_tokens)
        if query_att.size:
            query_tokens, query_att = query_words(query_tokens, query_att)
        notes: tuple[str, ...] = ()
        clip = feats.local is None and feats.frames is not None
        if clip:  # a clip: which of its frames matched, per head
            item_att, best, alike = frame_attention(self.encode_frames(feats), q)
            notes = (f"best match: frame {best + 1} of {len(feats.frames)}",)
            if alike and heads_alike(normalise_rows(enc.emb[0])):
                # a frame reaches the heads as its pooled feature in every region (no regions are stored for a
                # clip's frames), so each head's attention is uniform and the K vectors are one: one strip, one
                # column, and the words that say why, rather than the same map K times
                item_att, similarity, pair = item_att[:1], similarity[:, :1], (int(np.argmax(similarity[:, 0])), 0)
                notes += (f"its {k} heads read this clip alike: a frame has no regions for them to tell apart, so "
                          "one strip shows them",)
        else:  # a model without attention (VSE, K = 1) has no map to show: never a uniform one that pretends
            item_att = attention_or_none(enc.attention, 49 if feats.local is not None else 1)
        grid = (7, 7) if feats.local is not None and item_att.ndim == 2 and item_att.shape[1] == 49 else None
        prob = q_unc = i_unc = i_pct = None
        population = 0
        q_sig = i_sig = q2 = i2 = None
        spread: tuple[float, float] | None = None
        if self.runner.probabilistic:
            m = self.runner.manifest
            prob = float(model_match_probability(m, query_encoded.mu[0], query_encoded.log_sigma[0], enc.mu,
                                                 enc.log_sigma)[0])
            q_unc, i_unc = float(uncertainty(query_encoded.log_sigma)[0]), float(uncertainty(enc.log_sigma)[0])
            library = self.library_uncertainties()
            if len(library):
                i_pct, population = uncertainty_percentile(library, i_unc), len(library)
                spread = (float(library[0]), float(library[-1]))
            q2, i2, q_sig, i_sig = project_pair(query_encoded.mu[0], query_encoded.log_sigma[0], enc.mu[0],
                                                 enc.log_sigma[0])
        return Explanation(query_tokens, query_att, item_att, grid, similarity, (int(pair[0]), int(pair[1])),
                           q_unc, i_unc, prob, q_sig, i_sig, q2, i2, i_pct, population,
                           notes=(f"model {self.record.name} ({self.runner.method}, K={k})", *notes),
                           library_uncertainty_range=spread,
                           uncertainty_calibration=self._calibration(i_unc, q_unc, clip),
                           match_probability_by=self.record.name if prob is not None else None)

    def _as_ranked(self, item_id: int, encoded: Encoded) -> Encoded:
        """``encoded`` (one item's encoders run again, for its attention maps) with the vectors the ranking read
        where the model has embedded the item: an export with int8 graphs (``trainer.methods.export``) quantizes
        each batch's activations together, so an item encoded alone lands a little apart (~0.002) from where its
        batch put it, and the explanation's scores and uncertainty are the ranking's own."""
        if item_id not in self.index:
            return encoded
        emb = self.index.get([item_id])
        if not self.runner.probabilistic:
            return Encoded(emb, encoded.attention)
        _, _, extras = self.catalog.get_embeddings(self.record.id, [item_id])
        return Encoded(emb, encoded.attention, emb[:, 0], extras["log_sigma"].astype(np.float32))

    def _calibration(self, item: float | None, query: float | None, clip: bool = False) -> tuple[str, ...]:
        """The item's and the query's uncertainty read against the model's validation split (its metrics.json);
        ``clip``: the item is a GIF or video, read against the photos there."""
        if item is None or self._validation_curves is None:
            return ()
        curves, split = self._validation_curves
        lines = [calibrated_reading(item, curves.get("i2t"), "clip" if clip else "photo", split)]
        if query is not None:
            lines.append(calibrated_reading(query, curves.get("t2i"), "search", split))
        return tuple(line for line in lines if line)


def _shot_labels(picked: np.ndarray, frames: int) -> np.ndarray:
    """Per frame :func:`_even_frames` picked of a clip of ``frames`` frames, its shot (:mod:`engine.search.shots`);
    -1 where a short clip's last frame only repeats (a repeat would weigh its shot's mean)."""
    labels = np.full(len(picked), -1, np.int64)
    real = min(frames, len(picked))
    labels[:real] = shot_labels(picked[:real])
    return labels


def _even_frames(frames: np.ndarray, count: int) -> np.ndarray:
    """``count`` frames evenly spread over a clip (PVSE §3.5); a shorter clip's last frame repeats."""
    picks = np.linspace(0, len(frames) - 1, count).round().astype(np.int64) if len(frames) > count \
        else np.minimum(np.arange(count), len(frames) - 1)
    return frames[picks]


def _concat(parts: list[Encoded]) -> Encoded:
    if len(parts) == 1:
        return parts[0]

    def cat(name: str):
        arrays = [getattr(p, name) for p in parts]
        return None if any(a is None for a in arrays) or name == "attention" else np.concatenate(arrays)

    return Encoded(cat("emb"), None, cat("mu"), cat("log_sigma"))


def _validation_curves(model_dir: Path) -> tuple[Mapping[str, UncertaintyCurve], str] | None:
    """``metrics.json``'s R@1 per uncertainty decile of a model folder, by direction, and the split it was measured
    on (:class:`engine.trainercontract.runfolder.TrainerMetrics`)."""
    try:
        metrics = read_metrics(model_dir)
    except (OSError, CheckpointError):
        return None
    if metrics is None or not metrics.uncertainty:
        return None
    return metrics.uncertainty, metrics.split or "its validation split"
