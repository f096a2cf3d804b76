"""``SearchService``: index, search, explain, annotate and the models of one library (:mod:`.searchservice`; its
models: :mod:`.models`)."""

from engine.service.searchservice import USER_PAIR_LABELS, SearchService

__all__ = ["USER_PAIR_LABELS", "SearchService"]
