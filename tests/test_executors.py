"""Where sweeps run (simulate/executors.py): the same results here, on local processes and on Ray; DP replicas
simulated apart; a worker's failure named by its task; Ctrl-C cancelling Ray's tasks. The Ray tests run on a
real local Ray instance (two CPUs) and are skipped where ray is not installed."""

from __future__ import annotations

import csv
import io
import json
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from cli_assertions import assert_one_line_error
from typer.testing import CliRunner

from pdmux_cli.catalog.hardware import find_gpu
from pdmux_cli.catalog.model import load_model
from pdmux_cli.cli import app
from pdmux_cli.sglang import pdmux_config as pc
from pdmux_cli.simulate import executors, tune
from pdmux_cli.simulate.engine import make_setup
from pdmux_cli.simulate.executors import TaskFailed, executor
from pdmux_cli.simulate.report import metrics_dict
from pdmux_cli.simulate.runner import simulate_policies
from pdmux_cli.simulate.schedulers import ChunkedPolicy, MixedChunkPolicy, PdmuxPolicy, PrefillFirstPolicy
from pdmux_cli.simulate.servers import replicas_apart
from pdmux_cli.simulate.traces import load_trace, reshape, synthetic_trace
from pdmux_cli.util.errors import InputError, PdmuxError

FIX = Path(__file__).parent / "fixtures"
AZURE = str(FIX / "azure_conv_50.csv")
SETUP = make_setup(find_gpu("h100"), load_model("qwen3-8b"))
runner = CliRunner()


def _rows(out: io.StringIO) -> list[list[str]]:
    return list(csv.reader(io.StringIO(out.getvalue())))


def _same_metrics(a, b) -> None:
    assert [json.dumps(metrics_dict(m)) for m in a] == [json.dumps(metrics_dict(m)) for m in b]
    for x, y in zip(a, b):
        for key in x.per_request:
            assert [repr(v) for v in x.per_request[key]] == [repr(v) for v in y.per_request[key]], key


# ---- how many local processes
# -------------------------------------------------------------------------------


@pytest.mark.parametrize("cores,workers,tasks,processes", [
    (2, None, 3, 3),    # simulate's 3 default policies on 2 cores: all at once, the cores shared
    (2, None, 4, 4),
    (2, None, 5, 2),    # more than twice the cores: the cores' count, one task after another
    (2, None, 1, 1),
    (1, None, 2, 1),    # one core: sharing it gains nothing, so the tasks run here
    (8, None, 3, 3),
    (4, None, 100, 4),  # tune's candidates
    (2, 2, 3, 2),       # --workers caps it
    (2, 64, 3, 3),
    (2, 64, 100, 2),
    (1, 64, 2, 1),
])
def test_local_processes_share_the_cores_among_a_few_tasks(monkeypatch, cores, workers, tasks,
                                                            processes) -> None:
    from pdmux_cli.simulate import pool

    monkeypatch.setattr(pool, "default_workers", lambda: cores)
    assert executors.local_workers(workers, tasks) == processes


def test_three_policies_on_three_processes_give_what_one_gives(monkeypatch) -> None:
    from pdmux_cli.simulate import pool

    monkeypatch.setattr(pool, "default_workers", lambda: 2)
    trace = load_trace(AZURE)
    policies = [PdmuxPolicy(), ChunkedPolicy(8192), MixedChunkPolicy(512)]
    with executor("local", None, 3) as ex:
        assert ex.workers == 3
    here = simulate_policies(trace, SETUP, policies, 1000, 60, workers=1)
    apart = simulate_policies(trace, SETUP, policies, 1000, 60)
    _same_metrics(here, apart)


# ---- DP replicas simulated apart
# -------------------------------------------------------------------------------


def test_round_robin_replicas_apart_give_what_the_router_gives() -> None:
    """Three and eight round-robin replicas, each simulated alone on its requests (two processes), against
    all of them behind the router in one process: the same metrics, per-request values and CSV rows."""
    trace = synthetic_trace(30, "uniform:100:6000", "exp:200", num_requests=400, seed=1)
    policies = [ChunkedPolicy(2048), MixedChunkPolicy(512), PrefillFirstPolicy(), PdmuxPolicy()]
    for dp in (3, 8):
        assert all(replicas_apart(p, SETUP, dp, "round_robin") for p in policies)
        together, apart = io.StringIO(), io.StringIO()
        one = simulate_policies(trace, SETUP, policies, 1000, 60, dp=dp, workers=1, csv=csv.writer(together))
        two = simulate_policies(trace, SETUP, policies, 1000, 60, dp=dp, workers=2, csv=csv.writer(apart))
        _same_metrics(one, two)
        assert together.getvalue() == apart.getvalue()
        assert {r[12] for r in _rows(apart)} == {str(i) for i in range(dp)}


def test_replicas_stay_behind_the_router_where_routing_depends_on_them() -> None:
    """total_requests needs every replica's queue at each arrival; a pdmux config SGLang 0.5.23 can crash on
    stops taking requests, which moves the round robin's turn. Both stay in one task: still the same."""
    crashing = PdmuxPolicy(pc.PdmuxConfig(sm_group_num=3, manual_divisions=((96, 36, 4),)))
    assert not replicas_apart(ChunkedPolicy(8192), SETUP, 3, "total_requests")
    assert not replicas_apart(crashing, SETUP, 3, "round_robin")
    assert replicas_apart(PdmuxPolicy(crashing.config, unreleased_fallback=True), SETUP, 3, "round_robin")
    assert not replicas_apart(ChunkedPolicy(8192), SETUP, 1, "round_robin")
    trace = reshape(load_trace(AZURE), rate_scale=8)
    for method in ("round_robin", "total_requests"):
        one = simulate_policies(trace, SETUP, [crashing, ChunkedPolicy(8192)], 1000, 60, dp=3, workers=1,
                                load_balance_method=method)
        two = simulate_policies(trace, SETUP, [crashing, ChunkedPolicy(8192)], 1000, 60, dp=3, workers=2,
                                load_balance_method=method)
        _same_metrics(one, two)


# ---- failures named by their task
# ------------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [1, 2])
def test_a_failed_task_names_what_it_was_simulating(workers) -> None:
    """A task that raises in a worker (here a malformed task for tune's evaluation) is reported as the task it
    was running; an InputError keeps its exit code 2 and gains the same prefix."""
    trace = reshape(load_trace(AZURE), max_requests=10)
    with pytest.raises(TaskFailed, match=r"while simulating pdmux config auto, 8 groups: ValueError"), \
            executor("local", workers, tasks=2) as ex:
        ex.run(tune._evaluate, ex.share(("not", "a", "task")), [PdmuxPolicy(), PdmuxPolicy()],
               ["pdmux config auto, 8 groups"] * 2)
    assert TaskFailed.exit_code == 1
    with pytest.raises(InputError,
                       match=r"^pdmux config x: the simulation passed its budget of 10 decode steps"), \
            executor("local", workers, tasks=2) as ex:
        ex.run(tune._evaluate, ex.share((trace, SETUP, 1000, 60, 1, "round_robin", 10)), [PdmuxPolicy()] * 2,
               ["pdmux config x"] * 2)


def _square(shared: int, x: int) -> int:
    if x < 0:
        raise ValueError("negative")
    return shared * x * x


@pytest.mark.parametrize("workers", [1, 2])
def test_backfill_runs_background_tasks_beside_the_callers(workers) -> None:
    """The caller's tasks come back to it alone, as on the executor; the background ones start while fewer
    tasks run than there are workers (two: beside the caller's first; one: none before drain) and drain
    returns their values in order, on_done told of each."""
    done: list[tuple[int, int]] = []
    with executor("local", workers, tasks=2) as ex:
        two = ex.workers == 2  # (one where this machine has one core)
        beside = executors.Backfill(ex, [(_square, 10, k, f"background {k}") for k in range(5)],
                                    lambda i, v: done.append((i, v)))
        got, started = [], []
        for x in (1, 2, 3):
            beside.submit(_square, 1, x, f"mine {x}", tag=x)
            assert beside.pending() == 1
            job = beside.next_done()
            got.append((job.tag, job.result()))
            assert beside.pending() == 0
            started.append(len(done) + ex.pending())  # background tasks finished or in flight
        assert beside.drain() == [0, 10, 40, 90, 160]
    assert got == [(1, 1), (2, 4), (3, 9)]
    assert sorted(done) == [(k, 10 * k * k) for k in range(5)]
    assert (started[0] >= 1) if two else started == [0, 0, 0]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_failed_background_task_names_itself(workers) -> None:
    with pytest.raises(TaskFailed, match=r"while simulating background -1: ValueError"), \
            executor("local", workers, tasks=2) as ex:
        beside = executors.Backfill(ex, [(_square, 1, -1, "background -1")])
        beside.submit(_square, 1, 2, "mine")
        assert beside.next_done().result() == 4
        beside.drain()


def test_tune_past_its_step_budget_names_the_config() -> None:
    r = runner.invoke(app,
                      ["tune", "--trace", AZURE, "--slo-ttft", "1000", "--slo-itl", "60", "--sm-group-nums",
                       "8",
                            "--divisors", "36", "--budgets", "65536", "--workers", "1", "--max-steps", "20"])
    assert_one_line_error(r, 2,
                          "pdmux config auto, 8 groups, div 36, budget 65536: the simulation passed its "
                                "budget of 20 decode steps")


@pytest.mark.parametrize(("args", "fragment"), [
    (["--executor", "dask"], "--executor must be one of local, ray"),
    (["--executor", ""], "--executor must be one of local, ray, got ''"),
    (["--ray-address", "auto"], "--ray-address applies to --executor ray"),
    (["--executor", "ray", "--ray-address", " "], "give a Ray address"),
    (["--max-steps", "-1"], "--max-steps"),
])
@pytest.mark.parametrize("command", ["simulate", "tune", "capacity"])
def test_executor_options_are_checked(command, args, fragment) -> None:
    base = {"simulate": ["simulate", AZURE], "capacity": ["capacity", AZURE],
            "tune": ["tune", "--trace", AZURE, "--slo-ttft", "1000", "--slo-itl", "60"]}[command]
    assert_one_line_error(runner.invoke(app, [*base, *args]), 2, fragment)


def test_ray_missing_is_one_line(monkeypatch) -> None:
    def missing():
        raise InputError(f"--executor ray needs Ray: {executors.RAY_EXTRA} (or --executor local, the "
                         "default)")

    monkeypatch.setattr(executors, "import_ray", missing)
    r = runner.invoke(app, ["simulate", AZURE, "--policies", "chunked", "--executor", "ray"])
    assert_one_line_error(r, 2, "pip install 'pdmux[ray]'")


# ---- --ray-address: checked, and probed before ray.init (issue 34) ----------------------------------------


@pytest.mark.parametrize(("address", "expected"), [
    ("auto", None), ("10.0.0.5:6379", ("10.0.0.5", 6379)), ("head:1", ("head", 1)),
    ("ray://head", ("head", 10001)), ("ray://head:10002", ("head", 10002)), ("[::1]:6379", ("::1", 6379)),
])
def test_ray_addresses_taken(address, expected) -> None:
    assert executors.ray_host_port(address) == expected


@pytest.mark.parametrize("address", ["127.0.0.1:99999", "127.0.0.1:0", "::::", "ray://", "http://h:1",
                                     "head", "head:", "head:x", "head:٦٣٧٩", "::1:6379"])
def test_a_ray_address_that_is_none_is_refused_before_anything_runs(address) -> None:
    r = runner.invoke(app, ["simulate", AZURE, "--executor", "ray", "--ray-address", address])
    assert_one_line_error(r, 2, "--ray-address must be auto, host:port")


class _NoRay:
    """Stands for the ray module where ray.init must not be reached."""

    def is_initialized(self) -> bool:
        return False

    def init(self, **kwargs) -> None:
        raise AssertionError("ray.init reached")


def _listener(reply: bytes | None):
    import socket
    import threading

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(4)

    def serve() -> None:
        conn, _ = sock.accept()
        conn.recv(64)
        conn.sendall(reply)
        conn.close()

    if reply is not None:
        threading.Thread(target=serve, daemon=True).start()
    return sock


@pytest.mark.parametrize(("reply", "fragment"), [
    ("closed", "Connection refused"),
    (b"HTTP/1.1 400 Bad Request\r\n\r\n", "it answers, but not as a Ray cluster (no gRPC there)"),
    (None, "timed out"),
])
def test_a_ray_address_that_is_no_cluster_fails_in_seconds(monkeypatch, reply, fragment) -> None:
    """ray.init retries such an address for minutes (and prints Ray's own warnings meanwhile): refused by a
    probe first, one line, exit 1."""
    monkeypatch.setattr(executors, "import_ray", _NoRay)
    monkeypatch.setattr(executors, "RAY_CONNECT_TIMEOUT_S", 0.5)
    sock = _listener(None if reply == "closed" else reply)
    port = sock.getsockname()[1]
    if reply == "closed":
        sock.close()
    try:
        r = runner.invoke(app, ["simulate", AZURE, "--policies", "chunked", "--executor", "ray",
                                "--ray-address", f"127.0.0.1:{port}"])
    finally:
        sock.close()
    assert_one_line_error(r, 1,
                          f"--executor ray: cannot reach the Ray cluster at 127.0.0.1:{port}: {fragment}")


@contextmanager
def _h2_server(answer: bool, status: bytes = b"\x88") -> Iterator[str]:
    """The address of a listener that speaks HTTP/2 as a gRPC server starts (an empty SETTINGS frame), then,
    where ``answer``, replies to the call on stream 1 with a trailers-only HEADERS frame of ``status`` (as a
    server that does not know the method, or refuses it unauthenticated, does), else stays silent with the
    connection open (an HTTP/2 server that is no gRPC service: ray.init waited on one for good)."""
    import socket
    import threading

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(4)
    done = threading.Event()

    def serve() -> None:
        conn, _ = sock.accept()
        conn.recv(64)
        conn.sendall(b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        if answer:
            conn.recv(4096)  # the SETTINGS ACK, HEADERS and DATA (one send)
            block = status  # ':status: 200' as HPACK's static entry 8 by default
            conn.sendall(len(block).to_bytes(3, "big") + b"\x01\x05" + (1).to_bytes(4, "big") + block)
        done.wait(10)
        conn.close()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"127.0.0.1:{sock.getsockname()[1]}"
    finally:
        done.set()
        sock.close()


def test_a_grpc_server_passes_the_probe() -> None:
    with _h2_server(answer=True) as address:
        executors._probe(address, "there")


def test_an_http2_server_answering_404_fails_the_probe() -> None:
    """An HTTP/2 server that answers the call with :status 404 (HPACK static entry 13) is no gRPC service:
    ray.init then waited for good (second fresh-user report)."""
    with _h2_server(answer=True, status=b"\x8d") as address, \
            pytest.raises(PdmuxError, match="not as a gRPC service"):
        executors._probe(address, "there")


def test_a_silent_http2_server_fails_the_probe_in_seconds(monkeypatch) -> None:
    """An address that speaks HTTP/2 but answers no gRPC call (fresh-user report: ray.init then waited for
    good, deaf to SIGTERM): refused when the probe's call goes unanswered."""
    monkeypatch.setattr(executors, "RAY_CONNECT_TIMEOUT_S", 0.5)
    start = time.monotonic()
    with _h2_server(answer=False) as address, \
            pytest.raises(PdmuxError, match="it answers HTTP/2, but not a gRPC call"):
        executors._probe(address, "there")
    assert time.monotonic() - start < 3


def test_a_failed_run_on_its_own_ray_shuts_it_down_without_cancelling() -> None:
    """Cancelling a task races its reply, and Ray's driver can abort on one (a stack dump, exit 1, Ray's
    processes left: 1 Ctrl-C in about 8 in the sweep): a run's own local Ray is shut down, tasks and all,
    while a cluster's tasks are still cancelled."""
    calls = []

    class FakeRay:
        def cancel(self, ref, force):
            calls.append(("cancel", ref))

        def shutdown(self):
            calls.append(("shutdown",))

    for owned, expected in ((True, [("shutdown",)]), (False, [("cancel", "task")])):
        calls.clear()
        ex = executors.OnRay.__new__(executors.OnRay)
        ex._ray, ex._owned, ex._queue, ex._running = FakeRay(), owned, deque(), {"task": None}
        ex.close(True)
        assert calls == expected and not ex._running


# ---- on a local Ray instance
# -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray instance of two CPUs for this module (the commands reuse it: they find Ray initialized)."""
    ray = pytest.importorskip("ray")
    import logging

    if ray.is_initialized():
        ray.shutdown()
    saved = executors._signal_handlers()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    executors._restore(saved)  # ray.init takes SIGTERM over, and keeps it after shutdown
    yield ray
    ray.shutdown()


@pytest.mark.ray
def test_ray_leaves_the_stop_signals_to_pdmux() -> None:
    """ray.init installs a SIGTERM handler of its own (and keeps it after shutdown): a run it starts gets
    pdmux's back, so SIGTERM stops it as Ctrl-C does (tasks cancelled, no half-written file)."""
    import signal

    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        ray.shutdown()
    mine = signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        ours = signal.getsignal(signal.SIGTERM)
        with executor("ray", 1) as ex:
            assert signal.getsignal(signal.SIGTERM) is ours and ex.workers == 1
        assert not ray.is_initialized()  # the run's own local Ray, stopped
    finally:
        signal.signal(signal.SIGTERM, mine)


def _json(args: list[str]) -> str:
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.stderr
    return r.stdout


@pytest.mark.ray
def test_tune_on_ray_gives_the_local_json_byte_for_byte(ray_cluster) -> None:
    args = ["tune", "--trace", AZURE, "--slo-ttft", "1000", "--slo-itl", "60", "--sm-group-nums", "3,8",
            "--divisors", "24,36", "--budgets", "16384,65536", "--workers", "2", "--rate-scale", "6",
            "--json"]
    local = _json(args)
    assert _json([*args, "--executor", "ray"]) == local
    assert json.loads(local)["workers"] == 2 and len(json.loads(local)["rows"]) > 10


@pytest.mark.ray
def test_capacity_on_ray_gives_the_local_json_byte_for_byte(ray_cluster) -> None:
    args = ["capacity", AZURE, "--policies", "pdmux,chunked,mixed-chunk", "--workers", "2", "--json"]
    assert _json([*args, "--executor", "ray"]) == _json(args)


@pytest.mark.ray
def test_simulate_on_ray_gives_the_local_json_and_csv(ray_cluster, tmp_path) -> None:
    """Per policy, and per round-robin replica (--dp 3): the JSON and the --csv rows are the local ones."""
    outputs = {}
    for name, extra in (("local", []), ("ray", ["--executor", "ray"])):
        path = tmp_path / f"{name}.csv"
        out = _json(["simulate", AZURE, "--rate-scale", "8", "--dp", "3", "--workers", "2", "--csv",
                     str(path), "--json", *extra])
        outputs[name] = (out.replace(str(path), "CSV"), path.read_text())
    assert outputs["ray"] == outputs["local"]
    assert len(outputs["local"][1].splitlines()) == 1 + 3 * 50


@pytest.mark.ray
def test_a_failed_ray_task_names_what_it_was_simulating(ray_cluster) -> None:
    with pytest.raises(TaskFailed, match=r"while simulating chunked 8192 at 3 req/s: ValueError"), \
            executor("ray", 2, tasks=2) as ex:
        ex.run(tune._evaluate, ex.share(("not", "a", "task")), [ChunkedPolicy(8192)] * 2,
               ["chunked 8192 at 3 req/s"] * 2)


@pytest.mark.ray
def test_ctrl_c_cancels_the_ray_tasks(ray_cluster) -> None:
    """Two long simulations on the two CPUs; Ctrl-C (KeyboardInterrupt) in the driver: both are cancelled, the
    CPUs free again within seconds (not after the minutes the simulations take)."""
    ray = ray_cluster
    trace = synthetic_trace(5, 1024, 128, num_requests=300_000, seed=0)
    with pytest.raises(KeyboardInterrupt), executor("ray", 2, tasks=2) as ex:
        shared = ex.share((trace, SETUP, 1000, 60, 1, "round_robin", 0))
        for policy in (ChunkedPolicy(8192), PdmuxPolicy()):
            ex.submit(tune._evaluate, shared, policy, policy.label)
        deadline = time.monotonic() + 30
        while ray.available_resources().get("CPU", 0) > 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert ray.available_resources().get("CPU", 0) == 0  # both running
        raise KeyboardInterrupt
    deadline = time.monotonic() + 20
    while ray.available_resources().get("CPU", 0) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ray.available_resources().get("CPU", 0) == 2


def test_progress_comes_task_by_task_in_this_process() -> None:
    """One worker: each task runs when its turn comes, so tune's progress counts them one by one."""
    from pdmux_cli.simulate.tune import tune as run_tune

    calls = []
    trace = reshape(load_trace(AZURE), rate_scale=6)
    result = run_tune(trace, SETUP, 1000, 60, sm_group_nums=[3, 8], divisors=[36], budgets=[65536], workers=1,
                      progress=lambda done, total: calls.append((done, total)), schedules=())
    total = len(result.rows)
    assert calls == [(i, total) for i in range(1, total + 1)] and result.workers == 1


@pytest.mark.parametrize("command", ["simulate", "capacity", "tune"])
def test_executor_help_names_the_ray_extra(command) -> None:
    """rich took '[ray]' for markup and printed "pip install 'pdmux'" (fresh-user report)."""
    r = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    assert "pip install 'pdmux[ray]'" in r.stdout
