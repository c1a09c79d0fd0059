"""CDI qualified device names and annotations (ocihook.cdi.names; CDI SPEC.md)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ocihook.cdi import (
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
from ocihook.core.errors import OcihookError

VALID = {
    "a/b=c": ("a", "b", "c"),
    "vendor.com/class=0": ("vendor.com", "class", "0"),
    "vendor1.com/class.subclass=dev1": ("vendor1.com", "class.subclass", "dev1"),
    "yet_another-vendor2.com/c-lass_2=dev_1:2.3": (
        "yet_another-vendor2.com",
        "c-lass_2",
        "dev_1:2.3",
    ),
    "nvidia.com/gpu=GPU-1b2c3d4e-0000-1111-2222-333344445555": (
        "nvidia.com",
        "gpu",
        "GPU-1b2c3d4e-0000-1111-2222-333344445555",
    ),
    "nvidia.com/gpu=all": ("nvidia.com", "gpu", "all"),
}

INVALID = [
    "",
    "nvidia.com/gpu",  # no '='
    "nvidia.com=gpu",  # no '/'
    "_vendor.com/class=dev",  # leading _ in vendor
    "vendor.com-/class=dev",  # trailing - in vendor
    "1vendor/class=dev",  # vendor starts with a digit
    "vendor.com/_class=dev",
    "vendor.com/class_=dev",
    "vendor.com/class=-dev",
    "vendor.com/class=dev:",
    "vendor.com/class=*",
    "vendor.com/*=dev",
    "*/class=dev",
    "vendor.com/class=dev*",
    "vendor.com/class=",
    "/class=dev",
    "vendor.com/=dev",
    "vendor.com/class/sub=dev",  # '/' not allowed in the class
    "vendor.com/class=a=b",  # '=' not allowed in the name
    "vendor.com/class=dev\n",
    "vendör/class=dev",
]


@pytest.mark.parametrize(("name", "parts"), VALID.items())
def test_valid_names(name: str, parts: tuple[str, str, str]) -> None:
    assert parse_qualified_name(name) == parts
    assert is_qualified_name(name)
    assert qualified_name(*parts) == name


@pytest.mark.parametrize("name", INVALID)
def test_invalid_names(name: str) -> None:
    assert not is_qualified_name(name)
    with pytest.raises(CdiError) as info:
        parse_qualified_name(name)
    assert info.value.value == name
    assert "invalid qualified device name" in str(info.value)
    assert isinstance(info.value, OcihookError)
    assert info.value.reference == "bad-cdi-spec"


def test_reason_names_the_part() -> None:
    with pytest.raises(CdiError, match="vendor"):
        parse_qualified_name("_v/c=d")
    with pytest.raises(CdiError, match="class"):
        parse_qualified_name("v/c_=d")
    with pytest.raises(CdiError, match="device name"):
        parse_qualified_name("v/c=d:")
    with pytest.raises(CdiError, match="no '='"):
        parse_qualified_name("v/c")


@pytest.mark.parametrize("bad", ["", "_a", "a_", "a-", "1a", "a b", "a/b", "*"])
def test_vendor_class_validators(bad: str) -> None:
    with pytest.raises(CdiError):
        validate_vendor(bad)
    with pytest.raises(CdiError):
        validate_class(bad)


@pytest.mark.parametrize("good", ["a", "A", "a.b", "a-b_c.d9", "nvidia.com"])
def test_vendor_class_ok(good: str) -> None:
    assert validate_vendor(good) == good
    assert validate_class(good) == good


@pytest.mark.parametrize("good", ["0", "a", "dev_1:2.3", "GPU-x", "1:0"])
def test_device_name_ok(good: str) -> None:
    assert validate_device_name(good) == good


@pytest.mark.parametrize("bad", ["", "-a", "a-", ":a", "a:", "_a", "a b", "a/b", "a=b", "*"])
def test_device_name_bad(bad: str) -> None:
    with pytest.raises(CdiError):
        validate_device_name(bad)


VENDOR_CLASS = st.from_regex(r"[A-Za-z](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?", fullmatch=True)
DEVICE = st.from_regex(r"[A-Za-z0-9](?:[A-Za-z0-9_.:-]*[A-Za-z0-9])?", fullmatch=True)


@given(VENDOR_CLASS, VENDOR_CLASS, DEVICE)
def test_build_parse_round_trip(vendor: str, cls: str, device: str) -> None:
    name = qualified_name(vendor, cls, device)
    assert parse_qualified_name(name) == (vendor, cls, device)


@given(st.text())
def test_parse_never_raises_other_errors(text: str) -> None:
    try:
        vendor, cls, device = parse_qualified_name(text)
    except CdiError:
        return
    assert f"{vendor}/{cls}={device}" == text


# -- annotations -----------------------------------------------------------------------


def test_annotation_key() -> None:
    assert annotation_key("nvidia-device-plugin", "gpu0") == "cdi.k8s.io/nvidia-device-plugin_gpu0"
    assert annotation_key("plugin", "a/b") == "cdi.k8s.io/plugin_a_b"


@pytest.mark.parametrize(
    ("plugin", "device_id"),
    [("", "x"), ("p", ""), ("p" * 60, "abcd"), ("p", "x!"), ("p", "x-"), ("-p", "x")],
)
def test_annotation_key_invalid(plugin: str, device_id: str) -> None:
    with pytest.raises(CdiError):
        annotation_key(plugin, device_id)


@pytest.mark.parametrize("length", [62, 63])
def test_annotation_key_at_the_63_character_boundary(length: int) -> None:
    """A Kubernetes annotation name has at most 63 characters: 63 is accepted, 64 is not."""
    device_id = "d" * (length - len("p_"))
    assert annotation_key("p", device_id) == "cdi.k8s.io/p_" + device_id
    assert len(annotation_key("p", device_id)) == len("cdi.k8s.io/") + length
    with pytest.raises(CdiError, match="longer than 63"):
        annotation_key("p", device_id + "d" * (64 - length))


def test_annotation_value() -> None:
    assert annotation_value(["nvidia.com/gpu=0", "nvidia.com/gpu=1"]) == (
        "nvidia.com/gpu=0,nvidia.com/gpu=1"
    )
    with pytest.raises(CdiError):
        annotation_value([])
    with pytest.raises(CdiError):
        annotation_value(["nvidia.com/gpu"])


def test_parse_annotations() -> None:
    annotations = {
        "other/key": "ignored",
        "cdi.k8s.io/p_0": "nvidia.com/gpu=0, nvidia.com/gpu=1",
        "cdi.k8s.io/p_2": "vendor.com/net=eth1",
    }
    keys, devices = parse_annotations(annotations)
    assert keys == ("cdi.k8s.io/p_0", "cdi.k8s.io/p_2")
    assert devices == ("nvidia.com/gpu=0", "nvidia.com/gpu=1", "vendor.com/net=eth1")
    assert parse_annotations({}) == ((), ())
    keys, devices = parse_annotations({"x/y": "a/b=c"}, prefixes=("x/",))
    assert keys == ("x/y",)
    assert devices == ("a/b=c",)


@pytest.mark.parametrize("value", ["nvidia.com/gpu", "nvidia.com/gpu=0,bad", "", " , "])
def test_parse_annotations_errors_name_the_key(value: str) -> None:
    with pytest.raises(CdiError) as info:
        parse_annotations({"cdi.k8s.io/p_0": value})
    assert info.value.field == "cdi.k8s.io/p_0"
    assert "cdi.k8s.io/p_0" in str(info.value)


@given(st.lists(st.tuples(VENDOR_CLASS, VENDOR_CLASS, DEVICE), min_size=1, max_size=5))
def test_annotation_round_trip(parts: list[tuple[str, str, str]]) -> None:
    names = [qualified_name(*p) for p in parts]
    key = annotation_key("plugin", "dev")
    _keys, devices = parse_annotations({key: annotation_value(names)})
    assert list(devices) == names


@given(st.text(alphabet="aZ09_.:-/ é\n", max_size=8))
def test_name_checks_match_their_regular_expressions(value: str) -> None:
    import re

    from ocihook.cdi import names

    device = re.fullmatch(r"[A-Za-z0-9](?:[A-Za-z0-9_.:-]*[A-Za-z0-9])?", value)
    annotation = re.fullmatch(r"[A-Za-z0-9](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?", value)
    assert names._fullmatch(value, names._DEVICE_CHARS) is (device is not None)
    assert names._fullmatch(value, names._ANNOTATION_NAME_CHARS) is (annotation is not None)
