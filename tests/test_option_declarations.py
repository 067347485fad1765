"""Each option declared once, on its request field (issue 32, item 1): a command's own wording is named by
the command, and the command shows it."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil

import typer

import pdmux_cli.workflows as workflows
from pdmux_cli.cli import app
from pdmux_cli.messages import flags_in
from pdmux_cli.workflows.fields import HELP, WORDINGS


def _declared_fields() -> list[tuple[type, dataclasses.Field]]:
    out = []
    for info in pkgutil.iter_modules(workflows.__path__):
        module = importlib.import_module(f"{workflows.__name__}.{info.name}")
        for cls in vars(module).values():
            if isinstance(cls, type) and dataclasses.is_dataclass(cls) and cls.__module__ == module.__name__:
                out += [(cls, f) for f in dataclasses.fields(cls) if HELP in f.metadata]
    return out


def _commands() -> dict[str, dict[str, str]]:
    """Each command's options' help, by parameter name."""
    click = typer.main.get_command(app)
    return {name: {p.name: getattr(p, "help", None) for p in command.params}
            for name, command in click.commands.items()}


def test_every_wording_names_a_command_that_shows_it() -> None:
    commands = _commands()
    worded = set()
    for cls, f in _declared_fields():
        for command, text in f.metadata.get(WORDINGS, {}).items():
            assert command in commands, f"{cls.__name__}.{f.name}: no command {command!r}"
            if f.name in commands[command]:
                assert commands[command][f.name] == flags_in(text), (cls.__name__, f.name, command)
                worded.add((f.name, command))
    assert len(worded) >= 20  # tune's, capacity's, simulate's and estimate's own wordings are shown


def test_the_others_show_the_declared_help() -> None:
    """simulate shows --dp as DeploymentOptions declares it; tune its own wording of the same field."""
    from pdmux_cli.workflows.deployment import DeploymentOptions

    dp = next(f for f in dataclasses.fields(DeploymentOptions) if f.name == "dp")
    commands = _commands()
    assert commands["simulate"]["dp"] == flags_in(dp.metadata[HELP])
    assert commands["tune"]["dp"] == flags_in(dp.metadata[WORDINGS]["tune"]) != commands["simulate"]["dp"]
    assert "Default 1." in commands["tune"]["dp"]


def test_no_command_spells_a_declared_option_again() -> None:
    """A command's parameter that is a declared request field takes its option from the declaration: its
    help is the declared help or the command's own wording there (no help of its own beside it)."""
    from pdmux_cli.workflows.check_config import CheckConfigRequest
    from pdmux_cli.workflows.estimate import EstimateRequest
    from pdmux_cli.workflows.splits import SplitsRequest

    commands = _commands()
    for name, cls in (("splits", SplitsRequest), ("estimate", EstimateRequest),
                      ("check-config", CheckConfigRequest)):
        for f in dataclasses.fields(cls):
            if HELP in f.metadata:
                want = f.metadata.get(WORDINGS, {}).get(name, f.metadata[HELP])
                assert commands[name][f.name] == flags_in(want), (name, f.name)
