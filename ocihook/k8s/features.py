"""Node labels and monitoring for Kubernetes.

* :func:`nfd_features` — a node-feature-discovery "local" features file (``key=value``
  lines that NFD's local source turns into node labels; written to
  ``/etc/kubernetes/node-feature-discovery/features.d/``), with two sets of labels:

  - ocihook's own, ``ocihook.io/...``: per vendor presence, device count, product, driver
    version and major, the CUDA version, MIG capability, and a count per resource
    (``ocihook.io/nvidia.com.gpu.count=8``);
  - the labels of NVIDIA's GPU feature discovery under its own names (:func:`gfd_labels`:
    ``nvidia.com/gpu.count``, ``.product``, ``.memory``, ``.replicas``,
    ``.sharing-strategy``, ``.compute.major``, ``.family``, ``nvidia.com/mig.strategy``,
    ``nvidia.com/mig-<profile>.count`` ..., ``nvidia.com/cuda.driver-version.*``,
    ``nvidia.com/cuda.runtime-version.*``, ``nvidia.com/gpu.machine``,
    ``nvidia.com/mig.capable``), which GFD itself writes into the same directory;

* :func:`metrics_text` — the device plugin's metrics in the Prometheus text exposition
  format 0.0.4; :func:`serve_metrics` serves them at ``http://HOST:PORT/metrics``.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Mapping
from typing import Any

from .inventory import HEALTHY, MIG_RESOURCE, UNHEALTHY, Inventory, K8sDevice

__all__ = ["gfd_labels", "metrics_text", "nfd_features", "serve_metrics"]

#: Prefix of ocihook's own NFD feature keys.
PREFIX = "ocihook.io"
_LABEL_VALUE = re.compile(r"[^A-Za-z0-9_.-]+")
log = logging.getLogger("ocihook.k8s")


def _value(text: str) -> str:
    """A Kubernetes label value: at most 63 characters of ``[A-Za-z0-9_.-]``, alphanumeric
    at both ends (other characters become ``-``)."""
    return _LABEL_VALUE.sub("-", text)[:63].strip("-_.")


def _real(devices: tuple[K8sDevice, ...]) -> list[K8sDevice]:
    """The devices that are not time-slicing replicas of another (one per real device)."""
    seen: dict[str, K8sDevice] = {}
    for d in devices:
        seen.setdefault(d.real_id, d)
    return list(seen.values())


def gfd_labels(inventory: Inventory) -> tuple[dict[str, str], tuple[str, ...]]:
    """The resource labels NVIDIA's GPU feature discovery gives a node, for the NVIDIA GPUs
    of ``inventory``, and why labels were left out.

    Rules (GFD, ``internal/lm/resource.go`` and ``mig-strategy.go`` of NVIDIA's
    k8s-device-plugin): for ``nvidia.com/gpu``, ``.count`` (every GPU, MIG-enabled ones
    included), ``.product`` (the model, spaces as ``-``, ``-SHARED`` with time-slicing
    unless the shared resource is renamed), ``.replicas`` (of that resource) and
    ``.memory`` (MiB, ``nvmlDeviceGetMemoryInfo`` total); with the ``single`` strategy
    applied those describe the MIG devices instead (product ``<model>-MIG-<profile>``,
    memory of one MIG device); with ``mixed``, the same four for each
    ``nvidia.com/mig-<profile>`` resource (memory: ``nvmlDeviceGetAttributes``
    ``memorySizeMB``); ``nvidia.com/mig.strategy`` unless the strategy is ``none``. Labels
    name a resource as it is called unshared. Each labelled resource also has
    ``.sharing-strategy`` (``time-slicing`` with replicas, else ``none``; ocihook has no
    MPS). With whole GPUs, ``nvidia.com/gpu.compute.major``/``.minor`` and ``.family``
    (the compute capability, NVML only; the family as GFD names it, :data:`FAMILIES`).

    Node labels (``internal/lm/nvml.go``, ``machine-type.go``): the driver version
    (``/proc/driver/nvidia/version``) as ``nvidia.com/cuda.driver.major``/``.minor``/
    ``.rev`` and ``nvidia.com/cuda.driver-version.major``/``.minor``/``.revision``/
    ``.full``; the CUDA version the driver supports (:attr:`Inventory.cuda_version`) as
    ``nvidia.com/cuda.runtime.major``/``.minor`` and
    ``nvidia.com/cuda.runtime-version.major``/``.minor``/``.full``;
    ``nvidia.com/gpu.machine`` (sysfs DMI product name, spaces as ``-``; GFD writes
    ``unknown`` where ocihook leaves it out); ``nvidia.com/mig.capable`` (whether a GPU
    supports MIG: NVML, or a GPU that has MIG devices).

    A value discovery does not know is never guessed: ``.memory`` is left out when the
    memory is unknown (the procfs GPU backend never knows it), a MIG profile that is
    unknown leaves its devices without per-profile labels; each such case is one entry of
    the returned reasons. With GPUs of several models the ``nvidia.com/gpu`` labels
    describe GPU 0's (GFD keeps one of them too), which is also said.

    Returns:
        ``(labels, reasons)``: label key -> value, and the reasons in words; ``({}, ())``
        without NVIDIA GPUs.
    """
    gpus = inventory.nvidia_gpus
    if not gpus:
        return {}, ()
    labels: dict[str, str] = {}
    reasons: list[str] = []
    procfs = inventory.gpu_backend == "procfs"
    own_name = {inventory.advertised(r): r for r in inventory.sharing}

    def put(resource: str, count: int, parts: tuple[str, ...], memory: int | None) -> None:
        replicas = inventory.replicas_of(resource)
        renamed = inventory.advertised(resource) != resource
        product = "-".join(p.replace(" ", "-") for p in parts if p)
        shared = "-SHARED" if replicas > 1 and not renamed else ""
        labels[f"{resource}.count"] = str(count)
        labels[f"{resource}.product"] = _value(product + shared)
        labels[f"{resource}.replicas"] = str(replicas)
        labels[f"{resource}.sharing-strategy"] = "time-slicing" if replicas > 1 else "none"
        if memory is not None:
            labels[f"{resource}.memory"] = str(memory)
            return
        why = (
            "the procfs GPU backend cannot tell memory sizes (use --gpu-backend nvml)"
            if procfs
            else "NVML did not report the memory"
        )
        reasons.append(f"{resource}.memory left out: {why}")

    model = gpus[0].model
    if len({g.model for g in gpus}) > 1:
        reasons.append(
            f"GPUs of several models ({', '.join(sorted({g.model for g in gpus}))}): the "
            "nvidia.com/gpu labels describe GPU 0's"
        )
    strategy = inventory.mig_strategy
    advertised = _real(inventory.devices.get(inventory.advertised("nvidia.com/gpu"), ()))
    if strategy == "single" and any(d.mig for d in advertised):
        first = advertised[0]
        if first.mig_profile is None:
            reasons.append("the MIG profile is unknown: nvidia.com/gpu.product names none")
        put("nvidia.com/gpu", len(advertised), (model, "MIG", first.mig_profile or ""),
            first.memory_mib)  # fmt: skip
    else:
        put("nvidia.com/gpu", len(gpus), (model,), gpus[0].memory_mib)
        _architecture(gpus[0].architecture, procfs, labels, reasons)
    if strategy != "none":
        labels["nvidia.com/mig.strategy"] = strategy
    if strategy == "mixed":
        for name, devices in sorted(inventory.devices.items()):
            resource = own_name.get(name, name)  # the labels name the resource unrenamed
            real = _real(devices)
            if resource == MIG_RESOURCE:
                reasons.append(
                    f"{len(real)} MIG devices of unknown profile have no "
                    "nvidia.com/mig-<profile> labels"
                )
                continue
            profile = real[0].mig_profile if real and real[0].mig else None
            if profile is not None:
                put(resource, len(real), (real[0].model, "MIG", profile), real[0].memory_mib)
    _node(inventory, procfs, labels, reasons)
    return labels, tuple(reasons)


#: Compute capability major -> GPU family, as GPU feature discovery names them (7 and 8
#: split at a minor version: ``_family``).
FAMILIES = {
    1: "tesla", 2: "fermi", 3: "kepler", 5: "maxwell", 6: "pascal", 9: "hopper",
    10: "blackwell", 12: "blackwell",
}  # fmt: skip


def _family(major: int, minor: int) -> str | None:
    """GFD's ``nvidia.com/gpu.family`` of compute capability ``major.minor``, or ``None``
    for one GFD has no name for (it writes ``undefined``)."""
    if major == 7:
        return "volta" if minor < 5 else "turing"
    if major == 8:
        return "ampere" if minor < 9 else "ada-lovelace"
    return FAMILIES.get(major)


def _architecture(
    capability: str | None, procfs: bool, labels: dict[str, str], reasons: list[str]
) -> None:
    """``nvidia.com/gpu.compute.major``/``.minor`` and ``.family`` of a whole GPU of
    compute capability ``capability`` (``"8.0"``)."""
    if capability is None:
        why = "the procfs GPU backend cannot tell it; use --gpu-backend nvml"
        reasons.append(
            "nvidia.com/gpu.compute.major, .compute.minor and .family left out: the compute "
            f"capability is unknown ({why if procfs else 'NVML did not report it'})"
        )
        return
    major, _, minor = capability.partition(".")
    labels["nvidia.com/gpu.compute.major"] = major
    labels["nvidia.com/gpu.compute.minor"] = minor
    family = _family(int(major), int(minor or 0))
    if family is None:
        reasons.append(
            f"nvidia.com/gpu.family left out: compute capability {capability} has no family name"
        )
    else:
        labels["nvidia.com/gpu.family"] = family


def _node(inventory: Inventory, procfs: bool, labels: dict[str, str], reasons: list[str]) -> None:
    """GFD's node labels: the driver and CUDA versions (deprecated and current names),
    ``nvidia.com/gpu.machine`` and ``nvidia.com/mig.capable``."""
    driver = inventory.driver_version.get("nvidia")
    parts = driver.split(".") if driver else []
    if driver and 2 <= len(parts) <= 3 and all(p.isalnum() for p in parts):
        rev = parts[2] if len(parts) == 3 else ""
        for old, new, value in (
            ("major", "major", parts[0]), ("minor", "minor", parts[1]), ("rev", "revision", rev),
        ):  # fmt: skip
            labels[f"nvidia.com/cuda.driver.{old}"] = value
            labels[f"nvidia.com/cuda.driver-version.{new}"] = value
        labels["nvidia.com/cuda.driver-version.full"] = _value(driver)
    else:
        reasons.append(
            "nvidia.com/cuda.driver.* and nvidia.com/cuda.driver-version.* left out: "
            + (f"driver version {driver!r} is not X.Y[.Z]" if driver else "no driver version")
        )
    cuda = inventory.cuda_version
    major, _, minor = (cuda or "").partition(".")
    if major.isdigit() and minor.isdigit():
        for name in ("cuda.runtime", "cuda.runtime-version"):
            labels[f"nvidia.com/{name}.major"] = major
            labels[f"nvidia.com/{name}.minor"] = minor
        labels["nvidia.com/cuda.runtime-version.full"] = f"{major}.{minor}"
    else:
        reasons.append(
            "nvidia.com/cuda.runtime.* and nvidia.com/cuda.runtime-version.* left out: "
            f"the CUDA version the driver supports is unknown ({cuda!r})"
        )
    if inventory.machine:
        labels["nvidia.com/gpu.machine"] = _value(inventory.machine.replace(" ", "-"))
    else:
        reasons.append(
            "nvidia.com/gpu.machine left out: sysfs class/dmi/id/product_name is missing or empty"
        )
    gpus = inventory.nvidia_gpus
    if any(g.mig_capable or g.mig_devices for g in gpus):
        labels["nvidia.com/mig.capable"] = "true"
    elif all(g.mig_capable is False for g in gpus):
        labels["nvidia.com/mig.capable"] = "false"
    else:
        reasons.append(
            "nvidia.com/mig.capable left out: "
            + (
                "the procfs GPU backend cannot tell whether a GPU without MIG devices supports "
                "MIG (use --gpu-backend nvml)"
                if procfs
                else "NVML did not tell whether every GPU supports MIG"
            )
        )


def nfd_features(
    inventory: Inventory,
    models: Mapping[str, str] | None = None,
    mig_capable: bool | None = None,
    *,
    reasons: list[str] | None = None,
) -> str:
    """The NFD features file text for ``inventory`` (sorted ``key=value`` lines): ocihook's
    own labels and :func:`gfd_labels`.

    Args:
        inventory: what the node advertises.
        models: product name per vendor (``{"nvidia": "NVIDIA A100-SXM4-80GB"}``); default:
            the first NVIDIA GPU's model.
        mig_capable: whether an NVIDIA GPU has MIG enabled; default: whether discovery
            found a MIG device.
        reasons: where to append why labels were left out (:func:`gfd_labels`); when
            ``None`` they are logged as warnings (logger ``ocihook.k8s``).
    """
    gpus = inventory.nvidia_gpus
    if mig_capable is None:
        mig_capable = any(g.mig_devices for g in gpus)
    known = {"nvidia": gpus[0].model} if gpus else {}
    lines: dict[str, str] = {}
    counts: dict[str, int] = {}
    for resource, devs in inventory.devices.items():
        for d in _real(devs):  # a time-slicing replica's id is not its real id: count each once
            counts[d.vendor] = counts.get(d.vendor, 0) + 1
        lines[f"{PREFIX}/{resource.replace('/', '.')}.count"] = str(len(devs))
    for vendor, n in counts.items():
        lines[f"{PREFIX}/{vendor}.present"] = "true"
        lines[f"{PREFIX}/{vendor}.devices"] = str(n)
    for vendor, version in inventory.driver_version.items():
        lines[f"{PREFIX}/{vendor}.driver.version"] = _value(version)
        major = version.split(".")[0]
        lines[f"{PREFIX}/{vendor}.driver.major"] = _value(major)
    if inventory.cuda_version:
        lines[f"{PREFIX}/nvidia.cuda.version"] = _value(inventory.cuda_version)
    for vendor, model in {**known, **(models or {})}.items():
        lines[f"{PREFIX}/{vendor}.product"] = _value(model)
    if "nvidia" in counts or gpus:
        lines[f"{PREFIX}/nvidia.mig.capable"] = "true" if mig_capable else "false"
    gfd, why = gfd_labels(inventory)
    lines.update(gfd)
    if reasons is not None:
        reasons.extend(why)
    else:
        for reason in why:
            log.warning("%s", reason)
    return "".join(f"{k}={v}\n" for k, v in sorted(lines.items()))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def metrics_text(server: Any) -> str:
    """The metrics of a :class:`~ocihook.k8s.deviceplugin.DevicePluginServer` in the
    Prometheus text format: devices per resource by health, allocations and failed
    allocations, registration state and count, ListAndWatch updates sent, CDI spec writes."""
    out: list[str] = []

    def family(name: str, kind: str, doc: str) -> None:
        out.append(f"# HELP {name} {doc}")
        out.append(f"# TYPE {name} {kind}")

    plugins = list(server.plugins)
    family("ocihook_k8s_devices", "gauge", "Devices advertised, by resource and health.")
    for p in plugins:
        states = [p.health_of(d.id) for d in p.devices]
        for h in (HEALTHY, UNHEALTHY):
            r = _escape(p.resource)
            out.append(f'ocihook_k8s_devices{{resource="{r}",health="{h}"}} {states.count(h)}')
    counters = (
        ("ocihook_k8s_allocations_total", "allocations", "Allocate calls answered."),
        ("ocihook_k8s_allocation_errors_total", "allocation_errors", "Allocate calls refused."),
        ("ocihook_k8s_registrations_total", "registrations", "Registrations accepted by kubelet."),
        ("ocihook_k8s_list_and_watch_updates_total", "list_and_watch_updates",
         "Device lists sent on ListAndWatch streams."),
        ("ocihook_k8s_health_changes_total", "health_changes", "Rounds where a health changed."),
    )  # fmt: skip
    for name, attr, doc in counters:
        family(name, "counter", doc)
        for p in plugins:
            out.append(f'{name}{{resource="{_escape(p.resource)}"}} {getattr(p.metrics, attr)}')
    family("ocihook_k8s_registered", "gauge", "1 while registered with kubelet.")
    for p in plugins:
        r = _escape(p.resource)
        out.append(f'ocihook_k8s_registered{{resource="{r}"}} {int(p.metrics.registered)}')
    family("ocihook_k8s_cdi_spec_writes_total", "counter", "CDI spec files written.")
    out.append(f"ocihook_k8s_cdi_spec_writes_total {server.spec_writes}")
    return "\n".join(out) + "\n"


def serve_metrics(server: Any, address: str) -> Any:
    """Serve :func:`metrics_text` of ``server`` at ``http://address/metrics`` from a daemon
    thread; returns the :class:`http.server.ThreadingHTTPServer` (``server_address`` has
    the bound port when ``address`` gives port 0).

    Raises:
        ConfigError: a malformed ``address``; OSError: it cannot be bound.
    """
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from ..core.errors import ConfigError

    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError(
            "the metrics address must be HOST:PORT", field="--metrics-address", value=address
        )

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404)
                return
            body = metrics_text(server).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer((host or "127.0.0.1", int(port)), Handler)
    threading.Thread(target=httpd.serve_forever, name="ocihook-k8s-metrics", daemon=True).start()
    return httpd
