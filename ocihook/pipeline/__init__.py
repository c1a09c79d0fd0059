"""The pipeline: discovery, request and plan run together for a bundle.

Modules, each imported by its full path (this package imports none of them, so that the
start path loads only what it uses):

* :mod:`~ocihook.pipeline.bundle` — :func:`~ocihook.pipeline.bundle.plan_for_bundle` and
  what it reads of the image;
* :mod:`~ocihook.pipeline.extras` — the host nodes and mounts a request asks for beyond
  GPUs;
* :mod:`~ocihook.pipeline.cdinames` — the CDI devices a container names.
"""
