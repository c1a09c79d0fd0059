"""A doctor run's outcome (:mod:`ocihook.doctor.report`): statuses, layers, the JSON
form of a check."""

from __future__ import annotations

from ocihook import doctor
from ocihook.doctor.report import LAYERS, Check, Report


def test_worst() -> None:
    assert doctor.worst(["PASS", "SKIP", "WARN"]) == "WARN"
    assert doctor.worst(["SKIP", "SKIP"]) == "SKIP"
    assert doctor.worst(["PASS", "FAIL", "WARN"]) == "FAIL"
    assert doctor.worst([]) == "SKIP"


def test_report_layer_status_and_failed() -> None:
    checks = (
        Check("host", "kernel module", "PASS", "driver 550.127.05"),
        Check("host", "GPUs", "WARN", "one GPU", "check it"),
        Check("runtime", "docker", "SKIP", "not installed"),
        Check("request", "request", "FAIL", "asks for GPU 9", "ask for GPU 0"),
    )
    report = Report(checks, {})
    assert [report.layer_status(layer) for layer in LAYERS] == [
        "WARN",
        "SKIP",
        "FAIL",
        "SKIP",
        "SKIP",
    ]
    assert report.failed
    assert not Report(checks[:3], {}).failed
    assert checks[1].to_dict() == {
        "layer": "host",
        "name": "GPUs",
        "status": "WARN",
        "evidence": "one GPU",
        "fix": "check it",
    }
