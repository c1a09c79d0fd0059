"""``ocihook install docker-hook``: put ocihook's ``nvidia-container-runtime-hook`` where
dockerd finds it.

dockerd (20.10 and later) enables ``docker run --gpus`` and compose's
``deploy.resources.reservations.devices`` with ``driver: nvidia`` only when an executable
named ``nvidia-container-runtime-hook`` is on its ``PATH`` when it starts; it registers
that file, as found, as each GPU container's prestart hook (moby
``daemon/nvidia_linux.go``). pip installs ocihook's console script of that name
(:func:`ocihook._main.nvidia_hook_main`) into the environment's ``bin`` directory, which
is not on dockerd's ``PATH``; this command writes a small script into a directory that is
(``/usr/local/bin`` by default), running this installation's interpreter in isolated mode
(``-I``: no ``PYTHON*`` variable from dockerd's environment is honoured, no user site).

The NVIDIA Container Toolkit installs its own ``nvidia-container-runtime-hook`` (in
``/usr/bin``). ocihook never replaces it silently: a file of that name that is not
ocihook's, in the target directory or anywhere else on the search path, is refused
(:class:`~ocihook.core.errors.EngineConfigError`, exit 13) unless ``force`` is given —
dockerd would run whichever comes first on its ``PATH``.
"""

from __future__ import annotations

import os
import sys

from ..core.errors import EngineConfigError

__all__ = [
    "DEFAULT_BIN_DIR",
    "HOOK_NAME",
    "MARKER",
    "SEARCH_PATH",
    "find_hooks",
    "install_docker_hook",
    "is_ocihook_hook",
    "remove_docker_hook",
    "script_text",
]

#: The executable dockerd looks for (moby ``daemon/nvidia_linux.go``).
HOOK_NAME = "nvidia-container-runtime-hook"
#: Where ``install_docker_hook`` writes by default: first on systemd's default ``PATH``.
DEFAULT_BIN_DIR = "/usr/local/bin"
#: Directories searched for other hooks of that name, besides this process's ``PATH``
#: (systemd's default ``PATH``, which dockerd's unit inherits).
SEARCH_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
#: The second line of the script this module writes; how it recognises its own files.
MARKER = "# ocihook: nvidia-container-runtime-hook for dockerd's --gpus"


def script_text(python: str) -> str:
    """The hook script for the interpreter ``python`` (an absolute path): a ``#!`` line
    running it with ``-I``, :data:`MARKER`, and the call of
    :func:`ocihook._main.run_nvidia_hook`.

    Raises:
        EngineConfigError: ``python`` is not absolute or holds a blank or newline (a
            ``#!`` line cannot carry it).
    """
    if not python.startswith("/") or any(c.isspace() for c in python):
        raise EngineConfigError(
            "the interpreter must be an absolute path without blanks",
            field="--python",
            value=python,
        )
    return (
        f"#!{python} -I\n"
        f"{MARKER} (ocihook install docker-hook)\n"
        "try:\n"
        "    from ocihook._main import run_nvidia_hook\n"
        "except ImportError:  # an ocihook older than this script\n"
        "    import sys\n"
        "    from ocihook._main import nvidia_hook_main\n"
        "\n"
        "    def run_nvidia_hook():\n"
        "        sys.exit(nvidia_hook_main())\n"
        "\n"
        "\n"
        "run_nvidia_hook()\n"
    )


def is_ocihook_hook(path: str) -> bool:
    """Whether the file at ``path`` (links followed) is one of ocihook's hooks: a script
    written by :func:`install_docker_hook` or pip's console script calling
    ``ocihook._main``. An unreadable or missing file is not."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return MARKER.encode() in head or any(
        b"from ocihook._main import " + name in head
        for name in (b"run_nvidia_hook", b"nvidia_hook_main")
    )


def find_hooks(search: tuple[str, ...] | None = None) -> list[str]:
    """Every executable named :data:`HOOK_NAME` in the directories of ``search`` (default:
    this process's ``PATH`` then :data:`SEARCH_PATH`), each real file once, in search
    order (as links to it are found)."""
    dirs = search
    if dirs is None:
        path_dirs = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d]
        dirs = tuple(dict.fromkeys([*path_dirs, *SEARCH_PATH]))
    found: list[str] = []
    seen: set[str] = set()
    for d in dirs:
        candidate = os.path.join(d, HOOK_NAME)
        if not (os.path.isfile(candidate) and os.access(candidate, os.X_OK)):
            continue
        real = os.path.realpath(candidate)
        if real not in seen:
            seen.add(real)
            found.append(candidate)
    return found


def install_docker_hook(
    bin_dir: str = DEFAULT_BIN_DIR,
    *,
    python: str | None = None,
    force: bool = False,
    dry_run: bool = False,
    search: tuple[str, ...] | None = None,
) -> tuple[str, bool, list[str]]:
    """Write :func:`script_text` to ``bin_dir/nvidia-container-runtime-hook`` (mode 0755,
    atomically; the directory is created 0755 when missing).

    Args:
        bin_dir: a directory on dockerd's ``PATH``.
        python: the interpreter with ocihook installed (default :data:`sys.executable`).
        force: replace a file there that is not ocihook's, and install although another
            hook of that name is on the search path.
        dry_run: check and report, write nothing.
        search: directories searched for other hooks (default: see :func:`find_hooks`).

    Returns:
        ``(path, changed, notes)``: the file, whether it was (or, with ``dry_run``, would
        be) written, and lines for the user.

    Raises:
        EngineConfigError: a hook that is not ocihook's is in the way (without ``force``),
            or the file cannot be written.
    """
    target = os.path.join(os.path.abspath(bin_dir), HOOK_NAME)
    text = script_text(python or sys.executable)
    notes: list[str] = []
    exists = os.path.lexists(target)
    if exists and not is_ocihook_hook(target):
        if not force:
            raise EngineConfigError(
                "a nvidia-container-runtime-hook that is not ocihook's is installed here "
                "(the NVIDIA Container Toolkit's?); not replaced",
                path=target,
                hint="uninstall it first, or pass --force to replace it",
            )
        notes.append(f"replaced {target}, which was not ocihook's")
    others = [
        p
        for p in find_hooks(search)
        if os.path.realpath(p) != os.path.realpath(target) and not is_ocihook_hook(p)
    ]
    if others:
        if not force:
            raise EngineConfigError(
                "another nvidia-container-runtime-hook is installed (the NVIDIA Container "
                "Toolkit's?): dockerd runs whichever comes first on its PATH",
                path=others[0],
                hint="uninstall it first, or pass --force to install ocihook's beside it",
            )
        notes.append(
            "other hooks of that name: " + ", ".join(others) + "; dockerd runs the first "
            "on its PATH"
        )
    try:
        with open(target, encoding="utf-8") as f:
            unchanged = f.read() == text and not os.path.islink(target)
    except (OSError, UnicodeDecodeError):
        unchanged = False
    if unchanged:
        return target, False, notes
    if not dry_run:
        from ..oci.bundle import write_bytes_atomic

        try:
            os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
            write_bytes_atomic(target, text.encode(), new_mode=0o755)
            os.chmod(target, 0o755)
        except OSError as e:
            raise EngineConfigError(f"cannot write: {e.strerror}", path=target) from None
    notes.append(
        "dockerd looks for nvidia-container-runtime-hook when it starts: restart it "
        "(systemctl restart docker)"
    )
    return target, True, notes


def remove_docker_hook(bin_dir: str = DEFAULT_BIN_DIR, *, dry_run: bool = False) -> bool:
    """Remove ``bin_dir/nvidia-container-runtime-hook`` when it is ocihook's. Returns
    whether there was one.

    Raises:
        EngineConfigError: the file there is not ocihook's (it is left alone), or cannot be
            removed.
    """
    target = os.path.join(os.path.abspath(bin_dir), HOOK_NAME)
    if not os.path.lexists(target):
        return False
    if not is_ocihook_hook(target):
        raise EngineConfigError(
            "this nvidia-container-runtime-hook is not ocihook's; left alone", path=target
        )
    if not dry_run:
        try:
            os.unlink(target)
        except OSError as e:
            raise EngineConfigError(f"cannot remove: {e.strerror}", path=target) from None
    return True
