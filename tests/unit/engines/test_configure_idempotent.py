"""``ocihook runtime configure`` twice is ``configure`` once, byte for byte, for every
engine file layout: the second run reports the file unchanged. containerd's CRI table
without a ``containerd`` sub-table (indented as ``containerd config default`` writes, or
empty) was re-indented on every run (tomlkit does not give back the bytes it read for a
table whose parents are implied under an indented header)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from support import run_cli

from ocihook.core.errors import EngineConfigError
from ocihook.engines import CONTAINERD_PLUGINS, configure_containerd

WRAPPER = "/opt/ocihook/bin/ocihook-runtime"
V2 = CONTAINERD_PLUGINS[2]
V3 = CONTAINERD_PLUGINS[3]

#: containerd files whose CRI table has no ``containerd`` sub-table (and simpler ones).
LAYOUTS = {
    "v2-empty-cri": f'version = 2\n[plugins."{V2}"]\n',
    "v3-empty-cri": f'version = 3\n[plugins."{V3}"]\n',
    "v2-indented-cri": f'version = 2\n[plugins]\n  [plugins."{V2}"]\n    sandbox_image = "x"\n',
    "v2-indented-empty-cri": f'version = 2\n[plugins]\n  [plugins."{V2}"]\n',
    "v2-default-like": (
        f'version = 2\n\n[plugins]\n\n  [plugins."{V2}"]\n    sandbox_image = "x"\n\n'
        f'    [plugins."{V2}".cni]\n      bin_dir = "/opt/cni/bin"\n'
    ),
    "v3-default-like": (
        f'version = 3\n\n[plugins]\n\n  [plugins."{V3}"]\n    enable_selinux = false\n\n'
        f'    [plugins."{V3}".cni]\n      bin_dir = "/opt/cni/bin"\n'
    ),
    "v2-only": "version = 2\n",
    "empty": "",
}
#: Layouts ocihook refuses (exit 13, the file untouched): tables on its path written with
#: dotted keys or inline.
REFUSED = {
    "v2-dotted-containerd-key": f'version = 2\n[plugins."{V2}"]\ncontainerd.snapshotter = "o"\n',
    "v2-inline-plugins": "version = 2\nplugins = {}\n",
}


def runtimes(text: str, version: int) -> dict[str, object]:
    cri = tomllib.loads(text)["plugins"][CONTAINERD_PLUGINS[version]]
    out: dict[str, object] = cri["containerd"]["runtimes"]
    return out


@pytest.mark.parametrize("cdi", [False, True])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_containerd_configure_twice_is_once(layout: str, cdi: bool) -> None:
    before = LAYOUTS[layout].encode()
    kwargs = {"path": "c", "runtime_path": WRAPPER, "cdi": cdi, "set_as_default": cdi}
    once, notes = configure_containerd(before, **kwargs)  # type: ignore[arg-type]
    assert once != before and notes
    version = 3 if layout.startswith("v3") else 2
    ours = runtimes(once.decode(), version)["ocihook"]
    assert ours == {"runtime_type": "io.containerd.runc.v2", "options": {"BinaryName": WRAPPER}}
    twice, again = configure_containerd(once, **kwargs)  # type: ignore[arg-type]
    assert twice == once, twice.decode()
    assert again == ()


@pytest.mark.parametrize("layout", sorted(REFUSED))
def test_containerd_refused_layouts_stay_refused(layout: str) -> None:
    with pytest.raises(EngineConfigError):
        configure_containerd(REFUSED[layout].encode(), path="c", runtime_path=WRAPPER)


def test_containerd_cli_second_run_is_unchanged(tmp_path: Path) -> None:
    """The reported case: each run said ``updated`` and indented the table deeper."""
    path = tmp_path / "config.toml"
    path.write_text(LAYOUTS["v2-default-like"])
    args = ("runtime", "configure", "--runtime", "containerd", "--config", str(path))
    proc = run_cli(*args, "--runtime-path", WRAPPER)
    assert proc.returncode == 0 and "updated" in proc.stderr, proc.stderr
    once = path.read_bytes()
    for _ in range(2):
        proc = run_cli(*args, "--runtime-path", WRAPPER)
        assert proc.returncode == 0 and "already configured" in proc.stderr, proc.stderr
        assert path.read_bytes() == once
