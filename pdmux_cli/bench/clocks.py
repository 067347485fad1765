"""SM and memory clocks of the bench's device through NVML (``pynvml``, from nvidia-ml-py), sampled at
every measurement so a rate can be read against the clocks it ran at (boost, power or thermal limits).

NVML numbers devices its own way (``CUDA_VISIBLE_DEVICES`` and ``CUDA_DEVICE_ORDER`` do not apply),
so the device is found by its PCI bus id (``cuDeviceGetPCIBusId``). NVML is optional: without
nvidia-ml-py, or when NVML cannot be used, the bench runs and records no clocks, and says why.
``pynvml`` is imported inside :meth:`Clocks.open`; this module imports on any machine.
"""

from __future__ import annotations

from typing import Any

from ..util.errors import Finding


class Clocks:
    """An open NVML handle of one device. :meth:`sample` gives ``(SM MHz, memory MHz)`` now,
    :meth:`maximum` the device's maximum clocks; :meth:`close` shuts NVML down (once)."""

    def __init__(self, nvml: Any, handle: Any) -> None:
        self._nvml, self._handle = nvml, handle
        self._open = True

    @classmethod
    def open(cls, pci_bus_id: str) -> tuple[Clocks | None, Finding | None]:
        """NVML's handle of the device at ``pci_bus_id`` (``"0000:3B:00.0"``).

        Returns ``(clocks, None)``, or ``(None, why)`` (a finding, ``bench.clocks.*``) when nvidia-ml-py is
        not installed, the bus id is unknown, or NVML fails (no library, no permission, no such device):
        never raises.
        """
        try:
            import pynvml
        except ImportError:
            return None, Finding("bench.clocks.no_nvml")
        if not pci_bus_id:
            return None, Finding("bench.clocks.no_bus_id")
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            return None, Finding("bench.clocks.nvml_failed", {"error": str(exc)})
        try:
            handle = pynvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id)
        except pynvml.NVMLError as exc:
            pynvml.nvmlShutdown()
            return None, Finding("bench.clocks.no_device", {"pci_bus_id": pci_bus_id, "error": str(exc)})
        return cls(pynvml, handle), None

    def _read(self, getter: Any) -> tuple[float, float] | None:
        nvml = self._nvml
        try:
            return float(getter(self._handle, nvml.NVML_CLOCK_SM)), float(getter(
                self._handle, nvml.NVML_CLOCK_MEM))
        except nvml.NVMLError:
            return None

    def sample(self) -> tuple[float, float] | None:
        """``(SM clock, memory clock)`` in MHz now (``nvmlDeviceGetClockInfo``); ``None`` if NVML fails."""
        return self._read(self._nvml.nvmlDeviceGetClockInfo)

    def maximum(self) -> tuple[float, float] | None:
        """``(SM, memory)`` maximum clocks in MHz (``nvmlDeviceGetMaxClockInfo``); ``None`` if NVML fails."""
        return self._read(self._nvml.nvmlDeviceGetMaxClockInfo)

    def close(self) -> None:
        if self._open:
            self._open = False
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError:
                pass
