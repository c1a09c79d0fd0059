"""Layer 2, **runtime**: hooks registered where the image's environment reaches them.

A hook registered without ``env`` at ``createContainer`` or ``startContainer`` is run by
runc with the container's ``process.env`` (seen here with runc 1.1.5; the OCI
runtime-spec leaves a hook's environment without ``env`` unspecified): the image's
``LD_PRELOAD`` then runs inside that host program as root before its first instruction
(CVE-2025-23266), and nothing the program does afterwards can undo it. This module finds
such registrations wherever doctor can read them — the hooks.d files podman and CRI-O
read, and the ``config.json`` of a bundle doctor is pointed at — and flags them: FAIL
for ocihook's own (it refuses to run so: exit 9), WARN for another program's.

It also tells the interpreter the installed commands start (:func:`installed_script_python`):
``packaging/bin``'s scripts are ``#!/bin/sh`` files that run the ``python3`` beside them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ..core.errors import OcihookError
from ..core.records import Record
from ..engines import HOOKS_D_DIRS
from ..engines.common import load_json_file
from .context import Context
from .report import Check

__all__ = [
    "EXPOSED_STAGES",
    "SCRIPT_EXEC",
    "SCRIPT_EXEC_SITE",
    "SCRIPT_HEAD",
    "UnsafeHook",
    "check_registrations",
    "hooks_d_without_env",
    "hooks_without_env",
    "installed_script_python",
]

#: The OCI hook stages whose hooks, registered without ``env``, run with the container's
#: ``process.env`` (runc runs them from its init process, whose environment that is).
EXPOSED_STAGES = ("createContainer", "startContainer")

#: How the installed commands (``packaging/bin``) begin: a ``#!/bin/sh`` line, then the
#: line that opens a string for Python and is ``:`` for sh.
SCRIPT_HEAD = "#!/bin/sh\n''':'\n"
#: The line of those scripts that starts the interpreter beside them, isolated and
#: without ``site`` (the script runs it when needed).
SCRIPT_EXEC = 'exec "$d/python3" -I -S "$0" "$@"'
#: The same line in the scripts of ocihook 0.1.0, which kept ``site``.
SCRIPT_EXEC_SITE = 'exec "$d/python3" -I "$0" "$@"'

_FIX = (
    'give the hook an explicit env (for example "env": ["PATH=/usr/local/sbin:/usr/local/bin:'
    '/usr/sbin:/usr/bin:/sbin:/bin"]), as ocihook runtime configure writes it'
)


def installed_script_python(path: str, head: str) -> str | None:
    """The interpreter an installed ocihook command at ``path`` (whose first bytes are
    ``head``) starts: the ``python3`` in the directory of ``path`` (as the engine names
    it, links not followed: sh takes it from ``$0``). ``None`` for any other file."""
    if not head.startswith(SCRIPT_HEAD):
        return None
    if SCRIPT_EXEC not in head and SCRIPT_EXEC_SITE not in head:
        return None
    return os.path.join(os.path.dirname(path) or ".", "python3")


class UnsafeHook(Record):
    """A hook registered without ``env`` at a stage of :data:`EXPOSED_STAGES`.

    Attributes:
        file: the file that registers it (a hooks.d file, a ``config.json``).
        stage: the OCI stage.
        path: the program.
        args: its arguments.
    """

    file: str
    stage: str
    path: str
    args: tuple[str, ...] = ()

    @property
    def is_ocihook(self) -> bool:
        """The hook runs ocihook (its program or an argument names it)."""
        return "ocihook" in os.path.basename(self.path) or any("ocihook" in a for a in self.args)


def _no_env(hook: Mapping[str, Any]) -> bool:
    """A hook entry has no ``env`` (absent or ``null``; an empty list is an empty
    environment, which runc gives as such)."""
    return hook.get("env") is None


def _strings(value: Any) -> list[str]:
    return [a for a in value if isinstance(a, str)] if isinstance(value, list) else []


def hooks_without_env(doc: Any, file: str) -> list[UnsafeHook]:
    """The hooks of an OCI ``config.json`` document (``doc``, read from ``file``) at the
    stages of :data:`EXPOSED_STAGES` without ``env`` (runtime-spec ``config.md``,
    "POSIX-platform Hooks"); ``[]`` for a document without ``hooks``."""
    hooks = doc.get("hooks") if isinstance(doc, dict) else None
    if not isinstance(hooks, dict):
        return []
    found: list[UnsafeHook] = []
    for stage in EXPOSED_STAGES:
        entries = hooks.get(stage)
        for hook in entries if isinstance(entries, list) else ():
            if isinstance(hook, dict) and isinstance(hook.get("path"), str) and _no_env(hook):
                found.append(
                    UnsafeHook(file, stage, hook["path"], tuple(_strings(hook.get("args"))))
                )
    return found


def hooks_d_without_env(doc: Any, file: str) -> list[UnsafeHook]:
    """The hook of a hooks.d 1.0.0 document (``doc``, read from ``file``), once per stage
    of :data:`EXPOSED_STAGES` it names, when it has no ``env`` (containers/common
    ``pkg/hooks/docs/oci-hooks.5.md``: podman and CRI-O put ``hook`` into
    ``config.json`` as it is)."""
    if not isinstance(doc, dict):
        return []
    hook = doc.get("hook")
    stages = _strings(doc.get("stages"))
    if not isinstance(hook, dict) or not isinstance(hook.get("path"), str) or not _no_env(hook):
        return []
    args = tuple(_strings(hook.get("args")))
    return [UnsafeHook(file, s, hook["path"], args) for s in EXPOSED_STAGES if s in stages]


def _check(found: list[UnsafeHook]) -> list[Check]:
    checks = []
    for hook in found:
        whose = "ocihook's hook" if hook.is_ocihook else f"hook {hook.path}"
        outcome = (
            "ocihook refuses to run so (exit 9, error[container-environment]): containers fail "
            "to start"
            if hook.is_ocihook
            else "the image's LD_PRELOAD runs inside it as root before it starts"
        )
        checks.append(
            Check(
                "runtime",
                f"hook registration {hook.file}",
                "FAIL" if hook.is_ocihook else "WARN",
                f"{whose} at {hook.stage} has no env: runc runs it with the container's "
                f"process.env, chosen by the image; {outcome}",
                _FIX,
            )
        )
    return checks


def check_registrations(ctx: Context, bundle: str | None = None) -> list[Check]:
    """Layer 2: every hook registered without ``env`` at a stage of
    :data:`EXPOSED_STAGES` in the hooks.d files (:data:`ocihook.engines.HOOKS_D_DIRS`
    under the config root; a file that is not JSON is left to the podman check) and in
    ``<bundle>/config.json``: one FAIL (ocihook's) or WARN (another program's) each. One
    PASS saying what was read when nothing is flagged; nothing when nothing was read."""
    found: list[UnsafeHook] = []
    files = hooks = 0
    for d in HOOKS_D_DIRS:
        directory = ctx.etc(d)
        try:
            names = sorted(n for n in os.listdir(directory) if n.endswith(".json"))
        except OSError:
            continue
        for name in names:
            path = os.path.join(directory, name)
            try:
                doc = load_json_file(path)
            except OcihookError:
                continue
            if doc is None:
                continue
            files += 1
            hooks += 1
            found += hooks_d_without_env(doc, path)
    if bundle is not None:
        path = os.path.join(bundle, "config.json")
        try:
            doc = load_json_file(path)
        except OcihookError:
            doc = None  # the request check reports the bundle
        if doc is not None:
            files += 1
            stages = doc.get("hooks") if isinstance(doc, dict) else None
            if isinstance(stages, dict):
                hooks += sum(len(v) for v in stages.values() if isinstance(v, list))
            found += hooks_without_env(doc, path)
    if found:
        return _check(found)
    if not files:
        return []
    return [
        Check(
            "runtime",
            "hook registrations",
            "PASS",
            f"{hooks} hook(s) in {files} file(s): none at {' or '.join(EXPOSED_STAGES)} "
            "without an explicit env",
        )
    ]
