"""``python -m pdmux_cli`` runs the ``pdmux`` command (:mod:`pdmux_cli.entry`)."""

from .entry import main

main()
