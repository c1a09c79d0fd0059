"""Driver ``libcuda`` files with a CUDA note: :func:`cuda_note` (the
``.note.cuda.fwd_compatibility`` contents), :func:`gcc_libcuda` (a real shared object
made by ``gcc`` and ``objcopy --add-section``) and :func:`put_libcuda` (it, in place of a
simulated host's 64-bit ``libcuda``)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from ocihook.core.hostroot import HostRoot
from ocihook.discovery.nvidia import discover
from ocihook.sim.elfwrite import pack_note

#: The section NVIDIA's libcuda carries its CUDA and driver-branch facts in.
CUDA_NOTE_SECTION = ".note.cuda.fwd_compatibility"


def cuda_note(cuda: str, drivers: list[int]) -> bytes:
    """The section's contents: one note of owner ``NVIDIA Corporation`` whose JSON
    descriptor has ``cuda`` as ``"CUDA Version"`` and ``drivers`` as ``"Driver"``."""
    desc = {"Format": 1, "CUDA Version": cuda, "Driver": drivers, "Device": [1, 2, 7]}
    return pack_note(b"NVIDIA Corporation", 1, json.dumps(desc).encode())


def gcc_libcuda(work: Path, note: bytes | None) -> bytes:
    """The bytes of a ``gcc -shared`` library with SONAME ``libcuda.so.1`` and, when
    ``note`` is given, that section added by ``objcopy --add-section`` (SHT_NOTE, as
    ``readelf -S`` confirms). Skips the test without gcc or objcopy."""
    gcc, objcopy = shutil.which("gcc"), shutil.which("objcopy")
    if gcc is None or objcopy is None:
        pytest.skip("needs gcc and objcopy (apt-get install gcc binutils)")
    work.mkdir(parents=True, exist_ok=True)
    src = work / "cuda.c"
    src.write_text("int cuDriverGetVersion(int *v) { *v = 13010; return 0; }\n")
    so = work / "libcuda.so"
    cmd = [gcc, "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(so), str(src)]
    subprocess.run(cmd, check=True)
    if note is not None:
        blob = work / "note.bin"
        blob.write_bytes(note)
        add = [objcopy, "--add-section", f"{CUDA_NOTE_SECTION}={blob}"]
        flags = ["--set-section-flags", f"{CUDA_NOTE_SECTION}=noload,readonly"]
        subprocess.run([*add, *flags, str(so)], check=True)
        listing = subprocess.run(
            ["readelf", "-S", "-W", str(so)], capture_output=True, text=True, check=True
        ).stdout
        row = next(line for line in listing.splitlines() if CUDA_NOTE_SECTION in line)
        assert " NOTE " in row, row
    return so.read_bytes()


def put_libcuda(root: HostRoot, work: Path, note: bytes | None) -> str:
    """Replace the 64-bit ``libcuda`` discovery finds under ``root`` by :func:`gcc_libcuda`
    of ``note`` (built in ``work``); returns its host path."""
    lib = next(
        lib
        for lib in discover(root, capabilities=["compute"]).libraries
        if lib.soname == "libcuda.so.1" and lib.elf_class == 64
    )
    Path(lib.host_path).write_bytes(gcc_libcuda(work, note))
    return lib.host_path
