"""Extract NVIDIA's measured per-operator tables from aiconfigurator-core into compact CSVs.

aiconfigurator-core (PyPI, Apache-2.0, Copyright NVIDIA CORPORATION & AFFILIATES) ships the
performance database of NVIDIA's AIConfigurator: per-GPU, per-framework, per-version tables of
kernel latencies measured on real GPUs. Inside the installed package they live at

    aiconfigurator_core/systems/data/<gpu>/<op family>/<framework>/<version>/<table>.parquet

(e.g. ``h100_sxm/gemm/sglang/0.5.14/gemm_perf.parquet``); ``latency`` is in milliseconds.
This script writes, for the SGLang backend (TensorRT-LLM only where a GPU has no SGLang table, and
the header says so), per GPU:

- ``<gpu>_gemm.csv``: bf16 GEMM at 40 (n, k) pairs, per-tensor fp8 and block-scaled fp8 (``fp8_block``:
  SGLang's w8a8 block fp8, 128x128 weight blocks, per-token-group activation scales; where measured)
  at 6, 23 m values;
- ``<gpu>_context_attention.csv``: prefill attention, head_dim 128, no sliding window, 6 head pairs,
  batch 1..64, every isl, bf16 KV and fp8 KV;
- ``<gpu>_generation_attention.csv``: decode attention, head_dim 128, no sliding window, 5 head pairs,
  batch 1..512, kv_len at powers of two, with ``kv_fits_l2`` (KV smaller than the GPU's L2);
- ``<gpu>_allreduce.csv``: the framework's custom all-reduce (a few hundred rows at most);
- ``<gpu>_moe.csv``: SGLang's fused MoE (routed experts of one layer) at the routed-expert shapes of the MoE
  models pdmux ships (MOE_MODELS), TP 1/2/4/8, EP 1, 1..4096 tokens, balanced routing, with
  ``weights_fit_l2`` (the touched experts' weights smaller than the GPU's L2);

plus ``README.md``. The files ship inside pdmux's wheel, so they are thinned to about 185 KB per GPU
(GPU_BUDGET; the script says when a GPU goes over): derived columns a reader can recompute from the
header's formula (attention TFLOP/s, KV bytes and GB/s) are not stored and latencies keep 5 digits.
The version read is the framework version AIConfigurator itself queries for that GPU
(``systems/query_versions.yaml``), or the newest one holding the table. Each CSV starts with '#'
lines: source, the file inside the package, GPU, backend and version, licence, formulas, thinning.

Usage: ``pip install aiconfigurator-core==0.12.0 && python benchmarks/aic_extract.py [--out DIR]``.
Needs only the standard library plus pyarrow and pyyaml, which aiconfigurator-core depends on.
"""

from __future__ import annotations

import argparse
import csv
import importlib.metadata
import importlib.util
import io
import math
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "profiles" / "measurements" / "aiconfigurator"
PACKAGE = "aiconfigurator_core"
DIST = "aiconfigurator-core"
TESTED_VERSION = "0.12.0"

#: GPUs extracted by default (aiconfigurator's names); h20 has no data in 0.12.0.
DEFAULT_GPUS = ("h100_sxm", "h200_sxm", "b200_sxm", "a100_sxm", "gb200", "l40s", "rtx_pro_6000_server",
                "b300_sxm", "gb300")
#: aiconfigurator system name -> pdmux profile key (profiles/gpus/<key>.yaml).
PDMUX_KEY = {"h100_sxm": "h100-sxm", "h200_sxm": "h200-sxm", "b200_sxm": "b200", "a100_sxm": "a100-sxm-80gb",
             "gb200": "gb200", "gb300": "gb300", "b300_sxm": "b300", "l40s": "l40s",
             "rtx_pro_6000_server": "rtx-pro-6000", "h100_pcie": "h100-pcie", "a100_pcie": "a100-pcie-80gb",
             "l4": "l4", "a30": "a30"}
BACKENDS = ("sglang", "trtllm")  # preference order

#: (n, k) bf16 GEMM pairs kept: the square grid {1024, 2048, 4096, 8192, 16384}^2 (25 pairs) plus 15
#: shapes of 7B-70B dense models' projections at TP 1-8 (Llama-3 8B/70B, Qwen2.5 7B/14B/32B),
#: mapped onto the measured grid (which has no 14336/28672: 16384 is the largest value below 51200).
GEMM_SQUARE = (1024, 2048, 4096, 8192, 16384)
GEMM_EXTRA = ((3072, 4096), (6144, 4096), (7168, 4096), (12288, 4096), (4096, 3072), (4096, 7168),
              (4096, 12288), (7168, 8192), (10240, 8192), (8192, 3584), (8192, 7168), (3584, 3584),
              (5120, 5120), (7168, 5120), (5120, 3584))
GEMM_PAIRS = tuple((n, k) for n in GEMM_SQUARE for k in GEMM_SQUARE) + GEMM_EXTRA
#: per-tensor fp8 is kept for these (n, k) only, each mapped to the nearest measured pair
#: (28672x8192, Llama-3-70B's fused gate/up at TP 1, becomes 16384x8192 on the 0.12.0 grid).
FP8_WANTED = ((4096, 4096), (12288, 4096), (4096, 12288), (16384, 4096), (8192, 8192), (28672, 8192))
#: fp8 = per-tensor scaled fp8 (sgl-kernel fp8_scaled_mm after a per-token quantization); fp8_block =
#: block-scaled fp8 (DeepGEMM gemm_nt_f8f8bf16 after sglang_per_token_group_quant_fp8, group 128): what
#: SGLang 0.5.23 runs for a checkpoint with quantization_config.weight_block_size on Hopper and Blackwell
#: (srt/layers/quantization/fp8_utils.py dispatch_w8a8_block_fp8_linear, DeepGEMM first). aiconfigurator's
#: collector (collector/sglang/collect_gemm.py) times the activation quantization with the GEMM.
GEMM_DTYPES = {"bfloat16": "bf16", "fp8": "fp8", "fp8_block": "fp8_block"}
#: Quantized dtypes kept at the FP8_WANTED shapes only.
FP8_DTYPES = ("fp8", "fp8_block")
#: m (tokens) kept: powers of two 1..32768 plus the 1.5x points 48..3072 (only those the table has).
GEMM_MS = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096,
           8192, 16384, 32768)

#: (num_heads, num_kv_heads) kept for prefill attention (head_dim 128, per GPU): Llama-3-8B at TP 1
#: (32/8), Llama-3-70B at TP 1/4/8 (64/8, 16/2, 8/1), MHA 32/32 (Llama-2-7B) and Qwen2.5-32B (40/8).
CTX_HEADS = ((32, 8), (64, 8), (32, 32), (16, 2), (40, 8), (8, 1))
CTX_BATCHES = (1, 2, 4, 8, 16, 64)
#: KV-cache dtype -> FMHA compute dtypes for prefill, first measured one wins (see extract_context).
CTX_ATTN_PREF = {"bfloat16": ("bfloat16",), "fp8": ("fp8", "bfloat16")}
#: Decode keeps the same heads less 40/8, more batches, and kv_len near powers of two 2..131072.
GEN_HEADS = ((32, 8), (64, 8), (32, 32), (16, 2), (8, 1))
GEN_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
GEN_KV_TARGETS = tuple(2 ** i for i in range(1, 18))  # 2 .. 131072
HEAD_DIM = 128
DTYPE_SHORT = {"bfloat16": "bf16", "float16": "fp16", "fp8": "fp8", "half": "fp16"}
KV_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1}
MIB = 1 << 20
#: L2 size (MiB, as CUDA's l2CacheSize reports it) used when systems/<gpu>.yaml has no L2 entry
#: (none does in 0.12.0). Decode points whose whole KV fits in L2 can read it from cache when the
#: collector replays the same tensors, so they are flagged (kv_fits_l2) for readers to drop.
L2_MIB = {"h100_sxm": 50, "h200_sxm": 60, "b200_sxm": 126.5, "a100_sxm": 40, "gb200": 129.25, "l40s": 96,
          "rtx_pro_6000_server": 128, "b300_sxm": 129.25, "gb300": 129.25}
#: A second decode-attention table for GPUs whose SGLang table measured a kernel SGLang does not run there
#: by default: aiconfigurator's SGLang collector (collector/sglang/collect_attn.py) times SGLang's
#: FlashAttentionBackend on every GPU, but SGLang 0.5.23 picks FlashInfer for MHA/GQA models on an A100
#: (srt/arg_groups/model_override_base.py, the default attention backend: fa3 on Hopper, trtllm_mha on
#: SM100, else flashinfer). vLLM's table there is FlashAttention-2's paged decode (vllm_flash_attn), the
#: measured kernel closest in kind to FlashInfer's; written as <gpu>_generation_attention_vllm.csv.
EXTRA_GENERATION = {"a100_sxm": ("vllm", ("SGLang's A100 default decode kernel is FlashInfer, not the "
                                          "FlashAttentionBackend its SGLang table measured; see "
                                          "EXTRA_GENERATION"))}
#: The MoE models whose routed-expert shapes are extracted from the fused-MoE table: name -> (hidden_size,
#: moe_intermediate_size, routed experts, top-k, grouped routing). Shapes from the models' config.json
#: (pdmux's profiles/models/). DeepSeek-V3 routes with grouped top-k (n_group 8, topk_group 4): the
#: collector's SGLang path (collector/sglang/collect_moe.py, TopK with num_expert_group) passes its balanced
#: logits through the group selection, so past 1 token the experts touched are not min(experts, tokens x
#: top-k).
MOE_MODELS = {"DeepSeek-V3": (7168, 2048, 256, 8, True), "Qwen3-235B-A22B": (4096, 1536, 128, 8, False),
              "Qwen3-30B-A3B": (2048, 768, 128, 8, False), "Mixtral-8x7B": (4096, 14336, 8, 2, False),
              "gpt-oss-120b": (2880, 2880, 128, 4, False), "gpt-oss-20b": (2880, 2880, 32, 4, False)}
#: aiconfigurator moe_dtype values kept: bf16 experts, SGLang's block fp8 (128x128 weight blocks, dynamic
#: per-token-group activation scales), MXFP4 weights with bf16 (w4a16) or MXFP8 (w4a8) activations.
MOE_DTYPES = {"bfloat16": "bf16", "fp8_block": "fp8_block", "w4a16_mxfp4": "w4a16_mxfp4",
              "w4a8_mxfp4_mxfp8": "w4a8_mxfp4_mxfp8"}
#: The dtypes each model's shape keeps: its checkpoint's format and, for the 16-bit models, block fp8 too
#: (more shapes for the fp8 fits); gpt-oss ships MXFP4 experts: MXFP8 activations where the table has them
#: (SGLang 0.5.23's flashinfer_mxfp4 on SM100 quantizes activations to MXFP8 by default,
#: srt/layers/quantization/mxfp4.py), else bf16 activations.
MOE_MODEL_DTYPES = {"gpt-oss-120b": ("w4a8_mxfp4_mxfp8", "w4a16_mxfp4"),
                    "gpt-oss-20b": ("w4a8_mxfp4_mxfp8", "w4a16_mxfp4")}
#: Models kept at 1 token only (their other rows cannot be read as min(experts, tokens x top-k) touched).
MOE_ONE_TOKEN = {name for name, v in MOE_MODELS.items() if v[4]}
#: aiconfigurator kernel_source -> the SGLang MoE runner it timed (short names in the CSV).
MOE_KERNELS = {"sglang_fused_moe_triton": "triton", "sglang_flashinfer_trtllm_moe": "flashinfer_trtllm"}
#: Bytes per weight of each kept dtype (MXFP4: 4 bits plus one 8-bit scale per 32 weights).
MOE_WEIGHT_BYTES = {"bf16": 2.0, "fp8_block": 1.0, "w4a16_mxfp4": 4.25 / 8, "w4a8_mxfp4_mxfp8": 4.25 / 8}
MOE_TP = (1, 2, 4, 8)
MOE_TOKENS = tuple(2 ** i for i in range(13))  # 1 .. 4096
SIZE_WARN = 100_000  # per file
#: bytes, a GPU's CSVs together (fp8_block GEMMs: +6 KB on Hopper and Blackwell; the MoE table: +15-25 KB)
GPU_BUDGET = 185_000


def die(msg: str) -> None:
    print(f"aic_extract: {msg}", file=sys.stderr)
    sys.exit(1)


def locate_package() -> tuple[Path, str]:
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        die(f"{DIST} is not installed; run: pip install {DIST}=={TESTED_VERSION}")
    root = Path(next(iter(spec.submodule_search_locations)))
    try:
        version = importlib.metadata.version(DIST)
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return root, version


def version_key(v: str) -> tuple:
    """Order '0.5.6.post2' < '0.5.9' < '0.5.14', '1.3.0rc20' < '1.3.0'."""
    parts = []
    for seg in re.split(r"[.]", v):
        m = re.match(r"(\d+)(.*)", seg)
        if not m:
            parts.append((-1, seg))
            continue
        num, rest = int(m.group(1)), m.group(2)
        if rest.startswith("rc"):
            parts.append((num, -1, int(rest[2:] or 0)))
        elif rest.startswith("post"):
            parts.append((num, 1, int(rest[4:] or 0)))
        else:
            parts.append((num, 0, 0))
    return tuple(parts)


class Db:
    def __init__(self, root: Path, pkg_version: str) -> None:
        import pyarrow.parquet as pq  # noqa: F401  (fail early with a clear message below)
        import yaml

        self.root = root
        self.pkg_version = pkg_version
        self.systems = root / "systems"
        self.data = self.systems / "data"
        qv = self.systems / "query_versions.yaml"
        self.query_versions = yaml.safe_load(qv.read_text()) if qv.exists() else {}
        ld = self.systems / "attention_lane_defaults.yaml"
        self.lane_defaults = yaml.safe_load(ld.read_text()) if ld.exists() else {}
        self._yaml = yaml

    def system_spec(self, gpu: str) -> dict:
        p = self.systems / f"{gpu}.yaml"
        return self._yaml.safe_load(p.read_text()) if p.exists() else {}

    def l2_bytes(self, gpu: str) -> tuple[float | None, str]:
        """(L2 size in bytes, where it came from): an 'l2*' key of systems/<gpu>.yaml's gpu section
        (bytes) if there is one, else L2_MIB."""
        spec = self.system_spec(gpu).get("gpu") or {}
        for key, val in spec.items():
            if str(key).lower().startswith("l2") and isinstance(val, (int, float)) and val > 0:
                return float(val), f"systems/{gpu}.yaml gpu.{key}"
        if gpu in L2_MIB:
            return (L2_MIB[gpu] * MIB,
                    f"{L2_MIB[gpu]:g} MiB from aic_extract.py's L2_MIB (systems/{gpu}.yaml has none)")
        return None, "unknown"

    def pinned_version(self, gpu: str, backend: str) -> str | None:
        qv = self.query_versions or {}
        override = (qv.get("overrides", {}).get(gpu, {}) or {}).get(backend)
        entry = override or qv.get("defaults", {}).get(backend)
        return (entry or {}).get("current")

    def find_table(self, gpu: str, family: str, table: str,
                   backends=BACKENDS) -> tuple[str, str, Path] | None:
        """(backend, version, path): the pinned version if it holds the table, else the newest."""
        for backend in backends:
            base = self.data / gpu / family / backend
            if not base.is_dir():
                continue
            versions = [d.name for d in base.iterdir() if (d / f"{table}.parquet").exists()]
            if not versions:
                continue
            pinned = self.pinned_version(gpu, backend)
            v = pinned if pinned in versions else max(versions, key=version_key)
            return backend, v, base / v / f"{table}.parquet"
        return None

    def read(self, path: Path, columns: list[str] | None = None) -> list[dict]:
        import pyarrow.parquet as pq

        t = pq.read_table(path)
        if columns:
            t = t.select([c for c in columns if c in t.column_names])
        return t.to_pylist()

    def default_lane(self, backend: str, version: str, gpu: str) -> str | None:
        sm = (self.system_spec(gpu).get("gpu") or {}).get("sm_version")
        lanes = (self.lane_defaults or {}).get(backend, {}).get(version, {}) or {}
        return lanes.get(sm) if sm is not None else None

    def meta(self, path: Path) -> str:
        """runtime/provenance summary of the version's collection_meta.yaml (one line)."""
        p = path.parent / "collection_meta.yaml"
        if not p.exists():
            return "no collection_meta.yaml"
        m = self._yaml.safe_load(p.read_text()) or {}
        rt = m.get("runtime") or {}
        bits = [f"provenance={m.get('provenance')}"]
        if rt.get("image"):
            bits.append(f"image={rt['image']}")
        return ", ".join(bits)


def g(x: float, digits: int = 6) -> str:
    return f"{x:.{digits}g}"


def header(db: Db, gpu: str, backend: str, version: str, path: Path, device: str,
           lines: list[str], why: str = "") -> list[str]:
    rel = path.relative_to(db.root.parent)
    fallback = "" if backend == "sglang" else (f" ({why})" if why
                                               else " (FALLBACK: this GPU has no SGLang table)")
    out = [
        f"source: PyPI package {DIST}=={db.pkg_version} (NVIDIA AIConfigurator performance database)",
        f"file in package: {rel.as_posix()} ({db.meta(path)})",
        f"gpu: {gpu} (device string '{device}'; pdmux profile key '{PDMUX_KEY.get(gpu, gpu)}')",
        f"backend: {backend} {version}{fallback}",
        "licence: Apache-2.0; Copyright (c) NVIDIA CORPORATION & AFFILIATES (measured by NVIDIA's collector)",
        "latency_ms: the measured latency of one call of the op, milliseconds (as stored in the package)",
    ]
    return out + lines


def write_csv(path: Path, comments: list[str], cols: list[str], rows: list[list[str]]) -> int:
    buf = io.StringIO()
    for c in comments:
        buf.write(f"# {c}\n")
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(cols)
    w.writerows(rows)
    data = buf.getvalue().encode()
    path.write_bytes(data)
    size = len(data)
    warn = f"  (over {SIZE_WARN // 1000} KB!)" if size > SIZE_WARN else ""
    print(f"  wrote {path.name}: {len(rows)} rows, {size / 1000:.1f} KB{warn}")
    return size


def nearest_pair(want: tuple[int, int], present: set[tuple[int, int]]) -> tuple[int, int] | None:
    """The measured (n, k) closest to want in log space (n and k weighted alike)."""
    if want in present:
        return want
    if not present:
        return None
    return min(present, key=lambda nk: (abs(math.log(nk[0] / want[0])) + abs(math.log(nk[1] / want[1])), nk))


def extract_gemm(db: Db, gpu: str, out: Path) -> dict | None:
    found = db.find_table(gpu, "gemm", "gemm_perf")
    if not found:
        print(f"  {gpu}: no gemm table")
        return None
    backend, version, path = found
    rows = db.read(path, ["device", "kernel_source", "gemm_dtype", "m", "n", "k", "latency"])
    device = rows[0]["device"] if rows else "?"
    pairs: dict[str, set] = {"bf16": set(GEMM_PAIRS)}
    fp8_maps = {}
    for dt in FP8_DTYPES:
        present = {(r["n"], r["k"]) for r in rows if r["gemm_dtype"] == dt}
        if present:
            fp8_maps[dt] = {w: nearest_pair(w, present) for w in FP8_WANTED}
        pairs[dt] = {p for p in fp8_maps.get(dt, {}).values() if p}
    ms_keep = set(GEMM_MS)
    kept, kernels = {}, {}
    for r in rows:
        dt = GEMM_DTYPES.get(r["gemm_dtype"])
        if dt is None or (r["n"], r["k"]) not in pairs[dt] or r["m"] not in ms_keep:
            continue
        key = (dt, r["m"], r["n"], r["k"])
        if key in kept:  # keep the fastest if a table ever holds duplicates
            kept[key] = min(kept[key], r["latency"])
        else:
            kept[key] = r["latency"]
        kernels.setdefault(dt, set()).add(r["kernel_source"])
    order = {d: i for i, d in enumerate(("bf16", *FP8_DTYPES))}
    out_rows = []
    for (dt, m, n, k), lat in sorted(kept.items(), key=lambda kv: (order[kv[0][0]], *kv[0][2:], kv[0][1])):
        tflops = 2.0 * m * n * k / (lat * 1e-3) / 1e12
        out_rows.append([dt, m, n, k, g(lat, 5), g(tflops, 4)])
    all_dtypes = sorted({r["gemm_dtype"] for r in rows})
    ms_all = sorted({r["m"] for r in rows})
    ms = sorted({x[1] for x in out_rows})
    ms_absent = [m for m in GEMM_MS if m not in ms_all]
    bf16_present = {(n, k) for dt, _, n, k in kept if dt == "bf16"}
    missing_bf16 = [f"{n}x{k}" for n, k in GEMM_PAIRS if (n, k) not in bf16_present]
    fp8_notes = []
    for dt in FP8_DTYPES:
        if dt in fp8_maps:
            fp8_notes.append(f"{dt} (n, k) kept (wanted->nearest measured): " + " ".join(
                f"{w[0]}x{w[1]}" + ("" if p == w else f"->{p[0]}x{p[1]}" if p else "->absent")
                for w, p in fp8_maps[dt].items()))
        elif dt == "fp8":
            fp8_notes.append("fp8: not measured on this GPU")
    block_note = ("; fp8_block = block-scaled fp8 (128x128 weight blocks, per-token-group activation scales "
                  "of 128, the activation quantization timed with the GEMM)" if "fp8_block" in fp8_maps
                  else "")
    comments = header(db, gpu, backend, version, path, device, [
        "op: dense GEMM out[m, n] = x[m, k] @ W[n, k]^T (m = tokens); kernels: "
        + "; ".join(f"{d}={','.join(sorted(v))}" for d, v in sorted(kernels.items())),
        "fp8 = per-tensor-scaled fp8 (fp8 inputs, bf16 out)" + block_note + "; the package also has "
        + (", ".join(d for d in all_dtypes if d not in GEMM_DTYPES) or "no other dtype")
        + " (not extracted)",
        ("tflops = 2*m*n*k / (latency_ms*1e-3) / 1e12   (achieved TFLOP/s); latency_ms rounded to 5, "
         "tflops to 4 significant digits"),
        f"thinning: m in {' '.join(map(str, ms))} ({len(ms)} of the table's {len(ms_all)} values"
        + (f"; wanted but not measured: {' '.join(map(str, ms_absent))}" if ms_absent else "")
        + "); bf16 (n, k) limited to the 25 pairs of {1024,2048,4096,8192,16384}^2 plus 15 7B-70B model "
        "shapes: "
        + " ".join(f"{n}x{k}" for n, k in GEMM_EXTRA)
        + (f" (absent here: {' '.join(missing_bf16)})" if missing_bf16 else ""),
        *fp8_notes,
    ])
    size = write_csv(out / f"{gpu}_gemm.csv", comments, ["dtype", "m", "n", "k", "latency_ms", "tflops"],
                     out_rows)
    return {"table": "gemm", "backend": backend, "version": version, "path": path, "rows": len(out_rows),
            "bytes": size}


def pick_lanes(all_rows: list[dict], rows: list[dict], slice_key, default: str | None) -> dict:
    """One kernel_source per slice, walked the way aiconfigurator walks attention lanes
    (sdk/operations/attention.py::lane_walk_order): the framework-default lane first, then the
    others by density over the whole table (distinct slices, then rows, then name)."""
    slices: dict = {}
    nrows: dict = {}
    for r in all_rows:
        ks = r["kernel_source"]
        slices.setdefault(ks, set()).add((r["attn_dtype"], r["kv_cache_dtype"], r["num_heads"],
                                          r["num_key_value_heads"], r["head_dim"], r.get("window_size", 0)))
        nrows[ks] = nrows.get(ks, 0) + 1
    walk = sorted(slices, key=lambda ks: (ks != default, -len(slices[ks]), -nrows[ks], ks))
    have: dict = {}
    for r in rows:
        have.setdefault(slice_key(r), set()).add(r["kernel_source"])
    return {sk: next(ks for ks in walk if ks in lanes) for sk, lanes in have.items()}


def attn_rows(db: Db, path: Path) -> tuple[list[dict], list[dict]]:
    """(every row, the rows kept: head_dim 128, no sliding window, beam width 1)."""
    cols = ["device", "kernel_source", "batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim",
            "attn_dtype", "kv_cache_dtype", "step", "window_size", "beam_width", "latency"]
    rows = db.read(path, cols)
    keep = []
    for r in rows:
        if r.get("window_size", 0) not in (0, None) or r.get("beam_width", 1) not in (1, None):
            continue
        if r["head_dim"] != HEAD_DIM:
            continue
        keep.append(r)
    return rows, keep


def lane_rule(default: str | None) -> str:
    if default:
        return (f"the framework default '{default}' if it has the slice, "
                "else the lane with most slices/rows in the table")
    return "no framework default is pinned for this GPU, so the lane with most slices/rows in the table"


def nearest_values(targets, present) -> dict:
    """target -> the present value closest to it in log space (ties: the smaller)."""
    present = sorted(set(present))
    if not present:
        return {}
    return {t: min(present, key=lambda v: (abs(math.log(v / t)), v)) for t in targets}


def extract_context(db: Db, gpu: str, out: Path) -> dict | None:
    found = db.find_table(gpu, "attention", "context_attention_perf")
    if not found:
        print(f"  {gpu}: no context attention table")
        return None
    backend, version, path = found
    all_rows, rows = attn_rows(db, path)
    device = all_rows[0]["device"] if all_rows else "?"
    heads, batches = set(CTX_HEADS), set(CTX_BATCHES)
    rows = [r for r in rows if (r["num_heads"], r["num_key_value_heads"]) in heads
            and r["batch_size"] in batches and r["step"] in (0, None)]
    default = db.default_lane(backend, version, gpu)

    def sk(r):
        return (r["attn_dtype"], r["kv_cache_dtype"], r["num_heads"], r["num_key_value_heads"])

    # One compute dtype per (kv_dtype, heads): with an fp8 KV cache aiconfigurator runs fp8 FMHA when
    # the table has it and falls back to bf16 FMHA (sdk/models/helpers.py::resolve_context_fmha_by_data);
    # a bf16 KV cache means bf16 FMHA. fp16 is never kept.
    measured = {sk(r) for r in rows}
    want_attn = {}
    for _, kv, h, kvh in measured:
        prefs = CTX_ATTN_PREF.get(kv, ())
        want_attn[(kv, h, kvh)] = next((a for a in prefs if (a, kv, h, kvh) in measured), None)
    rows = [r for r in rows if want_attn.get((r["kv_cache_dtype"], r["num_heads"], r["num_key_value_heads"]))
            == r["attn_dtype"]]
    lanes = pick_lanes(all_rows, rows, sk, default)
    out_rows = []
    for r in rows:
        if r["kernel_source"] != lanes[sk(r)]:
            continue
        b, s, h = r["batch_size"], r["isl"], r["num_heads"]
        out_rows.append([r["kernel_source"], DTYPE_SHORT.get(r["attn_dtype"], r["attn_dtype"]),
                         DTYPE_SHORT.get(r["kv_cache_dtype"], r["kv_cache_dtype"]), b, s, h,
                         r["num_key_value_heads"], g(r["latency"], 5)])
    out_rows.sort(key=lambda x: (x[1], x[2], -x[5], x[6], x[3], x[4]))
    used = sorted({x[0] for x in out_rows})
    combos = sorted({(x[1], x[2]) for x in out_rows})
    missing = [f"{h}/{kv}" for h, kv in CTX_HEADS if not any(x[5] == h and x[6] == kv for x in out_rows)]
    comments = header(db, gpu, backend, version, path, device, [
        ("op: causal prefill (context) attention of one layer, batch sequences of isl new tokens each, "
        "no cached prefix (the table has none: step=0 in every row); num_heads/num_kv_heads are per GPU; "
        f"head_dim {HEAD_DIM}"),
        (f"kernel: one lane per (attn_dtype, kv_dtype, heads) slice, picked as aiconfigurator does: "
         f"{lane_rule(default)} "
        f"(lanes here: {', '.join(used)})"),
        "attn_dtype = compute (Q/K/V) dtype; kv_dtype = KV-cache dtype; (attn, kv) here: "
        + ", ".join(f"{a}/{k}" for a, k in combos),
        ("achieved TFLOP/s (not stored, to keep the file small) = 4 * batch * num_heads * head_dim * "
         "(isl*isl/2) / (latency_ms*1e-3) / 1e12   (QK^T and PV, 2 FLOP/MAC, causal half); latency_ms "
         "rounded to 5 significant digits"),
        f"thinning: head_dim {HEAD_DIM} only, window_size 0 (no sliding window), beam_width 1; (num_heads, "
        "num_kv_heads) in " + " ".join(f"{h}/{kv}" for h, kv in CTX_HEADS)
        + (f" (absent here: {' '.join(missing)})" if missing else "")
        + "; batch in " + " ".join(map(str, CTX_BATCHES)) + "; every isl kept",
    ])
    size = write_csv(out / f"{gpu}_context_attention.csv", comments,
                     ["kernel", "attn_dtype", "kv_dtype", "batch", "isl", "num_heads", "num_kv_heads",
                      "latency_ms"], out_rows)
    return {"table": "context_attention", "backend": backend, "version": version, "path": path,
            "rows": len(out_rows), "bytes": size}


def extract_generation(db: Db, gpu: str, out: Path, backends: tuple[str, ...] = BACKENDS, suffix: str = "",
                       why: str = "") -> dict | None:
    found = db.find_table(gpu, "attention", "generation_attention_perf", backends)
    if not found:
        print(f"  {gpu}: no generation attention table")
        return None
    backend, version, path = found
    all_rows, rows = attn_rows(db, path)
    device = all_rows[0]["device"] if all_rows else "?"
    heads, batches = set(GEN_HEADS), set(GEN_BATCHES)
    rows = [r for r in rows if (r["num_heads"], r["num_key_value_heads"]) in heads
            and r["batch_size"] in batches]
    kv_pick = nearest_values(GEN_KV_TARGETS, (r["isl"] + (r["step"] or 0) for r in rows))
    kv_keep = set(kv_pick.values())
    rows = [r for r in rows if r["isl"] + (r["step"] or 0) in kv_keep]
    default = db.default_lane(backend, version, gpu)
    l2, l2_src = db.l2_bytes(gpu)

    def sk(r):
        return (r["attn_dtype"], r["kv_cache_dtype"], r["num_heads"], r["num_key_value_heads"])

    lanes = pick_lanes(all_rows, rows, sk, default)
    attn_dtypes = sorted({r["attn_dtype"] for r in rows})
    out_rows = []
    for r in rows:
        if r["kernel_source"] != lanes[sk(r)]:
            continue
        kv = DTYPE_SHORT.get(r["kv_cache_dtype"], r["kv_cache_dtype"])
        b, kvh, d = r["batch_size"], r["num_key_value_heads"], r["head_dim"]
        kv_len = r["isl"] + (r["step"] or 0)
        kv_bytes = b * kv_len * 2 * kvh * d * KV_BYTES[kv]
        fits = "" if l2 is None else int(kv_bytes < l2)
        out_rows.append([r["kernel_source"], kv, b, kv_len, r["num_heads"], kvh, g(r["latency"], 5), fits])
    out_rows.sort(key=lambda x: (x[1], -x[4], x[5], x[2], x[3]))
    used = sorted({x[0] for x in out_rows})
    # Rows not flagged yet faster than the GPU's HBM spec (systems/<gpu>.yaml mem_bw) are cached anyway.
    mem_bw = (db.system_spec(gpu).get("gpu") or {}).get("mem_bw")
    fast = [x for x in out_rows if mem_bw and x[7] == 0
            and x[2] * x[3] * 2 * x[5] * HEAD_DIM * KV_BYTES[x[1]] / (float(x[6]) * 1e-3) > mem_bw]
    fast_kv = sorted({x[2] * x[3] * 2 * x[5] * HEAD_DIM * KV_BYTES[x[1]] / MIB for x in fast})
    if not mem_bw:
        bw_note = f"check: systems/{gpu}.yaml has no mem_bw to compare the KV read speed with"
    elif fast:
        bw_note = (f"caution: {len(fast)} rows with kv_fits_l2=0 read KV faster than the HBM spec (mem_bw "
                   f"{mem_bw / 1e9:g} GB/s in systems/{gpu}.yaml), so they too are likely cached; their "
                   "kv_bytes: " + ", ".join(f"{v:g} MiB" for v in fast_kv))
    else:
        bw_note = (f"check: no row with kv_fits_l2=0 reads KV faster than the HBM spec (mem_bw "
                   f"{mem_bw / 1e9:g} GB/s in systems/{gpu}.yaml)")
    kv_lens = sorted({x[3] for x in out_rows})
    inexact = [f"{t}->{v}" for t, v in kv_pick.items() if t != v]
    missing = [f"{h}/{kv}" for h, kv in GEN_HEADS if not any(x[4] == h and x[5] == kv for x in out_rows)]
    comments = header(db, gpu, backend, version, path, device, [
        ("op: decode (generation) attention of one layer: batch sequences, 1 new token each, attending to "
        f"kv_len cached tokens; num_heads/num_kv_heads are per GPU; head_dim {HEAD_DIM}"),
        "kv_len = isl + step of the stored row (isl=1; step = 1,3,7,..,131071), as aiconfigurator reads it",
        f"attention compute dtype: {', '.join(attn_dtypes)} for every row; kv_dtype = KV-cache dtype",
        (f"kernel: one lane per (kv_dtype, heads) slice, picked as aiconfigurator does: {lane_rule(default)} "
        f"(lanes here: {', '.join(used)})"),
        ("kv_bytes (not stored) = batch * kv_len * 2 (K and V) * num_kv_heads * head_dim * bytes_per_element "
         "(bf16/fp16 2, fp8 1); achieved KV-read GB/s (not stored) = kv_bytes / (latency_ms*1e-3) / 1e9; "
         "latency_ms rounded to 5 significant digits"),
        (f"kv_fits_l2 = 1 if kv_bytes < L2 = {l2:.0f} bytes ({l2_src}), else 0: such points may be served "
         "from L2 rather than HBM (their KV GB/s can exceed the HBM bandwidth); drop them when fitting "
         "HBM speed"
         if l2 is not None else "kv_fits_l2: empty, this GPU's L2 size is unknown"),
        bw_note,
        f"thinning: head_dim {HEAD_DIM} only, window_size 0, beam_width 1; (num_heads, num_kv_heads) in "
        + " ".join(f"{h}/{kv}" for h, kv in GEN_HEADS)
        + (f" (absent here: {' '.join(missing)})" if missing else "")
        + "; batch in " + " ".join(map(str, GEN_BATCHES)) + "; kv_len = the measured value nearest each "
        f"power of two 2..131072 ({len(kv_lens)} values"
        + (f"; inexact: {' '.join(inexact)})" if inexact else ", all exact)"),
    ], why)
    size = write_csv(out / f"{gpu}_generation_attention{suffix}.csv", comments,
                     ["kernel", "kv_dtype", "batch", "kv_len", "num_heads", "num_kv_heads", "latency_ms",
                      "kv_fits_l2"], out_rows)
    return {"table": "generation_attention" + suffix, "backend": backend, "version": version, "path": path,
            "rows": len(out_rows), "bytes": size}


def extract_allreduce(db: Db, gpu: str, out: Path) -> dict | None:
    found = db.find_table(gpu, "comm", "custom_allreduce_perf")
    if not found:
        print(f"  {gpu}: no custom all-reduce table")
        return None
    backend, version, path = found
    rows = db.read(path)
    device = rows[0]["device"] if rows else "?"
    out_rows = []
    for r in rows:
        dt = DTYPE_SHORT.get(r["allreduce_dtype"], r["allreduce_dtype"])
        nbytes = r["message_size"] * KV_BYTES.get(dt, 2)
        lat = r["latency"]
        out_rows.append([r["kernel_source"], dt, r["num_gpus"], r["message_size"], nbytes, g(lat),
                         g(nbytes / (lat * 1e-3) / 1e9, 5)])
    out_rows.sort(key=lambda x: (x[0], x[2], x[3]))
    comments = header(db, gpu, backend, version, path, device, [
        ("op: the framework's custom all-reduce across num_gpus GPUs of one node (graph = CUDA-graph "
         "captured, "
        "eager = not captured)"),
        "message_elems = elements per GPU (aiconfigurator's message_size); bytes = message_elems * 2 (bf16)",
        "alg_GBps = bytes / (latency_ms*1e-3) / 1e9   (algorithm bandwidth, not bus bandwidth)",
        "thinning: none (every row kept)",
    ])
    size = write_csv(out / f"{gpu}_allreduce.csv", comments,
                     ["kernel", "dtype", "num_gpus", "message_elems", "bytes", "latency_ms", "alg_GBps"],
                     out_rows)
    return {"table": "allreduce", "backend": backend, "version": version, "path": path, "rows": len(out_rows),
            "bytes": size}


def extract_moe(db: Db, gpu: str, out: Path) -> dict | None:
    """SGLang's fused MoE (routing, the grouped expert GEMMs, activation, combine) at the MOE_MODELS
    shapes."""
    found = db.find_table(gpu, "moe", "moe_perf", ("sglang",))
    if not found:
        print(f"  {gpu}: no SGLang MoE table")
        return None
    backend, version, path = found
    rows = db.read(path, ["device", "kernel_source", "moe_dtype", "num_tokens", "hidden_size", "inter_size",
                          "topk", "num_experts", "moe_tp_size", "moe_ep_size", "distribution", "latency"])
    device = rows[0]["device"] if rows else "?"
    shapes = {v[:4]: name for name, v in MOE_MODELS.items()}
    l2, l2_src = db.l2_bytes(gpu)
    tps, tokens = set(MOE_TP), set(MOE_TOKENS)
    kept: dict = {}
    skipped_kernels: set = set()
    for r in rows:
        name = shapes.get((r["hidden_size"], r["inter_size"], r["num_experts"], r["topk"]))
        dt = MOE_DTYPES.get(r["moe_dtype"])
        if (name is None or dt is None or r["moe_ep_size"] != 1 or r["moe_tp_size"] not in tps
                or r["num_tokens"] not in tokens or r["distribution"] != "balanced"
                or r["moe_dtype"] not in MOE_MODEL_DTYPES.get(name, ("bfloat16", "fp8_block"))):
            continue
        kernel = MOE_KERNELS.get(r["kernel_source"])
        if kernel is None:
            skipped_kernels.add(r["kernel_source"])
            continue
        if name in MOE_ONE_TOKEN and r["num_tokens"] != 1:
            continue
        key = (kernel, dt, name, r["moe_tp_size"], r["num_tokens"])
        kept[key] = min(kept.get(key, math.inf), r["latency"])
    for name, prefs in MOE_MODEL_DTYPES.items():  # one MXFP4 flavour per model: the first measured
        have = {MOE_DTYPES[d] for d in prefs} & {key[1] for key in kept if key[2] == name}
        first = next((MOE_DTYPES[d] for d in prefs if MOE_DTYPES[d] in have), None)
        kept = {key: lat for key, lat in kept.items() if key[2] != name or key[1] == first}
    out_rows = []
    order = {n: i for i, n in enumerate(MOE_MODELS)}
    for (kernel, dt, name, tp, t), lat in sorted(kept.items(),
                                                 key=lambda kv: (order[kv[0][2]], kv[0][1], kv[0][0],
                                                                              kv[0][3], kv[0][4])):
        h, inter, e, k, _ = MOE_MODELS[name]
        touched = min(e, t * k)
        wbytes = touched * 3 * h * (inter // tp) * MOE_WEIGHT_BYTES[dt]
        fits = "" if l2 is None else int(wbytes < l2)
        out_rows.append([kernel, dt, name, tp, t, g(lat, 5), fits])
    if not out_rows:
        print(f"  {gpu}: no MoE rows at the MOE_MODELS shapes")
        return None
    used = sorted({(x[0], x[1]) for x in out_rows})
    present = sorted({x[2] for x in out_rows}, key=order.get)
    comments = header(db, gpu, backend, version, path, device, [
        ("op: one MoE layer's routed experts on one GPU as SGLang runs them "
         "(collector/sglang/collect_moe.py): top-k routing of given router logits, the fused grouped GEMMs "
         "(gate+up, down), the gated activation and the weighted combine; no router GEMM, no shared experts, "
         "no all-reduce; CUDA-graph replay of 5 calls"),
        "kernel: triton = sglang_fused_moe_triton (fused_moe: moe_align_block_size + 2 Triton grouped "
        "GEMMs), flashinfer_trtllm = sglang_flashinfer_trtllm_moe (FlashInfer's TRT-LLM-gen fused MoE, "
        "routing inside); (kernel, dtype) here: " + ", ".join(f"{k}/{d}" for k, d in used)
        + (f"; not extracted: {', '.join(sorted(skipped_kernels))}" if skipped_kernels else ""),
        ("dtype: bf16; fp8_block (128x128 weight blocks, dynamic per-token-group activation scales, "
        "quantization timed); w4a16_mxfp4 / w4a8_mxfp4_mxfp8 (MXFP4 weights, bf16 / MXFP8 activations)"),
        "model: the routed-expert shape (hidden, moe_intermediate, experts, top-k): " + "; ".join(
            f"{n} {MOE_MODELS[n][0]}/{MOE_MODELS[n][1]}/{MOE_MODELS[n][2]}/{MOE_MODELS[n][3]}"
            + (" (grouped top-k, 4 of 8 groups: 1 token only)" if MOE_MODELS[n][4] else "") for n in present),
        ("tp = moe_tp_size (each expert inter/tp wide), ep 1; tokens = num_tokens; distribution 'balanced' "
        "(the collector's balanced_logits: every token's top-k experts distinct, min(experts, tokens x "
        "top-k) touched, equal load; the same experts in each of the 5 calls); latency_ms rounded to 5 "
        "significant digits"),
        ("weights_fit_l2 = 1 if the touched experts' weights (min(experts, tokens x top-k) x 3 x hidden x "
         f"inter/tp x bytes per weight: bf16 2, fp8 1, mxfp4 4.25/8) are smaller than L2 = {l2:.0f} bytes "
         f"({l2_src}): repeated calls may read them from L2, so drop such points when fitting HBM speed"
         if l2 is not None else "weights_fit_l2: empty, this GPU's L2 size is unknown"),
        (f"thinning: ep 1, tp in {' '.join(map(str, MOE_TP))}, tokens at powers of two 1..4096 "
        "(grouped-routing models: 1 token, since the collector's balanced logits pass its group selection "
        "and touch other experts past 1 token), distribution balanced (power_law_1.01/1.2 left out), the "
        "MOE_MODELS shapes only; bf16 models also in fp8_block; gpt-oss in w4a8_mxfp4_mxfp8 where measured, "
        "else w4a16_mxfp4; nvfp4, int4_wo and other runners (marlin, cutlass) left out"),
    ])
    size = write_csv(out / f"{gpu}_moe.csv", comments,
                     ["kernel", "dtype", "model", "tp", "tokens", "latency_ms", "weights_fit_l2"], out_rows)
    return {"table": "moe", "backend": backend, "version": version, "path": path, "rows": len(out_rows),
            "bytes": size}


README = """\
# aiconfigurator: NVIDIA's measured per-operator GPU tables

Compact CSV extracts of the performance database shipped in the PyPI package
**aiconfigurator-core {pkg_version}** (NVIDIA AIConfigurator; licence **Apache-2.0**,
Copyright (c) NVIDIA CORPORATION & AFFILIATES). NVIDIA measured these kernel latencies with its
collector on the real GPUs, running the serving framework named in each file's header (SGLang here).
Latencies are milliseconds per op call. These extracts are derived data under the same licence;
keep the attribution when copying them.

Written by `benchmarks/aic_extract.py`. To regenerate:

```
pip install aiconfigurator-core=={pkg_version} && python benchmarks/aic_extract.py
```

(`--out DIR` writes elsewhere; `--gpus a,b` picks GPUs by aiconfigurator name). Every CSV starts
with `#` lines giving the package version, the file inside the package, the GPU, the backend and its
version, the licence, the formulas of the computed columns and how it was thinned. The files ship
inside pdmux's wheel, so each GPU's files are kept to about 185 KB together: throughput columns
a reader can recompute from the header's formula are not stored, and latencies keep 5 significant
digits.

- `<gpu>_gemm.csv`: dense GEMM `x[m,k] @ W[n,k]^T`; dtype, m, n, k, latency_ms,
  tflops = 2mnk/latency. m in 1 2 4 8 16 32 48 64 96 128 192 256 (384: not in the tables) 512 768
  1024 1536 2048 3072 4096 8192 16384 32768. bf16 at 40 (n,k): the 25 pairs of
  {{1024,2048,4096,8192,16384}}^2 plus 15 7B-70B model shapes. Per-tensor fp8 (`fp8`, where measured)
  and block-scaled fp8 (`fp8_block`: SGLang's w8a8 block fp8 through DeepGEMM, 128x128 weight blocks,
  per-token-group activation scales, the activation quantization timed with the GEMM; measured on
  Hopper and Blackwell) at 6: 4096x4096, 12288x4096, 4096x12288, 16384x4096, 8192x8192 and
  16384x8192 (standing in for 28672x8192, which the grid lacks).
- `<gpu>_context_attention.csv`: causal prefill attention of one layer, head_dim 128, no sliding
  window, no cached prefix; kernel, attn_dtype, kv_dtype, batch, isl, heads, kv heads, latency_ms
  (TFLOP/s = 4*b*h*d*isl^2/2 / latency). Heads/kv heads 32/8 64/8 32/32 16/2 40/8 8/1, batch 1 2 4 8
  16 64, every isl (1..16384); bf16 KV, and fp8 KV where measured. One compute dtype per KV dtype and
  head pair, as aiconfigurator picks it: bf16 KV -> bf16 FMHA; fp8 KV -> fp8 FMHA where measured for
  those heads, else bf16 FMHA (the attn_dtype column says which).
- `<gpu>_generation_attention.csv`: decode attention of one layer, head_dim 128, bf16 compute;
  kernel, kv_dtype (bf16, and fp8 where measured), batch, kv_len, heads, kv heads, latency_ms,
  kv_fits_l2. Heads/kv heads 32/8 64/8 32/32 16/2 8/1, batch 1..512 (powers of two), kv_len at the
  measured value nearest each power of two 2..131072 (large batches stop at shorter kv_len: the
  collector capped the KV size). kv_bytes = b*kv_len*2*kvh*d*bytes_per_element (not stored);
  `kv_fits_l2` = 1 when kv_bytes < the GPU's L2 (below): those points may run from L2, not HBM, so
  drop them when fitting HBM bandwidth. Each file's header also says whether rows with
  kv_fits_l2 = 0 still read KV faster than the GPU's spec `mem_bw` (cached anyway); in 0.12.0 only
  RTX PRO 6000's 128 MiB points (KV = L2 size) do.
- `<gpu>_allreduce.csv`: the framework's custom all-reduce (one node, 2/4/8 GPUs), every row.
- `<gpu>_moe.csv`: one MoE layer's routed experts as SGLang runs them (aiconfigurator's
  `collector/sglang/collect_moe.py`: top-k routing of given router logits, the fused grouped GEMMs, the
  gated activation and the weighted combine; no router GEMM, no shared experts, no all-reduce); kernel
  (`triton` = SGLang's Triton `fused_moe`, `flashinfer_trtllm` = FlashInfer's TRT-LLM-gen fused MoE, as
  the table's `kernel_source` names them), dtype (bf16, fp8_block, w4a16_mxfp4, w4a8_mxfp4_mxfp8), model
  (the routed-expert shape of DeepSeek-V3, Qwen3-235B-A22B, Qwen3-30B-A3B, Mixtral-8x7B, gpt-oss-120b,
  gpt-oss-20b; the header gives hidden/intermediate/experts/top-k), tp (1 2 4 8; EP 1), tokens (1..4096,
  powers of two), latency_ms, weights_fit_l2. Routing is the collector's `balanced` distribution:
  min(experts, tokens x top-k) experts touched with equal load, the same experts in each of the 5 timed
  calls, so `weights_fit_l2` = 1 flags points whose touched weights are smaller than L2 (drop them when
  fitting HBM speed). DeepSeek-V3 routes with grouped top-k (4 of 8 groups), which the collector's
  balanced logits pass through, so it is kept at 1 token only. 16-bit models are also kept in fp8_block;
  gpt-oss in w4a8_mxfp4_mxfp8 where measured (SGLang's SM100 default), else w4a16_mxfp4.
- `a100_sxm_generation_attention_vllm.csv`: A100 decode attention from aiconfigurator's **vLLM** table
  (FlashAttention-2 paged decode), same columns and thinning: SGLang's A100 table times SGLang's
  FlashAttentionBackend, while SGLang 0.5.23 serves MHA/GQA models on an A100 with FlashInfer
  (`srt/arg_groups/model_override_base.py`); FA2's paged decode is the measured kernel closest to it.

## GPUs

| gpu | pdmux key | backend (version) | L2 used for kv_fits_l2 | its files, KB |
|---|---|---|---|---|
{gpus}

L2 sizes are MiB as CUDA's `l2CacheSize` reports them; aiconfigurator's `systems/<gpu>.yaml` has no
L2 entry in {pkg_version}, so they come from the script's `L2_MIB` table (a yaml `l2*` key would win).

## Files in this extract

| gpu | table | backend | version | rows | KB | file in package |
|---|---|---|---|---|---|---|
{rows}

GPU names are aiconfigurator's (`h100_sxm` = pdmux's `h100-sxm`, `a100_sxm` = `a100-sxm-80gb`,
`b200_sxm` = `b200`, `b300_sxm` = `b300`, `rtx_pro_6000_server` = `rtx-pro-6000`).
aiconfigurator-core {pkg_version} has no data for H20, A100-PCIe, H100-PCIe, L4 or A30 (the GitHub
repository ai-dynamo/aiconfigurator once held SGLang tables of an H20-3e, 141 GB: NVIDIA removed them in
commit 3359b493d, 2025-12-02, "remove h20_sxm data", and their decode attention reads KV at about 1.07
TB/s, a quarter of the HBM's 4.0-4.8 TB/s, so pdmux does not use them); it also has
Intel's Arc Pro B60 (`b60`, vLLM only; not extracted). Not extracted (present in the package):
nvfp4 and int8 GEMMs, MoE beyond `<gpu>_moe.csv` (other shapes, EP > 1, nvfp4/int4 experts, the power-law
routings, wide-EP and DeepEP tables), MLA, DSA/NSA and other model-specific modules, NCCL
collectives, DeepEP/all-to-all, fp8 quantize kernels (`quantize/*/computescale_perf`,
`scale_matrix_perf`), sliding-window and other head-dim attention, and the TensorRT-LLM and vLLM
tables. Element-wise ops have no table: aiconfigurator models them from `mem_bw` (times an empirical
0.8, plus 3 us).
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})")
    ap.add_argument("--gpus", default=",".join(DEFAULT_GPUS),
                    help="comma-separated aiconfigurator system names (default: %(default)s)")
    args = ap.parse_args(argv)

    root, pkg_version = locate_package()
    try:
        db = Db(root, pkg_version)
    except ImportError as e:
        die(f"{e.name} is missing (a dependency of {DIST}); reinstall {DIST}=={TESTED_VERSION}")
    if pkg_version != TESTED_VERSION:
        print(f"aic_extract: note: written against {DIST} {TESTED_VERSION}, found {pkg_version}")
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"{DIST} {pkg_version} at {root}")
    done = []
    for gpu in [x.strip() for x in args.gpus.split(",") if x.strip()]:
        if not (db.data / gpu).is_dir():
            print(f"  {gpu}: not in the package, skipped")
            continue
        total = 0
        for fn in (extract_gemm, extract_context, extract_generation, extract_allreduce, extract_moe):
            info = fn(db, gpu, args.out)
            if info:
                done.append((gpu, info))
                total += info["bytes"]
        if gpu in EXTRA_GENERATION:
            backend, why = EXTRA_GENERATION[gpu]
            info = extract_generation(db, gpu, args.out, (backend,), f"_{backend}", why)
            if info:
                done.append((gpu, info))
                total += info["bytes"]
        warn = f"  (over the {GPU_BUDGET // 1000} KB budget!)" if total > GPU_BUDGET else ""
        print(f"  {gpu}: {total / 1000:.1f} KB in all{warn}" if total else f"  {gpu}: nothing extracted")
    rows = "\n".join(
        f"| {gpu} | {i['table']} | {i['backend']} | {i['version']} | {i['rows']} | {i['bytes'] / 1000:.1f} | "
        f"`{i['path'].relative_to(root.parent).as_posix()}` |" for gpu, i in done)
    gpu_lines = []
    for gpu in dict.fromkeys(gpu for gpu, _ in done):
        infos = [i for g_, i in done if g_ == gpu]
        backends = ", ".join(sorted({f"{i['backend']} {i['version']}" for i in infos}))
        l2, _ = db.l2_bytes(gpu)
        l2_txt = f"{l2 / MIB:g} MiB" if l2 else "unknown"
        gpu_lines.append(f"| {gpu} | {PDMUX_KEY.get(gpu, gpu)} | {backends} | {l2_txt} | "
                         f"{sum(i['bytes'] for i in infos) / 1000:.1f} |")
    (args.out / "README.md").write_text(README.format(pkg_version=pkg_version, rows=rows,
                                                      gpus="\n".join(gpu_lines)))
    print(f"  wrote README.md ({len(done)} tables)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
