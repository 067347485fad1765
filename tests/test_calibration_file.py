"""calibration.yaml: round trip, every refusal, interpolation, and its effect on the estimate."""

from __future__ import annotations

import json

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from pdmux_cli.costmodel.options import CostModelOptions
from pdmux_cli.costmodel.calibration_file import (
    FORMAT,
    CalibratedThroughput,
    Calibration,
    calibration_to_mapping,
    dump_calibration,
    interpolate,
    interpolate_clamped,
    load_calibration,
)
from pdmux_cli.cli import app
from pdmux_cli.util.errors import InputError
from pdmux_cli.planning.estimate import Scenario, estimate
from pdmux_cli.catalog.hardware import find_gpu
from pdmux_cli.catalog.model import load_model

H100_BW = 3.35e12
H100_FLOPS = 989e12


def make_calibration(**changes) -> Calibration:
    """A calibration of an H100 SXM (132 SMs) with round numbers."""
    base = {
        "gpu_name": "NVIDIA H100 80GB HBM3", "sm_count": 132, "compute_capability": (9, 0),
        "driver_cuda_version": "12.8", "cuda_version": "12.6", "date": "2025-06-01",
        "bandwidth_curve": ((8, 0.6e12), (16, 1.2e12), (64, 2.9e12), (132, 3.0e12)),
        "flops_curve": ((8, 40e12), (64, 330e12), (132, 660e12)),
        "copy_bytes_per_s": 3.0e12, "matmul_flops_per_s": 670e12,
        "corun": ((112, 20, 0.9, 0.95), (72, 60, 0.8, 0.85)), "s_sat_sms": 64, "complete": True,
        "source": "test",
    }
    base.update(changes)
    return Calibration(**base)


def write(tmp_path, data, name="calibration.yaml"):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data), encoding="utf-8")
    return path


def mapping(**changes):
    data = calibration_to_mapping(make_calibration())
    data.update(changes)
    return data


# ---- round trip ----------------------------------------------------------------------------------


def test_round_trip_exact(tmp_path) -> None:
    c = make_calibration(bandwidth_curve=((8, 612345678901.25), (132, 3.3e12)),
                         flops_curve=((8, 1e-3 + 4e13), (132, 7.9e14)), s_sat_sms=132)
    text = dump_calibration(c)
    path = write(tmp_path, text)
    back = load_calibration(path)
    assert back == c
    assert dump_calibration(back) == text
    assert text.startswith("# pdmux calibration")
    assert f"format: {FORMAT}" in text


def test_round_trip_incomplete_and_no_corun(tmp_path) -> None:
    c = make_calibration(corun=(), complete=False, source="")
    back = load_calibration(write(tmp_path, dump_calibration(c)))
    assert back == c
    assert "corun: []" in dump_calibration(c)


def test_hand_written_numbers_accepted(tmp_path) -> None:
    """A hand-edited file: 4.3e12 (read by PyYAML as text), an unquoted date, an int rate."""
    text = dump_calibration(make_calibration()).replace("copy_bytes_per_s: 3000000000000.0",
                                                        "copy_bytes_per_s: 3e12")
    text = text.replace("date: '2025-06-01'", "date: 2025-06-01").replace(
        "- [132, 3000000000000.0]", "- [132, 3000000000000]")
    c = load_calibration(write(tmp_path, text))
    assert c.copy_bytes_per_s == 3e12 and c.date == "2025-06-01" and c.bandwidth_curve[-1] == (132, 3e12)


# ---- refusals: one line each ---------------------------------------------------------------------


def _refused(tmp_path, data, *fragments: str) -> None:
    path = data if not isinstance(data, (dict, str)) else write(tmp_path, data)
    with pytest.raises(InputError) as err:
        load_calibration(path)
    message = str(err.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, message


def test_missing_file(tmp_path) -> None:
    _refused(tmp_path, tmp_path / "nope.yaml", "nope.yaml: no such file", "pdmux bench")


def test_directory(tmp_path) -> None:
    _refused(tmp_path, tmp_path, "is a directory")


def test_special_files_refused_without_reading(tmp_path) -> None:
    import os
    from pathlib import Path

    _refused(tmp_path, Path("/dev/zero"), "/dev/zero", "not a regular file")
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)  # opening it would block until a writer came
    _refused(tmp_path, fifo, "pipe.yaml", "not a regular file")


def test_file_over_the_size_limit(tmp_path, monkeypatch) -> None:
    from pdmux_cli.costmodel import calibration_file

    path = write(tmp_path, dump_calibration(make_calibration()))
    size = path.stat().st_size
    monkeypatch.setattr(calibration_file, "MAX_FILE_BYTES", size - 1)
    _refused(tmp_path, path, "calibration.yaml", "larger than")
    monkeypatch.setattr(calibration_file, "MAX_FILE_BYTES", size)
    assert load_calibration(path) == make_calibration()


def test_bad_yaml(tmp_path) -> None:
    _refused(tmp_path, "gpu_name: [unclosed\n", "not valid YAML")


def test_not_a_mapping(tmp_path) -> None:
    _refused(tmp_path, "- 1\n- 2\n", "mapping")


@pytest.mark.parametrize("field",
                         ["gpu_name", "sm_count", "bandwidth_curve", "flops_curve", "corun", "s_sat_sms",
                                   "copy_bytes_per_s", "matmul_flops_per_s", "date", "format"])
def test_missing_field(tmp_path, field) -> None:
    data = mapping()
    del data[field]
    _refused(tmp_path, data, f"missing field '{field}'")


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"sm_count": "many"}, "sm_count"),
        ({"sm_count": True}, "sm_count"),
        ({"gpu_name": ""}, "gpu_name"),
        ({"compute_capability": "nine"}, "compute_capability"),
        ({"copy_bytes_per_s": -1.0}, "copy_bytes_per_s"),
        ({"matmul_flops_per_s": "fast"}, "matmul_flops_per_s"),
        ({"s_sat_sms": 500}, "s_sat_sms"),
        ({"complete": "yes please"}, "complete"),
        ({"format": "something/2"}, "format"),
        ({"bandwidth_curve": "steep"}, "bandwidth_curve"),
        ({"bandwidth_curve": [[8, 1e12, 3]]}, "bandwidth_curve[0]"),
        ({"bandwidth_curve": [[8.5, 1e12]]}, "bandwidth_curve[0][0]"),
        ({"bandwidth_curve": [[8, "lots"]]}, "bandwidth_curve[0][1]"),
        ({"bandwidth_curve": [[8, 1e12], [140, 2e12]]}, "sm_count 132"),
        ({"flops_curve": [[8, 0.0]]}, "flops_curve[0][1]"),
        ({"corun": [[112, 20, 0.9]]}, "corun[0]"),
        ({"corun": [[112, 30, 0.9, 0.9]]}, "<= sm_count 132"),
        ({"corun": [[112, 20, 3.0, 0.9]]}, "bandwidth_factor"),
        ({"corun": [[112, 20, 0.9, 0.0]]}, "flops_factor"),
        ({"corun": [[112, 20, 0.9, 0.9], [100, 20, 0.9, 0.9]]}, "same decode SM count"),
        ({"extra": 1}, "unknown field 'extra'"),
    ],
)
def test_wrong_types(tmp_path, changes, fragment) -> None:
    _refused(tmp_path, mapping(**changes), fragment)


@pytest.mark.parametrize("field", ["bandwidth_curve", "flops_curve"])
def test_empty_curve(tmp_path, field) -> None:
    _refused(tmp_path, mapping(**{field: []}), field, "non-empty")


@pytest.mark.parametrize("field", ["bandwidth_curve", "flops_curve"])
def test_non_monotone_curves(tmp_path, field) -> None:
    _refused(tmp_path, mapping(**{field: [[16, 1e12], [8, 2e12]]}), field, "not monotone", "SMs")
    _refused(tmp_path, mapping(**{field: [[8, 2e12], [16, 1e12]]}), field, "not monotone", "falls")


def _bomb(levels: int = 9) -> str:
    """A flow list of nested anchors and aliases: a few hundred bytes that stand for 9**levels
    strings (cheap to build as shared references, endless to print)."""
    items = ["&a0 [" + ", ".join(["lol"] * 9) + "]"]
    items += [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "[" + ", ".join(items) + "]"


@pytest.mark.parametrize("field", ["source", "gpu_name", "date", "bandwidth_curve"])
def test_alias_bomb_is_refused_with_a_short_message(tmp_path, field) -> None:
    """A 'billion laughs' value: refused at once, the value quoted briefly."""
    lines = [ln for ln in dump_calibration(make_calibration()).splitlines(keepends=True)
             if not ln.startswith(f"{field}:")]
    if field == "bandwidth_curve":  # its pairs follow on '- [..]' lines up to the next field
        text = "".join(lines).replace("- [8, 600000000000.0]\n- [16, 1200000000000.0]\n- [64, "
                                      "2900000000000.0]\n- [132, 3000000000000.0]\n", "")
    else:
        text = "".join(lines)
    path = write(tmp_path, text + f"{field}: {_bomb()}\n")
    assert path.stat().st_size < 1500
    with pytest.raises(InputError) as err:
        load_calibration(path)
    assert len(str(err.value)) < 400 and "\n" not in str(err.value), str(err.value)[:500]
    assert field in str(err.value)


def test_field_written_twice(tmp_path) -> None:
    text = dump_calibration(make_calibration()) + "sm_count: 144\n"
    _refused(tmp_path, text, "field 'sm_count' is written twice", "keep one")


@pytest.mark.parametrize("date", ["2025-13-45", "2025-02-30", "2025-01-01 25:00:00"])
def test_impossible_unquoted_dates(tmp_path, date) -> None:
    """PyYAML raises ValueError (not YAMLError) for these: still one line, exit 2."""
    text = dump_calibration(make_calibration()).replace("date: '2025-06-01'", f"date: {date}")
    _refused(tmp_path, text, "a value YAML cannot read")


def test_number_with_thousands_of_digits(tmp_path) -> None:
    text = dump_calibration(make_calibration()).replace("sm_count: 132", "sm_count: " + "9" * 5000)
    _refused(tmp_path, text, "a value YAML cannot read")


def test_nesting_too_deep(tmp_path) -> None:
    """libyaml's composer would overflow the C stack here (a segfault); the Python parser stops."""
    _refused(tmp_path, "[" * 50_000, "nested too deeply")


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"gpu_name": "H100 \x1b[31mred"}, "printable"),
        ({"source": "ok\x07bell"}, "printable"),
        ({"date": "June 2025"}, "ISO date"),
        ({"bandwidth_curve": [[8, 1.0], [132, 2.0]]}, "bandwidth_curve[0][1]"),
        ({"bandwidth_curve": [[8, 1e12], [132, 1.7e308]]}, "a unit slip"),
        ({"flops_curve": [[8, 40e12], [132, 1.7e308]]}, "flops_curve[1][1]"),
        ({"copy_bytes_per_s": 1e-300}, "copy_bytes_per_s"),
        ({"matmul_flops_per_s": 5.0}, "matmul_flops_per_s"),
        ({"corun": [[112, 20, 1e-300, 0.9]]}, "from 0.05 to 2"),
        ({"bandwidth_curve": [[8, 0.6e12], [16, 1.2e12]], "s_sat_sms": 16}, "ends at 16 SMs"),
        ({"s_sat_sms": 65}, "one of bandwidth_curve's SM counts"),
    ],
)
def test_implausible_values(tmp_path, changes, fragment) -> None:
    _refused(tmp_path, mapping(**changes), fragment)


def test_interrupted_run_may_stop_short(tmp_path) -> None:
    """An interrupted bench writes 'complete: false' and curves that end before the whole GPU."""
    data = mapping(bandwidth_curve=[[8, 0.6e12], [16, 1.2e12]], flops_curve=[[8, 40e12]], s_sat_sms=16,
                   complete=False)
    c = load_calibration(write(tmp_path, data))
    assert c.bandwidth_curve[-1] == (16, 1.2e12) and not c.complete


def test_calibration_beyond_the_datasheet_is_refused() -> None:
    """A read rate 5x an H100's HBM bandwidth is not a measurement of an H100."""
    h100 = find_gpu("h100")
    fast = make_calibration(bandwidth_curve=((8, 0.6e12), (64, 2.9e12), (132, 5 * H100_BW)))
    with pytest.raises(InputError, match="datasheet"):
        fast.throughput(h100)
    greedy = make_calibration(matmul_flops_per_s=2 * H100_FLOPS)
    with pytest.raises(InputError, match="bf16 GEMM rate"):
        greedy.throughput(h100)
    make_calibration().throughput(h100)  # the plausible one passes


def test_calibration_of_another_capability_is_refused() -> None:
    with pytest.raises(InputError, match="cc 8.0"):
        make_calibration(compute_capability=(8, 0)).throughput(find_gpu("h100"))


# ---- interpolation -------------------------------------------------------------------------------


def test_interpolate() -> None:
    curve = [(8, 1.0), (16, 3.0), (32, 5.0)]
    assert interpolate(curve, 0) == 0
    assert interpolate(curve, 4) == pytest.approx(0.5)  # proportional below the first point
    assert interpolate(curve, 8) == 1.0
    assert interpolate(curve, 12) == pytest.approx(2.0)
    assert interpolate(curve, 24) == pytest.approx(4.0)
    assert interpolate(curve, 100) == 5.0  # clamped
    with pytest.raises(InputError):
        interpolate([], 3)
    with pytest.raises(InputError):
        interpolate(curve, -1)


def test_interpolate_clamped() -> None:
    curve = [(20, 0.9), (60, 0.7)]
    assert interpolate_clamped([], 10) == 1.0
    assert interpolate_clamped(curve, 10) == 0.9
    assert interpolate_clamped(curve, 40) == pytest.approx(0.8)
    assert interpolate_clamped(curve, 100) == 0.7


def test_throughput_methods() -> None:
    thr = make_calibration().throughput(find_gpu("h100"), 0.85, 0.5)
    assert thr.source == "calibration NVIDIA H100 80GB HBM3, 2025-06-01"
    assert thr.bandwidth_bytes_per_s(132) == 3.0e12
    assert thr.bandwidth_bytes_per_s(4) == pytest.approx(0.3e12)
    assert thr.bandwidth_bytes_per_s(40) == pytest.approx(1.2e12 + (2.9e12 - 1.2e12) * 24 / 48)
    assert thr.flops_per_s(132) == 660e12  # efficiencies are not applied on top of measured rates
    assert thr.corun_bandwidth_factor(112, 20) == pytest.approx(0.9)
    assert thr.corun_flops_factor(72, 60) == pytest.approx(0.85)
    assert thr.corun_bandwidth_factor(92, 40) == pytest.approx(0.85)  # by decode SMs, between levels
    assert thr.corun_bandwidth_factor(120, 12) == pytest.approx(0.9)  # clamped


def test_corun_factor_defaults_and_clamps() -> None:
    gpu = find_gpu("h100")
    assert make_calibration(corun=()).throughput(gpu).corun_bandwidth_factor(80, 52) == 1.0
    noisy = make_calibration(corun=((80, 52, 1.02, 1.01),)).throughput(gpu)
    assert noisy.corun_bandwidth_factor(80, 52) == 1.0 and noisy.corun_flops_factor(80, 52) == 1.0


def test_incomplete_source() -> None:
    assert make_calibration(complete=False).throughput(find_gpu("h100")).source.endswith("(incomplete run)")


def test_incomplete_run_reaches_the_whole_gpu_ceilings() -> None:
    """Curves of an interrupted bench (up to 16 SMs) end at the run's whole-GPU ceilings, not at a flat
    16-SM rate; the note says from which SM count the values are interpolated."""
    short = make_calibration(bandwidth_curve=((8, 0.6e12), (16, 1.2e12)),
                             flops_curve=((8, 40e12), (16, 80e12)), s_sat_sms=16, complete=False)
    thr = short.throughput(find_gpu("h100"))
    assert thr.bandwidth_bytes_per_s(16) == 1.2e12  # measured points kept
    assert thr.bandwidth_bytes_per_s(132) == 3.0e12  # copy_bytes_per_s
    assert thr.bandwidth_bytes_per_s(74) == pytest.approx(1.2e12 + (3.0e12 - 1.2e12) * 58 / 116)
    assert thr.flops_per_s(132) == 670e12  # matmul_flops_per_s
    assert len(thr.notes) == 1
    assert "read bandwidth from 17 SMs" in thr.notes[0] and "GEMM FLOP/s from 17 SMs" in thr.notes[0]
    assert "up to 132 SMs are interpolated, not measured" in thr.notes[0]
    # a ceiling below the last measured rate never makes the curve fall
    low = make_calibration(bandwidth_curve=((8, 0.6e12), (16, 1.2e12)), copy_bytes_per_s=1.0e12, s_sat_sms=16,
                           complete=False).throughput(find_gpu("h100"))
    assert low.bandwidth_bytes_per_s(132) == 1.2e12
    assert make_calibration().throughput(find_gpu("h100")).notes == ()  # a complete run: nothing added


def test_estimate_with_an_incomplete_run_uses_the_ceilings_and_says_so(tmp_path) -> None:
    short = mapping(bandwidth_curve=[[8, 0.6e12], [16, 1.2e12]], flops_curve=[[8, 40e12], [16, 80e12]],
                    s_sat_sms=16, complete=False)
    path = write(tmp_path, short)
    d = json.loads(CliRunner().invoke(app,
                                      ["estimate", "--calibration", str(path), "--per-request-overhead-ms",
                                       "0",
                                            "--json"]).stdout)
    assert any("interpolated, not measured" in n for n in d["notes"])
    flat = estimate(find_gpu("h100"), load_model("qwen3-8b"),
                    Scenario(cost=CostModelOptions(per_request_overhead_ms=0)),
                    calibration=make_calibration(bandwidth_curve=((8, 0.6e12), (16, 1.2e12), (132, 1.2e12)),
                                                 flops_curve=((8, 40e12), (16, 80e12), (132, 80e12)),
                                                 s_sat_sms=16))
    pd = {r.policy: r for r in flat.rows}["pdmux"]
    # held flat, 16 SMs read as fast as the whole GPU; with the ceilings, 52 SMs read at about 45% of it
    assert next(r for r in d["rows"] if r["policy"] == "pdmux")["itl_ms"] > 1.5 * pd.itl_ms


def test_gpu_mismatch_refused() -> None:
    with pytest.raises(InputError, match=r"132 SMs.*A100.*108 SMs"):
        make_calibration().throughput(find_gpu("a100"))


@given(st.lists(st.tuples(st.integers(1, 200), st.floats(1e9, 1e13)), min_size=1, max_size=12,
                unique_by=lambda t: t[0]),
       st.integers(0, 250))
def test_interpolation_stays_inside_a_monotone_curve(points, sms) -> None:
    xs = sorted(p[0] for p in points)
    ys = sorted(p[1] for p in points)
    curve = tuple(zip(xs, ys))
    thr = CalibratedThroughput(250, curve, curve, (), "test")
    value = thr.bandwidth_bytes_per_s(sms)
    assert 0 <= value <= ys[-1] * (1 + 1e-12)
    assert thr.bandwidth_bytes_per_s(sms + 1) >= value * (1 - 1e-12)


# ---- effect on the estimate ----------------------------------------------------------------------


def _pdmux_and_decode_only(result):
    rows = {r.policy: r for r in result.rows}
    return rows["pdmux"], rows["decode-only"]


def test_bandwidth_full_at_16_sms_gives_full_gpu_itl() -> None:
    """Decode reaching the whole GPU's bandwidth at 16 SMs: the PD-mux ITL equals the decode-only ITL."""
    gpu, model = find_gpu("h100"), load_model("qwen3-8b")
    cal = make_calibration(
        bandwidth_curve=((8, 0.5 * H100_BW), (16, H100_BW), (132, H100_BW)),
        flops_curve=((8, H100_FLOPS * 8 / 132), (132, H100_FLOPS)), corun=(),
    )
    result = estimate(gpu, model, Scenario(cost=CostModelOptions(cost_model="chapter")), calibration=cal)
    pdmux, decode_only = _pdmux_and_decode_only(result)
    assert pdmux.decode_sms is not None and pdmux.decode_sms >= 16
    assert pdmux.itl_ms == pytest.approx(decode_only.itl_ms, rel=1e-12)
    assert result.throughput_source.startswith("calibration ")
    assert "calibrated" in pdmux.label
    # the roofline model takes the curve's shape: decode alone on 52 SMs as fast as on the whole GPU;
    # its ITL adds the CPU work of a pdmux round (the overlap scheduler hides it for decode-only)
    result = estimate(gpu, model, Scenario(cost=CostModelOptions(per_request_overhead_ms=0)), calibration=cal)
    pdmux, decode_only = _pdmux_and_decode_only(result)
    assert pdmux.decode_alone_ms == pytest.approx(decode_only.itl_ms, rel=1e-12)
    assert pdmux.itl_ms == pytest.approx(decode_only.itl_ms + result.cpu_step_ms, rel=1e-12)
    assert result.throughput_source.startswith("roofline (h100-sxm efficiencies, calibration ")


def test_late_saturation_makes_pdmux_itl_worse() -> None:
    gpu, model = find_gpu("h100"), load_model("qwen3-8b")
    cal = make_calibration(bandwidth_curve=((8, H100_BW * 8 / 132), (132, H100_BW)),
                           flops_curve=((8, H100_FLOPS * 8 / 132), (132, H100_FLOPS)), corun=())
    chapter = Scenario(cost=CostModelOptions(cost_model="chapter"))
    pdmux, decode_only = _pdmux_and_decode_only(estimate(gpu, model, chapter, calibration=cal))
    assert pdmux.itl_ms == pytest.approx(decode_only.itl_ms * 132 / pdmux.decode_sms, rel=1e-9)
    # roofline: the memory-bound parts of the step scale by 132/52, the fixed kernel latencies do not
    pdmux, decode_only = _pdmux_and_decode_only(estimate(gpu, model,
                                                         Scenario(cost=CostModelOptions(per_request_overhead_ms=0)),
                                                         calibration=cal))
    ratio = pdmux.decode_alone_ms / decode_only.itl_ms
    assert 0.85 * 132 / 52 < ratio < 132 / 52


def test_corun_factor_slows_decode() -> None:
    gpu, model = find_gpu("h100"), load_model("qwen3-8b")
    base = {"bandwidth_curve": ((16, H100_BW), (132, H100_BW)),
            "flops_curve": ((8, H100_FLOPS * 8 / 132), (132, H100_FLOPS))}
    for scenario in (Scenario(cost=CostModelOptions(cost_model="chapter")), Scenario()):
        clean = estimate(gpu, model, scenario, calibration=make_calibration(corun=(), **base))
        slowed = estimate(gpu, model, scenario,
                          calibration=make_calibration(corun=((80, 52, 0.5, 1.0),), **base))
        clean_row, slowed_row = _pdmux_and_decode_only(clean)[0], _pdmux_and_decode_only(slowed)[0]
        if scenario.cost_model == "chapter":
            assert slowed_row.itl_ms == pytest.approx(2 * clean_row.itl_ms)
        else:  # bandwidth halved: the memory-bound parts double, kernel latencies stay
            assert slowed_row.decode_alone_ms == pytest.approx(clean_row.decode_alone_ms)
            assert 1.8 < slowed_row.decode_corun_ms / clean_row.decode_corun_ms < 2


def test_estimate_cli_with_calibration(tmp_path) -> None:
    path = write(tmp_path, dump_calibration(make_calibration()))
    runner = CliRunner()
    r = runner.invoke(app, ["estimate", "--gpu", "h100", "--calibration", str(path), "--json"])
    assert r.exit_code == 0, r.stderr
    assert "calibration NVIDIA H100" in json.dumps(json.loads(r.stdout))
    r = runner.invoke(app, ["estimate", "--gpu", "a100", "--calibration", str(path)])
    assert r.exit_code == 2
    assert r.stderr.count("\n") == 1 and "measured on H100" in r.stderr and "not A100" in r.stderr
    r = runner.invoke(app, ["estimate", "--gpu", "h100", "--calibration", str(tmp_path / "missing.yaml")])
    assert r.exit_code == 2 and "missing.yaml: no such file" in r.stderr


@pytest.mark.parametrize("field", ["copy_bytes_per_s", "matmul_flops_per_s"])
def test_numbers_past_floats_range(tmp_path, field) -> None:
    """A 400-digit integer overflows float(): refused like any other non-finite number."""
    _refused(tmp_path, mapping(**{field: 10**400}), field, "finite number")
    _refused(tmp_path, mapping(sm_count=2000), "sm_count", "at most 1024")
