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
from ..util.errors import InputError
from ..catalog.profile_files import measurements_dir

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
    :data:`METRICS`). ``release_line``: the SGLang release line it ran (``"0.3"``: before the overlap
    scheduler; ``"0.4"``; ``"0.5"``), whose serving terms replay it. ``lengths``: the workload's length spec
    as written in the file. ``request_rate``: req/s, ``math.inf`` for all at once. ``max_concurrency``: the
    client's limit (0: none). ``prefill_cuda_graph``: whether the server replayed prefill batches from
    its prefill CUDA graph: ``False`` for every shipped run (SGLang 0.3 to 0.5.6, which prefilled eagerly
    unless ``--enable-piecewise-cuda-graph`` was given; none of the pages gives it), ``None`` for a user's run
    (SGLang 0.5.23's default, :func:`pdmux_cli.sglang.server_defaults.prefill_cuda_graph_default`)."""

    id: str
    source_url: str
    engine: str
    release_line: str
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
    prefill_cuda_graph: bool | None = False

    @property
    def ignore_eos(self) -> bool:
        """SGLang's bench_serving sends ``ignore_eos`` unless ``--disable-ignore-eos``; vllm's client does
        not."""
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
        if kind == "explicit":
            return "(as sent)", "(as sent)", 0
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
        if self.prefill_cuda_graph is False:
            args.append("--disable-prefill-cuda-graph")
        return shlex.join(args)


def _number(entry: dict, key: str, where: str) -> float:
    value = entry.get(key)
    if isinstance(value, str) and value.strip().lower() == "inf":
        return math.inf
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise InputError(f"{where}: '{key}' must be a positive number, got {value!r}")
    return float(value)


#: The shipped runs the serving terms are fitted to (``benchmarks/fit_serving.py``).
FIT_RUNS = "sglang_serving_runs.yaml"
#: The shipped runs kept out of every fit: reported apart (``pdmux accuracy --serving``), and the check of
#: the intervals' coverage.
HELDOUT_RUNS = "sglang_serving_heldout.yaml"


@functools.lru_cache(maxsize=4)
def load_runs(name: str = FIT_RUNS) -> tuple[ServingRun, ...]:
    """Every run of a shipped runs file under ``profiles/measurements/serving/`` (cached): ``name``
    :data:`FIT_RUNS` (default) or :data:`HELDOUT_RUNS`. Raises :class:`InputError` for a malformed file (a
    broken installation)."""
    path = measurements_dir() / "serving" / name
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
            release_line=str(entry.get("release_line", "0.5")),
            gpu=str(entry["gpu"]), tp=int(entry.get("tp", 1)), model=str(entry["model"]),
            client=str(entry.get("client", "sglang")),
            overlap_schedule=bool(entry.get("overlap_schedule", True)),
            prefix_cache=bool(entry.get("prefix_cache", True)), lengths=dict(work.get("lengths") or {}),
            request_rate=_number(work, "request_rate", where),
            max_concurrency=int(work.get("max_concurrency") or 0),
            num_prompts=int(_number(work, "num_prompts", where)), metrics=metrics,
            approximation=str(work.get("approximation", "")), notes=str(entry.get("notes", "")),
        ))
    return tuple(runs)


def workload(run: ServingRun):
    """The :class:`~pdmux_cli.simulate.traces.Trace` a run's client sends (module docstring). Lengths of
    kind ``explicit`` (``prompt_tokens``, ``output_tokens``: bench_serving's ``--output-details``) are
    sent as they are, at the run's rate."""
    from dataclasses import replace

    from .traces import synthetic_trace

    if run.lengths.get("kind") == "explicit":
        prompts = tuple(int(x) for x in run.lengths["prompt_tokens"])
        outputs = tuple(max(1, int(x)) for x in run.lengths["output_tokens"])
        trace = synthetic_trace(run.request_rate, 1, 1, len(prompts), None, 0)
        return replace(trace, prompt_tokens=prompts, output_tokens=outputs,
                       source=f"{len(prompts)} requests as bench_serving sent them")
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
    the serving terms as :func:`pdmux_cli.simulate.engine.make_setup` takes them (``step_overhead_ms``,
    ``per_request_overhead_ms``, ``admission_delay_ms``, ``first_token_delay_ms``,
    ``admission_interval_ms``); ``None`` for ``serving.yaml``'s terms of the run's release line
    (:func:`pdmux_cli.costmodel.efficiency.release_line_terms`). Raises :class:`InputError` where pdmux
    cannot simulate the setup (it names the run)."""
    from ..costmodel.efficiency import release_line_terms
    from ..catalog.hardware import find_gpu_or_file
    from ..sglang.kv_cache import resolve_kv_cache
    from ..catalog.model import load_model
    from ..sglang.server_defaults import default_chunked_prefill_size
    from .engine import make_setup
    from .metrics import summarize
    from .runner import simulate
    from .schedulers import ChunkedPolicy

    try:
        gpu = find_gpu_or_file(run.gpu)
        model = load_model(run.model)
        options = dict(release_line_terms(run.release_line) if serving is None else serving)
        if options.get("kv_bytes_per_element") is None:  # SGLang's --kv-cache-dtype auto
            options["kv_bytes_per_element"] = resolve_kv_cache(model, None, None).bytes_per_element
        setup = make_setup(gpu, model, tp=run.tp, ignore_eos=run.ignore_eos,
                           disable_overlap=not run.overlap_schedule, prefix_cache=run.prefix_cache,
                           prefill_cuda_graph=run.prefill_cuda_graph, **options)
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
        from .pool import process_pool

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
    id>: <metric>"``; method ``in-sample``: ``serving.yaml``'s terms were fitted to these runs) and every
    run's outcome."""
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
    terms = [Term(term, "public SGLang serving runs (profiles/measurements/serving/)", "in-sample",
                  tuple(pts))
             for term, pts in points.items() if pts]
    return terms, outcomes


#: bench_serving's default ``--seed`` over its releases (1 up to 0.5.x; 42 in 0.5.23): tried in turn to
#: redraw a random dataset's lengths, kept where the totals match.
BENCH_SERVING_SEEDS = (1, 42)


def runs_from_bench_serving(results: Sequence[Any], gpu: str, model: str, tp: int | None = None) -> tuple[
        list[ServingRun], list[str]]:
    """The user's bench_serving runs (:class:`pdmux_cli.sglang.measurement_readers.BenchServingResult`) as
    :class:`ServingRun` to replay on ``gpu`` with ``model`` (names or files) and ``tp`` (default: the
    ``tp_size`` its ``server_info`` gives, else 1), and a note per run on how its lengths were had:
    ``--output-details`` lengths as sent; a random dataset redrawn as bench_serving draws it where a
    seed of :data:`BENCH_SERVING_SEEDS` gives the file's totals; otherwise an approximation, said.
    The client is SGLang's (``ignore_eos`` on), the radix cache and overlap scheduler as ``server_info``
    says. Raises :class:`InputError` for a TP that does not agree with the server's."""
    from .traces import bench_serving_lengths

    runs, notes = [], []
    for k, res in enumerate(results):
        server_tp = res.server.get("tp_size")
        if tp is not None and isinstance(server_tp, int) and server_tp != tp:
            raise InputError(
                "{where}: the server ran --tp-size {server_tp}, not {flag.tp} {tp}: give {flag.tp} "
                "{server_tp}",
                values={"where": res.where, "server_tp": server_tp, "tp": tp},
            )
        run_tp = tp if tp is not None else server_tp if isinstance(server_tp, int) and server_tp > 0 else 1
        if res.input_lens:
            lengths = {"kind": "explicit", "prompt_tokens": list(res.input_lens),
                       "output_tokens": list(res.output_lens)}
            note = "lengths as sent (--output-details)"
        elif res.dataset.startswith("random") and res.random_input_len and res.random_output_len:
            spec = {"kind": "random", "input": res.random_input_len, "output": res.random_output_len,
                    "range_ratio": res.random_range_ratio, "output_low": max(int(res.random_output_len
                                                                                 * res.random_range_ratio),
                                                                                 1)}
            prompt = f"random:{res.random_input_len}:{res.random_range_ratio:g}"
            output = f"random:{res.random_output_len}:{res.random_range_ratio:g}"
            seed = next((s for s in BENCH_SERVING_SEEDS
                         if [sum(x) for x in bench_serving_lengths(prompt, output, res.completed, s)]
                         == [res.total_input_tokens, res.total_output_tokens]), None)
            lengths = {**spec, "seed": seed if seed is not None else BENCH_SERVING_SEEDS[0]}
            note = (f"random lengths redrawn with bench_serving's seed {seed} (the totals match)"
                    if seed is not None
                    else "random lengths redrawn with seed 1: the file's totals match neither default seed, "
                         "so they approximate the run's (--output-details gives the exact lengths)")
        elif res.total_input_tokens and res.total_output_tokens:
            lengths = {"kind": "sharegpt", "input_mean": res.total_input_tokens / res.completed,
                       "output_mean": res.total_output_tokens / res.completed}
            note = (f"{res.dataset or 'dataset'} lengths approximated (log-normal with the run's means; "
                    "--output-details gives the exact lengths)")
        else:
            raise InputError(f"{res.where}: no lengths to replay (no --output-details, no random dataset "
                             "settings, no totals)")
        runs.append(ServingRun(
            id=f"run {k + 1} ({res.where})", source_url=res.where, engine=str(res.server.get("version", "")),
            release_line="0.5", gpu=gpu, tp=run_tp, model=model, client="sglang",
            overlap_schedule=not bool(res.server.get("disable_overlap_schedule", False)),
            prefix_cache=not bool(res.server.get("disable_radix_cache", False)), lengths=lengths,
            request_rate=res.request_rate, max_concurrency=res.max_concurrency,
            num_prompts=len(res.input_lens) or res.completed, metrics=tuple(res.metrics.items()),
            approximation="" if res.input_lens else note, prefill_cuda_graph=None))
        notes.append(f"{res.where}: {note}")
    return runs, notes


def outcome_dict(outcome: RunOutcome) -> dict:
    """One run's replay as JSON: its setup, the command that replays it, measured and predicted figures."""
    run = outcome.run
    return {
        "id": run.id, "source_url": run.source_url, "engine": run.engine, "release_line": run.release_line,
        "gpu": run.gpu, "tp": run.tp, "model": run.model, "client": run.client,
        "approximation": run.approximation or None, "command": run.command(), "error": outcome.error or None,
        "metrics": [{"metric": name, "measured": measured, "predicted": outcome.predicted.get(name),
                     "error": (outcome.predicted[name] - measured) / measured
                     if name in outcome.predicted and math.isfinite(outcome.predicted[name]) else None}
                    for name, measured in run.metrics],
    }


__all__ = ["BENCH_SERVING_SEEDS", "FIT_RUNS", "HELDOUT_RUNS", "METRICS", "TERMS", "RunOutcome", "ServingRun",
           "client_metrics", "load_runs", "outcome_dict", "predictions", "replay", "report",
           "runs_from_bench_serving", "workload"]
