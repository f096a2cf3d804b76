"""MultiVectorIndex: K x K max-cosine scoring, exact and approximate search, add/remove, files, threads."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from engine.search.vectorindex import (
    AnnParams,
    IndexFileError,
    IndexInputError,
    ModelMismatchError,
    MultiVectorIndex,
    kxk_scores,
    search_ef,
)
from engine.search.vectorindex import ann as backends

DIM, HEADS = 24, 3
SMALL = AnnParams(kind="ivf-flat", exact_limit=400, nprobe=16, nlist_per_sqrt=0.5, rebuild_growth=2.5)
KINDS = {"ivf-flat": SMALL,
         "ivf-pq": AnnParams(kind="ivf-pq", exact_limit=400, nprobe=16, pq_m=8, pq_bits=5, oversample=8,
                             nlist_per_sqrt=0.5),
         "ivf-sq8": AnnParams(kind="ivf-sq8", exact_limit=400, nprobe=16, nlist_per_sqrt=0.5),
         "hnsw": AnnParams(kind="hnsw", exact_limit=400, hnsw_m=12, ef_construction=40, ef_search=64),
         "hnsw-sq8": AnnParams(kind="hnsw-sq8", exact_limit=400, hnsw_m=12, ef_construction=40, ef_search=64),
         "hnsw+ivf": AnnParams(kind="hnsw+ivf", exact_limit=400, hnsw_m=12, ef_construction=40, ef_search=64,
                               nprobe=4, nlist_per_sqrt=0.5)}


def clustered(n: int, seed: int = 0, clusters: int = 40, heads: int = HEADS) -> np.ndarray:
    """(n, heads, DIM) item vectors: gaussian clusters on the sphere, each head a perturbation of its item."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, DIM))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    base = centres[rng.integers(0, clusters, n)] + 0.35 * rng.standard_normal((n, DIM))
    return (base[:, None, :] + 0.2 * rng.standard_normal((n, heads, DIM))).astype(np.float32)


def ids_for(n: int, start: int = 0) -> np.ndarray:
    return (np.arange(start, start + n, dtype=np.int64) * 7 + 1000)  # ids unlike row numbers


def loop_kxk(query: np.ndarray, items: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Brute-force reference of PVSE's K x K rule: every (query head, item head) cosine, keep the best."""
    scores, pairs = [], []
    for item in items:
        best, pair = -np.inf, (-1, -1)
        for p, q_vec in enumerate(query):
            for q, i_vec in enumerate(item):
                cos = float(q_vec @ i_vec / (np.linalg.norm(q_vec) * np.linalg.norm(i_vec)))
                if cos > best:
                    best, pair = cos, (p, q)
        scores.append(best)
        pairs.append(pair)
    return np.array(scores), np.array(pairs)


def test_kxk_scores_equal_a_loop_over_head_pairs() -> None:
    rng = np.random.default_rng(1)
    query, items = rng.standard_normal((2, DIM)) * 3.0, rng.standard_normal((9, HEADS, DIM))
    scores, pairs = kxk_scores(query, items)
    want_scores, want_pairs = loop_kxk(query, items)
    assert np.allclose(scores, want_scores, atol=1e-5)
    assert (pairs == want_pairs).all()
    with pytest.raises(IndexInputError, match="kxk_scores"):
        kxk_scores(query[:, :5], items)


def test_exact_search_ranks_by_kxk_score_with_pages() -> None:
    vectors, ids = clustered(150), ids_for(150)
    index = MultiVectorIndex(DIM, HEADS, params=SMALL)
    index.add(ids, vectors)
    query = clustered(1, seed=9, heads=2)[0]  # a query may have another number of heads
    got_ids, got_scores, got_pairs = index.search(query, top=12)
    want_scores, want_pairs = loop_kxk(query, vectors)
    order = np.lexsort((ids, -want_scores))[:12]
    assert not index.approximate and len(index) == 150
    assert (got_ids == ids[order]).all()
    assert np.allclose(got_scores, want_scores[order], atol=1e-5) and (got_pairs == want_pairs[order]).all()
    page = index.search(query, top=5, offset=5)
    assert (page[0] == got_ids[5:10]).all()
    assert len(index.search(query, top=10, offset=148)[0]) == 2


def recall_at_10(index: MultiVectorIndex, exact: MultiVectorIndex, queries: np.ndarray) -> float:
    hits = [len(set(index.search(q, 10)[0]) & set(exact.search(q, 10)[0])) for q in queries]
    return sum(hits) / (10 * len(queries))


@pytest.fixture(scope="module")
def library() -> tuple[np.ndarray, np.ndarray, np.ndarray, MultiVectorIndex]:
    vectors, ids = clustered(3000), ids_for(3000)
    exact = MultiVectorIndex(DIM, HEADS, params=AnnParams(exact_limit=10**9))
    exact.add(ids, vectors)
    return vectors, ids, clustered(40, seed=5), exact


@pytest.mark.parametrize("kind", list(KINDS))
def test_approximate_search_recalls_exact_top_10(library: tuple, kind: str) -> None:
    vectors, ids, queries, exact = library
    index = MultiVectorIndex(DIM, HEADS, params=KINDS[kind])
    index.add(ids, vectors)
    assert index.approximate and index.describe()["approximate"]["kind"] == kind
    assert recall_at_10(index, exact, queries) >= 0.9
    got_ids, got_scores, got_pairs = index.search(queries[0], 10)
    rows = (got_ids - 1000) // 7
    want_scores, want_pairs = kxk_scores(queries[0], vectors[rows])  # candidates are rescored exactly
    assert np.allclose(got_scores, want_scores, atol=1e-5) and (got_pairs == want_pairs).all()


def test_scores_of_ids_in_any_order_belong_to_those_ids() -> None:
    vectors, ids = clustered(30, seed=4), ids_for(30)
    index = MultiVectorIndex(DIM, HEADS, params=AnnParams(exact_limit=10**9))
    index.add(ids, vectors)
    query = clustered(1, seed=9)[0]
    # a permutation of every row: first and last are n - 1 apart, as in a run of consecutive rows
    order = np.r_[0, np.random.default_rng(0).permutation(np.arange(1, 29)), 29]
    got_ids, got, _ = index.scores(query, ids[order])
    assert (got_ids == ids[order]).all()
    assert np.allclose(got, loop_kxk(query, vectors[order])[0], atol=1e-5)


@pytest.mark.parametrize("kind", ["ivf-flat", "hnsw+ivf"])
def test_candidates_hold_the_exact_top_items_and_known_says_which_ids_are_in(library: tuple, kind: str) -> None:
    vectors, ids, queries, exact = library
    index = MultiVectorIndex(DIM, HEADS, params=KINDS[kind])
    index.add(ids, vectors)
    assert index.approximate
    found = []
    for query in queries:
        pool = set(index.candidates(query, 50).tolist())
        assert pool <= set(ids.tolist()) and len(pool) >= 50
        found += [int(i) in pool for i in exact.search(query, 20)[0]]
    assert np.mean(found) >= 0.9  # the pool is the approximate neighbourhood, not a page
    assert set(exact.candidates(queries[0], 20).tolist()) == set(exact.search(queries[0], 20)[0].tolist())
    index.remove(ids[:5])
    probe = np.concatenate([ids[:10], [-3, 10**9]])
    assert index.known(probe).tolist() == [False] * 5 + [True] * 5 + [False, False]
    with pytest.raises(KeyError, match="not in the index"):
        index.get(probe)
    known, scores, pairs = index.scores_where_known(queries[0], probe[::-1])  # one lookup: what scores() says
    assert known.tolist() == ([False] * 5 + [True] * 5 + [False, False])[::-1]
    _, expected, expected_pairs = index.scores(queries[0], probe[::-1][known])
    np.testing.assert_array_equal(scores, expected)
    np.testing.assert_array_equal(pairs, expected_pairs)


def test_the_id_table_and_a_kept_id_set_follow_every_change_of_the_index() -> None:
    """The id -> row table and a kept id set's rows and vectors (a ranking's fixed sample, asked every query) are
    made for one state of the index: after a replacement, a removal, a re-addition and a compaction that moves
    rows, the kept set scores what the index holds now, as a brute-force loop over the vectors added says."""
    rng = np.random.default_rng(3)
    ids = rng.permutation(ids_for(60))  # ids out of row order
    vectors = clustered(60, seed=4)
    index = MultiVectorIndex(DIM, HEADS)
    index.add(ids, vectors)
    truth = dict(zip(ids.tolist(), vectors, strict=True))
    query = clustered(1, seed=5)[0]
    kept = np.concatenate([ids[::3], [-5]])  # and an id the index never held

    def check(asked: np.ndarray = kept) -> None:
        known, scores, pairs = index.scores_where_known(query, asked, keep=True)
        assert known.tolist() == [int(i) in truth for i in asked]
        assert index.known(asked).tolist() == known.tolist()
        expected, expected_pairs = loop_kxk(query, np.stack([truth[int(i)] for i in asked[known]]))
        np.testing.assert_allclose(scores, expected, atol=1e-5)
        np.testing.assert_array_equal(pairs, expected_pairs)

    check()
    check()  # from what was kept
    replacement = clustered(1, seed=7)
    index.add([kept[0]], replacement)  # its vectors replaced
    truth[int(kept[0])] = replacement[0]
    check()
    index.remove([kept[1]])
    del truth[int(kept[1])]
    check()
    again = clustered(1, seed=6)
    index.add([kept[1]], again)
    truth[int(kept[1])] = again[0]
    check()
    gone = [int(i) for i in ids[1::3]]  # rows before most kept ones: the compaction moves every kept row
    index.remove(gone)
    for i in gone:
        del truth[i]
    index.rebuild()
    check()
    check(ids[2::3])  # another set kept in its place
    check()


@pytest.mark.parametrize("kind", ["ivf-flat", "hnsw-sq8", "hnsw+ivf"])  # IVF deletes, HNSW tombstones
def test_remove_and_replace_in_both_modes(library: tuple, kind: str) -> None:
    vectors, ids, queries, _ = library
    index = MultiVectorIndex(DIM, HEADS, params=KINDS[kind])
    index.add(ids[:300], vectors[:300])
    index.add(ids[300:], vectors[300:])  # crosses exact_limit: the faiss index is built
    assert index.approximate and len(index) == 3000
    top = index.search(queries[1], 10)[0]
    assert index.remove(np.append(top[:4], 123456)) == 4 and len(index) == 2996
    after = index.search(queries[1], 10)[0]
    assert not set(top[:4]) & set(after) and set(top[4:]) <= set(after)
    moved = top[4]  # re-adding an id replaces its vectors: now it matches the query's own vectors
    index.add([moved], queries[1][None])
    best_ids, best_scores, _ = index.search(queries[1], 1)
    assert best_ids[0] == moved and best_scores[0] == pytest.approx(1.0, abs=1e-5)
    assert np.allclose(index.get([moved])[0], queries[1] / np.linalg.norm(queries[1], axis=1, keepdims=True))
    assert moved in index and top[0] not in index and len(index) == 2996


def test_items_waiting_for_the_faiss_index_are_found(library: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    vectors, ids, _, _ = library
    index = MultiVectorIndex(DIM, HEADS, params=KINDS["hnsw"])
    index.add(ids[:1000], vectors[:1000])
    monkeypatch.setattr(backends, "HNSW_ADD_ITEMS", 16)  # new items join the graph 16 at a time
    seen = []
    real_add = backends.Ann.add

    def search_between_chunks(backend: backends.Ann, *args: np.ndarray) -> None:
        seen.append(index.search(vectors[1040], 1)[0][0])  # item 1040 is in the last chunk: still waiting
        real_add(backend, *args)

    monkeypatch.setattr(backends.Ann, "add", search_between_chunks)
    index.add(ids[1000:1048], vectors[1000:1048])
    assert seen == [ids[1040]] * 3
    assert index.describe()["approximate"]["indexed_upto"] == 1048


def test_size_changes_switch_between_exact_and_approximate(library: tuple) -> None:
    vectors, ids, queries, exact = library
    index = MultiVectorIndex(DIM, HEADS, params=SMALL)
    index.add(ids[:1000], vectors[:1000])
    first = index.describe()["approximate"]
    index.add(ids[1000:], vectors[1000:])  # grew past rebuild_growth x the trained size: retrained
    second = index.describe()["approximate"]
    assert first["trained_items"] == 1000 and second["trained_items"] == 3000
    assert second["nlist"] > first["nlist"]
    assert recall_at_10(index, exact, queries[:10]) >= 0.9
    index.remove(ids[150:])
    assert not index.approximate and set(index.ids()) == set(ids[:150])
    with pytest.raises(KeyError, match=str(ids[200])):
        index.get([ids[200]])


@pytest.mark.parametrize("kind", [None, "ivf-flat", "hnsw", "hnsw+ivf"])
def test_save_and_load_keep_results(library: tuple, tmp_path: Path, kind: str | None) -> None:
    vectors, ids, queries, _ = library
    count = 300 if kind is None else 3000
    index = MultiVectorIndex(DIM, HEADS, model_id="pvse-abc", params=KINDS[kind] if kind else SMALL)
    index.add(ids[:count], vectors[:count])
    index.remove(ids[:20])  # HNSW keeps tombstones: they must stay dead after a reload
    index.save(tmp_path / "index")
    loaded = MultiVectorIndex.load(tmp_path / "index", model_id="pvse-abc")
    assert len(loaded) == count - 20 and loaded.approximate == (kind is not None)
    for query in queries[:5]:
        for a, b in zip(index.search(query, 15), loaded.search(query, 15), strict=True):
            assert np.array_equal(a, b)
    loaded.add(ids[:20], vectors[:20])  # slots keep counting after a reload: no clash with dead labels
    assert set(loaded.search(vectors[3], 1)[0]) == {ids[3]}
    loaded.save(tmp_path / "index")
    names = sorted(p.name for p in (tmp_path / "index").iterdir())
    assert len(names) == 2 and names[1] == "index.json" and names[0].startswith("data-")
    assert len(MultiVectorIndex.load(tmp_path / "index")) == count
    if kind == "hnsw+ivf":  # the lists are a second file; without it the index is refused, by name
        (tmp_path / "index" / names[0] / backends.LISTS_FILE).unlink()
        with pytest.raises(IndexFileError, match="ann-lists.faiss"):
            MultiVectorIndex.load(tmp_path / "index")


def test_graph_and_lists_together_recall_what_clumps_of_near_copies_hide_from_the_graph() -> None:
    # 40 items each copied 75 times with small noise: HNSW's links stay inside the clumps, so a query that
    # enters the wrong clump cannot leave it; the IVF lists over the same vectors add the clumps near the query
    rng = np.random.default_rng(0)
    sources = rng.standard_normal((40, HEADS, DIM))
    vectors = (np.repeat(sources, 75, axis=0) + 0.25 * rng.standard_normal((3000, HEADS, DIM))).astype(np.float32)
    queries = rng.standard_normal((40, HEADS, DIM)).astype(np.float32)
    exact = MultiVectorIndex(DIM, HEADS, params=AnnParams(exact_limit=10**9))
    exact.add(ids_for(3000), vectors)
    recalls = {}
    for kind in ("hnsw-sq8", "hnsw+ivf"):
        index = MultiVectorIndex(DIM, HEADS, params=replace(KINDS["hnsw+ivf"], kind=kind, oversample=1))
        index.add(ids_for(3000), vectors)
        recalls[kind] = recall_at_10(index, exact, queries)
    assert recalls["hnsw-sq8"] < 0.92 and recalls["hnsw+ivf"] >= 0.93, recalls
    state = index.describe()["approximate"]
    assert state["graph_dim"] == DIM and state["nlist"] >= 16
    codes, structure = index._ann.nbytes()  # both halves are counted: 2 x 8-bit codes per vector
    assert codes == 2 * 3000 * HEADS * DIM and structure > 0


def test_load_refuses_another_model_or_a_damaged_folder(tmp_path: Path) -> None:
    index = MultiVectorIndex(DIM, HEADS, model_id="pvse-1")
    index.add(ids_for(5), clustered(5))
    index.save(tmp_path / "i")
    with pytest.raises(ModelMismatchError, match="pvse-1"):
        MultiVectorIndex.load(tmp_path / "i", model_id="pvse-2")
    header = json.loads((tmp_path / "i" / "index.json").read_text())
    data = tmp_path / "i" / header["data"]
    np.save(data / "ids.npy", np.array([{"a": 1}] * 5, dtype=object))  # pickled content is never loaded
    with pytest.raises(IndexFileError, match="ids.npy"):
        MultiVectorIndex.load(tmp_path / "i")
    (tmp_path / "i" / "index.json").write_text(json.dumps({**header, "version": 99}))
    with pytest.raises(IndexFileError, match="version"):
        MultiVectorIndex.load(tmp_path / "i")
    with pytest.raises(IndexFileError, match="index.json"):
        MultiVectorIndex.load(tmp_path / "missing")


def test_bad_input_is_named() -> None:
    index = MultiVectorIndex(DIM, HEADS)
    with pytest.raises(IndexInputError, match="vectors"):
        index.add(ids_for(2), np.zeros((2, HEADS, DIM + 1)))
    with pytest.raises(IndexInputError, match="twice"):
        index.add([1, 1], clustered(2))
    with pytest.raises(IndexInputError, match="NaN"):
        index.add([1], np.full((1, HEADS, DIM), np.nan))
    with pytest.raises(IndexInputError, match="query"):
        index.search(np.zeros((2, DIM - 1)), 3)
    with pytest.raises(IndexInputError, match="metric"):
        MultiVectorIndex(DIM, HEADS, metric="l2")
    with pytest.raises(IndexInputError, match="nprobe"):
        AnnParams(nprobe=0)
    assert [len(r[0]) for r in index.search_batch(clustered(2), 5)] == [0, 0]


def test_searches_run_while_one_writer_adds_and_removes(library: tuple) -> None:
    vectors, ids, queries, _ = library
    index = MultiVectorIndex(DIM, HEADS, params=SMALL)
    index.add(ids[:500], vectors[:500])
    errors: list[BaseException] = []
    seen: set[int] = set()
    done = threading.Event()

    def search() -> None:
        try:
            while not done.is_set():
                for result in index.search_batch(queries[:4], 10):
                    seen.update(result[0].tolist())
                    assert len(result[0]) == 10 and (np.diff(result[1]) <= 1e-6).all()
        except BaseException as exc:  # surfaced by the main thread's assert
            errors.append(exc)
            done.set()

    readers = [threading.Thread(target=search) for _ in range(2)]
    for reader in readers:
        reader.start()
    for start in range(500, 3000, 250):  # growth, retraining, removal, compaction under readers
        index.add(ids[start:start + 250], vectors[start:start + 250])
        index.remove(ids[start - 400:start - 200])
    done.set()
    for reader in readers:
        reader.join()
    assert not errors, errors
    assert seen <= set(ids.tolist()) and len(index) == 3000 - 10 * 200  # ten disjoint removals


def test_float16_storage_halves_the_vectors_and_keeps_the_ranking(library: tuple, tmp_path: Path) -> None:
    vectors, ids, queries, exact = library
    half = MultiVectorIndex(DIM, HEADS, params=KINDS["hnsw-sq8"], storage="float16")
    half.add(ids, vectors)
    assert half.storage == "float16" and half.get(ids[:2]).dtype == np.float32
    assert half.nbytes()["vectors"] * 2 == exact.nbytes()["vectors"] == 3000 * HEADS * DIM * 4
    for query in queries[:5]:
        got_ids, got_scores, got_pairs = half.search(query, 10, exact=True)
        want_ids, want_scores, _ = exact.search(query, 10)
        assert np.allclose(got_scores, want_scores, atol=2e-3)  # float16 rounding of the items only
        assert len(set(got_ids) & set(want_ids)) >= 9
        rows = (got_ids - 1000) // 7
        assert np.allclose(got_scores, kxk_scores(query, vectors[rows])[0], atol=2e-3)
    assert recall_at_10(half, exact, queries) >= 0.9
    half.save(tmp_path / "half")
    loaded = MultiVectorIndex.load(tmp_path / "half")
    assert loaded.storage == "float16" and np.array_equal(loaded.get(ids[:3]), half.get(ids[:3]))
    assert np.array_equal(loaded.search(queries[0], 10)[0], half.search(queries[0], 10)[0])


def test_storage_auto_picks_float16_for_wide_items_and_bad_storage_is_named() -> None:
    assert MultiVectorIndex(DIM, HEADS).storage == "float32"
    assert MultiVectorIndex(1024, 3).storage == "float16"  # PVSE's K=3 x D=1024: 6 GB instead of 12 per 1M
    assert MultiVectorIndex(1024, 3, storage="float32").storage == "float32"
    with pytest.raises(IndexInputError, match="storage"):
        MultiVectorIndex(DIM, HEADS, storage="int8")  # type: ignore[arg-type]


def test_exact_search_and_memory_report_of_an_approximate_index(library: tuple) -> None:
    vectors, ids, queries, exact = library
    index = MultiVectorIndex(DIM, HEADS, params=KINDS["hnsw-sq8"])
    index.add(ids, vectors)
    for query in queries[:3]:
        for a, b in zip(index.search(query, 10, exact=True), exact.search(query, 10), strict=True):
            assert np.array_equal(a, b)
    sizes = index.nbytes()
    assert sizes["ann_codes"] == 3000 * HEADS * DIM  # one byte per dimension (SQ8)
    assert sizes["ann_structure"] > 3000 * HEADS * 4 * 12  # at least the level-0 links (2M per vector)
    assert sizes["total"] == sum(v for k, v in sizes.items() if k != "total")
    assert exact.nbytes()["ann_codes"] == 0


def test_search_ef_grows_with_the_graph_and_covers_the_fetch() -> None:
    params = AnnParams(ef_search=512, ef_growth=1.0)
    assert search_ef(params, 1000, 120) == search_ef(params, backends.EF_BASE_VECTORS, 120) == 512
    assert search_ef(params, 10 * backends.EF_BASE_VECTORS, 120) == 1024  # one tenfold: doubled
    assert search_ef(params, 3_000_000, 2000) == 2000  # never below the number of vectors fetched
    assert search_ef(AnnParams(ef_search=64, ef_growth=0.0), 10**8, 30) == 64
    with pytest.raises(IndexInputError, match="ef_growth"):
        AnnParams(ef_growth=-1.0)


def test_principal_projection_keeps_inner_products_inside_the_subspace() -> None:
    rng = np.random.default_rng(3)
    basis = np.linalg.qr(rng.standard_normal((DIM, 6)))[0]  # 6 orthonormal directions of the 24
    sample = (rng.standard_normal((2000, 6)) * [5, 4, 3, 2, 1, 0.5]) @ basis.T + 0.01 * rng.standard_normal((2000, DIM))
    transform = backends.principal_projection(sample.astype(np.float32), 6)
    a, b = sample[:50].astype(np.float32), sample[50:100].astype(np.float32)
    projected = transform.apply(a) @ transform.apply(b).T
    assert np.allclose(projected, a @ b.T, atol=0.05)  # no centring: inner products survive, not shifted by a mean
    first = transform.apply(np.ascontiguousarray(basis[:, :1].T, dtype=np.float32))[0]
    assert abs(first[0]) > 0.99  # the largest-variance direction comes first


def test_wide_vectors_are_linked_in_their_principal_directions(tmp_path: Path) -> None:
    # like trained embeddings, the items vary mostly along a few directions (10 of 24 here, plus faint noise)
    rng = np.random.default_rng(11)
    basis = np.linalg.qr(rng.standard_normal((DIM, 10)))[0]
    low = clustered(4040, seed=12)[..., :10]
    vectors = (low @ basis.T + 0.02 * rng.standard_normal((4040, HEADS, DIM))).astype(np.float32)
    vectors, queries, ids = vectors[:4000], vectors[4000:], ids_for(4000)
    exact = MultiVectorIndex(DIM, HEADS, params=AnnParams(exact_limit=10**9))
    exact.add(ids, vectors)
    params = replace_params(KINDS["hnsw-sq8"], reduce_dim=12)
    index = MultiVectorIndex(DIM, HEADS, params=params)
    index.add(ids, vectors)
    assert index.describe()["approximate"]["graph_dim"] == 12
    assert recall_at_10(index, exact, queries) >= 0.9
    got_ids, got_scores, _ = index.search(queries[0], 10)
    want, _ = kxk_scores(queries[0], vectors[(got_ids - 1000) // 7])
    assert np.allclose(got_scores, want, atol=1e-5)  # scores come from the full vectors, not the projection
    codes = index.nbytes()["ann_codes"]
    assert codes == len(ids) * HEADS * 12  # 8-bit codes of the 12 projected coordinates
    index.save(tmp_path / "index")
    loaded = MultiVectorIndex.load(tmp_path / "index")
    assert loaded.describe()["approximate"]["graph_dim"] == 12
    for query in queries[:5]:
        for a, b in zip(index.search(query, 10), loaded.search(query, 10), strict=True):
            assert np.array_equal(a, b)
    full = MultiVectorIndex(DIM, HEADS, params=replace_params(KINDS["hnsw-sq8"], reduce_dim=0))
    full.add(ids[:3000], vectors[:3000])
    assert full.describe()["approximate"]["graph_dim"] == DIM  # 0 turns the reduction off


def replace_params(params: AnnParams, **changes: object) -> AnnParams:
    from dataclasses import replace
    return replace(params, **changes)


def test_reserving_room_first_makes_batched_adds_grow_the_arrays_once_and_changes_no_result():
    from engine.search.vectorindex import normalise

    rng = np.random.default_rng(3)
    vectors = normalise(rng.standard_normal((3000, 2, 16)).astype(np.float32))
    plain, reserved = MultiVectorIndex(16, 2), MultiVectorIndex(16, 2)
    reserved.reserve(3000)
    stored = reserved._data.vectors
    for lo in range(0, 3000, 256):
        ids = np.arange(lo, min(lo + 256, 3000))
        plain.add(ids, vectors[ids])
        reserved.add(ids, vectors[ids])
        assert reserved._data.vectors is stored  # no copy into a bigger array on the way
    query = normalise(rng.standard_normal((1, 16)).astype(np.float32))
    for a, b in zip(plain.search(query, top=20), reserved.search(query, top=20), strict=True):
        np.testing.assert_array_equal(a, b)
