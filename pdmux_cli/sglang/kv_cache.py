"""The KV cache's dtype and bytes per element, as SGLang 0.5.23 picks them (``--kv-cache-dtype``).

Pure and stdlib-only (on the start-up path of ``estimate``). SGLang's rules
(``srt/arg_groups/fields/model.py`` ``kv_cache_dtype``, default ``"auto"``;
``srt/mem_cache/kv_cache_dtype.py`` ``configure_kv_cache_dtype``):

- ``auto``: fp8_e4m3 when the checkpoint's quantization config says ``kv_cache_quant_algo: FP8``
  (``Fp8Config.from_config`` reads it from ``quantization_config``), otherwise **the model's dtype**
  (``torch_dtype`` through ``_get_and_verify_dtype``: bf16 or fp16) -- not the weights' fp8: an fp8
  checkpoint such as Qwen3-8B-FP8 keeps a bf16 KV cache;
- ``fp8_e4m3`` / ``fp8_e5m2``: one byte per element; ``bf16`` / ``bfloat16``: two;
- ``mxfp8``, ``nvfp4``, ``fp4_mx_block16``: block-scaled caches served by Blackwell-only kernels; pdmux
  does not model them (refused: their bytes per element can be given with ``--kv-bytes``).

Attention reads the cache at its bytes per element and computes in the model's 16-bit dtype (the cost
model's attention terms are 16-bit whatever the KV dtype). ``--kv-bytes`` (a number of bytes, kept for
what no dtype names) and ``--kv-cache-dtype`` are two ways to say the same thing: giving both is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..util.errors import Finding, InputError, short_repr

#: SGLang 0.5.23's ``--kv-cache-dtype`` choices, in its order (``srt/arg_groups/fields/model.py``).
KV_CACHE_DTYPES = ("auto", "fp8_e5m2", "fp8_e4m3", "mxfp8", "bf16", "bfloat16", "nvfp4", "fp4_mx_block16")

#: Choices pdmux refuses: block-scaled caches (FA4 / TRT-LLM kernels on Blackwell, scale layouts per backend).
UNMODELLED_KV_CACHE_DTYPES = ("mxfp8", "nvfp4", "fp4_mx_block16")

#: Bytes per element of each dtype a KV cache can resolve to.
KV_DTYPE_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8_e4m3": 1.0, "fp8_e5m2": 1.0}

#: ``--kv-cache-dtype`` spelling -> the dtype stored (``bfloat16`` is ``bf16``).
_EXPLICIT = {"fp8_e5m2": "fp8_e5m2", "fp8_e4m3": "fp8_e4m3", "bf16": "bf16", "bfloat16": "bf16"}


@dataclass(frozen=True)
class KvCache:
    """The KV cache one server stores: ``dtype`` (``"bf16"``, ``"fp16"``, ``"fp8_e4m3"``, ``"fp8_e5m2"``,
    or ``"custom"`` for ``--kv-bytes``), ``bytes_per_element`` (bytes) and ``chosen_by``: which rule or
    option chose it, as data (a :class:`~pdmux_cli.util.errors.Finding`: ``kv_cache.bytes_given`` with
    ``kv_bytes``, ``kv_cache.dtype_given`` with ``dtype``, ``kv_cache.auto`` with the model's ``dtype``);
    :attr:`source` is its line."""

    dtype: str
    bytes_per_element: float
    chosen_by: Finding

    @property
    def source(self) -> str:
        """Which rule or option chose the cache, one line for output (worded by :mod:`pdmux_cli.messages`)."""
        return str(self.chosen_by)


def check_kv_cache_dtype(value: str | None) -> str | None:
    """``value`` (``--kv-cache-dtype``) normalised (stripped, lower case), ``None`` when not given.
    Raises :class:`InputError` (one line) for a value that is not one of SGLang's choices, or one of the
    block-scaled caches pdmux does not model."""
    if value is None:
        return None
    text = value.strip().lower() if isinstance(value, str) else ""
    if text not in KV_CACHE_DTYPES:
        raise InputError(
            "{flag.kv_cache_dtype} must be one of SGLang's {dtypes}, got {value}",
            param="kv_cache_dtype",
            values={"dtypes": ", ".join(KV_CACHE_DTYPES), "value": short_repr(value)},
        )
    if text in UNMODELLED_KV_CACHE_DTYPES:
        raise InputError(
            "{flag.kv_cache_dtype} {dtype} (a block-scaled KV cache of Blackwell-only kernels) is not "
            "modelled: give its bytes per element with {flag.kv_bytes} instead",
            param="kv_cache_dtype",
            values={"dtype": text},
        )
    return text


def check_kv_options(kv_cache_dtype: str | None, kv_bytes: float | None) -> None:
    """The checks a command runs on ``--kv-cache-dtype`` and ``--kv-bytes`` before loading anything:
    :func:`check_kv_cache_dtype`, and :class:`InputError` when both are given."""
    if check_kv_cache_dtype(kv_cache_dtype) is not None and kv_bytes is not None:
        raise InputError(
            "{flag.kv_cache_dtype} and {flag.kv_bytes} both set the KV cache's bytes per element: give one",
            param="kv_bytes",
            values={},
        )


def resolve_kv_cache(model: Any, kv_cache_dtype: str | None = None, kv_bytes: float | None = None) -> KvCache:
    """The KV cache SGLang stores for ``model`` (:class:`pdmux_cli.catalog.model.Model`) under
    ``--kv-cache-dtype kv_cache_dtype`` (``None`` = SGLang's default ``auto``), or ``kv_bytes`` bytes per
    element (``--kv-bytes``) when given (module docstring for the rules).

    Raises :class:`InputError` when both are given, for a value :func:`check_kv_cache_dtype` refuses,
    and for a ``kv_bytes`` that is not a positive finite number.
    """
    check_kv_options(kv_cache_dtype, kv_bytes)
    choice = check_kv_cache_dtype(kv_cache_dtype)
    if kv_bytes is not None:
        if (
            isinstance(kv_bytes, bool)
            or not isinstance(kv_bytes, (int, float))
            or not 0 < kv_bytes < float("inf")
        ):
            raise InputError(
                "{flag.kv_bytes} must be a positive number of bytes, got {value}",
                param="kv_bytes",
                values={"value": short_repr(kv_bytes)},
            )
        return KvCache("custom", float(kv_bytes), Finding("kv_cache.bytes_given", {"kv_bytes": kv_bytes},
                                                          "kv_bytes"))
    if choice is None or choice == "auto":
        dtype = model.kv_dtype
        return KvCache(dtype, KV_DTYPE_BYTES[dtype], Finding("kv_cache.auto", {"dtype": dtype},
                                                             "kv_cache_dtype"))
    dtype = _EXPLICIT[choice]
    return KvCache(dtype, KV_DTYPE_BYTES[dtype], Finding("kv_cache.dtype_given", {"dtype": choice},
                                                         "kv_cache_dtype"))


#: Help text of the option, shared by the commands that take it.
KV_CACHE_DTYPE_HELP = ("SGLang's --kv-cache-dtype: auto (the model's dtype, e.g. bf16 for an fp8 checkpoint, "
                       "fp8_e4m3 where its quantization_config says kv_cache_quant_algo FP8), fp8_e4m3, "
                       "fp8_e5m2, bf16 (default: auto; --kv-bytes gives bytes per element instead).")
