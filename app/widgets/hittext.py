"""What a result says about itself in words and badges: its relevance (its calibrated match in words and a
percentage, or its rank and standing), its hover text, and what the user wrote about it (verdicts, where its
captions came from).

Shared by the results grid, the viewer and the tests; plain functions of a ``SearchHit`` and an
``AnnotationState`` (``engine.library.browse``), no widgets.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PySide6.QtGui import QColor

from engine.types import SearchHit, percent

MATCH_DOTS = {"strong": 3, "good": 2, "weak": 1}  # a calibrated match's word (SearchHit.match) as dots


@dataclass(frozen=True, slots=True)
class Relevance:
    """How well a result matches, in words a person reads: a label, 1-3 dots, and what it is based on."""

    label: str  # "strong match · 62%", "73% match", "strong match"
    dots: int  # 1..3
    explanation: str  # the tooltip's sentence, with the raw number


# How far an item's fused score (a sum of z-scores over the library, engine/search/evidence.py) puts it from the
# library's typical item: at least this many standard deviations above it, its band (dots, label) and the words.
# One measure for both, so the label and the sentence never disagree ("weak match" beside "stands far out", or a
# filtered page's "strong match" beside "somewhat closer than the typical item", issue #44).
STANDING = ((3.0, 3, "strong match", "it stands far out from the library's typical item"),
            (1.5, 2, "good match", "it stands clearly above the library's typical item"),
            (0.5, 1, "weak match", "it is only somewhat closer than the library's typical item: a weak match"),
            (float("-inf"), 1, "weak match", "it is about as close as the library's typical item: a weak match"))


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, 11th, 21st, ..."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n:,}{suffix}"


def relevance(hit: SearchHit, rank: int | None = None, searched: int | None = None) -> Relevance:
    """A text search's calibrated match (issue #40: "strong match · 62%"); without a calibration file a
    probabilistic model's own match probability ("62% match"); otherwise (find similar) a band by how far the item
    stands from the library's typical item for this search (:data:`STANDING`), said with its place: its rank (of
    ``searched`` items when known).

    Raw scores are not comparable across models and mean nothing to a reader (a fused sum of z-scores), so the
    words say the rank and the standing, never the number; the band and the words come from the same standing
    (a page's own range once gave "weak match" beside "stands far out", issue #44).
    """
    place = ""
    if rank is not None:
        place = f"ranked {ordinal(rank)}" + (f" of {searched:,} items" if searched else "") + " for this search"
    lead = f"{place}: " if place else ""
    p = hit.match_probability
    if p is not None and hit.match in MATCH_DOTS:
        return Relevance(f"{hit.match} match · {percent(p)}", MATCH_DOTS[hit.match],
                         f"{lead}an estimated {percent(p)} probability that this item is what the search asks for "
                         "(calibrated on held-aside photos and videos)")
    if p is not None:  # no calibration file: a probabilistic model's own estimate
        dots = 3 if p >= 0.75 else 2 if p >= 0.4 else 1
        return Relevance(f"{percent(p)} match", dots,
                         f"{lead}the model estimates a {percent(p)} probability that this item fits the query")
    _, dots, label, words = next(band for band in STANDING if hit.score >= band[0])
    return Relevance(label, dots, f"{place + '; ' if place else ''}{words}")


def relevance_line(rank: Relevance, advance: Callable[[str], int], width: int) -> str:
    """A result's relevance under its thumbnail in ``width`` pixels: its dots and label, else without the word
    "match" ("●●○ good · 4%"), so that a narrow thumbnail still shows the percentage (the tooltip says it all)."""
    dots = "●" * rank.dots + "○" * (3 - rank.dots)
    full = f"{dots}  {rank.label}"
    return full if advance(full) <= width else f"{dots} {rank.label.replace(' match', '')}"


def hit_tooltip(hit: SearchHit, rank: Relevance | None = None, state: Any = None) -> str:
    """The hover text of a result; every user string is escaped (captions are never markup)."""
    name = html.escape(Path(hit.path).name)
    lines = [f"<b>{name}</b>", html.escape(str(hit.path)), html.escape(hit.kind.value)]
    if rank is not None:
        lines.append(f"<b>{html.escape(rank.label)}</b>: {html.escape(rank.explanation)}")
    if hit.uncertainty is not None:
        lines.append(f"uncertainty σ = {hit.uncertainty:.3f} (higher: the model finds this item more ambiguous)")
    if state is not None:
        lines += [html.escape(text) for text, _ in annotation_badges(state)]
        lines += [html.escape(text) for text in verdict_lines(state)]
    lines += [f"“{html.escape(c)}”" for c in hit.captions[:5]]
    if hit.guess:  # the model's own words about the item: said as such, never quoted like a caption
        lines.append(f"<i>model's guess (not a caption): {html.escape(hit.guess)}</i>")
    return "<p style='white-space:pre-wrap'>" + "<br>".join(lines) + "</p>"


VERDICT_INK = {True: QColor(20, 110, 45), False: QColor(170, 30, 30)}  # accepted / rejected, as text
BADGE_COLOURS = {"accepted": QColor(30, 140, 60, 220), "rejected": QColor(190, 40, 40, 220),
                 "captioned": QColor(40, 90, 170, 220), "imported": QColor(110, 80, 160, 220)}


def verdict_text(query: str, label: int) -> str:
    """One verdict in words: "✓ accepted for “a dog on a beach”"."""
    return f"{'✓ accepted' if label > 0 else '✗ rejected'} for “{query}”"


def verdict_lines(state: Any) -> list[str]:
    """Every query the item was accepted or rejected for (its latest verdict each), the most recent first."""
    return [verdict_text(query, label) for query, label in getattr(state, "verdicts", ())]


def browse_line(state: Any) -> str:
    """A browsed item's second line: the query it was last accepted or rejected for ("+2 more" when there are
    others), else whether a person captioned it (the model's guesses do not count)."""
    if state is None:
        return ""
    verdicts = getattr(state, "verdicts", ())
    if verdicts:
        more = f"  +{len(verdicts) - 1} more" if len(verdicts) > 1 else ""
        return verdict_text(*verdicts[0]) + more
    return "captioned" if state.captioned else "not captioned yet"


def compact_verdict(verdicts: Any, elide: Callable[[str, int], str], advance: Callable[[str], int],
                    width: int) -> str:
    """The latest verdict in ``width`` pixels: "✓ “a dog on a be…”  +1", the query shortened, the mark (its colour
    says accepted or rejected) and the count of the others kept."""
    query, label = verdicts[0]
    mark, more = ("✓ " if label > 0 else "✗ "), (f"  +{len(verdicts) - 1}" if len(verdicts) > 1 else "")
    room = width - advance(mark) - advance(more) - advance("”")
    quoted = elide(f"“{query}", room)
    return f"{mark}{quoted}”{more}"


# A badge's short form, for thumbnails too narrow for the words (the tooltip says them in full)
BADGE_SHORT = {"✓ accepted": "✓", "✗ rejected": "✗", "✎ captioned": "✎", "⇩ imported": "⇩"}
BADGE_PADDING, BADGE_GAP = 10, 4  # pixels around a badge's text, and between two badges


def fit_badges(labels: list[str], advance: Callable[[str], int], width: int) -> list[str]:
    """The badge texts that fit side by side in ``width`` pixels: in full when they all fit, else their short
    forms, else as many short ones as fit (a 120 px thumbnail cannot hold "✓ accepted" and "✎ captioned")."""
    def room(texts: list[str]) -> int:
        return sum(advance(t) + BADGE_PADDING + BADGE_GAP for t in texts)

    if room(labels) <= width:
        return labels
    short = [BADGE_SHORT.get(t, t) for t in labels]
    while short and room(short) > width:
        short.pop()
    return short


def annotation_badges(state: Any) -> list[tuple[str, QColor]]:
    """What a thumbnail's badges say about an ``AnnotationState``: its verdict, then whether a person captioned it
    (the user, or an import). The model's guess has no badge: every indexed item has one, so a badge for it would
    say nothing and cover the picture (issue #44); the tooltip and the captions panel say it."""
    badges = []
    if state.judgement > 0:
        badges.append(("✓ accepted", BADGE_COLOURS["accepted"]))
    elif state.judgement < 0:
        badges.append(("✗ rejected", BADGE_COLOURS["rejected"]))
    if "user" in state.sources:
        badges.append(("✎ captioned", BADGE_COLOURS["captioned"]))
    elif "imported" in state.sources:
        badges.append(("⇩ imported", BADGE_COLOURS["imported"]))
    return badges

