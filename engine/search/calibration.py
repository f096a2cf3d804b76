"""One calibrated scale for every kind of evidence (issue #40): the probability that an item is what a query asks for.

The ranking's evidence (:mod:`engine.search.evidence`) becomes a handful of features per (query, item):

- ``dense``: the model and the zero-shot semantics, z-scored over the library and summed with their weights (the
  order of today's fused ranking, unchanged where the user wrote nothing); ``dense_known``: the same times the
  query's familiar share (an item's z-score for words the model never read is noise, whatever its size), and
  ``dense_high``: its hinge above :data:`HIGH` (the very top of a ranking is less sure than a line says);
- ``model_cos``: the trained model's raw cosine times the familiar share (an absolute scale: a query whose best
  item is far is unlikely to have a match, whatever its z-scores say);
- ``familiar``: the share of the query's content words that are words at all and not the user's own (a name new to
  the model, :data:`engine.search.ranking.OWN_WORD`), on a log scale (:func:`familiar_feature`): made-up words
  carry no evidence, and an item's z-score for them is noise;
- ``log_items``: the library's size (the chance that any one item is *the* item falls with it);
- ``dense_described``: the known dense sum of an item the user wrote what it is on (a caption, an accepted query):
  the fit discounts the model's guess about an item whose caption says what it is (without it a described item
  had the guess *and* its caption's cover, and came first for queries about similar photos);
- ``lexical``, ``semantic``, ``spread``: the user's words (:mod:`engine.search.words`): how much of the whole query
  an item's captions cover, how close they are in meaning, and the share its look-alikes pass on; ``lexical_full``
  and ``semantic_full``, their hinges above :data:`FULL`: a caption that says what the query says is evidence, one
  that shares a word or two with it hardly any (on the train side a partial cover of an ordinary caption was no
  match).

A logistic model over them (coefficients fitted on held-aside *train-side* libraries, never dev:
``tools/fit_calibration.py``, with the situations users create: ordinary captions on other items, names,
nonsense queries) gives a log-odds per item; a rejection for this very query multiplies the probability by
``1 - rejected``. Both the ranking and the words a result is described by (strong / good / weak, a percentage) are
that probability, so a search where nothing is likely to match says so.

The fitted parameters ship in ``resources/calibration.json``, one set for a trained model and one for zero-shot
ranking, each saying what it was fitted on.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.types import EvidenceKind

FEATURES = ("dense", "dense_known", "dense_high", "model_cos", "familiar", "log_items", "lexical", "lexical_full",
            "semantic", "semantic_full", "spread", "novel", "dense_described")
HIGH = 2.0  # where the hinge feature dense_high starts (z-units of the known dense sum)
FULL = 0.6  # where lexical_full / semantic_full start: a caption that says most of what the query says
FILE = "calibration.json"


@dataclass(frozen=True)
class Calibration:
    """A fitted logistic model: log-odds = ``intercept + sum(coef[f] * feature f)``; ``strong`` / ``good``: the
    probabilities at which a match is called strong / good (chosen on the same train-side data)."""

    coef: dict[str, float]
    intercept: float
    strong: float
    good: float
    fitted_on: str = ""
    frames_bias: float = 0.0  # z-units a clip's dense sum loses per log(frames) (the best of T frames), see fuse

    def logit(self, features: dict[str, np.ndarray | float], n: int) -> np.ndarray:
        """Log-odds (n,) from per-item arrays or per-query numbers; a feature not given counts 0."""
        out = np.full(n, self.intercept, np.float64)
        for name, weight in self.coef.items():
            value = features.get(name)
            if value is not None and weight:
                out += weight * np.asarray(value, np.float64)
        return out.astype(np.float32)

    def word(self, p: float) -> str:
        """"strong", "good" or "weak" for a match probability."""
        return "strong" if p >= self.strong else "good" if p >= self.good else "weak"

    def contributions(self, features: dict[str, np.ndarray | float], at: int) -> dict[str, float]:
        """What each kind of evidence adds to the log-odds of the item at position ``at`` (the inspector's
        reading of the same numbers that ranked it): ``models`` (the model, the zero-shot semantics and how
        familiar the query's words are), ``captions`` (lexical and semantic cover), ``look_alikes`` (spread) and
        ``start`` (the intercept and the library's size)."""
        def value(name: str) -> float:
            v = features.get(name)
            return 0.0 if v is None else float(v if np.ndim(v) == 0 else np.asarray(v)[at])

        groups = {"models": ("dense", "dense_known", "dense_high", "model_cos", "familiar"),
                  "captions": ("lexical", "lexical_full", "semantic", "semantic_full", "novel", "dense_described"),
                  "look_alikes": ("spread",),
                  "start": ("log_items",)}
        out = {g: sum(self.coef.get(f, 0.0) * value(f) for f in names) for g, names in groups.items()}
        out["start"] += self.intercept
        return out

    def to_dict(self) -> dict:
        return {"coef": {k: round(float(v), 6) for k, v in self.coef.items()}, "intercept": round(self.intercept, 6),
                "strong": self.strong, "good": self.good, "frames_bias": self.frames_bias, "fitted_on": self.fitted_on}

    @classmethod
    def from_dict(cls, data: dict) -> Calibration:
        coef = {str(k): float(v) for k, v in data["coef"].items()}
        unknown = set(coef) - set(FEATURES)
        if unknown:
            raise ValueError(f"calibration names unknown features {sorted(unknown)}")
        return cls(coef, float(data["intercept"]), float(data["strong"]), float(data["good"]),
                   str(data.get("fitted_on", "")), float(data.get("frames_bias", 0.0)))


def features(dense: np.ndarray, share: float, n_items: int, model_cos: np.ndarray | None = None,
             lexical: np.ndarray | None = None, semantic: np.ndarray | None = None,
             spread: np.ndarray | None = None, novel: np.ndarray | None = None,
             described: np.ndarray | None = None) -> dict[str, np.ndarray | float]:
    """The features of :data:`FEATURES` from the ranking's evidence (the one place they are made: the search and
    ``tools/fit_calibration.py`` both call it). ``share``: the query's familiar share (:func:`familiarity`)."""
    known = np.asarray(dense, np.float32) * np.float32(share)
    out: dict[str, np.ndarray | float] = {
        "dense": dense, "dense_known": known, "dense_high": np.maximum(known - HIGH, 0.0),
        "familiar": familiar_feature(share), "log_items": log_items(n_items)}
    if model_cos is not None:
        out["model_cos"] = np.asarray(model_cos, np.float32) * np.float32(share)
    for name, value in (("lexical", lexical), ("semantic", semantic)):
        if value is not None:
            out[name] = value
            out[name + "_full"] = np.maximum(np.asarray(value, np.float32) - FULL, 0.0) / (1.0 - FULL)
    if spread is not None:
        out["spread"] = spread
    if novel is not None:
        out["novel"] = novel
    if described is not None:
        out["dense_described"] = known * np.asarray(described, np.float32)
    return out


def sigmoid(x: np.ndarray) -> np.ndarray:
    return (1.0 / (1.0 + np.exp(-np.clip(np.asarray(x, np.float64), -60, 60)))).astype(np.float32)


def with_rejection(logit: np.ndarray, rejected: np.ndarray | None) -> np.ndarray:
    """Log-odds of ``p * (1 - rejected)``: a result rejected for this very query (1) has no chance left, one
    rejected for a paraphrase keeps what the paraphrase leaves."""
    if rejected is None or not np.any(rejected > 0):
        return logit
    out = logit.copy()
    hit = rejected > 0  # only the rejected rows change: the others keep their exact log-odds (and order)
    p = sigmoid(logit[hit]).astype(np.float64) * (1.0 - np.clip(rejected[hit].astype(np.float64), 0.0, 1.0))
    p = np.clip(p, 1e-12, 1 - 1e-7)
    out[hit] = np.log(p / (1 - p))
    return out


def shipped_path() -> Path:
    import resources

    return Path(resources.__file__).resolve().parent / FILE


@functools.lru_cache(maxsize=4)
def _read(path: str) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def load(kind: EvidenceKind | str, path: Path | None = None) -> Calibration | None:
    """The shipped calibration for the dense evidence ``kind`` (:class:`engine.types.EvidenceKind`: ``MODEL``, any
    trained model; ``ZERO_SHOT``, no model; the file's keys), or None where the file or the entry is missing or
    unreadable (the ranking then sums z-scores as before #40); ``ValueError`` for a name that is no kind."""
    kind = EvidenceKind.parse(kind)
    try:
        data = _read(str(path or shipped_path()))
        return Calibration.from_dict(data[kind.value])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def familiarity(words: list[str], knows) -> float:
    """The share of a query's content ``words`` that are words at all to the text side (``knows``: a whole MiniLM
    token or a GloVe word, :func:`engine.features.text.carries_evidence`): 0 for made-up words. (A model's own
    training-caption counts were tried first: they made the rare words of web captions look made up.)"""
    if not words:
        return 0.0
    return float(np.mean([1.0 if knows(w) else 0.0 for w in words]))


FAMILIAR_FLOOR = 0.05  # the familiar feature is log(floor + share): made-up words stand far below a rare real word


def familiar_feature(share: float) -> float:
    """The ``familiar`` feature of a query whose content words the ranking has read ``share`` of
    (:func:`familiarity`): its log, so that a query of made-up words (0) stands apart from one with a rare word
    among common ones (0.8), which is as likely as any to have a match."""
    return math.log(FAMILIAR_FLOOR + max(0.0, min(1.0, share)))


FITTED_ITEMS = (100, 1000)  # the library sizes the size term holds between (the fit's libraries: 500 and 1,000)


def log_items(n: int) -> float:
    """The size feature: log N, held to :data:`FITTED_ITEMS`. The fit's probability is that an item is the one
    photo a caption was written for (one in N); in a larger library more items fit a description, so beyond the
    fitted sizes the probability stays that of a 1,000-item library instead of falling as 1 / N. Below 100 items
    it stays that of 100 (tried: ten, which put a 12-item demo library's right answer at 50 % but called two wrong
    items "good" too: a z-score among a dozen items says little)."""
    lo, hi = FITTED_ITEMS
    return math.log(min(max(int(n), lo), hi))
