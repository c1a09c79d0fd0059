"""podman and CRI-O OCI hooks (``hooks.d``): the hook files read (:func:`read_hooks_d`)
and ocihook's written (:func:`configure_hooks_d`): hooks.d 1.0.0 documents
(containers/common ``pkg/hooks/docs/oci-hooks.5.md``), one hook each, run at the stages
the file names.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from .common import EngineConfig, Registration, decode_text, load_json, load_json_file, under_root

__all__ = [
    "DEFAULT_PATH",
    "HOOKS_D_DIRS",
    "HOOKS_D_STAGES",
    "configure_hooks_d",
    "hooks_d_document",
    "poststop_path",
    "read_hooks_d",
]

#: The prestart hooks.d file ``ocihook runtime configure --runtime podman`` writes.
DEFAULT_PATH = "/usr/share/containers/oci/hooks.d/ocihook-prestart.json"
#: The directories podman and CRI-O read hooks.d files from (their defaults).
HOOKS_D_DIRS = ("/usr/share/containers/oci/hooks.d", "/etc/containers/oci/hooks.d")

#: The OCI stages ocihook registers in hooks.d, one file each (a hooks.d 1.0.0 file has one
#: hook, run at each of its ``stages``): the injection, and the removal of what it made in
#: the rootfs (:mod:`ocihook.appliers.live.leftovers`).
HOOKS_D_STAGES = ("prestart", "poststop")


def hooks_d_document(
    python: str | None = None, stage: str = "prestart", *, sys_path: list[str] | None = None
) -> dict[str, Any]:
    """The hooks.d 1.0.0 document of ``packaging/hooks.d/ocihook-<stage>.json.in`` with
    ``@PYTHON@`` = ``python`` (default: this interpreter) and ``@SYSPATH@`` = ``sys_path``
    (default for this interpreter: :func:`~ocihook.config.options.start_path_dirs`):
    ``ocihook hook <stage>`` run for every container (``when.always``; it exits at once for
    those that ask for no GPU, or, at ``poststop``, have no record of what hook mode made),
    isolated and without ``site`` (``-I -S``, the directories named instead), with an
    explicit ``env`` and a timeout (containers/common ``pkg/hooks/docs/oci-hooks.5.md``).
    Another interpreter without ``sys_path`` runs with ``site`` (``-I`` alone), which
    finds ocihook in that interpreter's own directories.

    Raises:
        ValueError: ``stage`` is not one of :data:`HOOKS_D_STAGES`.
    """
    from ..config.options import HOOK_ENV, HOOK_PROGRAM, HOOK_TIMEOUT, hook_program

    if stage not in HOOKS_D_STAGES:
        raise ValueError(f"no hooks.d file for stage {stage!r}")
    python = python or sys.executable
    if python == sys.executable or sys_path is not None:
        command = [python, "-I", "-S", "-c", hook_program(sys_path)]
    else:
        command = [python, "-I", "-c", HOOK_PROGRAM]
    return {
        "version": "1.0.0",
        "hook": {
            "path": python,
            "args": [*command, "hook", stage],
            "env": list(HOOK_ENV),
            "timeout": HOOK_TIMEOUT,
        },
        "when": {"always": True},
        "stages": [stage],
    }


def configure_hooks_d(
    before: bytes | None, *, path: str, python: str | None = None, stage: str = "prestart"
) -> tuple[bytes, tuple[str, ...]]:
    """The hooks.d file of ``stage`` (:func:`hooks_d_document`). An existing file holding
    the same document keeps its bytes; another valid JSON document is replaced.

    Raises:
        EngineConfigError: the existing file is not JSON.
    """
    want = hooks_d_document(python, stage)
    text = decode_text(before, path)
    if text.strip():
        doc = load_json(text, path)
        if json.dumps(doc, sort_keys=True) == json.dumps(want, sort_keys=True) and before:
            return before, ()
    notes = (
        "podman reads hooks.d at each start; CRI-O reads the directory when it starts "
        "(its hooks_dir); the hook path must exist",
    )
    return (json.dumps(want, indent=2) + "\n").encode(), notes


def poststop_path(prestart: str) -> str:
    """Where the poststop hooks.d file goes beside the prestart one at ``prestart``: its
    name with ``prestart`` replaced by ``poststop`` (``ocihook-prestart.json`` ->
    ``ocihook-poststop.json``), or ``-poststop`` added before the extension
    (``gpu.json`` -> ``gpu-poststop.json``)."""
    directory, name = os.path.split(prestart)
    if "prestart" in name:
        head, _, tail = name.rpartition("prestart")
        return os.path.join(directory, f"{head}poststop{tail}")
    stem, ext = os.path.splitext(name)
    return os.path.join(directory, f"{stem}-poststop{ext}")


def read_hooks_d(root: str = "/") -> EngineConfig:
    """The hooks every ``*.json`` file of :data:`HOOKS_D_DIRS` (under ``root``)
    registers, in name order (a file without a ``hook.path`` string is read and
    registers nothing).

    Raises:
        EngineConfigError: a file is not valid JSON.
    """
    files: list[str] = []
    out: list[Registration] = []
    for d in HOOKS_D_DIRS:
        directory = under_root(root, d)
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue
        for name in names:
            if not name.endswith(".json"):
                continue
            path = os.path.join(directory, name)
            doc = load_json_file(path)
            files.append(path)
            hook = doc.get("hook") if isinstance(doc, dict) else None
            if isinstance(hook, dict) and isinstance(hook.get("path"), str):
                args = tuple(a for a in hook.get("args") or () if isinstance(a, str))
                out.append(Registration("podman", path, name, hook["path"], args))
    if not files:
        return EngineConfig("podman")
    facts = {"files": files, "hooks": {r.name: [r.path, *r.args] for r in out}}
    return EngineConfig("podman", tuple(files), tuple(out), facts)
