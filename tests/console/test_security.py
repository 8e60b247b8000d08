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


def test_scram_users_set_and_deleted_with_confirmation(consoles: dict[str, RunningConsole], acl_broker: Any) -> None:
    from tidelog.broker.security.scram import USERS_FILE, ScramCredential, ScramCredentialStore

    c, h = session(consoles["admin"])
    secret = "carol-pw-4d1b9"
    new = {"user": "carol", "mechanism": "SCRAM-SHA-256", "password": secret, "iterations": 4096}
    assert c.post("/api/users", json=new, headers={}).status_code == 403  # no CSRF token
    assert c.post("/api/users", json={**new, "iterations": 99}, headers=h).status_code == 400
    assert c.post("/api/users", json={**new, "mechanism": "MD5"}, headers=h).status_code == 400
    assert c.post("/api/users", json={**new, "password": ""}, headers=h).status_code == 400
    r = c.post("/api/users", json=new, headers=h)
    assert r.status_code == 201, r.text
    assert {"user": "carol", "mechanisms": ["SCRAM-SHA-256(4096)"]} in c.get("/api/users").json()
    # the broker stores the credential of that password (the console sent a salted password, not the password)
    stored = ScramCredentialStore(acl_broker.data_dir / USERS_FILE).describe()["carol"]["SCRAM-SHA-256"]
    assert stored == ScramCredential.from_password("SCRAM-SHA-256", secret, 4096, salt=stored.salt)
    refused = session(consoles["alice"])
    denied = refused[0].post("/api/users", json={**new, "user": "mallory"}, headers=refused[1])
    assert denied.status_code == 403 and "CLUSTER_AUTHORIZATION_FAILED" in denied.json()["error"], denied.text
    no = c.post("/api/users/delete", json={"user": "carol"}, headers=h)
    assert no.status_code == 409
    gone = c.post("/api/users/delete", json={"user": "carol", "confirm": "carol"}, headers=h)
    assert gone.status_code == 200 and gone.json()["deleted"] == ["SCRAM-SHA-256"], gone.text
    assert "carol" not in [u["user"] for u in c.get("/api/users").json()]
    again = c.post("/api/users/delete", json={"user": "carol", "confirm": "carol"}, headers=h)
    assert again.status_code == 404
    audit = [(a["action"], a["target"], a["outcome"]) for a in c.get("/api/audit").json()]
    assert ("set-scram-user", "carol", "ok") in audit and ("delete-scram-user", "carol", "ok") in audit
    for text in (c.get("/api/audit").text, Path(consoles["admin"].console.audit.path).read_text(),
                 refused[0].get("/api/audit").text, Path(consoles["alice"].console.audit.path).read_text()):
        assert secret not in text


def test_client_quotas_set_and_removed_with_confirmation(consoles: dict[str, RunningConsole]) -> None:
    c, h = session(consoles["admin"])
    body = {"entity": {"user": "dave"}, "set": {"consumer_byte_rate": 2048}}
    assert c.post("/api/quotas", json=body, headers=h).status_code == 200
    assert c.post("/api/quotas", json={"entity": {"client-id": None}, "set": {"request_percentage": 50}},
                  headers=h).status_code == 200
    listed = c.get("/api/quotas").json()
    assert {"entity": {"user": "dave"}, "quotas": {"consumer_byte_rate": 2048.0}} in listed
    assert {"entity": {"client-id": None}, "quotas": {"request_percentage": 50.0}} in listed
    for bad in ({"entity": {"user": "dave"}, "set": {"producer_byte_rate": 1.5}},
                {"entity": {"user": "dave"}, "set": {"no_such_quota": 1}},
                {"entity": {"group": "x"}, "set": {"consumer_byte_rate": 1}},
                {"entity": {"user": "dave"}}):
        assert c.post("/api/quotas", json=bad, headers=h).status_code == 400, bad
    remove = {"entity": {"user": "dave"}, "remove": ["consumer_byte_rate"]}
    assert c.post("/api/quotas", json=remove, headers=h).status_code == 409  # the entity named again
    assert c.post("/api/quotas", json={**remove, "confirm": "user=dave"}, headers=h).status_code == 200
    assert c.post("/api/quotas", json={"entity": {"client-id": None}, "remove": ["request_percentage"],
                                       "confirm": "client-id=<default>"}, headers=h).status_code == 200
    entities = [q["entity"] for q in c.get("/api/quotas").json()]
    assert {"user": "dave"} not in entities and {"client-id": None} not in entities
    a, ah = session(consoles["alice"])
    denied = a.post("/api/quotas", json=body, headers=ah)
    assert denied.status_code == 403 and "CLUSTER_AUTHORIZATION_FAILED" in denied.json()["error"]
    assert a.get("/api/audit").json()[0]["outcome"].startswith("refused: ")


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
