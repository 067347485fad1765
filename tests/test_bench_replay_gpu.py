"""``pdmux bench --model`` on a real GPU: the replay of Qwen3-0.6B (real shapes) on green contexts at SGLang's
first level and the level it picks, CUDA graphs captured on the partitions' streams, SGLang's loop, the
calibration it writes. Skipped without an NVIDIA GPU (tests/test_bench_gpu.py's probe).

No assertion on how fast anything is: what holds on any GPU (granted splits, every round at least its decode
step, the prefill in its slices, a loadable calibration).
Run: ``python -m pytest -m gpu tests/test_bench_replay_gpu.py -q``.
"""

from __future__ import annotations

import json

import pytest
from test_bench_gpu import READY, WHY  # the same probe: the driver's cuInit and torch's CUDA
from typer.testing import CliRunner

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not READY, reason=f"no usable GPU: {WHY}")]


@pytest.fixture(scope="module")
def replay():
    """Qwen3-0.6B, 32 x 2048 and a 8192-token prompt, at level 1 and SGLang's choice, 3 repeats."""
    from pdmux_cli.bench import model_replay, runner
    from pdmux_cli.bench.replay_plan import make_replay_plan, replay_plan_dict
    from pdmux_cli.catalog.model import load_model

    info, torch, pdev = runner.prepare(0, None)
    device = model_replay.ReplayDevice(torch, "cuda", 0)
    plan = make_replay_plan(load_model("qwen3-0.6b"), pdev, available_bytes=device.free_bytes(),
                            granularity=info.granularity, repeats=3)
    chosen = plan.levels.index(plan.chosen_level) + 1 if plan.chosen_level in plan.levels else 1
    plan = make_replay_plan(load_model("qwen3-0.6b"), pdev, available_bytes=device.free_bytes(),
                            granularity=info.granularity, repeats=3, levels=f"1,{chosen}")
    res = model_replay.run_replay(plan, device, replay_plan_dict(plan), info)
    return plan, res


def test_replay_completes_with_graphs(replay) -> None:
    plan, res = replay
    assert res.complete and res.error is None, (res.error, res.step_errors)
    assert res.cuda_graph, res.notes
    assert len(res.levels) == len(plan.levels) and res.whole is not None


def test_levels_granted_as_asked(replay) -> None:
    from pdmux_cli.sglang.split_levels import cuda_sm_granularity

    plan, res = replay
    _minimum, multiple = cuda_sm_granularity(plan.device.compute_capability[0])
    for lv in res.levels:
        assert lv.granted_prefill_sms >= lv.prefill_sms
        if lv.prefill_sms % multiple == 0:
            assert lv.granted_prefill_sms == lv.prefill_sms
        assert lv.granted_prefill_sms + lv.granted_decode_sms <= plan.device.sm_count


def test_loop_rounds_hold_their_decode_step(replay) -> None:
    """A round launches a decode step and waits for it: every round is at least its step, so the medians are
    too; the prefill takes at least as many rounds as it has slices."""
    plan, res = replay
    for lv in res.levels:
        assert lv.corun.itl.median_ms >= lv.corun.decode_step.median_ms
        assert lv.decode.round.median_ms >= lv.decode.step.median_ms
        assert lv.corun.tokens_during_prefill >= len(plan.slices)
        assert lv.prefill.median_ms > 0 and lv.corun.prefill.median_ms > 0


def test_calibration_from_the_whole_gpu(replay) -> None:
    from pdmux_cli.bench.replay_results import calibration_from_replay
    from pdmux_cli.costmodel.whole_gpu_fit import FIXED_RANGE
    from pdmux_cli.catalog.hardware import find_gpu

    plan, res = replay
    if not plan.device.profile_key:
        pytest.skip(f"no GPU profile for {plan.device.name}")
    cal, why = calibration_from_replay(res, plan, find_gpu(plan.device.profile_key))
    if cal is None:
        assert why.startswith("no calibration: ")
        return
    low, high = FIXED_RANGE
    assert low <= cal.whole_gpu.decode_fixed_s <= high and cal.whole_gpu.points == 1


def test_cli_writes_results_and_calibration(tmp_path) -> None:
    from pdmux_cli.costmodel.calibration_file import load_calibration
    from pdmux_cli.cli import app

    result = CliRunner().invoke(app, ["bench", "--model", "qwen3-0.6b", "--levels", "1", "--repeats", "2",
                                      "--prompt-tokens", "2048", "--output", str(tmp_path)])
    assert result.exit_code == 0, result.stderr
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["complete"] and data["green_contexts"] and data["levels"][0]["granted_decode_sms"] > 0
    if (tmp_path / "calibration.yaml").exists():
        assert load_calibration(tmp_path / "calibration.yaml").whole_gpu.model == "Qwen3-0.6B"
