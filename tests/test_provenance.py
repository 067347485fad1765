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
