"""CUDA green contexts through cuda-python (``cuda.bindings.driver``): device probe and SM partitions.

Written from the CUDA driver API's "Green Contexts" group (12.4 and 13.x, see
shared/reference/green-contexts.md) and the behaviour of sgl-kernel's
``create_greenctx_stream_by_value`` (shared/reference/sglang-pdmux.md), which SGLang uses:

- :class:`SmPartition`: one green context of ``s`` SMs (one split of the whole device), for the
  solo sweep;
- :class:`LevelPartitions`: both partitions of one level from ONE split, as sgl-kernel does: split
  the device for ``prefill + decode`` SMs, make an intermediate green context from that group, split
  its resource for ``prefill`` SMs; the group goes to prefill and the remainder to decode; a green
  context and a non-blocking stream for each; the intermediate is destroyed.

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
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..errors import DeviceError, InputError

#: Oldest driver (CUDA version, 1000 * major + 10 * minor) with green contexts.
MIN_DRIVER_VERSION = 12040
#: First driver with ``cuGreenCtxStreamCreate``.
STREAM_CREATE_DRIVER_VERSION = 12050

PIP_HINT = "pip install 'pdmux[bench]'"


def driver_module() -> Any:
    """``cuda.bindings.driver``; :class:`DeviceError` naming the pip command when cuda-python is absent."""
    try:
        from cuda.bindings import driver
    except ImportError:
        raise DeviceError(f"cuda-python is not installed (the bench drives green contexts with it): {PIP_HINT}") from None
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


def call(result: tuple, what: str) -> Any:
    """Unpack a cuda-python ``(err, *outs)`` result: the outputs, or :class:`DeviceError` on an error.

    ``what``: the operation, for the message (``"cuGreenCtxCreate for prefill 112 SMs"``). Returns
    ``None``, the single output, or a tuple of outputs.
    """
    err, *outs = result
    if _code(err) != 0:
        name = _err_name(err)
        hint = ""
        if _code(err) in (914, 915):
            hint = ": the device cannot give this split (CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION/TYPE)"
        elif "OUT_OF_MEMORY" in name:
            hint = ": out of device memory"
        raise DeviceError(f"{what} failed with {name}{hint}")
    if not outs:
        return None
    return outs[0] if len(outs) == 1 else tuple(outs)


@dataclass(frozen=True)
class DeviceInfo:
    """What the driver says about one device (SMs, bytes, CUDA versions as ``1000*major + 10*minor``).

    ``granularity``: ``(minimum SMs, multiple)`` of a split as the driver reports it
    (``minSmPartitionSize``, ``smCoscheduledAlignment``: cuda-python 13 with a 13.x driver), or
    ``None`` when it does not say (then CUDA's table by capability applies).
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

    @property
    def driver_version_text(self) -> str:
        return version_text(self.driver_version)


def _no_driver_message(exc: BaseException) -> str:
    detail = " ".join(str(exc).split())
    first = detail.split(". ")[0][:160]
    return (
        f"no NVIDIA driver: the CUDA driver library (libcuda) could not be loaded ({first}); "
        "pdmux bench needs an NVIDIA GPU and driver (pdmux bench --dry-run shows the plan on any machine)"
    )


def probe_device(index: int = 0) -> DeviceInfo:
    """Initialise the CUDA driver through cuda-python and describe device ``index``.

    Raises :class:`DeviceError` (exit 1, one line) when cuda-python is not installed, no NVIDIA
    driver can be loaded (cuda-python raises ``cuda.pathfinder.DynamicLibNotFoundError`` at the first
    driver call) or ``cuInit`` fails, the driver is older than CUDA 12.4 (no green contexts),
    cuda-python is newer than the driver's CUDA major, or the device's compute capability has no
    green contexts; :class:`InputError` (exit 2) when ``index`` is not a device.
    """
    drv = driver_module()
    try:
        result = drv.cuInit(0)
    except (RuntimeError, OSError, ImportError) as exc:  # cuda.pathfinder's DynamicLibNotFoundError is a RuntimeError
        raise DeviceError(_no_driver_message(exc)) from None
    err = result[0]
    if _code(err) != 0:
        if _code(err) == 100:  # CUDA_ERROR_NO_DEVICE
            raise DeviceError("the NVIDIA driver found no CUDA device (cuInit: CUDA_ERROR_NO_DEVICE)")
        raise DeviceError(f"cuInit failed with {_err_name(err)}: the NVIDIA driver is not usable")
    version = call(drv.cuDriverGetVersion(), "cuDriverGetVersion")
    if version < MIN_DRIVER_VERSION:
        raise DeviceError(
            f"the NVIDIA driver supports CUDA {version_text(version)}; green contexts need CUDA 12.4 or newer "
            "(driver 550 or later)"
        )
    try:
        from cuda import bindings

        bindings_version = str(getattr(bindings, "__version__", "?"))
    except ImportError:  # pragma: no cover - cuda.bindings imported above
        bindings_version = "?"
    major = bindings_version.split(".")[0]
    if major.isdigit() and int(major) > version // 1000:
        raise DeviceError(
            f"cuda-python {bindings_version} needs a CUDA {major} driver but this one supports CUDA "
            f"{version_text(version)}: pip install 'cuda-python~={version // 1000}.0' 'nvidia-cuda-nvrtc-cu{version // 1000}'"
        )
    count = call(drv.cuDeviceGetCount(), "cuDeviceGetCount")
    if count < 1:
        raise DeviceError("the NVIDIA driver found no CUDA device")
    if not 0 <= index < count:
        raise InputError(f"--device {index}: this machine has {count} CUDA device(s), numbered 0-{count - 1}")
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
    minimum = int(getattr(resource.sm, "minSmPartitionSize", 0) or 0)
    alignment = int(getattr(resource.sm, "smCoscheduledAlignment", 0) or 0)
    return DeviceInfo(
        index=index, name=name, sm_count=sms, compute_capability=cc, l2_bytes=l2, memory_bytes=memory,
        driver_version=int(version), bindings_version=bindings_version,
        granularity=(minimum, alignment) if minimum > 0 and alignment > 0 else None,
        resource_sm_count=int(resource.sm.smCount),
    )


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
    """One green context and its stream: SMs requested and granted, the ``CUstream`` handle (int)."""

    label: str
    requested_sms: int
    granted_sms: int
    stream_handle: int


class _GreenContexts(abc.ABC):
    """Owns green contexts and streams; destroys them all on exit (streams first)."""

    def __init__(self, info: DeviceInfo) -> None:
        self.info = info
        self._drv = driver_module()
        self._device: Any = None
        self._contexts: list[Any] = []
        self._streams: list[Any] = []

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
            self._drv.cuDevSmResourceSplitByCount(1, resource, 0, sms), f"cuDevSmResourceSplitByCount ({what})"
        )
        if int(count) < 1:
            raise DeviceError(
                f"the driver refused the split {what}: no group of {sms} SMs from {resource.sm.smCount} "
                "(granularity or SM count)"
            )
        return groups[0], remainder

    def _context(self, resource: Any, what: str) -> Any:
        drv = self._drv
        desc = call(drv.cuDevResourceGenerateDesc([resource], 1), f"cuDevResourceGenerateDesc ({what})")
        flags = int(drv.CUgreenCtxCreate_flags.CU_GREEN_CTX_DEFAULT_STREAM)
        ctx = call(drv.cuGreenCtxCreate(desc, self._dev(), flags), f"cuGreenCtxCreate ({what})")
        self._contexts.append(ctx)
        return ctx

    def _granted(self, ctx: Any, what: str) -> int:
        res = call(self._drv.cuGreenCtxGetDevResource(ctx, self._sm_type()), f"cuGreenCtxGetDevResource ({what})")
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
        ctx = self._context(resource, what)
        stream = self._stream(ctx, what)
        return Partition(label, requested, self._granted(ctx, what), int(stream))

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
    more than asked (rounded up to its granularity): ``partition.granted_sms``.
    Raises :class:`DeviceError` when the driver refuses the split or a call fails.
    """

    def __init__(self, info: DeviceInfo, sms: int) -> None:
        super().__init__(info)
        if not 0 < sms <= info.sm_count:
            raise InputError(f"a partition needs 1-{info.sm_count} SMs, got {sms}")
        self.sms = sms
        self.partition: Partition | None = None

    def _open(self) -> None:
        device_res = call(self._drv.cuDeviceGetDevResource(self._dev(), self._sm_type()), "cuDeviceGetDevResource")
        group, _ = self._split(device_res, self.sms, f"{self.sms} of {self.info.sm_count} SMs")
        self.partition = self._partition(group, "solo", self.sms)


class LevelPartitions(_GreenContexts):
    """Prefill and decode partitions of one level ``(prefill_sms, decode_sms)``, from ONE split.

    As sgl-kernel's ``create_greenctx_stream_by_value``: split the device for the pair's total, an
    intermediate green context from that group, split its resource for ``prefill_sms``; the group
    is prefill's, the remainder decode's; a green context and a non-blocking stream for each; the
    intermediate destroyed. ``prefill`` and ``decode`` (:class:`Partition`) carry the SMs granted.
    Raises :class:`InputError` for counts that cannot fit the device, :class:`DeviceError` when
    the driver refuses a split (naming it) or a call fails.
    """

    def __init__(self, info: DeviceInfo, prefill_sms: int, decode_sms: int) -> None:
        super().__init__(info)
        if prefill_sms <= 0 or decode_sms <= 0 or prefill_sms + decode_sms > info.sm_count:
            raise InputError(
                f"level {prefill_sms}/{decode_sms}: both counts must be > 0 and add up to at most {info.sm_count} SMs"
            )
        self.prefill_sms, self.decode_sms = prefill_sms, decode_sms
        self.prefill: Partition | None = None
        self.decode: Partition | None = None
        self.pair_granted_sms: int | None = None

    def _open(self) -> None:
        p, d = self.prefill_sms, self.decode_sms
        level = f"level {p}/{d}"
        device_res = call(self._drv.cuDeviceGetDevResource(self._dev(), self._sm_type()), "cuDeviceGetDevResource")
        pair, _ = self._split(device_res, p + d, f"{p + d} of {self.info.sm_count} SMs for {level}")
        intermediate = self._context(pair, f"{level} intermediate")
        pair_res = call(self._drv.cuGreenCtxGetDevResource(intermediate, self._sm_type()),
                        f"cuGreenCtxGetDevResource ({level} intermediate)")
        self.pair_granted_sms = int(pair_res.sm.smCount)
        group, remainder = self._split(pair_res, p, f"{p} prefill SMs of the {self.pair_granted_sms} for {level}")
        if int(remainder.sm.smCount) <= 0:
            raise DeviceError(f"the driver refused the split {level}: no SMs left for decode after {p} for prefill")
        self.prefill = self._partition(group, "prefill", p)
        self.decode = self._partition(remainder, "decode", d)
        self._destroy_context(intermediate)
