"""SGLang's server defaults and scheduler rules per release, for replaying a run on the code it used.

pdmux simulates SGLang 0.5.23 (:mod:`pdmux_cli.sglang.server_defaults`); a measurement taken on another
release is replayed with that release's rules. :func:`release_defaults` gives a frozen
:class:`ReleaseDefaults` for a version: the GPU-dependent defaults (``--chunked-prefill-size``, the decode
CUDA graph's largest batch, ``mem_fraction_static``, ``max_running_requests``) and the scheduler's rules
(the admission reserve for running ``ignore_eos`` requests, the retraction target, ``new_token_ratio``
after a retraction, its floor and decay, whether the front end tokenizes one request at a time, whether
prefill batches replay from a CUDA graph). Pure functions; the rules are our words for SGLang's code, read
from the released wheels (``pip download --no-deps sglang==X``; paths inside the wheel).

Releases read: 0.2.10, 0.2.12-0.2.14, 0.3.0, 0.3.5, 0.3.6, 0.4.0, 0.4.3, 0.4.5, 0.4.6, 0.4.6.post1, 0.4.7,
0.4.8, 0.4.9.post2, 0.4.10.post2, 0.5.0rc0, 0.5.0rc2, 0.5.1-0.5.6 (with 0.5.3.post3, 0.5.4.post2,
0.5.5.post1, 0.5.6.post1), 0.5.8, 0.5.10-0.5.12, 0.5.14, 0.5.16, 0.5.18, 0.5.20-0.5.23. A release between
two read ones (0.3.1-0.3.4, 0.4.1, 0.4.2, 0.4.4, 0.5.7, 0.5.9, ...) takes the rules of the last read
release before it: where a rule changed in such a gap, which release changed it is not pinned. A release
after 0.5.23 takes 0.5.23's.

GPU memory is ``nvidia-smi``'s memory.total in MiB (``get_nvgpu_memory_capacity``, in every release whose
defaults depend on it: 0.3.6 on); ``M`` below. The rules, per release range (the first release of each
range is the one read first):

- **Chunk size and decode graph** (``--chunked-prefill-size``; the largest decode batch captured):

  - 0.2.10-0.2.12: chunking off (``srt/server_args.py`` ``ServerArgs``: ``chunked_prefill_size`` -1 in
    0.2.12, ``None`` in 0.2.10); graphs to 128 (``model_executor/model_runner.py``
    ``init_cuda_graphs``: 1, 2, 4, 8..128 by 8);
  - 0.2.13: chunk 8192 (``server_args.py``); graphs to 128;
  - 0.2.14-0.3.5: chunk 8192; graphs to 160 (``model_runner.py`` ``init_cuda_graphs``: 8..160 by 8;
    0.3.5 ``cuda_graph_max_bs`` 160);
  - 0.3.6: ``M < 25000``: chunk 8192 // 4 = 2048 and graphs to 4 (``server_args.py`` ``__post_init__``),
    else 8192 and 160;
  - 0.4.0-0.4.2: ``M < 25000``: 2048 and 8, else 8192 and 160 (``__post_init__``);
  - 0.4.3-0.4.5: as 0.4.0, graphs ``M < 25000`` 8 at TP < 4, else 80;
  - 0.4.6: as 0.4.3, graphs to 256 where ``M > 81920`` (``cuda_graph_runner.py``
    ``get_batch_sizes_to_capture``);
  - 0.4.7: chunk ``M > 180000`` 16384, ``M < 25000`` 2048, else 8192; graphs as 0.4.3 below 25000 MiB,
    else 160, 256 where ``M > 96 GiB``, 512 where ``M > 180000`` (``get_batch_sizes_to_capture``);
  - 0.4.8-0.5.2: chunk ``M < 35 GiB`` 2048, ``< 160 GiB`` 8192, else 16384; graphs ``M < 35 GiB`` 8 at
    TP < 4 else 80, else 160, 256 where ``M > 90 GiB``, 512 where ``M > 160000``;
  - 0.5.3-0.5.4 (``server_args.py`` ``_handle_gpu_memory_settings``): ``M < 20 GiB`` 2048 and 8;
    ``< 35 GiB`` 2048 and 16 at TP < 4 (else 80); ``< 60 GiB`` 4096 and 32 (160); ``< 160 GiB`` 8192 and
    256 (512); else 16384 and 512;
  - 0.5.4.post2-0.5.18: as 0.5.3, 24 at TP < 4 below 35 GiB;
  - 0.5.20 on: 0.5.23's (``srt/arg_groups/memory_hook.py`` ``handle_gpu_memory_settings``:
    :func:`pdmux_cli.sglang.server_defaults.default_chunked_prefill_size`, ``default_cuda_graph_max_bs``).

- **mem_fraction_static** (TP: ``--tp-size``; ``round(x, 3)`` where SGLang rounds):

  - up to 0.4.5 (``server_args.py`` ``__post_init__``): by TP alone, TP >= 16: 0.79, >= 8: 0.83 (0.82
    in 0.3.6, 0.81 from 0.4.0), >= 4: 0.85, >= 2: 0.87, else 0.88;
  - 0.4.6: that table where ``M <= 81920``, else ``(M - 13 GiB) / M`` (unrounded);
  - 0.4.7: the table where ``M <= 81920``, else 0.88; then 0.79 where ``M > 180000``, or where
    ``M > 96 GiB`` ``min(f + 48 GiB x (1 - f) / M, (M - 18 GiB) / M)``;
  - 0.4.8-0.5.2: ``round((M - reserved) / M, 3)`` with reserved ``(2.8 + TP/10)`` GiB below 35 GiB,
    ``(9.5 + TP/2)`` GiB below 90 GiB, ``(12 + TP/2)`` GiB below 160 GiB, else 32 GiB;
  - 0.5.3-0.5.8 (``_handle_gpu_memory_settings``): reserved ``512 + 1.5 x max(chunk, 2048) + 2 x graph
    max batch + TP/8 x 1024`` MiB (``max_prefill_tokens`` for the chunk when chunking is off), at least
    10240 where ``M > 60 GiB``; the decode graph's share counts with ``--disable-cuda-graph`` too;
  - 0.5.10 on: plus 8 MiB a prefill CUDA graph bucket, the graph on by default from 0.5.10
    (``disable_piecewise_cuda_graph``; ``_generate_piecewise_cuda_graph_tokens``, the buckets of 0.5.23's
    :func:`~pdmux_cli.sglang.server_defaults.prefill_graph_buckets`): 0.5.23's
    :func:`~pdmux_cli.sglang.server_defaults.mem_fraction_static` with the release's chunk and graph defaults
    (the MLA models' 1.5 GiB prefill-graph reserve as pdmux takes it for 0.5.23: not counted). Under
    ``--disable-cuda-graph`` 0.5.10-0.5.12 still count both graphs' shares (the flag turns off neither the
    decode reserve nor ``disable_piecewise_cuda_graph``), 0.5.14 the decode graph's only (the prefill share
    under ``prefill_cuda_graph_config.backend != Backend.DISABLED``), 0.5.16 on neither
    (``reserve_for_graph_mb``).

- **max_running_requests** (``model_runner.py`` ``init_memory_pool``, ``managers/tp_worker.py``): up to
  0.3.0 ``min(pool // 2, clamp(int(pool / context x 512), 2048, 5120) - 1)``; from 0.3.5
  ``min(clamp(..., 2048, 4096), pool // 2)``
  (:func:`~pdmux_cli.sglang.server_defaults.max_running_requests`).

- **Admission reserve for running requests** (``managers/schedule_policy.py`` ``PrefillAdder``; 0.2.12-0.3.0
  ``managers/policy_scheduler.py`` ``remove_running_tokens``): up to 0.5.21 ``new_token_ratio x
  min(max_new - generated, 4096)`` for every running request, ``ignore_eos`` ones included; from 0.5.22
  (``_get_running_request_total_token_offset``) ratio 1.0 for ``ignore_eos`` requests. Not modelled: 0.2.10
  reserves the remaining outputs unclipped (``managers/tp_worker.py`` ``get_new_prefill_batch``, no
  ``CLIP_MAX_NEW_TOKENS`` yet); pdmux clips at 4096 in every release (the shipped 0.2.10 runs ask for at
  most 128 output tokens).

- **Retraction** (``managers/schedule_batch.py`` ``retract_decode``; fewest outputs first, then the
  longest prompt, in every release): up to 0.5.1 until ``free >= 20 x kept requests``
  (``retract_decode_steps``); from 0.5.2 until one decode step fits (``check_decode_mem``).
  ``new_token_ratio`` after it: ``min(1, (sum generated + 20 x kept) / sum max_new)`` up to 0.5.3.post3,
  ``/ (sum max_new + 1)`` from 0.5.4 (``scheduler_components/new_token_ratio_tracker.py``
  ``estimate_new_token_ratio_after_retract`` from 0.5.14).

- **new_token_ratio**: starts at 0.7 and resets to it when idle in every release; up to 0.3.0 its floor
  is 0.1 and it decays 0.001 a decode step (``global_config.py`` ``base_min_new_token_ratio``,
  ``new_token_ratio_decay``); from 0.3.5 floor 0.7 x 0.14, decay (0.7 - floor) / 600
  (``SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR``, ``SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS``).

- **Front end**: up to 0.5.21 the OpenAI endpoints render and tokenize a request on the event loop, one at
  a time (``srt/entrypoints/openai/serving_base.py`` ``handle_request``); from 0.5.22 in an executor.

- **Prefill CUDA graph**: off by default up to 0.5.8 (``server_args.py``: ``enable_piecewise_cuda_graph``
  False), on from 0.5.10 (``disable_piecewise_cuda_graph`` False): 0.5.23's default there
  (:func:`~pdmux_cli.sglang.server_defaults.prefill_cuda_graph_default`).

- **The fused-MoE runner of a bf16 Qwen3 MoE on SM100** (B200, B300, GB200, GB300; ``--moe-runner-backend
  auto``, no all-to-all backend): up to 0.5.7 SGLang picks ``flashinfer_trtllm`` for the Qwen3 MoE family on
  SM100 only when the experts are quantized (``server_args.py`` ``_handle_model_specific_adjustments``:
  ``self.quantization in ("fp8", "modelopt_fp4")``), so bf16 experts run the Triton ``fused_moe``
  (``layers/quantization/unquant.py`` ``UnquantizedFusedMoEMethod``: ``MoeRunnerBackend.TRITON``); from
  0.5.8 the same condition adds ``or self.quantization is None`` and bf16 experts run ``flashinfer_trtllm``
  too, as in 0.5.23 (:func:`pdmux_cli.costmodel.moe.moe_kernel`). Read for this rule: 0.5.6, 0.5.6.post1,
  0.5.6.post2, 0.5.7, 0.5.8, 0.5.10, 0.5.12, 0.5.14, 0.5.16, 0.5.18, 0.5.20-0.5.23
  (:attr:`ReleaseDefaults.qwen3_moe_bf16_trtllm`). The other SM100 choices (quantized Qwen3 experts, the
  DeepSeek family's fp8 experts, gpt-oss's MXFP4 ones) are 0.5.23's in every release: the same in the
  releases read here; older ones were not read for them.

- **The overlap scheduler under speculative decoding** (EAGLE, EAGLE3, NEXTN, STANDALONE; SGLang picks
  ``event_loop_overlap`` or ``event_loop_normal`` by ``disable_overlap_schedule``, ``managers/scheduler.py``
  ``run_scheduler_process``): 0.4.1's ``ServerArgs`` has no ``speculative_algorithm``; from 0.4.3 (0.4.2
  not read) to 0.5.10 speculation turns the overlap scheduler off by default (``server_args.py``
  ``__post_init__``, from 0.5.4 ``_handle_speculative_decoding``: ``disable_overlap_schedule = True``,
  "Overlap scheduler is disabled because of using eagle speculative decoding"); its overlapped path is an
  opt-in, ``--enable-beta-spec`` in 0.5.3.post3-0.5.4 (EAGLE only, default False) and
  ``SGLANG_ENABLE_SPEC_V2`` from 0.5.5 (``environ.py`` ``EnvBool(False)`` up to 0.5.10; EAGLE3 too and
  topk 1 only from 0.5.7). 0.5.11 and 0.5.12
  default ``SGLANG_ENABLE_SPEC_V2`` to True (``EnvBool(True)``): the overlap scheduler stays on, except at
  ``--speculative-eagle-topk`` > 1, which still turns it off ("spec v2 currently only supports topk = 1").
  From 0.5.13 (``srt/arg_groups/speculative_hook.py`` ``_handle_eagle_family``) it stays on at any topk
  (0.5.14 removes the variable: "speculative decoding always runs the V2 worker"), as in 0.5.23. Without the
  overlap scheduler a baseline round pays its CPU time on top of the GPU's, as under
  ``--disable-overlap-schedule`` (:meth:`ReleaseDefaults.speculation_overlaps`).
- **The speculative worker** (:meth:`ReleaseDefaults.speculation_worker_v1`): up to 0.5.12 SGLang picks the
  worker by the overlap scheduler (0.5.6 ``speculative/spec_info.py`` ``_create_eagle_worker``, 0.5.11
  ``create_worker``: ``EAGLEWorkerV2`` with it, ``EAGLEWorker`` without); from 0.5.13 the EAGLE family
  always runs the V2 worker (0.5.13-0.5.23 ``spec_info.py`` ``create_worker``: "EAGLE / EAGLE3 / STANDALONE
  / MULTI_LAYER always use the V2 worker", synchronously when the overlap scheduler is off). The v1 worker's
  verify appends and checks every accepted token of every request in Python (0.5.6 ``eagle_info.py``
  ``EagleVerifyInput.verify``: ``req.output_ids.append`` and ``req.check_finished()`` per token), the work
  a plain step does once per request; V2 extends each request's output once a round (0.5.23
  ``batch_result_processor.py`` ``process_batch_result_decode``). Not modelled: the v1 worker's other
  extra CPU work over a plain step (three forwards prepared, the accept index's ``tolist()``), and the other
  start-up changes old releases made under speculation (0.4.3: radix cache and chunked prefill off). Read
  for this rule: 0.4.0, 0.4.1, 0.4.3, 0.4.6, 0.4.9, 0.5.0rc2, 0.5.2, 0.5.3, 0.5.3.post3, 0.5.4, 0.5.5,
  0.5.5.post3, 0.5.6, 0.5.6.post2, 0.5.7-0.5.14 (with 0.5.12.post1), 0.5.20, 0.5.23.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from ..util.errors import InputError
from . import server_defaults as sgl

MIB = 1024**2

#: The release pdmux simulates by default (:mod:`pdmux_cli.sglang.server_defaults`).
LATEST_RELEASE = "0.5.23"
#: The oldest release whose code was read; older ones are refused.
OLDEST_RELEASE = "0.2.10"

_VERSION = re.compile(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?(?:\.?(rc|post|dev)\.?(\d+))?(?:[+.\-].*)?\s*$",
                      re.IGNORECASE)


def parse_version(text: object) -> tuple[int, int, int, int, int]:
    """A release's sort key ``(major, minor, patch, stage, n)`` from its version text: ``"0.5.6"``,
    ``"v0.5.6.post1"``, ``"0.5.0rc2"``, ``"0.5.24.dev3+g1234"`` (a local suffix ignored). ``stage``: 0 a
    development release, 1 a release candidate, 2 the release (``n`` its ``.postN``). Raises
    :class:`InputError` for text that is no version."""
    match = _VERSION.match(str(text)) if isinstance(text, (str, int, float)) else None
    if match is None:
        raise InputError(f"SGLang version {text!r} is not a release number such as 0.5.6 or 0.5.6.post1")
    major, minor, patch = int(match[1]), int(match[2]), int(match[3] or 0)
    tag, n = (match[4] or "").lower(), int(match[5] or 0)
    return major, minor, patch, {"dev": 0, "rc": 1}.get(tag, 2), n


def _key(text: str) -> tuple[int, int, int, int, int]:
    return parse_version(text)


def version_text(key: tuple[int, int, int, int, int]) -> str:
    """The version text of a sort key (:func:`parse_version`): ``0.5.6``, ``0.5.6.post1``, ``0.5.0rc2``."""
    major, minor, patch, stage, n = key
    base = f"{major}.{minor}.{patch}"
    if stage == 0:
        return f"{base}.dev{n}"
    if stage == 1:
        return f"{base}rc{n}"
    return f"{base}.post{n}" if n else base


def _since(table: tuple[tuple[str, object], ...], key: tuple) -> object:
    """The value of the last ``(first release, value)`` row of ``table`` at or before ``key``."""
    value = table[0][1]
    for first, rule in table:
        if _key(first) <= key:
            value = rule
    return value


# Each rule: (first release, value) rows, oldest first (module docstring for the sources).
_MEMORY = (("0.2.10", "0.2.10"), ("0.2.13", "0.2.13"), ("0.2.14", "0.2.14"), ("0.3.6", "0.3.6"),
           ("0.4.0", "0.4.0"), ("0.4.3", "0.4.3"), ("0.4.6", "0.4.6"), ("0.4.7", "0.4.7"), ("0.4.8", "0.4.8"),
           ("0.5.3", "0.5.3"), ("0.5.4.post2", "0.5.4.post2"), ("0.5.10", "0.5.10"), ("0.5.20", "0.5.23"))
_FULL_RESERVE_FOR_IGNORE_EOS = (("0.2.10", False), ("0.5.22", True))
_RETRACT_STEPS = (("0.2.10", sgl.RETRACT_DECODE_STEPS), ("0.5.2", 1))
_RETRACT_RATIO_PLUS_ONE = (("0.2.10", False), ("0.5.4", True))
_RATIO_FLOOR_DECAY = (("0.2.10", (0.1, 0.001)),
                      ("0.3.5", (sgl.MIN_NEW_TOKEN_RATIO, sgl.NEW_TOKEN_RATIO_DECAY)))
_RUNNING_CAP = (("0.2.10", (5120, 1)), ("0.3.5", (4096, 0)))
_TP8_MEM_FRACTION = (("0.2.10", 0.83), ("0.3.6", 0.82), ("0.4.0", 0.81))
_SERIAL_FRONTEND = (("0.2.10", True), ("0.5.22", False))
_PREFILL_CUDA_GRAPH = (("0.2.10", False), ("0.5.10", None))
# (decode, prefill) graph shares of the reserve that still count under --disable-cuda-graph (0.5.10 on)
_RESERVE_WITHOUT_GRAPHS = (("0.2.10", (True, True)), ("0.5.14", (True, False)), ("0.5.16", (False, False)))
# (the overlap scheduler stays on under speculation, only at --speculative-eagle-topk 1)
_SPECULATION_OVERLAP = (("0.2.10", (False, False)), ("0.5.11", (True, True)), ("0.5.13", (True, False)))
_SPECULATION_V2_ALWAYS = (("0.2.10", False), ("0.5.13", True))
_QWEN3_MOE_BF16_TRTLLM = (("0.2.10", False), ("0.5.8", True))


@dataclass(frozen=True)
class ReleaseDefaults:
    """One SGLang release's defaults and scheduler rules (module docstring; :func:`release_defaults`).

    ``release``: its version text. ``memory``: the first release of its memory-default rules (the
    chunk size, the decode graph's largest batch, ``mem_fraction_static``). ``full_reserve_for_ignore_eos``:
    admission reserves an ``ignore_eos`` running request's whole remaining output (ratio 1.0, 0.5.22 on)
    instead of ``new_token_ratio`` of it. ``retract_steps``: retraction stops once ``free >= kept x
    retract_steps`` (20 up to 0.5.1; 1: one decode step). ``retract_ratio_plus_one``: the ratio after a
    retraction divides by ``sum max_new + 1`` (0.5.4 on). ``min_new_token_ratio``, ``new_token_ratio_decay``:
    the ratio's floor and decay per decode step. ``max_running_cap``: the request pool's upper clamp;
    ``running_slots_spare``: pool slots left unused (1 up to 0.3.0). ``tp8_mem_fraction``: the default
    ``mem_fraction_static`` at TP 8-15 where it goes by TP alone (up to 0.4.7). ``serial_frontend``: the front
    end tokenizes one request at a time (up to 0.5.21). ``prefill_cuda_graph``: ``False`` when prefill batches
    run eagerly by default (up to 0.5.8), ``None`` for 0.5.23's default rule. ``reserve_without_graphs``:
    which of the decode and prefill graphs' shares of the memory reserve still count under
    ``--disable-cuda-graph`` where the reserve has a prefill share (0.5.10 on: both up to 0.5.12, the
    decode graph's in 0.5.14, neither from 0.5.16). ``speculation_overlap``: under speculative decoding the
    overlap scheduler stays on by default (0.5.11 on; up to 0.5.10 speculation turns it off);
    ``speculation_overlap_topk1``: only at ``--speculative-eagle-topk`` 1 (0.5.11-0.5.12)
    (:meth:`speculation_overlaps`). ``speculation_v2_always``: the EAGLE family runs the V2 worker with or
    without the overlap scheduler (0.5.13 on; :meth:`speculation_worker_v1`). ``qwen3_moe_bf16_trtllm``: on
    SM100 a Qwen3 MoE's bf16 experts run FlashInfer's TRT-LLM-gen fused MoE (0.5.8 on), not the Triton
    ``fused_moe`` (module docstring).
    """

    release: str
    memory: str
    full_reserve_for_ignore_eos: bool
    retract_steps: int
    retract_ratio_plus_one: bool
    min_new_token_ratio: float
    new_token_ratio_decay: float
    max_running_cap: int
    running_slots_spare: int
    tp8_mem_fraction: float
    serial_frontend: bool
    prefill_cuda_graph: bool | None
    reserve_without_graphs: tuple[bool, bool] = (False, False)
    speculation_overlap: bool = True
    speculation_overlap_topk1: bool = False
    speculation_v2_always: bool = True
    qwen3_moe_bf16_trtllm: bool = True

    def speculation_overlaps(self, eagle_topk: int = 1) -> bool:
        """Whether the overlap scheduler runs under speculative decoding with ``--speculative-eagle-topk``
        ``eagle_topk`` by default (module docstring): ``False`` up to 0.5.10, and at topk > 1 in
        0.5.11-0.5.12; then a round pays its CPU time on top of the GPU's."""
        return self.speculation_overlap and (eagle_topk <= 1 or not self.speculation_overlap_topk1)

    def speculation_worker_v1(self, eagle_topk: int = 1, disable_overlap: bool = False) -> bool:
        """Whether speculative decoding runs SGLang's v1 worker (module docstring: up to 0.5.12 whenever the
        overlap scheduler is off, by default or by ``--disable-overlap-schedule``; never from 0.5.13), whose
        verify handles every accepted token of a request as a plain step handles its one token: the
        per-request term is then paid per accepted token
        (:class:`~pdmux_cli.costmodel.speculative.SpeculativeStepModel` ``worker_v1``)."""
        if self.speculation_v2_always:
            return False
        return disable_overlap or not self.speculation_overlaps(eagle_topk)

    @property
    def init_new_token_ratio(self) -> float:
        """``new_token_ratio``'s start and idle value (0.7 in every release)."""
        return sgl.INIT_NEW_TOKEN_RATIO

    def chunked_prefill_size(self, gpu_memory_bytes: float, tp: int = 1) -> int:
        """The default ``--chunked-prefill-size`` (tokens; -1: chunking off) on a GPU of
        ``gpu_memory_bytes`` (nvidia-smi's total)."""
        mib = gpu_memory_bytes / MIB
        family = self.memory
        if family == "0.5.23":
            return sgl.default_chunked_prefill_size(gpu_memory_bytes, tp)
        if family == "0.2.10":
            return -1
        if family in ("0.2.13", "0.2.14"):
            return 8192
        if family in ("0.3.6", "0.4.0", "0.4.3", "0.4.6"):
            return 2048 if mib < 25000 else 8192
        if family == "0.4.7":
            return 16384 if mib > 180000 else 2048 if mib < 25000 else 8192
        if family == "0.4.8":
            return 2048 if mib < 35 * 1024 else 8192 if mib < 160 * 1024 else 16384
        # 0.5.3 to 0.5.18: _handle_gpu_memory_settings
        if mib < 35 * 1024:
            return 2048
        if mib < 60 * 1024:
            return 4096
        return 8192 if mib < 160 * 1024 else 16384

    def cuda_graph_max_bs(self, gpu_memory_bytes: float, tp: int = 1) -> int:
        """The largest decode batch run as a CUDA graph by default (requests)."""
        mib = gpu_memory_bytes / MIB
        family = self.memory
        if family == "0.5.23":
            return sgl.default_cuda_graph_max_bs(gpu_memory_bytes, tp)
        if family in ("0.2.10", "0.2.13"):
            return 128
        if family == "0.2.14":
            return 160
        small = 8 if tp < 4 else 80
        if family == "0.3.6":
            return 4 if mib < 25000 else 160
        if family == "0.4.0":
            return 8 if mib < 25000 else 160
        if family == "0.4.3":
            return small if mib < 25000 else 160
        if family == "0.4.6":
            return small if mib < 25000 else 256 if mib > 81920 else 160
        if family == "0.4.7":
            if mib < 25000:
                return small
            return 512 if mib > 180000 else 256 if mib > 96 * 1024 else 160
        if family == "0.4.8":
            if mib < 35 * 1024:
                return small
            return 512 if mib > 160000 else 256 if mib > 90 * 1024 else 160
        # 0.5.3 to 0.5.18: _handle_gpu_memory_settings
        if mib < 20 * 1024:
            return 8
        if mib < 35 * 1024:
            return (16 if family == "0.5.3" else 24) if tp < 4 else 80
        if mib < 60 * 1024:
            return 32 if tp < 4 else 160
        if mib < 160 * 1024:
            return 256 if tp < 4 else 512
        return 512

    def mem_fraction_static(self, gpu_memory_bytes: float, chunked_prefill_size: int, tp: int = 1,
                            max_prefill_tokens: int = sgl.MAX_PREFILL_TOKENS,
                            cuda_graph_max_bs: int | None = None, graphs: bool = True) -> float:
        """The default ``mem_fraction_static`` (0-1) with ``--chunked-prefill-size chunked_prefill_size``
        (-1: off), ``cuda_graph_max_bs`` (``None``: the release's default) and ``graphs`` (False:
        ``--disable-cuda-graph``: the graphs' shares the release drops, :attr:`reserve_without_graphs`; up
        to 0.5.8 the reserve does not depend on it). Raises :class:`InputError` when the reserve leaves
        nothing."""
        family = self.memory
        if family == "0.5.23":
            return sgl.mem_fraction_static(gpu_memory_bytes, chunked_prefill_size, tp,
                                           max_prefill_tokens=max_prefill_tokens,
                                           cuda_graph_max_bs=cuda_graph_max_bs, graphs=graphs)
        mib = gpu_memory_bytes / MIB
        if family == "0.5.10":  # 0.5.23's reserve with the release's graph default
            bs = cuda_graph_max_bs or self.cuda_graph_max_bs(gpu_memory_bytes, tp)
            decode, prefill = (True, True) if graphs else self.reserve_without_graphs
            activation = max(chunked_prefill_size if chunked_prefill_size > 0 else max_prefill_tokens, 2048)
            reserved = (512 + 1.5 * activation + tp / 8 * 1024 + (2 * bs if decode else 0)
                        + (8 * sgl.prefill_graph_buckets(chunked_prefill_size) if prefill else 0))
            if mib > 60 * 1024:
                reserved = max(reserved, 10 * 1024)
            fraction = round((mib - reserved) / mib, 3)
        elif family in ("0.5.3", "0.5.4.post2"):
            bs = cuda_graph_max_bs or self.cuda_graph_max_bs(gpu_memory_bytes, tp)
            activation = max(chunked_prefill_size if chunked_prefill_size > 0 else max_prefill_tokens, 2048)
            reserved = 512 + 1.5 * activation + 2 * bs + tp / 8 * 1024
            if mib > 60 * 1024:
                reserved = max(reserved, 10 * 1024)
            fraction = round((mib - reserved) / mib, 3)
        elif family == "0.4.8":
            if mib < 35 * 1024:
                reserved = (2.8 + tp / 10) * 1024
            elif mib < 90 * 1024:
                reserved = (9.5 + tp / 2) * 1024
            elif mib < 160 * 1024:
                reserved = (12 + tp / 2) * 1024
            else:
                reserved = 32 * 1024
            fraction = round((mib - reserved) / mib, 3)
        else:
            fraction = self._tp_fraction(tp)
            if family == "0.4.6" and mib > 81920:
                fraction = (mib - 13 * 1024) / mib
            elif family == "0.4.7":
                if mib > 81920:
                    fraction = 0.88
                if mib > 180000:
                    fraction = 0.79
                elif mib > 96 * 1024:
                    fraction = min(fraction + 48 * 1024 * (1 - fraction) / mib, (mib - 18 * 1024) / mib)
        if fraction <= 0:
            raise InputError(f"SGLang {self.release}'s default memory reserve is more than the GPU's "
                             f"{mib:.0f} MiB: give --mem-fraction-static")
        return fraction

    def _tp_fraction(self, tp: int) -> float:
        """``mem_fraction_static`` by TP alone (up to 0.4.7 at most 80 GiB)."""
        if tp >= 16:
            return 0.79
        if tp >= 8:
            return self.tp8_mem_fraction
        if tp >= 4:
            return 0.85
        return 0.87 if tp >= 2 else 0.88

    def max_running_requests(self, pool_tokens: int, context_len: int) -> int:
        """The default ``--max-running-requests`` for a KV pool of ``pool_tokens`` and the model's context
        length (tokens)."""
        if self.max_running_cap == 4096 and not self.running_slots_spare:
            return sgl.max_running_requests(pool_tokens, context_len)
        estimate = int(pool_tokens / max(1, context_len) * 512)
        slots = max(min(estimate, self.max_running_cap), 2048) - self.running_slots_spare
        return max(1, min(slots, pool_tokens // 2))


@functools.lru_cache(maxsize=64)
def release_defaults(version: str = LATEST_RELEASE) -> ReleaseDefaults:
    """The :class:`ReleaseDefaults` of SGLang ``version`` (text: ``"0.4.6"``, ``"v0.5.6.post1"``): each
    rule as the last read release at or before it has it (module docstring). Raises :class:`InputError`
    for text that is no version, or a release older than :data:`OLDEST_RELEASE`."""
    key = parse_version(version)
    if key < _key(OLDEST_RELEASE):
        raise InputError(f"SGLang {version_text(key)} is older than the releases pdmux has read "
                         f"({OLDEST_RELEASE} to {LATEST_RELEASE})")
    floor, decay = _since(_RATIO_FLOOR_DECAY, key)
    cap, spare = _since(_RUNNING_CAP, key)
    overlap, topk1 = _since(_SPECULATION_OVERLAP, key)
    return ReleaseDefaults(
        release=version_text(key), memory=_since(_MEMORY, key),
        full_reserve_for_ignore_eos=_since(_FULL_RESERVE_FOR_IGNORE_EOS, key),
        retract_steps=_since(_RETRACT_STEPS, key),
        retract_ratio_plus_one=_since(_RETRACT_RATIO_PLUS_ONE, key), min_new_token_ratio=floor,
        new_token_ratio_decay=decay, max_running_cap=cap, running_slots_spare=spare,
        tp8_mem_fraction=_since(_TP8_MEM_FRACTION, key),
        serial_frontend=_since(_SERIAL_FRONTEND, key), prefill_cuda_graph=_since(_PREFILL_CUDA_GRAPH, key),
        reserve_without_graphs=_since(_RESERVE_WITHOUT_GRAPHS, key), speculation_overlap=overlap,
        speculation_overlap_topk1=topk1, speculation_v2_always=_since(_SPECULATION_V2_ALWAYS, key),
        qwen3_moe_bf16_trtllm=_since(_QWEN3_MOE_BF16_TRTLLM, key))


#: SGLang 0.5.23's rules: what every command simulates.
LATEST = release_defaults(LATEST_RELEASE)

__all__ = ["LATEST", "LATEST_RELEASE", "OLDEST_RELEASE", "ReleaseDefaults", "parse_version",
           "release_defaults", "version_text"]
