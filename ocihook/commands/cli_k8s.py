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
        "--device-id-strategy",
        type=click.Choice(["uuid", "index"]),
        default="uuid",
        show_default=True,
        help="How NVIDIA devices are named to kubelet, in the CDI names and in "
        "NVIDIA_VISIBLE_DEVICES: GPU-/MIG- UUIDs, or indices (0, MIG 1:0).",
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


def _config_file_option(f: Any) -> Any:
    return click.option(
        "--config-file",
        envvar="CONFIG_FILE",
        default=None,
        metavar="PATH",
        help="NVIDIA k8s-device-plugin's configuration file (YAML or JSON, version v1; "
        "$CONFIG_FILE): flags, sharing.timeSlicing. Options given here win over it; keys "
        "ocihook does not implement are named in one warning.",
    )(f)


#: The options an NVIDIA device plugin configuration file can set (its values of the same
#: names: :class:`ocihook.k8s.nvconfig.PluginConfig`).
_CONFIG_OPTIONS = (
    "mig_strategy",
    "driver_root",
    "dev_root",
    "container_driver_root",
    "gpu_backend",
    "device_id_strategy",
    "pass_device_specs",
    "strategies",
    "cdi_annotation_prefix",
    "fail_on_init_error",
)


def _with_plugin_config(params: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """``params`` (a command's values) with those of ``--config-file`` (NVIDIA's device
    plugin configuration) where the command line (or its environment variable) gave none,
    as NVIDIA's plugin ranks them: command line, then file, then defaults. Says in one
    warning line which keys of the file ocihook does not act on, and when ``--replicas``
    overrides the file's time-slicing. Returns the values and the
    :class:`~ocihook.k8s.nvconfig.PluginConfig` (``None`` without a file).

    Raises:
        ConfigError: the file cannot be read or is refused
            (:func:`~ocihook.k8s.nvconfig.parse_plugin_config`).
    """
    path = params.get("config_file")
    if not path:
        return params, None
    from ..k8s.nvconfig import load_plugin_config

    ctx = click.get_current_context()
    config = load_plugin_config(path)
    warning = config.warning()
    if warning:
        click.echo(f"ocihook: warning: {path}: {warning}", err=True)
    out = dict(params)
    for name in _CONFIG_OPTIONS:
        value = getattr(config, name)
        if name not in out or value is None:
            continue
        source = ctx.get_parameter_source(name)
        if source in (None, click.core.ParameterSource.DEFAULT):
            out[name] = value
    if config.time_slicing and out.get("replicas", 1) > 1:
        click.echo(
            f"ocihook: warning: --replicas {out['replicas']} given: the time-slicing of "
            f"{path} (sharing.timeSlicing) is not used",
            err=True,
        )
    return out, config


def _k8s_inventory(params: dict[str, Any], config: Any = None, *, grpc: bool = True) -> Any:
    """The inventory the values of :func:`_k8s_inventory_options` (and the NVIDIA
    configuration ``config``'s time-slicing) describe; its warnings printed. ``grpc``:
    the command serves the kubelet, so the k8s extra must be installed (``features``
    only prints, and needs none of it)."""
    if grpc:
        _need_k8s()
    from ..k8s.inventory import RootView, Sharing, build_inventory

    root = host_root(
        params["driver_root"],
        params["dev_root"],
        params["ldcache"],
        params["library_path"],
        params["config_path"],
    )
    time_slicing = None
    if config is not None and config.time_slicing and params["replicas"] <= 1:
        time_slicing = {
            r.name: Sharing(
                r.replicas, config.shared_name(r.name) if config.rename_by_default else None
            )
            for r in config.time_slicing
        }
    hook_path = params["hook_path"]
    inventory = build_inventory(
        root,
        resources=_split(params["resources"]),
        mig_strategy=params["mig_strategy"],
        replicas=params["replicas"],
        hook_command=[hook_path] if hook_path else None,
        gpu_backend=params["gpu_backend"],
        view=RootView.of(root, params["container_driver_root"], params["container_dev_root"]),
        time_slicing=time_slicing,
        device_id_strategy=params["device_id_strategy"],
    )
    for w in inventory.warnings:
        click.echo(f"ocihook: warning: {w}", err=True)
    return inventory


def _wait_for_sigterm(message: str) -> None:
    """Print ``message`` (stderr) once SIGTERM and SIGINT are caught, then block until
    one comes."""
    import signal
    import threading

    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    click.echo(message, err=True)
    while not done.wait(3600):
        pass


@k8s.command(name="device-plugin")
@_k8s_inventory_options
@_config_file_option
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
@click.option(
    "--cdi-annotation-prefix",
    default="cdi.k8s.io/",
    show_default=True,
    metavar="PREFIX",
    help="Key prefix of the cdi-annotations strategy's annotation.",
)
@click.option(
    "--fail-on-init-error/--no-fail-on-init-error",
    default=True,
    show_default=True,
    help="Exit when the host cannot be discovered (no driver, no GPU); with --no-..., "
    "say so and wait for SIGTERM without serving (NVIDIA's failOnInitError: false).",
)
@click.option("--interval", type=float, default=1.0, show_default=True, help="Watch period (s).")
@click.option(
    "--nvml-health",
    is_flag=True,
    help="Also mark GPUs unhealthy that NVML reports lost or that have a critical XID "
    "(NVIDIA's rules: DP_DISABLE_HEALTHCHECKS, DP_ENABLE_HEALTHCHECKS; needs nvidia-ml-py).",
)
@click.option(
    "--metrics-address",
    default=None,
    metavar="HOST:PORT",
    help="Serve Prometheus metrics at http://HOST:PORT/metrics.",
)
@click.option("--list", "list_only", is_flag=True, help="Print the devices as JSON and exit.")
def device_plugin(**params: Any) -> None:
    """Run the kubelet device plugin (API v1beta1) for the host's GPUs until SIGTERM.

    Serves nvidia.com/gpu (and nvidia.com/mig-<profile> with --mig-strategy mixed),
    amd.com/gpu and gpu.intel.com/<driver>, one socket each in --plugin-dir, registered
    with kubelet and registered again when kubelet restarts; reports device health
    changes; writes the CDI specs the cdi-* strategies name into --cdi-dir. Reads NVIDIA's
    device plugin configuration file (--config-file, $CONFIG_FILE)."""
    from ..core.errors import ConfigError, DiscoveryError

    params, config = _with_plugin_config(params)
    prefix = params["cdi_annotation_prefix"]
    from ..k8s.nvconfig import ANNOTATION_PREFIX_RULE, is_annotation_prefix

    if not is_annotation_prefix(prefix):
        raise ConfigError(ANNOTATION_PREFIX_RULE, field="--cdi-annotation-prefix", value=prefix)
    try:
        inventory = _k8s_inventory(params, config)
    except DiscoveryError as e:
        if params["fail_on_init_error"] or params["list_only"]:
            raise
        _wait_for_sigterm(
            f"ocihook: warning: {e}; not serving (--no-fail-on-init-error): waiting for SIGTERM"
        )
        return
    if params["list_only"]:
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
        plugin_dir=params["plugin_dir"],
        cdi_dir=params["cdi_dir"],
        strategies=_split(tuple(params["strategies"])),
        pass_device_specs=params["pass_device_specs"],
        fail_requests_greater_than_one=bool(config and config.fail_requests_greater_than_one),
        annotation_prefix=prefix,
        interval=params["interval"],
        nvml_health=params["nvml_health"],
    )
    if params["metrics_address"]:
        from ..k8s.features import serve_metrics

        httpd = serve_metrics(server, params["metrics_address"])
        host, port = httpd.server_address[:2]
        click.echo(f"ocihook: metrics on http://{host}:{port}/metrics", err=True)
    for p in server.plugins:
        click.echo(
            f"ocihook: serving {p.resource} ({len(p.devices)} devices) on {p.socket}", err=True
        )
    server.run_forever()


def _publish(url: str | None, inventory: Any, node: str, driver: str) -> Any:
    """Publish the node's ResourceSlices to the API server at ``url``, else the pod's own
    (:mod:`ocihook.k8s.apiserver`), and return it; outside a pod without ``url``, say
    they are not and return ``None``."""
    from ..k8s.apiserver import ApiServer, publish_slices
    from ..k8s.dra import resource_slices

    api = ApiServer(url) if url else ApiServer.in_cluster()
    if api is None:
        click.echo(
            "ocihook: no API server (not in a pod, no --apiserver): ResourceSlices not published",
            err=True,
        )
        return None
    counts = publish_slices(
        api, resource_slices(inventory, node, driver=driver), driver=driver, node=node
    )
    click.echo(
        f"ocihook: ResourceSlices of {driver} on {node} published to {api.url}: "
        f"{counts['created']} created, {counts['updated']} updated, {counts['deleted']} deleted",
        err=True,
    )
    return api


@k8s.command(name="dra-plugin")
@_k8s_inventory_options
@click.option("--driver", default="gpu.ocihook.io", show_default=True, help="DRA driver name.")
@click.option(
    "--node-name",
    envvar="NODE_NAME",
    default=None,
    help="This node's name ($NODE_NAME; default: the host name).",
)
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
    help="ResourceClaim objects as <uid>.json, when there is no API server.",
)  # fmt: skip
@click.option(
    "--apiserver", default=None, metavar="URL",
    help="Publish the ResourceSlices to this API server (kubectl proxy's URL, say); in a pod "
    "the in-cluster one is used without it.",
)  # fmt: skip
@click.option(
    "--print-slices",
    type=click.Choice(["yaml", "json"]),
    default=None,
    help="Print the ResourceSlices this node would publish, and exit.",
)
def dra_plugin(**params: Any) -> None:
    """Run the DRA kubelet plugin (v1beta1) until SIGTERM, or print its ResourceSlices.

    NodePrepareResources writes one CDI spec per claim (atomically) and returns its CDI
    device ids; NodeUnprepareResources removes it (idempotent)."""
    inventory = _k8s_inventory(params)
    node = params["node_name"] or os.uname().nodename
    driver = params["driver"]
    if params["print_slices"]:
        from ..k8s.dra import resource_slices

        slices = resource_slices(inventory, node, driver=driver)
        if params["print_slices"] == "json":
            click.echo(json.dumps(slices if len(slices) > 1 else slices[0], indent=2))
        else:
            import yaml

            click.echo(yaml.safe_dump_all(slices, sort_keys=False), nl=False)
        return
    api = _publish(params["apiserver"], inventory, node, driver)
    import signal
    import threading

    from ..k8s.apiserver import ApiClaims
    from ..k8s.dra import DirectoryClaims, DraPlugin

    # claims from the API server when there is one, else from files (tests, a sidecar)
    claims: Any = ApiClaims(api) if api is not None else DirectoryClaims(params["claims_dir"])
    plugin = DraPlugin(
        inventory, claims, params["cdi_dir"], driver=driver,
        plugin_dir=params["plugin_dir"], registry_dir=params["registry_dir"], node_name=node,
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
@_config_file_option
@click.option("--output", default=None, metavar="PATH", help="Write here (atomically), not stdout.")
def k8s_features(**params: Any) -> None:
    """Print a node-feature-discovery features file (features.d/) for the node's GPUs:
    ocihook.io/ labels and GPU feature discovery's nvidia.com/ resource labels (memory and
    MIG profiles need NVML: a label discovery cannot know is left out, with a warning)."""
    params, config = _with_plugin_config(params)
    inventory = _k8s_inventory(params, config, grpc=False)
    output = params["output"]
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


def _host_options(f: Any) -> Any:
    from ..engines import hostinstall

    f = click.option(
        "--restart-mode",
        type=click.Choice(["none", "signal", "systemd"]),
        default="none",
        show_default=True,
        help="After changing the engine's file: none (say a restart is needed), signal "
        "(SIGHUP; CRI-O only: containerd does not reload on it) or systemd (systemctl "
        "restart on the host, through nsenter in a pod). signal and systemd need hostPID.",
    )(f)
    f = click.option(
        "--prefix",
        default=hostinstall.PREFIX,
        show_default=True,
        metavar="PATH",
        help="The host directory ocihook is installed in.",
    )(f)
    return click.option(
        "--host-root",
        default="/host",
        show_default=True,
        metavar="PATH",
        help="Where this container sees the host's / (a hostPath mount of /).",
    )(f)


@k8s.command(name="install")
@_host_options
@click.option(
    "--runtime",
    "engine",
    type=click.Choice(["auto", "containerd", "crio", "none"]),
    default="auto",
    show_default=True,
    help="The engine to register ocihook-runtime with (and enable CDI in); auto: the one "
    "the host's files show; none: install the files only.",
)
@click.option(
    "--set-as-default", is_flag=True, help="Make ocihook-runtime the engine's default runtime."
)
@click.option(
    "--payload",
    default=None,
    metavar="PATH",
    help="The payload list (default: the image's /usr/share/ocihook/host-payload.list).",
)
@click.option("--dry-run", is_flag=True, help="Say what would be done; write nothing.")
def k8s_install(
    host_root: str,
    prefix: str,
    restart_mode: str,
    engine: str,
    set_as_default: bool,
    payload: str | None,
    dry_run: bool,
) -> None:
    """Install ocihook on the node from its image, as NVIDIA's toolkit container does: a
    self-contained copy (interpreter included) under --prefix with bin/ocihook,
    bin/ocihook-runtime and bin/nvidia-container-runtime-hook, and ocihook-runtime
    registered with the node's containerd or CRI-O, CDI enabled (applied by
    --restart-mode; none: restart the engine yourself). Idempotent; `ocihook k8s
    uninstall` undoes it. Errors exit 13."""
    from ..engines import describe, hostinstall, restart

    plan = hostinstall.plan_install(
        host_root,
        prefix=prefix,
        payload_list=payload or hostinstall.PAYLOAD_LIST,
        engine=engine,
        set_as_default=set_as_default,
    )
    # before anything is written: the mode, and what a restart needs when one is
    registered = plan.change.engine if plan.change is not None else None
    needed = plan.change is not None and plan.change.changed and not dry_run
    restart.check_mode(registered, restart_mode, host_root if needed else None)
    if not dry_run:
        hostinstall.apply_install(plan)
    would = "would be " if dry_run else ""
    size = sum(len(s.data) for s in plan.writes)
    click.echo(
        f"ocihook: {prefix}: {len(plan.writes)} files {would}written ({size >> 10} KiB), "
        f"{len(plan.keeps)} unchanged, {len(plan.removes)} {would}removed",
        err=True,
    )
    if plan.change is not None:
        click.echo(f"ocihook: {'dry run: ' if dry_run else ''}{describe(plan.change)}", err=True)
        if plan.change.changed:
            done = restart.restart_engine(
                plan.change.engine, restart_mode, host_root, dry_run=dry_run
            )
            if restart_mode == "none":
                done = f"restart {plan.change.engine} on the node to use ocihook-runtime and CDI"
            click.echo(f"ocihook: {done}", err=True)


@k8s.command(name="uninstall")
@_host_options
@click.option(
    "--keep-engine-config",
    is_flag=True,
    help="Leave the engine's configuration file as it is (remove the files only).",
)
@click.option("--dry-run", is_flag=True, help="Say what would be done; write nothing.")
def k8s_uninstall(
    host_root: str, prefix: str, restart_mode: str, keep_engine_config: bool, dry_run: bool
) -> None:
    """Undo `ocihook k8s install`: the engine's file restored as it was before (refused,
    exit 13, when it changed since; applied by --restart-mode), the installed files
    removed, then the directories left empty. Nothing installed: nothing done."""
    from ..engines import hostinstall, restart

    plan = hostinstall.plan_uninstall(
        host_root, prefix=prefix, keep_engine_config=keep_engine_config
    )
    if not plan.removes:
        click.echo(f"ocihook: {prefix}: not installed; nothing to do", err=True)
        return
    if plan.engine is not None:  # before anything is written
        restart.check_mode(plan.engine, restart_mode, None if dry_run else host_root)
    if not dry_run:
        hostinstall.apply_uninstall(plan)
    would = "would be " if dry_run else ""
    if plan.restore is not None:
        path, data = plan.restore
        done = "removed" if data is None else "restored"
        click.echo(f"ocihook: {path}: {would}{done}", err=True)
    click.echo(f"ocihook: {prefix}: {len(plan.removes)} files {would}removed", err=True)
    if plan.engine is not None:
        done = restart.restart_engine(plan.engine, restart_mode, host_root, dry_run=dry_run)
        if restart_mode == "none":
            done = f"restart {plan.engine} on the node to apply its restored file"
        click.echo(f"ocihook: {done}", err=True)
