"""Host discovery: what the machine has, read through a :class:`~ocihook.hostroot.HostRoot`.

One backend per GPU vendor; NVIDIA is :mod:`ocihook.discovery.nvidia`.
"""
