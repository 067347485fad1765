"""The bench's timing without a GPU: the overlap share from given timestamps, the serialisation flag,
the launch gate (retried when a fake gate opens early), solo and co-run in the same windowed loop,
the warm-up, and NVML clocks through a stand-in pynvml. Stream clocks and events are fakes
(tests/bench_fakes.py)."""

from __future__ import annotations

import math
import sys

import pytest
from bench_fakes import FakeEvent, FakeNvml, FakeStream, fake_workloads

from pdmux_cli.bench import plan as bplan
from pdmux_cli.bench import runner
from pdmux_cli.bench.clocks import Clocks
from pdmux_cli.messages import render
from pdmux_cli.bench.results import SERIALISED_FACTOR_SUM, LevelResult
from pdmux_cli.bench.stats import RateStats, merge_intervals, overlap_share
from pdmux_cli.util.errors import DeviceError
from pdmux_cli.catalog.hardware import find_gpu


@pytest.fixture(autouse=True)
def gate_holds():
    """Every fake gate holds until its work is queued unless a test says otherwise."""
    FakeEvent.opened_early = 0
    FakeEvent.queries = 0
    yield
    FakeEvent.opened_early = 0


def _plan(quick=True, **options):
    return bplan.make_plan(bplan.PlanDevice.from_gpu(find_gpu("h100")), quick=quick, **options)


def _stats(value):
    return RateStats.from_rates([value])


# ---- overlap share from timestamps -----------------------------------------------------------------


def test_merge_intervals() -> None:
    assert merge_intervals([(5, 7), (0, 2), (1, 3), (7, 9), (4, 4), (6, 5)]) == [(0, 3), (5, 9)]
    assert merge_intervals([]) == []


def test_overlap_share_side_by_side() -> None:
    reads = [(0, 100), (102, 200), (201, 300)]  # ns; 3 launches with gaps of 2 and 1
    gemms = [(10, 150), (150, 290)]
    # window: max(0, 10) = 10 .. min(300, 290) = 290 -> 280 ns, of which both ran all but the gaps 100-102,
    # 200-201
    assert overlap_share(reads, gemms) == pytest.approx(277 / 280)


def test_overlap_share_taking_turns() -> None:
    reads = [(0, 10), (20, 30), (40, 50)]
    gemms = [(10, 20), (30, 40), (50, 60)]
    assert overlap_share(reads, gemms) == 0.0  # interleaved, never together: the signature of serialisation


def test_overlap_share_one_after_the_other_and_partial() -> None:
    assert overlap_share([(0, 100)], [(100, 200)]) == 0.0  # the window is empty
    assert overlap_share([(0, 100)], [(50, 200)]) == 1.0  # window 50..100, both ran throughout
    assert overlap_share([(0, 40), (60, 100)], [(0, 100)]) == pytest.approx(0.8)
    assert overlap_share([], [(0, 1)]) is None


# ---- the serialisation flag ------------------------------------------------------------------------


def _level(flops_factor, bandwidth_factor, share=None):
    return LevelResult(112, 20, 132, 112, 20, (1,), (2,), _stats(100.0), _stats(10.0),
                       _stats(100.0 * flops_factor), _stats(10.0 * bandwidth_factor), 50.0,
                       overlap_share=share)


@pytest.mark.parametrize(("f", "b", "serial"), [(0.55, 0.45, True), (0.6, 0.5, True), (0.6, 0.51, False),
                                                (0.95, 0.8, False), (0.3, 0.3, True)])
def test_serialised_flag(f, b, serial) -> None:
    assert SERIALISED_FACTOR_SUM == 1.1
    assert _level(f, b).serialised is serial


def test_serial_gpu_is_flagged_from_its_own_measurements() -> None:
    """A GPU that takes turns (one clock for every stream, FIFO): the stamps show no overlap and the
    factors add up to about 1."""
    plan = _plan()
    default, p, d = FakeStream("default"), FakeStream("p"), FakeStream("d")
    w, _ = fake_workloads(plan, default, gemm_ms=1.2, read_ms=0.7, serial=True)
    timing = w.level_windows(p, d, 1.2e-3, 0.7e-3)
    assert timing.overlap_share == pytest.approx(0.0,
                                                 abs=1e-9) and timing.overlap_share_min == pytest.approx(
                                                     0.0, abs=1e-9)
    factors = (timing.corun_gemm.median / timing.solo_gemm.median + timing.corun_read.median
               / timing.solo_read.median)
    assert 0.95 < factors < 1.05  # each stream's span ends at its own last unit: a little over 1 at most
    lv = LevelResult(112, 20, 132, 112, 20, (1,), (2,), timing.solo_gemm, timing.solo_read, timing.corun_gemm,
                     timing.corun_read, timing.window_ms, timing.overlap_share, timing.overlap_share_min)
    assert lv.serialised


def test_side_by_side_gpu_is_not_flagged() -> None:
    plan = _plan()
    default, p, d = FakeStream("default"), FakeStream("p"), FakeStream("d")
    w, _ = fake_workloads(plan, default, gemm_ms=1.2, read_ms=0.7, slowdown=(0.95, 0.8))
    timing = w.level_windows(p, d, 1.2e-3, 0.7e-3)
    assert timing.overlap_share == pytest.approx(1.0)
    assert timing.corun_gemm.median / timing.solo_gemm.median == pytest.approx(0.95)
    assert timing.corun_read.median / timing.solo_read.median == pytest.approx(0.8)


# ---- solo and co-run in the same windowed loop -----------------------------------------------------


def test_level_windows_interleave_solo_and_corun_rounds() -> None:
    plan = _plan()
    default, p, d = FakeStream("default"), FakeStream("p"), FakeStream("d")
    w, _ = fake_workloads(plan, default, gemm_ms=1.2, read_ms=0.7)
    shapes = []
    real = w.window
    w.window = lambda jobs: shapes.append(tuple(j.kind for j in jobs)) or real(jobs)
    w.level_windows(p, d, 1.2e-3, 0.7e-3)
    assert shapes == [("gemm",), ("read",), ("gemm", "read")] * plan.repeats


def test_window_brackets_gemm_units_with_markers_and_stamps_every_read() -> None:
    plan = _plan()
    default, p, d = FakeStream("default"), FakeStream("p"), FakeStream("d")
    w, launched = fake_workloads(plan, default, gemm_ms=1.2, read_ms=0.7)
    win = w.window([runner.Job(p, "gemm", 1.2e-3, plan.gemm.flops), runner.Job(d, "read", 0.7e-3, 1.0)])
    g_per, g_units = runner._units(plan.window_ms, 1.2e-3)
    r_per, r_units = runner._units(plan.window_ms, 0.7e-3)
    assert (g_per, g_units, r_per, r_units) == (2, 23, 2, 38)  # 50 ms / 40 = 1.25 ms a unit, + 2 units
    assert launched["mark"] == 2 * g_units and launched["gemm"] == g_per * g_units
    assert launched["read"] == r_per * r_units and launched["spin"] == 1
    assert len(win.busy[0]) == g_units and len(win.busy[1]) == r_per * r_units
    start, end = win.busy[0][0]
    assert end - start == round(2.4e6)  # the markers bracket a unit of 2 GEMMs of 1.2 ms (ns)
    assert win.busy[1][0][1] - win.busy[1][0][0] == round(0.7e6)  # the read kernel stamps each launch


# ---- the launch gate -------------------------------------------------------------------------------


def test_gate_sized_by_launches() -> None:
    assert runner.gate_ms(10) == bplan.GATE_MS
    assert runner.gate_ms(1000) == pytest.approx(2e3 * runner.ENQUEUE_S_PER_LAUNCH * 1000)  # 60 ms


def test_gate_that_opened_early_is_retried_longer() -> None:
    plan = _plan()
    stream = FakeStream("s")
    # a 20 us kernel: the skinny GEMM's size
    w, launched = fake_workloads(plan, stream, gemm_ms=0.02, read_ms=0.25)
    FakeEvent.opened_early = 1  # the probe's gate opens before its launches are queued
    stats = w.time_launches(w.gemm, stream, 1.0)
    assert w.gate_retries == 1
    first, retried, timed = launched["gates_ms"]
    assert retried == 2 * first and timed >= bplan.GATE_MS
    inner = math.ceil(bplan.MIN_RUN_MS / 0.02)
    assert stats.median == pytest.approx(1.0 / 0.02e-3) and stats.runs == plan.repeats
    # the dropped attempt's launches ran too, but only the kept ones were timed
    assert launched["gemm"] == 2 * (plan.warmup + 1) + plan.repeats * inner


def test_gate_that_opens_early_in_a_window_is_retried() -> None:
    plan = _plan()
    default, p, d = FakeStream("default"), FakeStream("p"), FakeStream("d")
    w, launched = fake_workloads(plan, default, gemm_ms=1.2, read_ms=0.7)
    made = []
    real_stamps = w.stamps
    w.stamps = lambda slots: made.append(real_stamps(slots)) or made[-1]
    FakeEvent.opened_early = 1
    win = w.window([runner.Job(p, "gemm", 1.2e-3, 1.0), runner.Job(d, "read", 0.7e-3, 1.0)])
    assert w.gate_retries == 1 and len(launched["gates_ms"]) == 2
    assert launched["gates_ms"][1] == 2 * launched["gates_ms"][0]
    assert win.rates[0] == pytest.approx(2 / 2.4e-3)
    assert [s.resets for s in made] == [2, 2]  # before each attempt: the dropped one's stamps are gone
    first_read = win.busy[1][0]
    assert first_read[1] - first_read[0] == round(0.7e6)  # not stretched back to the dropped attempt
    assert overlap_share(*win.busy) == pytest.approx(1.0)


def test_gate_that_never_holds_is_a_device_error() -> None:
    plan = _plan()
    stream = FakeStream("s")
    w, launched = fake_workloads(plan, stream, gemm_ms=1.0, read_ms=0.25)
    FakeEvent.opened_early = 10**6
    with pytest.raises(DeviceError, match="launch gate opened before") as err:
        w.time_launches(w.gemm, stream, 1.0)
    assert "\n" not in str(err.value)
    assert len(launched["gates_ms"]) == runner.MAX_GATE_ATTEMPTS
    assert all(b == 2 * a for a, b in zip(launched["gates_ms"], launched["gates_ms"][1:]))


# ---- warm-up ---------------------------------------------------------------------------------------


def test_warm_up_queues_about_a_second() -> None:
    plan = _plan()
    default = FakeStream("default")
    w, launched = fake_workloads(plan, default, gemm_ms=1.1, read_ms=0.5)  # copy: 0.5 ms in the fake
    queued = w.warm_up(bplan.WARMUP_S)
    units = math.ceil(1.0 / 1.6e-3)
    assert queued == pytest.approx(units * 1.6e-3) and queued >= 1.0
    assert launched["gemm"] == units + plan.warmup + 1
    assert bplan.WARMUP_S == 1.0


# ---- NVML clocks -----------------------------------------------------------------------------------


def test_clocks_through_nvml(monkeypatch) -> None:
    nvml = FakeNvml(sm_clocks=(1980, 1755), mem_clock=2619)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    clocks, why = Clocks.open("0000:3B:00.0")
    assert why is None and ("handle", "0000:3B:00.0") in nvml.calls
    assert clocks.sample() == (1980.0, 2619.0) and clocks.maximum() == (1980.0, 2619.0)
    clocks.close()
    clocks.close()
    assert nvml.calls.count(("shutdown",)) == 1


def test_clocks_sampled_at_every_measurement(monkeypatch) -> None:
    nvml = FakeNvml(sm_clocks=(1980, 1755, 1830, 1980, 1700, 1900, 1980, 1980, 1980, 1980, 1980, 1980))
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    plan = _plan()
    default, p, d = FakeStream("default"), FakeStream("p"), FakeStream("d")
    w, _ = fake_workloads(plan, default, gemm_ms=1.2, read_ms=0.7)
    w.clocks, _ = Clocks.open("0000:3B:00.0")
    solo = w.time_launches(w.gemm, p, 1.0)
    assert (solo.sm_clock_mhz, solo.min_sm_clock_mhz, solo.mem_clock_mhz) == (1980.0, 1980.0, 2619.0)
    timing = w.level_windows(p, d, 1.2e-3, 0.7e-3)
    # rounds of solo GEMM, solo read, co-run: samples 1755/1830/1980, then 1700/1900/1980, then 1980 x 3
    assert (timing.solo_gemm.sm_clock_mhz, timing.solo_gemm.min_sm_clock_mhz) == (1755.0, 1700.0)
    assert (timing.solo_read.sm_clock_mhz, timing.solo_read.min_sm_clock_mhz) == (1900.0, 1830.0)
    assert timing.corun_gemm.sm_clock_mhz == timing.corun_read.sm_clock_mhz == 1980.0
    assert timing.solo_gemm.to_dict("flops_per_s")["min_sm_clock_mhz"] == 1700.0
    assert sum(1 for c in nvml.calls if c == ("clock", FakeNvml.NVML_CLOCK_SM)) == 1 + 3 * plan.repeats


def test_no_nvml_means_no_clocks_and_a_note(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    clocks, why = Clocks.open("0000:3B:00.0")
    assert clocks is None and render(why) == (
        "nvidia-ml-py is not installed: no SM or memory clocks recorded (pip install nvidia-ml-py (in "
        "pdmux's bench extras))")
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(fail=True))
    clocks, why = Clocks.open("0000:3B:00.0")
    assert clocks is None and "NVML cannot be used (NVML Shared Library Not Found)" in render(why)
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml())
    assert Clocks.open("")[0] is None


def test_stamp_addresses_match_the_device_layout() -> None:
    """runner.Stamps against a numpy stand-in for torch's int64 tensor: the address of each stamp is
    where the kernels' ``times[0]``/``times[1]`` (or a marker's ``*out``) land."""
    np = pytest.importorskip("numpy")

    class Tensor(np.ndarray):
        def data_ptr(self):
            return self.ctypes.data

        def cpu(self):
            return self

    fake_torch = type("T", (), {"int64": np.int64,
                                "empty": staticmethod(lambda shape, dtype,
                                                      device: np.empty(shape, dtype).view(Tensor))})
    stamps = runner.Stamps(fake_torch, None, 3)
    array = stamps.tensor
    assert array.tolist() == [[-1, 0]] * 3
    for i in range(3):
        assert stamps.address(i) == array.ctypes.data + i * array.strides[0]
        assert stamps.address(i, end=True) == array.ctypes.data + i * array.strides[0] + array.strides[1]
    array[1] = [1_000, 3_000]
    array[2] = [5_000, 0]  # an end never written
    assert stamps.intervals() == [(1_000, 3_000)]
    stamps.reset()
    assert stamps.intervals() == [] and array.tolist() == [[-1, 0]] * 3
