"""Zero-shot ranking on real photos (scikit-image's public-domain samples) and its building blocks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from engine.features.regional import class_texts, colour_name, content_words, region_colour, region_colours
from engine.search.zeroshot import ZeroShotIndex
from engine.workspace import Workspace

SAMPLES = {"chelsea": "cat.jpg", "coffee": "coffee.jpg", "astronaut": "astronaut.jpg", "rocket": "rocket.jpg",
           "coins": "coins.jpg", "camera": "cameraman.jpg"}


@pytest.fixture(scope="module")
def sample_photos(tmp_path_factory) -> Path:
    import skimage.data

    folder = tmp_path_factory.mktemp("samples")
    for name, filename in SAMPLES.items():
        Image.fromarray(getattr(skimage.data, name)()).convert("RGB").save(folder / filename)
    return folder


@pytest.fixture
def indexed(assets_dir: Path, sample_photos: Path) -> Workspace:
    service = Workspace.open("samples", assets_dir)
    list(service.library.index([sample_photos]))
    yield service
    service.close()


@pytest.mark.parametrize(("query", "expected"), [
    ("a cat", "cat.jpg"),
    ("a cup of coffee", "coffee.jpg"),
    ("a rocket on the launch pad", "rocket.jpg"),
    ("a pile of old coins", "coins.jpg"),
])
def test_a_sentence_ranks_the_matching_photo_first(indexed, query, expected):
    hits = indexed.search.text(query, top=3)
    assert Path(hits[0].path).name == expected, [Path(h.path).name for h in hits]


def test_hits_carry_the_pseudo_caption_and_paging_is_consistent(indexed):
    first = indexed.search.text("a cat", top=6)
    assert len(first) == len(SAMPLES)
    assert "cat" in first[0].guess.lower() and first[0].captions == ()  # the model's guess is no caption (#32)
    assert [h.media_id for h in indexed.search.text("a cat", top=2, offset=2)] == [h.media_id for h in first[2:4]]
    assert indexed.search.text("   ") == []


def test_explain_finds_the_word_cat_in_the_regions_of_the_cat(indexed):
    """Zero-shot ranking has no attention: it explains by the class its regions show for each query word."""
    cat = next(h for h in indexed.search.text("a cat", top=1))
    explanation = indexed.search.explain("a cat", cat.media_id)
    assert explanation.item_attention.size == 0 and explanation.query_attention.size == 0  # no pretend heads
    (match,) = explanation.word_matches
    assert match.word == "cat" and match.class_name is not None and match.similarity >= 0.5  # a cat breed
    assert match.regions.shape == (49,) and match.strong_regions > 0


def test_colour_names():
    assert colour_name(np.array([220, 20, 20])) == "red"
    assert colour_name(np.array([10, 10, 10])) == "black"
    assert colour_name(np.array([250, 250, 250])) == "white"
    assert colour_name(np.array([30, 160, 40])) == "green"
    assert colour_name(np.array([30, 60, 200])) == "blue"
    image = np.zeros((224, 224, 3), np.uint8)
    image[:, 112:] = (20, 40, 220)
    assert region_colour(image, 0) == "black" and region_colour(image, 6) == "blue"


@pytest.mark.parametrize("shape", [(224, 224), (100, 150)])
def test_each_cell_is_named_by_its_own_colour(shape):
    """A 7 x 7 grid of named colours with noise: every cell reads as its colour, none as a neighbour's."""
    palette = {"red": (220, 20, 20), "green": (30, 160, 40), "blue": (30, 60, 200), "black": (10, 10, 10),
               "white": (245, 245, 245), "yellow": (230, 220, 30), "purple": (140, 40, 200)}
    names = list(palette)
    rng = np.random.default_rng(1)
    expected = [names[i] for i in rng.integers(0, len(names), 49)]
    colours = np.array([palette[n] for n in expected]).reshape(7, 7, 3)
    ys = np.linspace(0, shape[0], 8).astype(int)
    xs = np.linspace(0, shape[1], 8).astype(int)
    image = np.zeros((*shape, 3), np.int64)
    for r in range(7):
        for c in range(7):
            image[ys[r]:ys[r + 1], xs[c]:xs[c + 1]] = colours[r, c]
    image = np.clip(image + rng.integers(-8, 9, image.shape), 0, 255).astype(np.uint8)
    assert [region_colour(image, cell) for cell in range(49)] == expected
    # the batched form the indexer uses reads the same cells, of the right frame
    frames = np.stack([np.zeros_like(image), image])
    cells = [(1, cell) for cell in range(49)] + [(0, 3)]
    assert region_colours(frames, cells) == expected + ["black"]


def test_content_words_drop_stop_words():
    assert content_words("A dog runs on the beach!") == ["dog", "runs", "beach"]


def test_every_query_word_must_be_found():
    """An item that has both named classes beats items that have only one of them (the concept term)."""
    rng = np.random.default_rng(0)
    classes = rng.normal(size=(6, 8)).astype(np.float32)
    classes /= np.linalg.norm(classes, axis=1, keepdims=True)
    ids = np.array([[0, 1, 2], [0, 2, 3], [1, 3, 4]])
    probs = np.array([[0.5, 0.49, 0.01], [0.98, 0.01, 0.01], [0.98, 0.01, 0.01]], np.float32)
    index = ZeroShotIndex(classes, ids, probs)
    sentence = classes[0] + classes[1]
    sentence /= np.linalg.norm(sentence)
    scores = index.score(sentence, classes[[0, 1]])
    assert int(np.argmax(scores)) == 0


def test_class_texts_use_basic_level_names():
    names = [f"class {i}" for i in range(1000)]
    names[207] = "Golden Retriever"
    assert class_texts(names)[207] == "dog, Golden Retriever"
    assert class_texts(names)[500] == "class 500"


def _naive_scores(classes: np.ndarray, ids: np.ndarray, probs: np.ndarray, sentence: np.ndarray,
                  words: np.ndarray) -> np.ndarray:
    """The module docstring's three terms item by item, with each pseudo caption's centroid formed."""
    from engine.features.regional import softmax
    from engine.search import zeroshot as z

    def zscore(x):
        return (x - x.mean()) / x.std()

    n_classes = len(classes)
    dense = np.zeros((len(ids), n_classes))
    for row, (item_ids, item_probs) in enumerate(zip(ids, probs, strict=True)):
        dense[row, item_ids] += item_probs
    sims = classes @ sentence
    class_match = np.sqrt(dense) @ np.sqrt(softmax(sims / z.SENTENCE_TAU))
    centroids = dense @ classes
    caption = (centroids / np.linalg.norm(centroids, axis=1, keepdims=True)) @ sentence
    word_sims = words @ classes.T
    weights = np.clip(word_sims.max(axis=1) - z.WORD_FLOOR, 0, None)
    per_word = np.sqrt(dense) @ np.sqrt(softmax(word_sims / z.WORD_TAU, axis=1)).T
    return zscore(class_match) + zscore(caption) + zscore(np.log(per_word + z.EPS) @ weights)


def test_scores_equal_the_terms_computed_item_by_item_on_random_libraries():
    rng = np.random.default_rng(7)
    classes = rng.standard_normal((50, 16))
    classes /= np.linalg.norm(classes, axis=1, keepdims=True)
    for n in (1, 7, 300):
        ids = np.stack([rng.choice(50, 5, replace=False) for _ in range(n)])
        probs = rng.dirichlet(np.ones(5), n)
        sentence = classes[3] + 0.3 * rng.standard_normal(16)
        sentence /= np.linalg.norm(sentence)
        words = classes[[3, 9]] * 1.0
        got = ZeroShotIndex(classes, ids, probs).score(sentence, words)
        want = _naive_scores(classes, ids, probs, sentence, words) if n > 1 else np.zeros(1)
        np.testing.assert_allclose(got, want, atol=2e-4)


def test_a_rescan_that_changes_nothing_keeps_the_loaded_ranking_and_a_change_drops_it(indexed, tmp_path):
    indexed.search.text("a cat")
    loaded = indexed.state.indexes.zero_shot_built
    assert loaded is not None
    list(indexed.library.index(None))  # the app's start-up scan of an unchanged library
    assert indexed.state.indexes.zero_shot_built is loaded
    more = tmp_path / "more"
    more.mkdir()
    Image.new("RGB", (64, 48), (200, 30, 30)).save(more / "red.jpg")
    list(indexed.library.index([more]))
    assert indexed.state.indexes.zero_shot_built is None  # rebuilt with the new item at the next query
    assert len(indexed.search.text("a cat", top=10)) == len(SAMPLES) + 1


def test_a_query_prepared_once_scores_any_rows_as_a_fresh_one_and_kept_row_sets_stay_exact() -> None:
    rng = np.random.default_rng(3)
    classes = rng.standard_normal((50, 16)).astype(np.float32)
    classes /= np.linalg.norm(classes, axis=1, keepdims=True)
    n, k = 2000, 5
    ids = np.stack([rng.choice(50, k, replace=False) for _ in range(n)])
    probs = rng.dirichlet(np.ones(k), n).astype(np.float32)
    index = ZeroShotIndex(classes, ids, probs)
    sentence, words = classes[3] + 0.1, classes[[3, 7]]
    query = index.query_columns(sentence, words)
    everything = index.terms(sentence, words)
    sample = np.sort(rng.choice(n, 600, replace=False))
    for _ in range(3):  # the sample's slices are kept after the first time; later candidate sets come and go
        assert np.allclose(index.terms(None, None, sample, query=query), everything[sample], atol=1e-5)
        others = np.sort(rng.choice(n, 700, replace=False))
        assert np.allclose(index.terms(sentence, words, others), everything[others], atol=1e-5)
    mixed = rng.choice(n, 50)  # any order, repeats: each row's own classes
    assert np.allclose(index.terms(None, None, mixed, query=query), everything[mixed], atol=1e-5)
    assert len(index._views) <= 4


def test_the_explanation_says_what_the_user_wrote_that_counted(indexed):
    """A caption the user wrote is evidence the ranking counts (issue #31): the inspector's notes quote it, and a
    rejection for a like query; an item without either gets no such note."""
    cat = next(h for h in indexed.search.text("a cat", top=1))
    indexed.annotations.add_caption(cat.media_id, "Biscuit asleep on the rug")
    assert indexed.search.text("Biscuit", top=1)[0].media_id == cat.media_id
    notes = " ".join(indexed.search.explain("Biscuit", cat.media_id).notes)
    assert "\u201cBiscuit asleep on the rug\u201d" in notes and "What you wrote counts here" in notes
    other = next(h for h in indexed.search.text("a rocket on the launch pad", top=1))
    assert "What you wrote" not in " ".join(indexed.search.explain("Biscuit", other.media_id).notes)
    indexed.annotations.reject_pair("a rocket on the launch pad", other.media_id)
    notes = indexed.search.explain("a rocket on a launch pad", other.media_id).notes
    assert "You rejected this item" in " ".join(notes)


def test_the_inspector_names_no_class_a_person_would_not_accept():
    """#44: "rug -> Pomeranian (0.38)" read as nonsense; below SHOWN_FLOOR (chosen on train-side captions) the word
    names nothing, above it the class is shown."""
    from engine.search.readings import SHOWN_FLOOR, word_matches

    classes = np.eye(3, 4, dtype=np.float32)  # three classes, unit embeddings
    ids, probs = np.array([[0, 1], [2, 0]]), np.array([[0.6, 0.3], [0.5, 0.2]], np.float32)

    def encode(words: list[str]) -> np.ndarray:  # near class 0 only: "rug" at 0.38, "dog" at 0.6
        near = {"rug": 0.38, "dog": 0.6}
        return np.array([[near[w], 0.0, 0.0, np.sqrt(1 - near[w] ** 2)] for w in words], np.float32)

    rug, dog = word_matches(["rug", "dog"], ids, probs, ["Pomeranian", "sofa", "cup"], classes, encode)
    assert SHOWN_FLOOR > 0.38 and rug.class_name is None
    assert dog.class_name == "Pomeranian" and dog.similarity == pytest.approx(0.6)
