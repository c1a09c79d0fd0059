"""A doctor run's outcome: each :class:`Check`, the layers' statuses (:func:`worst`),
the :class:`Report` and the deployment record (:func:`deployment_record`,
``specs/doctor-record.schema.json``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from ..core.records import Record

__all__ = ["LAYERS", "STATUSES", "Check", "Report", "deployment_record", "worst"]

#: The layers, in the order they are checked (and reported).
LAYERS = ("host", "runtime", "request", "visibility", "gpu")
#: The statuses, in the order :func:`worst` ranks them (SKIP counts only alone).
STATUSES = ("PASS", "SKIP", "WARN", "FAIL")


class Check(Record):
    """One check's outcome.

    Attributes:
        layer: one of :data:`LAYERS`.
        name: what was checked ("kernel module", "docker", "CDI spec /etc/cdi/nvidia.yaml").
        status: ``PASS``, ``WARN``, ``FAIL`` or ``SKIP``.
        evidence: what was found (one or a few sentences).
        fix: what to do, one line (``""`` for PASS).
    """

    layer: str
    name: str
    status: str
    evidence: str
    fix: str = ""

    def to_dict(self) -> dict[str, str]:
        """JSON form (``specs/doctor-record.schema.json``, ``checks[]``)."""
        return {
            "layer": self.layer,
            "name": self.name,
            "status": self.status,
            "evidence": self.evidence,
            "fix": self.fix,
        }


def worst(statuses: Iterable[str]) -> str:
    """The worst of ``statuses``: FAIL > WARN > PASS, SKIP only when every one (or none)
    is SKIP — a layer whose applicable checks PASS is PASS."""
    found = list(statuses)
    if not found:
        return "SKIP"
    if all(s == "SKIP" for s in found):
        return "SKIP"
    return max((s for s in found if s != "SKIP"), key=STATUSES.index, default="SKIP")


class Report(Record):
    """A doctor run: its checks in layer order and the facts for the record."""

    checks: tuple[Check, ...]
    facts: Mapping[str, Any]

    def layer_status(self, layer: str) -> str:
        """The worst status of ``layer``'s checks."""
        return worst(c.status for c in self.checks if c.layer == layer)

    @property
    def failed(self) -> bool:
        """Whether any check FAILed."""
        return any(c.status == "FAIL" for c in self.checks)


def deployment_record(report: Report, *, config: Any = None) -> dict[str, Any]:
    """The deployment record of ``report`` (``specs/doctor-record.schema.json``): the
    host's driver and CUDA versions, kernel, GPUs, ocihook's version and configuration
    hash, each engine's runtime configuration, the CDI specs' hashes, the image's digest
    and requirements, and every check."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        ours = version("ocihook")
    except PackageNotFoundError:  # pragma: no cover - run from a source tree
        ours = "unknown"
    f = report.facts
    cfg_doc = config.as_dict() if config is not None else {}
    cfg_hash = hashlib.sha256(json.dumps(cfg_doc, sort_keys=True, default=str).encode()).hexdigest()
    import datetime

    return {
        "recordVersion": "1",
        "createdAt": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "ocihook": {
            "version": ours,
            "configFile": getattr(config, "source", None) or None,
            "configHash": "sha256:" + cfg_hash,
        },
        "kernel": f.get("kernel", {}),
        "driver": {
            "version": f.get("driverVersion"),
            "cudaVersion": f.get("cudaVersion"),
            "cudaVersionSource": f.get("cudaSource", "unknown"),
        },
        "gpus": f.get("gpus", []),
        "engines": f.get("engines", {}),
        "cdiSpecs": f.get("cdiSpecs", []),
        "image": f.get("image"),
        "probe": f.get("probe"),
        "layers": {layer: report.layer_status(layer) for layer in LAYERS},
        "checks": [c.to_dict() for c in report.checks],
    }
