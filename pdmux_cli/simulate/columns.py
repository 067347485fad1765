"""Compact columns for per-request data: a trace of millions of requests in a few bytes each.

A trace or a run's per-request results held as Python tuples or lists of floats and ints cost 32-36
bytes an element (the pointer and the number object); a :class:`Column` holds machine numbers in an
``array.array`` (8 bytes an element), and :class:`Ragged` holds a sequence of integer tuples (a
Mooncake trace's ``hash_ids``) as one flat array and offsets. Both compare equal to the tuples they
stand for (``Column('q', [1, 2]) == (1, 2)``), slice to their own kind, and pickle as raw bytes (to a
worker process or a Ray task). Pure standard library.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

#: Typecodes: float64 for times (s) and latencies (ms), int64 for token counts and ids.
FLOAT = "d"
INT = "q"


class Column(array):
    """A compact, fixed-type sequence (an ``array.array`` of float64 ``"d"`` or int64 ``"q"``).

    Indexing with an integer is the array's; a slice is a :class:`Column`; ``==`` compares element by
    element with another array, a tuple or a list (an ``array`` alone never equals a tuple). Treat it
    as read-only: a :class:`~pdmux_cli.simulate.traces.Trace` shares its columns with the traces
    derived from it. Code on a hot path indexes a ``memoryview`` of it (C speed), see :func:`fast`.
    """

    __slots__ = ()

    def __getitem__(self, index: Any) -> Any:
        item = array.__getitem__(self, index)
        return Column(self.typecode, item) if isinstance(index, slice) else item

    def __eq__(self, other: object) -> bool:
        if isinstance(other, array):
            return array.__eq__(self, other)
        if isinstance(other, (tuple, list)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Column({self.typecode!r}, {array.tolist(self)[:8]}{'...' if len(self) > 8 else ''})"

    def __reduce_ex__(self, protocol: int) -> tuple:
        return _column, (self.typecode, self.tobytes())


def _column(typecode: str, raw: bytes) -> Column:
    out = Column(typecode)
    out.frombytes(raw)
    return out


def column(typecode: str, values: Iterable[Any] = ()) -> Column:
    """A :class:`Column` of ``typecode`` from any iterable (an array of the same type is copied as bytes)."""
    if isinstance(values, array) and values.typecode == typecode:
        out = Column(typecode)
        out.frombytes(values.tobytes())
        return out
    return Column(typecode, values)


def fast(values: Sequence[Any]) -> Sequence[Any]:
    """A view of ``values`` for a hot loop: a ``memoryview`` of a :class:`Column` or array (indexing at C
    speed, no copy), anything else as it is."""
    if isinstance(values, array) and len(values):
        return memoryview(values)
    return values


class Ragged(Sequence):
    """A sequence of integer tuples (per request, its prompt's ``hash_ids``) in two arrays: the values
    end to end (int64) and where each tuple ends. ``ragged[i]`` is a tuple; a slice is a
    :class:`Ragged`; ``==`` compares with any sequence of sequences (``Ragged() == ()``). Raises
    ``OverflowError`` for an integer outside int64 (:meth:`append`)."""

    __slots__ = ("ends", "values")

    def __init__(self, items: Iterable[Sequence[int]] = ()) -> None:
        self.values = array(INT)
        self.ends = array(INT)
        for item in items:
            self.append(item)

    def append(self, item: Sequence[int]) -> None:
        """Add one tuple at the end (``OverflowError`` past int64, the arrays unchanged)."""
        mark = len(self.values)
        try:
            self.values.extend(item)
        except OverflowError:
            del self.values[mark:]
            raise
        self.ends.append(len(self.values))

    def __len__(self) -> int:
        return len(self.ends)

    def _span(self, i: int) -> tuple[int, int]:
        n = len(self.ends)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("Ragged index out of range")
        return (self.ends[i - 1] if i else 0), self.ends[i]

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            out = Ragged()
            for i in range(*index.indices(len(self))):
                out.append(self[i])
            return out
        lo, hi = self._span(index)
        return tuple(self.values[lo:hi])

    def __iter__(self) -> Iterator[tuple[int, ...]]:
        values, lo = self.values, 0
        for hi in self.ends:
            yield tuple(values[lo:hi])
            lo = hi

    def __bool__(self) -> bool:
        return bool(self.ends)

    def any_values(self) -> bool:
        """Whether any tuple is non-empty (``any(ragged)`` without building the tuples)."""
        return bool(self.values)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Ragged):
            return self.ends == other.ends and self.values == other.values
        if isinstance(other, (tuple, list)):
            return len(self) == len(other) and all(a == tuple(b) for a, b in zip(self, other))
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Ragged({len(self)} tuples)"

    def __getstate__(self) -> tuple[bytes, bytes]:
        return self.values.tobytes(), self.ends.tobytes()

    def __setstate__(self, state: tuple[bytes, bytes]) -> None:
        self.values = array(INT)
        self.values.frombytes(state[0])
        self.ends = array(INT)
        self.ends.frombytes(state[1])


def select(values: Sequence[Any], keep: Iterable[int], typecode: str | None = None) -> Any:
    """``values`` at the indices ``keep`` (ascending or not), as a :class:`Column` of ``typecode`` (default:
    ``values``' own), or a :class:`Ragged` for a :class:`Ragged`."""
    if isinstance(values, Ragged):
        out = Ragged()
        for i in keep:
            out.append(values[i])
        return out
    code = typecode or getattr(values, "typecode", FLOAT)
    view = fast(values)
    return Column(code, (view[i] for i in keep))
