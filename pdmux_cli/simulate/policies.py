"""The simulator's typed contracts: what a policy is, what one server's run gives, where a policy runs.

- :class:`Policy`: what the runner, the capacity search and tune ask of a policy (pdmux, SGLang's
  default schedules, PD disaggregation): its label and kind (output), its checks, the servers and GPUs
  it runs on (:class:`Deployment`), and how it is simulated (:meth:`Policy.run`). The runner calls
  these methods; it never branches on the kind.
- :class:`ServerSchedule`: a :class:`Policy` one SGLang server runs (pdmux and the baselines of
  :mod:`pdmux_cli.simulate.schedulers`): its scheduler loop as a generator (:meth:`ServerSchedule.rounds`).
  One server, and ``dp`` replicas of it behind a router, are one code path
  (:func:`pdmux_cli.simulate.servers.serve`).
- :class:`ServerOutcome`: what one server's scheduler returns (end time, idle time, counters, notes,
  pdmux's stream groups, a simulated crash); :func:`pdmux_cli.simulate.servers.combine` merges the
  servers' outcomes of a deployment into one.
- :class:`Deployment`: the GPUs, servers and router of a policy (``RunResult.gpus``, ``layout``,
  ``router``; capacity's rows).

Pure types: no simulation here, and no import of the modules that simulate (they import this one).
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from ..multigpu.disaggregation import Layout

if TYPE_CHECKING:
    from .engine import Progress, RunResult, Setup, Work
    from .traces import Trace


@dataclass
class ServerOutcome:
    """What one simulated server's scheduler loop returns when its run is over (times in seconds from
    the first arrival).

    ``end_s``: time of its last event. ``idle_s``: seconds its GPU had nothing to run. ``counters``:
    prefill batches, rounds, retracted requests, prefix cache tokens... (name -> count, or ms for the
    means a disaggregation adds). ``notes``: caveats for output. ``groups``: pdmux only, its stream
    groups as ``(prefill SMs, decode SMs)``, and ``group_time_s`` the seconds spent in each (``None``
    for the other schedules). ``crashed_at_s``: when SGLang 0.5.23 would crash and the run stopped
    (``None`` if it did not); ``unfinished``: the requests it cut short (rids).
    """

    end_s: float
    idle_s: float
    counters: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    groups: list[tuple[int, int]] | None = None
    group_time_s: list[float] | None = None
    crashed_at_s: float | None = None
    unfinished: set[int] = field(default_factory=set)

    @property
    def crashed(self) -> bool:
        """Whether a simulated SGLang crash stopped this server."""
        return self.crashed_at_s is not None


#: A server's scheduler loop: yields the start time (s) of a round it pauses before (a router's
#: horizon; ``math.inf`` when idle behind an open router), returns its :class:`ServerOutcome`.
Rounds = Generator[float, None, ServerOutcome]

@dataclass(frozen=True)
class Deployment:
    """Where a policy runs: ``dp`` replicas of a server of ``tp`` GPUs, or with ``xpyd`` a
    disaggregation's X prefill and Y decode instances of ``tp`` GPUs each. ``method``: the load-balance
    method of its router (SGLang's ``--load-balance-method``). ``routed``: whether a router chooses among
    servers (more than one replica, or more than one instance on a side of a disaggregation)."""

    tp: int = 1
    dp: int = 1
    xpyd: tuple[int, int] | None = None
    method: str = "round_robin"
    routed: bool = False

    @property
    def servers(self) -> int:
        """SGLang servers: the replicas, or the X + Y instances."""
        return sum(self.xpyd) if self.xpyd is not None else self.dp

    @property
    def gpus(self) -> int:
        """GPUs over all its servers."""
        return self.servers * self.tp

    @property
    def layout(self) -> Layout:
        """How, as data (:class:`~pdmux_cli.multigpu.disaggregation.Layout`; printed by
        :func:`pdmux_cli.messages.layout_text`: ``"1 GPU"``, ``"TP 2"``, ``"DP 4 x TP 2"``,
        ``"1P1D x TP 1"``)."""
        return Layout(self.tp, self.dp, self.xpyd)

    @property
    def router(self) -> str:
        """``RunResult.router``: the load-balance method between its servers, ``""`` where no router
        chooses."""
        return self.method if self.routed else ""


class Policy(Protocol):
    """What the simulator asks of a policy (SGLang 0.5.23's schedules, pdmux, PD disaggregation).

    ``kind``: ``"pdmux"``, ``"chunked"``, ``"mixed-chunk"``, ``"prefill-first"`` or ``"disagg"``, as
    the output names it (``RunResult.kind``, the JSON's ``kind``). ``chunk_tokens``: SGLang's
    ``--chunked-prefill-size`` of its servers (tokens; -1: chunking off), which sizes the KV pool
    (:meth:`pdmux_cli.simulate.engine.Setup.kv_pool`). ``prefill_apart``: a request's first token comes
    from another server than its decode steps (disaggregation): a streamed run keeps each first token.
    ``multiplexes``: it is SGLang's PD multiplexing (``--enable-pdmux``), which capacity's verdict weighs
    against the best of the others.
    """

    kind: ClassVar[str]
    prefill_apart: ClassVar[bool]
    multiplexes: ClassVar[bool]
    chunk_tokens: int

    @property
    def label(self) -> str:
        """The policy as printed: ``"pdmux"``, ``"chunked 8192"``, ``"disagg 1P1D"``..."""
        ...

    def check(self) -> None:
        """Raise :class:`pdmux_cli.util.errors.InputError` for settings SGLang refuses (a chunk size
        below 1 token, pdmux knobs below 1)."""
        ...

    def servers(self, dp: int = 1) -> int:
        """SGLang servers it runs on with ``dp`` replicas asked for (a disaggregation has its own)."""
        ...

    def launch_args(self, config_path: str | None = None) -> list[str]:
        """SGLang 0.5.23's server arguments that run this schedule on one server, one argument each
        (unquoted; ``--tp-size`` and ``--dp-size`` not included): pdmux's with the YAML at
        ``config_path`` (``None``: SGLang's default config), the chunk size of the others; empty for a
        disaggregation, whose instances are launched apart (:attr:`Deployment.xpyd` names them)."""
        ...

    def deployment(self, setup: Setup, dp: int = 1, method: str = "round_robin") -> Deployment:
        """Its GPUs, servers and router on servers of ``setup`` (``dp`` replicas behind ``method``)."""
        ...

    def routing_known(self, setup: Setup, dp: int, method: str) -> bool:
        """Whether its ``dp`` replicas can be simulated apart with the same result as behind the router
        (:func:`pdmux_cli.simulate.servers.replicas_apart`)."""
        ...

    def run(self, trace: Trace, setup: Setup, *, dp: int = 1, method: str = "round_robin",
            progress: Progress | None = None, fold: Any = None,
            initial_decode: Sequence[tuple[int, int]] = (), max_concurrency: int = 0) -> RunResult:
        """Simulate it over ``trace`` (:func:`pdmux_cli.simulate.runner.simulate`, which checks the
        arguments first)."""
        ...


class ServerSchedule(Policy, Protocol):
    """A :class:`Policy` that one SGLang server runs: its scheduler loop over a server's state."""

    def deployment(self, setup: Setup, dp: int = 1, method: str = "round_robin",
                   routed: bool | None = None) -> Deployment:
        """``dp`` replicas of ``setup``; ``routed``: behind a router (default: more than one replica)."""
        ...

    def rounds(self, work: Work, setup: Setup, progress: Progress | None = None) -> Rounds:
        """Its scheduler loop over ``work`` (:mod:`pdmux_cli.simulate.schedulers`) as a generator."""
        ...
