"""Issue 27 (cg27): the online downgrade triggered by a static member replacement (Kafka's
``validateOnlineDowngradeWithReplacedMember``), with confluent-kafka consumers.

A consumer group (``group.protocol=consumer``) whose members are a consumer-protocol static member (instance
``inst-a``) and a classic static member (``inst-b``, a member using the classic protocol inside the consumer
group). ``inst-a`` is killed (SIGKILL: no leave) and restarted at once with ``group.protocol=classic``: its
JoinGroup replaces the last consumer-protocol member, so the group becomes a classic group right then (before, tidelog
waited for the killed member's session to expire). Every record produced before and after is consumed, the group is
listed as classic, and the new ``inst-a`` consumes the partitions the old one had.
"""

from __future__ import annotations

from typing import Any

from .conftest import MemberProcess, create_topic, exclusive_cover, produce_values, wait_until
from .test_group_migration import CONFIG, _group_type

PARTITIONS = 4
# a long consumer-protocol session: the group must become classic by the replacement, not by the old member's expiry
SLOW_EXPIRY = {**CONFIG, "group.consumer.session.timeout.ms": "30000", "group.consumer.max.session.timeout.ms": "60000"}


def test_classic_static_member_replacing_the_last_consumer_member(broker_factory: Any) -> None:
    b = broker_factory(SLOW_EXPIRY)
    topic, group = "cg27-downgrade", "g-cg27-downgrade"
    create_topic(b.bootstrap, topic, PARTITIONS)
    produced = [f"a{i}" for i in range(40)]
    produce_values(b.bootstrap, topic, produced, PARTITIONS)
    a = MemberProcess("confluent", b.bootstrap, group, topic, protocol="consumer", instance_id="inst-a")
    wait_until(lambda: len(a.assigned) == PARTITIONS, 20, "the consumer-protocol member owns every partition")
    classic = MemberProcess("confluent", b.bootstrap, group, topic, instance_id="inst-b", survive_commit_errors=True)
    everyone = [a, classic]
    try:
        wait_until(lambda: exclusive_cover([a, classic], PARTITIONS) and len(classic.assigned) == 2
                   and set(produced) <= {v for m in everyone for v in m.values()}, 30,
                   "two partitions each, everything consumed")
        assert _group_type(b.bootstrap, group) == ("consumer", "consumer")
        a_parts = sorted(a.assigned)
        a.kill()
        a2 = MemberProcess("confluent", b.bootstrap, group, topic, instance_id="inst-a", survive_commit_errors=True)
        everyone.append(a2)
        wait_until(lambda: _group_type(b.bootstrap, group)[0] == "classic", 15,
                   "the group converted to classic by the replacement")
        more = [f"b{i}" for i in range(40)]
        produce_values(b.bootstrap, topic, more, PARTITIONS)
        produced += more
        wait_until(lambda: exclusive_cover([a2, classic], PARTITIONS)
                   and set(produced) <= {v for m in everyone for v in m.values()}, 30,
                   "the classic group consumes everything")
        assert _group_type(b.bootstrap, group) == ("classic", "classic")
        assert sorted(a2.assigned) == a_parts  # the replacement took the old member's partitions
    finally:
        for m in everyone:
            m.kill()
