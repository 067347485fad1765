"""Structured findings: the core returns codes, values and parameters; pdmux_cli.messages words them.

The printed text is pinned by the command tests; these pin the data: which code and values a situation
gives, that every code the core uses has a sentence, that errors name parameters (the CLI's flags, or
the API's keywords), and that nothing in the core spells a finding's English.
"""

from __future__ import annotations

import ast
import pickle
import re
from pathlib import Path

import pytest
from policy_rows import policy_fields

import pdmux

from pdmux_cli.costmodel.options import CostModelOptions
from pdmux_cli import messages
from pdmux_cli.catalog.hardware import find_gpu
from pdmux_cli.catalog.model import load_model
from pdmux_cli.multigpu.disaggregation import Layout
from pdmux_cli.multigpu.tensor_parallel import check_tp_value, for_disagg_tp, shard
from pdmux_cli.planning.estimate import Scenario, estimate
from pdmux_cli.sglang.revision_rules import revision_findings
from pdmux_cli.sglang.revisions import model_support
from pdmux_cli.simulate import capacity as cap
from pdmux_cli.util.errors import Finding, InputError

CORE = Path(__file__).resolve().parent.parent / "pdmux_cli"
FIX = Path(__file__).resolve().parent / "fixtures"


def _finding_codes() -> set[str]:
    """Every ``Finding("code", ...)`` literal in pdmux_cli/ (outside the rendering module)."""
    codes = set()
    for path in CORE.rglob("*.py"):
        if path.name == "messages.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", None) == "Finding"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                codes.add(node.args[0].value)
    return codes


def test_every_code_the_core_uses_has_a_sentence() -> None:
    codes = _finding_codes()
    assert (
        len(codes) >= 30
    )  # estimate, levels, sglang support/revisions, capacity and tune verdicts, tune notes
    assert codes <= set(messages.TEMPLATES), sorted(codes - set(messages.TEMPLATES))


def test_a_code_without_a_sentence_is_refused() -> None:
    with pytest.raises(KeyError, match="no sentence"):
        messages.render(Finding("made.up"))


def test_estimate_notes_are_findings_with_values() -> None:
    est = estimate(find_gpu("h100"), load_model("llama-3.1-70b"), Scenario())
    first = est.notes[0]
    assert first.code == "estimate.does_not_fit" and first.param == "tp"
    assert (
        first.values["fitting_tp"] == 2
        and first.values["tp"] == 1
        and first.values["gpu"] == "H100 SXM5 80GB"
    )
    assert messages.render(first).endswith("(--tp 2 fits, or fewer bytes per weight)")
    explicit = estimate(find_gpu("h100"), load_model("qwen3-8b"), Scenario(level=(66, 66)))
    rounded = next(n for n in explicit.notes if n.code == "estimate.level_rounded")
    assert (
        rounded.values["asked_prefill_sms"],
        rounded.values["prefill_sms"],
        rounded.values["multiple"],
    ) == (66, 72, 8)
    assert rounded.param == "level"


def test_estimate_source_names_no_s_sat_when_each_row_has_its_own() -> None:
    est = estimate(find_gpu("h100"), load_model("qwen3-8b"), Scenario(s_sat_values=(44.0, 88.0)))
    assert est.throughput_source.startswith("roofline (h100-sxm efficiencies, CPU ")
    assert "S_SAT=" not in est.throughput_source and est.throughput_source.endswith(" (S_SAT per PD-mux row)")
    one = estimate(find_gpu("h100"), load_model("qwen3-8b"), Scenario())
    assert "S_SAT=88 of 132 SMs" in one.throughput_source
    chapter = estimate(find_gpu("h100"), load_model("qwen3-8b"),
                       Scenario(cost=CostModelOptions(cost_model="chapter")))
    assert chapter.throughput_source == "chapter (bandwidth x0.85, MFU 0.5) (S_SAT per PD-mux row)"


def test_model_support_says_why_as_data() -> None:
    no = model_support(("GptOssForCausalLM",))
    assert no.why.code == "sglang.support.no_method" and no.why.values["architecture"] == "GptOssForCausalLM"
    assert no.reason.startswith("no forward_split_prefill in SGLang 0.5.23's GptOssForCausalLM")
    unknown = model_support(())
    assert unknown.why.code == "sglang.support.no_architectures" and unknown.state == "unknown"


def test_revision_findings() -> None:
    assert revision_findings("0.5.23") == []
    codes = [f.code for f in revision_findings("dsv41@a64f33f", tp=2)]
    assert codes == ["sglang.revision.loader_not_read", "sglang.revision.tp"]
    tp_line = messages.render(revision_findings("dsv41@a64f33f", tp=2)[1])
    assert tp_line.startswith(
        "dsv41@a64f33f with TP 2: launch with NCCL_LAUNCH_ORDER_IMPLICIT=1; NCCL >= 2.26"
    )


def test_errors_name_the_parameter_flag_for_the_cli_keyword_for_the_api() -> None:
    with pytest.raises(InputError) as caught:
        check_tp_value(9)
    exc = caught.value
    assert exc.param == "tp"
    assert str(exc) == messages.error_text(exc) and str(exc).startswith(
        "--tp must be a number of GPUs from 1 to 8"
    )
    assert messages.api_error_text(exc).startswith("tp must be a number of GPUs from 1 to 8")


def test_disagg_tp_is_another_parameter_not_a_string_edit() -> None:
    with pytest.raises(InputError) as caught:
        shard(load_model("qwen3-8b"), 3)
    moved = for_disagg_tp(caught.value)
    assert moved.param == "disagg_tp" and caught.value.param == "tp"
    assert str(caught.value).endswith(
        "(SGLang's QKVParallelLinear divides them by --tp-size): use a --tp that divides them"
    )
    assert str(moved).endswith(
        "(SGLang's QKVParallelLinear divides them by TP): use a --disagg-tp that divides them"
    )
    assert messages.api_error_text(moved).endswith("use a disagg_tp that divides them")


def test_user_text_in_values_is_never_read_as_a_template() -> None:
    from pdmux_cli.multigpu.disaggregation import parse_xpyd

    with pytest.raises(InputError) as caught:
        parse_xpyd("{flag.tp}{0}")
    assert str(caught.value).endswith("got '{flag.tp}{0}'") and caught.value.param == "disagg"


def test_an_error_keeps_its_parameter_across_a_process_and_a_prefix() -> None:
    with pytest.raises(InputError) as caught:
        check_tp_value(0)
    back = pickle.loads(pickle.dumps(caught.value.prefixed("pdmux: ")))
    assert type(back) is InputError and back.param == "tp"
    assert str(back).startswith("pdmux: --tp must be") and messages.api_error_text(back).startswith(
        "pdmux: tp must"
    )


def _row(label: str, kind: str, rate: float, gpus: int = 1, layout=Layout(), xpyd=None, chunk: int = 0):
    return cap.PolicyCapacity(
        label,
        kind,
        rate,
        cap.RatePoint(rate, 0.99, rate, 100, 10),
        (cap.RatePoint(rate, 0.99, rate, 100, 10),),
        chunk_tokens=chunk,
        gpus=gpus,
        layout=layout,
        xpyd=xpyd,
        **policy_fields(kind, chunk=chunk),
    )


def test_capacity_verdict_carries_the_launch_as_arguments() -> None:
    result = cap.CapacityResult(
        [
            _row("pdmux", "pdmux", 10.0, 2, Layout(1, 2)),
            _row("chunked 8192", "chunked", 8.0, 2, Layout(1, 2), chunk=8192),
        ],
        0.99,
        0.02,
        4.0,
        1000,
        60,
        1,
        dp=2,
    )
    found = result.verdict_finding()
    assert found.code == "capacity.verdict.pdmux_serves_more" and found.values["gain"] == pytest.approx(0.25)
    assert found.values["launch"] == [
        "--enable-pdmux",
        "--chunked-prefill-size",
        "-1",
        "--disable-overlap-schedule",
        "--dp-size",
        "2",
        "--load-balance-method",
        "round_robin",
    ]
    assert result.verdict() == messages.render(found)
    disagg = cap.CapacityResult(
        [
            _row("pdmux", "pdmux", 4.0, 2, Layout(1, 2)),
            _row("disagg 1P1D", "disagg", 8.0, 2, Layout(1, xpyd=(1, 1)), (1, 1)),
        ],
        0.99,
        0.02,
        4.0,
        1000,
        60,
        1,
    )
    d = disagg.verdict_finding()
    assert d.code == "capacity.verdict.disagg_serves_more" and d.values["disagg"] == {
        "prefill": 1,
        "decode": 1,
        "tp": 1,
    }


def test_layout_and_launch_line_are_rendered() -> None:
    from pdmux_cli.multigpu.disaggregation import Layout

    assert [
        messages.layout_text(Layout(1)),
        messages.layout_text(Layout(2)),
        messages.layout_text(Layout(2, 4)),
        messages.layout_text({"tp": 1, "dp": 1, "xpyd": (1, 3)}),
    ] == ["1 GPU", "TP 2", "DP 4 x TP 2", "1P3D x TP 1"]
    assert messages.launch_line(["python", "-m", "x", "--path", "my dir/a.yaml"], ("A=b c",)) == (
        "A='b c' python -m x --path 'my dir/a.yaml'"
    )


def test_findings_as_json() -> None:
    support = model_support(("GptOssForCausalLM",))
    note = Finding("estimate.pdmux_support", {"state": "no", "reason": support.why}, "sglang")
    data = messages.as_dict(note)
    assert (
        data["code"] == "estimate.pdmux_support"
        and data["values"]["reason"]["code"] == "sglang.support.no_method"
    )
    assert messages.json_default(note) == messages.render(note)


# --- the workflows' and the simulator's errors name parameters, not flags ------------------------------

#: SGLang's own server and bench_serving arguments, quoted as SGLang's in a sentence about SGLang: text.
_SGLANG_FLAGS = {"--tp-size", "--output-details", "--enable-pdmux", "--mem-fraction-static"}
_TEMPLATED = [*sorted((CORE / "workflows").glob("*.py")),
              *sorted((CORE / "simulate").glob("*.py")), CORE / "sglang" / "pdmux_config.py",
              CORE / "sglang" / "split_levels.py", CORE / "sglang" / "revisions.py",
              CORE / "planning" / "slo_levels.py", CORE / "planning" / "plot.py",
              CORE / "util" / "plotting.py", CORE / "costmodel" / "calibration_file.py"]
#: The bench and the whole-GPU fit (tests/test_bench_findings.py also scans their notes and DeviceErrors).
_TEMPLATED += [*sorted((CORE / "bench").glob("*.py")), CORE / "costmodel" / "whole_gpu_fit.py"]
#: The cost model's S_SAT-with-a-calibration and TP-bound errors (tests/test_costmodel_errors.py).
_TEMPLATED += [CORE / "costmodel" / "roofline.py", CORE / "costmodel" / "collectives.py"]
#: What builds an error from a template besides ``InputError(...)`` itself (its first argument the template);
#: a DeviceError takes templates too (PdmuxError's).
_ERROR_BUILDERS = {"InputError", "DeviceError", "PdmuxError", "TaskFailed", "param_error", "_value_error",
                   "_unreadable"}
#: A pdmux command line quoted for the shell ('pdmux tune --dp N -o FILE'): the CLI's text for every caller.
_QUOTED_PDMUX_COMMAND = re.compile(r"'pdmux [a-z][a-z-]*( [^']*)?'")


def _template_flags(text: str) -> set[str]:
    """The pdmux flags an error's template writes itself (outside a quoted pdmux command line)."""
    return set(re.findall(r"--[a-z][a-z0-9-]*", _QUOTED_PDMUX_COMMAND.sub("", text))) - _SGLANG_FLAGS


def test_the_template_scan_skips_only_a_quoted_pdmux_command() -> None:
    assert _template_flags("for {flag.dp} replicas run 'pdmux tune --dp N -o FILE' (same options)") == set()
    assert _template_flags("--dp replicas: run 'pdmux tune --dp N' or '--workers 2'") == {"--dp", "--workers"}
    assert _template_flags("SGLang's --tp-size and --enable-pdmux, pdmux's --tp") == {"--tp"}


def test_no_workflow_or_simulator_error_writes_a_pdmux_flag() -> None:
    written = []
    for path in _TEMPLATED:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            is_error = isinstance(node, ast.Call) and getattr(node.func, "id", None) in _ERROR_BUILDERS
            if not (is_error and node.args):
                continue
            text = "".join(s.value for s in ast.walk(node.args[0])
                           if isinstance(s, ast.Constant) and isinstance(s.value, str))
            flags = _template_flags(text)
            if flags:
                written.append(f"{path.name}:{node.lineno} {sorted(flags)}")
    assert not written, written


# --- the workflows' notes and the core's stored sources are data, worded in messages.py ------------------

#: The workflows whose notes are findings.
_NOTE_FILES = sorted((CORE / "workflows").glob("*.py"))


def _literal_texts(node: ast.AST) -> list[str]:
    """The string literals and f-strings under ``node``, outside ``Finding(...)`` and ``InputError(...)``
    (a finding's code and value names; an error's template, scanned above) and comparisons (``n != "pdmux"``:
    no text written)."""
    if isinstance(node, ast.Compare) or (isinstance(node, ast.Call)
                                         and getattr(node.func, "id", None) in ("Finding", "InputError")):
        return []
    if isinstance(node, ast.JoinedStr):
        return [ast.unparse(node)]
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    return [text for child in ast.iter_child_nodes(node) for text in _literal_texts(child)]


def _named_note(node: ast.AST, words: tuple[str, ...] = ("note", "warning", "problem")) -> bool:
    name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", "")
    return any(word in name for word in words)


def _note_texts(tree: ast.AST) -> list[tuple[int, str]]:
    """Text written into a note: an argument of ``notes.append/extend/insert``, a value assigned to or
    returned as notes (``*_notes`` functions), a ``notes=`` argument (warnings and problems likewise)."""
    found: list[tuple[int, list[str]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
                "append", "extend", "insert") and _named_note(node.func.value):
            found.append((node.lineno, [t for a in node.args for t in _literal_texts(a)]))
        if isinstance(node, ast.Call):
            found += [(node.lineno, _literal_texts(k.value)) for k in node.keywords if k.arg == "notes"]
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t for target in targets for t in ast.walk(target)
                     if isinstance(t, (ast.Name, ast.Attribute))]
            if any(_named_note(t) for t in names):
                found.append((node.lineno, _literal_texts(node.value)))
        if isinstance(node, ast.FunctionDef) and "note" in node.name:
            found += [(r.lineno, _literal_texts(r.value)) for r in ast.walk(node)
                      if isinstance(r, ast.Return) and r.value is not None]
    return [(line, text) for line, texts in found for text in texts]


def test_no_workflow_writes_a_note_as_text() -> None:
    written = [f"{path.name}:{line} {text[:60]!r}" for path in _NOTE_FILES
               for line, text in _note_texts(ast.parse(path.read_text(encoding="utf-8")))]
    assert not written, written


def test_the_note_scan_finds_a_note_written_as_text() -> None:
    tree = ast.parse('def f(x):\n    notes = [Finding("a.b", {"x": x})]\n    notes.append(f"{x} --tp")\n'
                     '    return notes\n\ndef launch_notes():\n    return ["DP 2: --dp-size 2"]\n')
    assert sorted(line for line, _ in _note_texts(tree)) == [3, 7]


#: Files whose stored text (a source, a description, a constant's keys) named flags: data now.
_STORED = [CORE / "multigpu" / "disaggregation.py", CORE / "costmodel" / "__init__.py",
           CORE / "costmodel" / "roofline.py", CORE / "costmodel" / "efficiency.py",
           CORE / "sglang" / "kv_cache.py", CORE / "simulate" / "tune.py",
           CORE / "workflows" / "calibrate.py"]
#: What stores text: these keywords, and the arguments of these constructors.
_STORING_KEYWORDS = {"source", "origin", "chosen_by", "description"}
_STORING_CLASSES = {"KvLink", "KvCache", "CpuProfile", "ServingProfile", "Candidate", "Calibration"}


def _stored_flags(tree: ast.AST) -> list[tuple[int, str]]:
    import re

    def flags(node: ast.AST) -> list[str]:
        return [f for text in _literal_texts(node) for f in re.findall(r"--[a-z][a-z0-9-]*", text)]

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            stored = [k.value for k in node.keywords if k.arg in _STORING_KEYWORDS]
            if getattr(node.func, "id", None) in _STORING_CLASSES:
                stored += node.args
            found += [(node.lineno, f) for value in stored for f in flags(value)]
        if isinstance(node, ast.Assign) and any(  # a source's parts: bw_source = "--kv-link-gb-s"
                _named_note(t, ("source", "why")) for target in node.targets for t in ast.walk(target)):
            found += [(node.lineno, f) for f in flags(node.value)]
        if isinstance(node, ast.Dict):  # keyed by flag
            found += [(node.lineno, f) for key in node.keys if key is not None for f in flags(key)]
    return found


def test_no_stored_source_or_key_names_a_flag() -> None:
    written = [f"{path.relative_to(CORE)}:{line} {flag}" for path in _STORED
               for line, flag in _stored_flags(ast.parse(path.read_text(encoding="utf-8")))]
    assert not written, written


def test_the_stored_text_scan_finds_a_flag() -> None:
    tree = ast.parse('BOUNDS = {"--step-overhead-ms": 1.0}\nx = replace(cpu, source=f"--kv-bytes {b:g}")\n'
                     'y = KvLink("nvlink", 1.0, 0.0, "--kv-link-gb-s")\n')
    assert sorted(_stored_flags(tree)) == [(1, "--step-overhead-ms"), (2, "--kv-bytes"),
                                           (3, "--kv-link-gb-s")]


#: The value checks that take the parameter at fault by its Python name (``"decode_bs"``), never its flag.
_VALUE_CHECKS = {"check_int", "optional_int", "check_number", "optional_number", "int_tuple", "float_tuple",
                 "optional_path", "check_positive_knobs", "parse_int_list", "parse_float_list", "parse_names",
                 "check_bytes_per_element", "check_efficiency", "check_mem_fraction", "check_sm_group_num",
                 "check_at_least_one", "parse_sizes", "parse_chunk_sizes", "param_error", "check_target_ms"}


def _flags_given_to_value_checks(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, text)`` of every ``--flag`` string literal given to a :data:`_VALUE_CHECKS` call (as an
    argument or a keyword's value, ``where=`` too) or written as such a function's default."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = getattr(func, "id", None) or getattr(func, "attr", "")
            given = [*node.args, *(k.value for k in node.keywords)] if name in _VALUE_CHECKS else []
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in _VALUE_CHECKS:
            given = [*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)]
        else:
            continue
        found.extend((node.lineno, g.value) for g in given
                     if isinstance(g, ast.Constant) and isinstance(g.value, str) and g.value.startswith("--"))
    return sorted(found)


def test_the_scan_for_flags_given_to_value_checks_finds_them() -> None:
    tree = ast.parse(
        'check_int(r.tp, "--tp")\nvalues.parse_int_list(t, "decode_bs", where="--x")\n'
        'def check_sm_group_num(v, n, what="--sm-group-num"): pass\nparse_names(t, "policies", K)\n'
        'check_positive_knobs(token_budget=b)\n')
    assert _flags_given_to_value_checks(tree) == [(1, "--tp"), (2, "--x"), (3, "--sm-group-num")]


def test_no_value_check_is_given_a_flag() -> None:
    """The workflows (and the core below them) name a parameter by its Python name; the rendering layer
    turns it into the flag (the CLI under pdmux_cli/cli/ may still pass flags: the checks read them)."""
    given = []
    for path in [*sorted(CORE.rglob("*.py")), *sorted((CORE.parent / "pdmux").rglob("*.py"))]:
        if path.name == "messages.py" or "cli" in path.relative_to(CORE.parent).parts[1:-1]:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        where = path.relative_to(CORE.parent)
        given += [f"{where}:{line} {text}" for line, text in _flags_given_to_value_checks(tree)]
    assert not given, given


#: check_sm_group_num's line after the flag or keyword, for 500 groups on an H100 (132 SMs, limit 134).
_TOO_MANY_GROUPS = (" 500: more stream groups than one per SM (132) and the two whole-GPU groups; SGLang "
                    "builds a decode attention backend and its CUDA graphs for every group, and no split "
                    "level can use more than one per SM: give at most 134 (SGLang's default: 8)")


@pytest.mark.parametrize(
    "call, param, cli_line, api_line",
    [
        (lambda: pdmux.estimate(decode_bs="8"), "decode_bs",
         "--decode-bs must be an integer, got '8'", "decode_bs must be an integer, got '8'"),
        (lambda: pdmux.estimate(kv_link_gb_s="fast"), "kv_link_gb_s",
         "--kv-link-gb-s must be a number, got 'fast'", "kv_link_gb_s must be a number, got 'fast'"),
        (lambda: pdmux.splits(prompt_tokens=[512, 0]), "prompt_tokens",
         "--prompt-tokens: 0 must be >= 1", "prompt_tokens: 0 must be >= 1"),
        (lambda: pdmux.estimate(s_sat="44,,88"), "s_sat",
         "--s-sat: item 2 of '44,,88' is empty (e.g. 44,66,88)",
         "s_sat: item 2 of '44,,88' is empty (e.g. 44,66,88)"),
        (lambda: pdmux.estimate(plot=3), "plot",
         "--plot takes a file path (str or os.PathLike), got 3",
         "plot takes a file path (str or os.PathLike), got 3"),
        (lambda: pdmux.splits(token_budget=0), "token_budget",
         "--token-budget must be > 0, got 0", "token_budget must be > 0, got 0"),
        (lambda: pdmux.estimate(sm_group_num=500), "sm_group_num", "--sm-group-num" + _TOO_MANY_GROUPS,
         "sm_group_num" + _TOO_MANY_GROUPS),
        (lambda: pdmux.simulate(synthetic=True, qps=1.0, policies="pdmux,fifo"), "policies",
         "--policies: unknown fifo; use pdmux, chunked, mixed-chunk, prefill-first, disagg",
         "policies: unknown fifo; use pdmux, chunked, mixed-chunk, prefill-first, disagg"),
        (lambda: pdmux.simulate(synthetic=True, qps=1.0, sm_group_num="8"), "sm_group_num",  # was a TypeError
         "--sm-group-num must be an integer, got '8'", "sm_group_num must be an integer, got '8'"),
        (lambda: pdmux.simulate(synthetic=True, qps=1.0, mfu=1.5), "mfu",
         "--mfu must be a fraction in [0.001, 1], got 1.5", "mfu must be a fraction in [0.001, 1], got 1.5"),
        (lambda: pdmux.simulate(synthetic=True, qps=1.0, weight_bytes=64), "weight_bytes",
         "--weight-bytes must be between 0.0625 and 16 bytes per element (a few bits to fp128), got 64",
         "weight_bytes must be between 0.0625 and 16 bytes per element (a few bits to fp128), got 64"),
        (lambda: pdmux.tune(FIX / "azure_conv_50.csv", slo_ttft=1000, slo_itl=50,
                                          sm_group_nums="8,2"), "sm_group_nums",
         "--sm-group-nums: 2 must be >= 3", "sm_group_nums: 2 must be >= 3"),
    ],
)
def test_value_checks_name_the_flag_for_the_cli_and_the_keyword_for_the_api(call, param, cli_line,
                                                                             api_line) -> None:
    exc = _raised(call)  # raised by the API: str() names the keyword
    assert exc.param == param
    assert messages.error_text(exc) == cli_line
    assert str(exc) == messages.api_error_text(exc) == api_line


@pytest.mark.parametrize(
    "args, line",
    [
        (["splits", "--decode-bs", "1,,2"], "--decode-bs: item 2 of '1,,2' is empty (e.g. 1,6,12)"),
        (["splits", "--token-budget", "0"], "--token-budget must be > 0, got 0"),
        (["estimate", "--s-sat", "44,x"], "--s-sat: 'x' is not a number of ASCII digits (e.g. 44,66,88)"),
        (["estimate", "--chunk-sizes", "2048,999999999"],
         "--chunk-sizes 999999999: give chunk sizes of 1 to 10,000,000 tokens"),
        (["simulate", "--synthetic", "--qps", "1", "--policies", "fifo"],
         "--policies: unknown fifo; use pdmux, chunked, mixed-chunk, prefill-first, disagg"),
        (["simulate", "--synthetic", "--qps", "1", "--kv-bytes", "0"],
         "--kv-bytes must be between 0.0625 and 16 bytes per element (a few bits to fp128), got 0.0"),
        (["tune", "--trace", str(FIX / "azure_conv_50.csv"), "--slo-ttft", "1000", "--slo-itl", "50",
          "--divisors", "4,0"], "--divisors: 0 must be >= 1"),
        (["tune", "--trace", str(FIX / "azure_conv_50.csv"), "--slo-ttft", "1000", "--slo-itl", "50",
          "--sm-group-nums", "8,500"], "--sm-group-nums" + _TOO_MANY_GROUPS),
    ],
)
def test_the_cli_prints_a_value_check_as_one_line(args, line) -> None:
    from typer.testing import CliRunner

    from pdmux_cli.cli import app

    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2, (r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert lines == [f"pdmux: error: {line}"]


def test_a_value_check_names_a_text_that_is_no_parameter_as_written() -> None:
    from pdmux_cli.simulate.engine import check_bytes_per_element
    from pdmux_cli.workflows.planning_inputs import check_int
    from pdmux_cli.workflows.values import parse_int_list

    exc = _raised(parse_int_list, "1,{flag.tp}", where="trace.yaml:3: sizes")
    assert exc.param is None
    assert str(exc) == messages.api_error_text(exc) == (
        "trace.yaml:3: sizes: '{flag.tp}' is not an integer of ASCII digits (e.g. 1,6,12)")
    exc = _raised(check_bytes_per_element, 99.0, where="KV bytes per element")
    assert str(exc) == messages.api_error_text(exc) == ("KV bytes per element must be between 0.0625 and 16 "
                                                        "bytes per element (a few bits to fp128), got 99.0")
    exc = _raised(check_int, "8", "path", where="path")  # check-config's positional argument: no flag
    assert exc.param == "path"
    assert str(exc) == messages.api_error_text(exc) == "path must be an integer, got '8'"
    exc = _raised(check_int, 8.0, "--max-requests")  # a flag (the CLI's spelling) is read as its parameter
    assert exc.param == "max_requests" and str(exc) == "--max-requests must be an integer, got 8.0"
    assert messages.api_error_text(exc) == "max_requests must be an integer, got 8.0"
    with pytest.raises(TypeError, match="needs the parameter"):
        check_int("8")


def _raised(call, *args, **kwargs) -> InputError:
    with pytest.raises(InputError) as caught:
        call(*args, **kwargs)
    return caught.value


def test_splits_errors_name_all_gpus_for_the_api_and_all_for_the_cli() -> None:
    import pdmux

    exc = _raised(pdmux.splits, gpu="h100", all_gpus=True)
    assert messages.error_text(exc) == "--all lists every profile; drop --gpu/--sms/--cc"
    assert str(exc) == messages.api_error_text(exc) == "all_gpus lists every profile; drop gpu/sms/cc"


def test_the_executor_errors_name_keywords_for_the_api() -> None:
    from pdmux_cli.simulate.executors import check_executor

    exc = _raised(check_executor, "local", "auto")
    assert str(exc) == "--ray-address applies to --executor ray"
    assert messages.api_error_text(exc) == "ray_address applies to executor ray"
    exc = _raised(check_executor, "dask", None)
    assert str(exc) == "--executor must be one of local, ray, got 'dask'"
    assert messages.api_error_text(exc) == "executor must be one of local, ray, got 'dask'"


def test_divisions_errors_quote_user_text_as_values() -> None:
    from pdmux_cli.sglang.pdmux_config import parse_divisions

    exc = _raised(parse_divisions, "112:20:0,{flag.tp}")
    assert str(exc) == "--divisions entry 2 '{flag.tp}' has 1 number(s), needs 3: " \
        "PREFILL_SMS:DECODE_SMS:DECODE_BS_THRESHOLD"
    assert messages.api_error_text(exc).startswith("divisions entry 2 '{flag.tp}' has 1 number(s)")


def test_the_cli_prints_a_workflow_error_as_before() -> None:
    from typer.testing import CliRunner

    from pdmux_cli.cli import app

    r = CliRunner().invoke(app, ["splits", "--all", "--gpu", "h100"])
    assert r.exit_code == 2 and "--all lists every profile; drop --gpu/--sms/--cc" in r.stderr
    r = CliRunner().invoke(app, ["simulate", "--synthetic", "--model", "qwen3-8b", "--gpu", "h100"])
    assert r.exit_code == 2 and "--synthetic needs --qps (requests/s)" in r.stderr


def test_workflow_notes_are_findings_worded_as_before() -> None:
    from pdmux_cli.workflows import capacity as capacity_wf

    crashed = cap.RatePoint(2.0, 0.5, 2.0, 100, 10, crashed=True)
    row = cap.PolicyCapacity("pdmux", "pdmux", 0.0, None, (crashed,), bound="below")
    notes = capacity_wf.policy_notes(row, 1000, 1)
    assert [(n.code, n.param) for n in notes if isinstance(n, Finding)] == [
        ("capacity.crashes_at_some_rates", "unreleased_fallback")]
    assert messages.render(notes[-1]).endswith(
        "those runs count as missing the SLO; --unreleased-fallback sizes the unreleased branches' behaviour "
        "instead")
    assert messages.render(Finding("simulate.failed_rows", {"rows": 3})) == (
        "3 failed request row(s) (0 response tokens) skipped")
    assert messages.render(Finding("deploy.nothing_to_route", param="load_balance_method")) == (
        "one instance a side and one server: --load-balance-method has nothing to route")
