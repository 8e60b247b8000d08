"""Build of the optional C accelerators (all other metadata is in pyproject.toml): ``tidelog.records._recwalk``
(record walk, CRC-32C: bytes only), ``tidelog.client._columnar`` (Spark rows and the Spark sink's record accumulator), ``tidelog.storage._segment`` (a
segment's append state, the append fast path, the stamped write, fallocate and the recovery scan; it uses
_recwalk's CRC-32C and walk through a capsule), ``tidelog.storage._cleanwalk`` (the log cleaner's offset map
and batch filter) and ``tidelog.protocol._produce`` (the broker's fast lane: a Produce request of the common shape
parsed and its response encoded).

They are optional: when one cannot be compiled (no C compiler, no Python headers) the install still succeeds
with a warning and tidelog uses the pure-Python code it replaces. ``TIDELOG_PURE_PYTHON=1`` at run time forces
the pure-Python code even when the extensions are built.
"""

from __future__ import annotations

import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """build_ext that never fails the install: a missing compiler or a compile error only warns."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # compiler setup errors happen before the per-extension optional handling
            self._warn(exc)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            self._warn(exc, ext.name)

    @staticmethod
    def _warn(exc: BaseException, name: str = "extensions") -> None:
        print(
            f"WARNING: the optional C {name} was not built ({exc}); tidelog will use its pure-Python code instead",
            file=sys.stderr,
        )


setup(
    # as pyproject.toml's packages.find where=["src"]; repeated so that `python setup.py build_ext --inplace`
    # also works in a bare source export without pyproject.toml (bench/peers.py snapshot_tidelog)
    package_dir={"": "src"},
    ext_modules=[
        Extension(
            "tidelog.records._recwalk",
            sources=["src/tidelog/records/_recwalk.c", "src/tidelog/records/_crc32c.c"],
            depends=[
                "src/tidelog/records/_bytes.h",
                "src/tidelog/records/_crc32c.h",
                "src/tidelog/records/_recwalk.h",
                "src/tidelog/records/_recwalk_capi.h",
            ],
            optional=True,
        ),
        Extension(
            "tidelog.client._columnar",
            sources=["src/tidelog/client/_columnar.c", "src/tidelog/client/_columnar_sink.c"],
            depends=[
                "src/tidelog/records/_bytes.h",
                "src/tidelog/records/_recwalk.h",
                "src/tidelog/client/_columnar.h",
            ],
            optional=True,
        ),
        Extension(
            "tidelog.storage._segment",
            sources=[f"src/tidelog/storage/{name}.c" for name in (
                "_segment", "_segment_state", "_segment_write", "_segment_scan", "_segment_leader",
                "_segment_follower")],
            depends=[
                "src/tidelog/records/_bytes.h",
                "src/tidelog/records/_recwalk_capi.h",
                "src/tidelog/storage/_segment.h",
            ],
            optional=True,
        ),
        Extension(
            "tidelog.storage._cleanwalk",
            sources=["src/tidelog/storage/_cleanwalk.c"],
            depends=["src/tidelog/records/_bytes.h", "src/tidelog/records/_recwalk.h"],
            optional=True,
        ),
        Extension(
            "tidelog.protocol._produce",
            sources=["src/tidelog/protocol/_produce.c"],
            depends=["src/tidelog/records/_bytes.h"],
            optional=True,
        ),
    ],
    cmdclass={"build_ext": OptionalBuildExt},
)
