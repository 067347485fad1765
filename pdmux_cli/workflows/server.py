"""The simulated server: one SGLang server on a GPU (or one rank of TP GPUs), its cost model and limits.

:class:`ServerOptions` holds the server and cost-model options simulate, capacity and tune share (the
CLI's names and defaults); :func:`build_setup` checks them and builds
:class:`pdmux_cli.simulate.engine.Setup` (:func:`pdmux_cli.simulate.engine.make_setup`), merging a
``--calibration`` file's terms into the cost model. :func:`cost_model_block` is the cost model's part
of the JSON's provenance (:mod:`pdmux_cli.provenance`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, TypedDict

from ..catalog.model import DEFAULT_MODEL
from ..sglang.kv_cache import KV_CACHE_DTYPE_HELP
from ..sglang.server_defaults import MAX_PREFILL_TOKENS
from ..util.errors import InputError
from .fields import SERVING_TERMS, SPECULATIVE, Checked, option
from .device_options import DEVICE_OPTIONS, TP_HELP

#: ``--calibration``'s help where capacity and tune word it.
CALIBRATION_HELP = "calibration.yaml from 'pdmux bench' and/or 'pdmux calibrate'."
#: ``--ignore-eos``'s help where capacity and tune word it.
IGNORE_EOS_HELP = "Requests run to their max_new_tokens (benchmark traffic)."


@dataclass(frozen=True, kw_only=True)
class ServerOptions(Checked):
    """The server options (every one ``None``/default: SGLang's and the shipped cost model's defaults).

    ``gpu``: a GPU alias, reported name or profile file (``None``: h100). ``model``: a model profile name
    or a Hugging Face ``config.json``. ``cost_model``: ``roofline`` or ``chapter``. ``s_sat``: SMs that
    reach 95% of HBM bandwidth. ``bandwidth_efficiency``, ``mfu``: the chapter model's fractions (0-1].
    ``calibration``: a ``calibration.yaml`` (``pdmux bench`` / ``pdmux calibrate``). ``weight_bytes``,
    ``kv_bytes``: bytes per weight and per KV-cache element; ``kv_cache_dtype``: SGLang's
    ``--kv-cache-dtype``. ``flops_dtype``: ``bf16``, ``fp16`` or ``fp8``. ``mem_fraction_static``,
    ``max_prefill_tokens``, ``max_running_requests``, ``cuda_graph_max_bs``: SGLang's flags.
    ``context_length``: SGLang's ``--context-length``, tokens
    (:func:`pdmux_cli.catalog.model.with_context_length`).
    ``step_overhead_ms``, ``per_request_overhead_ms``, ``admission_delay_ms``, ``first_token_delay_ms``,
    ``admission_interval_ms``, ``eager_launch_ms``: the roofline model's serving terms, ms (``None``:
    ``serving.yaml``'s fit); all but the first declared once with their help, the shared option group
    :data:`~pdmux_cli.workflows.fields.SERVING_TERMS` the CLI builds simulate's, tune's and capacity's options
    from.
    ``ignore_eos``: requests run to their max_new_tokens. ``disable_overlap_schedule``: CPU time adds to
    every baseline step. ``disable_prefill_cuda_graph``: SGLang's flag: every prefill batch launches its
    kernels eagerly (as SGLang before its prefill CUDA graph did). ``disable_cuda_graph``: SGLang's flag:
    decode steps too (:attr:`pdmux_cli.simulate.engine.Setup.disable_cuda_graph`). ``no_prefix_cache``:
    SGLang's radix cache off. ``tp``: GPUs of one server (1-8). ``speculative_algorithm``,
    ``speculative_num_steps``, ``speculative_eagle_topk``, ``speculative_num_draft_tokens``,
    ``speculative_draft_model_path``: SGLang's speculative decoding flags (``None``: SGLang's defaults,
    :mod:`pdmux_cli.sglang.speculative_args`); ``speculative_accept_length``: the mean tokens a request
    gets per verify round (required with an algorithm).
    """

    model: str = option(DEFAULT_MODEL, short="-m", help=(
        "Model profile name or path to a Hugging Face config.json."))
    gpu: str | None = option(None, short="-g", help=(
        "GPU profile: alias (h100, h200, a100, b200, ...), reported name, or my-gpu.yaml. Default: h100."),
        wordings={"estimate": DEVICE_OPTIONS["gpu"]["help"]})
    cost_model: str = option("roofline", help=(
        "roofline (fitted to measurements) or chapter (the chapter's illustrative model)."))
    s_sat: float | None = option(None, help=(
        "SMs that reach 95% of HBM bandwidth (default: the cost model's)."), wordings={"estimate": (
            "SMs that reach 95% of HBM bandwidth, e.g. 44,66,88 (default: roofline's fit; chapter: 1/3, 1/2, "
            "2/3 of the SMs).")}, list_in="estimate")
    bandwidth_efficiency: float | None = option(None, help=(
        "Chapter model: fraction of datasheet bandwidth decode reaches (0.85)."), wordings={
        "tune": "Chapter model: fraction of datasheet bandwidth (0.85).",
        "estimate": "Chapter model: fraction of datasheet HBM bandwidth decode reaches (default 0.85)."})
    mfu: float | None = option(None, help=(
        "Chapter model: fraction of dense FLOP/s prefill reaches (0.5)."), wordings={
        "estimate": "Chapter model: fraction of dense FLOP/s prefill reaches (default 0.5)."})
    step_overhead_ms: float | None = option(None, help=(
        "Roofline model: the engine's CPU time per step, ms (0 = kernels only)."), wordings={
        "tune": "Roofline model: the engine's CPU time per step, ms.",
        "estimate": ("Roofline model: the engine's CPU time per step, ms (0 = kernels only; default: "
                     "SGLang's measured 0.31).")})
    per_request_overhead_ms: float | None = option(group=SERVING_TERMS, help=(
        "Roofline model: what every step spends per request in its batch beyond the kernels, ms, paid by "
        "every schedule (default: fitted to public SGLang serving runs, profiles/efficiency/serving.yaml)."),
        wordings={"estimate": (
            "Roofline model: what every step spends per request in its batch beyond the kernels, ms "
            "(default: fitted to public SGLang serving runs, profiles/efficiency/serving.yaml).")})
    eager_launch_ms: float | None = option(group=SERVING_TERMS, help=(
        "Roofline model: SGLang's host time per kernel of a prefill launched outside its CUDA graph (mixed "
        "batches, pdmux's split prefill, DeepSeek-V3 on B200, {flag.disable_prefill_cuda_graph}), ms: such "
        "a batch takes at least its layers' kernels times this (default: serving.yaml's fit)."),
        wordings={"estimate": (
            "Roofline model: SGLang's host time per kernel of a prefill launched outside its CUDA graph "
            "(mixed chunks, pdmux's split prefill), ms (default: serving.yaml's fit).")})
    admission_delay_ms: float | None = option(group=SERVING_TERMS, help=(
        "Roofline model: from a request's arrival until SGLang's scheduler can admit it (HTTP server, "
        "tokenizer, IPC), ms (default: serving.yaml's fit)."))
    first_token_delay_ms: float | None = option(group=SERVING_TERMS, help=(
        "Roofline model: from the step that makes a token until the client has it (detokenizer, streaming), "
        "ms: adds to TTFT and end-to-end latency, not to ITL (default: serving.yaml's fit)."))
    admission_interval_ms: float | None = option(group=SERVING_TERMS, help=(
        "Roofline model: the front end's time per request (one tokenizer manager takes every request), ms: "
        "a burst enters the scheduler one request per interval (default: serving.yaml's fit)."))
    calibration: Path | None = option(None, help=(
        "calibration.yaml from 'pdmux bench' (SM-partition curves, co-run interference) and/or 'pdmux "
        "calibrate' (whole-GPU efficiencies from your SGLang)."), wordings={
        "capacity": CALIBRATION_HELP, "tune": CALIBRATION_HELP,
        "estimate": ("calibration.yaml from 'pdmux bench' (measured SM-partition curves replace S_SAT) "
                     "and/or 'pdmux calibrate' (whole-GPU efficiencies from your SGLang).")})
    weight_bytes: float | None = option(None, help="Bytes per weight (default: the model's dtype).",
                                        wordings={"estimate": (
                                            "Bytes per weight (default: the model's dtype; bf16 2, fp8 1).")})
    kv_bytes: float | None = option(None, help=(
        "Bytes per KV-cache element (default: by {flag.kv_cache_dtype})."), wordings={
        "estimate": "Bytes per KV-cache element (bf16 2, fp8 1; default: by {flag.kv_cache_dtype})."})
    kv_cache_dtype: str | None = option(None, help=KV_CACHE_DTYPE_HELP)
    flops_dtype: str | None = option(None, help="bf16, fp16 or fp8 dense math (default: by model).")
    moe_runner_backend: str | None = option(None, help=(
        "SGLang's flag: the fused MoE kernel a MoE model's experts run, auto, triton or flashinfer_trtllm "
        "(SM100 only; default auto: the kernel SGLang picks for the model, GPU and release)."))
    mem_fraction_static: float | None = option(None, help=(
        "SGLang's flag: share of GPU memory for weights and KV pool (default: SGLang's own, per policy)."),
        wordings={"capacity": "SGLang's flag (default: SGLang's own, per policy).",
                  "tune": "SGLang's flag (default: SGLang's own with chunking off)."})
    max_prefill_tokens: int = option(MAX_PREFILL_TOKENS, help=(
        "SGLang's {flag.max_prefill_tokens}."))
    max_running_requests: int | None = option(None, help=(
        "SGLang's flag (default: SGLang's, from the KV pool)."), wordings={"gen-config": (
        "{flag.slo_itl}: SGLang's {flag.max_running_requests}, the largest decode batch sized for "
        "(default: SGLang's from the KV pool).")})
    cuda_graph_max_bs: int | None = option(None, help=(
        "Largest decode batch with a CUDA graph (default: SGLang's for the GPU). Larger batches launch "
        "kernel by kernel: slower only where the launches outlast the GPU's work (small models); it also "
        "sizes SGLang's memory reserve (floored at 10 GB on GPUs over 60 GB)."))
    context_length: int | None = option(None, help=(
        "SGLang's flag: the longest request (prompt + output, tokens) the server takes, instead of the "
        "model's own (max_position_embeddings, as SGLang derives it); requests past it are dropped, as "
        "SGLang rejects them."), wordings={"estimate": (
            "SGLang's flag: the longest request (prompt + output, tokens) the server takes, instead of the "
            "model's own (max_position_embeddings, as SGLang derives it); a prompt or decode context past it "
            "is refused, as SGLang rejects it.")})
    ignore_eos: bool = option(False, help=(
        "Requests run to their max_new_tokens (benchmark traffic): admission reserves all of it."), wordings={
        "capacity": IGNORE_EOS_HELP, "tune": IGNORE_EOS_HELP})
    disable_overlap_schedule: bool = option(False, help=(
        "Baselines without SGLang's overlap scheduler (as pdmux runs): CPU time adds to every step."))
    disable_prefill_cuda_graph: bool = option(False, help=(
        "SGLang's flag: prefill batches launch their kernels eagerly (SGLang before 0.5.23's prefill "
        "CUDA graph did): a short prefill takes at least its kernels' launch time."))
    disable_cuda_graph: bool = option(False, help=(
        "SGLang's flag: no CUDA graphs, decode and prefill launched kernel by kernel (a step takes at least "
        "its kernels' host launch time; the graphs' memory reserve is not taken)."), wordings={
        "estimate": "SGLang's flag: no CUDA graphs, decode and prefill launched kernel by kernel."})
    no_prefix_cache: bool = option(False, help=(
        "Turn SGLang's radix cache off (--disable-radix-cache). On by default: prompts of a trace with "
        "hash_ids (Mooncake) reuse cached prefixes."))
    tp: int = option(1, help=(
        "Tensor parallelism: GPUs of one server the model is sharded over, as SGLang's --tp-size (1-8); the "
        "server is simulated as one of its ranks (every rank runs the same batches), memory per GPU."),
        wordings={"estimate": TP_HELP})
    speculative_algorithm: str | None = option(group=SPECULATIVE, help=(
        "SGLang's flag: EAGLE, EAGLE3, NEXTN (MTP) or STANDALONE speculative decoding on the baselines "
        "(pdmux beside it where the {flag.sglang} revision runs the pair); needs "
        "{flag.speculative_accept_length}."))
    speculative_num_steps: int | None = option(group=SPECULATIVE, help=(
        "SGLang's flag: draft depth (default: SGLang's choice by model, 3 or 5; with it give "
        "{flag.speculative_eagle_topk})."))
    speculative_eagle_topk: int | None = option(group=SPECULATIVE, help=(
        "SGLang's flag: branches a draft step keeps (1: a chain)."))
    speculative_num_draft_tokens: int | None = option(group=SPECULATIVE, help=(
        "SGLang's flag: tokens verified per request and round (topk 1: num-steps + 1, as SGLang sets it)."))
    speculative_draft_model_path: Path | None = option(group=SPECULATIVE, help=(
        "The draft's Hugging Face config.json (default: one decoder layer of the target, EAGLE's and MTP's "
        "usual draft; STANDALONE needs one)."))
    speculative_accept_length: float | None = option(group=SPECULATIVE, help=(
        "Mean tokens a request gets per verify round, bonus token included (SGLang's log: 'accept len'; "
        "pdmux calibrate {flag.sglang_log} reads it). 1 to num-steps + 1."))


class ServingTerms(TypedDict, total=False):
    """The :data:`~pdmux_cli.workflows.fields.SERVING_TERMS` options of :class:`ServerOptions` as the Python
    API's keywords (``pdmux.simulate``, ``capacity``, ``tune``, within :class:`ServerKeywords`: PEP 692's
    ``**keywords: Unpack[...]``), typed for editors; each ``None`` by default, ms. A new term is a field
    above and a key here (``tests/test_api_simulation.py`` holds the two equal)."""

    per_request_overhead_ms: float | None
    eager_launch_ms: float | None
    admission_delay_ms: float | None
    first_token_delay_ms: float | None
    admission_interval_ms: float | None


class SpeculativeKeywords(TypedDict, total=False):
    """The :data:`~pdmux_cli.workflows.fields.SPECULATIVE` options (SGLang's ``--speculative-*`` flags and
    pdmux's acceptance length) as the Python API's keywords, typed for editors (PEP 692); each ``None`` by
    default. ``pdmux.simulate``, ``capacity``, ``tune`` and ``estimate`` take them with their serving terms
    (:class:`ServerKeywords`, :class:`pdmux_cli.workflows.estimate.EstimateKeywords`);
    ``tests/test_api_simulation.py`` holds the keys to :class:`ServerOptions`' group."""

    speculative_algorithm: str | None
    speculative_num_steps: int | None
    speculative_eagle_topk: int | None
    speculative_num_draft_tokens: int | None
    speculative_draft_model_path: str | Path | None
    speculative_accept_length: float | None


class ServerKeywords(ServingTerms, SpeculativeKeywords, total=False):
    """The keywords ``pdmux.simulate``, ``capacity`` and ``tune`` take as ``**keywords:
    Unpack[ServerKeywords]``: the serving terms and the speculative options, each declared once here."""


#: The speculative decoding options: given without ``speculative_algorithm`` they are refused.
SPECULATIVE_OPTIONS = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens",
                       "speculative_draft_model_path", "speculative_accept_length")


def speculation_of(options: Any, target: Any) -> tuple[Any, list[Any]]:
    """The :class:`pdmux_cli.sglang.speculative_args.Speculation` a request's speculative options ask for
    (``options``: anything with the ``speculative_*`` fields) on the model ``target``, with the findings of
    SGLang's start-up rules; ``(None, [])`` without ``--speculative-algorithm``. Reads the draft's
    ``config.json`` (``speculative_draft_model_path``). Raises :class:`InputError` naming the option for an
    option given without an algorithm, a value out of range, a draft whose vocabulary differs, and the
    combinations SGLang refuses."""
    algorithm = getattr(options, "speculative_algorithm", None)
    if algorithm is None:  # given blank it is refused, as SGLang's choices refuse it (check-config's too)
        given = [name for name in SPECULATIVE_OPTIONS if getattr(options, name, None) is not None]
        if given:
            raise InputError("{param_flag} needs {flag.speculative_algorithm} (EAGLE, EAGLE3, NEXTN or "
                             "STANDALONE)", param=given[0], values={})
        return None, []
    from ..catalog.model import load_model
    from ..sglang.speculative_args import resolve_speculation

    path = options.speculative_draft_model_path
    draft = load_model(path) if path is not None else None
    return resolve_speculation(target, str(algorithm), options.speculative_num_steps,
                               options.speculative_eagle_topk, options.speculative_num_draft_tokens,
                               options.speculative_accept_length, draft,
                               str(path) if path is not None else "")


def speculation_dict(setup: Any) -> dict[str, Any] | None:
    """The JSON of a server's speculative decoding (``None`` without): SGLang's settings, pdmux's accept
    length, the draft and where its shapes come from, whether the round pays the CPU's time (no overlap
    scheduler) and the request limit."""
    from ..simulate.engine import SPECULATIVE_MAX_RUNNING_REQUESTS

    spec = setup.speculation
    if spec is None:
        return None
    return {"algorithm": spec.algorithm, "num_steps": spec.num_steps, "eagle_topk": spec.eagle_topk,
            "num_draft_tokens": spec.num_draft_tokens, "accept_length": spec.accept_length,
            "draft": spec.draft.name, "draft_source": spec.draft_source,
            "draft_layers": spec.draft.num_layers,
            "overlap_schedule": setup.overlap,
            "max_running_requests": setup.max_running_requests or SPECULATIVE_MAX_RUNNING_REQUESTS}


def server_notes(setup: Any) -> list[Any]:
    """What simulate, capacity and tune say of the server's own flags: ``--context-length``
    (:func:`pdmux_cli.catalog.model.with_context_length`'s finding) and speculative decoding
    (:func:`speculation_notes`)."""
    context = [n for n in setup.step_model.notes
               if str(getattr(n, "code", "")).startswith("server.context_length")]
    return [*context, *speculation_notes(setup)]


def speculation_notes(setup: Any) -> list[Any]:
    """What simulate and capacity say of a server with speculative decoding (none without): its settings
    and what SGLang's start-up rules chose (``server.speculation``: the algorithm, steps, topk, draft tokens,
    accept length, the draft, ``--max-running-requests`` 48 when not given, SGLang 0.5.23
    ``speculative_hook.py``), those rules' own findings (:func:`speculation_of`), and that the intervals come
    from public runs without speculation, whose gain pdmux overstates (``server.speculation_intervals``;
    ``pdmux accuracy``'s speculative block)."""
    from ..simulate.engine import SPECULATIVE_MAX_RUNNING_REQUESTS
    from ..util.errors import Finding

    spec = setup.speculation
    if spec is None:
        return []
    running = (f"{SPECULATIVE_MAX_RUNNING_REQUESTS} (SGLang's default under speculation)"
               if setup.max_running_requests is None else str(setup.max_running_requests))
    start_up = [n for n in setup.step_model.notes if _is_speculative_finding(n)]
    return [Finding("server.speculation", {
        "algorithm": spec.algorithm, "num_steps": spec.num_steps, "eagle_topk": spec.eagle_topk,
        "num_draft_tokens": spec.num_draft_tokens, "accept_length": spec.accept_length,
        "draft": spec.draft.name, "max_running_requests": running}, "speculative_algorithm"),
        *start_up,
        _intervals_finding(setup.step_model)]


def _intervals_finding(step_model: Any) -> Any:
    """``server.speculation_intervals``: the intervals' caveat under speculation, with the per-request
    term a round pays once and what it would add a request paid per verified token
    (``SpeculativeStepModel.round_request_s``)."""
    from ..util.errors import Finding

    once = step_model.round_request_s(1)  # a SpeculativeStepModel: speculation_notes' setups have one
    per_token = step_model.round_request_s(1, per_verified_token=True)
    return Finding("server.speculation_intervals", {"per_request_ms": once * 1e3,
                                                    "extra_per_request_ms": (per_token - once) * 1e3},
                   "speculative_accept_length")


def speculative_launch_flags(sglang: Any, algorithm: str, draft_path: Any) -> list[str]:
    """SGLang's speculative arguments for a pdmux launch line (gen-config, tune):
    :func:`pdmux_cli.sglang.speculative_args.pdmux_speculation_flags` with the draft's layers read from its
    ``config.json`` and its folder as the path (SGLang loads a draft from its folder: its config.json and
    weights). Raises :class:`InputError` where the revision cannot run the pair."""
    from ..sglang.speculative_args import pdmux_speculation_flags

    layers, path = None, draft_path
    if draft_path is not None:
        from ..catalog.model import load_model
        from ..util import input_files

        layers = load_model(draft_path).num_layers
        if not input_files.is_dir(Path(draft_path)) and Path(draft_path).exists():
            path = Path(draft_path).parent
    return pdmux_speculation_flags(sglang, algorithm, layers, str(path) if path is not None else None)


def _is_speculative_finding(note: Any) -> bool:
    """Whether ``note`` is one of SGLang's speculative start-up rules' findings
    (:func:`pdmux_cli.sglang.speculative_args.resolve_speculation`: codes ``speculative.*``)."""
    return str(getattr(note, "code", "")).startswith("speculative.")


def server_options(request: Any) -> ServerOptions:
    """The :class:`ServerOptions` fields of ``request`` (a command's request, which holds them)."""
    return ServerOptions(**{f.name: getattr(request, f.name) for f in fields(ServerOptions)})


def _check_values(o: ServerOptions) -> None:
    from ..costmodel import model_class
    from ..sglang.kv_cache import check_kv_options

    if o.gpu is not None and not str(o.gpu).strip():
        raise InputError("{flag.gpu} is empty: give a GPU name such as h100 (pdmux splits {flag.all_gpus} "
                         "lists them)", param="gpu", values={})
    chosen = model_class(str(o.cost_model).strip().lower())
    for name in ("disable_prefill_cuda_graph", "disable_cuda_graph"):
        if getattr(o, name) and chosen is not None and not chosen.models_cpu_time:
            raise InputError("{param_flag} applies to {flag.cost_model} roofline (the chapter's model has no "
                             "CPU time)", param=name, values={})
    check_kv_options(o.kv_cache_dtype, o.kv_bytes)
    if o.flops_dtype is not None and o.flops_dtype not in ("bf16", "fp16", "fp8"):
        raise InputError(
            "{flag.flops_dtype} must be bf16, fp16 or fp8, got {flops_dtype!r}",
            values={"flops_dtype": o.flops_dtype},
        )


def build_setup(o: ServerOptions, tp: int | None = None, gpu_profile: Any = None,
                prefix_cache: bool = False) -> Any:
    """The simulated server (:class:`pdmux_cli.simulate.engine.Setup`) of ``o`` with ``tp`` GPUs
    (``None``: ``o.tp``). ``gpu_profile``: a :class:`pdmux_cli.catalog.hardware.Gpu` to use instead of
    ``o.gpu`` (``gen-config --tune``). ``prefix_cache``: apply ``o.no_prefix_cache`` (SGLang's radix cache
    off); otherwise the setup keeps the radix cache on and the caller decides.

    Raises :class:`InputError` for bad values or combinations (an S_SAT past the GPU's SMs, ``--s-sat``
    beside a calibration with SM-partition terms), an unknown GPU or model, an unreadable calibration.
    """
    from ..catalog.hardware import find_gpu_or_file
    from ..catalog.model import load_model, with_context_length
    from ..costmodel.options import CostModelOptions
    from ..sglang.kv_cache import resolve_kv_cache
    from ..simulate.engine import make_setup

    _check_values(o)
    profile = gpu_profile if gpu_profile is not None else find_gpu_or_file(o.gpu or "h100")
    if o.s_sat is not None and profile.sm_count and o.s_sat > profile.sm_count:
        raise InputError(
            "{flag.s_sat} {s_sat:g} is more than the {sm_count} SMs of {name}: give the SMs that "
            "saturate HBM bandwidth, at most all of them",
            values={"s_sat": o.s_sat, "sm_count": profile.sm_count, "name": profile.name},
        )
    mdl, context_notes = with_context_length(load_model(o.model), o.context_length)
    speculation, spec_notes = speculation_of(o, mdl)
    kv_cache = resolve_kv_cache(mdl, o.kv_cache_dtype, o.kv_bytes)
    cal = None
    if o.calibration is not None:
        from ..costmodel.calibration_file import load_calibration

        cal = load_calibration(o.calibration)
        if o.s_sat is not None and cal.has_partitions:
            raise InputError(
                "{flag.s_sat} is a guess that a {flag.calibration} file replaces: give one or the other",
                values={},
            )
    cost = CostModelOptions.of(o, cost_model=o.cost_model.strip().lower())
    setup = make_setup(profile, mdl, cost, calibration=cal, weight_bytes_per_param=o.weight_bytes,
                       kv_bytes_per_element=kv_cache.bytes_per_element,
                       mem_fraction_static=o.mem_fraction_static, max_prefill_tokens=o.max_prefill_tokens,
                       ignore_eos=o.ignore_eos, disable_overlap=o.disable_overlap_schedule,
                       cuda_graph_max_bs=o.cuda_graph_max_bs,
                       prefill_cuda_graph=False if o.disable_prefill_cuda_graph else None,
                       disable_cuda_graph=o.disable_cuda_graph,
                       max_running_requests=o.max_running_requests, tp=o.tp if tp is None else tp,
                       speculation=speculation)
    setup.step_model.notes.extend([*context_notes, *spec_notes])
    return without_prefix_cache(setup) if prefix_cache and o.no_prefix_cache else setup


def without_prefix_cache(setup: Any) -> Any:
    """``setup`` with SGLang's radix cache off (``--no-prefix-cache``)."""
    return replace(setup, prefix_cache=False)


def on_gpus(setup: Any) -> str:
    """``"H100 SXM5 80GB"``, or ``"8 x H100 SXM5 80GB (TP 8)"`` for a tensor-parallel server."""
    return f"{setup.tp} x {setup.gpu_name} (TP {setup.tp})" if setup.tp > 1 else setup.gpu_name


def cost_model_block(setup: Any, calibration: Path | None) -> dict[str, Any]:
    """The cost model's provenance of ``setup``'s step model
    (:func:`pdmux_cli.provenance.step_model_provenance`: efficiency profile, the ``--calibration`` file, the
    serving terms' release line or ``"calibration"``, S_SAT in SMs)."""
    from ..provenance import step_model_provenance

    return step_model_provenance(setup.step_model, calibration=calibration)


def provenance_block(sglang: str | None, setup: Any = None,
                     calibration: Path | None = None) -> dict[str, Any]:
    """The JSON's ``"pdmux"`` block (:func:`pdmux_cli.provenance.provenance`): pdmux's version, the
    ``--sglang`` rule set, and ``setup``'s cost model (``None``: a command that simulates nothing)."""
    from ..provenance import provenance

    cost_model = cost_model_block(setup, calibration) if setup is not None else None
    return provenance(sglang=sglang, cost_model=cost_model)
