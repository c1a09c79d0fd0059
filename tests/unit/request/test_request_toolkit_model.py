"""ocihook's request parsing against a reference model of the NVIDIA Container Toolkit.

The model below restates, in a few lines each, the rules of the toolkit's Go sources as
read there (not translated line by line):

* ``cmd/nvidia-container-runtime-hook/container_config.go``: ``getDevicesFromEnvvar``
  (the swarm resource variables, when any is set, instead of ``NVIDIA_VISIBLE_DEVICES``),
  ``getDriverCapabilities`` (unset/legacy, empty, and set values), ``getNvidiaConfig``;
* ``internal/config/image/cuda_image.go``: ``IsLegacy``, ``DevicesFromEnvvars`` (every
  set variable joined, the legacy ``all``, ``void``), ``GetRequirements`` /
  ``parseMajorMinorVersion`` (Go semver, 32-bit major and minor), ``HasDisableRequire``;
* ``internal/config/image/devices.go``: ``NewVisibleDevices`` (``void`` anywhere was
  caught by ``DevicesFromEnvvars``; then it returns at the first ``all`` or ``none`` in
  list order);
* ``internal/config/image/capabilities.go``: ``NewDriverCapabilities``;
* ``internal/modifier/cdi.go`` and ``CUDA.VisibleDevices``: annotations replace the
  environment in CDI mode.

Both sides run on generated environments and must agree. The generators draw only from
inputs where ocihook keeps no deliberate difference (lower-case special values and
capability names, well-formed GPU ids); the differences are tested apart at the end.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import host_cdi_spec

from ocihook.config.options import Options
from ocihook.core.errors import RequestError
from ocihook.pipeline.cdinames import cdi_device_names
from ocihook.request.nvidia import request_from_spec
from ocihook.request.policy import RequestPolicy

ALL7 = frozenset({"compat32", "compute", "display", "graphics", "ngx", "utility", "video"})
DEFAULT = frozenset({"utility", "compute"})
SWARM = ("DOCKER_RESOURCE_GPU", "DOCKER_RESOURCE_NVIDIA")
UUID = "GPU-0a1b2c3d-0000-1111-2222-333344445555"

# --------------------------------------------------------------------------------------
# The reference model
# --------------------------------------------------------------------------------------


class ToolkitError(Exception):
    """Where the toolkit's hook panics (the container does not start)."""


def _go_semver_major_minor(v: str) -> tuple[str, str] | None:
    """``golang.org/x/mod/semver``: ``vMAJOR[.MINOR[.PATCH[-pre][+build]]]``."""

    def num(s: str) -> tuple[str, str] | None:
        i = 0
        while i < len(s) and s[i] in "0123456789":
            i += 1
        if i == 0 or (s[0] == "0" and i > 1):
            return None
        return s[:i], s[i:]

    def idents(s: str, pre: bool) -> bool:
        ok = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-")
        return all(
            x and set(x) <= ok and not (pre and x.isdigit() and len(x) > 1 and x[0] == "0")
            for x in s.split(".")
        )

    if not v.startswith("v"):
        return None
    got = num(v[1:])
    if got is None:
        return None
    major, rest = got
    if rest == "":
        return major, "0"
    if rest[0] != ".":
        return None
    got = num(rest[1:])
    if got is None:
        return None
    minor, rest = got
    if rest == "":
        return major, minor
    if rest[0] != ".":
        return None
    got = num(rest[1:])
    if got is None:
        return None
    rest = got[1]
    if rest.startswith("-"):
        pre = rest[1:].partition("+")[0]
        if not idents(pre, True):
            return None
        rest = rest[1 + len(pre) :]
    if rest.startswith("+"):
        if not idents(rest[1:], False):
            return None
        rest = ""
    return (major, minor) if rest == "" else None


def _first_special(devices: list[str]) -> str | None:
    """``NewVisibleDevices``' loop: the first ``all`` or ``none`` in list order returns."""
    for d in devices:
        if d in ("all", "none"):
            return d
    return None


def toolkit_hook(env: dict[str, str], swarm: tuple[str, ...]) -> tuple[str, Any, frozenset[str]]:
    """``("void", None, {})`` for a non-GPU container, else ``(kind, devices, caps)``
    with kind ``none``/``all``/``list``; raises :class:`ToolkitError` where it panics."""
    legacy = bool(env.get("CUDA_VERSION")) and not env.get("NVIDIA_REQUIRE_CUDA")
    names = [v for v in swarm if v in env] or ["NVIDIA_VISIBLE_DEVICES"]
    is_set = any(n in env for n in names)
    devices = [d.strip() for n in names if n in env for d in env[n].split(",") if d.strip()]
    if not is_set and not devices and legacy:
        devices = ["all"]
    if not devices or "void" in devices:
        return "void", None, frozenset()
    first = _first_special(devices)
    if first is not None:
        kind, listed = first, None
    else:
        kind, listed = "list", tuple(dict.fromkeys(devices))
    raw = env.get("NVIDIA_DRIVER_CAPABILITIES")
    if raw is None and legacy:
        caps = ALL7
    elif raw is None or raw == "":
        caps = DEFAULT
    else:
        named = {c.strip() for c in raw.split(",") if c.strip()}
        if "all" in named:
            caps = ALL7
        elif named - ALL7:
            raise ToolkitError("unsupported capabilities")
        else:
            caps = frozenset(named)
    disabled = env.get("NVIDIA_DISABLE_REQUIRE") in {"1", "t", "T", "true", "TRUE", "True"}
    if legacy and not disabled:
        version = env["CUDA_VERSION"]
        mm = _go_semver_major_minor("v" + version.removeprefix("v"))
        if mm is None or any(int(x) > 2**32 - 1 for x in mm):
            raise ToolkitError("invalid CUDA version")
    return kind, listed, caps


def toolkit_cdi_devices(
    env: dict[str, str], annotations: dict[str, str], kind: str = "nvidia.com/gpu"
) -> set[str]:
    """The devices the toolkit's CDI mode injects: the annotations' when any, else the
    environment's, unqualified ones given the default kind."""
    from_annotations = {
        d for k, v in annotations.items() if k.startswith("cdi.k8s.io/") for d in v.split(",")
    }
    if from_annotations:
        return from_annotations
    legacy = bool(env.get("CUDA_VERSION")) and not env.get("NVIDIA_REQUIRE_CUDA")
    raw = env.get("NVIDIA_VISIBLE_DEVICES")
    devices = [d.strip() for d in (raw or "").split(",") if d.strip()]
    if raw is None and legacy:
        devices = ["all"]
    if not devices or "void" in devices:
        return set()
    first = _first_special(devices)
    if first == "none":
        devices = [""]  # the toolkit then asks for "nvidia.com/gpu=" (an error there)
    elif first == "all":
        devices = ["all"]
    return {d if "=" in d else f"{kind}={d}" for d in devices}


# --------------------------------------------------------------------------------------
# Generators
# --------------------------------------------------------------------------------------

_DEVICE_ITEMS = st.sampled_from(["0", "1", UUID, "all", "none", "void", "", " ", " 1 "])
_DEVICE_VALUES = st.lists(_DEVICE_ITEMS, max_size=4).map(",".join)
_CAP_ITEMS = st.sampled_from(["compute", "utility", "video", "all", "", " ", "graphics", "bogus"])
_CAP_VALUES = st.one_of(st.just(""), st.just("  "), st.lists(_CAP_ITEMS, max_size=3).map(",".join))
_CUDA_VERSIONS = st.sampled_from(
    [
        "12.2.0",
        "v11.8",
        "12",
        "12.4.0-rc1",
        "12.4.0-rc.01",
        "12.4.0+build.7",
        "12-rc1",
        "011.8",
        "4294967295.0",
        "4294967296.0",
        "1.4294967296",
        "99999999999999999999.1",
        "12.",
        "x",
        "",
    ]
)


def _maybe(strategy: st.SearchStrategy[str]) -> st.SearchStrategy[str | None]:
    return st.one_of(st.none(), strategy)


@st.composite
def environments(draw: Any) -> dict[str, str]:
    env: dict[str, str] = {}
    for name, values in (
        ("NVIDIA_VISIBLE_DEVICES", _DEVICE_VALUES),
        ("NVIDIA_DRIVER_CAPABILITIES", _CAP_VALUES),
        ("CUDA_VERSION", _CUDA_VERSIONS),
        ("NVIDIA_REQUIRE_CUDA", st.sampled_from(["", "cuda>=11.0"])),
        ("NVIDIA_DISABLE_REQUIRE", st.sampled_from(["true", "1", "yes", "false"])),
        (SWARM[0], _DEVICE_VALUES),
        (SWARM[1], _DEVICE_VALUES),
    ):
        value = draw(_maybe(values))
        if value is not None:
            env[name] = value
    return env


def _ocihook(env: dict[str, str], swarm: tuple[str, ...]) -> tuple[str, Any, frozenset[str]]:
    config = {"process": {"env": [f"{k}={v}" for k, v in env.items()]}}
    try:
        r = request_from_spec(config, policy=RequestPolicy(swarm_resource=swarm))
    except RequestError as e:
        raise ToolkitError(str(e)) from None
    if r.kind == "void":
        return "void", None, frozenset()
    return r.kind, (r.devices if r.kind == "list" else None), r.capabilities


def _outcome(f: Any, *args: Any) -> Any:
    try:
        return f(*args)
    except ToolkitError:
        return "error"


@settings(max_examples=1500, deadline=None)
@given(environments(), st.sampled_from([(), SWARM[:1], SWARM]))
def test_request_agrees_with_the_toolkit_hook(env: dict[str, str], swarm: tuple[str, ...]) -> None:
    expected = _outcome(toolkit_hook, env, swarm)
    caps = {c.strip() for c in env.get("NVIDIA_DRIVER_CAPABILITIES", "").split(",")}
    if (
        expected != "error"
        and expected[0] != "void"
        and "all" in caps
        and caps - ALL7 - {"", "all"}
    ):
        expected = "error"  # deliberate: an unknown capability is refused beside all too
    assert _outcome(_ocihook, env, swarm) == expected


_QUALIFIED = st.sampled_from(["nvidia.com/gpu=0", "nvidia.com/gpu=1", "nvidia.com/gpu=all"])


@settings(max_examples=600, deadline=None)
@given(
    environments(),
    st.dictionaries(
        st.sampled_from(["cdi.k8s.io/a", "cdi.k8s.io/b", "other.io/c"]),
        st.lists(_QUALIFIED, min_size=1, max_size=3).map(",".join),
        max_size=2,
    ),
)
def test_cdi_mode_devices_agree_with_the_toolkit(
    env: dict[str, str], annotations: dict[str, str]
) -> None:
    env.pop(SWARM[0], None)
    env.pop(SWARM[1], None)
    env.pop("NVIDIA_DRIVER_CAPABILITIES", None)
    env["NVIDIA_DISABLE_REQUIRE"] = "true"
    expected = toolkit_cdi_devices(env, annotations)
    if "nvidia.com/gpu=" in expected:  # "none" in cdi mode: an invalid name for both
        return
    config = {"process": {"env": [f"{k}={v}" for k, v in env.items()]}, "annotations": annotations}
    request = request_from_spec(config)
    assert set(cdi_device_names(config, request, Options(mode="cdi"))) == expected


# --------------------------------------------------------------------------------------
# The toolkit's request rules, one example each
# --------------------------------------------------------------------------------------


def _req(env: dict[str, str], swarm: tuple[str, ...] = ()) -> Any:
    config = {"process": {"env": [f"{k}={v}" for k, v in env.items()]}}
    return request_from_spec(config, policy=RequestPolicy(swarm_resource=swarm))


@pytest.mark.parametrize("mode", ["cdi", "auto"])
def test_annotations_replace_the_cuda_image_default(mode: str) -> None:
    config = {
        "process": {"env": ["NVIDIA_VISIBLE_DEVICES=all", "CUDA_VERSION=12.2.0"]},
        "annotations": {"cdi.k8s.io/gpu": "nvidia.com/gpu=1"},
    }
    names = cdi_device_names(config, request_from_spec(config), Options(mode=mode))
    assert names == ("nvidia.com/gpu=1",)


def test_legacy_image_with_annotations_gets_only_those() -> None:
    config = {
        "process": {"env": ["CUDA_VERSION=11.8.0"]},
        "annotations": {"cdi.k8s.io/gpu": "nvidia.com/gpu=0"},
    }
    request = request_from_spec(config)
    assert request.kind == "all"  # what the legacy hook would serve without annotations
    assert cdi_device_names(config, request, Options(mode="cdi")) == ("nvidia.com/gpu=0",)


@pytest.mark.parametrize(
    "env",
    [
        ["NVIDIA_VISIBLE_DEVICES=gpu0"],
        ["CUDA_VERSION=011.8"],
        ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=bogus"],
    ],
)
def test_annotations_are_served_whatever_the_environment_says(
    env: list[str], tmp_path: Any
) -> None:
    """The environment is not read when annotations request devices (toolkit
    ``CUDA.VisibleDevices``): its malformed values stop nothing."""
    import json

    from ocihook.appliers.spec import edit_bundle

    spec_dir = tmp_path / "cdi"
    spec_dir.mkdir()
    (spec_dir / "gpu.json").write_text(
        json.dumps(
            host_cdi_spec(
                tmp_path / "host",
                {
                    "cdiVersion": "0.5.0",  # a device named "1" needs it
                    "kind": "nvidia.com/gpu",
                    "devices": [
                        {
                            "name": "1",
                            "containerEdits": {
                                "deviceNodes": [
                                    {"path": "/dev/nvidia1", "type": "c", "major": 195, "minor": 1}
                                ]
                            },
                        }
                    ],
                },
            )
        )
    )
    bundle = tmp_path / "bundle"
    (bundle / "rootfs").mkdir(parents=True)
    doc = {
        "ociVersion": "1.0.2",
        "process": {"args": ["true"], "cwd": "/", "env": env},
        "root": {"path": "rootfs"},
        "annotations": {"cdi.k8s.io/gpu": "nvidia.com/gpu=1"},
    }
    (bundle / "config.json").write_text(json.dumps(doc))
    result = edit_bundle(str(bundle), options=Options(cdi_spec_dirs=(str(spec_dir),)))
    assert result.cdi_devices == ("nvidia.com/gpu=1",)
    after = json.loads(result.after)
    assert [d["path"] for d in after["linux"]["devices"]] == ["/dev/nvidia1"]
    # without the annotation the same environment is refused
    del doc["annotations"]
    (bundle / "config.json").write_text(json.dumps(doc))
    with pytest.raises(RequestError):
        edit_bundle(str(bundle), options=Options(cdi_spec_dirs=(str(spec_dir),)))


def test_legacy_mode_reads_no_annotations() -> None:
    config = {
        "process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"]},
        "annotations": {"cdi.k8s.io/gpu": "nvidia.com/gpu=1"},
    }
    assert cdi_device_names(config, request_from_spec(config), Options(mode="legacy")) == ()


def test_capabilities_empty_blank_and_unset() -> None:
    legacy = {"CUDA_VERSION": "12.2.0", "NVIDIA_DISABLE_REQUIRE": "true"}
    assert _req({**legacy, "NVIDIA_DRIVER_CAPABILITIES": ""}).capabilities == DEFAULT
    assert _req(legacy).capabilities == ALL7
    assert _req({**legacy, "NVIDIA_DRIVER_CAPABILITIES": "  "}).capabilities == frozenset()
    assert _req({**legacy, "NVIDIA_DRIVER_CAPABILITIES": " , "}).capabilities == frozenset()
    plain = {"NVIDIA_VISIBLE_DEVICES": "0"}
    assert _req({**plain, "NVIDIA_DRIVER_CAPABILITIES": ""}).capabilities == DEFAULT
    assert _req({**plain, "NVIDIA_DRIVER_CAPABILITIES": "video, "}).capabilities == {"video"}


def test_swarm_variables_are_joined_and_an_empty_one_counts() -> None:
    env = {"NVIDIA_VISIBLE_DEVICES": "all", SWARM[0]: "0", SWARM[1]: "1"}
    r = _req(env, SWARM)
    assert (r.kind, r.devices, r.source) == ("list", ("0", "1"), ",".join(SWARM))
    # set but empty: it is read (and asks for nothing); NVIDIA_VISIBLE_DEVICES is not
    assert _req({"NVIDIA_VISIBLE_DEVICES": "all", SWARM[0]: ""}, SWARM).kind == "void"
    assert _req({"NVIDIA_VISIBLE_DEVICES": "all", SWARM[0]: "", SWARM[1]: "1"}, SWARM).devices == (
        "1",
    )
    # unset swarm variables leave NVIDIA_VISIBLE_DEVICES in charge
    assert _req({"NVIDIA_VISIBLE_DEVICES": "all"}, SWARM).kind == "all"
    # a legacy image whose swarm variable is set but empty is no GPU container
    assert _req({"CUDA_VERSION": "12.2.0", SWARM[0]: ""}, SWARM).kind == "void"


def test_special_values_void_anywhere_else_the_first_all_or_none() -> None:
    assert _req({"NVIDIA_VISIBLE_DEVICES": "all,none"}).kind == "all"
    assert _req({"NVIDIA_VISIBLE_DEVICES": "none,all"}).kind == "none"
    assert _req({"NVIDIA_VISIBLE_DEVICES": "0,none,1,all"}).kind == "none"
    assert _req({"NVIDIA_VISIBLE_DEVICES": "none,0"}).kind == "none"
    assert _req({"NVIDIA_VISIBLE_DEVICES": "none,void"}).kind == "void"
    assert _req({"NVIDIA_VISIBLE_DEVICES": "all,none,void"}).kind == "void"
    assert _req({"NVIDIA_VISIBLE_DEVICES": "0,all"}).kind == "all"


_SPECIAL_OR_INDEX = st.sampled_from(["all", "none", "void", "0", "1", "7", UUID, " all ", ""])


@settings(max_examples=600, deadline=None)
@given(st.lists(_SPECIAL_OR_INDEX, max_size=8), st.sampled_from([(), SWARM[:1]]))
def test_special_words_in_any_order_agree_with_the_toolkit(
    items: list[str], swarm: tuple[str, ...]
) -> None:
    """Lists of special words and GPU ids only, in every order, through either variable:
    the same kind and devices as the toolkit's ``NewVisibleDevices``."""
    name = swarm[0] if swarm else "NVIDIA_VISIBLE_DEVICES"
    env = {name: ",".join(items)}
    expected = toolkit_hook(env, swarm)
    assert _ocihook(env, swarm) == expected
    stripped = [i.strip() for i in items if i.strip()]
    if stripped and "void" not in stripped and expected[0] in ("all", "none"):
        assert expected[0] == next(i for i in stripped if i in ("all", "none"))


@pytest.mark.parametrize(
    ("version", "message"),
    [
        ("4294967296.0", "CUDA_VERSION major version does not fit in 32 bits"),
        ("99999999999999999999999.0", "CUDA_VERSION major version does not fit in 32 bits"),
        ("12.4294967296", "CUDA_VERSION minor version does not fit in 32 bits"),
        ("011.8", "CUDA_VERSION is not a version"),
        ("12-rc1", "CUDA_VERSION is not a version"),
    ],
)
def test_cuda_version_refusals_are_clear(version: str, message: str) -> None:
    with pytest.raises(RequestError) as ei:
        _req({"CUDA_VERSION": version})
    assert ei.value.message == message
    assert ei.value.field == "process.env[CUDA_VERSION]" and ei.value.value == version


def test_cuda_version_largest_major_is_accepted() -> None:
    r = _req({"CUDA_VERSION": "4294967295.0"})
    assert [str(req) for _name, req in r.requirements] == ["cuda>=4294967295.0"]


# --------------------------------------------------------------------------------------
# Deliberate differences (docs/guide/requests.md, "Deliberate differences from the NVIDIA toolkit")
# --------------------------------------------------------------------------------------


def test_deliberate_case_insensitive_special_values_and_capabilities() -> None:
    # the toolkit: "ALL" is a device id and "COMPUTE" an unsupported capability (a panic)
    assert _req({"NVIDIA_VISIBLE_DEVICES": "ALL"}).kind == "all"
    assert _req({"NVIDIA_VISIBLE_DEVICES": "VOID"}).kind == "void"
    r = _req({"NVIDIA_VISIBLE_DEVICES": "0", "NVIDIA_DRIVER_CAPABILITIES": "COMPUTE"})
    assert r.capabilities == {"compute"}
    assert toolkit_hook({"NVIDIA_VISIBLE_DEVICES": "ALL"}, ()) == ("list", ("ALL",), DEFAULT)


def test_deliberate_unknown_capability_beside_all_is_refused() -> None:
    env = {"NVIDIA_VISIBLE_DEVICES": "0", "NVIDIA_DRIVER_CAPABILITIES": "all,compte"}
    assert toolkit_hook(env, ())[2] == ALL7  # the toolkit ignores the typo
    with pytest.raises(RequestError) as ei:
        _req(env)
    assert ei.value.value == "compte"


def test_deliberate_malformed_gpu_ids_are_refused() -> None:
    # the toolkit passes "gpu0" to nvidia-container-cli, which fails later, less clearly
    assert toolkit_hook({"NVIDIA_VISIBLE_DEVICES": "gpu0"}, ())[0] == "list"
    with pytest.raises(RequestError) as ei:
        _req({"NVIDIA_VISIBLE_DEVICES": "gpu0"})
    assert ei.value.message == "unsupported GPU identifier" and ei.value.value == "gpu0"
