"""The Python API swept with hostile values: every public function of ``import pdmux``, every keyword, every
bad value of ``tests/api_surface.py`` ``HOSTILE`` (None, NaN, infinities, negatives, 0, 10^18, booleans,
text, lists, bytes, objects), one at a time on a valid, fast call of the function.

Each try runs in a forked process of its own (in a session and a folder of its own) and is judged by the
API's promise (``api_surface.judge``):

- ``ran``, ``input_error``: as promised;
- ``raised <Type>``: anything but ``pdmux.InputError``;
- ``flag_named``: an ``InputError`` naming the CLI's flag (``--tp``) instead of the keyword (``tp``);
- ``non_finite``: a ``to_dict()`` holding a NaN, an infinity or a negative time;
- ``accepted``: a call that ran on a value of a type its keyword does not admit, or a NaN;
- ``slow``: over ``api_surface.SLOW_S`` seconds more than the function's valid call; ``hang``: killed after
  ``--timeout`` seconds;
- ``left_processes``: processes of the try still running after it returned (killed then).

``tests/test_api_hostile.py`` holds a bounded sample of the same tries to the same judge in CI.

Usage: ``python benchmarks/api_sweep.py [--function NAME] [--jobs N] [--timeout S] [--json FILE] [-v]``;
exit 0 when no try deviates.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import api_surface  # noqa: E402 (tests/api_surface.py)

import pdmux  # noqa: E402

OK_CLASSES = ("ran", "input_error")


def _try(name: str, keyword: str, value: object, base: dict, folder: Path) -> dict:
    """One try, in the forked child: its class, detail and time."""
    os.chdir(tempfile.mkdtemp(dir=folder))
    function = getattr(pdmux, name)
    start = time.monotonic()
    try:
        outcome = function(**api_surface.hostile_call(function, base[name], keyword, value))
    except BaseException as exc:  # noqa: BLE001 - judged: anything but InputError is a deviation
        outcome = exc
    elapsed = time.monotonic() - start
    cls, detail = api_surface.judge(function, outcome, keyword, value)
    return {"class": cls, "detail": detail, "elapsed_s": elapsed}


def _session_processes(session: int) -> list[int]:
    """The live processes of ``session`` (zombies aside)."""
    alive = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[3]) == session:
            alive.append(int(entry.name))
    return alive


def _start(item: tuple, base: dict, folder: Path) -> tuple[int, int]:
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a session of its own, so that whatever it starts can be found and ended
        os.close(read_fd)
        code = 0
        try:
            os.setsid()
            record = _try(item[0], item[1], item[3], base, folder)
            os.write(write_fd, json.dumps(record).encode())
        except BaseException:  # noqa: BLE001
            code = 1
        finally:
            os._exit(code)
    os.close(write_fd)
    return pid, read_fd


def sweep(names: list[str], jobs: int, timeout: float, verbose: bool) -> list[dict]:
    """Every try of ``names``' keywords, ``jobs`` at a time; a record per try."""
    folder = Path(tempfile.mkdtemp(prefix="pdmux-api-sweep-"))
    base = api_surface.base_calls(folder / "inputs")
    os.chdir(folder)
    base_s = {}
    for name in names:  # each valid call once: its time, every lazy import and cache warmed in the parent
        function = getattr(pdmux, name)
        args, kwargs = base[name]
        start = time.monotonic()
        cls, detail = api_surface.judge(function, function(*args, **kwargs))
        base_s[name] = time.monotonic() - start
        assert cls == "ran", (name, cls, detail)
    todo = [(name, keyword, label, value) for name in names
            for keyword in api_surface.keywords(getattr(pdmux, name))
            for label, value in api_surface.HOSTILE
            if api_surface.applies(getattr(pdmux, name), keyword, value)]
    results: list[dict] = []
    running: dict[int, tuple] = {}  # read fd -> (pid, start, item, chunks)
    while todo or running:
        while todo and len(running) < jobs:
            item = todo.pop(0)
            pid, fd = _start(item, base, folder)
            running[fd] = (pid, time.monotonic(), item, [])
        ready, _, _ = select.select(list(running), [], [], 0.2)
        now = time.monotonic()
        for fd in list(running):
            pid, start, item, chunks = running[fd]
            done = False
            if fd in ready:
                data = os.read(fd, 65536)
                chunks.append(data)
                done = not data
            if not done and now - start > timeout:
                os.killpg(pid, signal.SIGKILL)
                chunks[:] = [json.dumps({"class": "hang", "detail": f"killed after {timeout:g} s",
                                         "elapsed_s": now - start}).encode()]
                done = True
            if not done:
                continue
            os.close(fd)
            os.waitpid(pid, 0)
            del running[fd]
            try:
                record = json.loads(b"".join(chunks))
            except ValueError:
                record = {"class": "crashed", "detail": "no judgement came back", "elapsed_s": now - start}
            left = _session_processes(pid)
            if left:
                record = {**record, "class": "left_processes", "detail": f"{len(left)} still running"}
                for p in left:
                    try:
                        os.kill(p, signal.SIGKILL)
                    except OSError:
                        pass
            if record["class"] in OK_CLASSES and record["elapsed_s"] > base_s[item[0]] + api_surface.SLOW_S:
                record = {**record, "class": "slow", "detail": f"{record['elapsed_s']:.1f} s"}
            name, keyword, label, _ = item
            record = {"function": name, "keyword": keyword, "value": label, **record}
            results.append(record)
            if verbose or record["class"] not in OK_CLASSES:
                left = len(todo) + len(running)
                print(f"[{len(results)}/{len(results) + left}] pdmux.{name}({keyword}={label}):"
                      f" {record['class']} {record['detail'][:200]}", flush=True)
    return results


def summary(results: list[dict]) -> str:
    """Tries by class, then the deviations by function and class."""
    by_class = Counter(r["class"] for r in results)
    lines = [f"{len(results)} tries: " + ", ".join(f"{k} {v}" for k, v in by_class.most_common())]
    per: dict[str, Counter] = {}
    for r in results:
        if r["class"] not in OK_CLASSES:
            per.setdefault(r["function"], Counter())[r["class"]] += 1
    lines += [f"  {name}: " + ", ".join(f"{k} {v}" for k, v in c.most_common()) for name, c in per.items()]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--function", action="append", choices=api_surface.FUNCTIONS)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--json", help="write every try's record here")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args()
    start = time.monotonic()
    results = sweep(args.function or list(api_surface.FUNCTIONS), args.jobs, args.timeout, args.verbose)
    print(summary(results))
    print(f"{time.monotonic() - start:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0 if all(r["class"] in OK_CLASSES for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
