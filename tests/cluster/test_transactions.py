"""Transactions in a ZooKeeper-mode cluster: 3 brokers + 1 ZooKeeper on loopback, confluent-kafka clients.

``__transaction_state`` is a replicated topic (RF ``transaction.state.log.replication.factor`` = 3, min ISR
``transaction.state.log.min.isr`` = 2, compacted) created through ZooKeeper on the first
FindCoordinator(TRANSACTION); the coordinator of a transactional id is the leader of its partition, on every
broker alike; markers reach partition leaders on other brokers (WriteTxnMarkers between brokers); when the
coordinator dies the new leader of its partition loads the transactions, completes those it finds prepared, and
the transactional id carries on.
"""

from __future__ import annotations

import functools
import threading
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import ConfigResource
from support import agreed_coordinator, create_topic, kazoo, request, state, until

from tidelog.protocol.api_keys import ApiKey
from tidelog.records.batch import build_batch

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TXN_TOPIC = "__transaction_state"
# the proxied cluster of test_isolated_coordinator_cannot_commit: the isolated coordinator answers the zombie's
# EndTxn(commit) once its PrepareCommit append times out (Coordinator._write: COORDINATOR_NOT_AVAILABLE after the
# broker's request.timeout.ms, as Kafka's appendTransactionToLog); Kafka's default 30 s was most of the test's time
PROXIED_CLUSTER_OVERRIDES = {"request.timeout.ms": "10000"}
PRODUCE, FIND_COORDINATOR, INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, END_TXN = 0, 10, 22, 24, 26
DESCRIBE_TRANSACTIONS = ApiKey.DESCRIBE_TRANSACTIONS
NOT_COORDINATOR, INVALID_TXN_STATE = 16, 48

_request = functools.partial(request, timeout=15)


def _java_partition(key: str, n: int) -> int:
    """Kafka's ``Utils.abs(key.hashCode()) % n``, computed here on its own (a check of the broker's placement)."""
    data = key.encode("utf-16-be")  # String.hashCode runs over UTF-16 code units
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i:i + 2], "big")) & 0xFFFFFFFF
    if h >= 1 << 31:
        h -= 1 << 32
    return (0 if h == -(1 << 31) else abs(h)) % n


def _txn_state(broker: Any, txn_id: str) -> tuple[int, str]:
    r = _request(broker, DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [txn_id]})
    s = r["transaction_states"][0]
    return s["error_code"], s["transaction_state"]


def _wait_state(broker: Any, txn_id: str, expected: str, timeout: float = 60.0) -> None:
    """Poll DescribeTransactions until the coordinator shows ``expected`` (EndTxn is answered once PrepareCommit /
    PrepareAbort is written; the markers and the Complete* record follow)."""
    deadline = time.monotonic() + timeout
    while (got := _txn_state(broker, txn_id)) != (0, expected):
        assert time.monotonic() < deadline, f"transaction state {got}, expected {expected}"
        time.sleep(0.1)  # polling interval while the coordinator completes the transaction


def _producer(cluster: Any, txn_id: str) -> Producer:
    return Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": txn_id,
                     "transaction.timeout.ms": 60000, "message.timeout.ms": 60000, "linger.ms": 5,
                     "topic.metadata.refresh.interval.ms": 2000})


def _transaction(p: Producer, topic: str, partitions: int, prefix: str, n: int, commit: bool) -> list[bytes]:
    p.begin_transaction()
    values = [f"{prefix}-{i}".encode() for i in range(n)]
    for i, v in enumerate(values):
        p.produce(topic, v, partition=i % partitions)
    if commit:
        p.commit_transaction(60)
    else:
        assert p.flush(60) == 0  # in the partitions (abort_transaction purges what was not sent yet)
        p.abort_transaction(60)
    return values


def _read(cluster: Any, topic: str, partitions: int, isolation: str, timeout: float = 90.0) -> list[bytes]:
    """Every record of ``topic`` a consumer with ``isolation`` reads, up to each partition's high watermark
    (read_committed gets there only once the last stable offset has: every transaction before it has its
    marker)."""
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"r-{uuid.uuid4().hex[:8]}",
                  "isolation.level": isolation, "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "fetch.wait.max.ms": 100, "topic.metadata.refresh.interval.ms": 2000})
    try:
        tps = [TopicPartition(topic, p, 0) for p in range(partitions)]
        marks = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=15) for p in range(partitions)}
        ends = {p: hi for p, (_lo, hi) in marks.items()}
        c.assign(tps)
        out: list[bytes] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for m in c.consume(100, 0.2):
                if m.error() is None:
                    out.append(m.value())
            pos = {tp.partition: tp.offset for tp in c.position([TopicPartition(topic, p) for p in range(partitions)])}
            if all(pos[p] >= hi or hi <= lo for p, (lo, hi) in marks.items()):  # an empty partition has no position
                return out
        raise AssertionError(f"{isolation} consumer stuck at {pos}, high watermarks {ends}")
    finally:
        c.close()


def _restart(cluster: Any, broker_id: int) -> None:
    """Start a killed broker again and wait until it is back in the ISR of every partition it hosts: the next test
    may kill another broker, and must not find a partition (``__transaction_state``'s above all) below its
    ``min.insync.replicas`` because this one is still catching up."""
    cluster.brokers[broker_id].start(timeout=120)
    cluster.wait_for(f"broker {broker_id} registered again", lambda md: broker_id in md.brokers)
    cluster.wait_for(f"broker {broker_id} back in every ISR", lambda md: all(
        broker_id in p.isrs for t in md.topics.values() for p in t.partitions.values() if broker_id in p.replicas),
        timeout=120)


def _leaders(cluster: Any, topic: str, partitions: int) -> dict[int, int]:
    md = cluster.admin().list_topics(topic, timeout=10)
    return {p: md.topics[topic].partitions[p].leader for p in range(partitions)}


# ------------------------------------------------------------------------------------------------ tests


def test_commit_and_abort_across_brokers(cluster: Any) -> None:
    """A transactional producer commits, aborts and commits again on a topic whose 3 partitions are led by 3
    brokers: the markers reach every leader, a read_committed consumer sees exactly the committed records and a
    read_uncommitted one all of them; ``__transaction_state`` was made as Kafka makes it."""
    topic, txn_id = f"tx-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, 3, 3)
    coord = agreed_coordinator(cluster, txn_id, 1)

    md = cluster.admin().list_topics(TXN_TOPIC, timeout=10)
    txn_topic = md.topics[TXN_TOPIC]
    assert txn_topic.error is None and len(txn_topic.partitions) == 50  # transaction.state.log.num.partitions
    part = txn_topic.partitions[_java_partition(txn_id, 50)]
    assert part.leader == coord and sorted(part.replicas) == [1, 2, 3]  # RF transaction.state.log.replication.factor
    admin = cluster.admin()  # kept alive until its futures are done
    cfg = next(iter(admin.describe_configs([ConfigResource("topic", TXN_TOPIC)]).values())).result(30)
    assert cfg["cleanup.policy"].value == "compact"
    assert cfg["min.insync.replicas"].value == "2"  # transaction.state.log.min.isr
    others = [i for i in cluster.brokers if i != coord]
    for i in others:  # only the coordinator serves the transactional id
        assert _txn_state(cluster.brokers[i], txn_id)[0] == NOT_COORDINATOR

    leaders = _leaders(cluster, topic, 3)
    assert set(leaders.values()) - {coord}, f"every partition led by the coordinator: {leaders}"
    p = _producer(cluster, txn_id)
    p.init_transactions(60)
    committed = _transaction(p, topic, 3, "c1", 30, commit=True)
    aborted = _transaction(p, topic, 3, "a", 30, commit=False)
    committed += _transaction(p, topic, 3, "c2", 30, commit=True)
    _wait_state(cluster.brokers[coord], txn_id, "CompleteCommit")

    assert sorted(_read(cluster, topic, 3, "read_committed")) == sorted(committed)
    assert sorted(_read(cluster, topic, 3, "read_uncommitted")) == sorted(committed + aborted)


def test_coordinator_killed_between_transactions(cluster: Any) -> None:
    """After a committed transaction the coordinator is kill -9'ed: the new leader of the transactional id's
    partition loads it, a new producer with the same id (init_transactions again) commits, and a read_committed
    consumer sees both transactions exactly once; the old producer is fenced."""
    topic, txn_id = f"tk-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, 3, 3)
    coord = agreed_coordinator(cluster, txn_id, 1)
    p1 = _producer(cluster, txn_id)
    p1.init_transactions(60)
    first = _transaction(p1, topic, 3, "one", 30, commit=True)
    _wait_state(cluster.brokers[coord], txn_id, "CompleteCommit")  # between transactions: this one is complete
    cluster.brokers[coord].kill()
    try:
        new_coord = agreed_coordinator(cluster, txn_id, 1)
        assert new_coord != coord
        _wait_state(cluster.brokers[new_coord], txn_id, "CompleteCommit")  # loaded from its replica
        p2 = _producer(cluster, txn_id)
        p2.init_transactions(60)
        second = _transaction(p2, topic, 3, "two", 30, commit=True)
        p1.begin_transaction()
        p1.produce(topic, b"zombie", partition=0)
        with pytest.raises(KafkaException) as e:
            p1.commit_transaction(30)
        assert e.value.args[0].fatal(), e.value  # PRODUCER_FENCED
        got = _read(cluster, topic, 3, "read_committed")
        assert sorted(got) == sorted(first + second)  # exactly once, nothing of the fenced producer
    finally:
        _restart(cluster, coord)


def test_coordinator_killed_mid_transaction(cluster: Any) -> None:
    """The coordinator is kill -9'ed while a transaction is open (records already in the partitions): the new
    coordinator loads it as ongoing; init_transactions of the same id aborts it (markers to every partition
    leader) and the next transaction commits. read_committed: the committed records only, once."""
    topic, txn_id = f"tm-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, 3, 3)
    coord = agreed_coordinator(cluster, txn_id, 1)
    p1 = _producer(cluster, txn_id)
    p1.init_transactions(60)
    before = _transaction(p1, topic, 3, "before", 15, commit=True)
    p1.begin_transaction()
    open_values = [f"open-{i}".encode() for i in range(30)]
    for i, v in enumerate(open_values):
        p1.produce(topic, v, partition=i % 3)
    assert p1.flush(60) == 0  # in the partitions, not yet committed
    cluster.brokers[coord].kill()
    try:
        new_coord = agreed_coordinator(cluster, txn_id, 1)
        assert new_coord != coord
        _wait_state(cluster.brokers[new_coord], txn_id, "Ongoing")  # loaded, left to its producer (or timeout)
        p2 = _producer(cluster, txn_id)
        p2.init_transactions(60)  # aborts the open transaction first (answered once that abort is complete)
        assert _txn_state(cluster.brokers[new_coord], txn_id) == (0, "Empty")
        after = _transaction(p2, topic, 3, "after", 30, commit=True)
        assert sorted(_read(cluster, topic, 3, "read_committed")) == sorted(before + after)
        assert sorted(_read(cluster, topic, 3, "read_uncommitted")) == sorted(before + open_values + after)
    finally:
        _restart(cluster, coord)


def test_open_transaction_carries_on_after_coordinator_kill(cluster: Any) -> None:
    """The same producer keeps its open transaction across a coordinator kill -9: it finds the new coordinator
    (which loaded the transaction as Ongoing, with its partitions), produces more and commits; read_committed sees
    every record of the transaction once."""
    topic, txn_id = f"to-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, 3, 3)
    coord = agreed_coordinator(cluster, txn_id, 1)
    p1 = _producer(cluster, txn_id)
    p1.init_transactions(60)
    p1.begin_transaction()
    first = [f"first-{i}".encode() for i in range(30)]
    for i, v in enumerate(first):
        p1.produce(topic, v, partition=i % 3)
    assert p1.flush(60) == 0
    cluster.brokers[coord].kill()
    try:
        new_coord = agreed_coordinator(cluster, txn_id, 1)
        _wait_state(cluster.brokers[new_coord], txn_id, "Ongoing")
        second = [f"second-{i}".encode() for i in range(30)]
        for i, v in enumerate(second):
            p1.produce(topic, v, partition=i % 3)
        p1.commit_transaction(90)
        _wait_state(cluster.brokers[new_coord], txn_id, "CompleteCommit")
        assert sorted(_read(cluster, topic, 3, "read_committed")) == sorted(first + second)
    finally:
        _restart(cluster, coord)


def test_coordinator_killed_right_after_commit(cluster: Any) -> None:
    """commit_transaction returns once the coordinator has written PrepareCommit; its markers may still be on
    their way when it is kill -9'ed at once. Whatever the kill interrupted, the new coordinator finishes the
    commit (it completes a PrepareCommit it finds when it loads): read_committed gets every record once."""
    topic, txn_id = f"tc-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, 3, 3)
    coord = agreed_coordinator(cluster, txn_id, 1)
    p1 = _producer(cluster, txn_id)
    p1.init_transactions(60)
    values: list[bytes] = []
    for k in range(3):  # a few transactions: the kill lands while the markers of the last one are sent
        values += _transaction(p1, topic, 3, f"r{k}", 60, commit=k < 2)
    p1.begin_transaction()
    last = [f"last-{i}".encode() for i in range(60)]
    for i, v in enumerate(last):
        p1.produce(topic, v, partition=i % 3)
    p1.commit_transaction(60)
    cluster.brokers[coord].kill()
    committed = [v for v in values if not v.startswith(b"r2")] + last
    try:
        new_coord = agreed_coordinator(cluster, txn_id, 1)
        _wait_state(cluster.brokers[new_coord], txn_id, "CompleteCommit")
        assert sorted(_read(cluster, topic, 3, "read_committed")) == sorted(committed)
        # what the new coordinator answers a client that began another transaction but reached no coordinator with
        # it (librdkafka then still sends EndTxn(abort) when an AddOffsetsToTxn / AddPartitionsToTxn failed in
        # transport: "can't be sure"): Kafka's answers for CompleteCommit, a retried commit NONE, an abort
        # INVALID_TXN_STATE (fatal in librdkafka; the copier of test_txn_copier.py starts a new producer then)
        d = _request(cluster.brokers[new_coord], DESCRIBE_TRANSACTIONS, 0,
                     {"transactional_ids": [txn_id]})["transaction_states"][0]

        def end(commit: bool) -> int:
            return _request(cluster.brokers[new_coord], END_TXN, 3, {
                "transactional_id": txn_id, "producer_id": d["producer_id"], "producer_epoch": d["producer_epoch"],
                "committed": commit})["error_code"]

        assert (end(False), end(True)) == (INVALID_TXN_STATE, 0)
        assert _txn_state(cluster.brokers[new_coord], txn_id) == (0, "CompleteCommit")  # nothing changed
    finally:
        _restart(cluster, coord)


def test_markers_wait_for_the_new_leader_of_a_partition(cluster: Any) -> None:
    """The leader of one of the transaction's partitions (not the coordinator) is kill -9'ed with the transaction
    open: commit_transaction is answered, and the marker for that partition is retried (while the partition has no
    live leader, or the dead one does not answer) with the leader looked up again until its new leader takes it;
    read_committed then reads everything once, the dead broker's partition included."""
    topic, txn_id = f"tl-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, 3, 3)
    coord = agreed_coordinator(cluster, txn_id, 1)
    leaders = _leaders(cluster, topic, 3)
    partition, victim = next((p, b) for p, b in sorted(leaders.items()) if b != coord)
    p1 = _producer(cluster, txn_id)
    p1.init_transactions(60)
    p1.begin_transaction()
    values = [f"v-{i}".encode() for i in range(30)]
    for i, v in enumerate(values):
        p1.produce(topic, v, partition=i % 3)
    assert p1.flush(60) == 0  # acknowledged by the full ISR (acks=all): the followers have them
    cluster.brokers[victim].kill()
    try:
        p1.commit_transaction(60)  # PrepareCommit is on the coordinator's partition: the dead leader is not needed
        _wait_state(cluster.brokers[coord], txn_id, "CompleteCommit", timeout=90)
        cluster.wait_for(f"{topic}-{partition} led by another broker", lambda md: (
            q := cluster.partition(md, topic, partition)) is not None and q.leader not in (victim, -1))
        assert sorted(_read(cluster, topic, 3, "read_committed")) == sorted(values)
    finally:
        _restart(cluster, victim)


def _group_coordinator(cluster: Any, group: str, timeout: float = 90.0) -> int:
    deadline = time.monotonic() + timeout
    while True:
        r = _request(cluster.brokers[1], FIND_COORDINATOR, 3, {"key": group, "key_type": 0})
        if r["error_code"] == 0:
            return int(r["node_id"])
        assert time.monotonic() < deadline, f"no coordinator for group {group}: {r}"
        time.sleep(0.2)  # polling interval while __consumer_offsets is created and elected


def test_offsets_in_a_transaction_with_coordinators_on_two_brokers(cluster: Any) -> None:
    """Consume-transform-produce with the group's coordinator on another broker than the transaction's: the
    offsets sent in an aborted transaction are never visible, those of a committed one are (the marker reaches
    the ``__consumer_offsets`` partition's leader through WriteTxnMarkers; TxnOffsetCommit is verified with the
    transaction coordinator across brokers)."""
    src, dst, txn_id = f"ts-{uuid.uuid4().hex[:8]}", f"td-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, src, 3, 3)
    create_topic(cluster.bootstrap, dst, 3, 3)
    coord = agreed_coordinator(cluster, txn_id, 1)
    group = next(g for g in (f"g-{uuid.uuid4().hex[:8]}" for _ in range(100)) if _group_coordinator(cluster, g) != coord)
    plain = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(30):
        plain.produce(src, f"in-{i}".encode(), partition=i % 3)
    assert plain.flush(60) == 0

    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "isolation.level": "read_committed", "fetch.wait.max.ms": 100})
    p = _producer(cluster, txn_id)
    p.init_transactions(60)
    try:
        c.assign([TopicPartition(src, i, 0) for i in range(3)])
        got: list[Any] = []
        deadline = time.monotonic() + 60
        while len(got) < 30 and time.monotonic() < deadline:
            got += [m for m in c.consume(30, 0.2) if m.error() is None]
        assert len(got) == 30
        positions = c.position([TopicPartition(src, i) for i in range(3)])
        for commit in (False, True):
            p.begin_transaction()
            for m in got:
                p.produce(dst, m.value().replace(b"in", b"out" if commit else b"gone"), partition=m.partition())
            p.send_offsets_to_transaction(positions, c.consumer_group_metadata(), 60)
            if commit:
                p.commit_transaction(60)
            else:
                assert p.flush(60) == 0
                p.abort_transaction(60)
                committed = c.committed([TopicPartition(src, i) for i in range(3)], timeout=30)
                assert [tp.offset for tp in committed] == [-1001] * 3  # aborted offsets never became visible
        _wait_state(cluster.brokers[coord], txn_id, "CompleteCommit")
        committed = c.committed([TopicPartition(src, i) for i in range(3)], timeout=30)
        assert [tp.offset for tp in committed] == [tp.offset for tp in positions] == [10, 10, 10]
    finally:
        c.close()
    assert sorted(_read(cluster, dst, 3, "read_committed")) == sorted(f"out-{i}".encode() for i in range(30))


def _txn_produce(broker: Any, txn_id: str, topic: str, partition: int, pid: int, epoch: int, seq: int,
                 value: bytes) -> int:
    batch = build_batch([(None, value)], producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                        is_transactional=True)
    r = _request(broker, PRODUCE, 9, {"transactional_id": txn_id, "acks": -1, "timeout_ms": 10000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": batch}]}]})
    return r["responses"][0]["partition_responses"][0]["error_code"]


def test_produce_verified_with_a_coordinator_on_another_broker(cluster: Any) -> None:
    """KIP-890: a transactional batch for a partition the transaction does not contain is refused by the partition
    leader after asking the coordinator on another broker (AddPartitionsToTxn v5 verify_only between brokers):
    INVALID_TXN_STATE for Produce v9, nothing appended. Once the partition is added, the same batch is taken."""
    topic, txn_id = f"tv-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, 3, 3)
    coord = agreed_coordinator(cluster, txn_id, 1)
    leaders = _leaders(cluster, topic, 3)
    partition, leader = next((p, b) for p, b in sorted(leaders.items()) if b != coord)
    r = _request(cluster.brokers[coord], INIT_PRODUCER_ID, 3, {
        "transactional_id": txn_id, "transaction_timeout_ms": 60000, "producer_id": -1, "producer_epoch": -1})
    assert r["error_code"] == 0
    pid, epoch = r["producer_id"], r["producer_epoch"]

    assert _txn_produce(cluster.brokers[leader], txn_id, topic, partition, pid, epoch, 0, b"unverified") \
        == INVALID_TXN_STATE
    r = _request(cluster.brokers[coord], ADD_PARTITIONS_TO_TXN, 3, {
        "v3_and_below_transactional_id": txn_id, "v3_and_below_producer_id": pid,
        "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": topic, "partitions": [partition]}]})
    assert r["results_by_topic_v3_and_below"][0]["results_by_partition"][0]["partition_error_code"] == 0
    assert _txn_produce(cluster.brokers[leader], txn_id, topic, partition, pid, epoch, 0, b"verified") == 0
    r = _request(cluster.brokers[coord], END_TXN, 3, {
        "transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch, "committed": True})
    assert r["error_code"] == 0
    _wait_state(cluster.brokers[coord], txn_id, "CompleteCommit")
    assert _read(cluster, topic, 3, "read_committed") == [b"verified"]
    assert _read(cluster, topic, 3, "read_uncommitted") == [b"verified"]  # the refused batch was never appended


def test_isolated_coordinator_cannot_commit(proxied_cluster: Any) -> None:
    """The coordinator is cut off (ZooKeeper, every inbound link, its requests to the other brokers) with a
    transaction open. The others elect a new leader of the id's partition; a new producer with the id fences the
    old one (its transaction aborted by the new coordinator) and commits. An EndTxn(commit) sent to the isolated
    coordinator meanwhile is never answered OK (it cannot get PrepareCommit replicated). After the heal the old
    producer is fenced and read_committed holds exactly the new producer's records."""
    c = proxied_cluster
    c.heal()
    topic, txn_id = f"ti-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:8]}"
    create_topic(c.bootstrap, topic, 3, 3, timeout=90)
    coord = agreed_coordinator(c, txn_id, 1)
    p1 = _producer(c, txn_id)
    p1.init_transactions(60)
    p1.begin_transaction()
    for i in range(30):
        p1.produce(topic, f"zombie-{i}".encode(), partition=i % 3)
    assert p1.flush(60) == 0
    d = _request(c.brokers[coord], DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [txn_id]})["transaction_states"][0]
    assert d["transaction_state"] == "Ongoing"
    zombie_end: list[Any] = []

    def end_at_zombie() -> None:
        try:
            zombie_end.append(request(c.brokers[coord], END_TXN, 3, {
                "transactional_id": txn_id, "producer_id": d["producer_id"], "producer_epoch": d["producer_epoch"],
                "committed": True}, timeout=45)["error_code"])
        except Exception as exc:  # no answer at all is "not committed" too
            zombie_end.append(exc)

    part = _java_partition(txn_id, 50)
    with kazoo(c.zk.connect) as kz:  # the test's own view of ZooKeeper: never through a proxy
        c.isolate(coord)
        zombie = threading.Thread(target=end_at_zombie)
        try:
            zombie.start()  # straight to the isolated broker's own port
            until("a new transaction coordinator", lambda: state(kz, TXN_TOPIC, part).leader not in (coord, -1), 60)
            new_coord = state(kz, TXN_TOPIC, part).leader
            _wait_state(c.brokers[new_coord], txn_id, "Ongoing")  # loaded from its replica
            p2 = _producer(c, txn_id)
            p2.init_transactions(90)  # fences p1: the new coordinator aborts its transaction
            after = _transaction(p2, topic, 3, "after", 30, commit=True)
            _wait_state(c.brokers[new_coord], txn_id, "CompleteCommit")
            zombie.join(60)
            assert zombie_end and zombie_end[0] != 0, f"the isolated coordinator committed: {zombie_end}"
        finally:
            c.heal()
            zombie.join(60)
        until(f"broker {coord} back in the ISR of {TXN_TOPIC}-{part}", lambda: coord in state(kz, TXN_TOPIC, part).isr,
              120)
    with pytest.raises(KafkaException):
        p1.commit_transaction(30)
    assert sorted(_read(c, topic, 3, "read_committed")) == sorted(after)
