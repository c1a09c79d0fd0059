"""Simulated hosts whose driver lives in a tree of its own, without an ``ld.so.cache``.

Three layouts the NVIDIA toolkit supports and a plain ``ld.so.cache`` search misses:

``cos``
    GKE on Container-Optimized OS: the driver installer puts the user-space driver under
    ``/home/kubernetes/bin/nvidia`` with ``lib64/`` (versioned libraries and their soname
    links) and ``bin/`` (``nvidia-smi``, ...); the tree has no ``etc/ld.so.cache`` and the
    host's own cache does not list it. Driver root ``<dest>/home/kubernetes/bin/nvidia``.
``driver-container``
    The GPU operator's driver container: a distribution tree at ``/run/nvidia/driver``
    with the libraries in ``usr/lib/<triplet>`` and binaries in ``usr/bin``, its
    ``ld.so.cache`` not (yet) written. Driver root ``<dest>/run/nvidia/driver``.
``usr-local-nvidia``
    The driver mounted at ``/usr/local/nvidia`` (``lib64/``, ``bin/``), as on the GPU
    machines this project is checked on; the host's own ``/etc/ld.so.cache`` lists
    ``/usr/local/nvidia/lib64``, so the default driver root (``<dest>``) finds it too.
    Driver root ``<dest>/usr/local/nvidia`` (or ``<dest>``).

In each, ``<dest>`` is the dev root: the simulated host's procfs, sysfs and (as root)
device nodes from :func:`ocihook.sim.host.build`, without that host's own driver libraries
and cache. Nothing outside ``dest`` is touched.
"""

from __future__ import annotations

import os
import platform
import shutil

from ..core.records import Record
from ..linux import ldcache
from . import host as simhost
from .elfwrite import make_executable, make_shared_object

__all__ = ["LAYOUTS", "DriverTreeHost", "build"]

#: layout -> (driver root, library directory, binary directory), each relative to ``dest``
#: and the last two in driver-root terms.
LAYOUTS: dict[str, tuple[str, str, str]] = {
    "cos": ("home/kubernetes/bin/nvidia", "/lib64", "/bin"),
    "driver-container": ("run/nvidia/driver", "/usr/lib/{triplet}", "/usr/bin"),
    "usr-local-nvidia": ("usr/local/nvidia", "/lib64", "/bin"),
}
#: (soname or None, file stem) of the libraries each tree holds.
_LIBRARIES = (
    ("libnvidia-ml.so.1", "libnvidia-ml.so"),
    ("libcuda.so.1", "libcuda.so"),
    ("libnvidia-ptxjitcompiler.so.1", "libnvidia-ptxjitcompiler.so"),
    ("libnvidia-nvvm.so.4", "libnvidia-nvvm.so"),
    (None, "libnvidia-gpucomp.so"),
)
_BINARIES = ("nvidia-smi", "nvidia-debugdump")


class DriverTreeHost(Record):
    """What :func:`build` made.

    Attributes:
        root: the dev root (``<dest>``): procfs, sysfs, ``dev/``.
        driver_root: where the driver tree is (``<dest>/home/kubernetes/bin/nvidia``).
        layout: a key of :data:`LAYOUTS`.
        libdir: the library directory in driver-root terms (``/lib64``).
        bindir: the binary directory in driver-root terms (``/bin``).
        driver_version: ``"550.127.05"``.
        gpus: the simulated GPUs.
        dev_nodes: whether ``dev/`` nodes were made.
    """

    root: str
    driver_root: str
    layout: str
    libdir: str
    bindir: str
    driver_version: str
    gpus: tuple[simhost.SimulatedGpu, ...]
    dev_nodes: bool


def _write(path: str, data: bytes, mode: int = 0o644) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, mode)


def build(
    dest: str,
    layout: str = "cos",
    *,
    gpus: int = 2,
    driver_version: str = simhost.DEFAULT_DRIVER_VERSION,
    make_dev_nodes: bool | None = None,
    machine: str | None = None,
) -> DriverTreeHost:
    """Write a host with its driver in the tree of ``layout`` under ``dest``.

    Args:
        dest: directory to fill (created if missing); the dev root.
        layout: ``"cos"``, ``"driver-container"`` or ``"usr-local-nvidia"``
            (:data:`LAYOUTS`).
        gpus: number of GPUs, 1 to 8.
        driver_version: the version in procfs and the library names.
        make_dev_nodes: make ``dev/`` nodes (default: when root).
        machine: ``x86_64`` or ``aarch64`` (default: this machine).

    Returns:
        A :class:`DriverTreeHost`.

    Raises:
        ValueError: an unknown layout, or what :func:`ocihook.sim.host.build` refuses.
        OSError: ``dest`` is not writable.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, not {layout!r}")
    machine = machine or platform.machine()
    base = simhost.build(
        dest,
        gpus=gpus,
        driver_version=driver_version,
        make_dev_nodes=make_dev_nodes,
        machine=machine,
    )
    root = base.root
    # the simulated host's own driver libraries and cache go: the driver is in the tree
    shutil.rmtree(os.path.join(root, base.libdir.lstrip("/")))
    bits32 = simhost._MACHINES32.get(machine)
    if bits32 is not None:  # and its 32-bit ones
        shutil.rmtree(os.path.join(root, "usr/lib", bits32[1]), ignore_errors=True)
    shutil.rmtree(os.path.join(root, "etc"))
    rel_root, libdir, bindir = LAYOUTS[layout]
    libdir = libdir.format(triplet=base.libdir.rsplit("/", 1)[-1])
    driver_root = os.path.join(root, rel_root)
    host_libdir = os.path.join(driver_root, libdir.lstrip("/"))
    entries: list[ldcache.CacheEntry] = []
    for soname, stem in _LIBRARIES:
        name = f"{stem}.{driver_version}"
        _write(
            os.path.join(host_libdir, name),
            make_shared_object(soname or name, elf_class=64, machine=machine),
        )
        if soname is not None:
            os.symlink(name, os.path.join(host_libdir, soname))
        entries.append(
            ldcache.CacheEntry(
                soname or name, f"/{rel_root}{libdir}/{soname or name}", simhost._ABI_FLAGS[machine]
            )
        )
    for name in _BINARIES:
        _write(
            os.path.join(driver_root, bindir.lstrip("/"), name),
            make_executable(machine=machine),
            0o755,
        )
    if layout == "usr-local-nvidia":
        # the host's own cache lists /usr/local/nvidia/lib64 (ldconfig with it in
        # /etc/ld.so.conf.d): the default driver root finds the driver through it
        os.makedirs(os.path.join(root, "etc/ld.so.conf.d"))
        with open(os.path.join(root, "etc/ld.so.conf.d/nvidia.conf"), "w") as f:
            f.write(f"/{rel_root}{libdir}\n")
        _write(os.path.join(root, "etc/ld.so.cache"), ldcache.build(entries))
    return DriverTreeHost(
        root=root,
        driver_root=driver_root,
        layout=layout,
        libdir=libdir,
        bindir=bindir,
        driver_version=driver_version,
        gpus=base.gpus,
        dev_nodes=base.dev_nodes,
    )
