"""The public API: its names do not change by accident, and importing it is cheap."""

from __future__ import annotations

import ocihook

EXPECTED = {
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
}


def test_public_names() -> None:
    assert set(ocihook.__all__) == EXPECTED
    for name in ocihook.__all__:
        value = getattr(ocihook, name)
        assert value is not None
        if callable(value) and name != "__version__":
            assert value.__doc__, f"{name} has no docstring"


def test_unknown_name() -> None:
    try:
        ocihook.no_such_thing  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as e:
        assert "no_such_thing" in str(e)
    else:  # pragma: no cover
        raise AssertionError("expected AttributeError")


CDI_EXPECTED = {
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
}


def test_cdi_public_names() -> None:
    import ocihook.cdi as cdi

    assert set(cdi.__all__) == CDI_EXPECTED
    for name in cdi.__all__:
        value = getattr(cdi, name)
        if callable(value):
            assert value.__doc__, f"ocihook.cdi.{name} has no docstring"
