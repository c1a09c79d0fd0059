"""``ocihook doctor``: check each layer between a GPU and a container, one at a time.

The layers, in order (each check a :class:`Check`: ``PASS``, ``WARN``, ``FAIL`` or
``SKIP``, with its evidence and a one-line fix):

1. **host** (:func:`check_host`): the kernel module and driver version
   (``/proc/driver/nvidia/version``, ``/proc/modules``), the GPUs (procfs; NVML when it
   works), the device nodes (major:minor checked by discovery, mode against the driver's
   ``DeviceFileMode``), the persistence daemon (socket, pid file), the CUDA version the
   driver supports — from NVML, else from the driver root's ``libcuda`` called in a child
   process (``cuDriverGetVersion`` needs no GPU), else from :data:`CUDA_BY_BRANCH` — and
   every driver library of every capability (:func:`check_driver_libraries`): a valid ELF
   file of the class and machine its ``ld.so.cache`` entry says, whose driver DT_NEEDED
   entries resolve inside the driver root (read with pyelftools: never on a container's
   start path).
2. **runtime** (:func:`check_runtime`): each engine's files (Docker ``daemon.json``,
   containerd ``config.toml`` and its ``imports``, CRI-O ``crio.conf`` and drop-ins,
   hooks.d) register an ocihook that exists and runs on a real interpreter (not a pyenv or
   asdf shim); no NVIDIA Container Toolkit registered beside it; and the CDI specs
   (:func:`check_cdi`): valid against the packaged schema and ocihook's loader, and
   generated for the loaded driver (a stale spec names the refresh unit).
3. **request** (:func:`check_request`): what a bundle's or an image's environment asks
   for, what it would get and why (the plan the hook would make), and its
   ``NVIDIA_REQUIRE_*`` requirements against this host — or, with a target driver
   version, against that driver (:func:`check_upgrade`).
4. **visibility** (:func:`check_visibility`): a busybox container that ocihook edits,
   run with runc, seen from inside: device nodes, library mounts, links, its
   ``ld.so.cache``, the ``/proc/driver/nvidia`` mask.
5. **gpu** (:func:`check_gpu_operation`): a real CUDA operation in that container: this
   interpreter, its standard library and the C libraries they need are bind-mounted
   read-only under ``/.ocihook-doctor`` (the busybox image has no libc); :data:`PROBE`
   runs there with ctypes against the ``libcuda.so.1`` ocihook mounted, found through
   the container's ``ld.so.cache``: ``cuInit``, the device's name and UUID, a context,
   64 MiB of device memory written and read back, a PTX kernel JIT-compiled and run. No
   compiler, no CUDA toolkit. Without a real GPU this layer is ``SKIP``, never ``PASS``.

A layer's status is its worst check's. The functions take a
:class:`~ocihook.core.hostroot.HostRoot` and return checks; only the container layers
run anything (runc, and this interpreter for the CUDA child).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..core.errors import OcihookError
from ..core.hostroot import HostRoot
from ..core.records import Record

__all__ = [
    "CUDA_BY_BRANCH",
    "LAYERS",
    "PROBE",
    "STATUSES",
    "Check",
    "Context",
    "Report",
    "check_cdi",
    "check_driver_libraries",
    "check_gpu_operation",
    "check_host",
    "check_request",
    "check_runtime",
    "check_upgrade",
    "check_visibility",
    "cuda_for_driver",
    "deployment_record",
    "read_image_env",
    "run_doctor",
]

LAYERS = ("host", "runtime", "request", "visibility", "gpu")
#: The statuses, in the order :func:`worst` ranks them (SKIP counts only alone).
STATUSES = ("PASS", "SKIP", "WARN", "FAIL")

#: The CUDA version each driver branch supports (what ``cuDriverGetVersion`` and
#: ``nvidia-smi`` report for that branch's releases; NVIDIA CUDA Toolkit release notes,
#: "CUDA Toolkit and Corresponding Driver Versions"). A branch not listed takes the
#: highest listed branch below it.
CUDA_BY_BRANCH: tuple[tuple[int, str], ...] = (
    (418, "10.1"),
    (440, "10.2"),
    (450, "11.0"),
    (455, "11.1"),
    (460, "11.2"),
    (465, "11.3"),
    (470, "11.4"),
    (495, "11.5"),
    (510, "11.6"),
    (515, "11.7"),
    (520, "11.8"),
    (525, "12.0"),
    (530, "12.1"),
    (535, "12.2"),
    (545, "12.3"),
    (550, "12.4"),
    (555, "12.5"),
    (560, "12.6"),
    (565, "12.7"),
    (570, "12.8"),
    (575, "12.9"),
    (580, "13.0"),
)

REFRESH_UNIT = "ocihook-cdi-refresh.service"
REFRESH_FIX = (
    f"regenerate it: systemctl start {REFRESH_UNIT} (and enable ocihook-cdi-refresh.path to "
    "refresh on driver changes), or ocihook cdi generate --output <the spec file>"
)
#: Programs of the NVIDIA Container Toolkit that inject GPUs when registered.
NVIDIA_TOOLKIT_PROGRAMS = (
    "nvidia-container-runtime",
    "nvidia-container-runtime-hook",
    "nvidia-container-toolkit",
    "nvidia-container-runtime.cdi",
    "nvidia-container-runtime.legacy",
    "nvidia-cdi-hook",
)
HOOKS_D_DIRS = ("/usr/share/containers/oci/hooks.d", "/etc/containers/oci/hooks.d")
CDI_DIRS = ("/etc/cdi", "/var/run/cdi")
#: Bundle annotation prefixes kept in the record: the image's and the engine's own
#: (OCI image-spec ``annotations.md``, CRI, Docker, nerdctl, podman).
IMAGE_ANNOTATION_PREFIXES = (
    "org.opencontainers.image.",
    "io.kubernetes.cri",
    "io.container.manager",
    "com.docker",
    "nerdctl/",
    "io.podman",
)
#: Where the CUDA probe's files go in the container.
PROBE_DIR = "/.ocihook-doctor"


class Check(Record):
    """One check's outcome.

    Attributes:
        layer: one of :data:`LAYERS`.
        name: what was checked ("kernel module", "docker", "CDI spec /etc/cdi/nvidia.yaml").
        status: ``PASS``, ``WARN``, ``FAIL`` or ``SKIP``.
        evidence: what was found (one or a few sentences).
        fix: what to do, one line (``""`` for PASS).
    """

    layer: str
    name: str
    status: str
    evidence: str
    fix: str = ""

    def to_dict(self) -> dict[str, str]:
        """JSON form (``specs/doctor-record.schema.json``, ``checks[]``)."""
        return {
            "layer": self.layer,
            "name": self.name,
            "status": self.status,
            "evidence": self.evidence,
            "fix": self.fix,
        }


def worst(statuses: Iterable[str]) -> str:
    """The worst of ``statuses``: FAIL > WARN > PASS, SKIP only when every one (or none)
    is SKIP — a layer whose applicable checks PASS is PASS."""
    found = list(statuses)
    if not found:
        return "SKIP"
    if all(s == "SKIP" for s in found):
        return "SKIP"
    return max((s for s in found if s != "SKIP"), key=STATUSES.index, default="SKIP")


class Context:
    """What the layers share: the host root, discovery's result, facts for the record.

    Attributes:
        root: the host read.
        config_root: root under which engine files and CDI spec dirs are read.
        host: the :class:`~ocihook.discovery.nvidia.NvidiaHost`, or ``None``.
        facts: values gathered for the deployment record (driver, CUDA, engines...).
    """

    def __init__(self, root: HostRoot, config_root: str = "/") -> None:
        self.root = root
        self.config_root = os.path.abspath(config_root)
        self.host: Any = None
        self.facts: dict[str, Any] = {}

    def etc(self, path: str) -> str:
        """``path`` (absolute) under :attr:`config_root`."""
        return os.path.join(self.config_root, path.lstrip("/"))


# --- layer 1: the host --------------------------------------------------------------------


def cuda_for_driver(version: str) -> str | None:
    """The CUDA version driver ``version`` (``"550.127.05"`` or ``"550"``) supports,
    from :data:`CUDA_BY_BRANCH`; ``None`` below the first branch or for a non-version."""
    head = version.split(".", 1)[0]
    if not (head.isascii() and head.isdigit()):
        return None
    major = int(head)
    found = None
    for branch, cuda in CUDA_BY_BRANCH:
        if branch <= major:
            found = cuda
    return found


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


def _read(path: str, limit: int = 1 << 20) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, limit).decode("utf-8", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def _module_check(root: HostRoot) -> tuple[Check, str | None]:
    from ..discovery.procfs import parse_driver_version

    path = root.proc("driver/nvidia/version")
    text = _read(path)
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
    modules = _read(root.proc("modules"))
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
    params = _read(root.proc("driver/nvidia/params")) or ""
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
        pid = (_read(pidfile) or "").strip()
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
    if host.cuda_version:
        ctx.facts["cudaSource"] = "nvml"
        ctx.facts["cudaVersion"] = host.cuda_version
        return Check("host", "CUDA driver version", "PASS", f"CUDA {host.cuda_version} (NVML)")
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
        "NVIDIA_REQUIRE_CUDA passes unchecked",
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


# --- layer 2: the runtime configuration ------------------------------------------------


class Registration(Record):
    """One runtime or hook an engine's configuration registers.

    Attributes:
        engine: docker, containerd, crio or podman.
        file: the configuration file.
        name: the runtime name, or the hooks.d file name.
        path: the program the engine runs.
        args: its arguments (hooks.d), else ``()``.
        default: whether it is the engine's default runtime.
    """

    engine: str
    file: str
    name: str
    path: str
    args: tuple[str, ...] = ()
    default: bool = False

    @property
    def is_ocihook(self) -> bool:
        """Registers ocihook: named so, or runs ocihook's program."""
        return (
            self.name == "ocihook"
            or os.path.basename(self.path).startswith("ocihook")
            or any("ocihook" in a for a in self.args)
        )

    @property
    def is_nvidia_toolkit(self) -> bool:
        """Registers the NVIDIA Container Toolkit."""
        base = os.path.basename(self.path)
        return base in NVIDIA_TOOLKIT_PROGRAMS or any(
            os.path.basename(a) in NVIDIA_TOOLKIT_PROGRAMS for a in self.args[:1]
        )


def _load_json_file(path: str) -> Any:
    text = _read(path)
    if text is None:
        return None
    from .engines import _load_json

    return _load_json(text, path)


def _load_toml_file(path: str) -> dict[str, Any] | None:
    import tomllib

    from ..core.errors import EngineConfigError

    text = _read(path)
    if text is None:
        return None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise EngineConfigError(f"not valid TOML: {exc}", path=path) from None


def _docker(ctx: Context) -> tuple[list[str], list[Registration]]:
    path = ctx.etc("/etc/docker/daemon.json")
    doc = _load_json_file(path)
    if doc is None:
        return [], []
    if not isinstance(doc, dict):
        from ..core.errors import EngineConfigError

        raise EngineConfigError("daemon.json must hold a JSON object", path=path)
    default = doc.get("default-runtime", "runc")
    out = []
    runtimes = doc.get("runtimes") or {}
    for name, entry in runtimes.items() if isinstance(runtimes, dict) else ():
        if isinstance(entry, dict) and isinstance(entry.get("path"), str):
            out.append(Registration("docker", path, name, entry["path"], default=name == default))
    ctx.facts.setdefault("engines", {})["docker"] = {
        "files": [path],
        "defaultRuntime": default,
        "runtimes": {r.name: r.path for r in out},
        "cdi": bool((doc.get("features") or {}).get("cdi")),
    }
    return [path], out


def _containerd(ctx: Context) -> tuple[list[str], list[Registration]]:
    import glob

    from .engines import CONTAINERD_PLUGINS

    path = ctx.etc("/etc/containerd/config.toml")
    doc = _load_toml_file(path)
    if doc is None:
        return [], []
    files = [path]
    docs = [(path, doc)]
    imports = doc.get("imports") or []
    for pattern in imports if isinstance(imports, list) else ():
        if not isinstance(pattern, str):
            continue
        full = pattern if pattern.startswith("/") else os.path.join(os.path.dirname(path), pattern)
        if pattern.startswith("/"):
            full = ctx.etc(pattern)
        for name in sorted(glob.glob(full)) if "*" in full else [full]:
            sub = _load_toml_file(name)
            if sub is not None:
                files.append(name)
                docs.append((name, sub))
    version = doc.get("version", 1)
    plugin = CONTAINERD_PLUGINS.get(version, "cri") if isinstance(version, int) else "cri"
    runtimes: dict[str, tuple[str, str]] = {}
    default = "runc"
    cdi = False
    for name, d in docs:  # later files win, as containerd merges imports after the main file
        cri = (d.get("plugins") or {}).get(plugin) or {}
        cdi = bool(cri.get("enable_cdi", cdi))
        section = cri.get("containerd") or {}
        default = section.get("default_runtime_name", default)
        for rname, entry in (section.get("runtimes") or {}).items():
            if not isinstance(entry, dict):
                continue
            options = entry.get("options") or {}
            binary = options.get("BinaryName") or entry.get("runtime_path") or ""
            if isinstance(binary, str) and binary:
                runtimes[rname] = (name, binary)
    out = [
        Registration("containerd", f, n, b, default=n == default) for n, (f, b) in runtimes.items()
    ]
    ctx.facts.setdefault("engines", {})["containerd"] = {
        "files": files,
        "defaultRuntime": default,
        "runtimes": {r.name: r.path for r in out},
        "cdi": cdi,
    }
    return files, out


def _crio(ctx: Context) -> tuple[list[str], list[Registration]]:
    import glob

    files = [ctx.etc("/etc/crio/crio.conf")]
    files += sorted(glob.glob(ctx.etc("/etc/crio/crio.conf.d") + "/*.conf"))
    runtimes: dict[str, tuple[str, str]] = {}
    default = "crun"
    read = []
    for name in files:
        d = _load_toml_file(name)
        if d is None:
            continue
        read.append(name)
        section = (d.get("crio") or {}).get("runtime") or {}
        default = section.get("default_runtime", default)
        for rname, entry in (section.get("runtimes") or {}).items():
            if isinstance(entry, dict) and isinstance(entry.get("runtime_path"), str):
                runtimes[rname] = (name, entry["runtime_path"])
    if not read:
        return [], []
    out = [Registration("crio", f, n, p, default=n == default) for n, (f, p) in runtimes.items()]
    ctx.facts.setdefault("engines", {})["crio"] = {
        "files": read,
        "defaultRuntime": default,
        "runtimes": {r.name: r.path for r in out},
    }
    return read, out


def _hooks_d(ctx: Context) -> tuple[list[str], list[Registration]]:
    files: list[str] = []
    out: list[Registration] = []
    for d in HOOKS_D_DIRS:
        directory = ctx.etc(d)
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue
        for name in names:
            if not name.endswith(".json"):
                continue
            path = os.path.join(directory, name)
            doc = _load_json_file(path)
            files.append(path)
            hook = doc.get("hook") if isinstance(doc, dict) else None
            if isinstance(hook, dict) and isinstance(hook.get("path"), str):
                args = tuple(a for a in hook.get("args") or () if isinstance(a, str))
                out.append(Registration("podman", path, name, hook["path"], args))
    if files:
        ctx.facts.setdefault("engines", {})["podman"] = {
            "files": files,
            "hooks": {r.name: [r.path, *r.args] for r in out},
        }
    return files, out


_ENGINE_READERS = {"docker": _docker, "containerd": _containerd, "crio": _crio, "podman": _hooks_d}
_ENGINE_BINARIES = {
    "docker": "dockerd",
    "containerd": "containerd",
    "crio": "crio",
    "podman": "podman",
}


def _shim(path: str) -> str | None:
    """Why ``path`` (an interpreter) is a version-manager shim, or ``None``."""
    if "/shims/" in path or ("/.pyenv/" in path and "/versions/" not in path):
        return f"{path} is a version-manager shim"
    text = _read(path, 4096)
    if text is not None and text.startswith("#!") and ("pyenv" in text or "asdf" in text):
        return f"{path} is a shell script of a version manager (pyenv/asdf shim)"
    return None


def _program_problem(reg: Registration) -> str | None:
    """What is wrong with the program ``reg`` runs, or ``None``. Its path is a path of
    this machine (the engine runs it here), whatever the config root."""
    path = reg.path
    if not os.path.isabs(path):
        found = shutil.which(path)
        if found is None:
            return f"{path} is not an absolute path and is not on PATH"
        path = found
    if not os.path.exists(path):
        return f"{path} does not exist"
    if not os.access(path, os.X_OK) or not os.path.isfile(path):
        return f"{path} is not an executable file"
    if reg.engine == "podman":  # the hook's path is the interpreter itself
        return _shim(os.path.realpath(path)) or _imports_ocihook(path)
    head = _read(path, 512) or ""
    if head.startswith("#!"):
        interp = head[2:].splitlines()[0].strip().split(" ", 1)[0]
        if interp.endswith("/env"):
            return f"{path} starts its interpreter through {interp} (PATH decides which Python)"
        if not os.path.exists(interp):
            return f"{path}'s interpreter {interp} does not exist"
        return _shim(os.path.realpath(interp)) or _imports_ocihook(interp)
    return None


def _imports_ocihook(python: str) -> str | None:
    """Why the interpreter ``python`` (a host program the engine's configuration names)
    cannot import ocihook in isolated mode, as the registered hook and wrapper run it; or
    ``None``. Run with a timeout, nothing from any container involved."""
    try:
        proc = subprocess.run(
            [python, "-I", "-c", "import ocihook._main"],
            capture_output=True,
            text=True,
            timeout=20,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{python} does not run: {exc}"
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        return f"{python} cannot import ocihook ({last})"
    return None


def check_runtime(ctx: Context, engines: Sequence[str] | None = None) -> list[Check]:
    """Layer 2: one check per engine (``engines``, default all four), then the CDI specs.

    An engine counts as installed when its configuration file exists or (reading the real
    ``/``) its daemon is on ``PATH``; an engine that is not is SKIP — unless named in
    ``engines``, then ocihook not being registered is FAIL rather than WARN.
    """
    from ..core.errors import EngineConfigError

    chosen = list(engines or _ENGINE_READERS)
    checks: list[Check] = []
    fix_for = {e: f"ocihook runtime configure --runtime {e}" for e in _ENGINE_READERS}
    for engine in chosen:
        try:
            files, regs = _ENGINE_READERS[engine](ctx)
        except EngineConfigError as exc:
            checks.append(Check("runtime", engine, "FAIL", str(exc), "fix the file, then rerun"))
            continue
        daemon = _ENGINE_BINARIES[engine]
        installed = bool(files) or (ctx.config_root == "/" and shutil.which(daemon) is not None)
        if not installed:
            checks.append(
                Check("runtime", engine, "SKIP", f"not installed (no {daemon}, no configuration)")
            )
            continue
        ours = [r for r in regs if r.is_ocihook]
        theirs = [r for r in regs if r.is_nvidia_toolkit]
        where = ", ".join(files) or f"{daemon} with its built-in defaults"
        if not ours:
            status = "FAIL" if engines else "WARN"
            checks.append(
                Check(
                    "runtime",
                    engine,
                    status,
                    f"ocihook is not registered ({where})",
                    fix_for[engine],
                )
            )
            continue
        problems = [f"{r.name} in {r.file}: {p}" for r in ours if (p := _program_problem(r))]
        if problems:
            checks.append(
                Check(
                    "runtime",
                    engine,
                    "FAIL",
                    "; ".join(problems),
                    f"{fix_for[engine]} (re-registers this installation's programs)",
                )
            )
            continue
        shown = ", ".join(
            f"{r.name} -> {r.path}" + (" (default)" if r.default else "") for r in ours
        )
        if theirs:
            both = ", ".join(f"{r.name} -> {r.path} ({r.file})" for r in theirs)
            status = "FAIL" if engine == "podman" else "WARN"
            why = (
                "both hooks run for every container: GPUs would be injected twice"
                if engine == "podman"
                else "a container run with that runtime gets the toolkit's injection, not ocihook's"
            )
            checks.append(
                Check(
                    "runtime",
                    engine,
                    status,
                    f"ocihook registered ({shown}), and the NVIDIA Container Toolkit too: {both}; "
                    + why,
                    f"remove the toolkit's registration ({theirs[0].file}) or uninstall it",
                )
            )
            continue
        checks.append(Check("runtime", engine, "PASS", f"{shown} in {where}"))
    checks += check_cdi(ctx)
    return checks


def _spec_versions(doc: Any) -> set[str]:
    """The driver versions named in a spec's host paths (``libcuda.so.550.127.05``) and
    in ocihook's ``--cuda-compat`` hook argument."""
    import re

    found: set[str] = set()
    pattern = re.compile(r"\.so\.(\d{3,}\.\d+(?:\.\d+)?)$")
    compat = re.compile(r"::(\d{3,}\.\d+(?:\.\d+)?)(?:::|$)")

    def walk(value: Any, key: str = "") -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, k)
        elif isinstance(value, list):
            for v in value:
                walk(v, key)
        elif isinstance(value, str):
            if key == "hostPath":
                m = pattern.search(value)
                if m:
                    found.add(m.group(1))
            elif key == "args":
                m = compat.search(value)
                if m:
                    found.add(m.group(1))

    walk(doc)
    return found


def _host_paths(doc: Any) -> list[str]:
    out: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                if k == "hostPath" and isinstance(v, str):
                    out.append(v)
                else:
                    walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(doc)
    return out


def check_cdi(ctx: Context, spec_dirs: Sequence[str] = CDI_DIRS) -> list[Check]:
    """The NVIDIA CDI specs (``kind`` ``nvidia.com/*``) in ``spec_dirs`` (under the config
    root): each validated against the packaged schema (``ocihook/schemas/cdi.schema.json``
    = ``specs/cdi.schema.json``) and by :func:`ocihook.cdi.spec.load_spec`, and compared
    with the loaded driver: a driver version in its host paths other than the loaded one,
    or host paths that no longer exist, make it stale (FAIL naming the refresh unit).
    No spec at all is SKIP (only CDI requests need one)."""
    from ..cdi.spec import decode_spec, load_spec
    from ..schemas import violations

    checks: list[Check] = []
    specs: list[dict[str, Any]] = []
    version = ctx.facts.get("driverVersion")
    for d in spec_dirs:
        directory = ctx.etc(d)
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue
        for name in names:
            if not name.endswith((".json", ".yaml", ".yml")):
                continue
            path = os.path.join(directory, name)
            try:
                with open(path, "rb") as f:
                    data = f.read(64 << 20)
            except OSError as exc:
                checks.append(Check("runtime", f"CDI spec {path}", "FAIL", exc.strerror or "", ""))
                continue
            try:
                doc = decode_spec(data, path=path)
            except OcihookError as exc:
                checks.append(Check("runtime", f"CDI spec {path}", "FAIL", str(exc), REFRESH_FIX))
                continue
            kind = doc.get("kind") if isinstance(doc, dict) else None
            if not (isinstance(kind, str) and kind.startswith("nvidia.com/")):
                continue
            info: dict[str, Any] = {
                "path": path,
                "sha256": hashlib.sha256(data).hexdigest(),
                "kind": kind,
            }
            specs.append(info)
            name_ = f"CDI spec {path}"
            wrong = violations(doc, "cdi")
            if wrong:
                shown = "; ".join(str(v) for v in wrong[:3])
                more = f" (and {len(wrong) - 3} more)" if len(wrong) > 3 else ""
                checks.append(
                    Check(
                        "runtime",
                        name_,
                        "FAIL",
                        f"invalid against the CDI schema: {shown}{more}",
                        REFRESH_FIX,
                    )
                )
                continue
            try:
                spec = load_spec(data, path=path)
            except OcihookError as exc:
                checks.append(Check("runtime", name_, "FAIL", str(exc), REFRESH_FIX))
                continue
            info["devices"] = len(spec.devices)
            info["cdiVersion"] = spec.version
            versions = _spec_versions(doc)
            missing = [p for p in _host_paths(doc) if not os.path.lexists(p)]
            stale = sorted(v for v in versions if version and v != version)
            if stale or missing:
                what = []
                if stale:
                    what.append(
                        f"generated for driver {', '.join(stale)}, loaded driver is {version}"
                    )
                if missing:
                    what.append(
                        f"{len(missing)} host path(s) no longer exist ({', '.join(missing[:3])})"
                    )
                checks.append(
                    Check("runtime", name_, "FAIL", "stale: " + "; ".join(what), REFRESH_FIX)
                )
                continue
            checks.append(
                Check(
                    "runtime",
                    name_,
                    "PASS",
                    f"kind {kind}, {len(spec.devices)} devices, cdiVersion {spec.version}, valid; "
                    f"driver {', '.join(sorted(versions)) or 'not named'}, every host path exists",
                )
            )
    ctx.facts["cdiSpecs"] = specs
    if not specs:
        checks.append(
            Check(
                "runtime",
                "CDI spec",
                "SKIP",
                f"no nvidia.com CDI spec in {', '.join(ctx.etc(d) for d in spec_dirs)} (only "
                "CDI requests such as --device nvidia.com/gpu=0 need one)",
                f"to use CDI: ocihook cdi generate --output /var/run/cdi/nvidia.yaml and enable "
                f"{REFRESH_UNIT}",
            )
        )
    return checks


# --- layer 3: the request -----------------------------------------------------------------


def read_image_env(path: str) -> tuple[dict[str, str], dict[str, Any]]:
    """An image's environment from ``path``: ``KEY=value`` lines (``docker inspect -f
    '{{join .Config.Env "\\n"}}'``), a JSON list of such strings, ``docker inspect``
    output (``[{"Config": {"Env": [...]}, "RepoDigests": [...]}]``) or an OCI image
    configuration (``{"config": {"Env": [...]}}``).

    Returns:
        ``(env, image facts)``: facts hold ``digest`` / ``id`` when the file says.

    Raises:
        RequestError: the file cannot be read or holds no environment.
    """
    from ..core.errors import RequestError
    from ..request import parse_env

    text = _read(path, 16 << 20)
    if text is None:
        raise RequestError("cannot read the image environment file", path=path)
    facts: dict[str, Any] = {}
    stripped = text.strip()
    entries: list[str] | None = None
    if stripped[:1] in ("[", "{"):
        try:
            doc = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise RequestError(
                f"not valid JSON: {exc.msg}", path=path, field=f"line {exc.lineno}"
            ) from None
        if isinstance(doc, list) and doc and isinstance(doc[0], dict):
            doc = doc[0]
        if isinstance(doc, list):
            entries = [e for e in doc if isinstance(e, str)]
        elif isinstance(doc, dict):
            conf = doc.get("Config") or doc.get("config") or {}
            env = conf.get("Env") if isinstance(conf, dict) else None
            if isinstance(env, list):
                entries = [e for e in env if isinstance(e, str)]
            digests = doc.get("RepoDigests")
            if isinstance(digests, list) and digests:
                facts["digest"] = str(digests[0])
            if isinstance(doc.get("Id"), str):
                facts["id"] = doc["Id"]
        if entries is None:
            raise RequestError(
                "no environment in the JSON document",
                path=path,
                hint="give Config.Env of docker inspect, or KEY=value lines",
            )
    else:
        entries = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    return parse_env(entries), facts


def _cuda_fact(ctx: Context) -> str:
    source = {"nvml": "NVML", "libcuda": "libcuda", "table": "driver-branch table"}
    cuda = ctx.facts.get("cudaVersion")
    return (
        f"CUDA {cuda} ({source.get(ctx.facts.get('cudaSource', ''), 'unknown')})"
        if cuda
        else "CUDA unknown"
    )


def _compat_library(rootfs: str | None) -> tuple[str, str] | None:
    """``(version, host path)`` of the newest ``libcuda.so.<version>`` in the image's
    ``/usr/local/cuda/compat`` (resolved inside ``rootfs``), or ``None``."""
    if rootfs is None:
        return None
    from ..linux.pathsafe import resolve_in_root
    from ..requirements import version_key

    try:
        d = resolve_in_root(rootfs, "/usr/local/cuda/compat")
        names = os.listdir(d)
    except (OcihookError, OSError):
        return None
    found = [
        (key, n[len("libcuda.so.") :])
        for n in names
        if n.startswith("libcuda.so.")
        and (key := version_key(n[len("libcuda.so.") :]))
        and len(key) >= 2
    ]
    if not found:
        return None
    version = max(found)[1]
    return version, os.path.join(d, "libcuda.so." + version)


def _compat_check(ctx: Context, rootfs: str | None) -> Check | None:
    """Whether the image's CUDA forward-compatibility libcuda would be used on this host
    (:meth:`ocihook.plan.CudaCompat.decide`, the rule the hook applies, with the library's
    ``.note.cuda.fwd_compatibility``: the image file is only read), or ``None`` when the
    image has none."""
    found = _compat_library(rootfs)
    driver = ctx.facts.get("driverVersion")
    if found is None or not driver:
        return None
    from ..linux.elfscan import cuda_compat_note
    from ..plan import CudaCompat

    version, path = found
    rule = CudaCompat(
        host_major=int(driver.split(".")[0]),
        host_driver=driver,
        host_cuda=ctx.facts.get("cudaVersion") or "",
    )
    used, why = rule.decide(version, cuda_compat_note(path))
    return Check(
        "request",
        "CUDA forward compatibility",
        "PASS",
        f"the image's /usr/local/cuda/compat/libcuda.so.{version} "
        f"{'is used' if used else 'is not used'} on driver {driver} ({why})",
    )


def check_request(
    ctx: Context,
    env: Mapping[str, str] | None = None,
    *,
    bundle: str | None = None,
    options: Any = None,
    image: Mapping[str, Any] | None = None,
) -> list[Check]:
    """Layer 3: the request of ``bundle``'s ``config.json`` or of an image's ``env``,
    what it gets (the plan the hook would make: GPUs, capabilities, nodes, mounts) and
    why, and its requirements checked against this host (the CUDA version from
    :func:`check_host`, whatever the source). SKIP without a bundle or an env."""
    from ..core.errors import RequestError
    from ..plan import ContainerLayout, make_plan
    from ..request import request_from_env, request_from_spec, select_gpus, void_reason

    if env is None and bundle is None:
        return [
            Check(
                "request",
                "request",
                "SKIP",
                "no --bundle or --image-env given",
                "pass --bundle DIR or --image-env FILE to check what a container gets",
            )
        ]
    host = ctx.host
    image_facts: dict[str, Any] = dict(image or {})
    rootfs = None
    config: Mapping[str, Any] = {}
    try:
        if bundle is not None:
            from ..oci.bundle import load_bundle
            from ..pipeline import layout_for_rootfs
            from ..request import env_from_spec

            b = load_bundle(bundle)
            config = b.config
            policy = getattr(options, "policy", None)
            kwargs = {"policy": policy} if policy is not None else {}
            request = request_from_spec(b.config, path=b.config_path, **kwargs)
            env = env_from_spec(b.config, path=b.config_path)
            rootfs = b.rootfs
            layout = layout_for_rootfs(b.rootfs)
            annotations = b.config.get("annotations") or {}
            if isinstance(annotations, dict):
                image_facts["annotations"] = {
                    k: v
                    for k, v in annotations.items()
                    if isinstance(v, str) and k.startswith(IMAGE_ANNOTATION_PREFIXES)
                }
                for key in (
                    "org.opencontainers.image.digest",
                    "io.kubernetes.cri.image-digest",
                    "io.kubernetes.cri.image-name",
                    "org.opencontainers.image.ref.name",
                ):
                    value = annotations.get(key)
                    if isinstance(value, str) and "digest" not in image_facts and "digest" in key:
                        image_facts["digest"] = value
            source = b.config_path
        else:
            assert env is not None
            request = request_from_env(env, source="image env")
            layout = ContainerLayout.for_image(False)
            source = "image env"
    except OcihookError as exc:
        ctx.facts["image"] = image_facts
        return [Check("request", "request", "FAIL", str(exc), exc.hint or "fix the variable named")]
    assert env is not None
    reqs = [(n, r.describe()) for n, r in request.requirements]
    image_facts["requirements"] = [{"name": n, "value": v} for n, v in reqs]
    image_facts["cudaVersion"] = env.get("CUDA_VERSION")
    image_facts["source"] = "bundle" if bundle is not None else "image-env"
    ctx.facts["image"] = image_facts
    ctx.facts["request_env"] = dict(env)
    if request.is_void:
        why = (
            void_reason(request, config)
            if bundle is not None
            else "NVIDIA_VISIBLE_DEVICES is unset or void"
        )
        return [
            Check(
                "request",
                "request",
                "WARN",
                f"the container asks for no GPU: {why}",
                "set NVIDIA_VISIBLE_DEVICES (all, an index or a UUID) in the image or the run",
            )
        ]
    if host is None:
        return [Check("request", "request", "SKIP", "no usable driver on the host (see host)")]
    checks: list[Check] = []
    asked = f"{request.kind}" + (f" {','.join(request.devices)}" if request.devices else "")
    try:
        plan = make_plan(host, request, layout, check_requirements=False)
    except RequestError as exc:
        return [Check("request", "request", "FAIL", f"asks for {asked}: {exc}", exc.hint or "")]
    edits = plan.edits
    gpus = ", ".join(f"{i} ({u})" for i, u, _m in plan.gpus) or "none"
    checks.append(
        Check(
            "request",
            "request",
            "PASS",
            f"{source}: NVIDIA_VISIBLE_DEVICES={env.get('NVIDIA_VISIBLE_DEVICES', '(unset)')} "
            f"(read from {request.source}) -> GPUs {gpus}; capabilities "
            f"{','.join(plan.capabilities) or 'none'}: {len(edits.device_nodes)} device nodes, "
            f"{len(edits.mounts)} mounts, {len(edits.symlinks)} links, libraries in {layout.libdir}"
            + (f"; warnings: {'; '.join(plan.warnings)}" if plan.warnings else ""),
        )
    )
    checks.append(_requirements_check(ctx, request, select_gpus(request, host.gpus), rootfs))
    if "compute" in plan.capabilities:
        compat = _compat_check(ctx, rootfs)
        if compat is not None:
            checks.append(compat)
    return checks


def _requirements_check(
    ctx: Context, request: Any, gpus: Sequence[Any], rootfs: str | None
) -> Check:
    from ..core.errors import RequestError
    from ..requirements import check

    if not request.requirements:
        return Check("request", "requirements", "PASS", "no NVIDIA_REQUIRE_* and no CUDA_VERSION")
    listed = "; ".join(f"{n}={r.describe()}" for n, r in request.requirements)
    try:
        check(
            request.requirements,
            cuda_version=ctx.facts.get("cudaVersion"),
            driver_version=ctx.facts.get("driverVersion"),
            gpus=gpus,
            source=request.source,
        )
    except RequestError as exc:
        fix = exc.hint or ""
        note = ""
        if _compat_library(rootfs) is not None:
            note = (
                "; the image carries CUDA forward-compatibility libraries, but the check uses "
                "the host driver's CUDA version"
            )
            fix += " (or, to rely on the image's compat libcuda, NVIDIA_DISABLE_REQUIRE=true)"
        return Check(
            "request",
            "requirements",
            "FAIL",
            f"{exc.message} ({_cuda_fact(ctx)}){note}",
            fix,
        )
    return Check("request", "requirements", "PASS", f"{listed}: met with {_cuda_fact(ctx)}")


def check_upgrade(ctx: Context, env: Mapping[str, str], driver_version: str) -> Check:
    """Pre-upgrade: would the image whose environment is ``env`` run on driver
    ``driver_version``? Its requirements are checked with that driver's version and the
    CUDA version of its branch (:data:`CUDA_BY_BRANCH`); ``arch``/``brand`` of this host's
    GPUs (the GPUs stay)."""
    from ..core.errors import RequestError
    from ..requirements import check, requirements_from_env, version_key

    name = f"driver {driver_version}"
    if version_key(driver_version) is None:
        return Check(
            "request",
            name,
            "FAIL",
            f"not a driver version: {driver_version!r}",
            "give X.Y or X.Y.Z",
        )
    cuda = cuda_for_driver(driver_version)
    try:
        reqs = requirements_from_env(env, source="image env")
    except RequestError as exc:
        return Check("request", name, "FAIL", str(exc), exc.hint or "")
    if not reqs:
        return Check(
            "request",
            name,
            "PASS",
            f"the image states no requirement; driver {driver_version} supports CUDA {cuda}",
        )
    gpus = ctx.host.gpus if ctx.host is not None else ()
    listed = "; ".join(f"{n}={r.describe()}" for n, r in reqs)
    try:
        check(reqs, cuda_version=cuda, driver_version=driver_version, gpus=gpus, source="image env")
    except RequestError as exc:
        return Check(
            "request",
            name,
            "FAIL",
            f"will not run on driver {driver_version} (CUDA {cuda or 'unknown'}): {exc.message}",
            exc.hint or "",
        )
    return Check(
        "request",
        name,
        "PASS",
        f"will run on driver {driver_version}: it supports CUDA {cuda or 'unknown'}; {listed} met",
    )


# --- layers 4 and 5: a container --------------------------------------------------------


def _container_env(ctx: Context) -> list[str]:
    """The ``NVIDIA_*`` variables of the request checked (not its requirements: layer 3
    checks those), asking for GPU 0 when it names none."""
    env = ctx.facts.get("request_env") or {}
    keep = [
        f"{k}={v}"
        for k, v in env.items()
        if k.startswith("NVIDIA_") and not k.startswith("NVIDIA_REQUIRE_")
    ]
    names = {e.partition("=")[0] for e in keep}
    if env.get("NVIDIA_VISIBLE_DEVICES") in (None, "void", "none", ""):
        keep = [e for e in keep if not e.startswith("NVIDIA_VISIBLE_DEVICES=")]
        keep.append("NVIDIA_VISIBLE_DEVICES=0")
    if "NVIDIA_DRIVER_CAPABILITIES" not in names:
        keep.append("NVIDIA_DRIVER_CAPABILITIES=compute,utility")
    return keep


def _visibility_script(plan: Any) -> str:
    """The busybox ``sh`` script that prints what the container sees of ``plan``: one
    ``NODE``, ``LIB``, ``LINK`` line per planned node, library and link, ``MOUNT`` lines
    from mountinfo, the ``PROC`` listing of ``/proc/driver/nvidia/gpus``, then ``DONE``.
    Paths come from the plan (host-side data), never from the container."""
    lines = [
        f"echo \"NODE {n.path} $(stat -c '%t:%T' {n.path} 2>/dev/null)\""
        for n in plan.edits.device_nodes
    ]
    for m in plan.edits.mounts:
        if ".so" in m.destination:
            d = m.destination
            lines.append(f'echo "LIB {d} $(hexdump -n 4 -e \'4/1 "%02x"\' {d} 2>&1)"')
    for s in plan.edits.symlinks:
        lines.append(f'echo "LINK {s.link} $(readlink {s.link})"')
    lines.append(
        'grep " /usr/" /proc/self/mountinfo | while read -r a b c d mp opts rest; do\n'
        '  echo "MOUNT $mp $opts"; done'
    )
    lines.append("echo \"PROC $(ls /proc/driver/nvidia/gpus 2>/dev/null | tr '\\n' ' ')\"")
    lines.append("echo DONE")
    return "\n".join(lines) + "\n"


def _container_tools(runc: str | None, busybox: str | None) -> tuple[str | None, str | None, str]:
    from ..sim.demo import find_busybox

    runc = runc or shutil.which("runc")
    busybox = busybox or find_busybox()
    why = []
    if os.geteuid() != 0:
        why.append("not root")
    if runc is None:
        why.append("runc is not installed (apt-get install runc, or --runc)")
    if busybox is None:
        why.append("busybox is not installed (apt-get install busybox-static, or --busybox)")
    return runc, busybox, "; ".join(why)


def _run_runc(
    runc: str, bundle: str, state: str, timeout: int = 120
) -> subprocess.CompletedProcess[str]:
    import uuid

    cid = f"ocihook-doctor-{uuid.uuid4().hex[:10]}"
    try:
        return subprocess.run(
            [runc, "--root", state, "run", "--bundle", bundle, cid],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        subprocess.run(
            [runc, "--root", state, "delete", "-f", cid], capture_output=True, check=False
        )
        return subprocess.CompletedProcess(
            exc.cmd, 124, "", f"runc run did not finish in {timeout} s"
        )


def prepare_bundle(
    ctx: Context,
    workdir: str,
    *,
    busybox: str,
    options: Any = None,
    args: Sequence[str] = ("true",),
) -> tuple[str, Any]:
    """A busybox bundle in ``workdir`` asking for :func:`_container_env`'s GPUs, edited by
    ocihook (spec mode) for ``ctx.root``; returns ``(bundle, plan)``.

    Raises:
        OcihookError: the edit failed.
    """
    from ..appliers.spec import edit_bundle
    from ..sim.demo import make_busybox_bundle

    bundle = os.path.join(workdir, "bundle")
    make_busybox_bundle(bundle, list(args), _container_env(ctx), busybox=busybox)
    result = edit_bundle(bundle, ctx.root, options=options)
    return bundle, result.plan


def _set_args(
    bundle: str, args: Sequence[str], env: Sequence[str] = (), mounts: Sequence[dict[str, Any]] = ()
) -> None:
    path = os.path.join(bundle, "config.json")
    with open(path) as f:
        doc = json.load(f)
    doc["process"]["args"] = list(args)
    doc["process"]["env"] = [*doc["process"]["env"], *env]
    doc["mounts"] = [*doc.get("mounts", []), *mounts]
    with open(path, "w") as f:
        json.dump(doc, f, indent="\t")


def check_visibility(
    ctx: Context,
    workdir: str,
    *,
    runc: str | None = None,
    busybox: str | None = None,
    options: Any = None,
) -> list[Check]:
    """Layer 4: a busybox container that ocihook edits (spec mode), run with runc, checked
    from inside against the plan: each device node (``stat`` major:minor), each library
    mount (its ELF magic read through the mount, ``ro``/``nosuid``/``nodev`` in
    mountinfo), each link (``readlink``), the container's ``ld.so.cache`` (read back on
    the host from the rootfs: every library the plan enters) and, when the host's
    kernel has the driver (dev root ``/``), the ``/proc/driver/nvidia/gpus`` mask. Sets
    ``ctx.facts["bundle"]`` for :func:`check_gpu_operation`. SKIP without root, runc or
    busybox, or without a usable driver."""
    from ..linux import ldcache

    runc, busybox, why = _container_tools(runc, busybox)
    if ctx.host is None:
        why = "no usable driver on the host (see host)"
    if why:
        return [Check("visibility", "container", "SKIP", why)]
    assert runc is not None and busybox is not None
    try:
        bundle, plan = prepare_bundle(ctx, workdir, busybox=busybox, options=options)
    except OcihookError as exc:
        return [
            Check("visibility", "container", "FAIL", f"ocihook edit failed: {exc}", exc.hint or "")
        ]
    if plan is None:
        return [Check("visibility", "container", "FAIL", "ocihook edit planned nothing", "")]
    with open(os.path.join(bundle, "rootfs/doctor.sh"), "w") as f:
        f.write(_visibility_script(plan))
    _set_args(bundle, ["sh", "/doctor.sh"])
    proc = _run_runc(runc, bundle, os.path.join(workdir, "runc"))
    out = proc.stdout
    if proc.returncode != 0 or "DONE" not in out.splitlines():
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return [
            Check(
                "visibility",
                "container",
                "FAIL",
                f"runc run exited {proc.returncode}: {tail}",
                "run the bundle by hand (runc run -b BUNDLE) with ocihook --debug to see the "
                "failing step",
            )
        ]
    ctx.facts["bundle"] = bundle
    ctx.facts["plan"] = plan
    ctx.facts["busybox"] = busybox
    seen: dict[str, dict[str, str]] = {"NODE": {}, "LIB": {}, "LINK": {}, "MOUNT": {}}
    procline = ""
    for line in out.splitlines():
        tag, _, rest = line.partition(" ")
        if tag in seen:
            key, _, value = rest.partition(" ")
            seen[tag][key] = value.strip()
        elif tag == "PROC":
            procline = rest.strip()
    bad: list[str] = []
    edits = plan.edits
    for n in edits.device_nodes:
        want = f"{n.major:x}:{n.minor:x}"
        got = seen["NODE"].get(n.path)
        if got != want:
            bad.append(f"{n.path}: {got or 'missing'} (want {want})")
    libs = [m for m in edits.mounts if ".so" in m.destination]
    for m in libs:
        if seen["LIB"].get(m.destination) != "7f454c46":
            bad.append(f"{m.destination}: not readable as ELF ({seen['LIB'].get(m.destination)})")
        opts = set(seen["MOUNT"].get(m.destination, "").split(","))
        if not {"ro", "nosuid", "nodev"} <= opts:
            bad.append(f"{m.destination}: mounted {','.join(sorted(opts)) or 'not at all'}")
    for s in edits.symlinks:
        if seen["LINK"].get(s.link) != s.target:
            bad.append(f"{s.link} -> {seen['LINK'].get(s.link) or 'missing'} (want {s.target})")
    cache_note = ""
    try:
        with open(os.path.join(bundle, "rootfs/etc/ld.so.cache"), "rb") as f:
            keys = {c.path for c in ldcache.parse(f.read())}
        lacking = [lib for lib in edits.ldcache_libraries if lib not in keys]
        if lacking:
            bad.append("ld.so.cache lacks " + ", ".join(lacking[:3]))
        cache_note = f"ld.so.cache lists all {len(edits.ldcache_libraries)} libraries"
    except OSError:
        if edits.ldcache_libraries:
            bad.append("the container has no /etc/ld.so.cache")
    except OcihookError as err:
        bad.append(f"the container's ld.so.cache: {err}")
    proc_note = (
        "/proc mask not checked: this kernel has no NVIDIA driver (the host read is a fixture tree)"
    )
    if ctx.root.dev_root == "/" and os.path.isdir("/proc/driver/nvidia/gpus") and edits.proc_mask:
        want_dirs = sorted(edits.proc_mask.gpu_dirs)
        got_dirs = sorted(procline.split())
        if got_dirs != want_dirs:
            bad.append(f"/proc/driver/nvidia/gpus shows {got_dirs or 'nothing'} (want {want_dirs})")
        proc_note = f"/proc/driver/nvidia/gpus shows only {', '.join(want_dirs)}"
    if bad:
        return [
            Check(
                "visibility",
                "container",
                "FAIL",
                "; ".join(bad[:5]) + (f" (and {len(bad) - 5} more)" if len(bad) > 5 else ""),
                "check the engine registration (runtime layer) and rerun with ocihook --debug",
            )
        ]
    return [
        Check(
            "visibility",
            "container",
            "PASS",
            f"runc container edited by ocihook: {len(edits.device_nodes)} device nodes with "
            f"the right major:minor, {len(libs)} libraries mounted ro,nosuid,nodev and readable, "
            f"{len(edits.symlinks)} links; {cache_note}; {proc_note}",
        )
    ]


#: The CUDA probe run inside the container (this interpreter, mounted read-only): the CUDA
#: driver API through ctypes, one JSON line on stdout (``{"ok": true, ...}`` or
#: ``{"ok": false, "stage": ..., "error": ...}``).
PROBE = r"""
import ctypes, json, sys
out = {"ok": False, "python": sys.version.split()[0]}
def done():
    print("PROBE " + json.dumps(out)); sys.exit(0 if out["ok"] else 1)
def call(stage, fn, *args):
    r = fn(*args)
    if r != 0:
        out.update(stage=stage, error="CUresult %d" % r); done()
try:
    cu = ctypes.CDLL("libcuda.so.1")
except OSError as exc:
    out.update(stage="dlopen", error=str(exc)); done()
def sym(*names):
    for n in names:
        try:
            return getattr(cu, n)
        except AttributeError:
            pass
    out.update(stage="symbols", error="no " + names[0]); done()
c_int, byref, c_uint64, c_void_p = ctypes.c_int, ctypes.byref, ctypes.c_uint64, ctypes.c_void_p
call("cuInit", sym("cuInit"), 0)
v = c_int(); call("cuDriverGetVersion", sym("cuDriverGetVersion"), byref(v))
out["cudaVersion"] = "%d.%d" % (v.value // 1000, (v.value % 1000) // 10)
n = c_int(); call("cuDeviceGetCount", sym("cuDeviceGetCount"), byref(n)); out["devices"] = n.value
dev = c_int(); call("cuDeviceGet", sym("cuDeviceGet"), byref(dev), 0)
name = ctypes.create_string_buffer(256)
call("cuDeviceGetName", sym("cuDeviceGetName"), name, 256, dev)
out["name"] = name.value.decode(errors="replace")
raw = ctypes.create_string_buffer(16)
call("cuDeviceGetUuid", sym("cuDeviceGetUuid_v2", "cuDeviceGetUuid"), raw, dev)
h = raw.raw.hex()
out["uuid"] = "GPU-%s-%s-%s-%s-%s" % (h[:8], h[8:12], h[12:16], h[16:20], h[20:])
ctx = c_void_p(); call("cuCtxCreate", sym("cuCtxCreate_v2", "cuCtxCreate"), byref(ctx), 0, dev)
words = 1 << 24
size = words * 4
ptr = c_uint64()
alloc = sym("cuMemAlloc_v2"); alloc.argtypes = [ctypes.POINTER(c_uint64), ctypes.c_size_t]
call("cuMemAlloc", alloc, byref(ptr), size)
host = (ctypes.c_uint32 * words)()
for i in range(0, words, 4096):
    host[i] = 0x5a5a0000 + i
htod = sym("cuMemcpyHtoD_v2"); htod.argtypes = [c_uint64, c_void_p, ctypes.c_size_t]
call("cuMemcpyHtoD", htod, ptr.value, ctypes.addressof(host), size)
ptx = (b".version 6.0\n.target sm_50\n.address_size 64\n"
       b".visible .entry inc(.param .u64 p, .param .u32 n) {\n"
       b" .reg .pred %p; .reg .b32 %r<7>; .reg .b64 %rd<5>;\n"
       b" ld.param.u64 %rd1, [p]; ld.param.u32 %r1, [n];\n"
       b" mov.u32 %r2, %ctaid.x; mov.u32 %r3, %ntid.x; mov.u32 %r4, %tid.x;\n"
       b" mad.lo.s32 %r5, %r2, %r3, %r4; setp.ge.u32 %p, %r5, %r1; @%p bra DONE;\n"
       b" cvta.to.global.u64 %rd2, %rd1; mul.wide.u32 %rd3, %r5, 4; add.s64 %rd4, %rd2, %rd3;\n"
       b" ld.global.u32 %r6, [%rd4]; add.s32 %r6, %r6, 1; st.global.u32 [%rd4], %r6;\n"
       b"DONE: ret; }\n\0")
mod = c_void_p(); call("cuModuleLoadData", sym("cuModuleLoadData"), byref(mod), ptx)
fn = c_void_p(); call("cuModuleGetFunction", sym("cuModuleGetFunction"), byref(fn), mod, b"inc")
p_arg = c_uint64(ptr.value); n_arg = ctypes.c_uint32(words)
params = (c_void_p * 2)(ctypes.addressof(p_arg), ctypes.addressof(n_arg))
launch = sym("cuLaunchKernel")
launch.argtypes = [c_void_p] + [ctypes.c_uint] * 7 + [c_void_p, c_void_p, c_void_p]
call("cuLaunchKernel", launch, fn, (words + 255) // 256, 1, 1, 256, 1, 1, 0, None,
     ctypes.cast(params, c_void_p), None)
call("cuCtxSynchronize", sym("cuCtxSynchronize"))
back = (ctypes.c_uint32 * words)()
dtoh = sym("cuMemcpyDtoH_v2"); dtoh.argtypes = [c_void_p, c_uint64, ctypes.c_size_t]
call("cuMemcpyDtoH", dtoh, ctypes.addressof(back), ptr.value, size)
wrong = sum(1 for i in range(0, words, 4096) if back[i] != 0x5a5a0001 + i)
wrong += sum(1 for i in range(1, words, 4099) if i % 4096 and back[i] != 1)
free = sym("cuMemFree_v2"); free.argtypes = [c_uint64]
call("cuMemFree", free, ptr.value)
out.update(ok=wrong == 0, stage="done", wrongWords=wrong, bytes=size)
if wrong:
    out["error"] = "%d words read back wrong" % wrong
done()
"""


def _host_ldcache_lookup() -> dict[str, str]:
    """soname -> path of this machine's ``/etc/ld.so.cache`` (native class only)."""
    from ..linux import ldcache

    flags = {"x86_64": 0x0303, "aarch64": 0x0A03}.get(os.uname().machine)
    out: dict[str, str] = {}
    try:
        with open("/etc/ld.so.cache", "rb") as f:
            for e in ldcache.parse(f.read()):
                if not e.hwcap and (flags is None or e.flags == flags):
                    out.setdefault(e.soname, e.path)
    except (OSError, OcihookError):
        pass
    return out


def _elf_links(path: str) -> tuple[tuple[str, ...], tuple[str, ...], str | None]:
    """``(DT_NEEDED, DT_RUNPATH or DT_RPATH directories with $ORIGIN expanded, PT_INTERP)``
    of the ELF file at ``path`` (pyelftools)."""
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile

    needed: list[str] = []
    runpath: list[str] = []
    interp = None
    origin = os.path.dirname(path)
    with open(path, "rb") as f:
        elf = ELFFile(f)
        for seg in elf.iter_segments():
            if seg["p_type"] == "PT_INTERP":
                interp = str(seg.get_interp_name())  # type: ignore[attr-defined]
        for section in elf.iter_sections():
            if isinstance(section, DynamicSection):
                for tag in section.iter_tags():
                    kind = tag.entry.d_tag
                    if kind == "DT_NEEDED":
                        needed.append(str(tag.needed))  # type: ignore[attr-defined]
                    elif kind in ("DT_RUNPATH", "DT_RPATH"):
                        text = str(getattr(tag, "runpath", None) or getattr(tag, "rpath", ""))
                        for d in text.split(":"):
                            if d:
                                runpath.append(
                                    d.replace("$ORIGIN", origin).replace("${ORIGIN}", origin)
                                )
                break
    return tuple(needed), tuple(runpath), interp


def probe_mounts(
    libcuda_needs: Sequence[str] = (
        "libc.so.6",
        "libm.so.6",
        "libdl.so.2",
        "libpthread.so.0",
        "librt.so.1",
    ),
) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """The read-only bind mounts that bring this interpreter into a container without a
    libc: the interpreter (``/.ocihook-doctor/bin/python3``), its standard library
    (``/.ocihook-doctor/lib/python3.X``), every shared library it, ``_ctypes`` and
    libcuda need (DT_NEEDED closure read with pyelftools, resolved through this machine's
    ``ld.so.cache``; in ``/.ocihook-doctor/so``) and its ELF interpreter at its own path.

    Returns:
        ``(mounts, env, args)`` for the container's ``config.json``.

    Raises:
        FileNotFoundError: a needed library is not found on this machine.
    """
    import sysconfig

    exe = os.path.realpath(sys.executable)
    stdlib = os.path.realpath(sysconfig.get_paths()["stdlib"])
    ver = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    import _ctypes

    ctypes_so = os.path.realpath(_ctypes.__file__ or "")
    cache = _host_ldcache_lookup()
    machine = os.uname().machine
    system_dirs = (
        "/lib64",
        "/usr/lib64",
        f"/lib/{machine}-linux-gnu",
        f"/usr/lib/{machine}-linux-gnu",
    )
    wanted: dict[str, str] = {}
    # (name, directories its requester's RUNPATH names), resolved as ld.so would
    names: list[tuple[str, tuple[str, ...]]] = [(n, ()) for n in libcuda_needs]
    todo = [exe, ctypes_so] if ctypes_so.endswith(".so") else [exe]
    done: set[str] = set()
    needed_by_python: set[str] = set()
    while todo or names:
        while names:
            n, dirs = names.pop()
            if n in wanted:
                continue
            path = next(
                (os.path.join(d, n) for d in dirs if os.path.exists(os.path.join(d, n))), None
            )
            path = path or cache.get(n)
            if path is None:
                path = next(
                    (os.path.join(d, n) for d in system_dirs if os.path.exists(os.path.join(d, n))),
                    None,
                )
            if path is None:
                if n in libcuda_needs and n not in needed_by_python:
                    continue  # glibc 2.34+ folds libdl/libpthread/librt into libc
                raise FileNotFoundError(f"{n} (needed by the CUDA probe's interpreter) not found")
            wanted[n] = os.path.realpath(path)
            todo.append(wanted[n])
        if todo:
            p = todo.pop()
            if p in done:
                continue
            done.add(p)
            needed, runpath, _interp_name = _elf_links(p)
            needed_by_python.update(needed)
            names.extend((n, runpath) for n in needed)
    mounts: list[dict[str, Any]] = []
    opts = ["rbind", "ro", "nosuid", "nodev"]

    def bind(src: str, dst: str) -> None:
        mounts.append({"destination": dst, "type": "bind", "source": src, "options": opts})

    bind(exe, f"{PROBE_DIR}/bin/python3")
    bind(stdlib, f"{PROBE_DIR}/lib/{ver}")
    for n, p in sorted(wanted.items()):
        bind(p, f"{PROBE_DIR}/so/{n}")
    interp = _elf_links(exe)[2]
    if interp:
        bind(os.path.realpath(interp), interp)
    env = [
        f"PYTHONHOME={PROBE_DIR}",
        f"LD_LIBRARY_PATH={PROBE_DIR}/so",
        "PYTHONDONTWRITEBYTECODE=1",
    ]
    args = [f"{PROBE_DIR}/bin/python3", "-S", "-B", f"{PROBE_DIR}/probe.py"]
    return mounts, env, args


def run_probe(bundle: str, runc: str, state: str) -> dict[str, Any]:
    """Run :data:`PROBE` in the container of ``bundle`` (already edited by ocihook) with
    :func:`probe_mounts`; returns its JSON result (``{"ok": false, "stage": "runc", ...}``
    when it printed none)."""
    rootfs = os.path.join(bundle, "rootfs")
    os.makedirs(os.path.join(rootfs, PROBE_DIR.lstrip("/")), exist_ok=True)
    with open(os.path.join(rootfs, PROBE_DIR.lstrip("/"), "probe.py"), "w") as f:
        f.write(PROBE)
    try:
        mounts, env, args = probe_mounts()
    except (FileNotFoundError, OcihookError) as exc:
        return {"ok": False, "stage": "prepare", "error": str(exc)}
    # CUDA's IPC and the runtime's defaults (runc spec) have a /dev/shm; busybox's config not
    shm = {
        "destination": "/dev/shm",
        "type": "tmpfs",
        "source": "shm",
        "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"],
    }
    _set_args(bundle, args, env, [*mounts, shm])
    proc = _run_runc(runc, bundle, state, timeout=180)
    for line in proc.stdout.splitlines():
        if line.startswith("PROBE "):
            try:
                result: dict[str, Any] = json.loads(line[6:])
                return result
            except json.JSONDecodeError:
                break
    tail = (proc.stderr.strip().splitlines() or proc.stdout.strip().splitlines() or ["no output"])[
        -1
    ]
    return {"ok": False, "stage": "runc", "error": f"exit {proc.returncode}: {tail}"}


def real_gpu_reason(ctx: Context) -> str:
    """Why this host has no real GPU to run on (``""`` when it has): the dev root must be
    ``/`` with the kernel driver loaded and GPUs listed."""
    if ctx.root.dev_root != "/":
        return f"the dev root is {ctx.root.dev_root}, not this machine's: no real GPU to run on"
    if not os.path.exists("/proc/driver/nvidia/version"):
        return "this machine's kernel has no NVIDIA driver"
    if ctx.host is None or not ctx.host.gpus:
        return "no GPU found (see host)"
    return ""


def check_gpu_operation(
    ctx: Context, workdir: str, *, runc: str | None = None, options: Any = None
) -> list[Check]:
    """Layer 5: :data:`PROBE` in the container of :func:`check_visibility` (see the
    module docstring). PASS only when every word read back is right; SKIP (with the
    reason) without a real GPU or without the container."""
    why = real_gpu_reason(ctx)
    bundle = ctx.facts.get("bundle")
    if not why and bundle is None:
        why = "no container (see visibility)"
    if why:
        return [Check("gpu", "CUDA operation", "SKIP", why)]
    runc = runc or shutil.which("runc")
    assert runc is not None
    try:  # a fresh bundle: the visibility container's rootfs has been through a start
        bundle, _plan = prepare_bundle(
            ctx, os.path.join(workdir, "gpu"), busybox=ctx.facts["busybox"], options=options
        )
    except OcihookError as exc:
        return [Check("gpu", "CUDA operation", "FAIL", f"ocihook edit failed: {exc}", "")]
    result = run_probe(bundle, runc, os.path.join(workdir, "runc"))
    ctx.facts["probe"] = result
    if not result.get("ok"):
        return [
            Check(
                "gpu",
                "CUDA operation",
                "FAIL",
                f"failed at {result.get('stage')}: {result.get('error')}",
                "compare with nvidia-smi on the host; cuInit errors 100/999 point at the device "
                "nodes or nvidia-uvm, 3 at the driver libraries",
            )
        ]
    plan = ctx.facts.get("plan")
    uuids = {u for _i, u, _m in plan.gpus} if plan is not None else set()
    same = (
        ""
        if not uuids or result.get("uuid") in uuids
        else f" (host lists {', '.join(sorted(uuids))})"
    )
    status = "PASS" if not same else "FAIL"
    return [
        Check(
            "gpu",
            "CUDA operation",
            status,
            f"inside the container: {result.get('name')} {result.get('uuid')}{same}, CUDA "
            f"{result.get('cudaVersion')}, {result.get('bytes', 0) >> 20} MiB allocated, written, "
            "incremented by a JIT-compiled PTX kernel and read back correctly",
            ""
            if status == "PASS"
            else "the container got another GPU than asked: check the request layer",
        )
    ]


# --- the whole run ---------------------------------------------------------------------


class Report(Record):
    """A doctor run: its checks in layer order and the facts for the record."""

    checks: tuple[Check, ...]
    facts: Mapping[str, Any]

    def layer_status(self, layer: str) -> str:
        """The worst status of ``layer``'s checks."""
        return worst(c.status for c in self.checks if c.layer == layer)

    @property
    def failed(self) -> bool:
        """Whether any check FAILed."""
        return any(c.status == "FAIL" for c in self.checks)


def run_doctor(
    root: HostRoot,
    *,
    config_root: str = "/",
    engines: Sequence[str] | None = None,
    bundle: str | None = None,
    image_env: str | None = None,
    driver_version: str | None = None,
    gpu_backend: str = "auto",
    containers: bool = True,
    runc: str | None = None,
    busybox: str | None = None,
    options: Any = None,
    workdir: str | None = None,
) -> Report:
    """Run every layer (see the module docstring) and return the :class:`Report`.

    Args:
        root: the host to check.
        config_root: root under which engine configuration and CDI specs are read.
        engines: only these engines (default: every installed one).
        bundle: a bundle whose request to check.
        image_env: a file with an image's environment (:func:`read_image_env`).
        driver_version: also check the image against this driver (:func:`check_upgrade`).
        gpu_backend: GPU enumeration (``auto``: NVML when it works).
        containers: run the visibility and GPU layers (False: SKIP them).
        runc, busybox: programs for the container layers (default: from ``PATH``).
        options: the operator's settings (:class:`ocihook.settings.Options`).
        workdir: where to build the container (default: a temporary directory, removed).

    Raises:
        RequestError: ``image_env`` cannot be read.
    """
    import tempfile

    ctx = Context(root, config_root)
    checks = check_host(ctx, gpu_backend=gpu_backend)
    checks += check_runtime(ctx, engines)
    env = None
    image: dict[str, Any] = {}
    if image_env is not None:
        env, image = read_image_env(image_env)
    checks += check_request(ctx, env, bundle=bundle, options=options, image=image)
    if driver_version is not None:
        upgrade_env = env if env is not None else ctx.facts.get("request_env") or {}
        checks.append(check_upgrade(ctx, upgrade_env, driver_version))
    if not containers:
        checks += [
            Check("visibility", "container", "SKIP", "--no-container"),
            Check("gpu", "CUDA operation", "SKIP", "--no-container"),
        ]
    else:
        tmp = workdir or tempfile.mkdtemp(prefix="ocihook-doctor-")
        try:
            checks += check_visibility(ctx, tmp, runc=runc, busybox=busybox, options=options)
            checks += check_gpu_operation(ctx, tmp, runc=runc, options=options)
        finally:
            if workdir is None:
                shutil.rmtree(tmp, ignore_errors=True)
    for key in ("bundle", "plan", "busybox", "request_env"):
        ctx.facts.pop(key, None)
    if ctx.host is not None:
        ctx.facts["gpus"] = [
            {
                "index": g.index,
                "uuid": g.uuid,
                "model": g.model,
                "busId": g.bus_id,
                "migMode": "enabled" if g.mig_devices else "disabled",
                "migDevices": [m.uuid or f"{g.index}:{m.gi}:{m.ci}" for m in g.mig_devices],
            }
            for g in ctx.host.gpus
        ]
    return Report(tuple(checks), ctx.facts)


def deployment_record(report: Report, *, config: Any = None) -> dict[str, Any]:
    """The deployment record of ``report`` (``specs/doctor-record.schema.json``): the
    host's driver and CUDA versions, kernel, GPUs, ocihook's version and configuration
    hash, each engine's runtime configuration, the CDI specs' hashes, the image's digest
    and requirements, and every check."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        ours = version("ocihook")
    except PackageNotFoundError:  # pragma: no cover - run from a source tree
        ours = "unknown"
    f = report.facts
    cfg_doc = config.as_dict() if config is not None else {}
    cfg_hash = hashlib.sha256(json.dumps(cfg_doc, sort_keys=True, default=str).encode()).hexdigest()
    import datetime

    return {
        "recordVersion": "1",
        "createdAt": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "ocihook": {
            "version": ours,
            "configFile": getattr(config, "source", None) or None,
            "configHash": "sha256:" + cfg_hash,
        },
        "kernel": f.get("kernel", {}),
        "driver": {
            "version": f.get("driverVersion"),
            "cudaVersion": f.get("cudaVersion"),
            "cudaVersionSource": f.get("cudaSource", "unknown"),
        },
        "gpus": f.get("gpus", []),
        "engines": f.get("engines", {}),
        "cdiSpecs": f.get("cdiSpecs", []),
        "image": f.get("image"),
        "probe": f.get("probe"),
        "layers": {layer: report.layer_status(layer) for layer in LAYERS},
        "checks": [c.to_dict() for c in report.checks],
    }
