"""The use-case layer: one workflow per command, between the CLI (parse, render) and the core (rules, cost model).

Each module holds ``<command>(request) -> result``: a frozen request dataclass whose fields are the command's
options (snake_case, the same defaults, typed values rather than option text), and a result dataclass whose
``to_dict()`` is exactly what the command's ``--json`` prints. Workflows print nothing and exit nothing; they
may read the files a request names, and raise :class:`pdmux_cli.util.errors.InputError` for bad input. The Python
API (``import pdmux``) calls them. See docs/architecture.md.
"""
