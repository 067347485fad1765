"""The English of pdmux: every finding's sentence and every parameter's command-line flag.

The core returns what it notices as :class:`pdmux_cli.util.errors.Finding` (a code, its values, the
parameter at fault) and names parameters in its errors by their Python names (``{flag.tp}`` in an
:class:`~pdmux_cli.util.errors.InputError` template, ``param="tp"``); this module turns them into the lines
the CLI prints and the JSON carries. Pure (no I/O, no rich, no typer, no pdmux module): the CLI and the
workflows import it; the core only lazily, for ``str()`` of a finding, an error or a layout.

- :func:`flag`: a parameter's flag (``disagg_tp`` -> ``--disagg-tp``; :data:`FLAGS` for the irregular);
- :func:`render` / :func:`render_all`: a finding (or a note still written as text) as its line;
- :func:`error_text` / :func:`api_error_text`: an error with flags, or with the API's parameter names;
- :func:`layout_text`, :func:`launch_line`: how a policy uses its GPUs, and a shell launch line, from data.

Codes are ``area.what``; :data:`TEMPLATES` holds a ``str.format`` template (fields: the finding's values,
``{flag.NAME}`` for a flag) or a function of the finding for sentences with parts that come and go.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # names only: the core imports this module (lazily, for str()), never the other way
    from .util.errors import Finding, PdmuxError

#: Parameters whose flag is not ``--`` + the name with ``-`` for ``_``.
FLAGS: dict[str, str] = {"all_gpus": "--all", "trace_format": "--format",
                         "no_single_levels": "--no-fixed-splits"}


def flag(param: str) -> str:
    """The CLI flag of a parameter (its Python name: a request field, an API keyword)."""
    return FLAGS.get(param) or "--" + param.replace("_", "-")


def flags_in(text: str) -> str:
    """``text`` with each ``{flag.NAME}`` as the flag of parameter NAME (:func:`flag`): the help of an option
    declared on its request field (:func:`pdmux_cli.workflows.fields.option`), which names other parameters
    by their Python names, as errors do."""
    return text.format(flag=_FlagNames())


def error_text(exc: PdmuxError) -> str:
    """``exc``'s message as the CLI prints it: each parameter named by its flag."""
    return exc.text(flag)


def api_error_text(exc: PdmuxError) -> str:
    """``exc``'s message for a caller of the Python API: each parameter by its keyword (``tp``)."""
    return exc.text(lambda name: name)


# --- layouts and launch lines -------------------------------------------------------------------------


def count_text(n: int, noun: str) -> str:
    """``"1 request"``, ``"5 requests"``: a count with its noun, plural unless it is one."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def layout_text(layout: Any) -> str:
    """How a policy used its GPUs (a :class:`pdmux_cli.multigpu.disaggregation.Layout`): ``"1 GPU"``,
    ``"TP 2"``, ``"DP 4 x TP 2"``, ``"1P1D x TP 1"`` (each of the X + Y instances ``tp`` GPUs)."""
    if isinstance(layout, dict):  # a finding's values
        tp, dp, xpyd = layout["tp"], layout["dp"], layout["xpyd"]
    else:
        tp, dp, xpyd = layout.tp, layout.dp, layout.xpyd
    if xpyd is not None:
        return f"{xpyd[0]}P{xpyd[1]}D x TP {tp}"
    if dp > 1:
        return f"DP {dp} x TP {tp}"
    return f"TP {tp}" if tp > 1 else "1 GPU"


def launch_line(command: Sequence[str], env: Sequence[str] = ()) -> str:
    """``NAME=value ... command args``, each argument shell-quoted (an environment entry's value too)."""
    quoted_env = []
    for entry in env:
        name, _, value = entry.partition("=")
        quoted_env.append(f"{name}={shlex.quote(value)}")
    return " ".join([*quoted_env, *(shlex.quote(str(a)) for a in command)])


# --- findings -----------------------------------------------------------------------------------------


def _gib(value: float) -> str:
    return f"{value / 2**30:.1f}"


def _does_not_fit(f: Finding) -> str:
    v = f.values
    per = f" per GPU (one of {v['tp']} ranks)" if v["tp"] > 1 else ""
    hint = (
        f"{flag('tp')} {v['fitting_tp']} fits"
        if v["fitting_tp"]
        else "more GPUs than one server's 8 would be needed"
    ) + ", or fewer bytes per weight"
    return (
        f"does not fit: {v['model']} needs {_gib(v['weight_bytes'])} GiB of weights + "
        f"{_gib(v['kv_cache_bytes'])} GiB of KV cache{per} > {_gib(v['gpu_memory_bytes'])} GiB on "
        f"{v['gpu']}; the times in the table are hypothetical ({hint})"
    )


def _disagg_gpus(f: Finding) -> str:
    v = f.values
    gpus, tp = v["gpus"], v["tp"]
    one = "1 GPU" if tp == 1 else f"{tp} GPUs (TP {tp})"
    same = (
        f"to compare at {gpus} GPUs, under load they would run as {gpus // tp} data-parallel replicas"
        if gpus % tp == 0 and gpus != tp
        else "on as many GPUs"
        if gpus == tp
        else f"not at equal GPU count ({gpus} against {tp})"
    )
    return (
        f"disagg {v['xpyd']}: {gpus} GPUs ({v['prefill']} prefill and {v['decode']} decode instance(s), "
        f"TP {v['instance_tp']} each); the other rows are one server on {one}: {same} (this estimate is one "
        "server's view of one prompt)"
    )


def _pdmux_support(f: Finding) -> str:
    """A model-support finding as the estimate's note: the reason, with what it means for the rows."""
    reason = render(f.values["reason"])
    if f.values["state"] == "no":
        return f"PD mux cannot run: {reason}; its rows are the split's arithmetic, not a speed SGLang reaches"
    return f"PD mux: {reason}"


def _revision_tp(f: Finding) -> str:
    v = f.values
    env = " ".join(v["launch_env"])
    return (
        f"{v['revision']} with TP {v['tp']}: "
        + (f"launch with {env}; " if env else "")
        + (v["requires"] or "")
    )


def _request_delay(f: Finding) -> str:
    where = ("the calibration's, with the prompt's tokenization" if f.values["calibrated"]
             else "admission fitted to public runs, the prompt's tokenization measured: serving.yaml")
    text = (
        "prefill time is the server's; a request's TTFT adds SGLang's request path, "
        f"{f.values['delay_ms']:.3g} "
        f"ms ({where}), as simulate counts it"
    )
    rows = f.values.get("ttft") or []
    if rows:
        text += ("; TTFT with pdmux's measured error (80% interval): " + ", ".join(
            f"{r['label']} {r['ttft_ms']:.0f} ms ({r['interval_ms'][0]:.0f}-{r['interval_ms'][1]:.0f})"
            for r in rows))
    return text


def _level_not_built(f: Finding) -> str:
    levels = ", ".join(f"{p}/{d}" for p, d in f.values["levels"])
    return (
        f"{f.values['prefill_sms']}/{f.values['decode_sms']} is not one of the levels SGLang builds here "
        f"({levels}); a manual_divisions entry gives it"
    )


def _model_support(f: Finding) -> str:
    v = f.values
    kind = f.code.rsplit(".", 1)[1]
    if kind == "no_scan":
        return (
            f"pdmux has no scan of {v['revision_name']}'s model classes: whether it can multiplex "
            f"{v['architecture'] or 'this model'} is not known"
        )
    if kind == "no_architectures":
        return (
            "config.json names no architectures: which SGLang class runs it, and so whether "
            f"{v['revision_name']} can multiplex it, is not known"
        )
    if kind == "no_class":
        return (
            f"SGLang {v['sglang']} has no model class for {v['architecture']} (it would fall back to "
            f"{v['fallback']}, which has no {v['method']}): pdmux cannot run it"
        )
    if kind == "has_method":
        via = "" if v["inherited_from"] is None else f", inherited from {v['inherited_from']}"
        return f"SGLang {v['sglang']}'s {v['architecture']} ({v['file']}) has {v['method']}{via}"
    return (
        f"no {v['method']} in SGLang {v['sglang']}'s {v['architecture']} ({v['file']}): pdmux fails at the "
        "first prefill"
    )


def rate_text(policy: Any) -> str:
    """A policy's capacity as text: ``"5.2"``, ``">=41"`` (held at every rate tried), ``"<0.1"`` (at none).
    ``policy``: a :class:`pdmux_cli.simulate.capacity.PolicyCapacity` or a verdict's policy values."""
    if not isinstance(policy, dict):
        policy = {
            "max_rate_rps": policy.max_rate_rps,
            "bound": policy.bound,
            "lowest_rps": policy.points[0].rate_rps if policy.points else None,
        }
    if policy["bound"] == "above":
        return f">={policy['max_rate_rps']:.3g}"
    if policy["bound"] == "below":
        return f"<{policy['lowest_rps']:.3g}" if policy["lowest_rps"] is not None else "0"
    return f"{policy['max_rate_rps']:.3g}"


def _on(p: dict[str, Any]) -> str:
    """``" on 4 GPUs (DP 4 x TP 1)"`` for a policy on more than one GPU, else ``""``."""
    return f" on {p['gpus']} GPUs ({layout_text(p['layout'])})" if p["gpus"] > 1 else ""


def _sglang_args(args: Sequence[str]) -> str:
    return " ".join(shlex.quote(str(a)) for a in args)


def _sureness(comparison: dict | None) -> str:
    """How sure a verdict is (``uncertainty.Comparison.to_dict``): ``" (92% sure: ...)"``, or nothing."""
    if not comparison:
        return ""
    low, high = comparison["interval"] or (None, None)
    spread = f"; the ratio {low:.2f}-{high:.2f}x at 80%" if low is not None else ""
    return (f" ({comparison['confidence']:.0%} sure, from pdmux's error on {comparison['pairs']} same-server "
            f"pairs of public runs{spread})")


def _verdict(f: Finding) -> str:
    """``pdmux capacity``'s verdict (:meth:`pdmux_cli.simulate.capacity.CapacityResult.verdict_finding`)."""
    kind, v = f.code.rsplit(".", 1)[1], f.values
    if kind == "none_simulated":
        return "no policy simulated"
    if kind == "only":
        return f"{v['policy']['label']} sustains {rate_text(v['policy'])} req/s{_on(v['policy'])}"
    if kind == "no_policy_meets":
        return (
            f"no policy meets the SLO for {v['target']:.0%} of requests at any rate tried: loosen the SLO "
            "or use a faster GPU"
        )
    pd, other = v["pdmux"], v["other"]
    unequal = (
        ""
        if v["equal_gpus"]
        else (
            f" (not at equal GPU count: {pd['label']} on {pd['gpus']} GPU(s), {other['label']} on "
            f"{other['gpus']}; per "
            f"GPU {pd['per_gpu_rps']:.3g} against {other['per_gpu_rps']:.3g} req/s)"
        )
    )
    on_pd, on_other = (_on(pd), _on(other)) if not unequal else ("", "")
    sure = _sureness(v.get("comparison"))
    if kind == "too_close":
        c = v["comparison"]
        return (
            f"too close to call: {pd['label']} sustains {rate_text(pd)} req/s{on_pd} against "
            f"{rate_text(other)} for {other['label']} ({c['ratio']:.2f}x), but pdmux's error on that ratio "
            f"spans {c['interval'][0]:.2f}-{c['interval'][1]:.2f}x (80%, from same-server public runs): "
            "measure both (pdmux bench, bench_serving) before choosing"
            if c["interval"] else
            f"too close to call: {pd['label']} {rate_text(pd)} against {rate_text(other)} req/s for "
            f"{other['label']}, and too few measured pairs to bound the error"
        )
    if kind == "pdmux_serves_more":
        gain = f"+{v['gain']:.0%}" if v["gain"] is not None else "where it meets the SLO at no rate"
        if v["gain"] is not None and pd["bound"] == "above" and other["bound"] != "above":
            # met the SLO at every rate tried: the gain is a floor, and no error bounds a floor
            gain += f" or more ({pd['label']} met the SLO at every rate tried)"
        return (
            f"{pd['label']} sustains {rate_text(pd)} req/s{on_pd} against {rate_text(other)} for "
            f"{other['label']}: {gain}{unequal}{sure}; enable it with: {_sglang_args(v['launch'])}"
        )
    if kind == "tie":
        on = f" on {pd['gpus']} GPUs" if pd["gpus"] > 1 and not unequal else ""
        return (
            f"{pd['label']} and {other['label']} both sustain {rate_text(pd)} req/s{on}{unequal}: "
            "--enable-pdmux "
            "buys nothing here"
        )
    more = (
        f"{other['label']} serves more ({rate_text(other)} req/s{on_other} against {rate_text(pd)} for "
        f"{pd['label']}){unequal}{sure}"
    )
    if kind == "disagg_serves_more":
        d = v["disagg"]
        tp_flag = f" --tp-size {d['tp']}" if d["tp"] > 1 else ""
        return (
            f"{more}: deploy it as {d['prefill']} prefill server(s) with --disaggregation-mode prefill "
            f"--chunked-prefill-size -1{tp_flag} and {d['decode']} decode server(s) with "
            "--disaggregation-mode "
            f"decode{tp_flag}, behind python -m sglang_router.launch_router --pd-disaggregation --prefill "
            "URL ... "
            "--decode URL ..."
        )
    return f"{more}: keep it ({' '.join(v['launch'])})"


def _tune_verdict(f: Finding) -> str:
    """``pdmux tune``'s verdict (:meth:`pdmux_cli.simulate.tune.TuneResult.verdict_finding`)."""
    kind, v = f.code.rsplit(".", 1)[1], f.values
    if kind == "best_only":
        return f"best pdmux config: {v['config']}"
    text = (
        f"pdmux ({v['config']}) meets the SLO for {v['attainment']:.1%} of requests ({v['goodput_rps']:.3g} "
        f"req/s); {v['rival']} for {v['rival_attainment']:.1%} ({v['rival_goodput_rps']:.3g} req/s)"
    )
    if kind == "tie":
        return text + ": a tie on this trace; --enable-pdmux buys nothing here"
    if kind == "too_close":
        c = v["comparison"]
        spread = (f"{c['interval'][0]:.2f}-{c['interval'][1]:.2f}x" if c["interval"] else "unbounded")
        return (text + f": too close to call (goodput {c['ratio']:.2f}x, and pdmux's error on that ratio "
                f"spans {spread} at 80%, from same-server public runs); measure both before choosing")
    sure = _sureness(v.get("comparison"))
    if kind == "pdmux":
        return text + f"{sure}: turn on --enable-pdmux"
    return text + f"{sure}: keep {v['rival']}"


def _overload(f: Finding) -> str:
    """Tune's note on a winner that misses the target because requests queue (``tune.overload_note``)."""
    kind, v = f.code.rsplit(".", 1)[1], f.values
    if kind == "offline":
        return (
            f"the trace's {v['requests']} requests all arrive at once: TTFT p99 {v['ttft_p99_ms'] / 1e3:.3g} "
            "s is "
            "mostly queueing behind them (send them over time, or size the GPU with pdmux capacity on a "
            "trace "
            "with arrival times)"
        )
    where = "GPU" if v["gpus"] == 1 else f"{v['gpus']} GPUs"
    if kind == "growing":
        last, first = v["last_quarter_ttft_ms"], v["first_quarter_ttft_ms"]
        waits = (
            "never get a first token"
            if math.isinf(last)
            else f"wait {last / 1e3:.3g} s for their first token"
        )
        head = (
            f"the trace overloads the {where} at its rate ({v['trace_rps']:.3g} req/s): its last requests "
            f"{waits} "
            f"(median), its first {first / 1e3:.3g} s (the queue grows)"
        )
    else:
        head = (
            f"the trace's bursts overload the {where}: TTFT p99 {v['ttft_p99_ms'] / 1e3:.3g} s, where the "
            "longest "
            f"prompt's prefill alone takes {v['longest_prefill_ms'] / 1e3:.2g} s (requests queue)"
        )
    stopped = v.get("stopped_runs", 0)
    searched = (f" ({stopped} of the search's {v['runs']} runs stopped once their misses settled that they "
                "miss it)") if stopped else ""
    if v["sized_rps"] <= 0:
        return (head + f"; the winner meets the SLO for {v['target']:.0%} of requests at no rate "
                f"tried{searched}")
    return (
        head
        + f"; the winner meets the SLO for {v['target']:.0%} of requests up to {v['sized_rps']:.3g} req/s, "
        f"{v['sized_rps'] / v['trace_rps']:.2g}x the trace's {v['trace_rps']:.3g} req/s{searched} (pdmux "
        "capacity sizes every policy)"
    )


# --- the workflows' notes and the core's stored sources (capacity, simulate, tune, calibrate, workload,
# --- pdmux YAML, planning inputs, splits, estimate; KV link, CPU and serving terms, KV cache) -----------


def _dp_launch(f: Finding) -> str:
    """capacity's note on its verdict's DP flags (``capacity.dp_launch``)."""
    v = f.values
    return (
        f"DP {v['dp']}: the verdict's --dp-size {v['dp']} --load-balance-method {v['method']} runs the "
        f"replicas as one SGLang server (its data-parallel controller, {v['gpus']} GPUs); {v['dp']} "
        "servers with the other flags behind sgl-router are the same replicas. SGLang 0.5.23's checks do "
        "not refuse --dp-size with --enable-pdmux (srt/arg_groups/validation_hook.py), but pdmux under DP "
        "is untried here"
    )


def _disagg_launch(f: Finding) -> str:
    """capacity's note on how a disaggregation's instances are launched (``capacity.disagg_launch``)."""
    v = f.values
    return (
        f"{v['label']}: {v['prefill']} prefill server(s) (--disaggregation-mode prefill "
        f"--chunked-prefill-size -1: whole prompts, as simulated) and {v['decode']} decode server(s) "
        f"(--disaggregation-mode decode), each TP {v['tp']}, fronted by a router: python -m "
        "sglang_router.launch_router --pd-disaggregation "
        "--prefill URL ... --decode URL ... (SGLang 0.5.23 refuses --enable-pdmux with either mode: "
        "srt/arg_groups/validation_hook.py)"
    )


def _bad_rows(f: Finding) -> str:
    """A trace's unreadable rows (``workload.bad_rows``): the count, the file, the first few."""
    v = f.values
    shown = "; ".join(f"line {line}: {why}" if line > 0 else why for line, why in v["examples"])
    more = ", first: " if v["rows"] > len(v["examples"]) else ": "
    return f"{v['rows']} bad row(s) skipped in {v['source']}{more}{shown}"


def _past_context(f: Finding) -> str:
    """A trace file's requests past the context length (``workload.past_context``): SGLang rejects them
    (0.5.23 ``TokenizerManager._validate_one_request``), so they are counted as the server's rejections,
    not as bad rows; the limit names ``--context-length`` where it replaced the model's own."""
    v = f.values
    limit = (f"the context length of {v['context_tokens']:,} ({flag('context_length')}; "
             f"{v['model']}'s own: {v['own_context']:,})" if v["own_context"] else
             f"{v['model']}'s context length of {v['context_tokens']:,} (max_position_embeddings)")
    shown = "; ".join(f"request {i}: {prompt} + {output} tokens" for i, prompt, output in v["examples"])
    first = "first: " if v["rejected"] > len(v["examples"]) else ""
    return (f"{count_text(v['rejected'], 'request')} of {v['requests']} in {v['source']} rejected by the "
            f"server, not replayed: prompt + output past {limit}, which SGLang refuses (\"longer than the "
            f"model's context length\", as an error to the client); {first}{shown}")


def _bench_serving_source(f: Finding) -> str:
    """The serving terms' source in a calibration file (``calibrate.source.bench_serving``)."""
    files = "; ".join(f"sglang.bench_serving {name}" for name in f.values["files"])
    return f"{files} ({f.values['runs']} runs)"


#: Where a KV link's bandwidth and latency come from (``disagg.kv_link_source``'s ``bandwidth`` and
#: ``latency``): :data:`pdmux_cli.multigpu.disaggregation.RDMA_BYTES_PER_S` and ``RDMA_LATENCY_S`` cite
#: theirs.
_KV_LINK_FIGURES = {
    "bandwidth": {"rdma": "RDMA 400 Gb/s per GPU, line rate: one ConnectX-7 port per GPU, NVIDIA datasheet",
                  "profile": "the {gpu} profile's {link} figure per GPU and direction",
                  "given": "{flag.kv_link_gb_s}", "none": ""},
    "latency": {"rdma": "NCCL tuning.cc hwLat NET", "profile": "the profile's {link} latency",
                "given": "{flag.kv_link_latency_us}", "none": ""},
}


def _kv_link_source(f: Finding) -> str:
    """Where a KV link's figures come from and why that link (``disagg.kv_link_source``)."""
    v = f.values
    names = {"gpu": v["gpu"], "link": v["link"], "flag": _FlagNames()}
    bandwidth = _KV_LINK_FIGURES["bandwidth"][v["bandwidth"]].format(**names)
    latency = _KV_LINK_FIGURES["latency"][v["latency"]].format(**names)
    if v["given"]:
        why = f"{flag('kv_link')} {v['link']}"
    elif v["gpus"] > v["per_node"]:
        why = f"{v['gpus']} GPUs span nodes of {v['per_node']}"
    else:
        why = f"{v['gpus']} GPUs fit one node of {v['per_node']}"
    return f"{bandwidth}; latency: {latency}; {why}"


def _serving_options(f: Finding) -> str:
    """A serving profile with request-path terms given as options (``costmodel.serving_options``)."""
    given = ", ".join(f"{flag(name)} {value:g}" for name, value in f.values["given"].items())
    return f"{f.values['base']}; {given}"


def _kv_cache_source(f: Finding) -> str:
    """Which option or rule chose a KV cache's bytes per element (``kv_cache.*``)."""
    v, kind = f.values, f.code.rsplit(".", 1)[1]
    if kind == "bytes_given":
        return f"{flag('kv_bytes')} {v['kv_bytes']:g}"
    if kind == "dtype_given":
        return f"{flag('kv_cache_dtype')} {v['dtype']}"
    why = ("the checkpoint's kv_cache_quant_algo FP8" if v["dtype"].startswith("fp8")
           else f"the model's dtype ({v['dtype']})")
    return f"{flag('kv_cache_dtype')} auto: {why}"


def _allreduce_nearest(f: Finding) -> str:
    v = f.values
    more = (f", NCCL's time plus {v['hop_us']:g} us for each of {v['extra_steps']} extra ring steps"
            if v["extra_steps"] else "")
    return (f"all-reduce over {v['tp']} GPUs: the fit for {v['nearest']} GPUs (measured: "
            f"{', '.join(map(str, v['measured']))}){more}")


def _equal_gpus(f: Finding) -> str:
    v = f.values
    x, y, own, dp, tp, gpus = v["x"], v["y"], v["instance_tp"], v["dp"], v["tp"], v["gpus"]
    if f.code == "deploy.equal_gpus":
        others = (f"DP {dp} replicas behind the router ({v['method']}) of TP {tp}" if dp > 1
                  else f"one server of TP {tp}")
        return (f"every policy on {gpus} GPUs: disagg {x}P{y}D as {x + y} instances of TP {own}, the "
                f"others as {others}")
    return (
        f"not at equal GPU count: disagg {x}P{y}D uses {gpus} GPUs (TP {own} each), the other policies "
        f"DP {dp} x TP {tp} = {dp * tp} (give {flag('dp')}, {flag('tp')} or {flag('disagg_tp')} so that "
        "they match)"
    )


def _burst(f: Finding) -> str:
    v = f.values
    requests, servers = v["requests"], v["servers"]
    where = (f", {requests / servers:.0f} a server: a burst its {servers} servers drain" if servers > 1
             else ": a burst")
    return (f"{v['policy']}: at {v['rate_rps']:.3g} req/s the {requests} requests arrive within "
            f"{v['span_s']:.3g} s{where}, not a sustained rate (the rate is optimistic); give more requests "
            f"({flag('max_requests')}, {flag('duration')})")


def _disagg_alone(f: Finding) -> str:
    v = f.values
    return (f"disagg {v['x']}P{v['y']}D on {v['gpus']} GPUs: {v['x'] + v['y']} instances of TP "
            f"{v['instance_tp']}")


TEMPLATES: dict[str, str | Callable[[Finding], str]] = {
    # workflows/deployment.plan_deployment: how the policies use the GPUs
    "deploy.nothing_to_route": (
        "one instance a side and one server: {flag.load_balance_method} has nothing to route"
    ),
    "deploy.disagg_alone": _disagg_alone,
    "deploy.equal_gpus": _equal_gpus,
    "deploy.unequal_gpus": _equal_gpus,
    # workflows/capacity.policy_notes and capacity's run notes
    "capacity.burst": _burst,
    "capacity.met_every_rate": "{policy}: met the target at every rate tried, up to {rate_rps:.3g} req/s",
    "capacity.crashes_at_some_rates": (
        "{policy}: SGLang 0.5.23 crashes with this config at some rates (no manual_divisions threshold "
        "matches a decode batch; 'pdmux check-config' says which): those runs count as missing the SLO; "
        "{flag.unreleased_fallback} sizes the unreleased branches' behaviour instead"
    ),
    "capacity.missed_every_rate": (
        "{policy}: missed the target at every rate tried, down to {rate_rps:.3g} req/s (a single request "
        "may already miss the SLO: see pdmux estimate)"
    ),
    "capacity.too_few_requests": (
        "only {requests} requests: too few to measure a sustained rate (their burst drains at any rate); "
        "give a trace of at least {minimum}"
    ),
    # workflows/gen_config.levels_findings: the notes under gen-config --slo-itl's table of levels
    "gen_config.slo_batch_range": (
        "sized for decode batches 1-{max_bs} (the most requests SGLang's KV pool under pdmux holds at this "
        "context, within max_running_requests), at {context}"
    ),
    "gen_config.slo_levels_merged": (
        "the rule asked for {needed} levels; {levels} fit {flag.sm_group_num} {sm_group_num}: some batch "
        "sizes get the next larger level (more decode SMs than they need, ITL within the target)"
    ),
    "gen_config.slo_at_the_edge": (
        "levels sized for exactly {target_ms:g} ms leave the rounds at its edge: a batch holding longer "
        "requests than assumed goes past it; pdmux tune tries these levels and ones for 0.9x and 0.8x "
        "{target_ms:g} ms on a trace, and capacity sizes them ({flag.config}, repeatable)"
    ),
    "gen_config.slo_unmeetable": lambda f: (  # the ITL at the largest batch when it is past from_bs
        "from decode batch {from_bs} on, even the largest decode share, {prefill_sms}/{decode_sms} SMs, "
        "misses {target_ms:g} ms: {itl_ms:.1f} ms there"
        + (" ({itl_at_max_ms:.1f} ms at {max_bs})" if f.values["max_bs"] > f.values["from_bs"] else "")
        + ("; fewer decoding requests (SGLang's --max-running-requests) or more GPUs ({flag.tp}) meet it"
           if f.values["from_bs"] > 1 else
           ": not even one request meets it on this GPU beside a running prefill; raise the SLO, or try "
           "more GPUs ({flag.tp}) or a faster GPU")
    ).format(**f.values, flag=_FlagNames()),
    # workflows/simulate.simulate's run notes
    "simulate.interval_not_pdmux": (
        "pdmux: {flag.prefill_decode_interval} does not apply (SGLang's pdmux loop runs a decode step every "
        "round whatever it prefills)"
    ),
    "simulate.nothing_to_plot": "no request completed under any policy: nothing to plot, {plot} not written",
    "simulate.failed_rows": "{rows} failed request row(s) (0 response tokens) skipped",
    # workflows/simulate.speed_notes: what ran one decode step at a time instead of at event speed
    "simulate.step_by_step": (
        "every decode step simulated one at a time ({flag.step_by_step}: the reference loop the event-speed "
        "runs are checked against; the same figures, slower)"
    ),
    "simulate.step_by_step_prefix_cache": (
        "the prefix cache (the trace's hash_ids) under speculative decoding keeps every schedule at one "
        "decode step (pdmux: one round) at a time (each checks the cache's eviction against fractional KV "
        "growth; not on the event-speed path)"
    ),
    # workflows/simulate.simulate: policies refused, the model's pdmux support, each policy's own notes
    "simulate.not_simulated": "{policy} not simulated: {error}",
    "simulate.pdmux_not_simulated": "pdmux not simulated: {reason}",
    "simulate.pdmux_support_unknown": "pdmux: {reason}",
    "simulate.policy_note": "{policy}: {note}",
    # workflows/capacity: the model's pdmux support, the launch flags on more than one server
    "capacity.pdmux_not_sized": "pdmux not sized: {reason}",
    "capacity.pdmux_support_unknown": "pdmux: {reason}",
    "capacity.dp_launch": _dp_launch,
    "capacity.disagg_launch": _disagg_launch,
    # workflows/tune: DP replicas as one SGLang server
    "tune.dp_launch": ("DP {dp}: --dp-size {dp} runs the replicas as one SGLang server; SGLang 0.5.23's "
                       "checks do not refuse it with --enable-pdmux, but pdmux under DP is untried here "
                       "(servers behind sgl-router are the replicas simulated)"),
    # workflows/deployment: a router with nothing to route
    "deploy.one_server": "one server: {flag.load_balance_method} has nothing to route (give {flag.dp} N)",
    # workflows/workload.workload_notes
    "workload.bad_rows": _bad_rows,
    "workload.past_context": _past_context,
    # workflows/calibrate: unreadable inputs, and the sources a calibration file records
    "calibrate.unreadable": "{path}: {problem}",
    "calibrate.log_reading": "{path}: {summary}",
    "calibrate.more_unreadable": "{count} more unreadable one-batch line(s)",
    "calibrate.source.one_batch": "SGLang one-batch {file} ({results} results)",
    "calibrate.source.server_log": "SGLang server log {file} ({intervals} clean decode intervals)",
    "calibrate.source.bench_serving": _bench_serving_source,
    "calibrate.source.whole_gpu": "pdmux calibrate {flag.model} {model}",
    "calibrate.source.serving": "pdmux calibrate {flag.bench_serving} {flag.model} {model}",
    # workflows/pdmux_yaml.resolve_config: a config's warnings and the levels the driver rounds
    "pdmux_yaml.problem": "config: {where}: {message} [{rule}]",
    "pdmux_yaml.rounded": "config: {message}",
    # workflows/planning_inputs.load_pdmux_yaml: likewise, named by the file
    "planning.config_warning": "{path}: {where}: {message}",
    "planning.config_rounded": "{path}: {message}",
    # workflows/splits
    "splits.tp_same_levels": (
        "TP {tp}: every GPU builds these stream groups and picks the same level for the same decode batch "
        "(each rank's scheduler runs the same rule on the same batches); before a prefill joins the decode "
        "batch the ranks agree it is done with a CPU all-reduce (SGLang 0.5.23 "
        "srt/multiplex/multiplexing_mixin.py event_loop_pdmux)"
    ),
    # workflows/estimate
    "estimate.calibration_replaces_knobs": ("{flag.mfu} and {flag.bandwidth_efficiency} are not used with "
                                            "{flag.calibration}: the measured curves replace them"),
    # multigpu/disaggregation.kv_link: where a KV link's figures come from (KvLink.source)
    "disagg.kv_link_source": _kv_link_source,
    # costmodel.serving_terms and RooflineModel: CPU and serving terms given as options (their source)
    "costmodel.step_overhead": "{flag.step_overhead_ms} {step_overhead_ms:g}",
    "costmodel.per_request_overhead": "{base}; {flag.per_request_overhead_ms} {per_request_overhead_ms:g}",
    "costmodel.serving_options": _serving_options,
    # sglang/kv_cache.resolve_kv_cache: what chose the KV cache's bytes per element (KvCache.source)
    "kv_cache.bytes_given": _kv_cache_source,
    "kv_cache.dtype_given": _kv_cache_source,
    "kv_cache.auto": _kv_cache_source,
    # sglang_support.model_support: whether a revision can run pdmux for a model
    "sglang.support.no_scan": _model_support,
    "sglang.support.no_architectures": _model_support,
    "sglang.support.no_class": _model_support,
    "sglang.support.has_method": _model_support,
    "sglang.support.no_method": _model_support,
    # sglang/revision_rules.revision_findings
    "sglang.revision.startup_failure": "{revision}: {failure}",
    "sglang.revision.loader_not_read": (
        "{revision}: its pdmux_context.py was not read (not stored at {commit}): the YAML's load and "
        "start-up checks are not judged; levels are the manual_divisions as written"
    ),
    "sglang.revision.tp": _revision_tp,
    # policy.plan_groups
    "levels.fewer_groups": (
        "sm_group_num {asked}: SGLang's automatic rule finds {levels} split levels on this GPU, so "
        "{groups} stream groups; SGLang 0.5.23 still builds a decode attention backend, with its CUDA-graph "
        "state, for each of the {asked} groups (attention_backend_setup.py, decode_cuda_graph_runner.py "
        "maybe_init_pdmux): memory no level uses. sm_group_num {groups} gives the same levels without them"
    ),
    "levels.cuda_granularity": (
        "SGLang's automatic split raises 'Unsupported compute capability: {major}.{minor}' at start-up "
        "(issue #32933); these are the levels CUDA's granularity allows (multiples of 8). Deploy them as "
        "manual_divisions: pdmux gen-config writes them."
    ),
    "levels.release_crashes": (
        "{release} dies with UnboundLocalError here ({unreleased} takes group 1): no manual_divisions "
        "threshold is <= {decode_bs}"
    ),
    # estimate
    "estimate.level_rounded": (
        "level {asked_prefill_sms}/{asked_decode_sms} runs as {prefill_sms}/{decode_sms} SMs (the CUDA "
        "driver rounds green-context SM counts up to multiples of {multiple} on compute capability "
        "{major}.x): estimated at {prefill_sms}/{decode_sms}"
    ),
    "estimate.level_not_built": _level_not_built,
    "estimate.chapter_short_prefill": (
        "chapter model: the {prompt_tokens}-token prefill ({prefill_ms:.3g} ms) is shorter than reading the "
        "weights once ({weights_ms:.3g} ms): the chapter times prefill by its FLOPs alone (its design, for "
        "prompts long enough to be compute-bound), so short prompts are too fast here; {flag.cost_model} "
        "roofline times both"
    ),
    "estimate.mixed_chunk_no_row": (
        "mixed chunk {chunk}: no row, the {decode_bs} decode rows take the whole chunk (SGLang charges each "
        "one token of it), so the prompt waits until the decode batch shrinks"
    ),
    "estimate.no_pdmux_row": "group {group} gives one phase the whole GPU: no PD-multiplexing row",
    "estimate.does_not_fit": _does_not_fit,
    "estimate.no_memory_chunking_off": (
        "SGLang's default mem_fraction_static leaves no memory with chunking off (as pdmux needs) on {gpu}: "
        "launch with --mem-fraction-static"
    ),
    "estimate.kv_pool_short": (
        "SGLang's KV pool under pdmux (mem_fraction_static {mem_fraction:g}, chunking off) holds "
        "{pool_tokens:,} tokens, fewer than the {needed_tokens:,} this scenario holds at once: about "
        "--mem-fraction-static {suggested_fraction:.2f} holds them (less room for activations)"
    ),
    "estimate.tp_same_split": (
        "TP {tp}: every GPU runs the same {prefill_sms}/{decode_sms} split on its shard; before a prefill "
        "joins the decode batch the ranks agree it is done (a CPU all-reduce, SGLang's event_loop_pdmux)"
    ),
    "estimate.disagg_gpus": _disagg_gpus,
    "estimate.disagg_kv_link": (
        "disagg KV link: {link} ({link_source}); the prompt's KV, {transfer_gb:.3g} GB per GPU, crosses it "
        "in {transfer_ms:.3g} ms, so the disagg row's prefill time is its TTFT: {prefill_ms:.0f} ms of "
        "prefill on a whole GPU + the transfer; its ITL is the undisturbed decode step (no prefill runs on a "
        "decode instance)"
    ),
    "estimate.pdmux_support": _pdmux_support,
    "estimate.request_delay": _request_delay,
    # costmodel: where its efficiencies come from when not measured on this GPU
    "costmodel.efficiency.same_chip": ("kernel efficiencies measured on {fitted_on}, used for this same-chip "
                                       "GPU as fractions of its own datasheet figures"),
    "costmodel.efficiency.same_family": ("no kernel measurements for this GPU: efficiencies of {fitted_on} "
                                         "(compute capability {family}) applied to its datasheet figures"),
    "costmodel.efficiency.guess": ("no kernel measurements for compute capability {major}.x: efficiencies of "
                                   "{fitted_on} applied to this GPU's datasheet figures (a rough guess)"),
    "costmodel.fp8_block_gemm_stand_in": ("block-scaled fp8 GEMMs not measured on {fitted_on}: its "
                                          "per-tensor fp8 GEMM efficiency stands in"),
    "costmodel.no_fp8_gemm": ("no fp8 GEMM measured on {fitted_on}: its bf16 GEMM efficiencies applied to "
                              "the fp8 dense peak (likely too fast)"),
    "costmodel.no_fp8_kv_attention": ("decode attention over an fp8 KV cache not measured on {fitted_on}: "
                                      "its bf16-KV efficiency applied to 1-byte elements (likely too fast)"),
    "costmodel.bandwidth_family_stand_in": ("bandwidth vs SMs: compute capability {compute_capability} has "
                                            "no green-context measurement; the per-SM bandwidth of "
                                            "{stand_in} stands in"),
    "costmodel.moe.unknown_kernel": ("SGLang's {kernel} MoE ({dtype}) is not in any public table: the routed "
                                     "experts are timed as two GEMMs with the GEMM efficiency"),
    "costmodel.moe.stand_in": ("SGLang's {kernel} MoE in {dtype} not measured on {fitted_on}: its {other} "
                               "MoE efficiency stands in for the routed experts"),
    "costmodel.moe.none": ("no {dtype} MoE measured on {fitted_on}: the routed experts are timed as two "
                           "GEMMs with the GEMM efficiency (likely too fast at small batches)"),
    "costmodel.allreduce_stand_in": ("all-reduce constants measured on {gpu} ({interconnect}), used as "
                                     "fractions of this GPU's own link bandwidth"),
    "costmodel.allreduce_nearest_ranks": _allreduce_nearest,
    "costmodel.fp8_weights_marlin": ("fp8 weights in {math_dtype} math ({gpu} has no fp8 tensor cores, or "
                                     "{flag.flops_dtype}): SGLang runs them as weight-only fp8 (Marlin); "
                                     "modelled as 16-bit GEMMs reading 1-byte weights, not measured"),
    "costmodel.whole_gpu_other_model": "whole-GPU terms calibrated on {calibrated_on}, applied to {model}",
    # simulate/traces.py: what was done to the trace
    "trace.sorted": "{source} is not in time order: requests sorted by arrival",
    "trace.first_requests": lambda f: f"first {count_text(f.values['kept'], 'request')} of "
                                      f"{f.values['requests']}",
    "trace.rate_scaled": "arrival rate x{rate_scale:g}",
    "trace.retimed": "retimed to {qps:g} req/s (was {was_rps:.3g})",
    "trace.duration_cut": "arrivals within {duration_s:g} s: {kept} of {requests} requests",
    "trace.synthetic_past_context": ("{dropped} of the {requests} synthetic requests drew more tokens than "
                                     "{model}'s context length of {context_tokens:,} (the longest "
                                     "{longest_prompt} + {longest_output}): left out, as SGLang refuses "
                                     "them"),
    "trace.gsp_block_system": (
        "more prompt tokens than {max_blocks:,} hash ids: the prompts are hashed in blocks of "
        "{block_tokens:,} tokens (every system prompt whole blocks), not token by token: a cached system "
        "prompt is found as SGLang finds it, one still being prefilled in chunks only once whole"),
    "trace.gsp_block_widened": (
        "more prompt tokens than {max_blocks:,} hash ids, and system prompts of many lengths: blocks of "
        "{block_tokens:,} tokens instead, so a system prompt shares only its whole blocks "
        "({mean_lost:.0f} of its {mean_system:.0f} tokens on average go uncached where SGLang's radix cache "
        "matches them)"),
    # the simulator
    "simulate.never_fits_pool": (
        "{rejected} request(s) can never fit in the {pool}KV pool ({pool_tokens:,} tokens at "
        "mem_fraction_static {mem_fraction:g}): first is request {first} with {prompt_tokens} + "
        "{output_tokens} tokens; counted as missing the SLO"),
    "simulate.never_fits_decode_pool": (
        "{rejected} request(s) can never fit in a decode instance's KV pool ({pool_tokens:,} tokens): first "
        "is request {first} with {prompt_tokens} + {output_tokens} tokens; counted as missing the SLO"),
    "simulate.decode_retractions": (
        "{retractions} retraction(s) on the decode instances: requests sent back to their queue when decode "
        "ran out of KV slots, prefilled again there"),
    "simulate.retractions": ("{retractions} retraction(s): requests sent back to the queue when decode ran "
                             "out of KV slots, prefilled again with their outputs (SGLang's retract_decode)"),
    "simulate.server_note": lambda f: f"server {f.values['server']}: {render(f.values['note'])}",
    "calibrate.accept_length": ("{file}: speculative decoding, {lines} decode line(s) with a median accept "
                                "len of {accept_length:g} (simulate, capacity, tune and estimate take it as "
                                "{flag.speculative_accept_length} {accept_length:g}; those lines' steps are "
                                "not fitted)"),
    "estimate.speculative_round": (
        "{algorithm} ({num_steps} steps, topk {eagle_topk}, {num_draft_tokens} draft tokens; draft: "
        "{draft}): a decode ITL is one round, accept length {accept_length:g} (tokens a request): decode "
        "only {round_ms:.3g} ms a round = draft tree {draft_ms:.3g} + verify {verify_ms:.3g} + draft "
        "extend {extend_ms:.3g} ms of GPU work, plus CPU and per-request time; TPOT {tpot_ms:.3g} ms "
        "against {plain_ms:.3g} ms without speculation ({speedup:.2f}x; {speedup_range[0]:.2f}x if the "
        "per-request term is paid per verified token rather than once a round, which no measurement with "
        "speculation decides: {speedup_range[0]:.2f}-{speedup_range[1]:.2f}x)"),
    "estimate.pdmux_speculation": "the PD mux rows cannot run: {error}",
    "capacity.pdmux_speculation": "pdmux not sized: {error}",
    "policies.mixed_chunk_off": ("mixed-chunk {sizes}: SGLang turns mixed chunked prefill off beside "
                                 "{algorithm} (0.5.23 speculative_hook.py, supports_mixed_chunk), so each "
                                 "runs as chunked prefill of its size"),
    "policies.mixed_chunk_rounds": ("mixed-chunk beside {algorithm}: SGLang gives the running requests a "
                                    "plain one-token decode in a mixed step (0.5.23 speculative_hook.py); "
                                    "pdmux gives them a round of the accept length, so its mixed-chunk "
                                    "figures are optimistic where prefills are frequent"),
    "server.speculation": ("speculative decoding: {algorithm}, {num_steps} steps, topk {eagle_topk}, "
                           "{num_draft_tokens} draft tokens, accept length {accept_length:g} (pdmux's "
                           "input), draft {draft}; max running requests {max_running_requests}"),
    "server.context_length": ("context length {context_length:,} tokens ({flag.context_length}; "
                               "{model}'s own: {own:,})"),
    "server.context_length_over": ("context length {context_length:,} tokens ({flag.context_length}) is "
                                    "above {model}'s own {own:,} (max_position_embeddings): SGLang refuses "
                                    "it at start-up unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 "
                                    "(model_config.py _derive_context_length), and the model's outputs "
                                    "past its own length may be wrong"),
    "server.speculation_intervals": ("the intervals come from public serving runs without speculation; "
                                     "against public runs with it pdmux's speedup is about 1.3-1.5x the "
                                     "measured one (pdmux accuracy), so TPOT and ITL may be longer and "
                                     "throughput lower than the intervals say; each round pays the "
                                     "per-request term once ({per_request_ms:g} ms a request, as SGLang's "
                                     "V2 worker extends a request's output once a round): paid per "
                                     "verified token, a round of n requests would take "
                                     "{extra_per_request_ms:.3g} x n ms more, and at large batches the "
                                     "gain shrinks toward none (estimate's speedup range)"),
    "speculative.draft_vocab": ("the EAGLE3 draft scores {draft_vocab_size} hot tokens of the {vocab_size} "
                                "(its draft_vocab_size): its lm_head is that size"),
    "speculative.auto_params": ("{algorithm}: SGLang chooses {num_steps} steps, topk {eagle_topk}, "
                                "{num_draft_tokens} draft tokens for this model ({source}, "
                                "_auto_choose_speculative_params)"),
    "speculative.draft_tokens_adjusted": ("{flag.speculative_num_draft_tokens} {given} becomes "
                                          "{num_draft_tokens}: "
                                          "with topk 1 SGLang verifies num-steps + 1 tokens ({source})"),
    "simulate.never_routed": ("every server had crashed: {requests} request(s) never routed (counted as "
                              "missing the SLO)"),
    "simulate.itl_histogram": ("ITL percentiles over all tokens from a histogram of the {gaps:,} step gaps "
                               "(more than {exact_limit:,} kept exactly): at most {relative_error:.1e} off, "
                               "relatively; the maximum and every request's own p99 ITL (the SLO's) are "
                               "exact"),
    "simulate.release_crashes": ("SGLang 0.5.23 crashes here (UnboundLocalError in adjust_stream_groups) at "
                                 "t={at_s:.2f} s: a prefill starts with {decode_bs} decode request(s) and no "
                                 "manual_divisions threshold is <= that; the simulation stops, {unfinished} "
                                 "request(s) unfinished (counted as missing the SLO); fix the thresholds "
                                 "(the first one 0), or simulate the unreleased branches' fallback (group 1) "
                                 "with {flag.unreleased_fallback}"),
    "simulate.release_would_crash": ("SGLang 0.5.23 would crash (UnboundLocalError) at {choices} level "
                                     "choice(s), first at t={first_at_s:.2f} s with {decode_bs} decode "
                                     "request(s): no manual_divisions threshold is <= the decode batch; "
                                     "simulated with the unreleased branches' fallback (group 1), as asked"),
    # simulate/capacity.py: the verdict
    **{
        f"capacity.verdict.{k}": _verdict
        for k in (
            "none_simulated",
            "only",
            "no_policy_meets",
            "too_close",
            "pdmux_serves_more",
            "tie",
            "disagg_serves_more",
            "other_serves_more",
        )
    },
    # simulate/tune.py
    **{f"tune.verdict.{k}": _tune_verdict for k in ("best_only", "tie", "pdmux", "keep", "too_close")},
    **{f"tune.overload.{k}": _overload for k in ("offline", "growing", "bursts")},
    "tune.no_slo_levels": "no SLO levels tried: {reason}",
    "tune.workers_capped": "{flag.workers} {workers}: this machine gives the process {cores} core(s), so "
                           "{cores} worker(s) ran",
    "tune.winner_crashes_release": (
        "SGLang 0.5.23 crashes with the winner (no manual_divisions threshold matched a decode batch)"
    ),
    # bench/: the kernel bench's plan and run (plan.py, runner.py, greenctx.py, clocks.py)
    "bench.no_levels": "no SGLang levels: {reason}",
    "bench.level_rounded_up": ("level {prefill_sms}/{decode_sms}: {prefill_sms} prefill SMs is not a "
                               "multiple of {multiple}; the driver rounds it up"),
    "bench.l2_unknown": "L2 size of {gpu} unknown: cannot check the read buffer is >= {multiple}x L2",
    "bench.interrupted": "interrupted by Ctrl-C: the results hold the steps that finished",
    "bench.stopped": "stopped by an error: {error}",
    "bench.gate_retries": ("{retries} launch gate(s) opened before their work was queued and were retried "
                           "longer (the host queues launches slowly)"),
    "bench.serialised": lambda f: (
        "level {prefill_sms}/{decode_sms}: flop factor {flops_factor:.2f} + bandwidth factor "
        "{bandwidth_factor:.2f} <= {limit}: the GPU took turns instead of running both (overlap share "
        .format(**f.values)
        + ("?" if f.values["overlap_share"] is None else f"{f.values['overlap_share']:.0%}") + ")"),
    "bench.connections_set": lambda f: (
        "{var}={value} set by pdmux before CUDA started (one hardware work queue per stream; CUDA's default "
        "is 8, as SGLang sets".format(**f.values)
        + ("" if f.values["previous"] in (None, str(f.values["value"]))
           else f"; it was {f.values['previous']}")
        + ")"),
    "bench.connections_not_set": lambda f: (
        f"{f.values['var']} not set: torch had already started CUDA in this process (value in effect: "
        + (f.values["previous"] if f.values["previous"] is not None else "unset, CUDA default 8") + ")"),
    "bench.clocks.no_nvml": ("nvidia-ml-py is not installed: no SM or memory clocks recorded (pip install "
                             "nvidia-ml-py (in pdmux's bench extras))"),
    "bench.clocks.no_bus_id": "the driver gave no PCI bus id for the device: no SM or memory clocks recorded",
    "bench.clocks.nvml_failed": "NVML cannot be used ({error}): no SM or memory clocks recorded",
    "bench.clocks.no_device": ("NVML has no device at PCI bus {pci_bus_id} ({error}): no SM or memory clocks "
                               "recorded"),
    # bench/: the model replay (replay_plan.py, model_replay.py, replay_results.py)
    "bench.replay.layers_reused": ("{built} of {layers} layers built (all that fit beside the KV cache); "
                                   "each step runs all the model's layers, reusing the built ones in turn"),
    "bench.replay.weights_in_l2": lambda f: (
        f"the built layers' weights ({f.values['weight_bytes'] / 1e6:.0f} MB) are under "
        f"{f.values['multiple']}x the L2 ({f.values['l2_bytes'] / 1e6:.0f} MB): reused layers may be read "
        "from L2, not HBM, and decode comes out faster than the model would"),
    "bench.replay.bf16_weights": ("{model} stores {dtype} weights; the replay holds and multiplies them in "
                                  "bf16 (the predictions below are for bf16 weights too)"),
    "bench.replay.cpu": ("device cpu: no green contexts; every level ran on the whole CPU, decode and "
                         "prefill one after the other: these times test the replay, they say nothing of SM "
                         "partitions"),
    # workflows/bench.py, bench_replay.py: what a run could not write or compare
    "bench.no_calibration": lambda f: (
        "no calibration: the run stopped before the ceilings and a sweep point were measured"
        + (" (the calibration.yaml there is from an earlier run)" if f.values["stale"] else "")),
    "bench.no_matplotlib": "matplotlib is not installed: no curves.png (pip install 'pdmux[bench]')",
    "bench.replay.no_profile": ("no GPU profile matches {device}: no estimate to compare with (pass "
                                "{flag.gpu})"),
    "bench.replay.no_estimate": lambda f: (
        f"no {'calibrated ' if f.values['calibrated'] else ''}estimate: {f.values['error']}"),
    "bench.replay.no_prediction": "no prediction for level {prefill_sms}/{decode_sms}: {reason}",
    "bench.replay.moe_per_expert": ("MoE experts ran one GEMM each with the routing read on the host (this "
                                    "torch has no usable torch._grouped_mm): no CUDA graph for decode, MoE "
                                    "times are not SGLang's"),
    "bench.replay.gqa_repeated": ("this torch's scaled_dot_product_attention has no enable_gqa: K and V are "
                                  "repeated per query head (more memory traffic than SGLang's GQA kernels)"),
    "bench.replay.graph_capture_failed": "CUDA graph capture failed ({error}): decode steps ran eagerly",
    "bench.replay.no_calibration.cpu": "no calibration from a CPU run (its times are not a GPU's)",
    "bench.replay.no_calibration.not_measured": ("no calibration: the whole GPU's decode step was not "
                                                 "measured"),
    "bench.replay.no_calibration.no_profile": ("no calibration: no GPU profile matches {gpu} (pass "
                                               "{flag.gpu})"),
    "bench.replay.no_calibration.weights": ("no calibration: {model} stores {dtype} weights and the replay "
                                            "reads bf16 ones, so its decode step does not measure the "
                                            "model's fixed time"),
    "bench.replay.no_calibration.too_far": ("no calibration: the whole GPU's decode step is too far from the "
                                            "model to fit"),
    "bench.replay.no_calibration.refused": "no calibration: {reason}",
    # costmodel/whole_gpu_fit: what the whole-GPU fit could not tell apart, and the points it left out
    "fit.outliers_left_out": ("{dropped} point(s) more than {mismatch:g}x from the model left out as "
                              "outliers (first: {first})"),
    "fit.decode_fixed_time_only": ("the decode points hold about the same KV cache: only a fixed time per "
                                   "step fitted (batches or contexts {kv_spread:g}x apart also fit the KV "
                                   "read efficiency)"),
    "fit.prefill_one_scale": ("prefill points too alike to tell GEMMs from attention: one scale fitted on "
                              "both (prompts of very different lengths separate them)"),
}


def render(note: Finding | str) -> str:
    """One finding as its line (a note the core still writes as text passes through)."""
    if isinstance(note, str):
        return note
    template = TEMPLATES.get(note.code)
    if template is None:
        raise KeyError(f"no sentence for finding {note.code!r}")
    if callable(template):
        return template(note)
    return template.format(**note.values, flag=_FlagNames())


def render_all(notes: Iterable[Finding | str]) -> list[str]:
    """:func:`render` of each, in order."""
    return [render(n) for n in notes]


def as_dict(finding: Finding) -> dict[str, Any]:
    """A finding as JSON: ``{"code", "values", "param"}`` (nested findings in its values likewise)."""
    values = {k: as_dict(v) if _is_finding(v) else v for k, v in finding.values.items()}
    return {"code": finding.code, "values": values, "param": finding.param}


class _FlagNames:
    """``{flag.NAME}`` in a template: the flag of parameter NAME."""

    def __getattr__(self, name: str) -> str:
        return flag(name)


def json_default(value: Any) -> Any:
    """``json.dumps``'s ``default``: a finding left in a result's notes is written as its line, a layout as
    its text."""
    if _is_finding(value):
        return render(value)
    if _is_layout(value):
        return layout_text(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _is_finding(value: Any) -> bool:
    """A :class:`~pdmux_cli.util.errors.Finding` (by its fields: this module imports no core module)."""
    return hasattr(value, "code") and hasattr(value, "values") and hasattr(value, "param")


def _is_layout(value: Any) -> bool:
    """A :class:`~pdmux_cli.multigpu.disaggregation.Layout` (by its fields)."""
    return all(hasattr(value, name) for name in ("tp", "dp", "xpyd"))
