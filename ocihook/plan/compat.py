"""CUDA forward compatibility: whether the image's ``cuda-compat`` libraries are to be
used on this host (:class:`CudaCompat`). Pure; the hook reads the image's files.
"""

from __future__ import annotations

from ..core.records import Record
from ..core.vocab import version_tuple

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: this module is on every container start
if TYPE_CHECKING:
    from ..linux.elfscan import CudaCompatNote

__all__ = ["CudaCompat"]


class CudaCompat(Record):
    """CUDA forward compatibility (NVIDIA's ``cuda-compat`` packages in the image): the
    libraries in the image's ``directory`` take precedence in the container's
    ``ld.so.cache`` when :meth:`decide` says the image's ``libcuda.so.<version>`` is newer
    than what the host's kernel driver provides. Image files are only read (never mounted
    over host paths, never run).

    Attributes:
        directory: the image's compat directory.
        host_major: the host driver's branch (``550``).
        host_driver: the host driver's version (``"550.127.05"``), or ``""`` when only the
            branch is known (a hook registered by an older ocihook).
        host_cuda: the CUDA version the host driver supports (``"12.4"``:
            :attr:`ocihook.discovery.nvidia.NvidiaHost.cuda_version`, from NVML, the
            driver's ``libcuda`` note or the driver-branch table), or ``""`` when unknown.
    """

    directory: str = "/usr/local/cuda/compat"
    host_major: int = 0
    host_driver: str = ""
    host_cuda: str = ""

    def decide(self, compat_version: str, note: CudaCompatNote | None) -> tuple[bool, str]:
        """Whether the image's compat ``libcuda.so.<compat_version>`` is to be used, and
        why (one phrase, for the log).

        The rule, in order (NVIDIA CUDA compatibility guide, "Forward Compatibility"; the
        note's use as in the NVIDIA Container Toolkit's ``nvidia-cdi-hook cuda-compat``):

        1. the library's ``.note.cuda.fwd_compatibility`` lists the kernel driver branches
           it runs on (``Driver``) and the host's driver version is known: used when the
           host's branch is listed and the compat version is newer than the host's
           (``575.57.08`` on ``570.211.01`` or on ``575.10.10``: yes; on ``575.57.08``,
           ``575.99.99`` or ``580.x``: no);
        2. the note gives a ``CUDA Version`` and the host's is known: used when the note's
           is newer;
        3. otherwise (no note, a malformed one, or nothing to compare): the file-name rule,
           used when the compat driver's branch is greater than the host's.
        """
        compat = version_tuple(compat_version)
        host = version_tuple(self.host_driver) if self.host_driver else None
        if note is not None and note.drivers and host is not None and compat is not None:
            if host[0] not in note.drivers:
                return False, f"note: host branch {host[0]} not among {list(note.drivers)}"
            if compat <= host:
                return False, f"note: compat {compat_version} not newer than {self.host_driver}"
            return True, f"note: host branch {host[0]} supported, compat {compat_version} newer"
        cuda = version_tuple(self.host_cuda) if self.host_cuda else None
        if note is not None and note.cuda_version is not None and cuda is not None:
            ours = ".".join(map(str, note.cuda_version))
            if note.cuda_version > cuda[:2]:
                return True, f"note: CUDA {ours} newer than host CUDA {self.host_cuda}"
            return False, f"note: CUDA {ours} not newer than host CUDA {self.host_cuda}"
        if compat is None:
            return False, f"no driver version in libcuda.so.{compat_version}"
        why = "no usable note" if note is None else "note gives nothing to compare"
        if compat[0] > self.host_major:
            return True, f"{why}: compat branch {compat[0]} > host branch {self.host_major}"
        return False, f"{why}: compat branch {compat[0]} <= host branch {self.host_major}"
