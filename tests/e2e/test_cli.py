"""The ``polyseek`` command line end to end, in subprocesses, with an isolated home."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from tests.mediagen import make_animated_gif


def polyseek(*args: str, home: Path, assets: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "POLYSEEK_HOME": str(home), "POLYSEEK_ASSETS": str(assets)}
    return subprocess.run([sys.executable, "-m", "engine.cli", *args], capture_output=True, text=True, env=env,
                          timeout=300)


@pytest.fixture
def media(tmp_path: Path) -> Path:
    import skimage.data

    folder = tmp_path / "media"
    folder.mkdir()
    Image.fromarray(skimage.data.chelsea()).save(folder / "cat.jpg")
    Image.fromarray(skimage.data.coffee()).save(folder / "coffee.png")
    make_animated_gif(folder / "blink.gif", [(200, 0, 0), (0, 0, 200)], size=(32, 32))
    (folder / "fake.jpg").write_bytes(b"this is not a picture")
    return folder


def test_index_then_search_json(media, polyseek_home, assets_dir):
    done = polyseek("index", str(media), "--json", home=polyseek_home, assets=assets_dir)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["counts"]["image"] == 2 and report["counts"]["animation"] == 1
    failures = {Path(f["path"]).name: f["error"] for f in report["failures"]}
    assert failures == {"fake.jpg": "not a media file"}  # named like a photo, is not one: reported
    found = polyseek("search", "a cup of coffee", "--top", "2", "--json", home=polyseek_home, assets=assets_dir)
    assert found.returncode == 0, found.stderr
    hits = json.loads(found.stdout)
    assert [Path(h["path"]).name for h in hits][0] == "coffee.png"
    assert set(hits[0]) == {"path", "score", "kind", "captions", "guess", "match_probability", "probability",
                            "match", "uncertainty"}
    # nobody captioned these: the model's guess is said apart, never listed as a caption (issue #44)
    assert all(h["captions"] == [] and h["guess"] for h in hits)
    # a text search's hits carry the calibrated probability and its word (issue #40), the older name kept
    assert all(0 < h["probability"] < 1 and h["match"] in ("strong", "good", "weak") for h in hits)
    assert all(h["probability"] == h["match_probability"] for h in hits)
    by_example = polyseek("search", "--media", str(media / "cat.jpg"), "--json", home=polyseek_home,
                          assets=assets_dir)
    similar = json.loads(by_example.stdout)
    assert Path(similar[0]["path"]).name == "cat.jpg"
    assert {(h["probability"], h["match"]) for h in similar} == {(None, None)}  # a picture query has none


def test_a_file_with_an_image_name_but_broken_content_is_reported(tmp_path, polyseek_home, assets_dir):
    folder = tmp_path / "bad"
    folder.mkdir()
    Image.new("RGB", (30, 30), (0, 200, 0)).save(folder / "good.png")
    data = (folder / "good.png").read_bytes()
    (folder / "cut.png").write_bytes(data[: len(data) // 2])
    done = polyseek("index", str(folder), "--json", home=polyseek_home, assets=assets_dir)
    failures = json.loads(done.stdout)["failures"]
    assert [Path(f["path"]).name for f in failures] == ["cut.png"] and failures[0]["error"]


@pytest.mark.parametrize(("args", "message"), [
    (("index", "/no/such/folder"), "no such file or folder"),
    (("search",), "give either a sentence or --media"),
    (("search", "x", "--top", "0"), "--top must be at least 1"),
    (("search", "--media", "/no/such.gif"), "no such file"),
    (("search", "x", "--queries", "/no/such.txt"), "without a sentence or --media"),
    (("search", "--media", "/no/such.gif", "--queries", "/no/such.txt"), "without a sentence or --media"),
    (("search", "--queries", "/no/such.txt"), "no such file"),
])
def test_bad_arguments_are_one_clear_line_and_a_failure_exit(args, message, polyseek_home, assets_dir):
    done = polyseek(*args, home=polyseek_home, assets=assets_dir)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr


def test_assets_that_cannot_be_prepared_say_how_to_fix_it(polyseek_home, tmp_path):
    # missing assets are prepared on first use (tests/e2e/test_first_use.py); here preparing them cannot work
    (tmp_path / "a-file").write_text("")
    done = polyseek("search", "a cat", home=polyseek_home, assets=tmp_path / "a-file" / "assets")
    assert done.returncode == 2 and "polyseek prepare" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr  # the trainer's own output went to the log


def test_models_lists_zero_shot_as_active(polyseek_home, assets_dir):
    done = polyseek("models", "--json", home=polyseek_home, assets=assets_dir)
    assert json.loads(done.stdout)[0] == {"name": "zero-shot", "method": "zero-shot", "path": None,
                                          "active": True, "metrics": {}}


# scikit-image's bundled sample pictures (no download), each with a caption that names what it shows
SAMPLE_CAPTIONS = {
    "chelsea": "a tabby cat looking at the camera", "coffee": "a cup of coffee on a saucer",
    "rocket": "a space rocket on its launch pad", "astronaut": "an astronaut in a space suit",
    "clock": "a clock on the wall", "coins": "a pile of old coins", "brick": "a brick wall",
    "horse": "the silhouette of a horse", "moon": "the cratered surface of the moon",
    "camera": "a photographer with a camera on a tripod", "page": "a page of printed text",
    "hubble_deep_field": "galaxies and stars in deep space",
}


def _sample_caption_folder(folder: Path) -> None:
    import numpy as np
    import skimage.data

    (folder / "images").mkdir(parents=True)
    rows = ["file\tcaption"]
    for name, caption in SAMPLE_CAPTIONS.items():
        pixels = getattr(skimage.data, name)()
        if pixels.dtype == bool:  # the horse is a mask: a black silhouette on white
            pixels = np.where(pixels, 0, 255).astype(np.uint8)
        Image.fromarray(pixels).convert("RGB").save(folder / "images" / f"{name}.jpg")
        rows.append(f"{name}.jpg\t{caption}")
    (folder / "captions.tsv").write_text("\n".join(rows) + "\n")


def test_evaluate_a_librarys_search_ranks_its_whole_content(media, tmp_path, polyseek_home, assets_dir):
    """``evaluate --library``: the library's own search (issue #40), the folder's photos among everything else the
    library holds (the three readable items of ``media`` as distractors: a cat and a coffee cup like two of the folder's
    photos, and a GIF)."""
    folder = tmp_path / "captions"
    _sample_caption_folder(folder)
    missing = polyseek("evaluate", "--library", "default", "--data", str(folder), home=polyseek_home,
                       assets=assets_dir)
    assert missing.returncode == 2 and "polyseek index" in missing.stderr  # nothing of it indexed yet: says how
    for path in (media, folder / "images"):
        assert polyseek("index", str(path), home=polyseek_home, assets=assets_dir).returncode == 0
    done = polyseek("evaluate", "--library", "default", "--data", str(folder), "--json", home=polyseek_home,
                    assets=assets_dir)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["n_media"] == 12 and report["n_captions"] == 12 and report["n_distractors"] == 3
    assert report["library"] == "default" and report["n_not_in_library"] == 0
    assert report["t2i"]["r1"] >= 50 and report["t2i"]["medr"] <= 2, report  # chance: R@1 7, medr 7


def test_evaluate_zero_shot_on_a_caption_folder(tmp_path, polyseek_home, assets_dir):
    folder = tmp_path / "captions"
    _sample_caption_folder(folder)
    done = polyseek("evaluate", "--model", "zero-shot", "--data", str(folder), "--json", home=polyseek_home,
                    assets=assets_dir)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["n_media"] == 12 and report["n_captions"] == 12 and report["n_failed"] == 0
    # chance is R@1 = 8.3 and median rank 6.5 both ways; zero-shot ranking gets 75 and 1 on these pictures
    for direction in ("i2t", "t2i"):
        assert report[direction]["r1"] >= 50 and report[direction]["medr"] == 1, report
    recalls = [report[d][k] for d in ("i2t", "t2i") for k in ("r1", "r5", "r10")]
    assert report["rsum"] == pytest.approx(sum(recalls))


def _search_json(*args: str, home: Path, assets: Path, query: str = "a cup of coffee") -> list[dict]:
    done = polyseek("search", query, "--json", *args, home=home, assets=assets)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _active(home: Path, assets: Path, *args: str) -> str:
    done = polyseek("models", "--json", *args, home=home, assets=assets)
    assert done.returncode == 0, done.stderr
    return [m["name"] for m in json.loads(done.stdout) if m["active"]][0]


def test_search_with_model_uses_it_for_that_call_only_and_models_activate_switches(media, tmp_path,
                                                                                    polyseek_home, assets_dir):
    from tests.unit.test_trained_search import export_untrained

    assert polyseek("index", str(media), home=polyseek_home, assets=assets_dir).returncode == 0
    zero_shot = _search_json(home=polyseek_home, assets=assets_dir)
    model_dir = export_untrained("vse", tmp_path / "tiny-vse")
    with_model = _search_json("--model", str(model_dir), home=polyseek_home, assets=assets_dir)
    assert [h["score"] for h in with_model] != [h["score"] for h in zero_shot]  # ranked by the model
    assert _active(polyseek_home, assets_dir) == "zero-shot"  # registered on the way, not activated
    assert _search_json(home=polyseek_home, assets=assets_dir) == zero_shot
    assert _search_json("--model", "zero-shot", home=polyseek_home, assets=assets_dir) == zero_shot

    assert _active(polyseek_home, assets_dir, "--activate", "tiny-vse") == "tiny-vse"
    assert _active(polyseek_home, assets_dir) == "tiny-vse"  # the switch is kept
    assert _search_json(home=polyseek_home, assets=assets_dir) == with_model
    assert _search_json("--model", "zero-shot", home=polyseek_home, assets=assets_dir) == zero_shot
    assert _active(polyseek_home, assets_dir) == "tiny-vse"
    assert _active(polyseek_home, assets_dir, "--activate", "zero-shot") == "zero-shot"


def test_search_queries_answers_every_line_in_one_run(media, tmp_path, polyseek_home, assets_dir):
    from tests.unit.test_trained_search import export_untrained

    assert polyseek("index", str(media), home=polyseek_home, assets=assets_dir).returncode == 0
    queries = tmp_path / "queries.txt"
    queries.write_text("a cup of coffee\n\n  a tabby cat  \n\nblorf quizzle\n", encoding="utf-8")
    done = polyseek("search", "--queries", str(queries), "--json", "--top", "2", home=polyseek_home,
                    assets=assets_dir)
    assert done.returncode == 0, done.stderr
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert [a["query"] for a in answers] == ["a cup of coffee", "a tabby cat", "blorf quizzle"]  # blanks skipped
    for answer in answers:  # the same hits, field for field, as one search of that sentence
        assert answer["hits"] == _search_json("--top", "2", query=answer["query"], home=polyseek_home,
                                              assets=assets_dir)
    assert Path(answers[0]["hits"][0]["path"]).name == "coffee.png"
    assert answers[2]["hits"][0]["match"] == "weak"  # made-up words: nothing is a good match
    assert all(h["captions"] == [] and h["guess"] for a in answers for h in a["hits"])  # the guess said apart

    model_dir = export_untrained("vse", tmp_path / "tiny-vse")  # not a probabilistic model: a probability all the same
    done = polyseek("search", "--queries", str(queries), "--json", "--model", str(model_dir), home=polyseek_home,
                    assets=assets_dir)
    assert done.returncode == 0, done.stderr
    hits = [h for line in done.stdout.splitlines() for h in json.loads(line)["hits"]]
    assert len(hits) == 3 * 3 and all(h["probability"] is not None and h["match"] for h in hits)

    done = polyseek("search", "--queries", str(queries), "--top", "1", home=polyseek_home, assets=assets_dir)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "“a cup of coffee”" and "coffee.png" in lines[1]
    assert re.search(r"\b(strong|good|weak) (<0\.1|>99|\d+(\.\d)?)%\s", lines[1]), lines[1]  # its match in words


@pytest.mark.parametrize("command", [("models", "--activate"), ("search", "a cat", "--model")])
def test_an_unknown_model_is_one_clear_line(command, polyseek_home, assets_dir):
    done = polyseek(*command, "no-such-model", home=polyseek_home, assets=assets_dir)
    assert done.returncode == 2 and "no model named 'no-such-model'" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
