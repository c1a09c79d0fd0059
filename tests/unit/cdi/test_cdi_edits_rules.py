"""CDI validation rules of the CDI Go library's ``pkg/cdi/container-edits.go`` that
ocihook missed: ``intelRdt.closID`` is a directory name (``IntelRdt.Validate``), and no
two ``netDevices`` of one edits list share a ``hostInterfaceName`` or a ``name``
(``ValidateNetDevices``)."""

from __future__ import annotations

from typing import Any

import pytest

from ocihook.cdi.spec import spec_from_dict, validate_spec
from ocihook.core.errors import CdiError


def _spec(edits: dict[str, Any], version: str = "1.0.0") -> Any:
    return spec_from_dict(
        {
            "cdiVersion": version,
            "kind": "vendor.com/net",
            "devices": [{"name": "d", "containerEdits": edits}],
        }
    )


@pytest.mark.parametrize("clos", [".", "..", "a/b", "/a", "a\nb", "x" * 4096])
def test_closid_that_is_no_directory_name_is_invalid(clos: str) -> None:
    with pytest.raises(CdiError) as ei:
        validate_spec(_spec({"intelRdt": {"closID": clos}}))
    assert ei.value.field == "devices[0].containerEdits.intelRdt.closID"
    assert ei.value.value == clos
    assert ei.value.message == "invalid intelRdt closID: not a directory name"


@pytest.mark.parametrize("clos", ["/", "c1", "gpu-jobs.1", "x" * 4095, "..."])
def test_closid_directory_names_and_the_root_are_valid(clos: str) -> None:
    validate_spec(_spec({"intelRdt": {"closID": clos}}))


@pytest.mark.parametrize(
    ("devices", "field", "value"),
    [
        (
            [
                {"hostInterfaceName": "ib0", "name": "net1"},
                {"hostInterfaceName": "ib0", "name": "n2"},
            ],
            "devices[0].containerEdits.netDevices[1].hostInterfaceName",
            "ib0",
        ),
        (
            [
                {"hostInterfaceName": "ib0", "name": "net1"},
                {"hostInterfaceName": "ib1", "name": "net1"},
            ],
            "devices[0].containerEdits.netDevices[1].name",
            "net1",
        ),
    ],
)
def test_repeated_net_device_names_are_invalid(
    devices: list[dict[str, str]], field: str, value: str
) -> None:
    with pytest.raises(CdiError) as ei:
        validate_spec(_spec({"netDevices": devices}, "1.1.0"))
    assert (ei.value.field, ei.value.value) == (field, value)
    assert "netDevices[0] has the same" in (ei.value.hint or "")


def test_distinct_net_devices_are_valid_and_may_swap_names() -> None:
    validate_spec(
        _spec(
            {
                "netDevices": [
                    {"hostInterfaceName": "ib0", "name": "ib1"},
                    {"hostInterfaceName": "ib1", "name": "ib0"},
                ]
            },
            "1.1.0",
        )
    )
