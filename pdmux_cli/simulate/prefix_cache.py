"""SGLang's radix (prefix) cache at the granularity a trace gives: prompt blocks named by hash ids.

SGLang 0.5.23 keeps the KV of every prompt it computed, and of every finished request's outputs, in a
radix tree (``srt/mem_cache/unified_radix_cache.py`` ``UnifiedRadixCache``, the default tree cache of
``srt/mem_cache/registry.py`` ``default_radix_cache_factory``; the rules are those of
``srt/mem_cache/radix_cache.py`` ``RadixCache``). A request whose prompt starts with cached tokens
computes only the rest. Mooncake traces name a prompt's blocks of
:data:`~pdmux_cli.simulate.traces.HASH_BLOCK_TOKENS` tokens by hash ids (equal ids at the start of two
prompts: a shared prefix), so this tree's keys are blocks (:func:`block_keys`) where SGLang's are
tokens; a trace sets its own block (:attr:`~pdmux_cli.simulate.traces.Trace.block_tokens`): bench_serving's
generated-shared-prefix dataset names every token (one token a block: SGLang's tree with page size 1).
As in SGLang, a node holds a run of blocks inserted together and is split where a match or an
insert ends inside it. What it follows from SGLang:

- **match** (``match_prefix``, called for each candidate by ``Req.init_next_round_input``): the longest
  run of the prompt's blocks hanging from the root; the path's access time is refreshed. Times are a
  logical counter, as SGLang's ``get_and_increase_time_counter``.
- **lock** (``inc_lock_ref`` / ``dec_lock_ref``, from the request's deepest node up to the root): a
  running request locks its path; locked nodes are never evicted. ``shared`` counts the tokens of nodes
  locked by more than one request once per extra request: they are held once, though every request's
  context counts them.
- **insert** (``checkpoint``, after each prefill chunk and at the end of a prefill): the prompt's new
  blocks become one node under the request's lock; blocks already there are locked instead (SGLang
  frees the request's duplicate). SGLang makes a node of each chunk; here a chunk grows the node of
  the request's previous chunk while only that request holds it (a chunk of 512 tokens would cost a
  node and an eviction a step): matches see the same blocks, but an eviction takes all of a finished
  request's uncached prompt at once where SGLang may stop between its chunks. On the Mooncake trace
  the hit rate of ``mixed-chunk 512`` moves by 0.1 percentage point.
- **release** (``common.py`` ``release_kv_cache``): a finished request's prompt and outputs stay, unlocked
  (``checkpoint=True``); the outputs form a leaf of their own (``split_prompt``) that nothing matches
  (traces hash prompts only). A retracted request only unlocks its path: its outputs are freed
  (``checkpoint=False``).
- **evict** (``evict``, ``evict_policy.py`` ``LRUStrategy``, the default ``--radix-eviction-policy lru``):
  the least recently used unlocked leaf first, its parent joining the candidates when its last child
  goes; whole nodes, until the tokens asked for are free.

The tree holds no more than the KV pool leaves after the running requests: the engine
(:mod:`pdmux_cli.simulate.engine`) asks it to evict when an allocation needs room. A match that SGLang
would continue into the first differing block (tokens, not blocks) ends at the block boundary here: the
trace cannot tell (with one token a block, nothing is lost). Pure Python, deterministic; no I/O.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from .traces import HASH_BLOCK_TOKENS

#: SGLang refreshes the prefixes of the waiting queue's head every this many scheduling passes
#: (``srt/managers/schedule_policy.py`` ``WAITING_PREFIX_REFRESH_INTERVAL``; ``_touch_waiting_prefixes``,
#: on by default through ``SGLANG_ENABLE_WAITING_PREFIX_REFRESH``, for FCFS with LRU eviction).
WAITING_PREFIX_REFRESH_INTERVAL = 32

#: How many waiting requests that refresh touches, head last (``schedule_policy.py``
#: ``WAITING_QUEUE_PREFIX_MATCH_MAX``).
WAITING_PREFIX_REFRESH_MAX = 128

#: The root node: no tokens, always locked.
ROOT = 0

#: A block as the tree keys it: its hash id when it is full, ``(hash id, tokens)`` for a prompt's
#: shorter last block (a full block and a partial one never match).
Block = int | tuple[int, int]


def block_keys(hash_ids: Sequence[int], prompt_tokens: int, block: int = HASH_BLOCK_TOKENS
               ) -> tuple[Block, ...]:
    """A prompt's blocks as the tree keys them (:data:`Block`): ``hash_ids`` (at most one per ``block``
    tokens of the prompt: :data:`HASH_BLOCK_TOKENS`, or the trace's own ``block_tokens``), the last one
    paired with its tokens when the prompt ends inside it."""
    keys = tuple(hash_ids[:-(-prompt_tokens // block)])
    tail = prompt_tokens - block * (len(keys) - 1)
    if keys and tail < block:
        keys = (*keys[:-1], (keys[-1], tail))
    return keys


def _tokens(run: Sequence[Block], block: int = HASH_BLOCK_TOKENS) -> int:
    """Tokens of a run of blocks of ``block`` tokens (only its last may be short)."""
    if not run:
        return 0
    last = run[-1]
    return block * len(run) - (block - last[1] if type(last) is tuple else 0)


class PrefixCache:
    """The radix tree of cached prompt blocks (module docstring), as parallel lists indexed by node id;
    ``block_tokens``: tokens a full block holds (the trace's,
    :attr:`~pdmux_cli.simulate.traces.Trace.block_tokens`).

    Per node: ``run`` (its blocks; ``()`` for a finished request's output leaf), ``tokens``, ``cum``
    (tokens from the root through it), ``depth`` (blocks from the root through it), ``lock`` (requests
    holding it; the root's is 1), ``kids``, ``time`` (last access), ``parent`` (-1 once evicted),
    ``owner`` (the request that inserted it, -1 for none).
    Totals: ``evictable`` (tokens of unlocked nodes: what eviction can free), ``shared`` (tokens of
    locked nodes counted once per locking request beyond the first), ``evicted_tokens``. A request's
    place in the tree is the id of its deepest node (:data:`ROOT` for none).
    """

    __slots__ = ("_children", "_heap", "block", "clock", "cum", "depth", "evictable", "evicted_tokens",
                 "kids", "lock", "owner", "parent", "run", "shared", "time", "tokens")

    def __init__(self, block: int = HASH_BLOCK_TOKENS) -> None:
        self.block = block  # tokens a block (a hash id) stands for
        self.parent = [-1]
        self.run: list[tuple[Block, ...]] = [()]
        self.tokens = [0]
        self.cum = [0]
        self.depth = [0]
        self.lock = [1]
        self.kids = [0]
        self.time = [0]
        self.owner = [-1]
        self._children: dict[tuple[int, Block], int] = {}
        self._heap: list[tuple[int, int]] = []  # (access time, node): eviction candidates, stale ones skipped
        self.evictable = 0
        self.shared = 0
        self.evicted_tokens = 0
        self.clock = 0

    # ---------------------------------------------------------------------------------------------
    def _new(self, parent: int, run: tuple[Block, ...], tokens: int, lock: int) -> int:
        node = len(self.tokens)
        self.parent.append(parent)
        self.run.append(run)
        self.tokens.append(tokens)
        self.cum.append(self.cum[parent] + tokens)
        self.depth.append(self.depth[parent] + len(run))
        self.lock.append(lock)
        self.kids.append(0)
        self.time.append(self.clock)
        self.owner.append(-1)
        self.kids[parent] += 1
        if run:
            self._children[(parent, run[0])] = node
        return node

    def _split(self, node: int, k: int) -> int:
        """Split ``node`` after its first ``k`` blocks (SGLang's ``_split_node``); returns the new upper
        node, which takes the lock count and access time (lock totals do not change)."""
        run = self.run[node]
        parent = self.parent[node]
        head = run[:k]
        tokens = _tokens(head, self.block)
        upper = len(self.tokens)
        self.parent.append(parent)
        self.run.append(head)
        self.tokens.append(tokens)
        self.cum.append(self.cum[parent] + tokens)
        self.depth.append(self.depth[parent] + k)
        self.lock.append(self.lock[node])
        self.kids.append(1)
        self.time.append(self.time[node])
        self.owner.append(self.owner[node])
        self._children[(parent, run[0])] = upper
        self.parent[node] = upper
        self.run[node] = run[k:]
        self.tokens[node] -= tokens
        self._children[(upper, run[k])] = node
        return upper

    def _touch(self, node: int) -> int:
        """Refresh the access time of ``node`` and its ancestors (one tick of the clock); returns the
        tokens among them that no request locks."""
        if not node:
            return 0
        self.clock += 1
        now = self.clock
        time, parent, lock, tokens = self.time, self.parent, self.lock, self.tokens
        unlocked = 0
        n = node
        while n:
            time[n] = now
            if not lock[n]:
                unlocked += tokens[n]
            n = parent[n]
        if not lock[node] and not self.kids[node]:
            heapq.heappush(self._heap, (now, node))
        return unlocked

    def _walk(self, keys: Sequence[Block], end: int, node: int, lock: bool) -> int:
        """Follow ``keys[depth[node]:end]`` down from ``node``, splitting a node a walk ends inside;
        with ``lock``, lock each node passed (as :meth:`lock_path` would) and refresh its access time.
        Returns the deepest node."""
        children, run, depth, time = self._children, self.run, self.depth, self.time
        j = depth[node]
        while j < end:
            child = children.get((node, keys[j]))
            if child is None:
                break
            r = run[child]
            n = len(r)
            if j + n > end or keys[j:j + n] != r:  # the walk ends inside this node
                k, limit = 1, min(n, end - j)
                while k < limit and r[k] == keys[j + k]:
                    k += 1
                if k < n:
                    child = self._split(child, k)
                n = k
            if lock:
                self._lock_one(child)
                time[child] = self.clock
            node = child
            j += n
        return node

    def _lock_one(self, node: int) -> None:
        if self.lock[node]:
            self.shared += self.tokens[node]
        else:
            self.evictable -= self.tokens[node]
        self.lock[node] += 1

    # ---------------------------------------------------------------------------------------------
    def match(self, keys: Sequence[Block]) -> tuple[int, int]:
        """``(node, unlocked)``: the deepest node of the longest cached run of ``keys``
        (:func:`block_keys`) from the root, splitting the node it ends inside (:data:`ROOT` when the
        first block is not cached; the matched tokens are ``cum[node]``), and the tokens on its path
        no request locks (what locking it takes out of the evictable tokens: SGLang pins a candidate's
        prefix while it checks the budget). Refreshes the path's access time."""
        if not keys or (ROOT, keys[0]) not in self._children:
            return ROOT, 0
        node = self._walk(keys, len(keys), ROOT, False)
        return node, self._touch(node)

    def refresh(self, prompts: Sequence[Sequence[Block]]) -> None:
        """Refresh the cached prefix of each of ``prompts``, in order (SGLang's ``touch_prefix``)."""
        children = self._children
        for keys in prompts:
            if keys and (ROOT, keys[0]) in children:
                self._touch(self._walk(keys, len(keys), ROOT, False))

    def lock_path(self, node: int) -> None:
        """A request locks ``node`` and its ancestors."""
        parent = self.parent
        while node:
            self._lock_one(node)
            node = parent[node]

    def unlock_path(self, node: int) -> None:
        """A request releases its lock on ``node`` and its ancestors; nodes left unlocked become evictable."""
        lock, tokens, parent, kids = self.lock, self.tokens, self.parent, self.kids
        while node:
            lock[node] -= 1
            if lock[node]:
                self.shared -= tokens[node]
            else:
                self.evictable += tokens[node]
                if not kids[node]:
                    heapq.heappush(self._heap, (self.time[node], node))
            node = parent[node]

    def extend(self, node: int, keys: Sequence[Block], blocks: int, owner: int = -1) -> int:
        """Request ``owner`` inserts ``keys[:blocks]`` below its deepest node ``node`` (which covers
        ``keys[:depth[node]]``) under its lock (SGLang's ``checkpoint``); returns its new deepest node.
        Cached blocks are locked instead (``shared`` or ``evictable`` change as for :meth:`lock_path`);
        the rest grows ``node`` when the request inserted it and holds it alone with nothing below (its
        previous chunk: module docstring), else becomes a node. The nodes from ``node`` down get a fresh
        access time; SGLang refreshes the whole path, but the nodes above are locked by the request until
        it finishes (:meth:`release` refreshes them) or is retracted (a prefill apart at most)."""
        end = min(blocks, len(keys))
        self.clock += 1
        if self.kids[node]:
            node = self._walk(keys, end, node, True)
        j = self.depth[node]
        if j < end:
            rest = keys[j:end]
            tokens = _tokens(rest, self.block)
            if node and self.owner[node] == owner and self.lock[node] == 1 and not self.kids[node]:
                self.run[node] += rest  # a full block ends the run: token counts add up
                self.tokens[node] += tokens
                self.cum[node] += tokens
                self.depth[node] += end - j
                self.time[node] = self.clock
            else:
                node = self._new(node, tuple(rest), tokens, 1)
                self.owner[node] = owner
        return node

    def release(self, node: int, tail_tokens: int) -> None:
        """A request finished: its path (refreshed) is unlocked and ``tail_tokens`` more of its tokens
        (outputs, and prompt tokens past its hashed blocks) stay as an unlocked leaf below ``node``."""
        self.clock += 1
        now = self.clock
        if tail_tokens > 0:
            tail = self._new(node, (), tail_tokens, 0)
            self.evictable += tail_tokens
            heapq.heappush(self._heap, (now, tail))
        time = self.time
        lock, tokens, parent, kids = self.lock, self.tokens, self.parent, self.kids
        while node:
            time[node] = now
            lock[node] -= 1
            if lock[node]:
                self.shared -= tokens[node]
            else:
                self.evictable += tokens[node]
                if not kids[node]:
                    heapq.heappush(self._heap, (now, node))
            node = parent[node]

    def evict(self, limit: int) -> None:
        """Evict least recently used unlocked leaves, whole, until at most ``limit`` tokens are evictable
        (or none is left)."""
        heap, parent, lock, kids, time = self._heap, self.parent, self.lock, self.kids, self.time
        tokens, run = self.tokens, self.run
        while self.evictable > limit and heap:
            stamp, node = heapq.heappop(heap)
            up = parent[node]
            if up < 0 or lock[node] or kids[node] or time[node] != stamp:
                continue  # stale: evicted, locked, grown a child or touched since it was queued
            self.evictable -= tokens[node]
            self.evicted_tokens += tokens[node]
            if run[node]:
                del self._children[(up, run[node][0])]
            parent[node] = -1
            kids[up] -= 1
            if up and not lock[up] and not kids[up]:
                heapq.heappush(heap, (time[up], up))

    def cached_tokens(self) -> int:
        """Tokens the tree holds (locked or not), summed over its nodes (O(nodes): for checks)."""
        return sum(t for t, p in zip(self.tokens[1:], self.parent[1:]) if p >= 0)
