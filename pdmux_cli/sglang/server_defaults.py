"""SGLang 0.5.23's server-argument defaults that depend on the GPU, and the KV pool they give.

Pure functions; the rules (in our words) of SGLang 0.5.23's own code, read from the released wheel:

- ``srt/arg_groups/memory_hook.py`` ``handle_gpu_memory_settings``: the default
  ``--chunked-prefill-size`` and decode CUDA-graph ``max_bs`` by GPU memory, and
  ``mem_fraction_static = round((M - reserved) / M, 3)`` with
  ``reserved = 512 + 1.5 x activation tokens + 128 x TP/8 x 8 + 2 x max_bs + 8 x prefill-graph buckets`` MiB,
  at least 10240 MiB on GPUs over 60 GiB (``M``: ``nvidia-smi`` memory.total, MiB);
- ``srt/arg_groups/cuda_graph_hook.py`` ``generate_prefill_cuda_graph_batch_sizes``: the prefill
  graph's token buckets (none when chunked prefill is off); which prefill batches the graph replays
  (:func:`prefill_cuda_graph_default`, :func:`prefill_graph_max_tokens`, :func:`prefill_replays_from_graph`);
- ``srt/mem_cache/kv_cache_configurator.py`` ``_profile_available_bytes`` and
  ``srt/model_executor/pool_configurator.py`` ``calculate_pool_sizes``: KV pool bytes
  ``= free before weights x mem_fraction_static - weights - other allocations``, tokens ``= bytes // cell``
  with ``cell`` the KV bytes of one token over all layers;
- ``kv_cache_configurator.py`` ``resolve_max_num_reqs``: ``max_running_requests =
  min(clamp(int(tokens / context_len x 512), 2048, 4096), tokens // 2)``;
- ``srt/arg_groups/fields/schedule.py``: ``--max-prefill-tokens`` 16384, ``--schedule-conservativeness`` 1.0;
  ``srt/environ.py``: ``SGLANG_INIT_NEW_TOKEN_RATIO`` 0.7, ``SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR`` 0.14,
  ``SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS`` 600, ``SGLANG_RETRACT_DECODE_STEPS`` 20,
  ``SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION`` 4096.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..util.errors import InputError

MIB = 1024**2
GIB = 1024**3

#: SGLang's ``--max-prefill-tokens`` default (tokens of one prefill batch; chunking off: every request
#: of a batch but the first must fit under it).
MAX_PREFILL_TOKENS = 16384
#: ``SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION``: admission counts at most this many future tokens a request.
CLIP_MAX_NEW_TOKENS = 4096
#: ``new_token_ratio``: start, floor (start x 0.14) and steps to decay from one to the other.
INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO = INIT_NEW_TOKEN_RATIO * 0.14
NEW_TOKEN_RATIO_DECAY = (INIT_NEW_TOKEN_RATIO - MIN_NEW_TOKEN_RATIO) / 600
#: ``SGLANG_RETRACT_DECODE_STEPS``: after a retraction the ratio is reset from the kept requests as
#: ``(outputs + 20 x kept) / (max_new_tokens + 1)``.
RETRACT_DECODE_STEPS = 20

#: Free GPU memory before the weights load, below ``nvidia-smi``'s total: the driver's reserve (total
#: less torch's ``total_memory``, ~470 MiB on an H100, see the GPU profile's memory_note) plus the CUDA
#: context (~0.5 GiB). An estimate: SGLang measures it at start-up.
CONTEXT_RESERVE_BYTES = 1 * GIB


def default_chunked_prefill_size(gpu_memory_bytes: float, tp: int = 1) -> int:
    """SGLang's ``--chunked-prefill-size`` when not given, by GPU memory (tokens)."""
    mib = gpu_memory_bytes / MIB
    if mib < 20 * 1024:
        return 2048
    if mib < 60 * 1024:
        return 4096
    if mib < 160 * 1024:
        return 8192
    return 16384


def default_cuda_graph_max_bs(gpu_memory_bytes: float, tp: int = 1) -> int:
    """The largest decode batch SGLang captures a CUDA graph for when not given (requests)."""
    mib = gpu_memory_bytes / MIB
    if mib < 20 * 1024:
        return 8
    if mib < 35 * 1024:
        return 48 if tp < 4 else 160
    if mib < 60 * 1024:
        return 32 if tp < 4 else 160
    if mib < 160 * 1024:
        return 256 if tp < 4 else 512
    return 512


def prefill_graph_buckets(chunked_prefill_size: int) -> int:
    """Token buckets of SGLang's prefill CUDA graph up to ``chunked_prefill_size`` (0 when chunking is
    off): 4..32 by 4, 48..256 by 16, 288..512 by 32, 576..1024 by 64, 1280..4096 by 256, then by 512."""
    if chunked_prefill_size <= 0:
        return 0
    sizes = [*range(4, 33, 4), *range(48, 257, 16), *range(288, 513, 32), *range(576, 1025, 64),
             *range(1280, 4097, 256), *range(4608, chunked_prefill_size + 1, 512)]
    return sum(1 for s in sizes if s <= chunked_prefill_size)


#: The largest prefill batch SGLang's prefill CUDA graph takes with an MLA attention backend, tokens
#: (``srt/arg_groups/memory_hook.py``: ``max_bs = min(8192, chunked_prefill_size)``; other models take up to
#: the chunk size).
MLA_PREFILL_GRAPH_MAX_TOKENS = 8192
#: The architecture whose prefill CUDA graph SGLang 0.5.23 turns off on SM100, where it picks the
#: ``trtllm_mla`` attention backend (``srt/arg_groups/model_overrides/deepseek_v2.py``; a captured prefill
#: would fall back to FlashAttention: ``cuda_graph_hook.py``
#: ``disable_prefill_cuda_graph_for_deepseek_trtllm_mla``).
EAGER_PREFILL_ON_SM100 = frozenset({"DeepseekV3ForCausalLM"})


def prefill_cuda_graph_default(architectures: tuple[str, ...], compute_capability: tuple[int, int]) -> bool:
    """Whether SGLang 0.5.23 replays prefill batches from its prefill CUDA graph by default: yes on CUDA
    (``srt/model_executor/cuda_graph_config.py`` ``default_prefill_backend``: the ``breakable`` backend),
    except for :data:`EAGER_PREFILL_ON_SM100` on compute capability 10.x. Earlier releases ran prefill
    eagerly unless ``--enable-piecewise-cuda-graph`` was given (0.5.6.post1 ``server_args.py``: default
    off). Which batches it takes: :func:`prefill_graph_max_tokens`; pdmux's split prefill and
    ``--enable-mixed-chunk``'s mixed batches never (``srt/model_executor/model_runner.py``: split prefill
    stays on the model runner's own path, the runner refuses mixed batches)."""
    arch = architectures[0] if architectures else ""
    return not (compute_capability[0] == 10 and arch in EAGER_PREFILL_ON_SM100)


def prefill_graph_max_tokens(chunked_prefill_size: int, mla: bool) -> int:
    """The largest prefill batch (tokens) SGLang's prefill CUDA graph replays: the chunk size, at most
    :data:`MLA_PREFILL_GRAPH_MAX_TOKENS` for an MLA model; 0 (none) with chunking off."""
    if chunked_prefill_size <= 0:
        return 0
    return min(chunked_prefill_size, MLA_PREFILL_GRAPH_MAX_TOKENS) if mla else chunked_prefill_size


def prefill_replays_from_graph(graph_on: bool, tokens: int, chunked_prefill_size: int, mla: bool,
                               mixed: bool = False) -> bool:
    """Whether SGLang replays a prefill batch of ``tokens`` new tokens from its prefill CUDA graph:
    the graph is on (``graph_on``: :func:`prefill_cuda_graph_default` or the server's flag), the batch is
    not mixed with decode rows, and it fits :func:`prefill_graph_max_tokens`."""
    return graph_on and not mixed and tokens <= prefill_graph_max_tokens(chunked_prefill_size, mla)


def mem_fraction_static(gpu_memory_bytes: float, chunked_prefill_size: int, tp: int = 1,
                        max_prefill_tokens: int = MAX_PREFILL_TOKENS,
                        cuda_graph_max_bs: int | None = None, graphs: bool = True) -> float:
    """SGLang's default ``mem_fraction_static`` (0-1) for a GPU of ``gpu_memory_bytes`` (nvidia-smi's
    total) and a chunk size (``-1``: chunking off, as pdmux requires). H100 80GB: 0.83 at 8192, 0.685
    at -1. ``graphs`` False (``--disable-cuda-graph``): no reserve for the decode and prefill graphs
    (``arg_groups/memory_hook.py`` counts them only when captured): 0.841 and 0.691 there. Raises
    :class:`InputError` when the reserve leaves nothing (a GPU of a few GB)."""
    mib = gpu_memory_bytes / MIB
    activation = max(chunked_prefill_size, 2048) if chunked_prefill_size > 0 else max(
        max_prefill_tokens, 2048)
    max_bs = default_cuda_graph_max_bs(gpu_memory_bytes,
                                       tp) if cuda_graph_max_bs is None else cuda_graph_max_bs
    if not graphs:
        max_bs = 0
    reserved = (512 + 1.5 * activation + tp / 8 * 1024 + 2 * max_bs + 8
                * (prefill_graph_buckets(chunked_prefill_size) if graphs else 0))
    if mib > 60 * 1024:
        reserved = max(reserved, 10240)
    fraction = round((mib - reserved) / mib, 3)
    if fraction <= 0:
        # SGLang's --chunked-prefill-size is written as SGLang's flag; pdmux's options as parameters
        chunking = (f"--chunked-prefill-size {chunked_prefill_size}" if chunked_prefill_size > 0
                    else "chunking off")
        lever, param = (("smaller chunks", "chunk_sizes") if chunked_prefill_size > 0
                        else ("a smaller {flag.max_prefill_tokens}", "max_prefill_tokens"))
        graphs = ""
        if cuda_graph_max_bs is not None and 2 * max_bs >= mib - (reserved - 2 * max_bs):
            graphs = (f", of which {2 * max_bs:.0f} MiB for {{flag.cuda_graph_max_bs}} {max_bs} at 2 MiB a "
                      "batch size")
            lever, param = ("a smaller {flag.cuda_graph_max_bs} (SGLang's default here: {default_bs})",
                            "cuda_graph_max_bs")
        raise InputError("SGLang's default memory reserve with {chunking} ({reserved:.0f} MiB" + graphs
                         + ") is more than the GPU's {mib:.0f} MiB: give " + lever
                         + ", or {flag.mem_fraction_static}", param=param,
                         values={"chunking": chunking, "reserved": reserved, "mib": mib,
                                 "default_bs": default_cuda_graph_max_bs(gpu_memory_bytes, tp)})
    return fraction


@dataclass(frozen=True)
class KvPool:
    """SGLang's KV pool: ``tokens`` it holds, ``mem_fraction_static`` used, bytes of KV and weights."""

    tokens: int
    mem_fraction_static: float
    kv_bytes: float
    weight_bytes: float


def kv_pool(gpu_memory_bytes: float, weight_bytes: float, kv_bytes_per_token: float,
            mem_fraction: float) -> KvPool:
    """The KV pool SGLang sizes: ``(free before weights) x mem_fraction - weights`` bytes, free before
    weights being the GPU's memory less :data:`CONTEXT_RESERVE_BYTES`; ``// kv_bytes_per_token``.
    Raises :class:`InputError` when the weights leave no KV memory."""
    free = (gpu_memory_bytes - CONTEXT_RESERVE_BYTES) * mem_fraction - weight_bytes
    tokens = int(free // kv_bytes_per_token) if free > 0 else 0
    if tokens < 1:
        raise InputError(
            f"{weight_bytes / 2**30:.1f} GiB of weights leave no KV cache in {gpu_memory_bytes / 2**30:.1f} "
            f"GiB at mem_fraction_static {mem_fraction:g} (use fewer bytes per weight, a bigger GPU, or more "
            "GPUs)")
    return KvPool(tokens, mem_fraction, free, weight_bytes)


def max_running_requests(pool_tokens: int, context_len: int) -> int:
    """SGLang's default ``--max-running-requests`` for a pool of ``pool_tokens`` and the model's context
    length (tokens): ``min(clamp(int(pool / context x 512), 2048, 4096), pool // 2)``."""
    estimate = int(pool_tokens / max(1, context_len) * 512)
    return max(1, min(max(min(estimate, 4096), 2048), pool_tokens // 2))
