"""The library loop: annotations -> training set -> trainer -> a new model compared with the active one.

The training set with its fixed held-aside split (``trainingset``), annotation import and export
(``annotations``), evaluation (``evaluate``), the figure a model is shown by (``figures``), what to annotate next
(``active``, ``suggest``), two models measured the same way (``compare``) and the activation rule (``gate``), the
trainer process (``trainerprocess``) and the retraining job (``retrain``). It sits above the opened
library's shared state and takes it directly (:class:`engine.state.LibraryState`: catalog, feature store, encoders,
the model list of :mod:`engine.state.models`); it decides, and never switches the library to a model:
:mod:`engine.workspace` offers its jobs to the CLI and the GUI and switches (``Workspace.models``).
"""
