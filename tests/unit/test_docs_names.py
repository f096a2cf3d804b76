"""Every file and Python name the documentation cites exists (issue #45: docs true to the code).

A backticked ``something.py`` must be a file of the repository (its path, or its name when given bare); a
backticked dotted name under ``engine``, ``trainer`` or ``app`` must import and resolve attribute by attribute.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = ["README.md", "docs/architecture.md", "docs/contributing.md", "docs/benchmarks.md"]
SKIP = {".venv", ".git", "node_modules"}


def _repository_files() -> list[str]:
    return [p.relative_to(REPO).as_posix() for p in REPO.rglob("*.py") if not SKIP & set(p.parts)]


@pytest.mark.parametrize("doc", DOCS)
def test_every_cited_python_file_exists(doc: str):
    files = _repository_files()
    names = {f.rsplit("/", 1)[-1] for f in files}
    cited = set(re.findall(r"`([^`\s]+\.py)`", (REPO / doc).read_text(encoding="utf-8")))
    missing = [c for c in sorted(cited)
               if not (any(f.endswith(c) for f in files) if "/" in c else c in names)]
    assert not missing, f"{doc} cites files that do not exist: {missing}"


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(found, attribute):
                return False
            found = getattr(found, attribute)
        return True
    return False


@pytest.mark.parametrize("doc", DOCS)
def test_every_cited_python_name_resolves(doc: str):
    text = (REPO / doc).read_text(encoding="utf-8")
    cited = set(re.findall(r"`((?:engine|trainer|app)(?:\.[A-Za-z_]\w*)+)`", text))
    missing = [c for c in sorted(cited) if not _resolves(c)]
    assert not missing, f"{doc} cites names that do not exist: {missing}"
