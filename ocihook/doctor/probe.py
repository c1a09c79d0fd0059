"""The CUDA probe ``ocihook doctor`` runs inside a container (its ``gpu`` layer).

This file is copied into the container's rootfs as ``/.ocihook-doctor/probe.py`` and run
there by the host's interpreter, mounted read-only (``python3 -S -B``): it may import
only the standard library, and nothing of ocihook. Through :mod:`ctypes` it calls the CUDA
driver API of the ``libcuda.so.1`` the container's ``ld.so.cache`` finds (the one ocihook
mounted): ``cuInit``, the driver's CUDA version, the device count, the first device's
name and UUID, a context, 64 MiB of device memory written, incremented by a PTX kernel
the driver JIT-compiles, and read back (CUDA Driver API reference).

It prints one line, ``PROBE `` and a JSON object: ``{"ok": true, "stage": "done", ...}``
with ``cudaVersion``, ``devices``, ``name``, ``uuid``, ``bytes`` and ``wrongWords``, or
``{"ok": false, "stage": <the call that failed>, "error": ...}``; the exit status is 0
when ``ok``, else 1. Importing it runs nothing.
"""

from __future__ import annotations

import ctypes
import json
import sys
from typing import Any, NoReturn

#: 32-bit words copied to the device and back (64 MiB).
WORDS = 1 << 24

#: The kernel: ``p[i] += 1`` for ``i < n`` (PTX ISA 6.0, sm_50, 64-bit addresses).
PTX = (
    b".version 6.0\n.target sm_50\n.address_size 64\n"
    b".visible .entry inc(.param .u64 p, .param .u32 n) {\n"
    b" .reg .pred %p; .reg .b32 %r<7>; .reg .b64 %rd<5>;\n"
    b" ld.param.u64 %rd1, [p]; ld.param.u32 %r1, [n];\n"
    b" mov.u32 %r2, %ctaid.x; mov.u32 %r3, %ntid.x; mov.u32 %r4, %tid.x;\n"
    b" mad.lo.s32 %r5, %r2, %r3, %r4; setp.ge.u32 %p, %r5, %r1; @%p bra DONE;\n"
    b" cvta.to.global.u64 %rd2, %rd1; mul.wide.u32 %rd3, %r5, 4; add.s64 %rd4, %rd2, %rd3;\n"
    b" ld.global.u32 %r6, [%rd4]; add.s32 %r6, %r6, 1; st.global.u32 [%rd4], %r6;\n"
    b"DONE: ret; }\n\0"
)


def main() -> NoReturn:
    """Run the probe (see the module docstring); prints its result and exits."""
    out: dict[str, Any] = {"ok": False, "python": sys.version.split()[0]}

    def done() -> NoReturn:
        print("PROBE " + json.dumps(out))
        sys.exit(0 if out["ok"] else 1)

    def call(stage: str, fn: Any, *args: Any) -> None:
        r = fn(*args)
        if r != 0:
            out.update(stage=stage, error=f"CUresult {r}")
            done()

    try:
        cu = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        out.update(stage="dlopen", error=str(exc))
        done()

    def sym(*names: str) -> Any:
        for n in names:
            try:
                return getattr(cu, n)
            except AttributeError:
                pass
        out.update(stage="symbols", error="no " + names[0])
        done()

    c_int, byref, c_uint64, c_void_p = ctypes.c_int, ctypes.byref, ctypes.c_uint64, ctypes.c_void_p
    call("cuInit", sym("cuInit"), 0)
    v = c_int()
    call("cuDriverGetVersion", sym("cuDriverGetVersion"), byref(v))
    out["cudaVersion"] = f"{v.value // 1000}.{(v.value % 1000) // 10}"
    n = c_int()
    call("cuDeviceGetCount", sym("cuDeviceGetCount"), byref(n))
    out["devices"] = n.value
    dev = c_int()
    call("cuDeviceGet", sym("cuDeviceGet"), byref(dev), 0)
    name = ctypes.create_string_buffer(256)
    call("cuDeviceGetName", sym("cuDeviceGetName"), name, 256, dev)
    out["name"] = name.value.decode(errors="replace")
    raw = ctypes.create_string_buffer(16)
    call("cuDeviceGetUuid", sym("cuDeviceGetUuid_v2", "cuDeviceGetUuid"), raw, dev)
    h = raw.raw.hex()
    out["uuid"] = f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
    ctx = c_void_p()
    call("cuCtxCreate", sym("cuCtxCreate_v2", "cuCtxCreate"), byref(ctx), 0, dev)
    words = WORDS
    size = words * 4
    ptr = c_uint64()
    alloc = sym("cuMemAlloc_v2")
    alloc.argtypes = [ctypes.POINTER(c_uint64), ctypes.c_size_t]
    call("cuMemAlloc", alloc, byref(ptr), size)
    host = (ctypes.c_uint32 * words)()
    for i in range(0, words, 4096):
        host[i] = 0x5A5A0000 + i
    htod = sym("cuMemcpyHtoD_v2")
    htod.argtypes = [c_uint64, c_void_p, ctypes.c_size_t]
    call("cuMemcpyHtoD", htod, ptr.value, ctypes.addressof(host), size)
    mod = c_void_p()
    call("cuModuleLoadData", sym("cuModuleLoadData"), byref(mod), PTX)
    fn = c_void_p()
    call("cuModuleGetFunction", sym("cuModuleGetFunction"), byref(fn), mod, b"inc")
    p_arg = c_uint64(ptr.value)
    n_arg = ctypes.c_uint32(words)
    params = (c_void_p * 2)(ctypes.addressof(p_arg), ctypes.addressof(n_arg))
    launch = sym("cuLaunchKernel")
    launch.argtypes = [c_void_p] + [ctypes.c_uint] * 7 + [c_void_p, c_void_p, c_void_p]
    blocks = (words + 255) // 256
    call(
        "cuLaunchKernel", launch, fn, blocks, 1, 1, 256, 1, 1, 0, None,
        ctypes.cast(params, c_void_p), None,
    )  # fmt: skip
    call("cuCtxSynchronize", sym("cuCtxSynchronize"))
    back = (ctypes.c_uint32 * words)()
    dtoh = sym("cuMemcpyDtoH_v2")
    dtoh.argtypes = [c_void_p, c_uint64, ctypes.c_size_t]
    call("cuMemcpyDtoH", dtoh, ctypes.addressof(back), ptr.value, size)
    wrong = sum(1 for i in range(0, words, 4096) if back[i] != 0x5A5A0001 + i)
    wrong += sum(1 for i in range(1, words, 4099) if i % 4096 and back[i] != 1)
    free = sym("cuMemFree_v2")
    free.argtypes = [c_uint64]
    call("cuMemFree", free, ptr.value)
    out.update(ok=wrong == 0, stage="done", wrongWords=wrong, bytes=size)
    if wrong:
        out["error"] = f"{wrong} words read back wrong"
    done()


if __name__ == "__main__":
    main()
