"""A broker restarted after a kill -9 closes its previous process's ZooKeeper session instead of waiting for it to
expire (``tidelog.zookeeper.close.previous.session``, default true; Kafka waits for the expiry).

The session timeout here is 20 s (the test ZooKeeper's maximum), so the old session is certainly still open when
the restarted broker reaches its registration; the broker says in its log that it resumed and closed that session,
and ZooKeeper then shows the registration under a new session, the leadership moved by the controller as on an
expiry, and the old session gone.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

pytest.importorskip("kazoo", reason="kazoo is not installed")

from support import create_topic, kazoo, state, until

from tidelog.cluster import zkdata as zd

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CLOSED = "closed the previous process's ZooKeeper session"


def test_restart_closes_the_previous_session(cluster_with: Any) -> None:
    c = cluster_with({"zookeeper.session.timeout.ms": "20000"})
    with kazoo(c.zk.connect) as zk:
        controller = zd.decode_controller(zk.get(zd.CONTROLLER)[0])
        victim = next(i for i in sorted(c.brokers) if i != controller)
        others = [i for i in sorted(c.brokers) if i != victim]
        topic = f"ps-{uuid.uuid4().hex[:8]}"
        create_topic(c.bootstrap, topic, assignment=[[victim, *others]])
        before = state(zk, topic)
        assert before.leader == victim, before
        path = zd.broker_path(victim)
        old_session = zk.exists(path).ephemeralOwner
        session_file = c.brokers[victim].data_dir / "zookeeper.session"
        # kept where the restart finds it (written right after the registration)
        until("the session kept in the log directory",
              lambda: session_file.exists() and int(session_file.read_text().split()[0]) == old_session)
        old_password = bytes.fromhex(session_file.read_text().split()[1])
        assert session_file.stat().st_mode & 0o077 == 0  # the password closes the session: owner only

        c.brokers[victim].kill()
        assert zk.exists(path).ephemeralOwner == old_session  # the dead process's session is still open
        b = c.brokers[victim].start(timeout=60)
        until(f"broker {victim} registered under a new session",
              lambda: (st := zk.exists(path)) is not None and st.ephemeralOwner != old_session, timeout=60)
        assert CLOSED in b.log_text()
        assert "previous registration still present" not in b.log_text()
        assert int(session_file.read_text().split()[0]) == zk.exists(path).ephemeralOwner
        # the controller saw the broker go and moved the leadership, as it does when a session expires
        until("a new leader epoch", lambda: state(zk, topic).leader_epoch > before.leader_epoch, timeout=60)

    # the old session is closed: resuming it is refused (a new session is made instead)
    from kazoo.client import KazooClient

    probe = KazooClient(hosts=c.zk.connect, client_id=(old_session, old_password), timeout=10)
    try:
        probe.start(timeout=30)
        assert probe.client_id[0] != old_session
    finally:
        probe.stop()
        probe.close()


def test_foreign_registration_is_not_closed(cluster_with: Any) -> None:
    """A registration of the broker's id held by a session the broker did not save (another process's) is waited
    for, not closed: only its own previous session is."""
    c = cluster_with({"zookeeper.session.timeout.ms": "20000"})
    with kazoo(c.zk.connect) as zk:
        controller = zd.decode_controller(zk.get(zd.CONTROLLER)[0])
        victim = next(i for i in sorted(c.brokers) if i != controller)
        path = zd.broker_path(victim)
        c.brokers[victim].kill()
        registration = zk.get(path)[0]
        zk.delete(path)  # stands in for the old session's expiry
        zk.create(path, registration, ephemeral=True)  # held by the test's session
        try:
            b = c.brokers[victim].start(timeout=60)
            until(f"broker {victim} waiting for the registration to go",
                  lambda: "previous registration still present" in b.log_text(), timeout=60)
            assert zk.exists(path).ephemeralOwner == zk.client_id[0]
            assert CLOSED not in b.log_text()
        finally:
            zk.delete(path)
        until(f"broker {victim} registered", lambda: (st := zk.exists(path)) is not None
              and st.ephemeralOwner != zk.client_id[0], timeout=60)
