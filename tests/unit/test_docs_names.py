"""Every file and Python name the documentation cites exists (issue #45: docs true to the code).

What is checked, in README.md and every docs/*.md:

1. **Paths.** Every word inside backticks (an inline span, or a line of a fenced code block) that starts with
   one of the repository's top-level folders or files (``engine/``, ``tests/``, ``bench-results/``,
   ``pyproject.toml``, ...) must be a file or folder of the repository. A word with a placeholder in it
   (``*``, ``{``, ``<``, ``DIR``, ``NAME``) is skipped.
2. **Partial paths and bare file names.** A word with a ``/`` that ends in ``.py`` or ``.sh`` must be the end of
   a repository path (``methods/export.py``); a bare ``name.py`` or ``name.sh`` must be the name of a
   repository file.
3. **Dotted Python names.** An inline span that is a dotted name (``engine.search.ranking``,
   ``evidence.fuse``, ``Search.text``, a trailing ``()`` allowed) whose first part names one of
   our modules (the full dotted path from ``engine``, ``trainer``, ``app``, or a module's own name such as
   ``evidence``) or one of our top-level classes (``Search``) must resolve, part by part, in one of
   them. A first part that names none of these (``model.safetensors``, ``torch.load``) is not ours and is
   skipped.

Names are resolved from the source with ``ast``, never by importing it, so the test loads neither torch
(the trainer) nor Qt (the app). A module's names are what it defines or imports at top level; a class's are
what its body defines, the ``self.x`` it assigns, and the same of its bases that are our classes.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = ["README.md", *sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("*.md"))]
PACKAGES = ("engine", "trainer", "app")
TOP_LEVEL = ("app/", "engine/", "trainer/", "tests/", "tools/", "resources/", "installer/", "docs/",
             "bench-results/", ".ci/", "README.md", "pyproject.toml")
PLACEHOLDERS = ("*", "{", "<", "DIR", "NAME", "...")
FILE_SUFFIXES = {"py", "sh", "md", "json", "jsonl", "sqlite", "safetensors", "onnx", "txt", "csv", "ini", "png", "yaml"}
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
DOTTED = re.compile(r"([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?:\(\))?")


def _spans(text: str) -> tuple[list[str], list[str]]:
    """The inline backtick spans outside fenced blocks, and the lines of the fenced blocks."""
    fenced = [line for block in FENCE.findall(text) for line in block.splitlines()[1:-1]]
    inline = re.findall(r"`([^`\n]+)`", FENCE.sub("", text))
    return inline, fenced


def _words(span: str) -> list[str]:
    """A span's words without the punctuation around them (and a test's ``::name`` after its file)."""
    return [re.sub(r"[.,;:)\]'\"]+$", "", re.sub(r"^[(\['\"]+", "", w.split("::")[0])) for w in span.split()]


@functools.cache
def _files() -> tuple[str, ...]:
    skip = {".venv", ".git", "__pycache__", "node_modules"}
    return tuple(p.relative_to(REPO).as_posix() for p in REPO.rglob("*")
                 if p.is_file() and not skip & set(p.relative_to(REPO).parts))


def _missing_path(word: str) -> bool:
    if any(mark in word for mark in PLACEHOLDERS) or word.startswith(("../", "/", "~", "http")):
        return False
    if word.startswith(TOP_LEVEL):
        return not (REPO / word.rstrip("/")).exists()
    if word.endswith((".py", ".sh")):
        if "/" in word:
            return not any(f.endswith("/" + word) for f in _files())
        return word not in {f.rsplit("/", 1)[-1] for f in _files()}
    return False


@pytest.mark.parametrize("doc", DOCS)
def test_every_cited_path_exists(doc: str):
    inline, fenced = _spans((REPO / doc).read_text(encoding="utf-8"))
    words = {w for span in inline + fenced for w in _words(span)}
    missing = sorted(w for w in words if _missing_path(w))
    assert not missing, f"{doc} cites files that do not exist: {missing}"


# --- Python names, from the source ---------------------------------------------------------------------


def _module_name(path: str) -> str:
    return path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


@functools.cache
def _modules() -> dict[str, Path]:
    """Every module of engine/, trainer/ and app/ by its dotted name."""
    return {_module_name(f): REPO / f for f in _files() if f.startswith(PACKAGES) and f.endswith(".py")}


@functools.cache
def _tree(module: str) -> ast.Module:
    return ast.parse(_modules()[module].read_text(encoding="utf-8"))


def _assigned(node: ast.stmt) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
        node, (ast.AnnAssign, ast.AugAssign)) else []
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def _top_level(body: list[ast.stmt]) -> dict[str, ast.stmt]:
    """The names a body defines, including those under ``if`` / ``try`` at its top."""
    names: dict[str, ast.stmt] = {}
    for node in body:
        for name in _assigned(node):
            names[name] = node
        for inner in ("body", "orelse", "finalbody"):
            if isinstance(node, (ast.If, ast.Try)):
                names.update(_top_level(getattr(node, inner, [])))
        if isinstance(node, ast.Try):
            for handler in node.handlers:
                names.update(_top_level(handler.body))
    return names


@functools.cache
def _classes() -> dict[str, list[tuple[str, ast.ClassDef]]]:
    """Every top-level class of our modules by its name: (module, definition)."""
    found: dict[str, list[tuple[str, ast.ClassDef]]] = {}
    for module in _modules():
        for node in _tree(module).body:
            if isinstance(node, ast.ClassDef):
                found.setdefault(node.name, []).append((module, node))
    return found


def _class_has(cls: ast.ClassDef, name: str, seen: frozenset[str] = frozenset()) -> bool:
    if name in _top_level(cls.body):
        return True
    for node in ast.walk(cls):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"
                and node.attr == name and isinstance(node.ctx, ast.Store)):
            return True
    bases = {b.id if isinstance(b, ast.Name) else b.attr for b in cls.bases if isinstance(b, (ast.Name, ast.Attribute))}
    return any(_class_has(base, name, seen | {cls.name}) for base_name in bases - seen
               for _, base in _classes().get(base_name, []))


def _imported_from(module: str, name: str) -> str | None:
    """The dotted module a top-level ``from X import name`` of ``module`` takes ``name`` from."""
    node = _top_level(_tree(module).body).get(name)
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        return f"{node.module}.{name}"
    if isinstance(node, ast.Import):
        return next((a.name for a in node.names if (a.asname or a.name.split(".")[0]) == name), None)
    return None


def _resolves_in(module: str, parts: list[str]) -> bool:
    """Whether ``parts`` name something in ``module``: a sub-module, a top-level name, a class member."""
    if not parts:
        return True
    head, rest = parts[0], parts[1:]
    if f"{module}.{head}" in _modules():
        return _resolves_in(f"{module}.{head}", rest)
    node = _top_level(_tree(module).body).get(head)
    if node is None:
        return False
    if not rest:
        return True
    if isinstance(node, ast.ClassDef):
        return _class_resolves(node, rest)
    source = _imported_from(module, head)
    return source is not None and _resolves_dotted(source.split(".") + rest)


def _class_resolves(cls: ast.ClassDef, parts: list[str]) -> bool:
    """The first part must be a member; further parts are followed only into a nested class."""
    if not _class_has(cls, parts[0]):
        return False
    nested = [n for n in cls.body if isinstance(n, ast.ClassDef) and n.name == parts[0]]
    return len(parts) == 1 or not nested or _class_resolves(nested[0], parts[1:])


def _resolves_dotted(parts: list[str]) -> bool:
    """A full dotted name from a package of ours (or any module: True when it is not ours)."""
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        if module in _modules():
            return _resolves_in(module, parts[cut:])
    return parts[0] not in PACKAGES


def _ours(parts: list[str]) -> list[list[str]]:
    """The ways a cited dotted name can be read as ours, each a full dotted path; empty when it is not ours."""
    if parts[-1] in FILE_SUFFIXES:
        return []
    if parts[0] in PACKAGES:
        return [parts]
    readings = [m.split(".") + parts[1:] for m in _modules() if m.rsplit(".", 1)[-1] == parts[0]]
    readings += [m.split(".") + parts for m, _ in _classes().get(parts[0], [])]
    return readings


@pytest.mark.parametrize("doc", DOCS)
def test_every_cited_python_name_resolves(doc: str):
    inline, _ = _spans((REPO / doc).read_text(encoding="utf-8"))
    cited = {m.group(1) for span in inline if (m := DOTTED.fullmatch(span.strip()))}
    missing = sorted(name for name in cited
                     if (readings := _ours(name.split("."))) and not any(_resolves_dotted(r) for r in readings))
    assert not missing, f"{doc} cites Python names that do not exist: {missing}"


def test_the_checks_catch_a_missing_name():
    """The rules above fail on a name that is not there (so a test that passes is not vacuous)."""
    assert _missing_path("engine/search/nothere.py") and _missing_path("bench-results/nothere.json")
    assert not _missing_path("engine/search/ranking.py") and not _missing_path("bench-results/")
    assert _resolves_dotted("engine.search.ranking.rank_sentence".split("."))
    assert not _resolves_dotted("engine.search.ranking.nothere".split("."))
    assert any(_resolves_dotted(r) for r in _ours(["Models", "switch"]))
    assert not any(_resolves_dotted(r) for r in _ours(["Models", "nothere"]))
    assert not _ours(["model", "safetensors"])
