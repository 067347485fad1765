"""Write the cost model's accuracy (``pdmux accuracy --json``) into benchmarks/RESULTS.md.

Not a speed benchmark: the issue "Cost model v2" asks for the accuracy figures beside the speed ones.
The gate that keeps them from getting worse is tests/test_accuracy.py; docs/accuracy.md explains them.

Usage: ``python benchmarks/accuracy_section.py [--write]``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import results_md

SECTION = "## Cost model accuracy (pdmux accuracy)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    out = subprocess.run([sys.executable, "-m", "pdmux_cli", "accuracy", "--json"], check=True,
                         capture_output=True, text=True, cwd=results_md.RESULTS.parent.parent)
    terms = json.loads(out.stdout)["terms"]
    rows = [f"| {t['term']} | {t['method']} | {t['data']} | {t['median_abs_error']:.1%} | "
            f"{t['p90_abs_error']:.1%} | {t['median_signed_error']:+.1%} | {t['worst']['what']} "
            f"({t['worst']['error']:+.0%}) |" for t in terms]
    text = "\n".join([
        SECTION, "",
        (f"`python benchmarks/accuracy_section.py` ({datetime.date.today().isoformat()}): `pdmux accuracy "
        "--json`, the shipped roofline model against every shipped measurement; targets (issue \"Cost model "
        "v2\"): leave-one-model-out median <= 10% on decode and prefill steps, <= 5% on bandwidth vs SMs."),
        "", "| term | method | data | median | p90 | bias | worst |", "|---|---|---|---|---|---|---|", *rows,
        "",
    ])
    print(text)
    if args.write:
        results_md.write_section(SECTION, text)


if __name__ == "__main__":
    main()
