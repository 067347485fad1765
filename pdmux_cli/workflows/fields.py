"""Every request field's type and range, checked once, when a request is made (issue 34).

The one validation point of the workflows' requests (:class:`Checked`, the base of every request
dataclass: ``SplitsRequest`` ... ``AccuracyRequest``, and the option groups ``WorkloadOptions``,
``ServerOptions``, ``DeploymentOptions`` they are made of): its ``__post_init__`` checks each field
before any work, for the CLI (whose options typer has already parsed) and the Python API (whose keywords
come as the caller wrote them) alike. A refusal is one :class:`~pdmux_cli.util.errors.InputError` naming
the field by its Python name (the CLI prints its flag, the API its keyword).

- **Type**: the field's annotation on its request is the declaration (``int | None``, ``Path | None``,
  ``tuple[int, ...] | str``): a ``bool`` is no integer, a ``str`` no number, ``b"x"`` no path. Values are
  normalised as the workflows read them: a path given as ``str`` or ``os.PathLike`` becomes a
  :class:`~pathlib.Path`, a sequence for a list option the CLI writes as text (:data:`LISTS`) becomes that
  text, a number a ``float`` where the field is one.
- **Range**: :data:`RANGES`, keyed by field name (a name means one thing in every request): the bounds every
  command holds a value to (:class:`Range`), or the core's own check of it where one exists (tp's 1-8).
  Floats are finite unless the range takes an infinity (``qps``: every request at once). Bounds that
  depend on the GPU, the model or the SGLang revision (SMs per level, the context length, a TP the heads
  divide into) stay with the rules that know them, which run before any simulation.

Pure: no import beyond the standard library until a check needs its rule.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import os
import typing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..util.errors import InputError, short_repr


@dataclasses.dataclass(frozen=True)
class Range:
    """The values a numeric field takes: ``>= minimum``, ``> above``, ``<= maximum`` (each ``None``: no
    bound); ``infinite``: ``math.inf`` too. ``what``: words after the bound in the message (``" ms"``,
    ``" requests in flight"``); ``unit``: words after "a number" (``" of ms"``)."""

    minimum: float | None = None
    above: float | None = None
    maximum: float | None = None
    infinite: bool = False
    what: str = ""
    unit: str = ""

    def holds(self, value: float) -> bool:
        """Whether ``value`` is in the range."""
        if value == math.inf and self.infinite:
            return True
        if not math.isfinite(value):
            return False
        return ((self.minimum is None or value >= self.minimum) and (self.above is None or value > self.above)
                and (self.maximum is None or value <= self.maximum))

    def refusal(self, param: str, value: Any, integer: bool) -> InputError:
        """The :class:`InputError` for ``value`` of ``param`` out of the range."""
        def num(x: float) -> str:
            return f"{int(x):,}" if integer else f"{x:g}"

        low = self.minimum if self.minimum is not None else self.above
        number = "" if integer else f"a number{self.unit} "
        if self.maximum is not None and low is not None:
            bound = f"from {num(low)} to {num(self.maximum)}"
        elif self.above is not None:
            bound = f"{number}> {num(self.above)}"
        elif self.minimum is not None:
            bound = f"{number}>= {num(self.minimum)}"
        else:
            bound = f"{number}<= {num(self.maximum)}"
        return InputError("{param_flag} must be {bound}{what}, got {value}", param=param,
                          values={"bound": bound, "what": self.what, "value": short_repr(value)})


def _tp(value: int, param: str) -> None:
    """SGLang's TP of one server, 1-8 (:func:`pdmux_cli.multigpu.tensor_parallel.check_tp_value`)."""
    from ..multigpu.tensor_parallel import check_tp_value

    try:
        check_tp_value(value)
    except InputError as exc:
        raise (exc if param == "tp" else exc.retargeted({"tp": param}, sglang_tp="TP")) from None


def _bytes_per_element(value: float, param: str) -> None:
    from ..simulate.engine import check_bytes_per_element

    check_bytes_per_element(value, param)


def _efficiency(value: float, param: str) -> None:
    from ..simulate.engine import check_efficiency

    check_efficiency(value, param)


def _mem_fraction(value: float, param: str) -> None:
    from ..simulate.engine import check_mem_fraction

    check_mem_fraction(value, param)


#: Largest token count of a prompt, a context or a chunk (:data:`pdmux_cli.planning.estimate.MAX_TOKENS`),
#: and largest decode batch (``MAX_DECODE_BS``); ``tests/test_api_hostile.py`` holds them equal.
MAX_TOKENS, MAX_DECODE_BS = 10_000_000, 1_000_000
#: Upper bounds of the serving terms, ms (:data:`pdmux_cli.costmodel.SERVING_OPTION_BOUNDS_MS`,
#: ``EAGER_LAUNCH_BOUND_MS``); ``tests/test_api_hostile.py`` holds them equal.
SERVING_BOUNDS_MS = {"step_overhead_ms": 1000.0, "per_request_overhead_ms": 10.0,
                     "admission_delay_ms": 10_000.0, "first_token_delay_ms": 10_000.0,
                     "admission_interval_ms": 1000.0, "eager_launch_ms": 1.0}
#: numpy's (and bench_serving's ``--seed``) range.
MAX_SEED = 2**32 - 1

_AT_LEAST_1 = Range(minimum=1)
_POSITIVE_INT = Range(above=0)
_POSITIVE = Range(above=0)

#: Each field's range, by name: a :class:`Range`, or a check ``(value, param)`` raising
#: :class:`InputError` (the core's rule, imported when a value is given). A field not named here is
#: checked for its type (and a float for being finite) only; its bounds, if any, are the rules'
#: (module docstring).
RANGES: dict[str, Range | Callable[[Any, str], None]] = {
    # devices, servers, processes
    "sms": _AT_LEAST_1,
    "tp": _tp,
    "disagg_tp": _tp,
    "dp": _AT_LEAST_1,
    "workers": _AT_LEAST_1,
    # SGLang's pdmux knobs
    "sm_group_num": _POSITIVE_INT,
    "decode_bs_divisor": _POSITIVE_INT,
    "token_budget": _POSITIVE_INT,
    # tokens and requests
    "decode_bs": Range(minimum=1, maximum=MAX_DECODE_BS),
    "context": Range(minimum=1, maximum=MAX_TOKENS),
    "prompt_tokens": Range(minimum=1, maximum=MAX_TOKENS),
    "output_tokens": Range(minimum=1, maximum=MAX_TOKENS),
    "max_requests": _AT_LEAST_1,
    "max_running_requests": _AT_LEAST_1,
    "cuda_graph_max_bs": _AT_LEAST_1,
    "max_prefill_tokens": _AT_LEAST_1,
    "max_concurrency": Range(minimum=1, what=" requests in flight"),
    "max_steps": Range(minimum=0),
    "prefill_decode_interval": Range(minimum=0),
    "seed": Range(minimum=0, maximum=MAX_SEED, what=", as bench_serving's (numpy's)"),
    # rates, times, SLOs
    "qps": Range(above=0, infinite=True),
    "rate_scale": _POSITIVE,
    "duration": _POSITIVE,
    "slo_ttft": Range(above=0, unit=" of ms"),
    "slo_itl": Range(above=0, unit=" of ms"),
    "target": Range(above=0, maximum=1),
    "tolerance": _POSITIVE,
    # the cost model
    "s_sat": Range(minimum=1),
    "bandwidth_efficiency": _efficiency,
    "mfu": _efficiency,
    "weight_bytes": _bytes_per_element,
    "kv_bytes": _bytes_per_element,
    "mem_fraction_static": _mem_fraction,
    **{name: Range(minimum=0, maximum=high, what=" ms") for name, high in SERVING_BOUNDS_MS.items()},
}

#: The list options the CLI takes as comma-separated text and the request holds as that text (the API
#: also takes a sequence, joined here), with the kind of their items.
LISTS: dict[str, type] = {"policies": str, "chunk_sizes": int, "mixed_chunk_sizes": int, "sm_group_nums": int,
                          "divisors": int, "budgets": int, "slo_margins": float}
#: Text fields that also take a whole number (a length spec: ``prompt_tokens=1024`` is ``"1024"``).
INT_TEXT = ("prompt_tokens", "output_tokens")

_WORDS = {"none": "None", "bool": "True or False", "int": "an integer", "float": "a number",
          "str": "text (a str)", "path": "a file path (str or os.PathLike)",
          "paths": "file paths (a str, an os.PathLike or a list)",
          "ints": "a list of integers", "floats": "a list of numbers", "pair": "a pair of integers"}
_ITEMS = {int: "integers", float: "numbers", str: "names"}


class Checked:
    """The base of every request dataclass: its fields checked and normalised when it is made
    (:func:`check_fields`; module docstring)."""

    def __post_init__(self) -> None:
        check_fields(self)


def check_fields(request: Any) -> None:
    """Check every field of ``request`` (a dataclass) by its annotation and :data:`RANGES`, setting the
    normalised value in place (frozen dataclasses too). Raises :class:`InputError` about the first field at
    fault, by its Python name."""
    for name, kinds in _kinds(type(request)):
        value = getattr(request, name)
        checked = check_value(name, value, kinds)
        if checked is not value:
            object.__setattr__(request, name, checked)


def check_value(name: str, value: Any, kinds: frozenset[str]) -> Any:
    """``value`` of field ``name`` checked against ``kinds`` (:func:`_kinds`) and its range, normalised."""
    if value is None and "none" in kinds:
        return None
    if "bool" in kinds and isinstance(value, bool):
        return value
    if isinstance(value, bool):
        raise _wrong(name, value, kinds)
    if "int" in kinds and isinstance(value, numbers.Integral):
        value = int(value)
        _check_range(name, value, integer=True)
        return value
    if "float" in kinds and isinstance(value, numbers.Real):
        try:
            number = float(value)
        except OverflowError:  # an int past float's range
            number = math.inf if value > 0 else -math.inf
        _check_range(name, number, integer=False)
        return number
    if "str" in kinds:
        if isinstance(value, str):
            return value
        if name in INT_TEXT and isinstance(value, numbers.Integral):
            _check_range(name, int(value), integer=True)
            return str(int(value))
        if name in LISTS and _sequence(value):
            return ",".join(str(_item(name, v, LISTS[name])) for v in value)
    if "path" in kinds and _path_like(value):
        return _path(name, value)
    if "paths" in kinds:
        if _path_like(value):
            return (_path(name, value),)
        if _sequence(value):
            return tuple(_one_path(name, v) for v in value)
    if "ints" in kinds and _sequence(value):
        return tuple(_item(name, v, int) for v in value)
    if "floats" in kinds and _sequence(value):
        return tuple(_item(name, v, float) for v in value)
    if "pair" in kinds and _sequence(value):
        if len(value) != 2:
            raise InputError("{param_flag} takes two integers, e.g. (80, 52), got {value}", param=name,
                             values={"value": short_repr(value)})
        return tuple(_item(name, v, int) for v in value)
    raise _wrong(name, value, kinds)


def _sequence(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes, bytearray))


def _path_like(value: Any) -> bool:
    return isinstance(value, (str, os.PathLike))


def _one_path(name: str, value: Any) -> Path:
    if not _path_like(value):
        raise _wrong(name, value, frozenset({"path"}))
    return _path(name, value)


def _path(name: str, value: Any) -> Path:
    """``value`` (a ``str`` or ``os.PathLike``) as a :class:`Path`; refused when it is empty, holds a NUL
    character (no file system takes one) or is a ``bytes`` path."""
    text = os.fspath(value)
    if not isinstance(text, str):
        raise _wrong(name, value, frozenset({"path"}))
    if not text:
        raise InputError("{param_flag} is empty: give a file path", param=name, values={})
    if "\0" in text:
        raise InputError("{param_flag} {value} holds a NUL character, which no file name can",
                         param=name, values={"value": short_repr(text)})
    return value if isinstance(value, Path) else Path(text)


def _item(name: str, value: Any, kind: type) -> Any:
    """One item of a list option: ``kind`` (``int``, ``float``, ``str``), no bool; a number finite."""
    ok = (not isinstance(value, bool)
          and (isinstance(value, numbers.Integral) if kind is int
               else isinstance(value, numbers.Real) if kind is float else isinstance(value, str)))
    if ok and kind is float and not math.isfinite(value):
        ok = False
    if not ok:
        words = {int: "integers", float: "finite numbers", str: "names (str)"}[kind]
        raise InputError("{param_flag} takes a list of {words} (or the CLI's comma-separated text), got "
                         "{value} in it", param=name, values={"words": words, "value": short_repr(value)})
    return kind(value)


def _check_range(name: str, value: float, integer: bool) -> None:
    rule = RANGES.get(name)
    if rule is None:
        if not math.isfinite(value):
            raise InputError("{param_flag} must be a finite number, got {value}", param=name,
                             values={"value": short_repr(value)})
    elif isinstance(rule, Range):
        if not rule.holds(value):
            raise rule.refusal(name, value, integer)
    else:
        rule(value, name)


def _wrong(name: str, value: Any, kinds: frozenset[str]) -> InputError:
    words = [_WORDS[k] for k in ("bool", "int", "float", "path", "paths", "ints", "floats", "pair", "str")
             if k in kinds]
    if name in LISTS:
        words = [f"a list of {_ITEMS[LISTS[name]]}", "comma-separated text"]
    elif name in INT_TEXT and "str" in kinds:
        words = ["an integer", "a length spec (text)"]
    verb = "takes" if {"path", "paths", "ints", "floats"} & kinds or name in LISTS else "must be"
    return InputError("{param_flag} {verb} {words}, got {value}", param=name,
                      values={"verb": verb, "words": " or ".join(words), "value": short_repr(value)})


@functools.cache
def _kinds(cls: type) -> tuple[tuple[str, frozenset[str]], ...]:
    """``(field, kinds)`` of each field of ``cls``: its annotation as the kinds :func:`check_value` knows
    (``none``, ``bool``, ``int``, ``float``, ``str``, ``path``, ``paths``, ``ints``, ``floats``, ``pair``);
    an annotation of another kind is a programming error (``TypeError``)."""
    hints = typing.get_type_hints(cls)
    return tuple((f.name, _kind_set(hints[f.name], cls, f.name)) for f in dataclasses.fields(cls))


def _kind_set(hint: Any, cls: type, name: str) -> frozenset[str]:
    union = isinstance(hint, _UNION_TYPES) or typing.get_origin(hint) is typing.Union
    members = typing.get_args(hint) if union else (hint,)
    out = set()
    for m in members:
        args = typing.get_args(m)
        if m is type(None):
            out.add("none")
        elif m in (bool, int, float, str):
            out.add(m.__name__)
        elif m is Path:
            out.add("path")
        elif typing.get_origin(m) is tuple and args[-1:] == (Ellipsis,) and args[0] in (Path, int, float):
            out.add({Path: "paths", int: "ints", float: "floats"}[args[0]])
        elif typing.get_origin(m) is tuple and args == (int, int):
            out.add("pair")
        else:
            raise TypeError(f"{cls.__name__}.{name}: no check for a field of type {m!r}")
    return frozenset(out)


_UNION_TYPES: tuple[type, ...] = (type(int | None),)

__all__ = ["INT_TEXT", "LISTS", "RANGES", "Checked", "Range", "check_fields", "check_value"]
