"""The bench's own CUDA kernels (CUDA C++ sources) and their run-time compilation with NVRTC.

Four kernels, written for this project from the facts in shared/reference/green-contexts.md
("Kernel-writing notes"):

- ``pdmux_read_bw``: a pure read of a buffer. 16-byte loads (``uint4``), ``READ_UNROLL`` independent
  loads in flight per thread, a non-persistent grid sized by the data (``read_grid_blocks``) so it
  adapts to any partition, and the loaded values folded into one word that is stored only when it
  equals a run-time ``magic`` value, so the compiler cannot drop the loads. Bytes moved per launch:
  the buffer size, counted once. Each block's thread 0 also folds ``%globaltimer`` (ns) at the
  block's start into ``times[0]`` (``atomicMin``) and, after a barrier that follows every load of the
  block, at its end into ``times[1]`` (``atomicMax``): the launch's first start and last end, which
  prove (or disprove) that the read ran at the same time as the GEMM. One fire-and-forget atomic
  per 32 KiB block and per end.
- ``pdmux_mark``: one thread storing ``%globaltimer`` (ns) to ``*out``: the marker queued before and
  after each unit of GEMMs on the GEMM stream, bounding when they ran.
- ``pdmux_smid``: each block reads ``%smid`` (the SM it runs on) and writes it to ``out[blockIdx.x]``
  after spinning ``spin_ns`` nanoseconds, so blocks stay resident and spread over every SM the
  context may use. The set of values proves two partitions disjoint and no larger than granted.
- ``pdmux_spin``: one thread spinning ``ns`` nanoseconds (``%globaltimer``): the start gate that
  holds both co-run streams until all their work is queued.

Compilation: ``cuda.bindings.nvrtc`` (the ``nvidia-cuda-nvrtc`` wheel; works without a GPU or driver).
Imports of cuda-python happen inside the functions, so this module is importable anywhere.
"""

from __future__ import annotations

from ..util.errors import DeviceError, InputError

#: Threads per block of the read kernel.
READ_BLOCK = 256
#: Independent 16-byte loads in flight per thread of the read kernel.
READ_UNROLL = 8
#: Bytes one thread block of the read kernel reads (256 threads x 8 loads x 16 bytes = 32 KiB).
READ_BYTES_PER_BLOCK = READ_BLOCK * READ_UNROLL * 16
#: Bytes per load of the read kernel (uint4).
READ_VECTOR_BYTES = 16

#: Threads per block and spin time of the SM-id kernel; blocks per SM of the device launched.
SMID_BLOCK = 64
SMID_SPIN_NS = 20_000
SMID_BLOCKS_PER_SM = 8

READ_SOURCE = r"""
#define PDMUX_UNROLL @UNROLL@
__device__ __forceinline__ unsigned long long pdmux_read_timer_ns()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

extern "C" __global__ void __launch_bounds__(@BLOCK@)
pdmux_read_bw(const uint4* __restrict__ data, unsigned long long n_vec,
              unsigned int* __restrict__ out, unsigned int magic,
              unsigned long long* __restrict__ times)
{
    if (threadIdx.x == 0) {
        atomicMin(&times[0], pdmux_read_timer_ns());
    }
    const unsigned long long first =
        (unsigned long long)blockIdx.x * (unsigned long long)(blockDim.x * PDMUX_UNROLL) + threadIdx.x;
    unsigned int acc = 0u;
    if (first + (unsigned long long)(PDMUX_UNROLL - 1) * blockDim.x < n_vec) {
        uint4 v[PDMUX_UNROLL];
#pragma unroll
        for (int k = 0; k < PDMUX_UNROLL; ++k) {
            v[k] = __ldg(data + first + (unsigned long long)k * blockDim.x);
        }
#pragma unroll
        for (int k = 0; k < PDMUX_UNROLL; ++k) {
            acc ^= v[k].x ^ v[k].y ^ v[k].z ^ v[k].w;
        }
    } else {
        for (int k = 0; k < PDMUX_UNROLL; ++k) {
            const unsigned long long i = first + (unsigned long long)k * blockDim.x;
            if (i < n_vec) {
                const uint4 x = __ldg(data + i);
                acc ^= x.x ^ x.y ^ x.z ^ x.w;
            }
        }
    }
    if (acc == magic) {
        out[0] = acc;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        atomicMax(&times[1], pdmux_read_timer_ns());
    }
}
""".replace("@UNROLL@", str(READ_UNROLL)).replace("@BLOCK@", str(READ_BLOCK))

SMID_SOURCE = r"""
__device__ __forceinline__ unsigned long long pdmux_globaltimer_ns()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

extern "C" __global__ void pdmux_smid(unsigned int* __restrict__ out, unsigned long long spin_ns)
{
    unsigned int smid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    if (threadIdx.x == 0) {
        const unsigned long long start = pdmux_globaltimer_ns();
        while (pdmux_globaltimer_ns() - start < spin_ns) { }
        out[blockIdx.x] = smid;
    }
}
"""

SPIN_SOURCE = r"""
extern "C" __global__ void pdmux_spin(unsigned long long ns)
{
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}
"""

MARK_SOURCE = r"""
extern "C" __global__ void pdmux_mark(unsigned long long* __restrict__ out)
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        *out = t;
    }
}
"""

#: Kernel name -> CUDA C++ source (each compiles on its own; :func:`all_sources` joins them).
KERNELS: dict[str, str] = {
    "pdmux_read_bw": READ_SOURCE,
    "pdmux_smid": SMID_SOURCE,
    "pdmux_spin": SPIN_SOURCE,
    "pdmux_mark": MARK_SOURCE,
}


def all_sources() -> str:
    """Every kernel in one translation unit (one NVRTC program, one loaded library)."""
    return "\n".join(KERNELS.values())


def read_grid_blocks(buffer_bytes: int) -> int:
    """Blocks of the read kernel for ``buffer_bytes`` (sized by the data, not by the SM count).

    Raises :class:`InputError` when the buffer is smaller than one 16-byte vector.
    """
    n_vec = buffer_bytes // READ_VECTOR_BYTES
    if n_vec <= 0:
        raise InputError(f"read buffer of {buffer_bytes} bytes is smaller than one 16-byte load")
    per_block = READ_BLOCK * READ_UNROLL
    return -(-n_vec // per_block)


# --------------------------------------------------------------------------------------------------
# NVRTC
# --------------------------------------------------------------------------------------------------


def _nvrtc():
    """``cuda.bindings.nvrtc`` with its shared library found; :class:`DeviceError` otherwise.

    cuda-python finds the ``nvidia-cuda-nvrtc`` wheel itself (through cuda.pathfinder in recent
    releases); when it does not, the library is loaded once through ``cuda.pathfinder`` and retried.
    """
    try:
        from cuda.bindings import nvrtc
    except ImportError:
        raise DeviceError(
            "cuda-python is not installed (NVRTC compiles the bench's kernels): pip install 'pdmux[bench]'"
        ) from None
    try:
        nvrtc.nvrtcVersion()
        return nvrtc
    except (RuntimeError, OSError, ImportError) as first:  # library not found by the bindings
        try:
            from cuda import pathfinder

            pathfinder.load_nvidia_dynamic_lib("nvrtc")
            nvrtc.nvrtcVersion()
            return nvrtc
        except (RuntimeError, OSError, ImportError):
            raise DeviceError(
                f"NVRTC (libnvrtc) not found: {' '.join(str(first).split())[:160]}; pip install "
                "nvidia-cuda-nvrtc (with cuda-python 13.x) or nvidia-cuda-nvrtc-cu12 (with cuda-python 12.x)"
            ) from None


def nvrtc_version() -> tuple[int, int]:
    """``(major, minor)`` of the NVRTC library found. Raises :class:`DeviceError` without one."""
    nvrtc = _nvrtc()
    _, major, minor = nvrtc.nvrtcVersion()
    return int(major), int(minor)


def supported_archs() -> list[int]:
    """Compute capabilities (``90`` for 9.0) this NVRTC compiles for, ascending."""
    nvrtc = _nvrtc()
    getter = getattr(nvrtc, "nvrtcGetSupportedArchs", None)
    if getter is None:
        return []
    _, archs = getter()
    return sorted(int(a) for a in archs)


def compile_source(source: str, arch: int, output: str = "cubin", name: str = "pdmux_kernels.cu") -> bytes:
    """Compile CUDA C++ ``source`` with NVRTC for compute capability ``arch`` (``90`` = 9.0).

    ``output``: ``"cubin"`` (SASS for ``sm_<arch>``, what the bench loads: it needs no PTX JIT, so
    it loads on any driver of the NVRTC's major version) or ``"ptx"`` (``compute_<arch>``, text).
    Returns the bytes (PTX without its trailing NUL). Raises :class:`DeviceError` when NVRTC is
    missing or the compilation fails (the first lines of its log in the message), and
    :class:`InputError` for an unknown ``output``.
    """
    if output not in ("cubin", "ptx"):
        raise InputError(f"NVRTC output must be 'cubin' or 'ptx', got {output!r}")
    nvrtc = _nvrtc()
    ok = nvrtc.nvrtcResult.NVRTC_SUCCESS
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], [])
    if err != ok:
        raise DeviceError(f"nvrtcCreateProgram failed: {err}")
    try:
        prefix = "sm" if output == "cubin" else "compute"
        opts = [f"--gpu-architecture={prefix}_{arch}".encode(), b"--std=c++17", b"-DPDMUX_BENCH=1"]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        if err != ok:
            _, size = nvrtc.nvrtcGetProgramLogSize(prog)
            log = b" " * size
            nvrtc.nvrtcGetProgramLog(prog, log)
            text = " | ".join(line for line in log.decode(errors="replace").splitlines() if line.strip())
            raise DeviceError(f"NVRTC could not compile the bench kernels for {prefix}_{arch}: {text[:400]}")
        if output == "cubin":
            err, size = nvrtc.nvrtcGetCUBINSize(prog)
            data = b" " * size
            (err,) = nvrtc.nvrtcGetCUBIN(prog, data)
        else:
            err, size = nvrtc.nvrtcGetPTXSize(prog)
            data = b" " * size
            (err,) = nvrtc.nvrtcGetPTX(prog, data)
            data = data.rstrip(b"\x00")
        if err != ok:
            raise DeviceError(f"NVRTC could not return the {output} for {prefix}_{arch}: {err}")
        return data
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def compile_for_device(cc: tuple[int, int]) -> tuple[bytes, str]:
    """The bench's kernels for a device of compute capability ``cc``: ``(image, description)``.

    CUBIN for the exact ``sm_XY`` when this NVRTC supports it; otherwise PTX for the newest
    supported arch below it (the driver JIT-compiles it, which needs a driver at least as new as
    the NVRTC). Raises :class:`DeviceError` when no supported arch fits.
    """
    arch = cc[0] * 10 + cc[1]
    archs = supported_archs()
    if not archs or arch in archs:
        return compile_source(all_sources(), arch, "cubin"), f"cubin sm_{arch}"
    lower = [a for a in archs if a <= arch]
    if not lower:
        major, minor = nvrtc_version()
        raise DeviceError(
            f"NVRTC {major}.{minor} cannot compile for compute capability {cc[0]}.{cc[1]} "
            f"(supports {archs[0]}-{archs[-1]}): install an nvidia-cuda-nvrtc that matches the driver"
        )
    ptx = compile_source(all_sources(), lower[-1], "ptx")
    return ptx + b"\x00", f"ptx compute_{lower[-1]} (JIT by the driver)"
