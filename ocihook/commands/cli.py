"""The ``ocihook`` commands that are not on a container's start path (click).

``ocihook edit`` and ``ocihook hook`` are parsed by :mod:`ocihook._main` without click;
they appear here too so that ``ocihook --help`` lists them, and forward to it.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from typing import Any

import click

from ..core.errors import DiscoveryError, OcihookError, exit_code_for
from ..core.hostroot import HostRoot

_PASS_THROUGH = {"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []}


def _root_options(f: Any) -> Any:
    f = click.option(
        "--library-path",
        multiple=True,
        metavar="DIR",
        help="Directory in the driver root to search for libraries ld.so.cache lacks.",
    )(f)
    f = click.option(
        "--ldcache", default=None, help="ld.so.cache path inside the driver root [config]."
    )(f)
    f = click.option("--dev-root", default=None, help="Root holding dev/, proc/, sys/ [config].")(f)
    f = click.option("--driver-root", default=None, help="Root of the user-space driver [config].")(
        f
    )
    f = click.option(
        "--config",
        "config_path",
        default=None,
        metavar="PATH",
        help="Configuration file (default: $OCIHOOK_CONFIG, /etc/ocihook/config.toml).",
    )(f)
    return f


def _root(
    driver_root: str | None,
    dev_root: str | None,
    ldcache: str | None,
    library_path: tuple[str, ...] = (),
    config_path: str | None = None,
) -> HostRoot:
    """The host to read: the configuration's roots with the command line's on top."""
    import os

    from ..config import load_config
    from ..core import log

    cfg = load_config(config_path)
    log.configure(cfg.log_file or None, cfg.log_level)
    base = cfg.host_root()
    return HostRoot(
        os.path.abspath(driver_root) if driver_root else base.driver_root,
        os.path.abspath(dev_root) if dev_root else base.dev_root,
        ldcache=ldcache or base.ldcache,
        library_dirs=(*library_path, *base.library_dirs),
    )


class _PipeClosed(Exception):
    """Standard output was closed by its reader; carried past click, which turns EPIPE
    into exit status 1."""


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            raise _PipeClosed() from None
        except OcihookError as e:
            click.echo(f"ocihook: error[{e.reference}]: {e}", err=True)
            ctx.exit(exit_code_for(e))


@click.group(cls=_Group)
@click.version_option(package_name="ocihook")
def cli() -> None:
    """GPU access for OCI containers: an OCI hook, a bundle editor and a library."""


@cli.command(context_settings=_PASS_THROUGH, add_help_option=False)
@click.pass_context
def edit(ctx: click.Context) -> None:
    """Spec mode: edit a bundle's config.json before runc create/run (see edit --help)."""
    from .fast import run_fast

    ctx.exit(run_fast(["edit", *ctx.args]))


@cli.command(context_settings=_PASS_THROUGH, add_help_option=False)
@click.pass_context
def hook(ctx: click.Context) -> None:
    """Hook mode: run as an OCI hook, state JSON on stdin (see hook --help)."""
    from .fast import run_fast

    ctx.exit(run_fast(["hook", *ctx.args]))


_BACKEND_OPTION = click.option(
    "--gpu-backend",
    type=click.Choice(["auto", "procfs", "nvml"]),
    default="auto",
    show_default=True,
    help="GPU enumeration: NVML (nvidia-ml-py) when it works, else procfs.",
)


def _info_dict(host: Any) -> dict[str, Any]:
    return {
        "driverVersion": host.driver_version,
        "cudaVersion": host.cuda_version,
        "driverRoot": host.root.driver_root,
        "devRoot": host.root.dev_root,
        "gpuBackend": host.gpu_backend,
        "gpus": [
            {
                "index": g.index,
                "minor": g.minor,
                "model": g.model,
                "brand": g.brand,
                "uuid": g.uuid,
                "busId": g.bus_id,
                "architecture": g.architecture,
                "migDevices": [
                    {"gi": m.gi, "ci": m.ci, "uuid": m.uuid, "index": m.nvml_index}
                    for m in g.mig_devices
                ],
            }
            for g in host.gpus
        ],
        "warnings": list(host.warnings),
    }


@cli.command()
@_root_options
@_BACKEND_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def info(
    config_path: str | None,
    driver_root: str | None,
    dev_root: str | None,
    ldcache: str | None,
    library_path: tuple[str, ...],
    gpu_backend: str,
    as_json: bool,
) -> None:
    """Print the driver and CUDA versions and each GPU (like nvidia-container-cli info),
    then the AMD and Intel GPUs when their drivers are loaded."""
    from ..discovery.nvidia import discover

    root = _root(driver_root, dev_root, ldcache, library_path, config_path)
    drm_hosts, problems = _drm_hosts(root)
    data: dict[str, Any] = {}
    if _want_nvidia(root, drm_hosts, problems):
        data = _info_dict(discover(root, capabilities=(), gpu_backend=gpu_backend))
    elif not drm_hosts:
        raise problems[0]
    for host in drm_hosts:
        data[host.vendor] = _drm_info_dict(host)
    if as_json:
        click.echo(json.dumps(data, indent=2))
    else:
        _print_info(data)
    for e in problems:
        click.echo(f"ocihook: warning: {e}", err=True)


def _want_nvidia(root: HostRoot, drm_hosts: Sequence[Any], problems: Sequence[Any]) -> bool:
    """Whether to discover NVIDIA: its driver is loaded, or no other vendor's is (then its
    "no driver" error is the one to show)."""
    return os.path.exists(root.proc("driver/nvidia/version")) or not (drm_hosts or problems)


def _drm_hosts(root: HostRoot, vendors: Sequence[str] | None = None) -> tuple[list[Any], list[Any]]:
    """The AMD/Intel hosts whose drivers are loaded (of ``vendors``, default all), and
    the discovery errors of those that failed (AMD without KFD)."""
    from ..core.errors import DiscoveryError
    from ..discovery.drm import discover_vendor, present_vendors

    hosts: list[Any] = []
    problems: list[Any] = []
    for vendor in present_vendors(root):
        if vendors is not None and vendor not in vendors:
            continue
        try:
            hosts.append(discover_vendor(vendor, root))
        except DiscoveryError as e:
            problems.append(e)
    return hosts, problems


def _drm_info_dict(host: Any) -> dict[str, Any]:
    return {
        "driverVersion": host.driver_version,
        "sharedNodes": [n.path for n in host.shared_nodes],
        "gpus": [
            {
                "index": g.index,
                "card": None if g.card is None else g.card.path,
                "render": g.render.path,
                "busId": g.bus_id,
                "driver": g.driver,
                "deviceId": g.device_id,
                "uuid": g.uuid,
                "uniqueId": g.unique_id,
                "architecture": g.architecture,
                "partition": g.partition,
                "computePartition": g.compute_partition,
                "memoryPartition": g.memory_partition,
                "gids": sorted({n.gid for n in g.nodes}),
            }
            for g in host.gpus
        ],
        "warnings": list(host.warnings),
    }


_VENDOR_TITLES = {"amd": "AMD GPUs (amdgpu, ROCm)", "intel": "Intel GPUs (i915/xe)"}


def _print_info(data: dict[str, Any]) -> None:
    if "driverVersion" in data:
        _print_nvidia_info(data)
    for vendor, title in _VENDOR_TITLES.items():
        host = data.get(vendor)
        if host is None:
            continue
        if "driverVersion" in data or vendor != next(v for v in _VENDOR_TITLES if v in data):
            click.echo("")
        version = f" {host['driverVersion']}" if host["driverVersion"] else ""
        click.echo(f"{title}{version}: {len(host['gpus'])}")
        if host["sharedNodes"]:
            click.echo(f"Shared nodes:   {' '.join(host['sharedNodes'])}")
        for g in host["gpus"]:
            click.echo("")
            click.echo(f"Device Index:   {g['index']}")
            click.echo(f"Card:           {g['card'] or '-'}")
            click.echo(f"Render:         {g['render']}")
            click.echo(f"Bus Location:   {g['busId']}")
            click.echo(f"Driver:         {g['driver']}  device {g['deviceId'] or 'unknown'}")
            if g["uuid"]:
                click.echo(f"GPU UUID:       {g['uuid']}  (unique id {g['uniqueId']})")
            if g["architecture"]:
                click.echo(f"Architecture:   {g['architecture']}")
            if g["partition"] is not None:
                modes = "/".join(m for m in (g["computePartition"], g["memoryPartition"]) if m)
                click.echo(f"Partition:      {g['partition']} ({modes})")
        for w in host["warnings"]:
            click.echo(f"ocihook: warning: {vendor}: {w}", err=True)


def _print_nvidia_info(data: dict[str, Any]) -> None:
    click.echo(f"NVRM version:   {data['driverVersion']}")
    click.echo(f"CUDA version:   {data['cudaVersion'] or 'unknown (needs NVML)'}")
    for g in data["gpus"]:
        click.echo("")
        click.echo(f"Device Index:   {g['index']}")
        click.echo(f"Device Minor:   {g['minor']}")
        click.echo(f"Model:          {g['model']}")
        click.echo(f"Brand:          {g['brand'] or 'unknown'}")
        click.echo(f"GPU UUID:       {g['uuid']}")
        click.echo(f"Bus Location:   {g['busId']}")
        click.echo(f"Architecture:   {g['architecture'] or 'unknown'}")
        for m in g["migDevices"]:
            click.echo(f"MIG Device:     gi {m['gi']} ci {m['ci']}  {m['uuid'] or ''}".rstrip())
    for w in data["warnings"]:
        click.echo(f"ocihook: warning: {w}", err=True)


@cli.command(name="list")
@_root_options
@_BACKEND_OPTION
@click.option(
    "-d", "--device", "devices", multiple=True, help="GPU index or UUID (default: all GPUs)."
)
@click.option("-l", "--libraries", is_flag=True, help="List driver libraries.")
@click.option("-b", "--binaries", is_flag=True, help="List driver binaries.")
@click.option("-i", "--ipcs", is_flag=True, help="List driver IPC paths.")
@click.option("-f", "--firmwares", is_flag=True, help="List driver firmware files.")
@click.option("--compat32", is_flag=True, help="Include the 32-bit libraries.")
@click.option(
    "--check",
    is_flag=True,
    help="Also check each NVIDIA driver library in depth (pyelftools): class, machine, "
    "DT_SONAME, DT_NEEDED; exit 6 when one fails.",
)
@click.option(
    "--vendor",
    type=click.Choice(["nvidia", "amd", "intel"]),
    default=None,
    help="Only this vendor's GPUs (default: every vendor whose driver is loaded).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def list_cmd(
    config_path: str | None,
    driver_root: str | None,
    dev_root: str | None,
    ldcache: str | None,
    library_path: tuple[str, ...],
    gpu_backend: str,
    devices: tuple[str, ...],
    libraries: bool,
    binaries: bool,
    ipcs: bool,
    firmwares: bool,
    compat32: bool,
    check: bool,
    vendor: str | None,
    as_json: bool,
) -> None:
    """List the host files a container gets (like nvidia-container-cli list): device nodes
    of the GPUs (all, or --device), then binaries, libraries, IPC paths and firmware of
    every driver capability. Without -l/-b/-i/-f every kind is listed. The device nodes of
    AMD and Intel GPUs (whose drivers are loaded) follow NVIDIA's; --device selects
    NVIDIA GPUs, or with --vendor amd|intel (or on a host with only that vendor) that
    vendor's, in the forms of AMD_VISIBLE_DEVICES / INTEL_VISIBLE_DEVICES. With --check,
    each NVIDIA library (64-bit, with --compat32 also 32-bit) is checked with
    ocihook.linux.elf.check_library; each problem is a line on stderr."""
    from ..discovery.nvidia import discover

    root = _root(driver_root, dev_root, ldcache, library_path, config_path)
    drm_hosts, problems = _drm_hosts(root, None if vendor is None else (vendor,))
    if problems and (vendor is not None or not drm_hosts):
        raise problems[0]
    nvidia = vendor in (None, "nvidia") and _want_nvidia(root, drm_hosts, problems)
    every = not (libraries or binaries or ipcs or firmwares)
    out: dict[str, list[str]] = {"devices": []}
    failed: list[str] = []
    if nvidia:
        nv = discover(root, gpu_backend=gpu_backend)
        _list_nvidia(out, nv, devices, every, compat32, (libraries, binaries, ipcs, firmwares))
        if check:
            failed = _check_libraries(nv, {64, 32} if compat32 else {64})
    elif vendor is None and not drm_hosts:
        raise problems[0] if problems else DiscoveryError("no GPU driver found", path=root.dev_root)
    for host in drm_hosts:
        out["devices"] += _drm_list_nodes(host, devices if not nvidia else ())
    if vendor is not None and vendor != "nvidia" and not drm_hosts:
        raise DiscoveryError(f"no {vendor} GPU driver is loaded", path=root.sys("module"))
    for e in problems:
        click.echo(f"ocihook: warning: {e}", err=True)
    if as_json:
        click.echo(json.dumps(out, indent=2))
    else:
        for paths in out.values():
            for path in paths:
                click.echo(path)
    if failed:
        raise DiscoveryError(
            f"{len(failed)} driver libraries failed the ELF check (listed above)",
            path=root.driver_root,
        )


def _check_libraries(host: Any, classes: set[int]) -> list[str]:
    """Check each of ``host``'s libraries of ``classes`` with
    :func:`ocihook.linux.elf.check_library` against its discovery record (class,
    ``ld.so.cache`` key and flags); print each problem on stderr; return the host paths of
    the libraries that failed."""
    from ..linux.elf import check_library

    failed = []
    for lib in host.libraries:
        if lib.elf_class not in classes:
            continue
        problems = check_library(
            lib.host_path, elf_class=lib.elf_class, soname=lib.soname, abi_flags=lib.abi_flags
        )
        for problem in problems:
            click.echo(f"ocihook: check: {lib.host_path}: {problem}", err=True)
        if problems:
            failed.append(lib.host_path)
    return failed


def _drm_list_nodes(host: Any, devices: Sequence[str]) -> list[str]:
    """Host paths of ``host``'s shared nodes and the nodes of its GPUs (all, or those
    ``devices`` names in the vendor's request forms)."""
    from ..request import drm_request_from_env, select_drm_gpus

    raw = ",".join(devices) or "all"
    request = drm_request_from_env(
        host.vendor, {f"{host.vendor.upper()}_VISIBLE_DEVICES": raw}, source="--device"
    )
    gpus = () if request is None else select_drm_gpus(request, host.gpus)
    nodes = [n.host_path for n in host.shared_nodes] if gpus else []
    nodes += [n.host_path for g in gpus for n in g.nodes if n.present]
    return nodes


def _list_nvidia(
    out: dict[str, list[str]],
    host: Any,
    devices: Sequence[str],
    every: bool,
    compat32: bool,
    kinds: tuple[bool, bool, bool, bool],
) -> None:
    from ..request import request_from_env, select_gpus

    libraries, binaries, ipcs, firmwares = kinds
    wanted = request_from_env(
        {"NVIDIA_VISIBLE_DEVICES": ",".join(devices) or "all"}, source="--device"
    )
    selected = select_gpus(wanted, host.gpus)
    nodes = [n.host_path for n in host.control_nodes]
    if host.modeset is not None and host.modeset.present:
        nodes.append(host.modeset.host_path)
    for g in selected:
        nodes.append(host.gpu_nodes[g.minor].host_path)
        dri = host.dri.get(g.bus_id)
        if dri is not None:
            nodes += [n.host_path for n in dri.nodes if n.present]
        nodes += [n.host_path for m in g.mig_devices for n in m.nodes]
    classes = {64, 32} if compat32 else {64}
    out["devices"] = nodes
    if every or binaries:
        out["binaries"] = [f.host_path for f in host.files if f.kind == "binary"]
    if every or libraries:
        out["libraries"] = [lib.host_path for lib in host.libraries if lib.elf_class in classes]
    if every or ipcs:
        out["ipcs"] = [f.host_path for f in host.files if f.kind == "ipc"]
    if every or firmwares:
        out["firmwares"] = [f.host_path for f in host.files if f.kind == "firmware"]


@cli.command()
@_root_options
@click.option("-b", "--bundle", default=".", show_default=True, help="Bundle directory.")
def plan(
    config_path: str | None,
    driver_root: str | None,
    dev_root: str | None,
    ldcache: str | None,
    library_path: tuple[str, ...],
    bundle: str,
) -> None:
    """Print the plan (container edits) for a bundle as JSON, without changing anything."""
    from ..discovery.drm import discover_vendor
    from ..discovery.nvidia import discover
    from ..oci.bundle import load_bundle
    from ..pipeline import layout_for_rootfs
    from ..plan import make_drm_plan, make_plan, merge_plans
    from ..request import drm_requests_from_spec, request_from_spec

    b = load_bundle(bundle)
    request = request_from_spec(b.config, path=b.config_path)
    drm_requests = drm_requests_from_spec(b.config, path=b.config_path)
    root = _root(driver_root, dev_root, ldcache, library_path, config_path)
    p = None
    if not request.is_void or not drm_requests:
        p = make_plan(discover(root), request, layout_for_rootfs(b.rootfs))
    for r in drm_requests:
        drm = make_drm_plan(discover_vendor(r.vendor, root), r)
        p = drm if p is None else merge_plans(p, drm)
    assert p is not None
    click.echo(json.dumps(p.to_dict(), indent=2))


@cli.command()
@click.option("--devices", default="0,3", show_default=True, help="NVIDIA_VISIBLE_DEVICES.")
@click.option(
    "--mode",
    type=click.Choice(["spec", "hook"]),
    default="spec",
    show_default=True,
    help="spec: edit config.json; hook: register ocihook as a prestart hook.",
)
@click.option("--workdir", default=None, help="Build here and keep it (default: temporary).")
def demo(devices: str, mode: str, workdir: str | None) -> None:
    """Run a busybox container under runc with two GPUs of the simulated host."""
    from ..sim.demo import run_demo

    sys.exit(run_demo(devices=devices, mode=mode, workdir=workdir))


@cli.command()
@click.argument("dest")
@click.option("--gpus", default=8, show_default=True, help="Number of GPUs (1-8).")
@click.option("--no-dev-nodes", is_flag=True, help="Do not mknod /dev nodes.")
@click.option(
    "--vendor",
    type=click.Choice(["nvidia", "amd", "amd-no-kfd", "intel", "intel-sriov", "mixed"]),
    default="nvidia",
    show_default=True,
    help="Which host: NVIDIA (--gpus), the MI210-class ROCm host (with or without KFD), "
    "the iGPU + dGPU Intel host (with an SR-IOV Flex card), or NVIDIA + AMD.",
)
def simhost(dest: str, gpus: int, no_dev_nodes: bool, vendor: str) -> None:
    """Write the built-in simulated GPU host into DEST."""
    from ..sim import host as sim

    nodes = False if no_dev_nodes else None
    if vendor == "nvidia":
        click.echo(sim.build(dest, gpus=gpus, make_dev_nodes=nodes).root)
        return
    from ..sim import vendors as simvendors

    if vendor.startswith("amd"):
        built = simvendors.build_amd(dest, kfd=vendor == "amd", make_dev_nodes=nodes)
    elif vendor.startswith("intel"):
        built = simvendors.build_intel(dest, sriov=vendor == "intel-sriov", make_dev_nodes=nodes)
    else:
        built = simvendors.build_mixed(dest, make_dev_nodes=nodes)
    click.echo(built.root)


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(str(value))  # a JSON string is a TOML basic string


@cli.group()
def config() -> None:
    """The operator's configuration file (/etc/ocihook/config.toml)."""


@config.command()
@click.option(
    "--config",
    "config_path",
    default=None,
    metavar="PATH",
    help="Configuration file (default: $OCIHOOK_CONFIG, /etc/ocihook/config.toml).",
)
def show(config_path: str | None) -> None:
    """Print the effective configuration as TOML (every key, defaults filled in)."""
    from ..config import load_config

    cfg = load_config(config_path)
    click.echo(f"# effective configuration; file: {cfg.source or '(none: built-in defaults)'}")
    for key, value in cfg.as_dict().items():
        click.echo(f"{key} = {_toml_value(value)}")


@config.command()
def default() -> None:
    """Print the default configuration file, every key commented and explained."""
    from importlib.resources import files

    click.echo(files("ocihook").joinpath("schemas/config.toml.example").read_text(), nl=False)


@config.command(name="check")
@click.option(
    "--config",
    "config_path",
    default=None,
    metavar="PATH",
    help="Configuration file (default: $OCIHOOK_CONFIG, /etc/ocihook/config.toml).",
)
def config_check(config_path: str | None) -> None:
    """Check the configuration file: against its JSON Schema shipped in the package
    (jsonschema; one line per violation, naming the key) and with the loader every command
    uses. Prints "PATH: OK"; exits 10 on the first error the loader finds, or when the
    schema finds any."""
    from ..config import (
        DEFAULT_PATH,
        config_from_dict,
        parse_config_bytes,
        read_config_bytes,
        resolve_config_path,
    )
    from ..core.errors import ConfigError
    from ..schemas import violations

    file, _origin = resolve_config_path(config_path)
    shown = os.path.abspath(file)
    data = read_config_bytes(config_path)
    if data is None:
        click.echo(f"{DEFAULT_PATH}: OK (no such file: the built-in defaults apply)")
        return
    document = parse_config_bytes(data, path=shown)
    found = violations(document, "config")
    for v in found:
        click.echo(f"{shown}: schema: {v}", err=True)
    config_from_dict(document, source=shown)  # raises ConfigError, exit 10
    if found:
        raise ConfigError(
            f"{len(found)} schema violations (listed above)", path=shown,
            hint="`ocihook config default` prints every key with its syntax",
        )  # fmt: skip
    click.echo(f"{shown}: OK")


@cli.group()
def cdi() -> None:
    """Container Device Interface (CDI) spec files: generate, list, validate, transform."""


def _read_regular_file(path: str) -> bytes:
    """Read a regular file; a FIFO, device or directory raises OSError without blocking."""
    import stat

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(0, "not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read()
    finally:
        os.close(fd)


@cdi.command()
@click.argument("files", nargs=-1, required=True)
def validate(files: tuple[str, ...]) -> None:
    """Validate CDI spec FILES (JSON or YAML, CDI 0.3.0 to 1.1.0).

    Each file is checked twice: by the spec loader (every rule of CDI SPEC.md, the minimum
    cdiVersion; its first error) and against the CDI JSON Schema shipped in the package
    (jsonschema; one line per violation, naming the JSON path). Prints one line per valid file: its
    kind, device count, declared and minimum cdiVersion. Every file is checked; exits 11
    when any is invalid."""
    from ..cdi.names import CdiError
    from ..cdi.spec import decode_spec, minimum_version, spec_from_dict
    from ..schemas import load_schema, schema_path, violations

    try:
        schema = load_schema("cdi")
    except (OSError, ValueError) as err:
        raise CdiError(
            f"cannot read the CDI schema: {err}", path=schema_path("cdi"),
            hint="the ocihook installation is incomplete; reinstall it",
        ) from None  # fmt: skip
    bad = 0
    for path in files:
        try:
            document = decode_spec(_read_regular_file(path), path=path)
        except OSError as err:
            bad += 1
            click.echo(f"{path}: invalid: cannot read: {err.strerror}", err=True)
            continue
        except CdiError as err:
            bad += 1
            click.echo(f"{path}: invalid: {err}", err=True)
            continue
        problems = []
        try:
            spec = spec_from_dict(document, path=path)
        except CdiError as err:
            problems.append(f"{path}: invalid: {err}")
        problems += [f"{path}: invalid: schema: {v}" for v in violations(document, schema)]
        if problems:
            bad += 1
            for line in problems:
                click.echo(line, err=True)
            continue
        click.echo(
            f"{path}: ok: kind {spec.kind}, {len(spec.devices)} devices, "
            f"cdiVersion {spec.version} (minimum {minimum_version(spec)})"
        )
    if bad:
        raise CdiError(f"{bad} of {len(files)} CDI spec files invalid")


@cdi.command(name="list")
@click.option(
    "--spec-dir",
    "spec_dirs",
    multiple=True,
    metavar="DIR",
    help="CDI spec directory, lowest priority first; repeatable "
    "(default: /etc/cdi then /var/run/cdi).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def cdi_list(spec_dirs: tuple[str, ...], as_json: bool) -> None:
    """List the qualified names (vendor/class=name) of the CDI devices in the spec
    directories. Broken spec files and conflicting devices are reported on stderr and
    skipped; the others are listed."""
    from ..cdi.registry import DEFAULT_SPEC_DIRS, Registry

    registry = Registry.load(spec_dirs or DEFAULT_SPEC_DIRS)
    for path, err in sorted(registry.errors.items()):
        click.echo(f"ocihook: warning: skipped {path}: {err}", err=True)
    for name, paths in sorted(registry.conflicts.items()):
        click.echo(f"ocihook: warning: skipped {name}: defined in {', '.join(paths)}", err=True)
    if as_json:
        out = {
            "devices": registry.list_devices(),
            "vendors": registry.vendors(),
            "classes": registry.classes(),
            "errors": {path: str(err) for path, err in sorted(registry.errors.items())},
            "conflicts": {name: list(paths) for name, paths in sorted(registry.conflicts.items())},
        }
        click.echo(json.dumps(out, indent=2))
        return
    for name in registry.list_devices():
        click.echo(name)


@cdi.command(context_settings=_PASS_THROUGH, add_help_option=False)
@click.pass_context
def generate(ctx: click.Context) -> None:
    """Generate a CDI spec for the host's NVIDIA GPUs (see cdi generate --help)."""
    from .fast import run_fast

    ctx.exit(run_fast(["cdi", "generate", *ctx.args]))


@cdi.group()
def transform() -> None:
    """Transform a CDI spec."""


@transform.command()
@click.option("--from", "old", required=True, metavar="PATH", help="Root the spec's paths use now.")
@click.option("--to", "new", required=True, metavar="PATH", help="Root they should use.")
@click.option(
    "--relative-to",
    type=click.Choice(["host", "container"]),
    default="host",
    show_default=True,
    help="Change host paths or container paths.",
)
@click.option(
    "--input", "input_path", default="-", metavar="PATH", help="Spec to read (default: stdin)."
)
@click.option(
    "--output", default=None, metavar="PATH", help="Write here, atomically (default: stdout)."
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["json", "yaml"]),
    default=None,
    help="Output format (default: from --output's extension, else yaml).",
)
def root(
    old: str, new: str, relative_to: str, input_path: str, output: str | None, fmt: str | None
) -> None:
    """Replace the root of a spec's paths (a driver under /run/nvidia/driver -> /, ...)."""
    from ..cdi.generate import spec_bytes, spec_format, transform_root, write_spec
    from ..cdi.names import CdiError
    from ..cdi.spec import load_spec

    if input_path == "-":
        data, name = sys.stdin.buffer.read(), "<stdin>"
    else:
        try:
            data, name = _read_regular_file(input_path), input_path
        except OSError as e:
            raise CdiError(f"cannot read the CDI spec: {e.strerror}", path=input_path) from None
    spec = transform_root(load_spec(data, path=name), old, new, relative_to=relative_to)
    write_spec(spec_bytes(spec, spec_format(fmt, output)), output)


@cli.group()
def runtime() -> None:
    """The wrapper runtime (ocihook-runtime) and registering ocihook with an engine."""


@runtime.command(name="exec", context_settings=_PASS_THROUGH, add_help_option=False)
@click.pass_context
def runtime_exec(ctx: click.Context) -> None:
    """Run as ocihook-runtime: edit the bundle on create/run, then exec the real runtime
    with the same arguments (see ocihook-runtime --help)."""
    from .runtime import main as runtime_main

    ctx.exit(runtime_main(list(ctx.args)))


@runtime.command()
@click.option(
    "--runtime",
    "engine",
    type=click.Choice(["docker", "containerd", "crio", "podman"]),
    required=True,
    help="The container engine to configure.",
)
@click.option(
    "--config",
    "config_path",
    default=None,
    metavar="PATH",
    help="Its configuration file (default: /etc/docker/daemon.json, "
    "/etc/containerd/config.toml, /etc/crio/crio.conf.d/99-ocihook.conf, "
    "/usr/share/containers/oci/hooks.d/ocihook-prestart.json).",
)
@click.option("--dry-run", is_flag=True, help="Print the change as a diff; write nothing.")
@click.option(
    "--set-as-default", is_flag=True, help="Make ocihook the default runtime (not podman)."
)
@click.option("--cdi", is_flag=True, help="Enable CDI in the engine.")
@click.option(
    "--runtime-path",
    default=None,
    metavar="PATH",
    help="ocihook-runtime to register (default: this installation's).",
)
def configure(
    engine: str,
    config_path: str | None,
    dry_run: bool,
    set_as_default: bool,
    cdi: bool,
    runtime_path: str | None,
) -> None:
    """Register ocihook with a container engine, like nvidia-ctk runtime configure:
    docker and containerd and crio get the ocihook runtime (ocihook-runtime), podman the
    hooks.d file. Comments and formatting of TOML files are kept; an up-to-date file is
    left byte-identical; a malformed one is refused (exit 13) and left untouched."""
    from .engines import configure as plan_change
    from .engines import describe, write_change

    try:
        change = plan_change(
            engine,
            path=config_path,
            runtime_path=runtime_path,
            set_as_default=set_as_default,
            cdi=cdi,
        )
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    if dry_run:
        if change.changed:
            click.echo(change.diff(), nl=False)
        click.echo(f"ocihook: dry run: {describe(change, dry_run=True)}", err=True)
    else:
        write_change(change)
        click.echo(f"ocihook: {describe(change)}", err=True)
    if change.changed:
        for note in change.notes:
            click.echo(f"ocihook: {note}", err=True)
    if set_as_default and engine != "podman":
        click.echo(f"ocihook: {DEFAULT_RUNTIME_COST}", err=True)


#: What ``runtime configure --set-as-default`` tells the operator every container pays.
DEFAULT_RUNTIME_COST = (
    "as the default runtime, ocihook-runtime runs before every container this engine starts, "
    "GPU or not: one Python interpreter start (about 1.7x a bare `python -I -c pass`, "
    "15-45 ms on a 2-core machine) for a container that asks for nothing; "
    "a per-container --runtime, a Kubernetes RuntimeClass or CDI devices cost such "
    "containers nothing"
)


def cli_main(args: Sequence[str]) -> int:
    """Run the click CLI with ``args`` and return the exit code. A closed standard output
    (``ocihook list | head``) propagates as :class:`BrokenPipeError` (exit 0 in
    :func:`ocihook._main.main`), not click's exit 1."""
    try:
        result = cli.main(args=list(args), prog_name="ocihook", standalone_mode=False)
    except _PipeClosed:
        raise BrokenPipeError() from None
    except click.exceptions.ClickException as e:
        e.show()
        return e.exit_code
    except click.exceptions.Abort:
        click.echo("Aborted!", err=True)
        return 1
    except SystemExit as e:
        code = e.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return result if isinstance(result, int) else 0
