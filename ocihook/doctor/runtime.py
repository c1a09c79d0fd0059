"""Layer 2, **runtime**: each engine's configuration registers an ocihook that exists
and runs on a real interpreter, and no NVIDIA Container Toolkit beside it (read by
:mod:`ocihook.engines`); the CDI specs are valid and generated for the loaded driver
(see :mod:`ocihook.doctor`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Sequence
from typing import Any

from ..cdi.generate import K8S_KINDS
from ..core.errors import OcihookError
from ..core.readfile import read_regular
from ..engines import CDI_SPEC_DIRS, READERS, Registration
from ..engines.common import read_text_if_regular
from .context import Context
from .registrations import installed_script_python
from .report import Check

__all__ = ["REFRESH_FIX", "REFRESH_UNIT", "check_cdi", "check_runtime"]

#: The systemd unit that regenerates the CDI spec (``packaging/systemd``).
REFRESH_UNIT = "ocihook-cdi-refresh.service"
#: The fix for a stale spec of the Kubernetes device plugin, which writes it at its start.
PLUGIN_FIX = "restart the ocihook device plugin's pod on this node: it writes its spec at start"
#: The fix a stale or invalid CDI spec's check gives.
REFRESH_FIX = (
    f"regenerate it: systemctl start {REFRESH_UNIT} (and enable ocihook-cdi-refresh.path to "
    "refresh on driver changes), or ocihook cdi generate --output <the spec file>"
)
#: The daemon whose presence on ``PATH`` says an engine is installed.
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
    text = read_text_if_regular(path, 4096)
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
        # the program of the registration (config.options.HOOK_PROGRAM) imports run();
        # one written before it existed, main()
        names_run = any(a.endswith("from ocihook._main import run; run()") for a in reg.args)
        statement = "from ocihook._main import run" if names_run else "import ocihook._main"
        return _shim(os.path.realpath(path)) or _imports_ocihook(path, statement)
    head = read_text_if_regular(path, 512) or ""
    python = installed_script_python(path, head)  # ocihook's sh-started commands
    if python is not None:
        if not os.path.exists(python):
            return f"{path} starts {python}, which does not exist"
        return _shim(os.path.realpath(python)) or _imports_ocihook(python)
    if head.startswith("#!"):
        interp = head[2:].splitlines()[0].strip().split(" ", 1)[0]
        if interp.endswith("/env"):
            return f"{path} starts its interpreter through {interp} (PATH decides which Python)"
        if not os.path.exists(interp):
            return f"{path}'s interpreter {interp} does not exist"
        return _shim(os.path.realpath(interp)) or _imports_ocihook(interp)
    return None


def _imports_ocihook(python: str, statement: str = "import ocihook._main") -> str | None:
    """Why the interpreter ``python`` (a host program the engine's configuration names)
    cannot run ``statement`` (what the registration imports of ocihook) in isolated mode,
    as the registered hook and wrapper run it; or ``None``. Run with a timeout, nothing
    from any container involved."""
    try:
        proc = subprocess.run(
            [python, "-I", "-c", statement],
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

    chosen = list(engines or READERS)
    checks: list[Check] = []
    fix_for = {e: f"ocihook runtime configure --runtime {e}" for e in READERS}
    for engine in chosen:
        try:
            found = READERS[engine](ctx.config_root)
        except EngineConfigError as exc:
            checks.append(Check("runtime", engine, "FAIL", str(exc), "fix the file, then rerun"))
            continue
        files, regs = found.files, found.registrations
        if found.facts is not None:
            ctx.facts.setdefault("engines", {})[engine] = dict(found.facts)
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
    checks += check_oci_runtimes(ctx)
    checks += check_cdi(ctx)
    from .specs import check_spec_collisions, check_spec_hooks

    checks += check_spec_hooks(ctx, CDI_SPEC_DIRS)
    checks += check_spec_collisions(ctx, CDI_SPEC_DIRS)
    return checks


def check_oci_runtimes(ctx: Context, names: Sequence[str] = ("runc", "crun")) -> list[Check]:
    """One check per OCI runtime of ``names`` on ``PATH`` (reading the real ``/`` only):
    its version, WARN for a runc older than 1.1.14, whose bind-mount target handling an
    image can race in spec mode and the wrapper (CVE-2024-45310:
    :mod:`ocihook.linux.ociruntime`). A runtime that is not installed gives no check."""
    from ..linux.ociruntime import mount_race_warning, runtime_version

    if ctx.config_root != "/":
        return []
    checks: list[Check] = []
    for name in names:
        path = shutil.which(name)
        if path is None:
            continue
        found = runtime_version(path)
        title = f"OCI runtime {name}"
        if found is None:
            checks.append(Check("runtime", title, "WARN", f"{path} --version says no version"))
            continue
        warning = mount_race_warning(path)
        if warning is not None:
            checks.append(
                Check(
                    "runtime",
                    title,
                    "WARN",
                    warning,
                    "install runc 1.1.14 or later, or register ocihook in hook mode",
                )
            )
        else:
            checks.append(Check("runtime", title, "PASS", f"{path}: {found[0]} {found[1]}"))
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


def check_cdi(ctx: Context, spec_dirs: Sequence[str] = CDI_SPEC_DIRS) -> list[Check]:
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
                data = read_regular(path)
            except OSError as exc:
                checks.append(Check("runtime", f"CDI spec {path}", "FAIL", exc.strerror or "", ""))
                continue
            try:
                doc = decode_spec(data, path=path)
            except OcihookError as exc:
                checks.append(Check("runtime", f"CDI spec {path}", "FAIL", str(exc), REFRESH_FIX))
                continue
            kind = doc.get("kind") if isinstance(doc, dict) else None
            plugin = kind == K8S_KINDS["nvidia"]  # the device plugin's: it writes it at start
            if not (isinstance(kind, str) and (kind.startswith("nvidia.com/") or plugin)):
                continue
            fix = PLUGIN_FIX if plugin else REFRESH_FIX
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
                        fix,
                    )
                )
                continue
            try:
                spec = load_spec(data, path=path)
            except OcihookError as exc:
                checks.append(Check("runtime", name_, "FAIL", str(exc), fix))
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
                checks.append(Check("runtime", name_, "FAIL", "stale: " + "; ".join(what), fix))
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
