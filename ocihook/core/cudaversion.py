"""The CUDA version an NVIDIA driver supports, when neither NVML nor the driver's
``libcuda`` can say: the driver-branch table, and the names of the sources a host's CUDA
version can come from.

The table's source is NVIDIA's CUDA Toolkit release notes, table "CUDA Toolkit and
Corresponding Driver Versions", and what each branch's releases report
(``cuDriverGetVersion``, ``nvidia-smi``). Discovery
(:func:`ocihook.discovery.nvidia.discover`) falls back on it, and ``ocihook doctor`` uses
it to judge a driver it is not running. Standard library only, no imports: this module
is on the start path of a container whose host is not in the discovery cache.
"""

from __future__ import annotations

__all__ = [
    "CUDA_BY_BRANCH",
    "SOURCE_DRIVER_BRANCH",
    "SOURCE_ELF_NOTE",
    "SOURCE_NVML",
    "SOURCE_WORDS",
    "cuda_for_driver",
]

#: The CUDA version each driver branch supports (what ``cuDriverGetVersion`` and
#: ``nvidia-smi`` report for that branch's releases; NVIDIA CUDA Toolkit release notes,
#: "CUDA Toolkit and Corresponding Driver Versions"). A branch between two listed ones
#: takes the lower one's version; a branch above the last one listed is not known.
CUDA_BY_BRANCH: tuple[tuple[int, str], ...] = (
    (418, "10.1"),
    (440, "10.2"),
    (450, "11.0"),
    (455, "11.1"),
    (460, "11.2"),
    (465, "11.3"),
    (470, "11.4"),
    (495, "11.5"),
    (510, "11.6"),
    (515, "11.7"),
    (520, "11.8"),
    (525, "12.0"),
    (530, "12.1"),
    (535, "12.2"),
    (545, "12.3"),
    (550, "12.4"),
    (555, "12.5"),
    (560, "12.6"),
    (565, "12.7"),
    (570, "12.8"),
    (575, "12.9"),
    (580, "13.0"),
    (590, "13.1"),
)

#: Where a host's CUDA version came from (``NvidiaHost.cuda_source``): NVML's
#: ``nvmlSystemGetCudaDriverVersion``; the ``"CUDA Version"`` of the driver's
#: ``libcuda.so`` note ``.note.cuda.fwd_compatibility``; :data:`CUDA_BY_BRANCH`.
SOURCE_NVML = "nvml"
SOURCE_ELF_NOTE = "elf-note"
SOURCE_DRIVER_BRANCH = "driver-branch"
#: Each source in words, for people (``ocihook info``, doctor).
SOURCE_WORDS = {
    SOURCE_NVML: "NVML",
    SOURCE_ELF_NOTE: "libcuda ELF note",
    SOURCE_DRIVER_BRANCH: "driver-branch table",
}


def cuda_for_driver(version: str) -> str | None:
    """The CUDA version driver ``version`` supports, by its branch.

    Args:
        version: a driver version, ``"550.127.05"``, or a branch, ``"550"``.

    Returns:
        ``"12.4"``: the version of the highest branch of :data:`CUDA_BY_BRANCH` at or below
        ``version``'s branch. ``None`` when that branch is below the first listed or above
        the last listed (a newer driver than the table knows: its CUDA version is not
        guessed), or when ``version`` does not start with a decimal number.
    """
    head = version.split(".", 1)[0]
    if not (head.isascii() and head.isdigit()) or len(head) > 9:
        return None
    major = int(head)
    if major > CUDA_BY_BRANCH[-1][0]:
        return None
    found = None
    for branch, cuda in CUDA_BY_BRANCH:
        if branch <= major:
            found = cuda
    return found
