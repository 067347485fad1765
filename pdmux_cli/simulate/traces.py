"""Request traces: parsers for Azure, Mooncake and BurstGPT files, synthetic Poisson arrivals, retiming.

A :class:`Trace` is what the simulator replays: per request an arrival time (seconds from the first
arrival, ascending), a prompt length and an output length (tokens). Formats (``traces.md``):

- ``azure``: Azure LLM inference trace 2023 CSV, header ``TIMESTAMP,ContextTokens,GeneratedTokens``;
  ``TIMESTAMP`` like ``2023-11-16 18:15:46.6805900`` (7 fractional digits: more than
  ``datetime.fromisoformat`` takes, so it is parsed by hand: the minute through ``strptime``, cached,
  plus ``float`` of the seconds).
- ``mooncake``: Mooncake FAST'25 JSONL, one object a line with ``timestamp`` (ms), ``input_length``,
  ``output_length`` and, optionally, ``hash_ids``: the prompt's prefix-block hashes, one per
  :data:`HASH_BLOCK_TOKENS` tokens (equal ids at the start of two prompts mean a shared prefix), kept
  per request for the simulator's prefix cache; ids past the prompt's last block are dropped, and a
  ``hash_ids`` that is not a list of integers makes the row bad.
- ``burstgpt``: BurstGPT CSV, ``Timestamp`` (s), ``Model``, ``Request tokens``, ``Response tokens``,
  ``Total tokens``, ``Log Type``; rows with 0 response tokens are failed requests: skipped and counted.

Synthetic traces: Poisson arrivals with length specs (:func:`synthetic_trace`; ``random:L`` redraws
bench_serving's random dataset), and bench_serving's generated-shared-prefix dataset
(:func:`generated_shared_prefix_trace`: groups of prompts sharing a system prompt, their ``hash_ids`` token by
token, :attr:`Trace.block_tokens` 1).

Formats users have that give no token counts (ShareGPT-style conversations, bench_serving's default)
or no unit for their timestamps (``prompt_len``/``output_len``/``timestamp`` JSONL) are refused naming
the format and what to do (:func:`unreadable_format`).

The format is detected from the header or first line (or given). Bad rows are collected with their
line number (a count and the first few are reported), never raised; a file with no valid row raises
:class:`~pdmux_cli.util.errors.InputError`. Arrivals are sorted (stably) if the file is not in time order.

Files are read streaming, a line at a time, and may be gzip-compressed (as Azure's and BurstGPT's are
published; recognised by their first two bytes, whatever the name). The requests are kept as compact
columns (:mod:`pdmux_cli.simulate.columns`: 24 bytes a request, plus 8 a hash id), never as Python
objects per request: a week of production traffic, millions of requests, fits in tens of MB.
"""

from __future__ import annotations

import bisect
import csv
import gzip
import io
import itertools
import json
import math
import random
import re
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

from ..util.errors import Finding, InputError, short_repr
from ..util.input_files import GZIP_MAGIC, check_input_file, unreadable
from ..util.numbers import MAX_DIGITS, finite_float, plain_int
from .columns import FLOAT, INT, Column, Ragged
from .columns import column as make_column

#: Formats :func:`load_trace` reads.
FORMATS = ("azure", "mooncake", "burstgpt")

#: The seconds of an Azure timestamp: two ASCII digits, then an optional fraction of ASCII digits
#: (``float`` alone would also take ``"50.0_1"`` and fail on ``"50.0Z"`` with its own words).
_SECONDS = re.compile(r"[0-9]{2}(\.[0-9]*)?")

#: How many bad rows a :class:`Trace` keeps verbatim (all are counted).
KEEP_BAD_ROWS = 5

#: Largest trace file :func:`load_trace` reads, bytes (as stored: a gzip file's compressed size). The file
#: is streamed; what it costs in memory is its requests (:data:`MAX_REQUESTS`).
MAX_TRACE_BYTES = 64 * 1024**3

#: Most requests one trace (a file, or synthetic) may have: 100 million requests take about 2.4 GB as
#: columns (24 bytes each), and a simulation's per-request results about 5 GB more (50 bytes each).
MAX_REQUESTS = 100_000_000

#: Longest line a trace file may have, characters: a Mooncake line of a million-token prompt's hash ids
#: is about 25 K; a line past it (a gzip bomb of one line, a binary file) is refused before it fills memory.
MAX_LINE_CHARS = 1024 * 1024

#: Most lines a trace file may have, blank and bad ones included (twice :data:`MAX_REQUESTS`): a gzip file
#: of billions of blank lines, a few MB as stored, is refused in seconds instead of read for minutes.
MAX_TRACE_LINES = 2 * MAX_REQUESTS

#: Most blank lines in a row a trace file may have, and most bad rows it may have while they outnumber the
#: valid ones: past either it is not a trace (a gzip bomb of blank lines or of garbage is refused in
#: seconds, not read for minutes).
MAX_JUNK_LINES = 1_000_000

#: Largest token length a synthetic length spec may name (N, LO, HI, MEAN, MEDIAN): 10 M tokens.
MAX_SPEC_TOKENS = 10_000_000

#: Most prompt or output tokens one trace row may give; a row past it is reported as bad.
MAX_REQUEST_TOKENS = 100_000_000

#: Largest log-normal shape (SIGMA) of a synthetic length spec.
MAX_LOGNORMAL_SIGMA = 4.0

#: Latest arrival a synthetic or retimed trace may have, seconds (about 32 years): beyond it a
#: double no longer resolves the simulator's sub-microsecond steps.
#: The highest mean arrival rate a retimed trace may have, requests/s: a million a second, arrivals a
#: microsecond apart, is past what any server's HTTP front end receives (and past float precision
#: for arrival times of a long trace).
MAX_RATE_RPS = 1e6
MAX_ARRIVAL_S = 1e9

#: Most requests :func:`synthetic_trace` generates (:data:`MAX_REQUESTS`: the simulator keeps a few
#: tens of bytes per request, in columns).
MAX_SYNTHETIC_REQUESTS = MAX_REQUESTS

#: Prompt tokens per ``hash_ids`` block of a Mooncake trace: 512 in the FAST'25 release
#: (kvcache-ai/Mooncake ``FAST25-release/traces``; the attribution in ../shared/data/traces/README.md and
#: traces.md say so). Block ``j`` of a prompt of ``P`` tokens holds ``min(512, P - 512 j)`` tokens.
HASH_BLOCK_TOKENS = 512


@dataclass(frozen=True)
class Trace:
    """Requests to replay, in arrival order.

    ``arrival_s``: seconds from the first arrival (ascending, first is 0). ``prompt_tokens`` and
    ``output_tokens``: tokens (>= 1 each). ``hash_ids``: per request, its prompt's prefix-block hashes
    (:data:`HASH_BLOCK_TOKENS` tokens a block; ``()`` for a request without), or ``()`` for a trace
    that carries none (Azure, BurstGPT, synthetic). Any sequences may be given; they are kept as
    compact columns (:class:`~pdmux_cli.simulate.columns.Column`, float64 and int64;
    :class:`~pdmux_cli.simulate.columns.Ragged` for ``hash_ids``), which compare equal to tuples.
    ``block_tokens``: prompt tokens per ``hash_ids`` block (:data:`HASH_BLOCK_TOKENS` for Mooncake; a
    generated-shared-prefix trace's own, :func:`generated_shared_prefix_trace`).
    ``source``: file name or ``"synthetic ..."``. ``format``:
    one of :data:`FORMATS` or ``"synthetic"``. ``bad_rows``: number of rows that could not be read;
    ``bad_examples``: the first few as ``(line number, reason)`` (line 0: a request dropped after
    reading, the reason names it). ``failed_rows``: BurstGPT failures
    (0 response tokens), skipped. ``notes``: sentences for the user (re-sorted, retimed, cut).
    ``block_tokens``: the prompt tokens one hash id stands for (:data:`HASH_BLOCK_TOKENS`, the
    Mooncake format's; finer for a trace built from token sequences, so that the radix cache's hits, per token
    in SGLang, are replayed to within a block).
    ``warm_requests``: the first that many requests (at most all) were sent once, to the end, before the run
    (a benchmark client's warm-up on the same server): their prompts and outputs are in the radix cache
    when the run starts (:meth:`pdmux_cli.simulate.engine.Work.warm_cache`); 0 for a cold server.
    ``past_context``: requests the server rejects for exceeding the context length, left out of the replay
    (:func:`drop_past_context`); ``past_context_note``: the ``workload.past_context`` finding that says so
    for a trace file (``None`` where none was, or for a synthetic trace, whose note is in ``notes``).
    """

    arrival_s: tuple[float, ...]
    prompt_tokens: tuple[int, ...]
    output_tokens: tuple[int, ...]
    source: str = ""
    format: str = ""
    bad_rows: int = 0
    bad_examples: tuple[tuple[int, str], ...] = ()
    failed_rows: int = 0
    notes: tuple[str, ...] = field(default_factory=tuple)
    hash_ids: tuple[tuple[int, ...], ...] = ()
    block_tokens: int = HASH_BLOCK_TOKENS
    warm_requests: int = 0
    past_context: int = 0
    past_context_note: Finding | None = None

    def __post_init__(self) -> None:
        for name, code in (("arrival_s", FLOAT), ("prompt_tokens", INT), ("output_tokens", INT)):
            value = getattr(self, name)
            if not (isinstance(value, Column) and value.typecode == code):
                object.__setattr__(self, name, make_column(code, value))
        hashes = self.hash_ids
        if not isinstance(hashes, Ragged):
            hashes = Ragged(hashes) if len(hashes) else Ragged()
        if not hashes.any_values():
            hashes = Ragged()
        object.__setattr__(self, "hash_ids", hashes)
        if hashes and len(hashes) != len(self.arrival_s):
            raise InputError(f"a trace of {len(self.arrival_s)} requests has hash_ids for {len(hashes)}")

    def __len__(self) -> int:
        return len(self.arrival_s)

    @property
    def has_hash_ids(self) -> bool:
        """Whether any request carries prefix-block hashes (the prefix cache has something to match)."""
        return self.hash_ids.any_values()

    @property
    def duration_s(self) -> float:
        """Seconds from the first to the last arrival (0 for one request)."""
        return self.arrival_s[-1] - self.arrival_s[0] if self.arrival_s else 0.0

    @property
    def mean_qps(self) -> float:
        """Mean arrival rate, requests/s: ``(n - 1) / duration`` (0 when undefined)."""
        return (len(self) - 1) / self.duration_s if self.duration_s > 0 else 0.0

    def arrivals_text(self) -> str:
        """How the requests arrive, for a title: ``"over 120 s (8.1 req/s)"``, ``"all arriving at
        once"`` when every request arrives at the same instant (a rate would be infinite), ``"(one request)"``
        for one."""
        if len(self) <= 1:
            return "(one request)" if len(self) == 1 else "(none)"
        if self.duration_s <= 0:
            return "all arriving at once"
        span = f"{self.duration_s:.0f}" if self.duration_s >= 10 else f"{self.duration_s:.3g}"
        return f"over {span} s ({self.mean_qps:.3g} req/s)"

    def bad_rows_finding(self) -> Finding:
        """``workload.bad_rows``: ``rows`` (:attr:`bad_rows`), the trace's ``source``, and the first few
        ``examples`` as ``[line, reason]`` (worded by :mod:`pdmux_cli.messages`)."""
        return Finding("workload.bad_rows", {"rows": self.bad_rows, "source": self.source,
                                             "examples": [list(e) for e in self.bad_examples]})

    def bad_rows_text(self) -> str:
        """One line: ``"3 bad row(s) skipped in FILE: line 4: ...; line 9: ..."``, or ``""`` when none."""
        return str(self.bad_rows_finding()) if self.bad_rows else ""


class _Rows:
    """Collects parsed rows (as columns) and bad-row reports while a file is read."""

    def __init__(self, source: str = "") -> None:
        self.source = source
        self.times = Column(FLOAT)
        self.prompts = Column(INT)
        self.outputs = Column(INT)
        self.hashes = Ragged()
        self.bad = 0
        self.examples: list[tuple[int, str]] = []
        self.failed = 0

    def reject(self, line: int, why: str) -> None:
        self.bad += 1
        if len(self.examples) < KEEP_BAD_ROWS:
            self.examples.append((line, why))
        if self.bad >= MAX_JUNK_LINES and self.bad > len(self.times):
            first, reason = self.examples[0]
            raise InputError(
                "{source}: {count:,} bad rows and {good:,} valid request(s) by line {at:,} (first problem: "
                "line {line}: {reason}): not a trace of this format", param="trace",
                values={"source": self.source, "count": self.bad, "good": len(self.times), "at": line,
                        "line": first, "reason": reason})

    def add(self, line: int, time_s: float, prompt: object, output: object,
            zero_output_is_failure: bool = False, hashes: object = None) -> None:
        # the common row first: both counts plain ASCII digits (what plain_int takes, spaces aside), >= 1
        # and within bounds, a finite time, no hash ids; anything else takes the checks below
        if (hashes is None and type(prompt) is str and type(output) is str and prompt.isascii()
                and output.isascii() and prompt.isdecimal() and output.isdecimal()
                and len(prompt) <= MAX_DIGITS and len(output) <= MAX_DIGITS):
            p, o = int(prompt), int(output)
            if (0 < p <= MAX_REQUEST_TOKENS and 0 < o <= MAX_REQUEST_TOKENS and math.isfinite(time_s)
                    and len(self.times) < MAX_REQUESTS):
                self.hashes.append(())
                self.times.append(time_s)
                self.prompts.append(p)
                self.outputs.append(o)
                return
        p = _tokens(prompt)
        o = _tokens(output)
        if p is None or p < 1:
            self.reject(line, f"prompt tokens {short_repr(prompt)} is not an integer >= 1")
            return
        if o is None or o < 0:
            self.reject(line, f"output tokens {short_repr(output)} is not an integer >= 0")
            return
        if max(p, o) > MAX_REQUEST_TOKENS:
            self.reject(line, f"more than {MAX_REQUEST_TOKENS:,} tokens in one request")
            return
        if o == 0:
            if zero_output_is_failure:
                self.failed += 1
            else:
                self.reject(line, "0 output tokens")
            return
        if not math.isfinite(time_s):
            self.reject(line, "timestamp is not finite")
            return
        blocks: list[int] = []
        if hashes is not None:
            if not isinstance(hashes, list) or not all(type(h) is int for h in hashes):
                self.reject(line, f"hash_ids {short_repr(hashes)} is not a list of integers")
                return
            blocks = hashes[:-(-p // HASH_BLOCK_TOKENS)]  # ids past the prompt's last block dropped
        if len(self.times) >= MAX_REQUESTS:
            raise InputError(
                "{source}: more than {max_requests:,} requests, the most one trace may have: cut it "
                "first (e.g. head -n), or simulate a part of it with {flag.max_requests}",
                param="max_requests",
                values={"source": self.source, "max_requests": MAX_REQUESTS},
            )
        try:
            self.hashes.append(blocks)
        except OverflowError:
            self.reject(line, "a hash id is outside the 64-bit integers")
            return
        self.times.append(time_s)
        self.prompts.append(p)
        self.outputs.append(o)


def _tokens(value: object) -> int | None:
    """An integer token count from ``"123"``, ``123``, ``123.0``; ``None`` otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    text = str(value).strip()
    count = plain_int(text)
    if count is not None:
        return count
    try:
        number = float(text)
    except ValueError:
        return None
    return int(number) if math.isfinite(number) and number.is_integer() else None


def _finish(rows: _Rows, source: str, fmt: str) -> Trace:
    if not rows.times:
        detail = (f"; first problem: line {rows.examples[0][0]}: {rows.examples[0][1]}" if rows.examples
                  else "")
        failed = f" ({rows.failed} failed request rows skipped)" if rows.failed else ""
        raise InputError(f"{source}: no valid request rows in this {fmt} trace{failed}{detail}")
    times, prompts, outputs = rows.times, rows.prompts, rows.outputs
    hashes = rows.hashes if rows.hashes.any_values() else Ragged()
    notes: list[str] = []
    # a later row earlier than its predecessor
    if any(map(float.__gt__, times, itertools.islice(times, 1, None))):
        order = sorted(range(len(times)), key=times.__getitem__)  # stable: equal times keep file order
        times = Column(FLOAT, (times[i] for i in order))
        prompts = Column(INT, (prompts[i] for i in order))
        outputs = Column(INT, (outputs[i] for i in order))
        hashes = Ragged(hashes[i] for i in order) if hashes else hashes
        del order
        notes.append(Finding("trace.sorted", {"source": str(source)}))
    start = times[0]
    if not times[-1] - start <= MAX_ARRIVAL_S:  # also inf (rows at -1e308 and 1e308)
        raise InputError(
            f"{source}: arrivals span {times[-1] - start:.3g} s, more than {MAX_ARRIVAL_S:g} s (about 32 "
            "years): check the timestamps and their unit"
        )
    return Trace(
        arrival_s=Column(FLOAT, (t - start for t in times)) if start else times,
        prompt_tokens=prompts,
        output_tokens=outputs,
        source=source,
        format=fmt,
        hash_ids=hashes,
        bad_rows=rows.bad,
        bad_examples=tuple(rows.examples),
        failed_rows=rows.failed,
        notes=tuple(notes),
    )


# ------------------------------------------------------------------------------------------------
# Detection


def detect_format(first_line: str) -> str | None:
    """The format a file's first non-empty line announces, or ``None``.

    ``{`` -> ``"mooncake"``; a CSV header with ``TIMESTAMP`` and ``ContextTokens`` -> ``"azure"``;
    with ``Request tokens`` and ``Response tokens`` -> ``"burstgpt"`` (case-insensitive).
    """
    text = first_line.strip().lstrip("\ufeff")
    if text.startswith("{"):
        return "mooncake"
    header = [h.strip().strip('"').lower() for h in text.split(",")]
    if "timestamp" in header and "contexttokens" in header and "generatedtokens" in header:
        return "azure"
    if "request tokens" in header and "response tokens" in header:
        return "burstgpt"
    return None


#: Converting SGLang-style ``prompt_len``/``output_len``/``timestamp`` JSONL to the Mooncake JSONL
#: pdmux reads (timestamps in milliseconds).
_TO_MOONCAKE = ("jq -c '{timestamp: (.timestamp * 1000), input_length: .prompt_len, output_length: "
                ".output_len}' IN.jsonl > trace.jsonl (timestamp in seconds; without '* 1000' if it is in "
                "milliseconds)")


#: bench_serving's own argument for a random dataset's prompt length (SGLang 0.5.23
#: ``benchmark/serving.py``), quoted as SGLang's in the refusal of a bench_serving result.
BENCH_SERVING_INPUT_LEN = "--random-input-len"


def unreadable_format(head: str, source: str) -> InputError | None:
    """The :class:`InputError` refusing a file (``source``: its name) of a format users have but pdmux cannot
    replay, from its first 64 KiB ``head``, or ``None``; it names the parameter at fault, ``trace``, and
    the ones to give instead by their Python names (the CLI prints their flags):

    - ShareGPT-style conversations (``[{"id": ..., "conversations": [{"from": "human", "value": ...}]}]``,
      also one object a line), the default dataset of SGLang's and vLLM's bench_serving: prompts as
      text, with neither token counts (bench_serving tokenizes them with the served model's tokenizer)
      nor arrival times (it draws them from ``--request-rate``);
    - JSONL of ``prompt_len``, ``output_len`` and ``timestamp`` (SGLang-style request workloads): the
      timestamp's unit is not written in the file, so it is refused with the conversion to Mooncake
      JSONL (milliseconds) rather than read at a guessed unit;
    - a bench_serving result file (``input_lens``, ``output_lens``: no arrival times; ``pdmux calibrate
      --bench-serving`` reads it);
    - any other JSON array (pdmux reads one JSON object a line).
    """
    text = head.lstrip("\ufeff \t\r\n")
    if text[:1] not in ("[", "{"):
        return None
    if re.search(r'"conversations"\s*:', text):
        return _unreadable(
            "{source}: a ShareGPT-style conversation file (SGLang's and vLLM's bench_serving default "
            "dataset): it holds prompts as text, with no token counts or arrival times, and pdmux has no "
            "tokenizer; give a trace of token counts (Azure CSV, Mooncake JSONL, BurstGPT CSV), or "
            "{flag.synthetic} {flag.qps} N with {flag.prompt_tokens}/{flag.output_tokens} (random:L for "
            "bench_serving's random dataset)", source)
    first = text.split("\n", 1)[0] if text.startswith("{") else ""
    if first:
        try:
            obj = json.loads(first)
        except (ValueError, RecursionError):
            obj = None
        if isinstance(obj, dict) and {"input_lens", "output_lens"} <= set(obj):
            return _unreadable(
                "{source}: a bench_serving result (per-request input_lens and output_lens, no arrival "
                "times): give it to 'pdmux calibrate --bench-serving'; to replay its workload use "
                "{flag.synthetic} {flag.qps} RATE with {flag.prompt_tokens}/{flag.output_tokens} (random:L "
                "as its {bench_serving_input_len})", source, bench_serving_input_len=BENCH_SERVING_INPUT_LEN)
        if isinstance(obj, dict) and "input_length" not in obj and {"prompt_len", "output_len"} <= set(obj):
            return _unreadable(
                "{source}: JSONL of prompt_len, output_len and timestamp: its timestamps' unit is not in the "
                "file; convert it to Mooncake JSONL (milliseconds, input_length, output_length): {convert}",
                source, convert=_TO_MOONCAKE)
    if text.startswith("["):
        return _unreadable(
            "{source}: a JSON array; pdmux reads Mooncake JSONL (one JSON object a line: timestamp in ms, "
            "input_length, output_length), an Azure CSV or a BurstGPT CSV", source)
    return None


def _unreadable(template: str, source: str, **values: str) -> InputError:
    return InputError(template, param="trace", values={"source": source, **values})


def load_trace(path: str | Path, fmt: str | None = None) -> Trace:
    """Read a trace file (format detected from its first line unless ``fmt`` is given).

    The file is read a line at a time, gzip-compressed or not (:func:`open_text`), into columns.
    Returns a :class:`Trace` with arrivals in seconds from the first request. Raises
    :class:`InputError` (one line) for a missing file, a directory or special file (device, pipe,
    socket; refused before opening), a file over :data:`MAX_TRACE_BYTES` or of more than
    :data:`MAX_REQUESTS` requests, an unreadable, non-UTF-8 or broken gzip file, an unknown format,
    a header without the needed columns, or no valid row. Bad rows are counted, not raised.
    """
    p = Path(path)
    if fmt is not None:
        fmt = fmt.strip().lower()
        if fmt not in FORMATS:
            raise InputError(f"unknown trace format {fmt!r}: use one of {', '.join(FORMATS)}")
    check_input_file(p, "trace file")
    try:
        size = p.stat().st_size
        if size > MAX_TRACE_BYTES:  # checked on the size, not by reading: the file is streamed below
            raise InputError(f"trace file {p}: {size / 1024**3:.1f} GiB, more than the "
                             f"{MAX_TRACE_BYTES / 1024**3:.0f} GiB pdmux reads: cut it first (e.g. head -n)")
        handle = open_text(p)
    except OSError as e:
        raise unreadable(p, "trace file", e) from None
    with handle:
        try:
            head = handle.read(HEAD_CHARS)
            handle.seek(0)
            first = next((line for line in io.StringIO(head, newline="") if line.strip()), "")
            if not first and len(head) == HEAD_CHARS:
                raise InputError("{path}: its first {head_kib} KiB are blank lines: not a trace (an Azure "
                                 "CSV, a Mooncake JSONL or a BurstGPT CSV)", param="trace",
                                 values={"path": str(p), "head_kib": HEAD_CHARS // 1024})
            if not first:
                raise InputError("{path}: {what}: not a trace (an Azure CSV, a Mooncake JSONL or a BurstGPT "
                                 "CSV)", param="trace",
                                 values={"path": str(p), "what": "blank lines only" if head else "empty"})
            refusal = unreadable_format(head, p.name)
            if refusal is not None:
                raise refusal
            detected = detect_format(first)
            if fmt is None:
                if detected is None:
                    shown = first.strip()[:60]
                    raise InputError(
                        "{path}: unknown trace format (first line {shown!r}); expected an Azure CSV, a "
                        "Mooncake JSONL or a BurstGPT CSV, or pass {flag.format}", param="format",
                        values={"path": str(p), "shown": shown})
                fmt = detected
            reader: Callable[..., Trace] = {"azure": _read_azure, "mooncake": _read_mooncake,
                                            "burstgpt": _read_burstgpt}[fmt]
            return reader(_bounded_lines(handle, p.name), p.name)
        except (EOFError, zlib.error, gzip.BadGzipFile) as e:  # a truncated, corrupt or trailing-junk gzip
            raise InputError(f"trace file {p}: a broken gzip file ({e}): download it again") from None
        except (OSError, UnicodeDecodeError) as e:
            raise unreadable(p, "trace file", e) from None


#: Characters of a trace file's start that its format is told from.
HEAD_CHARS = 64 * 1024


def _bounded_lines(handle: io.TextIOBase, source: str) -> Iterator[str]:
    """The lines of ``handle``, each read with a bound (:data:`MAX_LINE_CHARS`), at most
    :data:`MAX_TRACE_LINES` of them; :class:`InputError` past either, so a file of one endless line or
    of billions of blank ones (a gzip bomb: gigabytes from a few MB) costs neither memory nor minutes."""
    readline = handle.readline
    blank = 0
    for number in range(1, MAX_TRACE_LINES + 1):
        line = readline(MAX_LINE_CHARS + 1)
        if not line:
            return
        if line.strip():
            blank = 0
        else:
            blank += 1
            if blank > MAX_JUNK_LINES:
                raise InputError("{source}: more than {count:,} blank lines in a row (from line {line:,}): "
                                 "not a trace", param="trace",
                                 values={"source": source, "count": MAX_JUNK_LINES,
                                         "line": number - blank + 1})
        if len(line) > MAX_LINE_CHARS:
            raise InputError(
                "{source}: line {line:,} is longer than {max_chars:,} characters: not a trace of token "
                "counts (a binary file, or a gzip file that expands to one endless line?)", param="trace",
                values={"source": source, "line": number, "max_chars": MAX_LINE_CHARS})
        yield line
    if readline(1):
        raise InputError(
            "{source}: more than {max_lines:,} lines, the most one trace file may have (blank and bad ones "
            "counted): cut it first (e.g. head -n)", param="trace",
            values={"source": source, "max_lines": MAX_TRACE_LINES})




def open_text(path: Path) -> io.TextIOBase:
    """``path`` opened for reading as UTF-8 text (a BOM skipped, newlines as written for csv), through
    gzip when its first two bytes are gzip's (:data:`GZIP_MAGIC`), whatever its name. Raises
    ``OSError`` as ``open`` does."""
    with open(path, "rb") as raw:
        magic = raw.read(2)
    if magic == GZIP_MAGIC:
        return gzip.open(path, "rt", newline="", encoding="utf-8-sig")
    return open(path, newline="", encoding="utf-8-sig")  # the caller closes it


def _header_index(header: list[str], wanted: dict[str, str], source: str, fmt: str) -> dict[str, int]:
    lowered = [h.strip().strip('"').lower() for h in header]
    index: dict[str, int] = {}
    for key, column in wanted.items():
        if column.lower() not in lowered:
            raise InputError(f"{source}: {fmt} header lacks the column {column!r} (has: {', '.join(header)})")
        index[key] = lowered.index(column.lower())
    return index


class _AzureClock:
    """``YYYY-MM-DD HH:MM:SS.fffffff`` -> ``(minute since the epoch in s, seconds)``, UTC assumed, any
    fraction length. Kept apart so differences keep sub-microsecond digits (a double holding
    1.7e9 s has only ~0.2 us resolution).

    The minute (``YYYY-MM-DD HH:MM``) goes through ``strptime`` once and is cached; the seconds are a
    ``float``. Raises ``ValueError`` for anything else.
    """

    def __init__(self) -> None:
        self.minutes: dict[str, float] = {}

    def __call__(self, text: str) -> tuple[float, float]:
        text = text.strip()
        if len(text) < 19 or text[10] not in " T" or text[16] != ":":
            raise ValueError(f"timestamp {short_repr(text)} is not YYYY-MM-DD HH:MM:SS[.fraction]")
        minute = text[:16]
        base = self.minutes.get(minute)
        if base is None:
            try:
                base = datetime.strptime(minute.replace("T", " "), "%Y-%m-%d %H:%M").replace(
                    tzinfo=timezone.utc).timestamp()
            except ValueError:  # strptime's own words ("unconverted data remains") name no column
                raise ValueError(f"timestamp {short_repr(text)} is not a date and time YYYY-MM-DD "
                                 "HH:MM:SS[.fraction]") from None
            self.minutes[minute] = base
        seconds_text = text[17:]
        if not _SECONDS.fullmatch(seconds_text):
            raise ValueError(f"timestamp {short_repr(text)} is not YYYY-MM-DD HH:MM:SS[.fraction] (UTC "
                             "digits only, no time-zone suffix such as Z or +00:00)")
        seconds = float(seconds_text)
        if not 0 <= seconds < 61:
            raise ValueError(f"timestamp {short_repr(text)} has seconds out of range")
        return base, seconds


def _csv_records(handle, source: str) -> Iterator[tuple[int, int, list[str] | None]]:
    """``(first line, last line, row)`` per CSV record, numbered by physical line (header included).

    A record spanning several lines (a stray ``"`` swallowing the rows after it) comes with row
    ``None``, for the caller to report. csv's own errors (a field past its 131072-character limit,
    which a stray quote reaches in a few thousand rows) become one :class:`InputError` line.
    """
    reader = csv.reader(handle)
    last = 0
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            where = (f"line {last + 1}" if reader.line_num <= last + 1
                     else f"lines {last + 1}-{reader.line_num}")
            raise InputError(f"{source}: {where}: {exc} (a stray or unterminated quote at line "
                             f"{last + 1}?)") from None
        first, last = last + 1, reader.line_num
        yield first, last, (row if last == first else None)


def _records_after_header(handle, source: str) -> tuple[list[str],
                                                        Iterator[tuple[int, int, list[str] | None]]]:
    records = _csv_records(handle, source)
    header = next(records, (1, 1, []))[2] or []
    return header, records


def _data_rows(records: Iterator[tuple[int, int, list[str] | None]], rows: _Rows, columns: int,
               width: int) -> Iterator[tuple[int, list[str]]]:
    """``(line, row)`` of each CSV record with at least ``width`` fields; blank lines skipped, and a
    record spanning lines (a stray quote) or with too few fields rejected into ``rows``."""
    for line, last, row in records:
        if row is None:
            rows.reject(line, f"a quoted field runs from line {line} to line {last}: a stray or unterminated "
                              f"quote swallowed {last - line} line(s)")
        elif not row or (len(row) == 1 and not row[0].strip()):
            continue
        elif len(row) < width:
            rows.reject(line, f"{len(row)} column(s), expected {columns}")
        else:
            yield line, row


def _read_azure(handle, source: str) -> Trace:
    header, records = _records_after_header(handle, source)
    col = _header_index(header, {"t": "TIMESTAMP", "p": "ContextTokens", "o": "GeneratedTokens"}, source,
                        "Azure")
    ct, cp, co = col["t"], col["p"], col["o"]
    width = max(ct, cp, co) + 1
    clock = _AzureClock()
    rows = _Rows(source)
    base: tuple[float, float] | None = None
    for line, row in _data_rows(records, rows, len(header), width):
        try:
            minute, seconds = clock(row[ct])
        except ValueError as e:
            rows.reject(line, str(e))
            continue
        if base is None:
            base = (minute, seconds)  # relative times stay small: sub-microsecond digits survive
        rows.add(line, (minute - base[0]) + (seconds - base[1]), row[cp], row[co])
    return _finish(rows, source, "azure")


def _read_burstgpt(handle, source: str) -> Trace:
    header, records = _records_after_header(handle, source)
    col = _header_index(header, {"t": "Timestamp", "p": "Request tokens", "o": "Response tokens"}, source,
                        "BurstGPT")
    ct, cp, co = col["t"], col["p"], col["o"]
    width = max(ct, cp, co) + 1
    rows = _Rows(source)
    for line, row in _data_rows(records, rows, len(header), width):
        try:
            time_s = float(row[ct])
        except ValueError:
            rows.reject(line, f"timestamp {row[ct]!r} is not a number of seconds")
            continue
        rows.add(line, time_s, row[cp], row[co], zero_output_is_failure=True)
    return _finish(rows, source, "burstgpt")


def _read_mooncake(handle, source: str) -> Trace:
    rows = _Rows(source)
    for line, text in enumerate(handle, start=1):
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
        except (ValueError, RecursionError):  # also 5000-digit numbers and deep nesting
            rows.reject(line, "not a JSON object")
            continue
        if not isinstance(obj, dict):
            rows.reject(line, "not a JSON object")
            continue
        missing = [k for k in ("timestamp", "input_length", "output_length") if k not in obj]
        if missing:
            rows.reject(line, f"missing {', '.join(missing)}")
            continue
        stamp = obj["timestamp"]
        stamp_ms = None if isinstance(stamp, str) else finite_float(stamp)
        if stamp_ms is None:
            rows.reject(line, f"timestamp {short_repr(stamp)} is not a number of milliseconds")
            continue
        rows.add(line, stamp_ms / 1000.0, obj["input_length"], obj["output_length"],
                 hashes=obj.get("hash_ids"))
    return _finish(rows, source, "mooncake")


# ------------------------------------------------------------------------------------------------
# Synthetic


class _NumpyLegacyRandom:
    """numpy's legacy ``np.random.seed(seed)`` / ``np.random.randint`` stream, in pure Python: the same
    Mersenne Twister (MT19937, seeded by ``init_genrand``) as Python's :mod:`random`, whose state is set
    directly, and numpy's masked rejection sampling for bounded integers (``random_bounded_uint64_fill``,
    ``use_masked``, 32-bit draws). SGLang's bench_serving draws its random dataset's lengths with it
    (``sglang/benchmark/datasets/common.py`` ``compute_random_lens``); checked against numpy and against
    the totals public runs print (tests)."""

    def __init__(self, seed: int) -> None:
        mt = [seed & 0xFFFFFFFF]
        for i in range(1, 624):
            prev = mt[-1]
            mt.append((1812433253 * (prev ^ (prev >> 30)) + i) & 0xFFFFFFFF)
        self._rng = random.Random()
        self._rng.setstate((3, (*mt, 624), None))

    def randint(self, low: int, high: int, size: int) -> list[int]:
        """``size`` integers in ``[low, high)``, as ``np.random.randint(low, high, size)``."""
        span = high - low - 1
        if span <= 0:
            return Column(INT, [low]) * size
        mask = span
        for shift in (1, 2, 4, 8, 16):
            mask |= mask >> shift
        draw = self._rng.getrandbits
        out = Column(INT)
        for _ in range(size):
            v = draw(32) & mask
            while v > span:
                v = draw(32) & mask
            out.append(low + v)
        return out

    def random(self) -> float:
        """The next double in [0, 1), as numpy's legacy ``random_sample`` (``legacy_double``: two 32-bit
        words, 53 bits), which is Python's ``random()`` on the same state; numpy's legacy
        ``exponential(scale)`` is ``scale x -log(1 - it)``."""
        return self._rng.random()


def _zeros(count: int) -> Column:
    """``count`` arrivals at 0.0 s."""
    out = Column(FLOAT)
    out.frombytes(bytes(8 * count))
    return out


def _random_spec(text: str, what: str) -> tuple[int, float, int] | None:
    """``random:L[:RATIO[:LOW]]`` -> ``(L, RATIO, LOW)`` (LOW default ``max(int(L x RATIO), 1)``, as
    SGLang 0.5's bench_serving), ``None`` for another spec. Raises :class:`InputError` when malformed."""
    spec = str(text).strip().lower()
    if not spec.startswith("random:"):
        return None
    if not spec.isascii():
        raise InputError(
            "{param_flag} {text!r}: write the numbers in ASCII digits (e.g. random:1024)",
            param=what,
            values={"text": text},
        )
    parts = spec.split(":")[1:]
    try:
        full = int(parts[0])
        ratio = float(parts[1]) if len(parts) > 1 else 0.0
        low = int(parts[2]) if len(parts) > 2 else max(int(full * ratio), 1)
    except (ValueError, IndexError):
        raise InputError(
            "{param_flag} {text!r}: give random:L, random:L:RATIO or random:L:RATIO:LOW",
            param=what,
            values={"text": text},
        ) from None
    if len(parts) > 3 or not 1 <= full <= MAX_SPEC_TOKENS or not 0.0 <= ratio <= 1.0 or not 0 <= low <= full:
        raise InputError(
            "{param_flag} {text!r}: need 1 <= L <= {max_tokens:,}, 0 <= RATIO <= 1 and 0 <= LOW <= L",
            param=what,
            values={"text": text, "max_tokens": MAX_SPEC_TOKENS},
        )
    return full, ratio, low


def bench_serving_lengths(prompt_spec: str, output_spec: str, count: int, seed: int) -> tuple[
    list[int], list[int]]:
    """Prompt and output lengths of SGLang's bench_serving ``--dataset-name random`` for ``count``
    prompts: ``np.random.seed(seed)``, then the input lengths, then the output lengths, each
    ``randint(LOW, L + 1)`` (:func:`_random_spec`; ``sglang/benchmark/datasets/random.py``
    ``sample_random_requests``, ``common.py`` ``compute_random_lens``). An output length of 0 (LOW 0, as
    bench_serving drew them before 0.5) is served as 1 token. Raises :class:`InputError` for specs that
    are not both ``random:``."""
    a, b = _random_spec(prompt_spec, "prompt_tokens"), _random_spec(output_spec, "output_tokens")
    if a is None or b is None:
        raise InputError(
            "bench_serving's random lengths need both {flag.prompt_tokens} and {flag.output_tokens} as "
            "random:L[...]",
            param="prompt_tokens",
            values={},
        )
    rng = _NumpyLegacyRandom(seed)
    prompts = rng.randint(max(a[2], 1), a[0] + 1, count)
    outputs = rng.randint(b[2], b[0] + 1, count)
    return prompts, Column(INT, (max(1, o) for o in outputs))


#: SGLang's name of bench_serving's shared-prefix dataset (``--dataset-name``), the one
#: :func:`generated_shared_prefix_trace` draws.
GSP_DATASET = "generated-shared-prefix"

#: bench_serving's ``--gsp-*`` defaults in SGLang 0.5.23 (``benchmark/serving.py``): groups, prompts per
#: group, system prompt, question and output tokens, and the range ratio (1.0: every length as given).
GSP_DEFAULTS = {"num_groups": 64, "prompts_per_group": 16, "system_prompt_len": 2048, "question_len": 128,
                "output_len": 256, "range_ratio": 1.0}

#: Most hash ids a generated-shared-prefix trace carries (8 bytes each: 128 MiB). Its prompts are hashed
#: token by token, SGLang's radix cache exactly (page size 1), while their tokens are at most this many
#: (7,710 requests of bench_serving's default lengths); past it, in blocks of the system prompts' greatest
#: common divisor (the whole system prompt with the default range ratio), and past it again in blocks
#: wider still (a note says what each costs).
MAX_GSP_BLOCKS = 1 << 24

#: Most prompt tokens a generated-shared-prefix dataset may draw (its system prompts once, its questions):
#: bench_serving draws a random token for each (``random.choices``), and pdmux steps Python's random stream
#: past them to shuffle as it does, about 100 million tokens a second (20 s at this bound).
MAX_GSP_PROMPT_TOKENS = 2_000_000_000

#: Python's ``random.random()`` takes two 32-bit words of the Mersenne Twister; :func:`_skip_random`
#: draws them this many words at a time.
_SKIP_WORDS = 1 << 20


def _skip_random(rng: random.Random, calls: int) -> None:
    """Advance ``rng`` past ``calls`` calls of ``random()`` (two 32-bit words each, as ``getrandbits(32 x
    words)`` draws them), without making the floats."""
    words = 2 * calls
    while words > 0:
        take = min(words, _SKIP_WORDS)
        rng.getrandbits(32 * take)
        words -= take


#: The ``gsp_*`` counts and lengths pdmux takes, ``(least, most)`` (bench_serving draws at least 1 of each;
#: a trace holds at most :data:`MAX_SYNTHETIC_REQUESTS` requests, a length at most :data:`MAX_SPEC_TOKENS`).
GSP_INT_BOUNDS = {"gsp_num_groups": (1, MAX_SYNTHETIC_REQUESTS),
                  "gsp_prompts_per_group": (1, MAX_SYNTHETIC_REQUESTS),
                  "gsp_system_prompt_len": (1, MAX_SPEC_TOKENS), "gsp_question_len": (1, MAX_SPEC_TOKENS),
                  "gsp_output_len": (1, MAX_SPEC_TOKENS)}


def check_gsp_option(param: str, value: object) -> None:
    """:class:`InputError` naming ``param``, a ``gsp_*`` option, unless ``value`` is one pdmux draws: a
    whole number within :data:`GSP_INT_BOUNDS`, or for ``gsp_range_ratio`` a number from 0 to 1. The one
    rule of each (the request's check, :mod:`pdmux_cli.workflows.fields`, and
    :func:`generated_shared_prefix_trace`'s)."""
    if param == "gsp_range_ratio":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                math.isfinite(value) and 0 <= value <= 1):
            raise InputError("{param_flag} must be a number from 0 to 1 (bench_serving draws lengths from "
                             "[L x RATIO, L]), got {value}", param=param, values={"value": short_repr(value)})
        return
    low, high = GSP_INT_BOUNDS[param]
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InputError("{param_flag} must be a whole number from {low:,} to {high:,}, got {value}",
                         param=param, values={"low": low, "high": high, "value": short_repr(value)})


def _gsp_low(full: int, ratio: float) -> int:
    """The least length bench_serving draws for ``full`` at ``ratio`` (``compute_random_lens``)."""
    return max(int(full * ratio), 1)


def generated_shared_prefix_trace(
    qps: float,
    num_groups: int = GSP_DEFAULTS["num_groups"],
    prompts_per_group: int = GSP_DEFAULTS["prompts_per_group"],
    system_prompt_len: int = GSP_DEFAULTS["system_prompt_len"],
    question_len: int = GSP_DEFAULTS["question_len"],
    output_len: int = GSP_DEFAULTS["output_len"],
    range_ratio: float = GSP_DEFAULTS["range_ratio"],
    ordered: bool = False,
    seed: int = 0,
    num_requests: int | None = None,
    duration_s: float | None = None,
) -> Trace:
    """bench_serving's ``--dataset-name generated-shared-prefix`` for ``--seed seed``, replayed at
    ``--request-rate qps`` (``math.inf``: every request at once, bench_serving's default), as SGLang 0.5.23
    builds and sends it (``benchmark/datasets/generated_shared_prefix.py``
    ``sample_generated_shared_prefix_requests``, ``benchmark/serving.py`` ``get_request``; one turn,
    uniform groups):

    - **lengths**: after ``np.random.seed(seed)``, ``compute_random_lens`` draws the ``num_groups`` system
      prompts' lengths, then the questions' (group by group), then the outputs', each from ``[max(int(L x
      range_ratio), 1), L]`` (:class:`_NumpyLegacyRandom`); prompt ``i`` of group ``g`` is group ``g``'s
      system prompt followed by its own question: ``system + question`` tokens, exactly what bench_serving
      sends with ``--tokenize-prompt`` (text prompts are decoded and re-encoded, a few tokens apart);
    - **order**: slots group by group, then, unless ``ordered`` (``--gsp-ordered``), ``random.shuffle`` after
      ``random.seed(seed)`` and one ``random()`` per prompt token drawn (``gen_prompt``'s
      ``random.choices``): the same permutation bench_serving sends, for any tokenizer;
    - **arrivals**: the first at 0 s, then ``np.random.exponential(1 / qps)`` apart, drawn from the numpy
      stream after the lengths (legacy ``standard_exponential``: ``-log(1 - random_double)``), i.e.
      bench_serving's own arrival times; ``--max-concurrency`` is the simulation's closed-loop client.
      ``num_requests``, ``duration_s``: the first requests, the requests arriving within it (bench_serving
      sends every one: ``--num-prompts`` does not apply to this dataset);
    - **shared prefix**: ``hash_ids`` token by token (``block_tokens`` 1), the system prompt's named by its
      group, every question's its own (bench_serving draws every one's tokens): the prefix cache then matches
      what SGLang's radix cache (page size 1) matches, also a system prompt whose prefill in chunks is under
      way. A trace of more than :data:`MAX_GSP_BLOCKS` prompt tokens is hashed in blocks of the system
      prompts' greatest common divisor (whole system prompts with the default range ratio 1: a cached one
      is matched exactly, one still being prefilled in chunks only once whole; 0.1 percentage point of hit
      rate at most on the default dataset), and past that many blocks in wider blocks, a system prompt
      sharing only its whole blocks (a note says each).

    Raises :class:`InputError` naming the parameter (``gsp_num_groups``, ``gsp_prompts_per_group``,
    ``gsp_system_prompt_len``, ``gsp_question_len``, ``gsp_output_len``, ``gsp_range_ratio``, ``qps``,
    ``max_requests``, ``duration``) for values bench_serving cannot draw or pdmux does not take: counts
    below 1, more than :data:`MAX_SYNTHETIC_REQUESTS` requests, lengths past :data:`MAX_SPEC_TOKENS`, more
    than :data:`MAX_GSP_PROMPT_TOKENS` prompt tokens to draw, a ratio outside 0-1.
    """
    for param, value in (("gsp_num_groups", num_groups), ("gsp_prompts_per_group", prompts_per_group),
                         ("gsp_system_prompt_len", system_prompt_len), ("gsp_question_len", question_len),
                         ("gsp_output_len", output_len), ("gsp_range_ratio", range_ratio)):
        check_gsp_option(param, value)
    groups, per_group, system, question, output = (num_groups, prompts_per_group, system_prompt_len,
                                                   question_len, output_len)
    count = groups * per_group
    at_once = isinstance(qps, (int, float)) and qps == math.inf
    _check_gsp_request(groups, per_group, system, question, qps, at_once, num_requests, duration_s)

    ratio = float(range_ratio)
    numpy_rng = _NumpyLegacyRandom(seed)
    system_lens = numpy_rng.randint(_gsp_low(system, ratio), system + 1, groups)
    question_lens = numpy_rng.randint(_gsp_low(question, ratio), question + 1, count)
    output_lens = numpy_rng.randint(_gsp_low(output, ratio), output + 1, count)
    slots = Column(INT, range(count))  # slot s: group s // per_group, its question and output s
    if not ordered:
        shuffler = random.Random(seed)
        _skip_random(shuffler, sum(system_lens) + sum(question_lens))
        shuffler.shuffle(slots)
    keep = count if num_requests is None else min(num_requests, count)
    times = _zeros(keep) if at_once else _gsp_arrivals(numpy_rng, qps, keep, duration_s)
    slots = slots[:len(times)]

    prompt_tokens = Column(INT, (system_lens[s // per_group] + question_lens[s] for s in slots))
    hashes, block, notes = _gsp_hashes(slots, prompt_tokens, system_lens, per_group)
    arrival = "all at once" if at_once else f"Poisson {qps:g} req/s"
    spread = f", range ratio {ratio:g}" if ratio != 1 else ""
    source = (f"bench_serving {GSP_DATASET} ({groups} groups x {per_group} prompts, system prompt {system} + "
              f"question {question} tokens, output {output}{spread}{', ordered' if ordered else ''}, seed "
              f"{seed}), {arrival}")
    return Trace(arrival_s=times, prompt_tokens=prompt_tokens,
                 output_tokens=Column(INT, (output_lens[s] for s in slots)), source=source,
                 format="synthetic", hash_ids=hashes, block_tokens=block, notes=tuple(notes))


def _check_gsp_request(groups: int, per_group: int, system: int, question: int, qps: float, at_once: bool,
                       num_requests: int | None, duration_s: float | None) -> None:
    """:func:`generated_shared_prefix_trace`'s checks of the whole request (its docstring): the requests
    and prompt tokens to draw, the rate, ``num_requests`` and ``duration_s``. Raises :class:`InputError`."""
    count = groups * per_group
    if count > MAX_SYNTHETIC_REQUESTS:
        raise InputError(
            "{flag.gsp_num_groups} {groups:,} x {flag.gsp_prompts_per_group} {per_group:,} is {count:,} "
            "requests, more than the {limit:,} a trace may have",
            param="gsp_num_groups",
            values={"groups": groups, "per_group": per_group, "count": count,
                    "limit": MAX_SYNTHETIC_REQUESTS})
    drawn = groups * system + count * question  # at most: lengths are drawn up to these
    if drawn > MAX_GSP_PROMPT_TOKENS:
        raise InputError(
            "{flag.gsp_num_groups} {groups:,} system prompts of {flag.gsp_system_prompt_len} {system:,} "
            "tokens and {count:,} questions of {flag.gsp_question_len} {question:,}: up to {drawn:,} prompt "
            "tokens to draw, more than {limit:,} (bench_serving draws a random token for each, as pdmux "
            "steps past them): give fewer or shorter prompts",
            param="gsp_num_groups",
            values={"groups": groups, "system": system, "count": count, "question": question, "drawn": drawn,
                    "limit": MAX_GSP_PROMPT_TOKENS})
    if at_once:
        if duration_s is not None:
            raise InputError(
                "{flag.duration} does not apply to {flag.qps} inf (every request arrives at 0 s)",
                param="duration",
                values={},
            )
    else:
        check_rate(qps)
    if num_requests is not None and not (not isinstance(num_requests, bool) and isinstance(num_requests, int)
                                         and num_requests >= 1):
        raise InputError("{flag.max_requests} must be >= 1, got {n}", param="max_requests",
                         values={"n": short_repr(num_requests)})
    if duration_s is not None and not (math.isfinite(duration_s) and duration_s > 0):
        raise InputError("{flag.duration} must be a number > 0 s, got {duration}", param="duration",
                         values={"duration": duration_s})


def _gsp_arrivals(numpy_rng: _NumpyLegacyRandom, qps: float, keep: int, duration_s: float | None) -> Column:
    """Arrival times (s) of at most ``keep`` requests at Poisson ``qps`` req/s, the first at 0 s, the rest
    ``np.random.exponential(1 / qps)`` apart from ``numpy_rng`` (bench_serving's ``get_request``), cut at
    ``duration_s``. Raises :class:`InputError` when arrivals pass :data:`MAX_ARRIVAL_S`."""
    times = Column(FLOAT)
    draw, scale, t = numpy_rng.random, 1.0 / qps, 0.0
    for _ in range(keep):
        if times:
            t += scale * -math.log(1.0 - draw())
            if duration_s is not None and t > duration_s:
                break
            if not t <= MAX_ARRIVAL_S:
                raise InputError(
                    "{flag.qps} {qps:g} is so low that arrivals come after {max_arrival_s:g} s: give a "
                    "higher rate", param="qps", values={"qps": qps, "max_arrival_s": MAX_ARRIVAL_S})
        times.append(t)
    return times


def _gsp_hashes(slots: Column, prompt_tokens: Column, system_lens: list[int],
                per_group: int) -> tuple[Ragged, int, list[Finding]]:
    """``(hash_ids, block_tokens, notes)`` of the prompts in ``slots``
    (:func:`generated_shared_prefix_trace`'s docstring, "shared prefix"): the block a token (SGLang's radix
    cache, page size 1), else whole system prompts (their gcd), else wider, each while the trace's blocks
    stay within :data:`MAX_GSP_BLOCKS`; a system prompt's blocks named by its group, every question's its
    own."""
    groups = len(system_lens)
    notes: list[Finding] = []
    block = 1
    if sum(prompt_tokens) > MAX_GSP_BLOCKS:
        block = math.gcd(*system_lens)
        if sum(-(-p // block) for p in prompt_tokens) <= MAX_GSP_BLOCKS:
            notes.append(Finding("trace.gsp_block_system", {
                "block_tokens": block, "max_blocks": MAX_GSP_BLOCKS}))
        else:
            block = -(-sum(prompt_tokens) // max(1, MAX_GSP_BLOCKS - len(prompt_tokens)))
            lost = [s % block for s in system_lens]
            notes.append(Finding("trace.gsp_block_widened", {
                "block_tokens": block, "max_blocks": MAX_GSP_BLOCKS, "mean_lost": sum(lost) / len(lost),
                "mean_system": sum(system_lens) / len(system_lens)}, "gsp_range_ratio"))
    shared = [s // block for s in system_lens]  # blocks of each group's system prompt named by the group
    first_id = [0] * groups
    for g in range(1, groups):
        first_id[g] = first_id[g - 1] + shared[g - 1]
    next_id = first_id[-1] + shared[-1]
    hashes = Ragged()
    for s, tokens in zip(slots, prompt_tokens):
        g = s // per_group
        own = -(-(tokens - shared[g] * block) // block)
        hashes.append(itertools.chain(range(first_id[g], first_id[g] + shared[g]),
                                      range(next_id, next_id + own)))
        next_id += own
    return hashes, block, notes


def parse_length_spec(text: str | int, what: str) -> Callable[[random.Random], int]:
    """A token-length distribution from a spec; the result draws one length from an RNG.

    ``"1024"``: fixed. ``"uniform:LO:HI"``: integers in [LO, HI]. ``"exp:MEAN"``: exponential with
    that mean, rounded, at least 1. ``"lognormal:MEDIAN:SIGMA"``: log-normal with that median and
    shape, rounded, at least 1. Lengths named are at most :data:`MAX_SPEC_TOKENS`, SIGMA at most
    :data:`MAX_LOGNORMAL_SIGMA`. Raises :class:`InputError` (naming ``what``) for anything else.
    """
    spec = str(text).strip().lower()
    if not spec.isascii():  # int() and float() read other scripts' digits ('٣'); no option does
        raise InputError(
            "{param_flag} {text!r}: write the numbers in ASCII digits (e.g. 1024 or lognormal:1024:1)",
            param=what,
            values={"text": text},
        )
    parts = spec.split(":")
    try:
        value = int(parts[0]) if len(parts) == 1 else 0
        kind, args = parts[0], [float(a) for a in parts[1:]]
    except ValueError:
        raise InputError(
            "{param_flag} {text!r}: give N, uniform:LO:HI, exp:MEAN or lognormal:MEDIAN:SIGMA",
            param=what,
            values={"text": text},
        ) from None
    if len(parts) == 1:
        if not 1 <= value <= MAX_SPEC_TOKENS:
            raise InputError(
                "{param_flag} must be 1 to {max_tokens:,} tokens, got {value}",
                param=what,
                values={"text": text, "value": value, "max_tokens": MAX_SPEC_TOKENS},
            )
        return lambda rng: value
    if not all(math.isfinite(a) for a in args):
        raise InputError(
            "{param_flag} {text!r}: values must be finite", param=what, values={"text": text}
        )
    lengths = args[:1] if kind == "lognormal" else args
    if any(a > MAX_SPEC_TOKENS for a in lengths):
        raise InputError(
            "{param_flag} {text!r}: token lengths must be at most {max_tokens:,}",
            param=what,
            values={"text": text, "max_tokens": MAX_SPEC_TOKENS},
        )
    if kind == "lognormal" and len(args) == 2 and args[1] > MAX_LOGNORMAL_SIGMA:
        raise InputError(
            "{param_flag} {text!r}: SIGMA must be at most {max_sigma:g}",
            param=what,
            values={"text": text, "max_sigma": MAX_LOGNORMAL_SIGMA},
        )
    if kind == "uniform" and len(args) == 2:
        lo, hi = int(args[0]), int(args[1])
        if not 1 <= lo <= hi:
            raise InputError(
                "{param_flag} {text!r}: need 1 <= LO <= HI", param=what, values={"text": text}
            )
        return lambda rng: rng.randint(lo, hi)
    if kind == "exp" and len(args) == 1:
        mean = args[0]
        if mean <= 0:
            raise InputError(
                "{param_flag} {text!r}: the mean must be > 0", param=what, values={"text": text}
            )
        return lambda rng: max(1, round(rng.expovariate(1.0 / mean)))
    if kind == "lognormal" and len(args) == 2:
        median, sigma = args
        if median <= 0 or sigma < 0:
            raise InputError(
                "{param_flag} {text!r}: need MEDIAN > 0 and SIGMA >= 0", param=what, values={"text": text}
            )
        mu = math.log(median)
        return lambda rng: max(1, round(rng.lognormvariate(mu, sigma)))
    raise InputError(
        "{param_flag} {text!r}: give N, uniform:LO:HI, exp:MEAN or lognormal:MEDIAN:SIGMA",
        param=what,
        values={"text": text},
    )


def check_rate(qps: object) -> None:
    """:class:`InputError` naming ``qps`` unless it is a finite rate > 0 (requests/s) and at most
    :data:`MAX_RATE_RPS` (``inf``, every request at once, is checked by the callers)."""
    if not (isinstance(qps, (int, float)) and not isinstance(qps, bool) and math.isfinite(qps) and qps > 0):
        raise InputError(
            "{flag.qps} must be a number > 0 (or inf: every request at once), got {qps}",
            param="qps",
            values={"qps": short_repr(qps)},
        )
    if qps > MAX_RATE_RPS:
        raise InputError(
            "{flag.qps} {qps:g}: more than {max_rate:.0e} requests/s (arrivals less than a microsecond "
            "apart); {flag.qps} inf sends every request at once",
            param="qps",
            values={"qps": qps, "max_rate": MAX_RATE_RPS},
        )


def synthetic_trace(
    qps: float,
    prompt_tokens: str | int = 1024,
    output_tokens: str | int = 128,
    num_requests: int | None = None,
    duration_s: float | None = None,
    seed: int = 0,
) -> Trace:
    """Poisson arrivals at ``qps`` requests/s with lengths from :func:`parse_length_spec` specs.

    Stops after ``num_requests`` requests or at ``duration_s`` seconds, whichever comes first
    (1000 requests when neither is given). ``qps`` infinite: every request at time 0, as
    bench_serving's ``--request-rate inf`` (``num_requests`` then required). Both specs ``random:L[...]``:
    bench_serving's random dataset, its lengths drawn as bench_serving draws them for ``seed``
    (:func:`bench_serving_lengths`). Deterministic for a ``seed``. Raises :class:`InputError`
    for ``qps <= 0`` or finite above :data:`MAX_RATE_RPS`, a bad length spec, bounds that give no request, or
    more than
    :data:`MAX_SYNTHETIC_REQUESTS` requests (asked for, or expected from ``qps * duration_s``).
    """
    at_once = isinstance(qps, (int, float)) and qps == math.inf
    if at_once:
        if num_requests is None:
            raise InputError("{flag.qps} inf (every request at once) needs {flag.max_requests} N",
                             param="max_requests", values={})
        if duration_s is not None:
            raise InputError(
                "{flag.duration} does not apply to {flag.qps} inf (every request arrives at 0 s)",
                param="duration",
                values={},
            )
    else:
        check_rate(qps)
    if num_requests is not None and num_requests < 1:
        raise InputError(
            "{flag.max_requests} must be >= 1, got {n}", param="max_requests", values={"n": num_requests}
        )
    if duration_s is not None and not (math.isfinite(duration_s) and duration_s > 0):
        raise InputError("{flag.duration} must be a number > 0 s, got {duration}", param="duration",
                         values={"duration": duration_s})
    limit = MAX_SYNTHETIC_REQUESTS
    #: the end of the refusals below: a template (its flags rendered with the rest)
    too_many = (
        "more than {limit:,} synthetic requests: lower {flag.qps} or {flag.duration}, or cap them with "
        "{flag.max_requests} (at most {limit:,})"
    )
    if num_requests is not None and num_requests > limit:
        raise InputError("{flag.max_requests} {n:,} asks for " + too_many, param="max_requests",
                         values={"n": num_requests, "limit": limit})
    if num_requests is None and duration_s is not None and qps * duration_s > limit:
        raise InputError(
            "{flag.qps} {qps:g} for {flag.duration} {duration:g} s gives about {count:,.0f} requests, "
            + too_many,
            param="qps",
            values={"qps": qps, "duration": duration_s, "count": qps * duration_s, "limit": limit},
        )
    bench = _random_spec(str(prompt_tokens), "prompt_tokens") is not None or \
        _random_spec(str(output_tokens), "output_tokens") is not None
    if not bench:
        draw_prompt = parse_length_spec(prompt_tokens, "prompt_tokens")
        draw_output = parse_length_spec(output_tokens, "output_tokens")
    if num_requests is None and duration_s is None:
        num_requests = 1000
    if at_once:
        if bench:
            prompts, outputs = bench_serving_lengths(str(prompt_tokens), str(output_tokens), num_requests,
                                                     seed)
        else:
            rng = random.Random(seed)
            prompts = [draw_prompt(rng) for _ in range(num_requests)]
            outputs = [draw_output(rng) for _ in range(num_requests)]
        return Trace(arrival_s=_zeros(num_requests),
                     prompt_tokens=Column(INT, prompts), output_tokens=Column(INT, outputs),
                     source=f"synthetic, {num_requests} requests at once, prompt {prompt_tokens}, output "
                            f"{output_tokens}, seed {seed}", format="synthetic")
    if bench:  # as many as the arrivals need: draw for the cap, or for a generous expectation
        cap = num_requests if num_requests is not None else min(limit, int(qps * duration_s * 1.5) + 100)
        bench_prompts, bench_outputs = bench_serving_lengths(str(prompt_tokens), str(output_tokens), cap,
                                                             seed)
        draw_prompt = lambda _rng, it=iter(bench_prompts): next(it)
        draw_output = lambda _rng, it=iter(bench_outputs): next(it)
    rng = random.Random(seed)
    times, prompts, outputs = Column(FLOAT), Column(INT), Column(INT)
    t = 0.0
    while num_requests is None or len(times) < num_requests:
        if times:
            t += rng.expovariate(qps)
        if duration_s is not None and t > duration_s:
            break
        if not t <= MAX_ARRIVAL_S:  # also NaN/inf
            raise InputError(
                "{flag.qps} {qps:g} is so low that arrivals come after {max_arrival_s:g} s: give a higher "
                "rate",
                param="qps",
                values={"qps": qps, "max_arrival_s": MAX_ARRIVAL_S},
            )
        if len(times) >= limit:  # a Poisson count just past the expectation checked above
            raise InputError(
                "{flag.qps} {qps:g} for {flag.duration} {duration:g} s gives " + too_many,
                param="qps",
                values={"qps": qps, "duration": duration_s, "limit": limit},
            )
        times.append(t)
        prompts.append(draw_prompt(rng))
        outputs.append(draw_output(rng))
    return Trace(
        arrival_s=times, prompt_tokens=prompts, output_tokens=outputs,
        source=f"synthetic Poisson {qps:g} req/s, prompt {prompt_tokens}, output {output_tokens}, seed "
        f"{seed}",
        format="synthetic",
    )


# ------------------------------------------------------------------------------------------------
# Reshaping


def reshape(
    trace: Trace,
    rate_scale: float | None = None,
    qps: float | None = None,
    max_requests: int | None = None,
    duration_s: float | None = None,
) -> Trace:
    """Cut and retime a trace, in this order: first ``max_requests`` requests; arrivals retimed
    (``rate_scale``: inter-arrival times divided by it, so 2 doubles the load; or ``qps``: scaled so
    the mean rate is ``qps`` requests/s); then only arrivals within ``duration_s`` seconds.

    Raises :class:`InputError` for both ``rate_scale`` and ``qps``, non-positive values, retiming a
    trace whose requests all arrive at once, or a cut that leaves no request.
    """
    if rate_scale is not None and qps is not None:
        raise InputError("give {flag.rate_scale} or {flag.qps}, not both (both set the arrival rate)",
                         param="rate_scale", values={})
    if qps == math.inf:
        raise InputError(
            "{flag.qps} inf (every request at once) goes with {flag.synthetic}; a trace file's arrivals "
            "are retimed to a finite rate (or give {flag.rate_scale})",
            param="qps",
            values={},
        )
    for name, value in (("rate_scale", rate_scale), ("qps", qps), ("duration", duration_s)):
        if value is not None and not (math.isfinite(value) and value > 0):
            raise InputError(
                "{param_flag} must be a number > 0, got {value}", param=name, values={"value": value}
            )
    if max_requests is not None and max_requests < 1:
        raise InputError(
            "{flag.max_requests} must be >= 1, got {n}", param="max_requests", values={"n": max_requests}
        )
    notes = list(trace.notes)
    arrivals, prompts, outputs = trace.arrival_s, trace.prompt_tokens, trace.output_tokens
    hashes = trace.hash_ids
    if max_requests is not None and max_requests < len(arrivals):
        arrivals, prompts, outputs = arrivals[:max_requests], prompts[:max_requests], outputs[:max_requests]
        hashes = hashes[:max_requests]
        notes.append(
            Finding("trace.first_requests", {"kept": max_requests, "requests": len(trace)}, "max_requests")
        )
    factor = None
    if rate_scale is not None and rate_scale != 1:
        factor = 1.0 / rate_scale
        notes.append(Finding("trace.rate_scaled", {"rate_scale": rate_scale}, "rate_scale"))
    if qps is not None:
        span = arrivals[-1] - arrivals[0]
        if span <= 0:
            raise InputError(
                "cannot retime to {flag.qps}: every request of the trace arrives at the same time",
                param="qps",
                values={},
            )
        factor = (len(arrivals) - 1) / span / qps
        notes.append(Finding("trace.retimed", {"qps": qps, "was_rps": (len(arrivals) - 1) / span}, "qps"))
    if factor is not None:
        arrivals = Column(FLOAT, (t * factor for t in arrivals))
        param, value = ("rate_scale", rate_scale) if qps is None else ("qps", qps)
        what = "{param_flag} {value:g}"
        if not (math.isfinite(factor) and factor > 0 and arrivals[-1] <= MAX_ARRIVAL_S):
            raise InputError(
                what + " retimes the trace to arrivals after {max_arrival_s:g} s (or none at all): give a "
                "rate nearer the trace's own",
                param=param,
                values={"value": value, "max_arrival_s": MAX_ARRIVAL_S},
            )
        span = arrivals[-1] - arrivals[0]
        if len(arrivals) > 1 and (span <= 0 or (len(arrivals) - 1) / span > MAX_RATE_RPS):
            rate = (len(arrivals) - 1) / span if span > 0 else math.inf
            raise InputError(
                what + " retimes the trace to {rate:.3g} req/s, more than {max_rate:.0e} (arrivals less "
                "than a microsecond apart): give a rate nearer the trace's own ({flag.synthetic} "
                "{flag.qps} inf {flag.max_requests} N sends every request at once)",
                param=param,
                values={"value": value, "rate": rate, "max_rate": MAX_RATE_RPS},
            )
    if duration_s is not None:
        keep = bisect.bisect_right(arrivals, duration_s)
        if keep < len(arrivals):
            notes.append(Finding("trace.duration_cut", {"duration_s": duration_s, "kept": keep,
                                                         "requests": len(arrivals)}, "duration"))
        arrivals, prompts, outputs, hashes = arrivals[:keep], prompts[:keep], outputs[:keep], hashes[:keep]
    if not arrivals:
        raise InputError(
            "no request left after {flag.max_requests}/{flag.duration}", param="max_requests", values={}
        )
    return replace(trace, arrival_s=arrivals, prompt_tokens=prompts, output_tokens=outputs, hash_ids=hashes,
                   notes=tuple(notes))


def _kept_hashes(hashes: Ragged, keep: bytes) -> Ragged:
    """``hashes`` of the requests whose flag in ``keep`` is set; empty when none of them has any."""
    if not hashes:
        return hashes
    return Ragged(itertools.compress(hashes, keep))


def drop_past_context(trace: Trace, context_tokens: int, model_name: str = "the model",
                      own_context: int = 0) -> Trace:
    """``trace`` without the requests whose prompt + output exceed ``context_tokens`` (the model's
    ``max_position_embeddings``, or SGLang's ``--context-length`` where ``own_context``, the model's own
    length, says it replaced it; 0 keeps all), counted in :attr:`Trace.past_context`: the server rejects
    them, they are no bad rows of the file. SGLang 0.5.23 refuses such a request at its tokenizer manager
    (``srt/managers/tokenizer_manager.py`` ``TokenizerManager._validate_one_request``: a prompt of at least
    the context length, "longer than the model's context length", or prompt + ``max_new_tokens`` past it;
    an output of at least one token, as every trace's, makes both one test), before it is scheduled: it
    takes no GPU time, so it is left out of the replay. A trace file's count comes with the
    ``workload.past_context`` finding (:attr:`Trace.past_context_note`; the first few requests); a synthetic
    trace's (drawn, not read) with the ``trace.synthetic_past_context`` note. Raises :class:`InputError`
    when no request is left."""
    if not context_tokens:
        return trace
    limit = (f"the context length of {context_tokens:,} (--context-length; {model_name}'s own: "
             f"{own_context:,})" if own_context else
             f"{model_name}'s context length of {context_tokens:,} (max_position_embeddings)")
    # a flag per request (1 byte each), not a list of indices
    keep = bytes(map(context_tokens.__ge__, map(int.__add__, trace.prompt_tokens, trace.output_tokens)))
    kept = keep.count(1)
    if kept == len(trace):
        return trace
    if not kept:
        raise InputError(f"every request of {trace.source} is longer than {limit}: nothing to simulate")
    dropped = [i for i in itertools.islice((j for j, k in enumerate(keep) if not k), KEEP_BAD_ROWS)]
    dropped_count = len(trace) - kept
    notes = list(trace.notes)
    note = None
    if trace.format == "synthetic":  # drawn, not read: said as before, in the trace's notes
        prompts, outputs = trace.prompt_tokens, trace.output_tokens
        longest = max((j for j, k in enumerate(keep) if not k), key=lambda i: prompts[i] + outputs[i])
        notes.append(
            Finding(
                "trace.synthetic_past_context",
                {
                    "dropped": dropped_count,
                    "requests": len(trace),
                    "model": model_name,
                    "context_tokens": context_tokens,
                    "longest_prompt": prompts[longest],
                    "longest_output": outputs[longest],
                },
            )
        )
    else:
        note = Finding(
            "workload.past_context",
            {
                "rejected": dropped_count,
                "requests": len(trace),
                "source": trace.source,
                "model": model_name,
                "context_tokens": context_tokens,
                "own_context": own_context,
                "examples": [[i + 1, trace.prompt_tokens[i], trace.output_tokens[i]] for i in dropped],
            },
            "context_length" if own_context else None,
        )
    start = trace.arrival_s[keep.index(1)]
    return replace(
        trace,
        arrival_s=Column(FLOAT, (t - start for t in itertools.compress(trace.arrival_s, keep))),
        prompt_tokens=Column(INT, itertools.compress(trace.prompt_tokens, keep)),
        output_tokens=Column(INT, itertools.compress(trace.output_tokens, keep)),
        hash_ids=_kept_hashes(trace.hash_ids, keep),
        notes=tuple(notes),
        past_context=trace.past_context + dropped_count,
        past_context_note=note,
    )
