"""Reading YAML that users write (pdmux configs, calibration files, GPU profiles) and quoting it back.

PyYAML's safe loader is the parser; this module adds what a tool reading hand-edited files needs:

- every mapping key written twice is noted (PyYAML silently keeps the last value);
- values PyYAML fails to build raise ``ValueError`` rather than ``YAMLError`` (an unquoted
  ``2025-13-45`` is read as a timestamp; an integer over Python's 4300-digit limit): both become
  one-line :class:`InputError`, as does nesting too deep for the constructor;
- the pure-Python parser, not libyaml's: libyaml's composer recurses in C, and a 200 kB file of
  ``[`` overflows the C stack (a segfault); Python's own recursion limit turns that into an error.
  It reads about 50 kB/s, so the loaders cap user files at 64-256 KiB (real ones are a few kB);
  the built-in GPU profiles, which we write, use libyaml;
- messages quote values with :func:`pdmux_cli.util.errors.short_repr`: a file of a few hundred bytes
  can expand through anchors and aliases into ``9**9`` list items ("billion laughs"), cheap to
  build as shared references but endless to print.
"""

from __future__ import annotations

from typing import Any

import yaml

from .errors import InputError


class DuplicateKeyLoader(yaml.SafeLoader):
    """PyYAML's pure-Python safe loader, noting every mapping key written twice."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self.duplicate_keys: list[tuple[str, int]] = []  # (key, line of the repeat, 1-based)

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: set[Any] = set()
            for key_node, _ in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=False)
                try:
                    repeated = key in seen
                    seen.add(key)
                except TypeError:  # unhashable: the base class reports it
                    continue
                if repeated:
                    self.duplicate_keys.append((str(key), key_node.start_mark.line + 1))
        return super().construct_mapping(node, deep=deep)


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _reader_problem(text: str, exc: Any, label: str) -> str:
    """The one line for PyYAML's ``ReaderError``: a character YAML 1.1 forbids (controls other than tab,
    LF and CR; U+FFFE, U+FFFF; lone surrogates), with its line and column (1-based)."""
    position = getattr(exc, "position", None)
    char = getattr(exc, "character", None)
    code = f"U+{char:04X}" if isinstance(char, int) else (f"U+{ord(char):04X}" if isinstance(char, str)
                                                          and len(char) == 1
                                                         else "a control character")
    where = ""
    if isinstance(position, int) and 0 <= position <= len(text):
        line = text.count("\n", 0, position) + 1
        column = position - (text.rfind("\n", 0, position) + 1) + 1
        where = f" at line {line}, column {column}"
    return (f"{label} is not valid YAML: character {code}{where} is not allowed (YAML takes no control "
            "characters but tab and newline, and no U+FFFE/U+FFFF): remove it")


def load_yaml(text: str, label: str) -> tuple[Any, list[tuple[str, int]]]:
    """Parse one YAML document with the safe loader: ``(data, duplicate_keys)``.

    ``label`` starts every message (``"calibration file out/calibration.yaml"``).
    ``duplicate_keys``: ``(key, line)`` for each key written again in the same mapping (1-based
    line of the repeat). Raises :class:`InputError` (one line) for text that is not YAML (with the
    line and column), a value YAML cannot build (an impossible date, a huge integer), or nesting
    deeper than Python's recursion limit.
    """
    try:
        loader = DuplicateKeyLoader(text)  # the reader refuses control characters here, before parsing
    except yaml.reader.ReaderError as exc:
        raise InputError(_reader_problem(text, exc, label)) from None
    try:
        data = loader.get_single_data()
    except yaml.reader.ReaderError as exc:  # pragma: no cover - the whole text is checked above
        raise InputError(_reader_problem(text, exc, label)) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or getattr(exc, "context", None) or str(exc)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise InputError(f"{label} is not valid YAML ({_one_line(problem)}{where})") from None
    except (ValueError, OverflowError) as exc:  # PyYAML builds dates and ints itself
        raise InputError(
            f"{label}: a value YAML cannot read ({_one_line(exc).split(';')[0][:120]}): an unquoted date or "
            "a number too long; quote text, write numbers in plain or exponent form"
        ) from None
    except RecursionError:
        raise InputError(f"{label}: lists or mappings nested too deeply to read") from None
    finally:
        loader.dispose()
    return data, loader.duplicate_keys
