"""estimate --calibration refuses a calibration measured on another GPU with the same SM count."""

from __future__ import annotations

from typer.testing import CliRunner

from pdmux_cli.costmodel.calibration_file import Calibration, dump_calibration
from pdmux_cli.cli import app


def test_calibration_from_another_gpu_is_refused(tmp_path) -> None:
    cal = Calibration(
        gpu_name="NVIDIA H100 80GB HBM3", sm_count=132, compute_capability=(9, 0), driver_cuda_version="12.8",
        cuda_version="12.6", date="2025-06-01", bandwidth_curve=((16, 1.2e12), (64, 2.9e12), (132, 3.0e12)),
        flops_curve=((8, 40e12), (132, 660e12)), copy_bytes_per_s=3.0e12, matmul_flops_per_s=670e12,
        corun=(), s_sat_sms=64, complete=True, source="test",
    )
    path = tmp_path / "calibration.yaml"
    path.write_text(dump_calibration(cal))
    runner = CliRunner()
    ok = runner.invoke(app,
                       ["estimate", "--gpu", "h100", "--calibration", str(path), "--cost-model", "chapter",
                             "--mfu", "0.7"])
    assert ok.exit_code == 0 and "not used with --calibration" in ok.stdout
    # the roofline model has no --mfu at all; --s-sat is what a calibration measures
    for flag, value in (("--mfu", "0.7"), ("--s-sat", "60")):
        r = runner.invoke(app, ["estimate", "--gpu", "h100", "--calibration", str(path), flag, value])
        assert r.exit_code == 2 and r.stderr.count("\n") == 1
    r = runner.invoke(app, ["estimate", "--gpu", "h200", "--calibration", str(path)])
    assert r.exit_code == 2
    assert r.stderr.count("\n") == 1 and "measured on H100" in r.stderr
