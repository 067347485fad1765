"""The public GPU measurements shipped in ``profiles/measurements/``, as plain records.

Read by :mod:`pdmux_cli.costmodel.fit` (``benchmarks/fit_efficiency.py`` writes the efficiency files from
them) and :mod:`pdmux_cli.costmodel.accuracy` (``pdmux accuracy``). Sources and licences are in each
folder's README/LICENSE and in every CSV's ``#`` header:

- ``vidur/``: per-layer operator times measured with the sarathi-serve profiler (microsoft/vidur, MIT);
- ``nanoflow/``: bandwidth and GEMM FLOP/s vs SM count, and co-run interference, on an A100
  (efeslab/Nanoflow, Apache-2.0);
- ``aiconfigurator/``: NVIDIA's per-operator tables for SGLang (PyPI aiconfigurator-core 0.12.0,
  Apache-2.0): GEMMs, prefill (context) and decode (generation) attention, SGLang's custom all-reduce,
  SGLang's fused MoE (one layer's routed experts);
- ``vidur/network_*_all_reduce.csv``: NCCL all-reduce times on one DGX H100 / A100 node (Vidur);
- ``sglang_greenctx/``: SGLang's green-context prefill and decode latency tables per SM count (H800,
  A100, RTX 3090), offline fits by the PD-multiplexing authors (sgl-project/sglang commit 56f74d24,
  ``python/sglang/srt/multiplex/predictor.py``, Apache-2.0).

Times are converted to seconds. Stdlib only.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..util.errors import InputError
from ..catalog.profile_files import measurements_dir

#: aiconfigurator's GPU names -> pdmux GPU profile keys.
AIC_GPUS = {
    "h100_sxm": "h100-sxm",
    "h200_sxm": "h200-sxm",
    "b200_sxm": "b200",
    "a100_sxm": "a100-sxm-80gb",
    "gb200": "gb200",
    "l40s": "l40s",
    "rtx_pro_6000_server": "rtx-pro-6000",
    "b300_sxm": "b300",
    "gb300": "gb300",
}


def _rows(path: Path) -> Iterator[dict[str, str]]:
    try:
        with path.open(newline="", encoding="utf-8") as f:
            yield from csv.DictReader(line for line in f if not line.startswith("#"))
    except OSError as exc:
        raise InputError(f"measurement file {path}: cannot be read ({exc})") from None


@dataclass(frozen=True)
class VidurLayer:
    """One Vidur row: a model's per-layer operator times (s) at ``tokens`` tokens and TP degree ``tp``.

    Shapes are the model's (``hidden``, ``intermediate``, ``heads``, ``kv_heads``), unsharded. ``ops``:
    operator -> seconds (``attn_pre_proj`` QKV GEMM, ``attn_post_proj`` O GEMM, ``mlp_up_proj``
    gate+up GEMM, ``mlp_down_proj``, ``input_layernorm``, ``post_attention_layernorm``, ``attn_rope``,
    ``mlp_act``, ``add``, ``emb``).
    """

    gpu: str
    model: str
    tp: int
    tokens: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    ops: dict[str, float]

    #: Vidur's GEMM operators and the element-wise ones.
    GEMMS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
    ELEMENTWISE = ("input_layernorm", "post_attention_layernorm", "attn_rope", "mlp_act", "add")

    def gemm_shapes(self) -> dict[str, tuple[int, int]]:
        """Operator -> ``(k, n)`` of its weight, sharded by ``tp`` (Megatron column/row split)."""
        h, i, d = self.hidden, self.intermediate, self.hidden // self.heads
        t = self.tp
        return {
            "attn_pre_proj": (h, (self.heads + 2 * self.kv_heads) * d // t),
            "attn_post_proj": (self.heads * d // t, h),
            "mlp_up_proj": (h, 2 * i // t),
            "mlp_down_proj": (i // t, h),
        }


def vidur_layers() -> list[VidurLayer]:
    """Every row of ``profiles/measurements/vidur/*.csv``."""
    out = []
    for path in sorted((measurements_dir() / "vidur").glob("*.csv")):
        if path.name.startswith("network_"):
            continue
        gpu = path.stem.split("_", 1)[0]
        for r in _rows(path):
            ops = {k[:-3]: float(v) * 1e-3 for k, v in r.items() if k.endswith("_ms")}
            out.append(VidurLayer(gpu, r["model"], int(r["tp"]), int(r["num_tokens"]), int(r["n_embd"]),
                                  int(r["n_expanded_embd"]), int(r["n_head"]), int(r["n_kv_head"]), ops))
    return out


def nanoflow_bandwidth() -> list[tuple[int, int, int, float]]:
    """``(sms, batch, seqlen, bytes/s)`` of NanoFlow's A100 decode-attention SM sweep (108 SMs)."""
    path = measurements_dir() / "nanoflow" / "a100_decode_attention_bw_vs_sms.csv"
    return [(int(r["sms"]), int(r["batch_size"]), int(r["seqlen"]), float(r["bytes_per_s"]))
            for r in _rows(path)]


def nanoflow_gemm() -> list[tuple[int, int, int, int, float]]:
    """``(sms, m, n, k, FLOP/s)`` of NanoFlow's A100 GEMM SM sweep."""
    path = measurements_dir() / "nanoflow" / "a100_gemm_tflops_vs_sms.csv"
    return [(int(r["sms"]), int(r["m"]), int(r["n"]), int(r["k"]), float(r["tflops"]) * 1e12)
            for r in _rows(path)]


def nanoflow_interference() -> list[tuple[float, float]]:
    """``(R, P)``: a memory-bound kernel on share ``R`` of the A100's SMs next to a GEMM on the rest
    reaches ``P`` of its whole-GPU solo throughput."""
    path = measurements_dir() / "nanoflow" / "a100_gemv_interference.csv"
    return [(float(r["R"]), float(r["P"])) for r in _rows(path) if r.get("R")]


@dataclass(frozen=True)
class AicGemm:
    """One aiconfigurator GEMM point: ``[m, k] x [k, n]`` in ``dtype`` took ``seconds``."""

    gpu: str
    dtype: str
    m: int
    n: int
    k: int
    seconds: float


@dataclass(frozen=True)
class AicAttention:
    """One aiconfigurator attention point (one layer): ``batch`` sequences of ``length`` tokens
    (prefill: prompt length; decode: KV length), heads, KV heads, head_dim, KV dtype, ``seconds``.
    ``cached_in_l2``: decode points whose whole KV fits in L2 (not an HBM measurement)."""

    gpu: str
    kind: str
    batch: int
    length: int
    heads: int
    kv_heads: int
    head_dim: int
    kv_dtype: str
    seconds: float
    cached_in_l2: bool = False


#: pdmux GPU key -> the framework table its decode attention is fitted to when not SGLang's own, and why.
#: aiconfigurator's SGLang collector times SGLang's FlashAttentionBackend on every GPU; SGLang 0.5.23 serves
#: MHA/GQA models on an A100 with FlashInfer (``srt/arg_groups/model_override_base.py``, default attention
#: backend: fa3 on Hopper, trtllm_mha on SM100, else flashinfer). vLLM's A100 table (FlashAttention-2's
#: paged decode) is the measured kernel closest in kind: it reads a large KV cache at about 0.82 of HBM,
#: as NanoFlow's A100 decode kernel does (0.86), where the FlashAttentionBackend table reaches about 0.60.
DECODE_ATTENTION_TABLE = {"a100-sxm-80gb": ("vllm",
                                            ("vLLM 0.14.0 table (FA2 paged decode; SGLang's A100 default is "
                                                    "FlashInfer, its SGLang table times "
                                                    "FlashAttentionBackend)"))}


def decode_attention_table(gpu_key: str) -> str:
    """The aiconfigurator framework table (``"sglang"`` or ``"vllm"``) decode attention of ``gpu_key`` is
    fitted to (:data:`DECODE_ATTENTION_TABLE`)."""
    return DECODE_ATTENTION_TABLE.get(gpu_key, ("sglang", ""))[0]


#: head_dim of every attention point extracted (the files leave the column out).
AIC_HEAD_DIM = 128


def aic_gpus() -> list[str]:
    """pdmux GPU keys with aiconfigurator tables shipped here."""
    folder = measurements_dir() / "aiconfigurator"
    return [key for name, key in AIC_GPUS.items() if (folder / f"{name}_gemm.csv").exists()]


def _aic_name(gpu_key: str) -> str:
    for name, key in AIC_GPUS.items():
        if key == gpu_key:
            return name
    raise InputError(f"no aiconfigurator measurements for GPU {gpu_key!r}")


def aic_gemms(gpu_key: str, dtype: str = "bf16") -> list[AicGemm]:
    """The GEMM points of one GPU in ``dtype``: ``bf16``, ``fp8`` (per-tensor scaled) or ``fp8_block``
    (SGLang's block-scaled w8a8 fp8: 128x128 weight blocks, per-token-group activation scales, the
    activation quantization included); empty where the GPU's table has none."""
    path = measurements_dir() / "aiconfigurator" / f"{_aic_name(gpu_key)}_gemm.csv"
    return [AicGemm(gpu_key, r["dtype"], int(r["m"]), int(r["n"]), int(r["k"]), float(r["latency_ms"]) * 1e-3)
            for r in _rows(path) if r["dtype"] == dtype]


def aic_attention(gpu_key: str, kind: str, kv_dtype: str = "bf16",
                  backend: str = "sglang") -> list[AicAttention]:
    """Prefill (``kind="prefill"``, context attention) or decode (``"decode"``, generation attention)
    points of one GPU with a ``kv_dtype`` KV cache. ``backend``: ``"sglang"`` (every GPU's table) or
    another framework's extra table where one is shipped (``"vllm"``: A100 decode, see
    ``benchmarks/aic_extract.py`` ``EXTRA_GENERATION``); empty when there is none."""
    table = {"prefill": "context_attention", "decode": "generation_attention"}[kind]
    suffix = "" if backend == "sglang" else f"_{backend}"
    path = measurements_dir() / "aiconfigurator" / f"{_aic_name(gpu_key)}_{table}{suffix}.csv"
    if suffix and not path.exists():
        return []
    out = []
    for r in _rows(path):
        if r["kv_dtype"] != kv_dtype or (kind == "prefill" and r.get("attn_dtype", "bf16") != "bf16"):
            continue
        length = int(r["isl"] if kind == "prefill" else r["kv_len"])
        cached = str(r.get("kv_fits_l2", "")).strip().lower() in ("true", "1")
        out.append(AicAttention(gpu_key, kind, int(r["batch"]), length, int(r["num_heads"]),
                                int(r["num_kv_heads"]), int(r.get("head_dim") or AIC_HEAD_DIM), r["kv_dtype"],
                                float(r["latency_ms"]) * 1e-3, cached))
    return out


@dataclass(frozen=True)
class AllReduce:
    """One measured all-reduce: ``nbytes`` bytes (each GPU's buffer) summed over ``ranks`` GPUs of one
    server took ``seconds``. ``kernel``: ``"nccl"`` (Vidur: ``torch.distributed.all_reduce``, eager),
    ``"custom-graph"`` / ``"custom-eager"`` (aiconfigurator: SGLang's custom all-reduce, in a CUDA graph or
    launched eagerly)."""

    gpu: str
    kernel: str
    ranks: int
    nbytes: int
    seconds: float


def vidur_allreduce() -> list[AllReduce]:
    """Every row of ``profiles/measurements/vidur/network_<gpu>_all_reduce.csv`` (NCCL, one node)."""
    out = []
    for path in sorted((measurements_dir() / "vidur").glob("network_*_all_reduce.csv")):
        gpu = path.stem.removeprefix("network_").removesuffix("_all_reduce")
        out += [AllReduce(gpu, "nccl", int(r["num_gpus"]), int(r["size_bytes"]), float(r["median_ms"]) * 1e-3)
                for r in _rows(path)]
    return out


def aic_allreduce(gpu_key: str) -> list[AllReduce]:
    """SGLang's custom all-reduce on one GPU kind (aiconfigurator; bf16 buffers of ``bytes`` bytes)."""
    path = measurements_dir() / "aiconfigurator" / f"{_aic_name(gpu_key)}_allreduce.csv"
    kinds = {"SGLang_CustomAllReduce_graph": "custom-graph", "SGLang_CustomAllReduce_eager": "custom-eager"}
    return [AllReduce(gpu_key, kinds[r["kernel"]], int(r["num_gpus"]), int(r["bytes"]),
                      float(r["latency_ms"]) * 1e-3)
            for r in _rows(path) if r["kernel"] in kinds]


#: The routed-expert shapes of aiconfigurator's MoE table as extracted (``benchmarks/aic_extract.py``
#: ``MOE_MODELS``): model -> ``(hidden_size, moe_intermediate_size, routed experts, top-k, grouped routing)``,
#: each the model's config.json (``profiles/models/``; a test checks them). Grouped routing (DeepSeek-V3:
#: top-4 of 8 expert groups) is kept at 1 token only.
AIC_MOE_MODELS = {"DeepSeek-V3": (7168, 2048, 256, 8, True), "Qwen3-235B-A22B": (4096, 1536, 128, 8, False),
                  "Qwen3-30B-A3B": (2048, 768, 128, 8, False), "Mixtral-8x7B": (4096, 14336, 8, 2, False),
                  "gpt-oss-120b": (2880, 2880, 128, 4, False), "gpt-oss-20b": (2880, 2880, 32, 4, False)}

#: Bytes per routed-expert weight of each MoE dtype of the table (MXFP4: 4 bits plus an 8-bit scale per 32).
MOE_WEIGHT_BYTES = {"bf16": 2.0, "fp8_block": 1.0, "w4a16_mxfp4": 4.25 / 8, "w4a8_mxfp4_mxfp8": 4.25 / 8}


@dataclass(frozen=True)
class AicMoe:
    """One aiconfigurator MoE point: one layer's routed experts of ``model`` (``hidden``, ``inter`` =
    moe_intermediate_size before TP, ``experts``, ``top_k``) on one GPU, each expert ``inter / tp`` wide
    (EP 1), for ``tokens`` tokens with the collector's balanced routing, run by SGLang's ``kernel``
    (``"triton"``: Triton ``fused_moe``; ``"flashinfer_trtllm"``: FlashInfer's TRT-LLM-gen fused MoE) in
    ``dtype`` (:data:`MOE_WEIGHT_BYTES`), took ``seconds`` (routing, both grouped GEMMs, activation, combine).
    ``weights_fit_l2``: the touched experts' weights are smaller than the GPU's L2 (repeated calls may read
    them from L2)."""

    gpu: str
    kernel: str
    dtype: str
    model: str
    hidden: int
    inter: int
    experts: int
    top_k: int
    tp: int
    tokens: int
    seconds: float
    weights_fit_l2: bool = False

    @property
    def width(self) -> int:
        """One expert's intermediate width on the GPU: ``inter / tp``."""
        return self.inter // self.tp

    @property
    def touched(self) -> int:
        """Experts the balanced routing touches: ``min(experts, tokens x top_k)``."""
        return min(self.experts, self.tokens * self.top_k)


def aic_moe(gpu_key: str) -> list[AicMoe]:
    """The MoE points of one GPU (``<gpu>_moe.csv``); empty where none is shipped."""
    path = measurements_dir() / "aiconfigurator" / f"{_aic_name(gpu_key)}_moe.csv"
    if not path.exists():
        return []
    out = []
    for r in _rows(path):
        shape = AIC_MOE_MODELS.get(r["model"])
        if shape is None or r["dtype"] not in MOE_WEIGHT_BYTES:
            raise InputError(f"measurement file {path}: unknown MoE model {r['model']!r} or dtype "
                             f"{r['dtype']!r}")
        h, inter, experts, top_k, _ = shape
        out.append(AicMoe(gpu_key, r["kernel"], r["dtype"], r["model"], h, inter, experts, top_k,
                          int(r["tp"]), int(r["tokens"]), float(r["latency_ms"]) * 1e-3,
                          str(r.get("weights_fit_l2", "")).strip() == "1"))
    return out


# ---------------------------------------------------------------------------------------------------
# SGLang's green-context latency tables (profiles/measurements/sglang_greenctx/)

#: Roles of the green-context tables: ``fit`` (the partition fit uses them), ``out-of-sample`` (kept out
#: of every fit, checked by ``pdmux accuracy``), ``unused`` (extracted only).
GREENCTX_ROLES = ("fit", "out-of-sample", "unused")


@dataclass(frozen=True)
class GreenCtxPrefill:
    """One row of ``sglang_greenctx/prefill.csv``: the prefill latency fit of ``table`` (``"H800"``,
    ``"A100"``, ``"A100_8B"``, ``"RTX3090"``) on ``sms`` of the GPU's ``total_sms`` SMs, valid for
    ``tokens_above < n <= tokens_upto`` new tokens (``tokens_upto`` 0: no bound).

    ``a, b, c, d`` (ms): ``latency_ms = a (n/1024)^2 + b (n/1024)(prefix/1024) + c (n/1024) + d`` with
    ``n`` raised to 512 as SGLang's ``Predictor.predict_prefill_latency`` does. ``gpu``: the pdmux GPU
    profile key; ``role``: one of :data:`GREENCTX_ROLES`; ``source_name``: the table's name in the file.
    """

    table: str
    gpu: str
    total_sms: int
    role: str
    source_name: str
    tokens_above: int
    tokens_upto: int
    sms: int
    a: float
    b: float
    c: float
    d: float

    def covers(self, tokens: int) -> bool:
        """Whether the file picks this row's table for a prefill of ``tokens`` new tokens."""
        return tokens > self.tokens_above and (self.tokens_upto == 0 or tokens <= self.tokens_upto)

    def latency_s(self, tokens: int, prefix: int = 0) -> float:
        """Seconds the table gives a prefill of ``tokens`` new tokens over ``prefix`` cached ones."""
        x = max(tokens, 512) / 1024.0
        return (self.a * x * x + self.b * x * prefix / 1024.0 + self.c * x + self.d) * 1e-3


@dataclass(frozen=True)
class GreenCtxDecode:
    """One row of ``sglang_greenctx/decode.csv``: the decode-step latency fit of ``table`` on ``sms``
    SMs, valid for ``prefix_above < prefix <= prefix_upto`` (``prefix_upto`` 0: no bound).

    ``a, b, c`` (ms): ``latency_ms = a (prefix/1024)^prefix_power + b x batch + c`` (``prefix_power`` 2
    for the H800 tables, as the file's ``predict_decode_latency_H800`` squares it, else 1); ``prefix``:
    the batch's KV tokens (the file's name; the likely reading, not stated there).
    """

    table: str
    gpu: str
    total_sms: int
    role: str
    source_name: str
    prefix_power: int
    prefix_above: int
    prefix_upto: int
    sms: int
    a: float
    b: float
    c: float

    def covers(self, prefix: int) -> bool:
        """Whether the file picks this row's table for a batch with ``prefix`` KV tokens."""
        return prefix > self.prefix_above and (self.prefix_upto == 0 or prefix <= self.prefix_upto)

    def latency_s(self, batch: int, prefix: int) -> float:
        """Seconds the table gives a decode step of ``batch`` requests holding ``prefix`` KV tokens."""
        return (self.a * (prefix / 1024.0) ** self.prefix_power + self.b * batch + self.c) * 1e-3


def _greenctx_common(r: dict[str, str]) -> dict:
    role = r["role"]
    if role not in GREENCTX_ROLES:
        raise InputError(f"sglang_greenctx: role must be one of {', '.join(GREENCTX_ROLES)}, got {role!r}")
    return {"table": r["table"], "gpu": r["gpu"], "total_sms": int(r["total_sms"]), "role": role,
            "source_name": r["source_name"], "sms": int(r["sms"])}


def greenctx_prefill() -> list[GreenCtxPrefill]:
    """Every row of ``profiles/measurements/sglang_greenctx/prefill.csv`` (every table, every role)."""
    path = measurements_dir() / "sglang_greenctx" / "prefill.csv"
    return [GreenCtxPrefill(**_greenctx_common(r), tokens_above=int(r["tokens_above"]),
                            tokens_upto=int(r["tokens_upto"]), a=float(r["a_ms"]), b=float(r["b_ms"]),
                            c=float(r["c_ms"]), d=float(r["d_ms"])) for r in _rows(path)]


def greenctx_decode() -> list[GreenCtxDecode]:
    """Every row of ``profiles/measurements/sglang_greenctx/decode.csv`` (every table, every role)."""
    path = measurements_dir() / "sglang_greenctx" / "decode.csv"
    return [GreenCtxDecode(**_greenctx_common(r), prefix_power=int(r["prefix_power"]),
                           prefix_above=int(r["prefix_above"]), prefix_upto=int(r["prefix_upto"]),
                           a=float(r["a_ms"]), b=float(r["b_ms"]), c=float(r["c_ms"])) for r in _rows(path)]
