"""``pdmux bench`` on a real GPU: granted splits, disjoint SMs, the read kernel near copy rate, the GEMM
near torch's own matmul, both kernels really running at the same time at every level, the launch gate,
clocks, and a clean teardown. Skipped without an NVIDIA GPU (no conftest: the probe below is the
driver's ``cuInit`` plus a torch CUDA check, both cheap; the probe also sets
CUDA_DEVICE_MAX_CONNECTIONS=32 before CUDA starts in this process).

Run: ``python -m pytest -m gpu tests/test_bench_gpu.py -q`` (``make gpu-check`` does, then a short bench).
"""

from __future__ import annotations

import pytest


def _gpu_ready() -> tuple[bool, str]:
    try:
        from pdmux_cli.bench import greenctx, runner

        greenctx.probe_device(0)
        runner.import_torch()
    except Exception as exc:  # noqa: BLE001 - any failure means: no usable GPU here
        return False, " ".join(str(exc).split())[:200]
    return True, ""


READY, WHY = _gpu_ready()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not READY, reason=f"no usable GPU: {WHY}")]


@pytest.fixture(scope="module")
def env():
    from pdmux_cli.bench import runner

    return runner.prepare(0, None)


@pytest.fixture(scope="module")
def run(env):
    """One short bench over every level: the default GEMM and buffer, 5 repeats, 50 ms co-run windows."""
    from pdmux_cli.bench import plan as bplan
    from pdmux_cli.bench import runner

    info, torch, pdev = env
    plan = bplan.make_plan(pdev, quick=True, repeats=5, granularity=info.granularity)
    res = runner.run_bench(plan, info, torch, bplan.plan_dict(plan))
    assert res.error is None, res.error
    return plan, res


def test_run_completes(run) -> None:
    plan, res = run
    assert res.complete, res.step_errors
    assert len(res.levels) == len(plan.levels) > 0
    assert [p.requested_sms
            for p in sorted(res.sweep, key=lambda p: p.requested_sms)] == sorted(plan.sweep_sms)


def test_split_sizes_granted(run) -> None:
    plan, res = run
    _minimum, multiple = plan.granularity
    total = plan.device.sm_count
    for point in res.sweep:
        if point.kind == "whole":
            assert point.granted_sms == total
            continue
        assert point.granted_sms >= point.requested_sms, point
        if point.requested_sms % multiple == 0:
            assert point.granted_sms == point.requested_sms, point
    for lv in res.levels:
        assert lv.pair_granted_sms <= total
        if lv.prefill_sms + lv.decode_sms == total:  # split once for prefill, decode the remainder
            assert lv.pair_granted_sms == total, lv
            assert lv.granted_prefill_sms + lv.granted_decode_sms == total, lv
        assert 0 < lv.granted_decode_sms
        assert lv.granted_prefill_sms + lv.granted_decode_sms <= total, lv
        if lv.prefill_sms % multiple == 0:
            assert lv.granted_prefill_sms == lv.prefill_sms, lv
        # decode gets the remainder: the request minus what rounding took, never more than asked + slack
        assert lv.granted_decode_sms <= lv.decode_sms + multiple, lv


def test_smids_disjoint_and_within_grant_at_every_level(run) -> None:
    _, res = run
    for lv in res.levels:
        assert lv.smid_prefill and lv.smid_decode
        both = sorted(set(lv.smid_prefill) & set(lv.smid_decode))
        assert lv.disjoint, f"{lv.prefill_sms}/{lv.decode_sms}: SMs {both} ran both"
        assert len(lv.smid_prefill) <= lv.granted_prefill_sms, lv
        assert len(lv.smid_decode) <= lv.granted_decode_sms, lv


def test_levels_run_side_by_side(run) -> None:
    """Disjoint SMs do not guarantee concurrency: the %globaltimer stamps must show both kernels
    running for most of the co-run window, and the factors must add up to more than time-sharing."""
    _, res = run
    for lv in res.levels:
        assert lv.overlap_share is not None, lv
        assert lv.overlap_share >= 0.8, (f"{lv.prefill_sms}/{lv.decode_sms}: both ran {lv.overlap_share:.0%} "
                                         "of the window")
        assert not lv.serialised, (lv.flops_factor, lv.bandwidth_factor)


def test_launch_set_up_recorded(run) -> None:
    _, res = run
    assert res.run.cuda_device_max_connections == "32"
    assert res.run.workqueue
    if res.run.workqueue.startswith("balanced"):  # a 13.1+ driver: each level's contexts got one
        assert all(lv.workqueue.startswith("balanced") for lv in res.levels), [
            lv.workqueue for lv in res.levels]


def test_clocks_recorded_with_nvml(run) -> None:
    pytest.importorskip("pynvml")
    _, res = run
    whole = res.whole()
    assert whole.gemm.sm_clock_mhz and whole.gemm.mem_clock_mhz, whole.gemm
    assert res.run.max_sm_clock_mhz and whole.gemm.sm_clock_mhz <= res.run.max_sm_clock_mhz + 1
    assert all(lv.corun_gemm.sm_clock_mhz for lv in res.levels)


def test_gate_measures_the_gpu_not_the_launch_rate(env) -> None:
    """A kernel far shorter than a Python launch (the spin kernel asked for 0 ns), timed behind the
    launch gate: the GPU's time per launch is below the host's time to queue one, which it could not
    be if the runs waited for Python."""
    import time

    from pdmux_cli.bench import kernels
    from pdmux_cli.bench import plan as bplan
    from pdmux_cli.bench.runner import Workloads

    info, torch, pdev = env
    plan = bplan.make_plan(pdev, quick=True, gemm=bplan.GemmShape(256, 256, 256),
                           granularity=info.granularity)
    image, _ = kernels.compile_for_device(info.compute_capability)
    w = Workloads(torch, plan, info, image)
    try:
        default = torch.cuda.default_stream(w.dev)
        stats = w.time_launches(lambda s: w.spin(s, 0.0), default, 1.0)
        torch.cuda.synchronize()
        started = time.perf_counter()
        for _ in range(2000):
            w.spin(default, 0.0)
        host_s = (time.perf_counter() - started) / 2000
        torch.cuda.synchronize()
        assert stats.median_s < host_s, (stats.median_s, host_s)
        assert w.gate_retries <= 1
    finally:
        w.close()


def test_read_kernel_reaches_90_percent_of_copy(run) -> None:
    _, res = run
    assert res.full_read_rate() >= 0.9 * res.copy.median, (res.full_read_rate(), res.copy.median)


def test_gemm_within_5_percent_of_default_stream_matmul(run) -> None:
    _, res = run
    whole = res.whole()
    assert whole is not None
    assert whole.gemm.median == pytest.approx(res.matmul.median, rel=0.05)


def test_smaller_partitions_are_slower(run) -> None:
    _, res = run
    smallest = min(res.sweep, key=lambda p: p.granted_sms)
    assert smallest.gemm.median < 0.5 * res.full_gemm_rate()
    assert res.s_sat_sms() <= res.run.sm_count


def test_calibration_round_trip_and_estimate(run, tmp_path) -> None:
    from pdmux_cli.bench.results import calibration_from_results
    from pdmux_cli.costmodel.calibration_file import dump_calibration, load_calibration
    from pdmux_cli.util.errors import InputError
    from pdmux_cli.planning.estimate import estimate
    from pdmux_cli.catalog.hardware import find_gpu
    from pdmux_cli.catalog.model import load_model

    _, res = run
    cal = calibration_from_results(res)
    path = tmp_path / "calibration.yaml"
    path.write_text(dump_calibration(cal))
    assert load_calibration(path) == cal
    try:
        gpu = find_gpu(res.run.gpu_name)
    except InputError:
        pytest.skip(f"no profile for {res.run.gpu_name}")
    result = estimate(gpu, load_model("qwen3-8b"), calibration=cal)
    assert any(r.policy == "pdmux" for r in result.rows)


def test_partitions_torn_down_also_on_ctrl_c(env) -> None:
    from pdmux_cli.bench import greenctx

    info, torch, _ = env
    total = info.sm_count
    p = (total // 2) // 8 * 8
    for _ in range(20):
        with greenctx.LevelPartitions(info, p, total - p) as lv:
            assert lv.live_handles == 4
        assert lv.live_handles == 0
    with pytest.raises(KeyboardInterrupt), greenctx.LevelPartitions(info, p, total - p) as lv:
        raise KeyboardInterrupt
    assert lv.live_handles == 0
    x = torch.ones(1024, device="cuda")
    assert float(x.sum()) == 1024.0  # the device is still usable


def test_single_partition_smids(env) -> None:
    from pdmux_cli.bench import greenctx, kernels
    from pdmux_cli.bench import plan as bplan
    from pdmux_cli.bench.runner import Workloads

    info, torch, pdev = env
    plan = bplan.make_plan(pdev, quick=True, gemm=bplan.GemmShape(256, 256, 256),
                           granularity=info.granularity)
    image, _ = kernels.compile_for_device(info.compute_capability)
    w = Workloads(torch, plan, info, image)
    try:
        with greenctx.SmPartition(info, 16) as part:
            stream = torch.cuda.ExternalStream(part.partition.stream_handle, device=w.dev)
            seen = w.smids(stream)
            assert 0 < len(seen) <= part.partition.granted_sms
            del stream
    finally:
        w.close()
