"""GPUs the NVIDIA driver reports lost, through NVML (``--nvml-health``; needs nvidia-ml-py).

A GPU that fell off the bus (Xid 79) keeps its device node and procfs entry, so
:func:`ocihook.k8s.inventory.health` alone cannot see it; NVML answers
``NVML_ERROR_GPU_IS_LOST`` (15) for it, and ``NVML_ERROR_RESET_REQUIRED`` (16) for a GPU
that needs a reset after a fatal error (NVML API reference, "Error reporting"). Each
round :meth:`NvmlHealth.lost` asks NVML for every GPU (by the index it had at start) its
UUID: one of those errors, or another GPU's UUID at that index, makes it lost.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from ..core.errors import DiscoveryError

__all__ = ["LOST_ERRORS", "NvmlHealth"]

#: NVML error codes that mean the GPU is gone until it is reset or the node rebooted.
LOST_ERRORS = (15, 16)

log = logging.getLogger("ocihook.k8s")


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

    def close(self) -> None:
        """``nvmlShutdown`` (once)."""
        if self._nv is not None:
            self._nv.nvmlShutdown()
            self._nv = None
