"""One ``python -m pdmux_cli ...`` run measured whole: wall time, CPU time and peak RSS of its process tree
(the benchmarks' shared runner), and where the workplace's traces are."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

#: The checkout's root (``python -m pdmux_cli`` runs there, so that it is this checkout's pdmux).
ROOT = Path(__file__).resolve().parent.parent
#: The workplace's traces: ``../shared`` beside the checkout (or beside a folder above it: a clone in a
#: subfolder).
TRACES = next((p / "shared" / "data" / "traces" for p in ROOT.parents
               if (p / "shared" / "data" / "traces").is_dir()),
              ROOT.parent / "shared" / "data" / "traces")
CONV = TRACES / "AzureLLMInferenceTrace_conv.csv"
CODE = TRACES / "AzureLLMInferenceTrace_code.csv"

#: Runs ``python -m pdmux_cli ARGS`` as its child and prints, last on stderr, the child's wall seconds
#: (from its start to its exit, without this wrapper's own interpreter start: 0.06-0.10 s on the 2-core
#: machine), the CPU seconds (user + sys) and the peak RSS (KiB) of the process tree it waited for:
#: RUSAGE_CHILDREN covers waited-for descendants, i.e. the workers too, and reports the largest single
#: process's RSS.
WRAPPER = """
import resource, subprocess, sys, time
start = time.perf_counter()
rc = subprocess.run([sys.executable, "-m", "pdmux_cli", *sys.argv[1:]]).returncode
wall = time.perf_counter() - start
u = resource.getrusage(resource.RUSAGE_CHILDREN)
sys.stderr.write("\\nUSAGE %f %f %d\\n" % (wall, u.ru_utime + u.ru_stime, u.ru_maxrss))
sys.exit(rc)
"""


def run_pdmux(args: list[str], cwd: Path) -> tuple[float, float, float, str]:
    """``(wall s, CPU s, peak RSS MiB of the largest process, stdout)`` of ``python -m pdmux_cli ARGS`` run
    in ``cwd``: the wall time is the pdmux process's, from its start to its exit (:data:`WRAPPER`). Exits
    with the command's error on a failed run."""
    out = subprocess.run([sys.executable, "-c", WRAPPER, *args], cwd=cwd, capture_output=True, text=True,
                         check=False)
    if out.returncode != 0:
        raise SystemExit(f"pdmux {' '.join(args)} failed ({out.returncode}): {out.stderr.strip()}")
    wall, cpu, rss_kib = out.stderr.rsplit("USAGE", 1)[1].split()[:3]
    return float(wall), float(cpu), int(rss_kib) / 1024, out.stdout
