"""Where the built-in GPU and model profiles live, in a source checkout and in an installed wheel.

The repository keeps them at ``profiles/`` (top level); the wheel ships the same files as
``pdmux_cli/profiles/`` (see ``[tool.setuptools]`` in pyproject.toml). No file is read here.
"""

from __future__ import annotations

from pathlib import Path

#: The ``pdmux_cli`` package directory (this module lives in ``pdmux_cli/catalog/``).
_HERE = Path(__file__).resolve().parent.parent


def profiles_dir() -> Path:
    """The directory holding ``gpus/*.yaml``, ``models/*.json``, ``efficiency/*.yaml`` and ``measurements/``.

    Raises :class:`FileNotFoundError` only for a broken installation (neither location exists).
    """
    for candidate in (_HERE / "profiles", _HERE.parent / "profiles"):
        if (candidate / "gpus").is_dir():
            return candidate
    raise FileNotFoundError(f"pdmux profiles not found next to {_HERE}: the installation is incomplete")


def gpu_profiles_dir() -> Path:
    """``profiles/gpus``: one YAML file per GPU."""
    return profiles_dir() / "gpus"


def model_profiles_dir() -> Path:
    """``profiles/models``: one Hugging Face ``config.json`` copy per model (``<name>.json``)."""
    return profiles_dir() / "models"


def efficiency_profiles_dir() -> Path:
    """``profiles/efficiency``: the cost model's fitted constants (one YAML per measured GPU, plus
    ``common.yaml`` for the SM-partition and CPU terms)."""
    return profiles_dir() / "efficiency"


def measurements_dir() -> Path:
    """``profiles/measurements``: the public measurements the cost model is fitted to and checked
    against (``pdmux accuracy``)."""
    return profiles_dir() / "measurements"
