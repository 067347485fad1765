"""``python -m pdmux_cli`` runs the ``pdmux`` command."""

from .cli import main

main()
