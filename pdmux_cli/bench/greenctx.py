"""CUDA green contexts through cuda-python (``cuda.bindings.driver``): device probe and SM partitions.

Written from the CUDA driver API's "Green Contexts" group (12.4 and 13.x, see
shared/reference/green-contexts.md) and the behaviour of sgl-kernel's
``create_greenctx_stream_by_value`` (shared/reference/sglang-pdmux.md), which SGLang uses:

- :class:`SmPartition`: one green context of ``s`` SMs (one split of the whole device), for the
  solo sweep;
- :class:`LevelPartitions`: both partitions of one level from ONE split, as sgl-kernel does: split
  the device for ``prefill + decode`` SMs, make an intermediate green context from that group, split
  its resource for ``prefill`` SMs; the group goes to prefill and the remainder to decode; a green
  context and a non-blocking stream for each; the intermediate is destroyed. A pair that takes the
  whole device (every SGLang level) splits the device once for ``prefill`` instead: no request for a
  rounded-up total larger than the device.

On drivers 13.1+ each green context that runs work also gets a balanced work-queue configuration
(``CU_WORKQUEUE_SCOPE_GREEN_CTX_BALANCED``, as PyTorch's ``torch/cuda/green_contexts.py`` builds it),
and :func:`probe_device` sets ``CUDA_DEVICE_MAX_CONNECTIONS=32`` before ``cuInit``: disjoint SMs alone
do not make kernels run at the same time (shared work queues can serialise them). A split the driver
refuses raises :class:`SplitRefused`; every other failure is a plain :class:`DeviceError`.

Both are context managers: every stream and green context is destroyed on exit, also on an error or
Ctrl-C (streams first, then contexts; a second Ctrl-C during the teardown is held until it ends).
Streams are created with ``cuGreenCtxStreamCreate`` (driver 12.5+) or, on 12.4, through
``cuCtxFromGreenCtx`` + push + ``cuStreamCreate`` + pop. The SM counts the driver granted are read
back with ``cuGreenCtxGetDevResource``.

cuda-python is imported inside the functions: this module imports on any machine.
"""

from __future__ import annotations

import abc
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass
from typing import Any

from ..util.errors import DeviceError, Finding, InputError
from ..sglang.split_levels import cuda_sm_granularity

#: Oldest driver (CUDA version, 1000 * major + 10 * minor) with green contexts.
MIN_DRIVER_VERSION = 12040
#: First driver with ``cuGreenCtxStreamCreate``.
STREAM_CREATE_DRIVER_VERSION = 12050
#: First driver (and cuda-python) with work-queue configuration resources
#: (``CU_DEV_RESOURCE_TYPE_WORKQUEUE_CONFIG``, scope ``CU_WORKQUEUE_SCOPE_GREEN_CTX_BALANCED``): CUDA 13.1
#: (driver API "Green Contexts"; PyTorch's torch/cuda/green_contexts.py requires the same).
WORKQUEUE_DRIVER_VERSION = 13010

#: The environment variable that sets how many hardware work queues (connections) CUDA opens per
#: context, and the value the bench gives it: 32, the most CUDA allows (CUDA C++ Programming Guide,
#: "CUDA Environment Variables": default 8, range 1-32). Streams beyond the count share queues, and
#: work on shared queues can serialise. SGLang 0.5.23 sets 8 (srt/entrypoints/engine.py,
#: ``_set_envs_and_config``).
CONNECTIONS_VAR = "CUDA_DEVICE_MAX_CONNECTIONS"
MAX_CONNECTIONS = 32

#: What :func:`set_max_connections` did in this process (``None`` before its first call).
_connections_note: Finding | None = None


class SplitRefused(DeviceError):
    """The driver cannot give a requested split (a green context of that many SMs, or no SMs left for
    the remainder): the run records it for that sweep point or level and goes on. Any other
    :class:`DeviceError` (a failed launch, a lost device) stops the run."""

#: Oldest cuda-python that works end to end: 12.4.0-12.6.0 have no ``cuda.bindings``, 12.6.2.post1 does
#: not find the NVRTC of pip's ``nvidia-cuda-nvrtc-cu12`` wheel, 12.8.0 works (issue 11's install trials;
#: pyproject.toml's extras require it).
MIN_BINDINGS_VERSION = (12, 8)

PIP_HINT = "pip install 'pdmux[bench]' ('pdmux[bench-cu12]' on a CUDA 12 driver)"


def install_hint(driver_version: int | None) -> str:
    """The pip command that installs the bench's packages for a driver of CUDA ``driver_version``
    (``1000 * major + 10 * minor``; ``None`` when unknown), naming what it brings.

    A CUDA 12 driver needs the ``bench-cu12`` extra: cuda-python and NVRTC 12.x, and torch < 2.11
    (torch's wheels on PyPI are CUDA 13 builds from 2.11 on); newer drivers take ``bench``.
    """
    if driver_version is not None and driver_version // 1000 == 12:
        return ("pip install 'pdmux[bench-cu12]' (cuda-python>=12.8,<13, nvidia-cuda-nvrtc-cu12 and "
                "torch<2.11: PyPI's torch wheels are CUDA 13 builds from 2.11 on)")
    return "pip install 'pdmux[bench]' (torch, cuda-python>=12.8, nvidia-cuda-nvrtc, nvidia-ml-py)"


def _installed_cuda_python() -> str | None:
    """The installed cuda-python distribution's version (package metadata), or ``None``."""
    from importlib import metadata

    try:
        return metadata.version("cuda-python")
    except metadata.PackageNotFoundError:
        return None


def version_tuple(text: str) -> tuple[int, ...]:
    """``"12.6.2.post1"`` -> ``(12, 6, 2)``: the leading numeric fields of a version (``()`` for none)."""
    parts: list[int] = []
    for field in str(text).split("."):
        digits = ""
        for ch in field:
            if not ch.isascii() or not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        parts.append(int(digits))
        if digits != field:
            break
    return tuple(parts)


def driver_module() -> Any:
    """``cuda.bindings.driver``; :class:`DeviceError` naming the pip command when cuda-python is absent
    or too old to have ``cuda.bindings`` (12.4.0-12.6.0)."""
    try:
        from cuda.bindings import driver
    except ImportError:
        installed = _installed_cuda_python()
        if installed is not None:
            raise DeviceError(
                f"cuda-python {installed} has no cuda.bindings (12.4.0-12.6.0 lack it); the bench needs "
                f"cuda-python >= {'.'.join(map(str, MIN_BINDINGS_VERSION))}: {PIP_HINT}"
            ) from None
        raise DeviceError("cuda-python is not installed (the bench drives green contexts with it): "
                          f"{PIP_HINT}") from None
    return driver


def version_text(version: int) -> str:
    """``12040`` -> ``"12.4"`` (the driver API's 1000 * major + 10 * minor)."""
    return f"{version // 1000}.{(version % 1000) // 10}"


def _err_name(err: Any) -> str:
    return getattr(err, "name", None) or str(err)


def _code(err: Any) -> int:
    try:
        return int(err)
    except (TypeError, ValueError):
        return int(getattr(err, "value", -1))


def call(result: tuple, what: str, split: bool = False) -> Any:
    """Unpack a cuda-python ``(err, *outs)`` result: the outputs, or :class:`DeviceError` on an error.

    ``what``: the operation, for the message (``"cuGreenCtxCreate for prefill 112 SMs"``). ``split``:
    the call builds a partition (split, resource descriptor, green context); only then do
    CUDA_ERROR_INVALID_RESOURCE_TYPE/CONFIGURATION (914, 915) mean a refused split
    (:class:`SplitRefused`): from any other call (a kernel launch) they are plain failures. Returns
    ``None``, the single output, or a tuple of outputs.
    """
    err, *outs = result
    if _code(err) != 0:
        name = _err_name(err)
        if split and _code(err) in (914, 915):
            raise SplitRefused(
                f"{what} failed with {name}: the device cannot give this split "
                "(CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION/TYPE)"
            )
        hint = ": out of device memory" if "OUT_OF_MEMORY" in name else ""
        raise DeviceError(f"{what} failed with {name}{hint}")
    if not outs:
        return None
    return outs[0] if len(outs) == 1 else tuple(outs)


@dataclass(frozen=True)
class DeviceInfo:
    """What the driver says about one device (SMs, bytes, CUDA versions as ``1000*major + 10*minor``).

    ``granularity``: ``(minimum SMs, multiple)`` of a split as the driver reports it
    (``minSmPartitionSize``, ``smCoscheduledAlignment``: cuda-python 13 with a 13.x driver), or
    ``None`` when it does not say (then CUDA's table by capability applies). ``connections_note``:
    what :func:`set_max_connections` did; ``pci_bus_id``: ``"0000:3B:00.0"`` (``cuDeviceGetPCIBusId``,
    to find the same device in NVML), ``""`` when the driver did not say.
    """

    index: int
    name: str
    sm_count: int
    compute_capability: tuple[int, int]
    l2_bytes: int
    memory_bytes: int
    driver_version: int
    bindings_version: str
    granularity: tuple[int, int] | None
    resource_sm_count: int
    connections_note: Finding | None = None
    pci_bus_id: str = ""

    @property
    def driver_version_text(self) -> str:
        return version_text(self.driver_version)

    @property
    def split_granularity(self) -> tuple[int, int]:
        """``(minimum SMs, multiple)`` of a split: the driver's when it says, else CUDA's table."""
        return self.granularity or cuda_sm_granularity(self.compute_capability[0])


def _torch_cuda_started() -> bool:
    """torch is imported and has initialised CUDA in this process."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    try:
        return bool(cuda is not None and cuda.is_initialized())
    except Exception:  # noqa: BLE001 - a stand-in or broken torch: assume not started
        return False


def set_max_connections(environ: MutableMapping[str, str] | None = None) -> Finding:
    """Set ``CUDA_DEVICE_MAX_CONNECTIONS=32`` (:data:`MAX_CONNECTIONS`) in ``environ`` (``os.environ``)
    before CUDA starts in this process, so the two co-run streams and the default stream each get a
    hardware work queue of their own. Returns the finding the results' notes carry (what was set,
    and the value it replaced: ``bench.connections_set``). Once done, later calls return the first
    call's (CUDA has started by then, so the value cannot change); when torch already initialised CUDA,
    nothing is set and the finding says so (``bench.connections_not_set``).
    """
    global _connections_note
    if _connections_note is not None:
        return _connections_note
    env = os.environ if environ is None else environ
    previous = env.get(CONNECTIONS_VAR)
    if _torch_cuda_started():
        return Finding("bench.connections_not_set", {"var": CONNECTIONS_VAR, "previous": previous})
    env[CONNECTIONS_VAR] = str(MAX_CONNECTIONS)
    _connections_note = Finding("bench.connections_set", {"var": CONNECTIONS_VAR, "value": MAX_CONNECTIONS,
                                                          "previous": previous})
    return _connections_note


def _no_driver_error(exc: BaseException) -> DeviceError:
    """"no NVIDIA driver" with the first sentence of why the driver library did not load; its ``param``
    ``dry_run``: the option that needs no driver."""
    detail = " ".join(str(exc).split())
    first = detail.split(". ")[0][:160]
    return DeviceError(
        "no NVIDIA driver: the CUDA driver library (libcuda) could not be loaded ({detail}); pdmux bench "
        "needs an NVIDIA GPU and driver (pdmux bench {param_flag} shows the plan on any machine)",
        param="dry_run", values={"detail": first},
    )


def _init_driver(drv: Any) -> int:
    """``cuInit`` and the driver's CUDA version (``1000*major + 10*minor``); :class:`DeviceError` when no
    driver loads, ``cuInit`` fails, or the driver is older than CUDA 12.4 (no green contexts)."""
    try:
        result = drv.cuInit(0)
    # cuda.pathfinder's DynamicLibNotFoundError is a RuntimeError
    except (RuntimeError, OSError, ImportError) as exc:
        raise _no_driver_error(exc) from None
    err = result[0]
    if _code(err) != 0:
        if _code(err) == 100:  # CUDA_ERROR_NO_DEVICE
            raise DeviceError("the NVIDIA driver found no CUDA device (cuInit: CUDA_ERROR_NO_DEVICE)")
        raise DeviceError(f"cuInit failed with {_err_name(err)}: the NVIDIA driver is not usable")
    version = call(drv.cuDriverGetVersion(), "cuDriverGetVersion")
    if version < MIN_DRIVER_VERSION:
        raise DeviceError(
            f"the NVIDIA driver supports CUDA {version_text(version)}; green contexts need CUDA 12.4 or "
            "newer (driver 550 or later)"
        )
    return int(version)


def _check_bindings(version: int) -> str:
    """cuda-python's version (``"?"`` when it does not say); :class:`DeviceError` when it is newer than the
    driver's CUDA major (``version``) or older than 12.8."""
    try:
        from cuda import bindings

        bindings_version = str(getattr(bindings, "__version__", "?"))
    except ImportError:  # pragma: no cover - cuda.bindings imported above
        bindings_version = "?"
    parsed = version_tuple(bindings_version)
    if parsed and parsed[0] > version // 1000:
        raise DeviceError(
            f"cuda-python {bindings_version} needs a CUDA {parsed[0]} driver but this one supports CUDA "
            f"{version_text(version)}: {install_hint(version)}"
        )
    if parsed and parsed[:2] < MIN_BINDINGS_VERSION:
        raise DeviceError(
            f"cuda-python {bindings_version} is too old for the bench (before 12.8 it lacks cuda.bindings or "
            f"does not find pip's NVRTC): {install_hint(version)}"
        )
    return bindings_version


def probe_device(index: int = 0) -> DeviceInfo:
    """Initialise the CUDA driver through cuda-python and describe device ``index``.

    Raises :class:`DeviceError` (exit 1, one line) when cuda-python is not installed, no NVIDIA
    driver can be loaded (cuda-python raises ``cuda.pathfinder.DynamicLibNotFoundError`` at the first
    driver call) or ``cuInit`` fails, the driver is older than CUDA 12.4 (no green contexts),
    cuda-python is newer than the driver's CUDA major, or the device's compute capability has no
    green contexts, or cuda-python is older than 12.8; :class:`InputError` (exit 2) when ``index`` is
    not a device. The pip hints name the extra for the driver's CUDA major (:func:`install_hint`).
    """
    drv = driver_module()
    connections = set_max_connections()
    version = _init_driver(drv)
    bindings_version = _check_bindings(version)
    count = call(drv.cuDeviceGetCount(), "cuDeviceGetCount")
    if count < 1:
        raise DeviceError("the NVIDIA driver found no CUDA device")
    if not 0 <= index < count:
        raise InputError("{param_flag} {index}: this machine has {count} CUDA device(s), numbered 0-{last}",
                         param="device", values={"index": index, "count": count, "last": count - 1})
    dev = call(drv.cuDeviceGet(index), f"cuDeviceGet({index})")
    raw = call(drv.cuDeviceGetName(256, dev), "cuDeviceGetName")
    name = raw.split(b"\x00")[0].decode(errors="replace").strip() if isinstance(raw, bytes) else str(raw)
    attr = drv.CUdevice_attribute

    def attribute(a: Any, what: str) -> int:
        return int(call(drv.cuDeviceGetAttribute(a, dev), f"cuDeviceGetAttribute({what})"))

    sms = attribute(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "SM count")
    cc = (attribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "cc major"),
          attribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "cc minor"))
    l2 = attribute(attr.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, "L2 size")
    memory = int(call(drv.cuDeviceTotalMem(dev), "cuDeviceTotalMem"))
    if cc[0] < 6:
        raise DeviceError(f"{name} has compute capability {cc[0]}.{cc[1]}: green contexts need 6.0 or newer")
    resource = call(drv.cuDeviceGetDevResource(dev, drv.CUdevResourceType.CU_DEV_RESOURCE_TYPE_SM),
                    "cuDeviceGetDevResource(SM)")
    try:
        raw_bus = call(drv.cuDeviceGetPCIBusId(32, dev), "cuDeviceGetPCIBusId")
        bus = raw_bus.split(b"\x00")[0].decode(errors="replace").strip() if isinstance(
            raw_bus, bytes) else str(raw_bus)
    except (DeviceError, AttributeError):  # only the clocks need it
        bus = ""
    minimum = int(getattr(resource.sm, "minSmPartitionSize", 0) or 0)
    alignment = int(getattr(resource.sm, "smCoscheduledAlignment", 0) or 0)
    return DeviceInfo(
        index=index, name=name, sm_count=sms, compute_capability=cc, l2_bytes=l2, memory_bytes=memory,
        driver_version=int(version), bindings_version=bindings_version,
        granularity=(minimum, alignment) if minimum > 0 and alignment > 0 else None,
        resource_sm_count=int(resource.sm.smCount),
        connections_note=connections, pci_bus_id=bus,
    )


def workqueue_supported(info: DeviceInfo, drv: Any) -> bool:
    """The driver (CUDA >= 13.1) and cuda-python both know work-queue configuration resources."""
    return (info.driver_version >= WORKQUEUE_DRIVER_VERSION
            and hasattr(drv.CUdevResourceType, "CU_DEV_RESOURCE_TYPE_WORKQUEUE_CONFIG")
            and hasattr(drv, "CUdevWorkqueueConfigScope"))


def workqueue_text(info: DeviceInfo, drv: Any | None = None) -> str:
    """How the bench's green contexts get their work queues on this driver (for the results)."""
    if drv is None:
        try:
            drv = driver_module()
        except DeviceError:
            return "shared (cuda-python missing)"
    if workqueue_supported(info, drv):
        return "balanced per green context (CU_WORKQUEUE_SCOPE_GREEN_CTX_BALANCED, driver 13.1+)"
    return f"shared by every context (driver CUDA {info.driver_version_text}: balanced work queues need 13.1)"


@contextlib.contextmanager
def _sigint_deferred() -> Iterator[None]:
    """Hold Ctrl-C during a teardown; re-raise it once the teardown is done (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    try:
        previous = signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    except ValueError:  # not the main interpreter thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if received:
            raise KeyboardInterrupt


@dataclass(frozen=True)
class Partition:
    """One green context and its stream: SMs requested and granted, the ``CUstream`` handle (int).

    ``workqueue``: the work-queue configuration its context got (``"balanced, limit 16"``, or
    ``"shared"`` on drivers before 13.1 and when the driver refused the balanced one).
    """

    label: str
    requested_sms: int
    granted_sms: int
    stream_handle: int
    workqueue: str = "shared"


class _GreenContexts(abc.ABC):
    """Owns green contexts and streams; destroys them all on exit (streams first)."""

    #: Green contexts that run work side by side (each gets 1/n of the work-queue concurrency limit).
    _working_contexts = 1

    def __init__(self, info: DeviceInfo) -> None:
        self.info = info
        self._drv = driver_module()
        self._device: Any = None
        self._contexts: list[Any] = []
        self._streams: list[Any] = []
        self._wq_limit: int | None = None
        #: Why the balanced work-queue configuration was not used, when the driver refused it.
        self.workqueue_problem: str | None = None

    # -- building blocks ---------------------------------------------------------------------------
    def _dev(self) -> Any:
        if self._device is None:
            self._device = call(self._drv.cuDeviceGet(self.info.index), "cuDeviceGet")
        return self._device

    def _sm_type(self) -> Any:
        return self._drv.CUdevResourceType.CU_DEV_RESOURCE_TYPE_SM

    def _split(self, resource: Any, sms: int, what: str) -> tuple[Any, Any]:
        """One group of at least ``sms`` SMs and the remainder, from ``resource`` (one split call)."""
        groups, count, remainder = call(
            self._drv.cuDevSmResourceSplitByCount(1, resource, 0, sms),
            f"cuDevSmResourceSplitByCount ({what})", split=True,
        )
        if int(count) < 1:
            raise SplitRefused(
                f"the driver refused the split {what}: no group of {sms} SMs from {resource.sm.smCount} "
                "(granularity or SM count)"
            )
        return groups[0], remainder

    def _workqueue_limit(self) -> int | None:
        """The concurrency limit each working green context gets with a balanced work-queue
        configuration: the device's limit (``wqConcurrencyLimit`` of its WORKQUEUE_CONFIG resource,
        which follows CUDA_DEVICE_MAX_CONNECTIONS) split evenly between the contexts that run side
        by side, at least 1; ``None`` where the driver or cuda-python has no such resource (< 13.1)
        or refused it once."""
        if self.workqueue_problem is not None or not workqueue_supported(self.info, self._drv):
            return None
        if self._wq_limit is None:
            drv = self._drv
            wq = call(drv.cuDeviceGetDevResource(self._dev(),
                                                 drv.CUdevResourceType.CU_DEV_RESOURCE_TYPE_WORKQUEUE_CONFIG),
                      "cuDeviceGetDevResource(WORKQUEUE_CONFIG)")
            self._wq_limit = max(1, int(wq.wqConfig.wqConcurrencyLimit) // self._working_contexts)
        return self._wq_limit

    def _balanced_workqueue(self, limit: int) -> Any:
        """A WORKQUEUE_CONFIG resource with the balanced scope and ``limit``, as PyTorch's
        ``torch.cuda.green_contexts.GreenContext(workqueue_scope="balanced")`` builds it."""
        drv = self._drv
        wq = call(drv.cuDeviceGetDevResource(self._dev(),
                                             drv.CUdevResourceType.CU_DEV_RESOURCE_TYPE_WORKQUEUE_CONFIG),
                  "cuDeviceGetDevResource(WORKQUEUE_CONFIG)")
        wq.wqConfig.sharingScope = drv.CUdevWorkqueueConfigScope.CU_WORKQUEUE_SCOPE_GREEN_CTX_BALANCED
        wq.wqConfig.wqConcurrencyLimit = limit
        return wq

    def _create(self, resources: list[Any], what: str) -> Any:
        drv = self._drv
        desc = call(drv.cuDevResourceGenerateDesc(resources, len(resources)),
                    f"cuDevResourceGenerateDesc ({what})", split=True)
        flags = int(drv.CUgreenCtxCreate_flags.CU_GREEN_CTX_DEFAULT_STREAM)
        ctx = call(drv.cuGreenCtxCreate(desc, self._dev(), flags), f"cuGreenCtxCreate ({what})", split=True)
        self._contexts.append(ctx)
        return ctx

    def _context(self, resource: Any, what: str, working: bool = False) -> tuple[Any, str]:
        """A green context on ``resource``; a ``working`` one (it runs the bench's kernels) also gets a
        balanced work-queue configuration where the driver has them (13.1+). When the driver refuses
        that, the context is made without it and :attr:`workqueue_problem` says why. Returns the
        context and its work-queue description (:attr:`Partition.workqueue`)."""
        limit = self._workqueue_limit() if working else None
        if limit is not None:
            try:
                return self._create([resource, self._balanced_workqueue(limit)],
                                    what), f"balanced, limit {limit}"
            except DeviceError as exc:  # keep the split; lose only the queue configuration
                self.workqueue_problem = str(exc)
        return self._create([resource], what), "shared"

    def _granted(self, ctx: Any, what: str) -> int:
        res = call(self._drv.cuGreenCtxGetDevResource(ctx, self._sm_type()),
                   f"cuGreenCtxGetDevResource ({what})")
        return int(res.sm.smCount)

    def _stream(self, ctx: Any, what: str) -> Any:
        drv = self._drv
        non_blocking = int(drv.CUstream_flags.CU_STREAM_NON_BLOCKING)
        create = getattr(drv, "cuGreenCtxStreamCreate", None)
        if create is not None and self.info.driver_version >= STREAM_CREATE_DRIVER_VERSION:
            try:
                result = create(ctx, non_blocking, 0)
            except RuntimeError:  # symbol missing in this driver: take the 12.4 path
                result = None
            if result is not None and _code(result[0]) == 0:
                self._streams.append(result[1])
                return result[1]
            if result is not None and _code(result[0]) not in (500, 801):  # NOT_FOUND, NOT_SUPPORTED
                call(result, f"cuGreenCtxStreamCreate ({what})")
        plain = call(drv.cuCtxFromGreenCtx(ctx), f"cuCtxFromGreenCtx ({what})")
        call(drv.cuCtxPushCurrent(plain), f"cuCtxPushCurrent ({what})")
        try:
            stream = call(drv.cuStreamCreate(non_blocking), f"cuStreamCreate ({what})")
        finally:
            drv.cuCtxPopCurrent()
        self._streams.append(stream)
        return stream

    def _partition(self, resource: Any, label: str, requested: int) -> Partition:
        what = f"{label} {requested} SMs"
        ctx, workqueue = self._context(resource, what, working=True)
        stream = self._stream(ctx, what)
        return Partition(label, requested, self._granted(ctx, what), int(stream), workqueue)

    def _destroy_context(self, ctx: Any) -> None:
        self._contexts.remove(ctx)
        call(self._drv.cuGreenCtxDestroy(ctx), "cuGreenCtxDestroy")

    # -- lifetime ----------------------------------------------------------------------------------
    @abc.abstractmethod
    def _open(self) -> None:
        """Create the green contexts and streams (each subclass its own layout)."""

    def close(self) -> list[str]:
        """Synchronise and destroy every stream, then every green context. Returns the failures
        (text), never raises for them: a teardown must run to the end."""
        problems: list[str] = []
        drv = self._drv
        with _sigint_deferred():
            for stream in self._streams:
                try:
                    drv.cuStreamSynchronize(stream)
                except Exception as exc:  # noqa: BLE001 - keep tearing down
                    problems.append(f"cuStreamSynchronize: {exc}")
            while self._streams:
                stream = self._streams.pop()
                try:
                    err = drv.cuStreamDestroy(stream)[0]
                    if _code(err) != 0:
                        problems.append(f"cuStreamDestroy: {_err_name(err)}")
                except Exception as exc:  # noqa: BLE001
                    problems.append(f"cuStreamDestroy: {exc}")
            while self._contexts:
                ctx = self._contexts.pop()
                try:
                    err = drv.cuGreenCtxDestroy(ctx)[0]
                    if _code(err) != 0:
                        problems.append(f"cuGreenCtxDestroy: {_err_name(err)}")
                except Exception as exc:  # noqa: BLE001
                    problems.append(f"cuGreenCtxDestroy: {exc}")
        return problems

    @property
    def live_handles(self) -> int:
        """Streams plus green contexts not destroyed yet (0 after exit)."""
        return len(self._streams) + len(self._contexts)

    def __enter__(self):
        try:
            self._open()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        problems = self.close()
        if problems and exc_type is None:
            raise DeviceError(f"tearing down green contexts: {problems[0]}")


class SmPartition(_GreenContexts):
    """A green context of ``sms`` SMs from one split of the whole device (the solo sweep).

    ``with SmPartition(info, 64) as part: part.partition.stream_handle`` ...; the driver may grant
    more than asked (rounded up to its granularity): ``partition.granted_sms``. On drivers 13.1+ its
    context gets the device's whole work-queue concurrency limit, balanced.
    Raises :class:`SplitRefused` when the driver refuses the split, :class:`DeviceError` when
    another call fails.
    """

    def __init__(self, info: DeviceInfo, sms: int) -> None:
        super().__init__(info)
        if not 0 < sms <= info.sm_count:
            raise InputError(f"a partition needs 1-{info.sm_count} SMs, got {sms}")
        self.sms = sms
        self.partition: Partition | None = None

    def _open(self) -> None:
        device_res = call(self._drv.cuDeviceGetDevResource(self._dev(), self._sm_type()),
                          "cuDeviceGetDevResource")
        group, _ = self._split(device_res, self.sms, f"{self.sms} of {self.info.sm_count} SMs")
        self.partition = self._partition(group, "solo", self.sms)


class LevelPartitions(_GreenContexts):
    """Prefill and decode partitions of one level ``(prefill_sms, decode_sms)``, from ONE split.

    As sgl-kernel's ``create_greenctx_stream_by_value``: split the device for the pair's total, an
    intermediate green context from that group, split its resource for ``prefill_sms``; the group
    is prefill's, the remainder decode's; a green context and a non-blocking stream for each; the
    intermediate destroyed. When the pair takes the whole device (``prefill + decode``, rounded up
    to the split granularity, reaches the device's SM count: every SGLang level), the device's
    resource is split once for ``prefill_sms`` and decode gets the remainder: no split asks for a
    rounded-up total larger than the device (132 SMs would round up to 136 on Hopper), and the
    partitions are the same. Each working context gets half the device's work-queue concurrency
    limit, balanced, on drivers 13.1+. ``prefill`` and ``decode`` (:class:`Partition`) carry the SMs
    granted. Raises :class:`InputError` for counts that cannot fit the device, :class:`SplitRefused`
    when the driver refuses a split (naming it), :class:`DeviceError` when another call fails.
    """

    _working_contexts = 2

    def __init__(self, info: DeviceInfo, prefill_sms: int, decode_sms: int) -> None:
        super().__init__(info)
        if prefill_sms <= 0 or decode_sms <= 0 or prefill_sms + decode_sms > info.sm_count:
            raise InputError(
                f"level {prefill_sms}/{decode_sms}: both counts must be > 0 and add up to at most "
                f"{info.sm_count} SMs"
            )
        self.prefill_sms, self.decode_sms = prefill_sms, decode_sms
        self.prefill: Partition | None = None
        self.decode: Partition | None = None
        self.pair_granted_sms: int | None = None

    @property
    def whole_device(self) -> bool:
        """The pair, rounded up to the split granularity, takes every SM of the device."""
        minimum, multiple = self.info.split_granularity
        pair = self.prefill_sms + self.decode_sms
        return max(minimum, -(-pair // multiple) * multiple) >= self.info.sm_count

    def _open(self) -> None:
        p, d = self.prefill_sms, self.decode_sms
        level = f"level {p}/{d}"
        device_res = call(self._drv.cuDeviceGetDevResource(self._dev(), self._sm_type()),
                          "cuDeviceGetDevResource")
        intermediate = None
        if self.whole_device:
            self.pair_granted_sms = int(device_res.sm.smCount)
            group, remainder = self._split(device_res, p,
                                           f"{p} prefill SMs of the device's {self.pair_granted_sms} for "
                                           f"{level}")
        else:
            pair, _ = self._split(device_res, p + d, f"{p + d} of {self.info.sm_count} SMs for {level}")
            intermediate, _ = self._context(pair, f"{level} intermediate")
            pair_res = call(self._drv.cuGreenCtxGetDevResource(intermediate, self._sm_type()),
                            f"cuGreenCtxGetDevResource ({level} intermediate)")
            self.pair_granted_sms = int(pair_res.sm.smCount)
            group, remainder = self._split(pair_res, p,
                                           f"{p} prefill SMs of the {self.pair_granted_sms} for {level}")
        if int(remainder.sm.smCount) <= 0:
            raise SplitRefused(f"the driver refused the split {level}: no SMs left for decode after {p} for "
                               "prefill")
        self.prefill = self._partition(group, "prefill", p)
        self.decode = self._partition(remainder, "decode", d)
        if intermediate is not None:
            self._destroy_context(intermediate)
