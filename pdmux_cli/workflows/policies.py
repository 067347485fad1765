"""The policies a run compares, built once: pdmux (one config or several), chunked prefill, mixed chunks,
prefill-first, PD disaggregation.

:func:`build_policies` is the one factory simulate and capacity use: the policy names (``--policies``)
in, the scheduler objects of :mod:`pdmux_cli.simulate.schedulers` (and the deployment's
:class:`~pdmux_cli.simulate.cluster.DisaggPolicy`) out, with each pdmux config resolved by
:func:`pdmux_cli.workflows.pdmux_yaml.resolve_config` and checked against the ``--sglang`` revision
(:func:`pdmux_cli.sglang.revision_rules.plan_check`; its layer cap,
:func:`~pdmux_cli.sglang.revision_rules.layer_cap`; its group-1 fallback, ``Revision.threshold_fallback``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..util.errors import InputError
from .pdmux_yaml import PdmuxYaml, resolve_config
from .values import as_text_list, parse_int_list

#: Every policy name ``--policies`` takes.
POLICIES = ("pdmux", "chunked", "mixed-chunk", "prefill-first", "disagg")
#: The policies compared by default: pdmux against SGLang's default scheduling and mixed chunks.
DEFAULT_POLICIES = "pdmux,chunked,mixed-chunk"
#: Largest chunk size simulated, tokens (2^20): a bigger chunk is a whole batch of long prompts at once,
#: which --policies prefill-first already runs (and SGLang sizes memory buckets by it).
MAX_CHUNK_TOKENS = 1 << 20
#: Largest --prefill-decode-interval: past it prefill would wait behind more decode rounds than any
#: request has output tokens (SGLang's max_new_tokens are far below it).
MAX_PREFILL_DECODE_INTERVAL = 100_000


def parse_chunk_sizes(text: str, param: str) -> list[int]:
    """Chunk sizes (tokens) of a comma-separated option, each 1 to :data:`MAX_CHUNK_TOKENS`;
    :class:`InputError` about ``param`` (``"chunk_sizes"``) otherwise."""
    sizes = parse_int_list(text, param)
    big = next((c for c in sizes if c > MAX_CHUNK_TOKENS), None)
    if big is not None:
        raise InputError(
            "{param_flag}: {big} tokens is past the largest chunk simulated ({MAX_CHUNK_TOKENS:,}); for "
            "whole prompts use {flag.policies} prefill-first",
            param=param, values={"big": big, "MAX_CHUNK_TOKENS": MAX_CHUNK_TOKENS},
        )
    return sizes


def chunk_lists(chunk_sizes: Any, mixed_chunk_sizes: Any, names: list[str]) -> tuple[tuple[int, ...], ...]:
    """``(chunked's sizes, mixed-chunk's sizes)`` of the options (comma-separated or lists), each parsed only
    where its policy runs (``()`` otherwise, and for chunked without ``--chunk-sizes``: SGLang's default)."""
    chunk_text, mixed_text = as_text_list(chunk_sizes), as_text_list(mixed_chunk_sizes)
    chunked = chunk_text is not None and "chunked" in names
    chunks = parse_chunk_sizes(chunk_text, "chunk_sizes") if chunked else []
    mixed = parse_chunk_sizes(mixed_text, "mixed_chunk_sizes") if "mixed-chunk" in names else []
    return tuple(chunks), tuple(mixed)


def check_prefill_decode_interval(interval: int) -> None:
    """:class:`InputError` for a ``--prefill-decode-interval`` outside 0 to
    :data:`MAX_PREFILL_DECODE_INTERVAL` decode-only rounds."""
    if not 0 <= interval <= MAX_PREFILL_DECODE_INTERVAL:
        raise InputError(
            "{flag.prefill_decode_interval} must be 0 to {MAX_PREFILL_DECODE_INTERVAL:,} decode-only "
            "rounds after each prefill batch, got {interval}",
            values={"MAX_PREFILL_DECODE_INTERVAL": MAX_PREFILL_DECODE_INTERVAL, "interval": interval},
        )


def policy_names(policies: str, disagg: str | None) -> list[str]:
    """The ``--policies`` names, disagg added for ``--disagg XPYD``; :class:`InputError` for an unknown
    name or disagg without ``--disagg``."""
    from .values import parse_names

    names = parse_names(policies, "policies", POLICIES)
    if "disagg" in names and disagg is None:
        raise InputError(
            "{flag.policies} disagg needs {flag.disagg} XPYD (prefill and decode instances, e.g. 1P1D)",
            values={},
        )
    if disagg is not None and "disagg" not in names:
        names.append("disagg")
    return names


@dataclass(frozen=True, kw_only=True)
class PolicyChoice:
    """What to build. ``names``: from :func:`policy_names`. ``chunk_sizes`` (tokens; empty: SGLang's
    default for the GPU, ``sglang_server.default_chunked_prefill_size``) and ``mixed_chunk_sizes``: one
    policy each. ``prefill_decode_interval``: SGLang's flag, for the baselines. ``sglang``: the revision.
    ``unreleased_fallback``: group 1 where 0.5.23 crashes. ``pdmux``: simulate's one pdmux config;
    ``pdmux_files``: capacity's pdmux YAMLs, each a policy named after its file beside SGLang's defaults
    (``None``: ``pdmux`` is used instead)."""

    names: tuple[str, ...]
    chunk_sizes: tuple[int, ...] = ()
    mixed_chunk_sizes: tuple[int, ...] = ()
    prefill_decode_interval: int = 0
    sglang: str | None = None
    unreleased_fallback: bool = False
    pdmux: PdmuxYaml = field(default_factory=PdmuxYaml)
    pdmux_files: tuple[Path, ...] | None = None


@dataclass
class PolicySet:
    """The policies to run, in order; ``config_paths``: each one's pdmux YAML (``None``: none); ``notes``:
    the revision's and the pdmux configs' notes, in the order the configs were read."""

    policies: list[Any] = field(default_factory=list)
    config_paths: list[str | None] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, policy: Any, path: str | None = None) -> None:
        self.policies.append(policy)
        self.config_paths.append(path)


def _one_pdmux(choice: PolicyChoice, setup: Any, out: PolicySet) -> None:
    """simulate: the one config of ``choice.pdmux``."""
    from ..messages import render_all
    from ..sglang.revision_rules import layer_cap, plan_check, revision_findings
    from ..sglang.revisions import get_revision
    from ..simulate.schedulers import PdmuxPolicy

    cfg, notes = resolve_config(choice.pdmux, setup)
    plan_check(choice.sglang, cfg)  # a revision whose divide_sm was not read needs manual_divisions
    out.notes.extend([*render_all(revision_findings(choice.sglang, setup.tp)), *notes])
    fallback = choice.unreleased_fallback or get_revision(choice.sglang).threshold_fallback
    out.add(PdmuxPolicy(cfg, unreleased_fallback=fallback,
                        max_split_forward_layers=layer_cap(choice.sglang, cfg),
                        sglang=get_revision(choice.sglang).key))


def _pdmux_beside_defaults(choice: PolicyChoice, setup: Any, out: PolicySet) -> None:
    """capacity: SGLang's defaults (unless the revision needs manual levels and files are given), then
    each file, named by its file name (its path where two share a name)."""
    from ..messages import render_all
    from ..sglang.revision_rules import layer_cap, plan_check, revision_findings
    from ..sglang.revisions import get_revision
    from ..simulate.schedulers import PdmuxPolicy

    rev = get_revision(choice.sglang)
    fallback = choice.unreleased_fallback or rev.threshold_fallback
    out.notes.extend(render_all(revision_findings(rev, setup.tp)))
    files = choice.pdmux_files or ()
    if rev.divide_sm != "not read" or not files:
        plan_check(rev, None)  # SGLang's defaults: its automatic split
        out.add(PdmuxPolicy(unreleased_fallback=fallback, sglang=rev.key))
    names_seen = [p.name for p in files]
    for path in files:
        cfg, notes = resolve_config(PdmuxYaml(config=path), setup)
        plan_check(rev, cfg)
        shown = path.name if names_seen.count(path.name) == 1 else str(path)
        out.add(PdmuxPolicy(cfg, name=f"pdmux ({shown})", unreleased_fallback=fallback,
                            max_split_forward_layers=layer_cap(rev, cfg), sglang=rev.key), str(path))
        out.notes.extend(notes)


def _mixed_chunk(choice: PolicyChoice, setup: Any, out: PolicySet) -> None:
    """The mixed-chunk policies of ``choice``: as SGLang runs ``--enable-mixed-chunk`` beside the setup's
    speculative decoding (:func:`pdmux_cli.sglang.speculative_args.mixed_chunk_finding`, its note):
    STANDALONE turns it off, so each runs as chunked prefill of its size; under EAGLE and EAGLE3 the note
    says what pdmux leaves out (SGLang gives the running requests one token in a mixed step, pdmux a
    round)."""
    from ..messages import render_all
    from ..sglang.speculative_args import mixed_chunk_finding
    from ..simulate.schedulers import ChunkedPolicy, MixedChunkPolicy

    spec = setup.speculation
    sizes = list(dict.fromkeys(choice.mixed_chunk_sizes))
    if spec is not None:
        out.notes.extend(render_all([mixed_chunk_finding(spec, sizes)]))
    kind = MixedChunkPolicy if spec is None or spec.keeps_mixed_chunk else ChunkedPolicy
    for c in sizes:
        out.add(kind(c, choice.prefill_decode_interval))


def build_policies(choice: PolicyChoice, setup: Any, disagg: Any = None) -> PolicySet:
    """The policies of ``choice`` on ``setup`` (``disagg``: the deployment's disaggregation policy, for
    the name ``disagg``), in the order of ``choice.names``, each chunk size once.

    Raises :class:`InputError` where a pdmux config is refused (:func:`resolve_config`) or cannot be
    planned under the revision (:func:`pdmux_cli.sglang.revision_rules.plan_check`)."""
    from ..simulate.schedulers import ChunkedPolicy, PrefillFirstPolicy

    chunks = list(choice.chunk_sizes)
    if not chunks and "chunked" in choice.names:
        from ..sglang.server_defaults import default_chunked_prefill_size

        chunks = [default_chunked_prefill_size(setup.memory_bytes)]
    interval = choice.prefill_decode_interval
    out = PolicySet()
    for name in dict.fromkeys(choice.names):
        if name == "pdmux":
            (_one_pdmux if choice.pdmux_files is None else _pdmux_beside_defaults)(choice, setup, out)
        elif name == "chunked":
            for c in dict.fromkeys(chunks):
                out.add(ChunkedPolicy(c, interval))
        elif name == "mixed-chunk":
            _mixed_chunk(choice, setup, out)
        elif name == "disagg":
            out.add(disagg)
        else:
            out.add(PrefillFirstPolicy(interval))
    return out
