"""CDI specs the tests start from: :data:`CDI_GPU_SPEC` (two GPUs) and
:data:`GOOD_CDI_YAML` (one device)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

#: A valid CDI spec in YAML (cdiVersion 0.3.0, kind example.com/gpu): one device
#: ``gpu0`` whose edits set ``A=1``; tests edit the text into the case they need.
GOOD_CDI_YAML = """\
cdiVersion: 0.3.0
kind: example.com/gpu
devices:
- name: gpu0
  containerEdits:
    env: [A=1]
"""


#: A CDI spec (kind nvidia.com/gpu) for GPUs "0" and "1": their nodes, the control node,
#: libcuda and ``NVIDIA_CDI=1`` for every device. Explicit type/major/minor: injection
#: never needs a host device node for these.
CDI_GPU_SPEC = {
    "cdiVersion": "0.5.0",
    "kind": "nvidia.com/gpu",
    "containerEdits": {
        "env": ["NVIDIA_CDI=1"],
        "deviceNodes": [{"path": "/dev/nvidiactl", "type": "c", "major": 195, "minor": 255}],
        "mounts": [
            {
                "hostPath": "/usr/lib/x86_64-linux-gnu/libcuda.so.535.261.03",
                "containerPath": "/usr/lib/x86_64-linux-gnu/libcuda.so.535.261.03",
                "options": ["ro", "nosuid", "nodev", "bind"],
            }
        ],
    },
    "devices": [
        {
            "name": str(i),
            "containerEdits": {
                "deviceNodes": [{"path": f"/dev/nvidia{i}", "type": "c", "major": 195, "minor": i}]
            },
        }
        for i in range(2)
    ],
}


def host_cdi_spec(root: str | Path, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    """A copy of ``spec`` (default :data:`CDI_GPU_SPEC`) whose device nodes and bind
    mounts take their host files from under ``root``, an empty file made there for each
    one missing: a spec that matches its host, as injection in spec mode requires
    (a stale one is refused)."""
    doc: dict[str, Any] = copy.deepcopy(CDI_GPU_SPEC if spec is None else spec)
    edits = [doc.get("containerEdits") or {}] + [d["containerEdits"] for d in doc["devices"]]
    for e in edits:
        for node in e.get("deviceNodes", []):
            node["hostPath"] = _made(root, node.get("hostPath") or node["path"])
        for mount in e.get("mounts", []):
            mount["hostPath"] = _made(root, mount["hostPath"])
    return doc


def _made(root: str | Path, path: str) -> str:
    full = Path(root, path.lstrip("/"))
    full.parent.mkdir(parents=True, exist_ok=True)
    full.touch()
    return str(full)
