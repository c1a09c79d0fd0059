"""Node labels and monitoring for Kubernetes.

* :func:`nfd_features` — a node-feature-discovery "local" features file (``key=value``
  lines that NFD's local source turns into ``feature.node.kubernetes.io/<key>`` labels;
  written to ``/etc/kubernetes/node-feature-discovery/features.d/``): per vendor the GPU
  product, count, memory (when known), driver and CUDA versions and MIG capability — the
  labels NVIDIA's GPU feature discovery gives, under ocihook's own names
  (``ocihook.io/nvidia.gpu.count=8``);
* :func:`metrics_text` — the device plugin's metrics in the Prometheus text exposition
  format 0.0.4; :func:`serve_metrics` serves them at ``http://HOST:PORT/metrics``.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from typing import Any

from .inventory import HEALTHY, UNHEALTHY, Inventory

__all__ = ["metrics_text", "nfd_features", "serve_metrics"]

#: Prefix of every NFD feature key.
PREFIX = "ocihook.io"
_LABEL_VALUE = re.compile(r"[^A-Za-z0-9_.-]+")


def _value(text: str) -> str:
    """A Kubernetes label value: at most 63 characters of ``[A-Za-z0-9_.-]``, alphanumeric
    at both ends (other characters become ``-``)."""
    return _LABEL_VALUE.sub("-", text)[:63].strip("-_.")


def nfd_features(
    inventory: Inventory, models: Mapping[str, str] | None = None, mig_capable: bool = False
) -> str:
    """The NFD features file text for ``inventory`` (sorted ``key=value`` lines).

    Args:
        inventory: what the node advertises.
        models: product name per vendor (``{"nvidia": "NVIDIA A100-SXM4-80GB"}``).
        mig_capable: whether an NVIDIA GPU has MIG enabled (a MIG device was found).
    """
    lines: dict[str, str] = {}
    counts: dict[str, int] = {}
    for resource, devs in inventory.devices.items():
        for d in devs:
            if d.id == d.real_id:
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
    for vendor, model in (models or {}).items():
        lines[f"{PREFIX}/{vendor}.product"] = _value(model)
    if "nvidia" in counts or "nvidia.com/mig" in inventory.devices:
        lines[f"{PREFIX}/nvidia.mig.capable"] = "true" if mig_capable else "false"
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
