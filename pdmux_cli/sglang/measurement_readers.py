"""Readers for what a user's own SGLang measures: one-batch benchmark results, bench_serving result files
and server logs.

Formats (SGLang 0.4 to 0.5.23; docs/architecture.md cites the files):

- **One-batch benchmark** (``python -m sglang.benchmark.one_batch ... --result-filename out.jsonl``,
  ``sglang.bench_one_batch`` before 0.5.16; ``sglang/benchmark/one_batch.py``): one JSON object per
  line with ``batch_size``, ``input_len``, ``output_len``, ``prefill_latency`` (s: one unchunked
  prefill of ``batch_size x input_len`` tokens, synchronised) and ``median_decode_latency`` (s: the
  median of ``output_len - 1`` decode steps timed one by one, absent when ``output_len`` is 1; step
  ``i`` attends over ``input_len + i + 1`` tokens a request); ``run_name`` tags the run.
- **bench_serving results** (``python -m sglang.bench_serving ... --output-file F``;
  ``sglang/benchmark/serving.py`` ``benchmark``): one JSON object per run with its settings
  (``dataset_name``, ``request_rate``, ``max_concurrency``, ``random_*``), ``server_info``, the totals and
  the summary (``median_ttft_ms``, ``median_itl_ms``, ``output_throughput``...); with ``--output-details``
  also per request ``input_lens``, ``output_lens``, ``ttfts``, ``itls``, ``errors``.
- **Server log** (``srt/managers/scheduler_components/metrics_reporter.py``): a line every 40 decode
  steps (``--decode-log-interval``), ``Decode batch, #running-req: N, #token: T, token usage: U, cuda
  graph: B, gen throughput (token/s): G, #queue-req: Q`` (``Decode batch.`` and a trailing ``", "`` in
  some releases, ``Decode batch [step],`` in others, no ``cuda graph`` before mid 2025), one line per
  prefill batch (``Prefill batch, #new-seq: ...``), and ``KV cache pool is full. Retract requests.``
  when decode retracts. The prefix is ``[date time ranks]`` with ranks such as ``TP0`` or ``DP1 TP1``
  (none on one GPU in 0.5.x; Ray and custom logging add their own), so lines are recognised by their
  text, wherever it is.

``G`` is the decode tokens since the rank's previous decode line over the wall time since it, so an
interval is a clean measure of decode steps only when nothing else ran in it: it is used when the
previous line of the same rank was a decode line with the same number of running requests, with no
prefill batch or retraction in between, no speculative decoding (``accept len``) and ``G > 0``. Then a
decode step lasted ``N / G`` seconds and the requests held ``T / N`` tokens of context on average.
Every other interval is skipped and counted by reason.

Pure Python; the file readers stream (a 100,000-line log takes well under a second).
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..util.errors import InputError, short_repr
from ..util.input_files import GZIP_MAGIC, GZIPPED, check_input_file, read_input_text, unreadable
from ..util.numbers import finite_float, plain_int

#: Largest one-batch result file read, bytes (a real one is a few kB).
MAX_ONE_BATCH_BYTES = 16 * 1024**2
#: Largest server log read, bytes; lines longer than :data:`MAX_LINE_CHARS` are skipped and counted.
MAX_LOG_BYTES = 8 * 1024**3
MAX_LINE_CHARS = 64 * 1024


@dataclass(frozen=True)
class OneBatchPoint:
    """One line of a one-batch result: ``batch_size`` requests of ``input_len`` prompt tokens, then
    ``output_len`` tokens each. ``prefill_s``: the prefill's latency; ``decode_step_s``: the median
    decode step (``None`` when ``output_len`` is 1). ``where``: file and line, for messages."""

    batch_size: int
    input_len: int
    output_len: int
    prefill_s: float
    decode_step_s: float | None
    run_name: str = ""
    where: str = ""

    @property
    def decode_context(self) -> int:
        """Tokens each request attends over at the median decode step: ``input_len + (output_len - 1) // 2 +
        1``."""
        return self.input_len + (self.output_len - 1) // 2 + 1


@dataclass(frozen=True)
class DecodeInterval:
    """A clean stretch of a server log: ``running`` requests decoding, ``context`` tokens each on
    average, a step lasting ``step_s`` seconds; ``cuda_graph``: the log said the steps ran as a CUDA
    graph (``None`` when the release did not print it). ``where``: file and line."""

    running: int
    context: float
    step_s: float
    cuda_graph: bool | None
    where: str = ""


@dataclass
class LogReading:
    """What a server log gave: the clean ``intervals`` and, by reason, the decode lines not used
    (``skipped``); ``decode_lines``, ``prefill_lines`` and ``retractions`` seen; ``lines`` read;
    ``tp_size``: GPUs a rank's model is split over, from ``tp_size=N`` in the server's arguments or the
    highest ``TP`` rank seen (1 on one GPU). ``accept_lengths``: the ``accept len`` of every speculative
    decode line (mean tokens a request got per verify round since the rank's previous line; SGLang 0.5.23
    ``srt/managers/scheduler_components/metrics_reporter.py`` writes ``accept len: {:.2f}``), in order."""

    intervals: list[DecodeInterval] = field(default_factory=list)
    accept_lengths: list[float] = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)
    decode_lines: int = 0
    prefill_lines: int = 0
    retractions: int = 0
    lines: int = 0
    tp_size: int = 1

    @property
    def accept_length(self) -> float | None:
        """The median ``accept len`` of the log's speculative decode lines (``None`` without any): what
        ``--speculative-accept-length`` takes."""
        if not self.accept_lengths:
            return None
        values = sorted(self.accept_lengths)
        middle = len(values) // 2
        return values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2

    def summary(self) -> str:
        """One line: used intervals and the skipped ones by reason."""
        why = ", ".join(f"{n} {reason}" for reason, n in self.skipped.most_common())
        return (f"{len(self.intervals)} clean decode interval(s) of {self.decode_lines} decode line(s)"
                + (f"; skipped: {why}" if why else ""))


# ---------------------------------------------------------------------------------------------------
# one-batch results


def _positive_int(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1 or value > 10**9:
        return None
    return value


def _positive_float(value: object) -> float | None:
    number = finite_float(value) if not isinstance(value, str) else None
    return number if number is not None and 0 < number < 1e6 else None


def _json_objects(text: str, problems: list[str]) -> Iterator[tuple[int, dict]]:
    """``(line number, object)`` of each JSON-object line of a JSONL text (blank lines skipped); a line
    that is not one is described in ``problems``."""
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line:
            continue
        try:
            data = json.loads(line)
        except (json.JSONDecodeError, ValueError, RecursionError):
            problems.append(f"line {number}: not JSON")
            continue
        if not isinstance(data, dict):
            problems.append(f"line {number}: not a JSON object")
            continue
        yield number, data


def parse_one_batch(text: str, source: str) -> tuple[list[OneBatchPoint], list[str]]:
    """The points of a one-batch JSONL text, and a description of each line not used (blank lines are
    ignored). Raises :class:`InputError` when no line is a result."""
    points: list[OneBatchPoint] = []
    problems: list[str] = []
    for number, data in _json_objects(text, problems):
        where = f"{source}:{number}"
        sizes = {k: _positive_int(data.get(k)) for k in ("batch_size", "input_len", "output_len")}
        missing = [k for k, v in sizes.items() if v is None]
        prefill = _positive_float(data.get("prefill_latency"))
        if missing or prefill is None:
            bad = missing + ([] if prefill is not None else ["prefill_latency"])
            problems.append(f"line {number}: {', '.join(bad)} missing or not a positive number")
            continue
        decode = data.get("median_decode_latency")
        decode_s = _positive_float(decode) if decode is not None else None
        if decode is not None and decode_s is None:
            problems.append(f"line {number}: median_decode_latency {short_repr(decode)} is not a positive "
                            "number")
            continue
        run_name = data.get("run_name") if isinstance(data.get("run_name"), str) else ""
        points.append(OneBatchPoint(sizes["batch_size"], sizes["input_len"], sizes["output_len"], prefill,
                                    decode_s, run_name[:200], where))
    if not points:
        first = f" ({problems[0]})" if problems else " (the file is empty)"
        raise InputError(f"{source}: no one-batch result in it{first}: give the --result-filename file of "
                         "'python -m sglang.benchmark.one_batch'")
    return points, problems


def read_one_batch(path: str | Path) -> tuple[list[OneBatchPoint], list[str]]:
    """:func:`parse_one_batch` of a file (checked as every input file: :mod:`pdmux_cli.util.input_files`)."""
    text = read_input_text(path, "one-batch result", MAX_ONE_BATCH_BYTES,
                           hint="give the JSONL that 'python -m sglang.benchmark.one_batch "
                           "--result-filename' writes")
    return parse_one_batch(text, str(path))


# ---------------------------------------------------------------------------------------------------
# bench_serving result files

#: Largest bench_serving result file read, bytes (one line per run; ``--output-details`` adds the
#: per-request lists: a few MB for thousands of prompts).
MAX_BENCH_SERVING_BYTES = 256 * 1024**2

#: bench_serving's summary keys -> pdmux's metric names (:data:`pdmux_cli.simulate.serving_accuracy.METRICS`).
BENCH_SERVING_METRICS = {
    "median_ttft_ms": "ttft_p50_ms", "median_itl_ms": "itl_p50_ms", "median_tpot_ms": "tpot_p50_ms",
    "median_e2e_latency_ms": "e2e_p50_ms", "output_throughput": "output_tok_s",
    "total_throughput": "total_tok_s", "input_throughput": "input_tok_s", "request_throughput": "request_rps",
}


@dataclass(frozen=True)
class BenchServingResult:
    """One run of ``python -m sglang.bench_serving ... --output-file F`` (one JSON object per line;
    ``sglang/benchmark/serving.py`` ``benchmark``: the ``result`` dict, plus ``result_details`` with
    ``--output-details``).

    ``dataset``: ``dataset_name`` (``random``, ``sharegpt``...). ``request_rate``: req/s, ``math.inf`` for
    all at once. ``max_concurrency``: the client's limit (0: none). ``completed``: requests that
    succeeded. ``random_input_len``, ``random_output_len``, ``random_range_ratio``: the random
    dataset's settings (0 where absent). ``total_input_tokens``, ``total_output_tokens``: over completed
    requests. ``metrics``: pdmux metric name -> value (:data:`BENCH_SERVING_METRICS`). ``input_lens``,
    ``output_lens``: per request with ``--output-details`` (successful requests only), else ``()``.
    ``server``: what ``server_info`` says of the server (``tp_size``, ``chunked_prefill_size``,
    ``disable_radix_cache``, ``disable_overlap_schedule``, ``model_path``, ``version``; missing keys absent).
    ``backend``: the client backend. ``where``: file and line.
    """

    dataset: str
    request_rate: float
    max_concurrency: int
    completed: int
    random_input_len: int
    random_output_len: int
    random_range_ratio: float
    total_input_tokens: int
    total_output_tokens: int
    metrics: dict
    input_lens: tuple[int, ...]
    output_lens: tuple[int, ...]
    server: dict
    backend: str
    where: str


_SERVER_KEYS = ("tp_size", "chunked_prefill_size", "disable_radix_cache", "disable_overlap_schedule",
                "model_path", "version", "enable_mixed_chunk", "enable_pdmux")


def _bench_serving_line(data: dict, where: str) -> BenchServingResult | str:
    """One parsed line, or why it is not a usable run."""
    rate = data.get("request_rate")
    if isinstance(rate, str) and rate.strip().lower() == "inf":
        rate = math.inf
    rate = finite_float(rate) if rate != math.inf else rate
    if rate is None or not rate > 0:
        return (f"request_rate {short_repr(data.get('request_rate'))} is not a rate (req/s or inf; trace "
                "replays are not read)")
    concurrency = data.get("max_concurrency") or 0
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 0:
        return f"max_concurrency {short_repr(concurrency)} is not a whole number"
    completed = _positive_int(data.get("completed"))
    if completed is None:
        return "no completed requests"
    metrics = {}
    for key, name in BENCH_SERVING_METRICS.items():
        value = _positive_float(data.get(key)) if key in data and data.get(key) is not None else None
        if value is not None:
            metrics[name] = value
    if not metrics:
        return "none of " + ", ".join(BENCH_SERVING_METRICS) + " is a positive number"
    lens = []
    for key in ("input_lens", "output_lens"):
        values = data.get(key)
        if values is None:
            lens.append(())
            continue
        if not isinstance(values, list) or not all(isinstance(v, int) and not isinstance(v, bool)
                                                   and 0 <= v <= 10**8
                                                   for v in values):
            return f"{key} is not a list of token counts"
        lens.append(tuple(values))
    if len(lens[0]) != len(lens[1]):
        return "input_lens and output_lens differ in length"
    errors = data.get("errors")
    if lens[0] and isinstance(errors, list) and len(errors) == len(lens[0]):  # keep the successful requests
        keep = [i for i, e in enumerate(errors) if not e]
        lens = [tuple(v[i] for i in keep) for v in lens]
    info = data.get("server_info") if isinstance(data.get("server_info"), dict) else {}
    server = {k: info[k] for k in _SERVER_KEYS if k in info and isinstance(info[k], (int, float, str, bool))}

    def count(key: str) -> int:
        value = data.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0

    ratio = finite_float(data.get("random_range_ratio"))
    return BenchServingResult(
        dataset=str(data.get("dataset_name") or ""), request_rate=float(rate), max_concurrency=concurrency,
        completed=completed, random_input_len=count("random_input_len"),
        random_output_len=count("random_output_len"), random_range_ratio=ratio if ratio is not None
        and 0 <= ratio <= 1 else 0.0, total_input_tokens=count("total_input_tokens"),
        total_output_tokens=count("total_output_tokens"), metrics=metrics, input_lens=lens[0],
        output_lens=lens[1], server=server, backend=str(data.get("backend") or ""), where=where)


def parse_bench_serving(text: str, source: str) -> tuple[list[BenchServingResult], list[str]]:
    """The runs of a bench_serving result text (one JSON object per line; blank lines ignored), and a
    description of each line not used. Raises :class:`InputError` when no line is a run."""
    results: list[BenchServingResult] = []
    problems: list[str] = []
    for number, data in _json_objects(text, problems):
        got = _bench_serving_line(data, f"{source}:{number}")
        if isinstance(got, str):
            problems.append(f"line {number}: {got}")
        else:
            results.append(got)
    if not results:
        first = f" ({problems[0]})" if problems else " (the file is empty)"
        raise InputError(f"{source}: no bench_serving run in it{first}: give the --output-file of "
                         "'python -m sglang.bench_serving'")
    return results, problems


def read_bench_serving(path: str | Path) -> tuple[list[BenchServingResult], list[str]]:
    """:func:`parse_bench_serving` of a file (checked as every input file:
    :mod:`pdmux_cli.util.input_files`)."""
    text = read_input_text(path, "bench_serving result", MAX_BENCH_SERVING_BYTES,
                           hint="give the JSONL that 'python -m sglang.bench_serving --output-file' writes")
    return parse_bench_serving(text, str(path))


# ---------------------------------------------------------------------------------------------------
# server logs

_DECODE = re.compile(r"Decode batch(?: \[\d+\])?[.,]\s*(.*)")
_PREFILL = re.compile(r"Prefill batch(?: \[\d+\])?[.,]")
_RETRACT = re.compile(r"KV cache pool is full\. Retract requests|Testing retraction\.")
_RANK = re.compile(r"\b(?:DP|PP|ATTN_CP|MOE_DP|TP|EP)\d+\b|\bpid=\d+")
_FIELD = re.compile(r"\s*([^:,]+?):\s*([^,]*)")
_TP_RANK = re.compile(r"\bTP(\d+)\b")
_TP_SIZE = re.compile(r"\btp_size=(\d+)")


def _fields(rest: str) -> dict[str, str]:
    out = {}
    for part in rest.split(","):
        m = _FIELD.fullmatch(part)
        if m:
            out[m.group(1).strip()] = m.group(2).strip()
    return out


def _rank(prefix: str) -> str:
    """The stream a line belongs to: its ranks (``DP1 TP1``) and any process id a launcher adds (Ray's
    ``(SGLangEngine pid=...)``), so two servers logging to one file are told apart."""
    return " ".join(_RANK.findall(prefix))


def parse_server_log(lines: Iterable[str], source: str) -> LogReading:
    """Read SGLang scheduler log lines (module docstring): the clean decode intervals, and the decode
    lines skipped by reason. Never raises on content: unreadable lines are counted."""
    reading = LogReading()
    last: dict[str, tuple[int, bool]] = {}  # rank -> (running at its last decode line, clean since)
    for number, line in enumerate(lines, start=1):
        reading.lines = number
        if len(line) > MAX_LINE_CHARS:
            if "Decode batch" in line[:MAX_LINE_CHARS]:
                reading.decode_lines += 1
                reading.skipped["line too long"] += 1
            continue
        m = _DECODE.search(line)
        if "tp_size=" in line and (size := _TP_SIZE.search(line)):
            reading.tp_size = max(reading.tp_size, int(size.group(1)))
        if m is None:
            if _PREFILL.search(line):
                reading.prefill_lines += 1
                rank = _rank(line[:line.index("Prefill batch")])
                if rank in last:
                    last[rank] = (last[rank][0], False)
            elif (r := _RETRACT.search(line)) is not None:
                reading.retractions += 1
                rank = _rank(line[:r.start()])
                if rank in last:
                    last[rank] = (last[rank][0], False)
            continue
        reading.decode_lines += 1
        rank = _rank(line[:m.start()])
        if "TP" in rank:
            reading.tp_size = max(reading.tp_size, 1 + max(int(t) for t in _TP_RANK.findall(rank)))
        values = _fields(m.group(1))
        # ASCII digits, at most 12 (str.isdigit takes '²')
        running = plain_int(values.get("#running-req", ""))
        # hybrid models (sliding window, Mamba) print their full-attention layers' tokens as "#full token"
        tokens = plain_int(values.get("#token", values.get("#full token", "")))
        throughput = finite_float(values.get("gen throughput (token/s)", ""))
        previous = last.get(rank)
        last[rank] = (running if running is not None else -1, True)
        if running is None or tokens is None or throughput is None:
            reading.skipped["missing fields"] += 1
            continue
        if "npu graph" in values:
            reading.skipped["not a CUDA GPU"] += 1
            continue
        if "accept len" in values:
            reading.skipped["speculative decoding"] += 1
            accept = finite_float(values["accept len"])
            if accept is not None and accept >= 1:
                reading.accept_lengths.append(accept)
            continue
        if previous is None:
            reading.skipped["first of its rank"] += 1
            continue
        if not previous[1]:
            reading.skipped["prefill or retraction in the interval"] += 1
            continue
        if running == 0 or throughput <= 0:
            reading.skipped["empty batch"] += 1
            continue
        if previous[0] != running:
            reading.skipped["batch size changed"] += 1
            continue
        if tokens < running:  # every running request holds at least its last token in the KV pool
            reading.skipped["fewer KV tokens than running requests"] += 1
            continue
        graph = values.get("cuda graph")
        reading.intervals.append(DecodeInterval(
            running, tokens / running, running / throughput,
            None if graph is None else graph.lower() == "true", f"{source}:{number}"))
    return reading


def _stream_lines(path: Path) -> Iterator[str]:
    """The file's lines, decoded; a line longer than :data:`MAX_LINE_CHARS` bytes comes as its first
    ``MAX_LINE_CHARS + 1`` bytes only (the rest is read and dropped in bounded pieces: a file with no
    newline costs no more memory than one such piece)."""
    with path.open("rb") as f:
        while True:
            raw = f.readline(MAX_LINE_CHARS + 1)
            if not raw:
                return
            if len(raw) > MAX_LINE_CHARS and not raw.endswith(b"\n"):
                while (rest := f.readline(1024 * 1024)) and not rest.endswith(b"\n"):
                    pass
            yield raw.decode("utf-8", errors="replace")


def read_server_log(path: str | Path) -> LogReading:
    """:func:`parse_server_log` of a file, streamed (bytes that are not UTF-8 are replaced). Raises
    :class:`InputError` for a missing, special or unreadable file, one with NUL bytes in its first 4 KiB
    (UTF-16 or binary), or one with no decode line at all."""
    path = check_input_file(path, "server log", hint="give the log SGLang's server printed")
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise unreadable(path, "server log", exc) from None
    if size > MAX_LOG_BYTES:
        raise InputError(f"server log {path}: {size / 1024**3:.1f} GiB, more than the "
                         f"{MAX_LOG_BYTES / 1024**3:.0f} GiB read: cut it first (e.g. grep 'batch' "
                         "server.log)")
    try:
        with path.open("rb") as f:
            head = f.read(4096)
        if head.startswith(GZIP_MAGIC):
            raise InputError(f"server log {path}: {GZIPPED}")
        if b"\x00" in head:
            raise InputError(f"server log {path}: not UTF-8 text (NUL bytes: UTF-16 or binary): give the log "
                             "SGLang's server printed, as text")
        reading = parse_server_log(_stream_lines(path), str(path))
    except OSError as exc:
        raise unreadable(path, "server log", exc) from None
    if not reading.decode_lines:
        raise InputError(f"{path}: no 'Decode batch' line in {reading.lines} line(s): give an SGLang server "
                         "log (the scheduler's output, at the default log level)")
    return reading
