"""What installs the bench and what ``make gpu-check`` does before and after it: the extras' version
bounds (pyproject.toml), the extra chosen from the driver's CUDA version, and the verdict on the GPU
tests (every test skipped on a GPU machine is a failure). No GPU needed."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    tomllib = None


def _gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _extras() -> dict[str, list[str]]:
    if tomllib is None:
        pytest.skip("tomllib needs Python 3.11")
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def _spec(extra: list[str], name: str) -> str:
    found = [r for r in extra if re.match(rf"{re.escape(name)}\b(?![-\w])", r)]
    assert len(found) == 1, (name, extra)
    return found[0][len(name):]


def test_every_extra_requires_cuda_python_12_8() -> None:
    extras = _extras()
    with_cuda = {k: v for k, v in extras.items() if any(r.startswith("cuda-python") for r in v)}
    assert set(with_cuda) == {"bench", "bench-cu12", "test-kernels"}
    for name, extra in with_cuda.items():
        assert ">=12.8" in _spec(extra, "cuda-python").split(","), name
    assert _spec(extras["bench-cu12"], "cuda-python") == ">=12.8,<13"


def test_the_test_extra_needs_no_cuda() -> None:
    """`make install` on a CPU-only machine: no cuda-python, NVRTC or torch (about 190 MB); the NVRTC
    kernel tests skip without them (test-kernels), --plot has its own extra."""
    extras = _extras()
    assert not any(r.startswith(("cuda-python", "nvidia-", "torch")) for r in extras["test"])
    assert _spec(extras["plot"], "matplotlib") == ">=3.7"
    assert "nvidia-cuda-nvrtc" in extras["test-kernels"]


def test_cu12_extra_pins_torch_below_2_11() -> None:
    extras = _extras()
    assert "<2.11" in _spec(extras["bench-cu12"], "torch").split(",")
    assert "<2.11" not in _spec(extras["bench"], "torch")


def test_nvml_only_in_the_bench_extras() -> None:
    extras = _extras()
    holders = {k for k, v in extras.items() if "nvidia-ml-py" in v}
    assert holders == {"bench", "bench-cu12"}


@pytest.mark.parametrize(("banner", "major"), [
    ("| NVIDIA-SMI 570.86.15    Driver Version: 570.86.15    CUDA Version: 12.8     |", 12),
    ("| NVIDIA-SMI 580.65.06   Driver Version: 580.65.06   CUDA Version: 13.0  |", 13),
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", None),
])
def test_driver_cuda_from_nvidia_smi(banner, major) -> None:
    assert _gpu_check().parse_nvidia_smi_cuda(banner) == major


def test_extra_follows_the_driver() -> None:
    gc = _gpu_check()
    assert [gc.bench_extra(m) for m in (12, 13, 14, None)] == ["bench-cu12", "bench", "bench", "bench"]


def test_driver_major_falls_back_to_nvidia_smi(monkeypatch) -> None:
    gc = _gpu_check()
    monkeypatch.setattr(gc, "_libcuda_major", lambda: None)
    monkeypatch.setattr(gc, "_nvidia_smi_major", lambda: 12)
    assert gc.driver_cuda_major() == 12
    monkeypatch.setattr(gc, "_libcuda_major", lambda: 13)
    assert gc.driver_cuda_major() == 13


def test_print_extra_runs_without_the_bench_packages() -> None:
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--print-extra"],
                         capture_output=True, text=True, check=True, timeout=120).stdout.strip()
    assert out in ("bench", "bench-cu12")


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_gpu_check_installs_the_chosen_extra() -> None:
    auto = subprocess.run(["make", "-n", "gpu-check", "PYTHON=python3"], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout
    assert '".[$(python3 benchmarks/gpu_check.py --print-extra),test]"' in auto
    # install skipped when importable
    assert "import torch, cuda.bindings.driver, cuda.bindings.nvrtc, pynvml" in auto
    forced = subprocess.run(["make", "-n", "gpu-check", "PYTHON=python3", "BENCH_EXTRA=bench-cu12"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout
    assert '".[bench-cu12,test]"' in forced


def _junit(tmp_path, tests, skipped, failures=0, errors=0):
    path = tmp_path / "gpu-tests.xml"
    path.write_text(f'<?xml version="1.0"?><testsuites><testsuite name="pytest" tests="{tests}" '
                    f'skipped="{skipped}" failures="{failures}" errors="{errors}"></testsuite></testsuites>')
    return path


def test_every_gpu_test_skipped_fails_the_check(tmp_path) -> None:
    gc = _gpu_check()
    _, ok, detail = gc.gpu_tests_row(0, gc.junit_counts(_junit(tmp_path, 9, 9)))
    assert not ok and "every GPU test was skipped" in detail and "0 ran, 9 skipped of 9" in detail


def test_gpu_tests_that_ran_pass_the_check(tmp_path) -> None:
    gc = _gpu_check()
    assert gc.gpu_tests_row(0, gc.junit_counts(_junit(tmp_path, 9, 1)))[1:] == (
        True, "exit 0, 8 ran, 1 skipped of 9")
    assert not gc.gpu_tests_row(1, gc.junit_counts(_junit(tmp_path, 9, 0, failures=1)))[1]


def test_missing_test_report_fails_the_check(tmp_path) -> None:
    gc = _gpu_check()
    assert gc.junit_counts(tmp_path / "none.xml") is None
    (tmp_path / "bad.xml").write_text("<testsuites")
    assert gc.junit_counts(tmp_path / "bad.xml") is None
    assert gc.gpu_tests_row(0, None)[1] is False


def _level(share, serialised, disjoint=True):
    return {"prefill_sms": 112, "decode_sms": 20, "granted_prefill_sms": 112, "granted_decode_sms": 20,
            "smid_prefill_count": 112, "smid_decode_count": 20, "disjoint": disjoint, "within_grant": True,
            "gemm_interference_percent": 5.0, "read_interference_percent": 20.0, "overlap_share": share,
            "serialised": serialised}


@pytest.mark.parametrize(("share", "serialised", "ok", "fragment"), [
    (0.97, False, True, "both ran 97%"), (0.5, False, False, "both ran 50%"),
    (0.02, True, False, "SERIALISED"), (None, False, False, "both ran ?"),
])
def test_level_rows_need_both_kernels_running(share, serialised, ok, fragment) -> None:
    rows = _gpu_check()._checks({"complete": True, "levels": [_level(share, serialised)]})
    name, passed, detail = rows[-1]
    assert name == "level 112/20" and passed is ok and fragment in detail
