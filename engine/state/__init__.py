"""What one opened library holds, shared by the workspace's parts and the library loop's jobs
(:class:`LibraryState`, :mod:`.librarystate`), and its model list (:mod:`.models`)."""

from engine.state.librarystate import LibraryState

__all__ = ["LibraryState"]
