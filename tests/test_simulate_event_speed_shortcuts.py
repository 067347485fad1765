"""Event speed (issue 31): the shortcuts taken at events give the numbers of the code they replace, to the
bit: ``new_token_ratio``'s decays over a run looked up on a tabulated chain
(:meth:`pdmux_cli.simulate.engine.Work.decay_ratio_steps`), tune's layers a round for many prefills at
once (:func:`pdmux_cli.simulate.schedulers._layers_per_round`), the roofline's prefill attention per
sequence kept (:meth:`pdmux_cli.costmodel.roofline.RooflineModel.prefill_s`). Whole runs against the
step loop are in tests/test_simulate_event_speed.py; speed is measured by benchmarks, never here."""

from __future__ import annotations

import random

import pytest

from pdmux_cli.catalog.hardware import find_gpu
from pdmux_cli.catalog.model import load_model
from pdmux_cli.sglang import split_levels
from pdmux_cli.simulate import engine
from pdmux_cli.simulate.engine import Work, make_setup
from pdmux_cli.simulate.schedulers import _layers_per_round
from pdmux_cli.util.errors import InputError


class _Ratio:
    """The part of :class:`Work` that keeps ``new_token_ratio``."""

    decay_ratio = Work.decay_ratio
    decay_ratio_steps = Work.decay_ratio_steps

    def __init__(self, ratio: float, floor: float, decay: float) -> None:
        self.ratio, self.ratio_floor, self.ratio_decay = ratio, floor, decay


# SGLang 0.5.23: 0.7 down to 0.7 x 0.14 by (0.7 - 0.098) / 600 a step (release_defaults); the 0.3.4 rule:
# floor 0.1, decay 0.001
RELEASES = [(0.7, 0.7 * 0.14, (0.7 - 0.7 * 0.14) / 600), (0.7, 0.1, 0.001)]


@pytest.mark.parametrize(("init", "floor", "decay"), RELEASES)
def test_ratio_decays_over_a_run_are_the_steps_one_by_one(init, floor, decay):
    rng = random.Random(31)
    starts = [init, floor, floor + decay / 3, 1.0] + [rng.uniform(floor, 1.0) for _ in range(40)]
    for start in starts:
        for steps in (1, 2, 5, 17, 100, 599, 600, 601, 602, 5000):
            fast, slow = _Ratio(start, floor, decay), _Ratio(start, floor, decay)
            fast.decay_ratio_steps(steps)
            for _ in range(steps):
                slow.decay_ratio()
            assert fast.ratio == slow.ratio, (start, steps)
    # along the chain from the initial ratio, run after run, as a simulation goes
    fast, slow = _Ratio(init, floor, decay), _Ratio(init, floor, decay)
    for steps in [3, 40, 1, 250, 7, 400, 9]:
        fast.decay_ratio_steps(steps)
        for _ in range(steps):
            slow.decay_ratio()
        assert fast.ratio == slow.ratio
    assert fast.ratio == floor


def test_ratio_decay_too_slow_to_tabulate_goes_one_by_one():
    assert engine.ratio_chain(0.7, 0.1, 1e-9, 10) is None  # 6e8 steps: past MAX_RATIO_CHAIN
    assert engine.ratio_chain(0.7, 0.1, 0.0, 10) is None
    r = _Ratio(0.7, 0.1, 1e-9)
    r.decay_ratio_steps(3)
    assert r.ratio == 0.7 - 1e-9 - 1e-9 - 1e-9
    r = _Ratio(0.05, 0.1, 0.001)  # below the floor: unchanged
    r.decay_ratio_steps(10)
    assert r.ratio == 0.05


def test_layers_per_round_at_many_prefills_is_split_levels_one_at_a_time():
    rng = random.Random(32)
    for _ in range(200):
        layers = rng.randint(1, 100)
        budget = rng.choice([1, 7, 512, 4096, 65536, 10**6])
        cap = rng.choice([0, 0, 1, 3, 50])
        tokens = [rng.choice([0, 1, rng.randint(0, 200_000), budget, budget + 1, max(0, budget - 1)])
                  for _ in range(30)]
        expected = [split_levels.prefill_layers_per_round(t, layers, budget, cap) for t in tokens]
        got = _layers_per_round(tokens, layers, budget, cap)
        assert got == expected
        assert all(type(x) is int for x in got)
    assert _layers_per_round([512, 8192, 32768, 131072], 36, 65536, 0) == [36, 8, 2, 1]  # the chapter's
    assert _layers_per_round([], 36, 65536, 0) == []
    with pytest.raises(InputError):
        _layers_per_round([4096, -1], 36, 65536, 0)
    with pytest.raises(InputError):
        _layers_per_round([4096], 36, 0, 0)


def test_prefill_attention_kept_per_sequence_is_the_same_float():
    def fresh():
        return make_setup(find_gpu("h100"), load_model("qwen3-8b")).step_model

    model = fresh()
    rng = random.Random(33)
    batches = [[(rng.randint(1, 9000), rng.choice([0, 0, rng.randint(0, 30_000)]))
                for _ in range(rng.randint(1, 6))] for _ in range(60)]
    batches += batches[:20]  # met again: answered from the kept terms
    total = model.total_sms
    for seqs in batches:
        for sms, corun in ((total, 0), (total - 36, 36)):
            assert model.prefill_s(sms, seqs, corun) == fresh().prefill_s(sms, seqs, corun)
            assert model.mixed_s(seqs, 8, 8 * 3000) == fresh().mixed_s(seqs, 8, 8 * 3000)
    # a float token count is never answered from, nor kept as, a whole-token term
    assert model.prefill_s(total, [(4096.0, 0.0)]) == fresh().prefill_s(total, [(4096.0, 0.0)])
    assert model.prefill_s(total, [(4096, 0)]) == fresh().prefill_s(total, [(4096, 0)])
