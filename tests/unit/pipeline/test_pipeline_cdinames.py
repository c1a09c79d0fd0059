"""Which CDI devices a container names, and which AMD/Intel requests stay with host
discovery beside them (:mod:`ocihook.pipeline.cdinames`)."""

from __future__ import annotations

from typing import Any

import pytest

from ocihook.config.options import Options
from ocihook.core.errors import CdiError, RequestError
from ocihook.pipeline.cdinames import (
    cdi_device_names,
    drm_cdi_names,
    drm_requests_beside_cdi,
    has_annotation_request,
)
from ocihook.request.nvidia import request_from_spec
from ocihook.request.policy import RequestPolicy


def _config(env: list[str], annotations: dict[str, str] | None = None, **kw: Any) -> dict[str, Any]:
    caps = ["CAP_SYS_ADMIN"] if kw.get("privileged") else ["CAP_KILL"]
    doc: dict[str, Any] = {"process": {"env": env, "capabilities": {"bounding": caps}}}
    if annotations is not None:
        doc["annotations"] = annotations
    return doc


def test_has_annotation_request() -> None:
    doc = _config([], {"cdi.k8s.io/x": "nvidia.com/gpu=0", "other": "y"})
    assert has_annotation_request(doc, Options())
    assert not has_annotation_request(doc, Options(mode="legacy"))
    assert not has_annotation_request(_config([], {"other": "y"}), Options())
    assert not has_annotation_request(_config([]), Options())


def test_drm_cdi_names_kind_for_plain_entries_only_when_one_is_qualified() -> None:
    doc = _config(["AMD_VISIBLE_DEVICES=0,amd.com/gpu=1", "INTEL_VISIBLE_DEVICES=0"])
    assert drm_cdi_names(doc, Options()) == ["amd.com/gpu=0", "amd.com/gpu=1"]
    assert drm_cdi_names(doc, Options(mode="cdi")) == [
        "amd.com/gpu=0",
        "amd.com/gpu=1",
        "intel.com/gpu=0",
    ]
    untrusted = Options(policy=RequestPolicy(accept_env_unprivileged=False))
    assert drm_cdi_names(doc, untrusted) == []
    with pytest.raises(CdiError) as e:
        drm_cdi_names(_config(["AMD_VISIBLE_DEVICES=amd.com/gpu=bad name"]), Options())
    assert e.value.field == "process.env[AMD_VISIBLE_DEVICES]"


def test_drm_requests_beside_cdi() -> None:
    doc = _config(["AMD_VISIBLE_DEVICES=amd.com/gpu=0", "INTEL_VISIBLE_DEVICES=0-1"])
    (intel,) = drm_requests_beside_cdi(doc, Options(), "/b/config.json")
    assert (intel.vendor, intel.kind, intel.devices) == ("intel", "list", ("0-1",))
    assert drm_requests_beside_cdi(doc, Options(mode="cdi"), "/b/config.json") == ()
    untrusted = Options(policy=RequestPolicy(accept_env_unprivileged=False))
    assert drm_requests_beside_cdi(doc, untrusted, "/b/config.json") == ()
    with pytest.raises(RequestError) as err:
        drm_requests_beside_cdi(_config(["INTEL_VISIBLE_DEVICES=3-1"]), Options(), "/b/c.json")
    assert err.value.path == "/b/c.json"


def test_annotations_replace_the_nvidia_request_and_drm_names_stay() -> None:
    doc = _config(
        ["NVIDIA_VISIBLE_DEVICES=all", "AMD_VISIBLE_DEVICES=amd.com/gpu=0"],
        {"cdi.k8s.io/a": "nvidia.com/gpu=1"},
    )
    names = cdi_device_names(doc, request_from_spec(doc), Options(mode="cdi"))
    assert names == ("amd.com/gpu=0", "nvidia.com/gpu=1")
