"""The package's layers: every import (top-level, function-local and under ``TYPE_CHECKING``)
goes down the layer order, and the module graph has no cycle.

The order, lowest first, is :data:`LAYERS`; docs/development/layout.md says the same in
words. A module may import its own layer and the layers below it. Inside
``ocihook.discovery`` the GPU backends never import the aggregators that choose between them.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from support import REPO

PACKAGE = Path(REPO) / "ocihook"

#: Layers, lowest first: (name, module prefixes). A module belongs to the layer of the
#: longest prefix that matches it.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("core", ("ocihook.core",)),
    ("schemas", ("ocihook.schemas",)),
    ("linux", ("ocihook.linux",)),
    ("oci", ("ocihook.oci",)),
    ("discovery", ("ocihook.discovery",)),
    ("request", ("ocihook.request",)),
    ("config", ("ocihook.config", "ocihook.config.options")),
    ("plan", ("ocihook.plan",)),
    ("cdi", ("ocihook.cdi",)),
    ("pipeline", ("ocihook.pipeline",)),
    ("appliers", ("ocihook.appliers",)),
    ("sim", ("ocihook.sim",)),
    ("k8s", ("ocihook.k8s",)),
    ("engines", ("ocihook.engines",)),
    ("doctor", ("ocihook.doctor",)),
    ("commands", ("ocihook.commands",)),
    ("entry", ("ocihook._main", "ocihook.runtime", "ocihook.__main__", "ocihook")),
)

#: Discovery modules that aggregate backends, and the backends that must not import them.
AGGREGATORS = ("ocihook.discovery.nvidia", "ocihook.discovery.drm")
BACKENDS = (
    "ocihook.discovery.gpus",
    "ocihook.discovery.nvml",
    "ocihook.discovery.amd",
    "ocihook.discovery.intel",
)


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(Path(REPO)).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _package(module: str, path: Path) -> str:
    """The package relative imports of ``module`` (read from ``path``) start from."""
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _from_target(package: str, node: ast.ImportFrom) -> str:
    """The absolute module a ``from ... import`` in ``package`` names (``from ..core import
    x`` in ``ocihook.cdi`` -> ``ocihook.core``)."""
    if not node.level:
        return node.module or ""
    base = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(module: str, path: Path) -> set[str]:
    """Every ocihook module ``module`` imports, wherever the statement is."""
    package = _package(module, path)
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = _from_target(package, node)
            # ``from pkg import sub`` imports the submodule; ``from mod import name`` the module
            targets = [
                f"{target}.{a.name}" if f"{target}.{a.name}" in MODULES else target
                for a in node.names
            ]
        else:
            continue
        out.update(t for t in targets if t in MODULES and t != module)
    return out


GRAPH = {m: _imports(m, p) for m, p in MODULES.items()}


def layer_of(module: str) -> int:
    best = (-1, -1)
    for index, (_name, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if module == prefix or module.startswith(prefix + "."):
                best = max(best, (len(prefix), index))
    assert best[1] >= 0, f"{module} belongs to no layer: add it to LAYERS"
    return best[1]


def test_every_module_has_a_layer() -> None:
    assert len(MODULES) > 50
    for module in MODULES:
        layer_of(module)


def test_imports_go_down_the_layers() -> None:
    upward = sorted(
        f"{m} ({LAYERS[layer_of(m)][0]}) imports {t} ({LAYERS[layer_of(t)][0]})"
        for m, targets in GRAPH.items()
        for t in targets
        if layer_of(t) > layer_of(m)
    )
    assert upward == []


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path ``[a, b, ..., a]``, or ``None``."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_cycles() -> None:
    assert find_cycle(GRAPH) is None


def test_backends_never_import_the_aggregators() -> None:
    for backend in BACKENDS:
        assert not GRAPH[backend] & set(AGGREGATORS), backend


def test_core_is_stdlib_only() -> None:
    """``ocihook.core`` imports nothing of ocihook outside itself."""
    for module, targets in GRAPH.items():
        if module.startswith("ocihook.core"):
            assert all(t.startswith("ocihook.core") for t in targets), module


@pytest.mark.parametrize(
    ("graph", "cycle"),
    [
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]),
        ({"a": {"b"}, "b": set()}, None),
        ({"a": {"a"}}, ["a", "a"]),
    ],
)
def test_find_cycle_finds_them(graph: dict[str, set[str]], cycle: list[str] | None) -> None:
    assert find_cycle(graph) == cycle


def test_the_checker_sees_function_local_and_type_checking_imports(tmp_path: Path) -> None:
    """The reader counts imports inside functions and ``if TYPE_CHECKING:`` blocks."""
    src = tmp_path / "m.py"
    src.write_text(
        "TYPE_CHECKING = False\n"
        "if TYPE_CHECKING:\n    from .plan import Plan\n"
        "def f():\n    from .commands import cli\n    import ocihook.sim.host\n"
    )
    assert _imports("ocihook.runtime", src) == {
        "ocihook.plan",
        "ocihook.commands.cli",
        "ocihook.sim.host",
    }


def private_imports(module: str, path: Path) -> list[str]:
    """Each ``from <ocihook module> import _name`` of ``module`` (relative or absolute,
    wherever the statement is), as ``"module imports target._name"``; dunder names are
    allowed."""
    package = _package(module, path)
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ImportFrom):
            continue
        target = _from_target(package, node)
        if target != "ocihook" and not target.startswith("ocihook."):
            continue
        found.extend(
            f"{module} imports {target}.{a.name}"
            for a in node.names
            if a.name.startswith("_") and not (a.name.startswith("__") and a.name.endswith("__"))
        )
    return found


def test_no_private_names_imported_across_modules() -> None:
    """A name one module of ``ocihook/`` uses from another is public (no leading
    underscore): a helper's ``_`` promises that only its own module uses it."""
    assert [f for m, p in MODULES.items() for f in private_imports(m, p)] == []


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("from .spec import _version_tuple, load\n", ["ocihook.cdi.spec._version_tuple"]),
        ("def f():\n    from ocihook.sim.host import _write\n", ["ocihook.sim.host._write"]),
        ("from ..core import __version__\nfrom os import _exit\n", []),
    ],
)
def test_the_private_import_check_finds_them(source: str, found: list[str], tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text(source)
    assert private_imports("ocihook.cdi.m", src) == [f"ocihook.cdi.m imports {f}" for f in found]


#: Third-party modules only ocihook.k8s may import (the k8s extra).
K8S_ONLY = ("grpc", "google.protobuf", "google")


def _third_party(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.add(node.module)
    return out


def test_grpc_and_protobuf_only_in_k8s() -> None:
    """grpc and protobuf are imported by ocihook.k8s alone (never by the hook, ``edit``,
    the wrapper or any other command), and ocihook.k8s is imported only by the commands."""
    offenders = sorted(
        f"{m} imports {name}"
        for m, p in MODULES.items()
        if not m.startswith("ocihook.k8s")
        for name in _third_party(p)
        if any(name == k or name.startswith(k + ".") for k in K8S_ONLY)
    )
    assert offenders == []
    importers = sorted(
        m for m, targets in GRAPH.items() if not m.startswith("ocihook.k8s")
        if any(t.startswith("ocihook.k8s") for t in targets)
    )  # fmt: skip
    assert set(importers) <= {"ocihook.commands.cli_k8s"}, importers
    assert any(
        m.startswith("ocihook.k8s") and "grpc" in _third_party(p) for m, p in MODULES.items()
    )


#: What the top level of ``ocihook/`` may hold besides packages: the entry modules (engine
#: configurations and installed scripts name ``ocihook._main`` and ``ocihook.runtime``).
TOP_LEVEL_MODULES = {"__init__.py", "__main__.py", "_main.py", "runtime.py"}
#: The most lines a module of ``ocihook/`` may have.
MAX_MODULE_LINES = 1000


def test_top_level_holds_only_entry_modules_and_packages() -> None:
    """Each pipeline stage is a package; the top of ``ocihook/`` is the entry points."""
    loose = sorted(
        p.name for p in PACKAGE.iterdir() if p.suffix == ".py" and p.name not in TOP_LEVEL_MODULES
    )
    assert loose == []
    for child in PACKAGE.iterdir():
        if child.is_dir() and child.name != "__pycache__" and any(child.glob("*.py")):
            assert (child / "__init__.py").is_file(), f"{child.name}/ is not a package"


def test_no_module_is_over_the_line_limit() -> None:
    """No module of ``ocihook/`` is longer than :data:`MAX_MODULE_LINES` lines."""
    long = sorted(
        f"{m}: {n} lines"
        for m, p in MODULES.items()
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    )
    assert long == []


def cites_issue(text: str) -> bool:
    """Whether ``text`` (a comment or a string) names an issue by number ("issue 17")."""
    words = text.lower().replace("#", " ").split()
    return any(
        w.strip("\"'(") == "issue" and i + 1 < len(words)
        and words[i + 1].strip(",.;:)\"'").isdigit()
        for i, w in enumerate(words)
    )  # fmt: skip


def test_no_issue_numbers_in_comments() -> None:
    """Comments and docstrings of ``ocihook/`` describe the code as it is: none cites the
    issue a change came from."""
    import io
    import tokenize

    found = [
        f"{module}:{tok.start[0]}"
        for module, path in MODULES.items()
        for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
        if tok.type in (tokenize.COMMENT, tokenize.STRING) and cites_issue(tok.string)
    ]
    assert found == []


@pytest.mark.parametrize(
    ("text", "cites"),
    [
        ("# see issue 17, item 3", True),
        ('"""Issue 4."""', True),
        ("# an issue with 3 GPUs", False),
        ("# issue: none", False),
    ],
)
def test_the_issue_check_finds_them(text: str, cites: bool) -> None:
    assert cites_issue(text) is cites


def test_the_layout_page_lists_the_layers_in_this_order() -> None:
    """docs/development/layout.md's table names the layer folders in :data:`LAYERS`'
    order."""
    with open(Path(REPO) / "docs" / "development" / "layout.md", encoding="utf-8") as f:
        text = f.read()
    rows = re.findall(r"^\| `ocihook/(\w+)/` \|", text, re.M)
    assert rows == [name for name, _ in LAYERS if name != "entry"]
