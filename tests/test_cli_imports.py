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


STARTUP = """
import sys
sys.argv = {argv!r}
from pdmux_cli.entry import run
try:
    run()
except SystemExit as e:
    code = e.code
cli = sorted(m.rpartition(".")[2] for m in sys.modules if m.startswith("pdmux_cli.cli."))
from pdmux_cli.cli import app
sys.stdout.flush()
print("\\nMODULES", ",".join(sorted(m for m in sys.modules if m.split(".")[0] in ("click", "pdmux_cli")
                                   and (m == "click" or m.startswith(("pdmux_cli.planning.",
                                                                      "pdmux_cli.costmodel"))))))
print("COMMANDS", len(app.registered_commands))
print("CLI", ",".join(cli))
"""


def _startup(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", STARTUP.format(argv=["pdmux", *argv])],
                          capture_output=True, text=True, check=False)


def test_splits_start_up_skips_the_cost_model_click_and_other_commands() -> None:
    """`pdmux splits` (issue 31's start-up target): no cost model (its bounds live in
    pdmux_cli.planning), no click package beside typer's own, and only its own command built; the
    output is the full app's and every command is registered again afterwards."""
    from typer.testing import CliRunner

    from pdmux_cli.cli import app

    out = _startup(["splits", "--gpu", "h100", "--json"])
    assert out.returncode == 0, out.stderr
    body, _, tail = out.stdout.rpartition("\nMODULES")
    assert tail.split("\n")[0].strip() == "", f"imported: {tail}"
    assert f"COMMANDS {len(app.registered_commands)}" in tail
    # only splits' own command module: the other commands' option declarations are a fifth of start-up
    cli = set(tail.partition("\nCLI ")[2].split("\n")[0].split(","))
    assert cli <= {"common", "options", "render", "root", "splits"}, cli
    assert "splits" in cli
    full = CliRunner().invoke(app, ["splits", "--gpu", "h100", "--json"])
    assert full.exit_code == 0
    assert body.strip() == full.stdout.strip()


@pytest.mark.parametrize("argv,expect", [
    (["splts"], "Did you mean 'splits'"),
    (["--version"], "pdmux "),
    (["--help"], "check-config"),
    (["gen-config", "--gpu", "h100"], "manual_divisions"),
])
def test_one_command_build_leaves_the_rest_alone(argv, expect) -> None:
    out = _startup(argv)
    assert expect in out.stdout + out.stderr


def test_command_modules_name_each_command_where_it_is_registered() -> None:
    """``pdmux_cli.cli.COMMAND_MODULES`` (what ``main`` imports for a named command) against what the
    modules register: every command, in ``--help``'s order, each in the module named for it."""
    import pdmux_cli.cli as cli
    from pdmux_cli.cli import app

    registered = [(cli._command_name(c), c.callback.__module__) for c in app.registered_commands]
    assert registered == [(command, f"pdmux_cli.cli.{module}")
                          for module, commands in cli.COMMAND_MODULES for command in commands]
    assert [name for name, _ in registered] == ["splits", "estimate", "gen-config", "check-config",
                                                "simulate", "tune", "capacity", "accuracy", "calibrate",
                                                "bench"]


def test_the_package_has_no_other_lazy_names() -> None:
    import pdmux_cli.cli as cli

    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        cli.nope  # noqa: B018
