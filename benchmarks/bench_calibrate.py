"""Speed of ``pdmux calibrate`` on a large SGLang server log (a benchmark, not a test).

Writes a server log of ``--lines`` lines (default 100,000) in SGLang 0.5.23's exact format
(``srt/managers/scheduler_components/metrics_reporter.py``: ``[date time TP0] Decode batch, ...`` every
40 decode steps, ``Prefill batch, ...`` lines between, a retraction now and then), its decode step times
made by the roofline model itself with a known KV read scale and fixed time per step, then times the
whole ``pdmux calibrate --sglang-log`` process on it and checks that the fit found those two back.
Target: under 5 s.

``--fixture PATH --lines 300`` and ``--one-batch-fixture PATH`` write the small files kept in
tests/fixtures/sglang/ (``model_made_*``) instead: a log and a one-batch result file made by the model
with the known terms (GEMM and attention compute also scaled, for the one-batch prefills).

Usage: ``python benchmarks/bench_calibrate.py [--lines N] [--runs 3] [--write]``; ``--write`` replaces
this benchmark's section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import results_md
from bench_cli import pdmux_cmd

from pdmux_cli.costmodel import build_step_model
from pdmux_cli.costmodel.whole_gpu_fit import _scaled, _with
from pdmux_cli.catalog.hardware import find_gpu
from pdmux_cli.catalog.model import load_model

RESULTS = ROOT / "benchmarks" / "RESULTS.md"
SECTION = "## Calibrate: a 100,000-line SGLang server log"
MODEL, GPU = "qwen3-8b", "h100"
#: The known terms the log is made with: KV reads at this fraction of the shipped efficiency, and this
#: fixed time per decode step (seconds).
KV_SCALE, FIXED_S = 0.8, 1.5e-3
#: And, for the one-batch file, GEMM and prefill-attention compute at these fractions of the shipped ones.
GEMM_SCALE, ATTENTION_SCALE = 0.9, 1.1


def truth_model():
    """The roofline model of :data:`MODEL` on :data:`GPU` with the known terms."""
    base = build_step_model(find_gpu(GPU), load_model(MODEL))
    return _with(base, _scaled(base.eff, 1.0, KV_SCALE, GEMM_SCALE, ATTENTION_SCALE), FIXED_S)


def write_one_batch(path: Path) -> None:
    """The JSONL 'python -m sglang.benchmark.one_batch --batch-size 1 8 32 64 --input-len 512 2048 8192
    --output-len 32' would write (its fields, ``sglang/benchmark/one_batch.py``), timed by the model."""
    truth = truth_model()
    out = []
    for batch in (1, 8, 32, 64):
        for input_len in (512, 2048, 8192):
            output_len = 32
            if batch * (input_len + output_len) > 400_000:  # SGLang would not fit it in the KV cache
                continue
            prefill = truth.prefill_s(truth.total_sms, [(input_len, 0)] * batch)
            context = input_len + (output_len - 1) // 2 + 1
            decode = truth.decode_s(truth.total_sms, batch, batch * context)
            total = prefill + decode * (output_len - 1)
            out.append(json.dumps({
                "run_name": "qwen3_8b_h100_synthetic", "batch_size": batch, "input_len": input_len,
                "output_len": output_len, "prefill_latency": prefill,
                "prefill_throughput": batch * input_len / prefill, "median_decode_latency": decode,
                "median_decode_throughput": batch / decode, "total_latency": total,
                "overall_throughput": batch * (input_len + output_len) / total}))
    path.write_text("\n".join(out) + "\n")


def write_log(path: Path, lines: int, seed: int = 1) -> None:
    """A server log of ``lines`` lines; decode steps timed by the model at :data:`KV_SCALE`,
    :data:`FIXED_S`."""
    truth = truth_model()
    rng = random.Random(seed)
    clock = datetime.datetime(2026, 11, 30, 9, 0, 0)
    out = [f"[{clock:%Y-%m-%d %H:%M:%S}] server_args=ServerArgs(model_path='Qwen/Qwen3-8B', tp_size=1, "
           "...)\n",
           (f"[{clock:%Y-%m-%d %H:%M:%S} TP0] max_total_num_tokens=400000, chunked_prefill_size=8192, "
           "max_prefill_tokens=16384, max_running_requests=512, context_len=40960, available_gpu_mem=10.21 "
           "GB\n")]
    running, context = 16, 2048.0
    while len(out) < lines:
        event = rng.random()
        if event < 0.15:  # a prefill batch joins new requests
            new = rng.choice([1, 2, 4])
            tokens = new * rng.choice([512, 1024, 2048])
            out.append(f"[{clock:%Y-%m-%d %H:%M:%S} TP0] Prefill batch, #new-seq: {new}, #new-token: "
                       f"{tokens}, #cached-token: 0, token usage: 0.12, #running-req: {running}, #queue-req: "
                       f"0, #pending-token: 0, cuda graph: False, input throughput (token/s): 31250.07\n")
            running = min(256, running + new)
            context = (context * (running - new) + tokens) / running
            continue
        if event < 0.16:
            out.append(f"[{clock:%Y-%m-%d %H:%M:%S} TP0] KV cache pool is full. Retract requests. "
                       f"#retracted_reqs: 1, #new_token_ratio: 0.7000 -> 0.8000\n")
            running = max(1, running - 1)
            continue
        if event < 0.22:  # requests finish
            running = max(1, running - rng.choice([1, 2, 4]))
            context = max(128.0, context * rng.uniform(0.7, 1.0))
        context += 40  # the interval's 40 decode steps
        if running * context > 400_000:  # requests finish as the KV cache fills
            running, context = max(1, running // 2), context * 0.6
        # a server's decode step: the kernels and its time per request (StepModel.request_s)
        step = truth.decode_s(truth.total_sms, running, running * context) + truth.request_s(running)
        throughput = running / step
        clock += datetime.timedelta(seconds=40 * step)
        out.append(f"[{clock:%Y-%m-%d %H:%M:%S} TP0] Decode batch, #running-req: {running}, #token: "
                   f"{round(running * context)}, token usage: 0.12, cuda graph: True, gen throughput "
                   f"(token/s): {throughput:.2f}, #queue-req: 0\n")
    path.write_text("".join(out[:lines]))


def run_once(log: Path) -> tuple[float, dict]:
    cmd = pdmux_cmd() + ["calibrate", "--sglang-log", str(log), "--model", MODEL, "--gpu", GPU, "--json"]
    start = time.perf_counter()
    done = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd="/")
    return time.perf_counter() - start, json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--fixture", type=Path, help="only write a log of --lines lines here")
    parser.add_argument("--one-batch-fixture", type=Path, help="only write a one-batch result file here")
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    if args.fixture or args.one_batch_fixture:
        if args.fixture:
            write_log(args.fixture, args.lines)
        if args.one_batch_fixture:
            write_one_batch(args.one_batch_fixture)
        return
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "server.log"
        write_log(log, args.lines)
        size = log.stat().st_size
        times, result = [], {}
        for _ in range(args.runs):
            seconds, result = run_once(log)
            times.append(seconds)
    base = build_step_model(find_gpu(GPU), load_model(MODEL))
    kv_found = result["terms"]["kv_bandwidth_efficiency"] / base.eff.decode_attention.bandwidth_efficiency
    fixed_found = result["terms"]["decode_fixed_ms"] / 1e3
    used = sum(row["count"] for row in result["rows"])
    lines = [
        SECTION, "",
        (f"`python benchmarks/bench_calibrate.py --lines {args.lines} --runs {args.runs}` "
        f"({datetime.date.today().isoformat()}): `pdmux calibrate --sglang-log` on a {args.lines:,}-line "
        f"({size / 1024**2:.1f} MiB) SGLang 0.5.23 server log of {MODEL} on {GPU}, whole process."), "",
        "| runs | median s | max s | target | clean intervals (points) | KV scale made / found | fixed ms "
        "made / found |",
        "|---|---|---|---|---|---|---|",
        (f"| {args.runs} | {statistics.median(times):.2f} | {max(times):.2f} | < 5 s | {used:,} "
        f"({result['points']:,}) | {KV_SCALE} / {kv_found:.3f} | {FIXED_S * 1e3:.2f} / "
        f"{fixed_found * 1e3:.3f} |"), "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.write:
        results_md.write_section(SECTION, text, RESULTS)


if __name__ == "__main__":
    main()
