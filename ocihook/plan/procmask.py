"""The ``/proc/driver/nvidia`` mask as a plan value (:class:`ProcMask`), in a module of its
own: the createContainer hooks that only mask need it without the rest of
:mod:`ocihook.plan.edits`, which re-exports it."""

from __future__ import annotations

from ..core.records import Record

__all__ = ["ProcMask"]


class ProcMask(Record):
    """Hide the host's ``/proc/driver/nvidia`` from the container (libnvidia-container
    ``src/nvc_mount.c``): a tmpfs over it holding copies of ``params`` (with
    ``ModifyDeviceFiles: 0``, so the driver inside does not recreate device files),
    ``version`` and ``registry``, and the ``gpus/<bus id>`` directories of the selected
    GPUs only, bind-mounted read-only, nosuid, nodev, noexec. The MIG capability files
    (``capabilities/.../access``, ``capabilities/mig/config``) of the container's
    ``/dev/nvidia-caps`` nodes are copied in too: the hook finds them by their
    ``DeviceFileMinor`` (:func:`ocihook.appliers.live.capability_files`).

    Attributes:
        host_dir: host path of ``/proc/driver/nvidia`` (under the dev root).
        gpu_dirs: names of the ``gpus/`` entries to show (``0000:3b:00.0``).
    """

    host_dir: str
    gpu_dirs: tuple[str, ...] = ()
