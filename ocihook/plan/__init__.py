"""The plan stage: the container edits that give a container what it asked for.

Modules, each imported by its full path (this package imports none of them, so that the
start path loads only what it uses):

* :mod:`~ocihook.plan.edits` — the values: device nodes, cgroup rules, mounts, links,
  hooks, the ``/proc/driver/nvidia`` mask, :class:`~ocihook.plan.edits.ContainerEdits`
  and :class:`~ocihook.plan.edits.Plan`;
* :mod:`~ocihook.plan.select` — a request's GPUs among the host's;
* :mod:`~ocihook.plan.build` — :func:`~ocihook.plan.build.make_plan`,
  :func:`~ocihook.plan.build.make_drm_plan`, :func:`~ocihook.plan.build.merge_plans`;
* :mod:`~ocihook.plan.compat` — CUDA forward compatibility;
* :mod:`~ocihook.plan.procmask` — the ``/proc/driver/nvidia`` mask
  (:class:`~ocihook.plan.procmask.ProcMask`, also in :mod:`~ocihook.plan.edits`).

Computing a plan does no I/O; the appliers carry it out.
"""
