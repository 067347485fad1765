"""Readers for what a user's own SGLang measures: one-batch benchmark results, bench_serving result files
and server logs.

Formats (SGLang 0.4 to 0.5.23; docs/modules.md cites the files):

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
  also per request ``input_lens``, ``output_lens``, ``ttfts``, ``itls``, ``errors``. A run's own figures
  must agree as bench_serving computes them (:func:`bench_serving_disagreements`) or the file is refused.
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

Pure Python; the file readers stream (a 100,000-line log takes about a second on one core).
"""

from __future__ import annotations

import decimal
import json
import math
import re
import statistics
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..util.errors import InputError, short_repr
from ..util.input_files import GZIP_MAGIC, GZIPPED, check_input_file, read_input_text, unreadable
from ..util.numbers import finite_float, plain_int
from .speculative_args import SPECULATIVE_HIGHS

#: The largest ``accept len`` a log line may carry: one token per draft step at pdmux's most steps, plus the
#: bonus token (:data:`~pdmux_cli.sglang.speculative_args.SPECULATIVE_HIGHS`).
MAX_ACCEPT_LENGTH = SPECULATIVE_HIGHS["speculative_num_steps"] + 1
#: The skip reason of an ``accept len`` that is no number from 1 to :data:`MAX_ACCEPT_LENGTH`.
ACCEPT_LEN_LEFT_OUT = "accept len unreadable or out of 1-33"

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


#: Two of a run's figures agree when they differ by no more than float arithmetic (this share of the
#: larger) plus the rounding of the figures as written (:func:`written_half_unit`). bench_serving writes
#: them unrounded (``json.dumps`` of Python floats: ``sglang/benchmark/serving.py`` ``benchmark``), so its
#: own files agree to the last bit; the rounding allowance keeps a file rounded by hand or by another tool.
AGREE_REL = 1e-9

#: Each throughput bench_serving writes and the counts it divides by the run's ``duration``
#: (``sglang/benchmark/serving.py`` ``calculate_metrics``: ``request_throughput=completed / dur_s``,
#: ``input_throughput=total_input / dur_s``, ``output_throughput=sum(output_lens) / dur_s``,
#: ``total_throughput=(total_input + sum(output_lens)) / dur_s``), with its unit.
BENCH_SERVING_THROUGHPUTS = (
    ("request_throughput", ("completed",), "req/s"),
    ("input_throughput", ("total_input_tokens",), "tok/s"),
    ("output_throughput", ("total_output_tokens",), "tok/s"),
    ("total_throughput", ("total_input_tokens", "total_output_tokens"), "tok/s"),
)

#: The per-request lists of ``--output-details`` (``sglang/benchmark/serving.py`` ``benchmark``,
#: ``result_details``): one entry per request sent, failed ones included.
BENCH_SERVING_DETAILS = ("input_lens", "output_lens", "ttfts", "itls", "errors")

#: The backends whose ITLs bench_serving re-tokenises when the server reports speculative decoding's
#: ``accept_length`` (``calculate_metrics``: ``use_retokenized_itl``): ``median_itl_ms`` is then not the
#: median of ``itls``.
RETOKENIZED_ITL_BACKENDS = ("sglang-oai", "sglang-oai-chat")


def written_half_unit(value: float) -> float:
    """Half a unit in the last decimal place of ``value`` as JSON writes it (``repr``: ``8.74`` -> 0.005,
    ``2`` -> 0.5, ``1.2345678901234567`` -> 5e-17): how far the written figure may be from the one it
    rounds. ``value``: a finite int or float."""
    exponent = decimal.Decimal(repr(value)).as_tuple().exponent
    return 0.5 * 10.0 ** exponent if isinstance(exponent, int) else math.inf


def _agree(stated: float, expected: float, slack: float = 0.0) -> bool:
    """``stated`` is ``expected`` within :data:`AGREE_REL`, ``stated``'s own rounding and ``slack`` (the
    rounding ``expected`` inherits from the figures it was computed from)."""
    allowed = written_half_unit(stated) + slack + AGREE_REL * max(abs(stated), abs(expected))
    return abs(stated - expected) <= allowed


def _figure(value: object) -> float | int | None:
    """A finite number >= 0 written as a JSON number (not text, not a boolean), as written (an int stays
    one: its rounding is a unit), else ``None``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = finite_float(value)
    return value if number is not None and number >= 0 else None


def _token_count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _middle(values: list[float]) -> tuple[float, float]:
    """``(median, half unit of its middle value(s) as written)`` of a non-empty list (numpy's median, which
    bench_serving takes: the mean of the two middle values of an even count)."""
    ordered = sorted(values)
    n = len(ordered)
    middle = ordered[(n - 1) // 2: n // 2 + 1]
    return statistics.fmean(middle), max(written_half_unit(v) for v in middle)


def _throughput_disagreements(data: dict) -> list[str]:
    """The throughputs that are not their counts over the run's ``duration`` (or, with no ``duration``,
    over the one the first throughput implies)."""
    counts = {k: _token_count(data.get(k))
              for k in ("completed", "total_input_tokens", "total_output_tokens")}

    def count(keys: tuple[str, ...]) -> int | None:
        values = [counts[k] for k in keys]
        return None if None in values else sum(values)

    out: list[str] = []
    duration, slack_rel, named, implied_by = _figure(data.get("duration")), 0.0, "duration", None
    if duration is not None and duration > 0:
        half = written_half_unit(duration)
        if half >= duration:  # a duration written as "0": nothing to divide by
            return out
        slack_rel = half / (duration - half)
    else:  # an older or hand-made file without duration: the first throughput implies it
        duration = None
        for rate_key, keys, _ in BENCH_SERVING_THROUGHPUTS:
            rate, n = _figure(data.get(rate_key)), count(keys)
            if rate and n:
                duration, slack_rel = n / rate, written_half_unit(rate) / rate
                named, implied_by = f"duration (none written: {_sum_text(keys)} / {rate_key})", rate_key
                break
        if duration is None:
            return out
    for rate_key, keys, unit in BENCH_SERVING_THROUGHPUTS:
        rate, n = _figure(data.get(rate_key)), count(keys)
        if rate is None or n is None or rate_key == implied_by:
            continue
        expected = n / duration
        if not _agree(rate, expected, expected * slack_rel):
            out.append(f"{rate_key} {rate:.6g} {unit} is not {_sum_text(keys)} / {named} = {n:,} / "
                       f"{duration:.6g} s = {expected:.6g}")
    return out


def _sum_text(keys: tuple[str, ...]) -> str:
    return keys[0] if len(keys) == 1 else f"({' + '.join(keys)})"


def _detail_disagreements(data: dict) -> list[str]:
    """What the ``--output-details`` lists (already checked to be lists of the right kind) say against the
    totals and medians."""
    lists = {k: data[k] for k in BENCH_SERVING_DETAILS if isinstance(data.get(k), list)}
    if not lists:
        return []
    sizes = {k: len(v) for k, v in lists.items()}
    if len(set(sizes.values())) > 1:
        return [", ".join(f"{k} ({n:,})" for k, n in sizes.items())
                + " differ in length (one entry per request sent, each)"]
    out: list[str] = []
    sent = next(iter(sizes.values()))
    errors = lists.get("errors")
    ok = [i for i in range(sent) if not errors[i]] if errors is not None else list(range(sent))
    completed = _token_count(data.get("completed"))
    if completed is not None and completed != len(ok):
        basis = ("requests with no error in errors" if errors is not None
                 else f"requests of {next(iter(lists))}")
        out.append(f"completed {completed:,} is not the {len(ok):,} {basis}")
    total_out = _token_count(data.get("total_output_tokens"))
    total_in = _token_count(data.get("total_input_tokens"))
    if "output_lens" in lists and total_out is not None and sum(lists["output_lens"]) != total_out:
        # calculate_metrics: total_output = sum(output_lens), a failed request's entry 0
        out.append(f"total_output_tokens {total_out:,} is not the sum of output_lens "
                   f"{sum(lists['output_lens']):,}")
    if "input_lens" in lists and total_in:  # 0: a multi-turn run (calculate_metrics gets no input requests)
        sent_in = sum(lists["input_lens"][i] for i in ok)
        if sent_in != total_in:
            out.append(f"total_input_tokens {total_in:,} is not the sum of input_lens over the completed "
                       f"requests {sent_in:,}")
    ttft_ms = _figure(data.get("median_ttft_ms"))
    if "ttfts" in lists and ok and ttft_ms is not None:
        median, half = _middle([lists["ttfts"][i] for i in ok])
        if not _agree(ttft_ms, median * 1e3, half * 1e3):
            out.append(f"median_ttft_ms {ttft_ms:.6g} is not the median of ttfts over the completed requests "
                       f"{median * 1e3:.6g} ms")
    itl_ms = _figure(data.get("median_itl_ms"))
    accept = _figure(data.get("accept_length"))
    retokenized = bool(accept) and data.get("backend") in RETOKENIZED_ITL_BACKENDS
    if "itls" in lists and itl_ms is not None and not retokenized:
        itls = [x for i in ok for x in lists["itls"][i]]
        if itls:  # a backend that streams nothing back records none
            median, half = _middle(itls)
            if not _agree(itl_ms, median * 1e3, half * 1e3):
                out.append(f"median_itl_ms {itl_ms:.6g} is not the median of itls over the completed "
                           f"requests {median * 1e3:.6g} ms")
    return out


def bench_serving_disagreements(data: dict) -> list[str]:
    """Where a bench_serving result line's own figures disagree, one description each naming the fields
    (empty: they agree). bench_serving computes them from one another (``sglang/benchmark/serving.py``
    ``calculate_metrics``; written unrounded by ``benchmark``), so a run whose figures disagree was edited
    or made by another tool, and a replay of it (its ``completed`` requests) would be of a run that never
    happened. Checked where the fields are present:

    - each throughput is its count over ``duration`` (:data:`BENCH_SERVING_THROUGHPUTS`; without
      ``duration``, over the one ``request_throughput`` implies);
    - with ``--output-details`` (:data:`BENCH_SERVING_DETAILS`): the lists hold one entry per request sent;
      ``completed`` is the requests with no error (all of them without ``errors``); ``total_output_tokens``
      is ``sum(output_lens)`` (a failed request's entry is 0); ``total_input_tokens`` the sum of
      ``input_lens`` over the completed requests (unless 0: a multi-turn run); ``median_ttft_ms`` and
      ``median_itl_ms`` 1000 x the median of ``ttfts`` and of every ``itls`` entry over the completed requests
      (ITLs unless re-tokenised: :data:`RETOKENIZED_ITL_BACKENDS`; or none were recorded).

    Agreement allows float arithmetic and the rounding of the figures as written (:data:`AGREE_REL`,
    :func:`written_half_unit`). Counts are exact. ``data``: one parsed line whose lists, where present, are
    lists of the right kind (token counts, seconds, lists of seconds). Never raises."""
    return _throughput_disagreements(data) + _detail_disagreements(data)


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

    @property
    def requests(self) -> int:
        """Requests a replay of the run simulates: those of ``input_lens``, else ``completed``
        (:func:`pdmux_cli.simulate.serving_accuracy.runs_from_bench_serving`)."""
        return len(self.input_lens) or self.completed


_SERVER_KEYS = ("tp_size", "chunked_prefill_size", "disable_radix_cache", "disable_overlap_schedule",
                "model_path", "version", "enable_mixed_chunk", "enable_pdmux")


def _bench_serving_line(data: dict, source: str, line: int) -> BenchServingResult | str:
    """One parsed line (line ``line`` of ``source``), or why it is not a usable run. Raises
    :class:`InputError` where its figures disagree (:func:`bench_serving_disagreements`)."""
    where = f"{source}:{line}"
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
    if (data.get("input_lens") is None) != (data.get("output_lens") is None):
        return "input_lens and output_lens go together (--output-details writes both)"
    ttfts, itls, errors = data.get("ttfts"), data.get("itls"), data.get("errors")
    if ttfts is not None and (not isinstance(ttfts, list) or not all(_figure(t) is not None for t in ttfts)):
        return "ttfts is not a list of times (s)"
    if itls is not None and (not isinstance(itls, list) or not all(
            isinstance(gaps, list) and all(_figure(t) is not None for t in gaps) for gaps in itls)):
        return "itls is not a list of lists of times (s)"
    if errors is not None and not isinstance(errors, list):
        return "errors is not a list"
    disagree = bench_serving_disagreements(data)
    if disagree:
        shown = "; ".join(disagree[:4]) + (f"; and {len(disagree) - 4} more" if len(disagree) > 4 else "")
        raise InputError(
            "{source}, line {line}: bench_serving's own figures disagree ({details}): pdmux replays a run "
            "only when they agree as bench_serving computes them (sglang/benchmark/serving.py, "
            "calculate_metrics); give the file bench_serving wrote, unedited",
            param="bench_serving", values={"source": source, "line": line, "details": shown})
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
    description of each line not used. Raises :class:`InputError` when no line is a run, or naming the
    line and the fields where a run's own figures disagree (:func:`bench_serving_disagreements`)."""
    results: list[BenchServingResult] = []
    problems: list[str] = []
    for number, data in _json_objects(text, problems):
        got = _bench_serving_line(data, source, number)
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


def _too_many_lines(source: str, read: int, max_lines: int) -> InputError:
    return InputError(
        "{source}: more than the {max_lines:,} server-log lines calibrate reads at most ({read:,} read, "
        "with the logs before it; about 90,000 lines a second, 250 bytes of memory a clean interval): keep "
        "the part you need (e.g. tail -n 1000000 server.log) or raise the bound with {flag.max_log_lines} N "
        "(0: no limit)",
        param="max_log_lines", values={"source": source, "max_lines": max_lines, "read": read})


def parse_server_log(lines: Iterable[str], source: str, max_lines: int | None = None,
                     read_before: int = 0) -> LogReading:
    """Read SGLang scheduler log lines (module docstring): the clean decode intervals, and the decode
    lines skipped by reason. Never raises on content: unreadable lines are counted. ``max_lines``: the
    most lines to read, counting ``read_before`` lines of logs read before this one (``None``: no bound);
    :class:`InputError` (``param`` ``max_log_lines``) on the line past it, before reading on."""
    reading = LogReading()
    last: dict[str, tuple[int, bool]] = {}  # rank -> (running at its last decode line, clean since)
    room = None if max_lines is None else max_lines - read_before
    for number, line in enumerate(lines, start=1):
        if room is not None and number > room:
            raise _too_many_lines(source, read_before + number - 1, max_lines)
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
            if accept is not None and 1 <= accept <= MAX_ACCEPT_LENGTH:
                reading.accept_lengths.append(accept)
            else:  # no round accepts fewer than its bonus token, nor more than pdmux's steps + 1
                reading.skipped[ACCEPT_LEN_LEFT_OUT] += 1
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


def read_server_log(path: str | Path, max_lines: int | None = None, read_before: int = 0) -> LogReading:
    """:func:`parse_server_log` of a file, streamed (bytes that are not UTF-8 are replaced), at most
    ``max_lines`` lines counting ``read_before`` of logs read before it (``None``: no bound). Raises
    :class:`InputError` for a missing, special or unreadable file, one over :data:`MAX_LOG_BYTES`, one with
    NUL bytes in its first 4 KiB (UTF-16 or binary), one with no decode line at all, or past ``max_lines``
    (naming ``max_log_lines``, ``pdmux calibrate``'s bound)."""
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
        reading = parse_server_log(_stream_lines(path), str(path), max_lines, read_before)
    except OSError as exc:
        raise unreadable(path, "server log", exc) from None
    if not reading.decode_lines:
        raise InputError(f"{path}: no 'Decode batch' line in {reading.lines} line(s): give an SGLang server "
                         "log (the scheduler's output, at the default log level)")
    return reading
