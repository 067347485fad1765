"""SGLang's split, level and layer rules: the chapter's outputs as literals, plus properties."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdmux_cli.messages import render
from pdmux_cli.sglang import split_levels
from pdmux_cli.sglang.split_levels import Split
from pdmux_cli.util.errors import InputError

H100 = [(132, 0), (112, 20), (104, 28), (96, 36), (88, 44), (80, 52), (72, 60), (0, 132)]
A100 = [(108, 0), (84, 24), (78, 30), (72, 36), (66, 42), (60, 48), (54, 54), (0, 108)]
H20 = [(78, 0), (56, 22), (48, 30), (40, 38), (0, 78)]


@pytest.mark.parametrize("sms,major,expected", [(132, 9, H100), (108, 8, A100), (78, 9, H20)])
def test_chapter_stream_groups(sms: int, major: int, expected: list) -> None:
    assert split_levels.stream_groups(sms, major) == expected


@pytest.mark.parametrize(
    "decode_bs,group", [(1, 1), (6, 1), (12, 2), (18, 3), (24, 4), (30, 5), (36, 6), (64, 6)]
)
def test_chapter_level_choice_h100(decode_bs: int, group: int) -> None:
    groups = split_levels.stream_groups(132, 9)
    assert split_levels.choose_group(len(groups), decode_bs, has_prefill=True) == group


def test_chapter_32_requests_choose_80_52() -> None:
    groups = split_levels.stream_groups(132, 9)
    assert groups[split_levels.choose_group(len(groups), 32, True)] == (80, 52)


def test_one_phase_uses_whole_gpu() -> None:
    groups = split_levels.stream_groups(132, 9)
    assert groups[split_levels.choose_group(len(groups), 32, has_prefill=False)] == (0, 132)
    assert groups[split_levels.choose_group(len(groups), 0, has_prefill=True)] == (132, 0)
    assert split_levels.choose_group(len(groups), 0, has_prefill=False) == 0


@pytest.mark.parametrize("tokens,layers", [(512, 36), (8192, 8), (32768, 2), (131072, 1)])
def test_chapter_layers_per_round(tokens: int, layers: int) -> None:
    assert split_levels.prefill_layers_per_round(tokens, 36) == layers


def test_rounds_and_zero_tokens() -> None:
    assert split_levels.prefill_rounds(8192, 36) == 5  # 8 + 8 + 8 + 8 + 4 layers
    assert split_levels.prefill_rounds(131072, 36) == 36
    assert split_levels.prefill_layers_per_round(0, 36) == 36


def test_max_split_forward_layers_rounds() -> None:
    """sgl-project/sglang a64f33f0 test/manual/pdmux/layerwise_prefill_runbook.md: "With 40 layers and
    concurrent decode, [1024-token chunks capped at two layers per slice] makes 20 slices; without the cap,
    the same 1024-token chunk fits in the 65536 budget and runs in one slice" (multiplexing_mixin.py
    _get_split_forward_count: min(max(1, budget // tokens), cap, remaining))."""
    assert split_levels.prefill_layers_per_round(1024, 40, 65536) == 40
    assert split_levels.prefill_rounds(1024, 40, 65536) == 1
    assert split_levels.prefill_layers_per_round(1024, 40, 65536, max_layers=2) == 2
    assert split_levels.prefill_rounds(1024, 40, 65536, max_layers=2) == 20
    # a cap above what the budget gives changes nothing: the chapter's 8192 tokens -> 8 layers a round
    assert split_levels.prefill_layers_per_round(8192, 36, max_layers=16) == 8
    assert split_levels.prefill_rounds(8192, 36, max_layers=3) == 12
    # no prefill tokens: all layers, uncapped
    assert split_levels.prefill_layers_per_round(0, 36, max_layers=2) == 36
    for bad in (-1, True, 1.5):
        with pytest.raises(InputError, match="max_split_forward_layers"):
            split_levels.prefill_layers_per_round(1024, 40, 65536, max_layers=bad)


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=1, max_value=1 << 20), st.integers(min_value=1, max_value=128),
       st.integers(min_value=1, max_value=1 << 20), st.integers(min_value=0, max_value=200))
def test_layer_cap_only_shortens_rounds(tokens: int, layers: int, budget: int, cap: int) -> None:
    free = split_levels.prefill_layers_per_round(tokens, layers, budget)
    capped = split_levels.prefill_layers_per_round(tokens, layers, budget, cap)
    assert capped == (min(free, cap) if cap else free)
    assert split_levels.prefill_rounds(tokens, layers, budget, cap) == -(-layers // capped)


def test_exercise_divisor_24_gives_last_level_at_24() -> None:
    groups = split_levels.stream_groups(132, 9)
    assert split_levels.choose_group(len(groups), 24, True, decode_bs_divisor=24) == 6
    assert split_levels.choose_group(len(groups), 23, True, decode_bs_divisor=24) == 5


def test_manual_thresholds_last_match_wins_and_newer_fallback() -> None:
    thresholds = [1, 5, 10, 15, 20, 25]  # SGLang docs' H200 example
    assert split_levels.choose_group(8, 1, True, thresholds=thresholds) == 1
    assert split_levels.choose_group(8, 9, True, thresholds=thresholds) == 2
    assert split_levels.choose_group(8, 10, True, thresholds=thresholds) == 3
    assert split_levels.choose_group(8, 400, True, thresholds=thresholds) == 6
    # No threshold <= 3: newer SGLang falls back to group 1, older main dies.
    assert split_levels.choose_group(8, 3, True, thresholds=[4, 8]) == 1
    assert split_levels.older_sglang_crashes([4, 8], 3)
    assert not split_levels.older_sglang_crashes([1, 8], 3)
    assert not split_levels.older_sglang_crashes([4, 8], 3, has_prefill=False)


@pytest.mark.parametrize("sms", [20, 24, 16, 31])
def test_no_valid_partition_on_hopper_raises_like_sglang(sms: int) -> None:
    with pytest.raises(InputError, match="No valid partitions"):
        split_levels.stream_groups(sms, 9)


@pytest.mark.parametrize("cc", [(10, 0), (12, 0), (5, 2), (11, 0)])
def test_unsupported_capability_raises_like_sglang(cc: tuple[int, int]) -> None:
    with pytest.raises(InputError, match=f"Unsupported compute capability: {cc[0]}.{cc[1]}"):
        split_levels.stream_groups(148, cc[0], minor=cc[1])


def test_blackwell_plan_uses_cuda_granularity() -> None:
    plan = split_levels.plan_groups(148, (10, 0))
    assert plan.source == "cuda-granularity"
    assert plan.groups == [(148, 0), (120, 28), (112, 36), (104, 44), (96, 52), (88, 60), (80, 68), (0, 148)]
    assert "manual_divisions" in render(plan.note)


def test_manual_plan() -> None:
    plan = split_levels.plan_groups(132, (9, 0), manual_divisions=[[112, 20, 0], [96, 36, 10]])
    assert plan.groups == [(132, 0), (112, 20), (96, 36), (0, 132)]
    assert plan.thresholds == [0, 10]
    assert plan.source == "manual"


@pytest.mark.parametrize("bad", [2, 1, 0, -3])
def test_sm_group_num_below_3_refused(bad: int) -> None:
    with pytest.raises(InputError):
        split_levels.stream_groups(132, 9, sm_group_num=bad)


def test_fewer_levels_when_few_candidates() -> None:
    # sm_group_num 3 -> one level: the first candidate (smallest prefill share).
    assert split_levels.stream_groups(132, 9, sm_group_num=3) == [(132, 0), (72, 60), (0, 132)]
    # 64 SMs on Hopper: only 32 and 40 and 48 qualify -> 3 levels even when 6 asked.
    assert split_levels.stream_groups(64, 9) == [(64, 0), (48, 16), (40, 24), (32, 32), (0, 64)]


def test_known_capabilities_only() -> None:
    """--cc takes the capabilities NVIDIA GPUs with green contexts have; 99.0 would get Blackwell's
    rules silently."""
    for cc in split_levels.KNOWN_COMPUTE_CAPABILITIES:
        assert split_levels.check_known_capability(cc) == cc
    assert split_levels.check_known_capability((5, 2)) == (5, 2)  # refused later: no green contexts
    for cc in ((99, 0), (9, 5), (13, 0), (6, 5)):
        with pytest.raises(InputError, match=r"pdmux knows 6\.0, 6\.1, .* 12\.1"):
            split_levels.check_known_capability(cc)


def test_parse_compute_capability() -> None:
    assert split_levels.parse_compute_capability("9.0") == (9, 0)
    assert split_levels.parse_compute_capability("10.3") == (10, 3)
    assert split_levels.parse_compute_capability("8") == (8, 0)
    for bad in ("nine", "9.0.1", "", "-1.0", "9.x"):
        with pytest.raises(InputError):
            split_levels.parse_compute_capability(bad)


# ---- properties over SM counts 16..256 and capabilities 6..12 ----------------------------------

sm_counts = st.integers(min_value=16, max_value=256)
majors = st.integers(min_value=6, max_value=12)
group_nums = st.integers(min_value=3, max_value=16)


def _reference_candidates(total: int, major: int) -> list[int]:
    """An independent restatement of the candidate rule (granularity, half, decode >= 16)."""
    minimum, multiple = {6: (1, 1), 7: (2, 2), 8: (4, 2)}.get(major, (8, 8))
    return [x for x in range(1, total) if x >= minimum and total - x >= minimum
            and (x - minimum) % multiple == 0
            and 2 * x >= total and total - x >= 16]


@settings(max_examples=400, deadline=None)
@given(sm_counts, majors, group_nums)
def test_levels_respect_constraints(total: int, major: int, group_num: int) -> None:
    cands = _reference_candidates(total, major)
    if major > 9:
        with pytest.raises(InputError, match="Unsupported compute capability"):
            split_levels.stream_groups(total, major, group_num)
        make = lambda: split_levels.plan_groups(total, (major, 0), group_num).groups
    else:
        make = lambda: split_levels.stream_groups(total, major, group_num)
    if not cands:
        with pytest.raises(InputError, match="No valid partitions"):
            make()
        return
    groups = make()
    assert groups[0] == Split(total, 0) and groups[-1] == Split(0, total)
    levels = groups[1:-1]
    assert 1 <= len(levels) <= group_num - 2
    assert len(levels) == min(len(cands), group_num - 2)
    assert all(p + d == total and p >= d >= 16 and p in cands for p, d in levels)
    prefills = [p for p, _ in levels]
    assert prefills == sorted(prefills, reverse=True) and len(set(prefills)) == len(prefills)
    assert prefills[-1] == cands[0]  # the smallest candidate is always the last level
    if len(cands) < group_num - 2:
        assert sorted(prefills) == cands


@settings(max_examples=200, deadline=None)
@given(sm_counts.filter(lambda s: s >= 48), st.sampled_from([7, 8, 9]), group_nums,
       st.integers(min_value=1, max_value=128))
def test_choice_monotone_and_in_range(total: int, major: int, group_num: int, divisor: int) -> None:
    groups = split_levels.stream_groups(total, major, group_num)
    n = len(groups)
    picks = [split_levels.choose_group(n, bs, True, divisor) for bs in range(1, 300)]
    assert all(1 <= k <= n - 2 for k in picks)
    assert picks == sorted(picks)
    decode_sms = [groups[k].decode_sms for k in picks]
    assert decode_sms == sorted(decode_sms)  # more decode requests never get fewer decode SMs


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=1, max_value=1 << 20), st.integers(min_value=1, max_value=128),
       st.integers(min_value=1, max_value=1 << 20))
def test_layers_per_round_bounds(tokens: int, layers: int, budget: int) -> None:
    n = split_levels.prefill_layers_per_round(tokens, layers, budget)
    assert 1 <= n <= layers
    assert n == min(layers, max(1, budget // tokens))
    assert split_levels.prefill_layers_per_round(tokens * 2, layers, budget) <= n
    assert split_levels.prefill_rounds(tokens, layers, budget) * n >= layers


def test_unused_groups_and_the_count_that_gives_the_same_levels() -> None:
    """levels.fewer_groups where SGLang's automatic rule finds fewer levels than sm_group_num asks for; its
    remedy (sm_group_num = the groups found) gives the same stream groups, on every GPU profile SGLang
    splits itself."""
    from pdmux_cli.catalog.hardware import load_gpus

    seen = 0
    for g in load_gpus():
        if g.sm_count is None or g.compute_capability[0] not in (8, 9):
            continue
        for asked in range(3, 24):
            plan = split_levels.plan_groups(g.sm_count, g.compute_capability, asked)
            finding = split_levels.unused_groups(plan, asked)
            if len(plan.groups) == asked:
                assert finding is None
                continue
            seen += 1
            assert len(plan.groups) < asked
            assert (finding.code, finding.param) == ("levels.fewer_groups", "sm_group_num")
            assert finding.values == {"asked": asked, "groups": len(plan.groups),
                                      "levels": len(plan.groups) - 2}
            same = split_levels.plan_groups(g.sm_count, g.compute_capability, len(plan.groups))
            assert same.groups == plan.groups and split_levels.unused_groups(same, len(plan.groups)) is None
    assert seen > 0
    # the H20's 78 SMs: the default 8 gives 5 groups
    h20 = split_levels.plan_groups(78, (9, 0), 8)
    assert [(s.prefill_sms, s.decode_sms) for s in h20.groups] == [(78, 0), (56, 22), (48, 30), (40, 38),
                                                                    (0, 78)]
    assert split_levels.unused_groups(h20, 8).values == {"asked": 8, "groups": 5, "levels": 3}
    # manual_divisions: as many groups as written
    manual = split_levels.plan_groups(132, (9, 0), 4, [(112, 20, 4), (96, 36, 16)])
    assert split_levels.unused_groups(manual, 4) is None
