"""What simulate, tune and capacity share: their typer options (an option declared on its request field,
:func:`pdmux_cli.workflows.fields.option`, built from there: :func:`declared`, and a shared group's:
:func:`with_group`; the few worded here once for the commands that share them), the request built from a
command's parameters, JSON output, and the progress bar.

typer reads the options as metadata: a command names one as a parameter's default. Each spelt once; where
two commands word an option differently, both spellings are here, named for the command. Kept light
(typer only; rich when a bar is shown).
"""

from __future__ import annotations

import functools
import inspect
import sys
import typing
from collections.abc import Callable
from dataclasses import fields
from typing import Any

import typer

from ..workflows.policies import DEFAULT_POLICIES
from .common import console, output_file, output_path, progress_bar

CALIBRATION_HELP = "calibration.yaml from 'pdmux bench' and/or 'pdmux calibrate'."
SLO_ITL_HELP = "ITL SLO, ms (judged on each request's p99 ITL)."

# The options declared on the request groups' fields (workflows.fields.option: help, default, flag) are built
# from there (declared, with_group): the workload's (workflows.workload.WorkloadOptions, with bench_serving's
# generated-shared-prefix dataset under SGLang's own flags and defaults, 0.5.23), the server's and its cost
# model's (workflows.server.ServerOptions: the serving terms, speculative decoding) and the deployment's
# (workflows.deployment.DeploymentOptions). What follows is worded here: the trace argument, the policies,
# the SLOs, tune's deployment, where the simulations run, the output.

# The workload: a trace file.
TRACE_ARGUMENT = typer.Argument(None, help="Trace file: Azure CSV, Mooncake JSONL or BurstGPT CSV.")
TRACE_OPTION = typer.Option(None, "--trace", help="The trace file, spelt as tune and gen-config --tune take "
                                                  "it.")

# The policies.
MIXED_CHUNK_SIZES_OPTION = typer.Option("512", "--mixed-chunk-sizes", help="Chunk sizes of 'mixed-chunk'.")
PREFILL_DECODE_INTERVAL_OPTION = typer.Option(0, "--prefill-decode-interval", help=(
    "chunked, mixed-chunk and prefill-first: decode-only rounds after each prefill batch (SGLang's flag; "
    "0 = off)."))
SLO_TTFT_DEFAULT_OPTION = typer.Option(1000.0, "--slo-ttft", help="TTFT SLO, ms.")
SLO_ITL_DEFAULT_OPTION = typer.Option(60.0, "--slo-itl", help=SLO_ITL_HELP)

# More than one server: tune words --dp and --load-balance-method for its search.
TUNE_DP_OPTION = typer.Option(None, "--dp", help=(
    "Data-parallel replicas of the server behind a router, each --tp GPUs (SGLang's --dp-size, or servers "
    "behind sgl-router); every config runs on them. Default 1."))
TUNE_LOAD_BALANCE_OPTION = typer.Option(None, "--load-balance-method", help=(
    "How the router picks one of the --dp replicas: round_robin (SGLang's default) or total_requests (the "
    "fewest outstanding requests), SGLang's names."))

# Where the simulations run.
WORKERS_OPTION = typer.Option(None, "--workers", help=(
    "Processes (default: the cores available); with --executor ray, tasks at a time (default: the cluster's "
    "CPUs)."))
EXECUTOR_OPTION = typer.Option("local", "--executor", help=(
    "Where the simulations run: local (this machine's cores, --workers processes) or ray (a Ray cluster: "
    "--ray-address, or a local Ray instance started for the run; pip install 'pdmux\\[ray]'). The results "
    "are the same."))
RAY_ADDRESS_OPTION = typer.Option(None, "--ray-address", help=(
    "--executor ray: the cluster to run on: auto (the one 'ray start' began on this machine), host:port, or "
    "ray://host:10001 (Ray Client). Default: a local Ray instance for this run."))
MAX_STEPS_OPTION = typer.Option(None, "--max-steps", help=(
    "The most decode steps one simulated server may take before the run stops (a guard against runaway runs; "
    "shown in the progress bar). Default: 6,000,000 or 2,000 per request of the trace, whichever is more; "
    "0: no limit."))

# Output.
JSON_OPTION = typer.Option(False, "--json", help="Print JSON instead of tables.")
OUTPUT_YAML_OPTION = typer.Option(None, "--output", "-o", parser=output_path, metavar="<path>",
                                  help="Write the winning YAML here (whole or not at all).")
CSV_OPTION = typer.Option(None, "--csv", parser=output_file, metavar="<path>", help=(
    "Write per-request results to this CSV file (row by row as requests finish; the file appears whole at "
    "the end)."))
SIMULATE_PLOT_OPTION = typer.Option(None, "--plot", parser=output_file, metavar="<path>",
                                    help="Write ITL and TTFT CDFs to this PNG (needs matplotlib).")
CAPACITY_PLOT_OPTION = typer.Option(None, "--plot", parser=output_file, metavar="<path>", help=(
    "Write SLO attainment vs request rate, one curve per policy, to this PNG."))
POLICIES_HELP = ("Comma-separated: pdmux, chunked (SGLang's default scheduling), mixed-chunk "
                 "(--enable-mixed-chunk), prefill-first (--chunked-prefill-size -1), disagg (with "
                 "--disagg).")
SIMULATE_POLICIES_OPTION = typer.Option(DEFAULT_POLICIES, "--policies", help=POLICIES_HELP)
CAPACITY_POLICIES_OPTION = typer.Option(DEFAULT_POLICIES, "--policies", help=(
    "Comma-separated: pdmux, chunked, mixed-chunk, prefill-first, disagg (with --disagg)."))


def declared(cls: type, name: str) -> Any:
    """The typer option of field ``name`` of ``cls`` (a request dataclass), as declared there
    (:func:`pdmux_cli.workflows.fields.option`): its default, flag (and short flag) and help (the parameters
    it names as their flags: :func:`pdmux_cli.messages.flags_in`)."""
    from ..messages import flag, flags_in
    from ..workflows.fields import HELP, SHORT, WRITES

    f = next(f for f in fields(cls) if f.name == name)
    short = f.metadata.get(SHORT)
    writes = f.metadata.get(WRITES)
    output = ({"parser": {"path": output_path, "file": output_file}[writes], "metavar": "<path>"} if writes
              else {})
    return typer.Option(f.default, flag(f.name), *((short,) if short else ()), **output,
                        help=flags_in(f.metadata[HELP]))


def _cli_type(hint: Any) -> Any:
    """A request field's annotation as typer takes it: a path that takes its text too (``Path | str``) a
    :class:`~pathlib.Path`."""
    from pathlib import Path

    args = typing.get_args(hint)
    if Path in args and str in args:
        return Path | None if type(None) in args else Path
    return hint


def group_parameters(cls: type, group: str) -> list[inspect.Parameter]:
    """The typer parameters of the fields of ``cls`` (a request dataclass) declared in ``group``
    (:func:`pdmux_cli.workflows.fields.option`): each field's name, type and :func:`declared` option."""
    from ..workflows.fields import group_fields

    return _parameters(cls, group_fields(cls, group))


def _parameters(cls: type, chosen: Any) -> list[inspect.Parameter]:
    hints = typing.get_type_hints(cls)
    return [inspect.Parameter(f.name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                              annotation=_cli_type(hints[f.name]), default=declared(cls, f.name))
            for f in chosen]


def with_group(cls: type, group: str, after: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A command taking, after its parameter ``after``, the options of ``group`` as ``cls`` declares them
    (:func:`group_parameters`): the command function ends in ``**options``, which receives them (issue 32,
    item 1: an option of the group is declared once, on its request field)."""

    def build(function: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(function)
        own = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        at = [p.name for p in own].index(after) + 1

        @functools.wraps(function)
        def command(**values: Any) -> Any:
            return function(**values)

        command.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[*own[:at], *group_parameters(cls, group), *own[at:]])
        return command

    return build


def with_declared(cls: type) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A command taking first, in their order, the options declared on the fields of ``cls`` (a request
    dataclass; :func:`pdmux_cli.workflows.fields.option`, no shared group) that are none of its own
    parameters; the command function ends in ``**options``, which receives them."""
    from ..workflows.fields import GROUP, HELP

    def build(function: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(function)
        own = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        names = {p.name for p in own}
        chosen = [f for f in fields(cls)
                  if HELP in f.metadata and f.metadata.get(GROUP) is None and f.name not in names]

        @functools.wraps(function)
        def command(**values: Any) -> Any:
            return function(**values)

        command.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[*_parameters(cls, chosen), *own])
        return command

    return build


def request_of(cls: type, values: dict[str, Any], **given: Any) -> Any:
    """``cls`` (a workflow's request dataclass) from a command's parameters: each field from ``values``
    (the command's ``locals()``) by name, or from ``given``."""
    return cls(**{f.name: given[f.name] if f.name in given else values[f.name] for f in fields(cls)
                  if f.name in given or f.name in values})


class _Bar:
    """A rich progress bar on stderr for one task (:class:`pdmux_cli.workflows.progress.ProgressTask`)."""

    def __init__(self, total: int, label: str) -> None:
        self.bar = progress_bar(console(stderr=True))
        self.task = self.bar.add_task(label, total=total)

    def __enter__(self) -> Any:
        self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.stop()

    def advance(self, done: int, total: int | None = None) -> None:
        if total is None:
            self.bar.update(self.task, completed=done)
        else:
            self.bar.update(self.task, completed=done, total=total)

    def describe(self, label: str) -> None:
        self.bar.update(self.task, description=label)


def progress_factory(shown: bool) -> Any:
    """A :data:`pdmux_cli.workflows.progress.ProgressFactory` drawing rich bars on stderr, or ``None``
    where no bar is shown (``shown`` false, or stderr is not a terminal)."""
    if not shown or sys.stderr is None or not sys.stderr.isatty():
        return None
    return _Bar


def show_progress(as_json: bool) -> bool:
    """Whether a command shows a progress bar: not with ``--json``, and only on a terminal."""
    return not as_json and sys.stderr is not None and sys.stderr.isatty()
