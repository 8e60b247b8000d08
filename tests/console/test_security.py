"""The console against a SASL broker with an authorizer: every call runs as the principal of its
``--command-config`` (the broker's ACLs decide, refusals come back with Kafka's error names and are audited);
ACLs created and deleted through it; a login required beyond loopback; no secret in a page, a response or the
audit log."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from aclsupport import USERS
from consolesupport import RunningConsole, start_console

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def session(rc: RunningConsole) -> tuple[httpx.Client, dict[str, str]]:
    c = httpx.Client(base_url=rc.url, timeout=30)
    return c, {"X-CSRF-Token": c.get("/api/session").json()["csrf"]}


def test_acl_create_list_delete_as_admin(consoles: dict[str, RunningConsole]) -> None:
    c, h = session(consoles["admin"])
    acl = {"resource_type": "TOPIC", "name": "orders", "pattern": "LITERAL", "principal": "User:bob", "host": "*",
           "operation": "READ", "permission": "ALLOW"}
    assert c.post("/api/acls", json=acl, headers=h).status_code == 201
    listed = c.get("/api/acls").json()
    assert {**acl, "resource_type": "TOPIC"} in [{**a, "pattern": a["pattern"]} for a in listed]
    gone = c.post("/api/acls/delete", json=acl, headers=h).json()
    assert gone == {"ok": True, "deleted": 1}
    assert acl not in c.get("/api/acls").json()
    bad = c.post("/api/acls", json={**acl, "principal": "bob"}, headers=h)
    assert bad.status_code == 400 and "Type:name" in bad.json()["error"]
    assert c.get("/api/session").json()["principal"] == "User:admin"


def test_quotas_listed(consoles: dict[str, RunningConsole], acl_broker: Any) -> None:
    from aclsupport import call

    body = {"entries": [{"entity": [{"entity_type": "user", "entity_name": "bob"}],
                         "ops": [{"key": "producer_byte_rate", "value": 1048576.0, "remove": False}]}],
            "validate_only": False}
    resp = call(acl_broker, "admin", 49, 1, body)  # AlterClientQuotas as the super user
    assert resp["entries"][0]["error_code"] == 0
    c, _ = session(consoles["admin"])
    assert {"entity": {"user": "bob"}, "quotas": {"producer_byte_rate": 1048576.0}} in c.get("/api/quotas").json()
    refused = session(consoles["alice"])[0].get("/api/quotas")
    assert refused.status_code == 403 and "CLUSTER_AUTHORIZATION_FAILED" in refused.json()["error"]


def test_refusals_are_the_brokers_and_are_audited(consoles: dict[str, RunningConsole]) -> None:
    c, h = session(consoles["alice"])
    r = c.post("/api/topics", json={"name": "alice-topic"}, headers=h)
    assert r.status_code == 403 and "AUTHORIZATION_FAILED" in r.json()["error"], r.text
    acls = c.get("/api/acls")
    assert acls.status_code == 403 and "CLUSTER_AUTHORIZATION_FAILED" in acls.json()["error"]
    users = c.get("/api/users")  # confluent-kafka's AdminClient aborted the process on this refusal
    assert users.status_code == 403 and "CLUSTER_AUTHORIZATION_FAILED" in users.json()["error"]
    entry = c.get("/api/audit").json()[0]
    assert entry["action"] == "create-topic" and entry["outcome"].startswith("refused: ")
    assert entry["principal"] == "User:alice" and entry["user"] == "op-alice"
    # admin makes a topic; alice may not write to it until an ACL says so
    a, ah = session(consoles["admin"])
    assert a.post("/api/topics", json={"name": "shared"}, headers=ah).status_code in (201, 400)
    w = c.post("/api/topics/shared/produce", json={"value": "x"}, headers=h)
    assert w.status_code == 403 and "TOPIC_AUTHORIZATION_FAILED" in w.json()["error"]
    grant = {"resource_type": "TOPIC", "name": "shared", "principal": "User:alice", "operation": "WRITE"}
    assert a.post("/api/acls", json=grant, headers=ah).status_code == 201
    assert c.post("/api/topics/shared/produce", json={"value": "x"}, headers=h).status_code == 200
    a.post("/api/acls/delete", json=grant, headers=ah)


def test_no_secret_in_pages_responses_or_audit(consoles: dict[str, RunningConsole]) -> None:
    for user, rc in consoles.items():
        c, _ = session(rc)
        texts = [c.get(p).text for p in ("/", "/api/session", "/api/overview", "/api/audit", "/static/console.js")]
        texts.append(Path(rc.console.audit.path).read_text() if rc.console.audit.path.exists() else "")
        for t in texts:
            assert USERS[user] not in t


def test_login_required_beyond_loopback(broker: Any, tmp_path: Path) -> None:
    audit = tmp_path / "audit.log"
    rc = start_console(broker.bootstrap, host="0.0.0.0", password="s3cret-pw", audit=audit, user="ops")
    try:
        c = httpx.Client(base_url=rc.url)
        assert c.get("/api/session").status_code == 401
        assert c.get("/api/overview").status_code == 401
        assert "set-cookie" not in c.get("/").headers  # no session without a login
        assert c.post("/api/login", json={"user": "ops", "password": "wrong"}).status_code == 401
        assert c.post("/api/login", json={"user": "other", "password": "s3cret-pw"}).status_code == 401
        ok = c.post("/api/login", json={"user": "ops", "password": "s3cret-pw"})
        assert ok.status_code == 200 and ok.json()["user"] == "ops"
        assert c.get("/api/overview").status_code == 200
        c.post("/api/logout", headers={"X-CSRF-Token": ok.json()["csrf"]})
        assert c.get("/api/overview").status_code == 401
        log = [json.loads(x) for x in audit.read_text().splitlines()]
        assert [(e["action"], e["outcome"][:7]) for e in log] == [("login", "refused"), ("login", "refused"),
                                                                   ("login", "ok")]
        assert "s3cret-pw" not in audit.read_text()
    finally:
        rc.stop()


def test_cli_refuses_to_listen_beyond_loopback_without_a_login() -> None:
    r = subprocess.run([sys.executable, "-m", "tidelog.cli.main", "console", "--host", "0.0.0.0", "--port", "1"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "needs a login" in r.stderr
