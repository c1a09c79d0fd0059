"""``ocihook k8s``: the Kubernetes node agents (the ``k8s`` extra: grpcio, protobuf), a
kubelet device plugin, a DRA kubelet plugin and node-feature-discovery labels.

:mod:`ocihook.k8s` is imported only inside the commands: the other commands run without
the extra."""

from __future__ import annotations

import json
import os
from typing import Any

import click

from . import fast
from .cli_options import click_option, host_root, root_options


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


@click.group()
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
    f = click_option(
        fast.GPU_BACKEND_OPTION,
        help="NVIDIA GPU enumeration: NVML (nvidia-ml-py; GPU memory, MIG profiles) when it "
        "works, else procfs (auto)",
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
    f = click.option(
        "--container-dev-root",
        default=None,
        metavar="PATH",
        help="Where this process sees the host's --dev-root (default: under "
        "--container-driver-root when the dev root lies under the driver root, else "
        "--dev-root itself).",
    )(f)
    f = click.option(
        "--container-driver-root",
        default=None,
        metavar="PATH",
        help="Where this process sees the host's --driver-root (a container's mount of it: "
        "/host). Discovery reads there; the CDI specs and Allocate name the host's paths, "
        "under --driver-root (default: --driver-root itself).",
    )(f)
    return root_options(f)


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
    container_driver_root: str | None,
    container_dev_root: str | None,
) -> Any:
    _need_k8s()
    from ..k8s.inventory import RootView, build_inventory

    root = host_root(driver_root, dev_root, ldcache, library_path, config_path)
    inventory = build_inventory(
        root,
        resources=_split(resources),
        mig_strategy=mig_strategy,
        replicas=replicas,
        hook_command=[hook_path] if hook_path else None,
        gpu_backend=gpu_backend,
        view=RootView.of(root, container_driver_root, container_dev_root),
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
    container_driver_root: str | None,
    container_dev_root: str | None,
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
        container_driver_root, container_dev_root,
    )  # fmt: skip
    if list_only:
        from ..k8s.inventory import health

        out = {
            r: [
                {
                    "id": d.id,
                    "health": health(d, view=inventory.view),
                    "numa_node": d.numa_node,
                    "cdi": d.cdi_name,
                }
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
    container_driver_root: str | None,
    container_dev_root: str | None,
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
        container_driver_root, container_dev_root,
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
    container_driver_root: str | None,
    container_dev_root: str | None,
    output: str | None,
) -> None:
    """Print a node-feature-discovery features file (features.d/) for the node's GPUs:
    ocihook.io/ labels and GPU feature discovery's nvidia.com/ resource labels (memory and
    MIG profiles need NVML: a label discovery cannot know is left out, with a warning)."""
    inventory = _k8s_inventory(
        driver_root, dev_root, ldcache, library_path, config_path,
        resources, mig_strategy, gpu_backend, replicas, hook_path,
        container_driver_root, container_dev_root,
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
