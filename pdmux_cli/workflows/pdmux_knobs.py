"""SGLang's pdmux knobs and the config they override: :class:`PdmuxKnobs`, declared once.

``--config``, ``--divisions``, ``--sm-group-num``, ``--decode-bs-divisor``, ``--token-budget``: simulate,
splits, estimate, gen-config, check-config and bench's ``--model`` replay declare theirs from here
(:func:`.fields.declared_as`; gen-config with SGLang's defaults), each command's wording on the declaration.
Pure: dataclasses only (a module of its own: :mod:`.pdmux_yaml` is imported by the range checks of
:mod:`.fields`, so it cannot import them back).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .fields import option


@dataclass(frozen=True, kw_only=True)
class PdmuxKnobs:
    """The pdmux config a command reads and SGLang's knobs over it (:class:`.pdmux_yaml.PdmuxYaml`'s fields,
    as options): ``config`` (a pdmux YAML), ``divisions`` (manual levels ``"PREFILL:DECODE:THRESHOLD,..."``),
    ``sm_group_num``, ``decode_bs_divisor``, ``token_budget`` (``split_forward_token_budget``, tokens); the
    help as splits, estimate, gen-config, check-config and bench word it, by command. bench's
    ``sm_group_num`` is its own (the GPU run's levels, at least 3)."""

    config: Path | None = option(None, help="pdmux YAML to simulate (default: SGLang's defaults).", wordings={
        "splits": "An existing pdmux YAML: its levels, thresholds and knobs are used.",
        "estimate": "A pdmux YAML whose levels and knobs to use."})
    divisions: str | None = option(None, help="Manual levels PREFILL:DECODE:THRESHOLD,...", wordings={
        "gen-config": "Manual levels PREFILL:DECODE:THRESHOLD,... e.g. 112:20:0,104:28:5"})
    sm_group_num: int | None = option(None, help="Override sm_group_num.", wordings={
        "splits": "Stream groups incl. the two whole-GPU ones (SGLang default 8).",
        "estimate": "SGLang's sm_group_num (default 8).",
        "gen-config": "Stream groups incl. the two whole-GPU ones.",
        "check-config": "The {flag.sm_group_num} you launch with (must equal the YAML's)."})
    decode_bs_divisor: int | None = option(None, help="Override decode_bs_divisor.", wordings={
        "splits": "Divisor of the linear level rule (default 36).",
        "estimate": "SGLang's decode_bs_divisor (default 36).",
        "gen-config": "Divisor of the linear level rule.",
        "bench": "{flag.model}: SGLang's decode_bs_divisor (default 36)."})
    token_budget: int | None = option(None, help="Override split_forward_token_budget.", wordings={
        "splits": "split_forward_token_budget (default 65536).",
        "estimate": "SGLang's split_forward_token_budget (default 65536).",
        "gen-config": "split_forward_token_budget (tokens per round).",
        "bench": "{flag.model}: SGLang's split_forward_token_budget (default 65536)."})
