"""CDI specs the tests start from: :data:`CDI_GPU_SPEC` (two GPUs) and
:data:`GOOD_CDI_YAML` (one device)."""

from __future__ import annotations

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
