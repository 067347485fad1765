"""pdmux's Python API: plan PD multiplexing (SGLang ``--enable-pdmux``) from Python, as the CLI does.

>>> import pdmux
>>> pdmux.estimate(decode_bs=64).to_dict()["level"]
{'group': 6, 'prefill_sms': 72, 'decode_sms': 60, 'source': 'sglang-auto'}

Every function takes the command's options as keywords (the CLI's names and defaults) and returns a
dataclass whose ``to_dict()`` is the command's ``--json``; bad input raises :class:`InputError`. Importing
pdmux loads none of torch, numpy, matplotlib or cuda-python. See README "Python API".
"""

from pdmux_cli import __version__
from pdmux_cli.util.errors import InputError

from .planning import check_config, estimate, gen_config, splits

__all__ = ["InputError", "__version__", "check_config", "estimate", "gen_config", "splits"]
