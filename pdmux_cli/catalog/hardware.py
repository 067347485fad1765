"""GPU profiles: SM count, compute capability, memory, bandwidth, dense FLOP/s, L2; and lookup by name.

One YAML file per GPU under ``profiles/gpus/`` (located by
:func:`pdmux_cli.catalog.profile_files.gpu_profiles_dir`); the file stem is the GPU's *key* (``h100-sxm``).
The figures and their sources are collected in ``shared/reference/gpu-specs.md``: dense tensor-core FLOP/s (no
2:4 sparsity), device-reported memory where known, SM counts as enabled on the product, compute capability
from NVIDIA's CUDA GPUs table.

Units everywhere: bytes, bytes/s, FLOP/s, SMs. Every failure is an :class:`InputError` with one line
naming the file or name at fault. Start-up path of ``pdmux splits``: stdlib and ``yaml`` only.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from ..util.errors import InputError, short_repr
from ..util.input_files import read_input_text
from ..util.numbers import finite_float
from .compute_capability import check_known_capability, parse_compute_capability
from .profile_files import gpu_profiles_dir
from ..util.yaml_input import load_yaml

#: libyaml's loader, for the built-in profiles only (files we write; user files go through
#: :func:`pdmux_cli.util.yaml_input.load_yaml`, which is slower but safe on hostile input).
_BUILTIN_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

#: Most SMs a GPU may have here (today's largest: 188). Bounds ``--sms`` and profile files, and so
#: the work of SGLang's partition search, which loops over the SM count.
MAX_SMS = 1024

#: Plausible range of each numeric profile field (its unit in the name). Outside it a value is a
#: typo or a unit slip (bytes vs GB), and would make the cost model meaningless or slow.
FIELD_BOUNDS: dict[str, tuple[float, float]] = {
    "sm_count": (1, MAX_SMS),
    "memory_bytes": (1e8, 1e14),
    "hbm_bytes_per_s": (1e9, 1e15),
    "bf16_dense_flops": (1e9, 1e17),
    "fp16_dense_flops": (1e9, 1e17),
    "fp8_dense_flops": (1e9, 1e17),
    "l2_bytes": (1e4, 1e10),
    "interconnect_bytes_per_s": (1e8, 1e13),
    "interconnect_latency_s": (1e-8, 1e-3),
}

#: ``interconnect`` kinds: the link a tensor-parallel all-reduce between the GPUs of one server crosses.
INTERCONNECTS = ("nvlink", "pcie")

#: Largest GPU profile :func:`load_gpu_file` reads, bytes (a real one is under 2 kB).
MAX_PROFILE_BYTES = 64 * 1024

#: dtype names accepted by :meth:`Gpu.dense_flops`, mapped to the profile field they read.
_DTYPES = {
    "bf16": "bf16",
    "bfloat16": "bf16",
    "fp16": "fp16",
    "float16": "fp16",
    "half": "fp16",
    "fp8": "fp8",
    "float8": "fp8",
    "e4m3": "fp8",
    "fp8_e4m3": "fp8",
}


@dataclass(frozen=True)
class Gpu:
    """One GPU profile. Numbers in base units; ``None`` where the figure is unpublished or absent.

    ``key``: file stem (``"h100-sxm"``). ``name``: display name. ``aliases``: other names it is found
    by, including the name ``torch.cuda.get_device_name()`` / ``nvidia-smi`` report.
    ``sm_count``: SMs enabled on the product (``None`` only where unpublished, e.g. B100).
    ``compute_capability``: ``(major, minor)``. ``memory_bytes``: device memory, bytes (device-reported
    where known, see ``memory_note``). ``hbm_bytes_per_s``: peak memory bandwidth, bytes/s.
    ``*_dense_flops``: dense tensor-core FLOP/s per dtype (``None``: no such tensor format).
    ``l2_bytes``: L2 cache, bytes. ``source``: where the figures come from. ``note``: caveats.
    ``interconnect``: the link GPUs of one server all-reduce over (``"nvlink"`` or ``"pcie"``; ``""``
    when the profile does not say). ``interconnect_bytes_per_s``: its bandwidth per GPU and direction,
    bytes/s (NVLink4's "900 GB/s" is 450 GB/s each way; PCIe Gen5 x16 is 63 GB/s each way).
    ``interconnect_latency_s``: the link's latency per hop, s (NCCL's own tuning constant for the
    kind). ``interconnect_source``: where those three come from. ``None`` where unknown (a ``--sms/--cc``
    device, a profile file of one's own without them): tensor parallelism cannot be estimated there.
    """

    key: str
    name: str
    aliases: tuple[str, ...]
    sm_count: int | None
    compute_capability: tuple[int, int]
    memory_bytes: int
    hbm_bytes_per_s: float
    bf16_dense_flops: float | None
    fp16_dense_flops: float | None
    fp8_dense_flops: float | None
    l2_bytes: int | None
    source: str
    note: str = ""
    memory_note: str = ""
    interconnect: str = ""
    interconnect_bytes_per_s: float | None = None
    interconnect_latency_s: float | None = None
    interconnect_source: str = ""

    def require_interconnect(self, tp: int) -> tuple[str, float, float]:
        """``(kind, bytes/s per direction, latency per hop in s)`` of the link ``tp`` GPUs all-reduce
        over. Raises :class:`InputError` when the profile does not give them (``tp`` is for the message)."""
        if not self.interconnect or not self.interconnect_bytes_per_s or not self.interconnect_latency_s:
            raise InputError(
                "{gpu} has no interconnect figures, so {flag.tp} {tp} cannot be estimated: add interconnect "
                "(nvlink or pcie), interconnect_bytes_per_s, interconnect_latency_s and interconnect_source "
                "to its profile (as in profiles/gpus/h100-sxm.yaml)",
                param="tp",
                values={"gpu": self.name, "tp": tp},
            )
        return self.interconnect, float(self.interconnect_bytes_per_s), float(self.interconnect_latency_s)

    def dense_flops(self, dtype: str = "bf16") -> float:
        """Dense tensor-core FLOP/s for ``dtype``: ``"bf16"``, ``"fp16"`` or ``"fp8"``.

        ``"bf16"`` falls back to the fp16 figure on chips without bf16 tensor cores (V100, T4), where
        bf16 models are served in fp16. Raises :class:`InputError` for an unknown dtype or when the
        GPU has no figure for it (fp8 before Ada/Hopper, or a ``--sms/--cc`` custom GPU).
        """
        kind = _DTYPES.get(str(dtype).strip().lower())
        if kind is None:
            raise InputError(f"unknown dtype {dtype!r}: use bf16, fp16 or fp8")
        value = getattr(self, f"{kind}_dense_flops")
        if value is None and kind == "bf16":
            value = self.fp16_dense_flops
        if value is None:
            raise InputError(
                f"{self.name} has no {kind} tensor-core figure (no such format, or not in its profile)"
            )
        return value

    def require_sm_count(self) -> int:
        """The SM count; raises :class:`InputError` where it is not published (B100)."""
        if self.sm_count is None:
            major, minor = self.compute_capability
            raise InputError(
                "{gpu}'s SM count is not published, so it cannot be planned for; pick another profile, or "
                "give the "
                "device's numbers where a command takes them ({flag.sms} N {flag.cc} {major}.{minor})",
                param="gpu",
                values={"gpu": self.name, "major": major, "minor": minor},
            )
        return self.sm_count


# --------------------------------------------------------------------------------------------------
# Loading and validation
# --------------------------------------------------------------------------------------------------

_FIELDS = {
    "name",
    "aliases",
    "sm_count",
    "compute_capability",
    "memory_bytes",
    "memory_note",
    "hbm_bytes_per_s",
    "bf16_dense_flops",
    "fp16_dense_flops",
    "fp8_dense_flops",
    "l2_bytes",
    "source",
    "note",
    "interconnect",
    "interconnect_bytes_per_s",
    "interconnect_latency_s",
    "interconnect_source",
}
_REQUIRED = ("name", "sm_count", "compute_capability", "memory_bytes", "hbm_bytes_per_s")


def _number(data: dict, field: str, where: str, *, integer: bool, optional: bool) -> float | int | None:
    """Field ``field`` as a positive number (int when ``integer``); ``None`` allowed when ``optional``.

    Accepts numeric text too, because PyYAML reads ``3.35e12`` (no sign in the exponent) as a string.
    """
    value = data.get(field)
    if value is None:
        if optional:
            return None
        raise InputError(f"{where}: field '{field}' must be a number, got null")
    number = finite_float(value)
    if number is None or number <= 0:
        raise InputError(f"{where}: field '{field}' must be a finite positive number, got "
                         f"{short_repr(value)}")
    low, high = FIELD_BOUNDS[field]
    if not low <= number <= high:
        raise InputError(f"{where}: field '{field}' must be from {low:g} to {high:g}, got "
                         f"{short_repr(value)}")
    if integer:
        if number != int(number):
            raise InputError(f"{where}: field '{field}' must be a whole number, got {short_repr(value)}")
        return int(number)
    return number


def _text(data: dict, field: str, where: str, default: str | None = None) -> str:
    value = data.get(field)
    if value is None and default is not None:
        return default
    if not isinstance(value, str) or (default is None and not value.strip()):
        raise InputError(f"{where}: field '{field}' must be a non-empty string, got {short_repr(value)}")
    if not value.isprintable():  # an ESC or bidi override in a name would reach the terminal
        raise InputError(f"{where}: field '{field}' must be printable text (no control characters), "
                         f"got {short_repr(value)}")
    return value.strip()


#: Longest GPU name a profile may give, characters (the driver's names are under 40; every table shows it).
MAX_NAME_CHARS = 120


def _name(data: dict, where: str) -> str:
    name = _text(data, "name", where)
    if len(name) > MAX_NAME_CHARS:
        raise InputError(f"{where}: field 'name' is {len(name):,} characters; give at most {MAX_NAME_CHARS} "
                         f"(as the driver reports it, e.g. 'NVIDIA H100 80GB HBM3')")
    return name


def _gpu_from_mapping(data: object, key: str, where: str) -> Gpu:
    """Validate one parsed profile and build its :class:`Gpu`. ``where`` names the file in errors."""
    if not isinstance(data, dict):
        raise InputError(
            f"{where}: a GPU profile must be a YAML mapping of fields, got {type(data).__name__}"
        )
    unknown = sorted(str(k) for k in data if k not in _FIELDS)
    if unknown:
        raise InputError(f"{where}: unknown field '{unknown[0]}' (known: {', '.join(sorted(_FIELDS))})")
    for field in _REQUIRED:
        if field not in data:
            raise InputError(f"{where}: missing field '{field}'")

    aliases = data.get("aliases", [])
    if aliases is None:
        aliases = []
    if not isinstance(aliases, list) or not all(isinstance(a, str) and a.strip() and a.isprintable()
                                                for a in aliases):
        raise InputError(
            f"{where}: field 'aliases' must be a list of printable strings (quote numbers: \"4090\"), "
            f"got {short_repr(aliases)}"
        )

    cc_raw = data["compute_capability"]
    if isinstance(cc_raw, bool) or not isinstance(cc_raw, (str, int, float)):
        raise InputError(
            f"{where}: field 'compute_capability' must be MAJOR.MINOR text like \"9.0\", got "
            f"{short_repr(cc_raw)}"
        )
    try:
        cc = check_known_capability(parse_compute_capability(cc_raw))  # as --cc: no invented capability
    except InputError as exc:
        raise InputError(f"{where}: field 'compute_capability': {exc}") from None

    sm_count = _number(data, "sm_count", where, integer=True, optional=True)
    note = _text(data, "note", where, default="")
    link = _text(data, "interconnect", where, default="").lower()
    if link and link not in INTERCONNECTS:
        raise InputError(f"{where}: field 'interconnect' must be one of {', '.join(INTERCONNECTS)}, "
                         f"got {short_repr(data.get('interconnect'))}")
    link_fields = ("interconnect", "interconnect_bytes_per_s", "interconnect_latency_s")
    given = [f for f in link_fields if data.get(f) is not None]
    if given and len(given) < len(link_fields):
        missing = next(f for f in link_fields if f not in given)
        raise InputError(f"{where}: field '{missing}' is missing: interconnect, interconnect_bytes_per_s and "
                         "interconnect_latency_s go together")
    if sm_count is None and not note:
        raise InputError(f"{where}: field 'sm_count' is null: add a 'note' saying why (unpublished?)")

    return Gpu(
        key=key,
        name=_name(data, where),
        aliases=tuple(a.strip() for a in aliases),
        sm_count=sm_count,
        compute_capability=cc,
        memory_bytes=_number(data, "memory_bytes", where, integer=True, optional=False),
        hbm_bytes_per_s=_number(data, "hbm_bytes_per_s", where, integer=False, optional=False),
        bf16_dense_flops=_number(data, "bf16_dense_flops", where, integer=False, optional=True),
        fp16_dense_flops=_number(data, "fp16_dense_flops", where, integer=False, optional=True),
        fp8_dense_flops=_number(data, "fp8_dense_flops", where, integer=False, optional=True),
        l2_bytes=_number(data, "l2_bytes", where, integer=True, optional=True),
        source=_text(data, "source", where, default=f"user profile {where}"),
        note=note,
        memory_note=_text(data, "memory_note", where, default=""),
        interconnect=link,
        interconnect_bytes_per_s=_number(data, "interconnect_bytes_per_s", where, integer=False,
                                         optional=True),
        interconnect_latency_s=_number(data, "interconnect_latency_s", where, integer=False, optional=True),
        interconnect_source=_text(data, "interconnect_source", where, default=""),
    )


def load_gpu_file(path: str | Path, *, builtin: bool = False) -> Gpu:
    """Load one GPU profile YAML from any path (users may add their own); the key is the file stem.

    Fields as in ``profiles/gpus/*.yaml``: required ``name``, ``sm_count`` (int or null with a
    ``note``), ``compute_capability`` (``"9.0"``), ``memory_bytes``, ``hbm_bytes_per_s``; optional
    ``aliases``, ``bf16_dense_flops``, ``fp16_dense_flops``, ``fp8_dense_flops``, ``l2_bytes``,
    ``source``, ``note``, ``memory_note``, and (all three or none) ``interconnect``,
    ``interconnect_bytes_per_s``, ``interconnect_latency_s``, with ``interconnect_source``. Raises
    :class:`InputError` naming the file (and field) on a missing, unreadable or non-UTF-8 file, a directory or
    special file (device, pipe, socket), a file over :data:`MAX_PROFILE_BYTES`, bad YAML, a field written
    twice, an unknown, missing or wrongly typed field. ``builtin``: one of our own ``profiles/gpus`` files,
    parsed with libyaml.
    """
    p = Path(path)
    where = str(p)
    text = read_input_text(p, "GPU profile", MAX_PROFILE_BYTES)
    if builtin:
        try:
            data = yaml.load(text, Loader=_BUILTIN_LOADER)
        except yaml.YAMLError as exc:
            first = " ".join(str(exc).split())
            raise InputError(f"GPU profile {where} is not valid YAML: {first}") from None
    else:
        data, duplicate_keys = load_yaml(text, f"GPU profile {where}")
        if duplicate_keys:
            key, line = duplicate_keys[0]
            raise InputError(f"{where}: field '{key}' is written twice (again at line {line}): keep one")
    return _gpu_from_mapping(data, p.stem, where)


@functools.cache
def load_gpus() -> tuple[Gpu, ...]:
    """Every built-in profile in ``profiles/gpus/``, sorted by key. Cached for the process.

    Raises :class:`InputError` naming the file and field for a malformed profile, and when two
    profiles share a name or alias (after normalisation, see :func:`find_gpu`).
    """
    gpus = tuple(sorted((load_gpu_file(p, builtin=True) for p in gpu_profiles_dir().glob("*.yaml")),
                        key=lambda g: g.key))
    _index(gpus)  # reject ambiguous names up front
    return gpus


_SEPARATORS = re.compile(r"[\s_\-]+")


def normalize_gpu_name(name: str) -> str:
    """Lookup form of a GPU name: lowercase, no leading ``nvidia``, spaces/underscores/hyphens dropped.

    ``"NVIDIA H100 80GB HBM3"`` -> ``"h10080gbhbm3"``; ``"H100 SXM"`` and ``"h100_sxm"`` -> ``"h100sxm"``.
    """
    text = str(name).strip().lower()
    text = re.sub(r"^nvidia(?=[\s_\-]|$)", "", text)
    return _SEPARATORS.sub("", text)


def _names(gpu: Gpu) -> tuple[str, ...]:
    return (gpu.key, gpu.name, *gpu.aliases)


def _index(gpus: tuple[Gpu, ...]) -> dict[str, Gpu]:
    index: dict[str, Gpu] = {}
    for gpu in gpus:
        for label in _names(gpu):
            norm = normalize_gpu_name(label)
            other = index.get(norm)
            if other is not None and other.key != gpu.key:
                raise InputError(
                    f"GPU profiles {other.key}.yaml and {gpu.key}.yaml both answer to {label!r}: "
                    "names and aliases must be unique"
                )
            index[norm] = gpu
    return index


@functools.cache
def _builtin_index() -> tuple[dict[str, Gpu], dict[str, str]]:
    """(normalised name -> Gpu, normalised name -> a spelling to suggest), over all built-in profiles."""
    gpus = load_gpus()
    shown: dict[str, str] = {}
    for gpu in gpus:
        for label in _names(gpu):
            shown.setdefault(normalize_gpu_name(label), label)
    return _index(gpus), shown


def find_gpu(name: str) -> Gpu:
    """The built-in profile called ``name``: its key, display name or any alias.

    Case-insensitive; a leading ``NVIDIA`` is ignored and spaces, underscores and hyphens are
    dropped, so ``"H100 SXM"``, ``"h100_sxm"`` and ``"NVIDIA H100 80GB HBM3"`` all find ``h100-sxm``.
    Raises :class:`InputError` for an unknown name, listing the closest known names.
    """
    index, shown = _builtin_index()
    norm = normalize_gpu_name(name)
    gpu = index.get(norm)
    if gpu is not None:
        return gpu
    import difflib  # only on this error path: keeps start-up light

    close = difflib.get_close_matches(norm, list(index), n=12, cutoff=0.5)
    suggestions: list[str] = []
    seen: set[str] = set()
    for candidate in close:  # best first; one spelling per GPU
        if index[candidate].key not in seen:
            seen.add(index[candidate].key)
            suggestions.append(shown[candidate])
    hint = f"closest: {', '.join(suggestions[:4])}" if suggestions else "no close match"
    raise InputError("unknown GPU {name}; {hint} (pdmux splits {flag.all_gpus} lists every profile)",
                     param="gpu", values={"name": short_repr(name), "hint": hint})


def find_gpu_or_file(name: str) -> Gpu:
    """What ``--gpu`` names: a built-in profile (:func:`find_gpu`), or a profile file of one's own
    when ``name`` ends in ``.yaml``/``.yml`` or holds a path separator (:func:`load_gpu_file`; the
    same fields as ``profiles/gpus/*.yaml``). Raises :class:`InputError` as those two do.
    """
    if name.strip().lower().endswith((".yaml", ".yml")) or "/" in name or os.sep in name:
        return load_gpu_file(name.strip())
    return find_gpu(name)
