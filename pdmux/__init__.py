"""pdmux's Python API: plan PD multiplexing (SGLang ``--enable-pdmux``) from Python, as the CLI does.

The planning commands (:mod:`pdmux.planning`: ``splits``, ``estimate``, ``gen_config``, ``check_config``) and
the simulation commands (:mod:`pdmux.simulation`: ``simulate``, ``capacity``, ``tune``, ``calibrate``,
``accuracy``).

>>> import pdmux
>>> pdmux.estimate(decode_bs=64).to_dict()["level"]
{'group': 6, 'prefill_sms': 72, 'decode_sms': 60, 'source': 'sglang-auto'}

Every function takes the command's options as keywords (the CLI's names and defaults) and returns a
dataclass whose ``to_dict()`` is the command's ``--json``; bad input raises :class:`InputError`, a runtime
failure (a Ray cluster out of reach, a worker that died, an output that cannot be written, no GPU) a
:class:`PdmuxError` (the CLI exits 1 on these; :class:`InputError` is one too, exit 2; :class:`DeviceError`,
the bench's, another). Importing pdmux loads none of torch, numpy, matplotlib or cuda-python. See
docs/python-api.md.
"""

from pdmux_cli import __version__
from pdmux_cli.util.errors import DeviceError, InputError, PdmuxError

from .planning import check_config, estimate, gen_config, splits
from .simulation import accuracy, calibrate, capacity, simulate, tune

__all__ = ["DeviceError", "InputError", "PdmuxError", "__version__", "accuracy", "calibrate", "capacity",
           "check_config", "estimate", "gen_config", "simulate", "splits", "tune"]
