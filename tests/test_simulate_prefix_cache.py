"""The prefix cache (SGLang's radix cache over a trace's hash_ids): the tree alone (match, split, lock,
insert, release, LRU eviction, hand-computed), its effect on prefill time and admission in every policy,
and the bookkeeping invariants checked after every step of random runs."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdmux_cli.catalog.hardware import find_gpu
from pdmux_cli.catalog.model import load_model
from pdmux_cli.costmodel import chapter as cost
from pdmux_cli.sglang import server_defaults as sgl
from pdmux_cli.simulate import engine
from pdmux_cli.simulate.engine import build_work, make_setup
from pdmux_cli.simulate.metrics import summarize
from pdmux_cli.simulate.prefix_cache import ROOT, PrefixCache, block_keys
from pdmux_cli.simulate.runner import simulate
from pdmux_cli.simulate.schedulers import ChunkedPolicy, MixedChunkPolicy, PdmuxPolicy, PrefillFirstPolicy
from pdmux_cli.simulate.servers import drive
from pdmux_cli.simulate.traces import HASH_BLOCK_TOKENS, Trace
from pdmux_cli.util.errors import InputError

H100 = find_gpu("h100")
QWEN = load_model("qwen3-8b")
CHAPTER = make_setup(H100, QWEN, cost_model="chapter", s_sat=66)  # no CPU time: prefill time is exact
THR = CHAPTER.step_model.throughput
SETUP = make_setup(H100, QWEN)
POLICIES = [PdmuxPolicy(), ChunkedPolicy(8192), ChunkedPolicy(512), MixedChunkPolicy(512),
            PrefillFirstPolicy()]
B = HASH_BLOCK_TOKENS


def _prefill(new: int, cached: int) -> float:
    """The chapter model's prefill time of one sequence on the whole H100 (s)."""
    return cost.prefill_flops(QWEN, new, cached) / THR.flops_per_s(132)


# ---- the tree alone -------------------------------------------------------------------------------------


def test_block_keys_pair_a_short_last_block_with_its_tokens() -> None:
    assert B == 512  # Mooncake FAST'25 traces
    assert block_keys([7, 8, 9], 1300) == (7, 8, (9, 276))
    assert block_keys([7, 8], 1024) == (7, 8)
    assert block_keys([7, 8, 9, 10], 1024) == (7, 8)  # ids past the prompt dropped
    assert block_keys([7], 1300) == (7,)  # fewer ids than blocks: the rest is not hashed
    assert block_keys([], 100) == ()


def test_insert_match_split_lock_release_and_lru_eviction() -> None:
    c = PrefixCache()
    assert c.match((1, 2, 3)) == (ROOT, 0)
    a = c.extend(ROOT, (1, 2, 3), 3, owner=0)  # request 0 prefilled 1536 tokens
    assert (c.cum[a], c.lock[a], c.evictable, c.shared) == (1536, 1, 0, 0)
    # request 1 shares two blocks: the match splits request 0's node and finds them locked
    up, unlocked = c.match((1, 2, 9))
    assert (c.cum[up], unlocked, c.parent[a], c.tokens[a], c.lock[up]) == (1024, 0, up, 512, 1)
    c.lock_path(up)
    assert (c.lock[up], c.shared) == (2, 1024)  # held once, counted by both contexts
    b = c.extend(up, (1, 2, 9, 10), 4, owner=1)
    assert c.cum[b] == 2048 and c.kids[up] == 2
    # request 0 finishes with 100 output tokens: its own block and outputs become evictable
    c.release(a, 100)
    assert (c.evictable, c.shared, c.lock[up]) == (612, 0, 1)
    # request 1 finishes: everything is evictable; request 0's leaf is the least recently used
    c.release(b, 0)
    assert c.evictable == 612 + 1024 + 1024 and c.cached_tokens() == c.evictable
    c.evict(c.evictable - 1)  # one token's room: request 0's output leaf goes (whole)
    assert c.evicted_tokens == 100 and c.evictable == 2560
    c.evict(2048)  # then its block: request 1's path stays
    assert c.evicted_tokens == 612 and c.match((1, 2, 3))[0] == up
    # a match refreshes request 1's prefix: a later prompt's leaf is now older
    d = c.extend(ROOT, (50,), 1, owner=2)
    c.release(d, 0)
    c.match((1, 2, 9, 10))
    c.evict(c.evictable - 1)
    assert c.evicted_tokens == 612 + 512 and c.match((50,)) == (ROOT, 0)
    c.evict(0)  # a parent goes after its last child
    assert c.evictable == 0 and c.cached_tokens() == 0 and c.match((1,)) == (ROOT, 0)


def test_a_short_last_block_matches_only_a_block_as_short() -> None:
    c = PrefixCache()
    node = c.extend(ROOT, block_keys([5, 6, 7], 1300), 3, owner=0)
    c.release(node, 0)
    assert c.cum[c.match(block_keys([5, 6, 7], 1536))[0]] == 1024  # full third block: no match
    assert c.cum[c.match(block_keys([5, 6, 7], 1300))[0]] == 1300


def test_chunks_grow_the_requests_own_node_and_stay_matchable() -> None:
    c = PrefixCache()
    keys = tuple(range(10))
    n = c.extend(ROOT, keys, 2, owner=3)
    assert c.extend(n, keys, 6, owner=3) == n and c.cum[n] == 6 * B  # grown in place
    other, unlocked = c.match(keys[:4] + (99,))  # another request's match splits it
    assert c.cum[other] == 4 * B and unlocked == 0
    c.lock_path(other)
    assert c.parent[n] == other and c.shared == 4 * B
    assert c.extend(n, keys, 10, owner=3) == n and c.cum[n] == 10 * B  # the lower part is still its own
    c.unlock_path(other)
    c.release(n, 0)
    # request 4 continues 7 of its blocks differently: it never grows request 3's node
    mine = keys[:7] + (77, 78)
    u, unlocked = c.match(mine)
    assert c.cum[u] == 7 * B and unlocked == 7 * B and c.owner[u] == 3
    c.lock_path(u)
    m = c.extend(u, mine, 9, owner=4)
    assert m != u and c.parent[m] == u and c.cum[m] == 9 * B and c.owner[m] == 4


# ---- prefill time and admission -------------------------------------------------------------------------


def _two(prompt_1: int, hashes_1: tuple[int, ...], output: int = 2) -> Trace:
    """Request 0 (2048 tokens, blocks 1-4) at 0 s; request 1 at 10 s, after request 0 finished."""
    return Trace(arrival_s=(0.0, 10.0), prompt_tokens=(2048, prompt_1), output_tokens=(output, output),
                 hash_ids=((1, 2, 3, 4), hashes_1))


@pytest.mark.parametrize("pol", POLICIES, ids=lambda p: p.label)
def test_cached_prefix_skips_its_prefill_compute_in_every_policy(pol) -> None:
    r = simulate(_two(2560, (1, 2, 3, 4, 5)), CHAPTER, pol)
    chunks = pol.chunk_tokens == 512
    if chunks:  # request 0 in four chunks; request 1's 512 new tokens in one, after the cached 2048
        assert r.counters["prefill_batches"] == 4 + 1
    assert r.first_token_s[1] - 10.0 == pytest.approx(_prefill(512, 2048), rel=1e-12)
    assert r.first_token_s[0] == pytest.approx(
        sum(_prefill(512, s) for s in range(0, 2048, 512)) if chunks else _prefill(2048, 0), rel=1e-12)
    m = summarize(r, 1e9, 1e9)
    assert m.prefix_cache_hit_rate == pytest.approx(2048 / (2048 + 2560))
    assert r.counters["prefix_cache_hit_tokens"] == 2048 and r.counters["prefix_cache_prompt_tokens"] == 4608
    # the same prompt again: all but its last token cached (SGLang keeps one to compute its logits)
    same = simulate(_two(2048, (1, 2, 3, 4)), CHAPTER, pol)
    assert same.first_token_s[1] - 10.0 == pytest.approx(_prefill(1, 2047), rel=1e-12)
    # off: both prefills in full, as for a trace without hashes
    off = simulate(_two(2560, (1, 2, 3, 4, 5)), replace(CHAPTER, prefix_cache=False), pol)
    bare = simulate(replace(_two(2560, (1, 2, 3, 4, 5)), hash_ids=()), CHAPTER, pol)
    assert off.first_token_s == bare.first_token_s and off.step_end_s == bare.step_end_s
    assert off.first_token_s[1] - 10.0 > 4 * (r.first_token_s[1] - 10.0)
    assert summarize(off, 1e9, 1e9).prefix_cache_hit_rate is None


def test_different_prompts_share_nothing() -> None:
    r = simulate(_two(2560, (9, 2, 3, 4, 5)), CHAPTER, PrefillFirstPolicy())
    assert r.first_token_s[1] - 10.0 == pytest.approx(_prefill(2560, 0), rel=1e-12)
    assert summarize(r, 1e9, 1e9).prefix_cache_hit_rate == 0.0


def _small_pool(setup, tokens: int):
    usable = H100.memory_bytes - sgl.CONTEXT_RESERVE_BYTES
    fraction = (setup.weight_bytes + tokens * setup.kv_bytes_per_token) / usable
    return replace(setup, mem_fraction_static=round(fraction, 6))


@pytest.mark.parametrize("pol",
                         [PdmuxPolicy(), ChunkedPolicy(8192), MixedChunkPolicy(512), PrefillFirstPolicy()],
                         ids=lambda p: p.label)
def test_admission_charges_only_what_the_prefix_does_not_cover(pol) -> None:
    """A 4096-token request decodes 3000 tokens in a pool of ~9000; a 5120-token request sharing its
    4096 prompt tokens arrives. Admission needs extend + 3 + 1 < free - 0.7 x ~2900 reserved: 5124
    does not fit (it waits for the first to finish), the 1028 uncached tokens do (and the shared
    blocks, locked by the running request, are held once)."""
    small = _small_pool(SETUP, 9000)
    trace = Trace(arrival_s=(0.0, 0.5), prompt_tokens=(4096, 5120), output_tokens=(3000, 3),
                  hash_ids=(tuple(range(8)), tuple(range(10))))
    on = simulate(trace, small, pol)
    off = simulate(trace, replace(small, prefix_cache=False), pol)
    assert off.first_token_s[1] >= off.finish_s(0)
    assert on.first_token_s[1] < 1.0 < on.finish_s(0)
    assert on.counters["retracted_requests"] == off.counters["retracted_requests"] == 0


def test_cached_tokens_are_evicted_when_decode_needs_their_room() -> None:
    """A finished 6144-token prompt stays cached (evictable) in a pool of ~9000; a request decoding
    7000 tokens then needs its room: the cache gives it up (least recently used first) and the prompt
    no longer hits; without that decode it still does, 400 s later."""
    small = _small_pool(SETUP, 9000)
    trace = Trace(arrival_s=(0.0, 1.0, 400.0), prompt_tokens=(6144, 1000, 6144), output_tokens=(2, 7000, 2),
                  hash_ids=(tuple(range(12)), (100, 101), tuple(range(12))))
    r = simulate(trace, small, ChunkedPolicy(8192))
    assert r.counters["retracted_requests"] == 0 and r.counters["prefix_cache_evicted_tokens"] >= 6144
    assert r.counters["prefix_cache_hit_tokens"] == 0
    alone = Trace(arrival_s=(0.0, 400.0), prompt_tokens=(6144, 6144), output_tokens=(2, 2),
                  hash_ids=(tuple(range(12)), tuple(range(12))))
    assert simulate(alone, small, ChunkedPolicy(8192)).counters["prefix_cache_hit_tokens"] == 6143


def test_trace_hash_ids_must_match_the_requests() -> None:
    with pytest.raises(InputError, match="hash_ids for 1"):
        Trace(arrival_s=(0.0, 1.0), prompt_tokens=(10, 10), output_tokens=(2, 2), hash_ids=((1,),))


# ---- invariants after every step of random runs ---------------------------------------------------------


def _check(work) -> None:
    """The tree's bookkeeping against a recount: locks = requests holding each node, evictable and shared
    totals, the physical pool (cached + held <= capacity), paths equal to the requests' prompts."""
    c = work.cache
    alive = [n for n in range(1, len(c.tokens)) if c.parent[n] >= 0]
    holders = dict.fromkeys(alive, 0)
    for rid, node in enumerate(work.cache_node):
        path, n = [], node
        while n:
            holders[n] += 1
            path.append(c.run[n])
            n = c.parent[n]
        blocks = tuple(itertools.chain.from_iterable(reversed(path)))
        assert blocks == work.keys[rid][:len(blocks)]  # a request's path is its own prompt
    assert all(c.lock[n] == holders[n] for n in alive)
    assert c.evictable == sum(c.tokens[n] for n in alive if not c.lock[n])
    assert c.shared == sum(c.tokens[n] * (c.lock[n] - 1) for n in alive if c.lock[n])
    assert c.evictable <= work.free  # unlocked cached tokens fit in what running requests leave
    kids = Counter(c.parent[n] for n in alive)
    for n in alive:
        assert c.cum[n] == c.cum[c.parent[n]] + c.tokens[n] and c.tokens[n] > 0
        assert c.kids[n] == kids[n]
    leaves = [n for n in alive if not c.lock[n] and not c.kids[n]]
    queued = set(c._heap)
    assert all((c.time[n], n) in queued for n in leaves)  # every evictable leaf can be found


_SESSIONS = st.lists(st.tuples(st.integers(0, 3), st.integers(1, 12), st.integers(0, 300),
                               st.integers(1, 1500), st.floats(0, 3)), min_size=2, max_size=14)


def _sessions_trace(requests) -> Trace:
    """Requests ``(session, blocks added, tokens short of the last block, output, gap s)`` from four
    sessions whose prompts extend each other (shared prefixes, as turns of a conversation)."""
    arrivals, prompts, outputs, hashes = [], [], [], []
    t = 0.0
    length = [0] * 4
    for session, grow, short, output, gap in requests:
        t += gap
        length[session] = min(length[session] + grow, 10)
        tokens = length[session] * B - short
        arrivals.append(t)
        prompts.append(tokens)
        outputs.append(output)
        hashes.append(tuple(1000 * session + j for j in range(length[session])))
    return Trace(arrival_s=tuple(a - arrivals[0] for a in arrivals), prompt_tokens=tuple(prompts),
                 output_tokens=tuple(outputs), hash_ids=tuple(hashes))


def _run_checked(trace: Trace, pool: int, policy):
    """Run ``policy`` over ``trace`` in a pool of about ``pool`` tokens, checking the tree after every
    admission, prefill, decode check and finish; returns the work at the end."""
    setup = _small_pool(SETUP, pool)
    work = build_work(trace, setup, setup.kv_pool(policy.chunk_tokens).tokens)
    checked = []
    for name in ("form_prefill_batch", "first_tokens", "release", "check_decode_memory"):
        method = getattr(work, name)

        def wrapped(*args, _method=method, **kwargs):
            out = _method(*args, **kwargs)
            _check(work)
            checked.append(1)
            return out

        setattr(work, name, wrapped)
    drive(policy.rounds(work, setup))
    assert checked and work.finished == len(trace) - len(work.rejected)
    return work


@settings(max_examples=25, deadline=None)
@given(_SESSIONS, st.sampled_from(range(len(POLICIES))), st.sampled_from([9000, 16000, 40000]))
def test_bookkeeping_holds_after_every_step(requests, which, pool) -> None:
    """After every step of random runs the tree's totals equal a recount; at the end nothing is locked
    and the pool is whole."""
    work = _run_checked(_sessions_trace(requests), pool, POLICIES[which])
    c = work.cache
    assert c.shared == 0 and all(lock == 0 for lock in c.lock[1:]) and work.free == work.capacity
    assert c.evictable == c.cached_tokens() <= work.capacity
    assert 0 <= work.cache_hit_tokens < work.cache_prompt_tokens


@pytest.mark.parametrize("pol", POLICIES, ids=lambda p: p.label)
def test_bookkeeping_holds_through_retractions(pol) -> None:
    """Long outputs in a tight pool: decode retracts (the retracted requests' prefixes stay cached,
    unlocked) and re-prefills them, hitting their own prompts; the recount holds throughout."""
    rng = random.Random(5)
    requests = [(rng.randrange(4), rng.randint(1, 3), rng.randint(0, 300), rng.randint(1500, 3000),
                 rng.uniform(0, 0.3))
                for _ in range(30)]
    work = _run_checked(_sessions_trace(requests), 20_000, pol)
    assert work.retractions > 0 and work.cache.evicted_tokens > 0 and work.cache_hit_tokens > 0
    c = work.cache
    assert c.shared == 0 and all(lock == 0 for lock in c.lock[1:]) and work.free == work.capacity


@pytest.mark.parametrize("pol", POLICIES, ids=lambda p: p.label)
def test_cached_tokens_never_exceed_the_prompt_minus_one(pol, monkeypatch) -> None:
    seen = []
    orig = engine.Work.form_prefill_batch

    def form(self, *args, **kwargs):
        seqs, completing = orig(self, *args, **kwargs)
        seen.extend(seqs)
        return seqs, completing

    monkeypatch.setattr(engine.Work, "form_prefill_batch", form)
    trace = Trace(arrival_s=(0.0, 5.0, 5.0, 9.0), prompt_tokens=(3000, 3000, 3100, 1024),
                  output_tokens=(3, 3, 3, 3), hash_ids=((1, 2, 3, 4, 5, 6), (1, 2, 3, 4, 5, 6),
                                                        (1, 2, 3, 4, 5, 6, 7), (1, 2)))
    r = simulate(trace, SETUP, pol)
    assert all(new >= 1 for new, _ in seen)
    assert r.counters["prefix_cache_hit_tokens"] == 2999 + 2560 + 1023  # 5 full blocks for the third
