"""``/dev/char/<major>:<minor>`` links for the NVIDIA device nodes (``ocihook system
create-dev-char-symlinks``, like the NVIDIA toolkit's ``nvidia-ctk system
create-dev-char-symlinks``).

Why: udev makes ``/dev/char/M:m`` for the nodes it creates, but the NVIDIA nodes are made
by ``nvidia-modprobe`` or by hand, outside udev, so the links are missing. runc's systemd
cgroup driver gives systemd a container's device rules as ``DeviceAllow=/dev/char/M:m``;
systemd resolves that path when it (re)applies the unit's device policy and silently drops a
rule whose path is missing. On ``systemctl daemon-reload`` (or anything that re-applies the
unit) the container loses its GPUs: "Failed to initialize NVML: Unknown Error". With the
links in place the rules survive.

Each link is relative (``../nvidia0``), as udev writes them; an existing link is left when
it already leads to a node with the same number, replaced when it is a link to something
else, and a non-link in the way is reported, never removed. With ``create_all`` the nodes
the host's procfs says should exist (each GPU's ``/dev/nvidia<minor>`` from
``/proc/driver/nvidia/gpus/*/information``, ``/dev/nvidiactl``, and ``/dev/nvidia-uvm``
and ``-tools`` when ``/proc/devices`` lists ``nvidia-uvm``) are created first (mode 0666,
root), as ``nvidia-modprobe`` would; only when ``/proc/devices`` lists the driver's major
(``nvidia``, ``nvidia-frontend`` before 550.40): without a loaded driver none is made,
and the report says so.
"""

from __future__ import annotations

import os
import stat

from ..core.errors import ApplyError
from ..core.hostroot import HostRoot

__all__ = ["create_dev_char_symlinks", "nvidia_char_nodes"]

#: Node names (under the dev root's ``dev/``) that are NVIDIA's.
_PREFIXES = ("nvidia", "nvidia-caps/", "nvidia-caps-imex-channels/")
#: Major of ``/dev/nvidia*`` (``nvidia.ko``'s fixed major).
NVIDIA_MAJOR = 195


def nvidia_char_nodes(dev_dir: str) -> list[tuple[str, int, int]]:
    """The NVIDIA character device nodes under ``dev_dir`` (``nvidia*`` and the files of
    ``nvidia-caps/`` and ``nvidia-caps-imex-channels/``; links are not followed) as
    ``(path relative to dev_dir, major, minor)``, sorted by path."""
    found: list[tuple[str, int, int]] = []
    candidates: list[str] = []
    try:
        names = os.listdir(dev_dir)
    except OSError as e:
        raise ApplyError(f"cannot list the device directory: {e.strerror}", path=dev_dir) from None
    for name in names:
        if not name.startswith("nvidia"):
            continue
        full = os.path.join(dev_dir, name)
        if name in ("nvidia-caps", "nvidia-caps-imex-channels") and os.path.isdir(full):
            try:  # noqa: SIM105 (contextlib is not worth importing here)
                candidates += [f"{name}/{n}" for n in os.listdir(full)]
            except OSError:
                pass
        else:
            candidates.append(name)
    for rel in candidates:
        try:
            st = os.lstat(os.path.join(dev_dir, rel))
        except OSError:
            continue
        if stat.S_ISCHR(st.st_mode):
            found.append((rel, os.major(st.st_rdev), os.minor(st.st_rdev)))
    return sorted(found)


def _wanted_nodes(root: HostRoot) -> list[tuple[str, int, int]]:
    """The nodes the host's procfs says should exist (see the module docstring)."""
    from ..discovery.gpus import read_gpus
    from ..discovery.procfs import parse_devices

    try:
        with open(root.proc("devices")) as f:
            majors = parse_devices(f.read())
    except OSError:
        majors = {}
    if "nvidia" not in majors and "nvidia-frontend" not in majors:
        return []  # no driver loaded: it reports no node
    gpus, _warnings = read_gpus(root)
    wanted = [(f"nvidia{g.minor}", NVIDIA_MAJOR, g.minor) for g in gpus]
    wanted.append(("nvidiactl", NVIDIA_MAJOR, 255))
    uvm = majors.get("nvidia-uvm")
    if uvm is not None:
        wanted += [("nvidia-uvm", uvm, 0), ("nvidia-uvm-tools", uvm, 1)]
    return wanted


def create_dev_char_symlinks(root: HostRoot, *, create_all: bool = False) -> list[str]:
    """Make ``<dev root>/dev/char/<major>:<minor>`` links for the NVIDIA nodes.

    Args:
        root: the host (its dev root's ``dev/`` is scanned and written; its procfs read
            for ``create_all``).
        create_all: create the missing nodes first (module docstring).

    Returns:
        One line per change or problem, e.g. ``created /dev/char/195:0 -> ../nvidia0``;
        a path in the way is reported as ``skipped ... (not a link)``.

    Raises:
        ApplyError: ``dev/`` cannot be listed, or a node or link cannot be created.
        DiscoveryError: ``create_all`` and the GPU information cannot be read.
    """
    dev_dir = root.dev("/dev")
    report: list[str] = []
    if not os.path.isdir(dev_dir):
        raise ApplyError(
            "the device directory does not exist", path=dev_dir, hint="check --dev-root"
        )
    if create_all:
        wanted = _wanted_nodes(root)
        if not wanted:
            report.append(
                f"created no node: {root.proc('devices')} lists no nvidia major (the NVIDIA "
                "driver is not loaded)"
            )
        for rel, major, minor in wanted:
            path = os.path.join(dev_dir, rel)
            if os.path.lexists(path):
                continue
            try:
                os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(major, minor))
                os.chmod(path, 0o666)
            except OSError as e:
                raise ApplyError(
                    f"cannot create the device node: {e.strerror}",
                    path=path,
                    hint="run as root on the host (mknod needs CAP_MKNOD)",
                ) from None
            report.append(f"created node {path} c {major}:{minor}")
    char_dir = os.path.join(dev_dir, "char")
    nodes = nvidia_char_nodes(dev_dir)
    if nodes:
        try:
            os.makedirs(char_dir, mode=0o755, exist_ok=True)
        except OSError as e:
            raise ApplyError(f"cannot create the directory: {e.strerror}", path=char_dir) from None
    for rel, major, minor in nodes:
        link = os.path.join(char_dir, f"{major}:{minor}")
        target = os.path.join("..", rel)
        try:
            st = os.lstat(link)
        except FileNotFoundError:
            st = None
        if st is not None and not stat.S_ISLNK(st.st_mode):
            report.append(f"skipped {link} (not a link)")
            continue
        if st is not None:
            try:
                there = os.stat(link)
                if stat.S_ISCHR(there.st_mode) and there.st_rdev == os.makedev(major, minor):
                    continue  # leads to the same device already
            except OSError:
                pass
        tmp = f"{link}.ocihook-{os.getpid()}"
        try:
            os.symlink(target, tmp)
            os.replace(tmp, link)
        except OSError as e:
            if os.path.lexists(tmp):
                os.unlink(tmp)
            raise ApplyError(f"cannot create the link: {e.strerror}", path=link) from None
        report.append(f"{'replaced' if st is not None else 'created'} {link} -> {target}")
    return report
