"""Green contexts of ``pdmux bench`` against a recording stand-in of cuda-python's driver: the driver
calls of a level (the whole-device case split once), balanced work queues on 13.1+ drivers,
CUDA_DEVICE_MAX_CONNECTIONS set before cuInit, refused splits told apart from failed launches, and the
install hints of the probe. No GPU needed."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest
from bench_fakes import FakeDriver, R

from pdmux_cli.bench import greenctx, runner
from pdmux_cli.messages import render
from pdmux_cli.util.errors import DeviceError, InputError


def _info(total=132, driver=12080, granularity=None):
    return greenctx.DeviceInfo(index=0, name="NVIDIA H100 80GB HBM3", sm_count=total,
                               compute_capability=(9, 0), l2_bytes=50 << 20, memory_bytes=80 << 30,
                               driver_version=driver, bindings_version="12.9.0", granularity=granularity,
                               resource_sm_count=total)


def _use(monkeypatch, fake):
    monkeypatch.setattr(greenctx, "driver_module", lambda: fake)
    return fake


def _driver_calls(fake):
    """The calls that build partitions, without handles (they depend on the order of creation)."""
    keep = []
    for call in fake.calls:
        if call[0] in ("ctx",):
            keep.append(call[:2])
        elif call[0] in ("gstream", "destroy-stream", "destroy-ctx"):
            keep.append(call[:1])
        else:
            keep.append(call)
    return keep


# ---- one split for a level that takes the whole device ----------------------------------------------


def test_whole_device_level_splits_once_for_prefill(monkeypatch) -> None:
    fake = _use(monkeypatch, FakeDriver(total=132))
    with greenctx.LevelPartitions(_info(132), 112, 20) as lv:
        assert lv.whole_device
        assert (lv.prefill.granted_sms, lv.decode.granted_sms, lv.pair_granted_sms) == (112, 20, 132)
    assert _driver_calls(fake) == [
        ("sm-resource", 132),
        ("split", 132, 112),  # never 132 (136 once rounded up to 8): more than the device has
        ("desc", (("sm", 112),)), ("ctx", 112), ("gstream",),
        ("desc", (("sm", 20),)), ("ctx", 20), ("gstream",),
        ("destroy-stream",), ("destroy-stream",), ("destroy-ctx",), ("destroy-ctx",),
    ]


def test_h20_level_whose_rounded_total_exceeds_the_device(monkeypatch) -> None:
    """H20: 78 SMs; SGLang's level 56/22 adds up to 78, which rounds up to 80 > 78."""
    fake = _use(monkeypatch, FakeDriver(total=78))
    with greenctx.LevelPartitions(_info(78), 56, 22) as lv:
        assert (lv.prefill.granted_sms, lv.decode.granted_sms, lv.pair_granted_sms) == (56, 22, 78)
    assert [c for c in fake.calls if c[0] == "split"] == [("split", 78, 56)]


def test_pair_below_the_device_still_splits_the_pair_first(monkeypatch) -> None:
    fake = _use(monkeypatch, FakeDriver(total=132))
    with greenctx.LevelPartitions(_info(132), 64, 20) as lv:
        assert not lv.whole_device
        assert (lv.prefill.granted_sms, lv.decode.granted_sms, lv.pair_granted_sms) == (64, 24, 88)
    calls = _driver_calls(fake)
    assert calls[:4] == [("sm-resource", 132), ("split", 132, 84), ("desc", (("sm", 88),)), ("ctx", 88)]
    assert ("split", 88, 64) in calls and not fake.live_ctx


@pytest.mark.parametrize(("p", "d", "whole"),
                         [(112, 20, True), (100, 30, True), (126, 4, True), (64, 60, False),
                                                (120, 5, False)])
def test_whole_device_rule(p, d, whole) -> None:
    lv = object.__new__(greenctx.LevelPartitions)
    lv.info, lv.prefill_sms, lv.decode_sms = _info(132), p, d
    assert lv.whole_device is whole  # 130 rounds up to 136 >= 132; 125 -> 128 < 132


def test_driver_granularity_decides_whole_device() -> None:
    lv = object.__new__(greenctx.LevelPartitions)
    lv.info, lv.prefill_sms, lv.decode_sms = _info(132, granularity=(4, 4)), 100, 30
    assert lv.whole_device  # 130 -> 132 in steps of 4: the device
    lv.prefill_sms = 96
    assert not lv.whole_device  # 126 -> 128 < 132


# ---- balanced work queues (driver 13.1+) -----------------------------------------------------------


def test_level_contexts_get_balanced_work_queues_on_13_1(monkeypatch) -> None:
    fake = _use(monkeypatch, FakeDriver(driver=13010, workqueue=True, wq_limit=32))
    with greenctx.LevelPartitions(_info(driver=13010), 112, 20) as lv:
        assert lv.prefill.workqueue == lv.decode.workqueue == "balanced, limit 16"
    descs = [c[1] for c in fake.calls if c[0] == "desc"]
    # half of 32 each, balanced scope
    assert descs == [(("sm", 112), ("wq", 1, 16)), (("sm", 20), ("wq", 1, 16))]


def test_intermediate_context_gets_no_work_queue(monkeypatch) -> None:
    fake = _use(monkeypatch, FakeDriver(driver=13010, workqueue=True, wq_limit=32))
    with greenctx.LevelPartitions(_info(driver=13010), 64, 20):
        pass
    descs = [c[1] for c in fake.calls if c[0] == "desc"]
    assert descs == [(("sm", 88),), (("sm", 64), ("wq", 1, 16)), (("sm", 24), ("wq", 1, 16))]


def test_solo_partition_gets_the_whole_limit(monkeypatch) -> None:
    fake = _use(monkeypatch, FakeDriver(driver=13020, workqueue=True, wq_limit=32))
    with greenctx.SmPartition(_info(driver=13020), 64) as part:
        assert part.partition.workqueue == "balanced, limit 32"
    assert [c[1] for c in fake.calls if c[0] == "desc"] == [(("sm", 64), ("wq", 1, 32))]


@pytest.mark.parametrize(("driver", "bindings_know"), [(12080, True), (13000, True), (13010, False)])
def test_no_work_queue_configuration_before_13_1(monkeypatch, driver, bindings_know) -> None:
    fake = _use(monkeypatch, FakeDriver(driver=driver, workqueue=bindings_know))
    with greenctx.LevelPartitions(_info(driver=driver), 112, 20) as lv:
        assert lv.prefill.workqueue == "shared"
    assert not [c for c in fake.calls if c[0] == "wq-resource"]
    assert all(len(c[1]) == 1 for c in fake.calls if c[0] == "desc")
    assert "13.1" in greenctx.workqueue_text(_info(driver=driver), fake)


def test_refused_work_queue_configuration_falls_back_to_shared(monkeypatch) -> None:
    fake = _use(monkeypatch, FakeDriver(driver=13010, workqueue=True, refuse_workqueue=True))
    with greenctx.LevelPartitions(_info(driver=13010), 112, 20) as lv:
        assert lv.prefill.workqueue == lv.decode.workqueue == "shared"
        assert "INVALID_RESOURCE_CONFIGURATION" in lv.workqueue_problem
    assert [c[0] for c in fake.calls].count("ctx-refused") == 1  # tried once, then not again for decode
    assert not fake.live_ctx and not fake.live_streams


# ---- CUDA_DEVICE_MAX_CONNECTIONS before cuInit -----------------------------------------------------


@pytest.fixture
def fresh_connections(monkeypatch):
    """No CUDA_DEVICE_MAX_CONNECTIONS set yet in this process; cuda-python 12.9 (fits a 12.8 driver).
    Without cuda-python installed (the test extra has none) a stand-in ``cuda.bindings`` module: only its
    ``__version__`` is read, the driver is the fake."""
    import types

    try:
        from cuda import bindings
    except ImportError:
        cuda = types.ModuleType("cuda")
        bindings = types.ModuleType("cuda.bindings")
        cuda.bindings = bindings
        monkeypatch.setitem(sys.modules, "cuda", cuda)
        monkeypatch.setitem(sys.modules, "cuda.bindings", bindings)

    monkeypatch.setattr(greenctx, "_connections_note", None)
    monkeypatch.delenv("CUDA_DEVICE_MAX_CONNECTIONS", raising=False)
    monkeypatch.setattr(bindings, "__version__", "12.9.0", raising=False)
    return monkeypatch


def test_max_connections_set_before_cuinit(fresh_connections) -> None:
    fake = _use(fresh_connections, FakeDriver())
    info = greenctx.probe_device(0)
    assert fake.calls[0] == ("cuInit", "32")  # the first driver call already saw it
    assert render(info.connections_note) == (
        "CUDA_DEVICE_MAX_CONNECTIONS=32 set by pdmux before CUDA started (one hardware work queue per "
        "stream; CUDA's default is 8, as SGLang sets)")
    assert (info.sm_count, info.driver_version, info.pci_bus_id) == (132, 12080, "0000:3B:00.0")


def test_max_connections_replaces_a_users_value_and_says_so(fresh_connections) -> None:
    fresh_connections.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    fake = _use(fresh_connections, FakeDriver())
    info = greenctx.probe_device(0)
    assert fake.calls[0] == ("cuInit", "32")
    assert render(info.connections_note).endswith("as SGLang sets; it was 1)")
    assert info.connections_note.values["previous"] == "1"
    assert greenctx.set_max_connections() == info.connections_note  # later calls: the first call's note


def test_max_connections_not_set_once_torch_started_cuda(fresh_connections) -> None:
    fresh_connections.setitem(sys.modules, "torch",
                              SimpleNamespace(cuda=SimpleNamespace(is_initialized=lambda: True)))
    env: dict[str, str] = {}
    note = greenctx.set_max_connections(env)
    assert env == {} and note.code == "bench.connections_not_set"
    assert render(note) == ("CUDA_DEVICE_MAX_CONNECTIONS not set: torch had already started CUDA in this "
                            "process (value in effect: unset, CUDA default 8)")


# ---- refused splits vs failed launches -------------------------------------------------------------


def test_only_split_calls_report_a_refused_split() -> None:
    refused = (R.CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION,)
    with pytest.raises(greenctx.SplitRefused, match="cannot give this split"):
        greenctx.call(refused, "cuDevSmResourceSplitByCount (x)", split=True)
    with pytest.raises(DeviceError) as err:
        greenctx.call(refused, "launching pdmux_read_bw")
    assert not isinstance(err.value, greenctx.SplitRefused) and "split" not in str(err.value)


def test_failed_launch_is_a_device_error_not_a_refusal(monkeypatch) -> None:
    w = object.__new__(runner.Workloads)
    w.drv = FakeDriver(launch_error=R.CUDA_ERROR_LAUNCH_FAILED)
    w._cu_streams = {}
    with pytest.raises(DeviceError, match="launching pdmux_spin failed with CUDA_ERROR_LAUNCH_FAILED") as err:
        w._launch("fn", 1, 1, SimpleNamespace(cuda_stream=7), ((), ()), "pdmux_spin")
    assert not isinstance(err.value, greenctx.SplitRefused)


def test_refused_split_is_split_refused(monkeypatch) -> None:
    fake = _use(monkeypatch, FakeDriver(total=132))
    with pytest.raises(greenctx.SplitRefused, match="130 prefill SMs of the device's 132 for level 130/2"), \
            greenctx.LevelPartitions(_info(132), 130, 2):
        pass  # 130 rounds up to 136
    assert not fake.live_ctx and not fake.live_streams


def test_level_that_cannot_fit_is_input_error(monkeypatch) -> None:
    _use(monkeypatch, FakeDriver(total=132))
    with pytest.raises(InputError, match="at most 132"):
        greenctx.LevelPartitions(_info(132), 64, 70)


# ---- install hints ---------------------------------------------------------------------------------


def test_install_hint_by_driver() -> None:
    cu12 = greenctx.install_hint(12080)
    assert "pdmux[bench-cu12]" in cu12 and "torch<2.11" in cu12 and "cuda-python>=12.8,<13" in cu12
    cu13 = greenctx.install_hint(13010)
    assert "pdmux[bench]" in cu13 and "torch" in cu13 and "cuda-python>=12.8" in cu13


def test_a_device_index_past_the_machines_names_the_device_option(fresh_connections) -> None:
    from pdmux_cli.messages import api_error_text

    _use(fresh_connections, FakeDriver())
    with pytest.raises(InputError) as caught:
        greenctx.probe_device(3)
    assert caught.value.param == "device"
    assert str(caught.value) == "--device 3: this machine has 1 CUDA device(s), numbered 0-0"
    assert api_error_text(caught.value) == "device 3: this machine has 1 CUDA device(s), numbered 0-0"


@pytest.mark.parametrize(("bindings", "fragment"), [("13.0.1", "needs a CUDA 13 driver"),
                                                    ("12.6.2.post1", "too old for the bench")])
def test_probe_names_the_cu12_extra_and_torch(fresh_connections, bindings, fragment) -> None:
    real_bindings = sys.modules["cuda.bindings"]
    _use(fresh_connections, FakeDriver(driver=12080))
    fresh_connections.setattr(real_bindings, "__version__", bindings, raising=False)
    with pytest.raises(DeviceError) as err:
        greenctx.probe_device(0)
    message = str(err.value)
    assert (fragment in message and "pdmux[bench-cu12]" in message and "torch<2.11" in message
            and "\n" not in message)


def test_cuda_python_without_bindings_is_named(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)
    monkeypatch.setattr(greenctx, "_installed_cuda_python", lambda: "12.4.0")
    with pytest.raises(DeviceError, match=r"cuda-python 12.4.0 has no cuda.bindings .*>= 12.8"):
        greenctx.driver_module()


def test_torch_built_for_a_newer_cuda_than_the_driver(monkeypatch) -> None:
    fake_torch = SimpleNamespace(__version__="2.11.0", version=SimpleNamespace(cuda="13.0"),
                                 cuda=SimpleNamespace(is_available=lambda: False))
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    with pytest.raises(DeviceError) as err:
        runner.import_torch(12080)
    assert "built for CUDA 13.0" in str(err.value) and "torch<2.11" in str(err.value)
    with pytest.raises(DeviceError, match="is_available"):
        runner.import_torch(13000)  # a CUDA 13 driver: the build fits, the GPU is what is missing


@pytest.mark.parametrize(("text", "parsed"),
                         [("12.6.2.post1", (12, 6, 2)), ("13.4.4", (13, 4, 4)), ("12.8.0rc1", (12, 8, 0)),
                                              ("?", ()), ("12", (12,))])
def test_version_tuple(text, parsed) -> None:
    assert greenctx.version_tuple(text) == parsed
