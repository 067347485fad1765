"""How many servers a run uses: one server, ``--dp`` replicas behind a router, PD disaggregation.

:func:`plan_deployment` turns the options simulate, capacity and tune share into a :class:`Cluster`:
the replicas of the colocated policies (pdmux, chunked, ...), the router's load-balance method, and the
disaggregation policy (:class:`pdmux_cli.simulate.cluster.DisaggPolicy`) with its KV link. With
``--disagg XPYD`` and no ``--dp``, the colocated policies run as as many replicas as put them on the
same GPUs (``(X + Y) x disagg_tp / tp``; the nearest below when it does not divide, with a note).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ..util.errors import Finding, InputError
from .fields import DEPLOYMENT, Checked, option
from .server import ServerOptions, build_setup


@dataclass(frozen=True, kw_only=True)
class DeploymentOptions(Checked):
    """The multi-server options (the CLI's names and defaults).

    ``dp``: data-parallel replicas of the server behind a router (``None``: 1, or with ``disagg`` as many
    as give every policy the same GPUs). ``load_balance_method``: SGLang's ``round_robin`` (``None``: it)
    or ``total_requests``. ``disagg``: ``"XPYD"`` prefill and decode instances (``"1P1D"``), each
    ``disagg_tp`` GPUs (``None``: the server's TP). ``kv_link``: ``auto``, ``nvlink``, ``pcie`` or ``rdma``;
    ``kv_link_gb_s`` (GB/s per GPU and direction) and ``kv_link_latency_us`` (us per transfer) override it.
    """

    dp: int | None = option(None, group=DEPLOYMENT, help=(
        "Data-parallel replicas of the server behind a router, each {flag.tp} GPUs (SGLang's --dp-size, or "
        "servers behind sgl-router). Default 1, or with {flag.disagg} as many as put every policy on its "
        "GPUs ((X+Y) x {flag.disagg_tp} / {flag.tp})."), wordings={"tune": (
            "Data-parallel replicas of the server behind a router, each {flag.tp} GPUs (SGLang's --dp-size, "
            "or servers behind sgl-router); every config runs on them. Default 1.")})
    load_balance_method: str | None = option(None, group=DEPLOYMENT, help=(
        "How the router picks a replica (and, with {flag.disagg}, an instance on each side): round_robin "
        "(SGLang's default) or total_requests (the fewest outstanding requests), SGLang's names."),
        wordings={"tune": (
            "How the router picks one of the {flag.dp} replicas: round_robin (SGLang's default) or "
            "total_requests (the fewest outstanding requests), SGLang's names.")})
    disagg: str | None = option(None, group=DEPLOYMENT, help=(
        "Add PD disaggregation: XPYD prefill and decode instances (1P1D, 2P6D), each {flag.tp} GPUs; "
        "prefill-first on the prefill instances, the KV cache moved over {flag.kv_link}, decode on the "
        "decode instances."), wordings={"estimate": (
            "Also a row of PD disaggregation with X prefill and Y decode instances of {flag.tp} GPUs each, "
            "e.g. 1P1D or 2P6D: TTFT = whole-GPU prefill + the KV transfer, decode undisturbed."), "tune": (
            "Not taken: tune searches pdmux knobs; compare PD disaggregation with pdmux simulate or pdmux "
            "capacity {flag.disagg} XPYD.")})
    disagg_tp: int | None = option(None, group=DEPLOYMENT, help=(
        "{flag.disagg}: each instance's TP (default {flag.tp}), e.g. {flag.tp} 2 {flag.dp} 1 {flag.disagg} "
        "1P1D {flag.disagg_tp} 1 puts every policy on 2 GPUs."), wordings={
        "estimate": "{flag.disagg}: each instance's TP (default {flag.tp})."})
    kv_link: str = option("auto", group=DEPLOYMENT, help=(
        "{flag.disagg}: the link each GPU's share of a KV cache crosses: auto (the GPU's NVLink or PCIe "
        "when all GPUs fit one node of 8, else RDMA 400 Gb/s per GPU), nvlink, pcie or rdma."), wordings={
        "estimate": ("{flag.disagg}'s KV link: auto (the GPU's NVLink/PCIe within a node of 8 GPUs, RDMA 400 "
                     "Gb/s per GPU across nodes), nvlink, pcie or rdma.")})
    kv_link_gb_s: float | None = option(None, group=DEPLOYMENT, help=(
        "{flag.disagg}: the KV link's bandwidth, GB/s per GPU and direction (overrides {flag.kv_link}'s)."),
        wordings={"estimate": (
            "{flag.disagg}'s KV link bandwidth per GPU and direction, GB/s (overrides {flag.kv_link}'s).")})
    kv_link_latency_us: float | None = option(None, group=DEPLOYMENT, help=(
        "{flag.disagg}: the KV link's latency per transfer, us (overrides {flag.kv_link}'s)."), wordings={
        "estimate": "{flag.disagg}'s KV link latency per transfer, us (overrides {flag.kv_link}'s)."})


@dataclass(frozen=True)
class Cluster:
    """How many servers a run uses: ``dp`` replicas of the colocated policies behind ``method``, and the
    disaggregation policy (``None`` without ``--disagg``); ``notes`` for the user; ``gpus``: the GPUs of
    the policies (the colocated ones' when they run)."""

    dp: int = 1
    method: str = "round_robin"
    disagg: Any = None
    notes: tuple[Finding | str, ...] = ()
    gpus: int = 1

    @property
    def router(self) -> str | None:
        """The load-balance method, ``None`` when nothing is routed (one server; 1P1D alone)."""
        several = self.disagg is not None and (self.disagg.prefill > 1 or self.disagg.decode > 1)
        return self.method if self.dp > 1 or several else None

    def disagg_dict(self, setup: Any) -> dict[str, Any]:
        """The JSON's ``disagg``, ``disagg_tp`` and ``kv_link`` (``None`` each without ``--disagg``)."""
        d = self.disagg
        if d is None:
            return {"disagg": None, "disagg_tp": None, "kv_link": None}
        return {"disagg": d.label.split()[-1], "disagg_tp": d.setup_for(setup).tp,
                "kv_link": link_dict(d.link)}


def link_dict(link: Any) -> dict[str, Any]:
    """A :class:`pdmux_cli.multigpu.disaggregation.KvLink` for JSON (bytes/s, seconds)."""
    return {"kind": link.kind, "bytes_per_s": link.bytes_per_s, "latency_s": link.latency_s,
            "source": link.source}


def _without_disagg(setup: Any, d: DeploymentOptions, method: str, given_method: bool) -> Cluster:
    link_options = (d.kv_link.strip().lower() != "auto" or d.kv_link_gb_s is not None
                    or d.kv_link_latency_us is not None)
    if link_options or d.disagg_tp is not None:
        raise InputError(
            "{flag.kv_link}, {flag.kv_link_gb_s}, {flag.kv_link_latency_us} and {flag.disagg_tp} apply "
            "to {flag.disagg} XPYD",
            values={},
        )
    dp = d.dp if d.dp is not None else 1
    lone = given_method and dp == 1
    notes = (Finding("deploy.one_server", param="load_balance_method"),) if lone else ()
    return Cluster(dp, method, None, notes, dp * setup.tp)


def _instance_tp(setup: Any, disagg_tp: int | None,
                 setup_with_tp: Callable[[int], Any] | None) -> tuple[int, Any]:
    """Each disaggregation instance's TP and its server (``None``: ``setup`` itself)."""
    from ..multigpu.tensor_parallel import check_tp_value, for_disagg_tp

    if disagg_tp is None:
        return setup.tp, None
    try:
        own = check_tp_value(disagg_tp)
        if own == setup.tp:
            return own, None
        if setup_with_tp is None:
            raise InputError(
                "{flag.disagg_tp} other than {flag.tp} is not available here",
                values={},
            )
        return own, setup_with_tp(own)
    except InputError as exc:
        raise for_disagg_tp(exc) from None


def _colocated_dp(dp: int | None, tp: int, gpus: int, x: int, y: int) -> int:
    """The colocated policies' replicas beside ``x``P``y``D on ``gpus`` GPUs: ``dp``, or as many as fit."""
    from ..multigpu.disaggregation import MAX_INSTANCES

    if dp is not None:
        return dp
    dp = max(1, gpus // tp)
    if dp > MAX_INSTANCES:
        raise InputError(
            "{flag.disagg} {x}P{y}D: the other policies would need {dp} replicas of TP {tp} to be on the "
            "same {gpus} GPUs, more than {MAX_INSTANCES}; give {flag.dp} N (or a larger {flag.tp}), or "
            "{flag.policies} disagg alone",
            values={"x": x, "y": y, "dp": dp, "tp": tp, "gpus": gpus, "MAX_INSTANCES": MAX_INSTANCES},
        )
    return dp


def _equal_gpus_note(x: int, y: int, own: int, dp: int, tp: int, gpus: int, method: str) -> Finding:
    """Whether disaggregation's ``x`` + ``y`` instances of TP ``own`` (``gpus`` GPUs) and the other policies'
    ``dp`` replicas of TP ``tp`` are on as many GPUs (``deploy.equal_gpus``, ``deploy.unequal_gpus``)."""
    values = {"x": x, "y": y, "instance_tp": own, "dp": dp, "tp": tp, "gpus": gpus, "method": method}
    return Finding("deploy.equal_gpus" if dp * tp == gpus else "deploy.unequal_gpus", values)


def plan_deployment(setup: Any, gpu: str | None, d: DeploymentOptions, *, allow_disagg: bool = True,
                    setup_with_tp: Callable[[int], Any] | None = None, colocated: bool = True) -> Cluster:
    """:class:`Cluster` of ``d`` for the server ``setup`` on ``gpu`` (the KV link's GPU; ``None``: h100).

    ``allow_disagg``: false for tune (``--dp`` only). ``setup_with_tp(tp)``: the server of another TP,
    for ``--disagg-tp``. ``colocated``: whether policies other than disagg run (the notes speak of them).
    Raises :class:`InputError` for bad values (``--dp`` 0, an unknown method, ``--disagg 0P1D``, link
    options without ``--disagg``, more replicas than SGLang's router takes).
    """
    from ..multigpu.disaggregation import check_dp_value, check_load_balance_method, parse_xpyd
    from ..multigpu.disaggregation import kv_link as make_link
    from ..simulate.cluster import DisaggPolicy

    given_method = d.load_balance_method is not None
    method = check_load_balance_method(d.load_balance_method if given_method else "round_robin")
    if d.dp is not None:
        check_dp_value(d.dp)
    if d.disagg is None:
        return _without_disagg(setup, d, method, given_method)
    if not allow_disagg:
        raise InputError(
            "{flag.disagg} is compared by pdmux simulate and pdmux capacity; tune searches pdmux knobs",
            values={},
        )
    x, y = parse_xpyd(d.disagg)
    own, instance_setup = _instance_tp(setup, d.disagg_tp, setup_with_tp)
    gpus = (x + y) * own
    dp = d.dp
    notes = []
    if given_method and x == 1 and y == 1 and (not colocated or dp == 1):
        notes.append(Finding("deploy.nothing_to_route", param="load_balance_method"))
    if not colocated:
        dp = dp if dp is not None else 1
        notes.append(Finding("deploy.disagg_alone", {"x": x, "y": y, "gpus": gpus, "instance_tp": own}))
    else:
        dp = _colocated_dp(dp, setup.tp, gpus, x, y)
        notes.append(_equal_gpus_note(x, y, own, dp, setup.tp, gpus, method))
    from ..catalog.hardware import find_gpu_or_file

    link = make_link(find_gpu_or_file(gpu or "h100"), gpus, d.kv_link, d.kv_link_gb_s, d.kv_link_latency_us)
    return Cluster(dp, method, DisaggPolicy(x, y, link, method, instance_setup), tuple(notes),
                   dp * setup.tp if colocated else gpus)


def server_and_cluster(server: ServerOptions, d: DeploymentOptions, names: list[str],
                       step_by_step: bool = False) -> tuple[Any, Cluster]:
    """The simulated server of ``server`` (the radix cache off with ``no_prefix_cache``) and the
    :class:`Cluster` of ``d`` (``names``: the policies asked for; ``--disagg-tp`` instances built with
    the same options). ``step_by_step``: every server simulated one decode step at a time
    (:attr:`pdmux_cli.simulate.engine.Setup.step_by_step`). :class:`InputError` as :func:`build_setup` and
    :func:`plan_deployment`."""
    def of_tp(n: int) -> Any:
        setup = build_setup(server, tp=n, prefix_cache=True)
        return replace(setup, step_by_step=True) if step_by_step else setup

    setup = of_tp(server.tp)
    return setup, plan_deployment(setup, server.gpu, d, setup_with_tp=of_tp,
                                  colocated=any(name != "disagg" for name in names))
