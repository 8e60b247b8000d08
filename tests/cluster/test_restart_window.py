"""A broker restarted after a kill -9 opens its listener before it can register in ZooKeeper (its previous
registration lingers until that session expires): what it answers meanwhile must still describe the cluster.

Seen in CI as a CreateTopics with no answer in 30 s right after a broker restart: the restarted broker answered
the admin client's bootstrap Metadata with no brokers and controller -1, and librdkafka, its controller unknown,
waited for a broker state change that never came instead of asking again.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

pytest.importorskip("kazoo", reason="kazoo is not installed")

from support import create_topic, kazoo, request, until

from tidelog.cluster import zkdata as zd
from tidelog.protocol.api_keys import ApiKey

pytestmark = [pytest.mark.integration, pytest.mark.slow]

METADATA = ApiKey.METADATA


def _metadata(broker: Any) -> dict:
    return request(broker, METADATA, 9, {"topics": None, "allow_auto_topic_creation": False,
                                         "include_cluster_authorized_operations": False,
                                         "include_topic_authorized_operations": False}, timeout=15)


def test_restarted_broker_describes_the_cluster_before_it_registers(cluster: Any) -> None:
    """Broker ``victim`` is kill -9'ed and started again while a registration of its id is still in ZooKeeper
    (here held by the test's own session, standing in for the dead process's session that has not expired yet),
    so it sits in its registration wait with the listener open. Its Metadata then names the controller and the
    registered brokers, and a CreateTopics through librdkafka bootstrapped at it alone is answered."""
    with kazoo(cluster.zk.connect) as zk:
        controller = zd.decode_controller(zk.get(zd.CONTROLLER)[0])
        victim = next(i for i in sorted(cluster.brokers) if i != controller)
        path = zd.broker_path(victim)
        registration = zk.get(path)[0]
        cluster.brokers[victim].kill()
        until(f"the registration of broker {victim} expired", lambda: zk.exists(path) is None, timeout=60)
        zk.create(path, registration, ephemeral=True)  # the stale registration the restart has to wait for
        try:
            cluster.brokers[victim].start(timeout=60)  # returns once the listener is open
            b = cluster.brokers[victim]
            until(f"broker {victim} waiting for the old registration to go",
                  lambda: "previous registration still present" in b.log_text(), timeout=30)
            md = _metadata(b)
            assert md["controller_id"] == controller, md
            assert {x["node_id"] for x in md["brokers"]} == set(cluster.brokers), md

            from confluent_kafka.admin import AdminClient, NewTopic

            topic = f"rw-{uuid.uuid4().hex[:8]}"
            admin = AdminClient({"bootstrap.servers": b.bootstrap})
            admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(20)
            assert zk.exists(zd.topic_path(topic)) is not None
        finally:
            zk.delete(path)  # the old session ends: the restarted broker registers
    cluster.wait_for(f"broker {victim} registered again", lambda md: victim in md.brokers)
    until(f"broker {victim} lists itself", lambda: victim in {x["node_id"] for x in _metadata(b)["brokers"]},
          timeout=30)
    create_topic(cluster.bootstrap, f"rw-{uuid.uuid4().hex[:8]}", 1, 3)
