"""Each request field's type and range, declared once and checked when a request is made.

The one validation point of the workflows' requests: :class:`Checked` is the base of every request
dataclass (``SplitsRequest`` ... ``AccuracyRequest``) and of the option groups they are made of
(``WorkloadOptions``, ``ServerOptions``, ``DeploymentOptions``); its ``__post_init__`` checks every field
before any work, for the CLI (whose options typer has parsed already) and the Python API (whose keywords
arrive as the caller wrote them) alike. A refusal is one :class:`~pdmux_cli.util.errors.InputError` naming
the field by its Python name: the CLI prints its flag (``--tp``), the API its keyword (``tp``).

- **Type**: the field's annotation is its declaration (``int | None``, ``Path | None``,
  ``tuple[int, ...] | str``). A ``bool`` is no integer, an integer no ``bool``, a ``str`` no number,
  ``b"x"`` no path, ``None`` only where the annotation has it. Values are normalised as the workflows read
  them: an integral number where an ``int`` goes becomes an ``int``, a real number where a ``float`` goes a
  ``float``; a path (``str`` or ``os.PathLike``) a :class:`~pathlib.Path`; a list option the request holds
  as the CLI's comma-separated text (:data:`LIST_ITEMS`) takes a sequence too, joined; a length spec
  (:data:`LENGTH_SPECS`) an integer too.
- **Range**: :data:`RANGES`, one entry per field name (a name means one thing in every request): a
  :class:`Range`, or the core's own check of that value where one exists (``tp``'s 1 to 8 GPUs,
  ``kv_bytes``' bytes per element), imported when a value is given. A float not in the table must be
  finite. Bounds that depend on the GPU, the model, the SGLang revision or another option (SMs per level,
  the context length, a TP the heads divide, ``qps`` inf only with ``synthetic``) stay with the rules that
  know them; the items of list options are checked by their parsers (:mod:`.values`), for text and
  sequences alike.

Issue 32 ("one declaration per option") builds on this table: a field's type, default and range here, its
flag and help beside them.

Pure: the standard library only, until a check needs its rule.
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

from ..catalog.model import MAX_DIMENSION
from ..util.errors import InputError, short_repr


@dataclasses.dataclass(frozen=True)
class Range:
    """The values a number field takes: at least ``low`` (more than it, with ``open_low``), at most
    ``high``; ``None``: no bound. ``infinite``: ``math.inf`` too (``qps``: every request at once).
    ``template``: the refusal (``{param_flag}``, ``{value}``, ``{low}``, ``{high}``); ``None``: the usual
    wording (``"must be >= 1, got 0"``, ``"must be a number > 0, got nan"``)."""

    low: float | None = None
    high: float | None = None
    open_low: bool = False
    infinite: bool = False
    template: str | None = None

    def check(self, value: float, param: str, integer: bool | None = None) -> None:
        """:class:`InputError` about ``param`` unless ``value`` is in range; ``integer``: the field takes
        whole numbers (``None``: whether ``value`` is an ``int``), for the refusal's wording."""
        if value == math.inf and self.infinite:
            return
        ok = math.isfinite(value) and (
            self.low is None or (value > self.low if self.open_low else value >= self.low)) and (
            self.high is None or value <= self.high)
        if ok:
            return
        template = self.template
        if template is None:
            if isinstance(value, int) if integer is None else integer:
                template = ("{param_flag} must be from {low} to {high:,}, got {value}"
                            if self.high is not None else "{param_flag} must be > {low}, got {value}"
                            if self.open_low else "{param_flag} must be >= {low}, got {value}")
            else:
                template = "{param_flag} must be a number {op} {low:g}, got {value}"
        raise InputError(template, param=param,
                         values={"value": value if isinstance(value, (int, float)) else short_repr(value),
                                 "low": self.low, "high": self.high, "op": ">" if self.open_low else ">="})


def _tp(value: int, param: str) -> None:
    """SGLang's TP of one server or instance (:func:`pdmux_cli.multigpu.tensor_parallel.check_tp_value`)."""
    from ..multigpu.tensor_parallel import check_tp_value, for_disagg_tp

    try:
        check_tp_value(value)
    except InputError as exc:
        raise (exc if param == "tp" else for_disagg_tp(exc)) from None


def _dp(value: int, param: str) -> None:
    from ..multigpu.disaggregation import check_dp_value

    check_dp_value(value)


def _sms(value: int, param: str) -> None:
    from ..catalog.hardware import MAX_SMS

    Range(1, MAX_SMS, template="{param_flag} must be a number of SMs from 1 to {high}, got {value}").check(
        value, param)


def _tokens(kind: str) -> Callable[[int, str], None]:
    """A decode batch (``"decode_bs"``) or a token count's bounds (:mod:`pdmux_cli.planning`)."""

    def check(value: int, param: str) -> None:
        from .. import planning

        top = planning.MAX_DECODE_BS if kind == "decode_bs" else planning.MAX_TOKENS
        Range(1, top).check(value, param)

    return check


def _bytes_per_element(value: float, param: str) -> None:
    from ..simulate.engine import check_bytes_per_element

    check_bytes_per_element(value, param)


def _efficiency(value: float, param: str) -> None:
    from ..simulate.engine import check_efficiency

    check_efficiency(value, param)


def _mem_fraction(value: float, param: str) -> None:
    from ..simulate.engine import check_mem_fraction

    check_mem_fraction(value, param)


def _serving_term(value: float, param: str) -> None:
    """The serving terms' options, 0 to the cost model's bound, ms
    (:func:`pdmux_cli.costmodel.knob_bound_ms`)."""
    from ..costmodel import knob_bound_ms

    high = knob_bound_ms(param)
    Range(0, high, template="{param_flag} must be from 0 to {high:g} ms, got {value}").check(value, param)


def _kv_link(value: float, param: str) -> None:
    from ..multigpu.disaggregation import check_kv_link_figure

    check_kv_link_figure(param, value)


def _max_steps(value: int, param: str) -> None:
    from ..simulate.engine import step_budget

    step_budget(0, value)


def _interval(value: int, param: str) -> None:
    from .policies import check_prefill_decode_interval

    check_prefill_decode_interval(value)


def _target(value: float, param: str) -> None:
    from ..simulate.capacity import check_target

    check_target(value)


def _tolerance(value: float, param: str) -> None:
    from ..simulate.capacity import check_tolerance

    check_tolerance(value)


def _gsp(value: float, param: str) -> None:
    """bench_serving's ``--gsp-*`` counts, lengths and range ratio
    (:func:`pdmux_cli.simulate.traces.check_gsp_option`)."""
    from ..simulate.traces import check_gsp_option

    check_gsp_option(param, value)


def _speculative(value: float, param: str) -> None:
    """SGLang's ``--speculative-*`` counts and the acceptance length, each alone
    (:func:`pdmux_cli.sglang.speculative_args.check_speculative_value`)."""
    from ..sglang.speculative_args import check_speculative_value

    check_speculative_value(param, value)


#: numpy's (and bench_serving's ``--seed``) range: ``random:L`` lengths are drawn as bench_serving draws them.
MAX_SEED = 2**32 - 1
_AT_LEAST_1 = Range(1)
_KNOB = Range(0, open_low=True)
_POSITIVE = Range(0, open_low=True)
_MS = Range(0, open_low=True, template="{param_flag} must be a number of ms > 0, got {value}")

#: Each number field's range, by field name: a :class:`Range`, or the core's check ``(value, param)``
#: raising :class:`InputError`. A field not named here takes its group's (:data:`GROUP_RANGES`); else a float
#: field must be finite and an int field takes any value.
RANGES: dict[str, Range | Callable[[Any, str], None]] = {
    # devices, servers, processes
    "sms": _sms,
    "tp": _tp,
    "disagg_tp": _tp,
    "dp": _dp,
    "workers": _AT_LEAST_1,
    # SGLang's pdmux knobs (their limits on the device: sglang/split_levels.py)
    "sm_group_num": _KNOB,
    "decode_bs_divisor": _KNOB,
    "token_budget": _KNOB,
    # requests and tokens
    "decode_bs": _tokens("decode_bs"),
    "context": Range(1, template="{param_flag} must be a number of tokens >= 1, got {value}"),
    "prompt_tokens": _tokens("tokens"),
    "max_requests": _AT_LEAST_1,
    "max_running_requests": _AT_LEAST_1,
    "cuda_graph_max_bs": _AT_LEAST_1,
    # a model's longest sequence: the bound of catalog.model's check of any model dimension
    "context_length": Range(1, MAX_DIMENSION, template="{param_flag} must be from 1 to {high:,} tokens, "
                                                       "got {value}"),
    "max_prefill_tokens": _AT_LEAST_1,
    "max_concurrency": Range(1, template="{param_flag} must be >= 1 requests in flight, got {value}"),
    "max_steps": _max_steps,
    "prefill_decode_interval": _interval,
    "gsp_num_groups": _gsp,
    "gsp_prompts_per_group": _gsp,
    "gsp_system_prompt_len": _gsp,
    "gsp_question_len": _gsp,
    "gsp_output_len": _gsp,
    "gsp_range_ratio": _gsp,
    "seed": Range(0, MAX_SEED, template="{param_flag} must be from 0 to {high}, as bench_serving's "
                                        "(numpy's), got {value}"),
    # rates, times, targets
    "qps": Range(0, open_low=True, infinite=True),
    "rate_scale": _POSITIVE,
    "duration": _POSITIVE,
    "slo_ttft": _MS,
    "slo_itl": _MS,
    "target": _target,
    "tolerance": _tolerance,
    # the cost model and the server
    "s_sat": Range(1),
    "bandwidth_efficiency": _efficiency,
    "mfu": _efficiency,
    "weight_bytes": _bytes_per_element,
    "kv_bytes": _bytes_per_element,
    "mem_fraction_static": _mem_fraction,
    "step_overhead_ms": _serving_term,  # the serving terms group's options: GROUP_RANGES
    "speculative_num_steps": _speculative,
    "speculative_eagle_topk": _speculative,
    "speculative_num_draft_tokens": _speculative,
    "speculative_accept_length": _speculative,
    "kv_link_gb_s": _kv_link,
    "kv_link_latency_us": _kv_link,
}

#: The list options a request holds as the CLI's comma-separated text (``"512,2048"``), with the kind of
#: their items: a sequence of such items is joined into that text (the parsers then check each item).
LIST_ITEMS: dict[str, type] = {"policies": str, "chunk_sizes": int, "mixed_chunk_sizes": int,
                               "sm_group_nums": int, "divisors": int, "budgets": int, "slo_margins": float}
#: Text fields that take an integer too: length specs (simulate's ``prompt_tokens=1024`` is ``"1024"``;
#: splits' ``prompt_tokens``, a list, does not).
LENGTH_SPECS = ("prompt_tokens", "output_tokens")


class Checked:
    """The base of every request dataclass: its fields checked and normalised when it is made
    (:func:`check_fields`; the module docstring)."""

    def __post_init__(self) -> None:
        check_fields(self)


#: The metadata keys of a field declared with :func:`option`: its CLI help, and the shared option group it
#: belongs to (the CLI builds the group's options of a command from these declarations:
#: :func:`pdmux_cli.cli.options.with_group`).
HELP = "help"
GROUP = "group"
SHORT = "short"
#: The metadata key of a path option the command writes (:func:`option`'s ``writes``).
WRITES = "writes"
#: The metadata key of an option's help as one command words it (:func:`option`'s ``wordings``).
WORDINGS = "wordings"
#: The metadata keys of a field's own range (:func:`option`'s ``bounds``) and of an option kept out of
#: ``--help`` (``hidden``).
BOUNDS = "bounds"
HIDDEN = "hidden"
#: The metadata key of the command that takes a list where the others take one number (:func:`option`'s
#: ``list_in``).
LIST_IN = "list_in"

#: The roofline model's serving terms that simulate, tune and capacity share (``ServerOptions``), ms.
SERVING_TERMS = "serving terms"
#: SGLang's speculative decoding flags and the acceptance length (``ServerOptions``): simulate, tune, capacity
#: and estimate.
SPECULATIVE = "speculative decoding"
#: bench_serving's generated-shared-prefix dataset, ``--dataset-name`` and its ``--gsp-*`` options
#: (``WorkloadOptions``): simulate and capacity.
GENERATED_SHARED_PREFIX = "generated-shared-prefix"
#: More than one server: DP replicas behind a router, PD disaggregation and its KV link
#: (``DeploymentOptions``): simulate and capacity.
DEPLOYMENT = "deployment"
#: The workload: a trace's shape or synthetic arrivals (``WorkloadOptions``): simulate and capacity (capacity
#: never retimes: no ``rate_scale``).
WORKLOAD = "workload"
#: Where the simulations run: processes or a Ray cluster, and the step guard (``RunOptions``): simulate,
#: capacity and tune.
RUN = "run"


def option(default: Any = None, *, help: str, group: str | None = None, short: str | None = None,
           writes: str | None = None, wordings: dict[str, str] | None = None, required: bool = False,
           bounds: Range | None = None, hidden: bool = False, list_in: str | None = None) -> Any:
    """A request field declared once (issue 32, item 1): its default and the help the CLI shows (other
    parameters named as ``{flag.NAME}``, as errors name them: the CLI writes their flags); its flag is
    :func:`pdmux_cli.messages.flag` of the field's name (``short``: a one-letter flag beside it, ``"-m"``),
    its type the annotation, its range :data:`RANGES`. ``group``: the shared option group
    (:data:`WORKLOAD`, :data:`SERVING_TERMS`, :data:`SPECULATIVE`, :data:`GENERATED_SHARED_PREFIX`,
    :data:`DEPLOYMENT`, :data:`RUN`) whose commands take it, if any (the CLI:
    :func:`pdmux_cli.cli.options.with_group`; one option alone: :func:`pdmux_cli.cli.options.declared`; a
    command's own: :func:`pdmux_cli.cli.options.with_declared`). ``writes``: a path the command writes,
    whole or not at all: ``"path"`` (a file or ``-``) or ``"file"`` (the CLI checks it before any work:
    :func:`pdmux_cli.cli.common.output_path`, ``output_file``). ``wordings``: the help as a command words it
    where it deliberately differs (``{"tune": ...}``), by the command's name; the others show ``help``.
    ``required``: no default (the CLI requires the option: tune's ``--trace``). ``bounds``: the field's own
    range where its command's rule differs from :data:`RANGES`' for the name (bench's ``sm_group_num``: at
    least 3). ``hidden``: not in ``--help`` (bench's ``--cpu``, for tests). ``list_in``: the command whose
    request takes a list for this option where the others take one number (``"estimate"`` for ``s_sat``:
    one PD-mux row each); the others' CLI refuses a list naming it
    (:func:`pdmux_cli.cli.common.one_number`)."""
    metadata = {HELP: help, GROUP: group, SHORT: short, WRITES: writes, WORDINGS: wordings or {},
                BOUNDS: bounds, HIDDEN: hidden, LIST_IN: list_in}
    if required:
        return dataclasses.field(metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def declared_as(cls: type, name: str, *, required: bool = False, default: Any = dataclasses.MISSING) -> Any:
    """Field ``name`` of ``cls`` declared again, for another request that takes the same option (the same
    default, help, group, short flag and wordings): the option is worded once, where ``cls`` declares it.
    ``required``: without its default (tune's ``slo_ttft``: the CLI requires the option). ``default``: the
    command's own default where it differs (gen-config's ``sm_group_num`` 8, SGLang's, where the others
    default to the YAML's)."""
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    if required:
        return dataclasses.field(metadata=dict(f.metadata))
    return dataclasses.field(default=f.default if default is dataclasses.MISSING else default,
                             metadata=dict(f.metadata))


def sglang_revision() -> Any:
    """The ``sglang`` field of a request whose verdicts depend on SGLang's code: ``--sglang``, the revision
    followed (default 0.5.23, :data:`pdmux_cli.sglang.revisions.DEFAULT_REVISION`), declared once with its
    help (:data:`pdmux_cli.sglang.revisions.SGLANG_HELP`)."""
    from ..sglang.revisions import DEFAULT_REVISION, SGLANG_HELP

    return option(DEFAULT_REVISION, help=SGLANG_HELP)


#: The range of a field its group gives, where :data:`RANGES` names none: a serving term's is the cost model's
#: bound for it (a new knob of the group needs no entry here).
GROUP_RANGES: dict[str, Callable[[Any, str], None]] = {SERVING_TERMS: _serving_term}


def group_fields(cls: type, group: str) -> tuple[dataclasses.Field, ...]:
    """The fields of ``cls`` (a request dataclass) declared in ``group``, in their order."""
    return tuple(f for f in dataclasses.fields(cls) if f.metadata.get(GROUP) == group)


def check_fields(request: Any) -> None:
    """Check every field of ``request`` (a dataclass) by its annotation and :data:`RANGES`, the normalised
    value set in place (a frozen dataclass's too). Raises :class:`InputError` about the first field at
    fault, in the fields' order, by its Python name."""
    for name, kinds, rule in _kinds(type(request)):
        value = getattr(request, name)
        checked = check_value(name, value, kinds, rule)
        if checked is not value:
            object.__setattr__(request, name, checked)


def check_value(name: str, value: Any, kinds: frozenset[str],
                rule: Range | Callable[[Any, str], None] | None = None) -> Any:
    """``value`` of field ``name`` checked against ``kinds`` (the annotation's, :func:`_kinds`) and its
    range (``rule``: the field's, :func:`_kinds`; ``None``: :data:`RANGES`'); the normalised value."""
    rule = RANGES.get(name) if rule is None else rule
    if value is None:
        if "none" in kinds:
            return None
        raise _wrong(name, value, kinds)
    if isinstance(value, bool):
        if "bool" in kinds:
            return value
        raise _wrong(name, value, kinds)
    if "int" in kinds and isinstance(value, numbers.Integral):
        value = int(value)
        _check_range(name, value, True, rule)
        return value
    if "float" in kinds and isinstance(value, numbers.Real):
        try:
            number = float(value)
        except OverflowError:  # an int past a float's range is no finite number
            number = math.inf if value > 0 else -math.inf
        # the range judges (and the refusal quotes) the value as given: 64, not 64.0
        _check_range(name, value if isinstance(value, int) and number == value else number, False, rule)
        return number
    if "path" in kinds and _path_like(value):  # ``Path | str``: the text is a path too
        return _path(name, value)
    if "str" in kinds:
        if isinstance(value, str):
            return value
        if name in LENGTH_SPECS and "ints" not in kinds and isinstance(value, numbers.Integral):
            return str(int(value))
        if name in LIST_ITEMS and _sequence(value):
            return ",".join(str(_item(name, v, LIST_ITEMS[name])) for v in value)
    if "paths" in kinds:
        if _path_like(value):
            return (_path(name, value),)
        if _sequence(value):
            return tuple(_path(name, v) if _path_like(v) else _raise(_wrong(name, v, frozenset({"path"})))
                         for v in value)
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


def _raise(exc: Exception) -> Any:
    raise exc


def _sequence(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes, bytearray))


def _path_like(value: Any) -> bool:
    return isinstance(value, (str, os.PathLike))


def _path(name: str, value: Any) -> Path:
    """``value`` (a ``str`` or ``os.PathLike``) as a :class:`Path`; refused when it is empty, a ``bytes``
    path, or holds a NUL character (no file system takes one)."""
    text = os.fspath(value)
    if not isinstance(text, str):
        raise _wrong(name, value, frozenset({"path"}))
    if not text:
        raise InputError("{param_flag} is empty: give a file path", param=name, values={})
    if "\0" in text:
        raise InputError("{param_flag} {value} holds a NUL character, which no file name can", param=name,
                         values={"value": short_repr(text)})
    return value if isinstance(value, Path) else Path(text)


_ITEM_WORDS = {int: "integers", float: "finite numbers", str: "names (str)"}


def _item(name: str, value: Any, kind: type) -> Any:
    """One item of a list option: an ``int`` (an integral number), a finite ``float`` (a real number) or a
    ``str``; never a ``bool``."""
    if kind is str:
        ok = isinstance(value, str)
    elif kind is int:
        ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    else:
        ok = (isinstance(value, numbers.Real) and not isinstance(value, bool)
              and math.isfinite(float(value)))
    if not ok:
        raise InputError("{param_flag} takes a list of {words} (or the CLI's comma-separated text), got "
                         "{value} in it", param=name,
                         values={"words": _ITEM_WORDS[kind], "value": short_repr(value)})
    return kind(value)


def _check_range(name: str, value: float, integer: bool, rule: Range | Callable[[Any, str], None] | None
                 ) -> None:
    if rule is None:
        if isinstance(value, float) and not math.isfinite(value):
            raise InputError("{param_flag} must be a finite number, got {value}", param=name,
                             values={"value": value})
    elif isinstance(rule, Range):
        rule.check(value, name, integer)
    else:
        rule(value, name)


_WORDS = {"bool": "True or False", "int": "an integer", "float": "a number",
          "path": "a file path (str or os.PathLike)", "paths": "file paths (a str, an os.PathLike or a list)",
          "ints": "a list of integers", "floats": "a list of numbers", "pair": "a pair of integers",
          "str": "text (a str)"}
_LIST_WORDS = {int: "integers", float: "numbers", str: "names"}


def _wrong(name: str, value: Any, kinds: frozenset[str]) -> InputError:
    """The refusal of a value of the wrong type: what the field takes, in words (``None``, where it takes
    that too, goes unsaid: it is the default)."""
    if name in LIST_ITEMS:
        words = [f"a list of {_LIST_WORDS[LIST_ITEMS[name]]}", "comma-separated text"]
    elif name in LENGTH_SPECS and "ints" not in kinds:
        words = ["an integer", "a length spec (text)"]
    else:  # a field of a path or its text takes a path (the text is one)
        words = [_WORDS[k] for k in _WORDS if k in kinds and not (k == "str" and "path" in kinds)]
    verb = "takes" if {"path", "paths", "ints", "floats"} & kinds or name in LIST_ITEMS else "must be"
    return InputError("{param_flag} {verb} {words}, got {value}", param=name,
                      values={"verb": verb, "words": " or ".join(words), "value": short_repr(value)})


@functools.cache
def _kinds(cls: type) -> tuple[tuple[str, frozenset[str], Range | Callable[[Any, str], None] | None], ...]:
    """``(field, kinds, range)`` for each field of ``cls``: its annotation as the kinds :func:`check_value`
    knows (``none``, ``bool``, ``int``, ``float``, ``str``, ``path``, ``paths``, ``ints``, ``floats``,
    ``pair``; an annotation of another kind is a programming error, ``TypeError``) and its range (its own,
    :func:`option`'s ``bounds``, else :data:`RANGES`', else its group's, :data:`GROUP_RANGES`; ``None``:
    none)."""
    hints = typing.get_type_hints(cls)
    return tuple((f.name, _kind_set(hints[f.name], cls, f.name),
                  f.metadata.get(BOUNDS) or RANGES.get(  # type: ignore[arg-type]
                      f.name, GROUP_RANGES.get(f.metadata.get(GROUP))))
                 for f in dataclasses.fields(cls))


def _kind_set(hint: Any, cls: type, name: str) -> frozenset[str]:
    union = isinstance(hint, type(int | None)) or typing.get_origin(hint) is typing.Union
    out = set()
    for member in typing.get_args(hint) if union else (hint,):
        args = typing.get_args(member)
        if member is type(None):
            out.add("none")
        elif member in (bool, int, float, str):
            out.add(member.__name__)
        elif member is Path:
            out.add("path")
        elif typing.get_origin(member) is tuple and args[-1:] == (Ellipsis,) and args[0] in (Path, int,
                                                                                             float):
            out.add({Path: "paths", int: "ints", float: "floats"}[args[0]])
        elif typing.get_origin(member) is tuple and args == (int, int):
            out.add("pair")
        else:
            raise TypeError(f"{cls.__name__}.{name}: no check for a field of type {member!r}")
    return frozenset(out)


__all__ = ["LENGTH_SPECS", "LIST_ITEMS", "MAX_SEED", "RANGES", "Checked", "Range", "check_fields",
           "check_value"]
