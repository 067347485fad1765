"""Which models each SGLang revision can multiplex (sglang_support), and how every command says so."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cli_assertions import assert_one_line_error
from typer.testing import CliRunner

from pdmux_cli.catalog.hardware import find_gpu
from pdmux_cli.catalog.model import list_models, load_model, model_from_config
from pdmux_cli.cli import app
from pdmux_cli.messages import render, render_all
from pdmux_cli.planning.estimate import Scenario, estimate
from pdmux_cli.sglang import revisions as ss
from pdmux_cli.util.errors import InputError

ROOT = Path(__file__).resolve().parent.parent
FIX = Path(__file__).parent / "fixtures"
AZURE = str(FIX / "azure_conv_50.csv")
SGLANG_0_5_23 = Path("/work/sglang/src/sglang")
runner = CliRunner()

#: Every shipped profile's pdmux support under SGLang 0.5.23, read in its source: the class its
#: config's ``architectures`` resolves to (srt/models/registry.py) and whether that class or a base
#: has ``forward_split_prefill`` (srt/models/<file>.py). The other revisions have no model scan.
SUPPORT_0_5_23 = {
    "DeepSeek-V3": ("no", "srt/models/deepseek_v2.py:DeepseekV3ForCausalLM", None),
    "Gemma-3-27B-it": ("no", "srt/models/gemma3_mm.py:Gemma3ForConditionalGeneration", None),
    "Llama-3.1-70B": ("yes", "srt/models/llama.py:LlamaForCausalLM", "srt/models/llama.py:LlamaForCausalLM"),
    "Llama-3.1-405B": ("yes", "srt/models/llama.py:LlamaForCausalLM", "srt/models/llama.py:LlamaForCausalLM"),
    "CodeLlama-34b-hf": ("yes", "srt/models/llama.py:LlamaForCausalLM",
                         "srt/models/llama.py:LlamaForCausalLM"),
    "Llama-3.1-8B": ("yes", "srt/models/llama.py:LlamaForCausalLM", "srt/models/llama.py:LlamaForCausalLM"),
    "Llama-3.3-70B-Instruct": ("yes", "srt/models/llama.py:LlamaForCausalLM",
                               "srt/models/llama.py:LlamaForCausalLM"),
    "Mistral-7B-v0.3": ("yes", "srt/models/mistral.py:MistralForCausalLM",
                        "srt/models/llama.py:LlamaForCausalLM"),
    "Mixtral-8x7B": ("no", "srt/models/mixtral.py:MixtralForCausalLM", None),
    "Phi-4": ("yes", "srt/models/llama.py:Phi3ForCausalLM", "srt/models/llama.py:LlamaForCausalLM"),
    "Qwen2.5-7B-Instruct": ("yes", "srt/models/qwen2.py:Qwen2ForCausalLM",
                            "srt/models/qwen2.py:Qwen2ForCausalLM"),
    "Qwen2.5-32B-Instruct": ("yes", "srt/models/qwen2.py:Qwen2ForCausalLM",
                             "srt/models/qwen2.py:Qwen2ForCausalLM"),
    "Qwen3-0.6B": ("yes", "srt/models/qwen3.py:Qwen3ForCausalLM", "srt/models/qwen3.py:Qwen3ForCausalLM"),
    "Qwen3-8B": ("yes", "srt/models/qwen3.py:Qwen3ForCausalLM", "srt/models/qwen3.py:Qwen3ForCausalLM"),
    "Qwen3-8B-FP8": ("yes", "srt/models/qwen3.py:Qwen3ForCausalLM", "srt/models/qwen3.py:Qwen3ForCausalLM"),
    "Qwen3-14B": ("yes", "srt/models/qwen3.py:Qwen3ForCausalLM", "srt/models/qwen3.py:Qwen3ForCausalLM"),
    "Qwen3-14B-FP8": ("yes", "srt/models/qwen3.py:Qwen3ForCausalLM", "srt/models/qwen3.py:Qwen3ForCausalLM"),
    "Qwen3-32B": ("yes", "srt/models/qwen3.py:Qwen3ForCausalLM", "srt/models/qwen3.py:Qwen3ForCausalLM"),
    "Qwen3-30B-A3B": ("yes", "srt/models/qwen3_moe.py:Qwen3MoeForCausalLM",
                      "srt/models/qwen3_moe.py:Qwen3MoeForCausalLM"),
    "Qwen3-235B-A22B": ("yes", "srt/models/qwen3_moe.py:Qwen3MoeForCausalLM",
                        "srt/models/qwen3_moe.py:Qwen3MoeForCausalLM"),
    "gpt-oss-20b": ("no", "srt/models/gpt_oss.py:GptOssForCausalLM", None),
    "gpt-oss-120b": ("no", "srt/models/gpt_oss.py:GptOssForCausalLM", None),
}


#: The same under sgl-project/sglang main at 2260e612 (python/sglang/srt/models/ read at that commit: every
#: profile resolves to the same file and class, with or without forward_split_prefill, as in 0.5.23).
SUPPORT_MAIN_2260E61 = SUPPORT_0_5_23


def test_every_shipped_profile_has_its_support_per_revision() -> None:
    assert sorted(SUPPORT_0_5_23) == sorted(list_models())
    for revision, table in (("0.5.23", SUPPORT_0_5_23), ("main@2260e61", SUPPORT_MAIN_2260E61)):
        for name, (state, cls, defined) in table.items():
            got = ss.model_support(load_model(name).architectures, revision)
            assert (got.state, got.sglang_class, got.defined_in) == (state, cls, defined), (revision, name)
    for name in SUPPORT_0_5_23:
        for other in ("standard@b875545", "overlay@2126b0b", "dsv41@a64f33f"):
            assert ss.model_support(load_model(name).architectures, other).state == "unknown"
    assert ss.model_support(("DeepseekV3ForCausalLM",), "main@2260e61").reason == (
        "no forward_split_prefill in SGLang main@2260e61's DeepseekV3ForCausalLM "
        "(srt/models/deepseek_v2.py): pdmux fails at the first prefill")


def test_the_main_2260e612_scan_has_its_classes() -> None:
    """sgl-project/sglang main at 2260e612's srt/models: 222 registered architectures, 28 with
    forward_split_prefill (0.5.23's 33 less the five classes main does not have yet)."""
    table = ss.model_table("models-main-2260e61.json")["architectures"]
    has = sorted(a for a, e in table.items() if e["forward_split_prefill"])
    assert has == [
        "ApertusForCausalLM", "Exaone4ForCausalLM", "ExaoneMoEForCausalLM", "ExaoneMoEForCausalLMMTP",
        "Gemma2ForCausalLM", "Gemma3ForCausalLM", "GemmaForCausalLM", "Glm4ForCausalLM",
        "IQuestCoderForCausalLM", "InternLM3ForCausalLM", "Llama4ForCausalLM", "LlamaForCausalLM",
        "LlamaForCausalLMEagle", "LlamaForCausalLMEagle3", "Ministral3ForCausalLM", "MistralForCausalLM",
        "MistralForCausalLMEagle", "Phi3ForCausalLM", "QWenLMHeadModel", "Qwen2ForCausalLM",
        "Qwen2ForCausalLMEagle", "Qwen2MoeForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM",
        "Qwen3MoeForCausalLMMTP", "SarvamMLAForCausalLM", "SarvamMoEForCausalLM", "TeleFLMForCausalLM"]
    assert len(table) == 222
    release = ss.model_table("models-0.5.23.json")["architectures"]
    gone = sorted(a for a, e in release.items() if e["forward_split_prefill"] and a not in table)
    assert gone == ["EmbeddingGemmaModel", "ExaoneMoeForCausalLM", "MellumForCausalLM", "NanbeigeForCausalLM",
                    "Spark2_5ForCausalLM"]


def test_reasons_name_the_class_and_file() -> None:
    assert ss.model_support(("DeepseekV3ForCausalLM",)).reason == (
        "no forward_split_prefill in SGLang 0.5.23's DeepseekV3ForCausalLM (srt/models/deepseek_v2.py): "
        "pdmux fails at the first prefill")
    assert ss.model_support(("MistralForCausalLM",)).reason == (
        "SGLang 0.5.23's MistralForCausalLM (srt/models/mistral.py) has forward_split_prefill, inherited "
        "from LlamaForCausalLM")
    # not registered: SGLang falls back to TransformersForCausalLM, which has none
    fallback = ss.model_support(("MadeUpForCausalLM",))
    assert fallback.state == "no" and "TransformersForCausalLM" in fallback.reason
    # the first registered architecture wins (registry.py resolve_model_cls)
    assert ss.model_support(("MadeUpForCausalLM", "LlamaForCausalLM")).state == "yes"
    assert ss.model_support(()).state == "unknown"


def test_the_0_5_23_scan_has_the_issue_s_families() -> None:
    """The families the issue names from reading srt/models, subclasses included, and those it names
    without."""
    table = ss.model_table("models-0.5.23.json")["architectures"]
    has = {a for a, e in table.items() if e["forward_split_prefill"]}
    for arch in ("LlamaForCausalLM", "QWenLMHeadModel", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
                 "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM", "GemmaForCausalLM", "Gemma2ForCausalLM",
                 "Gemma3ForCausalLM", "Glm4ForCausalLM", "Llama4ForCausalLM", "Exaone4ForCausalLM",
                 "ExaoneMoEForCausalLM"):
        assert arch in has, arch
    for arch in ("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "MixtralForCausalLM", "GptOssForCausalLM",
                 "Gemma3ForConditionalGeneration", "Qwen3NextForCausalLM"):
        assert arch in table and arch not in has, arch
    assert len(has) == 33 and len(table) == 290


@pytest.mark.skipif(not (SGLANG_0_5_23 / "srt" / "models").is_dir(),
                    reason="SGLang 0.5.23's source is not here")
def test_the_committed_scan_is_what_the_script_writes() -> None:
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "scan_sglang_models.py"),
                          str(SGLANG_0_5_23), "0.5.23"], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == json.loads((ROOT / "profiles" / "sglang" / "models-0.5.23.json").read_text())


#: A git copy holding sgl-project/sglang main at 2260e612 (Li-brua/sglang's snapshot: its merge f6f87402 has
#: it as the upstream parent), where this machine has one.
MAIN_MIRROR = Path("/work/.mirror/Li-brua+sglang/repo")
MAIN_COMMIT = "2260e612f6092000d899dab42da92c549f015c4a"


def _has_main_commit() -> bool:
    if not MAIN_MIRROR.is_dir():
        return False
    return subprocess.run(["git", "-C", str(MAIN_MIRROR), "cat-file", "-e", MAIN_COMMIT + "^{commit}"],
                          check=False, capture_output=True).returncode == 0


@pytest.mark.skipif(not _has_main_commit(), reason="no git copy of sgl-project/sglang main at 2260e612 here")
def test_the_committed_main_scan_is_what_the_script_writes(tmp_path: Path) -> None:
    archive = subprocess.run(["git", "-C", str(MAIN_MIRROR), "archive", MAIN_COMMIT,
                              "python/sglang/srt/models"],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tmp_path)], input=archive, check=True)
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "scan_sglang_models.py"),
                          str(tmp_path / "python" / "sglang"), "main@2260e61"], capture_output=True,
                          text=True,
                         check=True).stdout
    assert json.loads(out) == json.loads((ROOT / "profiles" / "sglang"
                                          / "models-main-2260e61.json").read_text())


def test_revisions_are_named_and_refused_when_unknown() -> None:
    assert ss.get_revision().key == "0.5.23" and ss.get_revision(None).commit is None
    assert ss.get_revision("overlay@2126b0b79492").key == "overlay@2126b0b"
    assert ss.get_revision("standard@b875545").commit == "b8755452da65eb2dd5c51eef504bfbc843a49865"
    for revision in ss.REVISIONS.values():
        assert revision.name and revision.files and revision.cite.startswith(revision.name)
    with pytest.raises(InputError, match="not a revision pdmux has read"):
        ss.get_revision("main")  # upstream main moves: only a commit read is a revision
    assert ss.get_revision("main@2260e612f609").commit == "2260e612f6092000d899dab42da92c549f015c4a"
    assert ss.get_revision("dsv41@a64f33f0").commit == "a64f33f089e9863b360992950ca1436ca6cba8f8"
    assert list(ss.REVISIONS) == ["0.5.23", "standard@b875545", "overlay@2126b0b", "main@2260e61",
                                  "dsv41@a64f33f"]
    # what each revision's code requires for pdmux with TP > 1 (a64f33f0 launch_order.py; none found
    # elsewhere)
    assert ss.get_revision("dsv41@a64f33f").tp_launch == ("NCCL_LAUNCH_ORDER_IMPLICIT=1",)
    assert "NCCL >= 2.26" in ss.get_revision("dsv41@a64f33f").tp_requires
    assert all(not r.tp_launch and r.tp_requires is None for k, r in ss.REVISIONS.items()
               if k != "dsv41@a64f33f")
    assert [k for k, r in ss.REVISIONS.items() if r.startup_failure] == ["main@2260e61"]
    assert [k for k, r in ss.REVISIONS.items() if r.max_split_forward_layers] == ["dsv41@a64f33f"]


def test_architectures_must_be_a_list_of_names() -> None:
    base = json.loads((ROOT / "profiles" / "models" / "Qwen3-8B.json").read_text())
    assert model_from_config(base, "q").architectures == ("Qwen3ForCausalLM",)
    assert model_from_config({**base, "architectures": None}, "q").architectures == ()
    with pytest.raises(InputError, match="architectures"):
        model_from_config({**base, "architectures": "Qwen3ForCausalLM"}, "q")


def test_estimate_marks_the_pdmux_rows_where_sglang_cannot_run_them() -> None:
    est = estimate(find_gpu("h100"), load_model("gpt-oss-20b"), Scenario())
    assert est.pdmux_support.state == "no"
    assert render(est.notes[0]).startswith(
        "PD mux cannot run: no forward_split_prefill in SGLang 0.5.23's GptOssForCausalLM"
    )
    ok = estimate(find_gpu("h100"), load_model("qwen3-8b"), Scenario())
    assert ok.pdmux_support.state == "yes" and not any(n.startswith("PD mux") for n in render_all(ok.notes))

    r = runner.invoke(app, ["estimate", "--model", "gpt-oss-20b"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.stderr
    row = next(line for line in r.stdout.splitlines() if "PD mux" in line and "│" in line)
    assert row.count("cannot run") == 2 and " ms" not in row
    assert "PD mux cannot run: no forward_split_prefill in SGLang 0.5.23's GptOssForCausalLM" in r.stdout
    d = json.loads(runner.invoke(app, ["estimate", "--model", "gpt-oss-20b", "--json"]).stdout)
    assert d["sglang_support"]["state"] == "no" and d["sglang_support"]["sglang"] == "0.5.23"
    assert [r["runs"] for r in d["rows"] if r["policy"] == "pdmux"] == [False]
    unknown = json.loads(runner.invoke(app, ["estimate", "--model", "gpt-oss-20b", "--json", "--sglang",
                                             "overlay@2126b0b"]).stdout)
    assert unknown["sglang_support"]["state"] == "unknown" and unknown["notes"][0].startswith("PD mux: pdmux "
                                                                                              "has no scan")
    assert_one_line_error(runner.invoke(app, ["estimate", "--sglang", "0.5.22"]), 2, "--sglang '0.5.22'")


def test_capacity_never_sizes_or_recommends_pdmux_where_it_cannot_run() -> None:
    r = runner.invoke(app, ["capacity", AZURE, "--model", "gpt-oss-20b", "--policies", "pdmux,chunked",
                            "--chunk-sizes", "2048", "--workers", "1", "--json"])
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert [p["kind"] for p in data["policies"]] == ["chunked"]
    assert "pdmux" not in data["verdict"] and "--enable-pdmux" not in data["verdict"]
    assert data["sglang_support"]["state"] == "no"
    assert any(n.startswith("pdmux not sized: no forward_split_prefill") for n in data["notes"])
    assert_one_line_error(runner.invoke(app,
                                        ["capacity", AZURE, "--model", "gpt-oss-20b", "--policies", "pdmux"]),
                          2, "GptOssForCausalLM")


def test_simulate_tune_gen_config_and_check_config_say_so() -> None:
    r = runner.invoke(app,
                      ["simulate", AZURE, "--model", "mixtral-8x7b", "--tp", "2", "--policies",
                       "pdmux,chunked",
                            "--chunk-sizes", "2048", "--workers", "1", "--json"])
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert [p["policy"] for p in data["policies"]] == ["chunked 2048"]
    assert data["notes"][0].startswith("pdmux not simulated: no forward_split_prefill in SGLang 0.5.23's "
                                       "MixtralForCausalLM")
    assert_one_line_error(runner.invoke(app,
                                        ["tune", "--trace", AZURE, "--slo-ttft", "1000", "--slo-itl", "100",
                                              "--model", "gpt-oss-20b"]), 2, "tune: no forward_split_prefill")
    g = runner.invoke(app, ["gen-config", "--model", "deepseek-v3"])
    assert g.exit_code == 0 and g.stderr.startswith("pdmux: warning: DeepSeek-V3: no forward_split_prefill")
    assert json.loads(runner.invoke(app, ["gen-config", "--model", "deepseek-v3", "--json"]).stdout)[
        "sglang_support"]["state"] == "no"
    assert runner.invoke(app, ["gen-config", "--model", "qwen3-8b"]).stderr.startswith("# save as")


# --------------------------------------------------------------------------------------------------
# hybrid and sliding-window attention

def _qwen3_8b() -> dict:
    return json.loads((ROOT / "profiles" / "models" / "Qwen3-8B.json").read_text())


def test_linear_attention_and_state_space_configs_are_refused_naming_the_field() -> None:
    base = _qwen3_8b()
    gdn = {**base,
           "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"] * 9}
    with pytest.raises(InputError, match=r"key 'layer_types' names 27 'linear_attention' layer\(s\)"):
        model_from_config(gdn, "q3next")
    for key, value in (("full_attention_interval", 4), ("hybrid_override_pattern", "M-M*"),
                       ("layers_block_type", ["mamba", "attention"])):
        with pytest.raises(InputError, match=f"key '{key}' marks linear-attention"):
            model_from_config({**base, key: value}, "hybrid")
    with pytest.raises(InputError, match="text_config.layer_types"):
        model_from_config({"architectures": ["X"], "text_config": gdn}, "mm")


def test_a_sliding_window_hybrid_against_hand_calculation() -> None:
    """Qwen3-8B's shapes with every other layer a 1024-token window (layer_types), 32 requests at 8192
    tokens. By hand: KV per token per layer = 2 (K, V) x 8 KV heads x 128 x 2 bytes = 4096 B; 18 full
    layers hold 8192 tokens, 18 window layers 1024: 4096 x (18 x 8192 + 18 x 1024) = 679,477,248 B a
    request. Decode step under the chapter model on all 132 SMs of an H100 (3.35e12 B/s x 0.85, S_SAT
    66 < 132): (the weights decode reads, 7.568e9 params x 2 B (8.19e9 less the 151936 x 4096 embedding
    table, of which it reads 32 rows) + 32 x 679,477,248 B) / 2.8475e12 B/s = 12.95 ms."""
    from pdmux_cli.catalog import model as mdl
    from pdmux_cli.costmodel.chapter import AnalyticThroughput, decode_step_s

    cfg = {**_qwen3_8b(), "sliding_window": 1024, "layer_types": ["sliding_attention", "full_attention"] * 18}
    hybrid = model_from_config(cfg, "q3-8b-swa")
    assert (hybrid.num_sliding_layers, hybrid.sliding_window) == (18, 1024)
    assert mdl.kv_bytes(hybrid, 8192) == 4096 * (18 * 8192 + 18 * 1024) == 679_477_248
    full = model_from_config(_qwen3_8b(), "q3-8b")
    assert mdl.kv_bytes(full, 8192) == 4096 * 36 * 8192  # the window is what bounds it
    h100 = find_gpu("h100")
    thr = AnalyticThroughput(total_sms=132, hbm_bytes_per_s=h100.hbm_bytes_per_s,
                             dense_flops=h100.bf16_dense_flops)
    weights = mdl.decode_weight_bytes(hybrid, 32)
    assert weights == pytest.approx((8.19e9 - 151936 * 4096) * 2, rel=0.01)
    hand = (weights + 32 * 679_477_248) / (h100.hbm_bytes_per_s * 0.85)
    assert decode_step_s(hybrid, thr, 132, 32, 8192) == pytest.approx(hand, rel=1e-9)
    assert h100.hbm_bytes_per_s == 3.35e12 and hand == pytest.approx(0.012952, rel=1e-3)
