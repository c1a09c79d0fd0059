"""``ocihook k8s dra-plugin``: a DRA kubelet plugin (``k8s.io.kubelet.pkg.apis.dra.v1beta1``).

The plugin serves two sockets:

* ``<plugins_registry>/<driver>-reg.sock``: ``pluginregistration.Registration``, which
  kubelet's plugin watcher finds, calls ``GetInfo`` on (type ``DRAPlugin``, the driver
  name, the service socket, the versions served) and notifies of the outcome;
* ``<plugins>/<driver>/dra.sock``: ``DRAPlugin`` with ``NodePrepareResources`` and
  ``NodeUnprepareResources``.

Claims. kubelet sends only a claim's namespace, name and UID; the allocation (which of the
driver's devices the scheduler picked) is in the ResourceClaim's ``status.allocation``
that a real driver reads from the API server. ocihook reads it from a
:class:`ClaimSource`: by default :class:`DirectoryClaims`, ResourceClaim objects as JSON
files ``<dir>/<uid>.json`` (what ``kubectl get resourceclaim -o json`` prints; a sidecar or
a test puts them there). Reading the API server itself is not implemented.

Prepare (per claim; one claim's failure is reported in its own response entry and the
others go on): the allocation results of this driver -> the devices of
:class:`~ocihook.k8s.inventory.Inventory` by their ResourceSlice names (``gpu-0``, ...) ->
a per-claim CDI spec ``<cdi dir>/ocihook-dra_<uid>.json`` (kind
``k8s.<driver>/claim``, one device ``<uid>-<device>`` per device, whose edits set
``OCIHOOK_DRA_CLAIM_<DEVICE>=<namespace>/<name>``), written atomically -> the CDI ids
returned per device: the vendor spec's device (``k8s.ocihook.io/nvidia-gpu=GPU-...``, the spec the
plugin writes and keeps) and the claim's. Preparing a prepared claim again returns the
same answer. Unprepare removes the claim's spec; a claim never prepared, or already
unprepared, succeeds (kubelet retries).

:func:`resource_slices` gives the ResourceSlice objects (``resource.k8s.io/v1beta1``) the
driver would publish for this node: one pool named after the node, one device per
schedulable unit with ``uuid``, ``vendor``, ``productName``, ``driverVersion``,
``pciBusID`` and ``numaNode`` attributes, a MIG device's ``profile`` and the ``memory``
capacity (MiB) when discovery knows them (NVML).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
from collections.abc import Mapping
from typing import Any, Protocol

from ..core.errors import ConfigError
from . import rpc
from .api import dra_pb2 as dra
from .api import pluginregistration_pb2 as reg
from .inventory import HEALTHY, Inventory, K8sDevice, health

__all__ = [
    "DEFAULT_DRIVER",
    "ClaimSource",
    "DirectoryClaims",
    "DraPlugin",
    "device_names",
    "resource_slices",
]

DEFAULT_DRIVER = "gpu.ocihook.io"
#: The service versions the plugin serves (kubelet picks one from GetInfo).
SUPPORTED_VERSIONS = ("v1beta1.DRAPlugin",)
_UID = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,127}")


class ClaimSource(Protocol):
    """Where a claim's allocation is read from."""

    def get(self, namespace: str, name: str, uid: str) -> Mapping[str, Any] | None:
        """The ResourceClaim object (a dict as the API serves it), or ``None``."""
        ...


class DirectoryClaims:
    """ResourceClaims as JSON files ``<directory>/<uid>.json``."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def get(self, namespace: str, name: str, uid: str) -> Mapping[str, Any] | None:
        if not _UID.fullmatch(uid):  # a file name, never a path
            return None
        try:
            with open(os.path.join(self.directory, f"{uid}.json"), "rb") as f:
                data = json.load(f)
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None


def device_names(inventory: Inventory) -> dict[str, K8sDevice]:
    """The ResourceSlice device name of every real device: ``gpu-<n>`` for NVIDIA GPUs,
    ``mig-<n>`` for MIG devices (whatever their resource), ``amd-<n>``, ``intel-<n>`` (n in
    the order of the sorted resources, then discovery order);
    time-slicing replicas are not listed (DRA shares a device through claims)."""
    out: dict[str, K8sDevice] = {}
    counters: dict[str, int] = {}
    for resource in sorted(inventory.devices):
        for d in inventory.devices[resource]:
            if d.id != d.real_id and d.id.rsplit("::", 1)[0] != d.real_id:
                continue
            if any(o.real_id == d.real_id for o in out.values()):
                continue
            prefix = "mig" if d.mig else "gpu" if d.vendor == "nvidia" else d.vendor
            n = counters.get(prefix, 0)
            counters[prefix] = n + 1
            out[f"{prefix}-{n}"] = d
    return out


def resource_slices(
    inventory: Inventory,
    node_name: str,
    *,
    driver: str = DEFAULT_DRIVER,
    models: Mapping[str, str] | None = None,
    generation: int = 1,
) -> list[dict[str, Any]]:
    """The ResourceSlices (``resource.k8s.io/v1beta1``) for this node: one slice, one pool
    (named ``node_name``) holding every device of :func:`device_names`.

    Raises:
        ConfigError: ``node_name`` or ``driver`` is not a valid name.
    """
    if not node_name or len(node_name) > 253 or not re.fullmatch(r"[a-z0-9.-]+", node_name):
        raise ConfigError("invalid node name", field="--node-name", value=node_name)
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", driver) or "." not in driver:
        raise ConfigError(
            "invalid DRA driver name (a DNS subdomain)", field="--driver", value=driver
        )
    devices = []
    for name, d in device_names(inventory).items():
        attrs: dict[str, Any] = {
            "vendor": {"string": d.vendor},
            "pciBusID": {"string": d.bus_id},
            "uuid": {"string": d.real_id},
        }
        if d.numa_node is not None:
            attrs["numaNode"] = {"int": d.numa_node}
        model = (models or {}).get(d.vendor) or d.model
        if model:
            attrs["productName"] = {"string": model}
        version = inventory.driver_version.get(d.vendor)
        if version:
            attrs["driverVersion"] = {"string": version}
        if d.mig_profile is not None:
            attrs["profile"] = {"string": d.mig_profile}
        basic: dict[str, Any] = {"attributes": attrs}
        if d.memory_mib is not None:
            basic["capacity"] = {"memory": {"value": f"{d.memory_mib}Mi"}}
        devices.append({"name": name, "basic": basic})
    return [
        {
            "apiVersion": "resource.k8s.io/v1beta1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node_name}-{driver}"[:253]},
            "spec": {
                "driver": driver,
                "nodeName": node_name,
                "pool": {"name": node_name, "generation": generation, "resourceSliceCount": 1},
                "devices": devices,
            },
        }
    ]


class _ClaimFailed(Exception):
    pass


class DraPlugin:
    """The DRA kubelet plugin (see the module docstring).

    Args:
        inventory: the node's devices.
        claims: where allocations are read.
        cdi_dir: where the per-claim specs go (the vendor specs too, kept by
            :meth:`write_vendor_specs`).
        driver: the DRA driver name.
        plugin_dir: kubelet's plugin directory (``/var/lib/kubelet/plugins``).
        registry_dir: kubelet's registration directory
            (``/var/lib/kubelet/plugins_registry``).
        node_name: the node (the pool name; default: the host name).
    """

    def __init__(
        self,
        inventory: Inventory,
        claims: ClaimSource,
        cdi_dir: str,
        *,
        driver: str = DEFAULT_DRIVER,
        plugin_dir: str = "/var/lib/kubelet/plugins",
        registry_dir: str = "/var/lib/kubelet/plugins_registry",
        node_name: str | None = None,
    ) -> None:
        self.inventory = inventory
        self.claims = claims
        self.cdi_dir = cdi_dir
        self.driver = driver
        self.node_name = node_name or os.uname().nodename
        self.devices = device_names(inventory)
        self.endpoint = os.path.join(plugin_dir, driver, "dra.sock")
        self.registration_socket = os.path.join(registry_dir, f"{driver}-reg.sock")
        self.registration_status: tuple[bool, str] | None = None
        self.prepared: dict[str, list[tuple[str, list[str]]]] = {}
        self._lock = threading.Lock()
        self._servers: list[Any] = []

    # -- files ----------------------------------------------------------------------------

    def claim_spec_path(self, uid: str) -> str:
        """``<cdi dir>/ocihook-dra_<uid>.json``."""
        return os.path.join(self.cdi_dir, f"ocihook-dra_{uid}.json")

    def write_vendor_specs(self) -> None:
        """Write the vendor CDI specs the claims' device ids refer to (atomically), under the
        device plugin's file names (:func:`~ocihook.k8s.deviceplugin.spec_file_name`): a node
        running both plugins has one spec per kind, never two defining the same devices
        (a CDI registry refuses such conflicting devices)."""
        from ..cdi.generate import spec_bytes, write_spec
        from .deviceplugin import spec_file_name

        os.makedirs(self.cdi_dir, exist_ok=True)
        for kind, spec in self.inventory.specs.items():
            path = os.path.join(self.cdi_dir, spec_file_name(kind))
            write_spec(spec_bytes(spec, "json"), path)

    # -- claims ---------------------------------------------------------------------------

    def _allocated(self, claim: Any) -> list[tuple[str, str]]:
        """``(request, device name)`` of this driver's allocation results of ``claim``."""
        obj = self.claims.get(claim.namespace, claim.name, claim.uid)
        if obj is None:
            raise _ClaimFailed(
                f"ResourceClaim {claim.namespace}/{claim.name} ({claim.uid}) not found"
            )
        meta = obj.get("metadata", {})
        if meta.get("uid") not in (None, claim.uid):
            raise _ClaimFailed(f"ResourceClaim {claim.namespace}/{claim.name} has another UID")
        results = (((obj.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
            "results"
        ) or []
        out = [
            (str(r.get("request", "")), str(r.get("device", "")))
            for r in results
            if isinstance(r, dict) and r.get("driver") == self.driver
        ]
        if not out:
            raise _ClaimFailed(
                f"ResourceClaim {claim.namespace}/{claim.name} has no allocation for {self.driver}"
            )
        return out

    def _prepare(self, claim: Any) -> list[tuple[str, list[str]]]:
        from ..cdi.generate import spec_bytes, write_spec
        from ..cdi.spec import ContainerEdits, Device, Spec, minimum_version

        with self._lock:
            done = self.prepared.get(claim.uid)
        if done is not None and os.path.exists(self.claim_spec_path(claim.uid)):
            return done
        results = self._allocated(claim)
        kind = f"k8s.{self.driver}/claim"
        cdi_devices = []
        answer: list[tuple[str, list[str]]] = []
        for request, name in results:
            d = self.devices.get(name)
            if d is None:
                raise _ClaimFailed(f"device {name!r} of request {request!r} is not on this node")
            if health(d, view=self.inventory.view) != HEALTHY:
                raise _ClaimFailed(f"device {name!r} ({d.real_id}) is unhealthy")
            var = "OCIHOOK_DRA_CLAIM_" + re.sub(r"[^A-Za-z0-9]", "_", name).upper()
            dev_name = f"{claim.uid}-{name}"
            edits = ContainerEdits(env=(f"{var}={claim.namespace}/{claim.name}",))
            cdi_devices.append(Device(dev_name, edits))
            answer.append((name, [d.cdi_name, f"{kind}={dev_name}"]))
        spec = Spec("0.3.0", kind, tuple(cdi_devices), ContainerEdits())
        spec = Spec(minimum_version(spec), spec.kind, spec.devices, spec.container_edits)
        os.makedirs(self.cdi_dir, exist_ok=True)
        write_spec(spec_bytes(spec, "json"), self.claim_spec_path(claim.uid))
        with self._lock:
            self.prepared[claim.uid] = answer
        return answer

    def NodePrepareResources(self, request: Any, context: Any) -> Any:
        out = dra.NodePrepareResourcesResponse()
        for claim in request.claims:
            entry = out.claims[claim.uid]
            try:
                for name, ids in self._prepare(claim):
                    entry.devices.add(pool_name=self._pool(), device_name=name, cdi_device_ids=ids)
            except (_ClaimFailed, OSError, ValueError) as e:
                del entry.devices[:]
                entry.error = f"prepare {claim.namespace}/{claim.name}: {e}"
            except Exception as e:  # an ocihook error writing the spec: reported per claim
                del entry.devices[:]
                entry.error = f"prepare {claim.namespace}/{claim.name}: {e}"
        return out

    def NodeUnprepareResources(self, request: Any, context: Any) -> Any:
        out = dra.NodeUnprepareResourcesResponse()
        for claim in request.claims:
            entry = out.claims[claim.uid]
            try:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.claim_spec_path(claim.uid))
            except OSError as e:
                entry.error = f"unprepare {claim.uid}: {e.strerror}"
                continue
            with self._lock:
                self.prepared.pop(claim.uid, None)
        return out

    def _pool(self) -> str:
        return self.node_name

    # -- registration ---------------------------------------------------------------------

    def GetInfo(self, request: Any, context: Any) -> Any:
        return reg.PluginInfo(
            type="DRAPlugin",
            name=self.driver,
            endpoint=self.endpoint,
            supported_versions=list(SUPPORTED_VERSIONS),
        )

    def NotifyRegistrationStatus(self, request: Any, context: Any) -> Any:
        self.registration_status = (request.plugin_registered, request.error)
        return reg.RegistrationStatusResponse()

    # -- serving --------------------------------------------------------------------------

    def start(self) -> None:
        """Write the vendor specs, serve the DRA service, then the registration socket
        (last: kubelet may call the service as soon as it sees the registration).

        Raises:
            OSError, CdiError: a socket cannot be bound, a spec cannot be written.
            ConfigError: a socket path too long for gRPC (:func:`~ocihook.k8s.rpc.unix_server`).
        """
        self.write_vendor_specs()
        for path in (self.endpoint, self.registration_socket):
            os.makedirs(os.path.dirname(path), exist_ok=True)
        dra_server = rpc.unix_server(self.endpoint)
        rpc.add_service(dra_server, rpc.DRA_PLUGIN, self)
        self._servers.append(dra_server)
        reg_server = rpc.unix_server(self.registration_socket)
        rpc.add_service(reg_server, rpc.PLUGIN_REGISTRATION, self)
        self._servers.append(reg_server)

    def stop(self) -> None:
        """Stop serving and remove both sockets (prepared claims' specs stay)."""
        for s in self._servers:
            s.stop(grace=0.5).wait()
        self._servers.clear()
        for path in (self.registration_socket, self.endpoint):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
