"""The S3 modules import one way only: s3 -> s3stream, s3multipart -> s3conn.

Imports are read from the source with ``ast``, including those under ``TYPE_CHECKING``: a
cycle hidden there is still one (mypy follows it, and it comes back as soon as a name is
needed at run time). Each S3 module is also imported first in a fresh interpreter.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

import compactor.objectstore

SOURCE = Path(compactor.objectstore.__file__).parent
PACKAGE = "compactor.objectstore"
_ABSOLUTE = (f"{PACKAGE}.", "objectstore.")


def package_modules(source: Path) -> set[str]:
    return {p.stem for p in source.glob("*.py") if p.stem != "__init__"}


def package_imports(source: Path, module: str) -> set[str]:
    """The package's modules that ``module``'s source imports, anywhere in the file."""
    names: set[str] = set()
    for node in ast.walk(ast.parse((source / f"{module}.py").read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module is None:  # from . import x
                names.update(alias.name for alias in node.names)
            else:
                names.add(node.module.partition(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            dotted = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            names.update(_in_package(dotted))
        elif isinstance(node, ast.Import):
            names.update(_in_package(alias.name for alias in node.names))
    return names & package_modules(source)


def _in_package(dotted: Iterable[str]) -> set[str]:
    """``compactor.objectstore.x[.y]`` (or ``objectstore.x``) -> ``x``; other names dropped."""
    return {
        name.removeprefix(prefix).partition(".")[0]
        for name in dotted
        for prefix in _ABSOLUTE
        if name.startswith(prefix)
    }


def import_cycle(source: Path) -> list[str] | None:
    """One import cycle among the package's modules (first module repeated last), or None."""
    graph = {m: package_imports(source, m) for m in sorted(package_modules(source))}
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> list[str] | None:
        if module in path:
            return path[path.index(module) :] + [module]
        if module in done:
            return None
        for imported in sorted(graph[module]):
            cycle = visit(imported, path + [module])
            if cycle is not None:
                return cycle
        done.add(module)
        return None

    for module in graph:
        cycle = visit(module, [])
        if cycle is not None:
            return cycle
    return None


def test_no_import_cycle_in_objectstore() -> None:
    assert import_cycle(SOURCE) is None


@pytest.mark.parametrize("module", ["s3stream", "s3multipart"])
def test_stream_and_writer_import_the_connection_not_the_store(module: str) -> None:
    imported = package_imports(SOURCE, module)
    assert "s3" not in imported
    assert "s3conn" in imported


def test_connection_imports_no_other_s3_module() -> None:
    assert package_imports(SOURCE, "s3conn").isdisjoint({"s3", "s3stream", "s3multipart"})


@pytest.mark.parametrize("module", ["s3conn", "s3stream", "s3multipart", "s3"])
def test_imports_first_in_a_fresh_interpreter(module: str) -> None:
    program = (
        "import importlib, sys\n"
        f"importlib.import_module('{PACKAGE}.{module}')\n"
        f"print('{PACKAGE}.s3' in sys.modules)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == str(module == "s3")
