"""Write the cost model's accuracy (``pdmux accuracy --json``) into benchmarks/RESULTS.md.

Not a speed benchmark: the issue "Cost model v2" asks for the accuracy figures beside the speed ones; the
last row is speculative decoding's speedup against public SGLang runs (issue 30; nothing fitted).
The gate that keeps them from getting worse is tests/test_accuracy.py; docs/accuracy.md explains them.

With ``--serving``, the whole-server section instead (``pdmux accuracy --serving --json``): the
leave-one-source-out, held-out and in-sample rows per metric, and the 80% intervals' coverage of the held-out
runs (issue "Serving fidelity out of sample": out-of-sample median TTFT <= 20%, every other metric <= 12%;
intervals holding 70-90% of the held-out runs' figures).

Usage: ``python benchmarks/accuracy_section.py [--serving] [--write]``.
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
SERVING_SECTION = "## Whole-server accuracy (pdmux accuracy --serving)"


def serving_text() -> str:
    """The whole-server section (module docstring)."""
    out = subprocess.run([sys.executable, "-m", "pdmux_cli", "accuracy", "--serving", "--json"], check=True,
                         capture_output=True, text=True, cwd=results_md.RESULTS.parent.parent)
    data = json.loads(out.stdout)
    rows = [f"| {t['term']} | {t['method']} | {t['points']} | {t['median_abs_error']:.1%} | "
            f"{t['p90_abs_error']:.1%} | {t['median_signed_error']:+.1%} | {t['worst']['what']} "
            f"({t['worst']['error']:+.0%}) |" for t in data["terms"]]
    cov = data["interval_coverage"]
    share = f"{cov['heldout_share']:.0%}" if cov["heldout_share"] is not None else "-"
    return "\n".join([
        SERVING_SECTION, "",
        (f"`python benchmarks/accuracy_section.py --serving` ({datetime.date.today().isoformat()}): `pdmux "
         "accuracy --serving --json`. LOSO: each source's runs predicted by serving terms fitted without it "
         "(the headline); held-out: runs no fit saw "
         "(profiles/measurements/serving/sglang_serving_heldout.yaml); in-sample: the shipped terms on the "
         "runs they were fitted to. Targets (issue \"Serving fidelity out of sample\"): out-of-sample median "
         "TTFT <= 20%, every other metric <= 12%; 80% intervals holding 70-90% of the held-out figures. "
         "Before that issue (2026-12-02) the report was in-sample only: TTFT 13.5%, ITL 11.2%, TPOT 11.8%, "
         "throughput 11.8% (median); measured against held-out public runs then: ITL 3.8%, throughput 22%, "
         "TTFT 43%."),
        "", "| metric | method | points | median | p90 | bias | worst |", "|---|---|---|---|---|---|---|",
        *rows,
        "", ("80% intervals (simulate's, each held-out source's drawn without its own residuals) hold "
             f"{cov['heldout_inside']} of the {cov['heldout_figures']} held-out figures ({share})."), "",
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true")
    parser.add_argument("--serving", action="store_true", help="the whole-server section instead")
    args = parser.parse_args()
    if args.serving:
        text = serving_text()
        print(text)
        if args.write:
            results_md.write_section(SERVING_SECTION, text)
        return
    out = subprocess.run([sys.executable, "-m", "pdmux_cli", "accuracy", "--json"], check=True,
                         capture_output=True, text=True, cwd=results_md.RESULTS.parent.parent)
    data = json.loads(out.stdout)
    # the speculative-decoding block (issue 30: public SGLang runs, nothing fitted) as the table's last row
    terms = data["terms"] + ([data["speculative"]] if "speculative" in data else [])
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
