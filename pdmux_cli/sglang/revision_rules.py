"""Each SGLang revision's verdict on a pdmux YAML: accepted, or refused at load / start-up / run time (pure).

One function per code line, each reproducing what its files do with the YAML (the revisions and the files
read: :mod:`pdmux_cli.sglang.revisions`), on a given device:

- SGLang 0.5.23: :func:`pdmux_cli.sglang.pdmux_config.validate`'s rules ``old`` and ``both`` (its loader,
  ``initialize_stream_groups``, ``divide_sm``, ``adjust_stream_groups``, sgl-kernel's stream checks).
- ``standard@b875545`` (sgl-project/sglang b8755452 ``pdmux_context.py``): the loader checks only
  ``sm_group_num`` and the entry count, and that ``overlap_decode_full_sm`` comes with manual_divisions;
  at start-up an overlay prefill_sm must lie strictly inside (0, device SMs), an exclusive entry must fit
  the device (prefill + decode <= SMs); the automatic split is 0.5.23's (Blackwell unsupported).
- ``overlay@2126b0b`` (Li-brua/sglang 2126b0b7 ``pdmux_context.py``): the strict loader (entries of
  three, prefill_sm > 0, decode_sm > 0, or >= 0 with the overlay, thresholds >= 0 and strictly
  increasing, budget and divisor > 0; ``manual_divisions: null`` fails iterating it); at start-up an overlay
  prefill_sm below the device's SMs, an exclusive entry using every SM; the rewritten ``divide_sm``.

- ``main@2260e61`` (sgl-project/sglang main at 2260e612): 0.5.23's loader, levels and start-up checks (its
  ``pdmux_context.py`` is 0.5.23's), but ``Scheduler.init_pdmux`` raises AttributeError on ``self.gpu_id``
  right after loading the YAML: a file its loader takes is refused at start-up, whatever it holds
  (sgl-project/sglang#37714).
- ``dsv41@a64f33f`` (sgl-project/sglang a64f33f0): its ``pdmux_context.py`` was not read, so no verdict
  (``accepted`` None); its ``multiplexing_mixin.py`` rules (the layer cap, the group-1 fallback) are used
  where pdmux plans with it (:func:`layer_cap`, :func:`plan_check`).

The first three then create each exclusive level with sgl-kernel's ``create_greenctx_stream_by_value``
(both counts > 0, their sum within the device); with the overlay, the pair ``(prefill, SMs - prefill)``.
Structural problems no SGLang can read (a string where a count goes, an entry that is not a list) are
refused by every revision whose loader was read. Units: SMs of one GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..util.errors import Finding, InputError
from . import pdmux_config as pc
from . import split_levels
from .revisions import DEFAULT_REVISION, Revision, get_revision


@dataclass(frozen=True)
class Verdict:
    """A revision's verdict. ``accepted``: True, False, or None where pdmux has not read the code that
    decides (``stage`` then ``""`` and ``reason`` says which file); ``stage``: ``""`` when accepted, else
    ``"load"``, ``"start-up"`` or ``"run"``; ``reason``: one line (empty when accepted); ``revision``: its
    key."""

    revision: str
    accepted: bool | None
    stage: str
    reason: str

    @property
    def judged(self) -> bool:
        """False where the revision's loader was not read (no verdict)."""
        return self.accepted is not None

    def as_dict(self, revision: Revision) -> dict[str, Any]:
        """JSON form, with the revision's name and where its code was read."""
        return {"sglang": self.revision, "name": revision.name, "source": revision.cite,
                "accepted": self.accepted, "stage": self.stage or None, "reason": self.reason or None}


def _refuse(rev: Revision, stage: str, reason: str) -> Verdict:
    return Verdict(rev.key, False, stage, reason)


def verdict(config: pc.PdmuxConfig, parse_problems: list[pc.Problem], revision: str | Revision | None,
            total_sms: int, cc: tuple[int, int], raw_divisions_null: bool = False,
            cli_sm_group_num: int | None = None) -> Verdict:
    """What SGLang ``revision`` does with ``config`` on a device of ``total_sms`` SMs at capability ``cc``.

    ``parse_problems``: :func:`pdmux_cli.sglang.pdmux_config.parse_config`'s problems (those of rule ``both``
    are what no revision can read). ``raw_divisions_null``: the file wrote ``manual_divisions: null``.
    ``cli_sm_group_num``: the launch flag (0.5.23's decode attention backends; not read for the others).
    """
    rev = get_revision(revision)
    if not rev.loader_read:
        return Verdict(rev.key, None, "", f"pdmux has not read {rev.name}'s pdmux_context.py (the "
                       "loader, start-up checks and divide_sm; not in the stored copy at that commit)")
    if rev.startup_failure is not None:  # main@2260e61: 0.5.23's loader, then init_pdmux's AttributeError
        released = verdict(config, parse_problems, DEFAULT_REVISION, total_sms, cc, raw_divisions_null,
                           cli_sm_group_num)
        if not released.accepted and released.stage == "load":
            return _refuse(rev, "load", f"its pdmux_context.py is 0.5.23's: {released.reason}")
        return _refuse(rev, "start-up", "Scheduler.init_pdmux reads self.gpu_id after loading the YAML: "
                       "AttributeError (sgl-project/sglang#37714), whatever the file holds")
    raw_divisions_null = raw_divisions_null or any(
        p.where == "manual_divisions" and "(null)" in p.message for p in parse_problems)
    if rev.key == DEFAULT_REVISION:
        problems = [p for p in [*parse_problems, *pc.validate(config, total_sms, cc, cli_sm_group_num)]
                    if p.rule in ("old", "both")]
        if problems:
            first = problems[0]
            crashes = "UnboundLocalError" in first.message or "ZeroDivisionError" in first.message
            stage = "run" if crashes else (
                "start-up" if any(w in first.message for w in ("start-up", "sgl-kernel", "raises"))
                else "load")
            return _refuse(rev, stage, f"{first.where}: {first.message}")
        return Verdict(rev.key, True, "", "")
    structural = [p for p in parse_problems if p.rule == "both"]
    if structural:  # an entry of four unpacks at start-up in initialize_stream_groups; the rest fail at load
        stage = "start-up" if "too many values" in structural[0].message and not rev.strict_loader else "load"
        return _refuse(rev, stage, f"{structural[0].where}: {structural[0].message}")
    n = config.sm_group_num
    divisions = config.manual_divisions
    overlap = bool(config.overlap_decode_full_sm) and rev.overlap_decode_full_sm
    if n < 3:
        return _refuse(rev, "load", f"sm_group_num is {n}: 'sm_group_num must be >= 3'")
    if divisions and len(divisions) != n - 2:
        return _refuse(rev, "load",
                       f"manual_divisions has {len(divisions)} entries, sm_group_num {n} needs {n - 2}")
    if overlap and not divisions:
        return _refuse(rev, "load", "overlap_decode_full_sm requires manual_divisions")
    if rev.strict_loader:
        if raw_divisions_null:
            return _refuse(rev, "load", "manual_divisions is null: the loader iterates it (TypeError)")
        previous = None
        for i, (prefill, decode, threshold) in enumerate(divisions):
            if prefill <= 0:
                return _refuse(rev, "load", f"manual_divisions[{i}] prefill_sm must be positive")
            if overlap and decode < 0:
                return _refuse(rev, "load",
                               f"manual_divisions[{i}] decode_sm must be non-negative with the overlay")
            if not overlap and decode <= 0:
                return _refuse(rev, "load", f"manual_divisions[{i}] decode_sm must be positive")
            if threshold < 0:
                return _refuse(rev, "load", f"manual_divisions[{i}] decode_bs_threshold must be non-negative")
            if previous is not None and threshold <= previous:
                return _refuse(rev, "load",
                               "manual_divisions decode_bs_threshold values must be strictly increasing")
            previous = threshold
        if config.split_forward_token_budget <= 0:
            return _refuse(rev, "load", "split_forward_token_budget must be positive")
        if config.decode_bs_divisor <= 0:
            return _refuse(rev, "load", "decode_bs_divisor must be positive")
    # start-up: initialize_stream_groups
    if divisions:
        for i, (prefill, decode, _) in enumerate(divisions):
            if overlap:
                if not prefill < total_sms or (rev.key.startswith("standard") and prefill <= 0):
                    return _refuse(rev, "start-up",
                                   f"manual_divisions[{i}] prefill_sm {prefill} must lie strictly "
                                   f"inside (0, {total_sms}) with overlap_decode_full_sm")
                continue
            if rev.exclusive_sum == "equal" and prefill + decode != total_sms:
                return _refuse(rev, "start-up",
                               f"manual_divisions[{i}] prefill_sm + decode_sm = {prefill + decode} "
                               f"must equal the device's {total_sms} SMs")
            if prefill <= 0 or decode <= 0:
                return _refuse(rev, "start-up",
                               f"manual_divisions[{i}] [{prefill}, {decode}]: sgl-kernel refuses "
                               "non-positive SM counts")
            if prefill + decode > total_sms:
                return _refuse(rev, "start-up",
                               f"manual_divisions[{i}] needs {prefill + decode} SMs, the device has "
                               f"{total_sms}")
    else:
        try:
            automatic_levels(rev, total_sms, cc, n)
        except InputError as exc:
            return _refuse(rev, "start-up", f"manual_divisions is empty and the automatic split fails: {exc}")
        if config.decode_bs_divisor <= 0:
            return _refuse(rev, "run", "decode_bs_divisor 0: the linear level rule divides by it "
                           "(ZeroDivisionError at the first prefill beside decode)")
    return Verdict(rev.key, True, "", "")


def automatic_levels(revision: str | Revision | None, total_sms: int, cc: tuple[int, int],
                     sm_group_num: int) -> list[split_levels.Split]:
    """The revision's automatic split levels (``divide_sm``), largest prefill first, SMs.

    ``"release"``: :func:`pdmux_cli.sglang.split_levels.divide_sm` (0.5.23's, Blackwell refused).
    ``"rewritten"`` (Li-brua/sglang 2126b0b7): candidates from the minimum to ``total - minimum`` in steps of
    the granularity with decode >= 16 (no prefill-half rule; (8, 8) for every major >= 9); one level takes
    the largest candidate; more candidates than levels are sampled at ``round(i * (len - 1) / (g - 1))``
    (both ends kept); fewer are all kept. Raises :class:`InputError` where the code raises.
    """
    rev = get_revision(revision)
    levels = sm_group_num - 2
    if rev.divide_sm == "not read":
        raise InputError(f"{rev.name}'s automatic split (divide_sm, in its pdmux_context.py) is not known: "
                         "pdmux has not read that file; give manual_divisions")
    if rev.divide_sm == "release":
        return split_levels.divide_sm(total_sms, cc[0], levels, cc[1])
    major, minor = cc
    if major < 6:
        raise InputError(f"Unsupported compute capability: {major}.{minor}")
    minimum, multiple = (8, 8) if major >= 9 else split_levels.SGLANG_SM_CONSTRAINTS[major]
    cand = [x for x in range(minimum, total_sms - minimum + 1, multiple)
            if total_sms - x >= split_levels.MIN_DECODE_SMS]
    if not cand:
        raise InputError(f"No valid partitions found for total SMs {total_sms}")
    if levels == 1:
        chosen = [cand[-1]]
    elif len(cand) > levels:
        chosen = [cand[round(i * (len(cand) - 1) / (levels - 1))] for i in range(levels)]
    else:
        chosen = cand
    return [split_levels.Split(x, total_sms - x) for x in reversed(chosen)]


def verdicts(config: pc.PdmuxConfig, parse_problems: list[pc.Problem], total_sms: int, cc: tuple[int, int],
             raw_divisions_null: bool = False, cli_sm_group_num: int | None = None) -> list[Verdict]:
    """:func:`verdict` for every revision in :data:`pdmux_cli.sglang.revisions.REVISIONS`, in order."""
    from .revisions import REVISIONS

    return [verdict(config, parse_problems, key, total_sms, cc, raw_divisions_null, cli_sm_group_num)
            for key in REVISIONS]


def planning_refusal(config: pc.PdmuxConfig, parse_problems: list[pc.Problem],
                     revision: str | Revision | None, total_sms: int, cc: tuple[int, int]) -> str | None:
    """Why estimate/splits/simulate cannot plan ``config`` under ``revision`` (one line), or None.

    The revision's own refusal (:func:`verdict`), or, where it accepts ``overlap_decode_full_sm: true``,
    that pdmux's cost model has no overlaid partitions (decode on every SM beside a capped prefill). A
    revision that fails to start whatever the file (``main@2260e61``) is judged by the rules it shares with
    0.5.23, the failure being said by :func:`revision_findings`; one whose loader was not read plans only a
    file with manual_divisions.
    """
    rev = get_revision(revision)
    if rev.startup_failure is not None:  # said as a note (revision_findings): judge the file as if it started
        rev = get_revision(DEFAULT_REVISION)
    result = verdict(config, parse_problems, rev, total_sms, cc)
    if not result.judged and not config.manual_divisions:
        return f"{result.reason}; give manual_divisions"
    if result.judged and not result.accepted:
        return f"{rev.name} refuses it ({result.stage}): {result.reason}"
    if config.overlap_decode_full_sm and rev.overlap_decode_full_sm:
        return (f"overlap_decode_full_sm: true runs decode on the whole device beside a capped prefill under "
                f"{rev.key}, which pdmux's cost model does not time (it splits SMs); 'pdmux check-config "
                f"--sglang {rev.key}' checks the file")
    return None


def layer_cap(revision: str | Revision | None, config: pc.PdmuxConfig | None) -> int:
    """The cap on prefill layers per round that ``revision`` applies for ``config`` (0: none).

    ``max_split_forward_layers`` from the YAML where the revision reads the key (sgl-project/sglang a64f33f0
    ``multiplexing_mixin.py`` ``_get_split_forward_count``: while decode work exists a round submits
    ``min(max(1, budget // prefill tokens), max_split_forward_layers, remaining layers)``; 0 keeps the
    token-budget rule); 0 for every other revision, whose loader ignores the key.
    """
    rev = get_revision(revision)
    if not rev.max_split_forward_layers or config is None:
        return 0
    return max(0, config.max_split_forward_layers or 0)


def revision_findings(revision: str | Revision | None, tp: int = 1) -> list[Finding]:
    """What every planning command says when ``revision`` is chosen (empty for 0.5.23), as findings
    (``sglang.revision.*``; :mod:`pdmux_cli.messages` words them): its known start-up failure, what was not
    read of its code, and, with ``tp > 1``, what its code requires for pdmux with tensor parallelism
    (:attr:`Revision.tp_launch`, :attr:`Revision.tp_requires`)."""
    rev = get_revision(revision)
    found = []
    if rev.startup_failure:
        found.append(
            Finding(
                "sglang.revision.startup_failure",
                {"revision": rev.key, "failure": rev.startup_failure},
                "sglang",
            )
        )
    if not rev.loader_read:
        found.append(
            Finding(
                "sglang.revision.loader_not_read", {"revision": rev.key, "commit": rev.commit[:8]}, "sglang"
            )
        )
    if tp > 1 and (rev.tp_launch or rev.tp_requires):
        found.append(
            Finding(
                "sglang.revision.tp",
                {
                    "revision": rev.key,
                    "tp": tp,
                    "launch_env": list(rev.tp_launch),
                    "requires": rev.tp_requires,
                },
                "tp",
            )
        )
    return found


def plan_check(revision: str | Revision | None, config: pc.PdmuxConfig | None) -> None:
    """Raise :class:`InputError` (one line) where pdmux cannot plan ``config`` under ``revision``: a revision
    whose ``divide_sm`` was not read needs manual_divisions (``config`` None: SGLang's automatic split)."""
    rev = get_revision(revision)
    if rev.divide_sm == "not read" and not (config is not None and config.manual_divisions):
        raise InputError(
            "{flag.sglang} {revision}: its automatic split (divide_sm, in pdmux_context.py) was not "
            "read: give a pdmux config with manual_divisions",
            param="sglang",
            values={"revision": rev.key},
        )
