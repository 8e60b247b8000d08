"""Reliability anchor 6: only a stale (out-of-ISR) replica is alive (3 brokers, a real ZooKeeper).

Topic RF=3 (replicas [1, 2, 3]), ``min.insync.replicas=2``, an idempotent ``acks=all`` producer. Broker 3 is
killed and leaves the ISR; more records are acknowledged by 1 and 2 alone; then 1 and 2 are killed and only 3,
whose log lacks those records, is started again.

* ``unclean.leader.election.enable`` false (Kafka's default): the controller (now broker 3) decides the partition
  with 3 alive and leaves it leaderless; 3's log is not touched; once 1 and 2 are back the last ISR member leads
  and every acknowledged record is there.
* set to true on the topic while the partition is offline (IncrementalAlterConfigs, a dynamic topic config as in
  Kafka): the controller elects 3 at once (ISR = [3]), counts it in ``tidelog_controller_unclean_leader_elections_total``
  and logs it; the records 3 lacked are lost (that is what the switch allows), 1 and 2 truncate to 3's log when
  they return, and the replicas converge byte for byte.

Waits are on ZooKeeper state (a state znode written after broker 3's registration), never on fixed times.
"""

from __future__ import annotations

import functools
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource
from support import Ledger, converged, create_topic, kazoo, log_bytes, read_all, state, until

from tidelog.cluster import zkdata as zd

pytestmark = [pytest.mark.integration, pytest.mark.slow]

STALE = 3
N_BOTH = 100  # acknowledged while 3 is in the ISR
N_WITHOUT = 100  # acknowledged by 1 and 2 after 3 left the ISR
PRODUCER = {"acks": "all", "enable.idempotence": True, "linger.ms": 2, "message.timeout.ms": 60000,
            "request.timeout.ms": 5000, "retry.backoff.ms": 50, "topic.metadata.refresh.interval.ms": 1000}
UNCLEAN_METRIC = "tidelog_controller_unclean_leader_elections_total"

_until = functools.partial(until, interval=0.05)


@pytest.fixture(scope="module")
def c(cluster_with: Any) -> Any:
    cl = cluster_with({"zookeeper.session.timeout.ms": "2000", "replica.fetch.wait.max.ms": "200",
                       "replica.fetch.backoff.ms": "100"})
    with kazoo(cl.zk.connect) as zk:
        cl.kz = zk
        yield cl


def _produce(c: Any, topic: str, ledger: Ledger, start: int, n: int) -> None:
    p = Producer({"bootstrap.servers": c.bootstrap, **PRODUCER})
    for i in range(start, start + n):
        ledger.produce(p, topic, i)
    assert p.flush(90) == 0
    assert ledger.errors == [], ledger.errors[:5]


def _metric(broker: Any) -> float:
    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=10).read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(UNCLEAN_METRIC + " "))


def _only_the_stale_replica_alive(c: Any, topic: str) -> tuple[Ledger, bytes, Any]:
    """Acked records with 3 in the ISR, then without it; 1 and 2 die, 3 alone comes back. Returns the ledger,
    3's ``.log`` bytes as it was killed, and the partition state the controller wrote with 3 alive."""
    for b in c.brokers.values():
        if not b.running:
            b.start()
    create_topic(c.bootstrap, topic, assignment=[[1, 2, STALE]])
    ledger = Ledger(1)
    _produce(c, topic, ledger, 0, N_BOTH)
    c.brokers[STALE].kill()
    _until(f"broker {STALE} out of the ISR", lambda: STALE not in state(c.kz, topic).isr, timeout=60)
    _produce(c, topic, ledger, N_BOTH, N_WITHOUT)
    stale_bytes = log_bytes(c.brokers[STALE].data_dir, topic)
    assert stale_bytes, "the stale replica holds the first records"
    c.brokers[1].kill()
    c.brokers[2].kill()
    _until("every broker's session gone", lambda: c.kz.get_children("/brokers/ids") == [], timeout=30)
    before = state(c.kz, topic)
    assert STALE not in before.isr
    c.brokers[STALE].start()
    registered = _until(f"broker {STALE} registered", lambda: c.kz.exists(f"/brokers/ids/{STALE}"))

    def decided() -> Any:
        data, stat = c.kz.get(zd.state_path(topic, 0))
        return zd.decode_state(data, stat.version) if stat.mzxid > registered.czxid else None

    # the controller (3, the only broker) wrote its decision for the partition after 3 registered
    s = _until("the controller's decision with only the stale replica alive", decided, timeout=60)
    return ledger, stale_bytes, s


def test_stale_replica_alone_stays_offline(c: Any) -> None:
    topic = f"stale-{uuid.uuid4().hex[:8]}"
    ledger, stale_bytes, s = _only_the_stale_replica_alive(c, topic)
    assert s.leader == -1, f"a replica outside the ISR was elected: {s}"
    assert STALE not in s.isr and len(s.isr) == 1, s
    md = c.admin().list_topics(topic, timeout=10).topics[topic].partitions[0]
    assert md.leader == -1
    assert _metric(c.brokers[STALE]) == 0
    assert "unclean leader election" not in c.brokers[STALE].log_text()
    # nothing truncated: the stale replica's log is as it was killed
    assert log_bytes(c.brokers[STALE].data_dir, topic) == stale_bytes
    c.brokers[1].start()
    c.brokers[2].start()
    back = _until("the last ISR member leading again", lambda: (
        q if (q := state(c.kz, topic)).leader == s.isr[0] else None), timeout=60)
    assert back.leader_epoch > s.leader_epoch
    # writable again (and the new epoch holds records, so every replica's epoch checkpoint names it)
    _produce(c, topic, ledger, N_BOTH + N_WITHOUT, 10)
    records = read_all(c.bootstrap, topic, 1)
    ledger.check(records, exact=True)  # every acknowledged record, nothing else
    assert len(records[0]) == N_BOTH + N_WITHOUT + 10
    converged(c, topic, 1, isr_timeout=90)


def test_unclean_election_enabled_on_the_topic_elects_the_stale_replica(c: Any) -> None:
    topic = f"unclean-{uuid.uuid4().hex[:8]}"
    ledger, stale_bytes, s = _only_the_stale_replica_alive(c, topic)
    assert s.leader == -1, s
    before_metric = _metric(c.brokers[STALE])
    # Kafka's dynamic topic config: the controller elects the offline partition when it becomes true
    admin = c.admin()
    res = ConfigResource("TOPIC", topic, incremental_configs=[
        ConfigEntry("unclean.leader.election.enable", "true", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(30)
    elected = _until("the stale replica elected", lambda: (
        q if (q := state(c.kz, topic)).leader == STALE else None), timeout=60)
    assert elected.isr == (STALE,) and elected.leader_epoch > s.leader_epoch
    assert log_bytes(c.brokers[STALE].data_dir, topic) == stale_bytes  # it leads with its log as it was
    _until("the unclean election counted", lambda: _metric(c.brokers[STALE]) == before_metric + 1, timeout=30)
    assert any("unclean leader election" in line and f"topic={topic}" in line and f"leader={STALE}" in line
               for line in c.brokers[STALE].log_text().splitlines()), "no log line for the unclean election"
    # it serves what it had: the records acknowledged while it was in the ISR; the others are lost, as allowed
    records = read_all(c.bootstrap, topic, 1)
    values = [v for _o, v in records[0]]
    assert values == [f"v{i:07d}".encode() for i in range(N_BOTH)]
    # it takes writes on its own (acks=1; acks=all gets NOT_ENOUGH_REPLICAS with min.insync.replicas=2)
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": 1})
    for i in range(20):
        p.produce(topic, f"after-{i}".encode(), partition=0)
    assert p.flush(30) == 0
    c.brokers[1].start()
    c.brokers[2].start()
    converged(c, topic, 1, isr_timeout=90)
    for b in (1, 2):
        assert f"truncating topic={topic}" in c.brokers[b].log_text(), f"broker {b} kept records the leader lacks"
    final = [v for _o, v in read_all(c.bootstrap, topic, 1)[0]]
    assert final == values + [f"after-{i}".encode() for i in range(20)]
    lost = [v for v in ledger.acked if v not in set(final)]
    assert len(lost) == N_WITHOUT  # exactly those acknowledged without the stale replica


def test_topic_config_overrides_the_broker_default(tmp_path: Path) -> None:
    """As Kafka's ``LogConfig.fromProps(brokerDefaults, topicOverrides)``: a topic's
    ``unclean.leader.election.enable`` in ``/config/topics/<t>`` wins over the broker's, either way; without one the
    broker's decides. Read by the controller from a real ZooKeeper at decision time."""
    from support import start_zookeeper

    from tidelog.cluster.controller import Controller

    zk = start_zookeeper(tmp_path)
    try:
        with kazoo(zk.connect) as kz:
            kz.create(zd.topic_config_path("on"), zd.encode_topic_config({"unclean.leader.election.enable": "true"}),
                      makepath=True)
            kz.create(zd.topic_config_path("off"), zd.encode_topic_config({"unclean.leader.election.enable": "false"}),
                      makepath=True)
            kz.create(zd.topic_config_path("other"), zd.encode_topic_config({"retention.ms": "1000"}), makepath=True)
            stale = zd.LeaderIsr(-1, 4, (1,), 3)
            for default in (False, True):
                ctl = Controller(kz, 9, unclean_election=default)
                ctl.epoch = 5
                assert ctl.unclean_allowed("on") is True
                assert ctl.unclean_allowed("off") is False
                assert ctl.unclean_allowed("other") is default
                assert ctl.unclean_allowed("missing") is default
                # the decision itself: only the out-of-sync replica 2 is alive
                assert ctl._decide(stale, [1, 2, 3], {2}, "on") == zd.LeaderIsr(2, 5, (2,), 5)
                assert ctl._decide(stale, [1, 2, 3], {2}, "off") is None
    finally:
        zk.stop()
