"""GPU health through NVML (``--nvml-health``; needs nvidia-ml-py): lost GPUs and XID events.

Lost GPUs. A GPU that fell off the bus (Xid 79) keeps its device node and procfs entry, so
:func:`ocihook.k8s.inventory.health` alone cannot see it; NVML answers
``NVML_ERROR_GPU_IS_LOST`` (15) for it, and ``NVML_ERROR_RESET_REQUIRED`` (16) for a GPU
that needs a reset after a fatal error (NVML API reference, "Error reporting"). Each
round :meth:`NvmlHealth.lost` asks NVML for every GPU (by the index it had at start) its
UUID: one of those errors, or another GPU's UUID at that index, makes it lost.

XID events (:meth:`NvmlHealth.watch_xids`), the rules of NVIDIA's k8s-device-plugin
(``internal/rm/health.go``): every GPU is registered (``nvmlDeviceRegisterEvents``) for
critical XID, single-bit and double-bit ECC events, as far as
``nvmlDeviceGetSupportedEventTypes`` allows; a thread waits on the event set
(``nvmlEventSetWait_v2``, or ``nvmlEventSetWait`` where the driver lacks it). Only a
critical XID event counts, and not one of the application XIDs NVIDIA ignores
(:data:`APPLICATION_XIDS`: the GPU stays healthy) nor one ``DP_DISABLE_HEALTHCHECKS``
names (:class:`XidRules`). Such an event makes the devices of its GPU unhealthy: with GPU
and compute instance ids, the MIG devices of that instance (and the GPU itself when it is
advertised whole); without, every device of the GPU. A GPU whose events cannot be
registered, an event whose GPU NVML cannot name, and a failed wait make devices unhealthy
too (the GPU's, or all), as NVIDIA's plugin does. Unhealthy from an XID is for good: the
device is Healthy again only when the plugin restarts (NVIDIA's rule too; a GPU with a
critical XID needs a reset).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.errors import DiscoveryError

if TYPE_CHECKING:
    from .inventory import K8sDevice

__all__ = ["APPLICATION_XIDS", "LOST_ERRORS", "NvmlHealth", "XidRules"]

#: NVML error codes that mean the GPU is gone until it is reset or the node rebooted.
LOST_ERRORS = (15, 16)

log = logging.getLogger("ocihook.k8s")

#: XIDs of application errors, after which the GPU is still healthy (NVIDIA's device
#: plugin ignores them; NVIDIA's "XID Errors" table): 13 graphics engine exception, 31
#: GPU memory page fault, 43 GPU stopped processing, 45 preemptive cleanup, 68 video
#: processor exception, 109 context switch timeout.
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})

#: ``nvmlEventType*`` bits (nvml.h) and the mask NVIDIA's plugin registers.
EVENT_SINGLE_BIT_ECC = 0x1
EVENT_DOUBLE_BIT_ECC = 0x2
EVENT_XID_CRITICAL = 0x8
EVENT_MASK = EVENT_XID_CRITICAL | EVENT_DOUBLE_BIT_ECC | EVENT_SINGLE_BIT_ECC
#: The instance id of an event that names no GPU or compute instance.
NO_INSTANCE = 0xFFFFFFFF
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_FUNCTION_NOT_FOUND = 13


def _xid_list(text: str) -> tuple[bool, frozenset[int], list[str]]:
    """``(all, xids, malformed)`` of a comma list as NVIDIA reads it: case-insensitive,
    items trimmed, ``all`` or ``xids`` anywhere means every XID, empty items skipped."""
    xids: set[int] = set()
    bad: list[str] = []
    for item in text.lower().split(","):
        item = item.strip()
        if item in ("all", "xids"):
            return True, frozenset(), []
        if not item:
            continue
        if item.isdigit():
            xids.add(int(item))
        else:
            bad.append(item)
    return False, frozenset(xids), bad


@dataclass(frozen=True)
class XidRules:
    """Which critical XIDs make a GPU unhealthy: NVIDIA's environment variables.

    ``DP_DISABLE_HEALTHCHECKS``: ``all`` or ``xids`` turns XID health checks off; otherwise
    a comma list of XIDs to ignore besides :data:`APPLICATION_XIDS`.
    ``DP_ENABLE_HEALTHCHECKS``: a comma list of XIDs that count even so (an application XID
    too, or one the first variable names); ``all`` makes every XID count. With
    ``DP_DISABLE_HEALTHCHECKS=all`` and a list here, only the XIDs listed count (what
    NVIDIA documents; its code turns the checks off instead).

    Attributes:
        all_disabled: every XID is ignored unless in ``enabled``.
        disabled: XIDs ignored (application XIDs included).
        enabled: XIDs that count whatever else says.
        all_enabled: every XID counts.
    """

    all_disabled: bool = False
    disabled: frozenset[int] = APPLICATION_XIDS
    enabled: frozenset[int] = frozenset()
    all_enabled: bool = False

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> XidRules:
        """The rules of ``environ`` (default ``os.environ``); a malformed XID is logged and
        skipped, as NVIDIA does."""
        env = os.environ if environ is None else environ
        off_all, off, bad_off = _xid_list(env.get("DP_DISABLE_HEALTHCHECKS", ""))
        on_all, on, bad_on = _xid_list(env.get("DP_ENABLE_HEALTHCHECKS", ""))
        for item in bad_off + bad_on:
            log.warning("XID health checks: ignoring malformed XID %r", item)
        return cls(off_all, APPLICATION_XIDS | off, on, on_all)

    @property
    def off(self) -> bool:
        """No XID can count: the event checks need not run."""
        return self.all_disabled and not self.enabled and not self.all_enabled

    def counts(self, xid: int) -> bool:
        """Whether a critical XID ``xid`` makes its GPU unhealthy."""
        if self.all_enabled or xid in self.enabled:
            return True
        return not self.all_disabled and xid not in self.disabled


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlHealth:
    """An NVML session kept open for health checks of ``uuids`` (the plugin's GPUs).

    Raises:
        DiscoveryError: pynvml is not importable or ``nvmlInit`` fails.
    """

    def __init__(self, uuids: Sequence[str]) -> None:
        import importlib

        try:
            self._nv: Any = importlib.import_module("pynvml")
        except ImportError as e:
            raise DiscoveryError(
                f"--nvml-health needs pynvml ({e})", hint="pip install 'ocihook[nvml]'"
            ) from None
        try:
            self._nv.nvmlInit()
        except self._nv.NVMLError as e:
            raise DiscoveryError(f"--nvml-health: nvmlInit failed: {e}") from None
        self._index: dict[str, int] = {}
        wanted = set(uuids)
        for i in range(self._nv.nvmlDeviceGetCount()):
            uuid = _text(self._nv.nvmlDeviceGetUUID(self._nv.nvmlDeviceGetHandleByIndex(i)))
            if uuid in wanted:
                self._index[uuid] = i
        for uuid in sorted(wanted - set(self._index)):
            log.warning("NVML does not list GPU %s: its health is not asked of NVML", uuid)
        self._reported: set[str] = set()
        self._failed: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._events: Any = None
        self._timeout_s = 5.0

    def lost(self) -> set[str]:
        """The UUIDs of the GPUs NVML reports lost now (see the module docstring). Other
        NVML errors are logged once per GPU and do not change its health."""
        out: set[str] = set()
        for uuid, index in self._index.items():
            try:
                got = _text(self._nv.nvmlDeviceGetUUID(self._nv.nvmlDeviceGetHandleByIndex(index)))
            except self._nv.NVMLError as e:
                code = getattr(e, "value", None)
                if code in LOST_ERRORS:
                    out.add(uuid)
                elif uuid not in self._reported:
                    self._reported.add(uuid)
                    log.warning("NVML health of %s not known: %s", uuid, e)
                continue
            if got != uuid:
                out.add(uuid)
        return out

    def failed(self) -> frozenset[str]:
        """The real ids of the devices XID events made unhealthy so far."""
        with self._lock:
            return frozenset(self._failed)

    def _fail(self, devices: Collection[K8sDevice], why: str) -> None:
        with self._lock:
            new = sorted({d.real_id for d in devices} - self._failed)
            self._failed.update(new)
        if new:
            log.warning("%s: marking %s unhealthy", why, ", ".join(new))

    def watch_xids(
        self, devices: Sequence[K8sDevice], rules: XidRules, timeout_ms: int = 5000
    ) -> bool:
        """Register the GPUs of ``devices`` (NVIDIA devices of this session's GPUs) for
        events and start the thread that waits for them (see the module docstring);
        ``timeout_ms``: one wait, also how long :meth:`close` may wait for the thread.
        Returns whether it started (not when ``rules`` are :attr:`XidRules.off`).

        Raises:
            DiscoveryError: the event set cannot be created.
        """
        if rules.off:
            log.info("XID health checks are off (DP_DISABLE_HEALTHCHECKS)")
            return False
        nv = self._nv
        self._timeout_s = timeout_ms / 1000
        try:
            self._events = nv.nvmlEventSetCreate()
        except nv.NVMLError as e:
            raise DiscoveryError(f"--nvml-health: nvmlEventSetCreate failed: {e}") from None
        by_gpu: dict[str, list[K8sDevice]] = {}
        for d in devices:
            if d.gpu_uuid:
                by_gpu.setdefault(d.gpu_uuid, []).append(d)
        for uuid, devs in sorted(by_gpu.items()):
            if uuid not in self._index:
                continue
            try:
                handle = nv.nvmlDeviceGetHandleByIndex(self._index[uuid])
                mask = EVENT_MASK & int(nv.nvmlDeviceGetSupportedEventTypes(handle))
                nv.nvmlDeviceRegisterEvents(handle, mask, self._events)
            except nv.NVMLError as e:
                self._fail(devs, f"GPU {uuid}: its XID events cannot be registered ({e})")
        self._thread = threading.Thread(
            target=self._wait_loop,
            args=(by_gpu, rules, timeout_ms),
            name="ocihook-k8s-xid",
            daemon=True,
        )
        self._thread.start()
        return True

    def _wait_loop(
        self, by_gpu: dict[str, list[K8sDevice]], rules: XidRules, timeout_ms: int
    ) -> None:
        nv = self._nv
        everything = [d for devs in by_gpu.values() for d in devs]
        wait = nv.nvmlEventSetWait_v2
        while not self._stop.is_set():
            try:
                event = wait(self._events, timeout_ms)
            except nv.NVMLError as e:
                code = getattr(e, "value", None)
                if code == NVML_ERROR_FUNCTION_NOT_FOUND and wait is not nv.nvmlEventSetWait:
                    wait = nv.nvmlEventSetWait  # a driver before nvmlEventSetWait_v2
                elif code != NVML_ERROR_TIMEOUT:
                    self._fail(everything, f"waiting for NVML events failed ({e})")
                    self._stop.wait(timeout_ms / 1000)
                continue
            try:
                self._event(nv, event, by_gpu, everything, rules)
            except Exception:  # the thread must outlive one odd event; it says so
                log.exception("NVML event %r not understood", event)

    def _event(
        self,
        nv: Any,
        event: Any,
        by_gpu: dict[str, list[K8sDevice]],
        everything: list[K8sDevice],
        rules: XidRules,
    ) -> None:
        kind, xid = int(event.eventType), int(event.eventData)
        if kind != EVENT_XID_CRITICAL:
            log.info("NVML event of type %#x (data %d) does not change health", kind, xid)
            return
        if not rules.counts(xid):
            log.info("XID %d ignored (application error or DP_DISABLE_HEALTHCHECKS)", xid)
            return
        try:
            uuid = _text(nv.nvmlDeviceGetUUID(event.device))
        except nv.NVMLError as e:
            self._fail(everything, f"XID {xid} on a GPU NVML cannot name ({e})")
            return
        devs = by_gpu.get(uuid)
        if devs is None:
            log.info("XID %d on GPU %s, which this plugin does not advertise", xid, uuid)
            return
        gi, ci = int(event.gpuInstanceId), int(event.computeInstanceId)
        if gi != NO_INSTANCE and ci != NO_INSTANCE:
            where = f"XID {xid} on GPU {uuid} (GPU instance {gi}, compute instance {ci})"
            devs = [d for d in devs if d.mig_instance in (None, (gi, ci))]
        else:
            where = f"XID {xid} on GPU {uuid}"
        self._fail(devs, where)

    def close(self) -> None:
        """Stop the XID thread, free the event set, ``nvmlShutdown`` (once)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self._timeout_s + 5)
            if self._thread.is_alive():  # NVML's wait hangs: leave the session to the exit
                log.warning("the NVML event thread did not stop; NVML is not shut down")
                self._nv = None
                return
            self._thread = None
        if self._nv is not None:
            if self._events is not None:
                try:
                    self._nv.nvmlEventSetFree(self._events)
                except self._nv.NVMLError as e:
                    log.warning("nvmlEventSetFree failed: %s", e)
                self._events = None
            self._nv.nvmlShutdown()
            self._nv = None
