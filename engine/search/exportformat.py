"""The format of a trained model's export folder: the contract between the trainer that writes it
(``trainer/methods/export.py``) and the engine that reads it (:mod:`engine.search.modelrunner`).

Kept in its own module, with no imports, so the trainer reads the same constants without loading ONNX Runtime.
"""

MANIFEST_FILE = "manifest.json"
MANIFEST_VERSION = 1
MODALITIES = ("image", "video", "text")
# a manifest's "similarity": how the engine ranks items with the export (RetrievalModel.similarity_kind)
SIMILARITY_KINDS = ("cosine", "max-cosine", "network")
# a probabilistic (PCME) manifest's "match_distance": what its match probability is computed from
MATCH_DISTANCES = ("sampled", "csd")
