"""The use-case layer: one function per command, typed requests in, typed results out.

Each workflow is ``<command>(request: <Command>Request) -> <Command>Result`` (``simulate``, ``capacity``,
``tune``, ``calibrate``, ``accuracy`` here; the planning commands beside them). A request is a frozen
dataclass whose fields are the command's options (snake_case, the CLI's defaults); a result's
``to_dict()`` is exactly what the command's ``--json`` prints. Workflows print nothing: they read the
files a request names, write the output files it names (whole or not at all), and report progress only
through an optional callback (:mod:`pdmux_cli.workflows.progress`). The CLI (:mod:`pdmux_cli.cli`)
parses options into a request, calls the workflow, and renders its result.

The shared pieces: :mod:`~pdmux_cli.workflows.values` (option values), :mod:`~pdmux_cli.workflows.workload`
(traces, synthetic arrivals, retiming), :mod:`~pdmux_cli.workflows.server` (the simulated server from the
cost-model and SGLang options), :mod:`~pdmux_cli.workflows.deployment` (DP replicas, PD disaggregation,
the DP default at equal GPU count), :mod:`~pdmux_cli.workflows.pdmux_yaml` (the pdmux YAML to simulate),
:mod:`~pdmux_cli.workflows.policies` (the policy objects, built by one factory).
"""
