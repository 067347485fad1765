"""The cost model's errors name parameters, not flags (issue 21, item 2): roofline.py's S_SAT given with a
calibration (``param="s_sat"``) and collectives.py's TP outside the measured all-reduces (``param="tp"``).

The CLI prints each with its flags (exit 2, one line), the API with its keywords
(:func:`pdmux_cli.messages.api_error_text`); tests/test_findings.py's scan keeps flags out of both files.
"""

from __future__ import annotations

import pytest
from cli_assertions import assert_one_line_error
from typer.testing import CliRunner

import pdmux
from pdmux_cli import messages
from pdmux_cli.catalog.hardware import find_gpu
from pdmux_cli.catalog.model import load_model
from pdmux_cli.cli import app
from pdmux_cli.costmodel import build_step_model, collectives
from pdmux_cli.costmodel.calibration_file import Calibration, dump_calibration
from pdmux_cli.util.errors import InputError

_S_SAT_CLI = "--s-sat is a guess that a --calibration file replaces: give one or the other"
_S_SAT_API = "s_sat is a guess that a calibration file replaces: give one or the other"


def _calibration() -> Calibration:
    """A pdmux bench calibration of an H100 with SM-partition curves (what makes S_SAT moot)."""
    return Calibration(
        gpu_name="NVIDIA H100 80GB HBM3", sm_count=132, compute_capability=(9, 0), driver_cuda_version="12.8",
        cuda_version="12.6", date="2025-06-01", bandwidth_curve=((16, 1.2e12), (64, 2.9e12), (132, 3.0e12)),
        flops_curve=((8, 40e12), (132, 660e12)), copy_bytes_per_s=3.0e12, matmul_flops_per_s=670e12,
        corun=(), s_sat_sms=64, complete=True, source="test",
    )


def test_roofline_refuses_s_sat_with_a_calibration_naming_s_sat() -> None:
    cal = _calibration()
    assert cal.has_partitions
    with pytest.raises(InputError) as caught:  # the roofline model itself (RooflineModel.__init__)
        build_step_model(find_gpu("h100"), load_model("qwen3-8b"), s_sat=44.0, calibration=cal)
    exc = caught.value
    assert exc.param == "s_sat" and exc.exit_code == 2
    assert str(exc) == messages.error_text(exc) == _S_SAT_CLI
    assert messages.api_error_text(exc) == _S_SAT_API


def test_s_sat_with_a_calibration_is_one_cli_line_and_the_api_names_the_keywords(tmp_path) -> None:
    """The command refuses it before the cost model is built (workflows/estimate.py), in the same words."""
    path = tmp_path / "calibration.yaml"
    path.write_text(dump_calibration(_calibration()))
    r = CliRunner().invoke(app, ["estimate", "--s-sat", "44", "--calibration", str(path)])
    assert_one_line_error(r, 2)
    assert r.stderr.strip() == f"pdmux: error: {_S_SAT_CLI}"
    with pytest.raises(InputError) as caught:
        pdmux.estimate(s_sat=(44,), calibration=path)
    assert messages.api_error_text(caught.value) == _S_SAT_API


@pytest.mark.parametrize("tp", [1, 9, 16])
def test_tp_collectives_outside_the_measured_ranks_names_tp(tp) -> None:
    with pytest.raises(InputError) as caught:
        collectives.tp_collectives(find_gpu("h100"), tp)
    exc = caught.value
    assert exc.param == "tp" and exc.values == {"max_tp": 8, "tp": tp}
    assert str(exc) == (f"--tp must be from 1 to 8 (GPUs of one server, where the all-reduce was measured), "
                        f"got {tp}")
    assert messages.api_error_text(exc) == (f"tp must be from 1 to 8 (GPUs of one server, where the "
                                            f"all-reduce was measured), got {tp}")
    # a TP refused for disaggregation's instances names --disagg-tp (tensor_parallel.for_disagg_tp's way)
    assert str(exc.retargeted({"tp": "disagg_tp"})).startswith("--disagg-tp must be from 1 to 8")


def test_tp_collectives_error_is_one_cli_line(monkeypatch) -> None:
    """The CLI's line for it: ``check_tp_value`` refuses a TP past 8 first, so the collectives' own bound
    is lowered to reach its guard through ``pdmux estimate --tp 2``."""
    monkeypatch.setattr(collectives, "MAX_TP", 1)
    r = CliRunner().invoke(app, ["estimate", "--model", "llama-3.1-70b", "--tp", "2"])
    assert_one_line_error(r, 2)
    assert r.stderr.strip() == ("pdmux: error: --tp must be from 1 to 1 (GPUs of one server, where the "
                                "all-reduce was measured), got 2")
