"""SGLang revisions pdmux follows, and which model architectures each can multiplex (pure; reads shipped
data).

Every rule set pdmux applies names the SGLang code it was read from: :data:`REVISIONS` maps a ``--sglang``
value to a :class:`Revision` (a release, or a repository at a commit) with the files read and the rules
those files have. :data:`DEFAULT_REVISION` is the latest release, SGLang 0.5.23.

Model support. SGLang's pdmux loop runs every prefill as ``ForwardMode.SPLIT_PREFILL``, and
``ModelRunner.forward_split_prefill`` (``srt/model_executor/model_runner.py``) calls the model class's own
``forward_split_prefill``; a class without one (itself or through a base class) fails at the first prefill.
The class comes from ``architectures`` in ``config.json`` (``srt/models/registry.py``: the first listed
architecture SGLang registers, else ``TransformersForCausalLM``). Which classes have the method is data:
``profiles/sglang/models-<version>.json``, written by ``benchmarks/scan_sglang_models.py`` (an AST scan of
that version's ``srt/models/``). A revision without such a scan answers "unknown", never a guess.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from typing import Any

from ..util.errors import Finding, InputError, short_repr

#: The method SGLang's pdmux calls on the model class for every prefill.
SPLIT_PREFILL_METHOD = "forward_split_prefill"


@dataclass(frozen=True)
class Revision:
    """One SGLang code line pdmux follows, and the pdmux rules its code has.

    ``key``: the ``--sglang`` value. ``name``: how messages name it. ``repo``/``commit``: where the code was
    read (``commit`` None for a release read from its wheel). ``files``: the files read, each
    ``path@commit`` where it differs. ``model_table``: the ``profiles/sglang/`` scan of its ``srt/models``
    (None: model support unknown). ``startup_failure``: a known start-up failure of ``--enable-pdmux`` on
    this revision (said whenever it is chosen), or None.

    Rules (each from the files named): ``overlap_decode_full_sm`` (the key is read: decode on a
    full-device stream beside a capped prefill); ``strict_loader`` (entries of 3, prefill_sm > 0,
    decode_sm > 0 or >= 0 with overlap, thresholds >= 0 and strictly increasing, budget and divisor > 0,
    ``manual_divisions: null`` refused); ``exclusive_sum``: at start-up, ``"none"`` (not checked),
    ``"at-most"`` (prefill + decode <= device) or ``"equal"``; ``overlap_prefill_inside``: with overlap,
    every prefill_sm strictly inside (0, device SMs); ``divide_sm``: ``"release"`` (prefill >= half,
    every ``len // g``-th) or ``"rewritten"`` (no half rule, endpoints sampled evenly);
    ``auto_blackwell``: the automatic split accepts compute capability 10.x/12.x; ``threshold_fallback``:
    a decode batch under every threshold takes group 1 (else UnboundLocalError);
    ``all_layers_without_decode``: a prefill with no decode batch runs its remaining layers in one call;
    ``max_split_forward_layers``: the key caps layers per round
    (:func:`pdmux_cli.sglang.revision_rules.layer_cap`). ``loader_read``: False where the revision's
    ``pdmux_context.py`` (loader, start-up checks, ``divide_sm``) was not read: its verdict on a YAML and its
    automatic levels are not known (``divide_sm`` is then ``"not read"``). ``tp_launch``: environment
    variables the revision sets or requires for pdmux with TP > 1 beyond ``--tp-size``, as ``NAME=value``
    (empty: none found in its code); ``tp_requires``: the library and driver minimums its code checks for
    pdmux with TP > 1 (one line), or None. ``speculation``: what ``--enable-pdmux`` does beside
    ``--speculative-algorithm`` (:func:`pdmux_cli.sglang.speculative_args.check_pdmux_speculation`):
    ``"crashes"`` (accepted at start-up, fails at the first decode after a split prefill: 0.5.23),
    ``"refused"`` (at start-up) or ``"single-layer"`` (single-layer EAGLE/NEXTN drafts only). ``flags``:
    what its code or runbook says combines with
    ``--enable-pdmux`` (one line), or None where it is 0.5.23's (pp 1, ``--chunked-prefill-size -1``, no PD
    disaggregation, ``--disable-overlap-schedule``).
    """

    key: str
    name: str
    repo: str
    commit: str | None
    files: tuple[str, ...]
    model_table: str | None
    startup_failure: str | None = None
    overlap_decode_full_sm: bool = False
    strict_loader: bool = False
    exclusive_sum: str = "none"
    overlap_prefill_inside: bool = False
    divide_sm: str = "release"
    auto_blackwell: bool = False
    threshold_fallback: bool = False
    all_layers_without_decode: bool = False
    max_split_forward_layers: bool = False
    loader_read: bool = True
    tp_launch: tuple[str, ...] = ()
    tp_requires: str | None = None
    flags: str | None = None
    speculation: str = "refused"

    @property
    def short(self) -> str:
        """The revision as a table cell: ``"0.5.23"``, ``"overlay@2126b0b"``."""
        return self.key

    @property
    def cite(self) -> str:
        """Where its rules come from, one line."""
        where = f"{self.repo}@{self.commit}" if self.commit else self.repo
        return f"{self.name}: {where} ({', '.join(self.files)})"


RELEASE = Revision(
    key="0.5.23",
    speculation="crashes",
    name="SGLang 0.5.23 (latest release)",
    repo="sglang 0.5.23 wheel (PyPI)",
    commit=None,
    files=("srt/multiplex/pdmux_context.py", "srt/multiplex/multiplexing_mixin.py",
           "srt/model_executor/model_runner.py", "srt/models/"),
    model_table="models-0.5.23.json",
)

#: sgl-project/sglang at b8755452: the standard-prefill lane (``--pdmux-prefill-mode``), whose
#: test/manual/pdmux/standard_prefill_runbook.md holds the exclusive and overlay YAMLs.
STANDARD_LANE = Revision(
    key="standard@b875545",
    name="sgl-project/sglang b8755452 (PDMux standard-prefill lane)",
    repo="sgl-project/sglang",
    commit="b8755452da65eb2dd5c51eef504bfbc843a49865",
    files=("python/sglang/srt/multiplex/pdmux_context.py",
           "python/sglang/srt/multiplex/multiplexing_mixin.py",
           "test/manual/pdmux/standard_prefill_runbook.md"),
    model_table=None,
    overlap_decode_full_sm=True,
    strict_loader=False,
    exclusive_sum="at-most",
    overlap_prefill_inside=True,
    divide_sm="release",
    auto_blackwell=False,
    threshold_fallback=True,
    all_layers_without_decode=True,
)

#: Li-brua/sglang (the fork behind the PDMux start-up fixes, sgl-project/sglang#33058): the layer-wise /
#: overlay line with the strict loader and the rewritten divide_sm. Its pdmux_context.py was read at
#: 2126b0b7, its multiplexing_mixin.py at 176efb02 (the index holds each file at one commit).
OVERLAY = Revision(
    key="overlay@2126b0b",
    name="Li-brua/sglang 2126b0b7 (PDMux layer-wise/overlay fork)",
    repo="Li-brua/sglang",
    commit="2126b0b79492ee7801e12d5f87f53f684f7adef0",
    files=("python/sglang/srt/multiplex/pdmux_context.py",
           "python/sglang/srt/multiplex/multiplexing_mixin.py@176efb02a71cd69b5ac0b5a132d4c1b81a438f1e"),
    model_table=None,
    overlap_decode_full_sm=True,
    strict_loader=True,
    exclusive_sum="equal",
    overlap_prefill_inside=True,
    divide_sm="rewritten",
    auto_blackwell=True,
    threshold_fallback=True,
    all_layers_without_decode=True,
)

#: sgl-project/sglang main at 2260e612 (2026-06-29), read in Li-brua/sglang's snapshot, whose merge
#: f6f87402 ("Merge branch 'sgl-project:main' into main") has it as the upstream parent (the sgl-project
#: snapshot is too big to fetch). Its pdmux_context.py (last changed in 2c036f1e, #17699) is 0.5.23's
#: apart from formatting; its multiplexing_mixin.py (last changed in 0e9eab19, #25610) chooses levels and
#: layers per round as 0.5.23 does. Since 43797cc8 (#25444, 2026-05-16) the Scheduler keeps gpu_id and
#: tp_size in ``self.ps`` (managers/scheduler.py), but ``init_pdmux`` still reads ``self.gpu_id``: every
#: ``--enable-pdmux`` launch dies in ``Scheduler.__init__`` (sgl-project/sglang#37714, open, and #30094;
#: issue #30884 reports the same two reads).
MAIN = Revision(
    key="main@2260e61",
    name="sgl-project/sglang main at 2260e612 (2026-06-29)",
    repo="sgl-project/sglang",
    commit="2260e612f6092000d899dab42da92c549f015c4a",
    files=("python/sglang/srt/multiplex/pdmux_context.py",
           "python/sglang/srt/multiplex/multiplexing_mixin.py", "python/sglang/srt/managers/scheduler.py",
           "python/sglang/srt/server_args.py", "python/sglang/srt/model_executor/model_runner.py",
           "python/sglang/srt/models/"),
    model_table="models-main-2260e61.json",
    startup_failure=("every --enable-pdmux launch fails at start-up: Scheduler.init_pdmux reads self.gpu_id, "
                     "which the Scheduler keeps in self.ps since 43797cc8 (#25444): AttributeError in "
                     "Scheduler.__init__ (event_loop_pdmux reads self.tp_size likewise); fixed by the open "
                     "PRs sgl-project/sglang#37714 and #30094, reported in #30884; pdmux's numbers are what "
                     "its rules give once that is fixed"),
)

#: sgl-project/sglang at a64f33f0: ``feat/dsv41-pdmux`` (its test/manual/pdmux/model_adaptation_guide.md
#: names the branch), the DeepSeek-V4.1 layer-wise PDMux of the GLM-5.3/DeepSeek-V4 line. Its
#: multiplexing_mixin.py caps layers per round with ``max_split_forward_layers`` while decode work exists
#: and runs the remaining layers in one call without; distributed/bootstrap.py calls
#: multiplex/launch_order.py's ``configure_pdmux_nccl_launch_order`` for NCCL with TP > 1. Its
#: pdmux_context.py is not in the stored copy at a64f33f0 (the index keeps another version of every file it
#: read there), so its loader, start-up checks and divide_sm are not known here.
DSV41 = Revision(
    key="dsv41@a64f33f",
    speculation="single-layer",
    name="sgl-project/sglang a64f33f0 (feat/dsv41-pdmux, DeepSeek-V4.1 layer-wise PDMux)",
    repo="sgl-project/sglang",
    commit="a64f33f089e9863b360992950ca1436ca6cba8f8",
    files=("python/sglang/srt/multiplex/multiplexing_mixin.py", "python/sglang/srt/multiplex/launch_order.py",
           "python/sglang/srt/distributed/bootstrap.py", "test/manual/pdmux/layerwise_prefill_runbook.md",
           "test/manual/pdmux/model_adaptation_guide.md"),
    model_table=None,
    overlap_decode_full_sm=True,
    divide_sm="not read",
    threshold_fallback=True,
    all_layers_without_decode=True,
    max_split_forward_layers=True,
    loader_read=False,
    tp_launch=("NCCL_LAUNCH_ORDER_IMPLICIT=1",),
    tp_requires=("NCCL >= 2.26 in both PyTorch and PyNCCL, CUDA runtime and driver >= 12.3 (launch_order.py "
                 "configure_pdmux_nccl_launch_order, run before the first NCCL communicator when TP > 1; it "
                 "sets NCCL_LAUNCH_ORDER_IMPLICIT=1 when unset and refuses to start with any other value)"),
    flags=("chunked prefill combines with layer slicing (its runbook launches with --chunked-prefill-size "
           "8192); --disable-overlap-schedule, --sm-group-num equal to the YAML's; attention DP; speculative "
           "decoding only single-layer EAGLE/NEXTN and DSPARK (layerwise_prefill_runbook.md)"),
)

#: The GLM-5.3-Flash / DeepSeek-V4 pdmux PR stack and the commits its documents name (none of its
#: pdmux_context.py or multiplexing_mixin.py could be read at these commits; the layer cap they add is
#: modelled from DSV41's code). From Li-brua/sglang PDMUX_TRACKING.md at ab7021ac and
#: GLM53_FLASH_PDMUX_DSPARK.md at a926d916, and DSV41's model_adaptation_guide.md.
PR_STACK: dict[str, str] = {
    "#42411": "feat/glm53-pdmux: GLM model forward, split-prefill scheduling, bounded layer submission "
              "(max_split_forward_layers), capped-prefill/full-device-decode overlap",
    "#42412": "fix/glm53-mamba-hicache: Mamba admission/checkpoint reservations, HiCache load-back rollback",
    "#42413": "feat/glm53-pdmux-dp: rank-consistent DP/EP communication, idle-rank handling",
    "#42414": "feat/glm53-pdmux-mtp: single-layer MTP through EAGLE/NEXTN, final-slice draft handoff",
    "stack base": "synchronized with upstream main at 5b5d721239",
    "experiment": "Li-brua/sglang feat/glm53-flash-pdmux at 991adaa3bd (GLM scheduling reference a4c3f271fb)",
    "standard": "Li-brua/sglang feat/pdmux-standard at 17761860cc (the layer_split reference)",
    "DeepSeek-V4": "integration PR #41562; feat/dsv41-pdmux at a64f33f0 (dsv41@a64f33f)",
}

#: Every revision ``--sglang`` takes, by key.
REVISIONS: dict[str, Revision] = {r.key: r for r in (RELEASE, STANDARD_LANE, OVERLAY, MAIN, DSV41)}
DEFAULT_REVISION = RELEASE.key
#: ``--sglang``'s help: the requests whose verdicts depend on SGLang's code declare their ``sglang`` field
#: with it (:func:`pdmux_cli.workflows.fields.sglang_revision`).
SGLANG_HELP = ("SGLang revision whose pdmux code to follow: 0.5.23 (latest release, default), "
               "standard@b875545 (sgl-project/sglang b8755452, the standard-prefill lane), overlay@2126b0b "
               "(Li-brua/sglang 2126b0b7, the layer-wise/overlay fork), main@2260e61 (upstream main at "
               "2260e612, which fails to start with --enable-pdmux: #37714) or dsv41@a64f33f "
               "(sgl-project/sglang a64f33f0, the DeepSeek-V4.1 line with max_split_forward_layers; "
               "manual_divisions only).")


def get_revision(key: str | Revision | None = None) -> Revision:
    """The :class:`Revision` named by ``--sglang`` (``None``: the default, 0.5.23; a commit prefix after
    ``@`` may be longer: ``overlay@2126b0b79492``). Raises :class:`InputError` naming the known ones, or for
    an empty name."""
    if isinstance(key, Revision):
        return key
    if key is None:
        return REVISIONS[DEFAULT_REVISION]
    if not str(key).strip():
        raise InputError("{flag.sglang} is empty: give a revision, one of {known} (0.5.23 is the latest "
                         "release)", param="sglang", values={"known": ", ".join(REVISIONS)})
    text = str(key).strip()
    # commit hashes and names are written lower-case; OVERLAY@2126B0B is the same
    if text.lower() in REVISIONS:
        return REVISIONS[text.lower()]
    text = text.lower() if text.isascii() else text
    for revision in REVISIONS.values():
        if revision.commit and "@" in text:
            line, _, commit = text.partition("@")
            if revision.key.split("@")[0] == line and len(commit) >= 7 and revision.commit.startswith(commit):
                return revision
    raise InputError(
        "{flag.sglang} {text} is not a revision pdmux has read; use one of {known} (0.5.23 is the "
        "latest release)",
        param="sglang",
        values={"text": short_repr(text), "known": ", ".join(REVISIONS)},
    )


@dataclass(frozen=True)
class Support:
    """Whether a model can run ``--enable-pdmux`` on a revision.

    ``state``: ``"yes"``, ``"no"`` or ``"unknown"``. ``architecture``: the architecture SGLang resolves
    (``None`` when the config names none). ``sglang_class``: ``"srt/models/<file>.py:<Class>"``;
    ``defined_in``: where ``forward_split_prefill`` comes from (a base class for subclasses). ``why``: the
    finding that says why (codes ``sglang.support.*``; :attr:`reason` is its line, rendered by
    :mod:`pdmux_cli.messages`). ``revision``: :attr:`Revision.key`.
    """

    state: str
    revision: str
    architecture: str | None
    sglang_class: str | None
    defined_in: str | None
    why: Finding

    @property
    def reason(self) -> str:
        """:attr:`why` as one line (for tables, notes and warnings)."""
        from ..messages import render

        return render(self.why)

    @property
    def runs(self) -> bool:
        """False only where the revision's code shows pdmux cannot run this model."""
        return self.state != "no"

    def as_dict(self) -> dict[str, Any]:
        """JSON form (stable keys)."""
        return {"state": self.state, "sglang": self.revision, "architecture": self.architecture,
                "sglang_class": self.sglang_class, "forward_split_prefill_from": self.defined_in,
                "reason": self.reason}


@cache
def model_table(name: str) -> dict[str, Any]:
    """The scan ``profiles/sglang/<name>`` (see :mod:`benchmarks.scan_sglang_models`), parsed once."""
    from ..catalog.profile_files import profiles_dir

    return json.loads((profiles_dir() / "sglang" / name).read_text(encoding="utf-8"))


def model_support(architectures: tuple[str, ...] | list[str],
                  revision: str | Revision | None = None) -> Support:
    """Whether SGLang ``revision`` can run pdmux for a config naming ``architectures`` (pure but for the
    shipped scan, read once).

    Resolution as ``srt/models/registry.py`` ``resolve_model_cls``: the first listed architecture SGLang
    registers, else ``TransformersForCausalLM`` (which has no ``forward_split_prefill``). Returns
    ``state="unknown"`` for a revision without a scan or a config that names no architecture.
    """
    rev = get_revision(revision)
    archs = tuple(a for a in architectures if isinstance(a, str))
    if rev.model_table is None:
        return Support(
            "unknown",
            rev.key,
            archs[0] if archs else None,
            None,
            None,
            Finding(
                "sglang.support.no_scan",
                {"revision_name": rev.name, "architecture": archs[0] if archs else None},
                "sglang",
            ),
        )
    table = model_table(rev.model_table)
    if not archs:
        return Support("unknown", rev.key, None, None, None,
                       Finding("sglang.support.no_architectures", {"revision_name": rev.name}, "model"))
    known = table["architectures"]
    chosen = next((a for a in archs if a in known), None)
    if chosen is None:
        fallback = table.get("fallback", "TransformersForCausalLM")
        return Support(
            "no",
            rev.key,
            fallback,
            None,
            None,
            Finding(
                "sglang.support.no_class",
                {
                    "sglang": table["sglang"],
                    "architecture": archs[0],
                    "fallback": fallback,
                    "method": SPLIT_PREFILL_METHOD,
                },
                "model",
            ),
        )
    entry = known[chosen]
    defined = entry.get(SPLIT_PREFILL_METHOD)
    if defined:
        inherited = None if defined.endswith(":" + chosen) else defined.rsplit(":", 1)[1]
        return Support(
            "yes",
            rev.key,
            chosen,
            entry["class"],
            defined,
            Finding(
                "sglang.support.has_method",
                {
                    "sglang": table["sglang"],
                    "architecture": chosen,
                    "file": entry["class"].split(":")[0],
                    "method": SPLIT_PREFILL_METHOD,
                    "inherited_from": inherited,
                },
            ),
        )
    return Support("no", rev.key, chosen, entry["class"], None,
                   Finding("sglang.support.no_method", {"sglang": table["sglang"], "architecture": chosen,
                                                        "file": entry["class"].split(":")[0],
                                                        "method": SPLIT_PREFILL_METHOD}, "model"))


def require_pdmux(architectures: tuple[str, ...], revision: str | Revision | None, what: str,
                  option: str | None = None) -> Support:
    """The :class:`Support` of a model for a command that only makes sense if pdmux runs (``what``:
    ``"tune"``; ``"gen-config"`` with ``option="tune"``, the parameter that asked for it, which the CLI
    names as its flag, ``gen-config --tune``, and the Python API as its keyword): :class:`InputError`
    naming the reason where ``revision`` cannot run it."""
    support = model_support(architectures, revision)
    if support.state == "no":
        asked = f" {{flag.{option}}}" if option else ""  # a parameter's name from the caller, no user text
        raise InputError(
            "{what}" + asked + ": {reason}; there are no pdmux knobs to tune for it ({flag.sglang} picks "
            "another SGLang revision)",
            param="sglang",
            values={"what": what, "reason": support.reason},
        )
    return support
