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

from ...core.lazy import lazy_exports

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs milliseconds
if TYPE_CHECKING:
    from .cgroups import device_cgroup_dir
    from .hooks import create_container_hook, create_symlinks_hook, update_ldcache_hook
    from .injection import inject
    from .libraries import cuda_compat_entries, write_ldcache
    from .procmask import capability_files, caps_minors, gpu_dirs_of_devices

#: Public name -> the submodule defining it. Loaded on first use (PEP 562): the
#: createContainer hook needs hooks, libraries and procmask, not the injection and cgroup
#: code (whose imports cost a third of an interpreter start).
_EXPORTS = {
    "device_cgroup_dir": "cgroups",
    "create_container_hook": "hooks",
    "create_symlinks_hook": "hooks",
    "update_ldcache_hook": "hooks",
    "inject": "injection",
    "cuda_compat_entries": "libraries",
    "write_ldcache": "libraries",
    "capability_files": "procmask",
    "caps_minors": "procmask",
    "gpu_dirs_of_devices": "procmask",
}

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


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__, globals())
del lazy_exports
