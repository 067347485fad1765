"""A sweep of hostile inputs across every command (issue 23, item 2): not a test, a tool to re-run.

Each case runs ``python -m pdmux_cli ...`` in a fresh folder of its own, in a session of its own, and
is judged on what the project promises (docs/output-and-errors.md):

- no traceback (``Traceback`` on stdout or stderr);
- no hang (the run ends within its time limit);
- nothing left: no process of its session alive after it, no ``*.tmp`` file and no file the case did
  not expect in its folder;
- the right exit code: 0, or 2 with exactly one stderr line ``pdmux: error: ...`` for bad input (1 only
  where a case says a runtime failure is right: no GPU); a case that names the code it expects is
  held to it; a signal case to ``128 + signal`` (or 0 when the run was already done).

The inputs are new ones, in the families issue 23 found problems in: stop signals, control
characters and hostile YAML, values that make work unbounded, the environment (matplotlib backend,
encodings, terminal width, closed streams), values no launch can use, output paths, refusals that
should agree, numbers that look wrong, and trace formats; and the options main gained since
(``--max-concurrency``, ``--admission-delay-ms``, ``--qps inf``, ``random:L``, ``--kv-cache-dtype``,
``--sglang``, ``gen-config --slo-itl``, ``capacity --config`` repeated, ``calibrate --bench-serving``).
Issue 34 added the families ``gzip`` (damaged gzip traces, 4 GiB bombs of a few MB, a .gz of a
non-trace, .gz where text is read), ``ray`` (Ray missing, addresses malformed, unreachable or not Ray,
stop signals while a local Ray starts and runs), ``signals34`` (stop signals once calibrate
--bench-serving's, tune's and capacity's workers run), ``json`` (error paths with ``--json``: nothing
on stdout), ``spec`` (the speculative options, draft configs) and ``gsp`` (``--gsp-*``,
``--disable-cuda-graph``); and two judgements: stdout left on an error where it carries the result
(``--json``, gen-config's and tune's YAML), and an output file left that is not whole.
Every value is chosen from the README's description of the option, as a new user would.

Usage: ``python benchmarks/hostile_sweep.py [--family NAME] [--match TEXT] [--list] [--json FILE] [-v]``;
exit 0 when every case passes. About 10 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures"
AZURE = str(FIX / "azure_conv_50.csv")
MOON = str(FIX / "mooncake_small.jsonl")
BURST = str(FIX / "burstgpt_small.csv")
LOG = str(FIX / "sglang" / "model_made_server_0.5.23_h100_qwen3_8b.log")
ONE_BATCH = str(FIX / "sglang" / "model_made_one_batch_h100_qwen3_8b.jsonl")
H100 = (ROOT / "profiles" / "gpus" / "h100-sxm.yaml").read_text()
QWEN = json.loads((ROOT / "profiles" / "models" / "Qwen3-8B.json").read_text())
SYN = ["--synthetic", "--qps", "2", "--max-requests", "20"]
GSP = ["--dataset-name", "generated-shared-prefix", "--qps", "2", "--max-requests", "20"]
SLO = ["--slo-ttft", "1000", "--slo-itl", "60"]
SMALL_TUNE = ["--sm-group-nums", "8", "--divisors", "36", "--budgets", "65536", "--no-fixed-splits",
              "--slo-margins", "none", "--workers", "1"]


@dataclass
class Case:
    """One run: ``args`` after ``pdmux``; ``files``: name -> text or bytes written first (``None``: a fifo,
    a ``("link", target)`` tuple: a symlink); ``codes``: exit codes that are right; ``outputs``: files the
    run may leave; ``env``: extra environment; ``stdin``/``stdout``/``stderr``: ``"closed"``, ``"full"``;
    ``signal``: ``(signum, delay_s, to_group)``; ``timeout``: seconds; ``after_workers``: the delay counts
    from when this many processes (pdmux and its workers) run in the case's session."""

    family: str
    name: str
    args: list[str]
    files: dict = field(default_factory=dict)
    codes: tuple[int, ...] = (0, 2)
    outputs: tuple[str, ...] = ()
    env: dict = field(default_factory=dict)
    stdout: str = ""
    stderr: str = ""
    signal: tuple | None = None
    timeout: float = 120
    after_workers: int = 0


def cases() -> list[Case]:
    out: list[Case] = []

    def add(family: str, name: str, args: list[str], **kw) -> None:
        out.append(Case(family, name, args, **kw))

    # --- stop signals: SIGTERM, SIGHUP, SIGINT to the process or its group, early or late -----------------
    long_runs = [
        ("simulate",
         ["simulate", "--synthetic", "--qps", "40", "--duration", "600", "--workers", "2", "--csv", "o.csv",
                      "--plot", "o.png", "--max-concurrency", "64"]),
        ("tune", ["tune", "--trace", "trace.csv", *SLO, "--workers", "2", "-o", "t.yaml"]),
        ("capacity",
         ["capacity", "trace.csv", *SLO, "--workers", "2", "--plot", "c.png", "--config", "c.yaml",
                      "--config", "c.yaml"]),
        ("gen-config --tune",
         ["gen-config", "--tune", "--gpu", "h200", "--trace", "trace.csv", *SLO, "-o", "g.yaml"]),
        ("simulate --dp 8", ["simulate", "trace.csv", "--dp", "8", "--workers", "2", "--policies",
                             "pdmux,chunked,mixed-chunk,prefill-first"]),
        ("accuracy --serving", ["accuracy", "--serving", "--workers", "2"]),
        ("simulate disagg", ["simulate", "trace.csv", "--disagg", "2P2D", "--rate-scale", "4", "--json"]),
    ]
    trace = {"trace.csv": _azure_trace(3000), "c.yaml": "sm_group_num: 6\n"}
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        for delay in (0.3, 0.7, 1.1, 1.5, 2.0, 2.6):
            for group in (False, True):
                label, args = long_runs[(len(out)) % len(long_runs)]
                add("signals",
                    f"{signal.Signals(signum).name} {'group' if group else 'pid'} at {delay}s: {label}", args,
                    files=dict(trace), signal=(signum, delay, group), outputs=("o.csv", "o.png", "t.yaml",
                                                                                     "c.png", "g.yaml"))

    # --- control characters and hostile YAML in every file option that reads YAML --------------------------
    hostile_yaml = {
        "DEL": "sm_group_num: 8\x7f\n", "C1 control": "sm_group_num: 8\x85\x86\n",
        "ESC": "\x1b[31msm_group_num: 8\n", "vertical tab": "sm_group_num:\x0b8\n",
        "form feed": "\x0csm_group_num: 8\n", "U+FFFF": "sm_group_num: 8\uffff\n",
        "BOM": "\ufeffsm_group_num: 8\n", "CRLF": "sm_group_num: 8\r\nsplit_forward_token_budget: 4096\r\n",
        "lone CR": "sm_group_num: 8\rdecode_bs_divisor: 36\r",
        "tab indent": "manual_divisions:\n\t- [112, 20, 0]\n",
        "two documents": "sm_group_num: 8\n---\nsm_group_num: 6\n", "only a comment": "# nothing\n",
        "empty": "", "a list": "- 1\n- 2\n", "a string": "hello\n", "null": "~\n",
        "binary tag": "sm_group_num: !!binary aGVsbG8=\n",
        "python tag": "sm_group_num: !!python/name:os.system\n",
        "anchor bomb": "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
                       "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: [*c, *c, *c, *c, *c, *c, *c, *c, "
                       "*c]\n",
        "deep nesting": "a: " + "[" * 3000 + "]" * 3000 + "\n",
        "huge integer": "sm_group_num: " + "7" * 4400 + "\n", "float inf": "sm_group_num: .inf\n",
        "float nan": "split_forward_token_budget: .nan\n", "negative": "sm_group_num: -8\n",
        "bool": "sm_group_num: yes\n", "date": "decode_bs_divisor: 2025-02-30\n",
        "repeated key": "sm_group_num: 8\nsm_group_num: 6\n", "unknown key": "sm_group_nums: 8\n",
        "manual wrong shape": "sm_group_num: 3\nmanual_divisions: [[112, 20]]\n",
        "manual strings": "sm_group_num: 3\nmanual_divisions: [['112', '20', '0']]\n",
        "manual huge": "sm_group_num: 3\nmanual_divisions: [[99999999999999999999, 20, 0]]\n",
        "not utf-8": b"sm_group_num: 8 \xff\xfe\n", "nul bytes": b"\x00\x00\x00",
    }
    readers = [
        ("check-config", lambda f: ["check-config", f]),
        ("estimate --config", lambda f: ["estimate", "--config", f]),
        ("splits --config", lambda f: ["splits", "--config", f]),
        ("simulate --config", lambda f: ["simulate", *SYN, "--config", f]),
        ("capacity --config x2",
         lambda f: ["capacity", *SYN, *SLO, "--config", f, "--config", f, "--workers", "1"]),
        ("estimate --calibration", lambda f: ["estimate", "--calibration", f]),
        ("gen-config --slo-itl --calibration",
         lambda f: ["gen-config", "--slo-itl", "60", "--context", "2048",
                                                          "--calibration", f]),
        ("tune --calibration", lambda f: ["tune", "--trace", AZURE, *SLO, *SMALL_TUNE, "--calibration", f]),
        ("calibrate --merge", lambda f: ["calibrate", "--merge", f, "--merge", f]),
        ("estimate --gpu FILE", lambda f: ["estimate", "--gpu", f]),
        ("splits --gpu FILE", lambda f: ["splits", "--gpu", f]),
    ]
    for i, (label, text) in enumerate(hostile_yaml.items()):
        for j in (i % len(readers), (i + 5) % len(readers)):
            rname, make = readers[j]
            add("yaml", f"{label} via {rname}", make("x.yaml"), files={"x.yaml": text})
    gpu_fields = {"sm_count 0": ("sm_count", "0"), "sm_count huge": ("sm_count", "1e12"),
                  "cc 6.5": ("compute_capability", '"6.5"'), "cc text": ("compute_capability", "hopper"),
                  "cc 12.1 (known)": ("compute_capability", '"12.1"'),
                  "memory negative": ("memory_bytes", "-1"), "memory 1 byte": ("memory_bytes", "1"),
                  "bandwidth nan": ("hbm_bytes_per_s", ".nan"), "bandwidth 1e30": ("hbm_bytes_per_s", "1e30"),
                  "name with ESC": ("name", '"H\\e[31m100"'), "name 10k chars": ("name", "H" * 10000),
                  "name empty": ("name", '""')}
    for label, (key, value) in gpu_fields.items():
        text = "\n".join(f"{key}: {value}" if line.startswith(key + ":") else line
                         for line in H100.splitlines()) + "\n"
        add("yaml", f"GPU file: {label}", ["estimate", "--gpu", "g.yaml"], files={"g.yaml": text})
        add("yaml", f"GPU file: {label} (simulate)", ["simulate", *SYN, "--gpu", "g.yaml"],
            files={"g.yaml": text})

    # --- bounded work: each must end quickly, refused or computed ------------------------------------------
    for running, tokens, tput in (("1" + "0" * 12, 36600, 1e6), ("4294967297", 5000000000, 1e9), ("0", 0, 0),
                                  ("-5", 100, 10), ("3.5", 100, 10), ("١٢", 100, 10), ("12", 10**30, 1e3),
                                  ("12", 100, "inf"), ("12", 100, "1e999"), ("12", 100, "nan")):
        line = (f"[2026-11-30 09:00:00 TP0] Decode batch, #running-req: {running}, #token: {tokens}, token "
                f"usage: 0.12, cuda graph: True, gen throughput (token/s): {tput}, #queue-req: 0\n")
        add("bounded", f"log #running-req {running} #token {tokens} tput {tput}",
            ["calibrate", "--sglang-log", "s.log", "--model", "qwen3-8b", "--gpu", "h100"],
            files={"s.log": line * 5}, timeout=60)
    for bs in ("1000000", "999999", "65536", "1"):
        add("bounded", f"estimate --decode-bs {bs} --all-levels --json",
            ["estimate", "--decode-bs", bs, "--all-levels",
                                                                         "--json"], timeout=60)
    for args in (["estimate", "--context", "10000000"], ["estimate", "--prompt-tokens", "40960"],
                 ["estimate", "--prompt-tokens", "40961"], ["estimate", "--decode-bs", "1000001"],
                 ["splits", "--decode-bs", ",".join(str(i) for i in range(1, 3000))],
                 ["splits", "--prompt-tokens", "1" + "0" * 60], ["splits", "--decode-bs", "9" * 90],
                 ["simulate", "--synthetic", "--qps", "inf", "--max-requests", "1000000", "--duration", "1"],
                 ["simulate", "--synthetic", "--qps", "inf", "--max-requests", "3000", "--policies",
                  "chunked"],
                 ["simulate", "--synthetic", "--qps", "0.000001", "--max-requests", "5"],
                 ["simulate", "--synthetic", "--qps", "5", "--prompt-tokens", "random:10000000",
                  "--output-tokens", "random:10000000", "--max-requests", "5"],
                 ["simulate", "--synthetic", "--qps", "5", "--prompt-tokens", "random:1024:1.5",
                  "--output-tokens", "random:128", "--max-requests", "5"],
                 ["simulate", "--synthetic", "--qps", "5", "--prompt-tokens", "random:1024:0:2048",
                  "--output-tokens", "random:128", "--max-requests", "5"],
                 ["simulate", "--synthetic", "--qps", "5", "--prompt-tokens", "lognormal:1024:4",
                  "--max-requests", "200"],
                 ["simulate", "--dataset-name", "generated-shared-prefix", "--qps", "inf",
                  "--gsp-num-groups", "1000", "--gsp-prompts-per-group", "1000", "--gsp-range-ratio", "0.5",
                  "--max-requests", "20", "--policies", "chunked"],
                 ["simulate", *GSP, "--gsp-num-groups", "100000", "--gsp-prompts-per-group", "100000"],
                 ["simulate", *GSP, "--gsp-system-prompt-len", "10000000", "--gsp-question-len", "10000000"],
                 ["simulate", *SYN, "--max-concurrency", "1000000000"],
                 ["simulate", *SYN, "--max-concurrency", "1"],
                 ["simulate", *SYN, "--max-running-requests", "1000000000"],
                 ["simulate", *SYN, "--prefill-decode-interval", "100000"],
                 ["capacity", *SYN, *SLO, "--tolerance", "0.0000001", "--workers", "1", "--policies",
                  "chunked"],
                 ["capacity", *SYN, *SLO, "--target", "0.0000001", "--workers", "1", "--policies", "chunked"],
                 ["tune", "--trace", AZURE, *SLO, "--sm-group-nums", ",".join(str(i) for i in range(3, 135)),
                  "--divisors", "36", "--budgets", "65536", "--no-fixed-splits", "--slo-margins", "none"],
                 ["gen-config", "--slo-itl", "0.001", "--context", "2048"],
                 ["gen-config", "--slo-itl", "1e9", "--context", "2048"],
                 ["gen-config", "--slo-itl", "60", "--context", "40960", "--max-running-requests",
                  "1000000000"],
                 ["calibrate", "--sglang-bench", "b.jsonl", "--model", "qwen3-8b", "--gpu", "h100"]):
        files = {"b.jsonl": '{"run_name": "x", "batch_size": 1000000000, "input_len": 1000000000, '
                            '"output_len": 2, "prefill_latency": 1e-9, "median_decode_latency": '
                            '1e-9}\n'} if "b.jsonl" in args else {}
        add("bounded", " ".join(args)[:90], args, files=files, timeout=90)

    # --- the environment ---------------------------------------------------------------------------------
    envs = [({"MPLBACKEND": "tkagg"}, ["estimate", "--plot", "p.png"]),
            ({"MPLBACKEND": ""}, ["simulate", *SYN, "--plot", "p.png"]),
            ({"MPLBACKEND": "module://nowhere"}, ["capacity", *SYN, *SLO, "--plot", "p.png", "--workers", "1",
                                                  "--policies", "chunked"]),
            ({"MPLCONFIGDIR": "/proc/nowhere"}, ["estimate", "--plot", "p.png"]),
            ({"PYTHONIOENCODING": "ascii"}, ["estimate", "--gpu", "./gé.yaml"]),
            ({"PYTHONIOENCODING": "latin-1"}, ["gen-config", "-o", "配置.yaml"]),
            ({"PYTHONIOENCODING": "ascii"}, ["simulate", *SYN, "--csv", "résultats.csv"]),
            ({"PYTHONIOENCODING": "ascii:strict"}, ["check-config", "ñ.yaml"]),
            ({"LANG": "C", "LC_ALL": "C"}, ["splits", "--all"]),
            ({"COLUMNS": "0"}, ["estimate", "--all-levels"]),
            ({"COLUMNS": "5"}, ["tune", "--trace", AZURE, *SLO,
                                                                                  *SMALL_TUNE]),
            ({"COLUMNS": "100000"}, ["simulate", *SYN]), ({"COLUMNS": "abc"}, ["splits"]),
            ({"LINES": "-1", "TERM": "dumb"}, ["check-config", "pdmux.yaml"]),
            ({"NO_COLOR": "1", "FORCE_COLOR": "1"}, ["estimate"]),
            ({"HOME": "/nonexistent"}, ["estimate", "--plot", "p.png"])]
    for env, args in envs:
        files = {"gé.yaml": H100, "pdmux.yaml": "sm_group_num: 8\n", "ñ.yaml": "sm_group_num: 8\n"}
        add("environment", f"{env} {' '.join(args)[:60]}", args, env=env, files=files,
            outputs=("p.png", "配置.yaml", "résultats.csv"))
    for stream in ("stdout", "stderr"):
        for how in ("closed", "full"):
            for args in (["estimate"], ["estimate", "--decode-bs", "0"], ["simulate", *SYN, "--json"]):
                add("environment", f"{stream} {how}: {' '.join(args)[:50]}", args, **{stream: how},
                    codes=(0, 1, 2))

    # --- values no launch can use ------------------------------------------------------------------------
    values = [
        ["gen-config", "--sm-group-num", "135"], ["gen-config", "--sm-group-num", "2"],
        ["gen-config", "--sm-group-num",
                                                                                        "-3"],
        ["splits", "--gpu", "h20", "--sm-group-num", "81"],
        ["estimate", "--gpu", "b200", "--sm-group-num", "150"], ["simulate", *SYN, "--sm-group-num", "1000"],
        ["check-config", "pdmux.yaml", "--sm-group-num", "99999"],
        ["simulate", *SYN, "--cuda-graph-max-bs", "0"], ["simulate", *SYN, "--cuda-graph-max-bs", "-1"],
        ["simulate", *SYN, "--cuda-graph-max-bs", "40000"],
        ["simulate", *SYN, "--cuda-graph-max-bs", "99999999999999"],
        ["simulate", AZURE, "--rate-scale", "1e-300"], ["simulate", AZURE, "--rate-scale", "5e5"],
        ["simulate", AZURE, "--qps", "inf"], ["simulate", AZURE, "--qps", "-inf"],
        ["simulate", AZURE, "--qps", "nan"], ["capacity", AZURE, *SLO, "--qps", "1e300", "--workers", "1"],
        ["simulate", *SYN, "--mem-fraction-static", "0"], ["simulate", *SYN, "--mem-fraction-static", "1"],
        ["simulate", *SYN, "--mem-fraction-static", "1.5"],
        ["simulate", *SYN, "--mem-fraction-static", "nan"], ["simulate", *SYN, "--admission-delay-ms", "-1"],
        ["simulate", *SYN, "--admission-delay-ms", "1e308"],
        ["simulate", *SYN, "--admission-delay-ms", "nan"],
        ["simulate", *SYN, "--first-token-delay-ms", "inf"],
        ["simulate", *SYN, "--admission-interval-ms", "-0"],
        ["simulate", *SYN, "--per-request-overhead-ms", "1e9"], ["simulate", *SYN, "--max-concurrency", "0"],
        ["simulate", *SYN, "--max-concurrency", "-4"],
        ["simulate", *SYN, "--max-concurrency", "8", "--dp", "2"],
        ["simulate", *SYN, "--kv-cache-dtype", "fp4"], ["simulate", *SYN, "--kv-cache-dtype", "FP8_E4M3"],
        ["simulate", *SYN, "--kv-cache-dtype", "mxfp8"],
        ["estimate", "--kv-cache-dtype", "fp8_e5m2", "--kv-bytes", "1"],
        ["estimate", "--kv-cache-dtype", " "], ["estimate", "--sglang", "0.5.22"],
        ["estimate", "--sglang", "standard@b875545"], ["check-config", "pdmux.yaml", "--sglang", "overlay@"],
        ["check-config", "pdmux.yaml", "--sglang", "OVERLAY@2126B0B"],
        ["simulate", *SYN, "--sglang", "overlay@2126b0b"], ["gen-config", "--sglang", "latest"],
        ["estimate", "--tp", "3"], ["estimate", "--tp", "9"], ["estimate", "--tp", "0"],
        ["simulate", *SYN, "--tp", "16"], ["simulate", *SYN, "--dp", "65"], ["simulate", *SYN, "--dp", "0"],
        ["simulate", *SYN, "--disagg", "0P1D"], ["simulate", *SYN, "--disagg", "65P1D"],
        ["simulate", *SYN, "--disagg", "1P1D", "--disagg-tp", "0"],
        ["estimate", "--disagg", "1p1d", "--kv-link-gb-s", "0"],
        ["estimate", "--disagg", "1P1D", "--kv-link-gb-s",
                                                                   "1e308"],
        ["estimate", "--disagg", "1P1D", "--kv-link", "infiniband"], ["estimate", "--disagg", "1P1D",
                                                                      "--kv-link-latency-us", "-1"],
        ["estimate", "--level", "132/0"], ["estimate", "--level", "0/132"],
        ["estimate", "--level", "200/100"], ["estimate", "--level", "64/68/1"], ["estimate", "--s-sat", "0"],
        ["estimate", "--s-sat", "1000"], ["estimate", "--mfu", "1.5", "--cost-model", "chapter"],
        ["estimate", "--bandwidth-efficiency", "0",
                                                                  "--cost-model", "chapter"],
        ["estimate", "--weight-bytes", "0"], ["estimate", "--weight-bytes", "1e308"],
        ["estimate", "--kv-bytes", "1e-300"], ["estimate", "--flops-dtype", "int4"],
        ["estimate", "--cost-model", "Roofline "], ["estimate", "--model", "gpt-5"],
        ["estimate", "--model", "cfg.json"], ["estimate", "--gpu", "h100 "],
        ["estimate", "--gpu", "NVIDIA H100 80GB HBM3"], ["splits", "--sms", "24", "--cc", "9.0"],
        ["splits", "--sms", "0", "--cc", "9.0"], ["splits", "--sms", "2000",
                                                                                           "--cc", "9.0"],
        ["splits", "--sms", "132", "--cc", "10.0"], ["splits", "--sms", "132", "--cc", "5.2"],
        ["splits", "--cc", "9.0"], ["bench", "--dry-run", "--gpu", "h100"],
        ["bench", "--dry-run", "--gpu", "h100", "--gemm-shape", "0x0x0"],
        ["bench", "--dry-run", "--gpu", "h100", "--levels", "200/10"],
        ["bench", "--dry-run", "--model", "qwen3-8b"],
        ["bench", "--dry-run", "--gpu", "h100", "--buffer-bytes", "1e30"],
        ["bench", "--dry-run", "--repeats", "0"], ["bench", "--dry-run", "--model", "deepseek-v3"],
        ["bench", "--dry-run", "--sm-group-num", "500"],
    ]
    for args in values:
        files = {"pdmux.yaml": "sm_group_num: 8\n",
                 "cfg.json": json.dumps({**QWEN, "num_hidden_layers": 0, "hidden_size": -4096})}
        add("values", " ".join(a if len(a) < 30 else a[:27] + "..." for a in args)[:100], args, files=files)
    add("values", "bench on a machine without a GPU", ["bench", "--out", "b"], codes=(1,))

    # --- output paths --------------------------------------------------------------------------------------
    names = {"240 bytes": "x" * 236 + ".csv", "255 bytes": "y" * 251 + ".csv",
             "256 bytes": "z" * 252 + ".csv", "254 bytes of é": "é" * 125 + ".csv", "a newline": "a\nb.csv",
             "a leading dash": "--x.csv", "spaces": "my results.csv", "an emoji": "📈.csv", "dot": ".",
             "dotdot": "..", "nested missing": "no/such/dir/x.csv", "a trailing dot slash": "out/.",
             "double slash": "out//", "a dash": "-", "tilde": "~nouser/x.csv",
             "dev shm": f"/dev/shm/pdmux-sweep-{os.getpid()}.csv", "dev null": "/dev/null",
             "dev stderr": "/dev/stderr", "proc": "/proc/self/status", "a fifo": "fifo.csv",
             "the trace itself": "trace.csv", "a directory": "adir", "a loop link": "loop.csv",
             "a dangling link": "dangle.csv", "a link to a folder": "dirlink", "read-only folder": "ro/x.csv"}
    for label, name in names.items():
        files = {"trace.csv": _azure_trace(30), "fifo.csv": None, "adir/keep": "",
                 "loop.csv": ("link", "loop.csv"), "dangle.csv": ("link", "gone/x.csv"),
                 "dirlink": ("link", "adir"), "ro/keep": ""}
        keep = tuple(files) + (name,)
        add("paths", f"--csv {label}", ["simulate", "trace.csv", "--workers", "1", "--csv", name],
            files=files, outputs=keep)
        add("paths", f"-o {label} (gen-config)", ["gen-config", "-o", name], files=files, outputs=keep)
        if label in ("255 bytes", "a leading dash", "a dangling link", "dev shm", "a trailing dot slash",
                     "a dash"):
            add("paths", f"--plot {label}", ["estimate", "--plot", name.replace(".csv", ".png")], files=files,
                outputs=(*keep, name.replace(".csv", ".png")))
            add("paths", f"tune -o {label}", ["tune", "--trace", "trace.csv", *SLO, *SMALL_TUNE, "-o", name],
                files=files, outputs=keep)
            add("paths", f"calibrate -o {label}",
                ["calibrate", "--sglang-log", LOG, "--model", "qwen3-8b", "--gpu",
                                                   "h100", "-o", name], files=files, outputs=keep)

    # --- refusals that should agree
    # --------------------------------------------------------------------------
    spellings = ["", " ", ",", "8,", ",8", "8,,6", "８", "٨", "८", "²", "8.0", "8e0", "0x8", "+8", "−8",
                 "8_0", "1" * 25, "８,６", "nan", "inf", "8;6", "8 6"]
    int_list_options = [(["splits", "--decode-bs"], ""), (["splits", "--prompt-tokens"], ""),
                        (["estimate", "--chunk-sizes"], ""), (["estimate", "--mixed-chunk-sizes"], ""),
                        (["tune", "--trace", AZURE, *SLO, "--workers", "1", "--sm-group-nums"], ""),
                        (["tune", "--trace", AZURE, *SLO, "--workers", "1", "--divisors"], ""),
                        (["tune", "--trace", AZURE, *SLO, "--workers", "1", "--budgets"], ""),
                        (["simulate", *SYN, "--chunk-sizes"], ""), (["capacity", *SYN, *SLO, "--workers", "1",
                                                                    "--chunk-sizes"], "")]
    for i, value in enumerate(spellings):
        for j in (i % len(int_list_options), (i + 4) % len(int_list_options)):
            base, _ = int_list_options[j]
            add("refusals", f"{' '.join(base[:2])} ... {base[-1]} {value!r}", [*base, value])
    for value in ("", "pdmux,", "PDMUX", "pdmux,pdmux", "pdmux, chunked", "disagg", "mixed_chunk", "pd mux",
                  "chunked,,", "\x1b[2J"):
        add("refusals", f"simulate --policies {value!r}", ["simulate", *SYN, "--policies", value])
        add("refusals", f"capacity --policies {value!r}",
            ["capacity", *SYN, *SLO, "--workers", "1", "--policies", value])
    scalars = [(["estimate", "--decode-bs"],
                ["٣٢", "３２", "32.0", "1e2", "-1", "0", " 32", "0032", "32 ", "9" * 30]),
               (["simulate", *SYN, "--workers"], ["0", "-1", "٢", "99999999999999999999"]),
               (["capacity", *SYN, *SLO, "--workers"], ["0", "٢"]),
               (["tune", "--trace", AZURE, *SLO, "--workers"],
                                                                     ["0", "٢"]),
               (["simulate", *SYN, "--seed"], ["-1", "٣", "99999999999999999999999"]),
               (["simulate", "--synthetic", "--qps"], ["", "١", "0", "-inf", "1e400"]),
               (["simulate", *GSP, "--gsp-num-groups"], ["0", "-1", "٣", "1.5", "9" * 30]),
               (["capacity", *GSP, *SLO, "--workers", "1", "--gsp-range-ratio"], ["nan", "-0.1", "2", "inf"]),
               (["simulate", "--qps", "2", "--dataset-name"], ["", "random", "sharegpt", "gsp", "\x1b[2J"]),
               (["simulate", *SYN, "--gsp-output-len"], ["64"]),
               (["estimate", "--level"],
                ["auto ", "AUTO", "80/", "/52", "80:52", "٨٠/٥٢", "80/52/", "sglang"]),
               (["gen-config", "--divisions"],
                ["112:20:0,", "112:20:0,,96:36:10", "١١٢:20:0", "112:20", " "]),
               (["simulate", *SYN, "--disagg"], ["1P1D ", "١P١D", "1p1d", "P1D", "1P1D1"]),
               (["estimate", "--disagg"], ["2P6D", "1P0D", "0P0D"]),
               (["gen-config", "--slo-itl"], ["", "٦٠", "nan", "-60", "60ms"]),
               (["splits", "--cc"], ["9", "9.", ".0", "9.0.0", "٩.٠", "9,0", " 9.0 "])]
    for base, vals in scalars:
        for value in vals:
            add("refusals", f"{' '.join(base[:3])}... {value!r}", [*base, value])
    add("refusals", "estimate --cost-model chapter --disable-cuda-graph",
        ["estimate", "--cost-model", "chapter", "--disable-cuda-graph"])
    add("values", "simulate --disable-cuda-graph --cuda-graph-max-bs 8 (taken, as SGLang: sizes nothing)",
        ["simulate", *SYN, "--disable-cuda-graph", "--cuda-graph-max-bs", "8"], codes=(0,))
    add("refusals", "pdmux --help | head", ["--help"], stdout="head")
    add("refusals", "pdmux tune --help | head", ["tune", "--help"], stdout="head")
    add("refusals", "pdmux (no command) | head", [], stdout="head")
    add("refusals", "pdmux --version", ["--version"])
    add("refusals", "unknown command", ["simulat"], codes=(2,))
    add("refusals", "unknown option", ["estimate", "--gpus", "h100"], codes=(2,))

    # --- numbers that look wrong: the run reports, the judge checks the JSON
    # ---------------------------------
    for args in (["estimate", "--prompt-tokens", "2", "--json"],
                 ["estimate", "--prompt-tokens", "16", "--decode-bs",
                                                                   "256", "--json"],
                 ["estimate", "--cost-model", "chapter", "--prompt-tokens", "64", "--json"],
                 ["estimate", "--context", "1", "--decode-bs", "1", "--json"],
                 ["estimate", "--model", "deepseek-v3", "--tp", "8", "--gpu", "h200", "--json"],
                 ["estimate", "--disagg", "4P4D", "--tp", "2", "--json"],
                 ["simulate", "--synthetic", "--qps", "20", "--max-requests", "200", "--prompt-tokens",
                  "lognormal:8192:3", "--json"],
                 ["simulate", "--synthetic", "--qps", "inf", "--max-requests", "64", "--prompt-tokens",
                  "random:1024", "--output-tokens", "random:1024", "--json"],
                 ["simulate", MOON, "--json"], ["simulate", BURST, "--json", "--max-concurrency", "2"],
                 ["simulate", *GSP, "--json", "--workers", "1"],
                 ["simulate", AZURE, "--disable-cuda-graph", "--json", "--workers", "1"],
                 ["estimate", "--decode-bs", "1", "--context", "1", "--disable-cuda-graph", "--json"],
                 ["capacity", *SYN, *SLO, "--json", "--workers", "1", "--policies", "pdmux,chunked"],
                 ["gen-config", "--slo-itl", "60", "--gpu", "h200", "--model", "codellama-34b-hf",
                  "--context", "14400", "--json"],
                 ["calibrate", "--sglang-bench", ONE_BATCH, "--sglang-log", LOG, "--model", "qwen3-8b",
                  "--gpu", "h100", "--json"]):
        add("numbers", " ".join(args)[:90], args, codes=(0,))

    # --- trace formats users have ---------------------------------------------------------------------------
    traces = {
        "ShareGPT V3 (one line)": '[{"id": "x", "conversations": [{"from": "human", "value": "hi"}]}]',
        "ShareGPT, BOM and CRLF": '\ufeff[\r\n {"id": "x",\r\n  "conversations": []}\r\n]\r\n',
        "ShareGPT as JSONL": '{"conversations": [{"from": "gpt", "value": "x"}]}\n',
        "vLLM sonnet text": "FROM fairest creatures we desire increase,\nThat thereby beauty's rose might "
        "never die,\n",
        "prompt_len JSONL": '{"timestamp": 1710000000.5, "prompt_len": 10, "output_len": 5}\n',
        "prompt_len JSONL ms": '{"timestamp": 12, "prompt_len": 10, "output_len": 5, "hash_ids": [1]}\n',
        "bench_serving result": json.dumps({"backend": "sglang", "input_lens": [10, 20],
                                            "output_lens": [5, 5]}) + "\n",
        "JSON array of numbers": "[1, 2, 3]", "empty": "", "only newlines": "\n\n\n",
        "azure header only": "TIMESTAMP,ContextTokens,GeneratedTokens\n",
        "azure CRLF + BOM": "\ufeffTIMESTAMP,ContextTokens,GeneratedTokens\r\n2023-11-16 "
                            "18:15:46.6805900,374,44\r\n2023-11-16 18:15:47.6805900,375,45\r\n",
        "azure descending": "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:49.0,374,44\n"
                            "2023-11-16 18:15:46.0,374,44\n",
        "azure negative lengths": "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.0,-374,44\n"
                                  "2023-11-16 18:15:47.0,374,-44\n",
        "azure year 9999": "TIMESTAMP,ContextTokens,GeneratedTokens\n9999-12-31 23:59:59.9,374,44\n"
                           "0001-01-01 00:00:00.0,374,44\n",
        "mooncake huge numbers": '{"timestamp": 1e308, "input_length": 1e308, "output_length": 5}\n'
                                 '{"timestamp": -1e308, "input_length": 5, "output_length": 5}\n',
        "mooncake 4400-digit": '{"timestamp": 0, "input_length": ' + "9" * 4400 + ', "output_length": 5}\n',
        "mooncake nested": '{"timestamp": 0, "input_length": 5, "output_length": 5, "hash_ids": ' + "[" * 5000
                           + "]" * 5000 + "}\n",
        "burstgpt zero responses": "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                                   "5,ChatGPT,100,0,100,Conversation log\n",
        "binary": bytes(range(256)) * 4, "utf-16": "TIMESTAMP,ContextTokens\n".encode("utf-16"),
        "one huge line": "x" * 3_000_000,
    }
    for label, text in traces.items():
        add("traces", f"simulate: {label}", ["simulate", "t.jsonl", "--workers", "1"],
            files={"t.jsonl": text})
        add("traces", f"capacity: {label}", ["capacity", "t.jsonl", *SLO, "--workers", "1"],
            files={"t.jsonl": text})
    for label, path in (("a directory", "."), ("a fifo", "fifo"), ("/dev/zero", "/dev/zero"),
                        ("/dev/null", "/dev/null"), ("/proc/self/mem", "/proc/self/mem"),
                        ("missing", "nope.csv"), ("a loop link", "loop")):
        files = {"fifo": None, "loop": ("link", "loop")}
        add("traces", f"trace is {label}", ["simulate", path], files=files)
        add("traces", f"tune trace is {label}", ["tune", "--trace", path, *SLO], files=files)
        add("traces", f"--model is {label}", ["estimate", "--model", path], files=files)
        add("traces", f"--sglang-log is {label}",
            ["calibrate", "--sglang-log", path, "--model", "qwen3-8b", "--gpu",
                                                   "h100"], files=files)
        add("traces", f"--bench-serving is {label}",
            ["calibrate", "--bench-serving", path, "--model", "qwen3-8b",
                                                      "--gpu", "h100"], files=files)
    out += _cases_34()
    return out


#: Where a fake ``ray`` package that fails to import lives (``--executor ray`` with Ray missing, whether or
#: not this machine has it); made by :func:`_no_ray_dir`.
NO_RAY = Path(tempfile.gettempdir()) / f"pdmux-sweep-no-ray-{os.getpid()}"


def _no_ray_dir() -> str:
    (NO_RAY / "ray").mkdir(parents=True, exist_ok=True)
    (NO_RAY / "ray" / "__init__.py").write_text("raise ImportError(\"No module named 'ray'\")\n")
    return str(NO_RAY)


def _gz(data: bytes | str, members: int = 1) -> bytes:
    one = gzip.compress(data.encode() if isinstance(data, str) else data, compresslevel=9, mtime=0)
    return one * members


def _bomb(chunk: bytes, gib: int) -> bytes:
    """A gzip file of ``gib`` GiB of ``chunk`` repeated, a few MB as stored (64 MiB members)."""
    member = gzip.compress(chunk * (64 * 1024 * 1024 // len(chunk)), compresslevel=9, mtime=0)
    return member * (16 * gib)


_CACHE: dict[str, bytes | str] = {}


def _lazy(key: str, make):
    """Content made the first time a case is prepared (``--list`` stays quick)."""
    def get():
        if key not in _CACHE:
            _CACHE[key] = make()
        return _CACHE[key]
    return get


def _bench_serving_text() -> str:
    """A bench_serving result file of four runs (the tests' own maker: pdmux's simulator with known
    serving terms), about 6 s to fit on 2 cores."""
    sys.path.insert(0, str(ROOT / "tests"))
    import math

    from test_calibrate_serving import bench_serving_line
    lines = [bench_serving_line(math.inf, 1, 8, True), bench_serving_line(math.inf, 24, 60, False),
             bench_serving_line(math.inf, 0, 80, True), bench_serving_line(4, 0, 200, False)]
    return "".join(json.dumps(x) + "\n" for x in lines)


def _ray_site() -> str | None:
    """``--ray-site``'s folder, or ``""`` when Ray imports as installed, ``None`` when there is none."""
    site = os.environ.get("PDMUX_SWEEP_RAY_SITE", "")
    env = {**os.environ, "PYTHONPATH": site}
    ok = subprocess.run([sys.executable, "-c", "import ray"], env=env, capture_output=True).returncode == 0
    return site if ok else None


def _listeners() -> tuple[int, int]:
    """Two local ports that are no Ray cluster: one answers as an HTTP/1 server does, one accepts and says
    nothing (threads of this sweep, for its length)."""
    import socket
    import threading

    def serve(sock: socket.socket, reply: bytes) -> None:
        while True:
            conn, _ = sock.accept()
            if reply:
                conn.sendall(reply)
                conn.close()

    ports = []
    for reply in (b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n", b""):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        ports.append(sock.getsockname()[1])
        if reply:
            threading.Thread(target=serve, args=(sock, reply), daemon=True).start()
        else:
            _KEEP.append(sock)  # in the backlog, never accepted: connects, never answers
    return ports[0], ports[1]


_KEEP: list = []


def _cases_34() -> list[Case]:
    """Issue 34, item 4: the surfaces added since the last pass."""
    out: list[Case] = []

    def add(family: str, name: str, args: list[str], **kw) -> None:
        out.append(Case(family, name, args, **kw))

    azure = Path(AZURE).read_text()
    moon = Path(MOON).read_text()
    burst = Path(BURST).read_text()

    # --- gzip traces -------------------------------------------------------------------------------------
    good = _gz(azure)
    gz = {
        "azure .gz": (good, 0), "mooncake .gz": (_gz(moon), 0), "burstgpt .gz": (_gz(burst), 0),
        "two members": (_gz(azure.split("\n", 20)[0] + "\n") + _gz("\n".join(azure.split("\n")[1:])), 0),
        "truncated": (good[: len(good) // 2], 2), "only the header 10 bytes": (good[:10], 2),
        "only the magic": (b"\x1f\x8b", 2), "magic then garbage": (b"\x1f\x8b" + bytes(range(256)) * 8, 2),
        "corrupt middle": (good[:40] + bytes(b ^ 0x55 for b in good[40:60]) + good[60:], 2),
        "bad CRC": (good[:-8] + b"\0\0\0\0" + good[-4:], 2),
        "trailing garbage": (good + b"garbage after the member", (0, 2)),
        "trailing zeros": (good + b"\0" * 1024, 0),
        "gz of nothing": (_gz(b""), 2), "gz of binary": (_gz(bytes(range(256)) * 64), 2),
        "gz of a gz": (_gz(good), 2), "gz of ShareGPT": (_gz('[{"id": "x", "conversations": []}]'), 2),
        "gz of utf-16": (_gz(azure.encode("utf-16")), 2), "gz of latin-1": (_gz("TIMESTAMP,é\n".encode(
            "latin-1")), 2),
        "gz of a bench_serving result": (_gz(json.dumps({"backend": "sglang", "input_lens": [1],
                                                        "output_lens": [1]}) + "\n"), 2),
        "bomb: 4 GiB of one line": (_lazy("bomb-x", lambda: _bomb(b"x" * 4096, 4)), 2),
        "bomb: 4 GiB of newlines": (_lazy("bomb-nl", lambda: _bomb(b"\n" * 4096, 4)), 2),
        "bomb: a header then 4 GiB of one row": (
            _lazy("bomb-row", lambda: _gz("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.0,")
                  + _bomb(b"9" * 4096, 4)), 2),
        "bomb: mooncake 4 GiB of one JSON line": (
            _lazy("bomb-json", lambda: _gz('{"timestamp": 0, "input_length": 5, "output_length": 5, "x": "')
                  + _bomb(b"a" * 4096, 4)), 2),
    }
    commands = [
        ("simulate", lambda f: ["simulate", f, "--workers", "1", "--policies", "chunked"]),
        ("simulate --json", lambda f: ["simulate", f, "--workers", "1", "--json", "--policies", "pdmux"]),
        ("capacity", lambda f: ["capacity", f, *SLO, "--workers", "1", "--policies", "chunked"]),
        ("tune", lambda f: ["tune", "--trace", f, *SLO, *SMALL_TUNE, "--json"]),
        ("gen-config --slo-itl --trace", lambda f: ["gen-config", "--slo-itl", "60", "--trace", f]),
        ("gen-config --tune", lambda f: ["gen-config", "--tune", "--trace", f, *SLO, "--workers", "1"]),
    ]
    for i, (label, (data, code)) in enumerate(gz.items()):
        codes = code if isinstance(code, tuple) else (code,)
        name = "t.csv.gz" if i % 2 else "trace"
        picks = range(len(commands)) if label.startswith("bomb") or label == "truncated" else \
            (i % len(commands), (i + 3) % len(commands))
        for j in picks:
            cname, make = commands[j]
            add("gzip", f"{label} via {cname}", make(name), files={name: data}, codes=codes, timeout=90)
    add("gzip", "plain text named .gz", ["simulate", "t.gz", "--workers", "1"], files={"t.gz": azure},
        codes=(0,))
    add("gzip", "--format mooncake on an azure .gz", ["simulate", "t.gz", "--format", "mooncake"],
        files={"t.gz": good}, codes=(2,))
    for opt in ("--bench-serving", "--sglang-log", "--sglang-bench"):
        add("gzip", f"calibrate {opt} given a .gz",
            ["calibrate", opt, "x.gz", "--model", "qwen3-8b", "--gpu", "h100"],
            files={"x.gz": _gz(Path(LOG).read_text() if opt == "--sglang-log" else
                               Path(ONE_BATCH).read_text())}, codes=(0, 2))
    for label, data in (("truncated", good[: len(good) // 2]),
                        ("corrupt", good[:40] + b"\xff" * 30 + good[70:])):
        add("gzip", f"{label} .gz: capacity --workers 2 --json",
            ["capacity", "t.gz", *SLO, "--workers", "2", "--json"], files={"t.gz": data}, codes=(2,))

    # --- --executor ray ------------------------------------------------------------------------------------
    no_ray = {"PYTHONPATH": f"{ROOT}{os.pathsep}{NO_RAY}"}
    runs = [["simulate", AZURE, "--workers", "2"], ["simulate", AZURE, "--json"],
            ["capacity", AZURE, *SLO, "--workers", "2"], ["capacity", AZURE, *SLO, "--json"],
            ["tune", "--trace", AZURE, *SLO, *SMALL_TUNE[:-2], "-o", "t.yaml"],
            ["gen-config", "--tune", "--trace", AZURE, *SLO], ["simulate", *SYN, "--dp", "2"]]
    for args in runs:
        add("ray", f"Ray missing: {' '.join(args[:2])} ... --executor ray", [*args, "--executor", "ray"],
            env=no_ray, codes=(2,))
        add("ray", f"Ray missing, --ray-address auto: {' '.join(args[:1])}",
            [*args, "--executor", "ray", "--ray-address", "auto"], env=no_ray, codes=(2,))
    for value in ("RAY", " ray ", "dask", "", "local,ray", "\x1b[2J"):
        add("ray", f"--executor {value!r}", ["simulate", AZURE, "--executor", value], env=no_ray,
            codes=(2,))
    for value in ("", " ", "auto"):
        add("ray", f"--ray-address {value!r} without --executor ray", ["simulate", AZURE, "--ray-address",
                                                                         value], codes=(2,))
    add("ray", "--executor ray --workers 0", ["simulate", AZURE, "--executor", "ray", "--workers", "0"],
        env=no_ray, codes=(2,))
    add("ray", "estimate --executor ray (not an option)", ["estimate", "--executor", "ray"], codes=(2,))
    site = _ray_site()
    if site is not None:
        with_ray = {"PYTHONPATH": os.pathsep.join(x for x in (str(ROOT), site) if x)}
        for address in ("127.0.0.1:1", "ray://127.0.0.1:1", "auto", "nowhere.invalid:6379",
                        "ray://nowhere.invalid:10001", "http://127.0.0.1:1", "256.1.1.1:6379", "::::",
                        "127.0.0.1:99999", "ray://"):
            add("ray", f"Ray installed, --ray-address {address!r} unreachable",
                ["simulate", AZURE, "--executor", "ray", "--ray-address", address, "--json"], env=with_ray,
                codes=(1, 2), timeout=120)
        http_port, mute_port = _listeners()
        for label, port in (("answers HTTP", http_port), ("accepts, says nothing", mute_port)):
            add("ray", f"Ray installed, --ray-address of a port that {label}",
                ["capacity", AZURE, *SLO, "--executor", "ray", "--ray-address", f"127.0.0.1:{port}",
                 "--json"],
                env=with_ray, codes=(1,), timeout=120)
        add("ray", "Ray installed, a local instance: capacity --json",
            ["capacity", AZURE, *SLO, "--executor", "ray", "--workers", "2", "--json", "--policies",
             "chunked"],
            env=with_ray, codes=(0,), timeout=240)
        for signum, delay in ((signal.SIGTERM, 1.0), (signal.SIGTERM, 3.0), (signal.SIGTERM, 6.0),
                              (signal.SIGHUP, 1.0), (signal.SIGHUP, 2.5), (signal.SIGINT, 2.0),
                              (signal.SIGINT, 12.0)):
            add("ray", f"Ray installed: {signal.Signals(signum).name} at {delay}s, tune -o",
                ["tune", "--trace", "trace.csv", *SLO, "--executor", "ray", "--workers", "2", "-o", "t.yaml"],
                files={"trace.csv": _azure_trace(3000)}, env=with_ray, signal=(signum, delay, False),
                outputs=("t.yaml",), timeout=240)

    # --- stop signals with workers: calibrate --bench-serving, tune, capacity -----------------------------
    bench = _lazy("bench-serving", _bench_serving_text)
    big = {"trace.csv": _azure_trace(3000),
           "trace.csv.gz": _lazy("big-gz", lambda: _gz(_azure_trace(20000)))}
    long_runs = [
        ("calibrate --bench-serving", ["calibrate", "--bench-serving", "bs.jsonl", "--model", "qwen3-8b",
                                       "--gpu", "h100", "--workers", "2", "-o", "cal.yaml"]),
        ("calibrate --bench-serving --json", ["calibrate", "--bench-serving", "bs.jsonl", "--bench-serving",
                                              "bs2.jsonl", "--model", "qwen3-8b", "--gpu", "h100",
                                              "--workers", "2", "--json"]),
        ("tune -o --json", ["tune", "--trace", "trace.csv", *SLO, "--workers", "2", "-o", "t.yaml",
                            "--json"]),
        ("tune .gz to stdout", ["tune", "--trace", "trace.csv.gz", *SLO, "--workers", "2"]),
        ("capacity --plot --json", ["capacity", "trace.csv", *SLO, "--workers", "2", "--plot", "c.png",
                                    "--json"]),
        ("capacity .gz", ["capacity", "trace.csv.gz", *SLO, "--workers", "2"]),
        ("simulate spec --csv", ["simulate", "trace.csv", "--workers", "2", "--speculative-algorithm",
                                 "EAGLE", "--speculative-accept-length", "2.5", "--csv", "o.csv"]),
    ]
    k = 0
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        for delay in (0.0, 0.2, 0.6, 1.2):
            for group in (False, True):
                label, args = long_runs[k % len(long_runs)]
                k += 1
                add("signals34", f"{signal.Signals(signum).name} {'group' if group else 'pid'} at {delay}s: "
                    f"{label}", args, files={"bs.jsonl": bench, "bs2.jsonl": bench, **big},
                    signal=(signum, delay, group), after_workers=3,
                    outputs=("cal.yaml", "t.yaml", "c.png", "o.csv"), timeout=180)

    # --- --json on error paths: one stderr line, nothing on stdout ----------------------------------------
    json_errors = [
        ["estimate", "--decode-bs", "0"], ["estimate", "--gpu", "nope"], ["estimate", "--model", "x.json"],
        ["estimate", "--level", "200/100"], ["estimate", "--config", "bad.yaml"],
        ["splits", "--sms", "0", "--cc", "9.0"], ["splits", "--decode-bs", "x"],
        ["simulate", "nope.csv"], ["simulate", "bad.csv"], ["simulate", *SYN, "--policies", "nope"],
        ["simulate", *SYN, "--csv", "bad.csv/x.csv"], ["simulate", *SYN, "--csv", "adir/"],
        ["simulate", *SYN, "--plot", "bad.csv/x.png"], ["simulate", *SYN, "--max-steps", "3"],
        ["simulate", *SYN, "--calibration", "bad.yaml", "--workers", "2"],
        ["capacity", *SYN, *SLO, "--workers", "2", "--calibration", "bad.yaml"],
        ["capacity", *SYN, *SLO, "--workers", "2", "--plot", "bad.csv/c.png"],
        ["capacity", *SYN, *SLO, "--workers", "2", "--max-steps", "3"],
        ["tune", "--trace", AZURE, *SLO, *SMALL_TUNE, "-o", "bad.csv/t.yaml"],
        ["tune", "--trace", AZURE, *SLO, *SMALL_TUNE[:-2], "--workers", "2", "--max-steps", "3"],
        ["tune", "--trace", "bad.csv", *SLO], ["gen-config", "--sm-group-num", "2"],
        ["gen-config", "-o", "bad.csv/g.yaml"], ["gen-config", "--tune", "--trace", AZURE],
        ["gen-config", "--slo-itl", "-1", "--context", "2048"], ["check-config", "bad.yaml"],
        ["check-config", "nope.yaml"], ["calibrate", "--sglang-log", "bad.csv", "--model", "qwen3-8b"],
        ["calibrate", "--bench-serving", "bad.csv", "--model", "qwen3-8b", "--gpu", "h100"],
        ["calibrate", "--merge", "bad.yaml", "--merge", "bad.yaml"],
        ["calibrate", "--sglang-log", LOG, "--model", "qwen3-8b", "--gpu", "h100", "-o", "bad.csv/c.yaml"],
        ["accuracy", "--serving", "--workers", "0"], ["bench", "--out", "b"], ["bench", "--dry-run",
                                                                             "--repeats", "0"],
        ["simulate", *SYN, "--executor", "ray"], ["simulate", *SYN, "--speculative-accept-length", "2"],
        ["estimate", "--speculative-algorithm", "EAGLE", "--speculative-accept-length", "nan"],
        ["gen-config", "--speculative-algorithm", "EAGLE"], ["simulate", "t.gz"],
    ]
    files = {"x.json": "{", "bad.yaml": "sm_group_num: [\n", "bad.csv": "hello\n", "ro/keep": "",
             "adir/keep": "", "t.gz": good[:100]}
    for args in json_errors:
        add("json", f"{' '.join(a[:25] for a in args)[:80]} --json", [*args, "--json"], files=files,
            env=no_ray, codes=(1, 2))
        if args[0] in ("gen-config", "tune") and "-o" not in args:
            add("json", f"{' '.join(a[:25] for a in args)[:80]} (YAML to stdout)", args, files=files,
                env=no_ray, codes=(1, 2))
    for how in ("closed", "full"):
        for args in (["estimate", "--decode-bs", "0", "--json"], ["simulate", *SYN, "--json"],
                     ["capacity", *SYN, *SLO, "--json", "--workers", "2", "--policies", "chunked"],
                     ["calibrate", "--sglang-log", LOG, "--model", "qwen3-8b", "--gpu", "h100", "--json"]):
            add("json", f"stdout {how}: {' '.join(args)[:60]}", args, stdout=how, codes=(0, 1, 2))

    # --- speculative decoding options ----------------------------------------------------------------------
    spec = ["--speculative-algorithm", "EAGLE", "--speculative-accept-length"]
    per_command = {
        "estimate": ["estimate"], "simulate": ["simulate", *SYN, "--workers", "1"],
        "capacity": ["capacity", *SYN, *SLO, "--workers", "1", "--policies", "chunked"],
        "tune": ["tune", "--trace", AZURE, *SLO, *SMALL_TUNE],
    }
    for cname, base in per_command.items():
        for value in ("nan", "inf", "-inf", "0", "-1", "1e308", "x", "", "0.999", "1", "4", "4.0001",
                      "1e-320", "٢"):
            add("spec", f"{cname} --speculative-accept-length {value!r}", [*base, *spec, value])
    algos = ["eagle", "EAGLE3", "NEXTN", "STANDALONE", "MEDUSA", "NGRAM", "", "EAGLE ", "none", "\x1b[2J",
             "lookahead"]
    for i, algo in enumerate(algos):
        cname = list(per_command)[i % len(per_command)]
        add("spec", f"{cname} --speculative-algorithm {algo!r}",
            [*per_command[cname], "--speculative-algorithm", algo, "--speculative-accept-length", "2"])
        add("spec", f"gen-config --speculative-algorithm {algo!r}",
            ["gen-config", "--sglang", "dsv41@a64f33f", "--speculative-algorithm", algo])
        add("spec", f"check-config --speculative-algorithm {algo!r}",
            ["check-config", "pdmux.yaml", "--speculative-algorithm", algo], files={"pdmux.yaml":
                                                                                     "sm_group_num: 8\n"})
    numbers = [("--speculative-num-steps", ["0", "-1", "1", "64", "1000000", "9" * 25, "2.5"]),
               ("--speculative-eagle-topk", ["0", "-1", "1", "8", "1000000", "9" * 25]),
               ("--speculative-num-draft-tokens", ["0", "1", "2", "4", "1000000", "9" * 25])]
    for i, (opt, vals) in enumerate(numbers):
        for j, value in enumerate(vals):
            cname = list(per_command)[(i + j) % len(per_command)]
            add("spec", f"{cname} {opt} {value}", [*per_command[cname], *spec, "2", opt, value], timeout=90)
    for cname, base in per_command.items():
        add("spec", f"{cname} --speculative-num-steps without --speculative-algorithm",
            [*base, "--speculative-num-steps", "3"], codes=(2,))
        add("spec", f"{cname} --speculative-accept-length without --speculative-algorithm",
            [*base, "--speculative-accept-length", "2"], codes=(2,))
        add("spec", f"{cname} EAGLE without --speculative-accept-length",
            [*base, "--speculative-algorithm", "EAGLE"], codes=(2,))
        add("spec", f"{cname} topk 4 steps 3 draft tokens 4 (tree)",
            [*base, *spec, "2", "--speculative-num-steps", "3", "--speculative-eagle-topk", "4",
             "--speculative-num-draft-tokens", "4"], codes=(0, 2))
        add("spec", f"{cname} topk 1 steps 3 draft tokens 9 (chain, inconsistent)",
            [*base, *spec, "2", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
             "--speculative-num-draft-tokens", "9"], codes=(0, 2))
    draft = {**QWEN, "num_hidden_layers": 1}
    drafts = {
        "a directory": ("adir", {"adir/keep": ""}), "/dev/zero": ("/dev/zero", {}),
        "/dev/null": ("/dev/null", {}), "a fifo": ("fifo", {"fifo": None}), "missing": ("nope.json", {}),
        "not JSON": ("d.json", {"d.json": "hello: yes\n"}), "empty": ("d.json", {"d.json": ""}),
        "a JSON list": ("d.json", {"d.json": "[1, 2]"}), "binary": ("d.json", {"d.json": bytes(range(256))}),
        "huge JSON (40 MB)": ("d.json", {"d.json": _lazy("huge-json", lambda: json.dumps(
            {**draft, "pad": ["x" * 1000] * 40000}))}),
        "deep JSON": ("d.json", {"d.json": '{"a": ' + "[" * 100000 + "]" * 100000 + "}"}),
        "another vocab": ("d.json", {"d.json": json.dumps({**draft, "vocab_size": 32000})}),
        "another hidden size": ("d.json", {"d.json": json.dumps({**draft, "hidden_size": 1024})}),
        "0 layers": ("d.json", {"d.json": json.dumps({**draft, "num_hidden_layers": 0})}),
        "1e308 hidden size": ("d.json", {"d.json": json.dumps({**draft, "hidden_size": 1e308})}),
        "4400-digit layers": ("d.json", {"d.json": json.dumps(draft).replace(
            '"num_hidden_layers": 1', '"num_hidden_layers": ' + "9" * 4400)}),
        "no architectures": ("d.json", {"d.json": json.dumps({"hidden_size": 4096})}),
        "the target itself": ("d.json", {"d.json": json.dumps(QWEN)}),
        "a gzip": ("d.json", {"d.json": _gz(json.dumps(draft))}),
        "a loop link": ("loop", {"loop": ("link", "loop")}),
        "a YAML GPU profile": ("g.yaml", {"g.yaml": H100}),
    }
    draft_commands = [
        ("estimate", ["estimate", "--speculative-algorithm", "STANDALONE", "--speculative-accept-length",
                      "2"]),
        ("simulate", ["simulate", *SYN, "--workers", "1", "--speculative-algorithm", "EAGLE",
                      "--speculative-accept-length", "2"]),
        ("capacity", [*per_command["capacity"], "--speculative-algorithm", "STANDALONE",
                      "--speculative-accept-length", "2"]),
        ("tune", [*per_command["tune"], "--speculative-algorithm", "EAGLE", "--speculative-accept-length",
                  "2"]),
        ("gen-config", ["gen-config", "--sglang", "dsv41@a64f33f", "--speculative-algorithm", "EAGLE"]),
        ("check-config", ["check-config", "pdmux.yaml", "--sglang", "dsv41@a64f33f",
                          "--speculative-algorithm", "EAGLE"]),
    ]
    for i, (label, (path, dfiles)) in enumerate(drafts.items()):
        for j in (i % len(draft_commands), (i + 2) % len(draft_commands), (i + 4) % len(draft_commands)):
            cname, base = draft_commands[j]
            add("spec", f"draft {label} via {cname}", [*base, "--speculative-draft-model-path", path],
                files={**dfiles, "pdmux.yaml": "sm_group_num: 8\n"}, timeout=90)
    add("spec", "gen-config EAGLE on 0.5.23 (refused)", ["gen-config", "--speculative-algorithm", "EAGLE"],
        codes=(2,))
    add("spec", "check-config --speculative-draft-model-path without the algorithm",
        ["check-config", "pdmux.yaml", "--speculative-draft-model-path", "d.json"],
        files={"pdmux.yaml": "sm_group_num: 8\n", "d.json": json.dumps(draft)}, codes=(0, 2))
    add("spec", "simulate EAGLE --disagg", ["simulate", *SYN, *spec, "2", "--disagg", "1P1D"])
    add("spec", "simulate EAGLE --dp 2", ["simulate", *SYN, *spec, "2", "--dp", "2"])
    add("spec", "estimate EAGLE --cost-model chapter", ["estimate", *spec, "2", "--cost-model", "chapter"])
    add("spec", "estimate EAGLE --disable-cuda-graph", ["estimate", *spec, "2", "--disable-cuda-graph"])
    for args in (["estimate", *spec, "4", "--json", "--all-levels"], ["estimate", *spec, "1", "--json"],
                 ["simulate", *SYN, *spec, "1", "--json", "--workers", "1"],
                 ["simulate", AZURE, *spec, "3.9", "--speculative-num-steps", "3", "--speculative-eagle-topk",
                  "4", "--speculative-num-draft-tokens", "8", "--json", "--workers", "1"],
                 ["capacity", *SYN, *SLO, *spec, "2", "--json", "--workers", "1", "--policies", "chunked"]):
        add("numbers", " ".join(args)[:90], args, codes=(0,))

    # --- generated-shared-prefix and --disable-cuda-graph -------------------------------------------------
    gsp_values = [("--gsp-num-groups", ["1", "-0", "1e3"]), ("--gsp-prompts-per-group", ["0", "-3", "x"]),
                  ("--gsp-system-prompt-len", ["0", "-1", "1", "10000001"]),
                  ("--gsp-question-len", ["0", "-1", "99999999999999999999"]),
                  ("--gsp-output-len", ["0", "-1", "1", "10000001"]),
                  ("--gsp-range-ratio", ["0", "1", "1e-320", "-0", "0.5"])]
    for cname in ("simulate", "capacity"):
        base = ["simulate", *GSP, "--workers", "1"] if cname == "simulate" else \
            ["capacity", *GSP, *SLO, "--workers", "1", "--policies", "chunked"]
        for opt, vals in gsp_values:
            for value in vals:
                add("gsp", f"{cname} {opt} {value}", [*base, opt, value], timeout=90)
    add("gsp", "--gsp-ordered without the dataset", ["simulate", *SYN, "--gsp-ordered"], codes=(2,))
    add("gsp", "a trace and --dataset-name generated-shared-prefix",
        ["simulate", AZURE, "--dataset-name", "generated-shared-prefix"], codes=(2,))
    add("gsp", "--synthetic and generated-shared-prefix", ["simulate", "--synthetic", *GSP], codes=(0, 2))
    add("gsp", "gsp --prompt-tokens random:10", ["simulate", *GSP, "--prompt-tokens", "random:10"],
        codes=(0, 2))
    add("gsp", "gsp --no-prefix-cache --json", ["simulate", *GSP, "--no-prefix-cache", "--json"], codes=(0,))
    add("gsp", "gsp --duration 0", ["simulate", *GSP, "--duration", "0"], codes=(2,))
    add("gsp", "gsp --qps inf --max-requests 1", ["simulate", "--dataset-name", "generated-shared-prefix",
                                                 "--qps", "inf", "--max-requests", "1"], codes=(0, 2))
    add("gsp", "gsp on tune (not an option)", ["tune", "--dataset-name", "generated-shared-prefix", *SLO],
        codes=(2,))
    for args in (["tune", "--trace", AZURE, *SLO, *SMALL_TUNE, "--disable-cuda-graph", "--json"],
                 ["capacity", *SYN, *SLO, "--workers", "1", "--disable-cuda-graph", "--policies", "chunked"],
                 ["simulate", *SYN, "--disable-cuda-graph", "--eager-launch-ms", "-1"],
                 ["simulate", *SYN, "--disable-cuda-graph", "--eager-launch-ms", "nan"],
                 ["simulate", *SYN, "--disable-cuda-graph", "--eager-launch-ms", "1e308"],
                 ["simulate", *SYN, "--disable-cuda-graph", "--disable-prefill-cuda-graph"],
                 ["estimate", "--disable-cuda-graph", "--all-levels", "--json"],
                 ["gen-config", "--disable-cuda-graph"],
                 ["estimate", "--disable-cuda-graph", "--calibration", "cal.yaml"]):
        add("gsp", " ".join(args)[:90], args, files={"cal.yaml": "nothing: 1\n"})
    return out


def _azure_trace(n: int) -> str:
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    rows += [f"2023-11-16 18:{15 + i // 600:02d}:{(i // 10) % 60:02d}.{i % 10}000000,{500 + 37 * i % 3000},"
             f"{20 + i % 300}" for i in range(n)]
    return "\n".join(rows) + "\n"


def _session(sid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid and fields[0] != "Z":
                found.append(int(entry))
    return found


def _prepare(folder: Path, files: dict) -> None:
    for name, content in files.items():
        if callable(content):
            content = content()
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if content is None:
            os.mkfifo(path)
        elif isinstance(content, tuple):
            path.symlink_to(content[1])
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    if (folder / "ro").is_dir():
        (folder / "ro").chmod(0o555)


def run(case: Case, base: Path) -> dict:
    folder = Path(tempfile.mkdtemp(prefix="case-", dir=base))
    _prepare(folder, case.files)
    before = {str(p.relative_to(folder)) for p in folder.rglob("*")} | {str(p.relative_to(folder)) for p in
                                                                        folder.iterdir()}
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "100", **case.env}
    if "MPLBACKEND" in case.env and case.env["MPLBACKEND"] == "":
        env["MPLBACKEND"] = ""
    stdout = subprocess.PIPE
    stderr = subprocess.PIPE
    if case.stdout == "closed":
        stdout = subprocess.DEVNULL
    if case.stdout == "full" or case.stderr == "full":
        full = open("/dev/full", "w")  # noqa: SIM115
        if case.stdout == "full":
            stdout = full
        else:
            stderr = full
    cmd = [sys.executable, "-m", "pdmux_cli", *case.args]
    if case.stdout == "closed" or case.stderr == "closed":
        which = 1 if case.stdout == "closed" else 2
        cmd = ["bash", "-c", f'exec "$@" {which}>&-', "bash", *cmd]
    ray_before = _ray_processes() if case.family == "ray" else set()
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=folder, stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL, env=env,
                            start_new_session=True)
    result = {"family": case.family, "name": case.name, "args": case.args, "problems": []}
    if case.signal is not None:
        signum, delay, group = case.signal
        deadline = time.monotonic() + 60
        while case.after_workers and len(_session(proc.pid)) < case.after_workers and proc.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.01)
        if case.after_workers and proc.poll() is not None:
            result["problems"].append("ended before its workers started: the signal came too late")
        time.sleep(delay)
        if proc.poll() is None:
            (os.killpg if group else os.kill)(proc.pid, signum)
    try:
        if case.stdout == "head":
            line = proc.stdout.readline()
            proc.stdout.close()
            out = line.decode(errors="replace")
            err = proc.stderr.read().decode(errors="replace")
            proc.wait(timeout=case.timeout)
        else:
            out_b, err_b = proc.communicate(timeout=case.timeout)
            out = (out_b or b"").decode(errors="replace")
            err = (err_b or b"").decode(errors="replace")
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        result["problems"].append(f"hang: still running after {case.timeout:g} s")
        out = err = ""
    result["seconds"] = round(time.monotonic() - start, 2)
    code = proc.returncode
    result["code"] = code
    deadline = time.monotonic() + 3
    while _session(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = _session(proc.pid)
    if left:
        result["problems"].append(f"processes left: {left}")
        for pid in left:
            os.kill(pid, signal.SIGKILL)
    if case.family == "ray":
        deadline = time.monotonic() + 10
        while _ray_processes() - ray_before and time.monotonic() < deadline:
            time.sleep(0.2)
        stray = _ray_processes() - ray_before
        if stray:
            result["problems"].append(f"processes left: Ray's {sorted(stray)[:5]}")
            for pid in stray:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
    if "Traceback" in out or "Traceback" in err:
        result["problems"].append("traceback")
    expected = set(case.codes)
    if case.signal is not None:
        expected = {0, 128 + case.signal[0]}
    if code not in expected:
        result["problems"].append(f"exit code {code}, expected {sorted(expected)}")
    if code not in (0, None) and case.stderr == "" and case.stdout not in ("closed", "full"):
        lines = [ln for ln in err.splitlines() if ln.strip()]
        if len(lines) != 1 or not lines[0].startswith("pdmux: error: "):
            result["problems"].append(f"not one error line: {err[-300:]!r}")
    if code not in (0, None) and out.strip() and _result_on_stdout(case.args) and case.stdout == "":
        result["problems"].append(f"stdout on error: {out[:120]!r}")
    if case.family == "numbers" and code == 0:
        result["problems"] += _number_problems(out)
    if (folder / "ro").is_dir():
        (folder / "ro").chmod(0o755)
    for name in case.outputs:
        if name in case.files:
            continue
        broken = _not_whole(folder / name)
        if broken:
            result["problems"].append(f"output not whole: {name}: {broken}")
    made = sorted({str(p.relative_to(folder)) for p in folder.rglob("*")} - before - set(case.outputs))
    made = [m for m in made if not any(m.startswith(o + "/") for o in case.outputs)]
    tmp = [m for m in made if m.endswith(".tmp") or "/." in "/" + m]
    if tmp or made:
        result["problems"].append(f"files left: {sorted(set(tmp + made))[:5]}")
    result["stderr"] = err[-400:]
    shutil.rmtree(folder, ignore_errors=True)
    Path(f"/dev/shm/pdmux-sweep-{os.getpid()}.csv").unlink(missing_ok=True)
    return result


def _result_on_stdout(args: list[str]) -> bool:
    """Whether stdout carries the result itself (``--json``, or gen-config's and tune's YAML without
    ``-o``): then an error leaves it empty."""
    if "--json" in args:
        return True
    return bool(args) and args[0] in ("gen-config", "tune") and "-o" not in args and "--output" not in args \
        and "--help" not in args


def _not_whole(path: Path) -> str:
    """Why an output file left behind is not whole ("" when it is, or is not there)."""
    try:
        if not path.is_file() or path.is_symlink():
            return ""
        data = path.read_bytes()
    except OSError:  # a name too long to be made, a folder without permission: nothing was written
        return ""
    if not data:
        return "empty"
    if path.suffix == ".png":
        return "" if data.startswith(b"\x89PNG") and data.rstrip(b"\0").endswith(b"IEND\xaeB`\x82") else "cut"
    if path.suffix in (".yaml", ".csv") and not data.endswith(b"\n"):
        return "no final newline"
    if path.suffix == ".yaml":
        import yaml

        try:
            yaml.safe_load(data)
        except yaml.YAMLError:
            return "not YAML"
    return ""


def _ray_processes() -> set[int]:
    """Ray's own processes on this machine (raylet, gcs_server, ray:: workers)."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if b"raylet" in cmd or b"gcs_server" in cmd or cmd.startswith(b"ray::") or b"ray/_private" in cmd:
                found.add(int(entry))
    return found


def _number_problems(out: str) -> list[str]:
    """Physically impossible figures in a run's JSON: negative or non-finite times and rates, shares
    outside 0-1, a mixed step faster than the decode step it carries."""
    try:
        data = json.loads(out)
    except ValueError:
        return ["the --json output is not JSON"]
    problems = []

    def walk(x, path=""):
        if isinstance(x, dict):
            for k, v in x.items():
                walk(v, f"{path}.{k}")
        elif isinstance(x, list):
            for i, v in enumerate(x):
                walk(v, f"{path}[{i}]")
        elif isinstance(x, (int, float)) and not isinstance(x, bool):
            key = path.rsplit(".", 1)[-1]
            if any(u in key
                   for u in ("_ms", "_s", "rps", "bytes", "tokens")) and x < 0 and "bias" not in key \
                    and "error" not in key and "delta" not in key:
                problems.append(f"negative {path} = {x}")
            if ("attainment" in key or key.endswith("share")) and not 0 <= x <= 1:
                problems.append(f"{path} = {x} outside 0-1")

    walk(data)
    rows = data.get("rows") if isinstance(data, dict) else None
    if rows:
        decode = next((r["itl_ms"] for r in rows if r.get("policy") == "decode-only"), None)
        for r in rows:
            if r.get("policy") == "mixed-chunk" and decode and r["itl_ms"] < decode:
                problems.append(f"{r['label']} ITL {r['itl_ms']:.3g} ms below the decode step's {decode:.3g} "
                                "ms")
    return problems[:5]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--json")
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument("--ray-site", default="", help=(
        "a folder where Ray is installed (pip install --target), for the ray family's cases that need it; "
        "without it, those run only where Ray imports"))
    parser.add_argument("--match", help="only cases whose name has this text")
    args = parser.parse_args()
    if args.ray_site:
        os.environ["PDMUX_SWEEP_RAY_SITE"] = str(Path(args.ray_site).resolve())
    todo = [c for c in cases() if args.family in (None, c.family) and (args.match or "") in c.name]
    if args.list:
        for c in todo:
            print(f"{c.family:12} {c.name}")
        print(len(todo), "cases")
        return 0
    _no_ray_dir()
    base = Path(tempfile.mkdtemp(prefix="pdmux-sweep-"))
    results = []
    started = time.monotonic()
    try:
        for i, case in enumerate(todo, 1):
            r = run(case, base)
            results.append(r)
            if r["problems"] or args.verbose:
                print(f"[{i}/{len(todo)}] {case.family}: {case.name}: {'; '.join(r['problems']) or 'ok'} "
                      f"(exit {r['code']}, {r['seconds']} s) {r['stderr'][-200:]!r}", flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(NO_RAY, ignore_errors=True)
    kinds = {"traceback": 0, "hang": 0, "left": 0, "exit code": 0, "not one error line": 0, "half-written": 0,
             "numbers": 0}
    for r in results:
        for p in r["problems"]:
            if p == "traceback":
                kinds["traceback"] += 1
            elif p.startswith("hang"):
                kinds["hang"] += 1
            elif p.startswith(("processes left", "files left")):
                kinds["left"] += 1
            elif p.startswith("exit code"):
                kinds["exit code"] += 1
            elif p.startswith("not one error line"):
                kinds["not one error line"] += 1
            elif p.startswith(("stdout on error", "output not whole")):
                kinds["half-written"] += 1
            else:
                kinds["numbers"] += 1
    by_family: dict[str, int] = {}
    for r in results:
        by_family[r["family"]] = by_family.get(r["family"], 0) + 1
    print(f"{len(results)} cases in {time.monotonic() - started:.0f} s "
          f"({', '.join(f'{k} {v}' for k, v in by_family.items())})")
    print("problems: " + ", ".join(f"{k} {v}" for k, v in kinds.items()))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 1 if any(r["problems"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
