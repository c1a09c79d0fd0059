"""``ocihook k8s device-plugin``: a kubelet device plugin (API v1beta1) for the host's GPUs.

One gRPC server per extended resource (:class:`ResourcePlugin`), each on its own socket
in the device plugin directory (``/var/lib/kubelet/device-plugins``), registered with
kubelet's ``Registration`` service on ``kubelet.sock`` there. :class:`DevicePluginServer`
runs them and a watch loop (every ``interval`` seconds) that:

* re-checks every device's health (:func:`ocihook.k8s.inventory.health`; with
  ``nvml_health`` also NVML's lost GPUs and the devices critical XID events made
  unhealthy, :mod:`ocihook.k8s.nvmlhealth`) and pushes a new device list to every
  ListAndWatch stream when one changes;
* re-registers when kubelet restarts: kubelet re-creates ``kubelet.sock`` (a new inode)
  and deletes the plugins' sockets, so a plugin whose socket is gone serves again on a new
  one before registering;
* keeps the CDI specs it relies on written (``<cdi dir>/<vendor>-<class>.json``, of the
  plugins' own kinds, :data:`~ocihook.cdi.generate.K8S_KINDS`:
  ``k8s.ocihook.io-nvidia-gpu.json``, atomically): a spec file that is missing or differs
  from the discovered one is written again. When another file in the directory defines
  one of its qualified names (a second producer of the kind), one warning line names both
  files (:func:`spec_collisions`).

Allocate answers with the configured strategies (:data:`STRATEGIES`, several may be
combined): ``cdi-cri`` (default: qualified CDI names in ``ContainerAllocateResponse.
cdi_devices``, which kubelet passes to the runtime in the CRI ``CDI_devices`` field;
containerd 1.7+ and CRI-O 1.28+ with CDI enabled resolve them), ``cdi-annotations``
(``cdi.k8s.io/ocihook-k8s_<id>`` annotations, for runtimes that read CDI annotations),
``envvar`` (``NVIDIA_VISIBLE_DEVICES`` / ``AMD_VISIBLE_DEVICES`` /
``INTEL_VISIBLE_DEVICES``, for a legacy hook or ``ocihook-runtime``) and ``volume-mounts``
(NVIDIA only: ``/dev/null`` mounted at ``/var/run/nvidia-container-devices/<device>``, the
NVIDIA toolkit's convention, which an image's environment cannot forge).
``pass_device_specs`` adds the device nodes as ``DeviceSpec`` (for the envvar strategies
where no hook creates them).

Allocation of a time-slicing replica hands out its real device; two replicas of one GPU in
one request give the GPU once, and with ``fail_requests_greater_than_one`` (NVIDIA's
``sharing.timeSlicing.failRequestsGreaterThanOne``) a request for more than one device of
which one is a replica is refused. An unknown or unhealthy device id fails the request.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from ..core.errors import ConfigError, DiscoveryError, OcihookError
from . import rpc
from .api import deviceplugin_pb2 as dp
from .inventory import HEALTHY, UNHEALTHY, Inventory, K8sDevice, RootView, health

__all__ = [
    "API_VERSION",
    "DEFAULT_PLUGIN_DIR",
    "HEALTHY",
    "STRATEGIES",
    "UNHEALTHY",
    "DevicePluginServer",
    "KubeletError",
    "Metrics",
    "ResourcePlugin",
    "preferred_allocation",
    "socket_name",
    "spec_collisions",
    "spec_file_name",
    "wait_until",
]

API_VERSION = "v1beta1"
DEFAULT_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
KUBELET_SOCKET = "kubelet.sock"
#: Allocate strategies (``--strategy``).
STRATEGIES = ("cdi-cri", "cdi-annotations", "envvar", "volume-mounts")
#: The plugin name in CDI annotation keys.
ANNOTATION_PLUGIN = "ocihook-k8s"
_VISIBLE = {
    "nvidia": "NVIDIA_VISIBLE_DEVICES",
    "amd": "AMD_VISIBLE_DEVICES",
    "intel": "INTEL_VISIBLE_DEVICES",
}
_VOLUME_DIR = "/var/run/nvidia-container-devices"

log = logging.getLogger("ocihook.k8s")


class KubeletError(DiscoveryError):
    """kubelet cannot be reached or refused a registration (exit code 6, like a host
    without a usable driver: the node cannot serve)."""

    reference = "kubelet"


def socket_name(resource: str) -> str:
    """The plugin's socket file name for ``resource``: ``ocihook-nvidia.com-gpu.sock``."""
    return "ocihook-" + resource.replace("/", "-") + ".sock"


def spec_file_name(kind: str) -> str:
    """The CDI spec file the plugin writes for ``kind``: ``<vendor>-<class>.json``, the
    name the CDI library gives a spec (``pkg/cdi/spec.go`` ``GenerateSpecName``):
    ``k8s.ocihook.io-nvidia-gpu.json``."""
    return kind.replace("/", "-") + ".json"


def spec_collisions(cdi_dir: str, paths: Collection[str]) -> list[str]:
    """One line per set of spec files in ``cdi_dir`` that define the same qualified names
    as one of ``paths`` (the plugin's own specs) does
    (:meth:`ocihook.cdi.registry.Registry.collisions`): the files, the names, what the
    runtime will do and a hint. Never raises (a broken file is another file's concern)."""
    from ..cdi.registry import Registry

    registry = Registry.load([cdi_dir])
    return [
        f"{c.message()}; hint: {c.hint()}"
        for c in registry.collisions()
        if any(p in paths for p in c.paths)
    ]


def _ordered_groups(
    ids: Sequence[str], need: int, key: Callable[[str], object], used: set[object]
) -> list[list[str]]:
    """``ids`` split by ``key`` and ordered for a request of ``need`` more devices: when a
    group (other than key ``None``) can hold them all, the group already used (``used``)
    or else the smallest that fits comes first (best fit); the others follow, largest
    first, key ``None`` last."""
    groups: dict[object, list[str]] = {}
    for i in ids:
        groups.setdefault(key(i), []).append(i)

    def big_first(k: object) -> tuple[bool, int, str]:
        return (k is None, -len(groups[k]), str(k))

    fitting = [k for k, g in groups.items() if k is not None and len(g) >= need]
    if not fitting:
        return [groups[k] for k in sorted(groups, key=big_first)]
    first = next((k for k in fitting if k in used), None)
    if first is None:
        first = min(fitting, key=lambda k: (len(groups[k]), str(k)))
    return [groups[first]] + [groups[k] for k in sorted(groups, key=big_first) if k != first]


def preferred_allocation(
    devices: Sequence[K8sDevice], available: Sequence[str], must: Sequence[str], size: int
) -> list[str]:
    """The ids of ``size`` devices from ``available``, including ``must``, keeping one NUMA
    node and, inside it, one PCIe switch together.

    Rule: the devices in ``must`` first; then, when the rest fits on one NUMA node, the
    node already used by ``must`` (or else the node with the fewest free devices that
    still fits: best fit, leaving large nodes whole for large requests); otherwise nodes
    with the most free devices first. Inside a node the same rule picks among its PCIe
    switches (:attr:`~ocihook.k8s.inventory.K8sDevice.pci_switch`). Within a switch,
    replicas of real devices not yet chosen come first (time-slicing spreads over GPUs),
    then discovery order. Ids kubelet lists that the plugin does not know are used last.
    """
    by_id = {d.id: d for d in devices}
    order = {d.id: i for i, d in enumerate(devices)}
    chosen = [i for i in must if i in available or i in by_id][:size] if size > 0 else []
    need = size - len(chosen)
    free = [i for i in available if i not in chosen]
    if need <= 0:
        return chosen[:size]

    def numa(i: str) -> object:
        d = by_id.get(i)
        return d.numa_node if d is not None else None

    def switch(i: str) -> object:
        d = by_id.get(i)
        return d.pci_switch if d is not None else None

    used_numa = {numa(i) for i in chosen}
    used_switch = {switch(i) for i in chosen}
    real_used = {by_id[i].real_id for i in chosen if i in by_id}
    for node_ids in _ordered_groups(free, need, numa, used_numa):
        for ids in _ordered_groups(node_ids, need, switch, used_switch):
            ids = sorted(ids, key=lambda i: order.get(i, len(order)))
            while ids and need > 0:
                fresh = [i for i in ids if i in by_id and by_id[i].real_id not in real_used]
                pick = fresh[0] if fresh else ids[0]
                ids.remove(pick)
                chosen.append(pick)
                used_switch.add(switch(pick))
                if pick in by_id:
                    real_used.add(by_id[pick].real_id)
                need -= 1
            if need == 0:
                return chosen
    return chosen


@dataclass
class Metrics:
    """Counters of one resource plugin (:mod:`ocihook.k8s.features` renders them)."""

    allocations: int = 0
    allocation_errors: int = 0
    list_and_watch_updates: int = 0
    registrations: int = 0
    registered: bool = False
    health_changes: int = 0


class ResourcePlugin:
    """The ``DevicePlugin`` service of one resource, and its registration.

    Args:
        resource: the extended resource name.
        devices: its devices (the inventory's list).
        plugin_dir: the device plugin directory (kubelet's socket is there).
        strategies: Allocate strategies from :data:`STRATEGIES`.
        pass_device_specs: also return the device nodes as ``DeviceSpec`` (their host
            paths as the host has them: :attr:`K8sDevice.nodes`).
        view: where this process sees the host's paths, for the health checks
            (:attr:`~ocihook.k8s.inventory.Inventory.view`).
        fail_requests_greater_than_one: refuse a request for more than one device when
            one of them is a time-slicing replica (NVIDIA's ``failRequestsGreaterThanOne``:
            a pod asking for two replicas would get one GPU, not two).
        annotation_prefix: the key prefix of the ``cdi-annotations`` strategy's annotation
            (NVIDIA's ``--cdi-annotation-prefix``; default ``cdi.k8s.io/``).
    """

    def __init__(
        self,
        resource: str,
        devices: Sequence[K8sDevice],
        plugin_dir: str,
        *,
        strategies: Sequence[str] = ("cdi-cri",),
        pass_device_specs: bool = False,
        view: RootView | None = None,
        fail_requests_greater_than_one: bool = False,
        annotation_prefix: str | None = None,
    ) -> None:
        for s in strategies:
            if s not in STRATEGIES:
                raise ConfigError(
                    f"unknown Allocate strategy (use {', '.join(STRATEGIES)})",
                    field="--strategy",
                    value=s,
                )
        if "volume-mounts" in strategies and any(d.vendor != "nvidia" for d in devices):
            raise ConfigError(
                "the volume-mounts strategy is NVIDIA's convention only",
                field="--strategy",
                value="volume-mounts",
                hint=f"serve {resource} with cdi-cri or envvar",
            )
        self.resource = resource
        self.devices = tuple(devices)
        self.plugin_dir = plugin_dir
        self.strategies = tuple(strategies) or ("cdi-cri",)
        self.pass_device_specs = pass_device_specs
        self.view = view
        self.fail_requests_greater_than_one = fail_requests_greater_than_one
        self.annotation_prefix = annotation_prefix
        self.socket = os.path.join(plugin_dir, socket_name(resource))
        self.metrics = Metrics()
        self._by_id = {d.id: d for d in self.devices}
        self._health = {d.id: health(d, view=view) for d in self.devices}
        self._cond = threading.Condition()
        self._version = 0
        self._stopped = False
        self._server: grpc.Server | None = None

    # -- state ----------------------------------------------------------------------------

    def health_of(self, device_id: str) -> str:
        """The last health seen of ``device_id``."""
        with self._cond:
            return self._health[device_id]

    def check_health(self, lost: Collection[str] = (), failed: Collection[str] = ()) -> bool:
        """Re-check every device (``lost``: GPU UUIDs the driver reports lost; ``failed``:
        real device ids a critical XID made unhealthy, with their replicas); wake the
        ListAndWatch streams when one changed. Returns whether one changed."""
        new = {
            d.id: UNHEALTHY if d.real_id in failed else health(d, lost=lost, view=self.view)
            for d in self.devices
        }
        with self._cond:
            if new == self._health:
                return False
            for i, h in new.items():
                if self._health[i] != h:
                    log.warning("%s: device %s is now %s", self.resource, i, h)
            self._health = new
            self._version += 1
            self.metrics.health_changes += 1
            self._cond.notify_all()
        return True

    def _list(self) -> dp.ListAndWatchResponse:
        out = dp.ListAndWatchResponse()
        for d in self.devices:
            dev = out.devices.add(ID=d.id, health=self._health[d.id])
            if d.numa_node is not None:
                dev.topology.nodes.add(ID=d.numa_node)
        return out

    # -- the DevicePlugin service -----------------------------------------------------------

    def GetDevicePluginOptions(self, request: dp.Empty, context: Any) -> dp.DevicePluginOptions:
        return dp.DevicePluginOptions(
            pre_start_required=False, get_preferred_allocation_available=True
        )

    def ListAndWatch(self, request: dp.Empty, context: Any) -> Iterator[dp.ListAndWatchResponse]:
        seen = -1
        while True:
            with self._cond:
                while self._version == seen and not self._stopped:
                    self._cond.wait(0.5)
                    if not context.is_active():
                        return
                if self._stopped:
                    return
                seen = self._version
                response = self._list()
                self.metrics.list_and_watch_updates += 1
            yield response

    def GetPreferredAllocation(
        self, request: dp.PreferredAllocationRequest, context: Any
    ) -> dp.PreferredAllocationResponse:
        out = dp.PreferredAllocationResponse()
        with self._cond:
            healthy = [d for d in self.devices if self._health[d.id] == HEALTHY]
        for req in request.container_requests:
            available = [
                i
                for i in req.available_deviceIDs
                if i not in self._by_id or i in {d.id for d in healthy}
            ]
            ids = preferred_allocation(
                healthy, available, list(req.must_include_deviceIDs), req.allocation_size
            )
            out.container_responses.add(deviceIDs=ids)
        return out

    def Allocate(self, request: dp.AllocateRequest, context: Any) -> dp.AllocateResponse:
        out = dp.AllocateResponse()
        try:
            for req in request.container_requests:
                out.container_responses.append(self.allocate_one(list(req.devices_ids)))
        except _Refused as e:
            self.metrics.allocation_errors += 1
            context.abort(e.code, e.message)
        self.metrics.allocations += 1
        return out

    def PreStartContainer(
        self, request: dp.PreStartContainerRequest, context: Any
    ) -> dp.PreStartContainerResponse:
        return dp.PreStartContainerResponse()

    def allocate_one(self, ids: Sequence[str]) -> dp.ContainerAllocateResponse:
        """The response for one container asking for the devices ``ids``.

        Raises:
            _Refused: an unknown or unhealthy id, no id, or more than one with a replica
                among them when :attr:`fail_requests_greater_than_one`.
        """
        if not ids:
            raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, "no device ids in the request")
        if self.fail_requests_greater_than_one and len(ids) > 1:
            replicas = [i for i in ids if i in self._by_id and self._by_id[i].real_id != i]
            if replicas:
                raise _Refused(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"{self.resource}: a request for a shared device may ask for one only "
                    f"(failRequestsGreaterThanOne); this one asks for {len(ids)}",
                )
        real: dict[str, K8sDevice] = {}
        for i in ids:
            d = self._by_id.get(i)
            if d is None:
                raise _Refused(
                    grpc.StatusCode.INVALID_ARGUMENT, f"unknown {self.resource} device {i!r}"
                )
            if self.health_of(i) != HEALTHY:
                raise _Refused(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"{self.resource} device {i!r} is unhealthy",
                )
            real.setdefault(d.real_id, d)
        devs = list(real.values())
        resp = dp.ContainerAllocateResponse()
        if "cdi-cri" in self.strategies:
            for d in devs:
                resp.cdi_devices.add(name=d.cdi_name)
        if "cdi-annotations" in self.strategies:
            from ..cdi.names import ANNOTATION_PREFIX, annotation_key, annotation_value

            digest = hashlib.sha256(",".join(sorted(real)).encode()).hexdigest()[:16]
            key = annotation_key(ANNOTATION_PLUGIN, f"{self.resource.split('/')[0]}-{digest}")
            if self.annotation_prefix:
                key = self.annotation_prefix + key[len(ANNOTATION_PREFIX) :]
            resp.annotations[key] = annotation_value(d.cdi_name for d in devs)
        vendor = devs[0].vendor
        if "envvar" in self.strategies:
            resp.envs[_VISIBLE[vendor]] = ",".join(d.visible for d in devs)
        if "volume-mounts" in self.strategies:
            resp.envs["NVIDIA_VISIBLE_DEVICES"] = _VOLUME_DIR
            for d in devs:
                resp.mounts.add(
                    container_path=f"{_VOLUME_DIR}/{d.visible}",
                    host_path="/dev/null",
                    read_only=True,
                )
        if self.pass_device_specs:
            seen: set[str] = set()
            for d in devs:
                for container_path, host_path in d.nodes:
                    if container_path not in seen:
                        seen.add(container_path)
                        resp.devices.add(
                            container_path=container_path, host_path=host_path, permissions="rw"
                        )
        return resp

    # -- serving and registration -----------------------------------------------------------

    def serve(self) -> None:
        """(Re)start the gRPC server on :attr:`socket` (a stale file there is replaced)."""
        self.stop_server()
        server = rpc.unix_server(self.socket)
        rpc.add_service(server, rpc.DEVICE_PLUGIN, self)
        self._server = server

    def stop_server(self) -> None:
        """Stop serving; open ListAndWatch streams end."""
        if self._server is not None:
            with self._cond:
                self._stopped = True
                self._cond.notify_all()
            self._server.stop(grace=0.5).wait()
            self._server = None
            with self._cond:
                self._stopped = False

    def register(self, timeout: float = 5.0) -> None:
        """Register :attr:`resource` with kubelet (``Registration.Register``).

        Raises:
            KubeletError: kubelet's socket is missing, does not answer, or refuses.
        """
        kubelet = os.path.join(self.plugin_dir, KUBELET_SOCKET)
        if not os.path.exists(kubelet):
            raise KubeletError("kubelet's device plugin socket does not exist", path=kubelet)
        channel = rpc.unix_channel(kubelet)
        try:
            rpc.client(channel, rpc.REGISTRATION).Register(
                dp.RegisterRequest(
                    version=API_VERSION,
                    endpoint=os.path.basename(self.socket),
                    resource_name=self.resource,
                    options=dp.DevicePluginOptions(get_preferred_allocation_available=True),
                ),
                timeout=timeout,
                wait_for_ready=True,
            )
        except grpc.RpcError as e:
            self.metrics.registered = False
            raise KubeletError(
                f"kubelet refused or did not answer the registration of {self.resource}: "
                f"{e.code().name}: {e.details()}",
                path=kubelet,
            ) from None
        finally:
            channel.close()
        self.metrics.registrations += 1
        self.metrics.registered = True


class _Refused(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _inode(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


@dataclass
class DevicePluginServer:
    """Every resource plugin of an :class:`~ocihook.k8s.inventory.Inventory`, the CDI
    specs and the watch loop (see the module docstring).

    Attributes:
        inventory: what to advertise.
        plugin_dir: kubelet's device plugin directory.
        cdi_dir: where to write the CDI specs (``None``: write none; then the CDI
            strategies need specs written by other means).
        strategies, pass_device_specs, fail_requests_greater_than_one, annotation_prefix:
            Allocate behaviour (:class:`ResourcePlugin`).
        interval: seconds between watch-loop rounds.
        nvml_health: also ask NVML each round which GPUs are lost, and watch NVML's XID
            events (:class:`~ocihook.k8s.nvmlhealth.NvmlHealth`).
        xid_rules: which XIDs count (default: read from ``DP_DISABLE_HEALTHCHECKS`` and
            ``DP_ENABLE_HEALTHCHECKS``, :meth:`~ocihook.k8s.nvmlhealth.XidRules.from_env`).
    """

    inventory: Inventory
    plugin_dir: str = DEFAULT_PLUGIN_DIR
    cdi_dir: str | None = "/var/run/cdi"
    strategies: Sequence[str] = ("cdi-cri",)
    pass_device_specs: bool = False
    fail_requests_greater_than_one: bool = False
    annotation_prefix: str | None = None
    interval: float = 1.0
    nvml_health: bool = False
    xid_rules: Any = None
    plugins: list[ResourcePlugin] = field(default_factory=list)
    spec_writes: int = 0

    def __post_init__(self) -> None:
        self.plugins = [
            ResourcePlugin(
                r,
                devs,
                self.plugin_dir,
                strategies=self.strategies,
                pass_device_specs=self.pass_device_specs,
                view=self.inventory.view,
                fail_requests_greater_than_one=self.fail_requests_greater_than_one,
                annotation_prefix=self.annotation_prefix,
            )
            for r, devs in sorted(self.inventory.devices.items())
            if devs
        ]
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._kubelet: tuple[int, int] | None = None
        self._spec_data: dict[str, bytes] = {}
        self._nvml: Any = None
        if self.nvml_health:
            from .nvmlhealth import NvmlHealth, XidRules

            nvidia = [d for p in self.plugins for d in p.devices if d.gpu_uuid]
            self._nvml = NvmlHealth(sorted({d.gpu_uuid for d in nvidia}))
            rules = self.xid_rules if self.xid_rules is not None else XidRules.from_env()
            try:
                self._nvml.watch_xids(nvidia, rules, max(10, min(5000, int(self.interval * 1000))))
            except DiscoveryError:
                self._nvml.close()
                raise
        if self.cdi_dir is not None:
            from ..cdi.generate import spec_bytes

            for kind, spec in self.inventory.specs.items():
                path = os.path.join(self.cdi_dir, spec_file_name(kind))
                self._spec_data[path] = spec_bytes(spec, "json")

    def plugin(self, resource: str) -> ResourcePlugin:
        """The plugin serving ``resource`` (KeyError when none)."""
        for p in self.plugins:
            if p.resource == resource:
                return p
        raise KeyError(resource)

    def write_specs(self) -> int:
        """Write every CDI spec that is missing or differs on disk; the number written.

        Raises:
            CdiError: a spec cannot be written.
        """
        from ..cdi.generate import write_spec

        written = 0
        for path, data in self._spec_data.items():
            try:
                with open(path, "rb") as f:
                    if f.read() == data:
                        continue
            except OSError:
                pass
            os.makedirs(os.path.dirname(path), exist_ok=True)
            write_spec(data, path)
            written += 1
        self.spec_writes += written
        return written

    def warn_collisions(self) -> list[str]:
        """Log (warning) and return :func:`spec_collisions` of the plugin's specs."""
        if self.cdi_dir is None or not self._spec_data:
            return []
        lines = spec_collisions(self.cdi_dir, self._spec_data)
        for line in lines:
            log.warning("%s", line)
        return lines

    def start(self, *, wait_for_kubelet: bool = False) -> None:
        """Write the specs, serve every resource, register them, start the watch loop.

        Args:
            wait_for_kubelet: when kubelet's socket does not exist yet, keep serving and
                register as soon as it appears (a DaemonSet may start before kubelet);
                otherwise that is an error.

        Raises:
            KubeletError, CdiError, OSError: as :meth:`ResourcePlugin.register`,
                :meth:`write_specs`, :meth:`ResourcePlugin.serve`.
            ConfigError: a socket path too long for gRPC (:func:`~ocihook.k8s.rpc.unix_server`).
        """
        self.write_specs()
        self.warn_collisions()
        for p in self.plugins:
            p.serve()
        kubelet = os.path.join(self.plugin_dir, KUBELET_SOCKET)
        self._kubelet = _inode(kubelet)
        if self._kubelet is None and wait_for_kubelet:
            log.warning("%s does not exist yet: registering when kubelet creates it", kubelet)
        else:
            for p in self.plugins:
                p.register()
        self._thread = threading.Thread(target=self._loop, name="ocihook-k8s-watch", daemon=True)
        self._thread.start()

    def step(self) -> None:
        """One round of the watch loop: health, kubelet restarts, CDI specs."""
        lost = self._nvml.lost() if self._nvml is not None else set()
        failed = self._nvml.failed() if self._nvml is not None else frozenset()
        for p in self.plugins:
            p.check_health(lost, failed)
        kubelet = os.path.join(self.plugin_dir, KUBELET_SOCKET)
        now = _inode(kubelet)
        restarted = now is not None and now != self._kubelet
        gone = [p for p in self.plugins if not os.path.exists(p.socket)]
        if now is None:
            for p in self.plugins:
                p.metrics.registered = False
        if restarted or (gone and now is not None):
            log.warning("kubelet restarted (%s re-created): registering again", kubelet)
            for p in self.plugins:
                if restarted or p in gone:
                    if not os.path.exists(p.socket):
                        p.serve()
                    try:
                        p.register()
                    except KubeletError as e:
                        log.error("%s", e)
                        continue
            self._kubelet = now
        try:
            if self.write_specs():
                self.warn_collisions()
        except OcihookError as e:
            log.error("%s", e)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.step()
            except Exception:  # the loop must survive one bad round; it says so
                log.exception("device plugin watch round failed")

    def stop(self) -> None:
        """Stop the loop and every server; remove the plugin sockets."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        for p in self.plugins:
            p.stop_server()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(p.socket)
        if self._nvml is not None:
            self._nvml.close()
            self._nvml = None

    def run_forever(self) -> None:
        """:meth:`start`, then wait for SIGTERM / SIGINT, then :meth:`stop`."""
        import signal

        done = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: done.set())
        self.start(wait_for_kubelet=True)
        try:
            while not done.wait(3600):
                pass
        finally:
            self.stop()


def wait_until(predicate: Any, timeout: float = 10.0, step: float = 0.01) -> bool:
    """Poll ``predicate()`` until true or ``timeout`` seconds pass; returns the last value."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() > deadline:
            return bool(predicate())
        time.sleep(step)
