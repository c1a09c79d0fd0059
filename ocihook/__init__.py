"""ocihook: GPU access for OCI containers — an OCI runtime hook, a bundle editor and a
library for other runtimes.

The pipeline, one module each::

    host discovery  ->  request  ->  plan (container edits)  ->  appliers
    discover()          request_from_spec()  make_plan()        apply_plan() / edit_bundle()
                                                                inject() (live hook)

Example (spec mode, from Python)::

    import ocihook

    host = ocihook.discover(ocihook.HostRoot())            # the real host
    bundle = ocihook.load_bundle("/path/to/bundle")
    request = ocihook.request_from_spec(bundle.config, path=bundle.config_path)
    plan = ocihook.make_plan(host, request, ocihook.ContainerLayout())
    new_config = ocihook.apply_plan(bundle.config, plan)

CDI (spec model, registry, injection, generation) is the subpackage :mod:`ocihook.cdi`.

Names are loaded on first use (PEP 562), so ``import ocihook`` stays cheap on the path of
every container start.
"""

from __future__ import annotations

from .core.lazy import lazy_exports

#: Equal to :data:`ocihook.core.version.VERSION` (a test checks); a literal here, so that
#: ``import ocihook`` loads no module for it on a container's start path.
__version__ = "0.1.0"

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs milliseconds
if TYPE_CHECKING:
    from .appliers.live import inject
    from .appliers.spec import EditResult, apply_plan, edit_bundle
    from .config.load import load_config
    from .config.options import Options, hook_command
    from .config.validate import Config
    from .core.errors import (
        EXIT_CODES,
        ApplyError,
        CdiError,
        ConfigError,
        DiscoveryError,
        EngineConfigError,
        LdCacheError,
        OcihookError,
        RequestError,
        RuntimeNotFound,
        SpecError,
        StateError,
        exit_code_for,
    )
    from .core.hostroot import HostRoot
    from .discovery.drm import discover_vendor
    from .discovery.nvidia import DriverLibrary, Gpu, HostDeviceNode, NvidiaHost, discover
    from .discovery.records import DrmGpu, DrmHost
    from .oci.bundle import Bundle, State, load_bundle, parse_state, write_json_atomic
    from .plan.build import ContainerLayout, make_drm_plan, make_plan, merge_plans
    from .plan.edits import CgroupRule, ContainerEdits, DeviceNode, Hook, Mount, Plan, Symlink
    from .plan.select import select_gpus
    from .request.drm import DrmRequest, drm_request_from_env
    from .request.nvidia import Request, request_from_env, request_from_spec

#: Public name -> module that defines it.
_EXPORTS = {
    "inject": "appliers.live",
    "EditResult": "appliers.spec",
    "Options": "config.options",
    "apply_plan": "appliers.spec",
    "edit_bundle": "appliers.spec",
    "hook_command": "config.options",
    "Bundle": "oci.bundle",
    "State": "oci.bundle",
    "load_bundle": "oci.bundle",
    "parse_state": "oci.bundle",
    "write_json_atomic": "oci.bundle",
    "DrmGpu": "discovery.records",
    "DrmHost": "discovery.records",
    "discover_vendor": "discovery.drm",
    "DriverLibrary": "discovery.nvidia",
    "Gpu": "discovery.nvidia",
    "HostDeviceNode": "discovery.nvidia",
    "NvidiaHost": "discovery.nvidia",
    "discover": "discovery.nvidia",
    "Config": "config.validate",
    "load_config": "config.load",
    "EXIT_CODES": "core.errors",
    "ApplyError": "core.errors",
    "CdiError": "core.errors",
    "ConfigError": "core.errors",
    "DiscoveryError": "core.errors",
    "EngineConfigError": "core.errors",
    "LdCacheError": "core.errors",
    "OcihookError": "core.errors",
    "RequestError": "core.errors",
    "RuntimeNotFound": "core.errors",
    "SpecError": "core.errors",
    "StateError": "core.errors",
    "exit_code_for": "core.errors",
    "HostRoot": "core.hostroot",
    "CgroupRule": "plan.edits",
    "ContainerEdits": "plan.edits",
    "ContainerLayout": "plan.build",
    "DeviceNode": "plan.edits",
    "Hook": "plan.edits",
    "Mount": "plan.edits",
    "Plan": "plan.edits",
    "Symlink": "plan.edits",
    "make_drm_plan": "plan.build",
    "make_plan": "plan.build",
    "merge_plans": "plan.build",
    "DrmRequest": "request.drm",
    "drm_request_from_env": "request.drm",
    "Request": "request.nvidia",
    "request_from_env": "request.nvidia",
    "request_from_spec": "request.nvidia",
    "select_gpus": "plan.select",
}

__all__ = [
    "EXIT_CODES",
    "ApplyError",
    "Bundle",
    "CdiError",
    "CgroupRule",
    "Config",
    "ConfigError",
    "ContainerEdits",
    "ContainerLayout",
    "DeviceNode",
    "DiscoveryError",
    "DriverLibrary",
    "DrmGpu",
    "DrmHost",
    "DrmRequest",
    "EditResult",
    "EngineConfigError",
    "Gpu",
    "Hook",
    "HostDeviceNode",
    "HostRoot",
    "LdCacheError",
    "Mount",
    "NvidiaHost",
    "OcihookError",
    "Options",
    "Plan",
    "Request",
    "RequestError",
    "RuntimeNotFound",
    "SpecError",
    "State",
    "StateError",
    "Symlink",
    "__version__",
    "apply_plan",
    "discover",
    "discover_vendor",
    "drm_request_from_env",
    "edit_bundle",
    "exit_code_for",
    "hook_command",
    "inject",
    "load_bundle",
    "load_config",
    "make_drm_plan",
    "make_plan",
    "merge_plans",
    "parse_state",
    "request_from_env",
    "request_from_spec",
    "select_gpus",
    "write_json_atomic",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__, globals())
del lazy_exports
