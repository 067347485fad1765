"""pdmux: plan and benchmark PD multiplexing (SGLang ``--enable-pdmux``) on one GPU.

Layers: pure rules and cost model (``policy``, ``hardware``, ``model``, ``pdmux_config``, ``cost``,
``estimate``), a thin CLI (``cli``), and the GPU bench behind an optional import (``bench``).
See docs/architecture.md.
"""

__version__ = "0.1.0"
