"""What ``pdmux bench`` will run, computed without a GPU: the plan behind ``--dry-run`` and the real run.

Pure: no torch, numpy or cuda-python. The plan fixes the SM counts of the solo sweep (the CUDA
split granularity up to the whole GPU), SGLang's levels for the co-run (``policy.plan_groups``:
SGLang's automatic path, or CUDA's granularity on Blackwell), the kernel sizes and the repeats, and
counts the bytes and FLOPs each launch moves.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..messages import render_all
from ..sglang import split_levels
from ..util.errors import Finding, InputError, short_repr
from ..util.numbers import plain_int
from . import kernels
from .stats import S_SAT_FRACTION

#: The prefill probe: bf16 ``torch.matmul`` of (M x K) @ (K x N), default M x N x K.
DEFAULT_GEMM_SHAPE = (8192, 4096, 12288)
#: Rows of the decode-like skinny GEMM (a decode batch): 32 x hidden x intermediate.
SKINNY_ROWS = 32
#: Read buffer of the bandwidth kernel, bytes, unless 4x L2 is larger.
DEFAULT_BUFFER_BYTES = 1 << 30
#: The read buffer must be at least this many times the L2 so reads come from HBM.
MIN_BUFFER_L2_MULTIPLE = 4
#: Largest read buffer (bytes): past any GPU's memory today, and its grid stays within CUDA's
#: 2**31 - 1 blocks. A device profile's memory bounds it further.
MAX_BUFFER_BYTES = 1 << 40
#: Largest M, N or K of a bench GEMM (elements).
MAX_GEMM_DIM = 1 << 20
#: Most copies of a skinny GEMM's weights rotated to keep them out of L2 (a real layer needs 1-10).
MAX_SKINNY_COPIES = 1024
#: Most timed runs per measurement (the default is 10; 1000 already takes hours).
MAX_REPEATS = 1000
DEFAULT_REPEATS = 10
QUICK_REPEATS = 3
DEFAULT_WARMUP = 3
QUICK_WARMUP = 1
#: Wall window (ms) both co-run streams are kept busy for, per repeat.
DEFAULT_WINDOW_MS = 200.0
QUICK_WINDOW_MS = 50.0
#: Each timed solo run lasts at least this long (ms): several launches when one is shorter.
MIN_RUN_MS = 2.0
#: The shortest launch gate (ms): measured work waits behind a spin kernel while it is queued (longer
#: for many launches, see runner.gate_ms).
GATE_MS = 20.0
#: Warm-up on the whole GPU before the ceilings (s): GEMMs and copies so the clocks leave their idle
#: state and settle before anything is timed (issue 11: "about a second").
WARMUP_S = 1.0
#: Bytes per bf16 element.
BF16_BYTES = 2
#: Extra device memory kept free for cuBLAS workspaces and the CUDA context (bytes).
MEMORY_HEADROOM_BYTES = 512 << 20


@dataclass(frozen=True)
class PlanDevice:
    """The device a plan is for (SMs, bytes, bytes/s, FLOP/s; ``None`` where unknown).

    ``source``: ``"profile"`` (a GPU profile, for ``--dry-run``), ``"profile+device"`` (a real device
    matched to a profile) or ``"device"`` (a real device no profile matches: its own numbers).
    """

    name: str
    sm_count: int
    compute_capability: tuple[int, int]
    l2_bytes: int | None
    memory_bytes: int | None
    hbm_bytes_per_s: float | None = None
    bf16_dense_flops: float | None = None
    profile_key: str | None = None
    source: str = "profile"

    @classmethod
    def from_gpu(cls, gpu: Any, source: str = "profile") -> PlanDevice:
        """From a ``hardware.Gpu``; raises :class:`InputError` when its SM count is unpublished."""
        return cls(
            name=gpu.name, sm_count=gpu.require_sm_count(), compute_capability=tuple(gpu.compute_capability),
            l2_bytes=gpu.l2_bytes, memory_bytes=gpu.memory_bytes or None, hbm_bytes_per_s=gpu.hbm_bytes_per_s
            or None, bf16_dense_flops=gpu.bf16_dense_flops or gpu.fp16_dense_flops, profile_key=gpu.key,
            source=source,
        )

    @property
    def cc_text(self) -> str:
        return f"{self.compute_capability[0]}.{self.compute_capability[1]}"


@dataclass(frozen=True)
class GemmShape:
    """A bf16 GEMM ``(m x k) @ (k x n)``: sizes in elements."""

    m: int
    n: int
    k: int

    @property
    def flops(self) -> int:
        """FLOPs of one product: ``2 m n k``."""
        return 2 * self.m * self.n * self.k

    @property
    def operand_bytes(self) -> int:
        """Bytes of A, B and C together (bf16)."""
        return BF16_BYTES * (self.m * self.k + self.k * self.n + self.m * self.n)

    @property
    def weight_bytes(self) -> int:
        """Bytes of B (the ``k x n`` weight of a skinny GEMM)."""
        return BF16_BYTES * self.k * self.n

    @property
    def text(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"


def parse_gemm_shape(text: str) -> GemmShape:
    """``"8192x4096x12288"`` (M x N x K) -> :class:`GemmShape`; :class:`InputError` otherwise."""
    parts = [plain_int(p) for p in re.split(r"[x*, ]+", str(text).strip().lower())]
    if len(parts) != 3 or None in parts:
        raise InputError("{param_flag} {text}: write MxNxK with positive integers, e.g. 8192x4096x12288",
                         param="gemm_shape", values={"text": short_repr(text)})
    m, n, k = parts
    if min(m, n, k) <= 0:
        raise InputError("{param_flag} {text!r}: M, N and K must all be > 0", param="gemm_shape",
                         values={"text": text})
    if max(m, n, k) > MAX_GEMM_DIM:
        raise InputError("{param_flag} {text!r}: each of M, N and K must be at most {most}",
                         param="gemm_shape", values={"text": text, "most": MAX_GEMM_DIM})
    return GemmShape(m, n, k)


def parse_skinny(text: str) -> GemmShape:
    """``"4096x12288"`` (hidden x intermediate) -> the ``32 x intermediate x hidden`` decode GEMM."""
    parts = [plain_int(p) for p in re.split(r"[x*, ]+", str(text).strip().lower())]
    if len(parts) != 2 or None in parts or min(parts) <= 0 or max(parts) > MAX_GEMM_DIM:
        raise InputError("{param_flag} {text}: write HIDDENxINTERMEDIATE with positive integers up to "
                         "{most}, e.g. 4096x12288", param="skinny_gemm",
                         values={"text": short_repr(text), "most": MAX_GEMM_DIM})
    hidden, inter = parts
    return GemmShape(SKINNY_ROWS, inter, hidden)


_BYTE_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
               "t": 10**12, "tb": 10**12, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}


def parse_bytes(text: str) -> int:
    """``"1073741824"``, ``"1GiB"``, ``"512MiB"``, ``"2e9"``, ``"2GB"`` -> bytes (int > 0).

    Raises :class:`InputError` for anything else.
    """
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?(?:e[0-9]+)?)\s*([a-z]*)\s*", str(text).lower())
    if not m or m.group(2) not in _BYTE_UNITS:
        raise InputError("{param_flag} {text!r}: give bytes, e.g. 1073741824, 1GiB or 512MiB",
                         param="buffer_bytes", values={"text": text})
    number = float(m.group(1)) * _BYTE_UNITS[m.group(2)]
    if not number <= MAX_BUFFER_BYTES:  # also inf (1e400)
        raise InputError("{param_flag} {text}: at most {most} bytes (1 TiB)", param="buffer_bytes",
                         values={"text": short_repr(text), "most": MAX_BUFFER_BYTES})
    value = int(number)
    if value <= 0:
        raise InputError("{param_flag} {text!r} must be > 0", param="buffer_bytes", values={"text": text})
    return value


@dataclass(frozen=True)
class BenchPlan:
    """Everything a bench run does, in numbers (SMs, bytes, FLOPs, ms).

    ``granularity``: ``(minimum SMs, multiple)`` of a green-context split and where it came from
    (``granularity_source``: the driver's SM resource or CUDA's table by capability).
    ``sweep_sms``: SM counts of the solo sweep; the last is the whole GPU (a plain stream).
    ``levels``: the co-run levels ``(prefill_sms, decode_sms)``; ``level_source`` as in
    ``policy.GroupPlan.source`` (or ``"option"`` for ``--levels`` pairs outside SGLang's plan).
    ``buffer_bytes``: the read buffer (a multiple of 16). ``skinny``/``skinny_copies``: the optional
    decode-like GEMM and how many weight copies it cycles through (together >= 4x L2).
    """

    device: PlanDevice
    device_index: int
    granularity: tuple[int, int]
    granularity_source: str
    sweep_sms: tuple[int, ...]
    levels: tuple[split_levels.Split, ...]
    level_source: str
    notes: tuple[Finding, ...]
    gemm: GemmShape
    skinny: GemmShape | None
    skinny_copies: int
    buffer_bytes: int
    repeats: int
    warmup: int
    window_ms: float
    quick: bool

    @property
    def read_bytes_per_launch(self) -> int:
        """Bytes one launch of the read kernel reads (the buffer, counted once)."""
        return self.buffer_bytes

    @property
    def copy_bytes_per_launch(self) -> int:
        """Bytes one device-to-device copy of the buffer moves (read + write: 2x the buffer)."""
        return 2 * self.buffer_bytes

    @property
    def read_grid_blocks(self) -> int:
        return kernels.read_grid_blocks(self.buffer_bytes)

    @property
    def smid_blocks(self) -> int:
        return kernels.SMID_BLOCKS_PER_SM * self.device.sm_count

    @property
    def memory_needed_bytes(self) -> int:
        """Device memory the bench allocates (bytes): GEMM operands, read buffer and its copy, the
        skinny GEMM's weights, the SM-id output."""
        total = self.gemm.operand_bytes + 2 * self.buffer_bytes + 4 * self.smid_blocks
        if self.skinny is not None:
            total += self.skinny_copies * self.skinny.weight_bytes
            total += BF16_BYTES * self.skinny.m * (self.skinny.k + self.skinny.n)
        return total

    @property
    def steps(self) -> int:
        """Progress steps: 2 ceilings, one per sweep point, one per level."""
        return 2 + len(self.sweep_sms) + len(self.levels)


def sweep_sm_counts(total_sms: int, granularity: tuple[int, int]) -> tuple[int, ...]:
    """SM counts of the solo sweep: ``min, min + multiple, ...`` below ``total_sms``, then the whole GPU."""
    minimum, multiple = granularity
    return tuple(range(minimum, total_sms, multiple)) + (total_sms,)


def parse_level_items(text: str) -> list[tuple[str, int | split_levels.Split]]:
    """``--levels`` syntax, before any device is known: ``(item, level number or Split)`` per comma
    item. Raises :class:`InputError` for an item that is neither a number nor ``PREFILL/DECODE``
    (``:`` works too), for an empty item (``1,,3``), and for no item at all."""
    items: list[tuple[str, int | split_levels.Split]] = []
    raw = [t.strip() for t in str(text).split(",")]
    for position, item in enumerate(raw, start=1):
        if not item:
            if any(raw):  # "1,,3": an empty item would drop out unseen
                raise InputError("{param_flag}: item {position} of {text} is empty (e.g. 1,3)",
                                 param="levels", values={"position": position, "text": short_repr(str(text))})
            continue
        index = plain_int(item)
        if index is not None:
            if index < 1:
                raise InputError("{param_flag} {item}: level numbers start at 1 (the first green-context "
                                 "level)", param="levels", values={"item": item})
            items.append((item, index))
            continue
        parts = [plain_int(p) for p in item.replace(":", "/").split("/")]
        if len(parts) != 2 or None in parts:
            raise InputError("{param_flag} {item}: give level numbers (1,3) or PREFILL/DECODE SMs (112/20)",
                             param="levels", values={"item": short_repr(item)})
        items.append((item, split_levels.Split(parts[0], parts[1])))
    if not items:
        raise InputError("{param_flag}: give at least one level, e.g. 1,3 or 112/20", param="levels",
                         values={})
    return items


def _parse_levels(text: str, planned: Sequence[split_levels.Split],
                  total_sms: int) -> list[split_levels.Split]:
    chosen: list[split_levels.Split] = []
    for item, value in parse_level_items(text):
        if isinstance(value, int):
            if not 1 <= value <= len(planned):
                listing = ", ".join(f"{i}={p}/{d}" for i, (p, d) in enumerate(planned, start=1)) or "none"
                raise InputError("{param_flag} {item}: level numbers run 1-{count} ({listing})",
                                 param="levels",
                                 values={"item": item, "count": len(planned), "listing": listing})
            split = planned[value - 1]
        else:
            split = value
            if split.prefill_sms <= 0 or split.decode_sms <= 0 or sum(split) > total_sms:
                raise InputError(
                    "{param_flag} {item}: prefill and decode SMs must be > 0 and add up to at most "
                    "{total_sms}",
                    param="levels", values={"item": item, "total_sms": total_sms},
                )
        if split not in chosen:
            chosen.append(split)
    return chosen


def make_plan(
    device: PlanDevice,
    *,
    gemm: GemmShape | None = None,
    buffer_bytes: int | None = None,
    repeats: int | None = None,
    quick: bool = False,
    levels: str | None = None,
    device_index: int = 0,
    sm_group_num: int = split_levels.DEFAULT_SM_GROUP_NUM,
    skinny: GemmShape | None = None,
    granularity: tuple[int, int] | None = None,
    window_ms: float | None = None,
) -> BenchPlan:
    """The plan for ``device``. Every size is checked here, so a bad option fails before any GPU work.

    ``buffer_bytes``: ``None`` for ``max(1 GiB, 4x L2)``; an explicit value below 4x L2 is refused.
    ``repeats``: timed runs per measurement (default 10, ``quick`` 3). ``levels``: a comma list of
    level numbers (1 = first green-context level) or ``P/D`` pairs; ``None`` for all of SGLang's.
    ``granularity``: the driver's ``(minimum, multiple)`` when known, else CUDA's table.
    Raises :class:`InputError` (exit 2) for bad sizes, repeats < 1, a device index < 0 or a
    capability without green contexts.
    """
    if isinstance(repeats, bool) or (repeats is not None and not 1 <= repeats <= MAX_REPEATS):
        raise InputError("{param_flag} must be from 1 to {most}, got {repeats}", param="repeats",
                         values={"most": MAX_REPEATS, "repeats": repeats})
    if device_index < 0:
        raise InputError("{param_flag} must be >= 0, got {index}", param="device",
                         values={"index": device_index})
    total = device.sm_count
    split_levels.check_sm_group_num(sm_group_num, total)
    granularity, granularity_source = _granularity(device, granularity)
    planned, level_source, notes = _levels(device, levels, granularity, sm_group_num)
    buffer_bytes, floor = _buffer(device, buffer_bytes)
    if not device.l2_bytes:
        notes.append(Finding("bench.l2_unknown", {"gpu": device.name, "multiple": MIN_BUFFER_L2_MULTIPLE}))
    gemm = gemm or GemmShape(*DEFAULT_GEMM_SHAPE)
    plan = BenchPlan(
        device=device, device_index=device_index, granularity=tuple(granularity),
        granularity_source=granularity_source, sweep_sms=sweep_sm_counts(total, granularity),
        levels=tuple(split_levels.Split(*s) for s in planned), level_source=level_source, notes=tuple(notes),
        gemm=gemm, skinny=skinny, skinny_copies=_skinny_copies(skinny, floor), buffer_bytes=buffer_bytes,
        repeats=repeats if repeats is not None else (QUICK_REPEATS if quick else DEFAULT_REPEATS),
        warmup=QUICK_WARMUP if quick else DEFAULT_WARMUP,
        window_ms=window_ms if window_ms is not None else (QUICK_WINDOW_MS if quick else DEFAULT_WINDOW_MS),
        quick=quick,
    )
    if device.memory_bytes and plan.memory_needed_bytes + MEMORY_HEADROOM_BYTES > device.memory_bytes:
        _refuse_memory(plan)
    return plan


def _granularity(device: PlanDevice, granularity: tuple[int, int] | None) -> tuple[tuple[int, int], str]:
    """The split granularity ``(minimum SMs, multiple)`` and where it came from (the driver's, else CUDA's
    table by capability); :class:`InputError` when the device has too few SMs to split."""
    if granularity is None:
        granularity = split_levels.cuda_sm_granularity(device.compute_capability[0])
        source = "CUDA table by compute capability"
    else:
        source = "driver (minSmPartitionSize, smCoscheduledAlignment)"
    if granularity[0] >= device.sm_count:
        raise InputError(f"{device.name} has {device.sm_count} SMs: too few to split (green contexts need > "
                         f"{granularity[0]})")
    return granularity, source


def _levels(device: PlanDevice, levels: str | None, granularity: tuple[int, int],
            sm_group_num: int) -> tuple[list[split_levels.Split], str, list[Finding]]:
    """The co-run levels (SGLang's, or the ``levels`` option's), where they came from, and the notes: the
    levels plan's own (:func:`split_levels.plan_groups`), no SGLang levels, a prefill count the driver
    rounds up. :class:`InputError` for an option's level that rounding leaves without decode SMs."""
    total = device.sm_count
    notes: list[Finding] = []
    try:
        group_plan = split_levels.plan_groups(total, device.compute_capability, sm_group_num)
        planned = list(group_plan.groups[1:-1])
        level_source = group_plan.source
        if group_plan.note:
            notes.append(group_plan.note)
    except InputError as exc:
        planned, level_source = [], "none"
        notes.append(Finding("bench.no_levels", {"reason": str(exc)}))
    if levels is not None:
        chosen = _parse_levels(levels, planned, total)
        if any(s not in planned for s in chosen):
            level_source = "option"
        planned = chosen
    minimum, multiple = granularity
    for p, d in planned:
        if p % multiple or p < minimum:
            prefill_granted = max(minimum, -(-p // multiple) * multiple)
            pair_granted = min(total, max(minimum, -(-(p + d) // multiple) * multiple))
            if levels is not None and pair_granted - prefill_granted <= 0:
                raise InputError(
                    "{param_flag} {p}/{d}: green contexts come in steps of {multiple} SMs (at least "
                    "{minimum}), so prefill {p} becomes {granted} and leaves no SMs for decode: give a "
                    "prefill count that is a multiple of {multiple}", param="levels",
                    values={"p": p, "d": d, "multiple": multiple, "minimum": minimum,
                            "granted": prefill_granted},
                )
            notes.append(Finding("bench.level_rounded_up", {"prefill_sms": p, "decode_sms": d,
                                                           "multiple": multiple}))
    return planned, level_source, notes


def _buffer(device: PlanDevice, buffer_bytes: int | None) -> tuple[int, int]:
    """The read buffer (bytes, a multiple of the 16-byte load) and its floor, 4x the L2 (0 when the L2 is
    unknown); :class:`InputError` for a buffer below the floor or below one block's reads."""
    floor = MIN_BUFFER_L2_MULTIPLE * device.l2_bytes if device.l2_bytes else 0
    if buffer_bytes is None:
        buffer_bytes = max(DEFAULT_BUFFER_BYTES, floor)
    elif buffer_bytes < floor:
        raise InputError(
            "{param_flag} {buffer_bytes} is below {multiple}x the L2 of {gpu} ({floor} bytes): reads would "
            "hit L2, not HBM", param="buffer_bytes",
            values={"buffer_bytes": buffer_bytes, "multiple": MIN_BUFFER_L2_MULTIPLE, "gpu": device.name,
                    "floor": floor},
        )
    buffer_bytes -= buffer_bytes % kernels.READ_VECTOR_BYTES
    if buffer_bytes < kernels.READ_BYTES_PER_BLOCK:
        raise InputError("{param_flag} must be at least {least} bytes", param="buffer_bytes",
                         values={"least": kernels.READ_BYTES_PER_BLOCK})
    return buffer_bytes, floor


def _skinny_copies(skinny: GemmShape | None, floor: int) -> int:
    """How many copies of the skinny GEMM's weights together reach ``floor`` bytes (4 when it is 0: the L2
    unknown; 0 without a skinny GEMM); :class:`InputError` past :data:`MAX_SKINNY_COPIES`."""
    if skinny is None:
        return 0
    copies = max(1, math.ceil(floor / skinny.weight_bytes)) if floor else 4
    if copies > MAX_SKINNY_COPIES:
        raise InputError(
            "{param_flag} {hidden}x{inter}: its {weight_bytes}-byte weights would need {copies} copies "
            "to stay out of L2; give a real layer (hidden x intermediate, e.g. 4096x12288)",
            param="skinny_gemm",
            values={"hidden": skinny.k, "inter": skinny.n, "weight_bytes": skinny.weight_bytes,
                    "copies": copies},
        )
    return copies


def _refuse_memory(plan: BenchPlan) -> None:
    """:class:`InputError`: ``plan`` needs more device memory than its device has (the sizes that use it, and
    the options that set them; the skinny GEMM's only when there is one)."""
    gemm, skinny, dev = plan.gemm, plan.skinny, plan.device
    skinny_part = (", skinny GEMM {hidden}x{inter} weights {copies} x {skinny_weight_bytes} bytes" if skinny
                   else "")
    skinny_values = ({"hidden": skinny.k, "inter": skinny.n, "copies": plan.skinny_copies,
                      "skinny_weight_bytes": skinny.weight_bytes} if skinny else {})
    raise InputError(
        "the bench needs {needed_gb:.2f} GB (GEMM {gemm} {operand_bytes} bytes, read buffer 2 x "
        "{buffer_bytes} bytes" + skinny_part + ") but {gpu} has {memory_gb:.1f} GB: use a smaller "
        "{flag.gemm_shape} or {flag.buffer_bytes}" + (" or {flag.skinny_gemm}" if skinny else ""),
        param="gemm_shape",
        values={"needed_gb": plan.memory_needed_bytes / 1e9, "gemm": gemm.text,
                "operand_bytes": gemm.operand_bytes,
                "buffer_bytes": plan.buffer_bytes, **skinny_values, "gpu": dev.name,
                "memory_gb": dev.memory_bytes / 1e9},
    )


def estimated_seconds(plan: BenchPlan) -> float | None:
    """A rough run time (s) from datasheet numbers (90% of HBM bandwidth, 70% of dense bf16 spread
    linearly over the SMs, bandwidth saturating at half the SMs), with the warm-up, the launch gates
    and each level's solo and co-run windows; ``None`` without those figures."""
    dev = plan.device
    if not dev.hbm_bytes_per_s or not dev.bf16_dense_flops:
        return None
    total = dev.sm_count

    def read_s(s: int) -> float:
        return plan.buffer_bytes / (0.9 * dev.hbm_bytes_per_s * min(1.0, 2 * s / total))

    def gemm_s(s: int) -> float:
        return plan.gemm.flops / (0.7 * dev.bf16_dense_flops * s / total)

    gate_s = GATE_MS / 1e3

    def probe(launch_s: float) -> float:  # a gated warm-up + one timed launch
        return gate_s + (plan.warmup + 1) * launch_s

    def timed(launch_s: float) -> float:  # the probe, then the gated timed runs
        return probe(launch_s) + gate_s + plan.repeats * max(launch_s, MIN_RUN_MS / 1e3)

    seconds = WARMUP_S + 2 * timed(read_s(total)) + timed(gemm_s(total))
    for s in plan.sweep_sms:
        seconds += timed(read_s(s)) + timed(gemm_s(s)) + 0.01
    window_s = 1.3 * plan.window_ms / 1e3 + gate_s  # a window with its units' tail, behind its gate
    for p, d in plan.levels:
        # SM ids, two probes, then per repeat: GEMM alone, read alone, both
        seconds += probe(gemm_s(p)) + probe(read_s(d)) + plan.repeats * 3 * window_s + 0.05
    return seconds


def plan_dict(plan: BenchPlan) -> dict[str, Any]:
    """The JSON of ``pdmux bench --dry-run`` (units in the key names)."""
    dev = plan.device
    kernels_list: list[dict[str, Any]] = [
        {
            "name": "pdmux_read_bw", "kind": "bandwidth",
            "role": "decode probe (and the solo bandwidth sweep)",
            "compiled": "NVRTC at run time (cubin for the device's sm_XY)",
            "bytes_per_launch": plan.read_bytes_per_launch, "grid_blocks": plan.read_grid_blocks,
            "block_threads": kernels.READ_BLOCK, "loads_in_flight_per_thread": kernels.READ_UNROLL,
            "load_bytes": kernels.READ_VECTOR_BYTES,
        },
        {
            "name": "torch.matmul bf16", "kind": "gemm", "role": "prefill probe (and the solo FLOP/s sweep)",
            "shape_mnk": [plan.gemm.m, plan.gemm.n, plan.gemm.k], "flops_per_launch": plan.gemm.flops,
            "operand_bytes": plan.gemm.operand_bytes,
        },
        {
            "name": "pdmux_mark", "kind": "marker",
            "role": "%globaltimer before and after each unit of GEMMs (co-run overlap)", "grid_blocks": 1,
            "block_threads": 1,
        },
        {
            "name": "pdmux_spin", "kind": "gate",
            "role": "launch gate: holds the GPU while a measurement is queued", "grid_blocks": 1,
            "block_threads": 1, "min_ms": GATE_MS,
        },
        {
            "name": "pdmux_smid", "kind": "smid", "role": "which SMs each partition runs on",
            "grid_blocks": plan.smid_blocks, "block_threads": kernels.SMID_BLOCK,
            "spin_ns": kernels.SMID_SPIN_NS,
        },
        {"name": "copy_", "kind": "ceiling", "role": "device-to-device copy, default stream",
         "bytes_per_launch": plan.copy_bytes_per_launch},
        {"name": "torch.matmul bf16 (whole GPU)", "kind": "ceiling", "role": "matmul on the default stream",
         "flops_per_launch": plan.gemm.flops},
    ]
    if plan.skinny is not None:
        kernels_list.append({
            "name": "torch.matmul bf16 (skinny)", "kind": "skinny-gemm", "role": "decode-like GEMM probe",
            "shape_mnk": [plan.skinny.m, plan.skinny.n, plan.skinny.k], "flops_per_launch": plan.skinny.flops,
            "weight_bytes_per_launch": plan.skinny.weight_bytes, "weight_copies": plan.skinny_copies,
        })
    return {
        "dry_run": True,
        "gpu": dev.name,
        "gpu_profile": dev.profile_key,
        "device_source": dev.source,
        "device_index": plan.device_index,
        "sm_count": dev.sm_count,
        "compute_capability": dev.cc_text,
        "l2_bytes": dev.l2_bytes,
        "memory_bytes": dev.memory_bytes,
        "granularity_min_sms": plan.granularity[0],
        "granularity_multiple_sms": plan.granularity[1],
        "granularity_source": plan.granularity_source,
        "sweep_sms": list(plan.sweep_sms),
        "levels": [{"level": i, "prefill_sms": p, "decode_sms": d}
                   for i, (p, d) in enumerate(plan.levels, start=1)],
        "level_source": plan.level_source,
        "gemm_shape_mnk": [plan.gemm.m, plan.gemm.n, plan.gemm.k],
        "gemm_flops_per_launch": plan.gemm.flops,
        "buffer_bytes": plan.buffer_bytes,
        "buffer_l2_multiple": (plan.buffer_bytes / dev.l2_bytes) if dev.l2_bytes else None,
        "read_bytes_per_launch": plan.read_bytes_per_launch,
        "copy_bytes_per_launch": plan.copy_bytes_per_launch,
        "memory_needed_bytes": plan.memory_needed_bytes,
        "repeats": plan.repeats,
        "warmup": plan.warmup,
        "min_run_ms": MIN_RUN_MS,
        "corun_window_ms": plan.window_ms,
        "warmup_s": WARMUP_S,
        "gate_min_ms": GATE_MS,
        "quick": plan.quick,
        "s_sat_fraction": S_SAT_FRACTION,
        "kernels": kernels_list,
        "steps": plan.steps,
        "estimated_seconds": estimated_seconds(plan),
        "notes": render_all(plan.notes),
    }
