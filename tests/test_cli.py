"""The planning commands through typer's runner: normal output, JSON, files, and bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml
from cli_assertions import assert_one_line_error
from typer.testing import CliRunner

from pdmux_cli.cli import app

runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, list(args))


# ---- splits --------------------------------------------------------------------------------------


def test_splits_h100_table() -> None:
    r = run("splits", "--gpu", "h100")
    assert r.exit_code == 0, r.stderr
    for text in ("132 SMs", "112", "72", "level 6", "all decode", "80 : 52"):
        assert text in r.stdout


def test_splits_json_chapter_values() -> None:
    r = run("splits", "--gpu", "h100", "--json")
    data = json.loads(r.stdout)
    assert [(g["prefill_sms"], g["decode_sms"]) for g in data["groups"]] == [
        (132, 0), (112, 20), (104, 28), (96, 36), (88, 44), (80, 52), (72, 60), (0, 132)]
    assert [(c["decode_bs"], c["group"]) for c in data["decode_bs_choice"]] == [
        (1, 1), (6, 1), (12, 2), (18, 3), (24, 4), (30, 5), (36, 6), (64, 6)]
    assert [(p["prompt_tokens"], p["layers_per_round"]) for p in data["prefill_layers_per_round"]] == [
        (512, 36), (8192, 8), (32768, 2), (131072, 1)]


def test_splits_a100_h20_and_custom() -> None:
    a100 = json.loads(run("splits", "--gpu", "a100", "--json").stdout)
    assert [g["prefill_sms"] for g in a100["groups"]] == [108, 84, 78, 72, 66, 60, 54, 0]
    h20 = json.loads(run("splits", "--gpu", "NVIDIA H20", "--json").stdout)
    assert [(g["prefill_sms"], g["decode_sms"]) for g in h20["groups"]] == [
        (78, 0), (56, 22), (48, 30), (40, 38), (0, 78)]
    custom = json.loads(run("splits", "--sms", "78", "--cc", "9.0", "--json").stdout)
    assert custom["groups"] == h20["groups"]


def test_splits_options_change_the_answer() -> None:
    d = json.loads(run("splits", "--gpu", "h100", "--decode-bs", "24", "--decode-bs-divisor", "24",
                       "--json").stdout)
    assert d["decode_bs_choice"][0]["group"] == 6
    d = json.loads(run("splits", "--gpu", "h100", "--sm-group-num", "5", "--json").stdout)
    assert len(d["groups"]) == 5
    d = json.loads(run("splits", "--gpu", "h100", "--token-budget", "16384", "--prompt-tokens", "8192",
                       "--json").stdout)
    assert d["prefill_layers_per_round"][0]["layers_per_round"] == 2
    d = json.loads(run("splits", "--gpu", "h100", "--model", "llama-3.1-8b", "--prompt-tokens", "512",
                       "--json").stdout)
    assert d["num_layers"] == 32 and d["prefill_layers_per_round"][0]["layers_per_round"] == 32


def test_splits_with_config(tmp_path) -> None:
    cfg = tmp_path / "pdmux.yaml"
    cfg.write_text(
        "sm_group_num: 4\nmanual_divisions:\n- [112, 20, 4]\n- [96, 36, 10]\n"
        "split_forward_token_budget: 32768\ndecode_bs_divisor: 36\n"
    )
    d = json.loads(run("splits", "--gpu", "h100", "--config", str(cfg), "--decode-bs", "2,4,12",
                       "--json").stdout)
    assert [(g["prefill_sms"], g["decode_sms"]) for g in d["groups"]] == [
        (132, 0), (112, 20), (96, 36), (0, 132)]
    assert [g["decode_bs_threshold"] for g in d["groups"]] == [None, 4, 10, None]
    assert [(c["group"], c["older_sglang_crashes"]) for c in d["decode_bs_choice"]] == [
        (1, True), (1, False), (2, False)]
    assert d["prefill_layers_per_round"][1]["layers_per_round"] == 4  # 32768 // 8192


def test_splits_blackwell_says_manual_divisions() -> None:
    r = run("splits", "--gpu", "b200", "--json")
    d = json.loads(r.stdout)
    assert d["source"] == "cuda-granularity"
    assert all(g["prefill_sms"] % 8 == 0 for g in d["groups"][1:-1])
    assert any("manual_divisions" in n for n in d["notes"])


def test_splits_all() -> None:
    r = run("splits", "--all", "--json")
    d = json.loads(r.stdout)
    by_key = {g["key"]: g for g in d["gpus"]}
    assert len(by_key) >= 29
    assert by_key["h100-sxm"]["groups"][1] == {"prefill_sms": 112, "decode_sms": 20}
    assert by_key["b100"]["error"] and by_key["b100"]["groups"] is None
    table = run("splits", "--all")
    assert table.exit_code == 0 and "H20" in table.stdout


@pytest.mark.parametrize(
    "args,contains",
    [
        (["splits", "--gpu", "h1000"], "unknown GPU"),
        (["splits", "--sms", "abc", "--cc", "9.0"], "--sms"),
        (["splits", "--sms", "0", "--cc", "9.0"], "--sms"),
        (["splits", "--sms", "-8", "--cc", "9.0"], "--sms"),
        (["splits", "--sms", "132"], "--cc"),
        (["splits", "--sms", "132", "--cc", "nine"], "compute capability"),
        (["splits", "--sms", "24", "--cc", "9.0"], "No valid partitions"),
        (["splits", "--sms", "132", "--cc", "5.0"], "green contexts"),
        (["splits", "--gpu", "h100", "--decode-bs", "1,x"], "--decode-bs"),
        (["splits", "--gpu", "h100", "--decode-bs", "-4"], "--decode-bs"),
        (["splits", "--gpu", "h100", "--sm-group-num", "2"], "sm_group_num"),
        (["splits", "--gpu", "h100", "--model", "no-such-model"], "model"),
        (["splits", "--gpu", "h100", "--config", "/nonexistent/pdmux.yaml"], "pdmux.yaml"),
        (["splits", "--gpu", "b100"], "SM count"),
        (["splits", "--bogus"], "no such option"),
        (["splits", "--gpu", ""], "--gpu is empty"),
        (["splits", "--sms", "99999999999", "--cc", "9.0"], "--sms"),
        (["splits", "--all", "--config", "x.yaml"], "--all"),
        (["splits", "--sms", "132", "--cc", "99.0"], "pdmux knows 6.0, 6.1"),
        (["splits", "--sms", "132", "--cc", "9.5"], "compute capability 9.5 is not a known"),
        (["gen-config", "--sms", "148", "--cc", "13.0"], "13.0"),
        (["splits", "--gpu", "h100", "--decode-bs", "1,,2"], "item 2 of '1,,2' is empty"),
        (["splits", "--gpu", "h100", "--decode-bs", ""], "--decode-bs"),
        (["splits", "--gpu", "h100", "--prompt-tokens", "512,"], "item 2"),
        (["bench", "--dry-run", "--gpu", "h100", "--levels", "1,,3"], "item 2"),
    ],
)
def test_splits_bad_input(args, contains) -> None:
    assert_one_line_error(run(*args), 2, contains)


# ---- estimate ------------------------------------------------------------------------------------


def test_estimate_chapter_option_is_the_chapter_table() -> None:
    r = run("estimate", "--cost-model", "chapter")
    assert r.exit_code == 0, r.stderr
    for text in ("one step of 299 ms", "291 ms", "mixed chunk 2048", "74 ms x 4 steps", "295 ms",
                 "19 ms x 16 steps", "306 ms", "480 ms", "55", "43", "33", "S_SAT=44", "S_SAT=88", "80/52"):
        assert text in r.stdout, text
    assert "chunked 8192" not in r.stdout  # the chapter has no row of SGLang's default chunking


def test_estimate_default_is_the_roofline_model() -> None:
    r = run("estimate")
    assert r.exit_code == 0, r.stderr
    for text in ("roofline (h100-sxm efficiencies", "S_SAT=88", "CPU 0.31", "chunked 8192",
                 "mixed chunk 512", "PD mux 80/52"):
        assert text in r.stdout, text


def test_estimate_json_stable_keys() -> None:
    d = json.loads(run("estimate", "--cost-model", "chapter", "--json").stdout)
    assert d["fits"] is True and d["level"]["prefill_sms"] == 80 and d["cost_model"] == "chapter"
    assert [round(r["itl_ms"]) for r in d["rows"]] == [9, 299, 74, 19, 9, 11, 15]
    assert [r["tokens_during_prefill"] for r in d["rows"]] == [None, 0, 4, 16, 55, 43, 33]
    assert set(d["rows"][0]) == {"policy", "label", "itl_ms", "decode_steps_during_prefill", "prefill_ms",
                                 "ttft_ms", "ttft_interval_ms",
                                 "tokens_during_prefill", "chunk_tokens", "prefill_sms", "decode_sms",
                                 "s_sat_sms", "decode_alone_ms", "prefill_alone_ms", "decode_corun_ms",
                                 "prefill_corun_ms", "gpus", "layout", "transfer_ms", "link", "runs"}
    d = json.loads(run("estimate", "--json", "--all-levels").stdout)
    assert d["cost_model"] == "roofline" and d["cpu_step_ms"] == pytest.approx(0.31)
    assert [r["policy"] for r in d["rows"]] == ["decode-only", "prefill-first", "chunked", "mixed-chunk",
                                                "mixed-chunk", "pdmux"]
    pd = d["rows"][-1]
    assert pd["decode_alone_ms"] < pd["decode_corun_ms"] < pd["itl_ms"]
    assert all(set(lv) >= {"decode_alone_ms", "prefill_alone_ms", "decode_corun_ms", "prefill_corun_ms"}
               for lv in d["levels"])


def test_estimate_options() -> None:
    d = json.loads(run("estimate", "--cost-model", "chapter", "--level", "96/36", "--s-sat", "36",
                       "--json").stdout)
    pd = [r for r in d["rows"] if r["policy"] == "pdmux"]
    assert len(pd) == 1 and pd[0]["decode_sms"] == 36
    assert pd[0]["itl_ms"] == pytest.approx(d["rows"][0]["itl_ms"])  # 36 SMs saturate at S_SAT 36
    d = json.loads(run("estimate", "--all-levels", "--json").stdout)
    assert len(d["levels"]) == 6
    r = run("estimate", "--all-levels")
    assert "Every level" in r.stdout
    d = json.loads(run("estimate", "--gpu", "h200", "--model", "qwen3-30b-a3b", "--decode-bs", "64",
                       "--chunk-sizes", "1024", "--kv-bytes", "1", "--json").stdout)
    assert d["gpu"].startswith("H200") and len(d["rows"]) == 6
    d = json.loads(run("estimate", "--chunk-sizes", "none", "--mixed-chunk-sizes", "none", "--json").stdout)
    assert [r["policy"] for r in d["rows"]] == ["decode-only", "prefill-first", "pdmux"]
    d = json.loads(run("estimate", "--step-overhead-ms", "0", "--json").stdout)
    assert d["cpu_step_ms"] == 0 and d["rows"][-1]["itl_ms"] == d["rows"][-1]["decode_corun_ms"]


def test_estimate_model_from_path(tmp_path) -> None:
    from pdmux_cli.catalog.profile_files import model_profiles_dir

    path = tmp_path / "config.json"
    path.write_text((model_profiles_dir() / "Qwen3-8B.json").read_text())
    d = json.loads(run("estimate", "--model", str(path), "--cost-model", "chapter", "--json").stdout)
    assert round(d["rows"][4]["prefill_ms"]) == 480


def test_estimate_does_not_fit() -> None:
    r = run("estimate", "--model", "llama-3.1-70b", "--gpu", "h100")
    assert r.exit_code == 0 and "DOES NOT FIT" in r.stdout
    d = json.loads(run("estimate", "--model", "llama-3.1-70b", "--gpu", "h100", "--json").stdout)
    assert d["fits"] is False and d["notes"][0].startswith("does not fit")


@pytest.mark.parametrize(
    "args,contains",
    [
        (["estimate", "--model", "qwen9"], "model"),
        (["estimate", "--gpu", "h999"], "unknown GPU"),
        (["estimate", "--decode-bs", "0"], "--decode-bs must be from 1"),
        (["estimate", "--context", "-5"], "context"),
        (["estimate", "--prompt-tokens", "abc"], "--prompt-tokens"),
        (["estimate", "--chunk-sizes", "512,0"], "--chunk-sizes"),
        (["estimate", "--s-sat", "0"], "--s-sat"),
        (["estimate", "--mfu", "2", "--cost-model", "chapter"], "mfu"),
        (["estimate", "--mfu", "0.6"], "chapter"),
        (["estimate", "--cost-model", "exact"], "--cost-model"),
        (["estimate", "--step-overhead-ms", "-1"], "--step-overhead-ms"),
        (["estimate", "--step-overhead-ms", "1", "--cost-model", "chapter"], "roofline"),
        (["estimate", "--mixed-chunk-sizes", "0"], "--mixed-chunk-sizes"),
        (["estimate", "--prompt-tokens", "50000"], "context length"),
        (["estimate", "--level", "124/8"], "multiple of 8"),
        (["estimate", "--chunk-sizes", ",512"], "item 1 of ',512' is empty"),
        (["estimate", "--mixed-chunk-sizes", "512,,256"], "item 2"),
        (["estimate", "--s-sat", "44,,66"], "item 2 of '44,,66' is empty"),
        (["estimate", "--level", "80/50"], "not a split"),
        (["estimate", "--level", "eighty"], "--level"),
        (["estimate", "--flops-dtype", "int4"], "--flops-dtype"),
        (["estimate", "--model", "/nonexistent/config.json"], "config.json"),
        (["estimate", "--weight-bytes", "-1"], "--weight-bytes must be between 0.0625 and 16 bytes"),
        (["estimate", "--weight-bytes", "1e308"], "--weight-bytes must be between"),
        (["estimate", "--mfu", "5e-324", "--cost-model", "chapter"], "mfu"),
        (["estimate", "--bandwidth-efficiency", "5e-324", "--cost-model", "chapter"],
         "--bandwidth-efficiency must be a fraction"),
        (["estimate", "--prompt-tokens", "99999999999999"], "--prompt-tokens must be from 1"),
        (["estimate", "--prompt-tokens", "1000000", "--chunk-sizes", "1"], "chunk"),
        (["estimate", "--s-sat", "1000"], "S_SAT"),
        (["estimate", "--gpu", "b100"], "not published"),
    ],
)
def test_estimate_bad_input(args, contains) -> None:
    assert_one_line_error(run(*args), 2, contains)


def test_estimate_bad_json_config(tmp_path) -> None:
    path = tmp_path / "config.json"
    path.write_text("{not json")
    assert_one_line_error(run("estimate", "--model", str(path)), 2, "config.json")


# ---- gen-config / check-config ---------------------------------------------------------------------


def test_gen_config_stdout_and_flags() -> None:
    r = run("gen-config", "--gpu", "h100")
    assert r.exit_code == 0, r.stderr
    cfg = yaml.safe_load(r.stdout)
    assert cfg["sm_group_num"] == 8 and cfg["split_forward_token_budget"] == 65536
    assert cfg["decode_bs_divisor"] == 36 and cfg["manual_divisions"] == []
    assert "--enable-pdmux --pdmux-config-path pdmux.yaml --sm-group-num 8 --chunked-prefill-size -1 " \
           "--disable-overlap-schedule" in r.stderr


def test_gen_config_file_passes_check_and_round_trips(tmp_path) -> None:
    out = tmp_path / "h200.yaml"
    r = run("gen-config", "--gpu", "h200", "--manual", "--output", str(out))
    assert r.exit_code == 0, r.stderr
    assert "--pdmux-config-path" in r.stdout
    text = out.read_text()
    cfg = yaml.safe_load(text)
    assert [e[:2] for e in cfg["manual_divisions"]] == [[112, 20], [104, 28], [96, 36], [88, 44], [80, 52],
                                                        [72, 60]]
    assert cfg["manual_divisions"][0][2] == 0
    check = run("check-config", str(out), "--gpu", "h200")
    assert check.exit_code == 0, check.stdout + check.stderr
    from pdmux_cli.sglang.pdmux_config import dump_config, load_config

    assert dump_config(load_config(out)[0]) == text


def test_gen_config_blackwell_always_manual(tmp_path) -> None:
    d = json.loads(run("gen-config", "--gpu", "b200", "--json").stdout)
    assert len(d["config"]["manual_divisions"]) == 6
    assert all(p + dd == 148 and p % 8 == 0 for p, dd, _ in d["config"]["manual_divisions"])
    out = tmp_path / "b200.yaml"
    assert run("gen-config", "--gpu", "b200", "-o", str(out)).exit_code == 0
    assert run("check-config", str(out), "--gpu", "b200").exit_code == 0


def test_gen_config_divisions(tmp_path) -> None:
    d = json.loads(run("gen-config", "--gpu", "h100", "--divisions", "112:20:0,96:36:10,80:52:20",
                       "--json").stdout)
    assert d["config"]["sm_group_num"] == 5
    assert d["launch_flags"][d["launch_flags"].index("--sm-group-num") + 1] == "5"


def test_gen_config_bad_divisions_write_nothing(tmp_path) -> None:
    out = tmp_path / "bad.yaml"
    r = run("gen-config", "--gpu", "h100", "--divisions", "112:21:0,96:36:10", "-o", str(out))
    assert r.exit_code == 2 and "Traceback" not in r.stderr
    assert not out.exists()
    assert_one_line_error(run("gen-config", "--gpu", "h100", "--divisions", "112:x:0"), 2, "divisions")
    assert_one_line_error(run("gen-config", "--gpu", "h100", "-o", str(tmp_path / "no" / "dir.yaml")), 2,
                          "does not exist")


def test_check_config_reports_each_problem(tmp_path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        "sm_group_num: 5\nmanual_divisions:\n- [112, 21, 4]\n- [100, 36, 2]\n- [80, 52, 2]\n"
        "split_forward_token_budget: 0\ndecode_bs_divisor: 36\n"
    )
    r = run("check-config", str(path), "--gpu", "h100", "--json")
    assert r.exit_code == 2
    d = json.loads(r.stdout)
    wheres = {p["where"] for p in d["problems"]}
    assert {"manual_divisions[0]", "manual_divisions[1]", "manual_divisions[2]",
            "split_forward_token_budget"} <= wheres
    assert d["ok"] is False
    table = run("check-config", str(path), "--gpu", "h100")
    assert table.exit_code == 2 and "manual_divisions[1]" in table.stdout
    assert table.stderr.strip().count("\n") == 0


def test_user_text_prints_as_written_not_as_markup(tmp_path) -> None:
    """A YAML key like '[/x]' (rich's closing tag) or '[bold]' is shown as written, no MarkupError."""
    path = tmp_path / "keys.yaml"
    path.write_text('sm_group_num: 8\n"[/x]": 1\n"[bold]k[/bold]": 2\n')
    r = run("check-config", str(path), "--gpu", "h100")
    assert r.exit_code == 2, r.exception
    assert "'[/x]'" in r.stdout and "'[bold]k[/bold]'" in r.stdout


@pytest.mark.parametrize("gpu,content,flag,warned", [
    ("h20", "sm_group_num: 8\n", [], True),  # 5 stream groups, 8 decode backends: exit 0, one warning
    ("h20", "sm_group_num: 5\n", [], False),
    ("h20", "sm_group_num: 5\n", ["--sm-group-num", "8"], True),  # the launch flag sizes the backends
    ("h100", "sm_group_num: 8\n", [], False),
    ("h20", "sm_group_num: 8\nmanual_divisions:\n- [56, 22, 1]\n", [], False),
])
def test_check_config_warns_of_decode_backends_no_level_uses(tmp_path, gpu, content, flag, warned) -> None:
    path = tmp_path / "x.yaml"
    path.write_text(content)
    d = json.loads(run("check-config", str(path), "--gpu", gpu, *flag, "--json").stdout)
    mine = [p for p in d["problems"] if "split levels on this GPU" in p["message"]]
    assert len(mine) == warned
    if warned:
        assert (mine[0]["where"], mine[0]["severity"]) == ("sm_group_num", "warning")
        assert mine[0]["message"].startswith("sm_group_num 8: SGLang's automatic rule finds 3 split levels")
        assert mine[0]["message"].endswith("sm_group_num 5 gives the same levels without them")
        if not flag:
            assert d["ok"] is True and run("check-config", str(path), "--gpu", gpu).exit_code == 0


@pytest.mark.parametrize("content,count,refused", [
    ("a: 1\n", 2, True),  # no sm_group_num (SGLang's loader refuses it) and a key it does not read
    ("a: 1\nb: 2\n", 3, True),
    ("sm_group_num: 8\na: 1\n", 1, False),  # 0.5.23 runs it: the unknown key is the problem
])
def test_check_config_error_line_counts_what_the_table_counts(tmp_path, content, count, refused) -> None:
    path = tmp_path / "x.yaml"
    path.write_text(content)
    r = run("check-config", str(path), "--gpu", "h100")
    assert r.exit_code == 2
    assert f"x.yaml: {count} problem(s) for H100" in r.stdout
    line = f"x.yaml: {count} problem(s)" + ("; SGLang 0.5.23" if refused else "")
    assert line in r.stderr and r.stderr.strip().count("\n") == 0
    assert ("refuses it (load)" in r.stderr) is refused


@pytest.mark.parametrize(
    "content,contains",
    [("sm_group_num: [1\n", "yaml"), ("- 1\n- 2\n", "mapping")],
)
def test_check_config_malformed(tmp_path, content, contains) -> None:
    path = tmp_path / "x.yaml"
    path.write_text(content)
    assert_one_line_error(run("check-config", str(path)), 2, contains)


def test_check_config_missing_file() -> None:
    assert_one_line_error(run("check-config", "/nonexistent.yaml"), 2, "nonexistent.yaml")


def test_check_config_cli_group_num_mismatch(tmp_path) -> None:
    out = tmp_path / "a.yaml"
    run("gen-config", "--gpu", "h100", "-o", str(out))
    r = run("check-config", str(out), "--sm-group-num", "6", "--json")
    assert r.exit_code == 2 and "sm_group_num" in r.stdout


# ---- whole process -------------------------------------------------------------------------------


def test_help_and_no_args() -> None:
    assert run("--help").exit_code == 0
    for cmd in ("splits", "estimate", "gen-config", "check-config"):
        assert run(cmd, "--help").exit_code == 0


def test_module_entry_point_exit_codes() -> None:
    ok = subprocess.run([sys.executable, "-m", "pdmux_cli", "splits", "--gpu", "h20"], capture_output=True,
                        text=True, check=False)
    assert ok.returncode == 0 and "56" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "pdmux_cli", "splits", "--gpu", "zz"], capture_output=True,
                         text=True, check=False)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr


def test_gen_config_tune_writes_a_valid_winner(tmp_path) -> None:
    from pathlib import Path

    trace = Path(__file__).parent / "fixtures" / "azure_conv_50.csv"
    out = tmp_path / "tuned.yaml"
    r = run("gen-config", "--gpu", "h100", "--tune", "--trace", str(trace), "--slo-ttft", "1000",
            "--slo-itl", "50", "--output", str(out), "--json")
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["tune"] is not None and d["output"] == str(out)
    assert run("check-config", str(out), "--gpu", "h100").exit_code == 0
    assert_one_line_error(run("gen-config", "--gpu", "h100", "--trace", str(trace)), 2, "--tune")
    assert_one_line_error(run("gen-config", "--gpu", "h100", "--tune", "--trace", str(trace)), 2, "--slo")


def test_config_that_sglang_refuses_is_an_input_error(tmp_path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("sm_group_num: 3\nmanual_divisions:\n- [152, -20, 0]\n")
    assert_one_line_error(run("splits", "--gpu", "h100", "--config", str(bad)), 2, "manual_divisions[0]")
    assert_one_line_error(run("estimate", "--config", str(bad)), 2, "manual_divisions[0]")
    good = tmp_path / "good.yaml"
    good.write_text("sm_group_num: 3\nmanual_divisions:\n- [96, 36, 0]\n")
    assert run("splits", "--gpu", "h100", "--config", str(good)).exit_code == 0
    assert_one_line_error(run("splits", "--gpu", "h100", "--config", str(good), "--sm-group-num", "4"), 2,
                          "sm_group_num")
    d = json.loads(run("estimate", "--config", str(good), "--json").stdout)
    assert d["level"]["prefill_sms"] == 96


def test_explicit_level_outside_sglang_levels_is_noted() -> None:
    d = json.loads(run("estimate", "--level", "64/68", "--json").stdout)
    assert d["level"]["group"] == -1 and any("not one of the levels" in n for n in d["notes"])
    assert "explicit split" in run("estimate", "--level", "64/68").stdout


def test_output_special_files_and_stdout_dash(tmp_path) -> None:
    assert_one_line_error(run("gen-config", "--output", "/dev/null"), 2, "not a regular file")
    r = run("gen-config", "--output", "-")
    assert r.exit_code == 0 and "sm_group_num: 8" in r.stdout
    target = tmp_path / "real.yaml"
    link = tmp_path / "link.yaml"
    link.symlink_to(target)
    assert run("gen-config", "--output", str(link)).exit_code == 0
    assert link.is_symlink() and "sm_group_num" in target.read_text()


def test_no_arguments_prints_help_without_an_error_line() -> None:
    r = run()
    assert "Usage" in r.stdout and "error" not in r.stderr
    assert r.exit_code == 0


def test_version() -> None:
    from pdmux_cli import __version__

    r = run("--version")
    assert r.exit_code == 0 and r.stdout.strip() == f"pdmux {__version__}"


def test_gen_config_tune_never_writes_over_its_trace(tmp_path) -> None:
    from pathlib import Path

    trace = tmp_path / "trace.csv"
    trace.write_bytes((Path(__file__).parent / "fixtures" / "azure_conv_50.csv").read_bytes())
    before = trace.read_bytes()
    r = run("gen-config", "--gpu", "h100", "--tune", "--trace", str(trace), "--slo-ttft", "1000", "--slo-itl",
            "60", "--json", "-o", str(trace))
    assert r.exit_code == 2 and "is the input file" in r.stderr
    assert trace.read_bytes() == before


def test_non_finite_results_refused_in_tables_too() -> None:
    """A table must not print 'inf ms' where the JSON of the same result is refused."""
    from pdmux_cli.cli.common import require_finite
    from pdmux_cli.util.errors import InputError

    require_finite({"itl_ms": 9.0, "rows": [1, 2.5]})
    for bad in (float("inf"), float("nan")):
        with pytest.raises(InputError, match="non-finite"):
            require_finite({"rows": [{"itl_ms": bad}]})


def test_gen_config_tune_checks_its_output_before_the_search(tmp_path) -> None:
    """A directory or a missing folder as -o fails in one line before minutes of tuning."""
    from pathlib import Path

    trace = Path(__file__).parent / "fixtures" / "azure_conv_50.csv"
    for out, fragment in ((tmp_path, "is a directory"), (tmp_path / "no" / "x.yaml", "does not exist")):
        r = run("gen-config", "--gpu", "h100", "--tune", "--trace", str(trace), "--slo-ttft", "1000",
                "--slo-itl", "60", "-o", str(out))
        assert_one_line_error(r, 2, fragment)  # one line: no comparison table was printed first


def test_check_config_table_shows_the_first_problems(tmp_path) -> None:
    path = tmp_path / "many.yaml"
    path.write_text("sm_group_num: 8\nmanual_divisions:\n" + "- [112, 21, 0]\n" * 200)
    r = run("check-config", str(path), "--gpu", "h100")
    assert r.exit_code == 2
    assert "first 50 of " in r.stdout and r.stdout.count("manual_divisions[") <= 50
    full = run("check-config", str(path), "--gpu", "h100", "--json")
    assert len(json.loads(full.stdout)["problems"]) > 200


# ---- issue 9: rough edges a new user finds -------------------------------------------------------


def test_known_blackwell_and_thor_capabilities_are_accepted() -> None:
    for cc in ("10.0", "10.3", "11.0", "12.0", "12.1", "8.7"):
        assert run("splits", "--sms", "148", "--cc", cc).exit_code == 0, cc


def test_names_too_long_for_a_file_are_bad_input_and_cut(tmp_path) -> None:
    """A 300-character --model or --gpu is an unknown name (not 'File name too long', exit 1); an
    output name too long for the file system is bad input naming it; quoted values are cut."""
    long = "x" * 300
    for args in (["estimate", "--model", long], ["splits", "--model", long]):
        r = run(*args)
        assert_one_line_error(r, 2, "unknown model 'xxx")
        assert len(r.stderr) < 1000
    assert_one_line_error(run("splits", "--gpu", "g" * 100_000), 2, "unknown GPU 'ggg")
    assert len(run("splits", "--gpu", "g" * 100_000).stderr) < 300
    out = tmp_path / (long + ".yaml")
    assert_one_line_error(run("gen-config", "--output", str(out)), 2, "cannot write")
    assert "File name too long" in run("gen-config", "--output", str(out)).stderr
    assert_one_line_error(run("gen-config", "--output", str(tmp_path / long / "a.yaml")), 2,
                          "File name too long")


def test_config_off_the_granularity_is_computed_as_the_driver_runs_it(tmp_path) -> None:
    """100/32 on an H100 really runs 104/28: splits and estimate use 104/28 and say so."""
    cfg = tmp_path / "off.yaml"
    cfg.write_text("sm_group_num: 3\nmanual_divisions:\n- [100, 32, 0]\n")
    d = json.loads(run("splits", "--gpu", "h100", "--config", str(cfg), "--json").stdout)
    assert [(g["prefill_sms"], g["decode_sms"]) for g in d["groups"]] == [(132, 0), (104, 28), (0, 132)]
    assert any("[100, 32] runs as 104/28" in n for n in d["notes"])
    e = json.loads(run("estimate", "--config", str(cfg), "--json").stdout)
    assert (e["level"]["prefill_sms"], e["level"]["decode_sms"]) == (104, 28)
    assert any("runs as 104/28" in n for n in e["notes"])
    table = run("estimate", "--config", str(cfg))
    assert "PD mux 104/28" in table.stdout and "computed with 104/28" in table.stdout


def test_explicit_level_off_the_granularity_is_estimated_as_the_driver_runs_it() -> None:
    d = json.loads(run("estimate", "--level", "100/32", "--json").stdout)
    assert (d["level"]["prefill_sms"], d["level"]["decode_sms"]) == (104, 28)
    assert d["level"]["group"] == 2  # 104/28 is SGLang's level 2 on H100
    assert any("level 100/32 runs as 104/28" in n for n in d["notes"])
    same = json.loads(run("estimate", "--level", "104/28", "--json").stdout)
    assert [r["itl_ms"] for r in same["rows"]] == [r["itl_ms"] for r in d["rows"]]


def test_repeated_sizes_give_one_row() -> None:
    d = json.loads(run("estimate", "--chunk-sizes", "512,512", "--mixed-chunk-sizes", "256,256,128",
                       "--json").stdout)
    assert [r["label"] for r in d["rows"] if r["policy"] in ("chunked", "mixed-chunk")] == [
        "chunked 512", "mixed chunk 256", "mixed chunk 128"]
    s = json.loads(run("splits", "--decode-bs", "6,6,12", "--json").stdout)
    assert [c["decode_bs"] for c in s["decode_bs_choice"]] == [6, 12]


def test_check_config_names_sglang_versions_and_warnings_exit_zero(tmp_path) -> None:
    warn = tmp_path / "warn.yaml"
    warn.write_text("sm_group_num: 3\nmanual_divisions:\n- [112, 20, 0.5]\n")
    r = run("check-config", str(warn))
    assert r.exit_code == 0 and r.stderr == ""
    assert "1 warning(s)" in r.stdout and "SGLang 0.5.23 (latest release)" in r.stdout
    d = json.loads(run("check-config", str(warn), "--json").stdout)
    assert d["ok"] is True and [(p["rule"], p["severity"]) for p in d["problems"]] == [("warning", "warning")]
    # the float threshold is used as written by the planning commands, with a note
    s = json.loads(run("splits", "--config", str(warn), "--decode-bs", "1", "--json").stdout)
    assert s["groups"][1]["decode_bs_threshold"] == 0.5 and any("acts as 1" in n for n in s["notes"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("sm_group_num: 3\nmanual_divisions:\n- [112, 20, 0, 7]\n")
    r = run("check-config", str(bad))
    assert r.exit_code == 2 and "0.5.23 + overlay@2126b0b" in r.stdout and "unreleased" not in r.stdout
    assert "standard@b875545 │ refuses (start-up)" in r.stdout
    assert_one_line_error(run("splits", "--config", str(bad)), 2, "too many values to unpack")


def test_splits_table_names_the_release_that_crashes(tmp_path) -> None:
    cfg = tmp_path / "high.yaml"
    cfg.write_text("sm_group_num: 3\nmanual_divisions:\n- [112, 20, 4]\n")
    r = run("splits", "--config", str(cfg), "--decode-bs", "2")
    assert "(SGLang 0.5.23, the latest release:" in r.stdout and "UnboundLocalError)" in r.stdout
    assert "older" not in r.stdout


def test_launch_line_quotes_an_output_path_with_spaces(tmp_path) -> None:
    out = tmp_path / "my dir" / "pd mux.yaml"
    out.parent.mkdir()
    r = run("gen-config", "--output", str(out))
    assert r.exit_code == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("python -m sglang.launch_server"))
    import shlex

    args = shlex.split(line)
    assert args[args.index("--pdmux-config-path") + 1] == str(out)


def _pdmux(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pdmux_cli", *args], check=False, **kwargs)


def test_bad_input_exits_2_with_stderr_closed_or_full() -> None:
    """`pdmux ... 2>&-` and `2>/dev/full`: the line cannot be written, the status is still 2."""
    closed = _pdmux("splits", "--gpu", "nope", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                    preexec_fn=lambda: __import__("os").close(2))
    assert closed.returncode == 2
    usage = _pdmux("splits", "--bogus", stdout=subprocess.DEVNULL,
                   preexec_fn=lambda: __import__("os").close(2))
    assert usage.returncode == 2
    with open("/dev/full", "w") as full:
        assert _pdmux("splits", "--gpu", "nope", stdout=subprocess.DEVNULL, stderr=full).returncode == 2


def test_a_reader_that_goes_away_is_not_an_error() -> None:
    """`pdmux splits | head -1`: EPIPE on stdout exits 0 with nothing on stderr (the read end is closed
    before pdmux starts, so every write fails: no timing involved)."""
    import os

    for args in (("splits",), ("splits", "--json"), ("estimate", "--json")):
        read_end, write_end = os.pipe()
        os.close(read_end)
        try:
            r = _pdmux(*args, stdout=write_end, stderr=subprocess.PIPE, text=True)
        finally:
            os.close(write_end)
        assert (r.returncode, r.stderr) == (0, ""), args
