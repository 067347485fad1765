"""The GPU run of ``pdmux bench``: allocate, compile, sweep, co-run, and collect :class:`BenchResults`.

Needs torch (CUDA build), cuda-python and NVRTC; all three are imported inside the functions, and
each missing piece is a one-line :class:`DeviceError`. Order of a run (``run_bench``): ceilings
(a device-to-device copy and the GEMM on the default stream), the solo sweep (the whole GPU on a
plain stream, then every green-context size ascending), then each level (SM ids, both kernels alone
on the level's partitions, then together). Ctrl-C or a device failure in the middle stops the run
and returns what finished (``complete`` False); green contexts are torn down either way.

Timing: CUDA events on the measured stream, warm-up launches first, then ``repeats`` timed runs of
at least ``MIN_RUN_MS`` each (several launches when one is shorter); rates are work / time per
launch, summarised by median, p10/p90, min/max. Co-run: both streams wait on a gate (a spin kernel
on the default stream) while all their work is queued, then run; each stream records an event per
unit of work, and each one's rate counts only the units completed before the first stream ran out
of work, so both were busy the whole window.
"""

from __future__ import annotations

import contextlib
import datetime
import math
from collections.abc import Callable
from typing import Any

from ..errors import DeviceError, InputError, PdmuxError
from . import greenctx, kernels
from .plan import GATE_MS, MEMORY_HEADROOM_BYTES, MIN_RUN_MS, BenchPlan, PlanDevice
from .results import BenchResults, LevelResult, RunInfo, SweepPoint
from .stats import RateStats, median, overlap_end_ms, overlap_rate

#: Value the read kernel compares its folded loads with (any value: it only has to be unknown to
#: the compiler).
READ_MAGIC = 0x5EED1234
#: Host time budgeted per queued launch when sizing the co-run gate (s).
ENQUEUE_S_PER_LAUNCH = 30e-6
#: Co-run units per window: each stream records an event every ``window / UNITS_PER_WINDOW``.
UNITS_PER_WINDOW = 40

StepCallback = Callable[[str], None]


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
            f"torch {torch.__version__} (CUDA {torch.version.cuda}) cannot use the GPU: torch.cuda.is_available() is False"
        )
    return torch


def plan_device(info: greenctx.DeviceInfo, device_name: str, gpu: str | None) -> PlanDevice:
    """The real device as a :class:`PlanDevice`: its name (``torch.cuda.get_device_name``) looked up
    with ``hardware.find_gpu``; the device's own SMs, capability, L2 and memory always win.

    ``gpu``: the ``--gpu`` option; on a real run it must name a profile with the device's SM count
    (:class:`InputError` otherwise). Without a matching profile the device's own numbers are used.
    """
    from ..hardware import find_gpu, find_gpu_or_file

    profile = None
    try:
        profile = find_gpu_or_file(gpu) if gpu else find_gpu(device_name)
    except InputError:
        if gpu:
            raise
    if profile is not None and profile.sm_count != info.sm_count:
        if gpu:
            raise InputError(
                f"--gpu {gpu}: profile {profile.name} has {profile.sm_count} SMs but device {info.index} "
                f"({device_name}) has {info.sm_count}; drop --gpu to use the device's own numbers"
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
        torch.cuda.set_device(self.dev)
        self._allocate()
        self._load(image)

    def _sizes_text(self) -> str:
        p = self.plan
        text = (f"GEMM {p.gemm.text} bf16 ({p.gemm.operand_bytes} bytes), read buffer and its copy "
                f"2 x {p.buffer_bytes} bytes")
        if p.skinny is not None:
            text += f", skinny GEMM weights {p.skinny_copies} x {p.skinny.weight_bytes} bytes"
        return text

    def _allocate(self) -> None:
        torch, p = self.torch, self.plan
        free, _total = torch.cuda.mem_get_info(self.dev)
        need = p.memory_needed_bytes + MEMORY_HEADROOM_BYTES
        if need > free:
            raise DeviceError(
                f"out of device memory: the bench needs {need / 1e9:.2f} GB ({self._sizes_text()}) but "
                f"{free / 1e9:.2f} GB is free on device {p.device_index}: use a smaller --gemm-shape or --buffer-bytes"
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
            self.buf = torch.randint(-(2**31), 2**31 - 1, (words,), device=self.dev, dtype=torch.int32, generator=gen)
            self.copy_dst = torch.empty_like(self.buf)
            self.smid_out = torch.empty(p.smid_blocks, device=self.dev, dtype=torch.int32)
            self.sink = torch.zeros(4, device=self.dev, dtype=torch.int32)
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
                f"out of device memory allocating {self._sizes_text()} on device {p.device_index}: "
                "use a smaller --gemm-shape or --buffer-bytes"
            ) from None

    def _load(self, image: bytes) -> None:
        drv = self.drv
        self.library = greenctx.call(drv.cuLibraryLoadData(image, [], [], 0, [], [], 0), "cuLibraryLoadData (bench kernels)")

        def function(name: str) -> Any:
            kernel = greenctx.call(drv.cuLibraryGetKernel(self.library, name.encode()), f"cuLibraryGetKernel({name})")
            return drv.CUfunction(int(kernel))  # a CUkernel launches in the context of the stream

        self.read_fn = function("pdmux_read_bw")
        self.smid_fn = function("pdmux_smid")
        self.spin_fn = function("pdmux_spin")
        import ctypes

        n_vec = self.plan.buffer_bytes // kernels.READ_VECTOR_BYTES
        self._read_grid = self.plan.read_grid_blocks
        self.read_args = ((self.buf.data_ptr(), n_vec, self.sink.data_ptr(), READ_MAGIC),
                          (ctypes.c_void_p, ctypes.c_ulonglong, ctypes.c_void_p, ctypes.c_uint))
        self.smid_args = ((self.smid_out.data_ptr(), kernels.SMID_SPIN_NS), (ctypes.c_void_p, ctypes.c_ulonglong))
        self._ulonglong = ctypes.c_ulonglong

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

    def read(self, stream: Any) -> None:
        """The read kernel over the whole buffer (``plan.buffer_bytes`` bytes)."""
        self._launch(self.read_fn, self._read_grid, kernels.READ_BLOCK, stream, self.read_args, "pdmux_read_bw")

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
        """One thread spinning ``ms`` on ``stream`` (the co-run gate)."""
        args = ((int(ms * 1e6),), (self._ulonglong,))
        self._launch(self.spin_fn, 1, 1, stream, args, "pdmux_spin")

    def smids(self, stream: Any) -> tuple[int, ...]:
        """Distinct SM ids the SM-id kernel's blocks ran on, launched on ``stream``."""
        torch = self.torch
        self.smid_out.fill_(-1)
        torch.cuda.synchronize(self.dev)
        self._launch(self.smid_fn, self.plan.smid_blocks, kernels.SMID_BLOCK, stream, self.smid_args, "pdmux_smid")
        stream.synchronize()
        return tuple(sorted({int(v) for v in self.smid_out.cpu().tolist() if v >= 0}))

    # -- timing ------------------------------------------------------------------------------------
    def _event(self) -> Any:
        return self.torch.cuda.Event(enable_timing=True)

    def time_launches(self, launch: Callable[[Any], None], stream: Any, work: float) -> RateStats:
        """Rate of ``launch`` on ``stream``: ``work`` (bytes or FLOPs per launch) / time per launch.

        Warm-up launches, a probe launch to size the runs (at least ``MIN_RUN_MS`` each), then
        ``plan.repeats`` runs, each between two CUDA events on ``stream``.
        """
        for _ in range(self.plan.warmup):
            launch(stream)
        first, last = self._event(), self._event()
        first.record(stream)
        launch(stream)
        last.record(stream)
        last.synchronize()
        inner = max(1, math.ceil(MIN_RUN_MS / max(first.elapsed_time(last), 1e-3)))
        marks = []
        for _ in range(self.plan.repeats):
            start, end = self._event(), self._event()
            start.record(stream)
            for _ in range(inner):
                launch(stream)
            end.record(stream)
            marks.append((start, end))
        stream.synchronize()
        return RateStats.from_times(work, [s.elapsed_time(e) / 1e3 / inner for s, e in marks])

    def corun(self, p_stream: Any, d_stream: Any, gemm_s: float, read_s: float) -> tuple[RateStats, RateStats, float]:
        """GEMM on ``p_stream`` and the read kernel on ``d_stream`` at the same time.

        ``gemm_s``/``read_s``: their solo seconds per launch on these partitions, to size the work.
        Returns (GEMM FLOP/s, read bytes/s, median window ms) over ``plan.repeats`` windows.
        """
        torch, plan = self.torch, self.plan
        window = plan.window_ms

        def units(launch_s: float) -> tuple[int, int]:
            per_unit = max(1, math.ceil(window / UNITS_PER_WINDOW / max(launch_s * 1e3, 1e-3)))
            count = math.ceil(window / (per_unit * launch_s * 1e3)) + 2
            return per_unit, count

        g_per, g_units = units(gemm_s)
        r_per, r_units = units(read_s)
        gate_ms = max(GATE_MS, 2e3 * ENQUEUE_S_PER_LAUNCH * (g_per * g_units + r_per * r_units))
        default = torch.cuda.default_stream(self.dev)
        flops, rates, windows = [], [], []
        for _ in range(plan.repeats):
            gate = self._event()
            self.spin(default, gate_ms)
            gate.record(default)
            p_stream.wait_event(gate)
            d_stream.wait_event(gate)
            p_start, d_start = self._event(), self._event()
            p_start.record(p_stream)
            d_start.record(d_stream)
            p_ends, d_ends = [], []
            i = j = 0
            while i < g_units or j < r_units:  # interleave units in proportion
                if i < g_units and (j >= r_units or i * r_units <= j * g_units):
                    for _ in range(g_per):
                        self.gemm(p_stream)
                    ev = self._event()
                    ev.record(p_stream)
                    p_ends.append(ev)
                    i += 1
                else:
                    for _ in range(r_per):
                        self.read(d_stream)
                    ev = self._event()
                    ev.record(d_stream)
                    d_ends.append(ev)
                    j += 1
            p_stream.synchronize()
            d_stream.synchronize()
            p_ms = [gate.elapsed_time(e) for e in p_ends]
            d_ms = [gate.elapsed_time(e) for e in d_ends]
            until = overlap_end_ms(p_ms, d_ms)
            f_rate, _, f_span = overlap_rate(gate.elapsed_time(p_start), p_ms, g_per * plan.gemm.flops, until)
            r_rate, _, r_span = overlap_rate(gate.elapsed_time(d_start), d_ms, r_per * plan.read_bytes_per_launch, until)
            flops.append(f_rate)
            rates.append(r_rate)
            windows.append(min(f_span, r_span))
        return RateStats.from_rates(flops), RateStats.from_rates(rates), median(windows)


def _device_error(exc: BaseException, w: Workloads) -> DeviceError:
    """A torch/CUDA ``RuntimeError`` as a one-line :class:`DeviceError` (out of memory: with the sizes)."""
    first = " ".join(str(exc).split())[:300]
    if "out of memory" in first.lower():
        return DeviceError(f"out of device memory during the run ({w._sizes_text()}): {first}")
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
    torch, plan = w.torch, w.plan
    with greenctx.LevelPartitions(w.info, prefill_sms, decode_sms) as lv:
        ps = torch.cuda.ExternalStream(lv.prefill.stream_handle, device=w.dev)
        ds = torch.cuda.ExternalStream(lv.decode.stream_handle, device=w.dev)
        try:
            smid_p = w.smids(ps)
            smid_d = w.smids(ds)
            solo_gemm = w.time_launches(w.gemm, ps, plan.gemm.flops)
            solo_read = w.time_launches(w.read, ds, plan.read_bytes_per_launch)
            co_gemm, co_read, window = w.corun(ps, ds, solo_gemm.median_s, solo_read.median_s)
        finally:
            ps.synchronize()
            ds.synchronize()
            del ps, ds
            _clear_cublas_workspaces(torch)
        return LevelResult(
            prefill_sms=prefill_sms, decode_sms=decode_sms, pair_granted_sms=lv.pair_granted_sms,
            granted_prefill_sms=lv.prefill.granted_sms, granted_decode_sms=lv.decode.granted_sms,
            smid_prefill=smid_p, smid_decode=smid_d, solo_gemm=solo_gemm, solo_read=solo_read,
            corun_gemm=co_gemm, corun_read=co_read, corun_window_ms=window,
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


def run_info(info: greenctx.DeviceInfo, torch: Any, plan: BenchPlan, kernel_image: str) -> RunInfo:
    """Identity of the run (names, versions, UTC date)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    try:
        nv = ".".join(map(str, kernels.nvrtc_version()))
    except PdmuxError:
        nv = "?"
    return RunInfo(
        gpu_name=plan.device.name, sm_count=info.sm_count, compute_capability=info.compute_capability,
        device_index=info.index, profile_key=plan.device.profile_key, driver_cuda_version=info.driver_version_text,
        cuda_version=str(torch.version.cuda), torch_version=str(torch.__version__),
        cuda_python_version=info.bindings_version, nvrtc_version=nv, kernel_image=kernel_image,
        date=now.date().isoformat(), started_at=now.isoformat(timespec="seconds"),
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
    res = BenchResults(run=run_info(info, torch, plan, image_text), plan=plan_json)
    res.notes.extend(plan.notes)
    w = Workloads(torch, plan, info, image)

    def step(label: str) -> None:
        if on_step is not None:
            on_step(label)

    def done() -> None:
        if on_result is not None:
            on_result(res)

    try:
        default = torch.cuda.default_stream(w.dev)
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
        res.complete = not res.step_errors
    except KeyboardInterrupt:
        res.interrupted = True
        res.notes.append("interrupted by Ctrl-C: the results hold the steps that finished")
    except (PdmuxError, RuntimeError) as exc:  # torch reports CUDA failures as RuntimeError
        error = exc if isinstance(exc, PdmuxError) else _device_error(exc, w)
        if res.copy is None:
            w.close()
            raise error from None
        res.error = str(error)
        res.notes.append(f"stopped by an error: {error}")
    finally:
        res.sweep.sort(key=lambda p: (p.granted_sms, p.kind == "whole"))
        with contextlib.suppress(PdmuxError, RuntimeError):  # the run's outcome matters more than the unload
            w.close()
    return res
