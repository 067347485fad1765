"""Per-request results folded into a run's metrics as the requests finish: memory bounded by what is in
flight.

:func:`pdmux_cli.simulate.metrics.summarize` used to take a run's whole record (every decode step's end
time, every request's first token and step range) and compute the metrics afterwards: about 4 KB a
request. Here the same arithmetic runs *while* the simulation does (:class:`Fold`, handed to
:func:`pdmux_cli.simulate.runner.simulate`), and on a finished record too (``summarize`` replays a
:class:`~pdmux_cli.simulate.engine.RunResult` through it), so the two give the same figures, float for
float:

- **Per request**, when it finishes (its last token): TTFT, its ITLs' p99 and maximum, TPOT, E2E,
  whether it met the SLO, as :class:`RequestColumns` (compact columns: 42 bytes a request, 50 with
  the server of a DP replica or a disaggregation's instances). TTFT, TPOT and E2E percentiles are
  exact (nearest rank over the columns, :func:`percentiles`).
- **Decode step end times** are kept only from the first step of the oldest request still decoding
  (or retracted and waiting) on: a sliding window (:class:`~pdmux_cli.simulate.engine.StepEnds`,
  trimmed every few thousand steps). Steps leaving it are folded into the all-token ITL distribution,
  each gap weighted by the requests that took part in it and the step before.
- **The all-token ITL distribution** (:class:`WeightedSample`) is exact up to :data:`EXACT_LIMIT` step
  gaps (about 900,000 requests of 128 output tokens at a few a second), its percentiles nearest-rank
  over every token as before. Past that it becomes a log-bucket histogram of the gaps' float64 bit
  patterns (13 mantissa bits: :data:`RELATIVE_ERROR`, 0.006%, the most a percentile it reports is off;
  its maximum stays exact); the metrics say so in a note (:attr:`WeightedSample.approximate`).
  Per-request ITL p99s (what the SLO judges) are always exact.
- ``--csv`` rows are written as their requests finish (:class:`CsvRows`, in request order: a row waits
  only for the requests before it).

Pure Python (numpy's partition for a request's p99 ITL), no I/O but the CSV writer handed in.
"""

from __future__ import annotations

import bisect
import itertools
import math
import operator
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

#: Gaps of the all-token ITL distribution kept exactly (values and weights: 16 bytes each, 128 MiB at the
#: limit) before it becomes a histogram (:class:`WeightedSample`).
EXACT_LIMIT = 1 << 23

#: A bucket is a float64's bit pattern shifted right by this much: 13 of its 52 mantissa bits kept.
SHIFT = 39

#: The largest relative error of a percentile taken from the histogram: half a bucket's width, 2^-14
#: (values in a bucket lie within 2^-13 of each other, relatively; the bucket's midpoint is reported).
RELATIVE_ERROR = 2.0 ** -14

#: Below this many values a column's percentiles come from a sort; above, from buckets and a sort of
#: the few buckets the percentiles fall in (no list of millions of floats). Both exact.
SORT_BELOW = 1 << 16

#: Percentiles reported for each latency.
PERCENTILES = (50, 90, 99)

#: ``status`` of a request in :class:`RequestColumns`.
PENDING, DONE, REJECTED, UNFINISHED = 0, 1, 2, 3

_SIGN = 0x7FFF_FFFF_FFFF_FFFF


def _largest(values: array, count: int) -> list[float]:
    """The ``count`` (1 to ``len(values)``) largest of ``values`` (an ``array('d')`` of its own, no NaN,
    reordered here), in no set order: numpy's partition, the same floats a sort would give, without
    sorting them all (a request's p99 ITL among hundreds of gaps)."""
    import numpy as np

    cut = len(values) - count
    view = np.frombuffer(values)
    view.partition(cut)  # in place: ``values`` is the caller's own copy
    return view[cut:].tolist()
_NAN = array("d", [math.nan])

#: Requests of one gap count above which :func:`_ranked_gaps` takes them as one matrix (numpy's partition
#: along its rows) rather than one partition each: measured (127 gaps a row, 2-core x86_64), 8 rows 35 us as a
#: matrix against 32 us one by one, 16 rows 38 against 53 us.
MATRIX_ROWS = 12


def _ranked_gaps(gaps: Any, first: Any, lengths: Any, tops: Any, g0: Any) -> tuple[Any, Any]:
    """Per request (numpy arrays, one entry each): its ``lengths`` gaps from ``gaps[first]`` on and its
    first gap ``g0``; the ``tops``-th largest of them (its p99 ITL, ``tops`` at most ``lengths``) and the
    largest. The requests of one length (so one ``tops``, both given by its ITL count) with at least
    :data:`MATRIX_ROWS` of them as one matrix, partitioned along its rows, the rest one by one: a partition
    selects the same floats however it runs, so either way gives what sorting each request's gaps would."""
    import numpy as np

    ranked, largest = np.empty(len(first)), np.empty(len(first))
    alone = np.ones(len(first), dtype=bool)
    values, counts = np.unique(lengths, return_counts=True)
    for length in (values[counts >= MATRIX_ROWS].tolist() if len(first) >= MATRIX_ROWS else ()):
        rows = np.flatnonzero(lengths == length)
        top = int(tops[rows[0]])
        cut = length - top
        seg = gaps[first[rows, None] + np.arange(length)]  # a copy: one row a request
        seg.partition(cut, axis=1)  # the `top` largest of each row at its end
        part = np.empty((len(rows), top + 1))
        part[:, :top] = seg[:, cut:]
        part[:, top] = g0[rows]
        part.sort(axis=1)
        ranked[rows], largest[rows] = part[:, -top], part[:, -1]
        alone[rows] = False
    rest = np.flatnonzero(alone)
    p99s, maxes = [], []
    for start, length, top, g in zip(first[rest].tolist(), lengths[rest].tolist(), tops[rest].tolist(),
                                     g0[rest].tolist()):
        cut = length - top
        seg = gaps[start:start + length].copy()
        seg.partition(cut)  # numpy's partition: the `top` largest at the end, the same floats
        row = seg[cut:].tolist()
        row.append(g)
        row.sort()
        p99s.append(row[-top])
        maxes.append(row[-1])
    ranked[rest], largest[rest] = p99s, maxes
    return ranked, largest


def _keys(values: array) -> Iterator[int]:
    """Monotone bucket keys of float64 ``values`` (no NaN): ``v <= w`` gives ``key(v) <= key(w)``
    (the IEEE-754 bit pattern is ordered like the value for non-negative floats; negatives mirrored)."""
    bits = memoryview(values).cast("B").cast("q") if len(values) else ()
    if not len(values) or min(values) >= 0:
        return map(SHIFT.__rrshift__, bits)
    return ((b if b >= 0 else -(b & _SIGN)) >> SHIFT for b in bits)


#: Widest range of bucket keys counted with numpy's ``bincount`` (one slot a key in the range: 64 MiB of
#: float64); wider ones (gaps spanning many binades) are counted in a dict.
BINCOUNT_SPAN = 1 << 23


def _key_array(values: array) -> Any:
    """:func:`_keys` of ``values`` (not empty) as a numpy int64 array: the same keys."""
    import numpy as np

    bits = np.frombuffer(values, dtype=np.int64)
    if np.frombuffer(values).min() < 0:  # negatives mirrored, as _keys does
        bits = np.where(bits >= 0, bits, -(bits & _SIGN))
    return bits >> SHIFT


def _entries_in(values: array, weights: array, wanted: set[int]) -> Iterator[tuple[float, int, int]]:
    """``(value, key, weight)`` of the entries whose bucket key is in ``wanted``, in entry order."""
    if len(values) < SORT_BELOW:
        return ((v, k, w) for v, k, w in zip(values, _keys(values), weights) if k in wanted)
    import numpy as np

    keys_of = _key_array(values)
    chosen = np.flatnonzero(np.isin(keys_of, np.array(sorted(wanted), dtype=np.int64)))
    return zip(np.frombuffer(values)[chosen].tolist(), keys_of[chosen].tolist(),
               np.frombuffer(weights, dtype=np.int64)[chosen].tolist())


def _key(value: float) -> int:
    return next(_keys(array("d", [value])))


def _float_of_bits(bits: int) -> float:
    out = array("d")
    out.frombytes(array("q", [bits]).tobytes())
    return out[0]


def _bucket_value(key: int) -> float:
    """The midpoint of bucket ``key`` (a non-negative key: values >= 0)."""
    return (_float_of_bits(key << SHIFT) + _float_of_bits(((key + 1) << SHIFT) - 1)) / 2


def _bucket_upper(key: int) -> float:
    """The largest float64 in bucket ``key`` (a non-negative key)."""
    return _float_of_bits(((key + 1) << SHIFT) - 1)


def nearest_rank_index(count: float, q: float) -> float:
    """The 1-based rank of the nearest-rank ``q``-th percentile (0-100] of ``count`` samples."""
    return max(1, math.ceil(q / 100.0 * count - 1e-9))


def select_ranks(values: Sequence[float], ranks: Sequence[int]) -> list[float]:
    """The ``rank``-th smallest (1-based, 1 to ``len(values)``) of ``values`` (no NaN) for each of
    ``ranks``. Exact: a sort for a few values, else bucket counts (:func:`_keys`) and a sort of the
    buckets the ranks fall in (no list of millions of floats)."""
    n = len(values)
    if n < SORT_BELOW:
        ordered = sorted(values)
        return [ordered[r - 1] for r in ranks]
    data = values if isinstance(values, array) and values.typecode == "d" else array("d", values)
    counts = Counter(_keys(data))
    keys = sorted(counts)
    cum = list(itertools.accumulate(counts[k] for k in keys))
    where = [bisect.bisect_left(cum, r) for r in ranks]
    inside: dict[int, list[float]] = {keys[i]: [] for i in where}
    for value, key in zip(data, _keys(data)):
        if key in inside:
            inside[key].append(value)
    for bucket in inside.values():
        bucket.sort()
    return [inside[keys[i]][r - (cum[i - 1] if i else 0) - 1] for r, i in zip(ranks, where)]


def select_rank(values: Sequence[float], rank: int) -> float:
    """The ``rank``-th smallest (1-based) of ``values`` (no NaN): :func:`select_ranks` for one rank."""
    return select_ranks(values, [rank])[0]


def percentiles(values: Sequence[float]) -> dict[str, float]:
    """``p50``, ``p90``, ``p99`` (nearest rank: the smallest value with at least that share of samples at
    or below it) and ``max`` of ``values`` (no NaN; ``nan`` each when empty), exact (:func:`select_ranks`)."""
    n = len(values)
    if not n:
        return {**{f"p{q}": math.nan for q in PERCENTILES}, "max": math.nan}
    ranks = [min(n, nearest_rank_index(n, q)) for q in PERCENTILES] + [n]
    chosen = select_ranks(values, ranks)
    out = {f"p{q}": v for q, v in zip(PERCENTILES, chosen)}
    out["max"] = chosen[-1]
    return out


class WeightedSample:
    """Values (s) each counted a whole number of times: the all-token ITL distribution.

    Exact (every value and weight kept) up to :data:`EXACT_LIMIT` entries, then a histogram of bucket
    keys (:func:`_keys`) with weights, from which a percentile is a bucket's midpoint
    (:data:`RELATIVE_ERROR`). The maximum is always exact. :meth:`merge` adds another sample (the
    DP replicas of one run); whether the result is exact depends only on the entries in all, not on
    the order they came in."""

    __slots__ = ("_cached", "count", "hist", "max", "total", "values", "weights")

    def __init__(self) -> None:
        self.values = array("d")
        self.weights = array("q")
        self.hist: dict[int, int] | None = None
        self.count = 0  # entries added (not their weights)
        self.total = 0  # sum of weights
        self.max = -math.inf
        self._cached: tuple[int, tuple[list[int], list[int]]] | None = None  # buckets at a count

    @property
    def approximate(self) -> bool:
        """Whether percentiles come from the histogram (past :data:`EXACT_LIMIT` entries)."""
        return self.hist is not None

    def add(self, value: float, weight: int = 1) -> None:
        """One value counted ``weight`` (> 0) times."""
        self.count += 1
        self.total += weight
        self.max = max(self.max, value)
        if self.hist is None:
            self.values.append(value)
            self.weights.append(weight)
            if self.count > EXACT_LIMIT:
                self._to_histogram()
        else:
            key = _key(value)
            self.hist[key] = self.hist.get(key, 0) + weight

    def extend(self, values: array, weights: array, total: int | None = None,
               top: float | None = None) -> None:
        """Values (an ``array('d')``) with their weights (``array('q')``, each > 0); ``total``, ``top``: their
        weights' sum and their largest value where the caller has them."""
        if not len(values):
            return
        self.count += len(values)
        self.total += sum(weights) if total is None else total
        if top is None:
            top = max(values)
        self.max = max(self.max, top)
        if self.hist is None:
            self.values.extend(values)
            self.weights.extend(weights)
            if self.count > EXACT_LIMIT:
                self._to_histogram()
        else:
            hist = self.hist
            get = hist.get
            for key, weight in zip(_keys(values), weights):
                hist[key] = get(key, 0) + weight

    def _to_histogram(self) -> None:
        hist: dict[int, int] = {}
        get = hist.get
        for key, weight in zip(_keys(self.values), self.weights):
            hist[key] = get(key, 0) + weight
        self.hist = hist
        self.values = array("d")
        self.weights = array("q")

    def merge(self, other: WeightedSample) -> None:
        """Add every entry of ``other``."""
        if other.hist is None:
            count = self.count
            self.extend(other.values, other.weights)
            self.count = count + other.count
            return
        if self.hist is None:
            self._to_histogram()
        self.count += other.count
        self.total += other.total
        self.max = max(self.max, other.max)
        for key, weight in other.hist.items():
            self.hist[key] = self.hist.get(key, 0) + weight

    def tail(self, start: int) -> WeightedSample:
        """A sample of the entries added from the ``start``-th on (counted as :attr:`count` counts them; an
        exact sample only: :class:`ValueError` for a histogram)."""
        if self.hist is not None:
            raise ValueError("a histogram keeps no order of its entries")
        out = WeightedSample()
        out.extend(self.values[start:], self.weights[start:])
        return out

    def _buckets(self) -> tuple[list[int], list[int]]:
        """Bucket keys ascending and their cumulative weights (computed once for as many entries)."""
        if self._cached is not None and self._cached[0] == self.count:
            return self._cached[1]
        self._cached = (self.count, self._count_buckets())
        return self._cached[1]

    def _count_buckets(self) -> tuple[list[int], list[int]]:
        if self.hist is not None:
            keys = sorted(self.hist)
            return keys, list(itertools.accumulate(self.hist[k] for k in keys))
        if len(self.values) >= SORT_BELOW and self.total < 1 << 53:
            import numpy as np

            keys_of = _key_array(self.values)
            low = int(keys_of.min())
            if int(keys_of.max()) - low <= BINCOUNT_SPAN:
                # each bucket's weights summed as float64: whole numbers below 2**53, so exact
                sums = np.bincount(keys_of - low, weights=np.frombuffer(self.weights, dtype=np.int64))
                present = np.flatnonzero(sums)  # every weight is > 0: a bucket with entries sums above 0
                return (present + low).tolist(), np.cumsum(sums[present].astype(np.int64)).tolist()
        weight: dict[int, int] = {}
        get = weight.get
        for key, w in zip(_keys(self.values), self.weights):
            weight[key] = get(key, 0) + w
        keys = sorted(weight)
        return keys, list(itertools.accumulate(weight[k] for k in keys))

    def summary(self, scale: float = 1.0) -> dict[str, float]:
        """``p50``, ``p90``, ``p99`` (weighted nearest rank) and ``max``, times ``scale``; ``nan`` when
        empty."""
        if not self.total:
            return {**{f"p{q}": math.nan for q in PERCENTILES}, "max": math.nan}
        total = self.total
        targets = {q: q / 100.0 * total - 1e-9 for q in PERCENTILES}
        out: dict[str, float] = {}
        if self.hist is None and len(self.values) < SORT_BELOW:
            order = sorted(range(len(self.values)), key=self.values.__getitem__)
            values = [self.values[i] for i in order]
            cum = list(itertools.accumulate(self.weights[i] for i in order))
            for q, target in targets.items():
                out[f"p{q}"] = values[min(bisect.bisect_left(cum, target), len(values) - 1)] * scale
        else:
            keys, cum = self._buckets()
            where = {q: min(bisect.bisect_left(cum, t), len(keys) - 1) for q, t in targets.items()}
            if self.hist is not None:
                for q, i in where.items():
                    out[f"p{q}"] = min(_bucket_value(keys[i]), self.max) * scale
            else:
                wanted = {keys[i] for i in where.values()}
                inside: dict[int, list[tuple[float, int]]] = {k: [] for k in wanted}
                for value, key, w in _entries_in(self.values, self.weights, wanted):
                    inside[key].append((value, w))
                for q, i in where.items():
                    running = cum[i - 1] if i else 0
                    pairs = sorted(inside[keys[i]], key=operator.itemgetter(0))
                    chosen = pairs[-1][0]
                    for value, w in pairs:
                        running += w
                        if running >= targets[q]:
                            chosen = value
                            break
                    out[f"p{q}"] = chosen * scale
        out["max"] = self.max * scale
        return out

    def cdf(self, scale: float = 1.0, points: int = 2000) -> tuple[list[float], list[float]]:
        """``(values ascending, cumulative share)`` at bucket ends (the last at the exact maximum), at most
        about ``points`` points: for plots."""
        if not self.total:
            return [], []
        keys, cum = self._buckets()
        stride = max(1, len(keys) // points)
        idx = list(range(0, len(keys), stride))
        if idx[-1] != len(keys) - 1:
            idx.append(len(keys) - 1)
        total = float(self.total)
        xs = [min(_bucket_upper(keys[i]), self.max) * scale for i in idx]
        xs[-1] = self.max * scale
        return xs, [cum[i] / total for i in idx]


class UnkeptSample(WeightedSample):
    """A :class:`WeightedSample` that keeps nothing: the all-token ITL distribution of a run whose reader
    needs none of it (a capacity search's rate point reads each request's own p99 ITL, not the
    distribution over all tokens). Empty whatever is added: its percentiles are NaN, its CDF empty."""

    __slots__ = ()

    def add(self, value: float, weight: int = 1) -> None:
        """Nothing kept."""

    def extend(self, values: Any, weights: Any, count: int, largest: float) -> None:
        """Nothing kept."""


def _nans(n: int) -> array:
    return _NAN * n


class RequestColumns:
    """Per-request results of one run, trace requests only, as compact columns indexed by request.

    ``ttft_ms``, ``itl_p99_ms``, ``itl_max_ms``, ``tpot_ms``, ``e2e_ms``: float64, ``nan`` where not
    applicable; ``met``: 1 byte each; ``status``: :data:`PENDING`, :data:`DONE`, :data:`REJECTED`,
    :data:`UNFINISHED` (1 byte each); ``server``, ``prefill_server``: int32, -1 where none (empty for one
    server); ``first_token_s``: the server's first-token time per request when asked for (PD
    disaggregation's TTFT breakdown), else empty."""

    FLOATS = ("ttft_ms", "itl_p99_ms", "itl_max_ms", "tpot_ms", "e2e_ms")

    def __init__(self, n: int, servers: bool = False, first_token: bool = False) -> None:
        self.n = n
        for name in self.FLOATS:
            setattr(self, name, _nans(n))
        self.met = bytearray(n)
        self.status = bytearray(n)
        self.server = array("i", [-1]) * n if servers else array("i")
        self.prefill_server = array("i")
        self.first_token_s = _nans(n) if first_token else array("d")

    def __getstate__(self) -> dict:
        return {k: getattr(self, k) for k in (*self.FLOATS, "n", "met", "status", "server", "prefill_server",
                                              "first_token_s")}

    def __setstate__(self, state: dict) -> None:
        for k, v in state.items():
            setattr(self, k, v)

    def truncate(self, count: int) -> None:
        """Keep the first ``count`` rows only."""
        for name in (*self.FLOATS, "met", "status", "server", "prefill_server", "first_token_s"):
            column = getattr(self, name)
            if len(column) > count:
                del column[count:]
        self.n = min(self.n, count)

    def valid(self, name: str) -> array:
        """The non-NaN values of column ``name``, in request order."""
        return array("d", itertools.filterfalse(math.isnan, getattr(self, name)))

    def scatter(self, other: RequestColumns, rids: Sequence[int], start: int = 0) -> None:
        """Copy ``other``'s rows from ``start`` on (one per entry of ``rids``, in that order) into the rows
        ``rids`` (a status of ``other``'s only where it has one)."""
        import numpy as np

        where = np.asarray(rids, dtype=np.int64)
        stop = start + len(where)
        names = [*self.FLOATS, *(("first_token_s",) if len(self.first_token_s) and len(other.first_token_s)
                                 else ())]
        for name in names:
            np.frombuffer(getattr(self, name))[where] = np.frombuffer(getattr(other, name))[start:stop]
        np.frombuffer(self.met, dtype=np.uint8)[where] = np.frombuffer(other.met, dtype=np.uint8)[start:stop]
        status = np.frombuffer(other.status, dtype=np.uint8)[start:stop]
        given = status != 0
        np.frombuffer(self.status, dtype=np.uint8)[where[given]] = status[given]


class PerRequest(Mapping):
    """:attr:`PolicyMetrics.per_request` as lists built from :class:`RequestColumns` on first use (a
    dict of lists before): ``ttft_ms``, ``itl_p99_ms``, ``itl_max_ms``, ``tpot_ms``, ``e2e_ms`` (floats,
    ``nan`` where not applicable), ``met_slo``, ``rejected`` (bools), ``server``, ``prefill_server``
    (ints, empty for one server)."""

    KEYS = ("ttft_ms", "itl_p99_ms", "itl_max_ms", "tpot_ms", "e2e_ms", "met_slo", "rejected", "server",
            "prefill_server")

    def __init__(self, columns: RequestColumns) -> None:
        self.columns = columns
        self._lists: dict[str, list] = {}

    def __getitem__(self, key: str) -> list:
        if key not in self.KEYS:
            raise KeyError(key)
        if key not in self._lists:
            c = self.columns
            if key == "met_slo":
                value: list = [bool(x) for x in c.met]
            elif key == "rejected":
                value = [x == REJECTED for x in c.status]
            elif key in ("server", "prefill_server"):
                value = getattr(c, key).tolist()
            else:
                value = getattr(c, key).tolist()
            self._lists[key] = value
        return self._lists[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.KEYS)

    def __len__(self) -> int:
        return len(self.KEYS)

    def __getstate__(self) -> RequestColumns:
        return self.columns

    def __setstate__(self, columns: RequestColumns) -> None:
        self.columns = columns
        self._lists = {}


class CsvSink:
    """Where ``--csv`` rows go: a text file open for writing (``csv.writer`` on it, :attr:`writer`). A
    policy's rows may be written as its requests finish and the policy still be refused (its step
    budget): :meth:`begin` marks where its rows start, :meth:`abandon` cuts them off again."""

    def __init__(self, handle: Any) -> None:
        import csv

        self.handle = handle
        self.writer = csv.writer(handle, lineterminator="\n")
        self._mark: Any = None

    def begin(self) -> None:
        """A policy's rows start here."""
        self.handle.flush()
        self._mark = self.handle.tell()

    def abandon(self) -> None:
        """Remove the rows written since :meth:`begin`."""
        if self._mark is not None:
            self.handle.flush()
            self.handle.seek(self._mark)
            self.handle.truncate()


class CsvRows:
    """``--csv`` rows of one policy, written in request order as soon as a request and all before it are
    final (finished, or never fit in KV memory; at the end, the rest are ``unfinished``, cut short by a
    simulated crash). ``writer``: a ``csv.writer`` (or a :class:`CsvSink`); ``trace``: the requests' arrivals
    and sizes (:class:`~pdmux_cli.simulate.traces.Trace`)."""

    def __init__(self, writer: Any, policy: str, trace: Any) -> None:
        self.writer = getattr(writer, "writer", writer)  # a CsvSink, or a csv.writer
        self.policy = policy
        self.trace = trace
        self.next = 0

    def flush(self, columns: RequestColumns, crashed: bool = False, final: bool = False) -> None:
        """Write the rows that are final; with ``final``, every row left (``crashed``: the run crashed,
        so a request neither done nor rejected is ``unfinished``)."""
        status = columns.status
        end = columns.n
        if not final:
            stop = self.next
            while stop < end and status[stop] in (DONE, REJECTED):
                stop += 1
            end = stop
        if end > self.next:
            self.writer.writerows(csv_rows(self.policy, self.trace, columns, self.next, end, crashed))
            self.next = end


def _cell(v: float) -> str:
    return "" if not math.isfinite(v) else f"{v:.3f}"


def csv_rows(policy: str, trace: Any, c: RequestColumns, start: int, stop: int,
             crashed: bool) -> Iterator[tuple]:
    """Rows ``start`` to ``stop - 1`` of :data:`pdmux_cli.simulate.report.CSV_FIELDS` for one policy."""
    arrival, prompt, output = trace.arrival_s, trace.prompt_tokens, trace.output_tokens
    server, prefill = c.server, c.prefill_server
    for i in range(start, stop):
        state = c.status[i]
        ttft = c.ttft_ms[i]
        if math.isfinite(ttft):
            status = "done"
        else:
            status = "unfinished" if crashed and state != REJECTED else "rejected"
        yield (policy, i, f"{arrival[i]:.6f}", prompt[i], output[i], status, _cell(ttft),
               _cell(c.itl_p99_ms[i]), _cell(c.itl_max_ms[i]), _cell(c.tpot_ms[i]), _cell(c.e2e_ms[i]),
               c.met[i], str(server[i]) if i < len(server) and server[i] >= 0 else "",
               str(prefill[i]) if i < len(prefill) and prefill[i] >= 0 else "")


class TargetMissed(Exception):
    """A run stopped early (:attr:`Fold.stop_below`): so many of its requests have finished missing the SLO
    that its SLO attainment is below the target whatever the rest do. ``bound``: the attainment the others
    could still reach at most (share)."""

    def __init__(self, bound: float) -> None:
        super().__init__(bound)
        self.bound = bound


class Fold:
    """A run's per-request results and all-token ITL distribution, filled as requests finish.

    ``n``: trace requests (results for requests from ``n`` on, a scenario's initial decode batch, are
    not kept). ``slo_ttft_ms``, ``slo_itl_ms``: the SLOs (> 0). ``max_steps``: the most decode steps
    one simulated server may take (0: no limit; the run raises :class:`~pdmux_cli.util.errors.InputError`
    past it, naming ``--max-steps``). ``servers``: keep which server served each request (DP replicas,
    disaggregation). ``first_token``: keep each request's first-token time. ``csv``: a :class:`CsvRows`
    to write rows to as requests finish. ``progress_steps``: called with a server's decode steps so
    far (the progress bar's budget column). ``rows``: the requests (ascending) this fold keeps rows for,
    one DP replica's when replicas run apart (:meth:`merge` puts them together); ``None``: all ``n``.

    :meth:`attach` gives it the arrival times TTFT counts from (a closed-loop client's send times;
    the trace's for a cluster) and the delay from a step to the client
    (:attr:`~pdmux_cli.simulate.engine.RunResult.output_delay_s`)."""

    def __init__(self, n: int, slo_ttft_ms: float, slo_itl_ms: float, *, max_steps: int = 0,
                 servers: bool = False, first_token: bool = False, csv: CsvRows | None = None,
                 progress_steps: Callable[[int], None] | None = None,
                 rows: Sequence[int] | None = None, all_token_itl: bool = True) -> None:
        self.n = n
        self.slo_ttft_ms, self.slo_itl_ms = slo_ttft_ms, slo_itl_ms
        self.slo_ttft_s, self.slo_itl_s = slo_ttft_ms / 1e3, slo_itl_ms / 1e3
        self.max_steps = max_steps
        self.rows = rows
        self.columns = RequestColumns(n if rows is None else len(rows), servers, first_token)
        #: the ITL distribution over all tokens (``all_token_itl``), or an :class:`UnkeptSample` where the
        #: run's reader needs none: the step gaps then go uncounted
        self.itl = WeightedSample() if all_token_itl else UnkeptSample()
        self.completed = 0
        self.met = 0
        self.last: float | None = None
        self.arrival: Sequence[float] = ()
        self.delay = 0.0
        self.csv = csv
        self.progress_steps = progress_steps
        self.steps = 0  # decode steps folded in, over every server
        #: a target SLO attainment (share) to stop the run at once it cannot reach (:meth:`check_target`)
        self.stop_below: float | None = None

    def check_target(self) -> None:
        """Raise :class:`TargetMissed` when :attr:`stop_below` is set and the requests folded so far that
        missed the SLO leave an attainment below it even if every other request meets it (``met / n`` of
        :func:`~pdmux_cli.simulate.metrics.summarize`, at most ``(n - missed) / n``: the verdict of a
        search against that target cannot change)."""
        target = self.stop_below
        if target is None or not self.n:
            return
        bound = (self.n - (self.completed - self.met)) / self.n
        if bound < target:
            raise TargetMissed(bound)

    def restrict(self, rows: Sequence[int]) -> None:
        """Keep rows only for the requests ``rows`` (ascending; nothing folded yet): one DP replica's."""
        c = self.columns
        self.rows = rows
        self.columns = RequestColumns(len(rows), bool(len(c.server)), bool(len(c.first_token_s)))

    def keep_below(self, rid: int) -> None:
        """Drop the rows of requests ``rid`` and later (a segment of a run cut in time that stopped before
        them: :mod:`pdmux_cli.simulate.time_split`; none of them has finished here)."""
        count = rid if self.rows is None else bisect.bisect_left(self.rows, rid)
        if self.rows is not None:
            self.rows = self.rows[:count]
        self.columns.truncate(count)

    def attach(self, arrival: Sequence[float], delay: float) -> None:
        """The arrival times (s, per request) TTFT and E2E count from, and the delay (s) from a token's
        step to the client."""
        self.arrival = arrival
        self.delay = delay

    # ---- per request --------------------------------------------------------------------------
    def row(self, rid: int) -> int:
        """The row of request ``rid`` in :attr:`columns`."""
        if self.rows is None:
            return rid
        return bisect.bisect_left(self.rows, rid)

    def reject(self, rids: Iterable[int]) -> None:
        """Requests that never fit in KV memory (or were never routed)."""
        status, n = self.columns.status, self.n
        for rid in rids:
            if rid < n:
                status[self.row(rid)] = REJECTED

    def request(self, rid: int, ft: float, s0: int, r: int, ends: Any,
                stints: Sequence[tuple[float, int, int]] | None = None, tokens: int | None = None) -> None:
        """Request ``rid`` finished: its first token at ``ft`` (s), then ``r`` decode steps from global
        step ``s0`` on (``stints``: the runs of a retracted request instead, as
        :attr:`~pdmux_cli.simulate.engine.RunResult.stints` holds them); ``ends``: the server's
        :class:`~pdmux_cli.simulate.engine.StepEnds` window, still holding those steps. ``tokens``: its
        output tokens after the first when a step gives more than one (speculative decoding: a step is a
        round, one streamed chunk, so ITL is per step and TPOT per token); ``None``: one a step.

        A request with decode steps and no stints waits on ``ends`` (its ``pending`` list) and is folded with
        the others waiting there by :meth:`flush` (numpy over all of them at once, the same floats as one by
        one), which :meth:`fold_steps`, :meth:`finish_server` and the server's progress tick call before
        anything reads the steps or the columns."""
        if rid >= self.n:
            return
        if r and not stints:
            pending = getattr(ends, "pending", None)
            if pending is not None:
                pending.append((rid, ft, s0, r, tokens or r))
                return
        c = self.columns
        a = self.arrival[rid] - self.delay  # tokens reach the client `delay` after their step
        if self.rows is not None:
            rid = bisect.bisect_left(self.rows, rid)
        t1 = ft - a
        c.ttft_ms[rid] = t1 * 1e3
        ok = t1 <= self.slo_ttft_s
        base = ends.base
        cont = ends.cont
        if stints:
            token_gaps, finish = _stint_gaps(stints, ends, base)
            add = self.itl.add
            for g in token_gaps[1]:
                add(g)
            values = sorted(token_gaps[0] + token_gaps[1])
            if values:
                p99 = values[math.ceil(0.99 * len(values) - 1e-9) - 1]
                c.itl_p99_ms[rid], c.itl_max_ms[rid] = p99 * 1e3, values[-1] * 1e3
                c.tpot_ms[rid] = (finish - ft) / (tokens or len(values)) * 1e3
                ok = ok and p99 <= self.slo_itl_s
        elif r:
            s = s0 - base
            g0 = ends[s] - ft
            self.itl.add(g0)
            finish = ends[s + r - 1]
            if r > 1:
                need = s + r + 1 - len(cont)
                if need > 0:
                    cont.frombytes(bytes(8 * need))
                cont[s + 1] += 1
                cont[s + r] -= 1
                seg = ends.gaps_upto(s + r)[s + 1:s + r]  # a copy: the r - 1 gaps after the first
            rank = math.ceil(0.99 * r - 1e-9)  # nearest rank of the p99 among r ITLs
            if rank >= r:  # under 100 ITLs: the p99 is the largest
                mx = max(seg) if r > 1 else g0
                if g0 > mx:  # noqa: PLR1730 - max(mx, g0) exactly, no call
                    mx = g0
                p99 = mx
            else:  # the p99 is the top-th largest: among seg's `top` largest (numpy's partition) and g0
                top = r - rank + 1
                values = _largest(seg, top)
                values.append(g0)
                values.sort()
                p99, mx = values[-top], values[-1]
            c.itl_p99_ms[rid] = p99 * 1e3
            c.itl_max_ms[rid] = mx * 1e3
            c.tpot_ms[rid] = (finish - ft) / (tokens or r) * 1e3
            ok = ok and p99 <= self.slo_itl_s
        else:
            finish = ft
        if self.last is None or finish > self.last:
            self.last = finish
        c.e2e_ms[rid] = (finish - a) * 1e3
        c.status[rid] = DONE
        if len(c.first_token_s):
            c.first_token_s[rid] = ft
        self.completed += 1
        if ok:
            c.met[rid] = 1
            self.met += 1

    def flush(self, ends: Any) -> None:
        """Fold the finished requests waiting on ``ends`` (:meth:`request`) at once: every figure computed
        as :meth:`request` computes it one request at a time, as numpy arrays (the same IEEE operations in
        the same order, so the same floats; a p99 among 100 or more ITLs still by its own partition)."""
        pending = getattr(ends, "pending", None)
        if not pending:
            return
        import numpy as np

        ends.pending = []
        rid, ft, s0, r, tokens = (np.array(column) for column in zip(*pending))
        s = s0 - ends.base
        a = np.array([self.arrival[i] for i in rid.tolist()]) - self.delay
        t1 = ft - a
        stop = s + r  # one past each request's last step in the window
        cont = ends.cont
        need = int(stop.max()) + 1 - len(cont)
        if need > 0:
            cont.frombytes(bytes(8 * need))
        gaps = np.frombuffer(ends.gaps_upto(int(stop.max())))
        window = np.frombuffer(ends)
        g0 = window[s] - ft
        finish = window[stop - 1]
        del window  # (a view holds the window's buffer: it could not grow)
        multi = r > 1
        keep = type(self.itl) is not UnkeptSample
        if keep:
            counts = np.frombuffer(cont, dtype=np.int64)
            np.add.at(counts, s[multi] + 1, 1)
            np.add.at(counts, stop[multi], -1)
            del counts
        p99, mx = g0.copy(), g0.copy()
        rank = np.ceil(0.99 * r - 1e-9)  # nearest rank of the p99 among r ITLs
        few = multi & (rank >= r)  # under 100 ITLs: the p99 is the largest
        if few.any():
            bounds = np.empty(2 * int(few.sum()), dtype=np.int64)
            bounds[0::2], bounds[1::2] = s[few] + 1, stop[few]
            padded = np.append(gaps[:int(stop.max()) + 1], 0.0)  # reduceat's last bound must be an index
            top = np.maximum(np.maximum.reduceat(padded, bounds)[0::2], g0[few])
            p99[few] = mx[few] = top
        many = np.flatnonzero(rank < r)  # 100 ITLs or more: the p99 is the top-th largest of the gaps and g0
        if len(many):
            p99[many], mx[many] = _ranked_gaps(gaps, s[many] + 1, r[many] - 1,
                                               r[many] - rank[many].astype(np.int64) + 1, g0[many])
        del gaps
        self._columns_of(rid, ft, a, t1, p99, mx, finish, tokens)
        if not keep:
            return
        values, weights = array("d"), array("q")
        values.frombytes(g0.tobytes())
        weights.frombytes(np.ones(len(g0), dtype=np.int64).tobytes())
        self.itl.extend(values, weights, len(g0), float(g0.max()))

    def _columns_of(self, rid: Any, ft: Any, a: Any, t1: Any, p99: Any, mx: Any, finish: Any,
                    tokens: Any) -> None:
        """:meth:`flush`'s rows: requests ``rid`` (numpy arrays, one entry each: first token ``ft``, arrival
        less the delay ``a``, TTFT ``t1``, ITL p99 and max, finish time, all s; output tokens after the
        first)."""
        import numpy as np

        c = self.columns
        rows = rid if self.rows is None else np.searchsorted(np.asarray(self.rows), rid)
        np.frombuffer(c.ttft_ms)[rows] = t1 * 1e3
        np.frombuffer(c.itl_p99_ms)[rows] = p99 * 1e3
        np.frombuffer(c.itl_max_ms)[rows] = mx * 1e3
        np.frombuffer(c.tpot_ms)[rows] = (finish - ft) / tokens * 1e3
        np.frombuffer(c.e2e_ms)[rows] = (finish - a) * 1e3
        np.frombuffer(c.status, dtype=np.uint8)[rows] = DONE
        if len(c.first_token_s):
            np.frombuffer(c.first_token_s)[rows] = ft
        ok = (t1 <= self.slo_ttft_s) & (p99 <= self.slo_itl_s)
        np.frombuffer(c.met, dtype=np.uint8)[rows[ok]] = 1
        self.met += int(ok.sum())
        self.completed += len(rid)
        last = float(finish.max())
        if self.last is None or last > self.last:
            self.last = last

    # ---- decode steps ---------------------------------------------------------------------------
    def fold_steps(self, ends: Any, upto: int) -> None:
        """Fold the gaps of ``ends``' steps before global step ``upto`` into the all-token ITL distribution
        (each gap counted once per request in both it and the step before; not with an
        :class:`UnkeptSample`) and drop them from the window; the requests waiting on it first
        (:meth:`flush`)."""
        self.flush(ends)
        k = upto - ends.base
        if k <= 0:
            return
        cont = ends.cont
        if type(self.itl) is not UnkeptSample:
            self._fold_gaps(ends, k)
        ends.prev = ends[k - 1]
        del ends[:k]
        del cont[:k]
        del ends.gaps[:k]
        ends.base = upto
        self.steps += k

    def _fold_gaps(self, ends: Any, k: int) -> None:
        """:meth:`fold_steps`' count: the gaps of the window's first ``k`` steps into :attr:`itl`, each
        weighted by the requests taking part in it and the step before."""
        import numpy as np

        cont = ends.cont
        if len(cont) < k:
            cont.frombytes(bytes(8 * (k - len(cont))))
        # per step, the requests taking part in it and the step before: the running sum of the difference
        # array (int64, exact); steps with none leave nothing (numpy on copies of the window's slices, which
        # stay resizable)
        weights = np.cumsum(np.frombuffer(cont[:k], dtype=np.int64)) + ends.weight
        ends.weight = int(weights[-1])
        taken = weights != 0
        gaps = np.frombuffer(ends.gaps_upto(k)[:k])[taken]
        weights = weights[taken]
        if len(gaps):
            values, counts = array("d"), array("q")
            values.frombytes(gaps.tobytes())
            counts.frombytes(weights.tobytes())
            self.itl.extend(values, counts, int(weights.sum()), float(gaps.max()))

    def finish_server(self, ends: Any) -> None:
        """A server's run is over: fold its remaining steps."""
        self.fold_steps(ends, ends.base + len(ends))

    def merge(self, other: Fold, rids: Sequence[int]) -> None:
        """Add a replica's fold (its requests ``rids``, in the order of its rows)."""
        self.merge_part(other, rids, 0, other.itl, other.completed, other.met, other.steps)

    def merge_part(self, other: Fold, rids: Sequence[int], start: int, itl: WeightedSample | UnkeptSample,
                   completed: int, met: int, steps: int) -> None:
        """Add part of another fold: its rows from ``start`` on for the requests ``rids`` (in that order),
        the ITL entries ``itl``, and the ``completed`` requests, ``met`` of them meeting the SLO, and
        ``steps`` decode steps that part folded in (a segment of a run cut in time,
        :mod:`pdmux_cli.simulate.time_split`; a whole replica's fold)."""
        self.columns.scatter(other.columns, rids, start)
        self.itl.merge(itl)
        self.completed += completed
        self.met += met
        self.steps += steps
        if completed and other.last is not None and (self.last is None or other.last > self.last):
            self.last = other.last


def _stint_gaps(runs: Sequence[tuple[float, int, int]], ends: Any,
                base: int) -> tuple[tuple[list[float], list[float]], float]:
    """A retracted request's ITLs: ``((gaps inside decode runs, gaps that start a run), finish time)``.
    A run starts with a token from a (re-)prefill at ``token_s``; the gap before it is from the
    previous run's last token. Decode steps inside runs are counted in ``ends.cont`` (the all-token
    distribution's difference array) as for other requests."""
    inside: list[float] = []
    starting: list[float] = []
    last = None
    cont = ends.cont
    for token_s, first, steps in runs:
        if last is not None:
            starting.append(token_s - last)
        last = token_s
        if steps > 0:
            f = first - base
            starting.append(ends[f] - token_s)
            if steps > 1:
                need = f + steps + 1 - len(cont)
                if need > 0:
                    cont.frombytes(bytes(8 * need))
                cont[f + 1] += 1
                cont[f + steps] -= 1
                inside.extend(ends[j] - ends[j - 1] for j in range(f + 1, f + steps))
            last = ends[f + steps - 1]
    return (inside, starting), last
