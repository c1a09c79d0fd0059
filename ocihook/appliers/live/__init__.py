"""Hook mode: apply a plan to a container that the runtime is creating, one module per
concern:

* :mod:`.injection` — :func:`inject`, the orchestration (prestart / createRuntime /
  createContainer) and its undo;
* :mod:`.cgroups` — device cgroup rules (v1 ``devices.allow``, v2 eBPF program);
* :mod:`.libraries` — the container's ``ld.so.cache`` and CUDA forward compatibility;
* :mod:`.hooks` — the ``createContainer`` hooks spec mode registers;
* :mod:`.procs` — process and namespace checks;
* :mod:`.procmask` — the ``/proc/driver/nvidia`` mask;
* :mod:`.undo` — the undo actions.
"""

from __future__ import annotations

from .cgroups import device_cgroup_dir
from .hooks import create_container_hook, create_symlinks_hook, update_ldcache_hook
from .injection import inject
from .libraries import cuda_compat_entries, write_ldcache
from .procmask import capability_files, caps_minors, gpu_dirs_of_devices

__all__ = [
    "capability_files",
    "caps_minors",
    "create_container_hook",
    "create_symlinks_hook",
    "cuda_compat_entries",
    "device_cgroup_dir",
    "gpu_dirs_of_devices",
    "inject",
    "update_ldcache_hook",
    "write_ldcache",
]
