"""Which of the inspector's word matches a person would accept (issue #44, point 4): a display floor chosen on data.

    python tests/bench/bench_word_floor.py --home DIR [--data ../shared/datasets] [--out bench-results/word-floor.json]

The inspector shows, for each word of a search, the ImageNet class among the item's regions that matches it best
and their MiniLM cosine (:func:`engine.search.readings.word_matches`); below the zero-shot ranking's floor (0.3) it
says nothing matches. Pairs such as "rug -> Pomeranian (0.38)" read as nonsense. On the 500 Flickr8k *train*
photos the starter held aside, each photo's own caption words (what people said it shows) are matched against its
regions, and as many words of other photos' captions that none of its own captions use (what it does not show).
For each floor: the share of the matches shown that come from the photo's own words (precision) and the share of
its own words that still get a match (recall). The inspector's floor is the lowest with precision >= 0.8.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

FLOORS = (0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "datasets")
    parser.add_argument("--out", type=Path, default=REPO / "bench-results" / "word-floor.json")
    args = parser.parse_args()
    from engine.features.regional import content_words
    from engine.search.readings import word_matches
    from tests.bench.bench_domains import domains, open_library, use_home

    if not use_home(args.home, args.data, starter=True):
        return 0
    images, files, caps = domains(args.data)["flickr8k-train-slice"]
    service = open_library(args.home, "flickr8k-train-slice", images, files)
    encoders = service.state.encoders
    by_name = {Path(m.path).name: m for m in service.state.catalog.iter_media()}
    rng = random.Random(0)
    vocabulary = sorted({w for f in files for c in caps[f] for w in content_words(c)})
    own_sims: list[float] = []
    other_sims: list[float] = []
    for f in files:
        record = service.state.features.get(by_name[f].content_hash, encoders.backbone.id)
        if record is None or record.region_top_ids is None:
            continue
        own = sorted({w for c in caps[f] for w in content_words(c)})
        others = [w for w in rng.sample(vocabulary, 4 * len(own)) if w not in own][:len(own)]
        for words, sink in ((own, own_sims), (others, other_sims)):
            matches = word_matches(words, record.region_top_ids, record.region_top_probs, encoders.class_names,
                                   encoders.class_embeddings, lambda ws: encoders.minilm.encode(ws).sentence)
            sink.extend(m.similarity for m in matches)
    service.close()
    own_a, other_a = np.array(own_sims), np.array(other_sims)
    rows = []
    for floor in FLOORS:
        shown_own, shown_other = int((own_a >= floor).sum()), int((other_a >= floor).sum())
        precision = shown_own / max(shown_own + shown_other, 1)
        rows.append({"floor": floor, "precision": round(precision, 3),
                     "own_words_matched": round(shown_own / len(own_a), 3), "shown_own": shown_own,
                     "shown_other": shown_other})
        print(json.dumps(rows[-1]), flush=True)
    chosen = next((r["floor"] for r in rows if r["precision"] >= 0.8), None)
    result = {"photos": len(files), "own_words": len(own_a), "other_words": len(other_a), "floors": rows,
              "chosen": chosen}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print("chosen", chosen)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
