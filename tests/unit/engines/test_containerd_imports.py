"""containerd ``imports``: one resolution (:func:`ocihook.engines.containerd.resolve_imports`,
Go's ``filepath.Glob``, imports followed from file to file) for both the reader doctor
uses and ``runtime configure``; held to containerd's own ``config dump`` when containerd
is installed."""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

from ocihook.core.errors import EngineConfigError
from ocihook.engines import configure, read_containerd
from ocihook.engines.containerd import (
    filepath_glob,
    filepath_match,
    load_imports,
    resolve_imports,
)

CRI = "io.containerd.grpc.v1.cri"
WRAPPER = "/opt/ocihook/bin/ocihook-runtime"


def containerd_imports(path: Path) -> list[str] | None:
    """The files containerd loads for ``path`` (``config dump``'s ``imports``, the main
    file among them), or ``None`` without containerd."""
    if shutil.which("containerd") is None:
        return None
    proc = subprocess.run(
        ["containerd", "--config", str(path), "config", "dump"],
        capture_output=True,
        text=True,
        cwd="/",
    )
    assert proc.returncode == 0, proc.stderr
    dump: dict[str, Any] = tomllib.loads(proc.stdout)
    return list(dump["imports"])


@pytest.mark.parametrize(
    ("pattern", "name", "matches"),
    [
        ("*.toml", ".hidden.toml", True),  # Go's * matches a leading dot; glob.glob's not
        ("*.toml", "a.toml.bak", False),
        ("a?c", "abc", True),
        ("a?c", "ac", False),
        ("[a-c]x", "bx", True),
        ("[^a-c]x", "bx", False),
        ("[^a-c]x", "dx", True),
        ("[c-a]", "b", False),  # a reversed range matches nothing
        ("\\*", "*", True),
        ("\\*", "a", False),
        ("[\\]]", "]", True),
        ("a.toml", "a.toml", True),
        ("a.toml", "aXtoml", False),
    ],
)
def test_filepath_match_is_gos(pattern: str, name: str, matches: bool) -> None:
    assert filepath_match(pattern, name) is matches


@pytest.mark.parametrize("pattern", ["[", "[]", "[a-]", "a\\", "[^"])
def test_filepath_match_refuses_bad_patterns(pattern: str) -> None:
    with pytest.raises(ValueError):
        filepath_match(pattern, "a")


def test_filepath_glob_sorts_per_directory_and_keeps_dot_files(tmp_path: Path) -> None:
    for d in ("b", "a", ".c"):
        (tmp_path / d).mkdir()
        for f in ("2.toml", "1.toml", ".0.toml", "x.txt"):
            (tmp_path / d / f).write_text("")
    got = filepath_glob(f"{tmp_path}/*/*.toml")
    want = [
        f"{tmp_path}/{d}/{f}" for d in (".c", "a", "b") for f in (".0.toml", "1.toml", "2.toml")
    ]
    assert got == want
    assert filepath_glob(f"{tmp_path}/a/1.toml") == [f"{tmp_path}/a/1.toml"]
    assert filepath_glob(f"{tmp_path}/a/none.toml") == []


def test_resolve_imports_against_the_given_path_under_a_root(tmp_path: Path) -> None:
    (tmp_path / "etc/containerd/conf.d").mkdir(parents=True)
    (tmp_path / "etc/containerd/conf.d/10.toml").write_text("")
    parent = str(tmp_path / "etc/containerd/config.toml")
    got = resolve_imports(
        parent,
        ["conf.d/*.toml", "//etc/containerd/conf.d/*.toml", "./x/../more.toml", "/abs.toml"],
        root=str(tmp_path),
    )
    assert got == [
        f"{tmp_path}/etc/containerd/conf.d/10.toml",
        f"{tmp_path}/etc/containerd/conf.d/10.toml",
        f"{tmp_path}/etc/containerd/more.toml",
        f"{tmp_path}/abs.toml",
    ]
    with pytest.raises(EngineConfigError) as e:
        resolve_imports(parent, ["conf.d/[*.toml"])
    assert e.value.field == "imports"


def _tree(tmp_path: Path) -> Path:
    """``etc/containerd/config.toml`` registering ocihook, whose imports bring in a hidden
    drop-in (matched by ``*`` in Go, not by :mod:`glob`) and a file that imports another:
    the nested one configures the CRI plugin. Imports are absolute, so containerd 1.x and
    2.x resolve them alike."""
    etc = tmp_path / "etc/containerd"
    (etc / "conf.d").mkdir(parents=True)
    (etc / "sub").mkdir()
    (etc / "config.toml").write_text(
        f'version = 2\nimports = ["{etc}/conf.d/*.toml", "{etc}/a.toml"]\n'
        f'[plugins."{CRI}".containerd.runtimes.ocihook]\n'
        'runtime_type = "io.containerd.runc.v2"\n'
        f'[plugins."{CRI}".containerd.runtimes.ocihook.options]\n'
        f'BinaryName = "{WRAPPER}"\n'
    )
    (etc / "conf.d/.10-mirror.toml").write_text(
        f'version = 2\n[plugins."{CRI}".containerd.runtimes.hidden]\n'
        'runtime_type = "io.containerd.runc.v2"\n'
        f'[plugins."{CRI}".containerd.runtimes.hidden.options]\n'
        'BinaryName = "/usr/bin/hidden-runtime"\n'
    )
    (etc / "a.toml").write_text(f'version = 2\nimports = ["{etc}/sub/b.toml"]\n')
    (etc / "sub/b.toml").write_text(
        f'version = 2\n[plugins."{CRI}".containerd]\ndefault_runtime_name = "runc"\n'
    )
    return etc / "config.toml"


def test_imports_as_containerd_loads_them(tmp_path: Path) -> None:
    """The hidden drop-in and the nested import are loaded, in containerd's order (the
    resolution :mod:`glob` and one level of imports missed both)."""
    path = _tree(tmp_path)
    etc = path.parent
    want = [f"{etc}/conf.d/.10-mirror.toml", f"{etc}/a.toml", f"{etc}/sub/b.toml"]
    names = [n for n, _doc in load_imports(str(path), tomllib.loads(path.read_text()))]
    assert names == want
    dumped = containerd_imports(path)
    if dumped is not None:  # containerd 1.x lists them from a Go map: in no fixed order
        assert sorted(dumped) == sorted([str(path), *want])


def test_reader_and_configurer_agree_on_the_imports(tmp_path: Path) -> None:
    """One file tree, read by doctor's reader (as a config root) and edited by
    ``runtime configure``: both follow the hidden drop-in and the nested import. The
    reader reports the hidden runtime and the default the nested file sets; the
    configurer refuses, naming the nested file that would undo the registration."""
    etc = tmp_path / "etc/containerd"
    (etc / "conf.d").mkdir(parents=True)
    (etc / "sub").mkdir()
    path = etc / "config.toml"
    path.write_text('version = 2\nimports = ["conf.d/*.toml", "a.toml"]\n')
    (etc / "conf.d/.10-mirror.toml").write_text(
        f'[plugins."{CRI}".containerd.runtimes.hidden.options]\n'
        'BinaryName = "/usr/bin/hidden-runtime"\n'
    )
    (etc / "a.toml").write_text('imports = ["sub/b.toml"]\n')
    (etc / "sub/b.toml").write_text(
        f'[plugins."{CRI}".containerd]\ndefault_runtime_name = "hidden"\n'
    )
    found = read_containerd(str(tmp_path))
    assert found.files == (
        str(path),
        f"{etc}/conf.d/.10-mirror.toml",
        f"{etc}/a.toml",
        f"{etc}/sub/b.toml",
    )
    assert [(r.name, r.default) for r in found.registrations] == [("hidden", True)]
    with pytest.raises(EngineConfigError) as e:
        configure("containerd", path=str(path), runtime_path=WRAPPER)
    assert e.value.field == "imports"
    assert f"{etc}/conf.d/.10-mirror.toml" in e.value.message
    (etc / "conf.d/.10-mirror.toml").write_text("")
    with pytest.raises(EngineConfigError) as e:
        configure("containerd", path=str(path), runtime_path=WRAPPER)
    assert f"{etc}/sub/b.toml" in e.value.message


def test_reader_under_a_config_root(tmp_path: Path) -> None:
    """Under a config root, absolute imports are read inside it: the hidden drop-in's
    runtime and the nested file's default are what the reader reports."""
    root = tmp_path / "root"
    etc = root / "etc/containerd"
    (etc / "conf.d").mkdir(parents=True)
    (etc / "config.toml").write_text(
        'version = 2\nimports = ["/etc/containerd/conf.d/*.toml", "a.toml"]\n'
        f'[plugins."{CRI}".containerd.runtimes.ocihook.options]\nBinaryName = "{WRAPPER}"\n'
    )
    (etc / "conf.d/.10-mirror.toml").write_text(
        f'[plugins."{CRI}".containerd.runtimes.hidden.options]\n'
        'BinaryName = "/usr/bin/hidden-runtime"\n'
    )
    (etc / "a.toml").write_text('imports = ["sub/b.toml"]\n')
    (etc / "sub").mkdir()
    (etc / "sub/b.toml").write_text(
        f'[plugins."{CRI}".containerd]\ndefault_runtime_name = "ocihook"\n'
    )
    found = read_containerd(str(root))
    assert found.files == (
        f"{etc}/config.toml",
        f"{etc}/conf.d/.10-mirror.toml",
        f"{etc}/a.toml",
        f"{etc}/sub/b.toml",
    )
    regs = {r.name: (r.path, r.default, r.file) for r in found.registrations}
    assert regs == {
        "ocihook": (WRAPPER, True, f"{etc}/config.toml"),
        "hidden": ("/usr/bin/hidden-runtime", False, f"{etc}/conf.d/.10-mirror.toml"),
    }
    assert found.facts is not None and found.facts["defaultRuntime"] == "ocihook"


def test_import_cycles_end(tmp_path: Path) -> None:
    """Files importing each other (and themselves) are each loaded once."""
    (tmp_path / "config.toml").write_text('imports = ["a.toml"]\n')
    (tmp_path / "a.toml").write_text('imports = ["config.toml", "a.toml", "b.toml"]\n')
    (tmp_path / "b.toml").write_text('imports = ["a.toml", "*.toml"]\n')
    path = tmp_path / "config.toml"
    names = [n for n, _d in load_imports(str(path), tomllib.loads(path.read_text()))]
    assert names == [str(tmp_path / "a.toml"), str(tmp_path / "b.toml")]
