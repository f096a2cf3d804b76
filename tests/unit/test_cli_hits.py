"""How ``polyseek search`` writes a hit: what people wrote apart from the model's guess (issue #44)."""

from __future__ import annotations

import json

import pytest

from engine.cli import _hit_json, _print_hits
from engine.types import MediaKind, SearchHit

CAPTIONED = SearchHit(1, "/p/dog.jpg", MediaKind.IMAGE, 0.9, captions=("Biscuit on the beach",),
                      guess="blue dog (Curly-coated Retriever), sand", match_probability=0.8, match="strong")
GUESSED = SearchHit(2, "/p/cat.jpg", MediaKind.IMAGE, 0.5, guess="tabby cat (Egyptian cat)")
BARE = SearchHit(3, "/p/x.gif", MediaKind.ANIMATION, 0.1)


def test_captions_are_what_people_wrote_and_the_guess_is_its_own_field() -> None:
    assert (_hit_json(CAPTIONED)["captions"], _hit_json(CAPTIONED)["guess"]) == (
        ["Biscuit on the beach"], "blue dog (Curly-coated Retriever), sand")
    assert (_hit_json(GUESSED)["captions"], _hit_json(GUESSED)["guess"]) == ([], "tabby cat (Egyptian cat)")
    assert (_hit_json(BARE)["captions"], _hit_json(BARE)["guess"]) == ([], None)


@pytest.mark.parametrize("query", [None, "a dog"])  # search --json, and one line of search --queries --json
def test_every_json_output_keeps_them_apart(query: str | None, capsys: pytest.CaptureFixture[str]) -> None:
    _print_hits([CAPTIONED, GUESSED], as_json=True, query=query)
    written = json.loads(capsys.readouterr().out)
    hits = written if query is None else written["hits"]
    assert [(h["captions"], h["guess"]) for h in hits] == [
        (["Biscuit on the beach"], "blue dog (Curly-coated Retriever), sand"), ([], "tabby cat (Egyptian cat)")]


def test_plain_output_quotes_no_guess_as_a_caption(capsys: pytest.CaptureFixture[str]) -> None:
    _print_hits([CAPTIONED, GUESSED], as_json=False, query="a dog")
    out = capsys.readouterr().out
    assert "“blue dog" not in out and "“tabby cat" not in out
