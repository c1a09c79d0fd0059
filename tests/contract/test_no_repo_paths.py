"""No message ocihook prints names a path only a source checkout has.

A wheel user has the installed package (its data under ``ocihook/schemas/``), the commands
and their ``--help``, and the README (the package's long description) — not the
repository's ``packaging/``, ``specs/``, ``fixtures/``, ``scripts/``, ``tests/`` or
``benchmarks/``. Every string literal in ``ocihook/`` except docstrings (which document the
source, for its readers) is scanned: error messages, hints, warnings, help texts.
"""

from __future__ import annotations

import ast
import os
import re

from support import REPO

#: Top-level folders of the repository that are not in the wheel.
REPO_ONLY = ("packaging", "specs", "fixtures", "scripts", "tests", "benchmarks", ".ci")
#: One of them used as a relative path: at the start of a word, not inside a host path
#: such as ``/usr/share/.../packaging/``.
PATTERN = re.compile(r"(?<![\w/.-])(?:" + "|".join(map(re.escape, REPO_ONLY)) + r")/")


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the Constant nodes that are docstrings (module, class, function)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                out.add(id(body[0].value))
    return out


def repo_paths_in(source: str, filename: str = "<source>") -> list[str]:
    """``file:line: text`` of each non-docstring string literal naming a repository-only
    path (f-string parts included)."""
    tree = ast.parse(source, filename)
    skip = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in skip
            and PATTERN.search(node.value)
        ):
            found.append(f"{filename}:{node.lineno}: {node.value!r}")
    return found


def test_the_scanner_finds_a_reintroduced_hint() -> None:
    """The scanner catches the hints this test was written against, plain, implicitly
    concatenated and inside an f-string, and leaves docstrings and host paths alone."""
    bad = '''
def f(path):
    """Docstrings may cite packaging/README.md and specs/x.json for source readers."""
    raise ConfigError("invalid TOML", hint="see packaging/config.toml.example for the syntax")
print("register the hook with an explicit env (see packaging/), " "as variables ...")
msg = f"{path}: see specs/config.schema.json"
ok = "/usr/share/doc/ocihook/packaging/README.md and ~/tests/"
'''
    found = repo_paths_in(bad)
    assert sorted(int(line.split(":")[1]) for line in found) == [4, 5, 6], found


def test_no_message_names_a_repository_path() -> None:
    package = os.path.join(REPO, "ocihook")
    found: list[str] = []
    scanned = 0
    for dirpath, dirnames, filenames in os.walk(package):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for name in sorted(filenames):
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8") as f:
                    found += repo_paths_in(f.read(), os.path.relpath(path, REPO))
                scanned += 1
    assert scanned > 40  # the whole package, not an empty walk
    assert not found, "messages that name repository paths a wheel user lacks:\n" + "\n".join(found)
