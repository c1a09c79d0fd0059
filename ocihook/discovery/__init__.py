"""Host discovery: what the machine has, read through a :class:`~ocihook.core.hostroot.HostRoot`.

One backend per GPU vendor: NVIDIA is :mod:`ocihook.discovery.nvidia`; AMD (ROCm) and
Intel (i915/xe) are :mod:`ocihook.discovery.amd` and :mod:`ocihook.discovery.intel`, which
share the vendor-neutral records of :mod:`ocihook.discovery.drm`.
"""
