"""What a hand-built capacity row takes from its policy (tests of the verdict build
:class:`pdmux_cli.simulate.capacity.PolicyCapacity` rows without a search): the real policy objects'
``multiplexes`` and ``launch_args``, as :func:`pdmux_cli.simulate.capacity.capacity` fills them."""

from __future__ import annotations

from typing import Any

from pdmux_cli.multigpu.disaggregation import KvLink
from pdmux_cli.sglang.pdmux_config import PdmuxConfig
from pdmux_cli.simulate.cluster import DisaggPolicy
from pdmux_cli.simulate.schedulers import ChunkedPolicy, MixedChunkPolicy, PdmuxPolicy, PrefillFirstPolicy


def policy_of(kind: str, chunk: int = 8192, sm_group_num: int = 8) -> Any:
    """The policy object of ``kind`` (chunk size in tokens for chunked and mixed-chunk)."""
    return {
        "pdmux": lambda: PdmuxPolicy(PdmuxConfig(sm_group_num=sm_group_num)),
        "chunked": lambda: ChunkedPolicy(chunk),
        "mixed-chunk": lambda: MixedChunkPolicy(chunk),
        "prefill-first": PrefillFirstPolicy,
        "disagg": lambda: DisaggPolicy(1, 1, KvLink("nvlink", 1e11, 0.0, "test")),
    }[kind]()


def policy_fields(kind: str, path: str | None = None, chunk: int = 8192, sm_group_num: int = 8) -> dict:
    """``multiplexes`` and ``launch`` of a row of ``kind`` whose pdmux YAML is at ``path``."""
    policy = policy_of(kind, chunk, sm_group_num)
    return {"multiplexes": policy.multiplexes, "launch": tuple(policy.launch_args(path))}
