"""``pdmux capacity``: the highest request rate each policy sustains within an SLO.

For each policy, the trace is retimed (as ``--qps`` does: inter-arrival times scaled, order and sizes
kept) and simulated at a rate, and the rate is searched for the highest one at which SLO attainment
(TTFT <= SLO and the request's p99 ITL <= SLO, :mod:`.metrics`) stays at or above ``target``:

1. bracket: start at the trace's own mean rate; double while the target holds (or halve while it
   does not), at most :data:`MAX_BRACKET_STEPS` times each way;
2. bisect in log space until the rates that meet and miss the target are within ``tolerance`` of each
   other. The reported rate is the highest one simulated that met the target.

This is how Vidur-Search and DistServe size a deployment (the highest rate meeting an SLO); here the
policies are SGLang 0.5.23's schedules and PD multiplexing on one simulated server of ``setup.tp`` GPUs,
on ``dp`` replicas of it behind a router, or PD disaggregation (a
:class:`~pdmux_cli.simulate.cluster.DisaggPolicy`, its own X + Y instances). The rate is the whole
deployment's (requests/s over all its GPUs); :attr:`PolicyCapacity.per_gpu_rps` divides it by them. SLO
attainment need not fall monotonically with the rate (a burst can line up differently), so the search finds
*a* boundary; every rate simulated is kept in :attr:`PolicyCapacity.points` (the ``--plot`` curve).

The policies' searches run side by side on a process pool, each submitting its next rate as soon
as its last simulation returns; each search depends only on its own results and the simulator has no
randomness, so the result does not depend on the number of workers.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..multigpu.disaggregation import Layout, check_dp_value, check_load_balance_method
from ..util.errors import Finding, InputError
from .engine import Setup
from .executors import Executor, using
from .fold import TargetMissed, select_rank
from .policies import Policy
from .runner import simulate_metrics
from .traces import Trace, reshape

#: The figures whose same-server residual pairs give the error of a ratio of two capacities
#: (:meth:`CapacityResult.comparison`).
COMPARED_FIGURES = ("ttft_ms_p50", "itl_ms_p50", "output_tok_s")

#: Doublings (or halvings) from the trace's own rate before the search gives up bracketing: 2^8 = 256x.
MAX_BRACKET_STEPS = 8


@dataclass(frozen=True)
class RatePoint:
    """One simulation: the rate (requests/s), SLO attainment (share), goodput (requests/s meeting the
    SLO), p99 TTFT and p99 of the requests' p99 ITLs (ms), the requests that never got a token, and
    whether a simulated SGLang 0.5.23 crash stopped the run (a pdmux config with no matching threshold).
    ``stopped``: the run stopped once its misses settled that it misses the target (``capacity(...,
    stop_early=True)``): ``slo_attainment`` is then the most the run could still have reached, and the other
    figures are NaN."""

    rate_rps: float
    slo_attainment: float
    goodput_rps: float
    ttft_p99_ms: float
    itl_p99_ms: float
    unfinished: int = 0
    crashed: bool = False
    attainment_low: float = math.nan
    attainment_high: float = math.nan
    stopped: bool = False

    def attainment(self, which: str) -> float:
        """SLO attainment as simulated (``which`` ``"rate"``), or with every request's TTFT and ITL scaled by
        the upper (``"low"``: the pessimistic end of the interval) or lower (``"high"``) bound of their error
        (:class:`SloScaling`)."""
        return {"rate": self.slo_attainment, "low": self.attainment_low, "high": self.attainment_high}[which]


@dataclass(frozen=True)
class SloScaling:
    """The factors the interval of a capacity scales the simulated TTFT and ITL by (:mod:`pdmux_cli.costmodel.
    uncertainty`'s 80% bounds of ``measured / predicted`` for the TTFT and ITL medians, open loop): a real
    server as slow as the upper bounds (``ttft_high``, ``itl_high``) sustains the ``low`` end of the rate's
    interval, as fast as the lower bounds the ``high`` end. The medians' errors are applied to every request
    (the tails' errors are not measured)."""

    ttft_low: float
    ttft_high: float
    itl_low: float
    itl_high: float

    def slos(self, which: str, slo_ttft_ms: float, slo_itl_ms: float) -> tuple[float, float]:
        """The SLOs that test the scaled latencies against the real ones: ``which`` ``"low"`` or
        ``"high"``."""
        if which == "low":
            return slo_ttft_ms / self.ttft_high, slo_itl_ms / self.itl_high
        return slo_ttft_ms / self.ttft_low, slo_itl_ms / self.itl_low


def slo_scaling(setup: Setup, residuals: Any = None) -> SloScaling | None:
    """The :class:`SloScaling` of ``setup`` (its GPU family, open-loop cells; a calibration's own residuals
    where its serving terms were calibrated); ``None`` for the chapter's cost model or without an interval."""
    from ..costmodel.uncertainty import Regime, figure_interval, gpu_family

    if not setup.step_model.has_error_interval:
        return None
    serving = setup.step_model.serving
    calibration = dict(serving.residuals) if serving.calibrated else None
    regime = Regime("open", math.nan, gpu_family(setup.compute_capability))
    got = [figure_interval(f, 1.0, regime, residuals=residuals, calibration=calibration)[0]
           for f in ("ttft_ms_p50", "itl_ms_p50")]
    if any(b is None for b in got):
        return None
    (t_lo, t_hi), (i_lo, i_hi) = got  # type: ignore[misc]
    return SloScaling(t_lo, t_hi, i_lo, i_hi)


@dataclass(frozen=True)
class PolicyCapacity:
    """One policy's search. ``max_rate_rps``: the highest rate simulated that met the target (0.0 when
    none did); ``at``: that simulation (``None`` when none met it); ``points``: every rate simulated,
    ascending; ``bound``: ``""`` when bracketed, ``"above"`` when the target held at every rate tried
    (the capacity is at least ``max_rate_rps``), ``"below"`` when it held at none. ``config_path``,
    ``sm_group_num``: the pdmux YAML sized and its groups (for the launch line); ``chunk_tokens``: the
    schedule's chunk size (tokens; -1 for prefill-first). ``gpus``, ``layout``, ``router``: the GPUs the
    policy ran on, how (``"DP 2 x TP 1"``, ``"1P1D x TP 1"``) and the load-balance method between its
    servers (``""`` for one server); ``xpyd``: disaggregation's prefill and decode instances.
    ``multiplexes``: the policy is pdmux (:attr:`pdmux_cli.simulate.policies.Policy.multiplexes`);
    ``launch``: SGLang's arguments for one of its servers without ``--tp-size``/``--dp-size``
    (:meth:`pdmux_cli.simulate.policies.Policy.launch_args`; empty for a disaggregation)."""

    label: str
    kind: str
    max_rate_rps: float
    at: RatePoint | None
    points: tuple[RatePoint, ...]
    bound: str = ""
    config_path: str | None = None
    sm_group_num: int | None = None
    chunk_tokens: int = 0
    gpus: int = 1
    layout: Layout = field(default_factory=Layout)
    router: str = ""
    xpyd: tuple[int, int] | None = None
    multiplexes: bool = False
    launch: tuple[str, ...] = ()
    rate_interval: tuple[float, float] | None = None
    interval_bounds: tuple[str, str] = ("", "")

    @property
    def per_gpu_rps(self) -> float:
        """The capacity per GPU the policy ran on, requests/s."""
        return self.max_rate_rps / self.gpus


@dataclass(frozen=True)
class CapacityResult:
    """Every policy's capacity, in the order given, with the search's settings (``dp`` replicas of the
    colocated policies behind ``load_balance_method``)."""

    policies: list[PolicyCapacity]
    target: float
    tolerance: float
    trace_rate_rps: float
    slo_ttft_ms: float
    slo_itl_ms: float
    workers: int
    notes: list[str] = field(default_factory=list)
    tp: int = 1
    dp: int = 1
    load_balance_method: str = "round_robin"

    def best(self, pdmux: bool, gpus: int | None = None) -> PolicyCapacity | None:
        """The pdmux policy (``pdmux=True``) or other schedule with the highest capacity (first on a tie);
        with ``gpus``, among those on that many GPUs if any is (else among all)."""
        mine = [p for p in self.policies if p.multiplexes == pdmux]
        if gpus is not None:
            mine = [p for p in mine if p.gpus == gpus] or mine
        return max(mine, key=lambda p: p.max_rate_rps) if mine else None

    def verdict_finding(self) -> Finding:
        """The verdict as data (codes ``capacity.verdict.*``; :func:`pdmux_cli.messages.render` words it):
        which policy serves more requests within the SLO, by how much, and what to run. Rates are the whole
        deployment's; pdmux is compared with the best other policy on as many GPUs, or, if none is, the best
        of all (``equal_gpus`` false, the rates per GPU given). ``launch``: SGLang's server arguments for the
        winner (a list, unquoted: SGLang 0.5.23's flags with ``--tp-size`` and the data-parallel controller's
        ``--dp-size``/``--load-balance-method``), or for disaggregation ``disagg`` (instances and their
        TP)."""
        pd = self.best(True)
        other = self.best(False, pd.gpus if pd is not None else None)
        if pd is None or other is None:
            only = pd or other
            if only is None:
                return Finding("capacity.verdict.none_simulated")
            return Finding("capacity.verdict.only", {"policy": _policy_values(only)})
        if pd.max_rate_rps <= 0 and other.max_rate_rps <= 0:
            return Finding("capacity.verdict.no_policy_meets", {"target": self.target}, "slo_target")
        values = {
            "pdmux": _policy_values(pd),
            "other": _policy_values(other),
            "equal_gpus": pd.gpus == other.gpus,
        }
        sure = self.comparison(pd, other)
        if sure is not None:
            values["comparison"] = sure.to_dict()
            if sure.too_close:
                return Finding("capacity.verdict.too_close", values)
        if pd.max_rate_rps > other.max_rate_rps:
            gain = pd.max_rate_rps / other.max_rate_rps - 1 if other.max_rate_rps > 0 else None
            return Finding("capacity.verdict.pdmux_serves_more",
                           {**values, "gain": gain, "launch": self._launch(pd)})
        if pd.max_rate_rps == other.max_rate_rps:
            return Finding("capacity.verdict.tie", values)
        if other.xpyd is not None:
            x, y = other.xpyd
            tp = other.gpus // (x + y) if other.gpus % (x + y) == 0 else self.tp
            return Finding("capacity.verdict.disagg_serves_more",
                           {**values, "disagg": {"prefill": x, "decode": y, "tp": tp}})
        return Finding("capacity.verdict.other_serves_more",
                       {**values, "launch": self._launch(other)})

    def comparison(self, a: PolicyCapacity, b: PolicyCapacity) -> Any:
        """How sure ``a``'s capacity against ``b``'s is (:func:`pdmux_cli.costmodel.uncertainty.compare` of
        their rates per GPU, the error of the ratio from same-server pairs of the TTFT, ITL and throughput
        residuals: a capacity is set by those); ``None`` without intervals (the chapter's cost model), where
        either capacity is 0 or only a bound, or they ran on different GPUs (the pairs are one server's)."""
        from ..costmodel.uncertainty import compare

        if (a.rate_interval is None or b.rate_interval is None or a.bound or b.bound or a.gpus != b.gpus
                or a.max_rate_rps <= 0 or b.max_rate_rps <= 0):
            return None
        return compare(a.max_rate_rps, b.max_rate_rps, COMPARED_FIGURES)

    def verdict(self) -> str:
        """:meth:`verdict_finding` as its line (:mod:`pdmux_cli.messages`)."""
        from ..messages import render

        return render(self.verdict_finding())

    def _launch(self, p: PolicyCapacity) -> list[str]:
        """``p``'s server arguments with ``--tp-size`` and the data-parallel controller's flags."""
        return [*p.launch, *(["--tp-size", str(self.tp)] if self.tp > 1 else []), *self._dp_flags()]

    def _dp_flags(self) -> list[str]:
        """SGLang's flags for ``dp`` replicas in one server (its data-parallel controller)."""
        return (
            ["--dp-size", str(self.dp), "--load-balance-method", self.load_balance_method]
            if self.dp > 1
            else []
        )


def _policy_values(p: PolicyCapacity) -> dict[str, Any]:
    """What a verdict says of a policy: label, capacity (and its bound), GPUs and layout."""
    return {
        "label": p.label,
        "max_rate_rps": p.max_rate_rps,
        "bound": p.bound,
        "lowest_rps": p.points[0].rate_rps if p.points else None,
        "gpus": p.gpus,
        "layout": {"tp": p.layout.tp, "dp": p.layout.dp, "xpyd": p.layout.xpyd},
        "per_gpu_rps": p.per_gpu_rps,
    }


def _evaluate(shared: tuple, task: tuple) -> RatePoint:
    """One policy at one rate (a task of :mod:`.executors`): ``shared`` is ``(trace, setup, slo_ttft_ms,
    slo_itl_ms, dp, load-balance method, max_steps)``, ``task`` ``(policy, rate)``. Streamed
    (:func:`.runner.simulate_metrics`)."""
    trace, setup, slo_ttft_ms, slo_itl_ms, dp, method, max_steps, scaling, stop_below = shared
    policy, rate = task
    try:
        m = simulate_metrics(reshape(trace, qps=rate), setup, policy, slo_ttft_ms, slo_itl_ms, dp=dp,
                             load_balance_method=method, max_steps=max_steps, stop_below=stop_below,
                             all_token_itl=False)  # a point reads each request's p99 ITL, not all tokens'
    except TargetMissed as missed:
        return RatePoint(rate, missed.bound, math.nan, math.nan, math.nan, stopped=True)
    itl = m.columns.valid("itl_p99_ms")
    itl_p99 = select_rank(itl, math.ceil(0.99 * len(itl))) if len(itl) else math.nan
    low = high = math.nan
    if scaling is not None:
        low = _attainment(m, *scaling.slos("low", slo_ttft_ms, slo_itl_ms))
        high = _attainment(m, *scaling.slos("high", slo_ttft_ms, slo_itl_ms))
    return RatePoint(rate, m.slo_attainment, m.goodput_rps, m.ttft_ms["p99"], itl_p99,
                     m.requests - m.completed, m.crashed_at_s is not None, low, high)


def _attainment(m: Any, slo_ttft_ms: float, slo_itl_ms: float) -> float:
    """The share of ``m``'s requests that completed with TTFT <= ``slo_ttft_ms`` and a p99 ITL <=
    ``slo_itl_ms`` (none for a one-token output), as :mod:`.fold` judges the SLO."""
    from .fold import DONE

    c = m.columns
    met = sum(1 for st, t, i in zip(c.status, c.ttft_ms, c.itl_p99_ms)
              if st == DONE and t <= slo_ttft_ms and (i != i or i <= slo_itl_ms))
    return met / m.requests if m.requests else 0.0


def _fits(trace: Trace, rate: float) -> bool:
    """Whether ``trace`` can be retimed to ``rate`` (arrivals within the simulator's horizon)."""
    try:
        reshape(trace, qps=rate)
    except InputError:
        return False
    return True


Search = Generator[float, RatePoint, tuple[float, str]]


#: The relative precision of the searches for an interval's ends (looser than the capacity's own: the
#: interval is tens of percent wide).
INTERVAL_TOLERANCE = 0.1


def _search(trace: Trace, target: float, tolerance: float, which: str = "rate") -> Search:
    """Yields the rates to simulate, is sent each one's :class:`RatePoint`, returns ``(rate, bound)``
    (module docstring); ``which``: the attainment judged (:meth:`RatePoint.attainment`)."""
    rate = trace.mean_qps
    point = yield rate
    meets = point.attainment(which) >= target
    lo, hi = (rate, None) if meets else (None, rate)
    for _ in range(MAX_BRACKET_STEPS):
        if lo is not None and hi is not None:
            break
        rate = rate * 2 if hi is None else rate / 2
        if not _fits(trace, rate):
            break
        point = yield rate
        if point.attainment(which) >= target:
            lo = rate
        else:
            hi = rate
    if lo is None:
        return 0.0, "below"
    if hi is None:
        return lo, "above"
    while hi / lo > 1 + tolerance:
        mid = math.sqrt(lo * hi)
        if not lo < mid < hi:  # the floats between them are spent
            break
        point = yield mid
        if point.attainment(which) >= target:
            lo = mid
        else:
            hi = mid
    return lo, ""


def check_slos(slo_ttft_ms: float, slo_itl_ms: float) -> None:
    """:class:`InputError` naming ``slo_ttft`` or ``slo_itl`` (the CLI prints their flags, ``--slo-ttft``,
    the Python API their keywords) unless each SLO is a finite number of ms > 0 (capacity's and tune's
    check)."""
    for name, value in (("slo_ttft", slo_ttft_ms), ("slo_itl", slo_itl_ms)):
        if not (math.isfinite(value) and value > 0):
            raise InputError("{param_flag} must be a number of ms > 0, got {value}", param=name,
                             values={"value": value})


def check_target(target: float) -> None:
    """:class:`InputError` naming ``target`` unless it is a share of requests in (0, 1]."""
    if not (math.isfinite(target) and 0 < target <= 1):
        raise InputError("{flag.target} is a share of requests in (0, 1], got {target:g} (e.g. 0.99)",
                         param="target", values={"target": target})


#: The finest ``tolerance``: each halving of the bracket is a simulation, ``log2(ln 2 / tolerance)`` of them
#: (13 at 1e-4), and no simulated rate is that exact; below about 2e-16 ``1 + tolerance`` is 1 in floating
#: point and the bisection would never end.
MIN_TOLERANCE = 1e-4


def check_tolerance(tolerance: float) -> None:
    """:class:`InputError` naming ``tolerance`` unless it is a relative precision from
    :data:`MIN_TOLERANCE` to below 1."""
    if not (math.isfinite(tolerance) and MIN_TOLERANCE <= tolerance < 1):
        raise InputError("{flag.tolerance} is a relative precision from {low:g} to below 1, got "
                         "{tolerance:g} (e.g. 0.02)", param="tolerance",
                         values={"tolerance": tolerance, "low": MIN_TOLERANCE})


def _check_search(trace: Trace, policies: Sequence[Policy], target: float, tolerance: float) -> None:
    """:class:`InputError` naming ``target`` unless it is a share in (0, 1], ``tolerance`` unless it is a
    relative precision from :data:`MIN_TOLERANCE` to below 1, ``trace`` unless its requests arrive over time,
    or for no policy."""
    check_target(target)
    check_tolerance(tolerance)
    if len(trace) < 2 or trace.mean_qps <= 0:
        raise InputError(
            "capacity scales the trace's arrival rate, but its requests all arrive at once: give a "
            "trace with arrival times, or {flag.synthetic} {flag.qps} N",
            param="trace",
            values={},
        )
    if not policies:
        raise InputError("no policy to size")


def capacity(
    trace: Trace,
    setup: Setup,
    policies: Sequence[Policy],
    slo_ttft_ms: float,
    slo_itl_ms: float,
    target: float = 0.99,
    tolerance: float = 0.02,
    workers: int | None = None,
    progress: Callable[[int], None] | None = None,
    config_paths: Sequence[str | None] | None = None,
    dp: int = 1,
    load_balance_method: str = "round_robin",
    executor: str | Executor = "local",
    ray_address: str | None = None,
    max_steps: int | None = None,
    intervals: bool = True,
    stop_early: bool = False,
) -> CapacityResult:
    """The highest rate each of ``policies`` sustains on ``trace`` (module docstring).

    ``slo_ttft_ms``, ``slo_itl_ms``: SLOs in ms (> 0). ``target``: SLO attainment to hold, a share in
    (0, 1]. ``tolerance``: relative width of the final bracket (:data:`MIN_TOLERANCE` to below 1).
    ``workers``: processes (default: the cores available). ``progress(simulations done)``.
    ``config_paths``: per policy, the pdmux YAML it came from (for the verdict's launch line), or
    ``None``. ``dp``: replicas of the server behind a router (``load_balance_method``) for every policy but a
    :class:`~pdmux_cli.simulate.cluster.DisaggPolicy` (its own instances). ``executor``: where the
    simulations run (:mod:`.executors`: ``local``, ``ray`` at ``ray_address``, or an executor already
    open); ``workers``: tasks at a time. ``max_steps``: each simulation's decode-step budget
    (:func:`.engine.step_budget`). ``intervals``: also search the ends of each capacity's 80% interval
    (:class:`SloScaling`: the TTFT and ITL scaled by their measured error; more simulations, the same
    capacity). ``stop_early`` (without ``intervals``): a run stops as soon as the requests that have
    missed the SLO put its attainment below ``target`` whatever the others do (the search's verdict at
    that rate cannot change, so the capacity is the same; the point keeps only that bound,
    ``RatePoint.stopped``): for callers that read the capacity alone. Raises :class:`InputError` for
    bad SLOs, target, tolerance, ``dp`` or method, a trace whose requests all arrive at once (no rate to
    scale), or a simulation past its budget (naming the policy and rate).
    """
    check_slos(slo_ttft_ms, slo_itl_ms)
    _check_search(trace, policies, target, tolerance)
    dp = check_dp_value(dp)
    load_balance_method = check_load_balance_method(load_balance_method)
    scaling = slo_scaling(setup) if intervals else None
    searches = _searches(trace, len(policies), target, tolerance, scaling is not None)
    points: list[dict[float, RatePoint]] = [{} for _ in policies]
    outcome: dict[tuple[int, str], tuple[float, str]] = {}
    waiting: dict[tuple[int, float], list[str]] = {}
    done = 0

    def what(i: int, rate: float) -> str:
        return f"{policies[i].label} at {rate:.4g} req/s"

    def ask(i: int, kind: str, rate: float | None, submit: Callable[[int, float], None]) -> None:
        """Search ``(i, kind)`` asks for ``rate``: answered from the policy's points, or queued on its
        simulation (submitted once)."""
        while rate is not None:
            if rate in points[i]:
                rate = send(i, kind, points[i][rate])
                continue
            if (i, rate) not in waiting:
                waiting[(i, rate)] = []
                submit(i, rate)
            waiting[(i, rate)].append(kind)
            return

    def send(i: int, kind: str, point: RatePoint) -> float | None:
        try:
            return searches[(i, kind)].send(point)
        except StopIteration as stop:
            outcome[(i, kind)] = stop.value
            return None

    with using(executor, workers, len(policies), ray_address) as ex:
        workers = ex.workers
        shared = ex.share((trace, setup, slo_ttft_ms, slo_itl_ms, dp, load_balance_method, max_steps,
                           scaling, target if stop_early and scaling is None else None))

        # the simulations asked for wait here and go to the workers as they free up, the slowest policy's
        # first (its searches' chain of simulations is the run's tail): the order changes no result
        queued: list[tuple[int, float]] = []
        started: dict[tuple[int, float], float] = {}
        seconds = [[0.0, 0] for _ in policies]  # per policy: wall seconds its simulations took, and how many

        def submit(i: int, rate: float) -> None:
            queued.append((i, rate))

        def fill() -> None:
            while queued and ex.pending() < ex.workers:
                def slow(task: tuple[int, float]) -> float:
                    total, count = seconds[task[0]]
                    return total / count if count else math.inf  # (not timed yet: first, to time it)

                task = max(queued, key=slow)  # the first of the slowest (max keeps the first of equals)
                queued.remove(task)
                i, rate = task
                started[task] = time.perf_counter()
                ex.submit(_evaluate, shared, (policies[i], rate), what(i, rate), tag=task)

        for (i, kind), search in searches.items():
            ask(i, kind, next(search), submit)
        fill()
        while ex.pending():
            job = ex.next_done()
            i, rate = job.tag
            point = job.result()
            seconds[i][0] += time.perf_counter() - started.pop((i, rate))
            seconds[i][1] += 1
            points[i][rate] = point
            done += 1
            if progress:
                progress(done)
            for kind in waiting.pop((i, rate)):
                ask(i, kind, send(i, kind, point), submit)
            fill()
    rows = [_capacity_row(policy, outcome, points[i], i, scaling is not None, setup, dp, load_balance_method,
                          config_paths[i] if config_paths else None) for i, policy in enumerate(policies)]
    return CapacityResult(rows, target, tolerance, trace.mean_qps, slo_ttft_ms, slo_itl_ms, workers,
                          tp=setup.tp, dp=dp, load_balance_method=load_balance_method)


def _searches(trace: Trace, policies: int, target: float, tolerance: float, interval_ends: bool) -> dict:
    """One rate search per policy and kind, keyed ``(policy index, kind)``: ``"rate"`` (the capacity) and,
    with ``interval_ends``, ``"low"`` and ``"high"`` (the ends of its interval, at least
    :data:`INTERVAL_TOLERANCE` wide). They share simulations: a rate simulated once for a policy answers
    every search of that policy that asks for it."""
    kinds = ("rate", "low", "high") if interval_ends else ("rate",)
    ends = max(tolerance, INTERVAL_TOLERANCE)
    return {(i, k): _search(trace, target, tolerance if k == "rate" else ends, k)
            for i in range(policies) for k in kinds}


def _capacity_row(policy: Policy, outcome: dict, points: dict, i: int, interval_ends: bool, setup: Setup,
                  dp: int, load_balance_method: str, path: str | None) -> PolicyCapacity:
    """Policy ``i``'s row of :func:`capacity`: its searches' ``outcome`` (the capacity and, with
    ``interval_ends``, its interval's ends, each with its bound), its simulated ``points`` (by rate), where
    it runs, and its launch line (``path``: the pdmux YAML it came from, or ``None``)."""
    rate, bound = outcome[(i, "rate")]
    at = points.get(rate) if rate > 0 else None
    interval, ends = None, ("", "")
    if interval_ends:
        (low, low_bound), (high, high_bound) = outcome[(i, "low")], outcome[(i, "high")]
        interval, ends = (min(low, rate), max(high, rate)), (low_bound, high_bound)
    cfg = getattr(policy, "config", None)
    where = policy.deployment(setup, dp, load_balance_method)
    router = where.method if where.servers > 1 else ""  # a disaggregation's 1P1D has its router too
    return PolicyCapacity(
        policy.label, policy.kind, rate, at, tuple(sorted(points.values(), key=lambda p: p.rate_rps)),
        bound, path, cfg.sm_group_num if cfg is not None else None,
        policy.chunk_tokens, where.gpus, where.layout, router, where.xpyd, policy.multiplexes,
        tuple(policy.launch_args(path)), interval, ends)
