"""``pdmux check-config`` as a use case: a pdmux YAML judged by each SGLang revision pdmux has read.

Every problem SGLang 0.5.23's loader and start-up checks, the CUDA driver's split rules or pdmux's reading
finds (:func:`pdmux_cli.sglang.pdmux_config.load_config`, :func:`~pdmux_cli.sglang.pdmux_config.validate`),
and each
revision's verdict (:func:`pdmux_cli.sglang.revision_rules.verdicts`). A file that fails is a result with
``ok``
false, not an error: the CLI turns it into exit code 2. Pure apart from reading the files named.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..provenance import provenance, with_provenance
from ..util.errors import InputError
from .fields import Checked, declared_as, option, sglang_revision
from .device_options import device_option
from .pdmux_knobs import PdmuxKnobs
from .planning_inputs import resolve_device


@dataclass(frozen=True)
class CheckConfigRequest(Checked):
    """``pdmux check-config``'s argument and options: ``path`` (the pdmux YAML), ``gpu`` (default h100) or
    ``sms`` with ``cc`` (``"9.0"``), ``sm_group_num`` (the ``--sm-group-num`` launched with), ``model`` (warn
    where the revision cannot multiplex its architecture), ``sglang`` (the revision deciding ``ok``),
    ``speculative_algorithm`` and ``speculative_draft_model_path`` (the server's speculative decoding: the
    file fails where the revision cannot run it beside pdmux)."""

    path: Path | str
    gpu: str | None = device_option("gpu")
    sms: int | None = device_option("sms")
    cc: str | None = device_option("cc")
    sm_group_num: int | None = declared_as(PdmuxKnobs, "sm_group_num")
    model: str | None = option(None, short="-m", help=(
        "The model served: warn where the SGLang revision cannot multiplex its architecture."))
    sglang: str = sglang_revision()
    speculative_algorithm: str | None = option(None, help=(
        "The server's speculative decoding: the file fails where the {flag.sglang} revision cannot run it "
        "beside pdmux (0.5.23 cannot)."))
    speculative_draft_model_path: Path | str | None = option(None, help=(
        "The draft's Hugging Face config.json (its decoder layers decide what a revision accepts)."))


@dataclass(frozen=True)
class CheckConfigResult:
    """The verdicts on one file.

    ``problems``: :class:`pdmux_cli.sglang.pdmux_config.Problem` (``where``, ``rule``, ``message``), parse
    problems
    first. ``revisions``: :class:`pdmux_cli.sglang.revision_rules.Verdict` per revision pdmux has read;
    ``chosen``:
    the :class:`~pdmux_cli.sglang.revisions.Revision` of ``--sglang``. ``errors``: the problems that fail the
    file whatever the revision (the driver's, pdmux's). ``ok``: no such error and the chosen revision runs
    the file. ``support_line``: why the revision cannot (fully) multiplex ``model``, or ``None``.
    ``speculation_line``: why the revision cannot run pdmux beside the speculative decoding asked for (the
    file then fails), or ``None``.
    ``support``: its :class:`~pdmux_cli.sglang.revisions.ModelSupport` (``None`` without ``model``).
    """

    path: Path
    gpu: str
    sm_count: int
    chosen: Any
    problems: list[Any]
    revisions: list[Any]
    errors: list[Any]
    ok: bool
    support: Any = None
    support_line: str | None = None
    provenance: dict[str, Any] = field(default_factory=dict)
    speculation_line: str | None = None

    @property
    def chosen_verdict(self) -> Any:
        """The chosen revision's :class:`~pdmux_cli.sglang.revision_rules.Verdict`."""
        return next(v for v in self.revisions if v.revision == self.chosen.key)

    @property
    def judged(self) -> bool:
        """False where nothing fails the file but the chosen revision's loader was not read: pdmux cannot
        answer whether that revision runs it (the CLI exits 1, not 0 nor 2)."""
        return bool(self.errors) or self.speculation_line is not None or self.chosen_verdict.judged

    def to_dict(self) -> dict[str, Any]:
        """What ``pdmux check-config --json`` prints."""
        from ..sglang.pdmux_config import is_error
        from ..sglang.revisions import REVISIONS

        return with_provenance(
            {
                "path": str(self.path),
                "gpu": self.gpu,
                "sm_count": self.sm_count,
                "ok": self.ok,
                "sglang": self.chosen.key,
                "revisions": [v.as_dict(REVISIONS[v.revision]) for v in self.revisions],
                "problems": [
                    {
                        "where": p.where,
                        "rule": p.rule,
                        "severity": "error" if is_error(p) else "warning",
                        "message": p.message,
                    }
                    for p in self.problems
                ],
                "sglang_support": self.support.as_dict() if self.support is not None else None,
                "speculation": self.speculation_line,
            },
            self.provenance,
        )


def _unused_groups(config: Any, device: Any, cli_sm_group_num: int | None) -> list[Any]:
    """A warning (SGLang runs the file as meant) where the file leaves the split to SGLang's automatic
    rule and it finds fewer stream groups than the decode attention backends SGLang builds: one for each
    of ``--sm-group-num``, else of the file's ``sm_group_num``
    (:func:`pdmux_cli.sglang.split_levels.unused_groups`). None where the split fails (``validate`` says
    why)."""
    from ..messages import render
    from ..sglang import pdmux_config as pc
    from ..sglang import split_levels

    asked = cli_sm_group_num or config.sm_group_num
    if (config.manual_divisions or not isinstance(asked, int) or config.sm_group_num < 3
            or max(asked, config.sm_group_num) > split_levels.sm_group_num_limit(device.sm_count)):
        return []  # (past the limit: validate's error says so)
    try:
        plan = split_levels.plan_groups(device.sm_count, device.cc, config.sm_group_num)
    except InputError:
        return []
    unused = split_levels.unused_groups(plan, asked)
    return [pc.Problem("sm_group_num", render(unused), "warning")] if unused is not None else []


def _speculation_line(r: CheckConfigRequest, revision: Any) -> str | None:
    """Why ``revision`` cannot run pdmux beside ``r``'s speculative decoding
    (:func:`pdmux_cli.sglang.speculative_args.pdmux_speculation_error`, the draft's layers read from its
    ``config.json``), or ``None``. Raises :class:`InputError` for an unknown algorithm, a draft path without
    one, an unreadable draft config."""
    from ..sglang.speculative_args import pdmux_speculation_error

    path = r.speculative_draft_model_path
    if r.speculative_algorithm is None:
        if path is not None:
            raise InputError("{flag.speculative_draft_model_path} needs {flag.speculative_algorithm}",
                             param="speculative_draft_model_path", values={})
        return None
    layers = 1
    if path is not None:
        from ..catalog.model import load_model

        layers = load_model(path).num_layers
    error = pdmux_speculation_error(revision, r.speculative_algorithm, layers)
    return None if error is None else str(error)


def _with_speculation(r: CheckConfigRequest, per_revision: list[Any]) -> list[Any]:
    """Each revision's verdict with the speculative decoding asked for: a file a revision runs becomes one
    it does not where it cannot run pdmux beside that speculation (:func:`_speculation_line`; at the first
    decode after a prefill where it accepts the pair at start-up, 0.5.23, else at start-up)."""
    from ..sglang.revision_rules import Verdict
    from ..sglang.revisions import get_revision

    if r.speculative_algorithm is None:
        return per_revision
    out = []
    for v in per_revision:
        revision = get_revision(v.revision)
        line = _speculation_line(r, revision) if v.accepted else None
        if line is not None:
            stage = "run" if revision.speculation == "crashes" else "start-up"
            v = Verdict(v.revision, False, stage, line)
        out.append(v)
    return out


def check_config(request: CheckConfigRequest) -> CheckConfigResult:
    """Judge the pdmux YAML ``request.path`` for a device under every SGLang revision pdmux has read.

    A revision pdmux follows but whose loader it has not read (``dsv41@a64f33f``) is no bad input: its
    verdict is "not judged" (``accepted`` None, ``ok`` false: :attr:`CheckConfigResult.judged` says pdmux
    cannot answer), the other revisions' verdicts and the driver's and pdmux's problems as for any.
    Raises :class:`InputError` for a ``sglang`` that is no revision pdmux follows, an unknown GPU or model,
    or a file that cannot be read at all (missing, not a file, not YAML). Problems in the file itself are in
    the result (``ok`` false), not raised.
    """
    from ..sglang import pdmux_config as pc
    from ..sglang.revision_rules import verdicts
    from ..sglang.revisions import get_revision

    r = request
    path = r.path
    chosen = get_revision(r.sglang)
    sm_group_num = r.sm_group_num
    device = resolve_device(r.gpu, r.sms, r.cc)
    config, parsed = pc.load_config(path)
    problems = list(parsed) + pc.validate(config, device.sm_count, device.cc, sm_group_num)
    problems += _unused_groups(config, device, sm_group_num)
    per_revision = _with_speculation(r, verdicts(config, list(parsed), device.sm_count, device.cc,
                                                 cli_sm_group_num=sm_group_num))
    mine = next(v for v in per_revision if v.revision == chosen.key)
    # the exit code: the chosen revision's verdict, plus what the driver or a typo does to any revision
    errors = [p for p in problems if p.rule in ("cuda", "pdmux")]
    speculation_line = _speculation_line(r, chosen)
    failed = bool(errors) or not mine.accepted or speculation_line is not None
    support = support_line = None
    if r.model is not None:
        from ..catalog.model import load_model
        from ..sglang.revisions import model_support

        support = model_support(load_model(r.model).architectures, chosen)
        support_line = support.reason if support.state != "yes" else None
    return CheckConfigResult(
        path=path,
        gpu=device.name,
        sm_count=device.sm_count,
        chosen=chosen,
        problems=problems,
        revisions=per_revision,
        errors=errors,
        ok=not failed,
        support=support,
        support_line=support_line,
        speculation_line=speculation_line,
        provenance=provenance(sglang=chosen.key),
    )
