"""A simulated WSL2 host: ``/dev/dxg``, ``/usr/lib/wsl/lib`` and the Windows driver store.

WSL2 has no NVIDIA kernel module in Linux: the GPU is the paravirtualised ``/dev/dxg``
(misc device ``dxg``, dynamic minor) and the user-space driver comes from the Windows
driver, mapped read-only into the distribution. :func:`build` writes, under one directory
(driver root and dev root):

* ``dev/dxg`` (char ``10:<minor>``, made with mknod when root) and ``proc/misc`` listing
  ``dxg`` with that minor, ``proc/devices`` (no ``nvidia`` major), ``proc/version`` of a
  WSL2 kernel; no ``proc/driver/nvidia``;
* ``usr/lib/wsl/lib/``: regular files (no links: WSL maps them from a Windows folder)
  ``libcuda.so``, ``libcuda.so.1``, ``libcuda.so.1.1``, ``libnvidia-ml.so.1``,
  ``libnvidia-ptxjitcompiler.so.1``, ``libdxcore.so``, ``libd3d12.so``,
  ``libd3d12core.so``, ``libnvwgf2umx.so``, ``nvidia-smi`` — tiny ELF files
  (:mod:`ocihook.sim.elfwrite`) with the real sonames;
* ``usr/lib/wsl/drivers/nv_dispi.inf_amd64_<hash>/``: the NVIDIA driver package with
  ``libcuda.so.1.1``, ``libcuda_loader.so``, ``libnvidia-ptxjitcompiler.so.1``,
  ``libnvidia-ml.so.1``, ``libnvidia-ml_loader.so``, ``libnvdxgdmal.so.1``,
  ``nvcubins.bin``, ``nvidia-smi`` and ``nv_dispi.inf`` (UTF-16 with a byte order mark,
  as Windows INF files are) whose ``DriverVer`` gives the Windows driver version; and a
  second package of another vendor's driver (``iigd_dch.inf_amd64_<hash>``) holding no
  NVIDIA file;
* ``etc/ld.so.conf.d/ld.wsl.conf`` and an ``etc/ld.so.cache`` listing the
  ``/usr/lib/wsl/lib`` libraries, as WSL distributions have.

Nothing outside the destination directory is touched.
"""

from __future__ import annotations

import os
import platform
import stat

from ..core.records import Record
from ..linux import ldcache
from .elfwrite import make_executable, make_shared_object

__all__ = ["DEFAULT_WINDOWS_VERSION", "DXG_MINOR", "STORE", "SimulatedWslHost", "build"]

#: The Windows version of the simulated driver; NVIDIA version 536.67.
DEFAULT_WINDOWS_VERSION = "31.0.15.3667"
#: The minor the simulated kernel gave ``dxg``.
DXG_MINOR = 125
#: The NVIDIA driver package's directory under ``/usr/lib/wsl/drivers``.
STORE = "nv_dispi.inf_amd64_7f2b9c4e5d1a3086"
_OTHER_STORE = "iigd_dch.inf_amd64_0d5e6f7a8b9c1234"

#: /usr/lib/wsl/lib: (file name, soname or None for no DT_SONAME, "" for an executable)
_LIB_FILES = (
    ("libcuda.so", "libcuda.so.1"),
    ("libcuda.so.1", "libcuda.so.1"),
    ("libcuda.so.1.1", "libcuda.so.1"),
    ("libnvidia-ml.so.1", "libnvidia-ml.so.1"),
    ("libnvidia-ptxjitcompiler.so.1", "libnvidia-ptxjitcompiler.so.1"),
    ("libdxcore.so", None),
    ("libd3d12.so", None),
    ("libd3d12core.so", None),
    ("libnvwgf2umx.so", None),
    ("nvidia-smi", ""),
)
#: The NVIDIA driver store (see :data:`ocihook.discovery.devices.WSL_DRIVER_STORE_FILES`).
_STORE_FILES = (
    ("libcuda.so.1.1", "libcuda.so.1"),
    ("libcuda_loader.so", "libcuda_loader.so"),
    ("libnvidia-ptxjitcompiler.so.1", "libnvidia-ptxjitcompiler.so.1"),
    ("libnvidia-ml.so.1", "libnvidia-ml.so.1"),
    ("libnvidia-ml_loader.so", "libnvidia-ml_loader.so"),
    ("libnvdxgdmal.so.1", "libnvdxgdmal.so.1"),
    ("nvidia-smi", ""),
)


class SimulatedWslHost(Record):
    """What :func:`build` made.

    Attributes:
        root: the tree (driver root and dev root).
        store: host path of the NVIDIA driver store directory.
        windows_version: the INF's ``DriverVer`` version (``31.0.15.3667``).
        driver_version: the NVIDIA version it stands for (``536.67``).
        dxg_minor: the minor of ``dev/dxg``.
        dev_nodes: whether ``dev/dxg`` was made.
    """

    root: str
    store: str
    windows_version: str
    driver_version: str
    dxg_minor: int
    dev_nodes: bool


def _write(path: str, data: bytes, mode: int = 0o644) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, mode)


def _elf(soname: str | None, machine: str) -> bytes:
    if soname == "":
        return make_executable(machine=machine)
    return make_shared_object(soname, machine=machine)


def _inf(windows_version: str) -> bytes:
    text = (
        "; nv_dispi.inf (ocihook simulated WSL2 host)\r\n"
        "[Version]\r\n"
        'Signature   = "$Windows NT$"\r\n'
        "Class       = Display\r\n"
        "ClassGUID   = {4d36e968-e325-11ce-bfc1-08002be10318}\r\n"
        "Provider    = %NVIDIA%\r\n"
        f"DriverVer   = 07/11/2023,{windows_version}\r\n"
        "CatalogFile = NV_DISP.CAT\r\n"
    )
    return b"\xff\xfe" + text.encode("utf-16-le")


def build(
    dest: str,
    *,
    windows_version: str = DEFAULT_WINDOWS_VERSION,
    make_dev_nodes: bool | None = None,
    machine: str | None = None,
    inf: bool = True,
) -> SimulatedWslHost:
    """Write a simulated WSL2 host under ``dest`` (created if missing).

    Args:
        dest: directory to fill; pass it as both driver root and dev root.
        windows_version: the Windows driver version in the INF's ``DriverVer``.
        make_dev_nodes: make ``dev/dxg`` with mknod; default: when root. Without it the
            tree is not a WSL2 host to discovery (``/dev/dxg`` is what makes one).
        machine: ``x86_64`` (default: this machine); WSL2 GPUs are x86_64 and aarch64.
        inf: write the driver store's ``nv_dispi.inf`` (``False``: a store without it,
            whose driver version discovery cannot tell).

    Returns:
        A :class:`SimulatedWslHost`.

    Raises:
        OSError: ``dest`` is not writable.
    """
    from ..discovery.devices import windows_to_nvidia_version

    machine = machine or platform.machine()
    if make_dev_nodes is None:
        make_dev_nodes = os.geteuid() == 0
    root = os.path.abspath(dest)
    os.makedirs(root, exist_ok=True)
    _write(
        os.path.join(root, "proc/version"),
        b"Linux version 5.15.153.1-microsoft-standard-WSL2 (root@ocihook-sim) "
        b"(gcc (GCC) 11.2.0, GNU ld (GNU Binutils) 2.37) #1 SMP\n",
        0o444,
    )
    _write(
        os.path.join(root, "proc/misc"),
        f"{DXG_MINOR} dxg\n183 hw_random\n229 fuse\n237 loop-control\n".encode(),
        0o444,
    )
    _write(
        os.path.join(root, "proc/devices"),
        b"Character devices:\n  1 mem\n  4 /dev/vc/0\n  4 tty\n  5 /dev/tty\n 10 misc\n"
        b"136 pts\n\nBlock devices:\n  7 loop\n  8 sd\n",
        0o444,
    )
    if make_dev_nodes:
        dxg = os.path.join(root, "dev/dxg")
        os.makedirs(os.path.dirname(dxg), exist_ok=True)
        if os.path.lexists(dxg):
            os.unlink(dxg)
        os.mknod(dxg, 0o666 | stat.S_IFCHR, os.makedev(10, DXG_MINOR))
        os.chmod(dxg, 0o666)
    lib = os.path.join(root, "usr/lib/wsl/lib")
    entries: list[ldcache.CacheEntry] = []
    for name, soname in _LIB_FILES:
        _write(os.path.join(lib, name), _elf(soname, machine), 0o555)
        if soname != "":
            entries.append(ldcache.CacheEntry(name, f"/usr/lib/wsl/lib/{name}", 0x0303))
    store = os.path.join(root, "usr/lib/wsl/drivers", STORE)
    for name, soname in _STORE_FILES:
        _write(os.path.join(store, name), _elf(soname, machine), 0o555)
    _write(os.path.join(store, "nvcubins.bin"), b"\x00ocihook-simulated-nvcubins\x00" * 8, 0o444)
    if inf:
        _write(os.path.join(store, "nv_dispi.inf"), _inf(windows_version), 0o444)
    _write(os.path.join(root, "usr/lib/wsl/drivers", _OTHER_STORE, "igdext64.dll"), b"MZ", 0o444)
    _write(os.path.join(root, "etc/ld.so.conf.d/ld.wsl.conf"), b"/usr/lib/wsl/lib\n")
    _write(os.path.join(root, "etc/ld.so.cache"), ldcache.build(entries))
    return SimulatedWslHost(
        root=root,
        store=store,
        windows_version=windows_version,
        driver_version=windows_to_nvidia_version(windows_version) or "",
        dxg_minor=DXG_MINOR,
        dev_nodes=make_dev_nodes,
    )
