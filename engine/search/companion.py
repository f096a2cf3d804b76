"""A model's companion: a second trained model that ships beside it and is searched with it (issue #42).

The shipped starter is a VSE model (K = 1): one vector per item, no attention heads to show. Its companion is a
PVSE model (K heads, PIE-Net) trained on the same data. A model folder names its companion in
``companion.json`` (``{"folder": "companion"}``, relative to the model folder or absolute); the library embeds
every item with both, the companion's score is one more dense source of the one ranking
(:data:`engine.search.evidence.COMPANION`, taking :data:`engine.search.evidence.COMPANION_SHARE` of the trained
models' weight), and the inspector shows the companion's heads where the model itself has none
(:func:`engine.search.explanation.explain_item`). Two differently built models ranking together also rank better
than either: docs/benchmarks.md, "A PVSE starter".

A companion may name its own (``companion.json`` in its folder, ``"role": "uncertainty"``): the shipped one names a
probabilistic model (PCME), searched beside both as a further dense source
(:data:`engine.search.evidence.PROBABILISTIC`) whose sigma the inspector reads as the item's and the query's
uncertainty. One companion deep: the model, its companion, and the companion's.

A retrain warm-starts the active model and, when the companion ships its trainer weights, the companion too, into
the new model's own ``companion`` folder (:data:`COMPANION_DIR`), which the same activation rule judges
(:mod:`engine.loop.retrain`); a companion without weights, or one the rule turns down, is kept as it is
(:func:`carry_companion`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from engine.files import atomic_write_bytes

log = logging.getLogger(__name__)

COMPANION_FILE = "companion.json"
COMPANION_DIR = "companion"  # where a model folder keeps a companion of its own (the shipped starter's, a retrain's)


@dataclass(frozen=True)
class CompanionSpec:
    """Where a model's companion lives, and what it is for (``role``: "heads", the shipped PVSE model's;
    "uncertainty", the probabilistic model beside it), which names it in a library."""

    folder: Path
    role: str = "heads"

    def registered_name(self, model_name: str) -> str:
        """The companion's name in a library's model list, beside the model it serves."""
        return f"{model_name} {self.role}"


def read_companion(model_dir: Path | str) -> CompanionSpec | None:
    """The companion ``model_dir`` names, or None: no ``companion.json``, or one that cannot be read (logged; the
    model then searches alone, as before it had one)."""
    model_dir = Path(model_dir)
    file = model_dir / COMPANION_FILE
    if not file.is_file():
        return None
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
        folder = Path(str(data["folder"])).expanduser()
        role = data.get("role", "heads")
        if not isinstance(role, str) or not role.strip():
            raise TypeError(f"role {role!r} is not a name")
        role = role.strip()
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        log.warning("%s cannot be read (%s): the model searches without its companion", file, exc)
        return None
    if not folder.is_absolute():
        folder = model_dir / folder
    return CompanionSpec(folder.resolve(), role)


def write_companion(model_dir: Path, spec: CompanionSpec) -> None:
    """Record ``spec`` as ``model_dir``'s companion: a folder inside ``model_dir`` by its relative path (the two are
    copied together), another by its absolute path (the model may be copied elsewhere)."""
    folder, model_dir = Path(spec.folder).resolve(), Path(model_dir).resolve()
    named = folder.relative_to(model_dir) if folder.is_relative_to(model_dir) else folder
    record = {"folder": str(named), **({"role": spec.role} if spec.role != "heads" else {})}
    text = json.dumps(record, indent=2) + "\n"
    atomic_write_bytes(Path(model_dir) / COMPANION_FILE, text.encode("utf-8"))


def carry_companion(start_dir: Path | str | None, new_dir: Path) -> bool:
    """A retrained model keeps the companion of the model it started from (``start_dir``) as it is, when the
    companion was not retrained with it or its retrain was turned down: without one the new version would rank
    worse than its start. True if one was carried."""
    if start_dir is None:
        return False
    spec = read_companion(start_dir)
    if spec is None or not spec.folder.is_dir():
        return False
    write_companion(new_dir, spec)
    return True
