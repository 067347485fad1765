"""The planning commands must never import torch, cuda-python, numpy or matplotlib (start-up cost,
and they must work where none is installed)."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("torch", "cuda", "numpy", "matplotlib")

SCRIPT = """
import sys
from typer.testing import CliRunner
from pdmux_cli.cli import app
runner = CliRunner()
for args in {args!r}:
    result = runner.invoke(app, args)
    assert result.exit_code in (0, 2), (args, result.exit_code, result.stderr)
heavy = sorted(m for m in sys.modules if m.split(".")[0] in {heavy!r})
print(",".join(heavy))
"""


@pytest.mark.parametrize(
    "args",
    [
        [["splits", "--gpu", "h100"], ["splits", "--all"], ["splits", "--gpu", "nope"]],
        [["estimate"], ["estimate", "--all-levels", "--json"],
         ["estimate", "--model", "deepseek-v3", "--gpu", "b200"]],
        [["gen-config", "--gpu", "h100"], ["gen-config", "--gpu", "b200", "--json"], ["--help"]],
        [["accuracy", "--json"], ["estimate", "--cost-model", "chapter", "--gpu", "a100"]],
        [["calibrate", "--sglang-bench", "tests/fixtures/sglang/model_made_one_batch_h100_qwen3_8b.jsonl",
          "--model", "qwen3-8b", "--gpu", "h100", "--json"]],
    ],
)
def test_planning_commands_import_nothing_heavy(args) -> None:
    code = SCRIPT.format(args=args, heavy=HEAVY)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"heavy modules imported: {out.stdout.strip()}"
