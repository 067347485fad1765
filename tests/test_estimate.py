"""The estimate: every number of the chapter's table, and the model's behaviour off the defaults."""

from __future__ import annotations

import pytest

from pdmux_cli import cost
from pdmux_cli.errors import InputError
from pdmux_cli.estimate import Scenario, default_s_sat_values, estimate
from pdmux_cli.hardware import find_gpu
from pdmux_cli.model import load_model
from pdmux_cli.render import itl_text, ms


@pytest.fixture(scope="module")
def chapter():
    return estimate(find_gpu("h100"), load_model("qwen3-8b"))


def _cells(row):
    return (
        itl_text(row),
        ms(row.prefill_ms) if row.prefill_ms is not None else "-",
        row.tokens_during_prefill,
    )


def test_chapter_table_exact(chapter) -> None:
    got = [(r.label, *_cells(r)) for r in chapter.rows]
    assert got == [
        ("decode only (ref.)", "9 ms", "-", None),
        ("prefill first", "one step of 299 ms", "291 ms", 0),
        ("chunked 2048", "74 ms x 4 steps", "295 ms", 4),
        ("chunked 512", "19 ms x 16 steps", "306 ms", 16),
        ("PD mux 80/52 S_SAT=44", "9 ms", "480 ms", 55),
        ("PD mux 80/52 S_SAT=66", "11 ms", "480 ms", 43),
        ("PD mux 80/52 S_SAT=88", "15 ms", "480 ms", 33),
    ]


def test_chapter_raw_values(chapter) -> None:
    rows = {r.label: r for r in chapter.rows}
    assert rows["decode only (ref.)"].itl_ms == pytest.approx(8.709, abs=1e-3)
    assert rows["prefill first"].prefill_ms == pytest.approx(290.772, abs=1e-3)
    assert rows["chunked 2048"].itl_ms == pytest.approx(73.673, abs=1e-3)
    assert rows["chunked 512"].prefill_ms == pytest.approx(306.444, abs=1e-3)
    assert rows["PD mux 80/52 S_SAT=66"].itl_ms == pytest.approx(11.054, abs=1e-3)
    assert rows["PD mux 80/52 S_SAT=66"].prefill_ms == pytest.approx(479.774, abs=1e-3)


def test_chapter_level_and_rounds(chapter) -> None:
    assert chapter.level == (80, 52) and chapter.group_index == 5
    assert chapter.layers_per_round == 8 and chapter.prefill_rounds == 5
    assert chapter.memory.fits and chapter.notes == []
    assert default_s_sat_values(132) == (44.0, 66.0, 88.0)


def test_all_levels_tradeoff(chapter) -> None:
    est = estimate(find_gpu("h100"), load_model("qwen3-8b"), all_levels=True)
    assert [(lv.prefill_sms, lv.decode_sms) for lv in est.levels] == [
        (112, 20), (104, 28), (96, 36), (88, 44), (80, 52), (72, 60)]
    assert [lv.chosen for lv in est.levels] == [False, False, False, False, True, False]
    prefill = [lv.prefill_ms for lv in est.levels]
    assert prefill == sorted(prefill)  # fewer prefill SMs, longer prefill
    itl_s66 = [lv.itl_ms[1] for lv in est.levels]
    assert itl_s66 == sorted(itl_s66, reverse=True)  # more decode SMs, shorter ITL
    assert est.levels[4].itl_ms[1] == pytest.approx(11.054, abs=1e-3)


def test_explicit_level() -> None:
    est = estimate(find_gpu("h100"), load_model("qwen3-8b"), Scenario(level=(96, 36)))
    pd = [r for r in est.rows if r.policy == "pdmux"]
    assert {(r.prefill_sms, r.decode_sms) for r in pd} == {(96, 36)}
    assert pd[0].prefill_ms == pytest.approx(290.772 * 132 / 96, rel=1e-4)
    with pytest.raises(InputError, match="not a split"):
        estimate(find_gpu("h100"), load_model("qwen3-8b"), Scenario(level=(80, 50)))


def test_llama70b_does_not_fit_on_one_h100() -> None:
    est = estimate(find_gpu("h100"), load_model("llama-3.1-70b"))
    assert not est.memory.fits
    assert est.memory.weight_bytes > 140e9
    assert est.notes[0].startswith("does not fit")
    # fp8 weights on an H200 fit.
    est = estimate(find_gpu("h200"), load_model("llama-3.1-70b"), Scenario(weight_bytes_per_param=1))
    assert est.memory.fits


def test_every_gpu_and_model_runs() -> None:
    from pdmux_cli.hardware import load_gpus
    from pdmux_cli.model import list_models

    for name in list_models():
        m = load_model(name)
        for gpu in load_gpus():
            if gpu.sm_count is None:
                continue
            est = estimate(gpu, m, all_levels=True)
            for r in est.rows:
                assert r.itl_ms > 0
                if r.prefill_ms is not None:
                    assert r.prefill_ms > 0


def test_bad_scenarios() -> None:
    gpu, m = find_gpu("h100"), load_model("qwen3-8b")
    for bad in (Scenario(decode_bs=0), Scenario(context_tokens=-1), Scenario(prompt_tokens=0),
                Scenario(chunk_sizes=(0,)), Scenario(s_sat_values=(0.0,)), Scenario(mfu=1.5),
                Scenario(bandwidth_efficiency=0), Scenario(weight_bytes_per_param=-1), Scenario(kv_bytes_per_element=0)):
        with pytest.raises(InputError):
            estimate(gpu, m, bad)
    with pytest.raises(InputError, match="SM count"):
        estimate(find_gpu("b100"), m)


def test_decode_saturates_at_s_sat() -> None:
    gpu, m = find_gpu("h100"), load_model("qwen3-8b")
    thr = cost.AnalyticThroughput(132, gpu.hbm_bytes_per_s, gpu.bf16_dense_flops, s_sat=44)
    full = cost.decode_step_s(m, thr, 132, 32, 2048)
    assert cost.decode_step_s(m, thr, 44, 32, 2048) == pytest.approx(full)
    assert cost.decode_step_s(m, thr, 22, 32, 2048) == pytest.approx(2 * full)
    with pytest.raises(InputError):
        cost.decode_step_s(m, thr, 0, 32, 2048)


def test_large_batch_decode_turns_compute_bound() -> None:
    gpu, m = find_gpu("h100"), load_model("qwen3-8b")
    thr = cost.AnalyticThroughput(132, gpu.hbm_bytes_per_s, gpu.bf16_dense_flops)
    small = cost.decode_step_s(m, thr, 20, 1, 128)
    big = cost.decode_step_s(m, thr, 20, 4096, 128)
    flops = 4096 * 2 * 8.19e9
    assert big >= flops / thr.flops_per_s(20) * 0.9 and big > small
