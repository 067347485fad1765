"""How close the simulated server is to real SGLang servers (``pdmux accuracy --serving``).

Every public serving run shipped in ``profiles/measurements/serving/sglang_serving_runs.yaml`` (a
bench_serving or ``vllm bench serve`` client against an SGLang server, with the setup its page states) is
replayed end to end: the same GPU profile, model profile and TP, SGLang's default schedule (``chunked``
with the GPU's default chunk, the overlap scheduler on from SGLang v0.4.0, the radix cache unless the run
disabled it), the client's lengths, rate and ``--max-concurrency``, and the serving terms of
``profiles/efficiency/serving.yaml`` (or the ones passed in). Each run's metrics are computed as the client
computes them (``sglang/benchmark/serving.py`` ``calculate_metrics``: medians over requests, ITL over every
token, throughput over the run's duration) and compared with the page's.

Lengths: bench_serving's random dataset is redrawn exactly (its numpy stream, seed 1 by default:
:func:`pdmux_cli.simulate.traces.bench_serving_lengths`; where a page prints its totals a test checks
them); fixed lengths are fixed; ShareGPT is an approximation (log-normal lengths with the page's means).
Poisson arrivals are drawn with pdmux's own generator (bench_serving's arrival draws follow its prompt
generation in the same numpy stream, which depends on the tokenizer). Each run's ``command`` is the
``pdmux simulate`` command line that replays it.

Pure Python; the simulations take a few seconds to a minute on one core (:func:`report` runs them on
``workers`` processes).
"""

from __future__ import annotations

import functools
import math
import shlex
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from ..costmodel.accuracy import Point, Term
from ..errors import InputError
from ..profile_files import measurements_dir

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

#: The ``format`` value of the runs file.
FORMAT = "pdmux-serving-runs/1"

#: Metric name -> (term, how the client computes it).
METRICS = {
    "ttft_p50_ms": ("TTFT (median)", "ms"),
    "itl_p50_ms": ("ITL (median)", "ms"),
    "tpot_p50_ms": ("TPOT (median)", "ms"),
    "e2e_p50_ms": ("E2E latency (median)", "ms"),
    "output_tok_s": ("throughput", "tok/s"),
    "total_tok_s": ("throughput", "tok/s"),
    "input_tok_s": ("throughput", "tok/s"),
    "request_rps": ("throughput", "req/s"),
}

#: The report's terms, in order.
TERMS = ("TTFT (median)", "ITL (median)", "TPOT (median)", "E2E latency (median)", "throughput")

#: Shape of ShareGPT's lengths when replayed synthetically (log-normal sigma): an approximation.
SHAREGPT_SIGMA = 1.0

#: bench_serving's default ``--seed`` in the releases the runs used (0.3-0.5.6).
BENCH_SERVING_SEED = 1


@dataclass(frozen=True)
class ServingRun:
    """One public serving run (the runs file's entry). ``metrics``: ``(name, measured)`` pairs (names in
    :data:`METRICS`). ``lengths``: the workload's length spec as written in the file. ``request_rate``:
    req/s, ``math.inf`` for all at once. ``max_concurrency``: the client's limit (0: none)."""

    id: str
    source_url: str
    engine: str
    gpu: str
    tp: int
    model: str
    client: str
    overlap_schedule: bool
    prefix_cache: bool
    lengths: dict
    request_rate: float
    max_concurrency: int
    num_prompts: int
    metrics: tuple[tuple[str, float], ...]
    approximation: str = ""
    notes: str = ""

    @property
    def ignore_eos(self) -> bool:
        """SGLang's bench_serving sends ``ignore_eos`` unless ``--disable-ignore-eos``; vllm's client does not."""
        return self.client == "sglang"

    @property
    def length_specs(self) -> tuple[str, str, int]:
        """``(--prompt-tokens, --output-tokens, --seed)`` that draw this run's lengths."""
        spec = self.lengths
        kind = spec.get("kind")
        if kind == "random":
            ratio = float(spec.get("range_ratio", 0.0))
            out_low = int(spec.get("output_low", 1))
            prompt = f"random:{int(spec['input'])}" + (f":{ratio:g}" if ratio else "")
            default_low = max(int(int(spec["output"]) * ratio), 1)
            output = f"random:{int(spec['output'])}" + (f":{ratio:g}:{out_low}" if out_low != default_low
                                                         else f":{ratio:g}" if ratio else "")
            return prompt, output, int(spec.get("seed", BENCH_SERVING_SEED))
        if kind == "fixed":
            return str(int(spec["input"])), str(int(spec["output"])), 0
        if kind == "sharegpt":
            shrink = math.exp(SHAREGPT_SIGMA ** 2 / 2)  # mean / median of a log-normal
            return (f"lognormal:{float(spec['input_mean']) / shrink:.1f}:{SHAREGPT_SIGMA:g}",
                    f"lognormal:{float(spec['output_mean']) / shrink:.1f}:{SHAREGPT_SIGMA:g}", 0)
        raise InputError(f"serving run {self.id}: unknown lengths kind {kind!r}")

    def command(self) -> str:
        """The ``pdmux simulate`` command line that replays this run (with the shipped serving terms)."""
        prompt, output, seed = self.length_specs
        rate = "inf" if self.request_rate == math.inf else f"{self.request_rate:g}"
        args = ["pdmux", "simulate", "--synthetic", "--qps", rate, "--max-requests", str(self.num_prompts),
                "--prompt-tokens", prompt, "--output-tokens", output, "--seed", str(seed), "--gpu", self.gpu,
                "--model", self.model, "--policies", "chunked"]
        if self.tp != 1:
            args += ["--tp", str(self.tp)]
        if self.max_concurrency:
            args += ["--max-concurrency", str(self.max_concurrency)]
        if self.ignore_eos:
            args.append("--ignore-eos")
        if not self.prefix_cache:
            args.append("--no-prefix-cache")
        if not self.overlap_schedule:
            args.append("--disable-overlap-schedule")
        return shlex.join(args)


def _number(entry: dict, key: str, where: str) -> float:
    value = entry.get(key)
    if isinstance(value, str) and value.strip().lower() == "inf":
        return math.inf
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise InputError(f"{where}: '{key}' must be a positive number, got {value!r}")
    return float(value)


@functools.lru_cache(maxsize=1)
def load_runs() -> tuple[ServingRun, ...]:
    """Every run of the shipped runs file (cached). Raises :class:`InputError` for a malformed file (a
    broken installation)."""
    path = measurements_dir() / "serving" / "sglang_serving_runs.yaml"
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_LOADER)
    except (OSError, yaml.YAMLError) as exc:
        raise InputError(f"serving measurements {path}: cannot be read ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("runs"), list):
        raise InputError(f"serving measurements {path}: not a {FORMAT} file (the installation is damaged)")
    runs = []
    for entry in data["runs"]:
        where = f"serving measurements {path.name}: run {entry.get('id')!r}"
        work = entry.get("workload") or {}
        metrics = tuple((m["metric"], float(m["measured"])) for m in entry.get("metrics", []))
        unknown = [name for name, _ in metrics if name not in METRICS]
        if unknown or not metrics:
            raise InputError(f"{where}: metrics {unknown or '(none)'} not among {', '.join(METRICS)}")
        runs.append(ServingRun(
            id=str(entry["id"]), source_url=str(entry["source_url"]), engine=str(entry.get("engine", "")),
            gpu=str(entry["gpu"]), tp=int(entry.get("tp", 1)), model=str(entry["model"]),
            client=str(entry.get("client", "sglang")), overlap_schedule=bool(entry.get("overlap_schedule", True)),
            prefix_cache=bool(entry.get("prefix_cache", True)), lengths=dict(work.get("lengths") or {}),
            request_rate=_number(work, "request_rate", where), max_concurrency=int(work.get("max_concurrency") or 0),
            num_prompts=int(_number(work, "num_prompts", where)), metrics=metrics,
            approximation=str(work.get("approximation", "")), notes=str(entry.get("notes", "")),
        ))
    return tuple(runs)


def workload(run: ServingRun):
    """The :class:`~pdmux_cli.simulate.traces.Trace` a run's client sends (module docstring)."""
    from .traces import synthetic_trace

    prompt, output, seed = run.length_specs
    return synthetic_trace(run.request_rate, prompt, output, run.num_prompts, None, seed)


def client_metrics(metrics: Any, trace: Any) -> dict[str, float]:
    """A run's figures as the client computes them, from :class:`~pdmux_cli.simulate.metrics.PolicyMetrics`
    of the replay of ``trace``: medians over completed requests (``statistics.median``, as numpy's),
    ITL over every token (its median), tokens over the run's span (s)."""
    per = metrics.per_request
    done = [i for i, x in enumerate(per["ttft_ms"]) if not math.isnan(x)]
    out: dict[str, float] = {}

    def median(values: Sequence[float]) -> float:
        values = [v for v in values if not math.isnan(v)]
        return statistics.median(values) if values else math.nan

    out["ttft_p50_ms"] = median([per["ttft_ms"][i] for i in done])
    out["tpot_p50_ms"] = median([per["tpot_ms"][i] for i in done])
    out["e2e_p50_ms"] = median([per["e2e_ms"][i] for i in done])
    out["itl_p50_ms"] = metrics.itl_ms["p50"]
    span = metrics.span_s
    prompt = sum(trace.prompt_tokens[i] for i in done)
    output = sum(trace.output_tokens[i] for i in done)
    out["output_tok_s"] = output / span if span > 0 else math.nan
    out["input_tok_s"] = prompt / span if span > 0 else math.nan
    out["total_tok_s"] = (prompt + output) / span if span > 0 else math.nan
    out["request_rps"] = len(done) / span if span > 0 else math.nan
    return out


def replay(run: ServingRun, serving: dict | None = None) -> dict[str, float]:
    """Replay ``run`` (module docstring) and return its figures (:func:`client_metrics`). ``serving``:
    overrides of the serving terms as :func:`pdmux_cli.simulate.engine.make_setup` takes them
    (``step_overhead_ms``, ``per_request_overhead_ms``, ``admission_delay_ms``, ``first_token_delay_ms``).
    Raises :class:`InputError` where pdmux cannot simulate the setup (it names the run)."""
    from ..hardware import find_gpu
    from ..model import load_model
    from ..sglang_server import default_chunked_prefill_size
    from .engine import make_setup
    from .metrics import summarize
    from .runner import simulate
    from .schedulers import ChunkedPolicy

    try:
        gpu = find_gpu(run.gpu)
        setup = make_setup(gpu, load_model(run.model), tp=run.tp, ignore_eos=run.ignore_eos,
                           disable_overlap=not run.overlap_schedule, prefix_cache=run.prefix_cache,
                           **(serving or {}))
        trace = workload(run)
        policy = ChunkedPolicy(default_chunked_prefill_size(setup.memory_bytes))
        result = simulate(trace, setup, policy, max_concurrency=run.max_concurrency)
    except InputError as exc:
        raise InputError(f"serving run {run.id}: {exc}") from None
    return client_metrics(summarize(result, 1e12, 1e12), trace)


def _replay_task(args: tuple) -> dict[str, float] | InputError:
    run, serving = args
    try:
        return replay(run, serving)
    except InputError as exc:
        return exc


def predictions(runs: Sequence[ServingRun] | None = None, serving: dict | None = None,
                workers: int = 1) -> list[dict[str, float] | InputError]:
    """:func:`replay` of every run (default: all shipped), on ``workers`` processes; an
    :class:`InputError` in place of a run pdmux could not simulate."""
    runs = list(load_runs() if runs is None else runs)
    tasks = [(run, serving) for run in runs]
    if workers > 1 and len(runs) > 1:
        from .tune import process_pool

        with process_pool(min(workers, len(runs))) as pool:
            return list(pool.map(_replay_task, tasks))
    return [_replay_task(task) for task in tasks]


@dataclass(frozen=True)
class RunOutcome:
    """One run's replay: ``predicted`` figures (empty and ``error`` set when it could not be simulated)."""

    run: ServingRun
    predicted: dict[str, float]
    error: str = ""


def report(runs: Sequence[ServingRun] | None = None, serving: dict | None = None,
           workers: int = 1) -> tuple[list[Term], list[RunOutcome]]:
    """The terms of ``pdmux accuracy --serving`` (one per metric kind of :data:`TERMS`, points ``"<run
    id>: <metric>"``, method ``end-to-end``) and every run's outcome."""
    runs = list(load_runs() if runs is None else runs)
    outcomes = []
    points: dict[str, list[Point]] = {t: [] for t in TERMS}
    for run, pred in zip(runs, predictions(runs, serving, workers)):
        if isinstance(pred, InputError):
            outcomes.append(RunOutcome(run, {}, str(pred)))
            continue
        outcomes.append(RunOutcome(run, pred))
        for name, measured in run.metrics:
            value = pred.get(name, math.nan)
            if math.isfinite(value):
                points[METRICS[name][0]].append(Point(f"{run.id}: {name}", measured, value))
    terms = [Term(term, "public SGLang serving runs (profiles/measurements/serving/)", "end-to-end", tuple(pts))
             for term, pts in points.items() if pts]
    return terms, outcomes
