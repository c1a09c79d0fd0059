"""What a container asks for, read from its ``config.json`` (the request stage).

Modules, each imported by its full path (this package imports none of them, so that the
start path loads only what it uses):

* :mod:`~ocihook.request.sources` — where a request is written: ``process.env``, the
  bounding capabilities, the device mounts under ``/var/run/nvidia-container-devices``;
* :mod:`~ocihook.request.policy` — the operator's unprivileged policy and its messages;
* :mod:`~ocihook.request.nvidia` — ``NVIDIA_VISIBLE_DEVICES``, capabilities, MIG
  management, IMEX channels, the feature-gated sets: a :class:`~ocihook.request.nvidia.Request`;
* :mod:`~ocihook.request.drm` — ``AMD_VISIBLE_DEVICES`` and ``INTEL_VISIBLE_DEVICES``;
* :mod:`~ocihook.request.requirements` — the ``NVIDIA_REQUIRE_*`` constraints.

Parsing is pure; matching a request against the host's GPUs is the plan stage's
(:mod:`ocihook.plan.select`).
"""
