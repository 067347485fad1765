"""Trace parsers (Azure, Mooncake, BurstGPT), format detection, bad rows, synthetic arrivals, retiming.

Fixtures in tests/fixtures/ (README there: the Azure excerpt's CC-BY attribution).
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path

import pytest

from pdmux_cli.util.errors import InputError
from pdmux_cli.simulate import traces
from pdmux_cli.simulate.traces import (
    detect_format,
    load_trace,
    parse_length_spec,
    reshape,
    synthetic_trace,
)
from pdmux_cli.messages import render_all

FIX = Path(__file__).parent / "fixtures"
CONV = Path("/work/shared/data/traces/AzureLLMInferenceTrace_conv.csv")


def test_azure_excerpt_first_rows_and_timestamps() -> None:
    t = load_trace(FIX / "azure_conv_50.csv")
    assert t.format == "azure" and len(t) == 50 and t.bad_rows == 0
    assert t.prompt_tokens[:4] == (374, 396, 879, 91)
    assert t.output_tokens[:4] == (44, 109, 55, 16)
    # 18:15:46.6805900 -> 18:15:50.9951690 -> 18:15:51.2224670: 7 fractional digits kept
    assert t.arrival_s[0] == 0.0
    assert t.arrival_s[1] == pytest.approx(4.314579, abs=1e-6)
    assert t.arrival_s[2] == pytest.approx(4.541877, abs=1e-6)
    assert list(t.arrival_s) == sorted(t.arrival_s)


def test_azure_minute_and_hour_rollover(tmp_path: Path) -> None:
    p = tmp_path / "a.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                 "2023-11-16 18:59:59.9999999,10,2\n2023-11-16 19:00:00.0000001,10,2\n"
                 "2023-11-17 00:00:01.5,10,2\n")
    t = load_trace(p)
    assert t.arrival_s[1] == pytest.approx(2e-7, abs=1e-9)
    assert t.arrival_s[2] == pytest.approx(5 * 3600 + 1.5000001, abs=1e-6)


def test_azure_bad_rows_reported_with_line_numbers() -> None:
    t = load_trace(FIX / "azure_bad_rows.csv")
    assert len(t) == 3
    assert t.prompt_tokens == (374, 396, 800)
    assert t.bad_rows == 5
    assert [line for line, _ in t.bad_examples] == [4, 5, 6, 7, 8]
    text = t.bad_rows_text()
    assert "5 bad row(s)" in text and "line 4" in text and "\n" not in text


def test_mooncake_small() -> None:
    t = load_trace(FIX / "mooncake_small.jsonl")
    assert t.format == "mooncake"
    assert t.prompt_tokens == (6755, 6402, 6766, 512)
    assert t.output_tokens == (500, 490, 9, 64)
    assert t.arrival_s == pytest.approx((0.0, 27.482, 30.535, 46.0005))
    assert t.bad_rows == 3
    assert [line for line, _ in t.bad_examples] == [4, 5, 6]
    assert t.hash_ids == (tuple(range(14)), tuple(range(13)), (), ()) and t.has_hash_ids
    assert load_trace(FIX / "azure_conv_50.csv").hash_ids == ()


def test_mooncake_hash_ids_follow_their_requests(tmp_path: Path) -> None:
    """Kept per request through sorting, --max-requests, --duration and context drops; ids past the
    prompt's last 512-token block dropped; a hash_ids that is not a list of integers makes a bad row."""
    path = tmp_path / "hashed.jsonl"
    path.write_text(
        '{"timestamp": 3000, "input_length": 1000, "output_length": 5, "hash_ids": [7, 8, 9, 10]}\n'
        '{"timestamp": 1000, "input_length": 600, "output_length": 5, "hash_ids": [7, 8]}\n'
        '{"timestamp": 2000, "input_length": 300, "output_length": 5}\n'
        '{"timestamp": 2500, "input_length": 300, "output_length": 5, "hash_ids": [1, true]}\n'
        '{"timestamp": 2600, "input_length": 300, "output_length": 5, "hash_ids": "7,8"}\n'
        '{"timestamp": 4000, "input_length": 50000, "output_length": 5, "hash_ids": [7, 8, 11]}\n'
    )
    t = load_trace(path)
    assert t.prompt_tokens == (600, 300, 1000, 50000)
    assert t.hash_ids == ((7, 8), (), (7, 8), (7, 8, 11))
    assert t.bad_rows == 2 and "hash_ids [1, True] is not a list of integers" in t.bad_examples[0][1]
    assert reshape(t, max_requests=2).hash_ids == ((7, 8), ())
    assert reshape(t, duration_s=1.2).hash_ids == ((7, 8), ())
    unhashed_head = replace(t, hash_ids=((), (), (7, 8), (7, 8, 11)))
    head = reshape(unhashed_head, max_requests=2)
    assert head.hash_ids == () and not head.has_hash_ids
    assert traces.drop_past_context(t, 40960).hash_ids == ((7, 8), (), (7, 8))


def test_burstgpt_small_failures_counted() -> None:
    t = load_trace(FIX / "burstgpt_small.csv")
    assert t.format == "burstgpt"
    assert t.prompt_tokens == (472, 417, 2048)
    assert t.output_tokens == (18, 217, 256)
    assert t.arrival_s == pytest.approx((0.0, 113.0, 145.5))
    assert t.failed_rows == 2
    assert t.bad_rows == 1 and t.bad_examples[0][0] == 6


def test_detect_format_and_forced_format() -> None:
    assert detect_format("TIMESTAMP,ContextTokens,GeneratedTokens") == "azure"
    assert detect_format('{"timestamp": 0}') == "mooncake"
    assert detect_format("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type") == "burstgpt"
    assert detect_format("a,b,c") is None
    assert load_trace(FIX / "azure_conv_50.csv", fmt="azure").format == "azure"


def test_errors_are_input_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="missing.csv: no such file"):
        load_trace(tmp_path / "missing.csv")
    unknown = tmp_path / "x.csv"
    unknown.write_text("a,b,c\n1,2,3\n")
    with pytest.raises(InputError, match="unknown trace format"):
        load_trace(unknown)
    with pytest.raises(InputError, match="unknown trace format 'parquet'"):
        load_trace(FIX / "azure_conv_50.csv", fmt="parquet")
    empty = tmp_path / "empty.csv"
    empty.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\nbad,1,1\n")
    with pytest.raises(InputError, match="no valid request rows.*line 2"):
        load_trace(empty)
    wrong = tmp_path / "wrong.csv"
    wrong.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n")
    with pytest.raises(InputError, match="lacks the column 'TIMESTAMP'"):
        load_trace(FIX / "mooncake_small.jsonl", fmt="azure")
    with pytest.raises(InputError, match="no valid request rows"):
        load_trace(wrong)
    nothing = tmp_path / "nothing.csv"
    for text, said in (("", "nothing.csv: empty: not a trace"),
                       ("\n  \n\n", "nothing.csv: blank lines only")):
        nothing.write_text(text)
        for fmt in (None, "azure", "mooncake"):
            with pytest.raises(InputError, match=said):
                load_trace(nothing, fmt=fmt)


def test_unsorted_file_is_sorted(tmp_path: Path) -> None:
    p = tmp_path / "m.jsonl"
    p.write_text('{"timestamp": 2000, "input_length": 5, "output_length": 1}\n'
                 '{"timestamp": 1000, "input_length": 7, "output_length": 2}\n')
    t = load_trace(p)
    assert t.prompt_tokens == (7, 5) and t.arrival_s == (0.0, 1.0)
    assert any("sorted" in n for n in render_all(t.notes))


def test_reshape_rate_scale_qps_cut() -> None:
    t = load_trace(FIX / "azure_conv_50.csv")
    doubled = reshape(t, rate_scale=2)
    assert doubled.arrival_s[-1] == pytest.approx(t.arrival_s[-1] / 2)
    q = reshape(t, qps=10)
    assert q.mean_qps == pytest.approx(10)
    first = reshape(t, max_requests=5)
    assert len(first) == 5 and first.prompt_tokens == t.prompt_tokens[:5]
    cut = reshape(t, duration_s=10)
    assert all(a <= 10 for a in cut.arrival_s) and len(cut) < 50
    with pytest.raises(InputError, match="not both"):
        reshape(t, rate_scale=2, qps=3)
    with pytest.raises(InputError, match="> 0"):
        reshape(t, qps=-1)
    with pytest.raises(InputError, match="max-requests"):
        reshape(t, max_requests=0)


def test_synthetic_poisson_deterministic() -> None:
    a = synthetic_trace(5, "uniform:100:200", "exp:50", num_requests=500, seed=3)
    b = synthetic_trace(5, "uniform:100:200", "exp:50", num_requests=500, seed=3)
    c = synthetic_trace(5, "uniform:100:200", "exp:50", num_requests=500, seed=4)
    assert a == b and a.arrival_s != c.arrival_s
    assert len(a) == 500 and 4 < a.mean_qps < 6.2
    assert all(100 <= p <= 200 for p in a.prompt_tokens) and min(a.output_tokens) >= 1
    fixed = synthetic_trace(2, 1024, 128, duration_s=10)
    assert set(fixed.prompt_tokens) == {1024} and all(t <= 10 for t in fixed.arrival_s)
    with pytest.raises(InputError, match="qps"):
        synthetic_trace(-1)
    for spec in ("0", "uniform:5:1", "exp:-1", "gauss:1", "lognormal:100"):
        with pytest.raises(InputError):
            parse_length_spec(spec, "--prompt-tokens")


def test_special_files_are_refused_without_reading(tmp_path: Path, error_from_fifo_reader) -> None:
    with pytest.raises(InputError, match="not a regular file"):
        load_trace("/dev/zero")
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    error = error_from_fifo_reader(lambda: load_trace(fifo), fifo)
    assert isinstance(error, InputError) and "not a regular file" in str(error)
    with pytest.raises(InputError, match="is a directory"):
        load_trace(tmp_path)


def test_trace_over_the_size_limit_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    big = tmp_path / "big.csv"
    big.write_text((FIX / "azure_conv_50.csv").read_text())
    monkeypatch.setattr(traces, "MAX_TRACE_BYTES", big.stat().st_size - 1)
    with pytest.raises(InputError, match="more than the"):
        load_trace(big)
    monkeypatch.setattr(traces, "MAX_TRACE_BYTES", big.stat().st_size)
    assert len(load_trace(big)) == 50


def test_synthetic_request_count_is_bounded() -> None:
    # the bound is traces.MAX_REQUESTS (100 million: a few tens of bytes each, in columns)
    with pytest.raises(InputError, match="--max-requests"):
        synthetic_trace(1_000_000, duration_s=1000)
    with pytest.raises(InputError, match="100,000,000"):
        synthetic_trace(1, num_requests=100_000_001)
    with pytest.raises(InputError, match="--duration"):
        synthetic_trace(1, duration_s=float("inf"))
    # a cap keeps a huge rate usable: exactly the requests asked for
    assert len(synthetic_trace(1e6, duration_s=1e9, num_requests=100)) == 100


def test_synthetic_poisson_count_past_the_limit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(traces, "MAX_SYNTHETIC_REQUESTS", 100)
    # 99 expected requests pass the up-front check; seed 7 draws 113 of them (97 with seed 1)
    with pytest.raises(InputError, match="more than 100 synthetic requests"):
        synthetic_trace(0.99, duration_s=100, seed=7)
    assert len(synthetic_trace(0.99, duration_s=100, seed=1)) == 97


def test_retiming_to_non_finite_arrivals_is_refused() -> None:
    t = load_trace(FIX / "azure_conv_50.csv")
    with pytest.raises(InputError, match="--rate-scale"):
        reshape(t, rate_scale=5e-324)
    with pytest.raises(InputError, match="--qps"):
        reshape(t, qps=5e-324)
    with pytest.raises(InputError, match="--rate-scale"):
        reshape(t, rate_scale=1e-300)
    slow = reshape(t, rate_scale=1e-6)  # a million times slower: still within the limit
    assert slow.arrival_s[-1] == pytest.approx(t.arrival_s[-1] * 1e6)


@pytest.mark.skipif(not CONV.exists(), reason="shared Azure trace not present")
def test_whole_azure_conv_trace() -> None:
    t = load_trace(CONV)
    assert len(t) == 19366 and t.bad_rows == 0
    assert 3400 < t.duration_s < 3600
    assert sum(t.prompt_tokens) / len(t) == pytest.approx(1155, rel=0.01)


@pytest.mark.parametrize(("spec", "fragment"), [
    ("10000001", "1 to 10,000,000 tokens, got 10000001"),
    ("0", "1 to 10,000,000 tokens, got 0"),
    ("uniform:1:1e300", "at most 10,000,000"),
    ("exp:1e308", "at most 10,000,000"),
    ("lognormal:1e308:1", "at most 10,000,000"),
    ("lognormal:1000:100", "SIGMA must be at most 4"),
])
def test_length_specs_are_bounded(spec: str, fragment: str) -> None:
    with pytest.raises(InputError, match=fragment):
        parse_length_spec(spec, "--prompt-tokens")


def test_length_spec_range_ends_are_drawn() -> None:
    import random

    assert parse_length_spec("10000000", "--prompt-tokens")(random.Random(0)) == 10_000_000
    draw = parse_length_spec("lognormal:10000000:4", "--prompt-tokens")
    values = [draw(random.Random(seed)) for seed in range(200)]
    assert all(isinstance(v, int) and v >= 1 for v in values)


def test_qps_so_low_that_arrivals_overflow_is_refused() -> None:
    with pytest.raises(InputError, match="after 1e[+]09 s"):
        synthetic_trace(5e-324, num_requests=5)
    with pytest.raises(InputError, match="after 1e[+]09 s"):
        synthetic_trace(1e-300, num_requests=5)
    slow = synthetic_trace(1e-6, num_requests=3, seed=0)  # days apart, still resolvable
    assert len(slow) == 3 and 0 < slow.arrival_s[-1] <= traces.MAX_ARRIVAL_S


def test_mooncake_rows_with_huge_or_deep_values_are_bad_rows(tmp_path: Path) -> None:
    path = tmp_path / "odd.jsonl"
    path.write_text(
        '{"timestamp": 0, "input_length": 10, "output_length": 5}\n'
        '{"timestamp": ' + "9" * 400 + ', "input_length": 10, "output_length": 5}\n'
        '{"timestamp": 5, "input_length": ' + "9" * 5000 + ', "output_length": 5}\n'
        + "[" * 100_000 + "\n"
        '{"timestamp": 6, "input_length": 200000000, "output_length": 5}\n'
        '{"timestamp": 7, "input_length": 10, "output_length": 5}\n'
    )
    t = load_trace(path)
    assert t.prompt_tokens == (10, 10) and t.bad_rows == 4
    assert [line for line, _ in t.bad_examples] == [2, 3, 4, 5]
    assert "more than 100,000,000 tokens" in dict(t.bad_examples)[5]


def test_stray_quote_is_reported_not_swallowed(tmp_path: Path) -> None:
    lines = (FIX / "azure_conv_50.csv").read_text().splitlines()
    short = tmp_path / "quote.csv"
    short.write_text("\n".join([lines[0], lines[1], '"' + lines[2], *lines[3:20]]) + "\n")
    t = load_trace(short)
    assert len(t.prompt_tokens) == 1 and t.bad_rows == 1
    assert t.bad_examples[0][0] == 3 and "runs from line 3 to line 20" in t.bad_examples[0][1]
    long = tmp_path / "field.csv"
    long.write_text(lines[0] + "\n" + lines[1] + "\n" + '"' + "1" * 140_000 + "\n")
    with pytest.raises(InputError, match=r"line 3: field larger than field limit .* quote at line 3"):
        load_trace(long)


def test_arrivals_spanning_centuries_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "burst.csv"
    path.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                    "0,a,100,10,110,x\n1e20,a,100,10,110,x\n")
    with pytest.raises(InputError, match="arrivals span 1e\\+20 s"):
        load_trace(path)


@pytest.mark.parametrize("stamp, fragment", [
    ("2023-11-16 18:15:50.0Z", "no time-zone suffix such as Z"),
    ("2023-11-16 18:15:50+00:00", "no time-zone suffix"),
    ("2023-11-16 18:15:50.5_5", "UTC digits only"),
    ("2023-11-16 18:15:５0", "UTC digits only"),  # a full-width digit: float() would take it
    ("2023-13-16 18:15:50", "is not a date and time"),
])
def test_azure_timestamp_says_what_the_column_must_hold(tmp_path: Path, stamp: str, fragment: str) -> None:
    """No 'could not convert string to float' from the seconds: the reason names the form."""
    p = tmp_path / "a.csv"
    p.write_text(f"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,10,2\n{stamp},10,2\n",
                 encoding="utf-8")
    t = load_trace(p)
    assert len(t) == 1 and t.bad_rows == 1
    reason = t.bad_examples[0][1]
    assert "YYYY-MM-DD HH:MM:SS[.fraction]" in reason and fragment in reason and "float" not in reason


def test_arrivals_text_says_all_at_once(tmp_path: Path) -> None:
    p = tmp_path / "a.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "2023-11-16 18:15:46.5,10,2\n" * 3)
    assert load_trace(p).arrivals_text() == "all arriving at once"
    assert load_trace(FIX / "azure_conv_50.csv").arrivals_text().startswith("over ")
    assert synthetic_trace(qps=2, duration_s=30, seed=1).arrivals_text().endswith(" req/s)")
    one = tmp_path / "one.csv"
    one.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.5,10,2\n")
    assert load_trace(one).arrivals_text() == "(one request)"


# ---- streaming, gzip, compact columns ----------------------------------------------------------------------


@pytest.mark.parametrize("name",
                         ["azure_conv_50.csv", "mooncake_small.jsonl", "burstgpt_small.csv",
                          "azure_bad_rows.csv"])
def test_gzip_traces_read_as_their_text(tmp_path: Path, name: str) -> None:
    """Azure and BurstGPT publish gzip files: read by their first two bytes, whatever the name, with the same
    requests and the same bad-row accounting."""
    import gzip

    plain = load_trace(FIX / name)
    for packed in (tmp_path / (name + ".gz"), tmp_path / name):
        packed.write_bytes(gzip.compress((FIX / name).read_bytes()))
        t = load_trace(packed)
        assert (t.arrival_s, t.prompt_tokens, t.output_tokens, t.hash_ids) == (
            plain.arrival_s, plain.prompt_tokens, plain.output_tokens, plain.hash_ids)
        assert (t.bad_rows, t.bad_examples, t.failed_rows, t.format) == (
            plain.bad_rows, plain.bad_examples, plain.failed_rows, plain.format)


def test_broken_gzip_is_one_line(tmp_path: Path) -> None:
    import gzip

    whole = gzip.compress((FIX / "azure_conv_50.csv").read_bytes())
    cut = tmp_path / "cut.csv.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(InputError, match="cut.csv.gz: a broken gzip file"):
        load_trace(cut)
    junk = tmp_path / "junk.csv.gz"
    junk.write_bytes(b"\x1f\x8b" + b"\x00" * 40)
    with pytest.raises(InputError, match="junk.csv.gz"):
        load_trace(junk)


def _bomb(path: Path, head: bytes, chunk: bytes, count: int) -> Path:
    """A gzip file of ``head`` then ``chunk`` ``count`` times (multi-member, as a bomb is: tiny as stored)."""
    import gzip

    member = gzip.compress(chunk * 4096, mtime=0)
    path.write_bytes(gzip.compress(head, mtime=0) + member * max(1, count // 4096))
    return path


@pytest.mark.parametrize(("head", "chunk", "message"), [
    (b"", b"x", "unknown trace format (first line 'xxxx"),
    (b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.0,", b"9",
     "line 2 is longer than 4,096 characters"),
    (b'{"timestamp": 0, "input_length": 5, "output_length": 5, "x": "', b"a",
     "line 1 is longer than 4,096 characters"),
    (b"", b"\n", "its first 64 KiB are blank lines"),
    (b"TIMESTAMP,ContextTokens,GeneratedTokens\n", b"\n",
     "more than 1,000 blank lines in a row (from line 2)"),
    (b"TIMESTAMP,ContextTokens,GeneratedTokens\n", b"x\n", "1,000 bad rows and 0 valid request(s) by line"),
    (b'{"timestamp": 0, "input_length": 5, "output_length": 5}\n', b"{}\n",
     "1,000 bad rows and 1 valid request(s) by line 1,001"),
])
def test_gzip_bombs_are_refused_early(tmp_path: Path, monkeypatch, head: bytes, chunk: bytes,
                                      message: str) -> None:
    """Issue 34: a few KB of gzip that expand to one endless line, or to millions of blank or bad lines, are
    refused with one line before they fill memory or take minutes (here with the bounds made small; the
    sweep's bombs are 4 GiB)."""
    monkeypatch.setattr(traces, "MAX_LINE_CHARS", 4096)
    monkeypatch.setattr(traces, "MAX_JUNK_LINES", 1000)
    path = _bomb(tmp_path / "bomb.gz", head, chunk, 200_000)
    with pytest.raises(InputError, match=re.escape(message)) as caught:
        load_trace(path)
    assert caught.value.param in ("trace", "format") and "bomb.gz" in str(caught.value)


def test_trace_line_cap_counts_blank_and_bad_lines(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(traces, "MAX_TRACE_LINES", 50)
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"] + ["2023-11-16 18:15:46.0,10,5", ""] * 30
    path = tmp_path / "t.csv"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match="more than 50 lines, the most one trace file may have"):
        load_trace(path)
    path.write_text("\n".join(lines[:50]) + "\n")
    assert len(load_trace(path).arrival_s) == 25


def test_traces_are_compact_columns_equal_to_tuples() -> None:
    """Per request 8 bytes of arrival, prompt and output each (float64, int64); slices, equality with tuples,
    pickling (to a worker) kept."""
    import pickle

    from pdmux_cli.simulate.columns import Column, Ragged

    t = load_trace(FIX / "mooncake_small.jsonl")
    assert isinstance(t.arrival_s, Column) and t.arrival_s.typecode == "d" and t.prompt_tokens.itemsize == 8
    assert isinstance(t.hash_ids, Ragged) and t.hash_ids[0] == tuple(range(14)) and t.hash_ids[-1] == ()
    assert t.prompt_tokens[1:3] == (6402, 6766) and isinstance(t.prompt_tokens[1:3], Column)
    assert t.prompt_tokens != (1, 2) and t.prompt_tokens == list(t.prompt_tokens)
    back = pickle.loads(pickle.dumps(t))
    assert back == t and isinstance(back.prompt_tokens, Column) and back.hash_ids == t.hash_ids
    assert len(pickle.dumps(synthetic_trace(5, num_requests=10_000))) < 10_000 * 24 + 2000
    ragged = Ragged([(1, 2), (), (3,)])
    assert ragged == ((1, 2), (), (3,)) and ragged[1:] == ((), (3,))
    assert Ragged() == () and not Ragged().any_values()
    with pytest.raises(OverflowError):
        ragged.append((1 << 70,))
    assert ragged == ((1, 2), (), (3,))  # unchanged


def test_hash_ids_past_64_bits_make_a_bad_row(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [7, 8]}\n'
                    f'{{"timestamp": 1, "input_length": 600, "output_length": 5, '
                    f'"hash_ids": [7, {1 << 70}]}}\n')
    t = load_trace(path)
    assert len(t) == 1 and t.bad_rows == 1 and "64-bit" in t.bad_examples[0][1]


def test_a_trace_past_the_request_limit_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(traces, "MAX_REQUESTS", 20)
    with pytest.raises(InputError, match="more than 20 requests, the most one trace may have"):
        load_trace(FIX / "azure_conv_50.csv")


@pytest.mark.parametrize("prompt, output", [
    ("1", "1"), ("812", "99"), ("000012", "7"), (str(traces.MAX_REQUEST_TOKENS), "3"),
    (str(traces.MAX_REQUEST_TOKENS + 1), "3"), ("5", str(traces.MAX_REQUEST_TOKENS + 1)), ("0", "5"),
    ("5", "0"), (" 12 ", "4"), ("12", "4\t"), ("+5", "3"), ("-5", "3"), ("5.0", "3"), ("5.5", "3"),
    ("1e3", "3"), ("1_000", "3"), ("\u0661\u0662", "3"), ("\uff11\uff12", "3"), ("\u00b2", "3"), ("", "3"),
    ("1234567890123", "3"), ("123456789012", "3"), ("nan", "3"), (5, 3), (5.0, "3"), (True, "3"),
])
def test_plain_digit_rows_take_the_checks_of_every_row(prompt, output) -> None:
    """A row of plain ASCII digits is taken without the general checks (:meth:`traces._Rows.add`'s first
    branch): the same request, or the same rejection, as the checks give (they run for any row with
    hash ids, here an empty list, which adds none)."""
    fast, checked = traces._Rows("t"), traces._Rows("t")
    for time_s in (0.5, float("inf")):
        fast.add(7, time_s, prompt, output)
        checked.add(7, time_s, prompt, output, hashes=[])
    assert (list(fast.times), list(fast.prompts), list(fast.outputs)) == (
        list(checked.times), list(checked.prompts), list(checked.outputs))
    assert list(fast.hashes) == list(checked.hashes)
    assert (fast.bad, fast.examples, fast.failed) == (checked.bad, checked.examples, checked.failed)
