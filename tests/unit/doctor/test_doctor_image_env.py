"""``ocihook doctor``'s request layer without a host: reading an image's environment
(:func:`ocihook.doctor.request.read_image_env`) in each form it comes in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ocihook import doctor


@pytest.mark.parametrize(
    ("text", "digest"),
    [
        ("A=1\nNVIDIA_VISIBLE_DEVICES=0\n", None),
        (json.dumps(["A=1", "NVIDIA_VISIBLE_DEVICES=0"]), None),
        (
            json.dumps(
                [
                    {
                        "Id": "sha256:ab",
                        "RepoDigests": ["img@sha256:cd"],
                        "Config": {"Env": ["A=1", "NVIDIA_VISIBLE_DEVICES=0"]},
                    }
                ]
            ),
            "img@sha256:cd",
        ),
        (json.dumps({"config": {"Env": ["A=1", "NVIDIA_VISIBLE_DEVICES=0"]}}), None),
    ],
)
def test_read_image_env_forms(tmp_path: Path, text: str, digest: str | None) -> None:
    path = tmp_path / "env"
    path.write_text(text)
    env, facts = doctor.read_image_env(str(path))
    assert env == {"A": "1", "NVIDIA_VISIBLE_DEVICES": "0"}
    assert facts.get("digest") == digest


def test_read_image_env_refuses_json_without_env(tmp_path: Path) -> None:
    from ocihook.core.errors import RequestError

    path = tmp_path / "env"
    path.write_text('{"Config": {}}')
    with pytest.raises(RequestError, match="no environment in the JSON document"):
        doctor.read_image_env(str(path))


_names = st.text("ABCDNVIDIA_", min_size=1, max_size=10)
#: printable ASCII and some non-ASCII letters; no line breaks (one variable per line)
_values = st.text(st.sampled_from([*map(chr, range(32, 127)), "é", "ü", "文"]), max_size=16)


@given(st.dictionaries(_names, _values, max_size=8))
def test_read_image_env_round_trips(env: dict[str, str]) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        lines = Path(d, "lines")
        lines.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
        as_json = Path(d, "json")
        as_json.write_text(json.dumps([{"Config": {"Env": [f"{k}={v}" for k, v in env.items()]}}]))
        assert doctor.read_image_env(str(as_json))[0] == env
        if env:  # an empty file is no JSON: lines
            assert doctor.read_image_env(str(lines))[0] == env
