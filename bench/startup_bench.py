"""``tidelog serve`` start-up: exec to the "broker started" line, with and without tidelog's bytecode cached.

Why it matters: the test suite starts thousands of broker and CLI subprocesses, and CI runs with
PYTHONDONTWRITEBYTECODE=1, so unless something writes tidelog's ``__pycache__`` each start compiles ~220 modules
from source (tests/conftest.py now byte-compiles them once per session). Two copies of ``src/tidelog`` (C
extensions included) go into a temporary directory, one byte-compiled, one not, each put first on the broker's
``PYTHONPATH``; the rounds alternate between them so a loaded machine loads both alike. Third-party packages are
``.venv``'s (pip compiled them at install) in both. Wall time is exec -> "broker started"; CPU is the process's
user+sys until it exits (SIGTERM right after the line, so it includes a short shutdown).

    .venv/bin/python bench/startup_bench.py            # 7 rounds
    .venv/bin/python bench/startup_bench.py --rounds 15
"""

from __future__ import annotations

import argparse
import compileall
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "tidelog"


def _copy(dest: Path) -> Path:
    shutil.copytree(SRC, dest / "tidelog", ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def _start_once(pythonpath: Path, data: Path) -> tuple[float, float]:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTHONPATH=str(pythonpath), PYTHONUNBUFFERED="1")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "tidelog.cli.main", "serve", "--host", "127.0.0.1", "--port", "0",
                             "--data-dir", str(data), "-o", "tidelog.metrics.listener=127.0.0.1:0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=pythonpath)
    assert proc.stdout is not None
    wall = None
    for line in proc.stdout:
        if "broker started" in line:
            wall = time.perf_counter() - t0
            break
    proc.terminate()
    proc.communicate(timeout=60)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if wall is None:
        raise SystemExit(f"the broker did not start (exit {proc.returncode})")
    return wall, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="startup-bench-") as tmp:
        root = Path(tmp)
        source = _copy(root / "source")
        cached = _copy(root / "cached")
        compileall.compile_dir(cached / "tidelog", quiet=2)
        for path in (source, cached):  # the copy is what the broker imports, not the checkout
            got = subprocess.run([sys.executable, "-c", "import tidelog; print(tidelog.__file__)"], check=True,
                                 capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(path))).stdout
            assert got.startswith(str(path)), got
        runs: dict[str, list[tuple[float, float]]] = {"source": [], "cached": []}
        for r in range(args.rounds):
            for name, path in (("source", source), ("cached", cached)):
                runs[name].append(_start_once(path, root / f"data-{name}-{r}"))
        print(f"tidelog serve start-up, {args.rounds} alternating rounds (medians; load {os.getloadavg()[0]:.1f})")
        print(f"{'':32}{'no .pyc':>10}{'cached .pyc':>13}{'after/before':>14}")
        for i, what in ((0, "exec -> 'broker started' (s)"), (1, "process CPU (s)")):
            a = statistics.median(x[i] for x in runs["source"])
            b = statistics.median(x[i] for x in runs["cached"])
            print(f"{what:32}{a:10.3f}{b:13.3f}{b / a:13.2f}x")


if __name__ == "__main__":
    main()
