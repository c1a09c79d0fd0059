"""Appliers: turn a :class:`~ocihook.plan.edits.Plan` into changes.

* :mod:`ocihook.appliers.spec` edits a bundle's ``config.json`` before the runtime creates
  the container (spec mode);
* :mod:`ocihook.appliers.live` changes a container being created, from an OCI hook
  (hook mode).
"""
