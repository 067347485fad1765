"""The cost model's knobs as one value: :class:`CostModelOptions`.

One frozen dataclass travels from a command's request (:mod:`pdmux_cli.workflows`) through
:class:`pdmux_cli.planning.estimate.Scenario` and :func:`pdmux_cli.simulate.engine.make_setup` to
:func:`pdmux_cli.costmodel.build_step_model`, which alone reads its fields (issue 32, item 2): a new knob is a
field here, read where the step model is built. Pure: no I/O, no checks (the ranges are checked where the
terms are applied, :func:`pdmux_cli.costmodel.serving_terms`, and on the requests,
:mod:`pdmux_cli.workflows.fields`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

#: The metadata key naming the one cost model a knob belongs to (``"roofline"`` or ``"chapter"``): the other
#: model refuses it when given (:meth:`CostModelOptions.given_outside`).
ONLY = "only"


def _only(model: str) -> Any:
    """A knob of ``model``'s alone, ``None`` by default (``None``: the profile's or the model's default)."""
    return field(default=None, metadata={ONLY: model})


@dataclass(frozen=True)
class CostModelOptions:
    """The cost model's knobs, each ``None`` for the shipped default (the CLI's flag: ``--`` and the name
    with dashes, :func:`pdmux_cli.messages.flag`).

    - ``cost_model``: ``"roofline"`` (default: operators with efficiencies fitted to measurements,
      ``profiles/efficiency/``) or ``"chapter"`` (the PD-multiplexing chapter's analytic model);
      :data:`pdmux_cli.costmodel.COST_MODELS`.
    - ``s_sat``: SMs reaching 95% of HBM bandwidth (roofline default: the bandwidth family's knee,
      ``common.yaml``; chapter default: half the SMs).
    - ``flops_dtype``: the dense math's dtype, ``"bf16"``, ``"fp16"`` or ``"fp8"`` (default: fp8 for an fp8
      checkpoint on a GPU with fp8 tensor cores, else bf16; :func:`pdmux_cli.costmodel.pick_flops_dtype`).
    - ``bandwidth_efficiency``, ``mfu``: chapter only, fractions (0, 1]: the share of datasheet bandwidth
      decode reaches and of dense FLOP/s prefill reaches (defaults 0.85 and 0.5, the chapter's:
      :data:`pdmux_cli.costmodel.CHAPTER_BANDWIDTH_EFFICIENCY`, :data:`~pdmux_cli.costmodel.CHAPTER_MFU`).
    - Roofline only, ms (default: ``profiles/efficiency/serving.yaml``'s fit to public SGLang serving runs,
      ``common.yaml``'s measured eager launch; bounds :data:`pdmux_cli.costmodel.SERVING_OPTION_BOUNDS_MS`,
      :data:`~pdmux_cli.costmodel.EAGER_LAUNCH_BOUND_MS`):
      ``step_overhead_ms`` the engine's CPU time per step (0: kernels only); ``per_request_overhead_ms`` a
      step's time per request in its batch beyond the kernels; ``admission_delay_ms`` from arrival until the
      scheduler can admit a request; ``first_token_delay_ms`` from the step that makes a token until the
      client has it; ``admission_interval_ms`` the front end's time per request; ``eager_launch_ms`` host time
      per kernel of an eagerly launched forward, dense and MoE (SGLang PR 1401); ``eager_launch_moe_ms`` the
      MoE one alone (the serving fit's term); ``frontend_token_ms`` the front end's time per prompt token
      (0 to 1 ms; ``benchmarks/measure_frontend.py``).
    - ``moe_runner_backend``: roofline only, SGLang's ``--moe-runner-backend``: the fused MoE whose measured
      efficiency times a MoE model's routed experts, ``"triton"`` or ``"flashinfer_trtllm"`` (``None`` or
      ``"auto"``: the kernel the simulated SGLang release picks, :func:`pdmux_cli.costmodel.moe.moe_kernel`).

    The chapter model refuses the roofline's knobs and the roofline the chapter's, in this order
    (:meth:`given_outside`). What a model serves is no knob and stays a keyword of
    :func:`~pdmux_cli.costmodel.build_step_model`: bytes per weight and per KV element, TP, the calibration
    file's terms, speculative decoding.
    """

    cost_model: str = "roofline"
    s_sat: float | None = None
    flops_dtype: str | None = None
    bandwidth_efficiency: float | None = _only("chapter")
    mfu: float | None = _only("chapter")
    step_overhead_ms: float | None = _only("roofline")
    per_request_overhead_ms: float | None = _only("roofline")
    admission_delay_ms: float | None = _only("roofline")
    first_token_delay_ms: float | None = _only("roofline")
    admission_interval_ms: float | None = _only("roofline")
    eager_launch_ms: float | None = _only("roofline")
    eager_launch_moe_ms: float | None = _only("roofline")
    frontend_token_ms: float | None = _only("roofline")
    moe_runner_backend: str | None = _only("roofline")

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The knobs' names, in declaration order (each a parameter: an API keyword, a request field)."""
        return tuple(f.name for f in fields(cls))

    @classmethod
    def of(cls, source: Any, **overrides: Any) -> CostModelOptions:
        """The options ``source`` holds (a request or option group: attributes named as the fields; those it
        lacks keep their defaults), with ``overrides`` (field names) on top."""
        values = {name: getattr(source, name) for name in cls.names() if hasattr(source, name)}
        return cls(**{**values, **overrides})

    def with_knobs(self, knobs: dict[str, Any], caller: str) -> CostModelOptions:
        """These options with ``knobs`` (field names, as keywords of ``caller``: tests and fits pass knobs
        loose) on top. Raises :class:`TypeError`, as Python does, for a name that is no field."""
        if not knobs:
            return self
        unknown = sorted(set(knobs) - set(self.names()))
        if unknown:
            raise TypeError(f"{caller}() got an unexpected keyword argument {unknown[0]!r}")
        return replace(self, **knobs)

    def given_outside(self, model: str) -> list[str]:
        """The knobs given (not ``None``) that belong to another cost model than ``model``, in order."""
        return [f.name for f in fields(self)
                if f.metadata.get(ONLY) not in (None, model) and getattr(self, f.name) is not None]
