"""Container Device Interface (CDI) support: qualified device names, annotations and spec
files (CDI ``SPEC.md``, versions 0.3.0 to 1.1.0): the spec model and its validation, a
registry of spec directories, injection into an OCI spec, and a generator for NVIDIA hosts."""

from __future__ import annotations

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
