"""The test suite's own layout: test modules sit in tests/unit/<package>/, tests/realistic/,
tests/e2e/, tests/fuzz/ or tests/contract/, and share code only through the tests/support/
package (plain helpers, by topic) and tests/conftest.py (fixtures, which pytest passes in):
no test module imports another test module or conftest, no module sits directly in tests/
but conftest.py, and tests/support/ holds helpers only."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest
from support import TESTS

#: The folders directly under tests/ and what belongs in each.
FOLDERS = {
    "unit": "tests of one module or package, mirroring ocihook/",
    "realistic": "tests on the realistic 535.261.03 host (marked realistic)",
    "e2e": "end-to-end tests with real runtimes and engines (marked e2e)",
    "contract": "the public API, the README and the docs, the packaging, this layout",
    "fuzz": "the bounded fuzz and fault-injection campaign, its corpus (marked fuzz)",
    "doubles": "stand-ins for third-party modules (loaded by path)",
    "support": "the shared helpers, one module per topic (imported as ``support``)",
}
#: The only Python file directly in tests/.
TOP_LEVEL = {"conftest.py"}
#: The one package under tests/ (test folders have no ``__init__.py``).
SUPPORT = Path(TESTS, "support")


def _python_files() -> list[Path]:
    return sorted(p for p in Path(TESTS).rglob("*.py") if "__pycache__" not in p.parts)


def _test_module_names() -> set[str]:
    """Module names a test file could be imported as (its basename: tests run with
    rootdir-relative ``prepend`` imports, so every test folder is on sys.path)."""
    return {p.stem for p in _python_files() if p.name.startswith("test_")}


def imported_modules(source: str) -> list[tuple[int, str]]:
    """(line, top-level module name) of every import in ``source``, at any depth (imports
    inside functions too); relative imports are given as ``"."``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name.split(".")[0]) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            name = "." if node.level else (node.module or "").split(".")[0]
            found.append((node.lineno, name))
    return found


def forbidden_imports(source: str, test_modules: set[str]) -> list[tuple[int, str]]:
    """The imports in ``source`` of a test module, of conftest, or relative ones (the
    support package's modules import one another as ``support.<topic>``)."""
    return [
        (line, name)
        for line, name in imported_modules(source)
        if name in test_modules or name in ("conftest", ".") or name.startswith("test_")
    ]


def test_no_test_module_imports_another() -> None:
    test_modules = _test_module_names()
    bad = []
    for path in _python_files():
        for line, name in forbidden_imports(path.read_text(), test_modules):
            bad.append(f"{os.path.relpath(path, TESTS)}:{line} imports {name}")
    assert not bad, "move shared code to tests/support/ (fixtures: conftest.py):\n" + "\n".join(bad)


def test_support_holds_no_tests() -> None:
    """tests/support/ is a package of helpers: no test modules, no sub-folders."""
    names = sorted(p.name for p in SUPPORT.iterdir() if p.name != "__pycache__")
    assert "__init__.py" in names
    assert not [n for n in names if n.startswith("test_") or not n.endswith(".py")], names


def test_nothing_but_conftest_directly_in_tests() -> None:
    top = sorted(p.name for p in Path(TESTS).glob("*.py"))
    assert set(top) == TOP_LEVEL, f"put test modules in one of {sorted(FOLDERS)}: {top}"


def test_test_folders_are_the_known_ones() -> None:
    folders = {p.name for p in Path(TESTS).iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders <= set(FOLDERS), sorted(folders - set(FOLDERS))
    assert not list(Path(TESTS, "doubles").glob("test_*.py"))
    assert not list(SUPPORT.glob("test_*.py"))


def test_unit_folders_mirror_the_package() -> None:
    """Every folder under tests/unit/ names a package of ocihook/ (top-level modules'
    tests sit in tests/unit/ itself)."""
    package = Path(TESTS).parent / "ocihook"
    folders = [p for p in Path(TESTS, "unit").rglob("*") if p.is_dir() and p.name != "__pycache__"]
    missing = [
        str(p.relative_to(TESTS))
        for p in folders
        if not (package / p.relative_to(Path(TESTS, "unit"))).is_dir()
    ]
    assert not missing, f"no such package under ocihook/: {missing}"


def test_basenames_are_unique() -> None:
    """Test folders have no ``__init__.py`` (rootdir-relative imports), so two test files
    of the same name would clash at collection."""
    seen: dict[str, str] = {}
    clashes = []
    for path in _python_files():
        if path.name.startswith("test_"):
            rel = os.path.relpath(path, TESTS)
            if path.name in seen:
                clashes.append((seen[path.name], rel))
            seen[path.name] = rel
    assert not clashes
    assert [p for p in Path(TESTS).rglob("__init__.py")] == [SUPPORT / "__init__.py"]


@pytest.mark.parametrize(
    ("source", "want"),
    [
        ("from test_runtime_wrapper import Stage\n", [(1, "test_runtime_wrapper")]),
        ("import conftest\n", [(1, "conftest")]),
        ("def f():\n    from conftest import REPO\n", [(2, "conftest")]),
        ("from . import helpers\n", [(1, ".")]),
        ("import test_e2e_runc as runc\n", [(1, "test_e2e_runc")]),
        ("from support import REPO\nimport os\nfrom ocihook import config\n", []),
        ("import testing_helpers\n", []),
    ],
)
def test_forbidden_imports_are_found(source: str, want: list[tuple[int, str]]) -> None:
    """The check itself: it finds imports of test modules at any depth, and only those."""
    assert forbidden_imports(source, {"test_runtime_wrapper"}) == want
