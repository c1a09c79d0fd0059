"""The benchmark scripts name only what exists.

``benchmarks/*.py`` are run by hand (their figures are never asserted in tests), so a name
they import from ocihook, or from a sibling script, that a change renamed is found only when
someone runs them; many of their imports sit inside the functions that need them, where
``--help`` does not reach. Each ``import`` and ``from ... import`` anywhere in a script is
resolved here: the module imports and has every name taken from it.
"""

from __future__ import annotations

import ast
import importlib
import os
import sys

import pytest
from support import REPO

BENCHMARKS = os.path.join(REPO, "benchmarks")
SCRIPTS = sorted(f for f in os.listdir(BENCHMARKS) if f.endswith(".py"))


def _imports(path: str) -> list[tuple[str, tuple[str, ...], int]]:
    """``(module, names, line)`` of every import in the script at ``path``; ``names`` is
    empty for ``import module``."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    out: list[tuple[str, tuple[str, ...], int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, (), node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.append((node.module, tuple(a.name for a in node.names), node.lineno))
    return out


def test_there_are_benchmarks() -> None:
    assert "bench_toolkit.py" in SCRIPTS and len(SCRIPTS) >= 5, SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_name_a_benchmark_imports_exists(
    script: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Imports of ocihook and of the sibling scripts (``from bench_cost import ...``) only:
    the standard library's and the optional extras' are the environment's business."""
    monkeypatch.syspath_prepend(BENCHMARKS)
    siblings = {f[:-3] for f in SCRIPTS}
    missing = []
    for module, names, line in _imports(os.path.join(BENCHMARKS, script)):
        top = module.split(".")[0]
        if top != "ocihook" and top not in siblings:
            continue
        try:
            loaded = importlib.import_module(module)
        except ImportError as e:
            missing.append(f"{script}:{line}: import {module}: {e}")
            continue
        for name in names:
            if name == "*" or hasattr(loaded, name):
                continue
            try:  # a submodule: from ocihook import cdi
                importlib.import_module(f"{module}.{name}")
            except ImportError:
                missing.append(f"{script}:{line}: {module} has no {name}")
    for sibling in siblings:  # imported by the check, not by the suite
        sys.modules.pop(sibling, None)
    assert not missing, missing
