"""A wheel anyone can install: built with ``python -m build`` (sdist, then the wheel from it) from a clean copy of
the checkout, installed into an empty venv, and used
there with its own ``tidelog`` command (serve, produce, consume, dump-log), from a directory outside the checkout
so nothing but the installed wheel can be imported. A missing package or data file fails here, not for a user."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from docrun import REPO, Command, Shell, clean_copy, user_env

pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.timeout(900)]

EXTENSIONS = (
    "tidelog/records/_recwalk", "tidelog/client/_columnar", "tidelog/storage/_segment", "tidelog/storage/_cleanwalk",
    "tidelog/protocol/_produce",
)


def test_wheel_installs_into_an_empty_venv_and_runs(tmp_path: Path) -> None:
    src = clean_copy(tmp_path / "checkout")
    dist = tmp_path / "dist"
    # as `python -m build` does it: an sdist, then the wheel built from that sdist (so a file the sdist misses,
    # such as a C header, fails here), each in an isolated build environment
    subprocess.run([sys.executable, "-m", "build", "--outdir", str(dist), str(src)],
                   check=True, env=user_env(), timeout=600, capture_output=True)
    (sdist,) = dist.glob("tidelog-*.tar.gz")
    with tarfile.open(sdist) as tar:
        in_sdist = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for c_file in ("src/tidelog/records/_recwalk.c", "src/tidelog/records/_recwalk_capi.h", "src/tidelog/records/_bytes.h",
                   "src/tidelog/storage/_segment.c", "src/tidelog/storage/_segment.h",
                   "src/tidelog/storage/_segment_follower.c", "src/tidelog/records/_crc32c.c",
                   "src/tidelog/records/_crc32c.h", "src/tidelog/client/_columnar_sink.c",
                   "src/tidelog/client/_columnar.h",
                   "src/tidelog/storage/_cleanwalk.c", "src/tidelog/client/_columnar.c",
                   "src/tidelog/protocol/_produce.c"):
        assert c_file in in_sdist, f"{c_file} missing from {sdist.name}"
    (wheel,) = dist.glob("tidelog-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "tidelog/cli/main.py" in names and "tidelog/spark/__init__.py" in names
    assert not any(n.startswith(("tests/", "bench/")) for n in names)
    if shutil.which("gcc"):  # the C accelerators are built when a compiler is present
        for ext in EXTENSIONS:
            assert any(n.startswith(ext) and n.endswith(".so") for n in names), f"{ext} missing from {wheel.name}"

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    subprocess.run([str(venv / "bin/python"), "-m", "pip", "install", "-q", "-c", str(REPO / "constraints.txt"),
                    str(wheel)], check=True, env=user_env(), timeout=600)

    work = tmp_path / "elsewhere"
    work.mkdir()
    shell = Shell(work, user_env())
    tidelog = venv / "bin/tidelog"
    try:
        # port 0: the banner says which port the broker bound
        broker = shell.start_server(
            Command(f"{tidelog} serve --port 0 --data-dir wheel-data -o tidelog.metrics.listener=off",
                    ["bootstrap servers 127.0.0.1:..."], "wheel"), ready_timeout=120)
        found = re.search(r"bootstrap servers\s+(127\.0\.0\.1:\d+)", broker.text())
        assert found, broker.text()
        bootstrap = found.group(1)
        shell.run(Command(f"{tidelog} topics create round-trip -p 1 -b {bootstrap}",
                          ["Created topic round-trip."], "wheel"))
        shell.run(Command(f"printf 'one\\ntwo\\n' | {tidelog} produce round-trip -b {bootstrap}", [], "wheel"))
        out = shell.run(Command(f"{tidelog} consume round-trip --from-beginning --max-messages 2 -b {bootstrap}",
                                ["one", "two"], "wheel"))
        assert out.split() == ["one", "two"]
        shell.run(Command(f"{tidelog} dump-log --deep-iteration --files "
                          "wheel-data/round-trip-0/00000000000000000000.log",
                          ["...baseOffset: 0 lastOffset: 1 count: 2..."], "wheel"))
        # what the wheel's interpreter imports is the wheel, not the checkout
        where = subprocess.run([str(venv / "bin/python"), "-c", "import tidelog; print(tidelog.__file__)"],
                               cwd=work, check=True, capture_output=True, text=True).stdout
        assert str(venv) in where
        assert broker.interrupt(timeout=60)
        assert broker.proc.returncode == 0 and "broker stopped" in broker.text()
    finally:
        shell.stop_all()
