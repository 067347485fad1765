"""``--tune``: search pdmux YAML knobs for the best SLO attainment on a trace (ties: goodput).

The search space (every candidate is a :class:`~pdmux_cli.sglang.pdmux_config.PdmuxConfig` that passes
:func:`pdmux_cli.sglang.pdmux_config.validate` for the device; the others are skipped and counted):

- SGLang's automatic levels for each ``sm_group_num`` that gives a distinct set of levels (3 up to
  the number of candidate splits + 2), times each ``decode_bs_divisor`` (the linear level rule; one
  divisor when there is a single level). On GPUs where SGLang's automatic split raises (Blackwell),
  the same levels are written as manual_divisions with the thresholds that reproduce the rule;
- one fixed split per candidate level (manual_divisions with a single ``[prefill, decode, 0]``),
  i.e. the level used whatever the decode batch;
- each of those times each ``split_forward_token_budget``;
- after them, SLO levels (:mod:`pdmux_cli.planning.slo_levels`, ``pdmux gen-config --slo-itl``) for the ITL
  SLO times each of :data:`DEFAULT_SLO_MARGINS` (levels sized for ``0.9 x`` the SLO leave room for what the
  cost model and the trace's context distribution miss), at the trace's contexts, times each budget;
- where the SGLang revision caps layers per round (``max_split_forward_layers``, sgl-project/sglang
  a64f33f0 ``multiplexing_mixin.py``; ``layer_caps``), the winner of the above again with each cap of
  :data:`DEFAULT_LAYER_CAPS` (a cap only shortens a round that the budget rule makes longer, so it is
  searched on the best budget and levels rather than multiplying every candidate).

Under a revision whose ``divide_sm`` was not read (``manual_only``) SGLang's automatic levels are written as
manual_divisions, as on Blackwell; with ``threshold_fallback`` a decode batch under every threshold takes
group 1, as those revisions' code does, instead of the 0.5.23 crash.

SGLang's defaults (``sm_group_num 8``, divisor 36, budget 65536) are always among the candidates.
The same trace also runs through SGLang's other schedules, ``chunked`` at SGLang's default chunk size
for the GPU and ``mixed-chunk 512`` (:attr:`TuneResult.schedules`), so the result says whether
``--enable-pdmux`` is worth turning on at all (:meth:`TuneResult.verdict`).
Candidates are evaluated in parallel (one process per core, :class:`concurrent.futures.ProcessPoolExecutor`);
the simulation has no randomness, and ties are broken by a fixed order (SGLang's defaults first,
then candidate order), so the result is the same for any number of workers. A candidate whose level,
crash and layers-a-round choices agree with a finished run's at every decode batch and prefill that run
met would run the same rounds (:func:`pdmux_cli.simulate.schedulers.pdmux_choices`): it takes that run's
figures instead of being simulated (on the code trace 59 simulations for 104 candidates and schedules, with
one worker or two: a candidate waits while a run near it in the list is in flight, :func:`_next_apart`).
SGLang's other schedules run on the workers the candidates' last runs and the overload search
(:func:`overload_note`: a chain of runs, one at a time) leave idle, the rest after it
(:class:`~pdmux_cli.simulate.executors.Backfill`).
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from ..multigpu.disaggregation import Layout, check_dp_value, check_load_balance_method
from ..sglang import pdmux_config as pc
from ..sglang import split_levels
from ..util.errors import Finding, InputError
from .engine import Setup
from .executors import Backfill, Executor
from . import pool
from .capacity import check_slos
from .metrics import ttft_quarters
from .runner import simulate_metrics
from .schedulers import ChunkedPolicy, MixedChunkPolicy, PdmuxPolicy, pdmux_choices
from .traces import Trace

#: Default ``decode_bs_divisor`` values searched.
DEFAULT_DIVISORS = (12, 24, 36, 48, 72)
#: Default ``split_forward_token_budget`` values searched (tokens).
DEFAULT_BUDGETS = (4096, 16384, 65536)
#: Default margins on the ITL SLO that SLO levels are sized for (``1.0``: the SLO itself).
DEFAULT_SLO_MARGINS = (1.0, 0.9, 0.8)
#: The margins ``--slo-margins`` takes: above 0, at most this (a looser target than the SLO).
MAX_SLO_MARGIN = 2.0
#: ``max_split_forward_layers`` values tried on the winner where the revision reads the key (layers per
#: round; the runbooks of the GLM-5.3/DeepSeek-V4 line use 1 and 2, 0 is the token-budget rule alone).
DEFAULT_LAYER_CAPS = (1, 2, 4, 8)


@dataclass(frozen=True)
class Candidate:
    """One config to try and a short description of it."""

    config: pc.PdmuxConfig
    description: str


@dataclass(frozen=True)
class TuneRow:
    """One evaluated candidate: SLO attainment (share), goodput (req/s), p99 TTFT and ITL (ms), how
    often older SGLang would crash choosing a level with it, and the median TTFT (ms) of the first and
    last quarter of the requests (:func:`.metrics.ttft_quarters`: a growing queue)."""

    index: int
    candidate: Candidate
    slo_attainment: float
    goodput_rps: float
    ttft_p99_ms: float
    itl_p99_ms: float
    older_sglang_crash_rounds: int
    ttft_quarters_ms: tuple[float, float] = (math.nan, math.nan)


@dataclass(frozen=True)
class ScheduleRow:
    """One of SGLang's other schedules on the same trace: its label, SLO attainment (share), goodput
    (req/s), p99 TTFT and ITL (ms)."""

    label: str
    slo_attainment: float
    goodput_rps: float
    ttft_p99_ms: float
    itl_p99_ms: float


@dataclass(frozen=True)
class TuneResult:
    """All rows in candidate order, the winner's index, SGLang's defaults' index (or ``None``), how
    many generated configs were skipped as invalid for the device, and SGLang's other schedules on the
    same trace (``schedules``). ``gpus``, ``layout``, ``router``: the GPUs every config and schedule
    ran on (``dp x tp``), how (``"DP 2 x TP 1"``) and the load-balance method (``""`` for one server)."""

    rows: list[TuneRow]
    best: int
    baseline: int | None
    skipped: int
    workers: int
    notes: list[Finding | str] = field(default_factory=list)
    schedules: list[ScheduleRow] = field(default_factory=list)
    gpus: int = 1
    layout: Layout = field(default_factory=Layout)
    router: str = ""
    intervals: bool = False

    @property
    def best_row(self) -> TuneRow:
        """The winning row."""
        return self.rows[self.best]

    def verdict_finding(self) -> Finding:
        """Does the best pdmux config serve more requests within the SLO than SGLang's other schedules
        (attainment, then goodput; within :data:`VERDICT_GOODPUT_TIE` of each other, a tie)? As data (codes
        ``tune.verdict.*``: ``best_only`` without schedules, else ``tie``, ``pdmux`` or ``keep``; with
        ``intervals`` (the roofline model's measured error), ``too_close`` where the goodputs' ratio is inside
        the error of that ratio, :func:`pdmux_cli.costmodel.uncertainty.compare`, and the comparison in the
        values otherwise)."""
        best = self.best_row
        if not self.schedules:
            return Finding("tune.verdict.best_only", {"config": best.candidate.description})
        rival = max(self.schedules, key=lambda r: (r.slo_attainment, _round_goodput(r.goodput_rps)))
        values = {
            "config": best.candidate.description,
            "attainment": best.slo_attainment,
            "goodput_rps": best.goodput_rps,
            "rival": rival.label,
            "rival_attainment": rival.slo_attainment,
            "rival_goodput_rps": rival.goodput_rps,
        }
        if best.slo_attainment == rival.slo_attainment and math.isclose(
                best.goodput_rps, rival.goodput_rps, rel_tol=VERDICT_GOODPUT_TIE):
            return Finding("tune.verdict.tie", values)
        if self.intervals and best.goodput_rps > 0 and rival.goodput_rps > 0:
            # how sure: the goodputs' ratio against pdmux's error on same-server pairs of public runs
            from ..costmodel.uncertainty import compare
            from .capacity import COMPARED_FIGURES

            sure = compare(best.goodput_rps, rival.goodput_rps, COMPARED_FIGURES)
            values["comparison"] = sure.to_dict()
            if sure.too_close:
                return Finding("tune.verdict.too_close", values)
        if (best.slo_attainment, best.goodput_rps) > (rival.slo_attainment, rival.goodput_rps):
            return Finding("tune.verdict.pdmux", values)
        return Finding("tune.verdict.keep", values)

    def verdict(self) -> str:
        """:meth:`verdict_finding` as its line (:mod:`pdmux_cli.messages`)."""
        from ..messages import render

        return render(self.verdict_finding())

    def ranked(self) -> list[TuneRow]:
        """Rows best first: attainment, then goodput, then SGLang's defaults, then candidate order."""
        return sorted(self.rows, key=lambda r: _rank_key(r, self.baseline))


#: Goodputs equal to this many significant digits tie: they differ by float noise in the last
#: finish time (seen: 5.5277145 vs 5.5277225 req/s), and a tie goes to SGLang's defaults.
GOODPUT_DIGITS = 4


#: Goodputs within this share of each other, at equal SLO attainment, are a tie for the verdict: the
#: difference is when the last request drains, not what the GPU serves (seen: 1.74 vs 1.74 req/s).
VERDICT_GOODPUT_TIE = 0.01


def _round_goodput(goodput: float) -> float:
    return float(f"{goodput:.{GOODPUT_DIGITS}g}") if math.isfinite(goodput) else goodput


def _rank_key(row: TuneRow, baseline: int | None) -> tuple:
    """Best first: higher SLO attainment (an exact ratio of counts), higher goodput to
    :data:`GOODPUT_DIGITS` significant digits, SGLang's defaults on a tie, earlier candidate."""
    return (-row.slo_attainment, -_round_goodput(row.goodput_rps), row.index != baseline, row.index)


def _auto_description(groups: Sequence, sm_group_num: int, divisor: int | None, budget: int,
                      manual: bool) -> str:
    rule = f"div {divisor}" if divisor is not None else f"one level {groups[1][0]}/{groups[1][1]}"
    how = "manual" if manual else "auto"
    return f"{how}, {sm_group_num} groups, {rule}, budget {budget}"


def levels_text(config: pc.PdmuxConfig, total_sms: int, cc: tuple[int, int]) -> str:
    """``"112/20 104/28 ..."``: the split levels (prefill/decode SMs) a config gives on a device."""
    plan = split_levels.plan_groups(total_sms, cc, config.sm_group_num, config.manual_divisions or None)
    return " ".join(f"{p}/{d}" for p, d in plan.groups[1:-1])


def candidates(
    total_sms: int,
    cc: tuple[int, int],
    sm_group_nums: Sequence[int] | None = None,
    divisors: Sequence[int] = DEFAULT_DIVISORS,
    budgets: Sequence[int] = DEFAULT_BUDGETS,
    single_levels: bool = True,
    manual_only: bool = False,
) -> tuple[list[Candidate], int]:
    """The configs to try on a device of ``total_sms`` SMs and capability ``cc`` (module docstring).

    ``sm_group_nums``: ``None`` for every value with distinct levels. ``manual_only``: write SGLang's
    automatic levels as manual_divisions (a revision whose divide_sm was not read). Returns ``(candidates,
    skipped)``, skipped = generated configs that fail :func:`pdmux_cli.sglang.pdmux_config.validate`. Raises
    :class:`InputError` when no valid candidate remains or an argument is out of range.
    """
    for name, values in (("divisors", divisors), ("token budgets", budgets)):
        if not values or any(v < 1 for v in values):
            raise InputError(f"tune: {name} must be integers >= 1, got {list(values)}")
    major = cc[0]
    automatic = major in split_levels.SGLANG_SM_CONSTRAINTS
    min_part, multiple = (split_levels.SGLANG_SM_CONSTRAINTS[major] if automatic
                          else split_levels.cuda_sm_granularity(major))
    cands = split_levels.candidate_prefill_sms(total_sms, min_part, multiple)
    if not cands:
        raise InputError(f"no valid SM split for {total_sms} SMs at compute capability {cc[0]}.{cc[1]}: "
                         "nothing to tune")
    if sm_group_nums is None:
        sm_group_nums = range(3, len(cands) + 3)
    elif any(g < 3 for g in sm_group_nums):
        raise InputError(f"tune: sm_group_num values must be >= 3, got {list(sm_group_nums)}")

    out: list[Candidate] = []
    seen: set = set()
    skipped = 0

    def add(config: pc.PdmuxConfig, description: str, key: tuple) -> None:
        nonlocal skipped
        if key in seen:
            return
        seen.add(key)
        if pc.validate(config, total_sms, cc):
            skipped += 1
            return
        out.append(Candidate(config, description))

    for budget in budgets:
        plans: list[tuple[int, split_levels.GroupPlan]] = []
        for g in sorted(set(sm_group_nums)):
            plans.append((g, split_levels.plan_groups(total_sms, cc, g)))
        if split_levels.DEFAULT_SM_GROUP_NUM not in set(sm_group_nums):
            plans.append((split_levels.DEFAULT_SM_GROUP_NUM,
                          split_levels.plan_groups(total_sms, cc, split_levels.DEFAULT_SM_GROUP_NUM)))
        for g, plan in plans:
            groups = tuple(tuple(s) for s in plan.groups)
            levels = len(groups) - 2
            divs = list(divisors) if levels > 1 else [split_levels.DEFAULT_DECODE_BS_DIVISOR]
            if g == split_levels.DEFAULT_SM_GROUP_NUM and split_levels.DEFAULT_DECODE_BS_DIVISOR not in divs:
                divs.append(split_levels.DEFAULT_DECODE_BS_DIVISOR)
            for divisor in divs:
                manual = manual_only or plan.source != "sglang-auto"
                if manual and divisor < levels:
                    skipped += 1
                    continue
                config = pc.config_from_plan(plan, g, budget, divisor, manual=manual)
                key = (groups, divisor if levels > 1 else None, budget)
                add(config, _auto_description(groups, g, divisor if levels > 1 else None, budget, manual),
                    key)
        if single_levels:
            for p in reversed(cands):
                d = total_sms - p
                groups = ((total_sms, 0), (p, d), (0, total_sms))
                config = pc.PdmuxConfig(sm_group_num=3, manual_divisions=((p, d, 0),),
                                        split_forward_token_budget=budget)
                add(config, f"fixed split {p}/{d}, budget {budget}", (groups, None, budget))
    if not out:
        raise InputError(f"tune: none of the {skipped} generated configs is valid for this device")
    return out, skipped


def slo_candidates(
    trace: Trace,
    setup: Setup,
    slo_itl_ms: float,
    margins: Sequence[float] = DEFAULT_SLO_MARGINS,
    budgets: Sequence[int] = DEFAULT_BUDGETS,
) -> tuple[list[Candidate], list[Finding]]:
    """SLO levels (:func:`pdmux_cli.planning.slo_levels.levels_for_setup`) for ``margin x slo_itl_ms`` at
    the trace's decode-step contexts (:func:`pdmux_cli.planning.slo_levels.trace_context`), one candidate per
    margin and budget, at most ``sm_group_num`` 8 (SGLang's default: 6 levels); margins giving the same levels
    are tried once. Returns ``(candidates, notes)``: a finding (``tune.no_slo_levels``) instead of
    candidates where no level can be built (no request of the trace decodes). Raises :class:`InputError`
    for a margin outside ``(0, MAX_SLO_MARGIN]``."""
    from ..planning import slo_levels as sl

    for margin in margins:
        if not (isinstance(margin, (int, float)) and math.isfinite(margin) and 0 < margin <= MAX_SLO_MARGIN):
            raise InputError(
                "{flag.slo_margins} must be numbers above 0 and at most {max_margin:g} (shares of the "
                "ITL SLO), got {margin}",
                param="slo_margins",
                values={"max_margin": MAX_SLO_MARGIN, "margin": margin},
            )
    if not margins:
        return [], []
    try:
        context = sl.trace_context(trace.prompt_tokens, trace.output_tokens, sl.model_window(setup.model))
    except InputError as exc:
        return [], [Finding("tune.no_slo_levels", {"reason": str(exc)}, "slo_margins")]
    out: list[Candidate] = []
    seen: set = set()
    for margin in margins:
        levels = sl.levels_for_setup(setup, context, margin * slo_itl_ms)
        for budget in budgets:
            config = levels.config(budget)
            if config in seen or pc.validate(config, setup.total_sms, setup.compute_capability):
                continue
            seen.add(config)
            share = "" if margin == 1 else f" ({margin:g} x {slo_itl_ms:g})"
            out.append(Candidate(config, f"SLO levels, ITL <= {margin * slo_itl_ms:.3g} ms{share}, "
                                         f"{len(levels.levels)} levels, budget {budget}"))
    return out, []


def with_layer_caps(candidate: Candidate, caps: Sequence[int]) -> list[Candidate]:
    """``candidate`` with each ``max_split_forward_layers`` of ``caps`` (> 0, once each), described as
    such."""
    from dataclasses import replace

    if any(isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in caps):
        raise InputError("tune: layer caps must be integers >= 1, got {caps}", param="layer_caps",
                         values={"caps": list(caps)})
    return [Candidate(replace(candidate.config, max_split_forward_layers=cap),
                      f"{candidate.description}, max {cap} layer(s) per round")
                      for cap in dict.fromkeys(caps)]


def pdmux_policy(config: pc.PdmuxConfig, capped: bool = False,
                 threshold_fallback: bool = False) -> PdmuxPolicy:
    """The simulated pdmux for a candidate: its YAML's ``max_split_forward_layers`` applied where ``capped``
    (the revision reads the key), the group-1 fallback where ``threshold_fallback``."""
    cap = (config.max_split_forward_layers or 0) if capped else 0
    return PdmuxPolicy(config, unreleased_fallback=threshold_fallback, max_split_forward_layers=cap)


def _evaluate(shared: tuple, policy) -> tuple[float, float, float, float, int, tuple[float, float]]:
    """One candidate or schedule (a task of :mod:`.executors`): ``shared`` is ``(trace, setup, slo_ttft_ms,
    slo_itl_ms, dp, load-balance method, max_steps)``; its row's figures. Streamed
    (:func:`.runner.simulate_metrics`)."""
    trace, setup, slo_ttft_ms, slo_itl_ms, dp, method, max_steps = shared
    m = simulate_metrics(trace, setup, policy, slo_ttft_ms, slo_itl_ms, dp=dp, load_balance_method=method,
                         max_steps=max_steps, itl_cdf=False)  # a row reads the p99, draws no CDF
    return (m.slo_attainment, m.goodput_rps, m.ttft_ms["p99"], m.itl_ms["p99"],
            int(m.counters.get("older_sglang_crash_rounds", 0)), ttft_quarters(m))


def _evaluate_recorded(shared: tuple, policy) -> tuple[tuple, dict | None]:
    """:func:`_evaluate`, and for a pdmux policy the points at which its run read the knobs
    (:attr:`.schedulers.PdmuxPolicy.record`; ``None`` for other schedules)."""
    if not isinstance(policy, PdmuxPolicy):
        return _evaluate(shared, policy), None
    policy = replace(policy, record={})
    return _evaluate(shared, policy), policy.record


def _same_run(policy, setup: Setup, runs: list) -> tuple | None:
    """The outcome of a run in ``runs`` that ``policy`` would repeat (:func:`.schedulers.pdmux_choices`:
    its choices at the points that run read equal the run's), else ``None``. ``runs``: ``(batches, tokens,
    choices there, outcome)`` of the pdmux runs done."""
    if not isinstance(policy, PdmuxPolicy) or not runs:
        return None
    try:
        policy.check()  # (a budget or divisor below 1: its run refuses it)
        choices = pdmux_choices(policy, setup)
        for batches, tokens, chosen, outcome in runs:
            if choices(batches, tokens) == chosen:
                return outcome
    except InputError:  # knobs its run refuses: nothing to share
        return None
    return None


#: Positions in tune's list within which a run in flight keeps a candidate waiting (:func:`_next_apart`): on
#: the code trace with two workers the runs repeated side by side were 1 and 2 apart (63 simulations for 59
#: distinct runs; 59 with this window, 60 with 1).
NEIGHBOURS = 2


def _next_apart(queue: deque, flying: set[int]) -> int:
    """The first index in ``queue`` (taken out of it) more than :data:`NEIGHBOURS` places from each of the
    ``flying`` runs, else the first: a neighbour is often alike (the same levels, another divisor), and a run
    started beside one it repeats is simulated twice (:func:`_same_run` matches finished runs only). Only the
    order changes: no result does."""
    for k, i in enumerate(queue):
        if all(abs(i - j) > NEIGHBOURS for j in flying):
            del queue[k]
            return i
    return queue.popleft()


def _run_sharing(ex: Executor, shared: object, policies: Sequence, whats: Sequence[str],
                 tick: Callable[[int, tuple], None], setup: Setup, runs: list) -> list[tuple]:
    """:func:`_evaluate` for each of ``policies`` (their outcomes in order), as many at a time as the
    executor has workers, a pdmux policy that would repeat a run already done (:func:`_same_run`) taking
    that run's outcome instead of being simulated: the same figures (the runs are deterministic), whatever
    the order runs finish in. ``runs``: the pdmux runs done (:func:`_same_run`), extended here. ``tick(index,
    outcome)`` after each policy."""
    out: list = [None] * len(policies)
    # the workers take contiguous blocks of the list side by side: neighbours (often alike: the same levels,
    # another budget) run one after the other, so the later can take the earlier's figures
    workers = max(1, ex.workers)
    size = max(1, -(-len(policies) // workers))
    blocks = [range(k, min(k + size, len(policies))) for k in range(0, len(policies), size)]
    queue = deque(i for group in itertools.zip_longest(*blocks) for i in group if i is not None)
    flying: set[int] = set()
    while queue or flying:
        while queue and len(flying) < workers:
            i = _next_apart(queue, flying)
            outcome = _same_run(policies[i], setup, runs)
            if outcome is None:
                ex.submit(_evaluate_recorded, shared, policies[i], whats[i], tag=i)
                flying.add(i)
            else:
                out[i] = outcome
                tick(i, outcome)
        if not flying:
            break
        job = ex.next_done()
        i = job.tag
        flying.discard(i)
        out[i], record = job.result()
        if record is not None:
            batches, tokens = sorted(record.get("batches", ())), sorted(record.get("tokens", ()))
            runs.append((batches, tokens, pdmux_choices(policies[i], setup)(batches, tokens), out[i]))
        tick(i, out[i])
    return out


#: SLO attainment below which tune looks for an overloaded GPU (capacity's default target).
OVERLOAD_TARGET = 0.99
#: The last quarter's median TTFT over the first quarter's from which the queue counts as growing.
QUEUE_GROWTH = 2.0


def overload_note(trace: Trace, setup: Setup, row: TuneRow, slo_ttft_ms: float, slo_itl_ms: float,
                  workers: int | None = None, dp: int = 1, load_balance_method: str = "round_robin",
                  policy: PdmuxPolicy | None = None, executor: str | Executor = "local",
                  max_steps: int | None = None) -> Finding | None:
    """When ``row`` misses :data:`OVERLOAD_TARGET` because requests queue, a finding saying so and the
    rate at which this config would meet the target (:func:`.capacity.capacity`; codes ``tune.overload.*``:
    ``offline``, ``growing``, ``bursts``); else ``None``.

    Requests queue when the last quarter of them waits :data:`QUEUE_GROWTH` times longer for its first
    token than the first quarter, and longer than the SLO (the queue grows: the trace's mean rate is
    more than the GPU serves), or when the p99 TTFT is past the SLO and :data:`QUEUE_GROWTH` times the
    longest prompt's prefill alone on the whole GPU (bursts queue up: TTFT is mostly waiting). ``dp``:
    replicas behind a router (``load_balance_method``), as the row was simulated; ``policy``: the row's
    simulated pdmux (:func:`pdmux_policy`; default: its config under 0.5.23's rules); ``executor`` (a kind,
    or one already open), ``max_steps``: where and with what step budget the capacity search runs. The
    search stops a run once its misses settle that it misses the target (``capacity(..., stop_early=True)``:
    the same rate; the finding counts them, ``stopped_runs`` of ``runs``)."""
    if row.slo_attainment >= OVERLOAD_TARGET:
        return None
    first, last = row.ttft_quarters_ms
    growing = last > slo_ttft_ms and last >= QUEUE_GROWTH * first
    longest_ms = setup.step_model.prefill_s(setup.total_sms, [(max(trace.prompt_tokens), 0)]) * 1e3
    bursts = row.ttft_p99_ms > slo_ttft_ms and row.ttft_p99_ms >= QUEUE_GROWTH * longest_ms
    if not (growing or bursts):
        return None
    if len(trace) < 2 or trace.mean_qps <= 0:  # an offline batch: no rate to lower
        return Finding("tune.overload.offline", {"requests": len(trace), "ttft_p99_ms": row.ttft_p99_ms})
    from .capacity import capacity

    sized = capacity(trace, setup, [policy or PdmuxPolicy(row.candidate.config)], slo_ttft_ms, slo_itl_ms,
                     target=OVERLOAD_TARGET, workers=workers, dp=dp, load_balance_method=load_balance_method,
                     executor=executor, max_steps=max_steps, intervals=False, stop_early=True).policies[0]
    values = {"gpus": dp * setup.tp, "trace_rps": trace.mean_qps, "target": OVERLOAD_TARGET,
              "sized_rps": sized.max_rate_rps, "runs": len(sized.points),
              "stopped_runs": sum(1 for p in sized.points if p.stopped)}
    if growing:  # the last quarter's median wait may be infinite: never a first token
        return Finding(
            "tune.overload.growing", {**values, "last_quarter_ttft_ms": last, "first_quarter_ttft_ms": first}
        )
    return Finding(
        "tune.overload.bursts", {**values, "ttft_p99_ms": row.ttft_p99_ms, "longest_prefill_ms": longest_ms}
    )


def _default_row(rows: Sequence[TuneRow]) -> int | None:
    """The index of the row of SGLang's default pdmux config (``None`` if none was tried); on Blackwell the
    defaults written as manual_divisions."""
    default = pc.PdmuxConfig()
    baseline = next((r.index for r in rows if r.candidate.config == default), None)
    if baseline is None:  # Blackwell: the defaults written as manual_divisions
        baseline = next((r.index for r in rows
                         if r.candidate.config.sm_group_num == split_levels.DEFAULT_SM_GROUP_NUM
                         and r.candidate.config.decode_bs_divisor == split_levels.DEFAULT_DECODE_BS_DIVISOR
                         and r.candidate.config.split_forward_token_budget
                         == split_levels.DEFAULT_SPLIT_FORWARD_TOKEN_BUDGET
                         and r.candidate.description.startswith("manual")), None)
    return baseline


def tune(
    trace: Trace,
    setup: Setup,
    slo_ttft_ms: float,
    slo_itl_ms: float,
    sm_group_nums: Sequence[int] | None = None,
    divisors: Sequence[int] = DEFAULT_DIVISORS,
    budgets: Sequence[int] = DEFAULT_BUDGETS,
    single_levels: bool = True,
    workers: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    schedules: Sequence | None = None,
    dp: int = 1,
    load_balance_method: str = "round_robin",
    slo_margins: Sequence[float] = DEFAULT_SLO_MARGINS,
    layer_caps: Sequence[int] = (),
    manual_only: bool = False,
    threshold_fallback: bool = False,
    executor: str | Executor = "local",
    ray_address: str | None = None,
    max_steps: int | None = None,
) -> TuneResult:
    """Simulate ``trace`` under every candidate pdmux config and pick the best.

    ``slo_ttft_ms``, ``slo_itl_ms``: SLOs in ms (> 0; judged as in :mod:`.metrics`). ``workers``:
    processes (default: the cores available; 1 runs in this process). ``progress(done, total)`` is
    called after each candidate. The winner maximises SLO attainment, then goodput, then comes first
    in candidate order: deterministic. ``schedules``: SGLang's other schedules to compare with (default:
    chunked at SGLang's default size for the GPU and mixed-chunk 512; ``()`` for none). ``dp``: every
    config and schedule runs as that many replicas behind a router (``load_balance_method``).
    ``slo_margins``: the SLO levels tried after the other candidates (:func:`slo_candidates`; ``()`` for
    none). ``layer_caps``: ``max_split_forward_layers`` values tried on the winner (``()``: the revision has
    no cap; :data:`DEFAULT_LAYER_CAPS` where it has); ``manual_only``, ``threshold_fallback``: the revision's
    rules (module docstring). ``executor``: where the simulations run (:mod:`.executors`: ``local``, this
    machine's cores; ``ray``, a Ray cluster at ``ray_address``; or an executor already open); ``workers``
    is then the tasks at a time. ``max_steps``: each simulation's decode-step budget
    (:func:`.engine.step_budget`). Raises :class:`InputError` for non-positive SLOs, a bad ``dp`` or
    method, a bad margin or cap, no valid candidate, or a simulation past its budget (naming the config).
    """
    check_slos(slo_ttft_ms, slo_itl_ms)
    dp = check_dp_value(dp)
    load_balance_method = check_load_balance_method(load_balance_method)
    cands, skipped = candidates(setup.total_sms, setup.compute_capability, sm_group_nums, divisors, budgets,
                                single_levels, manual_only)
    with_layer_caps(cands[0], layer_caps)  # a bad cap is refused before any simulation
    known = {c.config for c in cands}
    slo_cands, slo_notes = slo_candidates(trace, setup, slo_itl_ms, slo_margins, budgets)
    cands += [c for c in slo_cands if c.config not in known]
    from .executors import check_executor, local_workers, using

    local = not isinstance(executor, Executor) and check_executor(executor, ray_address) == "local"
    if schedules is None:
        from ..sglang.server_defaults import default_chunked_prefill_size

        schedules = (ChunkedPolicy(default_chunked_prefill_size(setup.memory_bytes)), MixedChunkPolicy(512))
    capped = bool(layer_caps)

    def policy_of(config: pc.PdmuxConfig) -> PdmuxPolicy:
        return pdmux_policy(config, capped, threshold_fallback)

    policies = [policy_of(c.config) for c in cands]
    whats = [f"pdmux config {c.description}" for c in cands]
    total = len(policies) + len(schedules) + (len(set(layer_caps)) if capped else 0)
    tasks = len(policies) + len(schedules)
    # fewer processes than asked for and than tasks: the machine's cores capped them (executors.local_workers)
    capped_note = (Finding("tune.workers_capped", {"workers": workers, "cores": pool.default_workers()},
                           "workers")
                   if local and workers and local_workers(workers, tasks) < min(workers, tasks) else None)
    done = 0

    def tick(_i: int, _value: tuple) -> None:
        nonlocal done
        done += 1
        if progress:
            progress(done, total)

    # the executor sizes the processes to the cores and the tasks (executors.local_workers)
    with using(executor, workers, tasks, ray_address) as ex:
        shared = ex.share((trace, setup, slo_ttft_ms, slo_itl_ms, dp, load_balance_method, max_steps))
        # SGLang's other schedules on the workers the candidates leave idle (the last runs' tail) and the
        # overload search's chain of runs, one at a time, leaves idle; the rest after it
        beside = Backfill(ex, [(_evaluate, shared, p, f"{p.label} (SGLang, no pdmux)") for p in schedules],
                          lambda _i, o: tick(-1, o))
        outcomes = _run_sharing(beside, shared, policies, whats, tick, setup, runs := [])  # runs: _same_run
        workers = ex.workers
        rows = [TuneRow(i, c, *o) for i, (c, o) in enumerate(zip(cands, outcomes))]
        if capped:  # the layer cap, on the winner so far (module docstring)
            first = min(rows, key=lambda r: _rank_key(r, None))
            extra = with_layer_caps(first.candidate, layer_caps)
            more = _run_sharing(beside, shared, [policy_of(c.config) for c in extra],
                                [f"pdmux config {c.description}" for c in extra], tick, setup, runs)
            rows += [TuneRow(len(rows) + i, c, *o) for i, (c, o) in enumerate(zip(extra, more))]
        baseline = _default_row(rows)
        best = min(rows, key=lambda r: _rank_key(r, baseline)).index
        notes = ([capped_note] if capped_note else []) + slo_notes
        if rows[best].older_sglang_crash_rounds:
            notes.append(Finding("tune.winner_crashes_release"))
        overload = overload_note(
            trace,
            setup,
            rows[best],
            slo_ttft_ms,
            slo_itl_ms,
            workers,
            dp,
            load_balance_method,
            policy_of(rows[best].candidate.config),
            beside,
            max_steps,
        )
        others = [ScheduleRow(policy.label, *o[:4])
                  for policy, o in zip(schedules, beside.drain(), strict=True)]
    if overload:
        notes.append(overload)
    return TuneResult(rows, best, baseline, skipped, workers, notes, others, gpus=dp * setup.tp,
                      layout=Layout(setup.tp, dp), router=load_balance_method if dp > 1 else "",
                      intervals=setup.step_model.has_error_interval)
