"""Tensor-parallel collectives: how long an all-reduce (and the logits' all-gather) takes between the
``N`` GPUs of one server, from constants fitted to measurements (``profiles/efficiency/allreduce.yaml``).

The time of one all-reduce of ``b`` bytes (each GPU's buffer) over ``N`` GPUs is

    latency_s + 2 (N - 1) / N x b / (link B/s x bandwidth_efficiency)

with ``2 (N - 1) / N`` the ring's traffic factor ("bus bandwidth", as nccl-tests count it) and the link
bandwidth the GPU profile's ``interconnect_bytes_per_s`` (per GPU and direction, datasheet). SGLang
0.5.23 runs two kernels (``srt/distributed/parallel_state.py`` ``GroupCoordinator.all_reduce``,
``device_communicators/custom_all_reduce.py`` ``CustomAllreduce.should_custom_ar``): its own custom
all-reduce for buffers up to :data:`CUSTOM_MAX_BYTES` (8 MiB) when the GPUs are all NVLink-connected or
only 2, and NCCL otherwise. Each has its own constants per measured GPU and rank count:

- ``custom``: fitted to NVIDIA's aiconfigurator tables of SGLang's custom all-reduce captured in a CUDA
  graph (the kernel's time; a running forward pass hides the host's launch), buffers <= 8 MiB;
- ``nccl``: fitted to Vidur's NCCL all-reduce times on one DGX H100 / A100 node, buffers > 8 MiB; on
  GPUs Vidur did not measure, to aiconfigurator's custom all-reduce above 8 MiB (on H100 at 64 MiB and 8
  GPUs the two differ by under 1%: both run at ~365 GB/s of bus bandwidth; ``pdmux accuracy`` reports the
  transfer as an out-of-sample term).

A GPU without measurements takes those of the measured GPU with the same interconnect kind and the
closest compute capability (efficiencies as fractions of its own link's bandwidth); a rank count
without its own fit takes the nearest measured one's, and NCCL's time gains the profile's
``interconnect_latency_s`` for each extra ring step (a ring all-reduce has ``2 (N - 1)`` steps: NCCL's
own latency model, ``src/graph/tuning.cc``). Every such substitution is a note in the output.

Where the collective runs: on the SMs of the phase that issues it (under PD multiplexing, prefill's
all-reduce on the prefill partition with its own communicator, ``pdmux_prefill_tp_group``; decode's on
the decode partition). Its time is taken as independent of the partition, i.e. the share of SMs it
needs is taken to be at most the partition's: the custom all-reduce launches at most 36 blocks of 512
threads (sgl-kernel ``custom_all_reduce.cuh``, ``defaultBlockLimit``), which fit on the smallest
partition SGLang builds (16 SMs on Hopper) at 4 blocks an SM; NCCL runs one block per channel, at most
32 (NVIDIA/nccl ``src/include/device.h`` ``MAXCHANNELS``; more in releases with NVLink SHARP), and
SGLang sends it only buffers over 8 MiB, which under pdmux are prefill's (at least half the SMs). An
assumption, not a measurement (no public measurement of an all-reduce on a green context). Two all-reduces at
once (prefill's and decode's, under pdmux) are taken not to slow each other: decode's are small and
latency-bound.

Pure except :func:`load_allreduce_fits` (reads the shipped file, libyaml).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import yaml

from ..util.errors import Finding, InputError
from ..util.numbers import finite_float
from ..catalog.profile_files import efficiency_profiles_dir

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

#: The ``format`` value of ``allreduce.yaml``.
FORMAT = "pdmux-allreduce/1"

#: File name of the all-reduce constants inside ``profiles/efficiency/``.
FILE_NAME = "allreduce.yaml"

#: SGLang's custom all-reduce handles buffers up to this many bytes (``CustomAllreduce._MAX_CAR_SIZE``,
#: 8192 x 1024 on CUDA); larger ones go to NCCL.
CUSTOM_MAX_BYTES = 8192 * 1024

#: Most GPUs a tensor-parallel group spans here: one server (the measurements are 2 to 8 GPUs of one node).
MAX_TP = 8


def ring_factor(ranks: int) -> float:
    """Bytes each GPU sends per byte of its buffer in a ring all-reduce: ``2 (N - 1) / N``."""
    return 2.0 * (ranks - 1) / ranks


def ring_steps(ranks: int) -> int:
    """Steps of a ring all-reduce over ``ranks`` GPUs: ``2 (N - 1)`` (reduce-scatter, then all-gather)."""
    return 2 * (ranks - 1)


@dataclass(frozen=True)
class LinkFit:
    """One fitted collective (a kernel on one GPU kind and rank count): ``latency_s`` (s) and
    ``bandwidth_efficiency`` (fraction of the link's datasheet bandwidth reached as bus bandwidth; above
    1 only where NVSwitch reduces in the network). ``median_error``: the fit's median absolute relative
    error (0.05 = 5%); ``points``: how many measurements; ``source``: which."""

    latency_s: float
    bandwidth_efficiency: float
    median_error: float | None = None
    points: int = 0
    source: str = ""

    def time_s(self, nbytes: float, ranks: int, link_bytes_per_s: float,
               factor: float | None = None) -> float:
        """Seconds to all-reduce ``nbytes`` bytes over ``ranks`` GPUs on a link of ``link_bytes_per_s``
        (per direction); ``factor`` replaces the ring factor (an all-gather: ``(N - 1) / N`` of the
        gathered bytes). 0 for nothing to move."""
        if nbytes <= 0 or ranks <= 1:
            return 0.0
        traffic = ring_factor(ranks) if factor is None else factor
        return self.latency_s + traffic * nbytes / (link_bytes_per_s * self.bandwidth_efficiency)


@dataclass(frozen=True)
class AllReduceFits:
    """The fits of one measured GPU (``gpu``: profile key; ``interconnect``: ``"nvlink"`` / ``"pcie"``;
    ``compute_capability``: ``(major, minor)``): ``ranks`` -> ``(custom or None, nccl)``. ``custom`` is
    ``None`` where SGLang does not run its custom all-reduce (PCIe beyond 2 GPUs)."""

    gpu: str
    interconnect: str
    compute_capability: tuple[int, int]
    ranks: dict[int, tuple[LinkFit | None, LinkFit]]


class TpCollectives:
    """The collectives of a tensor-parallel group of ``ranks`` GPUs on one GPU profile (bound).

    ``custom`` / ``nccl``: the fits used (``custom`` ``None``: NCCL at every size).
    ``link_bytes_per_s``: the profile's interconnect bandwidth per direction. ``extra_nccl_latency_s``:
    NCCL's per-step latency for ring steps the fitted rank count did not have. ``notes``: substitutions.
    ``source``: one line for output.
    """

    def __init__(self, ranks: int, link_bytes_per_s: float, custom: LinkFit | None, nccl: LinkFit,
                 extra_nccl_latency_s: float = 0.0, notes: tuple[str, ...] = (), source: str = "") -> None:
        self.ranks = ranks
        self.link_bytes_per_s = float(link_bytes_per_s)
        self.custom = custom
        self.nccl = nccl
        self.extra_nccl_latency_s = extra_nccl_latency_s
        self.notes = notes
        self.source = source

    def allreduce_s(self, nbytes: float) -> float:
        """Seconds of one all-reduce of ``nbytes`` bytes (each GPU's buffer): SGLang's custom kernel up to
        :data:`CUSTOM_MAX_BYTES` where it runs, NCCL above. 0 for no bytes."""
        if nbytes <= 0:
            return 0.0
        if self.custom is not None and nbytes <= CUSTOM_MAX_BYTES:
            return self.custom.time_s(nbytes, self.ranks, self.link_bytes_per_s)
        return self.nccl.time_s(nbytes, self.ranks, self.link_bytes_per_s) + self.extra_nccl_latency_s

    def allgather_s(self, gathered_bytes: float) -> float:
        """Seconds of one NCCL all-gather producing ``gathered_bytes`` bytes on every GPU: each sends
        ``(N - 1) / N`` of them, at the NCCL fit's latency and efficiency (an assumption: no all-gather
        was measured; a ring all-gather is the second half of a ring all-reduce)."""
        if gathered_bytes <= 0:
            return 0.0
        factor = (self.ranks - 1) / self.ranks
        return (self.nccl.time_s(gathered_bytes, self.ranks, self.link_bytes_per_s, factor=factor)
                + self.extra_nccl_latency_s / 2)


# ------------------------------------------------------------------------------------------------
# the shipped file


def _fit(value: Any, where: str) -> LinkFit:
    if not isinstance(value, dict):
        raise InputError(f"{where}: must be a mapping with latency_s and bandwidth_efficiency")
    latency = finite_float(value.get("latency_s"))
    eff = finite_float(value.get("bandwidth_efficiency"))
    if latency is None or not 0 <= latency <= 1e-3:
        raise InputError(f"{where}.latency_s must be a number from 0 to 0.001 s, got "
                         f"{value.get('latency_s')!r}")
    if eff is None or not 0.01 <= eff <= 1.5:
        raise InputError(f"{where}.bandwidth_efficiency must be from 0.01 to 1.5, got "
                         f"{value.get('bandwidth_efficiency')!r}")
    source = str(value.get("source", "")).strip()
    if not source:
        raise InputError(f"{where}.source is empty: every constant names its measurement")
    error = finite_float(value.get("median_error"))
    points = value.get("points", 0)
    return LinkFit(latency, eff, error, points if isinstance(points, int) else 0, source)


def parse_allreduce_fits(data: Any, where: str) -> tuple[AllReduceFits, ...]:
    """The fits in a parsed ``allreduce.yaml`` (pure). Raises :class:`InputError` naming ``where`` and the
    field for a malformed file (a broken installation)."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise InputError(f"{where}: not a {FORMAT} file (the installation is damaged)")
    gpus = data.get("gpus")
    if not isinstance(gpus, dict) or not gpus:
        raise InputError(f"{where}: 'gpus' must map GPU profile keys to their fits")
    out = []
    for key, entry in gpus.items():
        here = f"{where}: gpus.{key}"
        if not isinstance(entry, dict) or entry.get("interconnect") not in ("nvlink", "pcie"):
            raise InputError(f"{here}.interconnect must be nvlink or pcie")
        cc = str(entry.get("compute_capability", ""))
        try:
            major, minor = (int(x) for x in cc.split("."))
        except ValueError:
            raise InputError(f"{here}.compute_capability must be MAJOR.MINOR text, got {cc!r}") from None
        ranks = entry.get("ranks")
        if not isinstance(ranks, dict) or not ranks:
            raise InputError(f"{here}.ranks must map GPU counts to fits")
        table: dict[int, tuple[LinkFit | None, LinkFit]] = {}
        for n, fits in ranks.items():
            if not isinstance(n, int) or isinstance(n, bool) or not 2 <= n <= 1024 or not isinstance(
                fits, dict):
                raise InputError(f"{here}.ranks: {n!r} is not a GPU count with a mapping of fits")
            custom = fits.get("custom")
            table[n] = (None if custom is None else _fit(custom, f"{here}.ranks.{n}.custom"),
                        _fit(fits.get("nccl"), f"{here}.ranks.{n}.nccl"))
        out.append(AllReduceFits(str(key), entry["interconnect"], (major, minor), table))
    return tuple(sorted(out, key=lambda f: f.gpu))


@functools.lru_cache(maxsize=1)
def load_allreduce_fits() -> tuple[AllReduceFits, ...]:
    """``profiles/efficiency/allreduce.yaml`` (cached). Raises :class:`InputError` for a broken file."""
    path = efficiency_profiles_dir() / FILE_NAME
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_LOADER)
    except (OSError, yaml.YAMLError) as exc:
        raise InputError(f"all-reduce profile {path}: cannot be read ({exc})") from None
    return parse_allreduce_fits(data, f"all-reduce profile {path.name}")


def _cc_distance(a: tuple[int, int], b: tuple[int, int]) -> float:
    return abs((a[0] + a[1] / 10) - (b[0] + b[1] / 10))


def choose_fits(fits: tuple[AllReduceFits, ...], gpu_key: str, interconnect: str,
                compute_capability: tuple[int, int]) -> tuple[AllReduceFits, Finding | None]:
    """The fits a GPU uses and a finding (``None`` when its own): its own, else the measured GPU with the same
    interconnect kind and the closest compute capability (ties: the first key). Raises
    :class:`InputError` when no measured GPU has that interconnect kind."""
    for f in fits:
        if f.gpu == gpu_key:
            return f, None
    same = [f for f in fits if f.interconnect == interconnect]
    if not same:
        raise InputError(f"no all-reduce measurements over {interconnect}: tensor parallelism cannot be "
                         "estimated")
    best = min(same, key=lambda f: (_cc_distance(f.compute_capability, compute_capability), f.gpu))
    return best, Finding("costmodel.allreduce_stand_in", {"gpu": best.gpu, "interconnect": interconnect})


def tp_collectives(gpu: Any, tp: int, fits: tuple[AllReduceFits, ...] | None = None) -> TpCollectives:
    """The :class:`TpCollectives` of ``tp`` GPUs of the profile ``gpu``
    (:class:`pdmux_cli.catalog.hardware.Gpu`).

    ``fits``: the fits to choose from (default: the shipped file). Raises :class:`InputError` for a
    ``tp`` outside 2..:data:`MAX_TP` or a profile without interconnect figures."""
    if not 2 <= tp <= MAX_TP:
        raise InputError("{param_flag} must be from 1 to {max_tp} (GPUs of one server, where the all-reduce "
                         "was measured), got {tp}", param="tp", values={"max_tp": MAX_TP, "tp": tp})
    kind, link_bw, hop_s = gpu.require_interconnect(tp)
    fits = load_allreduce_fits() if fits is None else fits
    chosen, note = choose_fits(fits, getattr(gpu, "key", ""), kind, tuple(gpu.compute_capability))
    notes = [note] if note else []
    measured = sorted(chosen.ranks)
    nearest = min(measured, key=lambda n: (abs(n - tp), -n))
    custom, nccl = chosen.ranks[nearest]
    extra = 0.0
    if nearest != tp:
        steps = max(0, ring_steps(tp) - ring_steps(nearest))
        extra = steps * hop_s
        notes.append(
            Finding(
                "costmodel.allreduce_nearest_ranks",
                {
                    "tp": tp,
                    "nearest": nearest,
                    "measured": measured,
                    "hop_us": hop_s * 1e6,
                    "extra_steps": steps,
                },
                "tp",
            )
        )
    if custom is not None and not (kind == "nvlink" or tp == 2):
        custom = None  # SGLang's custom all-reduce needs all GPUs NVLink-connected beyond 2
    source = (f"TP {tp} over {kind} {link_bw / 1e9:g} GB/s each way, all-reduce constants of {chosen.gpu}"
              + ("" if custom is not None else " (NCCL at every size)"))
    return TpCollectives(tp, link_bw, custom, nccl, extra, tuple(notes), source)
