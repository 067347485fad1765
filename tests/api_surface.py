"""The Python API as a hostile caller meets it: every public function of ``import pdmux``, a valid call of
each that runs in well under a second (:func:`base_calls`), the bad values tried in its keywords
(:data:`HOSTILE`), and the promise an outcome is judged by (:func:`judge`).

Shared by ``tests/test_api_hostile.py`` (hypothesis, a bounded number of tries in CI) and
``benchmarks/api_sweep.py`` (every keyword with every value of :data:`HOSTILE`, each try in a process of
its own).

The promise (docs/python-api.md): bad input raises :class:`pdmux.InputError` whose message names the
keyword, never the CLI's flag; anything else raised is a deviation; a call that returns has a
``to_dict()`` with no NaN, no infinity and no negative time; no call for a bad value takes more than a few
seconds.
"""

from __future__ import annotations

import inspect
import math
import re
import shutil
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures"

#: The public functions of ``import pdmux`` (its ``__all__`` less the error class and the version).
FUNCTIONS = ("splits", "estimate", "gen_config", "check_config", "simulate", "capacity", "tune", "calibrate",
             "accuracy")
#: A call for a bad value slower than its function's valid call by more than this is a deviation (s).
SLOW_S = 5.0


class Opaque:
    """An object no option takes (its ``repr`` names it)."""

    def __repr__(self) -> str:
        return "<opaque object>"


#: ``(label, value)``: one bad value at a time in a keyword; the kinds a hostile caller passes: None, NaN,
#: infinities, negatives, 0, a fraction, 10^18, the largest and smallest floats, booleans, text (empty,
#: unicode with a bidi override, a NUL, a number as text), lists, bytes, objects.
HOSTILE: tuple[tuple[str, Any], ...] = (
    ("None", None),
    ("nan", math.nan),
    ("inf", math.inf),
    ("-inf", -math.inf),
    ("-1", -1),
    ("-0.5", -0.5),
    ("0", 0),
    ("2.5", 2.5),
    ("1e18", 10**18),
    ("1e300", 1e300),
    ("5e-324", 5e-324),
    ("True", True),
    ("''", ""),
    ("unicode", "\u00fc\u202e\u2603"),
    ("nul", "a\0b"),
    ("'8'", "8"),
    ("[]", []),
    ("[1, 2]", [1, 2]),
    ("[nan]", [math.nan]),
    ("['x']", ["x"]),
    ("b'x'", b"x"),
    ("dict", {"a": 1}),
    ("object", Opaque()),
)


def base_calls(folder: Path) -> dict[str, tuple[tuple[Any, ...], dict[str, Any]]]:
    """Each function's valid, fast call as ``(args, keywords)``; its input files are copied into ``folder``
    (run with ``folder`` as the working directory: outputs a bad value names land there)."""
    folder.mkdir(parents=True, exist_ok=True)
    trace = folder / "trace.csv"
    shutil.copy(FIX / "azure_conv_50.csv", trace)
    one_batch = folder / "one_batch.jsonl"
    shutil.copy(FIX / "sglang" / "model_made_one_batch_h100_qwen3_8b.jsonl", one_batch)
    config = folder / "pdmux.yaml"
    config.write_text("sm_group_num: 8\ndecode_bs_divisor: 36\nsplit_forward_token_budget: 65536\n")
    small = {"max_requests": 20, "policies": "chunked"}
    return {
        "splits": ((), {}),
        # speculation on: its keywords then reach SGLang's rules, not only "needs speculative_algorithm"
        "estimate": ((), {"speculative_algorithm": "EAGLE", "speculative_num_steps": 3,
                          "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4,
                          "speculative_accept_length": 2.5}),
        "gen_config": ((), {}),
        "check_config": ((str(config),), {}),
        "simulate": ((str(trace),), dict(small)),
        "capacity": ((str(trace),), {**small, "workers": 1}),
        "tune": ((str(trace),), {"slo_ttft": 1000.0, "slo_itl": 60.0, "max_requests": 20,
                                  "sm_group_nums": "8", "divisors": "36", "budgets": "65536",
                                  "slo_margins": "none", "workers": 1}),
        "calibrate": ((), {"sglang_bench": [str(one_batch)], "model": "qwen3-8b", "gpu": "h100"}),
        "accuracy": ((), {}),
    }


def keywords(function: Any) -> list[str]:
    """Every parameter of ``function`` (a positional one too: a trace or path given by keyword)."""
    return list(inspect.signature(function).parameters)


def applies(function: Any, keyword: str, value: Any) -> bool:
    """Whether ``value`` is a bad value to try in ``keyword``: a boolean is not, for an on/off keyword
    (``True`` may start long, valid work: ``accuracy(serving=True)``)."""
    default = inspect.signature(function).parameters[keyword].default
    return not (isinstance(default, bool) and isinstance(value, bool))


def hostile_call(function: Any, base: tuple[tuple[Any, ...], dict[str, Any]], keyword: str,
                 value: Any) -> dict[str, Any]:
    """``base``'s arguments as keywords, with ``keyword`` set to ``value``."""
    args, kwargs = base
    return {**dict(zip(keywords(function), args)), **kwargs, keyword: value}


_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def cli_flags_named(message: str, function: Any, value: Any = None) -> list[str]:
    """The CLI flags of ``function``'s own keywords that ``message`` names (an API message names the
    keyword, ``tp``, not ``--tp``), outside the quoted ``value`` (``gpu='--tp'`` is quoted as given)."""
    from pdmux_cli.messages import flag

    for quoted in (repr(value), str(value)):
        message = message.replace(quoted, "")
    own = {flag(name) for name in keywords(function)}
    return [f for f in _FLAG.findall(message) if f in own]


def _time_key(key: str) -> bool:
    """A key whose value is a time (ms, s, us), not a rate (``_per_s``, GB/s, tokens/s)."""
    return key.endswith(("_ms", "_s", "_us")) and not key.endswith(("_per_s", "_gb_s", "_tok_s"))


def bad_numbers(data: Any, path: str = "") -> list[str]:
    """Where ``data`` (a ``to_dict()``) holds a NaN or an infinity, or a negative time (a key in ms, s or
    us)."""
    out: list[str] = []
    if isinstance(data, float):
        if not math.isfinite(data):
            out.append(f"{path}: {data}")
    elif isinstance(data, dict):
        for k, v in data.items():
            key = f"{path}.{k}"
            out.extend(bad_numbers(v, key))
            if isinstance(v, (int, float)) and not isinstance(v, bool) and _time_key(str(k)) and v < 0:
                out.append(f"{key}: negative time {v}")
    elif isinstance(data, (list, tuple)):
        for i, v in enumerate(data):
            out.extend(bad_numbers(v, f"{path}[{i}]"))
    return out


def admits(function: Any, keyword: str, value: Any) -> bool:
    """Whether ``function``'s annotation of ``keyword`` admits ``value``'s type (``int | None``: an int, not a
    bool, or None; ``Sequence[int] | str``: a list or text; ``PathLike``: a str or os.PathLike): a value it
    does not admit, or a NaN, must be refused, not run."""
    import numbers
    import os

    if isinstance(value, float) and math.isnan(value):
        return False
    kinds = {k.strip() for k in str(inspect.signature(function).parameters[keyword].annotation).split("|")}
    if value is None:
        return "None" in kinds
    if isinstance(value, bool):
        return "bool" in kinds
    if isinstance(value, numbers.Integral) and ({"int", "float"} & kinds):
        return True
    if isinstance(value, numbers.Real) and "float" in kinds:
        return True
    if isinstance(value, str):
        return bool({"str", "PathLike", "Path"} & kinds)
    if isinstance(value, os.PathLike):
        return bool({"PathLike", "Path"} & kinds)
    if isinstance(value, (list, tuple)):
        return any(k.startswith(("Sequence", "tuple")) for k in kinds)
    return False


def judge(function: Any, outcome: Any, keyword: str | None = None, value: Any = None) -> tuple[str, str]:
    """``(class, detail)`` of one call's ``outcome`` (its result, or what it raised): ``ran`` and
    ``input_error`` as promised; the deviations ``flag_named`` (an InputError naming a CLI flag),
    ``several_lines`` (an InputError of more than one line), ``raised <Type>`` (anything but InputError),
    ``non_finite`` (a NaN, an infinity or a negative time in ``to_dict()``), and, given the ``keyword`` and
    the ``value`` tried, ``accepted`` (a call that ran on a value of a type the keyword does not admit, or a
    NaN: :func:`admits`)."""
    import pdmux

    if isinstance(outcome, pdmux.InputError):
        text = str(outcome)
        if cli_flags_named(text, function, value):
            return "flag_named", text
        if "\n" in text:
            return "several_lines", text
        return "input_error", text
    if isinstance(outcome, BaseException):
        return f"raised {type(outcome).__name__}", str(outcome)[:300]
    problems = bad_numbers(outcome.to_dict())
    if problems:
        return "non_finite", "; ".join(problems[:3])
    if keyword is not None and not admits(function, keyword, value):
        return "accepted", f"{keyword}={short(value)} ran"
    return "ran", ""


def short(value: Any) -> str:
    """``repr(value)`` cut to 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
