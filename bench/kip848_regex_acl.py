"""Cost of resolving a KIP-848 group's regex subscription on a heartbeat, side by side: without an authorizer, and
with the ACL authorizer filtering the matched topics by DESCRIBE (consumer_regex.refresh, a refresh forced due;
the authorizer's decision cache cold — first refresh — and warm). The regex matches three quarters of the topics;
the principal may describe half of all topics (one PREFIXED ACL). What a due refresh costs on the broker's loop.
Run: ``.venv/bin/python bench/kip848_regex_acl.py [topics]``.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tidelog.broker.group import consumer_regex
from tidelog.broker.group.consumer_group import ConsumerGroup, ConsumerMember
from tidelog.broker.security.acls import AclBinding, AclOperation, PatternType, PermissionType, ResourceType
from tidelog.broker.security.authorizer import AclChanges, Authorizer, FileAclStore


class _Mgr:
    def __init__(self, authorizer: Any) -> None:
        self.coordinator = SimpleNamespace(broker=SimpleNamespace(authorizer=authorizer))
        self.topics_version = 1
        self.regex_refresh_ms = 0  # every refresh due
        self.auth_context: tuple[str, str] | None = ("User:alice", "10.0.0.1")
        self._regex_matches: dict[str, frozenset[str]] = {}
        self._cache: dict[str, Any] = {}

    def _compiled(self, pattern: str) -> Any:
        import re
        return self._cache.setdefault(pattern, re.compile(pattern))


def _authorizer(tmp: Path) -> Authorizer:
    changes = AclChanges()
    auth = Authorizer(FileAclStore(tmp / "acls.json", changes), changes)
    assert auth.create([AclBinding(ResourceType.TOPIC, "orders-a", PatternType.PREFIXED, "User:alice", "*",
                                   AclOperation.READ, PermissionType.ALLOW)]) == [None]
    return auth


def _time(mgr: _Mgr, existing: dict[str, int], rounds: int) -> tuple[float, int]:
    g = ConsumerGroup("bench")
    g.members["m"] = ConsumerMember("m", subscribed_regex="orders-.*")
    t0 = time.perf_counter()
    for _ in range(rounds):
        g.resolved.clear()
        consumer_regex.refresh(mgr, g, existing)  # type: ignore[arg-type]
    return (time.perf_counter() - t0) / rounds, len(g.resolved["orders-.*"].topics)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10000
    # i % 4 in (0, 2): orders-a* (describable), 1: orders-b* (matched, not describable), 3: other-* (not matched)
    existing = {("orders-a" if i % 2 == 0 else "orders-b" if i % 4 == 1 else "other-") + str(i): 1 for i in range(n)}
    rounds = 20
    plain, k0 = _time(_Mgr(None), existing, rounds)
    with tempfile.TemporaryDirectory() as d:
        auth = _authorizer(Path(d))
        cold, k1 = _time(_Mgr(auth), existing, 1)
        warm, k2 = _time(_Mgr(auth), existing, rounds)
    print(f"{n} topics, regex matching {sum(1 for t in existing if t.startswith('orders-'))}: "
          f"no authorizer {plain * 1000:.2f} ms ({k0} topics), with ACLs cold {cold * 1000:.2f} ms, "
          f"warm {warm * 1000:.2f} ms ({k2} topics describable)")
    print(f"ratio with ACLs / without: cold {cold / plain:.2f}x, warm {warm / plain:.2f}x")
    assert k1 == k2 < k0


if __name__ == "__main__":
    main()
