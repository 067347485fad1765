"""``pdmux bench`` without a GPU: the plan, the statistics, NVRTC, the no-driver path for real, the CLI,
and the green-context / timing / interruption logic against fakes of cuda-python and CUDA events.

Nothing here needs torch (CI has none). What only a GPU can check is in tests/test_bench_gpu.py.
"""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest
from bench_fakes import FakeDriver, FakeStream, fake_workloads
from cli_assertions import assert_one_line_error
from typer.testing import CliRunner

from pdmux_cli.bench import greenctx, kernels, runner
from pdmux_cli.bench import plan as bplan
from pdmux_cli.bench.results import (
    BenchResults,
    LevelResult,
    RunInfo,
    SweepPoint,
    calibration_from_results,
    results_dict,
)
from pdmux_cli.bench.stats import (
    RateStats,
    median,
    monotone_fit,
    overlap_end_ms,
    overlap_rate,
    percentile,
    s_sat,
)
from pdmux_cli.catalog.hardware import find_gpu, load_gpus
from pdmux_cli.cli import app
from pdmux_cli.costmodel.calibration_file import dump_calibration, load_calibration
from pdmux_cli.messages import render_all
from pdmux_cli.sglang import split_levels
from pdmux_cli.util.errors import DeviceError, InputError

cli = CliRunner()


def _gpu_present() -> bool:
    try:
        greenctx.probe_device(0)
    except Exception:  # noqa: BLE001 - any failure means: no usable GPU here
        return False
    return True


GPU_PRESENT = _gpu_present()
needs_no_gpu = pytest.mark.skipif(GPU_PRESENT,
                                  reason="a GPU is present: the no-driver path cannot be exercised")


# ---- import hygiene ------------------------------------------------------------------------------


@pytest.mark.parametrize("module",
                         ["pdmux_cli.cli", "pdmux_cli.costmodel.calibration_file", "pdmux_cli.bench",
                                    "pdmux_cli.bench.plan", "pdmux_cli.bench.greenctx",
                                    "pdmux_cli.bench.runner"])
def test_imports_stay_light(module) -> None:
    code = (
        f"import sys, {module}\n"
        "heavy = ('torch', 'cuda', 'numpy', 'matplotlib')\n"
        "print([m for m in sys.modules if m.split('.')[0] in heavy])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"


# ---- the plan ------------------------------------------------------------------------------------

PROFILES = [g for g in load_gpus() if g.sm_count is not None]


@pytest.mark.parametrize("gpu", PROFILES, ids=[g.key for g in PROFILES])
def test_dry_run_plan_every_profile(gpu) -> None:
    plan = bplan.make_plan(bplan.PlanDevice.from_gpu(gpu))
    total = gpu.sm_count
    expected = split_levels.plan_groups(total, gpu.compute_capability).groups[1:-1]
    assert list(plan.levels) == list(expected)
    minimum, multiple = split_levels.cuda_sm_granularity(gpu.compute_capability[0])
    assert plan.sweep_sms == tuple(range(minimum, total, multiple)) + (total,)
    if gpu.l2_bytes:
        assert plan.buffer_bytes >= 4 * gpu.l2_bytes
    else:
        assert any("L2 size" in n for n in render_all(plan.notes))
        assert [n.code for n in plan.notes if n.code == "bench.l2_unknown"] == ["bench.l2_unknown"]
    assert plan.buffer_bytes % 16 == 0
    assert plan.read_bytes_per_launch == plan.buffer_bytes
    assert plan.copy_bytes_per_launch == 2 * plan.buffer_bytes
    assert plan.gemm.flops == 2 * 8192 * 4096 * 12288
    assert plan.gemm.operand_bytes == 2 * (8192 * 12288 + 12288 * 4096 + 8192 * 4096)
    blocks = plan.read_grid_blocks
    assert (blocks
            - 1) * kernels.READ_BYTES_PER_BLOCK < plan.buffer_bytes <= blocks * kernels.READ_BYTES_PER_BLOCK
    assert plan.repeats == 10 and plan.steps == 2 + len(plan.sweep_sms) + len(plan.levels)
    data = bplan.plan_dict(plan)
    json.dumps(data)
    assert data["levels"][0]["prefill_sms"] == expected[0].prefill_sms
    assert (data["memory_needed_bytes"] == plan.gemm.operand_bytes + 2 * plan.buffer_bytes + 4
            * plan.smid_blocks)


def test_unpublished_sm_count_refused() -> None:
    with pytest.raises(InputError, match="SM count"):
        bplan.make_plan(bplan.PlanDevice.from_gpu(find_gpu("b100")))


def test_h100_levels_are_sglangs() -> None:
    plan = bplan.make_plan(bplan.PlanDevice.from_gpu(find_gpu("h100")))
    assert [tuple(s) for s in plan.levels] == [(112, 20), (104, 28), (96, 36), (88, 44), (80, 52), (72, 60)]
    assert plan.level_source == "sglang-auto"


def test_blackwell_levels_from_cuda_granularity() -> None:
    plan = bplan.make_plan(bplan.PlanDevice.from_gpu(find_gpu("b200")))
    assert plan.level_source == "cuda-granularity"
    assert all(p % 8 == 0 for p, _ in plan.levels)
    assert any("manual_divisions" in n for n in render_all(plan.notes))


def test_buffer_floor_and_default() -> None:
    b200 = bplan.PlanDevice.from_gpu(find_gpu("b200"))
    assert bplan.make_plan(b200).buffer_bytes == 1 << 30
    assert bplan.make_plan(b200, buffer_bytes=4 * b200.l2_bytes + 5).buffer_bytes == 4 * b200.l2_bytes
    with pytest.raises(InputError, match="4x the L2"):
        bplan.make_plan(b200, buffer_bytes=4 * b200.l2_bytes - 16)
    big_l2 = bplan.PlanDevice("big", 132, (9, 0), 512 << 20, 200 << 30)
    assert bplan.make_plan(big_l2).buffer_bytes == 4 * (512 << 20)


def test_quick_and_repeats() -> None:
    dev = bplan.PlanDevice.from_gpu(find_gpu("h200"))
    quick = bplan.make_plan(dev, quick=True)
    assert (quick.repeats, quick.warmup, quick.window_ms) == (3, 1, 50.0)
    assert bplan.make_plan(dev, repeats=25).repeats == 25
    for bad in (0, -3):
        with pytest.raises(InputError, match="--repeats"):
            bplan.make_plan(dev, repeats=bad)
    with pytest.raises(InputError, match="--device"):
        bplan.make_plan(dev, device_index=-1)


def test_levels_subset() -> None:
    dev = bplan.PlanDevice.from_gpu(find_gpu("h100"))
    assert [tuple(s) for s in bplan.make_plan(dev, levels="1,6").levels] == [(112, 20), (72, 60)]
    plan = bplan.make_plan(dev, levels="2, 96/36, 64/68")
    assert [tuple(s) for s in plan.levels] == [(104, 28), (96, 36), (64, 68)]
    assert plan.level_source == "option"
    for bad, fragment in (("7", "1-6"), ("0", "start at 1"), ("a/b", "PREFILL/DECODE"),
                          ("120/20", "at most 132"), ("0/20", "> 0"), (",", "at least one")):
        with pytest.raises(InputError, match=fragment):
            bplan.make_plan(dev, levels=bad)


def test_memory_too_small_refused() -> None:
    tiny = bplan.PlanDevice("tiny", 40, (7, 5), 4 << 20, 2 << 30)
    with pytest.raises(InputError, match="--gemm-shape or --buffer-bytes"):
        bplan.make_plan(tiny)


def test_skinny_gemm_plan() -> None:
    dev = bplan.PlanDevice.from_gpu(find_gpu("h100"))
    plan = bplan.make_plan(dev, skinny=bplan.parse_skinny("4096x12288"))
    assert (plan.skinny.m, plan.skinny.n, plan.skinny.k) == (32, 12288, 4096)
    assert plan.skinny_copies * plan.skinny.weight_bytes >= 4 * dev.l2_bytes
    assert any(k["kind"] == "skinny-gemm" for k in bplan.plan_dict(plan)["kernels"])


def test_parsers() -> None:
    assert bplan.parse_gemm_shape("8192x4096x12288") == bplan.GemmShape(8192, 4096, 12288)
    assert bplan.parse_gemm_shape(" 16X32x64 ") == bplan.GemmShape(16, 32, 64)
    for bad in ("abc", "1x2", "1x2x3x4", "0x2x3", "-1x2x3", ""):
        with pytest.raises(InputError, match="gemm-shape"):
            bplan.parse_gemm_shape(bad)
    assert bplan.parse_bytes("1GiB") == 1 << 30
    assert bplan.parse_bytes("512MiB") == 512 << 20
    assert bplan.parse_bytes("2e9") == 2_000_000_000
    assert bplan.parse_bytes("1073741824") == 1 << 30
    assert bplan.parse_bytes("1TiB") == 1 << 40
    for bad in ("lots", "1PB", "-5", "0"):
        with pytest.raises(InputError, match="buffer-bytes"):
            bplan.parse_bytes(bad)
    with pytest.raises(InputError, match="skinny"):
        bplan.parse_skinny("4096")


@pytest.mark.parametrize("bad", ["²x2x2", "٣x2x2", "1_000x2x2", "9" * 5000 + "x1x1", "2097152x1x1"])
def test_gemm_shape_takes_plain_bounded_integers(bad) -> None:
    """str.isdigit accepts '²' (int() then raises) and '٣' (int() reads 3): both refused, as are
    '_' separators, 5000 digits and dimensions past MAX_GEMM_DIM."""
    with pytest.raises(InputError, match="gemm-shape"):
        bplan.parse_gemm_shape(bad)
    assert bplan.parse_gemm_shape(f"{bplan.MAX_GEMM_DIM}x1x1").m == bplan.MAX_GEMM_DIM


@pytest.mark.parametrize("bad", ["1e400", "9" * 400, "2000GB", "1.2e12"])
def test_buffer_bytes_bounded(bad) -> None:
    with pytest.raises(InputError, match="at most 1099511627776 bytes"):
        bplan.parse_bytes(bad)
    assert bplan.parse_bytes(str(bplan.MAX_BUFFER_BYTES)) == bplan.MAX_BUFFER_BYTES


def test_levels_syntax_and_granularity() -> None:
    assert bplan.parse_level_items("1, 112/20,96:36") == [("1", 1), ("112/20", (112, 20)),
                                                          ("96:36", (96, 36))]
    for bad in ("²", "²/3", "1/" + "9" * 5000, "abc", ",", "1/2/3"):
        with pytest.raises(InputError, match="--levels"):
            bplan.parse_level_items(bad)
    h100 = bplan.PlanDevice.from_gpu(find_gpu("h100"))
    with pytest.raises(InputError, match="leaves no SMs for decode"):
        bplan.make_plan(h100, levels="1/1")
    plan = bplan.make_plan(h100, levels="20/20")  # 20 -> 24 prefill, 16 decode: allowed, with a note
    assert plan.levels == (split_levels.Split(20, 20),) and any(
        "rounds it up" in n for n in render_all(plan.notes))


def test_skinny_and_repeats_bounded() -> None:
    h100 = bplan.PlanDevice.from_gpu(find_gpu("h100"))
    with pytest.raises(InputError, match="copies"):
        bplan.make_plan(h100, skinny=bplan.parse_skinny("1x1"))
    assert bplan.make_plan(h100, skinny=bplan.parse_skinny("4096x12288")).skinny_copies <= 10
    with pytest.raises(InputError, match="from 1 to 1000"):
        bplan.make_plan(h100, repeats=bplan.MAX_REPEATS + 1)


def test_estimated_seconds_fit_gpu_check_budget() -> None:
    for key in ("h100", "h200"):
        quick = bplan.make_plan(bplan.PlanDevice.from_gpu(find_gpu(key)), quick=True)
        assert bplan.estimated_seconds(quick) < 60


# ---- statistics ----------------------------------------------------------------------------------


def test_percentiles() -> None:
    values = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert median(values) == 3.0
    assert percentile(values, 0) == 1.0 and percentile(values, 100) == 5.0
    assert percentile(values, 10) == pytest.approx(1.4)
    stats = RateStats.from_times(100.0, [1.0, 2.0, 4.0, 0.5])
    assert (stats.median == pytest.approx(75.0) and stats.max == 200.0 and stats.min == 25.0
            and stats.runs == 4)
    assert stats.median_s == pytest.approx(1.5)
    with pytest.raises(InputError):
        RateStats.from_times(1.0, [1.0, 0.0])
    with pytest.raises(InputError):
        RateStats.from_rates([])


def test_s_sat_from_synthetic_curve() -> None:
    full = 3.0e12
    curve = [(s, full * min(1.0, s / 60)) for s in range(8, 132, 8)] + [(132, full)]
    assert s_sat(curve, full) == 64  # 57/60 = 0.95 is first reached at 64 (56 gives 0.933)
    assert s_sat(curve, full, 0.5) == 32
    assert s_sat([(8, 1.0), (16, 2.0)], 10.0) == 16  # never reaches: the largest measured
    with pytest.raises(InputError):
        s_sat([], 1.0)


def test_monotone_fit() -> None:
    assert monotone_fit([(8, 1.0), (16, 2.0), (24, 3.0)]) == [(8, 1.0), (16, 2.0), (24, 3.0)]
    fitted = monotone_fit([(8, 1.0), (16, 3.0), (24, 2.8), (32, 3.5)])
    assert [x for x, _ in fitted] == [8, 16, 24, 32]
    assert fitted[1][1] == pytest.approx(2.9) and fitted[2][1] == pytest.approx(2.9)
    assert all(b[1] >= a[1] for a, b in itertools.pairwise(fitted))
    # duplicates averaged, sorted
    assert monotone_fit([(16, 2.0), (8, 1.0), (16, 4.0)]) == [(8, 1.0), (16, 3.0)]


def test_overlap_window() -> None:
    ends_a = [10.0, 20.0, 30.0, 40.0]
    ends_b = [15.0, 30.0, 45.0]
    until = overlap_end_ms(ends_a, ends_b)
    assert until == 40.0
    rate, units, span = overlap_rate(0.0, ends_b, 6.0, until)
    assert (units, span) == (2, 30.0) and rate == pytest.approx(12 / 0.030)
    with pytest.raises(InputError):
        overlap_end_ms([], [1.0])
    with pytest.raises(InputError):
        overlap_rate(0.0, [50.0], 1.0, 40.0)


# ---- NVRTC ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def nvrtc_archs():
    pytest.importorskip("cuda.bindings",
                        reason="the NVRTC kernel tests need pip install -e '.[test,test-kernels]'")
    return kernels.supported_archs()


def test_nvrtc_found_without_a_gpu(nvrtc_archs) -> None:
    major, _minor = kernels.nvrtc_version()
    assert major >= 12
    assert 90 in nvrtc_archs


@pytest.mark.parametrize("arch", [80, 90, 100])
@pytest.mark.parametrize("name", list(kernels.KERNELS))
def test_nvrtc_compiles_every_kernel(nvrtc_archs, arch, name) -> None:
    if nvrtc_archs and arch not in nvrtc_archs:
        pytest.skip(f"this NVRTC has no sm_{arch}")
    ptx = kernels.compile_source(kernels.KERNELS[name], arch, "ptx")
    cubin = kernels.compile_source(kernels.KERNELS[name], arch, "cubin")
    assert ptx and cubin
    assert cubin[:4] == b"\x7fELF"
    text = ptx.decode()
    assert f".entry {name}" in text
    assert f".target sm_{arch}" in text
    if name == "pdmux_smid":
        assert "%smid" in text
    if name == "pdmux_read_bw":
        assert text.count("ld.global.nc.v4.u32") >= kernels.READ_UNROLL  # 16-byte loads, unrolled
        assert "st.global" in text  # the conditional store keeps the loads alive
        # block start and end stamps: first start and last end of the launch
        assert text.count("%globaltimer") == 2
        # atom.relaxed.gpu.global... on sm_100
        assert re.search(r"(atom|red)[a-z.]*\.global\.min\.[ub]64", text)
        assert re.search(r"(atom|red)[a-z.]*\.global\.max\.[ub]64", text)
        assert "bar.sync" in text  # the end stamp waits for every thread's loads
    if name == "pdmux_mark":
        assert "%globaltimer" in text and re.search(r"st\.global\.[ub]64", text)


def test_nvrtc_all_sources_and_device_image(nvrtc_archs) -> None:
    image, text = kernels.compile_for_device((9, 0))
    assert image[:4] == b"\x7fELF" and text == "cubin sm_90"


def test_nvrtc_error_is_one_line(nvrtc_archs) -> None:
    with pytest.raises(DeviceError) as err:
        kernels.compile_source("this is not CUDA", 90)
    assert "\n" not in str(err.value) and "sm_90" in str(err.value)


def test_read_grid_is_sized_by_data() -> None:
    assert kernels.read_grid_blocks(kernels.READ_BYTES_PER_BLOCK) == 1
    assert kernels.read_grid_blocks(kernels.READ_BYTES_PER_BLOCK + 16) == 2
    assert kernels.read_grid_blocks(1 << 30) == (1 << 30) // kernels.READ_BYTES_PER_BLOCK
    with pytest.raises(InputError):
        kernels.read_grid_blocks(8)


# ---- no driver, for real -------------------------------------------------------------------------


@needs_no_gpu
def test_probe_without_driver_raises_device_error() -> None:
    with pytest.raises(DeviceError) as err:
        greenctx.probe_device(0)
    message = str(err.value)
    assert "\n" not in message
    assert ("NVIDIA driver" in message) or ("pip install 'pdmux[bench]'" in message)
    assert err.value.exit_code == 1


@needs_no_gpu
def test_bench_cli_without_gpu_exits_1() -> None:
    assert_one_line_error(cli.invoke(app, ["bench"]), 1)


@needs_no_gpu
def test_bench_cli_without_gpu_writes_nothing(tmp_path) -> None:
    out = tmp_path / "run"
    assert_one_line_error(cli.invoke(app, ["bench", "--out", str(out)]), 1)
    assert not out.exists()  # created only once a device is there


def test_torch_cpu_build_is_device_error() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("torch sees a GPU")
    with pytest.raises(DeviceError, match="CPU-only build|cannot use the GPU"):
        runner.import_torch()


def test_missing_cuda_python_is_device_error(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", None)
    with pytest.raises(DeviceError, match=r"pip install 'pdmux\[bench\]'"):
        greenctx.probe_device(0)


def test_missing_torch_is_device_error(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(DeviceError, match=r"pip install 'pdmux\[bench\]'"):
        runner.import_torch()


# ---- CLI -----------------------------------------------------------------------------------------


def test_cli_dry_run_h100() -> None:
    r = cli.invoke(app, ["bench", "--dry-run", "--gpu", "h100"])
    assert r.exit_code == 0, r.stderr
    for text in ("co-run levels", "112", "72", "1,073,741,824", "pdmux_read_bw", "pdmux_smid",
                 "median of 10"):
        assert text in r.stdout, text


def test_cli_dry_run_json() -> None:
    r = cli.invoke(app, ["bench", "--dry-run", "--gpu", "h100", "--json", "--quick", "--levels", "1,2"])
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["dry_run"] is True and data["sm_count"] == 132
    assert [(lv["prefill_sms"], lv["decode_sms"]) for lv in data["levels"]] == [(112, 20), (104, 28)]
    assert data["repeats"] == 3 and data["buffer_bytes"] >= 4 * data["l2_bytes"]
    assert data["read_bytes_per_launch"] * 2 == data["copy_bytes_per_launch"]


def test_cli_dry_run_custom_device() -> None:
    r = cli.invoke(app, ["bench", "--dry-run", "--sms", "78", "--cc", "9.0", "--json"])
    assert r.exit_code == 0, r.stderr
    assert [(lv["prefill_sms"], lv["decode_sms"]) for lv in json.loads(r.stdout)["levels"]] == [
        (56, 22), (48, 30), (40, 38)]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--gemm-shape", "abc"], "gemm-shape"),
        (["--repeats", "-1"], "--repeats"),
        (["--repeats", "0"], "--repeats"),
        (["--buffer-bytes", "1MiB", "--dry-run"], "4x the L2"),
        (["--buffer-bytes", "many"], "buffer-bytes"),
        (["--levels", "9", "--dry-run"], "level numbers"),
        (["--gpu", "nosuchgpu", "--dry-run"], "unknown GPU"),
        (["--device", "-1"], "--device"),
        (["--sm-group-num", "2"], "sm-group-num"),
        (["--sms", "132"], "--sms"),
        (["--gemm-shape", "0x0x0"], "must all be > 0"),
        (["--gemm-shape", "0x0x0", "--dry-run"], "must all be > 0"),
        (["--repeats", "0", "--dry-run"], "--repeats"),
        (["--repeats", "1001"], "from 1 to 1000"),
        (["--gpu", "nosuchgpu"], "unknown GPU"),  # usage errors before the driver is probed
        (["--levels", "abc"], "--levels"),
        (["--buffer-bytes", "1e400", "--dry-run"], "at most"),
        (["--levels", "1/1", "--dry-run"], "no SMs for decode"),
        (["--skinny-gemm", "1x1", "--dry-run"], "copies"),
        (["--dry-run", "--sms", "132", "--cc", "²"], "compute capability"),
    ],
)
def test_cli_usage_errors_exit_2(args, fragment) -> None:
    assert_one_line_error(cli.invoke(app, ["bench", *args]), 2, fragment)


def test_cli_bad_out_refused_before_any_device_work(monkeypatch, tmp_path) -> None:
    def no_device(device, gpu):
        raise AssertionError("the device was touched before --out was checked")

    monkeypatch.setattr(runner, "prepare", no_device)
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    assert_one_line_error(cli.invoke(app, ["bench", "--out", str(a_file)]), 2, "is not a directory")
    assert_one_line_error(cli.invoke(app, ["bench", "--out", str(a_file / "sub" / "dir")]), 2,
                          "not a directory")
    assert_one_line_error(cli.invoke(app, ["bench", "--out", "/dev/null"]), 2, "is not a directory")
    # a dry run checks it as the run it plans would (it was ignored: a new user's report), creating nothing
    assert_one_line_error(cli.invoke(app, ["bench", "--dry-run", "--gpu", "h100", "--out", str(a_file)]), 2,
                          "is not a directory")
    ok = cli.invoke(app, ["bench", "--dry-run", "--gpu", "h100", "--out", str(tmp_path / "later")])
    assert ok.exit_code == 0 and not (tmp_path / "later").exists()
    import pdmux_cli.workflows.bench_results as bench_results

    # a read-only folder (root ignores modes)
    monkeypatch.setattr(bench_results.os, "access", lambda path, mode: False)
    assert_one_line_error(cli.invoke(app, ["bench", "--out", str(tmp_path / "new")]), 2, "not writable")
    assert a_file.read_text() == "x" and not (tmp_path / "new").exists()


# ---- green contexts against a fake cuda-python driver --------------------------------------------


def _info(total=132, driver=12080):
    return greenctx.DeviceInfo(index=0, name="NVIDIA H100 80GB HBM3", sm_count=total,
                               compute_capability=(9, 0), l2_bytes=50 << 20, memory_bytes=80 << 30,
                               driver_version=driver, bindings_version="12.9.0", granularity=None,
                               resource_sm_count=total)


def test_level_partitions_follow_sgl_kernel(monkeypatch) -> None:
    fake = FakeDriver()
    monkeypatch.setattr(greenctx, "driver_module", lambda: fake)
    with greenctx.LevelPartitions(_info(), 112, 20) as lv:
        assert (lv.prefill.requested_sms, lv.prefill.granted_sms) == (112, 112)
        assert (lv.decode.requested_sms, lv.decode.granted_sms) == (20, 20)
        assert lv.pair_granted_sms == 132
        assert len(fake.live_ctx) == 2 and len(fake.live_streams) == 2  # the intermediate is gone
        assert lv.live_handles == 4
    splits = [c for c in fake.calls if c[0] == "split"]
    # the pair is the whole device: ONE split for prefill, decode the rest
    assert splits == [("split", 132, 112)]
    assert not fake.live_ctx and not fake.live_streams
    destroys = [c[0] for c in fake.calls if c[0].startswith("destroy")]
    assert destroys.index("destroy-stream") < len(destroys) - destroys[::-1].index("destroy-ctx")
    assert lv.live_handles == 0


def test_level_partitions_smaller_than_the_device_split_the_pair_first(monkeypatch) -> None:
    fake = FakeDriver()
    monkeypatch.setattr(greenctx, "driver_module", lambda: fake)
    with greenctx.LevelPartitions(_info(), 64, 20) as lv:  # 84 rounds up to 88 of 132
        assert (lv.prefill.granted_sms, lv.decode.granted_sms, lv.pair_granted_sms) == (64, 24, 88)
        assert len(fake.live_ctx) == 2 and lv.live_handles == 4  # the intermediate is gone
    assert [c for c in fake.calls if c[0] == "split"] == [("split", 132, 84), ("split", 88, 64)]
    assert [c[1] for c in fake.calls if c[0] == "ctx"] == [88, 64, 24]  # intermediate, prefill, decode
    assert not fake.live_ctx and not fake.live_streams


def test_sm_partition_granted_rounds_up(monkeypatch) -> None:
    fake = FakeDriver()
    monkeypatch.setattr(greenctx, "driver_module", lambda: fake)
    with greenctx.SmPartition(_info(), 20) as part:
        assert (part.partition.requested_sms, part.partition.granted_sms) == (20, 24)
    assert not fake.live_ctx and not fake.live_streams


def test_driver_12_4_stream_fallback(monkeypatch) -> None:
    fake = FakeDriver()
    monkeypatch.setattr(greenctx, "driver_module", lambda: fake)
    with greenctx.SmPartition(_info(driver=12040), 64):
        kinds = [c[0] for c in fake.calls]
        assert "gstream" not in kinds
        i = kinds.index("push")
        assert kinds[i:i + 3] == ["push", "stream", "pop"]
    assert not fake.live_streams and not fake.live_ctx


def test_refused_split_names_it_and_cleans_up(monkeypatch) -> None:
    fake = FakeDriver(refuse_at=104)
    monkeypatch.setattr(greenctx, "driver_module", lambda: fake)
    with pytest.raises(DeviceError) as err, greenctx.LevelPartitions(_info(), 104, 28):
        pass
    message = str(err.value)
    assert ("104 prefill SMs" in message and "104/28" in message
            and "INVALID_RESOURCE_CONFIGURATION" in message)
    assert not fake.live_ctx and not fake.live_streams  # the intermediate context was destroyed too


def test_ctrl_c_inside_partition_tears_down(monkeypatch) -> None:
    fake = FakeDriver()
    monkeypatch.setattr(greenctx, "driver_module", lambda: fake)
    with pytest.raises(KeyboardInterrupt), greenctx.LevelPartitions(_info(), 80, 52):
        raise KeyboardInterrupt
    assert not fake.live_ctx and not fake.live_streams


def test_level_that_does_not_fit_is_input_error(monkeypatch) -> None:
    monkeypatch.setattr(greenctx, "driver_module", lambda: FakeDriver())
    with pytest.raises(InputError):
        greenctx.LevelPartitions(_info(), 120, 20)


# ---- timing and co-run logic against fake CUDA events --------------------------------------------


def test_time_launches_rates_and_runs() -> None:
    plan = bplan.make_plan(bplan.PlanDevice.from_gpu(find_gpu("h100")))
    stream = FakeStream("s")
    w, _ = fake_workloads(plan, stream, gemm_ms=1.5, read_ms=0.25)
    stats = w.time_launches(w.gemm, stream, plan.gemm.flops)
    assert stats.runs == plan.repeats
    assert stats.median == pytest.approx(plan.gemm.flops / 1.5e-3)
    assert stats.median_s == pytest.approx(1.5e-3)
    # two gates (probe, timed runs) + warm-up + probe + repeats x ceil(2 ms / 0.25 ms) launches of the read
    # kernel
    before = stream.t
    w.time_launches(w.read, stream, plan.read_bytes_per_launch)
    assert stream.t - before == pytest.approx(2 * bplan.GATE_MS + 0.25 * (plan.warmup + 1 + plan.repeats * 8))


def test_level_windows_measure_each_stream_inside_the_shared_window() -> None:
    plan = bplan.make_plan(bplan.PlanDevice.from_gpu(find_gpu("h100")), quick=True)
    default, p, d = FakeStream("default"), FakeStream("p"), FakeStream("d")
    w, _ = fake_workloads(plan, default, gemm_ms=1.2, read_ms=0.7, slowdown=(0.9, 0.75))
    timing = w.level_windows(p, d, 1.2e-3, 0.7e-3)
    assert timing.solo_gemm.median == pytest.approx(plan.gemm.flops / 1.2e-3, rel=1e-9)
    assert timing.solo_read.median == pytest.approx(plan.read_bytes_per_launch / 0.7e-3, rel=1e-9)
    assert timing.corun_gemm.median == pytest.approx(0.9 * plan.gemm.flops / 1.2e-3, rel=1e-9)
    assert timing.corun_read.median == pytest.approx(0.75 * plan.read_bytes_per_launch / 0.7e-3, rel=1e-9)
    assert timing.solo_gemm.runs == timing.corun_read.runs == plan.repeats
    assert timing.window_ms >= plan.window_ms * 0.9
    assert timing.overlap_share == pytest.approx(1.0)
    assert p.t > 0 and d.t > 0


# ---- a whole run, interrupted, against fakes -----------------------------------------------------


def _stats(value):
    return RateStats.from_rates([value * 0.98, value, value * 1.01])


def _install_fake_run(monkeypatch, plan_total=132, interrupt_after=None, refuse_level=None, level_errors=None,
                      serial_level=None):
    """Replace the device-facing pieces of the runner; the orchestration and outputs run for real.

    ``refuse_level``: a level whose split the driver refuses; ``level_errors``: ``{(p, d): exception}``
    raised by those levels instead of measuring them; ``serial_level``: a level whose kernels took
    turns (factors 0.5 + 0.45, no overlap)."""
    calls = {"n": 0, "closed": 0}

    class FakeWorkloads:
        def __init__(self, torch, plan, info, image):
            self.plan, self.dev, self.gate_retries = plan, None, 0

        def warm_up(self, seconds):
            calls["warm_up_s"] = seconds
            return seconds

        def time_launches(self, launch, stream, work):
            return _stats(2.5e12 if work < 1e11 else 700e12)  # bytes (GB) vs FLOPs (~1e12)

        def copy(self, s):
            pass

        def gemm(self, s):
            pass

        def close(self):
            calls["closed"] += 1

    def sweep_point(w, sms):
        calls["n"] += 1
        if interrupt_after is not None and calls["n"] > interrupt_after:
            raise KeyboardInterrupt
        frac = min(1.0, sms / 64)
        return SweepPoint(sms, sms, "whole" if sms == plan_total else "green", _stats(3e12 * frac),
                          _stats(660e12 * sms / 132))

    def level(w, p, d):
        if (p, d) == refuse_level:
            raise greenctx.SplitRefused(f"the driver refused the split {p} prefill SMs for level {p}/{d} "
                                        "[INVALID_RESOURCE]")
        if level_errors and (p, d) in level_errors:
            raise level_errors[(p, d)]
        if (p, d) == serial_level:
            return LevelResult(p, d, p + d, p, d, tuple(range(p)), tuple(range(p, p + d)),
                               _stats(600e12 * p / 132), _stats(3e12 * min(1, d / 64)),
                               _stats(0.5 * 600e12 * p / 132), _stats(0.45 * 3e12 * min(1, d / 64)), 200.0,
                               overlap_share=0.02, overlap_share_min=0.0)
        return LevelResult(p, d, p + d, p, d, tuple(range(p)), tuple(range(p, p + d)),
                           _stats(600e12 * p / 132), _stats(3e12 * min(1, d / 64)),
                           _stats(0.95 * 600e12 * p / 132), _stats(0.8 * 3e12 * min(1, d / 64)), 200.0)

    info = _info()
    torch = SimpleNamespace(__version__="2.13.0", version=SimpleNamespace(cuda="12.6"),
                            cuda=SimpleNamespace(default_stream=lambda dev: None))
    pdev = runner.plan_device(info, "NVIDIA H100 80GB HBM3", None)
    monkeypatch.setattr(runner, "Workloads", FakeWorkloads)
    monkeypatch.setattr(runner, "_sweep_point", sweep_point)
    monkeypatch.setattr(runner, "_level", level)
    monkeypatch.setattr(runner.kernels, "nvrtc_version", lambda: (12, 8))
    monkeypatch.setattr(runner.kernels, "compile_for_device", lambda cc: (b"\x7fELF", "cubin sm_90"))
    monkeypatch.setattr(runner, "prepare", lambda device, gpu: (info, torch, pdev))
    monkeypatch.setattr(runner.Clocks, "open", classmethod(lambda cls, bus: (None, "no clocks in this test")))
    return calls, info, torch, pdev


def test_run_complete_gives_calibration(monkeypatch, tmp_path) -> None:
    calls, info, torch, pdev = _install_fake_run(monkeypatch)
    plan = bplan.make_plan(pdev, quick=True)
    res = runner.run_bench(plan, info, torch, bplan.plan_dict(plan))
    assert res.complete and not res.interrupted and calls["closed"] >= 1
    assert calls["warm_up_s"] == bplan.WARMUP_S == 1.0  # about a second before the ceilings
    assert "no clocks in this test" in res.notes
    assert [p.granted_sms for p in res.sweep] == sorted(plan.sweep_sms)
    assert res.s_sat_sms() == 64 and len(res.levels) == 6
    cal = calibration_from_results(res)
    assert cal is not None and cal.s_sat_sms == 64 and cal.complete
    assert [c[:2] for c in cal.corun] == sorted(((p, d) for p, d in plan.levels), key=lambda t: t[1])
    assert all(c[2] == pytest.approx(0.8) and c[3] == pytest.approx(0.95) for c in cal.corun)
    path = tmp_path / "calibration.yaml"
    path.write_text(dump_calibration(cal))
    assert load_calibration(path) == cal
    json.dumps(results_dict(res))


def test_cli_run_interrupted_keeps_finished_steps(monkeypatch, tmp_path) -> None:
    _install_fake_run(monkeypatch, interrupt_after=5)
    out = tmp_path / "bench-out"
    r = cli.invoke(app, ["bench", "--quick", "--out", str(out)])
    assert_one_line_error(r, 130, "interrupted")
    data = json.loads((out / "results.json").read_text())
    assert data["complete"] is False and data["interrupted"] is True
    assert len(data["sweep"]) == 5 and data["levels"] == []
    assert data["ceilings"]["copy"]["median_bytes_per_s"] == pytest.approx(2.5e12)
    cal = load_calibration(out / "calibration.yaml")
    assert cal.complete is False and len(cal.bandwidth_curve) == 5
    pytest.importorskip("matplotlib")
    assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporary files left


def test_cli_run_complete_json(monkeypatch, tmp_path) -> None:
    _install_fake_run(monkeypatch)
    r = cli.invoke(app, ["bench", "--quick", "--json", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["complete"] is True and data["s_sat_sms"] == 64 and len(data["levels"]) == 6
    assert all(lv["disjoint"] and lv["within_grant"] for lv in data["levels"])
    assert data["levels"][0]["read_interference_percent"] == pytest.approx(20.0)
    assert json.loads((tmp_path / "results.json").read_text())["complete"] is True


def test_cli_run_table(monkeypatch) -> None:
    _install_fake_run(monkeypatch)
    r = cli.invoke(app, ["bench", "--quick", "--levels", "1"])
    assert r.exit_code == 0, r.stderr
    for text in ("S_SAT", "64 SMs", "112/20", "20.0%", "copy ceiling"):
        assert text in r.stdout, text


def test_cli_run_refused_level_goes_on(monkeypatch, tmp_path) -> None:
    _install_fake_run(monkeypatch, refuse_level=(104, 28))
    r = cli.invoke(app, ["bench", "--quick", "--out", str(tmp_path)])
    assert_one_line_error(r, 1, "level 104/28")
    assert "[INVALID_RESOURCE]" in r.stdout  # shown as written, not eaten as rich markup
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["complete"] is False and len(data["levels"]) == 5 and len(data["step_errors"]) == 1
    assert len(load_calibration(tmp_path / "calibration.yaml").corun) == 5


def test_cli_run_input_error_in_one_level_does_not_stop_the_others(monkeypatch, tmp_path) -> None:
    _install_fake_run(monkeypatch, level_errors={(104, 28): InputError("a co-run stream completed no work")})
    r = cli.invoke(app, ["bench", "--quick", "--out", str(tmp_path)])
    assert_one_line_error(r, 1, "level 104/28: a co-run stream completed no work")
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["error"] is None and len(data["levels"]) == 5 and len(data["step_errors"]) == 1


def test_run_failed_launch_stops_the_run_and_is_not_a_refused_split(monkeypatch) -> None:
    launch = DeviceError("launching pdmux_read_bw failed with CUDA_ERROR_LAUNCH_FAILED")
    calls, info, torch, pdev = _install_fake_run(monkeypatch, level_errors={(104, 28): launch})
    plan = bplan.make_plan(pdev, quick=True)
    res = runner.run_bench(plan, info, torch, bplan.plan_dict(plan))
    assert res.error == str(launch) and not res.step_errors and not res.complete
    assert [(lv.prefill_sms, lv.decode_sms) for lv in res.levels] == [(112, 20)]  # stopped there
    assert calls["closed"] >= 1


def test_cli_run_flags_a_serialised_level(monkeypatch, tmp_path) -> None:
    _install_fake_run(monkeypatch, serial_level=(104, 28))
    r = cli.invoke(app, ["bench", "--quick", "--json", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    flags = {(lv["prefill_sms"], lv["decode_sms"]): lv["serialised"] for lv in data["levels"]}
    assert flags[(104, 28)] is True and sum(flags.values()) == 1
    serial = next(lv for lv in data["levels"] if lv["serialised"])
    assert serial["factor_sum"] == pytest.approx(0.95) and serial["overlap_share"] == 0.02
    assert any("level 104/28: flop factor 0.50 + bandwidth factor 0.45 <= 1.1" in n for n in data["notes"])
    table = cli.invoke(app, ["bench", "--quick", "--levels", "2"], env={"COLUMNS": "200"})
    assert "SERIALISED (took turns)" in table.stdout and "0.50 + 0.45 = 0.95" in table.stdout


def test_run_device_mismatch_gpu_option(monkeypatch) -> None:
    _install_fake_run(monkeypatch)
    with pytest.raises(InputError, match="108 SMs"):
        runner.plan_device(_info(), "NVIDIA H100 80GB HBM3", "a100")


def test_unknown_device_uses_its_own_numbers() -> None:
    pdev = runner.plan_device(_info(total=120), "NVIDIA Mystery GPU", None)
    assert pdev.source == "device" and pdev.sm_count == 120 and pdev.hbm_bytes_per_s is None
    plan = bplan.make_plan(pdev, granularity=(8, 8))
    assert plan.granularity_source.startswith("driver") and plan.sweep_sms[-1] == 120
    assert bplan.estimated_seconds(plan) is None


# ---- results rendering (synthetic) ---------------------------------------------------------------


def _synthetic_results(levels=True) -> BenchResults:
    run = RunInfo("NVIDIA H200", 132, (9, 0), 0, "h200-sxm", "12.8", "12.6", "2.6.0", "12.9.0", "12.8",
                  "cubin sm_90", "2025-06-01", "2025-06-01T00:00:00+00:00")
    res = BenchResults(run=run,
                       plan={"repeats": 10, "gemm_shape_mnk": [8192, 4096, 12288], "buffer_bytes": 1 << 30})
    res.copy, res.matmul = _stats(4.3e12), _stats(780e12)
    for s in [*range(8, 132, 8), 132]:
        res.sweep.append(SweepPoint(s, s, "whole" if s == 132 else "green",
                                    _stats(4.2e12 * min(1, s / 70) * (1 - 0.01 * (s % 16 == 0))),
                                    _stats(780e12 * s / 132)))
    if levels:
        for p, d in split_levels.stream_groups(132, 9)[1:-1]:
            res.levels.append(LevelResult(p, d, 132, p, d, tuple(range(p)), tuple(range(p, 132)), _stats(1.0),
                                          _stats(2.0), _stats(0.9), _stats(1.5), 200.0))
    res.complete = True
    return res


def test_results_from_noisy_sweep_give_a_loadable_calibration(tmp_path) -> None:
    res = _synthetic_results()
    cal = calibration_from_results(res)
    curve = cal.bandwidth_curve
    assert all(b[1] >= a[1] for a, b in itertools.pairwise(curve))  # monotone despite the noise
    path = tmp_path / "c.yaml"
    path.write_text(dump_calibration(cal))
    assert load_calibration(path) == cal
    lv = res.levels[0]
    assert (lv.disjoint and lv.within_grant and lv.flops_factor == pytest.approx(0.9)
            and lv.bandwidth_factor == pytest.approx(0.75))


def test_overlapping_smids_are_reported() -> None:
    res = _synthetic_results()
    bad = LevelResult(112, 20, 132, 112, 20, (1, 2, 3), (3, 4), _stats(1), _stats(1), _stats(1), _stats(1),
                      1.0)
    too_many = LevelResult(112, 20, 132, 112, 2, (1,), (5, 6, 7), _stats(1), _stats(1), _stats(1), _stats(1),
                           1.0)
    assert not bad.disjoint and not too_many.within_grant
    res.levels = [bad, too_many]
    levels = results_dict(res)["levels"]
    assert levels[0]["disjoint"] is False and levels[1]["within_grant"] is False


def test_no_calibration_before_ceilings() -> None:
    res = _synthetic_results()
    res.copy = None
    assert calibration_from_results(res) is None


def test_summary_tables_render() -> None:
    from rich.console import Console

    from pdmux_cli.cli.bench_tables import plan_tables, summary_tables

    console = Console(record=True, width=200)
    for table in summary_tables(_synthetic_results()):
        console.print(table)
    for table in plan_tables(bplan.make_plan(bplan.PlanDevice.from_gpu(find_gpu("h200")),
                                             skinny=bplan.parse_skinny("4096x12288"))):
        console.print(table)
    text = console.export_text()
    assert "S_SAT" in text and "112/20" in text and "10.0%" in text and "skinny" in text


def test_png_written_whole(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    from pdmux_cli.bench.plot import write_png

    for levels in (True, False):
        path = write_png(_synthetic_results(levels), tmp_path / f"curves-{levels}.png")
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["curves-False.png", "curves-True.png"]

