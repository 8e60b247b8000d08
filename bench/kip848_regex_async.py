"""What a KIP-848 regex resolution on the resolver thread (regexloop, ``consumer_regex_async.match_all``) costs the
network loop: a thread standing in for the loop sleeps 1 ms over and over while the resolver thread matches, and
its oversleep (the time it waited for the GIL) is measured, with the resolver's voluntary GIL hand-over every
``YIELD_S`` (what the broker does) beside without it (only CPython's forced switch every 5 ms).

Cases: a regex whose RE2 DFA explodes (32 alternatives of ``[ab]*a[ab]{30}c``, the test's) against 500 random
249-character a/b names, and ``orders-.*`` against 100,000 ordinary names.
Run: ``.venv/bin/python bench/kip848_regex_async.py [rounds]`` (default 3).
"""

from __future__ import annotations

import random
import sys
import threading
import time

from tidelog.broker.group import consumer_regex as resolver
from tidelog.broker.re2j import compile_pattern


def _case(heavy: bool) -> tuple[str, list[str]]:
    rnd = random.Random(1)
    if heavy:
        return ("|".join(f"[ab]*{'ab'[i % 2]}[ab]{{{30 - i // 2}}}c" for i in range(32)),
                ["".join(rnd.choice("ab") for _ in range(249)) for _ in range(500)])
    return "orders-.*", [f"{('orders', 'payments')[i % 2]}-region{i % 17}-{i:06d}" for i in range(100000)]


def _run(regex: str, names: list[str], yield_s: float) -> tuple[float, float, float]:
    """(resolver seconds, p99 and max oversleep of the 1 ms sleeper in ms)."""
    resolver.YIELD_S = yield_s
    p = compile_pattern(regex)
    t = threading.Thread(target=resolver.match_all, args=({regex: p}, names))
    t0 = time.perf_counter()
    t.start()
    late: list[float] = []
    while t.is_alive():
        a = time.perf_counter()
        time.sleep(0.001)
        late.append(time.perf_counter() - a - 0.001)
    t.join()
    took = time.perf_counter() - t0
    late.sort()
    return took, late[int(len(late) * 0.99)] * 1000, late[-1] * 1000


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    default = resolver.YIELD_S
    print(f"{'case':8} {'hand-over':>10} {'worker s':>9} {'p99 ms':>8} {'max ms':>8}   (worst of {rounds} rounds)")
    for heavy in (True, False):
        regex, names = _case(heavy)
        rows = {}
        for label, y in (("none", 1e9), (f"{default * 1000:g} ms", default)):
            runs = [_run(regex, names, y) for _ in range(rounds)]
            rows[label] = (max(r[0] for r in runs), max(r[1] for r in runs), max(r[2] for r in runs))
            print(f"{'DFA' if heavy else 'orders':8} {label:>10} {rows[label][0]:9.2f} {rows[label][1]:8.2f} "
                  f"{rows[label][2]:8.2f}")
        (w0, p0, m0), (w1, p1, m1) = rows.values()
        print(f"{'':8} {'ratio':>10} {w1 / w0:9.2f} {p1 / p0:8.2f} {m1 / m0:8.2f}   (hand-over / none)")
    resolver.YIELD_S = default


if __name__ == "__main__":
    main()
