"""The GPU run of ``pdmux bench``: allocate, compile, sweep, co-run, and collect :class:`BenchResults`.

Needs torch (CUDA build), cuda-python and NVRTC; all three are imported inside the functions, and
each missing piece is a one-line :class:`DeviceError`; NVML (nvidia-ml-py) is optional (clocks).
Order of a run (``run_bench``): about a second of warm-up on the whole GPU, ceilings (a
device-to-device copy and the GEMM on the default stream), the solo sweep (the whole GPU on a plain
stream, then every green-context size ascending), then each level (SM ids, then rounds of the GEMM
alone, the read kernel alone and both together on the level's partitions). Ctrl-C or a device
failure in the middle stops the run and returns what finished (``complete`` False); green contexts
are torn down either way. CUDA_DEVICE_MAX_CONNECTIONS is set to 32 before CUDA starts
(``greenctx.probe_device``).

Timing: every measured launch is queued behind a launch gate (a spin kernel) that must still be
closed once everything is queued (else retried, longer), so the GPU runs the work back to back;
CUDA events time it; NVML's SM and memory clocks are sampled while it runs. Solo sweep: warm-up
launches, then ``repeats`` timed runs of at least ``MIN_RUN_MS`` each; rates are work / time per
launch, summarised by median, p10/p90, min/max. Levels: windows of ``window_ms`` in which each
stream records an event per unit of work; each stream's rate counts only the units completed before
the first stream ran out of work, so both were busy the whole window; solo and co-run use the same
windowed loop, interleaved. ``%globaltimer`` stamps (the read kernel's blocks, markers around the
GEMMs) give the share of the co-run window during which both kernels really ran.
"""

from __future__ import annotations

import contextlib
import datetime
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ..util.errors import DeviceError, Finding, InputError, PdmuxError
from . import greenctx, kernels
from .clocks import Clocks
from .plan import GATE_MS, MEMORY_HEADROOM_BYTES, MIN_RUN_MS, WARMUP_S, BenchPlan, PlanDevice
from .results import SERIALISED_FACTOR_SUM, BenchResults, LevelResult, RunInfo, SweepPoint
from .stats import RateStats, median, overlap_end_ms, overlap_rate, overlap_share

#: Value the read kernel compares its folded loads with (any value: it only has to be unknown to
#: the compiler).
READ_MAGIC = 0x5EED1234
#: Host time budgeted per queued launch when sizing the launch gate (s): a torch matmul or a
#: cuLaunchKernel through cuda-python takes about 10-20 us of Python; twice that as margin. A gate
#: that still opens early is retried longer (``Workloads._gated``).
ENQUEUE_S_PER_LAUNCH = 30e-6
#: Attempts at a gate that holds until everything is queued, and the longest gate (ms): past
#: 5 s of queuing the host, not the GPU, is what is slow.
MAX_GATE_ATTEMPTS = 4
MAX_GATE_MS = 5000.0
#: Units per window: each stream records an event every ``window / UNITS_PER_WINDOW``.
UNITS_PER_WINDOW = 40
#: Most warm-up units (a GEMM and a copy) queued at once (bounds the queue on a tiny GEMM).
MAX_WARMUP_UNITS = 100_000

StepCallback = Callable[[str], None]
T = TypeVar("T")


def gate_ms(launches: int) -> float:
    """Length of the launch gate (ms) for ``launches`` queued launches and events: ``GATE_MS`` or
    twice ``ENQUEUE_S_PER_LAUNCH`` per launch, whichever is longer."""
    return max(GATE_MS, 2e3 * ENQUEUE_S_PER_LAUNCH * launches)


def _units(window_ms: float, launch_s: float) -> tuple[int, int]:
    """``(launches per unit, units)`` that fill a window of ``window_ms`` with launches of ``launch_s``:
    about ``UNITS_PER_WINDOW`` units, plus two so every stream still has work when the window ends."""
    per_unit = max(1, math.ceil(window_ms / UNITS_PER_WINDOW / max(launch_s * 1e3, 1e-3)))
    count = math.ceil(window_ms / (per_unit * max(launch_s * 1e3, 1e-3))) + 2
    return per_unit, count


class Stamps:
    """``slots`` pairs of (start, end) ``%globaltimer`` stamps (ns) in device memory (int64, starts
    preset to all ones for the read kernel's ``atomicMin``, ends to 0). ``address(i, end)``: the device
    address of one stamp; ``intervals()``: the pairs written, after the streams were synchronised."""

    def __init__(self, torch: Any, dev: Any, slots: int) -> None:
        self.tensor = torch.empty((max(1, slots), 2), dtype=torch.int64, device=dev)
        self.reset()
        self._base = int(self.tensor.data_ptr())

    def reset(self) -> None:
        """Preset every slot (on torch's current stream, the default one: before the launch gate)."""
        self.tensor[:, 0] = -1
        self.tensor[:, 1] = 0

    def address(self, index: int, end: bool = False) -> int:
        return self._base + 16 * index + (8 if end else 0)

    def intervals(self) -> list[tuple[int, int]]:
        """``(start, end)`` in ns of every slot both stamps of which were written."""
        return [(s, e) for s, e in self.tensor.cpu().tolist() if 0 <= s <= e]


@dataclass(frozen=True)
class Job:
    """One stream's work in a window: ``kind`` ``"gemm"`` (the bf16 GEMM, between markers) or
    ``"read"`` (the read kernel, stamping itself); ``launch_s``: seconds per launch alone;
    ``work``: FLOPs or bytes per launch."""

    stream: Any
    kind: str
    launch_s: float
    work: float


@dataclass(frozen=True)
class Window:
    """One window measured: each job's rate (per s), the shortest job span (ms), each job's busy
    intervals (``%globaltimer`` ns) and the clock samples ``(SM MHz, memory MHz)`` taken in it."""

    rates: tuple[float, ...]
    span_ms: float
    busy: tuple[list[tuple[int, int]], ...]
    clocks: tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class LevelTiming:
    """A level's rates over ``repeats`` rounds of windows; ``overlap_share`` (median) and
    ``overlap_share_min``: share of the co-run window during which both kernels ran (0-1)."""

    solo_gemm: RateStats
    solo_read: RateStats
    corun_gemm: RateStats
    corun_read: RateStats
    window_ms: float
    overlap_share: float | None
    overlap_share_min: float | None


def import_torch(driver_version: int | None = None) -> Any:
    """torch with CUDA, or :class:`DeviceError`: not installed (``pip install 'pdmux[bench]'``), a CPU
    build, built for a newer CUDA major than the driver's ``driver_version`` (``1000 * major + 10 *
    minor``, when given: PyPI's torch is a CUDA 13 build from 2.11 on), or ``torch.cuda.is_available()``
    false."""
    try:
        import torch
    except ImportError:
        hint = greenctx.install_hint(driver_version) if driver_version else greenctx.PIP_HINT
        raise DeviceError(f"torch is not installed (the bench's GEMM is torch.matmul): {hint}") from None
    built = getattr(torch.version, "cuda", None)
    if built is None:
        raise DeviceError(
            f"torch {torch.__version__} is a CPU-only build: install a CUDA build of torch "
            "(https://pytorch.org/get-started/locally/)"
        )
    built_major = greenctx.version_tuple(str(built))[:1]
    if driver_version and built_major and built_major[0] > driver_version // 1000:
        raise DeviceError(
            f"torch {torch.__version__} is built for CUDA {built} but the NVIDIA driver supports CUDA "
            f"{greenctx.version_text(driver_version)}: {greenctx.install_hint(driver_version)}"
        )
    if not torch.cuda.is_available():
        raise DeviceError(
            f"torch {torch.__version__} (CUDA {torch.version.cuda}) cannot use the GPU: "
            "torch.cuda.is_available() is False"
        )
    return torch


def plan_device(info: greenctx.DeviceInfo, device_name: str, gpu: str | None) -> PlanDevice:
    """The real device as a :class:`PlanDevice`: its name (``torch.cuda.get_device_name``) looked up
    with ``hardware.find_gpu``; the device's own SMs, capability, L2 and memory always win.

    ``gpu``: the ``--gpu`` option; on a real run it must name a profile with the device's SM count
    (:class:`InputError` otherwise). Without a matching profile the device's own numbers are used.
    """
    from ..catalog.hardware import find_gpu, find_gpu_or_file

    profile = None
    try:
        profile = find_gpu_or_file(gpu) if gpu else find_gpu(device_name)
    except InputError:
        if gpu:
            raise
    if profile is not None and profile.sm_count != info.sm_count:
        if gpu:
            raise InputError(
                "{param_flag} {gpu}: profile {profile} has {profile_sms} SMs but device {index} ({device}) "
                "has {device_sms}; drop {param_flag} to use the device's own numbers", param="gpu",
                values={"gpu": gpu, "profile": profile.name, "profile_sms": profile.sm_count,
                        "index": info.index, "device": device_name, "device_sms": info.sm_count},
            )
        profile = None
    return PlanDevice(
        name=device_name, sm_count=info.sm_count, compute_capability=info.compute_capability,
        l2_bytes=info.l2_bytes or (profile.l2_bytes if profile else None), memory_bytes=info.memory_bytes,
        hbm_bytes_per_s=profile.hbm_bytes_per_s if profile else None,
        bf16_dense_flops=(profile.bf16_dense_flops or profile.fp16_dense_flops) if profile else None,
        profile_key=profile.key if profile else None, source="profile+device" if profile else "device",
    )


class Workloads:
    """Device buffers, the NVRTC library and the launch functions of one run (owns them; ``close``)."""

    def __init__(self, torch: Any, plan: BenchPlan, info: greenctx.DeviceInfo, image: bytes) -> None:
        self.torch, self.plan, self.info = torch, plan, info
        self.dev = torch.device("cuda", plan.device_index)
        self.drv = greenctx.driver_module()
        self.library: Any = None
        self._cu_streams: dict[int, Any] = {}
        #: NVML clocks, sampled at every measurement when set (``run_bench`` opens them).
        self.clocks: Clocks | None = None
        #: Launch gates that opened before their work was queued, and were retried longer.
        self.gate_retries = 0
        torch.cuda.set_device(self.dev)
        self._allocate()
        self._load(image)

    def _sizes(self) -> tuple[str, dict[str, Any]]:
        """The part of an out-of-memory message that lists the buffers (a template) and its values."""
        p = self.plan
        text = "GEMM {gemm} bf16 ({operand_bytes} bytes), read buffer and its copy 2 x {buffer_bytes} bytes"
        values: dict[str, Any] = {"gemm": p.gemm.text, "operand_bytes": p.gemm.operand_bytes,
                                  "buffer_bytes": p.buffer_bytes, "device": p.device_index}
        if p.skinny is not None:
            text += ", skinny GEMM weights {copies} x {skinny_weight_bytes} bytes"
            values.update(copies=p.skinny_copies, skinny_weight_bytes=p.skinny.weight_bytes)
        return text, values

    def _allocate(self) -> None:
        torch, p = self.torch, self.plan
        sizes, size_values = self._sizes()
        free, _total = torch.cuda.mem_get_info(self.dev)
        need = p.memory_needed_bytes + MEMORY_HEADROOM_BYTES
        if need > free:
            raise DeviceError(
                "out of device memory: the bench needs {needed_gb:.2f} GB (" + sizes + ") but {free_gb:.2f} "
                "GB is free on device {device}: use a smaller {param_flag} or {flag.buffer_bytes}",
                param="gemm_shape", values={**size_values, "needed_gb": need / 1e9, "free_gb": free / 1e9},
            )
        try:
            gen = torch.Generator(device=self.dev)
            gen.manual_seed(20250101)
            bf16 = torch.bfloat16
            g = p.gemm
            self.a = torch.randn(g.m, g.k, device=self.dev, dtype=bf16, generator=gen)
            self.b = torch.randn(g.k, g.n, device=self.dev, dtype=bf16, generator=gen)
            self.c = torch.empty(g.m, g.n, device=self.dev, dtype=bf16)
            words = p.buffer_bytes // 4
            self.buf = torch.randint(-(2**31), 2**31 - 1, (words,), device=self.dev, dtype=torch.int32,
                                     generator=gen)
            self.copy_dst = torch.empty_like(self.buf)
            self.smid_out = torch.empty(p.smid_blocks, device=self.dev, dtype=torch.int32)
            self.sink = torch.zeros(4, device=self.dev, dtype=torch.int32)
            self.scratch_times = torch.tensor([-1, 0], device=self.dev, dtype=torch.int64)
            self.skinny_w: list[Any] = []
            self._skinny_next = 0
            if p.skinny is not None:
                s = p.skinny
                self.skinny_x = torch.randn(s.m, s.k, device=self.dev, dtype=bf16, generator=gen)
                self.skinny_y = torch.empty(s.m, s.n, device=self.dev, dtype=bf16)
                self.skinny_w = [torch.randn(s.k, s.n, device=self.dev, dtype=bf16, generator=gen)
                                 for _ in range(p.skinny_copies)]
            torch.cuda.synchronize(self.dev)
        except torch.cuda.OutOfMemoryError:
            raise DeviceError(
                "out of device memory allocating " + sizes + " on device {device}: use a smaller "
                "{param_flag} or {flag.buffer_bytes}", param="gemm_shape", values=size_values,
            ) from None

    def _load(self, image: bytes) -> None:
        drv = self.drv
        self.library = greenctx.call(drv.cuLibraryLoadData(image, [], [], 0, [], [], 0),
                                     "cuLibraryLoadData (bench kernels)")

        def function(name: str) -> Any:
            kernel = greenctx.call(drv.cuLibraryGetKernel(self.library, name.encode()),
                                   f"cuLibraryGetKernel({name})")
            return drv.CUfunction(int(kernel))  # a CUkernel launches in the context of the stream

        self.read_fn = function("pdmux_read_bw")
        self.smid_fn = function("pdmux_smid")
        self.spin_fn = function("pdmux_spin")
        self.mark_fn = function("pdmux_mark")
        import ctypes

        n_vec = self.plan.buffer_bytes // kernels.READ_VECTOR_BYTES
        self._read_grid = self.plan.read_grid_blocks
        self._read_values = (self.buf.data_ptr(), n_vec, self.sink.data_ptr(), READ_MAGIC)
        self._read_types = (ctypes.c_void_p, ctypes.c_ulonglong, ctypes.c_void_p, ctypes.c_uint,
                            ctypes.c_void_p)
        self._scratch_times_ptr = self.scratch_times.data_ptr()
        self.smid_args = ((self.smid_out.data_ptr(), kernels.SMID_SPIN_NS),
                          (ctypes.c_void_p, ctypes.c_ulonglong))
        self._ulonglong = ctypes.c_ulonglong
        self._void_p = ctypes.c_void_p

    def close(self) -> None:
        """Unload the NVRTC library (device buffers go with the torch tensors)."""
        if self.library is not None:
            try:
                self.torch.cuda.synchronize(self.dev)
            finally:
                self.drv.cuLibraryUnload(self.library)
                self.library = None

    # -- launches (each on the torch stream given) -------------------------------------------------
    def _cu(self, stream: Any) -> Any:
        handle = int(stream.cuda_stream)
        cu = self._cu_streams.get(handle)
        if cu is None:
            cu = self._cu_streams[handle] = self.drv.CUstream(handle)
        return cu

    def _launch(self, fn: Any, grid: int, block: int, stream: Any, args: Any, what: str) -> None:
        err = self.drv.cuLaunchKernel(fn, grid, 1, 1, block, 1, 1, 0, self._cu(stream), args, 0)[0]
        if int(err) != 0:
            greenctx.call((err,), f"launching {what}")

    def read(self, stream: Any, stamps: Stamps | None = None, index: int = 0) -> None:
        """The read kernel over the whole buffer (``plan.buffer_bytes`` bytes). Its first block start
        and last block end (``%globaltimer``) go to slot ``index`` of ``stamps``, or to a scratch slot
        (the same work: solo and co-run launch the same kernel)."""
        times = self._scratch_times_ptr if stamps is None else stamps.address(index)
        args = (self._read_values + (times,), self._read_types)
        self._launch(self.read_fn, self._read_grid, kernels.READ_BLOCK, stream, args, "pdmux_read_bw")

    def mark(self, stream: Any, stamps: Stamps, index: int, end: bool) -> None:
        """The marker kernel: ``%globaltimer`` into the start (or ``end``) of slot ``index``."""
        args = ((stamps.address(index, end),), (self._void_p,))
        self._launch(self.mark_fn, 1, 1, stream, args, "pdmux_mark")

    def stamps(self, slots: int) -> Stamps:
        """Device memory for ``slots`` (start, end) timestamp pairs."""
        return Stamps(self.torch, self.dev, slots)

    def gemm(self, stream: Any) -> None:
        """``c = a @ b`` in bf16 (``plan.gemm.flops`` FLOPs)."""
        with self.torch.cuda.stream(stream):
            self.torch.matmul(self.a, self.b, out=self.c)

    def skinny(self, stream: Any) -> None:
        """The decode-like GEMM, cycling through the weight copies so they come from HBM."""
        w = self.skinny_w[self._skinny_next]
        self._skinny_next = (self._skinny_next + 1) % len(self.skinny_w)
        with self.torch.cuda.stream(stream):
            self.torch.matmul(self.skinny_x, w, out=self.skinny_y)

    def copy(self, stream: Any) -> None:
        """Device-to-device copy of the read buffer (2x its bytes moved)."""
        with self.torch.cuda.stream(stream):
            self.copy_dst.copy_(self.buf)

    def spin(self, stream: Any, ms: float) -> None:
        """One thread spinning ``ms`` on ``stream`` (the launch gate)."""
        args = ((int(ms * 1e6),), (self._ulonglong,))
        self._launch(self.spin_fn, 1, 1, stream, args, "pdmux_spin")

    def smids(self, stream: Any) -> tuple[int, ...]:
        """Distinct SM ids the SM-id kernel's blocks ran on, launched on ``stream``."""
        torch = self.torch
        self.smid_out.fill_(-1)
        torch.cuda.synchronize(self.dev)
        self._launch(self.smid_fn, self.plan.smid_blocks, kernels.SMID_BLOCK, stream, self.smid_args,
                     "pdmux_smid")
        stream.synchronize()
        return tuple(sorted({int(v) for v in self.smid_out.cpu().tolist() if v >= 0}))

    # -- timing ------------------------------------------------------------------------------------
    def _event(self) -> Any:
        return self.torch.cuda.Event(enable_timing=True)

    def _gated(self, gate_stream: Any, waiters: Sequence[Any], enqueue: Callable[[], T], launches: int,
               prepare: Callable[[], None] | None = None) -> tuple[Any, T]:
        """Queue work behind a launch gate, so the GPU runs it back to back at its own pace, not at the
        rate Python launches it: ``prepare()`` (resets, queued before the gate), a spin kernel on
        ``gate_stream``, an event after it (``waiters`` wait on that event), then ``enqueue()`` (about
        ``launches`` launches and events). The gate lasts
        :func:`gate_ms` for that many launches. Once queued, the event must not have completed yet
        (``query()``): if the gate already opened, the GPU may have waited for Python, so that
        attempt's work is drained and dropped and the gate doubled (at least twice the measured
        enqueue time), up to ``MAX_GATE_ATTEMPTS`` times, never past ``MAX_GATE_MS``.

        Returns ``(the gate's event, enqueue's result)``; :attr:`gate_retries` counts the retries.
        Raises :class:`DeviceError` when even the longest gate opened too early.
        """
        gate = gate_ms(launches)
        for _attempt in range(MAX_GATE_ATTEMPTS):
            if prepare is not None:
                prepare()
            self.spin(gate_stream, gate)
            opened = self._event()
            opened.record(gate_stream)
            for stream in waiters:
                stream.wait_event(opened)
            started = time.perf_counter()
            result = enqueue()
            queued_ms = (time.perf_counter() - started) * 1e3
            if not opened.query():
                return opened, result
            self.gate_retries += 1
            for stream in (gate_stream, *waiters):
                stream.synchronize()
            if gate >= MAX_GATE_MS:
                break
            gate = min(MAX_GATE_MS, max(2 * gate, 2 * queued_ms))
        raise DeviceError(
            f"the launch gate opened before {launches} launches were queued, even at {gate:.0f} ms: the host "
            "is too slow to measure the GPU (is another process using this CPU?)"
        )

    def _clock_sample(self, opened: Any) -> list[tuple[float, float]]:
        """SM and memory clocks (MHz) once the gate ``opened`` (the measured work is running):
        one sample, or none without NVML."""
        if self.clocks is None:
            return []
        opened.synchronize()
        sample = self.clocks.sample()
        return [sample] if sample is not None else []

    def launch_seconds(self, launch: Callable[[Any], None], stream: Any) -> float:
        """Seconds one ``launch`` takes on ``stream``: ``plan.warmup`` warm-up launches, then one
        launch between two CUDA events, all behind the launch gate."""
        def enqueue() -> tuple[Any, Any]:
            for _ in range(self.plan.warmup):
                launch(stream)
            first, last = self._event(), self._event()
            first.record(stream)
            launch(stream)
            last.record(stream)
            return first, last

        _, (first, last) = self._gated(stream, (), enqueue, self.plan.warmup + 3)
        last.synchronize()
        return max(first.elapsed_time(last), 1e-3) / 1e3

    def time_launches(self, launch: Callable[[Any], None], stream: Any, work: float) -> RateStats:
        """Rate of ``launch`` on ``stream``: ``work`` (bytes or FLOPs per launch) / time per launch.

        :meth:`launch_seconds` sizes the runs (at least ``MIN_RUN_MS`` each), then ``plan.repeats``
        runs, each between two CUDA events on ``stream``, all queued behind the launch gate (short
        kernels such as the skinny GEMM then measure the GPU, not Python's launch rate); the clocks
        are sampled while they run.
        """
        inner = max(1, math.ceil(MIN_RUN_MS / 1e3 / self.launch_seconds(launch, stream)))

        def enqueue() -> list[tuple[Any, Any]]:
            marks = []
            for _ in range(self.plan.repeats):
                start, end = self._event(), self._event()
                start.record(stream)
                for _ in range(inner):
                    launch(stream)
                end.record(stream)
                marks.append((start, end))
            return marks

        opened, marks = self._gated(stream, (), enqueue, self.plan.repeats * (inner + 2))
        clocks = self._clock_sample(opened)
        stream.synchronize()
        return RateStats.from_times(work, [s.elapsed_time(e) / 1e3 / inner for s, e in marks], clocks)

    def warm_up(self, seconds: float) -> float:
        """Keep the whole GPU busy for about ``seconds`` (GEMM and copy in turn on the default stream)
        so its clocks and power settle before the ceilings. Returns the GPU seconds queued."""
        default = self.torch.cuda.default_stream(self.dev)

        def unit(stream: Any) -> None:
            self.gemm(stream)
            self.copy(stream)

        unit_s = self.launch_seconds(unit, default)
        n = min(MAX_WARMUP_UNITS, max(1, math.ceil(seconds / unit_s)))
        for _ in range(n):
            unit(default)
        default.synchronize()
        return n * unit_s

    def window(self, jobs: Sequence[Job]) -> Window:
        """One window of ``plan.window_ms``: every job's stream busy with its kernel, the streams at
        the same time when there are several, all behind one launch gate on the default stream.

        Each job queues units of launches (about ``UNITS_PER_WINDOW`` per window, sized by its
        ``launch_s``), in turn in proportion, with a CUDA event after each unit. A job's rate counts
        the units completed before the first stream ran out of work, over its span from its start,
        so every stream was busy the whole window. Busy intervals (``%globaltimer``, ns): the read
        kernel stamps each launch itself; GEMM units are bracketed by marker kernels. A solo
        measurement is the same loop with one job (the same conditions as the co-run).
        """
        plan = self.plan
        sizes = [_units(plan.window_ms, job.launch_s) for job in jobs]
        stamps = [self.stamps(count if job.kind == "gemm" else per * count)
                  for job, (per, count) in zip(jobs, sizes)]
        launches = sum(count * (per + (3 if job.kind == "gemm" else 1)) + 1
                       for job, (per, count) in zip(jobs, sizes))
        streams = [job.stream for job in jobs]

        def enqueue() -> tuple[list[Any], list[list[Any]]]:
            starts, ends = [], [[] for _ in jobs]
            for stream in streams:
                start = self._event()
                start.record(stream)
                starts.append(start)
            done = [0] * len(jobs)
            while True:
                pending = [k for k in range(len(jobs)) if done[k] < sizes[k][1]]
                if not pending:
                    break
                k = min(pending, key=lambda i: (done[i] / sizes[i][1], i))  # the one furthest behind
                job, (per, _count) = jobs[k], sizes[k]
                if job.kind == "gemm":
                    self.mark(job.stream, stamps[k], done[k], end=False)
                    for _ in range(per):
                        self.gemm(job.stream)
                    self.mark(job.stream, stamps[k], done[k], end=True)
                else:
                    for r in range(per):
                        self.read(job.stream, stamps[k], done[k] * per + r)
                end = self._event()
                end.record(job.stream)
                ends[k].append(end)
                done[k] += 1
            return starts, ends

        def reset() -> None:  # a dropped attempt's stamps must not stay in the atomicMin/Max slots
            for s in stamps:
                s.reset()

        gate, (starts, ends) = self._gated(self.torch.cuda.default_stream(self.dev), streams, enqueue,
                                           launches, prepare=reset)
        clocks = self._clock_sample(gate)
        for stream in streams:
            stream.synchronize()
        ends_ms = [[gate.elapsed_time(e) for e in stream_ends] for stream_ends in ends]
        until = overlap_end_ms(*ends_ms)
        rates, spans = [], []
        for k, job in enumerate(jobs):
            rate, _, span = overlap_rate(gate.elapsed_time(starts[k]), ends_ms[k], sizes[k][0] * job.work,
                                         until)
            rates.append(rate)
            spans.append(span)
        return Window(tuple(rates), min(spans), tuple(s.intervals() for s in stamps), tuple(clocks))

    def level_windows(self, p_stream: Any, d_stream: Any, gemm_s: float, read_s: float) -> LevelTiming:
        """The GEMM on ``p_stream`` and the read kernel on ``d_stream``, alone and together, in the
        same windowed loop (:meth:`window`), interleaved: each of ``plan.repeats`` rounds times the
        GEMM alone, the read alone, then both, so drifting clocks touch solo and co-run alike.
        ``gemm_s``/``read_s``: seconds per launch on these partitions (:meth:`launch_seconds`).
        """
        plan = self.plan
        gemm = Job(p_stream, "gemm", gemm_s, plan.gemm.flops)
        read = Job(d_stream, "read", read_s, plan.read_bytes_per_launch)
        rates: dict[str, list[float]] = {"solo_gemm": [], "solo_read": [], "corun_gemm": [], "corun_read": []}
        clocks: dict[str, list[tuple[float, float]]] = {"solo_gemm": [], "solo_read": [], "corun": []}
        spans, shares = [], []
        for _ in range(plan.repeats):
            alone_g = self.window([gemm])
            alone_r = self.window([read])
            both = self.window([gemm, read])
            rates["solo_gemm"].append(alone_g.rates[0])
            rates["solo_read"].append(alone_r.rates[0])
            rates["corun_gemm"].append(both.rates[0])
            rates["corun_read"].append(both.rates[1])
            clocks["solo_gemm"] += alone_g.clocks
            clocks["solo_read"] += alone_r.clocks
            clocks["corun"] += both.clocks
            spans.append(both.span_ms)
            share = overlap_share(*both.busy)
            if share is not None:
                shares.append(share)

        def stats(key: str, work: float, clock_key: str) -> RateStats:
            values = rates[key]
            return RateStats.from_rates(values, work / median(values), clocks[clock_key])

        return LevelTiming(
            solo_gemm=stats("solo_gemm", plan.gemm.flops, "solo_gemm"),
            solo_read=stats("solo_read", plan.read_bytes_per_launch, "solo_read"),
            corun_gemm=stats("corun_gemm", plan.gemm.flops, "corun"),
            corun_read=stats("corun_read", plan.read_bytes_per_launch, "corun"),
            window_ms=median(spans),
            overlap_share=median(shares) if shares else None,
            overlap_share_min=min(shares) if shares else None,
        )


def _device_error(exc: BaseException, w: Workloads) -> DeviceError:
    """A torch/CUDA ``RuntimeError`` as a one-line :class:`DeviceError` (out of memory: with the sizes)."""
    first = " ".join(str(exc).split())[:300]
    if "out of memory" in first.lower():
        sizes, values = w._sizes()
        return DeviceError("out of device memory during the run (" + sizes + "): {detail}",
                           values={**values, "detail": first})
    return DeviceError(f"CUDA failure during the run: {first}")


def _clear_cublas_workspaces(torch: Any) -> None:
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None:
        clear()


def _sweep_point(w: Workloads, sms: int) -> SweepPoint:
    torch, plan = w.torch, w.plan
    skinny_work = plan.skinny.flops if plan.skinny is not None else 0

    def measure(stream: Any, granted: int, kind: str) -> SweepPoint:
        read = w.time_launches(w.read, stream, plan.read_bytes_per_launch)
        gemm = w.time_launches(w.gemm, stream, plan.gemm.flops)
        skinny = w.time_launches(w.skinny, stream, skinny_work) if plan.skinny is not None else None
        return SweepPoint(sms, granted, kind, read, gemm, skinny)

    if sms >= plan.device.sm_count:
        return measure(torch.cuda.Stream(device=w.dev), plan.device.sm_count, "whole")
    with greenctx.SmPartition(w.info, sms) as part:
        stream = torch.cuda.ExternalStream(part.partition.stream_handle, device=w.dev)
        try:
            return measure(stream, part.partition.granted_sms, "green")
        finally:
            stream.synchronize()
            del stream
            _clear_cublas_workspaces(torch)


def _level(w: Workloads, prefill_sms: int, decode_sms: int) -> LevelResult:
    torch = w.torch
    with greenctx.LevelPartitions(w.info, prefill_sms, decode_sms) as lv:
        ps = torch.cuda.ExternalStream(lv.prefill.stream_handle, device=w.dev)
        ds = torch.cuda.ExternalStream(lv.decode.stream_handle, device=w.dev)
        try:
            smid_p = w.smids(ps)
            smid_d = w.smids(ds)
            timing = w.level_windows(ps, ds, w.launch_seconds(w.gemm, ps), w.launch_seconds(w.read, ds))
        finally:
            ps.synchronize()
            ds.synchronize()
            del ps, ds
            _clear_cublas_workspaces(torch)
        return LevelResult(
            prefill_sms=prefill_sms, decode_sms=decode_sms, pair_granted_sms=lv.pair_granted_sms,
            granted_prefill_sms=lv.prefill.granted_sms, granted_decode_sms=lv.decode.granted_sms,
            smid_prefill=smid_p, smid_decode=smid_d, solo_gemm=timing.solo_gemm, solo_read=timing.solo_read,
            corun_gemm=timing.corun_gemm, corun_read=timing.corun_read, corun_window_ms=timing.window_ms,
            overlap_share=timing.overlap_share, overlap_share_min=timing.overlap_share_min,
            workqueue=lv.prefill.workqueue,
        )


def prepare(device_index: int, gpu: str | None) -> tuple[greenctx.DeviceInfo, Any, PlanDevice]:
    """Probe the driver, then torch; the device as a :class:`PlanDevice`.

    Raises :class:`DeviceError` for anything missing (cuda-python, driver, driver too old, torch or
    its CUDA) and :class:`InputError` for a bad ``--device``/``--gpu``.
    """
    info = greenctx.probe_device(device_index)
    torch = import_torch(info.driver_version)
    name = torch.cuda.get_device_name(device_index)
    return info, torch, plan_device(info, name, gpu)


def run_info(info: greenctx.DeviceInfo, torch: Any, plan: BenchPlan, kernel_image: str,
             clocks: Clocks | None = None) -> RunInfo:
    """Identity of the run (names, versions, UTC date), the launch set-up (CUDA_DEVICE_MAX_CONNECTIONS
    in effect, the green contexts' work queues) and the device's maximum clocks (NVML, when open)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    try:
        nv = ".".join(map(str, kernels.nvrtc_version()))
    except PdmuxError:
        nv = "?"
    top = clocks.maximum() if clocks is not None else None
    return RunInfo(
        gpu_name=plan.device.name, sm_count=info.sm_count, compute_capability=info.compute_capability,
        device_index=info.index, profile_key=plan.device.profile_key,
        driver_cuda_version=info.driver_version_text, cuda_version=str(torch.version.cuda),
        torch_version=str(torch.__version__), cuda_python_version=info.bindings_version, nvrtc_version=nv,
        kernel_image=kernel_image, date=now.date().isoformat(), started_at=now.isoformat(timespec="seconds"),
        cuda_device_max_connections=os.environ.get(greenctx.CONNECTIONS_VAR),
        workqueue=greenctx.workqueue_text(info),
        max_sm_clock_mhz=top[0] if top else None, max_mem_clock_mhz=top[1] if top else None,
    )


def run_bench(
    plan: BenchPlan,
    info: greenctx.DeviceInfo,
    torch: Any,
    plan_json: dict[str, Any],
    on_step: StepCallback | None = None,
    on_result: Callable[[BenchResults], None] | None = None,
) -> BenchResults:
    """Run ``plan`` on the device; returns the results, complete or not.

    ``on_step(label)`` is called before each of the ``plan.steps`` steps (progress); ``on_result``
    after each step with the results so far (checkpoints). Ctrl-C during the steps stops the run:
    the finished steps are returned with ``interrupted`` set. A split the driver refuses
    (:class:`greenctx.SplitRefused`) or an :class:`InputError` inside one sweep point or level (a
    level that cannot fit, a window in which a stream completed nothing) is recorded in
    ``step_errors`` and the run goes on with the others; any other failure (a failed kernel launch,
    a CUDA error from torch, out of memory) after the first finished step stops the run and is
    returned as ``error``; before that, it is raised (nothing to keep).
    Raises :class:`DeviceError` for a failed set-up (compile, load, out of memory).
    """
    major_nvrtc, _ = kernels.nvrtc_version()
    if major_nvrtc > info.driver_version // 1000:
        raise DeviceError(
            f"NVRTC {major_nvrtc}.x builds kernels a CUDA {info.driver_version_text} driver cannot load: "
            f"{greenctx.install_hint(info.driver_version)}"
        )
    image, image_text = kernels.compile_for_device(info.compute_capability)
    clocks, no_clocks = Clocks.open(info.pci_bus_id)
    res = BenchResults(run=run_info(info, torch, plan, image_text, clocks), plan=plan_json)
    res.notes.extend(plan.notes)
    res.notes.extend(n for n in (info.connections_note, no_clocks) if n)
    try:
        w = Workloads(torch, plan, info, image)
    except BaseException:
        if clocks is not None:
            clocks.close()
        raise
    w.clocks = clocks
    try:
        _measure(w, torch, res, on_step or (lambda label: None),
                 (lambda: on_result(res)) if on_result is not None else (lambda: None))
        res.complete = not res.step_errors
    except KeyboardInterrupt:
        res.interrupted = True
        res.notes.append(Finding("bench.interrupted"))
    except (PdmuxError, RuntimeError) as exc:  # torch reports CUDA failures as RuntimeError
        error = exc if isinstance(exc, PdmuxError) else _device_error(exc, w)
        if res.copy is None:
            w.close()
            raise error from None
        res.error = str(error)
        res.notes.append(Finding("bench.stopped", {"error": res.error}))
    finally:
        res.sweep.sort(key=lambda p: (p.granted_sms, p.kind == "whole"))
        res.notes.extend(_closing_notes(w, res))
        with contextlib.suppress(PdmuxError, RuntimeError):  # the run's outcome matters more than the unload
            w.close()
        if clocks is not None:
            clocks.close()
    return res


def _measure(w: Workloads, torch: Any, res: BenchResults, step: StepCallback,
             done: Callable[[], None]) -> None:
    """:func:`run_bench`'s steps into ``res``: warm-up, the two ceilings, the solo sweep (the whole GPU
    first), the co-run levels; ``step(label)`` before each, ``done()`` after each; a sweep point or level
    that fails is a step error and the others still run."""
    plan = w.plan
    default = torch.cuda.default_stream(w.dev)
    step("warm-up: GEMM and copy on the whole GPU")
    w.warm_up(WARMUP_S)
    step("ceiling: device-to-device copy")
    res.copy = w.time_launches(w.copy, default, plan.copy_bytes_per_launch)
    done()
    step("ceiling: matmul on the whole GPU")
    res.matmul = w.time_launches(w.gemm, default, plan.gemm.flops)
    done()
    order = [plan.sweep_sms[-1], *plan.sweep_sms[:-1]]  # whole GPU first: the reference
    for sms in order:
        step(f"solo sweep: {sms} SMs")
        try:
            res.sweep.append(_sweep_point(w, sms))
        except (greenctx.SplitRefused, InputError) as exc:  # record it, measure the rest
            res.step_errors.append(f"solo sweep {sms} SMs: {exc}")
        done()
    res.sweep.sort(key=lambda p: (p.granted_sms, p.kind == "whole"))
    for p, d in plan.levels:
        step(f"co-run level {p}/{d}")
        try:
            res.levels.append(_level(w, p, d))
        except (greenctx.SplitRefused, InputError) as exc:  # this level only; the others still run
            res.step_errors.append(f"level {p}/{d}: {exc}")
        done()


def _closing_notes(w: Workloads, res: BenchResults) -> list[Finding]:
    """The notes of a run once it ended: launch gates retried (``bench.gate_retries``), each level where the
    GPU took turns instead of running both (``bench.serialised``)."""
    notes = [Finding("bench.gate_retries", {"retries": w.gate_retries})] if w.gate_retries else []
    for lv in res.levels:
        if lv.serialised:
            notes.append(Finding("bench.serialised", {
                "prefill_sms": lv.prefill_sms, "decode_sms": lv.decode_sms, "flops_factor": lv.flops_factor,
                "bandwidth_factor": lv.bandwidth_factor, "limit": SERIALISED_FACTOR_SUM,
                "overlap_share": lv.overlap_share}))
    return notes
