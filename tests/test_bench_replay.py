"""``pdmux bench --model`` (the model replay) without a GPU: the plan (shapes, parameter counts, layers built,
slices, levels), the estimate next to it, results.json and the calibration from synthetic results, the pdmux
loop against fakes, the CLI's one-line errors; with torch installed, the layers built and run on the CPU.

Tests needing torch skip without it (CI installs no torch). What only a GPU can check is in
tests/test_bench_replay_gpu.py.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from cli_assertions import assert_one_line_error
from typer.testing import CliRunner

from pdmux_cli.catalog import model as mdl
from pdmux_cli.sglang import split_levels
from pdmux_cli.bench import model_replay
from pdmux_cli.bench import replay_plan as rp
from pdmux_cli.bench.plan import PlanDevice
from pdmux_cli.cli.bench_tables import replay_plan_tables, replay_tables
from pdmux_cli.bench.replay_results import (
    CorunTimes,
    DecodeTimes,
    LevelReplay,
    ReplayResults,
    ReplayRunInfo,
    TimeStats,
    WholeReplay,
    calibration_from_replay,
    results_dict,
)
from pdmux_cli.costmodel.calibration_file import dump_calibration, load_calibration
from pdmux_cli.cli import app
from pdmux_cli.messages import render
from pdmux_cli.util.errors import DeviceError, InputError
from pdmux_cli.catalog.hardware import find_gpu
from pdmux_cli.catalog.model import load_model, model_from_config

cli = CliRunner()
H100 = find_gpu("h100")
H100_DEVICE = PlanDevice.from_gpu(H100)

TINY_DENSE = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 6, "num_attention_heads": 4,
              "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128, "vocab_size": 256,
              "tie_word_embeddings": False, "max_position_embeddings": 4096}
TINY_MOE = {"model_type": "qwen3_moe", "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128, "moe_intermediate_size": 32,
            "num_experts": 8, "num_experts_per_tok": 2, "decoder_sparse_step": 1, "mlp_only_layers": [0],
            "shared_expert_intermediate_size": 48, "vocab_size": 256, "tie_word_embeddings": True}
TINY_SLIDING = {"model_type": "gpt_oss", "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
                "num_key_value_heads": 1, "head_dim": 16, "intermediate_size": 32, "num_local_experts": 4,
                "experts_per_token": 2, "vocab_size": 128, "sliding_window": 8, "tie_word_embeddings": False,
                "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]}


def tiny(config: dict, name: str = "tiny"):
    return model_from_config(config, name=name)


def tiny_plan(config: dict = TINY_DENSE, **kw):
    options = {"device_kind": "cpu", "decode_bs": 4, "context_tokens": 32, "prompt_tokens": 64,
               "available_bytes": 10**10, "repeats": 2, "token_budget": 128, **kw}
    return rp.make_replay_plan(tiny(config), H100_DEVICE, **options)


# ---- shapes and parameter counts ------------------------------------------------------------------

REPLAYABLE = [n for n in mdl.list_models() if not load_model(n).is_mla]


@pytest.mark.parametrize("name", REPLAYABLE)
def test_layer_shapes_add_up_to_the_models_parameters(name) -> None:
    m = load_model(name)
    assert rp.replay_params_total(m) == mdl.num_params_total(m)
    for kind in set(rp.layer_kinds(m)):
        attention = mdl.attention_params_per_layer(m)
        ffn = (mdl.dense_mlp_params_per_layer(m) if kind.ffn == "dense" else
               m.num_experts * mdl.expert_params(m) + mdl.shared_expert_params_per_layer(m)
               + mdl.router_params_per_layer(m))
        assert rp.layer_params(m, kind) == attention + ffn


def test_qwen3_8b_shapes() -> None:
    m = load_model("qwen3-8b")
    kind = rp.LayerKind("full", "dense")
    shapes = {w.name: w.shape for w in rp.layer_weights(m, kind)}
    assert shapes == {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (24576, 4096), "down": (4096, 12288)}
    assert rp.head_weights(m)[0].shape == (151936, 4096)
    # one decode layer's KV cache: 32 requests x 2049 slots x K and V x 8 heads x 128 x 2 bytes
    assert rp.decode_kv_bytes(m, kind, 32, 2048) == 32 * 2049 * 2 * 8 * 128 * 2
    assert rp.prefill_kv_bytes(m, 8192) == 8192 * 2 * 8 * 128 * 2


def test_moe_and_sliding_kinds() -> None:
    moe = tiny(TINY_MOE)
    kinds = rp.layer_kinds(moe)
    assert [k.ffn for k in kinds] == ["dense", "moe", "moe", "moe"]
    shapes = {w.name: w.shape for w in rp.layer_weights(moe, kinds[1])}
    assert shapes["experts_gate_up"] == (8, 64, 64) and shapes["experts_down"] == (8, 64, 32)
    assert shapes["router"] == (8, 64) and shapes["shared_gate_up"] == (96, 64)
    oss = load_model("gpt-oss-20b")
    assert sum(k.attention == "sliding" for k in rp.layer_kinds(oss)) == oss.num_sliding_layers == 12
    gemma = load_model("gemma-3-27b-it")
    assert sum(k.attention == "sliding" for k in rp.layer_kinds(gemma)) == gemma.num_sliding_layers
    sliding = rp.LayerKind("sliding", "moe")
    assert rp.attended_tokens(oss, sliding, 2048) == 128
    assert rp.decode_kv_bytes(oss, sliding, 2, 2048) == 2 * 2 * 8 * 64 * (128 + 1) * 2


def test_mla_refused() -> None:
    with pytest.raises(InputError, match="multi-head latent attention"):
        rp.make_replay_plan(load_model("deepseek-v3"), H100_DEVICE)


# ---- layers built ---------------------------------------------------------------------------------


def test_every_layer_built_when_memory_allows() -> None:
    plan = rp.make_replay_plan(load_model("qwen3-8b"), H100_DEVICE)
    assert plan.memory.built_layers == 36
    assert plan.memory.needed_bytes <= plan.memory.available_bytes == H100.memory_bytes
    assert [c for _, c in plan.layer_map] == list(range(36))


def test_layers_capped_by_memory_and_reused_in_turn() -> None:
    m = load_model("qwen3-8b")
    full = rp.plan_memory(m, 32, 2048, 8192, 10**13)
    per_layer = (rp.layer_params(m, rp.LayerKind("full", "dense")) * 2
                 + rp.decode_kv_bytes(m, rp.LayerKind("full", "dense"), 32, 2048) + rp.prefill_kv_bytes(
                     m, 8192))
    budget = full.needed_bytes - 26 * per_layer  # room for 10 layers exactly
    mem = rp.plan_memory(m, 32, 2048, 8192, budget)
    assert mem.built_layers == 10 and mem.needed_bytes <= budget
    assert rp.plan_memory(m, 32, 2048, 8192, budget - 1).built_layers == 9
    kinds = rp.layer_kinds(m)
    assert [c for _, c in rp.layer_map(kinds, mem.built)] == [i % 10 for i in range(36)]


def test_at_least_four_layers_or_refused() -> None:
    m = load_model("qwen3-8b")
    four = rp._memory(m, rp.layer_kinds(m), rp.distribute(rp.layer_kinds(m), 4), 32, 2048, 8192,
                      0).needed_bytes
    assert rp.plan_memory(m, 32, 2048, 8192, four).built_layers == 4
    with pytest.raises(InputError, match="does not fit the GPU: 4 layers"):
        rp.plan_memory(m, 32, 2048, 8192, four - 1, where="the GPU")
    two = tiny({**TINY_DENSE, "num_hidden_layers": 2})
    assert rp.plan_memory(two, 1, 8, 8, 10**10).built_layers == 2


def test_distribute_keeps_each_kind() -> None:
    oss = load_model("gpt-oss-120b")
    kinds = rp.layer_kinds(oss)
    assert dict(rp.distribute(kinds, 5)) == {rp.LayerKind("full", "moe"): 3,
                                             rp.LayerKind("sliding", "moe"): 2}
    assert sum(n for _, n in rp.distribute(kinds, 36)) == 36
    mixed = tiny(TINY_MOE)  # one dense layer, three MoE
    assert dict(rp.distribute(rp.layer_kinds(mixed), 2)) == {rp.LayerKind("full", "dense"): 1,
                                                            rp.LayerKind("full", "moe"): 1}


# ---- slices, levels, scenario ---------------------------------------------------------------------


@pytest.mark.parametrize(("prompt", "per_round"), [(512, 36), (8192, 8), (32768, 2), (131072, 1)])
def test_slices_follow_sglangs_budget(prompt, per_round) -> None:
    slices = rp.prefill_slices(prompt, 36, split_levels.DEFAULT_SPLIT_FORWARD_TOKEN_BUDGET)
    assert slices[0] == (0, per_round) and slices[-1][1] == 36
    assert all(a[1] == b[0] for a, b in itertools.pairwise(slices))
    assert len(slices) == split_levels.prefill_rounds(prompt, 36)
    assert rp.prefill_slices(8192, 36, 65536) == ((0, 8), (8, 16), (16, 24), (24, 32), (32, 36))


def test_plan_levels_and_sglangs_choice() -> None:
    m = load_model("qwen3-8b")
    plan = rp.make_replay_plan(m, H100_DEVICE)
    assert plan.levels == tuple(split_levels.stream_groups(132, 9)[1:-1])
    assert plan.chosen_level == (80, 52) and plan.group_of(plan.chosen_level) == 5
    assert rp.make_replay_plan(m, H100_DEVICE, decode_bs=4).chosen_level == (112, 20)
    some = rp.make_replay_plan(m, H100_DEVICE, levels="1,5")
    assert some.levels == ((112, 20), (80, 52)) and some.steps == 3
    assert plan.repeats == 10 and rp.make_replay_plan(m, H100_DEVICE, quick=True).repeats == 3


@pytest.mark.parametrize(("kw", "message"), [
    ({"decode_bs": 0}, "--decode-bs must be from 1"),
    ({"prompt_tokens": 50000}, "past Qwen3-8B's context length"),
    ({"token_budget": 0}, "--token-budget must be > 0"),
    ({"levels": "9"}, "--levels 9"),
])
def test_plan_refuses_bad_scenarios(kw, message) -> None:
    with pytest.raises(InputError, match=message):
        rp.make_replay_plan(load_model("qwen3-8b"), H100_DEVICE, **kw)


def test_predictions_are_the_estimates() -> None:
    """The chapter's scenario: the same numbers ``pdmux estimate`` prints (README: 10 ms decode alone,
    203 ms prefill first, PD mux 80/52 at 13 ms ITL and 323 ms prefill)."""
    from pdmux_cli.planning.estimate import Scenario, estimate

    plan = rp.make_replay_plan(load_model("qwen3-8b"), H100_DEVICE)
    preds = rp.predict(plan, H100)
    assert round(preds.whole.decode_alone_ms) == 10 and round(preds.whole.prefill_alone_ms) == 203
    chosen = preds.levels[(80, 52)]
    assert round(chosen.itl_ms) == 13 and round(chosen.prefill_corun_ms) == 323
    row = next(r for r in estimate(H100, plan.model, Scenario(level=(104, 28))).rows if r.policy == "pdmux")
    assert preds.levels[(104, 28)].decode_alone_ms == row.decode_alone_ms
    assert set(preds.levels) == {tuple(s) for s in plan.levels}


def test_prediction_of_a_level_that_is_not_a_full_split_is_a_note() -> None:
    plan = rp.make_replay_plan(load_model("qwen3-8b"), H100_DEVICE, levels="64/60")
    preds = rp.predict(plan, H100)
    assert preds.levels == {} and "no prediction for level 64/60" in render(preds.notes[0])
    assert preds.notes[0].code == "bench.replay.no_prediction" and preds.notes[0].values["prefill_sms"] == 64


# ---- the pdmux loop and timing, against fakes -----------------------------------------------------


class FakeEvent:
    def __init__(self, dev) -> None:
        self.dev, self.t = dev, None

    def record(self, stream=None) -> None:
        self.t = self.dev.clock

    def elapsed_time(self, end) -> float:
        return end.t - self.t

    def query(self) -> bool:
        self.dev.log.append("poll")
        return self.dev.polls.pop(0) if self.dev.polls else True


class FakeDevice:
    """ReplayDevice's interface with a fake clock: a decode step takes 2 ms, a layer 1 ms."""

    is_cuda = False

    def __init__(self, polls=()) -> None:
        self.clock, self.log, self.polls, self.current = 0.0, [], list(polls), None

    def event(self):
        return FakeEvent(self)

    def record(self, event, stream) -> None:
        event.record(stream)

    @contextlib.contextmanager
    def on(self, stream):
        before, self.current = self.current, stream
        try:
            yield
        finally:
            self.current = before

    def sync(self, stream) -> None:
        self.log.append(f"wait {stream}")


class FakeModel:
    def __init__(self, dev, slices) -> None:
        self.dev, self.plan = dev, SimpleNamespace(slices=slices, warmup=1, repeats=3)

    def step(self) -> None:
        self.dev.log.append(f"decode on {self.dev.current}")
        self.dev.clock += 2.0

    def prefill_slice(self, start, end) -> None:
        self.dev.log.append(f"layers {start}-{end} on {self.dev.current}")
        self.dev.clock += end - start

    def prefill(self) -> None:
        for s in self.plan.slices:
            self.prefill_slice(*s)


def test_corun_episode_is_sglangs_loop() -> None:
    """Per round: a decode step on the decode stream, the next slice on the prefill stream, a wait on the
    decode stream only; once the last slice is in, each round polls its event until it is done."""
    dev = FakeDevice(polls=[False, False])
    model = FakeModel(dev, ((0, 8), (8, 16), (16, 18)))
    ep = model_replay.corun_episode(dev, model.step, model, "P", "D")
    assert dev.log[:3] == ["wait P", "wait D", "decode on D"]
    body = [e for e in dev.log[2:] if e != "wait P"]
    assert body == ["decode on D", "layers 0-8 on P", "wait D", "decode on D", "layers 8-16 on P", "wait D",
                    "decode on D", "layers 16-18 on P", "wait D", "poll", "decode on D", "wait D", "poll",
                    "decode on D", "wait D", "poll"]
    assert len(ep.round_ms) == 5 and ep.decode_ms == [2.0] * 5
    assert ep.prefill_ms == 8 + 2 + 8 + 2 + 2  # first slice to last on the fake clock, decode steps between


def test_time_decode_and_prefill_with_fakes() -> None:
    dev = FakeDevice()
    model = FakeModel(dev, ((0, 4), (4, 6)))
    times = model_replay.time_decode(dev, model.step, "D", model.plan)
    assert times.step.median_ms == 2.0 and times.step.runs == 3 and times.round.runs == 3
    prefill = model_replay.time_prefill(dev, model, "P", model.plan)
    assert prefill.median_ms == 6.0 and prefill.runs == 3
    corun = model_replay.time_corun(dev, model.step, model, "P", "D", model.plan)
    assert corun.tokens_during_prefill == 2 and corun.decode_step.median_ms == 2.0 and corun.prefill.runs == 3


# ---- results, JSON, calibration from synthetic numbers --------------------------------------------


def _stats(ms: float) -> TimeStats:
    return TimeStats.from_ms([ms * 0.99, ms, ms * 1.01])


def synthetic(plan, whole_decode_ms: float, device_kind: str = "cuda") -> ReplayResults:
    run = ReplayRunInfo(device_kind, "NVIDIA H100 80GB HBM3", plan.device.name, 132, (9, 0), 0,
                        plan.device.profile_key, "2.9.0", "12.8", "12.8", "2026-12-01",
                        "2026-12-01T00:00:00+00:00")
    res = ReplayResults(run=run, plan=rp.replay_plan_dict(plan), cuda_graph=True)
    res.whole = WholeReplay(DecodeTimes(_stats(whole_decode_ms), _stats(whole_decode_ms + 0.4)),
                            _stats(210.0))
    for s in plan.levels:
        res.levels.append(LevelReplay(s.prefill_sms, s.decode_sms, plan.group_of(s), s == plan.chosen_level,
                                      s.prefill_sms, s.decode_sms, DecodeTimes(_stats(14.0), _stats(14.5)),
                                      _stats(330.0),
                                      CorunTimes(_stats(16.0), _stats(15.2), _stats(340.0), 22)))
    res.complete = True
    return res


def test_results_json_fields_and_errors() -> None:
    plan = rp.make_replay_plan(load_model("qwen3-8b"), H100_DEVICE, levels="5")
    res = synthetic(plan, 12.0)
    res.predicted = rp.predict(plan, H100)
    data = json.loads(json.dumps(results_dict(res)))
    assert data["kind"] == "model-replay" and data["green_contexts"] is True and data["model"] == "Qwen3-8B"
    assert data["scenario"] == {"decode_bs": 32, "context_tokens": 2048, "prompt_tokens": 8192,
                                "split_forward_token_budget": 65536, "sm_group_num": 8,
                                "decode_bs_divisor": 36}
    lv = data["levels"][0]
    assert (lv["group"], lv["chosen"], lv["prefill_sms"], lv["decode_sms"]) == (5, True, 80, 52)
    assert lv["corun"]["tokens_during_prefill"] == 22
    assert lv["corun"]["round_overhead_ms"] == pytest.approx(16.0 - 15.2)
    assert lv["measured"]["itl_ms"] == 16.0
    pred = res.predicted.levels[(80, 52)]
    assert lv["error_percent"]["itl_ms"] == pytest.approx((pred.itl_ms - 16.0) / 16.0 * 100)
    assert lv["predicted_calibrated"] is None and lv["error_percent_calibrated"]["itl_ms"] is None
    assert data["whole_device"]["round_overhead_ms"] == pytest.approx(0.4)
    assert data["plan"]["slices"] == [[0, 8], [8, 16], [16, 24], [24, 32], [32, 36]]


def test_calibration_from_replay_is_the_fixed_time_per_step(tmp_path) -> None:
    """The replay's whole-GPU decode step, 20% slower than the estimate: the calibration's fixed time per
    step is the difference, and the calibrated estimate gives the measured step (every level moves by it)."""
    plan = rp.make_replay_plan(load_model("qwen3-8b"), H100_DEVICE, levels="1,5")
    shipped = rp.predict(plan, H100)
    measured = shipped.whole.decode_alone_ms * 1.2
    res = synthetic(plan, measured)
    cal, why = calibration_from_replay(res, plan, H100)
    assert why is None and cal.whole_gpu.points == 1 and not cal.has_partitions
    fixed_ms = cal.whole_gpu.decode_fixed_s * 1e3
    assert fixed_ms == pytest.approx(measured - shipped.whole.decode_alone_ms, abs=1e-3)
    assert cal.whole_gpu.uncalibrated_median_error == pytest.approx(1 - 1 / 1.2, abs=1e-3)
    calibrated = rp.predict(plan, H100, cal)
    assert calibrated.whole.decode_alone_ms == pytest.approx(measured, abs=1e-3)
    for key, p in calibrated.levels.items():
        assert p.decode_alone_ms - shipped.levels[key].decode_alone_ms == pytest.approx(fixed_ms, abs=1e-3)
    path = tmp_path / "calibration.yaml"
    path.write_text(dump_calibration(cal))
    assert load_calibration(path) == cal


def test_no_calibration_where_the_replay_cannot_give_one() -> None:
    plan = rp.make_replay_plan(load_model("qwen3-8b"), H100_DEVICE, levels="5")
    cal, why = calibration_from_replay(synthetic(plan, 12.0, "cpu"), plan, H100)
    assert cal is None and render(why) == "no calibration from a CPU run (its times are not a GPU's)"
    cal, why = calibration_from_replay(synthetic(plan, 100.0), plan, H100)  # 10x the model: another GPU
    assert cal is None and render(why).startswith("no calibration: ")
    assert why.code == "bench.replay.no_calibration.refused"
    oss = rp.make_replay_plan(load_model("gpt-oss-20b"), H100_DEVICE, levels="5")
    cal, why = calibration_from_replay(synthetic(oss, 12.0), oss, H100)
    assert cal is None and "mxfp4" in render(why) and why.values["dtype"] == "mxfp4"
    cal, why = calibration_from_replay(synthetic(plan, 12.0), plan, None)
    assert cal is None and why.param == "gpu"
    assert render(why) == "no calibration: no GPU profile matches H100 SXM5 80GB (pass --gpu)"


def test_tables_render() -> None:
    from rich.console import Console

    plan = rp.make_replay_plan(load_model("qwen3-8b"), H100_DEVICE, levels="1,5")
    res = synthetic(plan, 12.0)
    res.predicted = rp.predict(plan, H100)
    con = Console(record=True, width=200)
    for table in replay_tables(res) + replay_plan_tables(plan, res.predicted):
        con.print(table)
    text = con.export_text()
    assert "5 *" in text and "80/52" in text and "est 13.4" in text and "16.0" in text
    assert "36 of 36" in text


# ---- the CLI: dry run and one-line errors ---------------------------------------------------------


def test_cli_dry_run_json() -> None:
    result = cli.invoke(app, ["bench", "--model", "qwen3-8b", "--dry-run", "--gpu", "h200", "--json"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["dry_run"] is True and data["gpu"] == "H200 SXM 141GB" and data["built_layers"] == 36
    assert data["layers_per_round"] == 8 and data["prefill_rounds"] == 5
    assert [lv["chosen"] for lv in data["levels"]].count(True) == 1
    assert data["params_total"] == mdl.num_params_total(load_model("qwen3-8b"))
    assert len(data["predicted"]["levels"]) == 6 and data["predicted_calibrated"] is None


def test_cli_dry_run_table() -> None:
    result = cli.invoke(app, ["bench", "-m", "qwen3-30b-a3b", "--dry-run", "--levels", "1,5"])
    assert result.exit_code == 0, result.stderr
    assert "128 experts top-8" in result.stdout and "dry run: nothing was measured" in result.stdout


def _big_config(tmp_path: Path) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**TINY_DENSE, "hidden_size": 16384, "num_attention_heads": 128,
                                "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 5_000_000,
                                "max_position_embeddings": 131072}))
    return path


@pytest.mark.parametrize(("args", "fragment"), [
    (["--model", "no-such-model", "--dry-run"], "unknown model"),
    (["--model", "qwen3-8b", "--decode-bs", "0", "--cpu"], "--decode-bs must be from 1"),
    (["--model", "qwen3-8b", "--decode-bs", "0"], "--decode-bs must be from 1"),
    (["--model", "deepseek-v3", "--dry-run"], "multi-head latent attention"),
    (["--model", "qwen3-8b", "--buffer-bytes", "1GiB"], "--buffer-bytes is an option of the kernel bench"),
    (["--model", "qwen3-8b", "--gemm-shape", "1024x1024x1024"], "--gemm-shape is an option"),
    (["--decode-bs", "4"], "--decode-bs goes with --model"),
    (["--cpu"], "--cpu goes with --model"),
    (["--model", "qwen3-8b", "--token-budget", "0", "--dry-run"], "--token-budget must be > 0"),
    (["--model", "qwen3-8b", "--prompt-tokens", "40960", "--dry-run"], "context length"),
])
def test_cli_bad_input_one_line(args, fragment) -> None:
    assert_one_line_error(cli.invoke(app, ["bench", *args]), 2, fragment)


@pytest.mark.parametrize("mode", [["--dry-run"], ["--cpu"]])
def test_cli_model_too_big_for_the_device(tmp_path, mode) -> None:
    result = cli.invoke(app, ["bench", "--model", str(_big_config(tmp_path)), *mode])
    assert_one_line_error(result, 2, "does not fit")
    assert "use a smaller --decode-bs" in result.stderr


def test_estimate_calibration_of_another_gpu_refused(tmp_path) -> None:
    plan = rp.make_replay_plan(load_model("qwen3-8b"), H100_DEVICE, levels="5")
    cal, _ = calibration_from_replay(synthetic(plan, rp.predict(plan, H100).whole.decode_alone_ms * 1.1),
                                     plan, H100)
    path = tmp_path / "cal.yaml"
    path.write_text(dump_calibration(cal))
    result = cli.invoke(app,
                        ["bench", "--model", "qwen3-8b", "--dry-run", "--gpu", "a100", "--calibration",
                         str(path)])
    assert_one_line_error(result, 2, "calibration was measured on")
    ok = cli.invoke(app, ["bench", "--model", "qwen3-8b", "--dry-run", "--calibration", str(path), "--json"])
    assert ok.exit_code == 0, ok.stderr
    assert json.loads(ok.stdout)["predicted_calibrated"]["whole"]["decode_alone_ms"] == pytest.approx(
        rp.predict(plan, H100).whole.decode_alone_ms * 1.1, abs=1e-3)


def test_cli_output_over_the_calibration_input_refused(tmp_path) -> None:
    plan = rp.make_replay_plan(load_model("qwen3-8b"), H100_DEVICE, levels="5")
    cal, _ = calibration_from_replay(synthetic(plan, rp.predict(plan, H100).whole.decode_alone_ms), plan,
                                     H100)
    (tmp_path / "calibration.yaml").write_text(dump_calibration(cal))
    result = cli.invoke(app, ["bench", "--model", "qwen3-8b", "--cpu", "--output", str(tmp_path),
                              "--calibration", str(tmp_path / "calibration.yaml")])
    assert_one_line_error(result, 2, "is the input file")


def test_cpu_without_torch_is_device_error(monkeypatch, tmp_path) -> None:
    import builtins

    real_import = builtins.__import__

    def no_torch(name, *args, **kwargs):
        if name == "torch" or name.startswith("torch."):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_torch)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY_DENSE))
    result = cli.invoke(app, ["bench", "--model", str(path), "--cpu", "--decode-bs", "2", "--context", "8",
                              "--prompt-tokens", "16"])
    assert_one_line_error(result, 1, "torch is not installed")


@pytest.mark.parametrize("module", ["pdmux_cli.bench.replay_plan", "pdmux_cli.bench.replay_results",
                                    "pdmux_cli.cli.bench_tables", "pdmux_cli.bench.model_replay",
                                    "pdmux_cli.workflows.bench_replay"])
def test_imports_stay_light(module) -> None:
    code = (f"import sys, {module}\n"
            "print([m for m in sys.modules if m.split('.')[0] in ('torch', 'cuda', 'numpy', "
            "'matplotlib')])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"


def test_dry_run_imports_nothing_heavy() -> None:
    code = ("import sys\nfrom typer.testing import CliRunner\nfrom pdmux_cli.cli import app\n"
            "r = CliRunner().invoke(app, ['bench', '--model', 'qwen3-30b-a3b', '--dry-run', '--json'])\n"
            "assert r.exit_code == 0, r.stderr\n"
            "print([m for m in sys.modules if m.split('.')[0] in ('torch', 'cuda', 'numpy', "
            "'matplotlib')])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"


def test_host_memory_is_read() -> None:
    assert model_replay.host_available_bytes() > 0


# ---- with torch: the layers built and run on the CPU ----------------------------------------------


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


def _built(torch, config, **kw):
    plan = tiny_plan(config, **kw)
    device = model_replay.ReplayDevice(torch, "cpu")
    return plan, model_replay.ReplayModel(torch, plan, device)


@pytest.mark.parametrize("config", [TINY_DENSE, TINY_MOE, TINY_SLIDING], ids=["dense", "moe", "sliding"])
def test_built_tensors_have_the_models_shapes(torch, config) -> None:
    plan, model = _built(torch, config)
    m = plan.model
    for (kind, _copy), w in model.layers.items():
        for ws in rp.layer_weights(m, kind):
            assert tuple(w[ws.name].shape) == ws.shape and w[ws.name].dtype == torch.bfloat16
        assert tuple(w["k_cache"].shape) == (4, m.num_kv_heads, rp.attended_tokens(m, kind, 32) + 1,
                                             m.head_dim)
        assert tuple(w["k_store"].shape) == (64, m.num_kv_heads, m.head_dim)
    per_layer = {key: sum(w[ws.name].numel() for ws in rp.layer_weights(m, key[0]))
                 for key, w in model.layers.items()}
    total = sum(per_layer[entry] for entry in plan.layer_map) + model.lm_head.numel()
    total += 0 if m.tie_word_embeddings else mdl.embedding_params(m)
    assert total == mdl.num_params_total(m)


def test_steps_run_every_layer_with_fewer_built(torch, monkeypatch) -> None:
    m = tiny(TINY_DENSE)
    four = rp.plan_memory(m, 4, 32, 64, 10**10)
    budget = rp._memory(m, rp.layer_kinds(m), rp.distribute(rp.layer_kinds(m), 4), 4, 32, 64, 0).needed_bytes
    plan, model = _built(torch, TINY_DENSE, available_bytes=budget)
    assert four.built_layers == 6 and plan.memory.built_layers == 4 and len(model.layers) == 4
    calls = []
    real = model._layer
    monkeypatch.setattr(model, "_layer", lambda w, kind, x, decode: calls.append(decode)
                        or real(w, kind, x, decode))
    model.decode_step()
    assert calls == [True] * 6
    calls.clear()
    model.prefill()
    assert calls == [False] * 6 and [s for s in plan.slices] == [(0, 2), (2, 4), (4, 6)]
    assert 0 <= int(model.decode_tokens.min()) and int(model.decode_tokens.max()) < 256
    assert model._carry is None and 0 <= int(model.prompt_token[0]) < 256
    assert bool(torch.isfinite(model.layers[next(iter(model.layers))]["k_store"].float()).all())


def test_moe_grouped_and_per_expert_agree(torch) -> None:
    _plan, grouped = _built(torch, TINY_MOE)
    _, looped = _built(torch, TINY_MOE)
    looped.grouped_mm = False
    assert grouped.grouped_mm and grouped.moe_kernel == "grouped_mm" and looped.moe_kernel == "per-expert"
    kind = rp.LayerKind("full", "moe")
    w = grouped.layers[(kind, 0)]
    h = torch.randn(16, 64, dtype=torch.bfloat16)
    a, b = grouped._moe(h, w), looped._moe(h, looped.layers[(kind, 0)])
    assert torch.allclose(a.float(), b.float(), atol=3e-2, rtol=3e-2)
    assert float(a.float().abs().sum()) > 0


def test_sliding_prefill_is_a_band(torch, monkeypatch) -> None:
    monkeypatch.setattr(model_replay, "SLIDING_QUERY_BLOCK", 8)  # several blocks of 8 queries over 32
    _, model = _built(torch, TINY_SLIDING, prompt_tokens=32)
    q = torch.randn(1, 4, 32, 16, dtype=torch.float32)
    k = torch.randn(1, 1, 32, 16, dtype=torch.float32)
    v = torch.randn(1, 1, 32, 16, dtype=torch.float32)
    i = torch.arange(32)[:, None]
    j = torch.arange(32)[None, :]
    band = (j <= i) & (i - j < 8)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k.expand(1, 4, 32, 16), v.expand(1, 4, 32, 16),
                                                           attn_mask=band)
    assert torch.allclose(model._sliding_prefill(q, k, v), ref, atol=1e-5)


def test_gqa_repeated_equals_native(torch) -> None:
    _, model = _built(torch, TINY_DENSE)
    q, k, v = torch.randn(2, 4, 1, 16), torch.randn(2, 2, 9, 16), torch.randn(2, 2, 9, 16)
    native = model._sdpa(q, k, v)
    model.gqa_native = False
    assert torch.allclose(model._sdpa(q, k, v), native, atol=1e-5)


def test_cpu_run_writes_results(torch, tmp_path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY_MOE))
    out = tmp_path / "out"
    result = cli.invoke(app, ["bench", "--model", str(config), "--cpu", "--decode-bs", "4", "--context", "32",
                              "--prompt-tokens", "64", "--token-budget", "128", "--levels", "1,5",
                              "--repeats", "1", "--output", str(out)])
    assert result.exit_code == 0, result.stderr
    assert "device cpu: no green contexts" in result.stdout and "wrote" in result.stdout
    data = json.loads((out / "results.json").read_text())
    assert data["complete"] and data["device_kind"] == "cpu" and data["green_contexts"] is False
    assert data["moe_kernel"] == "grouped_mm" and data["cuda_graph"] is False
    assert data["plan"]["slices"] == [[0, 2], [2, 4]] and data["plan"]["built_layers"] == 4
    assert [(lv["prefill_sms"], lv["decode_sms"], lv["group"]) for lv in data["levels"]] == [
        (112, 20, 1), (80, 52, 5)]
    for lv in data["levels"]:
        assert lv["corun"]["tokens_during_prefill"] == 2  # on the CPU the last slice is done when submitted
        assert lv["decode_alone"]["step"]["median_ms"] > 0 and lv["predicted"]["itl_ms"] > 0
    assert data["levels"][0]["chosen"] is True and data["calibration"] is None
    assert not (out / "calibration.yaml").exists()


def test_run_replay_stops_cleanly_on_a_device_error(torch, monkeypatch) -> None:
    plan = tiny_plan(levels="1,5", repeats=1)
    device = model_replay.ReplayDevice(torch, "cpu")

    def refused(*args, **kwargs):
        raise DeviceError("the driver refused the split")

    monkeypatch.setattr(model_replay, "measure_level", refused)
    res = model_replay.run_replay(plan, device, rp.replay_plan_dict(plan))
    assert res.whole is not None and not res.complete and len(res.step_errors) == 2
    assert res.step_errors[0] == "level 112/20: the driver refused the split"


# ---- the CUDA-only branches against fakes (graph capture, green-context streams, teardown) ---------


class FakeStream:
    def __init__(self, handle, device=None) -> None:
        self.handle, self.synced = handle, 0

    def synchronize(self) -> None:
        self.synced += 1

    def __repr__(self) -> str:
        return f"S{self.handle}"


class FakeGraph:
    def __init__(self, log) -> None:
        self.log = log

    def replay(self) -> None:
        self.log.append("graph replay")


def fake_cuda_torch(log, capture_fails=False):
    @contextlib.contextmanager
    def graph(g, stream=None):
        log.append(f"capture on {stream}")
        if capture_fails:
            raise RuntimeError("operation not permitted when stream is capturing")
        yield

    cuda = SimpleNamespace(
        CUDAGraph=lambda: FakeGraph(log), graph=graph, synchronize=lambda dev=None: log.append("device sync"),
        ExternalStream=FakeStream, empty_cache=lambda: log.append("empty cache"))
    return SimpleNamespace(cuda=cuda,
                           _C=SimpleNamespace(_cuda_clearCublasWorkspaces=lambda: log.append("clear cublas")))


class FakeCudaDevice(FakeDevice):
    is_cuda = True

    def __init__(self, torch, log) -> None:
        super().__init__()
        self.torch, self.dev, self.log = torch, "cuda:0", log


def fake_cuda_model(dev, slices=((0, 2), (2, 4))):
    model = FakeModel(dev, slices)
    model.torch, model.device, model.grouped_mm = dev.torch, dev, False
    model.m = SimpleNamespace(is_moe=False)
    split = split_levels.Split(80, 52)
    model.plan = SimpleNamespace(slices=slices, warmup=1, repeats=2, cuda_graph=True, chosen_level=split,
                                 group_of=lambda s: 5)
    model.decode_step = model.step
    return model, split


def test_decode_graph_captured_on_its_stream() -> None:
    log: list[str] = []
    dev = FakeCudaDevice(fake_cuda_torch(log), log)
    model, _ = fake_cuda_model(dev)
    notes: list[str] = []
    step = model_replay.DecodeStep(model, "D", notes)
    assert log == ["decode on D", "decode on D", "wait D", "capture on D", "decode on None", "wait D"]
    log.clear()
    with dev.on("D"):
        step()
    assert log == ["graph replay"] and notes == []


def test_failed_capture_falls_back_to_eager_steps() -> None:
    log: list[str] = []
    dev = FakeCudaDevice(fake_cuda_torch(log, capture_fails=True), log)
    model, _ = fake_cuda_model(dev)
    notes: list = []
    step = model_replay.DecodeStep(model, "D", notes)
    assert step.graph is None and notes[0].code == "bench.replay.graph_capture_failed"
    assert render(notes[0]).startswith("CUDA graph capture failed (operation not permitted")
    log.clear()
    step()
    assert log == ["decode on None"]


def test_level_on_green_contexts_and_teardown(monkeypatch) -> None:
    log: list[str] = []
    dev = FakeCudaDevice(fake_cuda_torch(log), log)
    model, split = fake_cuda_model(dev)

    class FakeLevel:
        def __init__(self, info, p, d) -> None:
            log.append(f"green contexts {p}/{d}")
            self.prefill = SimpleNamespace(stream_handle=1, granted_sms=p)
            self.decode = SimpleNamespace(stream_handle=2, granted_sms=d)

        def __enter__(self):
            return self

        def __exit__(self, *exc) -> None:
            log.append("green contexts destroyed")

    monkeypatch.setattr(model_replay.greenctx, "LevelPartitions", FakeLevel)
    lv = model_replay.measure_level(dev, model, SimpleNamespace(), split, [])
    assert log[0] == "green contexts 80/52" and "capture on S2" in log
    assert "layers 0-2 on S1" in log and "layers 2-4 on S1" in log
    # two warm-up steps, then the graph
    assert log.count("decode on S2") == 2 and log.count("graph replay") > 2
    assert log.index("clear cublas") < log.index("empty cache") < log.index("green contexts destroyed")
    assert (lv.granted_prefill_sms, lv.granted_decode_sms, lv.group, lv.chosen) == (80, 52, 5, True)
    assert lv.corun.tokens_during_prefill == 2 and lv.prefill.runs == 2
