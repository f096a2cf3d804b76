"""The library loop's defaults, spelt once: the CLI's options and the GUI's training form show them before the loop
itself is loaded (this module imports nothing)."""

DEFAULT_HOLDOUT = 0.2  # share of the annotated items held aside to compare the old and the new model
# A3VSE learns from a few annotated items plus many un-annotated ones, which is what a library holds: the method
# of a retrain with no active trained model to continue (zero-shot ranking) or a named start
DEFAULT_METHOD = "a3vse"
