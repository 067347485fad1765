"""Issue 23: hostile files and values, and what a new user trips on. Every case is one clear line and the
right exit code (2 for input, 1 at run time), never a traceback; output files whole or not at all."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_assertions import assert_one_line_error
from typer.testing import CliRunner

from pdmux_cli.cli import app

ROOT = Path(__file__).resolve().parents[1]
FIX = Path(__file__).parent / "fixtures"
runner = CliRunner()

# --- control characters in any YAML pdmux reads -------------------------------------------------------

BAD_CHARACTERS = [("\x00", "U+0000"), ("\x07", "U+0007"), ("\ufffe", "U+FFFE"), ("\x1b", "U+001B")]


def _yaml_commands(path: str) -> list[list[str]]:
    """Every command and option that reads a YAML the user wrote, on ``path``."""
    trace = str(FIX / "azure_conv_50.csv")
    cmds = [
        ["check-config", path],
        ["splits", "--config", path],
        ["estimate", "--config", path],
        ["estimate", "--gpu", path],
        ["splits", "--gpu", path],
        ["estimate", "--calibration", path],
        ["gen-config", "--slo-itl", "60", "--context", "2048", "--calibration", path],
        ["calibrate", "--merge", path, "--merge", path],
        ["simulate", "--synthetic", "--qps", "1", "--duration", "2", "--config", path],
        ["simulate", "--synthetic", "--qps", "1", "--duration", "2", "--calibration", path],
        ["capacity", "--synthetic", "--qps", "1", "--max-requests", "20", "--slo-ttft", "1000", "--slo-itl",
         "60", "--config", path],
    ]
    cmds.append(["tune", "--trace", trace, "--slo-ttft", "1000", "--slo-itl", "60", "--calibration", path])
    return cmds


def test_a_control_character_in_any_yaml_is_one_line(tmp_path) -> None:
    """NUL through every command and option that reads YAML; the other characters through check-config."""
    path = tmp_path / "c.yaml"
    for char, code in BAD_CHARACTERS:
        path.write_text(f"sm_group_num: 8{char}\n", encoding="utf-8")
        for args in _yaml_commands(str(path)) if char == "\x00" else [["check-config", str(path)]]:
            r = runner.invoke(app, args)
            assert_one_line_error(r, 2, f"character {code} at line 1, column 16 is not allowed")


def test_a_control_character_in_a_gpu_profile_names_its_line(tmp_path) -> None:
    text = (ROOT / "profiles" / "gpus" / "h100-sxm.yaml").read_text()
    path = tmp_path / "my-gpu.yaml"
    path.write_text(text + "# \x01 pasted\n")
    line = text.count("\n") + 1
    r = runner.invoke(app, ["estimate", "--gpu", str(path)])
    assert_one_line_error(r, 2,
                          f"GPU profile {path} is not valid YAML: character U+0001 at line {line}, column 3")


# --- output paths ---------------------------------------------------------------------------------------


def _simulate_csv(csv: str) -> object:
    return runner.invoke(app, ["simulate", "--synthetic", "--qps", "1", "--duration", "5", "--workers", "1",
                               "--csv", csv])


@pytest.mark.skipif(not os.path.isdir("/dev/shm") or not os.access("/dev/shm", os.W_OK), reason="no /dev/shm")
def test_dev_shm_is_a_folder_of_files() -> None:
    target = Path("/dev/shm") / f"pdmux-test-{os.getpid()}.csv"
    try:
        r = _simulate_csv(str(target))
        assert r.exit_code == 0, r.stderr
        assert target.read_text().startswith("policy,request,")
    finally:
        target.unlink(missing_ok=True)


@pytest.mark.parametrize("target", ["/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"])
def test_streams_stay_refused(target) -> None:
    assert_one_line_error(_simulate_csv(target), 2, "it is a device or a stream")


def test_a_link_to_a_stream_is_refused(tmp_path) -> None:
    (tmp_path / "out.csv").symlink_to("/dev/stdout")
    assert_one_line_error(_simulate_csv(str(tmp_path / "out.csv")), 2, "it is a device or a stream")


@pytest.mark.parametrize("length", [242, 249, 255])
def test_names_up_to_the_file_system_limit_are_written(tmp_path, length) -> None:
    name = "r" * (length - 4) + ".csv"
    r = _simulate_csv(str(tmp_path / name))
    assert r.exit_code == 0, r.stderr
    assert [p.name for p in tmp_path.iterdir()] == [name]


def test_a_utf8_name_cut_for_the_temporary_file_is_written(tmp_path) -> None:
    name = "é" * 125 + ".csv"  # 254 bytes: the temporary name is cut between characters
    r = _simulate_csv(str(tmp_path / name))
    assert r.exit_code == 0, r.stderr
    assert [p.name for p in tmp_path.iterdir()] == [name]


def test_a_name_past_the_limit_is_one_line(tmp_path) -> None:
    assert_one_line_error(_simulate_csv(str(tmp_path / ("r" * 256))), 2, "file name too long")


@pytest.mark.parametrize("args", [
    ["simulate", "--synthetic", "--qps", "1", "--duration", "5", "--csv", "-"],
    ["estimate", "--plot", "-"],
    ["simulate", "--synthetic", "--qps", "1", "--duration", "5", "--csv", "newname/"],
    ["simulate", "--synthetic", "--qps", "1", "--duration", "5", "--plot", "plots/"],
    ["gen-config", "-o", "configs/"],
    ["estimate", "--plot", "x/"],
])
def test_a_trailing_slash_or_a_dash_is_not_a_file_name(tmp_path, monkeypatch, args) -> None:
    monkeypatch.chdir(tmp_path)
    value = args[-1]
    r = runner.invoke(app, args)
    assert_one_line_error(r, 2, "ends with '/', a folder: give a file name" if value.endswith("/") else
                          "'-' (standard output) is not written by this option: give a file name")
    assert f"'{args[-2]}'" in r.stderr  # the option named
    assert list(tmp_path.iterdir()) == []


def test_a_dangling_symlink_names_its_targets_folder(tmp_path) -> None:
    link = tmp_path / "out.csv"
    link.symlink_to(tmp_path / "gone" / "x.csv")
    r = _simulate_csv(str(link))
    assert_one_line_error(r, 2, f"it is a symlink to {tmp_path / 'gone' / 'x.csv'}, whose folder "
                                f"{tmp_path / 'gone'} does not exist")


def test_a_config_path_starting_with_a_dash_is_one_argument_of_the_launch_line(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["gen-config", "-o", "--weird.yaml"])
    assert r.exit_code == 0, r.stderr
    assert "--pdmux-config-path ./--weird.yaml --sm-group-num 8" in " ".join(r.stdout.split())
    assert (tmp_path / "--weird.yaml").exists()


# --- help ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("args", [["--help"], ["simulate", "--help"], []])
def test_help_into_a_reader_that_stops_early_exits_0(args) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "pdmux_cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    proc.stdout.readline()
    proc.stdout.close()  # `| head -1`
    err = proc.stderr.read()
    assert proc.wait(timeout=30) == 0, err
    assert err == b""


def test_flags_show_no_bool_metavar() -> None:
    for args in (["--help"], ["simulate", "--help"], ["estimate", "--help"]):
        r = runner.invoke(app, args, env={"COLUMNS": "120"})
        assert r.exit_code == 0
        assert "<bool>" not in r.stdout
    r = runner.invoke(app, ["simulate", "--help"], env={"COLUMNS": "120"})
    assert "--csv" in r.stdout and "<path>" in r.stdout


# --- bounded work: what no batch can be is refused, the rest stays fast ---------------------------------


def _decode_log(path: Path, running: str, tokens: int = 36600) -> Path:
    line = (f"[2026-11-30 09:00:00 TP0] Decode batch, #running-req: {running}, #token: {tokens}, token "
            "usage: 0.12, cuda graph: True, gen throughput (token/s): 1825.82, #queue-req: 0\n")
    path.write_text(line * 4)
    return path


@pytest.mark.parametrize(("running", "reason"), [
    ("99999999999999999999", "4 missing fields"),  # past 12 digits: no count a log prints
    ("9999999999", "3 fewer KV tokens than running requests"),  # each running request holds a token
    ("٣٢", "4 missing fields"),
])
def test_calibrate_skips_a_batch_no_server_can_run(tmp_path, running, reason) -> None:
    log = _decode_log(tmp_path / "server.log", running)
    r = runner.invoke(app, ["calibrate", "--sglang-log", str(log), "--model", "qwen3-8b", "--gpu", "h100"])
    assert_one_line_error(r, 2, "nothing to calibrate on")
    assert reason in r.stderr


def test_one_huge_decode_batch_is_timed_alone_and_as_a_cached_one() -> None:
    """estimate --decode-bs 1000000 times that batch alone (DENSE_CACHE_GAP); the value equals the cached
    path's, which a simulation growing its batch a request at a time takes."""
    from pdmux_cli.costmodel import build_step_model
    from pdmux_cli.costmodel.roofline import DENSE_CACHE_GAP
    from pdmux_cli.catalog.hardware import find_gpu
    from pdmux_cli.catalog.model import load_model

    far = build_step_model(find_gpu("h100"), load_model("qwen3-8b"))
    near = build_step_model(find_gpu("h100"), load_model("qwen3-8b"))
    n = DENSE_CACHE_GAP + 10
    for step in range(0, n, 64):  # grows the cache
        near.decode_s(52, step + 1, 2048.0 * (step + 1))
    assert far.decode_s(52, n, 2048.0 * n) == pytest.approx(near.decode_s(52, n, 2048.0 * n), rel=1e-12)
    assert far.decode_s(132, 1_000_000, 2048e6) > far.decode_s(132, 500_000, 1024e6)


def test_estimate_of_the_largest_decode_batch_at_every_level() -> None:
    r = runner.invoke(app, ["estimate", "--decode-bs", "1000000", "--all-levels", "--json"])
    assert r.exit_code == 0, r.stderr
    import json

    data = json.loads(r.stdout)
    assert data["scenario"]["decode_bs"] == 1_000_000 and not data["fits"]
    assert len(data["levels"]) == 6


# --- tracebacks from the environment ---------------------------------------------------------------------


def _pdmux(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pdmux_cli", *args], cwd=cwd, capture_output=True,
                          check=False, env={**os.environ, "PYTHONPATH": str(ROOT), **env}, timeout=120)


def test_an_unknown_mplbackend_does_not_stop_a_plot(tmp_path) -> None:
    """Nor does an MPLCONFIGDIR that cannot be written print matplotlib's warning (sweep)."""
    run = _pdmux(["estimate", "--plot", "p.png"], tmp_path, MPLBACKEND="frob", MPLCONFIGDIR="/proc/nowhere")
    assert run.returncode == 0 and run.stderr == b"", run.stderr
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


def test_a_missing_matplotlib_names_the_plot_extra(tmp_path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib.backends.backend_agg", None)
    r = runner.invoke(app, ["estimate", "--plot", str(tmp_path / "p.png")])
    assert_one_line_error(r, 2, "--plot needs matplotlib: pip install 'pdmux[plot]'")
    assert list(tmp_path.iterdir()) == []


def test_an_ascii_terminal_gets_escapes_not_a_traceback(tmp_path) -> None:
    run = _pdmux(["gen-config", "-o", "é.yaml"], tmp_path, PYTHONIOENCODING="ascii")
    assert run.returncode == 0, run.stderr
    assert b"wrote \\xe9.yaml" in run.stdout and (tmp_path / "é.yaml").exists()
    run = _pdmux(["check-config", "nowhere-é.yaml"], tmp_path, PYTHONIOENCODING="ascii")
    assert (run.returncode == 2
            and run.stderr == b"pdmux: error: pdmux config nowhere-\\xe9.yaml: no such file\n")


# --- values no launch can use ---------------------------------------------------------------------------


@pytest.mark.parametrize("args", [
    ["gen-config"], ["splits"], ["estimate"], ["simulate", "--synthetic", "--qps", "1", "--duration", "3"],
])
def test_more_stream_groups_than_sms_are_refused(args) -> None:
    r = runner.invoke(app, [*args, "--sm-group-num", "99999999999999999999"])
    assert_one_line_error(r, 2,
                          "--sm-group-num 99999999999999999999: more stream groups than one per SM "
                          "(132)")
    assert "give at most 134" in r.stderr
    assert runner.invoke(app, [*args, "--sm-group-num", "134"]).exit_code == 0


def test_check_config_refuses_more_stream_groups_than_sms(tmp_path) -> None:
    import json

    path = tmp_path / "big.yaml"
    path.write_text("sm_group_num: 99999999999999999999\n")
    r = runner.invoke(app, ["check-config", str(path), "--gpu", "h100", "--json"])
    assert r.exit_code == 2
    [problem] = json.loads(r.stdout)["problems"]
    assert problem["where"] == "sm_group_num" and problem["severity"] == "error"
    assert "more stream groups than one per SM (132) and the two whole-GPU groups" in problem["message"]
    ok = tmp_path / "ok.yaml"
    ok.write_text("sm_group_num: 8\n")
    r = runner.invoke(app, ["check-config", str(ok), "--gpu", "h100", "--sm-group-num", "1000", "--json"])
    assert r.exit_code == 2
    assert any(p["where"] == "--sm-group-num" and p["message"].startswith("is 1000, more stream groups")
               for p in json.loads(r.stdout)["problems"])


def test_tune_refuses_more_stream_groups_than_sms() -> None:
    r = runner.invoke(app,
                      ["tune", "--trace", str(FIX / "azure_conv_50.csv"), "--slo-ttft", "1000", "--slo-itl",
                            "60", "--sm-group-nums", "8,500"])
    assert_one_line_error(r, 2, "--sm-group-nums 500: more stream groups")


def test_a_cuda_graph_batch_past_memory_names_the_flag() -> None:
    r = runner.invoke(app, ["simulate", "--synthetic", "--qps", "1", "--duration", "3", "--cuda-graph-max-bs",
                            "100000"])
    assert_one_line_error(r, 2, "of which 200000 MiB for --cuda-graph-max-bs 100000 at 2 MiB a batch size")
    assert "give a smaller --cuda-graph-max-bs (SGLang's default here: 256)" in r.stderr


@pytest.mark.parametrize(("args", "text"), [
    ([str(FIX / "azure_conv_50.csv"), "--rate-scale", "1e308"],
     "--rate-scale 1e+308 retimes the trace to inf req/s"),
    ([str(FIX / "azure_conv_50.csv"), "--qps", "1e300"],
     "retimes the trace to 1e+300 req/s, more than 1e+06"),
    (["--synthetic", "--qps", "1e9", "--max-requests", "10"], "--qps 1e+09: more than 1e+06 requests/s"),
])
def test_rates_no_client_sends_are_refused(args, text) -> None:
    assert_one_line_error(runner.invoke(app, ["simulate", *args]), 2, text)


def test_a_gpu_file_with_an_unknown_capability_is_refused_as_cc_is(tmp_path) -> None:
    text = (ROOT / "profiles" / "gpus" / "h100-sxm.yaml").read_text()
    path = tmp_path / "g99.yaml"
    path.write_text("\n".join('compute_capability: "99.9"' if line.startswith("compute_capability:") else line
                              for line in text.splitlines()) + "\n")
    r = runner.invoke(app, ["estimate", "--gpu", str(path)])
    assert_one_line_error(r, 2, "compute capability 99.9 is not a known NVIDIA GPU's")
    assert_one_line_error(runner.invoke(app, ["splits", "--sms", "132", "--cc", "99.9"]), 2,
                          "compute capability 99.9 is not a known NVIDIA GPU's")


# --- refusals that agree ---------------------------------------------------------------------------------

SYNTH = ["--synthetic", "--qps", "1", "--duration", "3"]


@pytest.mark.parametrize(("args", "text"), [
    (["simulate", *SYNTH, "--workers", "0"], "--workers must be >= 1"),
    (["simulate", *SYNTH, "--policies", "pdmux,,chunked"], "--policies: item 2 of 'pdmux,,chunked' is empty"),
    (["simulate", *SYNTH, "--policies", ""], "--policies: give a comma-separated list"),
    (["capacity", *SYNTH, "--policies", "pdmux,"], "--policies: item 2 of 'pdmux,' is empty"),
    (["tune", "--trace", str(FIX / "azure_conv_50.csv"), "--slo-ttft", "1", "--slo-itl", "1",
      "--sm-group-nums", ""],
     "--sm-group-nums: give a comma-separated list"),
    (["tune", "--trace", str(FIX / "azure_conv_50.csv"), "--slo-ttft", "1", "--slo-itl", "1", "--divisors",
      ""],
     "--divisors: give a comma-separated list"),
    (["tune", "--trace", str(FIX / "azure_conv_50.csv"), "--slo-ttft", "1", "--slo-itl", "1", "--budgets",
      ""],
     "--budgets: give a comma-separated list"),
    (["estimate", "--level", ""], "--level '': write PREFILL/DECODE SMs"),
])
def test_empty_lists_and_items_are_refused_everywhere(args, text) -> None:
    assert_one_line_error(runner.invoke(app, args), 2, text)


@pytest.mark.parametrize(("args", "text"), [
    (["estimate", "--decode-bs", "٣٢"], "--decode-bs"),
    (["splits", "--decode-bs", "٣٢"], "--decode-bs: '٣٢' is not an integer of ASCII digits"),
    (["splits", "--prompt-tokens", "8192,٣٢"], "--prompt-tokens: '٣٢' is not an integer of ASCII digits"),
    (["estimate", "--s-sat", "٣٢"], "--s-sat: '٣٢' is not a number of ASCII digits"),
    (["estimate", "--chunk-sizes", "٥١٢"], "--chunk-sizes: '٥١٢' is not an integer of ASCII digits"),
    (["estimate", "--level", "٨٠/٥٢"], "--level '٨٠/٥٢': write PREFILL/DECODE SMs"),
    (["estimate", "--step-overhead-ms", "١"], "--step-overhead-ms"),
    (["gen-config", "--divisions", "١١٢:٢٠:٠"], "is not three integers"),
    (["simulate", "--synthetic", "--qps", "1", "--duration", "3", "--prompt-tokens", "١٠٢٤"], "ASCII digits"),
    (["simulate", "--synthetic", "--qps", "1", "--duration", "3", "--prompt-tokens", "random:١٠٢٤",
      "--output-tokens", "random:8"], "ASCII digits"),
    (["splits", "--sms", "١٣٢", "--cc", "9.0"], "--sms"),
    (["splits", "--sms", "132", "--cc", "٩.٠"], "is not of the form MAJOR.MINOR"),
])
def test_other_scripts_digits_are_refused_by_every_option(args, text) -> None:
    assert_one_line_error(runner.invoke(app, args), 2, text)


# --- numbers that look wrong -------------------------------------------------------------------------------


def test_a_mixed_step_is_never_faster_than_the_decode_step_of_its_rows() -> None:
    import json

    r = runner.invoke(app, ["estimate", "--prompt-tokens", "1", "--json"])
    rows = {row["label"]: row for row in json.loads(r.stdout)["rows"]}
    decode = rows["decode only (ref.)"]["itl_ms"]
    assert rows["mixed chunk 512"]["itl_ms"] >= decode and rows["mixed chunk 2048"]["itl_ms"] >= decode
    from pdmux_cli.costmodel import build_step_model
    from pdmux_cli.catalog.hardware import find_gpu
    from pdmux_cli.catalog.model import load_model

    m = build_step_model(find_gpu("h100"), load_model("qwen3-8b"))
    for tokens in (1, 8, 64):
        assert m.mixed_s([(tokens, 0)], 32, 32 * 2048.0) >= m.decode_s(132, 32, 32 * 2048.0)
    # a real chunk: compute
    assert m.mixed_s([(8192, 0)], 32, 32 * 2048.0) > 10 * m.decode_s(132, 32, 32 * 2048.0)


def test_the_chapter_model_says_when_a_prefill_beats_reading_the_weights() -> None:
    import json

    r = runner.invoke(app, ["estimate", "--cost-model", "chapter", "--prompt-tokens", "1", "--json"])
    [note] = [n for n in json.loads(r.stdout)["notes"] if n.startswith("chapter model:")]
    assert "1-token prefill (0.0306 ms) is shorter than reading the weights once (5.32 ms)" in note
    r = runner.invoke(app, ["estimate", "--cost-model", "chapter", "--json"])  # the chapter's 8192 tokens
    assert not [n for n in json.loads(r.stdout)["notes"] if n.startswith("chapter model:")]


def test_past_the_context_length_a_file_request_is_rejected_a_drawn_request_a_note(tmp_path) -> None:
    """A row past the model's context length is a request SGLang rejects (0.5.23 tokenizer manager), not a
    bad row: counted as rejected, with a note; a synthetic trace's likewise counted, its own note."""
    import json

    trace = tmp_path / "t.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n"
                     "2023-11-16 18:15:47.6805900,50000,44\n2023-11-16 18:15:48.6805900,300,20\n")
    data = json.loads(runner.invoke(app, ["simulate", str(trace), "--policies", "chunked", "--json"]).stdout)
    assert data["trace"]["bad_rows"] == 0 and data["trace"]["rejected_past_context"] == 1
    assert any(n.startswith("1 request of 3 in t.csv rejected by the server, not replayed: prompt + output "
                            "past Qwen3-8B's context length of 40,960 (max_position_embeddings)")
               and n.endswith("; request 2: 50000 + 44 tokens") for n in data["notes"])
    r = runner.invoke(app, ["simulate", "--synthetic", "--qps", "8", "--prompt-tokens", "lognormal:1024:1",
                            "--duration", "120", "--policies", "chunked", "--json"])
    data = json.loads(r.stdout)
    assert data["trace"]["bad_rows"] == 0 and data["trace"]["rejected_past_context"] == 1
    assert any(n.startswith("1 of the 915 synthetic requests drew more tokens than Qwen3-8B's context length "
                            "of 40,960 (the longest 46569 + 128)") for n in data["notes"])


# --- trace formats users have ---------------------------------------------------------------------------

SHAREGPT = ('[\n  {\n    "id": "QWJhYvA_0",\n    "conversations": [\n      {"from": "human", "value": '
            '"Hi"},\n      {"from": "gpt", "value": "Hello"}\n    ]\n  }\n]\n')


@pytest.mark.parametrize(("name", "text", "fragment"), [
    ("ShareGPT_V3_unfiltered_cleaned_split.json", SHAREGPT,
     ("a ShareGPT-style conversation file (SGLang's and "
     "vLLM's bench_serving default dataset): it holds prompts as text, with no token counts or arrival "
     "times")),
    ("sharegpt.jsonl", '{"id": "a", "conversations": [{"from": "human", "value": "Hi"}]}\n',
     "ShareGPT-style"),
    ("workload.jsonl", ('{"timestamp": 0.5, "prompt_len": 100, "output_len": 20}\n'
     '{"timestamp": 1.5, "prompt_len": 200, "output_len": 30}\n'),
     "JSONL of prompt_len, output_len and timestamp: its timestamps' unit is not in the file; convert it to "
     "Mooncake"),
    ("array.json", "[1, 2]", "a JSON array; pdmux reads Mooncake JSONL"),
])
def test_trace_formats_pdmux_cannot_replay_are_named(tmp_path, name, text, fragment) -> None:
    path = tmp_path / name
    path.write_text(text)
    for args in (["simulate", str(path)], ["tune", "--trace", str(path), "--slo-ttft", "1", "--slo-itl", "1"],
                 ["capacity", str(path)]):
        assert_one_line_error(runner.invoke(app, args), 2, fragment)


def test_the_conversion_given_for_a_prompt_len_workload_gives_a_mooncake_trace(tmp_path) -> None:
    """The jq line the refusal gives, done here in Python: the result is read as Mooncake JSONL."""
    import json

    rows = [{"timestamp": 0.5, "prompt_len": 100, "output_len": 20}, {"timestamp": 1.5, "prompt_len": 200,
                                                                       "output_len": 30}]
    out = tmp_path / "trace.jsonl"
    out.write_text("".join(json.dumps({"timestamp": r["timestamp"] * 1000, "input_length": r["prompt_len"],
                                       "output_length": r["output_len"]}) + "\n" for r in rows))
    from pdmux_cli.simulate.traces import load_trace

    t = load_trace(out)
    assert t.format == "mooncake" and t.arrival_s == (0.0, 1.0) and t.prompt_tokens == (100, 200)


# --- what a new user trips on ------------------------------------------------------------------------------

TUNE_SMALL = ["--sm-group-nums", "8", "--divisors", "36", "--budgets", "65536", "--no-fixed-splits",
              "--slo-margins", "none", "--workers", "1"]


def test_gen_config_tune_takes_tunes_trace_options(tmp_path) -> None:
    import yaml

    out = tmp_path / "t.yaml"
    r = runner.invoke(app,
                      ["gen-config", "--gpu", "h100", "--tune", "--trace", str(FIX / "azure_conv_50.csv"),
                            "--slo-ttft", "1000", "--slo-itl", "60", "--workers", "1", "--qps", "4",
                            "--duration", "5", "--format", "azure", "-o", str(out), "--json"])
    assert r.exit_code == 0, r.stderr
    import json

    data = json.loads(r.stdout)
    assert yaml.safe_load(out.read_text())["sm_group_num"] == data["config"]["sm_group_num"]
    r = runner.invoke(app,
                      ["gen-config", "--gpu", "h100", "--tune", "--trace", str(FIX / "azure_conv_50.csv"),
                            "--slo-ttft", "1000", "--slo-itl", "60", "--qps", "1e9"])
    assert_one_line_error(r, 2, "--qps 1e+09 retimes the trace")  # --qps reached the trace
    assert_one_line_error(runner.invoke(app,
                                        ["gen-config", "--tune", "--trace", str(FIX / "azure_conv_50.csv"),
                                              "--slo-ttft", "1", "--slo-itl", "1", "--dp", "2"]), 2,
                          "gen-config --tune tunes one server: for --dp replicas behind a router run 'pdmux "
                          "tune --dp N")
    assert_one_line_error(runner.invoke(app, ["gen-config", "--qps", "3"]), 2, "--qps goes with --tune")


def test_tables_go_to_stdout_unless_the_yaml_does(tmp_path) -> None:
    """gen-config --tune, tune and gen-config --slo-itl alike: the YAML to stdout -> tables to stderr;
    the YAML to a file -> tables to stdout."""
    trace = str(FIX / "azure_conv_50.csv")
    for args in (["gen-config", "--gpu", "h100", "--tune", "--trace", trace, "--slo-ttft", "1000",
                  "--slo-itl", "60", "--workers", "1"],
                 ["tune", "--trace", trace, "--slo-ttft", "1000", "--slo-itl", "60", *TUNE_SMALL],
                 ["gen-config", "--gpu", "h100", "--slo-itl", "60", "--context", "2048"]):
        to_stdout = runner.invoke(app, args)
        assert to_stdout.exit_code == 0, to_stdout.stderr
        assert to_stdout.stdout.lstrip().startswith(("#", "sm_group_num")) and "┏" in to_stdout.stderr
        to_file = runner.invoke(app, [*args, "-o", str(tmp_path / "x.yaml")])
        assert to_file.exit_code == 0, to_file.stderr
        assert "┏" in to_file.stdout and "┏" not in to_file.stderr


def test_the_tune_table_ranks_its_rows() -> None:
    r = runner.invoke(app,
                      ["tune", "--trace", str(FIX / "azure_conv_50.csv"), "--slo-ttft", "1000", "--slo-itl",
                       "60",
                            "--workers", "1", "-o", "-"], env={"COLUMNS": "150"})
    # '-': the YAML to stdout, no file named '-'
    assert r.stdout.startswith("# SGLang PD-multiplexing config")
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("│")]
    assert "rank" in r.stderr and "best" in lines[0]
    ranks = [ln.split("│")[1].split()[0] for ln in lines if ln.split("│")[1].strip()]
    assert ranks[0] == "1" and ranks[1] == "2" and ranks[:12] == [str(i) for i in range(1, 13)]


def test_memory_is_in_gib_as_the_gpu_is_sold() -> None:
    r = runner.invoke(app, ["estimate"])
    assert "memory: 15.3 GiB weights + 10.1 GiB KV of 79.6 GiB" in r.stdout
    r = runner.invoke(app, ["estimate", "--model", "llama-3.1-70b", "--json"])
    import json

    assert any("GiB of weights" in n and "> 79.6 GiB on H100" in n for n in json.loads(r.stdout)["notes"])


# --- found by the sweep (benchmarks/hostile_sweep.py)
# --------------------------------------------------------


def test_calibrate_on_a_loop_of_links_is_one_line(tmp_path) -> None:
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    for option in ("--sglang-log", "--bench-serving"):
        r = runner.invoke(app,
                          ["calibrate", option, str(tmp_path / "loop"), "--model", "qwen3-8b", "--gpu",
                           "h100"])
        assert_one_line_error(r, 2, "Too many levels of symbolic links")


def test_a_path_ending_in_a_dot_is_a_folder(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    for args in (["gen-config", "-o", "out/."],
                 ["simulate", "--synthetic", "--qps", "1", "--duration", "2", "--csv",
                                                  "out/.."]):
        assert_one_line_error(runner.invoke(app, args), 2, "a folder: give a file name")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("args", "text"), [
    (["splits", "--decode-bs", "9999999999"], "--decode-bs 9999999999: give 1 to 1,000,000"),
    (["splits", "--prompt-tokens", "1" + "0" * 60], "give 1 to 10,000,000"),
    (["estimate", "--chunk-sizes", "1" * 25], "give chunk sizes of 1 to 10,000,000 tokens"),
    (["simulate", "--synthetic", "--qps", "1", "--duration", "2", "--seed", "-1"],
     "--seed must be from 0 to 4294967295"),
    (["simulate", str(FIX / "azure_conv_50.csv"), "--qps", "inf"],
     ("--qps inf (every request at once) goes with "
                                                                    "--synthetic")),
    (["bench", "--dry-run", "--gpu", "h100", "--sm-group-num", "500"],
     "--sm-group-num 500: more stream groups"),
])
def test_bounds_every_command_shares(args, text) -> None:
    assert_one_line_error(runner.invoke(app, args), 2, text)


def test_sglang_revisions_are_case_insensitive(tmp_path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("sm_group_num: 8\n")
    r = runner.invoke(app, ["check-config", str(path), "--sglang", "OVERLAY@2126B0B", "--json"])
    import json

    assert r.exit_code == 0 and json.loads(r.stdout)["sglang"] == "overlay@2126b0b"


def test_a_gpu_name_past_the_limit_is_refused(tmp_path) -> None:
    text = (ROOT / "profiles" / "gpus" / "h100-sxm.yaml").read_text()
    path = tmp_path / "g.yaml"
    path.write_text("\n".join("name: " + "H" * 10_000 if line.startswith("name:") else line
                              for line in text.splitlines()) + "\n")
    assert_one_line_error(runner.invoke(app, ["estimate", "--gpu", str(path)]), 2,
                          "field 'name' is 10,000 characters; give at most 120")


def test_a_bench_serving_result_is_not_a_trace(tmp_path) -> None:
    path = tmp_path / "result.jsonl"
    path.write_text('{"backend": "sglang", "request_rate": 4, "input_lens": [10, 20], "output_lens": [5, '
                    '5]}\n')
    assert_one_line_error(runner.invoke(app, ["simulate", str(path)]), 2,
                          "a bench_serving result (per-request input_lens and output_lens, no arrival "
                          "times): give it to 'pdmux calibrate --bench-serving'")


# --- gzip where pdmux reads text (issue 34) --------------------------------------------------------------


def _gzip_readers(path: str) -> list[tuple[list[str], str]]:
    return [
        (["check-config", path], "pdmux config"),
        (["estimate", "--config", path], "pdmux config"),
        (["estimate", "--model", path], "model config"),
        (["estimate", "--speculative-algorithm", "STANDALONE", "--speculative-accept-length", "2",
          "--speculative-draft-model-path", path], "model config"),
        (["calibrate", "--sglang-log", path, "--model", "qwen3-8b", "--gpu", "h100"], "server log"),
        (["calibrate", "--bench-serving", path, "--model", "qwen3-8b", "--gpu", "h100"],
         "bench_serving result"),
        (["calibrate", "--sglang-bench", path, "--model", "qwen3-8b", "--gpu", "h100"], "one-batch result"),
        (["calibrate", "--merge", path, "--merge", path], "calibration file"),
    ]


def test_a_gzip_file_where_text_is_read_says_so(tmp_path) -> None:
    """Traces are read through gzip; every other file pdmux reads is text: a gzip one was 'not UTF-8 text'
    (or, for a server log, 'NUL bytes: UTF-16 or binary'), now it says what it is and what to do."""
    import gzip

    path = tmp_path / "x.gz"
    path.write_bytes(gzip.compress(b"sm_group_num: 8\n"))
    for args, what in _gzip_readers(str(path)):
        r = runner.invoke(app, [*args, "--json"])
        assert_one_line_error(r, 2, f"{what} {path}: gzip-compressed, and pdmux reads this file as text: "
                                    "gunzip it first")
        assert r.stdout == ""


@pytest.mark.parametrize("damage", ["trailing junk", "bad CRC"])
def test_a_gzip_trace_damaged_at_its_end_is_a_broken_gzip_file(tmp_path, damage) -> None:
    import gzip

    whole = gzip.compress((FIX / "azure_conv_50.csv").read_bytes())
    data = whole + b"junk" if damage == "trailing junk" else whole[:-8] + b"\0\0\0\0" + whole[-4:]
    (tmp_path / "t.csv.gz").write_bytes(data)
    r = runner.invoke(app, ["simulate", str(tmp_path / "t.csv.gz"), "--workers", "1", "--json"])
    assert_one_line_error(r, 2, "t.csv.gz: a broken gzip file (")
    assert r.stdout == ""


def test_a_gzip_bomb_trace_is_refused_through_the_cli(tmp_path) -> None:
    """A few KB expanding to 256 MiB of one line: refused at the line bound, memory untouched."""
    import gzip

    member = gzip.compress(b"9" * (64 * 1024 * 1024), mtime=0)
    path = tmp_path / "bomb.csv.gz"
    head = gzip.compress(b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.0,")
    path.write_bytes(head + member * 4)
    r = runner.invoke(app, ["capacity", str(path), "--workers", "1", "--json"])
    assert_one_line_error(r, 2, "bomb.csv.gz: line 2 is longer than 1,048,576 characters")


# --- --speculative-algorithm given blank: one refusal everywhere (issue 34) ------------------------------


@pytest.mark.parametrize("value", ["", " "])
@pytest.mark.parametrize("args", [
    ["estimate"], ["simulate", "--synthetic", "--qps", "2", "--max-requests", "5"],
    ["capacity", "--synthetic", "--qps", "2", "--max-requests", "5", "--slo-ttft", "1000", "--slo-itl", "60"],
    ["tune", "--trace", str(FIX / "azure_conv_50.csv"), "--slo-ttft", "1000", "--slo-itl", "60"],
    ["gen-config"], ["gen-config", "--sglang", "dsv41@a64f33f"], ["check-config", "CONFIG"],
], ids=["estimate", "simulate", "capacity", "tune", "gen-config", "gen-config-dsv41", "check-config"])
def test_a_blank_speculative_algorithm_is_refused_alike(tmp_path, args, value) -> None:
    """Blank was no speculation for gen-config (exit 0, silently), 'needs --speculative-algorithm' for the
    simulating commands' other options, and refused by check-config: now refused by all, as SGLang's choices
    refuse it."""
    config = tmp_path / "pdmux.yaml"
    config.write_text("sm_group_num: 8\n")
    args = [str(config) if a == "CONFIG" else a for a in args]
    r = runner.invoke(app, [*args, "--speculative-algorithm", value, "--speculative-accept-length", "2"]
                      if args[0] in ("estimate", "simulate", "capacity", "tune") else
                      [*args, "--speculative-algorithm", value, "--json"])
    assert_one_line_error(r, 2, f"--speculative-algorithm must be one of EAGLE, EAGLE3, NEXTN, STANDALONE "
                                f"(MTP is NEXTN), got {value!r}")
