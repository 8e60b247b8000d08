"""Benchmark tidelog revisions side by side in one run: the ``--tidelog-rev`` option every bench that compares
tidelog builds shares (storage_bench, cleaner_bench, broker_bench, loop_stall_bench, cluster_bench).

``--tidelog-rev REV`` compares REV (before) with ``HEAD`` (after); ``--tidelog-rev A,B,...`` names the revisions
in order; ``worktree`` is the live work tree (uncommitted edits included). Each revision other than ``worktree``
is exported with ``git archive`` into a temporary directory and its optional C extensions are built there in
place (``setup.py build_ext --inplace``, as ``pip install -e .`` does), so it runs its own compiled code, not the
work tree's; the interpreter and third-party packages are the work tree's ``.venv``. Edits made in the work tree
while a bench runs do not leak into a snapshot.

Two ways to run a revision:

* a broker process (broker_bench, loop_stall_bench, cluster_bench): ``env_for(rev)`` puts the snapshot's
  ``src`` first on ``PYTHONPATH`` of ``tidelog serve``;
* an in-process bench (storage_bench, cleaner_bench): :func:`run_in_each` runs the bench script itself once per
  revision in a child interpreter with that ``PYTHONPATH`` (the script is the work tree's, so every revision is
  measured by the same code; it must cope with older revisions' module layout). The child prints its usual
  output and hands its figures back through :func:`emit`; the parent prints them side by side
  (:func:`print_side_by_side`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: set in a child run: the file the child writes its figures to (JSON)
RESULTS_ENV = "TIDELOG_BENCH_RESULTS"
#: set in a child run: the tidelog sources the child must import (checked by :func:`emit`)
SRC_ENV = "TIDELOG_BENCH_SRC"


def snapshot_tidelog(dest: Path, rev: str = "HEAD") -> str:
    """Export tidelog's committed sources at `rev` into dest/src (git archive); returns the commit id.
    The benchmark then measures exactly that commit, whatever happens in the work tree meanwhile.
    When that commit has setup.py, its optional C extensions are built in place (as `pip install -e .`
    does), so the snapshot does not silently run the pure-Python fallbacks."""
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--verify", f"{rev}^{{commit}}"], capture_output=True, text=True,
        check=True, timeout=30,
    ).stdout.strip()
    dest.mkdir(parents=True, exist_ok=True)
    has_setup = (
        subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{commit}:setup.py"], capture_output=True,
                       timeout=30).returncode
        == 0
    )
    # setup.py without pyproject.toml: the venv's setuptools need not understand the project metadata
    paths = ["src/tidelog"] + (["setup.py"] if has_setup else [])
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", commit, *paths],
        capture_output=True,
        check=True,
        timeout=120,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True, timeout=120)
    if has_setup:
        built = subprocess.run(
            [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
            cwd=dest, capture_output=True, text=True, timeout=600,
        )
        if built.returncode != 0 or "WARNING: the optional C extension" in built.stderr:
            print(f"warning: C extensions of the tidelog snapshot not built (pure Python):\n{built.stderr[-2000:]}",
                  file=sys.stderr)
    return commit


def add_argument(parser, default: str | None = None, what: str = "") -> None:
    """The shared ``--tidelog-rev`` option."""
    parser.add_argument(
        "--tidelog-rev",
        default=default,
        metavar="REV[,REV...]",
        help="benchmark git revisions side by side: one REV = REV (before) against HEAD (after); a comma list = "
        "those, in order; 'worktree' = the live work tree. Each is exported and its C extensions built in a "
        "temporary directory" + (f". {what}" if what else ""),
    )


def parse_revs(value: str | None) -> list[str]:
    """``--tidelog-rev``'s revisions in order: one REV means [REV, HEAD] (unless it is HEAD or worktree)."""
    revs = [r.strip() for r in (value or "").split(",") if r.strip()]
    if len(revs) == 1 and revs[0] not in ("HEAD", "worktree"):
        revs.append("HEAD")
    return revs


@dataclass
class Revision:
    rev: str
    commit: str  # "" for the work tree
    src: Path  # the directory holding the ``tidelog`` package

    @property
    def label(self) -> str:
        if not self.commit:
            return "worktree"
        return self.rev if self.commit.startswith(self.rev) else f"{self.rev} ({self.commit[:8]})"


def prepare(revs: list[str], work: Path) -> list[Revision]:
    """Snapshot and build every revision under ``work`` (the work tree is used as it is)."""
    out = []
    for rev in revs:
        if rev == "worktree":
            out.append(Revision(rev, "", ROOT / "src"))
            continue
        dest = work / f"src-{rev.replace('/', '_').replace('~', '_').replace('^', '_')}"
        print(f"[tidelog-rev] exporting {rev} to {dest} and building its C extensions ...", file=sys.stderr,
              flush=True)
        commit = snapshot_tidelog(dest, rev)
        out.append(Revision(rev, commit, dest / "src"))
    return out


def env_for(rev: Revision, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a process that must run ``rev``'s tidelog: its sources first on PYTHONPATH."""
    env = dict(os.environ if base is None else base)
    old = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(rev.src) + (os.pathsep + old if old else "")
    env[SRC_ENV] = str(rev.src)
    return env


def strip_rev_args(argv: list[str]) -> list[str]:
    """``argv`` without ``--tidelog-rev`` and its value (the children run one revision each)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == "--tidelog-rev":
            skip = True
            continue
        if a.startswith("--tidelog-rev="):
            continue
        out.append(a)
    return out


def run_in_each(script: str | Path, argv: list[str], revs: list[str], timeout: float = 3600.0
                ) -> list[tuple[Revision, dict | None]]:
    """Run ``script argv`` once per revision (each a child interpreter importing that revision's tidelog, its
    output passed through); the figures each child handed to :func:`emit` (None if it failed)."""
    results: list[tuple[Revision, dict | None]] = []
    with tempfile.TemporaryDirectory(prefix="tidelog-revs-") as tmp:
        revisions = prepare(revs, Path(tmp))
        for i, rev in enumerate(revisions):
            out = Path(tmp) / f"results-{i}.json"
            env = env_for(rev)
            env[RESULTS_ENV] = str(out)
            print(f"\n===== {rev.label} =====", flush=True)
            proc = subprocess.run([sys.executable, str(script), *strip_rev_args(argv)], env=env, timeout=timeout)
            data = json.loads(out.read_text()) if out.exists() else None
            if proc.returncode not in (0, 1) or data is None:
                print(f"[tidelog-rev] {rev.label}: the bench failed (exit {proc.returncode})", file=sys.stderr)
            results.append((rev, data))
    return results


def is_child() -> bool:
    return bool(os.environ.get(RESULTS_ENV))


def emit(figures: dict) -> None:
    """In a child run: hand ``figures`` (JSON-able) to the parent. Refuses to report figures of the wrong code
    (the child imported tidelog from somewhere else than the revision it was started for)."""
    path = os.environ.get(RESULTS_ENV)
    if not path:
        return
    tidelog = sys.modules.get("tidelog")  # the bench has imported it by now
    want = os.environ.get(SRC_ENV)
    got = Path(tidelog.__file__).resolve().parent.parent if tidelog is not None else None
    if want and got != Path(want).resolve():
        raise SystemExit(f"tidelog imported from {got}, not from the revision's {want}")
    Path(path).write_text(json.dumps(figures))


def print_side_by_side(title: str, results: list[tuple[Revision, dict | None]],
                       ratio: dict[str, bool] | None = None) -> None:
    """One table: a row per figure (``{name: value}`` of every revision, in first-seen order), a column per
    revision, and, for the figures named in ``ratio`` (True: higher is better), last/first as "after/before"
    (> 1 means the last revision is better)."""
    labels = [rev.label for rev, _ in results]
    names: list[str] = []
    for _, figs in results:
        for k in figs or {}:
            if k not in names:
                names.append(k)
    ratio = ratio or {}
    header = ["figure", *labels] + (["after/before"] if len(results) > 1 and ratio else [])
    rows = []
    for name in names:
        vals = [(figs or {}).get(name) for _, figs in results]
        cells = [name, *["-" if v is None else _fmt(v) for v in vals]]
        if len(header) > len(cells):
            first, last = vals[0], vals[-1]
            if name in ratio and isinstance(first, int | float) and isinstance(last, int | float) and first and last:
                cells.append(f"{(last / first) if ratio[name] else (first / last):.2f}x")
            else:
                cells.append("")
        rows.append(cells)
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    print(f"\n{title}")
    print(" | ".join(h.ljust(w) for h, w in zip(header, widths)))
    print("-+-".join("-" * w for w in widths))
    for r in rows:
        print(" | ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(r, widths))))


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return f"{v:,.2f}" if abs(v) >= 1 else f"{v:.4f}"
    return str(v)
