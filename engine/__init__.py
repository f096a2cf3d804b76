"""Polyseek's search engine: media decoding, features (ONNX Runtime), catalog, index, search.

Nothing in this package imports Qt or torch; the GUI and the CLI both talk to it.
"""
