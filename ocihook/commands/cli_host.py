"""The click commands that read the host: ``info``, ``list`` and ``plan``; and the
simulated hosts: ``demo`` and ``simhost``."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from typing import Any

import click

from ..core.errors import DiscoveryError
from ..core.hostroot import HostRoot
from .cli_options import GPU_BACKEND_OPTION, host_root, root_options


def _info_dict(host: Any) -> dict[str, Any]:
    return {
        "driverVersion": host.driver_version,
        "cudaVersion": host.cuda_version,
        "cudaVersionSource": getattr(host, "cuda_source", None),
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


@click.command()
@root_options
@GPU_BACKEND_OPTION
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

    root = host_root(driver_root, dev_root, ldcache, library_path, config_path)
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


def _cuda_text(data: dict[str, Any]) -> str:
    """``"12.2 (driver-branch table)"``: the CUDA version and its source in words, or
    ``"unknown (...)"`` with what would have told it."""
    from ..core.cudaversion import SOURCE_WORDS

    if not data["cudaVersion"]:
        return (
            "unknown (no NVML, no CUDA note in libcuda.so, driver branch not in the "
            "driver-branch table)"
        )
    source = data.get("cudaVersionSource")
    return f"{data['cudaVersion']} ({SOURCE_WORDS.get(source or '', 'source unknown')})"


def _print_nvidia_info(data: dict[str, Any]) -> None:
    click.echo(f"NVRM version:   {data['driverVersion'] or 'unknown'}")
    click.echo(f"CUDA version:   {_cuda_text(data)}")
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


@click.command(name="list")
@root_options
@GPU_BACKEND_OPTION
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

    root = host_root(driver_root, dev_root, ldcache, library_path, config_path)
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


@click.command()
@root_options
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
    root = host_root(driver_root, dev_root, ldcache, library_path, config_path)
    p = None
    if not request.is_void or not drm_requests:
        p = make_plan(discover(root), request, layout_for_rootfs(b.rootfs))
    for r in drm_requests:
        drm = make_drm_plan(discover_vendor(r.vendor, root), r)
        p = drm if p is None else merge_plans(p, drm)
    assert p is not None
    click.echo(json.dumps(p.to_dict(), indent=2))


@click.command()
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


@click.command()
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
