"""Pins of device-node discovery on real character devices made with ``mknod`` in a
temporary dev root: a present node is described by its own ``stat`` and keeps its mode and
owner when the driver's defaults are applied (only absent nodes get them); a node of
another number is refused."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ocihook.core.errors import DiscoveryError
from ocihook.core.hostroot import HostRoot
from ocihook.discovery.devices import device_node, with_driver_defaults

#: What ``NVreg_DeviceFileMode``/``UID``/``GID`` give when unset (nvidia.ko).
DRIVER_DEFAULTS = (0o666, 0, 0)


def _mknod(path: Path, major: int, minor: int, mode: int, gid: int) -> None:
    if os.geteuid() != 0:
        pytest.skip("mknod needs root")
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(major, minor))
    os.chown(path, 0, gid)
    os.chmod(path, mode)


@pytest.mark.parametrize("mode", [0o660, 0o640, 0o600, 0o664])
def test_present_node_keeps_its_own_mode_and_owner(tmp_path: Path, mode: int) -> None:
    _mknod(tmp_path / "dev/nvidia0", 195, 0, mode, 44)
    root = HostRoot(driver_root=str(tmp_path), dev_root=str(tmp_path))
    node = device_node(root, "/dev/nvidia0", 195, 0)
    assert (node.present, node.file_mode, node.uid, node.gid) == (True, mode, 0, 44)
    kept = with_driver_defaults(node, DRIVER_DEFAULTS)
    assert (kept.file_mode, kept.uid, kept.gid, kept.present) == (mode, 0, 44, True)
    assert kept == node


def test_absent_node_gets_the_driver_defaults(tmp_path: Path) -> None:
    root = HostRoot(driver_root=str(tmp_path), dev_root=str(tmp_path))
    node = device_node(root, "/dev/nvidia1", 195, 1)
    assert not node.present
    made = with_driver_defaults(node, (0o660, 0, 44))
    assert (made.file_mode, made.uid, made.gid, made.present) == (0o660, 0, 44, False)
    assert (made.major, made.minor, made.path) == (195, 1, "/dev/nvidia1")


def test_node_of_another_number_is_refused(tmp_path: Path) -> None:
    _mknod(tmp_path / "dev/nvidia0", 195, 7, 0o666, 0)
    root = HostRoot(driver_root=str(tmp_path), dev_root=str(tmp_path))
    with pytest.raises(DiscoveryError) as err:
        device_node(root, "/dev/nvidia0", 195, 0)
    assert err.value.value == "char 195:7"
    assert err.value.hint == "expected char 195:0; fix or remove the node"


@pytest.mark.parametrize(
    ("soname", "want"),
    [("../../../etc/libcuda.so.1", None), ("..", None), ("libcuda.so.1", "libcuda.so.1")],
)
def test_wsl_library_soname_that_is_a_path_is_dropped(
    tmp_path: Path, soname: str, want: str | None
) -> None:
    """A WSL2 driver-store library whose ``DT_SONAME`` (a real gcc-built library) is not a
    plain file name gets no soname (no link is made from it); a plain one is kept."""
    import shutil
    import subprocess

    from ocihook.discovery.nvidia import discover
    from ocihook.sim import wsl as simwsl

    if os.geteuid() != 0 or shutil.which("gcc") is None:
        pytest.skip("needs root (mknod /dev/dxg) and gcc")
    host = simwsl.build(str(tmp_path / "wsl"))
    src = tmp_path / "lib.c"
    src.write_text("int f(void) { return 1; }\n")
    lib = Path(host.store, "libcuda.so.1.1")
    lib.unlink()
    subprocess.run(
        ["gcc", "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", str(lib), str(src)], check=True
    )
    found = discover(HostRoot.single(host.root))
    assert found.wsl is not None
    files = {f.name: f.soname for f in found.wsl.driver_files}
    assert files["libcuda.so.1.1"] == want


def test_misc_node_keeps_its_own_mode_and_owner(tmp_path: Path) -> None:
    """A misc node (WSL2's ``/dev/dxg``, a real ``mknod``) is described by its own
    ``stat``: mode 0640 and group 44 as made, not a default."""
    from ocihook.discovery.nvidia import discover
    from ocihook.sim import wsl as simwsl

    if os.geteuid() != 0:
        pytest.skip("needs root (mknod /dev/dxg)")
    host = simwsl.build(str(tmp_path / "wsl"))
    dxg = Path(host.root, "dev/dxg")
    os.chown(dxg, 0, 44)
    os.chmod(dxg, 0o640)
    found = discover(HostRoot.single(host.root))
    assert found.wsl is not None
    node = found.wsl.dxg
    assert (node.file_mode, node.uid, node.gid, node.present) == (0o640, 0, 44, True)
    assert (node.major, node.minor) == (10, host.dxg_minor)
