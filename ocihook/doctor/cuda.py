"""The CUDA version each NVIDIA driver branch supports, for when neither NVML nor the
driver's ``libcuda`` can say (a driver not loaded, an upgrade being planned).

The table is :data:`ocihook.core.cudaversion.CUDA_BY_BRANCH`, the one discovery uses
too; this module names it for doctor's checks.
"""

from __future__ import annotations

from ..core.cudaversion import CUDA_BY_BRANCH, SOURCE_WORDS, cuda_for_driver

__all__ = ["CUDA_BY_BRANCH", "SOURCE_WORDS", "cuda_for_driver"]
