"""How close the simulated server is to real SGLang servers (``pdmux accuracy --serving``).

Every public serving run shipped in ``profiles/measurements/serving/sglang_serving_runs.yaml`` (a
bench_serving or ``vllm bench serve`` client against an SGLang server, with the setup its page states) is
replayed end to end: the same GPU profile, model profile and TP, the defaults and scheduler rules of the
SGLang release the run used (its ``sglang_version``, :mod:`pdmux_cli.sglang.release_defaults`: the
default chunk size, decode CUDA graph, ``mem_fraction_static`` and ``max_running_requests`` on that GPU,
the admission reserve, retraction and ``new_token_ratio`` rules, the front end), SGLang's default
schedule (``chunked`` with the release's default chunk, ``prefill-first`` where chunking was off by
default; the overlap scheduler on from SGLang v0.4.0, the radix cache unless the run disabled it), the
client's lengths, rate and ``--max-concurrency``, and the serving terms of
``profiles/efficiency/serving.yaml`` (or the ones passed in). Each run's metrics are computed as the client
computes them (``sglang/benchmark/serving.py`` ``calculate_metrics``: medians over requests, ITL over every
token, throughput over the run's duration) and compared with the page's.

Lengths: bench_serving's random dataset is redrawn exactly (its numpy stream, seed 1 by default:
:func:`pdmux_cli.simulate.traces.bench_serving_lengths`; where a page prints its totals a test checks
them); fixed lengths are fixed; ShareGPT is an approximation (log-normal lengths with the page's means).
Poisson arrivals are drawn with pdmux's own generator (bench_serving's arrival draws follow its prompt
generation in the same numpy stream, which depends on the tokenizer). Each run's ``command`` is the
``pdmux simulate`` command line that replays it with its release's memory defaults as flags; ``pdmux
simulate`` has no option for a release's scheduler rules (admission reserve, retraction, front end) and
runs SGLang 0.5.23's, which give the same figures wherever admission and retraction never bind.

Pure Python; the simulations take a few seconds to a minute on one core (:func:`report` runs them on
``workers`` processes).
"""

from __future__ import annotations

import functools
import math
import shlex
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from ..costmodel.accuracy import Point, Term
from ..sglang.release_defaults import LATEST_RELEASE, ReleaseDefaults, release_defaults
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
    (its release's default: eager up to 0.5.8, then
    :func:`pdmux_cli.sglang.server_defaults.prefill_cuda_graph_default`).
    ``server_args``: SGLang flags the page's server ran with, as ``make_setup`` options
    (:data:`SERVER_ARGS`: ``mem_fraction_static``, ``max_running_requests``, ``disable_cuda_graph``,
    ``cuda_graph_max_bs``). ``sglang_version``: the SGLang release the run used (the runs files'
    ``sglang_version``; a user's run: its ``server_info`` ``version``, else 0.5.23), whose defaults and
    scheduler rules replay it (:attr:`release`). ``warmup_requests``: the client sent the first that many
    of its requests once, to the end, on the same server before the measured run (the workload's
    ``warmup_requests``; 0: none), so their prompts were in the radix cache when it began
    (:attr:`~pdmux_cli.simulate.traces.Trace.warm_requests`). ``context_length``: SGLang's
    ``--context-length`` where the page's flags (the runs file's ``server_flags``) give one, tokens: the
    replay's and the command's model takes it (:func:`pdmux_cli.catalog.model.with_context_length`)."""

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
    endpoint: str = "unknown"
    source: str = ""
    server_args: tuple[tuple[str, object], ...] = ()
    sglang_version: str = LATEST_RELEASE
    warmup_requests: int = 0
    context_length: int | None = None

    @property
    def release(self) -> ReleaseDefaults:
        """The rules of the run's SGLang release
        (:func:`pdmux_cli.sglang.release_defaults.release_defaults`)."""
        return release_defaults(self.sglang_version)

    @property
    def serial_frontend(self) -> bool:
        """Whether the server's front end tokenized one request at a time (SGLang up to 0.5.21:
        ``Setup.serial_frontend``)."""
        return self.release.serial_frontend

    @property
    def campaign(self) -> str:
        """The source this run belongs to for leave-one-source-out (:func:`source_of`): one publisher's
        benchmark campaign, whose runs share a client, a machine and a method."""
        return self.source or source_of(self.source_url)

    @property
    def ignore_eos(self) -> bool:
        """SGLang's bench_serving sends ``ignore_eos`` unless ``--disable-ignore-eos``; vllm's client does
        not."""
        return self.client == "sglang"

    @property
    def length_specs(self) -> tuple[str, str, int]:
        """``(--prompt-tokens, --output-tokens, --seed)`` that draw this run's lengths (lengths given one by
        one, as sent: their medians, fixed)."""
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
        if kind == "explicit":  # no flag takes a list: the median lengths, the closest command there is
            return (str(round(statistics.median(spec["prompt_tokens"]))),
                    str(round(statistics.median(spec["output_tokens"]))), 0)
        if kind == "sharegpt":
            shrink = math.exp(SHAREGPT_SIGMA ** 2 / 2)  # mean / median of a log-normal
            return (f"lognormal:{float(spec['input_mean']) / shrink:.1f}:{SHAREGPT_SIGMA:g}",
                    f"lognormal:{float(spec['output_mean']) / shrink:.1f}:{SHAREGPT_SIGMA:g}", 0)
        raise InputError(f"serving run {self.id}: unknown lengths kind {kind!r}")

    def release_flags(self) -> list[str]:
        """``pdmux simulate`` flags for the run's release's memory defaults where they are not 0.5.23's on
        its GPU (``--policies prefill-first`` for chunking off, ``--chunk-sizes``, ``--cuda-graph-max-bs``,
        ``--mem-fraction-static`` at full precision); none where the GPU is unknown."""
        from ..catalog.hardware import find_gpu_or_file
        from ..sglang.release_defaults import LATEST

        release, given = self.release, dict(self.server_args)
        if release.memory == LATEST.memory:
            return []
        try:
            memory = float(find_gpu_or_file(self.gpu).memory_bytes or 0)
        except InputError:
            return []
        if not memory:
            return []
        chunk = release.chunked_prefill_size(memory, self.tp)
        flags = ["--policies", "prefill-first"] if chunk <= 0 else []
        if 0 < chunk != LATEST.chunked_prefill_size(memory, self.tp):
            flags += ["--chunk-sizes", str(chunk)]
        graphs = not given.get("disable_cuda_graph")
        if given.get("cuda_graph_max_bs") is None and graphs:
            max_bs = release.cuda_graph_max_bs(memory, self.tp)
            if max_bs != LATEST.cuda_graph_max_bs(memory, self.tp):
                flags += ["--cuda-graph-max-bs", str(max_bs)]
        if given.get("mem_fraction_static") is None:
            fraction = release.mem_fraction_static(memory, chunk, self.tp, graphs=graphs,
                                                   cuda_graph_max_bs=given.get("cuda_graph_max_bs"))
            flags += ["--mem-fraction-static", repr(fraction)]
        return flags

    def moe_runner_flags(self) -> list[str]:
        """``--moe-runner-backend`` with the fused MoE the run's release picked where 0.5.23 picks another
        (a bf16 Qwen3 MoE on SM100 up to 0.5.7: Triton; :func:`pdmux_cli.costmodel.moe.moe_kernel`); none
        otherwise, or where the GPU or model is unknown."""
        from ..catalog.hardware import find_gpu_or_file
        from ..catalog.model import load_model
        from ..costmodel.moe import moe_kernel

        try:
            gpu, model = find_gpu_or_file(self.gpu), load_model(self.model)
        except InputError:
            return []
        cc = tuple(gpu.compute_capability or (0, 0))
        ran = moe_kernel(model, cc, qwen3_bf16_trtllm=self.release.qwen3_moe_bf16_trtllm)
        return ["--moe-runner-backend", ran[0]] if ran and ran != moe_kernel(model, cc) else []

    def command(self) -> str:
        """The ``pdmux simulate`` command line that replays this run (with the shipped serving terms), its
        release's memory defaults as flags (:meth:`release_flags`; module docstring: the scheduler rules
        are 0.5.23's there) and the fused MoE it ran (:meth:`moe_runner_flags`)."""
        prompt, output, seed = self.length_specs
        rate = "inf" if self.request_rate == math.inf else f"{self.request_rate:g}"
        release = self.release_flags()
        policy = [] if release[:1] == ["--policies"] else ["--policies", "chunked"]
        args = ["pdmux", "simulate", "--synthetic", "--qps", rate, "--max-requests", str(self.num_prompts),
                "--prompt-tokens", prompt, "--output-tokens", output, "--seed", str(seed), "--gpu", self.gpu,
                "--model", self.model, *policy, *release]
        if self.tp != 1:
            args += ["--tp", str(self.tp)]
        if self.context_length is not None:
            args += ["--context-length", str(self.context_length)]
        if self.max_concurrency:
            args += ["--max-concurrency", str(self.max_concurrency)]
        if self.ignore_eos:
            args.append("--ignore-eos")
        if not self.prefix_cache:
            args.append("--no-prefix-cache")
        if not self.overlap_schedule:
            args.append("--disable-overlap-schedule")
        if self.prefill_cuda_graph is False and not dict(self.server_args).get("disable_cuda_graph"):
            args.append("--disable-prefill-cuda-graph")
        args += self.moe_runner_flags()
        for name, value in self.server_args:
            flag = "--" + name.replace("_", "-")
            if value is True:
                args.append(flag)
            elif value is not False:
                args += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
        return shlex.join(args)


#: The SGLang flags a run's ``server_args`` may give (``make_setup``'s keywords and their types).
SERVER_ARGS = {"mem_fraction_static": float, "max_running_requests": int, "disable_cuda_graph": bool,
               "cuda_graph_max_bs": int}


def _context_length(server_flags: object) -> int | None:
    """SGLang's ``--context-length`` as a run's page gives it (``server_flags``: the page's flags as text,
    ``context_length=140000``), or ``None``."""
    import re

    match = re.search(r"context[_-]length[= ](\d+)", str(server_flags or ""))
    return int(match.group(1)) if match else None


def _server_args(value: object, where: str) -> tuple[tuple[str, object], ...]:
    if value in (None, {}):
        return ()
    if not isinstance(value, dict) or not set(value) <= set(SERVER_ARGS):
        raise InputError(f"{where}: server_args must map some of {', '.join(SERVER_ARGS)} to values")
    return tuple((k, SERVER_ARGS[k](v)) for k, v in sorted(value.items()))


def source_of(url: str) -> str:
    """The campaign a run's page belongs to: ``owner/repo`` of a GitHub page (SGLang's own tree by its
    folder, ``sgl-project/sglang/benchmark/attention_backend``: each folder is another author's
    campaign), ``owner/repo#N`` of an issue or pull request, else the page's host and folder."""
    from urllib.parse import urlparse

    parts = urlparse(url)
    path = [p for p in parts.path.split("/") if p]
    if parts.netloc == "github.com" and len(path) >= 2:
        repo = f"{path[0]}/{path[1]}"
        if len(path) >= 4 and path[2] in ("pull", "issues", "discussions"):
            return f"{repo}#{path[3]}"
        if len(path) >= 5 and path[2] in ("blob", "tree") and repo == "sgl-project/sglang":
            return "/".join([repo, *path[4:-1]]) if len(path) > 5 else repo
        return repo
    return "/".join([parts.netloc, *path[:-1]]) if len(path) > 1 else parts.netloc or url


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
    if name == HELDOUT_RUNS and not path.exists():
        return ()
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_LOADER)
    except (OSError, yaml.YAMLError) as exc:
        raise InputError(f"serving measurements {path}: cannot be read ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("runs"), list):
        raise InputError(f"serving measurements {path}: not a {FORMAT} file (the installation is damaged)")
    runs = []
    for entry in data["runs"]:
        where = f"serving measurements {path.name}: run {entry.get('id')!r}"
        version = entry.get("sglang_version")
        if version is None:
            raise InputError(f"{where}: no sglang_version (the SGLang release the run used)")
        try:
            version = release_defaults(str(version)).release
        except InputError as exc:
            raise InputError(f"{where}: {exc}") from None
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
            endpoint=str(entry.get("endpoint", "unknown")), source=str(entry.get("source", "")),
            server_args=_server_args(entry.get("server_args"), where), sglang_version=version,
            warmup_requests=int(work.get("warmup_requests") or 0),
            context_length=_context_length(entry.get("server_flags")),
        ))
    return tuple(runs)


def workload(run: ServingRun):
    """The :class:`~pdmux_cli.simulate.traces.Trace` a run's client sends (module docstring). Lengths of
    kind ``explicit`` (``prompt_tokens``, ``output_tokens``: bench_serving's ``--output-details``, or a
    page's own prompts counted) are sent as they are, at the run's rate; with ``hash_ids`` (per request, one
    id per ``block_tokens`` (default 512) of its prompt, equal for equal prefixes, as Mooncake's traces) the
    radix cache's hits are replayed too, those of the client's warm-up (:attr:`ServingRun.warmup_requests`)
    included."""
    from dataclasses import replace

    from .traces import HASH_BLOCK_TOKENS, synthetic_trace

    if run.lengths.get("kind") == "explicit":
        prompts = tuple(int(x) for x in run.lengths["prompt_tokens"])
        outputs = tuple(max(1, int(x)) for x in run.lengths["output_tokens"])
        hashes = tuple(tuple(int(h) for h in ids) for ids in run.lengths.get("hash_ids") or ())
        trace = synthetic_trace(run.request_rate, 1, 1, len(prompts), None, 0)
        block = int(run.lengths.get("block_tokens", HASH_BLOCK_TOKENS))
        return replace(trace, prompt_tokens=prompts, output_tokens=outputs, hash_ids=hashes,
                       block_tokens=block, warm_requests=run.warmup_requests,
                       source=f"{len(prompts)} requests as the client sent them")
    prompt, output, seed = run.length_specs
    trace = synthetic_trace(run.request_rate, prompt, output, run.num_prompts, None, seed)
    return replace(trace, warm_requests=run.warmup_requests) if run.warmup_requests else trace


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
    # not a client figure: the requests in flight on average (Little's law), the load an interval's regime
    out["in_flight"] = sum(per["e2e_ms"][i] for i in done) / 1e3 / span if span > 0 else math.nan
    return out


def replay(run: ServingRun, serving: dict | None = None) -> dict[str, float]:
    """Replay ``run`` (module docstring) with the defaults and scheduler rules of its SGLang release
    (:attr:`ServingRun.release`) and return its figures (:func:`client_metrics`). ``serving``:
    the serving terms as :func:`pdmux_cli.simulate.engine.make_setup` takes them (``step_overhead_ms``,
    ``per_request_overhead_ms``, ``admission_delay_ms``, ``first_token_delay_ms``,
    ``admission_interval_ms``); ``None`` for ``serving.yaml``'s terms of the run's release line
    (:func:`pdmux_cli.costmodel.efficiency.release_line_terms`). Raises :class:`InputError` where pdmux
    cannot simulate the setup (it names the run)."""
    from ..costmodel.efficiency import release_line_terms
    from ..catalog.hardware import find_gpu_or_file
    from ..sglang.kv_cache import resolve_kv_cache
    from ..catalog.model import load_model, with_context_length
    from .engine import make_setup
    from .metrics import summarize
    from .runner import simulate
    from .schedulers import ChunkedPolicy, PrefillFirstPolicy

    try:
        gpu = find_gpu_or_file(run.gpu)
        model = with_context_length(load_model(run.model), run.context_length)[0]
        options = dict(release_line_terms(run.release_line) if serving is None else serving)
        if options.get("kv_bytes_per_element") is None:  # SGLang's --kv-cache-dtype auto
            options["kv_bytes_per_element"] = resolve_kv_cache(model, None, None).bytes_per_element
        setup = make_setup(gpu, model, tp=run.tp, ignore_eos=run.ignore_eos,
                           disable_overlap=not run.overlap_schedule, prefix_cache=run.prefix_cache,
                           prefill_cuda_graph=run.prefill_cuda_graph, release=run.release,
                           **dict(run.server_args), **options)
        trace = workload(run)
        chunk = setup.default_chunk_tokens  # the release's default (-1: chunking off, SGLang up to 0.2.12)
        policy = ChunkedPolicy(chunk) if chunk > 0 else PrefillFirstPolicy()
        result = simulate(trace, setup, policy, max_concurrency=run.max_concurrency)
    except InputError as exc:
        raise InputError(f"serving run {run.id}: {exc}") from None
    return client_metrics(summarize(result, 1e12, 1e12, itl_cdf=False), trace)  # no plot: no CDF


def _replay_task(args: tuple) -> dict[str, float] | InputError:
    run, serving = args
    try:
        return replay(run, serving)
    except InputError as exc:
        return exc


#: ``serving`` of :func:`predictions` for the out-of-sample replay: each run with the terms its release line
#: got from a fit without the run's source (:func:`pdmux_cli.costmodel.efficiency.release_line_terms`
#: ``without=``).
LEAVE_SOURCE_OUT = "leave-one-source-out"


def predictions(runs: Sequence[ServingRun] | None = None, serving: dict | str | None = None,
                workers: int = 1) -> list[dict[str, float] | InputError]:
    """:func:`replay` of every run (default: all shipped), on ``workers`` processes; an
    :class:`InputError` in place of a run pdmux could not simulate. ``serving``: the terms (:func:`replay`),
    or :data:`LEAVE_SOURCE_OUT` for each run's leave-one-source-out terms."""
    runs = list(load_runs() if runs is None else runs)
    if serving == LEAVE_SOURCE_OUT:
        from ..costmodel.efficiency import release_line_terms

        tasks = [(run, release_line_terms(run.release_line, without=run.campaign)) for run in runs]
    else:
        tasks = [(run, serving) for run in runs]
    if workers > 1 and len(runs) > 1:
        from .pool import process_pool

        with process_pool(min(workers, len(runs))) as pool:
            return list(pool.map(_replay_task, tasks))
    return [_replay_task(task) for task in tasks]


@dataclass(frozen=True)
class RunOutcome:
    """One run's replay: ``predicted`` figures with the shipped terms (empty and ``error`` set when it could
    not be simulated); ``predicted_oos``: with the terms fitted without the run's source (empty for a
    held-out run, whose shipped terms saw none of it, or a user's run); ``heldout``: a run of
    :data:`HELDOUT_RUNS`."""

    run: ServingRun
    predicted: dict[str, float]
    error: str = ""
    predicted_oos: dict[str, float] = field(default_factory=dict)
    heldout: bool = False

    def intervals(self) -> dict[str, tuple[float, float] | None]:
        """Each measured metric's 80% interval around the prediction with the shipped terms
        (:func:`pdmux_cli.costmodel.uncertainty.figure_interval` in the run's regime: its client's loop, the
        replay's requests in flight, its GPU's family), as ``simulate`` gives it, but drawn without the
        residuals of the run's own source: the interval a server of an unseen source gets."""
        from ..catalog.hardware import find_gpu_or_file
        from ..costmodel.uncertainty import RUN_FIGURE, Regime, client_loop, figure_interval, gpu_family

        if not self.predicted:
            return {}
        run = self.run
        regime = Regime(client_loop(run.request_rate, run.max_concurrency),
                        self.predicted.get("in_flight", math.nan),
                        gpu_family(find_gpu_or_file(run.gpu).compute_capability))
        return {name: figure_interval(RUN_FIGURE[name], self.predicted.get(name, math.nan), regime,
                                      exclude_source=run.campaign)[0]
                for name, _ in run.metrics}


def coverage(outcomes: Sequence[RunOutcome]) -> tuple[int, int]:
    """``(inside, figures)``: how many measured figures of ``outcomes`` fall inside their 80% interval
    (:meth:`RunOutcome.intervals`), of those that have one."""
    inside = total = 0
    for o in outcomes:
        measured = dict(o.run.metrics)
        for name, bounds in o.intervals().items():
            if bounds is not None:
                total += 1
                inside += bounds[0] <= measured[name] <= bounds[1]
    return inside, total


#: The report's methods (keys of :data:`pdmux_cli.costmodel.accuracy.METHODS`) and the data each row names.
OUT_OF_SAMPLE, HELD_OUT, IN_SAMPLE = "LOSO", "held-out", "in-sample"
_DATA = {
    OUT_OF_SAMPLE: "public SGLang serving runs, each source predicted by terms fitted to the others "
                   "(profiles/measurements/serving/sglang_serving_runs.yaml)",
    HELD_OUT: "public SGLang serving runs kept out of every fit "
              "(profiles/measurements/serving/sglang_serving_heldout.yaml)",
    IN_SAMPLE: "public SGLang serving runs (profiles/measurements/serving/sglang_serving_runs.yaml)",
}


def _points(outcomes: Sequence[RunOutcome], which: str) -> dict[str, list[Point]]:
    points: dict[str, list[Point]] = {t: [] for t in TERMS}
    for o in outcomes:
        pred = o.predicted_oos if which == "oos" else o.predicted
        for name, measured in o.run.metrics:
            value = pred.get(name, math.nan)
            if math.isfinite(value):
                points[METRICS[name][0]].append(Point(f"{o.run.id}: {name}", measured, value))
    return points


def report(runs: Sequence[ServingRun] | None = None, serving: dict | None = None,
           workers: int = 1, heldout: Sequence[ServingRun] | None = None
           ) -> tuple[list[Term], list[RunOutcome]]:
    """The terms of ``pdmux accuracy --serving`` and every run's outcome. With the shipped runs (``runs``,
    ``serving`` and ``heldout`` all ``None``), three rows a metric kind of :data:`TERMS` (points ``"<run id>:
    <metric>"``), in this order: :data:`OUT_OF_SAMPLE` (each source's runs replayed with the terms its release
    line got from a fit to the other sources: the headline), :data:`HELD_OUT` (the runs of
    :data:`HELDOUT_RUNS`, fitted to nothing, with the shipped terms) and :data:`IN_SAMPLE` (the fitted runs
    with the shipped terms). Otherwise the in-sample rows of ``runs`` with ``serving`` (or the shipped terms),
    and the held-out rows of ``heldout``."""
    shipped = runs is None and serving is None and heldout is None
    runs = list(load_runs() if runs is None else runs)
    held = list(load_runs(HELDOUT_RUNS) if shipped else heldout or ())
    pred = predictions([*runs, *held], serving, workers)
    oos = predictions(runs, LEAVE_SOURCE_OUT, workers) if shipped else [{}] * len(runs)
    outcomes = []
    for k, run in enumerate([*runs, *held]):
        got = pred[k]
        if isinstance(got, InputError):
            outcomes.append(RunOutcome(run, {}, str(got), heldout=k >= len(runs)))
            continue
        out = oos[k] if k < len(runs) else {}
        outcomes.append(RunOutcome(run, got, predicted_oos=out if isinstance(out, dict) else {},
                                   heldout=k >= len(runs)))
    fitted = [o for o in outcomes if not o.heldout]
    rows = []
    if shipped:
        rows.append((OUT_OF_SAMPLE, _points(fitted, "oos")))
    rows.append((HELD_OUT, _points([o for o in outcomes if o.heldout], "shipped")))
    rows.append((IN_SAMPLE, _points(fitted, "shipped")))
    terms = [Term(term, _DATA[method], method, tuple(pts))
             for method, points in rows for term, pts in points.items() if pts]
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
    says, and the SGLang release its ``version`` names (:func:`run_release`; 0.5.23 without one), said in
    the note. Raises :class:`InputError` for a TP that does not agree with the server's."""
    from .traces import bench_serving_lengths

    runs, notes = [], []
    for k, res in enumerate(results):
        version, release_note = run_release(res.server.get("version"))
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
            num_prompts=res.requests, metrics=tuple(res.metrics.items()),
            approximation="" if res.input_lens else note, prefill_cuda_graph=None, sglang_version=version))
        notes.append(f"{res.where}: {note}; {release_note}")
    return runs, notes


def run_release(version: object) -> tuple[str, str]:
    """The SGLang release a user's bench_serving run is replayed with, from its ``server_info``'s
    ``version`` (``None``: not given), and a note saying which: the release's version text, or
    :data:`~pdmux_cli.sglang.release_defaults.LATEST_RELEASE` where none is given or pdmux cannot use it."""
    latest = f"SGLang {LATEST_RELEASE}'s defaults and rules"
    if version in (None, ""):
        return LATEST_RELEASE, f"no SGLang version in server_info: {latest}"
    try:
        release = release_defaults(str(version)).release
    except InputError as exc:
        return LATEST_RELEASE, f"{exc}: {latest}"
    return release, f"SGLang {release}'s defaults and rules (server_info)"


def outcome_dict(outcome: RunOutcome) -> dict:
    """One run's replay as JSON: its setup, the command that replays it, measured and predicted figures."""
    run = outcome.run
    return {
        "id": run.id, "source_url": run.source_url, "engine": run.engine, "release_line": run.release_line,
        "sglang_version": run.sglang_version,
        "gpu": run.gpu, "tp": run.tp, "model": run.model, "client": run.client,
        "approximation": run.approximation or None, "command": run.command(), "error": outcome.error or None,
        "source": run.campaign, "heldout": outcome.heldout,
        "metrics": [{"metric": name, "measured": measured, "predicted": _finite(outcome.predicted, name),
                     "error": _error(outcome.predicted, name, measured),
                     "predicted_out_of_sample": _finite(outcome.predicted_oos, name),
                     "error_out_of_sample": _error(outcome.predicted_oos, name, measured)}
                    for name, measured in run.metrics],
    }


def _finite(pred: dict[str, float], name: str) -> float | None:
    value = pred.get(name)
    return value if value is not None and math.isfinite(value) else None


def _error(pred: dict[str, float], name: str, measured: float) -> float | None:
    value = _finite(pred, name)
    return None if value is None else (value - measured) / measured


__all__ = ["BENCH_SERVING_SEEDS", "coverage", "FIT_RUNS", "HELDOUT_RUNS", "HELD_OUT", "IN_SAMPLE",
           "LEAVE_SOURCE_OUT",
           "METRICS", "OUT_OF_SAMPLE", "TERMS", "source_of", "RunOutcome", "ServingRun", "client_metrics",
           "load_runs", "outcome_dict", "predictions", "replay", "report", "run_release",
           "runs_from_bench_serving", "workload"]
