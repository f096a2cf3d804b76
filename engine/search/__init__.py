"""Search: ranking a library for a query.

A trained model's ONNX export run on ONNX Runtime (``modelrunner``), per-model item embeddings and ranking
(``trained``), the multi-vector index (``vectorindex``) and, before any model is trained, the zero-shot ranking
by regional semantics (``zeroshot``). Imports ``engine.library`` and below.
"""
