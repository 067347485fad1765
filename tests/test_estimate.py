"""The estimate: every number of the chapter's table (--cost-model chapter), the roofline rows, and the
behaviour off the defaults."""

from __future__ import annotations

import pytest

from pdmux_cli.costmodel.options import CostModelOptions
from pdmux_cli.catalog.hardware import find_gpu
from pdmux_cli.catalog.model import load_model
from pdmux_cli.cli.render import itl_text, ms
from pdmux_cli.costmodel import chapter as cost
from pdmux_cli.messages import render, render_all
from pdmux_cli.planning.estimate import Scenario, default_s_sat_values, estimate
from pdmux_cli.util.errors import InputError

CHAPTER = Scenario(cost=CostModelOptions(cost_model="chapter"))


@pytest.fixture(scope="module")
def chapter():
    return estimate(find_gpu("h100"), load_model("qwen3-8b"), CHAPTER)


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
        ("mixed chunk 2048", "74 ms x 4 steps", "295 ms", 4),
        ("mixed chunk 512", "19 ms x 16 steps", "306 ms", 16),
        ("PD mux 80/52 S_SAT=44", "9 ms", "480 ms", 55),
        ("PD mux 80/52 S_SAT=66", "11 ms", "480 ms", 43),
        ("PD mux 80/52 S_SAT=88", "15 ms", "480 ms", 33),
    ]


def test_chapter_raw_values(chapter) -> None:
    rows = {r.label: r for r in chapter.rows}
    assert rows["decode only (ref.)"].itl_ms == pytest.approx(8.709, abs=1e-3)
    assert rows["prefill first"].prefill_ms == pytest.approx(290.772, abs=1e-3)
    assert rows["mixed chunk 2048"].itl_ms == pytest.approx(73.673, abs=1e-3)
    assert rows["mixed chunk 512"].prefill_ms == pytest.approx(306.444, abs=1e-3)
    assert rows["PD mux 80/52 S_SAT=66"].itl_ms == pytest.approx(11.054, abs=1e-3)
    assert rows["PD mux 80/52 S_SAT=66"].prefill_ms == pytest.approx(479.774, abs=1e-3)


def test_chapter_level_and_rounds(chapter) -> None:
    assert chapter.level == (80, 52) and chapter.group_index == 5
    assert chapter.layers_per_round == 8 and chapter.prefill_rounds == 5
    assert chapter.memory.fits and chapter.notes == []
    assert default_s_sat_values(132) == (44.0, 66.0, 88.0)


def test_all_levels_tradeoff(chapter) -> None:
    est = estimate(find_gpu("h100"), load_model("qwen3-8b"), CHAPTER, all_levels=True)
    assert [(lv.prefill_sms, lv.decode_sms) for lv in est.levels] == [
        (112, 20), (104, 28), (96, 36), (88, 44), (80, 52), (72, 60)]
    assert [lv.chosen for lv in est.levels] == [False, False, False, False, True, False]
    prefill = [lv.prefill_ms for lv in est.levels]
    assert prefill == sorted(prefill)  # fewer prefill SMs, longer prefill
    itl_s66 = [lv.itl_ms[1] for lv in est.levels]
    assert itl_s66 == sorted(itl_s66, reverse=True)  # more decode SMs, shorter ITL
    assert est.levels[4].itl_ms[1] == pytest.approx(11.054, abs=1e-3)


def test_explicit_level() -> None:
    est = estimate(find_gpu("h100"), load_model("qwen3-8b"), Scenario(cost=CHAPTER.cost, level=(96, 36)))
    pd = [r for r in est.rows if r.policy == "pdmux"]
    assert {(r.prefill_sms, r.decode_sms) for r in pd} == {(96, 36)}
    assert pd[0].prefill_ms == pytest.approx(290.772 * 132 / 96, rel=1e-4)
    with pytest.raises(InputError, match="not a split"):
        estimate(find_gpu("h100"), load_model("qwen3-8b"), Scenario(level=(80, 50)))
    # any split the granularity allows: prefill a multiple of 8 SMs on Hopper, decode the rest
    est = estimate(find_gpu("h100"), load_model("qwen3-8b"), Scenario(level=(64, 68)))
    assert est.group_index == -1 and any("not one of the levels" in n for n in render_all(est.notes))
    # off the granularity: estimated as the driver rounds it (66/66 runs as 72/60), and said
    est = estimate(find_gpu("h100"), load_model("qwen3-8b"), Scenario(level=(66, 66)))
    assert (est.level, est.group_index) == ((72, 60), 7 - 1) and "level 66/66 runs as 72/60" in render(
        est.notes[0]
    )
    # 4/128: prefill rounds up to the minimum of 8
    assert estimate(find_gpu("h100"), load_model("qwen3-8b"), Scenario(level=(4, 128))).level == (8, 124)
    with pytest.raises(InputError, match="multiple of 8"):
        # 128/4 leaves decode < 8
        estimate(find_gpu("h100"), load_model("qwen3-8b"), Scenario(level=(124, 8)))


def test_llama70b_does_not_fit_on_one_h100() -> None:
    est = estimate(find_gpu("h100"), load_model("llama-3.1-70b"))
    assert not est.memory.fits
    assert est.memory.weight_bytes > 140e9
    assert est.notes[0].code == "estimate.does_not_fit" and render(est.notes[0]).startswith("does not fit")
    # fp8 weights on an H200 fit.
    est = estimate(find_gpu("h200"), load_model("llama-3.1-70b"), Scenario(weight_bytes_per_param=1))
    assert est.memory.fits


def test_every_gpu_and_model_runs() -> None:
    from pdmux_cli.catalog.hardware import load_gpus
    from pdmux_cli.catalog.model import list_models

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
                Scenario(chunk_sizes=(0,)), Scenario(mixed_chunk_sizes=(0,)), Scenario(s_sat_values=(0.0,)),
                Scenario(cost=CostModelOptions(mfu=1.5)),
                Scenario(cost=CostModelOptions(bandwidth_efficiency=0)), Scenario(weight_bytes_per_param=-1),
                Scenario(kv_bytes_per_element=0), Scenario(cost=CostModelOptions(cost_model="magic")),
                Scenario(cost=CostModelOptions(mfu=0.6)),  # a chapter knob: the roofline model refuses it
                Scenario(cost=CostModelOptions(cost_model="chapter", step_overhead_ms=1.0))):
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


# ---------------------------------------------------------------------------------------------------
# the default (roofline) estimate


@pytest.fixture(scope="module")
def roofline():
    return estimate(find_gpu("h100"), load_model("qwen3-8b"), all_levels=True)


def test_roofline_rows_name_sglang_policies(roofline) -> None:
    rows = [(r.policy, r.label) for r in roofline.rows]
    assert rows == [("decode-only", "decode only (ref.)"), ("prefill-first", "prefill first"),
                    ("chunked", "chunked 8192"),  # SGLang's default chunk size on an 80 GB GPU
                    ("mixed-chunk", "mixed chunk 2048"), ("mixed-chunk", "mixed chunk 512"),
                    # Hopper's fitted S_SAT on an H100's 3.35 TB/s: 88 of 132 SMs
                    ("pdmux", "PD mux 80/52 S_SAT=88")]
    assert roofline.cost_model == "roofline" and roofline.cpu_step_ms == pytest.approx(0.31)


def test_roofline_corrects_the_chapter_where_measurements_disagree(roofline, chapter) -> None:
    rl = {r.policy + (str(r.chunk_tokens) if r.chunk_tokens else ""): r for r in roofline.rows}
    ch = {r.policy + (str(r.chunk_tokens) if r.chunk_tokens else ""): r for r in chapter.rows}
    # decode: weight GEMMs below 90% of datasheet bandwidth plus small ops -> a longer step
    assert rl["decode-only"].itl_ms > 1.1 * ch["decode-only"].itl_ms
    # prefill: linear layers at ~0.78 of dense peak, not 0.5 -> a shorter prefill
    assert rl["prefill-first"].prefill_ms < 0.8 * ch["prefill-first"].prefill_ms
    # small chunks lose efficiency (weights re-read every chunk): 512 slower than 2048 by more than 10%
    assert rl["mixed-chunk512"].prefill_ms > 1.2 * rl["mixed-chunk2048"].prefill_ms


def test_chunked_default_stalls_decode_for_the_whole_prompt(roofline) -> None:
    rows = {r.label: r for r in roofline.rows}
    chunked, first = rows["chunked 8192"], rows["prefill first"]
    assert chunked.tokens_during_prefill == 0 and chunked.steps == 1
    assert chunked.itl_ms == pytest.approx(first.itl_ms, rel=1e-9)  # one 8192 chunk is the whole prompt
    est = estimate(find_gpu("h100"), load_model("qwen3-8b"),
                   Scenario(chunk_sizes=(2048,), mixed_chunk_sizes=()))
    row = next(r for r in est.rows if r.policy == "chunked")
    assert row.tokens_during_prefill == 0 and row.itl_ms > 4 * est.rows[0].itl_ms


def test_pdmux_json_numbers_per_partition(roofline) -> None:
    pd = next(r for r in roofline.rows if r.policy == "pdmux")
    # co-run interference slows decode; a pdmux round adds the CPU's work to the decode step
    assert pd.decode_corun_ms > pd.decode_alone_ms
    assert pd.itl_ms == pytest.approx(pd.decode_corun_ms + roofline.cpu_step_ms + 32
                                      * roofline.per_request_ms)
    assert pd.prefill_ms == pd.prefill_corun_ms and pd.prefill_alone_ms <= pd.prefill_corun_ms
    chosen = next(lv for lv in roofline.levels if lv.chosen)
    assert chosen.decode_alone_ms == pytest.approx(pd.decode_alone_ms)
    # more decode SMs, shorter decode; fewer prefill SMs, longer prefill
    alone = [lv.decode_alone_ms for lv in roofline.levels]
    assert alone == sorted(alone, reverse=True)
    assert [lv.prefill_ms for lv in roofline.levels] == sorted(lv.prefill_ms for lv in roofline.levels)


def test_prompt_past_context_length_is_refused() -> None:
    m = load_model("qwen3-8b")  # max_position_embeddings 40960
    with pytest.raises(InputError, match="context length of 40,960"):
        estimate(find_gpu("h100"), m, Scenario(prompt_tokens=40960))
    with pytest.raises(InputError, match="decode context"):
        estimate(find_gpu("h100"), m, Scenario(context_tokens=50000))
    assert estimate(find_gpu("h100"), m, Scenario(prompt_tokens=40959, mixed_chunk_sizes=()))


def test_sglang_pool_note_when_scenario_exceeds_it() -> None:
    # 16.4 GB of weights + 39 GB of KV fit in 85.5 GB, but not in SGLang's pool with chunking off
    # (mem_fraction_static 0.685 of 81559 MiB, less the weights: 281,205 tokens of 144 KiB)
    est = estimate(find_gpu("h100"), load_model("qwen3-8b"), Scenario(decode_bs=128, context_tokens=2200))
    assert est.memory.fits
    assert est.memory.pdmux_pool_tokens == 281_205 < est.memory.kv_tokens_needed == 128 * 2200 + 8192
    assert any("KV pool under pdmux" in n for n in render_all(est.notes))


def test_pdmux_prefill_waits_for_rounds_longer_than_its_slices() -> None:
    from pdmux_cli.planning.estimate import pdmux_prefill_end_s

    # slices shorter than the round: the stream idles; the end is 3 rounds + the last slice
    assert pdmux_prefill_end_s(1.0, 0.5, 4, 1) == pytest.approx(3 * 0.5 + 0.25)
    # slices longer than the round: the prefill runs back to back (the chapter's case)
    assert pdmux_prefill_end_s(0.324, 0.0154, 36, 8) == pytest.approx(0.324)
    assert pdmux_prefill_end_s(0.0, 0.5, 4, 1) == 0.0
    # Qwen3-0.6B on H200, 256 x 4096 decoding, a 32768-token prompt: a 43 ms round outlasts each 2-layer slice
    from pdmux_cli.catalog.hardware import find_gpu
    from pdmux_cli.catalog.model import load_model
    from pdmux_cli.planning.estimate import Scenario, estimate

    e = estimate(find_gpu("h200"), load_model("qwen3-0.6b"), Scenario(decode_bs=256, context_tokens=4096,
                                                                     prompt_tokens=32768))
    row = next(r for r in e.rows if r.policy == "pdmux")
    assert row.prefill_ms >= (e.prefill_rounds - 1) * row.itl_ms
    assert row.tokens_during_prefill >= e.prefill_rounds - 1


def test_a_mixed_chunk_no_larger_than_the_decode_batch_gives_no_row() -> None:
    from pdmux_cli.catalog.hardware import find_gpu
    from pdmux_cli.catalog.model import load_model
    from pdmux_cli.planning.estimate import Scenario, estimate

    e = estimate(find_gpu("h100"), load_model("qwen3-8b"), Scenario(mixed_chunk_sizes=(32, 33, 512)))
    assert [r.label for r in e.rows if r.policy == "mixed-chunk"] == ["mixed chunk 33", "mixed chunk 512"]
    assert any(n.startswith("mixed chunk 32: no row") for n in render_all(e.notes))
    one = next(r for r in e.rows if r.label == "mixed chunk 33")
    assert one.steps == 8192  # one prompt token a step next to the 32 decode rows


def test_policy_rows_follow_the_step_models_own_reading() -> None:
    """The rows' cost-model choices are the step model's (issue 32): SGLang's default chunked row and its
    mixed batches sharing the chunk with the decode rows under the roofline model; the chapter's table has
    neither, and its mixed row puts a whole chunk beside the decode batch."""
    from pdmux_cli.costmodel import build_step_model

    gpu, model = find_gpu("h100"), load_model("llama-3.1-8b")
    roofline, chapter = build_step_model(gpu, model), build_step_model(gpu, model, cost_model="chapter")
    assert (roofline.default_chunked_row, roofline.mixed_chunk_charges_decode_rows,
            roofline.notes_short_prefill) == (True, True, False)
    assert (chapter.default_chunked_row, chapter.mixed_chunk_charges_decode_rows,
            chapter.notes_short_prefill) == (False, False, True)
    labels = [r.label for r in estimate(gpu, model, Scenario()).rows]
    assert "chunked 8192" in labels
    assert not [r for r in estimate(gpu, model, CHAPTER).rows if r.policy == "chunked"]
    # a 32-row decode batch and an 8192-token prompt: SGLang's 512-token mixed chunk takes 480 prompt tokens a
    # step (18 steps), the chapter's 512 (16)
    mixed = {s.cost.cost_model: next(r for r in estimate(gpu, model, s).rows if r.label == "mixed chunk 512")
             for s in (Scenario(), CHAPTER)}
    assert (mixed["roofline"].steps, mixed["chapter"].steps) == (18, 16)


def test_what_the_commands_ask_is_the_step_models_own() -> None:
    """The questions the commands ask of a cost model, some before it is built, are its class's attributes
    (issue 32), reached from the --cost-model name: the roofline costs CPU time, a verify pass and an error
    interval and takes one S_SAT; the chapter's model none of those, and sweeps its S_SAT guesses (one
    PD-mux row at each of 44, 66, 88 SMs on H100)."""
    from pdmux_cli.costmodel import COST_MODELS, build_step_model, model_class

    asked = ("models_cpu_time", "guesses_s_sat", "verifies_drafts", "has_error_interval")
    gpu, model = find_gpu("h100"), load_model("llama-3.1-8b")
    assert {name: tuple(getattr(model_class(name), a) for a in asked) for name in COST_MODELS} == {
        "roofline": (True, False, True, True), "chapter": (False, True, False, False)}
    for name in COST_MODELS:
        built = build_step_model(gpu, model, cost_model=name)
        assert type(built) is model_class(name) and built.name == name
    assert model_class("nope") is None and model_class(" chapter") is None  # as given: the builder refuses
    pdmux = {s.cost.cost_model: [r.label for r in estimate(gpu, model, s).rows if r.policy == "pdmux"]
             for s in (Scenario(), CHAPTER)}
    assert len(pdmux["roofline"]) == 1 and len(pdmux["chapter"]) == 3
    assert all("S_SAT" in label for label in pdmux["chapter"]), pdmux["chapter"]
    with pytest.raises(InputError, match="applies to --cost-model roofline"):
        estimate(gpu, model, Scenario(cost=CostModelOptions(cost_model="chapter"), disable_cuda_graph=True))


def test_a_pdmux_row_that_cannot_run_quotes_no_ttft() -> None:
    """Where the revision cannot run the PD-mux rows (0.5.23's pdmux beside EAGLE, a new user's report),
    the whole-server TTFT note and the JSON leave those rows' TTFT out; the baselines keep theirs."""
    import json

    from typer.testing import CliRunner

    from pdmux_cli.cli import app

    out = CliRunner().invoke(app, ["estimate", "--decode-bs", "1", "--speculative-algorithm", "EAGLE",
                                   "--speculative-accept-length", "2.5", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    rows = {r["policy"]: r for r in data["rows"]}
    assert rows["pdmux"]["runs"] is False
    assert rows["pdmux"]["ttft_ms"] is None and rows["pdmux"]["ttft_interval_ms"] is None
    assert rows["chunked"]["ttft_ms"] == pytest.approx(231.9, abs=0.1)
    ttft_note = next(n for n in data["notes"] if "TTFT with pdmux's measured error" in n)
    assert "chunked 8192 232 ms" in ttft_note and "PD mux" not in ttft_note


def test_one_request_is_singular() -> None:
    """One request is "1 request", not "1 requests" (a new user's report): estimate's header, simulate's
    title and its cut-trace note."""
    from typer.testing import CliRunner

    from pdmux_cli.cli import app

    runner = CliRunner()
    out = runner.invoke(app, ["estimate", "--decode-bs", "1"])
    assert out.stdout.splitlines()[0].startswith(
        "Qwen3-8B on H100 SXM5 80GB: 1 decode request at 2048 context")
    out = runner.invoke(app, ["simulate", "tests/fixtures/azure_conv_50.csv", "--max-requests", "1"])
    assert out.exit_code == 0, out.output
    assert out.stdout.startswith("azure_conv_50.csv: 1 request (one request);")
    assert "first 1 request of 50" in out.output
