"""``ocihook.config.scan``: what a configuration file's bytes and a container's raw
``config.json`` say without parsing."""

from __future__ import annotations

import json

import pytest

from ocihook.config.scan import (
    DEFAULT_ANNOTATION_PREFIXES,
    DEFAULT_REQUEST_MARKERS,
    REQUEST_DETECTION_KEYS,
    bytes_may_set,
    request_markers,
)
from ocihook.config.validate import Config


def test_extra_request_markers() -> None:
    assert Config().extra_request_markers() == (b"cdi.k8s.io",)
    c = Config(
        swarm_resource="DOCKER_RESOURCE_GPU, B",
        annotation_prefixes=("nvidia.cdi.k8s.io/", "x/", "/"),
        accept_nvidia_visible_devices_as_volume_mounts=True,
    )
    assert c.extra_request_markers() == (
        b"DOCKER_RESOURCE_GPU",
        b"B",
        b"nvidia.cdi.k8s.io",
        b"x",
        b"/",
        b"nvidia-container-devices",
    )
    # each marker occurs in the JSON of a request, whichever way JSON writes its slashes
    spec = json.dumps(
        {
            "annotations": {"nvidia.cdi.k8s.io/a": "nvidia.com/gpu=0"},
            "mounts": [{"destination": "/var/run/nvidia-container-devices/0"}],
        }
    )
    for escaped in (spec, spec.replace("/", "\\/")):
        assert b"nvidia.cdi.k8s.io" in escaped.encode()
        assert b"nvidia-container-devices" in escaped.encode()


def test_default_markers_are_the_default_configurations() -> None:
    """The wrapper's no-GPU exit uses :data:`DEFAULT_REQUEST_MARKERS` without building a
    :class:`Config`: they are what the default configuration gives."""
    assert DEFAULT_REQUEST_MARKERS == Config().extra_request_markers() == (b"cdi.k8s.io",)
    assert Config().annotation_prefixes == DEFAULT_ANNOTATION_PREFIXES
    assert request_markers(["A", "A"], ["x/", "y.io/x", "x/"], True) == (
        b"A",
        b"x",
        b"y.io",
        b"nvidia-container-devices",
    )


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (None, False),
        (b"", False),
        (b"no-cgroups = true\n", False),
        (b'swarm-resource = "X"\n', True),
        (b"'annotation-prefixes' = []\n", True),
        (b'"swarm\\u002dresource" = "X"\n', True),
        (b"# accept-nvidia-visible-devices-as-volume-mounts\n", True),
    ],
)
def test_bytes_may_set(data: bytes | None, expected: bool) -> None:
    assert bytes_may_set(REQUEST_DETECTION_KEYS, data) is expected
