"""core.lazy: a package's names loaded from its submodules on first use (PEP 562)."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import modules_after

from ocihook.core.lazy import lazy_exports


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A package ``lazypkg`` with submodules ``one`` (``A = 1``) and ``sub.two``
    (``B = 2``), on ``sys.path`` for one test."""
    root = tmp_path / "lazypkg"
    (root / "sub").mkdir(parents=True)
    (root / "__init__.py").write_text(
        "from ocihook.core.lazy import lazy_exports\n"
        "X = 0\n"
        "_EXPORTS = {'A': 'one', 'B': 'sub.two'}\n"
        "__all__ = ['A', 'B', 'X']\n"
        "__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__, globals())\n"
        "del lazy_exports\n"
    )
    (root / "one.py").write_text("A = 1\n")
    (root / "sub" / "__init__.py").write_text("")
    (root / "sub" / "two.py").write_text("B = 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "lazypkg"
    for name in [m for m in sys.modules if m == "lazypkg" or m.startswith("lazypkg.")]:
        del sys.modules[name]


def test_names_load_on_first_use_and_stay(package: str) -> None:
    pkg = __import__(package)
    assert "lazypkg.one" not in sys.modules and "lazypkg.sub.two" not in sys.modules
    assert pkg.A == 1
    assert "lazypkg.one" in sys.modules and "lazypkg.sub.two" not in sys.modules
    assert vars(pkg)["A"] == 1  # stored: __getattr__ is not asked again
    assert pkg.B == 2 and "lazypkg.sub.two" in sys.modules


def test_unknown_name_is_an_attribute_error(package: str) -> None:
    pkg = __import__(package)
    with pytest.raises(AttributeError, match=r"^module 'lazypkg' has no attribute 'nope'$"):
        pkg.nope  # noqa: B018
    assert not hasattr(pkg, "lazy_exports")


def test_dir_is_defined_and_public_names(package: str) -> None:
    pkg = __import__(package)
    names = dir(pkg)
    assert names == sorted(names)
    assert {"A", "B", "X", "_EXPORTS", "__all__"} <= set(names)
    assert "lazypkg.one" not in sys.modules  # dir() loads nothing


def test_getattr_and_dir_directly() -> None:
    namespace: dict[str, object] = {"Y": 3}
    getattr_, dir_ = lazy_exports("ocihook.core", {"HostRoot": "hostroot"}, ["HostRoot"], namespace)
    from ocihook.core.hostroot import HostRoot

    assert dir_() == ["HostRoot", "Y"]
    assert getattr_("HostRoot") is HostRoot and namespace["HostRoot"] is HostRoot
    with pytest.raises(AttributeError, match=r"'ocihook\.core' has no attribute 'Z'"):
        getattr_("Z")


def test_the_helper_imports_nothing() -> None:
    base = modules_after("pass")
    loaded = modules_after("import ocihook.core.lazy") - base
    assert loaded == {"ocihook", "ocihook.core", "ocihook.core.lazy"}


def test_packages_use_it() -> None:
    import ocihook
    import ocihook.appliers.live
    import ocihook.cdi

    for module in (ocihook, ocihook.cdi, ocihook.appliers.live):
        assert isinstance(module, types.ModuleType)
        assert module.__getattr__.__module__ == "ocihook.core.lazy"  # type: ignore[attr-defined]
        assert set(module.__all__) <= set(dir(module))
