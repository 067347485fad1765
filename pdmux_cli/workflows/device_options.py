"""The planning commands' device options and ``--tp`` help (splits, estimate, gen-config, check-config),
declared once: :data:`DEVICE_OPTIONS`, each request's field made by :func:`device_option`.

Apart from :mod:`.planning_inputs`, which reads these options (``resolve_device``), so that it stays clear of
:mod:`.fields` (whose range checks import the policies, which import it). Pure: strings and dataclass fields.
"""

from __future__ import annotations

from typing import Any

from .fields import option

#: The planning commands' help of ``--gpu`` and ``--tp`` (splits, estimate, gen-config, check-config), worded
#: once; each command adds its own ending.
GPU_HELP = ("GPU profile: alias (h100, h200, h20, a100, b200, ...), reported name ('NVIDIA H100 80GB HBM3'), "
            "or a profile file of your own (my-gpu.yaml, fields as in profiles/gpus/).")
TP_HELP = ("Tensor parallelism: GPUs of one server the model is sharded over, as SGLang's --tp-size (1-8); "
           "step times are one rank's, collectives included, and memory is checked per GPU.")

#: The device options of the planning requests (splits, estimate, gen-config, check-config), declared once
#: (:func:`pdmux_cli.workflows.fields.option`'s arguments; check-config words ``cc`` its own way).
DEVICE_OPTIONS: dict[str, dict[str, Any]] = {
    "gpu": {"short": "-g", "help": GPU_HELP + " Default: h100."},
    "sms": {"help": "SM count of any device (with {flag.cc})."},
    "cc": {"help": "Compute capability of that device, e.g. 9.0.",
           "wordings": {"check-config": "Compute capability of that device."}},
}


def device_option(name: str) -> Any:
    """The request field of device option ``name`` (``"gpu"``, ``"sms"``, ``"cc"``), default ``None``, as
    :data:`DEVICE_OPTIONS` declares it."""
    return option(None, **DEVICE_OPTIONS[name])
