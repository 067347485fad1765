"""How long a pdmux round lasts: the decode step on its SMs beside the prefill, plus the CPU's work.

One function the simulator (:func:`pdmux_cli.simulate.schedulers.pdmux_rounds`) and the SLO levels
(:mod:`pdmux_cli.planning.slo_levels`, ``pdmux gen-config --slo-itl``) both time rounds with, so the ITL a
YAML is sized for is the one the simulator gives. Pure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from . import StepModel


def pdmux_round_s(step_model: StepModel, decode_sms: int, n: int, sum_context: float, sum_window: float = 0.0,
                  corun_sms: int = 0, cuda_graph: bool = True) -> float:
    """Seconds one pdmux round with a decode step lasts: what a decoding request waits between two tokens.

    ``step_model``: a :class:`pdmux_cli.costmodel.StepModel`. ``decode_sms``: the decode partition's SMs
    (all of them with no prefill in flight). ``n``: requests in the decode batch; ``sum_context``,
    ``sum_window``: their cached tokens (and ``min(context, window)``), summed. ``corun_sms``: the prefill
    partition's SMs while its stream is still busy (the decode step's co-run interference), else 0.
    ``cuda_graph``: ``n`` is within SGLang's largest decode CUDA graph.

    SGLang 0.5.23 ``srt/multiplex/multiplexing_mixin.py`` ``event_loop_pdmux`` waits for the decode stream
    only, then processes the results on the CPU with the overlap scheduler off (SGLang asserts it): one
    decode step on ``decode_sms`` plus the CPU's work of the step (``StepModel.decode_cpu_s``) and its time
    per request beyond the kernels (``StepModel.request_s``). The simulator
    (:func:`pdmux_cli.simulate.schedulers.pdmux_rounds`) and ``pdmux gen-config --slo-itl``
    (:mod:`pdmux_cli.planning.slo_levels`) both time rounds with this function, so the ITL a YAML is sized
    for is the one the simulator gives. The simulator's event-speed runs of quiet rounds
    (:func:`pdmux_cli.simulate.schedulers._pdmux_decode_run`, ``_pdmux_split_run``) compute the same sum in
    the same order (``decode_s`` from the step model's ``decode_line``, then the CPU's, then the per-request
    seconds), equal to the bit.
    """
    return (step_model.decode_s(decode_sms, n, sum_context, sum_window, corun_sms, cuda_graph)
            + step_model.decode_cpu_s(n) + step_model.request_s(n))
