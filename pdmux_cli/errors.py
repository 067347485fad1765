"""The two kinds of failure pdmux reports, and nothing else.

The core raises these; the CLI catches them once (``pdmux_cli.cli``) and turns each into a single
line on stderr with the exit code the class carries. Nothing below the CLI prints or exits.
"""

from __future__ import annotations


class PdmuxError(Exception):
    """Base class: a failure with a one-line, user-facing message.

    ``exit_code`` is what the CLI exits with (1 for runtime failures).
    """

    exit_code = 1


class InputError(PdmuxError, ValueError):
    """Bad user input: unknown GPU or model, malformed file, impossible sizes. The CLI exits 2.

    Also used where SGLang itself refuses a configuration at start-up (no valid SM partition,
    unsupported compute capability): for pdmux's user that is an input problem to fix.
    """

    exit_code = 2


class DeviceError(PdmuxError, RuntimeError):
    """A runtime failure outside the user's input: no GPU, driver too old, out of memory. Exit 1."""

    exit_code = 1
