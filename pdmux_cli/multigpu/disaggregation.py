"""More than one GPU beyond tensor parallelism: data-parallel replicas and PD disaggregation (xPyD).

Pure functions and frozen dataclasses (no I/O), shared by ``estimate``, ``simulate`` and ``capacity``.

- **Data parallelism** (``--dp N``): N copies of one server (each ``--tp`` GPUs) behind a router.
  The router's methods are SGLang 0.5.23's ``--load-balance-method`` names
  (``srt/managers/data_parallel_controller.py``: ``round_robin_scheduler``; ``DPBudget.dispatch`` for
  ``total_requests``, the replica with the fewest running + waiting requests, ties to the lowest
  index); ``round_robin`` is SGLang's default (``srt/arg_groups/serving_hook.py``
  ``handle_load_balance_method``).
- **PD disaggregation** (``--disagg XPYD``): X prefill instances and Y decode instances, each with the
  same ``--tp``; a request is prefilled on a prefill instance, its KV cache moves to a decode
  instance over a link (:class:`KvLink`), and the decode instance streams every output token
  (SGLang's decode server emits the first one when it merges the transferred request into its
  running batch without a forward pass: ``srt/disaggregation/decode.py``
  ``get_next_disagg_decode_batch_to_run``).
- **The KV link** (:func:`kv_link`): within one node (the deployment's GPUs <= :data:`GPUS_PER_NODE`)
  the GPU profile's own interconnect (NVLink, or PCIe for PCIe cards), per GPU and direction; across
  nodes RDMA at :data:`RDMA_BYTES_PER_S` per GPU. Each rank of a TP group sends its own shard of
  the KV cache over its own link, so a transfer lasts ``latency + rank KV bytes / bandwidth``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ..util.errors import Finding, InputError, short_repr

#: GPUs of one node: an HGX/DGX baseboard holds 8 GPUs on one NVLink fabric (NVIDIA DGX H100/H200 and
#: HGX B200 user guides). A deployment of more GPUs than this spans nodes.
GPUS_PER_NODE = 8

#: RDMA bandwidth per GPU and direction across nodes, bytes/s: one 400 Gb/s ConnectX-7 port per GPU
#: (NVIDIA ConnectX-7 datasheet: 400 Gb/s per port; DGX H100 user guide: eight single-port ConnectX-7
#: cards for the compute fabric, one per GPU). 400e9 / 8 = 50e9 bytes/s, line rate.
RDMA_BYTES_PER_S = 400e9 / 8

#: Latency of one transfer across the network, s: NCCL's own tuning constant for a network hop
#: (NVIDIA/nccl ``src/graph/tuning.cc`` ``hwLat`` NET, Ring/LL: 2.7 us), the same column the GPU
#: profiles take for NVLink and PCIe.
RDMA_LATENCY_S = 2.7e-6

#: ``--kv-link-gb-s`` range, GB/s per GPU and direction: from 1 MB/s (slower is a unit slip, and transfers
#: of days lose the simulator's sub-millisecond resolution) to 1e12 GB/s (as good as instant: an instant link
#: is a fair question; beyond it the figure overflows to infinity in bytes/s).
KV_LINK_GB_S_RANGE = (1e-3, 1e12)
#: ``--kv-link-latency-us`` range, us: none to one second a transfer.
KV_LINK_LATENCY_US_RANGE = (0.0, 1e6)

#: Link kinds ``--kv-link`` takes (``auto``: :func:`kv_link` picks by node count).
KV_LINKS = ("auto", "nvlink", "pcie", "rdma")

#: Most instances on either side of ``--disagg`` and most ``--dp`` replicas (a few racks; bounds the work).
MAX_INSTANCES = 64

#: Load-balance methods of ``--load-balance-method`` (SGLang's names).
LOAD_BALANCE_METHODS = ("round_robin", "total_requests")

_XPYD = re.compile(r"([0-9]{1,3})P([0-9]{1,3})D", re.IGNORECASE)


def parse_xpyd(text: str) -> tuple[int, int]:
    """``"2P6D"`` -> ``(2, 6)``: prefill and decode instances (case-insensitive). :class:`InputError`
    unless it is ``XPYD`` with 1 to :data:`MAX_INSTANCES` each."""
    m = _XPYD.fullmatch(str(text).strip())
    if not m:
        raise InputError(
            "{flag.disagg} takes XPYD, prefill and decode instances, e.g. 1P1D or 2P6D; got {text}",
            param="disagg",
            values={"text": short_repr(text)},
        )
    x, y = int(m.group(1)), int(m.group(2))
    for side, n in (("prefill", x), ("decode", y)):
        if not 1 <= n <= MAX_INSTANCES:
            raise InputError(
                "{flag.disagg} {text}: {side} instances must be 1 to {max_instances}, got {n}",
                param="disagg",
                values={"text": text, "side": side, "max_instances": MAX_INSTANCES, "n": n},
            )
    return x, y


def check_dp_value(dp: object) -> int:
    """``dp`` as an int from 1 to :data:`MAX_INSTANCES`; :class:`InputError` otherwise."""
    if isinstance(dp, bool) or not isinstance(dp, int) or not 1 <= dp <= MAX_INSTANCES:
        raise InputError(
            "{flag.dp} must be a number of replicas from 1 to {max_instances}, got {dp!r}",
            param="dp",
            values={"max_instances": MAX_INSTANCES, "dp": dp},
        )
    return dp


def check_load_balance_method(method: str) -> str:
    """``method`` lower-cased (``-`` read as ``_``) if it is one of :data:`LOAD_BALANCE_METHODS`."""
    name = str(method).strip().lower().replace("-", "_")
    if name not in LOAD_BALANCE_METHODS:
        raise InputError(
            "{flag.load_balance_method}: unknown {method}; use {methods} (SGLang's names: round robin, "
            "or the replica with the fewest outstanding requests)",
            param="load_balance_method",
            values={"method": short_repr(method), "methods": " or ".join(LOAD_BALANCE_METHODS)},
        )
    return name


@dataclass(frozen=True)
class Layout:
    """How a policy uses its GPUs: ``dp`` replicas (behind a router) of a server of ``tp`` GPUs, or, with
    ``xpyd``, PD disaggregation's X prefill and Y decode instances of ``tp`` GPUs each. Data; its text
    (``"1 GPU"``, ``"TP 2"``, ``"DP 4 x TP 2"``, ``"1P1D x TP 1"``) is
    :func:`pdmux_cli.messages.layout_text`'s.
    """

    tp: int = 1
    dp: int = 1
    xpyd: tuple[int, int] | None = None

    @property
    def gpus(self) -> int:
        """GPUs the layout takes: ``(X + Y) x tp`` or ``dp x tp``."""
        return (sum(self.xpyd) if self.xpyd is not None else self.dp) * self.tp

    def __str__(self) -> str:
        from ..messages import layout_text  # lazy: the words live in the rendering module

        return layout_text(self)


@dataclass(frozen=True)
class KvLink:
    """The link a request's KV cache crosses from its prefill instance to its decode instance.

    ``kind``: ``"nvlink"``, ``"pcie"`` or ``"rdma"``. ``bytes_per_s``: bandwidth per GPU and direction
    (each rank of a TP group sends its shard over its own link). ``latency_s``: per transfer.
    ``origin``: where the figures come from, as data: a :class:`~pdmux_cli.util.errors.Finding`
    (``disagg.kv_link_source``) for a link :func:`kv_link` built, or text; :attr:`source` is its line.
    """

    kind: str
    bytes_per_s: float
    latency_s: float
    origin: Finding | str

    @property
    def source(self) -> str:
        """Where the figures come from, one line (printed with the results; worded by
        :mod:`pdmux_cli.messages`)."""
        return str(self.origin)

    def transfer_s(self, rank_bytes: float) -> float:
        """Seconds to move ``rank_bytes`` (one rank's share of a request's KV cache, bytes)."""
        return self.latency_s + rank_bytes / self.bytes_per_s

    @property
    def text(self) -> str:
        """``"NVLink 450 GB/s per GPU, 0.6 us"``."""
        name = {"nvlink": "NVLink", "pcie": "PCIe", "rdma": "RDMA"}.get(self.kind, self.kind)
        return f"{name} {self.bytes_per_s / 1e9:g} GB/s per GPU, {self.latency_s * 1e6:.3g} us"


def check_kv_link_figure(param: str, value: float | None) -> None:
    """:class:`InputError` about ``param`` (``"kv_link_gb_s"``: GB/s per GPU and direction within
    :data:`KV_LINK_GB_S_RANGE`, above 0; ``"kv_link_latency_us"``: us within :data:`KV_LINK_LATENCY_US_RANGE`)
    unless ``value`` is ``None`` or a finite number in its range."""
    (lo, hi), unit = ((KV_LINK_GB_S_RANGE, "GB/s per GPU") if param == "kv_link_gb_s"
                      else (KV_LINK_LATENCY_US_RANGE, "us"))
    if value is not None and not (
        isinstance(value, (int, float))
        and math.isfinite(value)
        and lo <= value <= hi
        and (value > 0 or param == "kv_link_latency_us")
    ):
        bounds = f"from {lo:g}" + (f" to {hi:g}" if math.isfinite(hi) else "")
        raise InputError(
            "{param_flag} must be a finite number {bounds} {unit}, got {value}",
            param=param,
            values={"bounds": bounds, "unit": unit, "value": value},
        )


def kv_link(gpu, gpus: int, kind: str = "auto", gb_per_s: float | None = None,
            latency_us: float | None = None) -> KvLink:
    """The KV link of a deployment of ``gpus`` GPUs of profile ``gpu``
    (:class:`pdmux_cli.catalog.hardware.Gpu`).

    ``kind``: ``auto`` (the profile's interconnect within a node of :data:`GPUS_PER_NODE`, RDMA
    across nodes), ``nvlink`` or ``pcie`` (the profile's figures; refused when the profile's link is
    the other kind, unless both overrides are given), or ``rdma`` (:data:`RDMA_BYTES_PER_S`,
    :data:`RDMA_LATENCY_S`). ``gb_per_s`` (GB/s per GPU and direction, :data:`KV_LINK_GB_S_RANGE`) and
    ``latency_us`` (:data:`KV_LINK_LATENCY_US_RANGE`) override the figures. Raises :class:`InputError`
    for an unknown kind, an override out of range, or a profile without the figures needed. The link's
    ``source`` is ``disagg.kv_link_source``: ``bandwidth`` and ``latency`` each ``"rdma"`` (the constants
    above), ``"profile"`` (``gpu``'s figures), ``"given"`` (the override) or ``"none"``; ``link``; ``given``:
    whether ``kind`` named the link (else ``gpus`` against ``per_node`` chose it).
    """
    name = str(kind).strip().lower()
    if name not in KV_LINKS:
        raise InputError("{flag.kv_link}: unknown {kind}; use {kinds}", param="kv_link",
                         values={"kind": short_repr(kind), "kinds": ", ".join(KV_LINKS)})
    check_kv_link_figure("kv_link_gb_s", gb_per_s)
    check_kv_link_figure("kv_link_latency_us", latency_us)
    given = name != "auto"
    if not given:
        name = "rdma" if gpus > GPUS_PER_NODE else (gpu.interconnect or "rdma")
    both = gb_per_s is not None and latency_us is not None
    if name == "rdma":
        bw, lat = RDMA_BYTES_PER_S, RDMA_LATENCY_S
        bw_source = lat_source = "rdma"
    elif gpu.interconnect == name and gpu.interconnect_bytes_per_s and gpu.interconnect_latency_s:
        bw, lat = float(gpu.interconnect_bytes_per_s), float(gpu.interconnect_latency_s)
        bw_source = lat_source = "profile"
    elif both:
        bw = lat = 0.0
        bw_source = lat_source = "none"
    else:
        have = gpu.interconnect or "no interconnect figures"
        raise InputError(
            "{flag.kv_link} {name}: the {gpu} profile has {have}; use {flag.kv_link} rdma, or give "
            "both {flag.kv_link_gb_s} and {flag.kv_link_latency_us}",
            param="kv_link",
            values={"name": name, "gpu": gpu.name, "have": have},
        )
    if gb_per_s is not None:
        bw, bw_source = gb_per_s * 1e9, "given"
    if latency_us is not None:
        lat, lat_source = latency_us * 1e-6, "given"
    source = Finding("disagg.kv_link_source", {
        "bandwidth": bw_source, "latency": lat_source, "gpu": gpu.name, "link": name, "given": given,
        "gpus": gpus, "per_node": GPUS_PER_NODE})
    return KvLink(name, bw, lat, source)
