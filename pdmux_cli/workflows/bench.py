"""``bench``: :class:`BenchRequest`, ``pdmux bench``'s options declared once (issue 32).

The GPU bench itself runs under the CLI (:mod:`pdmux_cli.cli.bench`, :mod:`pdmux_cli.cli.bench_model`: the
device, the progress bar, the files written), which builds the command's options from these declarations.
Imported when the command is built (:func:`pdmux_cli.cli.options.deferred`), with the bench's plan for
its bounds (:data:`pdmux_cli.bench.plan.MAX_REPEATS`); torch, cuda-python and numpy never.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..bench.plan import MAX_REPEATS
from .fields import Checked, Range, declared_as, option
from .pdmux_knobs import PdmuxKnobs


@dataclass(frozen=True, kw_only=True)
class BenchRequest(Checked):
    """``pdmux bench``'s options (snake_case, the CLI's defaults).

    The kernel bench: ``dry_run`` (the plan only: ``gpu``, or ``sms`` with ``cc``, for any device),
    ``repeats`` (``None``: 10, 3 with ``quick``), ``gemm_shape`` (MxNxK), ``buffer_bytes`` (``None``: max(1
    GiB, 4x L2)), ``levels``, ``device`` (the CUDA index), ``skinny_gemm``, ``sm_group_num`` (SGLang's, at
    least 3), ``out`` (the folder written). The model replay, with ``model``: ``decode_bs``, ``context``,
    ``prompt_tokens`` (``None``: 32, 2048, 8192), ``token_budget``, ``decode_bs_divisor`` (``None``:
    SGLang's), ``calibration``, ``cpu`` (tests: no green contexts).
    """

    dry_run: bool = option(False, help=(
        "Print the plan (levels, sizes, kernels, repeats, bytes); needs no GPU or torch."))
    gpu: str | None = option(None, short="-g", help=(
        "GPU profile of the {flag.dry_run} plan (default h100). A real run detects the device; a {flag.gpu} "
        "given then must match its SM count."))
    sms: int | None = option(None, help="{flag.dry_run} for any device: its SM count (with {flag.cc}).")
    cc: str | None = option(None, help="{flag.dry_run} for any device: its compute capability, e.g. 9.0.")
    repeats: int | None = option(None, bounds=Range(1, MAX_REPEATS, template=(
        "{param_flag} must be from {low} to {high}, got {value}")), help=(
        "Timed runs per measurement; the median is reported. Default 10 (3 with {flag.quick})."))
    quick: bool = option(False, help=(
        "Few repeats and short co-run windows: a check (make gpu-check), not a calibration."))
    gemm_shape: str = option("8192x4096x12288", help="bf16 GEMM (prefill probe) as MxNxK.")
    buffer_bytes: str | None = option(None, help=(
        "Read buffer of the bandwidth kernel: bytes, or 1GiB / 512MiB. Default max(1 GiB, 4x L2); never "
        "below 4x L2."))
    levels: str | None = option(None, help=(
        "Co-run only these levels: numbers (1,3) or PREFILL/DECODE SMs (112/20,72/60)."))
    device: int = option(0, bounds=Range(0), help="CUDA device index.")
    skinny_gemm: str | None = option(None, help=(
        "Also time a decode-like GEMM 32 x HIDDENxINTERMEDIATE in the sweep, e.g. 4096x12288."))
    sm_group_num: int = option(8, bounds=Range(3, template=(
        "{param_flag} must be >= 3 (SGLang's rule), got {value}")), help=(
        "SGLang's sm_group_num: its levels are the co-run levels."))
    out: Path | None = option(None, short="-o", help=(
        "Write results.json, calibration.yaml and curves.png into this directory."))
    model: str | None = option(None, short="-m", help=(
        "Replay this model (profile name or config.json) instead of the kernels: its layers with random bf16 "
        "weights, SGLang's pdmux loop at each level, next to 'pdmux estimate'."))
    decode_bs: int | None = option(None, help="{flag.model}: requests in the decode batch (default 32).")
    context: int | None = option(None, help=(
        "{flag.model}: KV-cache tokens of each decode request (default 2048)."))
    prompt_tokens: int | None = option(None, help=(
        "{flag.model}: tokens of the prompt prefilled in layer slices (default 8192)."))
    token_budget: int | None = declared_as(PdmuxKnobs, "token_budget")
    decode_bs_divisor: int | None = declared_as(PdmuxKnobs, "decode_bs_divisor")
    calibration: Path | None = option(None, help=(
        "{flag.model}: a calibration.yaml for the calibrated estimate column (default: this replay's own "
        "fixed time per decode step)."))
    cpu: bool = option(False, hidden=True, help=(
        "{flag.model}: run the replay on the CPU (tiny models, tests): no green contexts."))
