"""Where the simulations of simulate, capacity and tune run: :class:`RunOptions`, declared once.

The options of the shared group :data:`~pdmux_cli.workflows.fields.RUN` (the CLI builds them from these
declarations: :func:`pdmux_cli.cli.options.with_group`). Pure: dataclasses only.
"""

from __future__ import annotations

from dataclasses import dataclass

from .fields import RUN, Checked, option


@dataclass(frozen=True, kw_only=True)
class RunOptions(Checked):
    """Where a command's simulations run (the CLI's names and defaults).

    ``workers``: processes (``None``: the cores available, or up to twice as many for a few tasks:
    :func:`pdmux_cli.simulate.executors.local_workers`), or with ``executor`` ``"ray"`` tasks at a time
    (``None``: the cluster's CPUs). ``executor``: ``"local"`` or ``"ray"``; ``ray_address``: the Ray cluster
    (``None``: a local Ray instance for the run). ``max_steps``: the decode steps one simulated server may
    take (``None``: :func:`pdmux_cli.simulate.engine.step_budget`'s default; 0: no limit).
    """

    workers: int | None = option(None, group=RUN, help=(
        "Processes (default: the cores available, or every task at once up to twice the cores); with "
        "{flag.executor} ray, tasks at a time (default: the cluster's CPUs)."), wordings={"simulate": (
            "Processes, one policy (or, with {flag.dp} and round_robin, one replica) each (default: the "
            "cores available, or every policy at once up to twice the cores; 1 runs the policies here, one "
            "after another). One policy of SGLang's default loop on a long trace (50,000 requests a core) "
            "is cut in time over them instead, the same output. With {flag.executor} ray: tasks at a time "
            "(default: the cluster's CPUs).")})
    executor: str = option("local", group=RUN, help=(
        "Where the simulations run: local (this machine's cores, {flag.workers} processes) or ray (a Ray "
        "cluster: {flag.ray_address}, or a local Ray instance started for the run; pip install "
        "'pdmux\\[ray]'). The results are the same."))
    ray_address: str | None = option(None, group=RUN, help=(
        "{flag.executor} ray: the cluster to run on: auto (the one 'ray start' began on this machine), "
        "host:port, or ray://host:10001 (Ray Client). Default: a local Ray instance for this run."))
    max_steps: int | None = option(None, group=RUN, help=(
        "The most decode steps one simulated server may take before the run stops (a guard against runaway "
        "runs; shown in the progress bar). Default: 6,000,000 or 2,000 per request of the trace, whichever "
        "is more; 0: no limit."))
