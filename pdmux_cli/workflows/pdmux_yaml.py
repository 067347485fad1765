"""The pdmux config a simulation runs: a YAML file, ``--divisions``, or SGLang's defaults, with overrides.

One place resolves it for simulate and capacity (:func:`resolve_config`): loaded, overridden
(``--sm-group-num``, ``--decode-bs-divisor``, ``--token-budget``), validated against the GPU
(:func:`pdmux_cli.sglang.pdmux_config.validate`: a rule of released or unreleased SGLang stops the run; CUDA
granularity rounds the levels as the driver does, :func:`pdmux_cli.sglang.pdmux_config.driver_divisions`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..util.errors import Finding, InputError


@dataclass(frozen=True, kw_only=True)
class PdmuxYaml:
    """Where a pdmux config comes from: ``config`` (a pdmux YAML) or ``divisions`` (manual levels,
    ``"PREFILL:DECODE:THRESHOLD,..."``), neither for SGLang's defaults; ``sm_group_num``,
    ``decode_bs_divisor``, ``token_budget`` (``split_forward_token_budget``) override the result."""

    config: Path | None = None
    divisions: str | None = None
    sm_group_num: int | None = None
    decode_bs_divisor: int | None = None
    token_budget: int | None = None


def _problem(p: Any) -> Finding:
    """``pdmux_yaml.problem``: a config's warning or a rule only SGLang 0.5.23 or the driver objects to
    (:class:`pdmux_cli.sglang.pdmux_config.Problem`: ``where``, ``message``, ``rule``)."""
    return Finding("pdmux_yaml.problem", {"where": p.where, "message": p.message, "rule": p.rule}, "config")


def _load(source: PdmuxYaml) -> tuple[Any, list[Finding]]:
    """The config as written (or SGLang's defaults) and its warnings."""
    from ..sglang import pdmux_config as pc

    if source.config is None:
        if source.divisions is None:
            return pc.PdmuxConfig(), []
        entries = pc.parse_divisions(source.divisions)
        return pc.PdmuxConfig(sm_group_num=len(entries) + 2, manual_divisions=entries), []
    if source.divisions is not None:
        raise InputError(
            "give {flag.config} or {flag.divisions}, not both",
            values={},
        )
    cfg, problems = pc.load_config(source.config)
    warnings = [_problem(p) for p in problems if not pc.is_error(p)]
    errors = [p for p in problems if pc.is_error(p)]
    if errors:
        first = errors[0]
        raise InputError("{path}: {where}: {message} (pdmux check-config {path} lists every problem)",
                         param="config", values={"path": str(source.config), "where": first.where,
                                                 "message": first.message})
    return cfg, warnings


def _overridden(cfg: Any, source: PdmuxYaml, total_sms: int) -> Any:
    from ..sglang import split_levels as pol

    pol.check_sm_group_num(source.sm_group_num, total_sms)
    if source.sm_group_num is not None:
        if cfg.manual_divisions and source.sm_group_num != cfg.sm_group_num:
            raise InputError(
                "{flag.sm_group_num} {sm_group_num} does not match the {divisions} manual divisions "
                "(sm_group_num = divisions + 2)",
                values={"sm_group_num": source.sm_group_num, "divisions": len(cfg.manual_divisions)},
            )
        cfg = replace(cfg, sm_group_num=source.sm_group_num)
    if source.decode_bs_divisor is not None:
        cfg = replace(cfg, decode_bs_divisor=source.decode_bs_divisor)
    if source.token_budget is not None:
        cfg = replace(cfg, split_forward_token_budget=source.token_budget)
    return cfg


def resolve_config(source: PdmuxYaml, setup: Any) -> tuple[Any, list[Finding]]:
    """The pdmux config to simulate on ``setup``'s GPU (a :class:`pdmux_cli.sglang.pdmux_config.PdmuxConfig`,
    levels as the driver runs them) and notes (``"config: ..."``: warnings, rules only SGLang 0.5.23 or
    the driver objects to, levels rounded).

    Raises :class:`InputError` for an override below 1, ``--config`` with ``--divisions``, a file or
    levels that SGLang refuses (naming ``pdmux check-config FILE``, which lists every problem).
    """
    from ..sglang import pdmux_config as pc
    from ..sglang import split_levels as pol
    from .planning_inputs import check_positive_knobs

    check_positive_knobs(sm_group_num=source.sm_group_num, decode_bs_divisor=source.decode_bs_divisor,
                         token_budget=source.token_budget)  # an API caller's "8" too: an InputError
    cfg, notes = _load(source)
    cfg = _overridden(cfg, source, setup.total_sms)
    blackwell_auto = not cfg.manual_divisions and setup.compute_capability[0] not in pol.SGLANG_SM_CONSTRAINTS
    for problem in pc.validate(cfg, setup.total_sms, setup.compute_capability):
        if blackwell_auto and problem.where == "manual_divisions":
            continue  # simulated with CUDA's levels; the plan's note says SGLang needs manual_divisions
        if problem.rule in ("both", "new"):
            raise _refused(source, problem)
        if problem.rule != "cuda":  # said by driver_divisions' notes, which also says what is simulated
            notes.append(_problem(problem))
    cfg, rounded = pc.driver_divisions(cfg, setup.total_sms, setup.compute_capability)
    notes.extend(Finding("pdmux_yaml.rounded", {"message": note}, "config") for note in rounded)
    return cfg, notes


def _refused(source: PdmuxYaml, problem: Any) -> InputError:
    """The :class:`InputError` for a rule of SGLang that ``source``'s config breaks: it names the file
    (``param="config"``), the divisions (``{flag.divisions}``: the CLI's ``--divisions``, the API's
    ``divisions``) or SGLang's defaults, then the problem's key and sentence."""
    values = {"where": problem.where, "message": problem.message}
    if source.config is not None:
        return InputError("{path}: {where}: {message} (pdmux check-config {path} lists every problem)",
                          param="config", values={**values, "path": str(source.config)})
    if source.divisions is not None:
        return InputError("{flag.divisions}: {where}: {message}", param="divisions", values=values)
    return InputError("pdmux config: {where}: {message}", values=values)
