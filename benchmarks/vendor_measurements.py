"""Copy the public GPU measurements pdmux fits its cost model to into ``profiles/measurements/``.

The sources sit in the workplace's ``../shared/data/measurements/`` (see its README): Vidur's
per-operator times (microsoft/vidur commit 7d47513, MIT) and NanoFlow's SM sweeps
(efeslab/Nanoflow commit d1bbe277, Apache-2.0). pdmux ships a compact subset so that
``pdmux accuracy`` and the accuracy gate run from any checkout or installed wheel:

- ``vidur/<gpu>_<model>.csv``: one row per (num_tokens, tensor-parallel degree) with the median time
  (ms) of every per-layer operator, and the model's shape columns, at the token counts of :data:`TOKENS`;
- ``vidur/network_<gpu>_all_reduce.csv``: NCCL all-reduce times (``torch.distributed.all_reduce`` on
  fp16 buffers, eager, the NCCL kernel timed by the profiler) on one DGX node, 2/4/8 GPUs, at the
  measured sizes nearest :data:`NETWORK_SIZES` (rows spanning two nodes are dropped: pdmux models one
  server);
- ``nanoflow/*.csv``: copied as they are (a few hundred bytes each).

Usage: ``python benchmarks/vendor_measurements.py [--source DIR]``. Rewrites the files (stdlib only).
"""

from __future__ import annotations

import argparse
import csv
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SOURCE = ROOT.parent / "shared" / "data" / "measurements"
OUT = ROOT / "profiles" / "measurements"

#: Vidur operators kept (``time_stats.<op>.median``, ms), in the file's order.
OPS = ("emb", "input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj", "post_attention_layernorm",
       "mlp_up_proj", "mlp_act", "mlp_down_proj", "add")
SHAPE = ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size", "use_gated_mlp")

#: Token counts kept (Vidur profiles every 8-32 tokens up to 4096; a log-spaced subset keeps the
#: shape, and the fits and the accuracy report stay quick in pure Python).
TOKENS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096)

#: All-reduce sizes kept (bytes): 4 per octave from 2 KiB to 64 MiB; Vidur measured ~1000 sizes per GPU
#: count, and the fit and the accuracy report need the shape, not every point.
NETWORK_SIZES = tuple(round(2 ** (11 + i / 4)) for i in range(61))

#: Vidur all-reduce file -> pdmux GPU key.
NETWORK_FILES = {"network_h100_dgx_all_reduce.csv": "h100-sxm",
                 "network_a100_dgx_all_reduce.csv": "a100-sxm-80gb"}

#: Vidur file -> (gpu key in pdmux, model name, layers from the model's config.json).
VIDUR_FILES = {
    "compute_h100_meta-llama_Llama-2-7b-hf_mlp.csv": ("h100-sxm", "Llama-2-7b-hf", 32),
    "compute_h100_meta-llama_Llama-2-70b-hf_mlp.csv": ("h100-sxm", "Llama-2-70b-hf", 80),
    "compute_h100_codellama_CodeLlama-34b-Instruct-hf_mlp.csv": ("h100-sxm", "CodeLlama-34b-Instruct-hf", 48),
    "compute_a100_meta-llama_Llama-2-70b-hf_mlp.csv": ("a100-sxm-80gb", "Llama-2-70b-hf", 80),
    "compute_a100_codellama_CodeLlama-34b-Instruct-hf_mlp.csv": (
        "a100-sxm-80gb", "CodeLlama-34b-Instruct-hf", 48),
}


def vendor_vidur(source: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, (gpu, model, layers) in VIDUR_FILES.items():
        with (source / name).open(newline="") as f:
            rows = list(csv.DictReader(f))
        rows = [r for r in rows if int(r["num_tokens"]) in TOKENS]
        rows.sort(key=lambda r: (int(r["num_tensor_parallel_workers"]), int(r["num_tokens"])))
        target = out / f"{gpu}_{model}.csv"
        with target.open("w", newline="") as f:
            f.write(f"# Subset of microsoft/vidur data/profiling/compute/.../{name} (commit 7d47513, MIT "
                    "licence, LICENSE beside this file).\n")
            f.write(f"# GPU {gpu}; model {model} ({layers} layers); per-layer operator times measured with "
                    "the sarathi-serve profiler: median of each op, ms; token counts {', '.join(map(str, "
                    "TOKENS))} kept.\n")
            f.write("# Shapes: attn_pre_proj = QKV GEMM, attn_post_proj = O GEMM, mlp_up_proj = gate+up "
                    "GEMM, mlp_down_proj = down GEMM; all sharded by tp.\n")
            w = csv.writer(f, lineterminator="\n")
            w.writerow(["model", "num_layers", "tp", "num_tokens", *SHAPE, *(f"{op}_ms" for op in OPS)])
            for r in rows:
                w.writerow([model, layers, r["num_tensor_parallel_workers"], r["num_tokens"],
                            *(r[c] for c in SHAPE),
                            *(f"{float(r[f'time_stats.{op}.median']):.6g}" for op in OPS)])
    shutil.copyfile(source / "vidur" / "LICENSE" if (source / "vidur" / "LICENSE").exists()
                    else source / "LICENSE", out / "LICENSE")


def vendor_network(source: Path, out: Path) -> None:
    for name, gpu in NETWORK_FILES.items():
        with (source / name).open(newline="") as f:
            rows = [r for r in csv.DictReader(f) if r["collective"] == "all_reduce"
                    and r["num_workers"] == r["devices_per_node"]]
        kept = []
        for workers in sorted({int(r["num_workers"]) for r in rows}):
            mine = [r for r in rows if int(r["num_workers"]) == workers]
            sizes = sorted({int(r["size"]) for r in mine})
            chosen = sorted({min(sizes, key=lambda s, t=target: (abs(s - t), s)) for target in NETWORK_SIZES})
            by_size = {int(r["size"]): r for r in mine}
            kept += [by_size[s] for s in chosen]
        with (out / f"network_{gpu}_all_reduce.csv").open("w", newline="") as f:
            f.write(f"# Subset of microsoft/vidur data/profiling/network/.../{name} (commit 7d47513, MIT "
                    "licence, LICENSE beside this file).\n")
            f.write(f"# GPU {gpu}, one DGX node (rows over two nodes dropped): torch.distributed.all_reduce "
                    "(NCCL, eager) of an fp16 buffer of size_bytes bytes on num_gpus GPUs; median time of "
                    "the NCCL kernel (vidur/profiling/collectives: 3 runs of 11 launches, kineto), ms; sizes "
                    "nearest 2**(11 + i/4).\n")
            w = csv.writer(f, lineterminator="\n")
            w.writerow(["num_gpus", "size_bytes", "median_ms", "min_ms", "max_ms"])
            for r in kept:
                w.writerow([r["num_workers"], r["size"], *(f"{float(r[f'time_stats.all_reduce.{k}']):.6g}"
                                                          for k in ("median", "min", "max"))])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    args = parser.parse_args()
    vendor_vidur(args.source / "vidur", OUT / "vidur")
    vendor_network(args.source / "vidur", OUT / "vidur")
    nano_out = OUT / "nanoflow"
    nano_out.mkdir(parents=True, exist_ok=True)
    for path in sorted((args.source / "nanoflow").glob("*.csv")):
        shutil.copyfile(path, nano_out / path.name)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
