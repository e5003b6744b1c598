"""The house's import rule (DESIGN §11), checked on the source: data flows one way.

``cli, server → client, runtime → agent, tasks → runtime.context → journal ← store.*``:
``journal/`` imports only ``_json``, ``_clock`` and ``errors``; ``agent/`` and ``tasks/`` never
import ``store/``; ``store/`` never imports ``agent/``, ``tasks/`` or ``runtime/``; nothing imports
the faces; ``app.py`` imports no runtime when it is imported.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "src" / "stead"


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, *, module_level_only: bool = False) -> set[str]:
    """Every stead module ``path`` imports (relative imports resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = _module(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    nodes = tree.body if module_level_only else list(ast.walk(tree))
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            # ``from X import Y``: Y is a module of X or a name in X; either way, X.Y names it
            found.update(f"{target}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name == "stead" or name.startswith("stead.")}


def _files(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py")) if folder else [ROOT / "app.py"]


def _violations(
    files: list[Path],
    allowed: tuple[str, ...] = (),
    forbidden: tuple[str, ...] = (),
    *,
    module_level_only: bool = False,
) -> list[str]:
    bad = []
    for path in files:
        for name in sorted(_imports(path, module_level_only=module_level_only)):
            if allowed and not any(name == a or name.startswith(a + ".") for a in allowed):
                bad.append(f"{path.relative_to(ROOT)} imports {name}")
            if any(name == f or name.startswith(f + ".") for f in forbidden):
                bad.append(f"{path.relative_to(ROOT)} imports {name}")
    return bad


def test_journal_imports_only_the_leaves() -> None:
    allowed = ("stead.journal", "stead._json", "stead._clock", "stead.errors")
    assert _violations(_files("journal"), allowed=allowed) == []


def test_journal_does_no_io() -> None:
    for path in _files("journal"):
        text = path.read_text(encoding="utf-8")
        for word in ("import asyncio", "import sqlite3", "import os", "await "):
            if word == "import asyncio" and path.name == "protocol.py":
                continue  # only to name the event loop type in a signature
            assert word not in text, f"{path.name} uses {word!r}"
        assert not re.search(r"(?<![\w.])open\(", text), f"{path.name} opens a file"


@pytest.mark.parametrize("folder", ["agent", "tasks"])
def test_definitions_never_import_the_stores(folder: str) -> None:
    if not (ROOT / folder).is_dir():
        pytest.skip(f"no {folder}/ yet")
    assert _violations(_files(folder), forbidden=("stead.store", "stead.cli", "stead.client")) == []
    runtime_doors = ("stead.runtime.context", "stead.runtime.control", "stead.runtime.definition")
    for path in _files(folder):
        for name in _imports(path):
            if name.startswith("stead.runtime") and name != "stead.runtime":
                assert name.startswith(runtime_doors), f"{path.name} imports {name}"


def test_agents_hold_no_sql() -> None:
    for path in _files("agent"):
        text = path.read_text(encoding="utf-8")
        for word in ("SELECT ", "INSERT ", "UPDATE ", "sqlite3", "SqliteTx"):
            assert word not in text, f"{path.name} holds {word!r}"


def test_stores_never_import_definitions_runtime_or_faces() -> None:
    forbidden = (
        "stead.agent",
        "stead.tasks",
        "stead.runtime",
        "stead.cli",
        "stead.client",
        "stead.app",
        "stead.handle",
    )
    assert _violations(_files("store"), forbidden=forbidden) == []


def test_nothing_imports_the_faces() -> None:
    faces = ("stead.cli", "stead.server")
    entry = ("cli", "server", "__main__.py")  # `python -m stead` is the command line itself
    others = [p for p in ROOT.rglob("*.py") if p.relative_to(ROOT).parts[0] not in entry]
    assert _violations(others, forbidden=faces) == []


def test_app_imports_no_runtime_when_imported() -> None:
    assert _violations(_files(""), forbidden=("stead.runtime",), module_level_only=True) == []


def test_no_function_outside_the_stores_takes_a_sqlite_type() -> None:
    for path in ROOT.rglob("*.py"):
        if path.relative_to(ROOT).parts[0] in ("store",):
            continue
        text = path.read_text(encoding="utf-8")
        assert "SqliteTx" not in text, f"{path.relative_to(ROOT)} names SqliteTx"
        assert "import sqlite3" not in text, f"{path.relative_to(ROOT)} imports sqlite3"


def test_the_runtime_module_is_a_thin_composition() -> None:
    lines = (ROOT / "runtime" / "runtime.py").read_text(encoding="utf-8").count("\n")
    assert lines < 400, f"runtime/runtime.py has {lines} lines"
