"""Editing a parsed ``config.json`` (:mod:`ocihook.oci.edit`): device cgroup rules in
``linux.resources.devices``, the one conversion the spec applier and the wrapper's legacy
mode share."""

from __future__ import annotations

from typing import Any

import pytest

from ocihook.core.errors import SpecError
from ocihook.oci.edit import add_device_rules
from ocihook.plan.edits import CgroupRule

RULES = (
    CgroupRule(True, "c", 195, 0, "rw"),
    CgroupRule(True, "c", 195, None, "rw"),
    CgroupRule(False, "a", None, None, "rwm"),
)


def test_rules_become_runtime_spec_entries() -> None:
    doc: dict[str, Any] = {}
    add_device_rules(doc, RULES)
    assert doc == {
        "linux": {
            "resources": {
                "devices": [
                    {"allow": True, "type": "c", "access": "rw", "major": 195, "minor": 0},
                    {"allow": True, "type": "c", "access": "rw", "major": 195},
                    {"allow": False, "type": "a", "access": "rwm"},
                ]
            }
        }
    }


def test_rules_are_appended_each_once() -> None:
    deny_all = {"allow": False, "access": "rwm"}
    doc: dict[str, Any] = {"linux": {"resources": {"devices": [deny_all], "memory": {}}}}
    add_device_rules(doc, RULES[:1])
    add_device_rules(doc, RULES[:1])
    assert doc["linux"]["resources"] == {
        "devices": [
            deny_all,
            {"allow": True, "type": "c", "access": "rw", "major": 195, "minor": 0},
        ],
        "memory": {},
    }


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"linux": []}, "linux"),
        ({"linux": {"resources": 1}}, "linux.resources"),
        ({"linux": {"resources": {"devices": {}}}}, "linux.resources.devices"),
    ],
)
def test_wrong_json_types_are_spec_errors(doc: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as e:
        add_device_rules(doc, RULES, path="/b/config.json")
    assert (e.value.field, e.value.path) == (field, "/b/config.json")


def test_spec_applier_and_wrapper_use_the_one_conversion() -> None:
    """Neither the spec applier nor the wrapper builds ``linux.resources.devices`` entries
    itself."""
    import inspect

    from ocihook.appliers import spec
    from ocihook.commands import runtime

    for module in (spec, runtime):
        source = inspect.getsource(module)
        assert "add_device_rules(" in source
        assert '"allow":' not in source
