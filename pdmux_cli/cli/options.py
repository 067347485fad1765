"""What simulate, tune and capacity share: their typer options (an option declared on its request field,
:func:`pdmux_cli.workflows.fields.option`, built from there: :func:`declared`, and a shared group's:
:func:`with_group`; the few worded here once for the commands that share them), the request built from a
command's parameters, JSON output, and the progress bar.

typer reads the options as metadata: a command names one as a parameter's default. Each spelt once; where
a command words an option differently, its wording is on the declaration, named for the command
(:func:`pdmux_cli.workflows.fields.option`'s ``wordings``). Kept light (typer only; rich when a bar is
shown).
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

from .common import console, one_number, output_file, output_path, progress_bar

# The options declared on the request groups' fields (workflows.fields.option: help, default, flag, and a
# command's own wording where it differs) are built from there (declared, with_group, with_declared,
# with_options): the workload's (workflows.workload.WorkloadOptions, with bench_serving's
# generated-shared-prefix dataset under SGLang's own flags and defaults, 0.5.23), the server's and its cost
# model's (workflows.server.ServerOptions: the serving terms, speculative decoding, SGLang's server flags),
# the deployment's (workflows.deployment.DeploymentOptions, tune's wording of --dp, --load-balance-method and
# --disagg), where the simulations run (workflows.run_options.RunOptions), and a command's own (its
# request's: the policies, the pdmux config, the SLOs, --sglang, the outputs). What follows is the CLI's own,
# no request field: the trace given as an argument or as --trace (the request's one ``trace``), and --json.

# The workload: a trace file.
TRACE_ARGUMENT = typer.Argument(None, help="Trace file: Azure CSV, Mooncake JSONL or BurstGPT CSV.")
TRACE_OPTION = typer.Option(None, "--trace", help="The trace file, spelt as tune and gen-config --tune take "
                                                  "it.")

# Output.
JSON_OPTION = typer.Option(False, "--json", help="Print JSON instead of tables.")


def declared(cls: type, name: str, command: str | None = None) -> Any:
    """The typer option of field ``name`` of ``cls`` (a request dataclass), as declared there
    (:func:`pdmux_cli.workflows.fields.option`): its default (a list's as the comma-separated text the CLI
    takes, a repeated path option's as a list; a field without one: required), flag (and short flag) and
    help (``command``'s own wording where the declaration has one; the parameters it names as their flags:
    :func:`pdmux_cli.messages.flags_in`)."""
    from dataclasses import MISSING
    from pathlib import Path

    from ..messages import flag, flags_in
    from ..workflows.fields import HELP, HIDDEN, LIST_IN, SHORT, WORDINGS, WRITES

    f = next(f for f in fields(cls) if f.name == name)
    short = f.metadata.get(SHORT)
    writes = f.metadata.get(WRITES)
    output = ({"parser": {"path": output_path, "file": output_file}[writes], "metavar": "<path>"} if writes
              else {})
    list_in = f.metadata.get(LIST_IN)
    if list_in and float in _members(_hints(cls)[name]):  # one number here, a list in ``list_in``
        output = {"parser": one_number(list_in), "metavar": "<float>"}
    repeated = tuple[Path, ...] in _members(_hints(cls)[name])  # --merge A --merge B
    default = (... if f.default is MISSING else list(f.default) if repeated and f.default is not None
               else ",".join(map(str, f.default)) if isinstance(f.default, tuple) else f.default)
    wording = f.metadata.get(WORDINGS, {}).get(command, f.metadata[HELP])
    hidden = {"hidden": True} if f.metadata.get(HIDDEN) else {}
    return typer.Option(default, flag(f.name), *((short,) if short else ()), **output, **hidden,
                        help=flags_in(wording))


def _cli_type(hint: Any) -> Any:
    """A request field's annotation as typer takes it: a path that takes its text too (``Path | str``) a
    :class:`~pathlib.Path`; a tuple of paths a list (the option repeated); a list that takes the CLI's
    comma-separated text too (``tuple[int, ...] | str``) that text."""
    from pathlib import Path

    args = _members(hint)
    if tuple[Path, ...] in args:  # a repeated option (capacity's --config, calibrate's --merge)
        return list[Path] | None if type(None) in args else list[Path]
    if Path in args and str in args:
        return Path | None if type(None) in args else Path
    if str in args and any(typing.get_origin(a) is tuple for a in args):
        return str | None if type(None) in args else str
    return hint


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    """The annotations of a request dataclass's fields, evaluated (once per class)."""
    return typing.get_type_hints(cls)


def _members(hint: Any) -> tuple[Any, ...]:
    """The types of a union annotation (``Path | None``: ``Path``, ``None``'s type), or the annotation."""
    union = isinstance(hint, type(int | None)) or typing.get_origin(hint) is typing.Union
    return typing.get_args(hint) if union else (hint,)


def group_parameters(cls: type, group: str, command: str | None = None) -> list[inspect.Parameter]:
    """The typer parameters of the fields of ``cls`` (a request dataclass) declared in ``group``
    (:func:`pdmux_cli.workflows.fields.option`): each field's name, type and :func:`declared` option, worded
    for ``command``."""
    from ..workflows.fields import group_fields

    return _parameters(cls, group_fields(cls, group), command)


def _parameters(cls: type, chosen: Any, command: str | None = None) -> list[inspect.Parameter]:
    hints = _hints(cls)
    return [inspect.Parameter(f.name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                              annotation=_cli_type(hints[f.name]), default=declared(cls, f.name, command))
            for f in chosen]


def _command(function: Callable[..., Any], parameters: list[inspect.Parameter]) -> Callable[..., Any]:
    """``function`` (ending in ``**options``) as typer sees a command of ``parameters``."""
    signature = inspect.signature(function)

    @functools.wraps(function)
    def command(**values: Any) -> Any:
        return function(**values)

    command.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    return command


def _own(function: Callable[..., Any]) -> list[inspect.Parameter]:
    return [p for p in inspect.signature(function).parameters.values()
            if p.kind is not inspect.Parameter.VAR_KEYWORD]


def with_group(cls: type, group: str, after: str | None = None, *, before: str | None = None,
               command: str | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A command taking, after its parameter ``after`` (or before ``before``), the options of ``group`` as
    ``cls`` declares them (:func:`group_parameters`, worded for ``command``): the command function ends in
    ``**options``, which receives them (issue 32, item 1: an option of the group is declared once, on its
    request field)."""

    def build(function: Callable[..., Any]) -> Callable[..., Any]:
        own = _own(function)
        names = [p.name for p in own]
        at = names.index(after) + 1 if after is not None else names.index(before)  # type: ignore[arg-type]
        return _command(function, [*own[:at], *group_parameters(cls, group, command), *own[at:]])

    return build


def with_declared(cls: type, command: str | None = None, *, after: dict[str, str] | None = None
                  ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A command taking, in their order, the options declared on the fields of ``cls`` (a request
    dataclass; :func:`pdmux_cli.workflows.fields.option`, no shared group) that are none of its own
    parameters, worded for ``command``; the command function ends in ``**options``, which receives them.
    Its own parameters come first where they are typer arguments, after the declared ones otherwise, or,
    named in ``after``, each after the declared option named there."""
    from ..workflows.fields import GROUP, HELP

    def build(function: Callable[..., Any]) -> Callable[..., Any]:
        own = _own(function)
        names = {p.name for p in own}
        chosen = [f for f in fields(cls)
                  if HELP in f.metadata and f.metadata.get(GROUP) is None and f.name not in names]
        placed = after or {}
        arguments = [p for p in own if isinstance(p.default, typer.models.ArgumentInfo)]
        rest = [p for p in own if p not in arguments and p.name not in placed]
        parameters = list(arguments)
        for parameter in _parameters(cls, chosen, command):
            parameters.append(parameter)
            parameters += [p for p in own if placed.get(p.name) == parameter.name]
        return _command(function, [*parameters, *rest])

    return build


def with_options(cls: type, order: tuple[str, ...], command: str | None = None
                 ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A command taking the options named in ``order``, in that order (their order in ``--help``): each one of
    the command function's own parameters (the CLI's own: a trace argument, ``--json``) or a field of ``cls``
    (a request dataclass) as declared there (:func:`declared`, worded for ``command``); the command function
    ends in ``**options``, which receives the declared ones. A shared group's options are placed among them
    by :func:`with_group` (a decorator above this one)."""

    def build(function: Callable[..., Any]) -> Callable[..., Any]:
        own = {p.name: p for p in _own(function)}
        by_name = {f.name: f for f in fields(cls)}
        unknown = [n for n in order if n not in own and n not in by_name]
        unplaced = [n for n in own if n not in order]
        if unknown or unplaced:
            raise TypeError(f"{function.__name__}: {unknown} are neither its parameters nor fields of "
                            f"{cls.__name__}; {unplaced} not placed")
        return _command(function, [own[n] if n in own else _parameters(cls, [by_name[n]], command)[0]
                                   for n in order])

    return build


class _Deferred:
    """A command function whose typer options are built when typer first asks for its signature
    (:func:`deferred`): its name and docstring are the function's from the start."""

    def __init__(self, function: Callable[..., Any], build: Callable[[Callable[..., Any]], Callable[..., Any]]
                 ) -> None:
        self.__wrapped__ = function  # typing.get_type_hints reads the module's names through it
        self.__name__, self.__qualname__ = function.__name__, function.__qualname__
        self.__module__, self.__doc__ = function.__module__, function.__doc__
        self._build = build
        self._built: Callable[..., Any] | None = None

    def _command(self) -> Callable[..., Any]:
        if self._built is None:
            self._built = self._build(self.__wrapped__)
        return self._built

    @property
    def __signature__(self) -> inspect.Signature:
        return inspect.signature(self._command())

    @property
    def __annotations__(self) -> dict[str, Any]:  # type: ignore[override]
        return self._command().__annotations__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._command()(*args, **kwargs)


def deferred(build: Callable[[Callable[..., Any]], Callable[..., Any]]
             ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A command whose options ``build`` makes (the command function in, decorated with :func:`with_options`
    and :func:`with_group`), when typer first builds the command: a request whose module the other commands
    do not import (tune's) is imported only then, not at every start-up (``pdmux splits``: one command built,
    :func:`pdmux_cli.cli.main`)."""

    def wrap(function: Callable[..., Any]) -> Callable[..., Any]:
        return _Deferred(function, build)  # type: ignore[return-value]

    return wrap


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
