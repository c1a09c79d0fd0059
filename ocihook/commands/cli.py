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

    from ..config.load import load_config
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
                "memoryMiB": g.memory_mib,
                "migDevices": [
                    {
                        "gi": m.gi,
                        "ci": m.ci,
                        "uuid": m.uuid,
                        "index": m.nvml_index,
                        "profile": m.profile,
                        "memoryMiB": m.memory_mib,
                    }
                    for m in g.mig_devices
                ],
            }
            for g in host.gpus
        ],
        "warnings": list(host.warnings),
        **({} if host.wsl is None else {"wsl": _wsl_info_dict(host.wsl)}),
    }


def _wsl_info_dict(wsl: Any) -> dict[str, Any]:
    return {
        "dxg": f"{wsl.dxg.path} ({wsl.dxg.major}:{wsl.dxg.minor})",
        "libDir": wsl.lib_dir,
        "driverStores": list(wsl.driver_stores),
        "driverFiles": [f.path for f in wsl.driver_files],
        "missing": list(wsl.missing),
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
    return (
        os.path.exists(root.proc("driver/nvidia/version"))
        or os.path.lexists(root.dev("/dev/dxg"))  # WSL2
        or not (drm_hosts or problems)
    )


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
    click.echo(f"NVRM version:   {data['driverVersion'] or 'unknown'}")
    click.echo(f"CUDA version:   {data['cudaVersion'] or 'unknown (needs NVML)'}")
    wsl = data.get("wsl")
    if wsl is not None:
        click.echo(f"WSL2 device:    {wsl['dxg']} (every GPU)")
        for store in wsl["driverStores"]:
            click.echo(f"Driver store:   {store}")
        click.echo(f"Driver files:   {len(wsl['driverFiles'])} ({wsl['libDir']} and the store)")
    for g in data["gpus"]:
        click.echo("")
        click.echo(f"Device Index:   {g['index']}")
        click.echo(f"Device Minor:   {g['minor']}")
        click.echo(f"Model:          {g['model']}")
        click.echo(f"Brand:          {g['brand'] or 'unknown'}")
        click.echo(f"GPU UUID:       {g['uuid']}")
        click.echo(f"Bus Location:   {g['busId']}")
        click.echo(f"Architecture:   {g['architecture'] or 'unknown'}")
        memory = "unknown (needs NVML)" if g["memoryMiB"] is None else f"{g['memoryMiB']} MiB"
        click.echo(f"Memory:         {memory}")
        for m in g["migDevices"]:
            profile = m["profile"] or "profile unknown"
            text = f"MIG Device:     gi {m['gi']} ci {m['ci']}  {profile}  {m['uuid'] or ''}"
            click.echo(text.rstrip())
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
    from ..plan.select import select_drm_gpus
    from ..request.drm import drm_request_from_env

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
    from ..plan.select import select_gpus
    from ..request.nvidia import request_from_env

    libraries, binaries, ipcs, firmwares = kinds
    wanted = request_from_env(
        {"NVIDIA_VISIBLE_DEVICES": ",".join(devices) or "all"}, source="--device"
    )
    if host.wsl is not None and not host.gpus:
        _list_wsl(out, host.wsl, devices, every, kinds)
        return
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


def _list_wsl(
    out: dict[str, list[str]],
    wsl: Any,
    devices: Sequence[str],
    every: bool,
    kinds: tuple[bool, bool, bool, bool],
) -> None:
    """:func:`_list_nvidia` on a WSL2 host: ``/dev/dxg`` (for every GPU: ``--device`` may
    only be ``all``), the driver files' libraries and ``nvidia-smi``."""
    from ..core.errors import RequestError

    if any(d != "all" for d in devices):
        raise RequestError(
            "a WSL2 host gives every GPU through /dev/dxg: GPUs cannot be listed one by one",
            field="--device",
            value=",".join(devices),
            hint="leave --device out, or pass --device all",
        )
    libraries, binaries, ipcs, firmwares = kinds
    out["devices"] = [wsl.dxg.host_path]
    if every or binaries:
        out["binaries"] = [f.host_path for f in wsl.driver_files if f.name == "nvidia-smi"]
    if every or libraries:
        out["libraries"] = [f.host_path for f in wsl.driver_files if ".so" in f.name]
    if every or ipcs:
        out["ipcs"] = []
    if every or firmwares:
        out["firmwares"] = [f.host_path for f in wsl.driver_files if f.name.endswith(".bin")]


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
    from ..config.load import load_config
    from ..config.options import options_from_config
    from ..discovery.drm import discover_vendor
    from ..discovery.nvidia import discover
    from ..oci.bundle import load_bundle
    from ..pipeline.bundle import layout_for_rootfs
    from ..plan.build import make_drm_plan, make_plan, merge_plans
    from ..request.drm import drm_requests_from_spec
    from ..request.nvidia import request_from_spec
    from ..request.policy import ignored_by_policy, policy_note

    b = load_bundle(bundle)
    options = options_from_config(load_config(config_path))
    policy = options.policy
    request = request_from_spec(b.config, path=b.config_path, policy=policy)
    drm_requests = drm_requests_from_spec(b.config, path=b.config_path, policy=policy)
    ignored = ignored_by_policy(b.config, policy, options.annotation_prefixes)
    if ignored:
        click.echo(f"ocihook: {b.config_path}: {policy_note(ignored)}", err=True)
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
    type=click.Choice(
        [
            "nvidia",
            "amd",
            "amd-no-kfd",
            "intel",
            "intel-sriov",
            "mixed",
            "wsl",
            "cos",
            "driver-container",
            "usr-local-nvidia",
        ]
    ),
    default="nvidia",
    show_default=True,
    help="Which host: NVIDIA (--gpus), the MI210-class ROCm host (with or without KFD), "
    "the iGPU + dGPU Intel host (with an SR-IOV Flex card), NVIDIA + AMD, a WSL2 host "
    "(/dev/dxg and /usr/lib/wsl), or NVIDIA with the driver in a tree of its own without "
    "ld.so.cache (GKE/COS /home/kubernetes/bin/nvidia, a driver container's "
    "/run/nvidia/driver, /usr/local/nvidia); for those three the driver root is printed "
    "after DEST.",
)
def simhost(dest: str, gpus: int, no_dev_nodes: bool, vendor: str) -> None:
    """Write the built-in simulated GPU host into DEST."""
    from ..sim import host as sim

    nodes = False if no_dev_nodes else None
    if vendor == "nvidia":
        click.echo(sim.build(dest, gpus=gpus, make_dev_nodes=nodes).root)
        return
    if vendor == "wsl":
        from ..sim import wsl

        click.echo(wsl.build(dest, make_dev_nodes=nodes).root)
        return
    if vendor in ("cos", "driver-container", "usr-local-nvidia"):
        from ..sim import drivertree

        tree = drivertree.build(dest, vendor, gpus=gpus, make_dev_nodes=nodes)
        click.echo(f"{tree.root} {tree.driver_root}")
        return
    from ..sim import vendors as simvendors

    if vendor.startswith("amd"):
        built = simvendors.build_amd(dest, kfd=vendor == "amd", make_dev_nodes=nodes)
    elif vendor.startswith("intel"):
        built = simvendors.build_intel(dest, sriov=vendor == "intel-sriov", make_dev_nodes=nodes)
    else:
        built = simvendors.build_mixed(dest, make_dev_nodes=nodes)
    click.echo(built.root)


@cli.group()
def system() -> None:
    """Host set-up tasks (run as root on the host, not in a container)."""


@system.command(name="create-dev-char-symlinks")
@click.option("--dev-root", default=None, help="Root holding dev/ and proc/ [config].")
@click.option(
    "--create-all",
    is_flag=True,
    help="First create the NVIDIA nodes procfs says should exist (GPUs, nvidiactl, uvm).",
)
@click.option(
    "--config",
    "config_path",
    default=None,
    metavar="PATH",
    help="Configuration file (default: $OCIHOOK_CONFIG, /etc/ocihook/config.toml).",
)
def create_dev_char_symlinks(
    dev_root: str | None, create_all: bool, config_path: str | None
) -> None:
    """Make /dev/char/MAJOR:MINOR links for the NVIDIA device nodes, which udev does not
    make for them: runc's systemd cgroup driver names devices by those paths, and systemd
    drops a rule whose path is missing when it re-applies a unit (daemon-reload)."""
    from ..appliers.devchar import create_dev_char_symlinks as create

    root = _root(None, dev_root, None, (), config_path)
    report = create(root, create_all=create_all)
    for line in report:
        click.echo(line)
    if not report:
        click.echo(f"nothing to do: every NVIDIA node under {root.dev('/dev')} has its link")


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
    from ..config.load import load_config

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
    from ..config.load import (
        DEFAULT_PATH,
        parse_config_bytes,
        read_config_bytes,
        resolve_config_path,
    )
    from ..config.validate import config_from_dict
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


@config.command()
@click.argument("toolkit_file", metavar="[TOOLKIT_FILE]", required=False)
@click.option(
    "-o",
    "--output",
    default=None,
    metavar="PATH",
    help="Write the ocihook file here (mode 0644, atomically) instead of standard output.",
)
@click.option("--force", is_flag=True, help="Replace an existing --output file.")
def migrate(toolkit_file: str | None, output: str | None, force: bool) -> None:
    """Convert the NVIDIA Container Toolkit's config.toml (default
    /etc/nvidia-container-runtime/config.toml) to an ocihook configuration file.

    Keys with an ocihook equivalent are carried over; every key that is dropped or whose
    value changes is named once on standard error. The result is checked as ocihook reads
    it before anything is written."""
    from ..config.migrate import TOOLKIT_PATH, load_toolkit_config, render_config

    shown = os.path.abspath(toolkit_file or TOOLKIT_PATH)
    migration = load_toolkit_config(shown)
    text = render_config(migration.document, f"ocihook configuration converted from {shown}")
    for note in migration.notes:
        click.echo(f"ocihook: note: {note}", err=True)
    if output is None:
        click.echo(text, nl=False)
        return
    if os.path.lexists(output) and not force:
        raise click.ClickException(f"{output} exists; pass --force to replace it")
    from ..oci.bundle import write_bytes_atomic

    write_bytes_atomic(output, text.encode(), new_mode=0o644)
    click.echo(f"ocihook: wrote {output} ({len(migration.document)} keys)", err=True)


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
    skipped; the others are listed. Missing spec directories, and no spec file at all,
    are said on stderr (exit 0)."""
    from ..cdi.registry import DEFAULT_SPEC_DIRS, Registry

    dirs = spec_dirs or DEFAULT_SPEC_DIRS
    registry = Registry.load(dirs)
    missing = [d for d in dirs if not os.path.isdir(d)]
    if missing and len(missing) == len(dirs):
        click.echo(
            f"ocihook: no CDI spec directory: {', '.join(missing)} "
            f"{'does' if len(missing) == 1 else 'do'} not exist; hint: ocihook cdi generate "
            "--output /var/run/cdi/nvidia.yaml writes a spec (and its directory)",
            err=True,
        )
    else:
        for d in missing:
            click.echo(f"ocihook: note: CDI spec directory {d} does not exist", err=True)
        if not registry.specs and not registry.errors:
            click.echo(f"ocihook: no CDI spec files in {', '.join(dirs)}", err=True)
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
            "missing_dirs": missing,
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
    "/usr/share/containers/oci/hooks.d/ocihook-prestart.json; podman: "
    "ocihook-poststop.json is written beside it).",
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
    hooks.d files (prestart, and poststop beside it). Comments and formatting of TOML
    files are kept; an up-to-date file is left byte-identical; a malformed one is refused
    (exit 13) and left untouched."""
    from ..engines import configure_all, describe, write_change

    try:
        changes = configure_all(
            engine,
            path=config_path,
            runtime_path=runtime_path,
            set_as_default=set_as_default,
            cdi=cdi,
        )
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    if dry_run:
        for change in changes:
            if change.changed:
                click.echo(change.diff(), nl=False)
    else:
        # the poststop file first: no prestart hook is registered without its cleanup
        for change in reversed(changes):
            write_change(change)
    notes: list[str] = []
    for change in changes:
        said = describe(change, dry_run=dry_run)
        click.echo(f"ocihook: {'dry run: ' if dry_run else ''}{said}", err=True)
        if change.changed:
            notes += [n for n in change.notes if n not in notes]
    for note in notes:
        click.echo(f"ocihook: {note}", err=True)
    if set_as_default and engine != "podman":
        click.echo(f"ocihook: {DEFAULT_RUNTIME_COST}", err=True)
    if engine == "podman" and any(c.changed for c in changes):
        click.echo(f"ocihook: {HOOKS_D_COST}", err=True)


#: What ``runtime configure --set-as-default`` tells the operator every container pays.
DEFAULT_RUNTIME_COST = (
    "as the default runtime, ocihook-runtime runs before every container this engine starts, "
    "GPU or not: one Python interpreter start (about 1.2x a bare `python -I -c pass`, "
    "25-35 ms on a 2-core machine) for a container that asks for nothing; "
    "a per-container --runtime, a Kubernetes RuntimeClass or CDI devices cost such "
    "containers nothing"
)

#: What the hooks.d files tell the operator every podman and CRI-O container pays: their
#: ``when`` can only say ``always`` (hooks.d matches annotations, commands and bind mounts,
#: never the environment that carries NVIDIA_VISIBLE_DEVICES).
HOOKS_D_COST = (
    "the hooks.d prestart hook runs for every container podman and CRI-O start, GPU or not "
    "(a hooks.d `when` cannot match NVIDIA_VISIBLE_DEVICES): one Python interpreter start "
    "(about 1.1x a bare `python -I -c pass`) for a container that asks for nothing; "
    "CDI devices (podman --device nvidia.com/gpu=all, with a spec from `ocihook cdi "
    "generate`) cost such containers nothing"
)


@cli.command()
@_root_options
@_BACKEND_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (the record).")
@click.option(
    "--runtime",
    "engines",
    type=click.Choice(["docker", "containerd", "crio", "podman"]),
    multiple=True,
    help="Check only this engine's configuration (repeatable; default: every installed one).",
)
@click.option("-b", "--bundle", default=None, help="Check what this bundle's container gets.")
@click.option(
    "--image-env",
    default=None,
    metavar="FILE",
    help="Check an image's environment: KEY=value lines, a JSON list, docker inspect output.",
)
@click.option(
    "--driver-version",
    default=None,
    metavar="X.Y[.Z]",
    help="Pre-upgrade: would the image (--image-env or --bundle) run on this driver?",
)
@click.option(
    "--record",
    default=None,
    metavar="FILE",
    help="Write the deployment record here (JSON; schema: ocihook.schemas doctor-record).",
)
@click.option(
    "--config-root",
    default="/",
    show_default=True,
    metavar="DIR",
    help="Root under which engine configuration files and CDI spec directories are read.",
)
@click.option("--no-container", is_flag=True, help="Skip the container layers (visibility, gpu).")
@click.option("--runc", default=None, metavar="PATH", help="runc for the container layers.")
@click.option("--busybox", default=None, metavar="PATH", help="Static busybox for the container.")
def doctor(
    config_path: str | None,
    driver_root: str | None,
    dev_root: str | None,
    ldcache: str | None,
    library_path: tuple[str, ...],
    gpu_backend: str,
    as_json: bool,
    engines: tuple[str, ...],
    bundle: str | None,
    image_env: str | None,
    driver_version: str | None,
    record: str | None,
    config_root: str,
    no_container: bool,
    runc: str | None,
    busybox: str | None,
) -> None:
    """Check each layer between the GPUs and a container: host (module, GPUs, nodes,
    persistenced, CUDA version, driver libraries), runtime (engine registrations, CDI
    specs), request (--bundle / --image-env and its requirements), visibility (a runc
    container ocihook edits, checked from inside) and gpu (a CUDA allocation, copy and
    kernel inside it; SKIP without a real GPU). Exits 14 when a check FAILs."""
    from ..config.load import load_config
    from ..config.options import options_from_config
    from ..core.errors import DoctorFailed
    from ..doctor import deployment_record, run_doctor

    if bundle is not None and image_env is not None:
        raise click.UsageError("give --bundle or --image-env, not both")
    root = _root(driver_root, dev_root, ldcache, library_path, config_path)
    cfg = load_config(config_path)
    report = run_doctor(
        root,
        config_root=config_root,
        engines=engines or None,
        bundle=bundle,
        image_env=image_env,
        driver_version=driver_version,
        gpu_backend=gpu_backend,
        containers=not no_container,
        runc=runc,
        busybox=busybox,
        options=options_from_config(cfg),
    )
    doc = deployment_record(report, config=cfg)
    if record is not None:
        from ..oci.bundle import write_bytes_atomic

        try:
            write_bytes_atomic(record, (json.dumps(doc, indent=2) + "\n").encode())
        except OSError as e:
            raise click.FileError(record, e.strerror) from None
    if as_json:
        click.echo(json.dumps(doc, indent=2))
    else:
        _print_report(report)
    failed = [c for c in report.checks if c.status == "FAIL"]
    if failed:
        raise DoctorFailed(
            f"{len(failed)} check(s) FAILed, first: {failed[0].layer}: {failed[0].name}"
        )


def _print_report(report: Any) -> None:
    from ..doctor import LAYERS

    for layer in LAYERS:
        click.echo(f"{layer:<11} {report.layer_status(layer)}")
        for c in report.checks:
            if c.layer != layer:
                continue
            click.echo(f"  {c.status:<5} {c.name}: {c.evidence}")
            if c.fix and c.status != "PASS":
                click.echo(f"        fix: {c.fix}")
    bad = sum(c.status == "FAIL" for c in report.checks)
    warn = sum(c.status == "WARN" for c in report.checks)
    click.echo(
        f"result: {'FAIL' if bad else 'WARN' if warn else 'PASS'} ({bad} failed, {warn} warnings)"
    )


@cli.group()
def install() -> None:
    """Install ocihook's entry points where container engines look for them."""


@install.command(name="docker-hook")
@click.option(
    "--bin-dir",
    default="/usr/local/bin",
    show_default=True,
    metavar="DIR",
    help="A directory on dockerd's PATH.",
)
@click.option(
    "--python",
    default=None,
    metavar="PATH",
    help="Interpreter with ocihook installed (default: this one).",
)
@click.option(
    "--force",
    is_flag=True,
    help="Replace a nvidia-container-runtime-hook that is not ocihook's (the NVIDIA "
    "toolkit's), or install beside one elsewhere on the PATH.",
)
@click.option("--remove", is_flag=True, help="Remove ocihook's hook from --bin-dir.")
@click.option("--dry-run", is_flag=True, help="Check and say what would be done.")
def docker_hook(bin_dir: str, python: str | None, force: bool, remove: bool, dry_run: bool) -> None:
    """Write nvidia-container-runtime-hook into --bin-dir: dockerd enables docker run
    --gpus (and compose's nvidia device reservations) when it finds a program of that
    name on its PATH, and runs it as a prestart hook. A hook of that name that is not
    ocihook's (the NVIDIA Container Toolkit's) is never replaced silently: refused
    (exit 13) unless --force. Restart dockerd afterwards."""
    from .dockerhook import install_docker_hook, remove_docker_hook

    would = "would be " if dry_run else ""
    if remove:
        found = remove_docker_hook(bin_dir, dry_run=dry_run)
        target = os.path.join(os.path.abspath(bin_dir), "nvidia-container-runtime-hook")
        click.echo(
            f"ocihook: {target}: {would + 'removed' if found else 'not installed'}", err=True
        )
        return
    path, changed, notes = install_docker_hook(bin_dir, python=python, force=force, dry_run=dry_run)
    click.echo(f"ocihook: {path}: {would + 'written' if changed else 'up to date'}", err=True)
    for note in notes:
        click.echo(f"ocihook: {note}", err=True)


# --- Kubernetes (ocihook[k8s]) ---------------------------------------------------------------


def _need_k8s() -> None:
    """Fail with one line when the k8s extra (grpcio, protobuf) is not installed."""
    import importlib.util

    from ..core.errors import ConfigError

    for module in ("grpc", "google.protobuf"):
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            raise ConfigError(
                f"ocihook k8s needs the python module {module}",
                hint="pip install 'ocihook[k8s]'",
            )


def _split(values: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(v.strip() for value in values for v in value.split(",") if v.strip())


@cli.group()
def k8s() -> None:
    """Kubernetes node agents: a kubelet device plugin, a DRA kubelet plugin, node labels."""


def _k8s_inventory_options(f: Any) -> Any:
    f = click.option(
        "--resource",
        "resources",
        multiple=True,
        metavar="NAME",
        help="Resource or prefix to serve (nvidia.com/gpu, amd.com, gpu.intel.com); "
        "repeatable (default: every vendor present).",
    )(f)
    f = click.option(
        "--mig-strategy",
        type=click.Choice(["none", "single", "mixed"]),
        default="none",
        show_default=True,
        help="none: whole GPUs; single: MIG devices as nvidia.com/gpu (one profile only); "
        "mixed: one nvidia.com/mig-<profile> resource per MIG profile (profiles need NVML).",
    )(f)
    f = click.option(
        "--gpu-backend",
        type=click.Choice(["auto", "procfs", "nvml"]),
        default="auto",
        show_default=True,
        help="NVIDIA GPU enumeration: NVML (nvidia-ml-py; GPU memory, MIG profiles) when it "
        "works, else procfs.",
    )(f)
    f = click.option(
        "--replicas", type=int, default=1, show_default=True, help="Time-slicing replicas per GPU."
    )(f)
    f = click.option(
        "--hook-path",
        default=None,
        metavar="PATH",
        help="ocihook as the host's runtime runs it, for the CDI specs' hooks "
        "(default: this installation).",
    )(f)
    return _root_options(f)


def _k8s_inventory(
    driver_root: str | None,
    dev_root: str | None,
    ldcache: str | None,
    library_path: tuple[str, ...],
    config_path: str | None,
    resources: tuple[str, ...],
    mig_strategy: str,
    gpu_backend: str,
    replicas: int,
    hook_path: str | None,
) -> Any:
    _need_k8s()
    from ..k8s.inventory import build_inventory

    root = _root(driver_root, dev_root, ldcache, library_path, config_path)
    inventory = build_inventory(
        root,
        resources=_split(resources),
        mig_strategy=mig_strategy,
        replicas=replicas,
        hook_command=[hook_path] if hook_path else None,
        gpu_backend=gpu_backend,
    )
    for w in inventory.warnings:
        click.echo(f"ocihook: warning: {w}", err=True)
    return inventory


@k8s.command(name="device-plugin")
@_k8s_inventory_options
@click.option(
    "--plugin-dir",
    default="/var/lib/kubelet/device-plugins",
    show_default=True,
    help="kubelet's device plugin directory (kubelet.sock is there).",
)
@click.option(
    "--cdi-dir",
    default="/var/run/cdi",
    show_default=True,
    help="Where the plugin writes (and keeps fresh) its CDI specs.",
)
@click.option(
    "--strategy",
    "strategies",
    multiple=True,
    default=("cdi-cri",),
    show_default=True,
    help="Allocate strategy: cdi-cri, cdi-annotations, envvar, volume-mounts "
    "(repeatable or comma-separated).",
)
@click.option("--pass-device-specs", is_flag=True, help="Also return device nodes as DeviceSpecs.")
@click.option("--interval", type=float, default=1.0, show_default=True, help="Watch period (s).")
@click.option(
    "--nvml-health",
    is_flag=True,
    help="Also mark GPUs unhealthy that NVML reports lost (needs nvidia-ml-py).",
)
@click.option(
    "--metrics-address",
    default=None,
    metavar="HOST:PORT",
    help="Serve Prometheus metrics at http://HOST:PORT/metrics.",
)
@click.option("--list", "list_only", is_flag=True, help="Print the devices as JSON and exit.")
def device_plugin(
    driver_root: str | None,
    dev_root: str | None,
    ldcache: str | None,
    library_path: tuple[str, ...],
    config_path: str | None,
    resources: tuple[str, ...],
    mig_strategy: str,
    gpu_backend: str,
    replicas: int,
    hook_path: str | None,
    plugin_dir: str,
    cdi_dir: str,
    strategies: tuple[str, ...],
    pass_device_specs: bool,
    interval: float,
    nvml_health: bool,
    metrics_address: str | None,
    list_only: bool,
) -> None:
    """Run the kubelet device plugin (API v1beta1) for the host's GPUs until SIGTERM.

    Serves nvidia.com/gpu (and nvidia.com/mig-<profile> with --mig-strategy mixed),
    amd.com/gpu and gpu.intel.com/<driver>, one socket each in --plugin-dir, registered
    with kubelet and registered again when kubelet restarts; reports device health
    changes; writes the CDI specs the cdi-* strategies name into --cdi-dir."""
    inventory = _k8s_inventory(
        driver_root, dev_root, ldcache, library_path, config_path,
        resources, mig_strategy, gpu_backend, replicas, hook_path,
    )  # fmt: skip
    if list_only:
        from ..k8s.inventory import health

        out = {
            r: [
                {"id": d.id, "health": health(d), "numa_node": d.numa_node, "cdi": d.cdi_name}
                for d in devs
            ]
            for r, devs in inventory.devices.items()
        }
        click.echo(json.dumps(out, indent=2))
        return
    from ..k8s.deviceplugin import DevicePluginServer

    server = DevicePluginServer(
        inventory,
        plugin_dir=plugin_dir,
        cdi_dir=cdi_dir,
        strategies=_split(strategies),
        pass_device_specs=pass_device_specs,
        interval=interval,
        nvml_health=nvml_health,
    )
    if metrics_address:
        from ..k8s.features import serve_metrics

        httpd = serve_metrics(server, metrics_address)
        host, port = httpd.server_address[:2]
        click.echo(f"ocihook: metrics on http://{host}:{port}/metrics", err=True)
    for p in server.plugins:
        click.echo(
            f"ocihook: serving {p.resource} ({len(p.devices)} devices) on {p.socket}", err=True
        )
    server.run_forever()


@k8s.command(name="dra-plugin")
@_k8s_inventory_options
@click.option("--driver", default="gpu.ocihook.io", show_default=True, help="DRA driver name.")
@click.option("--node-name", default=None, help="This node's name (default: the host name).")
@click.option(
    "--plugin-dir", default="/var/lib/kubelet/plugins", show_default=True,
    help="kubelet's plugin directory (the service socket is <dir>/<driver>/dra.sock).",
)  # fmt: skip
@click.option(
    "--registry-dir", default="/var/lib/kubelet/plugins_registry", show_default=True,
    help="kubelet's plugin registration directory.",
)  # fmt: skip
@click.option("--cdi-dir", default="/var/run/cdi", show_default=True, help="CDI spec directory.")
@click.option(
    "--claims-dir", default="/var/run/ocihook/claims", show_default=True,
    help="ResourceClaim objects as <uid>.json (the API server is not read).",
)  # fmt: skip
@click.option(
    "--print-slices",
    type=click.Choice(["yaml", "json"]),
    default=None,
    help="Print the ResourceSlices this node would publish, and exit.",
)
def dra_plugin(
    driver_root: str | None,
    dev_root: str | None,
    ldcache: str | None,
    library_path: tuple[str, ...],
    config_path: str | None,
    resources: tuple[str, ...],
    mig_strategy: str,
    gpu_backend: str,
    replicas: int,
    hook_path: str | None,
    driver: str,
    node_name: str | None,
    plugin_dir: str,
    registry_dir: str,
    cdi_dir: str,
    claims_dir: str,
    print_slices: str | None,
) -> None:
    """Run the DRA kubelet plugin (v1beta1) until SIGTERM, or print its ResourceSlices.

    NodePrepareResources writes one CDI spec per claim (atomically) and returns its CDI
    device ids; NodeUnprepareResources removes it (idempotent)."""
    inventory = _k8s_inventory(
        driver_root, dev_root, ldcache, library_path, config_path,
        resources, mig_strategy, gpu_backend, replicas, hook_path,
    )  # fmt: skip
    node = node_name or os.uname().nodename
    if print_slices:
        from ..k8s.dra import resource_slices

        slices = resource_slices(inventory, node, driver=driver)
        if print_slices == "json":
            click.echo(json.dumps(slices if len(slices) > 1 else slices[0], indent=2))
        else:
            import yaml

            click.echo(yaml.safe_dump_all(slices, sort_keys=False), nl=False)
        return
    import signal
    import threading

    from ..k8s.dra import DirectoryClaims, DraPlugin

    plugin = DraPlugin(
        inventory, DirectoryClaims(claims_dir), cdi_dir, driver=driver,
        plugin_dir=plugin_dir, registry_dir=registry_dir, node_name=node,
    )  # fmt: skip
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    plugin.start()
    click.echo(f"ocihook: DRA driver {driver} on {plugin.endpoint}", err=True)
    try:
        done.wait()
    finally:
        plugin.stop()


@k8s.command(name="features")
@_k8s_inventory_options
@click.option("--output", default=None, metavar="PATH", help="Write here (atomically), not stdout.")
def k8s_features(
    driver_root: str | None,
    dev_root: str | None,
    ldcache: str | None,
    library_path: tuple[str, ...],
    config_path: str | None,
    resources: tuple[str, ...],
    mig_strategy: str,
    gpu_backend: str,
    replicas: int,
    hook_path: str | None,
    output: str | None,
) -> None:
    """Print a node-feature-discovery features file (features.d/) for the node's GPUs:
    ocihook.io/ labels and GPU feature discovery's nvidia.com/ resource labels (memory and
    MIG profiles need NVML: a label discovery cannot know is left out, with a warning)."""
    inventory = _k8s_inventory(
        driver_root, dev_root, ldcache, library_path, config_path,
        resources, mig_strategy, gpu_backend, replicas, hook_path,
    )  # fmt: skip
    from ..k8s.features import nfd_features

    reasons: list[str] = []
    text = nfd_features(inventory, reasons=reasons)
    for reason in reasons:
        click.echo(f"ocihook: warning: {reason}", err=True)
    if output is None:
        click.echo(text, nl=False)
    else:
        from ..oci.bundle import write_bytes_atomic

        write_bytes_atomic(output, text.encode())


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
