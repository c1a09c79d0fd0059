"""Container Device Interface (CDI) support: qualified device names, annotations and spec
files (CDI ``SPEC.md``, versions 0.3.0 to 1.1.0): the spec model and its validation, a
registry of spec directories, injection into an OCI spec, and a generator for NVIDIA hosts.

Names are loaded on first use (PEP 562): ``import ocihook.cdi`` costs nothing until one is
used, and importing one submodule (``ocihook.cdi.names``) loads only what it needs."""

from __future__ import annotations

from ..core.lazy import lazy_exports

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs milliseconds
if TYPE_CHECKING:
    from .generate import generate_drm_spec, generate_spec, spec_bytes, transform_root, write_spec
    from .inject import inject_devices
    from .names import (
        ANNOTATION_PREFIX,
        CdiError,
        annotation_key,
        annotation_value,
        is_qualified_name,
        parse_annotations,
        parse_qualified_name,
        qualified_name,
        validate_class,
        validate_device_name,
        validate_vendor,
    )
    from .registry import DEFAULT_SPEC_DIRS, Registry, RegistryDevice
    from .spec import (
        HOOK_NAMES,
        KNOWN_VERSIONS,
        ContainerEdits,
        Device,
        DeviceNode,
        Hook,
        IntelRdt,
        Mount,
        NetDevice,
        Spec,
        load_spec,
        minimum_version,
        spec_from_dict,
        validate_spec,
    )

#: Public name -> submodule that defines it.
_EXPORTS = {
    "ANNOTATION_PREFIX": "names",
    "CdiError": "names",
    "ContainerEdits": "spec",
    "DEFAULT_SPEC_DIRS": "registry",
    "Device": "spec",
    "DeviceNode": "spec",
    "HOOK_NAMES": "spec",
    "Hook": "spec",
    "IntelRdt": "spec",
    "KNOWN_VERSIONS": "spec",
    "Mount": "spec",
    "NetDevice": "spec",
    "Registry": "registry",
    "RegistryDevice": "registry",
    "Spec": "spec",
    "annotation_key": "names",
    "annotation_value": "names",
    "generate_drm_spec": "generate",
    "generate_spec": "generate",
    "inject_devices": "inject",
    "is_qualified_name": "names",
    "load_spec": "spec",
    "minimum_version": "spec",
    "parse_annotations": "names",
    "parse_qualified_name": "names",
    "qualified_name": "names",
    "spec_bytes": "generate",
    "spec_from_dict": "spec",
    "transform_root": "generate",
    "validate_class": "names",
    "validate_device_name": "names",
    "validate_spec": "spec",
    "validate_vendor": "names",
    "write_spec": "generate",
}

__all__ = [
    "ANNOTATION_PREFIX",
    "DEFAULT_SPEC_DIRS",
    "HOOK_NAMES",
    "KNOWN_VERSIONS",
    "CdiError",
    "ContainerEdits",
    "Device",
    "DeviceNode",
    "Hook",
    "IntelRdt",
    "Mount",
    "NetDevice",
    "Registry",
    "RegistryDevice",
    "Spec",
    "annotation_key",
    "annotation_value",
    "generate_drm_spec",
    "generate_spec",
    "inject_devices",
    "is_qualified_name",
    "load_spec",
    "minimum_version",
    "parse_annotations",
    "parse_qualified_name",
    "qualified_name",
    "spec_bytes",
    "spec_from_dict",
    "transform_root",
    "validate_class",
    "validate_device_name",
    "validate_spec",
    "validate_vendor",
    "write_spec",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__, globals())
del lazy_exports
