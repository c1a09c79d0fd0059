"""Layer 1, **host**: the kernel module and driver version, the GPUs, the device nodes,
the persistence daemon, the CUDA version the driver supports and every driver library
(see :mod:`ocihook.doctor`).
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from typing import Any

from ..core.errors import OcihookError
from ..core.hostroot import HostRoot
from ..engines.common import read_text_if_regular
from .context import Context
from .cuda import SOURCE_WORDS, cuda_for_driver
from .report import Check

__all__ = ["check_driver_libraries", "check_host", "libcuda_driver_version"]


#: Run in a child process: load libcuda (argv[1]) and call cuDriverGetVersion.
_CUDA_VERSION_CHILD = (
    "import ctypes,sys\n"
    "lib=ctypes.CDLL(sys.argv[1])\n"
    "v=ctypes.c_int(0)\n"
    "r=lib.cuDriverGetVersion(ctypes.byref(v))\n"
    "print(r, v.value)\n"
)


def libcuda_driver_version(path: str, timeout: float = 15.0) -> tuple[str | None, str]:
    """The CUDA version ``libcuda`` at ``path`` reports with ``cuDriverGetVersion`` (no GPU
    needed), called in a child process of this interpreter (a crash or hang of the driver
    library cannot take doctor down; killed after ``timeout`` seconds).

    Returns:
        ``("12.2", "")`` or ``(None, why)``.
    """
    try:
        proc = subprocess.run(
            [sys.executable, "-I", "-c", _CUDA_VERSION_CHILD, path],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return None, f"cuDriverGetVersion did not return within {timeout:g} s"
    if proc.returncode != 0:
        status = (
            f"killed by signal {-proc.returncode}"
            if proc.returncode < 0
            else f"exit {proc.returncode}"
        )
        last = (proc.stderr.strip().splitlines() or [status])[-1]
        return None, f"cannot load {path}: {last}"
    parts = proc.stdout.split()
    if len(parts) != 2 or parts[0] != "0" or not parts[1].isdigit() or int(parts[1]) <= 0:
        return None, f"cuDriverGetVersion returned {proc.stdout.strip()!r}"
    v = int(parts[1])
    return f"{v // 1000}.{(v % 1000) // 10}", ""


def _module_check(root: HostRoot) -> tuple[Check, str | None]:
    from ..discovery.procfs import parse_driver_version

    path = root.proc("driver/nvidia/version")
    text = read_text_if_regular(path)
    if text is None:
        return (
            Check(
                "host",
                "kernel module",
                "FAIL",
                f"{path} does not exist: the NVIDIA kernel module is not loaded",
                "load it (modprobe nvidia; install the NVIDIA driver first if it is missing); "
                "with a driver container, pass its dev root (--dev-root)",
            ),
            None,
        )
    try:
        version = parse_driver_version(text, path=path)
    except OcihookError as exc:
        return Check("host", "kernel module", "FAIL", str(exc), "reinstall the driver"), None
    modules = read_text_if_regular(root.proc("modules"))
    loaded = "not checked: no /proc/modules under the dev root"
    if modules is not None:
        names = {line.split(" ", 1)[0] for line in modules.splitlines() if line}
        ours = [m for m in ("nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm") if m in names]
        loaded = "/proc/modules lists " + (", ".join(ours) or "no nvidia module")
        if "nvidia" not in names:
            return (
                Check(
                    "host",
                    "kernel module",
                    "FAIL",
                    f"{path} reads {version} but {loaded}",
                    "reload the driver: modprobe nvidia",
                ),
                version,
            )
    flavour = "open" if "Open Kernel Module" in text else "proprietary"
    return (
        Check("host", "kernel module", "PASS", f"driver {version} ({flavour} module); {loaded}"),
        version,
    )


def _gpus_check(host: Any) -> Check:
    gpus = host.gpus
    if not gpus:
        return Check(
            "host",
            "GPUs",
            "FAIL",
            f"the driver lists no GPU in {host.root.proc('driver/nvidia/gpus')}",
            "check dmesg for Xid errors or a GPU that fell off the bus; nvidia-smi -q",
        )
    listed = "; ".join(
        f"{g.index}: {g.model} {g.uuid} {g.bus_id}"
        + (f" MIG {len(g.mig_devices)} devices" if g.mig_devices else "")
        for g in gpus
    )
    return Check("host", "GPUs", "PASS", f"{len(gpus)} GPU(s) ({host.gpu_backend}): {listed}")


def _device_mode(root: HostRoot) -> int:
    params = read_text_if_regular(root.proc("driver/nvidia/params")) or ""
    for line in params.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "DeviceFileMode" and value.strip().isdigit():
            return int(value.strip())
    return 0o666


def _nodes_check(host: Any) -> Check:
    want_mode = _device_mode(host.root)
    nodes = [*host.control_nodes, *host.gpu_nodes.values()]
    missing = [n.host_path for n in nodes if not n.present]
    odd = [
        f"{n.host_path} mode {n.file_mode & 0o7777:04o}"
        for n in nodes
        if n.present and (n.file_mode & 0o777) != want_mode
    ]
    listed = ", ".join(f"{n.path} {n.major}:{n.minor}" for n in nodes)
    problems = []
    fix = ""
    if "nvidia-uvm" not in host.majors:
        problems.append("nvidia-uvm is not loaded: CUDA cannot run")
        fix = "modprobe nvidia-uvm (nvidia-modprobe -u -c0 also creates its nodes)"
    if missing:
        problems.append("missing: " + ", ".join(missing))
        fix = fix or "create them: nvidia-modprobe -u -c0 (or run nvidia-smi once as root)"
    if odd:
        problems.append(
            f"mode differs from the driver's DeviceFileMode {want_mode:04o}: " + ", ".join(odd)
        )
        fix = fix or f"chmod {want_mode:04o} the nodes (or fix the udev rule that changed them)"
    if problems:
        return Check("host", "device nodes", "WARN", f"{listed}; " + "; ".join(problems), fix)
    return Check(
        "host", "device nodes", "PASS", f"{listed}: character devices, mode {want_mode:04o}"
    )


def _persistenced_check(root: HostRoot) -> Check:
    from ..linux.pathsafe import resolve_in_root

    found = []
    for base in dict.fromkeys((root.driver_root, root.dev_root)):
        try:
            sock = resolve_in_root(base, "/var/run/nvidia-persistenced/socket")
        except OcihookError:
            continue
        try:
            if stat.S_ISSOCK(os.stat(sock).st_mode):
                found.append(sock)
        except OSError:
            pass
        try:
            pidfile = resolve_in_root(base, "/var/run/nvidia-persistenced/nvidia-persistenced.pid")
        except OcihookError:
            continue
        pid = (read_text_if_regular(pidfile) or "").strip()
        if pid.isdigit():
            alive = os.path.isdir(root.proc(pid))
            found.append(f"pid {pid} ({'running' if alive else 'not running'})")
    if any(f.endswith("(not running)") for f in found):
        return Check(
            "host",
            "persistence daemon",
            "WARN",
            "nvidia-persistenced: " + ", ".join(found) + ": its pid file names no live process",
            "systemctl restart nvidia-persistenced",
        )
    if any(f.endswith("socket") for f in found):
        return Check(
            "host", "persistence daemon", "PASS", "nvidia-persistenced: " + ", ".join(found)
        )
    return Check(
        "host",
        "persistence daemon",
        "WARN",
        "no nvidia-persistenced socket (/var/run/nvidia-persistenced/socket): the driver state "
        "is torn down whenever no process holds a GPU, so every container start reinitialises it",
        "systemctl enable --now nvidia-persistenced",
    )


def _cuda_check(host: Any, ctx: Context) -> Check:
    source = getattr(host, "cuda_source", None)
    if host.cuda_version and source in ("nvml", "elf-note"):
        ctx.facts["cudaSource"] = source
        ctx.facts["cudaVersion"] = host.cuda_version
        return Check(
            "host",
            "CUDA driver version",
            "PASS",
            f"CUDA {host.cuda_version} ({SOURCE_WORDS[source]})",
        )
    libcuda = next(
        (lib for lib in host.libraries if lib.soname == "libcuda.so.1" and lib.elf_class == 64),
        None,
    )
    why = "no 64-bit libcuda.so.1 in the driver root"
    if libcuda is not None:
        version, why = libcuda_driver_version(libcuda.host_path)
        if version is not None:
            ctx.facts["cudaSource"] = "libcuda"
            ctx.facts["cudaVersion"] = version
            return Check(
                "host",
                "CUDA driver version",
                "PASS",
                f"CUDA {version} (cuDriverGetVersion of {libcuda.host_path}, in a child process)",
            )
    table = cuda_for_driver(host.driver_version)
    if table is not None:
        ctx.facts["cudaSource"] = "table"
        ctx.facts["cudaVersion"] = table
        return Check(
            "host",
            "CUDA driver version",
            "PASS",
            f"CUDA {table} (driver-branch table for {host.driver_version}; {why})",
        )
    ctx.facts["cudaSource"] = "unknown"
    return Check(
        "host",
        "CUDA driver version",
        "WARN",
        f"unknown: {why}, and branch {host.driver_version} is not in the table: "
        "NVIDIA_REQUIRE_CUDA passes unchecked (with a warning)",
        "install nvidia-ml-py (pip install 'ocihook[nvml]') so NVML reports it",
    )


_DRIVER_NAME_PREFIXES = ("libnvidia-", "libcuda", "libnvcuvid", "libnvoptix", "libGLX_nvidia")


def _is_driver_name(name: str) -> bool:
    from ..discovery.driverfiles import CAPABILITY_LIBRARIES

    if name.startswith(_DRIVER_NAME_PREFIXES):
        return True
    return any(name.startswith(p + ".") for ps in CAPABILITY_LIBRARIES.values() for p in ps)


def check_driver_libraries(root: HostRoot, version: str, machine: str | None = None) -> Check:
    """Every driver library of every capability in the driver root's ``ld.so.cache``
    (64- and 32-bit entries; discovery itself skips what is wrong, so a container would
    silently lack it): the file the entry resolves to (inside the driver root) must be a
    valid ELF file (pyelftools) of the class and machine the entry's flags say, and each
    DT_NEEDED naming a driver library must be in the cache with the same flags or beside
    it (system libraries — libc, libm — come from the image). Files of another driver
    version are left out (discovery skips them), and counted in the evidence.

    Returns:
        one ``host`` :class:`Check` named "driver libraries": FAIL naming the first bad
        files, else PASS with the count per class.
    """
    from ..discovery.driverfiles import CAPABILITY_LIBRARIES
    from ..linux import ldcache
    from ..linux.elf import check_library, read_elf_info
    from ..linux.pathsafe import resolve_in_root

    machine = machine or os.uname().machine
    flags = {
        "x86_64": {0x0303: (64, "EM_X86_64"), 0x0003: (32, "EM_386")},
        "aarch64": {0x0A03: (64, "EM_AARCH64"), 0x0003: (32, "EM_ARM")},
    }.get(machine, {})
    cache_path = root.driver(root.ldcache)
    try:
        with open(cache_path, "rb") as f:
            entries = ldcache.parse(f.read(256 << 20), path=cache_path)
    except OSError as exc:
        return Check(
            "host",
            "driver libraries",
            "FAIL",
            f"cannot read {cache_path}: {exc.strerror}",
            "run ldconfig in the driver root (or pass --ldcache)",
        )
    except OcihookError as exc:
        return Check("host", "driver libraries", "FAIL", str(exc), "run ldconfig to rebuild it")
    prefixes = tuple(p for ps in CAPABILITY_LIBRARIES.values() for p in ps)
    by_soname: dict[tuple[str, int], str] = {}
    for e in entries:
        if not e.hwcap:
            by_soname.setdefault((e.soname, e.flags), e.path)
    bad: list[str] = []
    stale = 0
    counts = {64: 0, 32: 0}
    seen: set[str] = set()
    for e in entries:
        if e.hwcap or e.flags not in flags:
            continue
        if not any(e.soname == p or e.soname.startswith(p + ".") for p in prefixes):
            continue
        try:
            host_path = resolve_in_root(root.driver_root, e.path)
        except OcihookError as err:
            bad.append(f"{e.path}: {err.message}")
            continue
        if host_path in seen:
            continue
        seen.add(host_path)
        if not os.path.basename(host_path).endswith("." + version):
            stale += 1
            continue
        elf_class, elf_machine = flags[e.flags]
        problems = check_library(
            host_path, elf_class=elf_class, machine=elf_machine, abi_flags=e.flags
        )
        if problems:
            bad.append(f"{host_path} (ld.so.cache {e.soname}): " + ", ".join(problems))
            continue
        info = read_elf_info(host_path)
        here = os.path.dirname(host_path)
        for needed in info.needed:
            if not _is_driver_name(needed):
                continue
            if (needed, e.flags) in by_soname or os.path.exists(os.path.join(here, needed)):
                continue
            bad.append(f"{host_path} needs {needed}, which the driver root does not provide")
        counts[elf_class] += 1
    note = f"; {stale} file(s) of another driver version skipped" if stale else ""
    if bad:
        shown = "; ".join(bad[:4]) + (f" (and {len(bad) - 4} more)" if len(bad) > 4 else "")
        return Check(
            "host",
            "driver libraries",
            "FAIL",
            shown + note,
            "reinstall the driver's user-space packages (the file is not the driver's), then "
            "run ldconfig",
        )
    if not counts[64]:
        return Check(
            "host",
            "driver libraries",
            "FAIL",
            f"no 64-bit {version} driver library in {cache_path}{note}",
            "install the driver's user-space libraries matching the kernel module, then ldconfig",
        )
    return Check(
        "host",
        "driver libraries",
        "PASS",
        f"{counts[64]} 64-bit and {counts[32]} 32-bit {version} libraries: valid ELF of the "
        f"right class and machine, driver DT_NEEDED resolved in the driver root{note}",
    )


def check_host(ctx: Context, *, gpu_backend: str = "auto") -> list[Check]:
    """Layer 1 (see the module docstring); sets ``ctx.host`` and the driver facts.

    Returns:
        the host checks in order; when the module is not loaded, the others are SKIP.
    """
    from ..discovery.nvidia import discover

    root = ctx.root
    ctx.facts["kernel"] = {"release": os.uname().release, "machine": os.uname().machine}
    module, version = _module_check(root)
    checks = [module]
    rest = ("GPUs", "device nodes", "persistence daemon", "CUDA driver version")
    if version is None:
        why = "no driver loaded (see kernel module)"
        checks += [Check("host", n, "SKIP", why) for n in (*rest, "driver libraries")]
        return checks
    ctx.facts["driverVersion"] = version
    try:
        host = discover(root, gpu_backend=gpu_backend)
    except OcihookError as exc:
        name = "device nodes" if exc.path and "/dev/" in exc.path else "driver discovery"
        checks.append(
            Check("host", name, "FAIL", str(exc), exc.hint or "fix the file named, then rerun")
        )
        checks.append(check_driver_libraries(root, version))
        return checks
    ctx.host = host
    checks += [_gpus_check(host), _nodes_check(host), _persistenced_check(root)]
    checks.append(_cuda_check(host, ctx))
    checks.append(check_driver_libraries(root, version))
    return checks
