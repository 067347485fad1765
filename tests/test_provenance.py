"""The JSON provenance block: pdmux's version (the one pyproject declares), the rule set, the cost model."""

import re
from pathlib import Path

import pytest

from pdmux_cli import __version__
from pdmux_cli.provenance import PROVENANCE_KEY, cost_model_provenance, provenance, with_provenance


def test_version_is_pyprojects() -> None:
    text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    assert re.search(r'^version = "([^"]+)"', text, re.MULTILINE).group(1) == __version__


def test_block_holds_version_rule_set_and_cost_model() -> None:
    cm = cost_model_provenance("roofline", efficiency="h100-sxm.yaml", serving="0.5", s_sat=88)
    block = provenance(sglang="0.5.23", cost_model=cm)
    assert block == {"version": __version__, "sglang": "0.5.23",
                     "cost_model": {"name": "roofline", "efficiency": "h100-sxm.yaml", "calibration": None,
                                    "serving": "0.5", "s_sat": 88}}
    cm["name"] = "changed"
    assert block["cost_model"]["name"] == "roofline"  # a copy, not the caller's dict


def test_with_provenance_adds_one_key_last_and_refuses_a_clash() -> None:
    out = with_provenance({"gpu": "H100", "rows": []}, provenance(sglang=None))
    assert list(out) == ["gpu", "rows", PROVENANCE_KEY]
    assert out[PROVENANCE_KEY] == {"version": __version__, "sglang": None, "cost_model": None}
    with pytest.raises(ValueError):
        with_provenance(out, provenance(sglang=None))


def test_step_model_provenance_reads_the_built_cost_model() -> None:
    """The sources off a built StepModel: the roofline's efficiency file and serving line; the chapter's
    none."""
    from dataclasses import replace

    from pdmux_cli.catalog.hardware import find_gpu
    from pdmux_cli.catalog.model import load_model
    from pdmux_cli.costmodel import build_step_model
    from pdmux_cli.provenance import step_model_provenance

    gpu, model = find_gpu("h100"), load_model("qwen3-8b")
    roofline = build_step_model(gpu, model)
    assert step_model_provenance(roofline) == {"name": "roofline", "efficiency": "h100-sxm.yaml",
                                               "calibration": None, "serving": "0.5", "s_sat": 88.0}
    # the chapter's model reads no efficiency file and charges no serving terms; S_SAT defaults to half the
    # SMs
    chapter = build_step_model(gpu, model, cost_model="chapter")
    assert step_model_provenance(chapter, calibration="cal.yaml") == {
        "name": "chapter", "efficiency": None, "calibration": "cal.yaml", "serving": None, "s_sat": 66.0}
    assert step_model_provenance(chapter, s_sat=[44, 88.0])["s_sat"] == [44.0, 88.0]
    # a whole-GPU calibration renames the profile ("h100-sxm, calibrated on Qwen3-8B"): the file stays named,
    # the calibration's serving terms replace serving.yaml's, and a NaN S_SAT (a measured curve) is null
    roofline.eff = replace(roofline.eff, key=f"{roofline.eff.key}, calibrated on Qwen3-8B")
    roofline.serving = replace(roofline.serving, source="calibrated on 3 bench_serving run(s) (x)")
    roofline.s_sat = float("nan")
    assert step_model_provenance(roofline) == {"name": "roofline", "efficiency": "h100-sxm.yaml",
                                               "calibration": None, "serving": "calibration", "s_sat": None}
