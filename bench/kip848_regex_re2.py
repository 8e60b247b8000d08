"""Cost of resolving KIP-848 regex subscriptions on the broker's loop (``consumer_regex.matches``: one compiled
regex against every topic name, full match), RE2 (what the broker uses, ``tidelog.broker.re2j``) beside Python's
``re`` (what it used before), for ordinary regexes over many topics and for a regex that backtracks exponentially.
Run: ``.venv/bin/python bench/kip848_regex_re2.py [topics]`` (default 20000).
"""

from __future__ import annotations

import random
import re
import sys
import time
from typing import Any

from tidelog.broker.group import consumer_regex
from tidelog.broker.re2j import compile_pattern


class _Mgr:
    def __init__(self, compile_fn: Any) -> None:
        self._compile = compile_fn
        self._regex_matches: dict[str, frozenset[str]] = {}
        self._cache: dict[str, Any] = {}

    def _compiled(self, pattern: str) -> Any:
        rx = self._cache.get(pattern)
        if rx is None:
            rx = self._cache[pattern] = self._compile(pattern)
        return rx


def _time(compile_fn: Any, regex: str, existing: dict[str, int], rounds: int) -> tuple[float, int]:
    best = float("inf")
    n = 0
    for _ in range(rounds):
        mgr = _Mgr(compile_fn)
        t0 = time.perf_counter()
        n = len(consumer_regex.matches(mgr, regex, existing))  # type: ignore[arg-type]
        best = min(best, time.perf_counter() - t0)
    return best, n


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    existing = {f"{('orders', 'payments', 'clicks', 'audit')[i % 4]}-region{i % 17}-{i:06d}": 1 for i in range(n)}
    print(f"one resolution over {n} topics (best of 5), RE2 beside Python re")
    print(f"{'regex':32} {'matched':>8} {'RE2 ms':>9} {'re ms':>9} {'RE2/re':>7}")
    for regex in ("orders-.*", "(orders|payments)-region1[0-6]-.*", ".*-0012.*", "[a-z]+-region\\d+-\\d{6}"):
        t2, k2 = _time(compile_pattern, regex, existing, 5)
        t1, k1 = _time(re.compile, regex, existing, 5)
        assert k1 == k2
        print(f"{regex:32} {k2:8d} {t2 * 1000:9.2f} {t1 * 1000:9.2f} {t2 / t1:7.2f}")
    # the hostile case: one topic of a's, a regex that backtracks; re at 24 a's (every 2 more a's: x4), RE2 at 45
    for regex in ("(a+)+b", "(a|aa)*c"):
        t2, _ = _time(compile_pattern, regex, {"a" * 45: 1}, 5)
        t1, _ = _time(re.compile, regex, {"a" * 24: 1}, 1)
        print(f"{regex:32} {'a*45/24':>8} {t2 * 1000:9.3f} {t1 * 1000:9.1f}   (re at 45 a's: ~{t1 * 2 ** 21:.0f} s "
              "for (a+)+b)" if regex == "(a+)+b" else
              f"{regex:32} {'a*45/24':>8} {t2 * 1000:9.3f} {t1 * 1000:9.1f}")

    # linear is not free: regexes whose DFA explodes, against 20000 random [ab] names (an adversarial topic set)
    rnd = random.Random(1)
    for length in (40, 249):
        names = {"".join(rnd.choice("ab") for _ in range(length)): 1 for _ in range(20000)}
        for regex in ("[ab]*a[ab]{30}c", "(?:[ab]{1,50}){1,20}c"):
            t2, _ = _time(compile_pattern, regex, names, 1)
            if regex.startswith("(?:"):  # re backtracks combinatorially here: not run
                print(f"{regex:32} {'ab*' + str(length):>8} {t2 * 1000:9.1f} {'(hours)':>9}")
                continue
            t1, _ = _time(re.compile, regex, names, 1)
            print(f"{regex:32} {'ab*' + str(length):>8} {t2 * 1000:9.1f} {t1 * 1000:9.1f} {t2 / t1:7.2f}")


if __name__ == "__main__":
    main()
