"""``ocihook.schemas``: the JSON Schemas shipped in the package and ``violations()``."""

from __future__ import annotations

import os

import pytest
from support import REPO, modules_after

from ocihook import schemas
from ocihook.schemas import MAX_MESSAGE, Violation, json_path, load_schema, violations

CDI_OK = {
    "cdiVersion": "0.6.0",
    "kind": "vendor.com/gpu",
    "annotations": {"cdi.k8s.io/owner": "ocihook"},
    "devices": [{"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/vgpu0"}]}}],
}


@pytest.mark.parametrize("name", schemas.SCHEMA_NAMES)
def test_the_packaged_copies_are_the_specs(name: str) -> None:
    """ocihook/schemas/<name>.schema.json is byte-identical to specs/<name>.schema.json."""
    with (
        open(schemas.schema_path(name), "rb") as a,
        open(os.path.join(REPO, "specs", f"{name}.schema.json"), "rb") as b,
    ):
        assert a.read() == b.read(), f"copy specs/{name}.schema.json to ocihook/schemas/"
    assert load_schema(name)["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def test_every_spec_is_shipped() -> None:
    shipped = {f"{n}.schema.json" for n in schemas.SCHEMA_NAMES}
    assert shipped == {f for f in os.listdir(os.path.join(REPO, "specs")) if f.endswith(".json")}


def test_unknown_schema() -> None:
    with pytest.raises(ValueError, match="no schema 'nope'; one of cdi, config, plan"):
        load_schema("nope")


def test_json_path() -> None:
    assert json_path([]) == "$"
    assert json_path(["devices", 0, "containerEdits", "mounts", 12]) == (
        "$.devices[0].containerEdits.mounts[12]"
    )
    assert json_path(["annotations", "cdi.k8s.io/x"]) == "$.annotations['cdi.k8s.io/x']"
    assert json_path(["log-level"]) == "$.log-level"


def test_a_valid_document() -> None:
    assert violations(CDI_OK, "cdi") == []
    assert violations({}, "config") == []


def test_every_violation_ordered_by_path() -> None:
    doc = {
        **CDI_OK,
        "devices": [
            {"name": f"d{i}", "containerEdits": {"deviceNodes": [{"path": "/dev/x"}]}}
            for i in range(11)
        ],
        "bogus": 1,
    }
    doc["devices"][10]["containerEdits"]["deviceNodes"][0]["major"] = "x"
    doc["devices"][2]["name"] = 5
    assert violations(doc, "cdi") == [
        Violation("$", "Additional properties are not allowed ('bogus' was unexpected)"),
        Violation("$.devices[2].name", "5 is not of type 'string'"),
        Violation(
            "$.devices[10].containerEdits.deviceNodes[0].major",
            "'x' is not of type 'integer', 'null'",
        ),
    ]


def test_an_optional_null_or_object_reports_inside_the_object() -> None:
    """containerEdits may be null or an object: a bad object reports its own fields, not
    "is not valid under any of the given schemas"."""
    doc = {**CDI_OK, "containerEdits": {"env": [3], "mounts": [{"containerPath": "/a"}]}}
    assert [str(v) for v in violations(doc, "cdi")] == [
        "$.containerEdits.env[0]: 3 is not of type 'string'",
        "$.containerEdits.mounts[0]: 'hostPath' is a required property",
    ]


def test_long_messages_are_cut() -> None:
    (v,) = violations({"log-level": "x" * 5000}, "config")
    assert v.path == "$.log-level" and len(v.message) == MAX_MESSAGE
    assert v.message.endswith("...")


def test_importing_loads_no_jsonschema() -> None:
    loaded = modules_after(
        "import ocihook.schemas, ocihook.cdi.spec, ocihook.config.load, ocihook.config.validate"
    )
    assert "jsonschema" not in loaded
