"""The CUDA version each NVIDIA driver branch supports, for when neither NVML nor the
driver's ``libcuda`` can say (a driver not loaded, an upgrade being planned).

The source is NVIDIA's CUDA Toolkit release notes, table "CUDA Toolkit and Corresponding
Driver Versions": each driver branch's releases report (``cuDriverGetVersion``,
``nvidia-smi``) the CUDA version listed here. Standard library only.
"""

from __future__ import annotations

__all__ = ["CUDA_BY_BRANCH", "cuda_for_driver"]

#: The CUDA version each driver branch supports (what ``cuDriverGetVersion`` and
#: ``nvidia-smi`` report for that branch's releases; NVIDIA CUDA Toolkit release notes,
#: "CUDA Toolkit and Corresponding Driver Versions"). A branch not listed takes the
#: highest listed branch below it.
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
)


def cuda_for_driver(version: str) -> str | None:
    """The CUDA version driver ``version`` (``"550.127.05"`` or ``"550"``) supports, as
    ``"12.4"``, from :data:`CUDA_BY_BRANCH` (a branch not listed takes the highest listed
    branch below it); ``None`` below the first branch or for a string that does not start
    with a decimal number."""
    head = version.split(".", 1)[0]
    if not (head.isascii() and head.isdigit()):
        return None
    major = int(head)
    found = None
    for branch, cuda in CUDA_BY_BRANCH:
        if branch <= major:
            found = cuda
    return found
