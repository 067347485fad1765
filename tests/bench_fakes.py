"""Stand-ins for cuda-python's driver module, NVML and torch's CUDA events, recording every call, for
the CPU tests of ``pdmux bench`` (tests/test_bench_partitions.py, tests/test_bench_timing.py).

They follow the conventions of the real modules: cuda-python's ``(err, *outs)`` tuples, pynvml's
functions and ``NVMLError``, torch's ``Event.record/query/elapsed_time`` (ms). Nothing here needs a
GPU, torch or NVML.
"""

from __future__ import annotations

import enum
import os
from types import SimpleNamespace


class R(enum.IntEnum):
    """The CUresult codes the fakes return."""

    CUDA_SUCCESS = 0
    CUDA_ERROR_LAUNCH_FAILED = 719
    CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION = 915


WQ_TYPE = 1000


class FakeDriver:
    """``cuda.bindings.driver`` for one device of ``total`` SMs, granularity 8 on splits.

    ``driver``: the CUDA version ``cuDriverGetVersion`` reports; ``workqueue``: the bindings know
    WORKQUEUE_CONFIG resources (cuda-python 13.1+); ``wq_limit``: the device's concurrency limit;
    ``refuse_workqueue``: ``cuGreenCtxCreate`` fails for a descriptor with a work-queue resource;
    ``refuse_at``: a split for that many SMs fails (915); ``has_stream_create=False``: bindings without
    ``cuGreenCtxStreamCreate`` (streams made by pushing the context).
    A split whose count, rounded up to 8, exceeds its input is refused (915), as the issue describes a
    driver doing. ``calls`` records what was called, in order; ``cuInit`` records the value of
    CUDA_DEVICE_MAX_CONNECTIONS at that moment.
    """

    CUgreenCtxCreate_flags = SimpleNamespace(CU_GREEN_CTX_DEFAULT_STREAM=1)
    CUstream_flags = SimpleNamespace(CU_STREAM_NON_BLOCKING=1)
    CUdevice_attribute = SimpleNamespace(
        CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT="sms", CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR="major",
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR="minor", CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE="l2",
    )

    def __init__(self, total=132, driver=12080, workqueue=False, wq_limit=32, refuse_workqueue=False,
                 name="NVIDIA H100 80GB HBM3", launch_error=R.CUDA_SUCCESS, refuse_at=None,
                 has_stream_create=True):
        self.total, self.driver, self.wq_limit, self.refuse_at = total, driver, wq_limit, refuse_at
        if not has_stream_create:  # cuda-python before 12.5: no cuGreenCtxStreamCreate
            self.cuGreenCtxStreamCreate = None
        self.refuse_workqueue, self.name, self.launch_error = refuse_workqueue, name, launch_error
        self.calls: list[tuple] = []
        self.live_ctx: dict[int, int] = {}
        self.live_streams: set[int] = set()
        self._next = 100
        types = {"CU_DEV_RESOURCE_TYPE_SM": 1}
        if workqueue:
            types["CU_DEV_RESOURCE_TYPE_WORKQUEUE_CONFIG"] = WQ_TYPE
            self.CUdevWorkqueueConfigScope = SimpleNamespace(CU_WORKQUEUE_SCOPE_DEVICE_CTX=0,
                                                             CU_WORKQUEUE_SCOPE_GREEN_CTX_BALANCED=1)
        self.CUdevResourceType = SimpleNamespace(**types)

    @staticmethod
    def _sm(sms):
        return SimpleNamespace(type=1, sm=SimpleNamespace(smCount=sms))

    def _handle(self):
        self._next += 1
        return self._next

    # -- device ------------------------------------------------------------------------------------
    def cuInit(self, flags):
        self.calls.append(("cuInit", os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS")))
        return (R.CUDA_SUCCESS,)

    def cuDriverGetVersion(self):
        return R.CUDA_SUCCESS, self.driver

    def cuDeviceGetCount(self):
        return R.CUDA_SUCCESS, 1

    def cuDeviceGet(self, index):
        return R.CUDA_SUCCESS, index

    def cuDeviceGetName(self, length, dev):
        return R.CUDA_SUCCESS, self.name.encode() + b"\x00" * 8

    def cuDeviceGetAttribute(self, attr, dev):
        return R.CUDA_SUCCESS, {"sms": self.total, "major": 9, "minor": 0, "l2": 50 << 20}[attr]

    def cuDeviceTotalMem(self, dev):
        return R.CUDA_SUCCESS, 80 << 30

    def cuDeviceGetPCIBusId(self, length, dev):
        return R.CUDA_SUCCESS, b"0000:3B:00.0\x00"

    def cuDeviceGetDevResource(self, dev, kind):
        if kind == WQ_TYPE:
            self.calls.append(("wq-resource",))
            return R.CUDA_SUCCESS, SimpleNamespace(type=WQ_TYPE, wqConfig=SimpleNamespace(sharingScope=0,
                                                                                          wqConcurrencyLimit=self.wq_limit))
        self.calls.append(("sm-resource", self.total))
        return R.CUDA_SUCCESS, self._sm(self.total)

    # -- splits and green contexts -----------------------------------------------------------------
    def cuDevSmResourceSplitByCount(self, n, res, flags, min_count):
        self.calls.append(("split", res.sm.smCount, min_count))
        group = max(8, -(-min_count // 8) * 8)
        if group > res.sm.smCount or min_count == self.refuse_at:
            return R.CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION, [], 0, None
        return R.CUDA_SUCCESS, [self._sm(group)], 1, self._sm(res.sm.smCount - group)

    def cuDevResourceGenerateDesc(self, resources, n):
        assert n == len(resources)
        described = []
        for r in resources:
            if r.type == WQ_TYPE:
                described.append(("wq", r.wqConfig.sharingScope, r.wqConfig.wqConcurrencyLimit))
            else:
                described.append(("sm", r.sm.smCount))
        self.calls.append(("desc", tuple(described)))
        return R.CUDA_SUCCESS, SimpleNamespace(parts=tuple(described))

    def cuGreenCtxCreate(self, desc, dev, flags):
        if self.refuse_workqueue and any(p[0] == "wq" for p in desc.parts):
            self.calls.append(("ctx-refused", desc.parts))
            return R.CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION, None
        h = self._handle()
        self.live_ctx[h] = next(p[1] for p in desc.parts if p[0] == "sm")
        self.calls.append(("ctx", self.live_ctx[h], h))
        return R.CUDA_SUCCESS, h

    def cuGreenCtxGetDevResource(self, ctx, kind):
        return R.CUDA_SUCCESS, self._sm(self.live_ctx[ctx])

    def cuGreenCtxStreamCreate(self, ctx, flags, priority):
        h = self._handle()
        self.live_streams.add(h)
        self.calls.append(("gstream", ctx, h))
        return R.CUDA_SUCCESS, h

    def cuCtxFromGreenCtx(self, ctx):
        return R.CUDA_SUCCESS, ("ctx-of", ctx)

    def cuCtxPushCurrent(self, ctx):
        self.calls.append(("push", ctx[1]))
        return (R.CUDA_SUCCESS,)

    def cuStreamCreate(self, flags):
        h = self._handle()
        self.live_streams.add(h)
        self.calls.append(("stream", h))
        return R.CUDA_SUCCESS, h

    def cuCtxPopCurrent(self):
        self.calls.append(("pop",))
        return R.CUDA_SUCCESS, None

    def cuStreamSynchronize(self, stream):
        return (R.CUDA_SUCCESS,)

    def cuStreamDestroy(self, stream):
        self.live_streams.remove(stream)
        self.calls.append(("destroy-stream", stream))
        return (R.CUDA_SUCCESS,)

    def cuGreenCtxDestroy(self, ctx):
        assert not any(c[0] == "gstream" and c[1] == ctx and c[2] in self.live_streams for c in self.calls), \
            "a green context destroyed before its stream"
        del self.live_ctx[ctx]
        self.calls.append(("destroy-ctx", ctx))
        return (R.CUDA_SUCCESS,)

    # -- launches ----------------------------------------------------------------------------------
    def CUstream(self, handle):
        return handle

    def cuLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, shared, stream, args, extra):
        self.calls.append(("launch", fn, gx, bx, stream))
        return (self.launch_error,)


class FakeNvml:
    """pynvml: ``nvmlInit``, a handle by PCI bus id, SM and memory clocks (MHz) that step through
    ``sm_clocks``; ``fail`` makes ``nvmlInit`` raise ``NVMLError``."""

    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2

    class NVMLError(Exception):
        pass

    def __init__(self, sm_clocks=(1980,), mem_clock=2619, fail=False):
        self.sm_clocks, self.mem_clock, self.fail = list(sm_clocks), mem_clock, fail
        self.calls: list[tuple] = []
        self._i = 0

    def nvmlInit(self):
        self.calls.append(("init",))
        if self.fail:
            raise self.NVMLError("NVML Shared Library Not Found")

    def nvmlShutdown(self):
        self.calls.append(("shutdown",))

    def nvmlDeviceGetHandleByPciBusId(self, bus_id):
        self.calls.append(("handle", bus_id))
        return ("nvml-device", bus_id)

    def nvmlDeviceGetClockInfo(self, handle, kind):
        self.calls.append(("clock", kind))
        if kind == self.NVML_CLOCK_MEM:
            return self.mem_clock
        value = self.sm_clocks[min(self._i, len(self.sm_clocks) - 1)]
        self._i += 1
        return value

    def nvmlDeviceGetMaxClockInfo(self, handle, kind):
        return 1980 if kind == self.NVML_CLOCK_SM else 2619


# -- torch's CUDA streams and events, as clocks ------------------------------------------------------


class FakeStream:
    """A CUDA stream as a clock (ms): launches advance ``t``; waiting on an event moves it forward."""

    def __init__(self, name):
        self.name, self.t, self.cuda_stream = name, 0.0, id(self)

    def wait_event(self, event):
        self.t = max(self.t, event.t)

    def synchronize(self):
        pass


class FakeEvent:
    """torch.cuda.Event on a :class:`FakeStream`: ``t`` is the stream's clock when recorded.

    ``query()`` answers whether the GPU reached it; the fake host is always done queuing before the
    fake GPU starts, so it answers False unless ``FakeEvent.opened_early`` (a count) says the gate
    opened early for that many queries.
    """

    opened_early = 0
    queries = 0

    def __init__(self, enable_timing=False):
        self.t = None

    def record(self, stream):
        self.t = stream.t

    def elapsed_time(self, other):
        return other.t - self.t

    def synchronize(self):
        pass

    def query(self):
        FakeEvent.queries += 1
        if FakeEvent.opened_early > 0:
            FakeEvent.opened_early -= 1
            return True
        return False


class FakeStamps:
    """``runner.Stamps`` in host memory: ``pairs[i] = [start_ns, end_ns]`` (start preset to -1)."""

    def __init__(self, slots):
        self.pairs = [[-1, 0] for _ in range(max(1, slots))]
        self.resets = 0

    def reset(self):
        self.resets += 1
        for pair in self.pairs:
            pair[:] = [-1, 0]

    def intervals(self):
        return [(s, e) for s, e in self.pairs if 0 <= s <= e]


def fake_workloads(plan, default, gemm_ms, read_ms, slowdown=(1.0, 1.0), serial=False, mark_ms=0.0):
    """A ``runner.Workloads`` whose launches advance :class:`FakeStream` clocks (ms) and write
    ``%globaltimer``-like stamps (ns). ``slowdown`` ``(gemm, read)`` divides each kernel's speed in a
    window with both streams (co-run interference). ``serial``: one GPU clock for every stream, so
    kernels take turns in the order they were queued (what shared work queues can do). A gate (spin)
    starts once every stream seen so far is done: the host synchronised before queuing it.
    Returns ``(workloads, launched)``: ``launched`` counts launches by kernel, ``launched["gates_ms"]``
    lists the length of every launch gate.
    """
    from pdmux_cli.bench import runner

    w = object.__new__(runner.Workloads)
    w.plan, w.dev, w.clocks, w.gate_retries = plan, None, None, 0
    w.torch = SimpleNamespace(cuda=SimpleNamespace(Event=FakeEvent, default_stream=lambda dev: default))
    state = {"corun": False}
    gpu = {"t": 0.0}
    launched = {"gemm": 0, "read": 0, "mark": 0, "spin": 0, "gates_ms": []}

    seen: list = []

    def run(stream, ms, kind):
        launched[kind] += 1
        if stream not in seen:
            seen.append(stream)
        start = max(stream.t, gpu["t"]) if serial else stream.t
        if kind == "spin":  # a gate is queued once the host waited for everything before it
            start = max([start] + [s.t for s in seen])
        stream.t = start + ms
        if serial:
            gpu["t"] = stream.t
        return start

    def gemm(stream):
        run(stream, gemm_ms / (slowdown[0] if state["corun"] else 1.0), "gemm")

    def read(stream, stamps=None, index=0):  # atomicMin / atomicMax, as the kernel
        start = run(stream, read_ms / (slowdown[1] if state["corun"] else 1.0), "read")
        if stamps is not None:
            pair = stamps.pairs[index]
            first = round(start * 1e6)
            pair[0] = first if pair[0] < 0 else min(pair[0], first)
            pair[1] = max(pair[1], round(stream.t * 1e6))

    def mark(stream, stamps, index, end):
        run(stream, mark_ms, "mark")
        stamps.pairs[index][1 if end else 0] = round(stream.t * 1e6)

    def spin(stream, ms):
        launched["gates_ms"].append(ms)
        run(stream, ms, "spin")

    real_window = w.window

    def window(jobs):
        state["corun"] = len(jobs) > 1
        return real_window(jobs)

    w.gemm, w.read, w.mark, w.spin, w.stamps, w.window = gemm, read, mark, spin, FakeStamps, window
    w.copy = lambda stream: run(stream, read_ms, "read")
    return w, launched
