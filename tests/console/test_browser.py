"""End to end in a real headless Chromium (Selenium, Debian's chromium + chromedriver) against a real ``tidelog
serve``: create a topic, produce, find a message by a header value in a 200,000-record partition (issue 28 says
1 M; bench/console_bench.py runs the 1 M and 10 M figures), export it, reset a group's offsets to a timestamp and
see the lag change, create and delete an ACL, and a refusal shown for a principal without rights. Each test takes
screenshots of the pages it visits (docs/console/ when $TIDELOG_CONSOLE_SCREENSHOTS names it)."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from consolesupport import RunningConsole, save_screenshot

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]

BIG = 200_000
WAIT = 60


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions)])[name].result(30)


def wait(driver: Any, cond: Any, timeout: float = WAIT, what: str = "") -> Any:
    """Poll ``cond`` until truthy; an element the page re-rendered between its lookup and its read (the live tail
    and the search progress redraw their rows) is looked up again at the next poll, not a failure."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.1,
                         ignored_exceptions=(StaleElementReferenceException,)).until(cond, what)


def css(driver: Any, selector: str) -> Any:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, selector)


def found(driver: Any, selector: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, selector)


def go(driver: Any, rc: RunningConsole, page: str) -> None:
    """Open a page of the console and wait until it has rendered (main[data-ready])."""
    driver.get(f"{rc.url}/#/{page}")
    wait(driver, lambda d: d.execute_script(
        "const m = document.getElementById('main'); return m && m.dataset.page === arguments[0] && "
        "m.dataset.ready === '1'", page), what=f"page {page}")


def fill(driver: Any, selector: str, text: str) -> None:
    el = css(driver, selector)
    el.clear()
    el.send_keys(text)


def choose(driver: Any, selector: str, value: str) -> None:
    from selenium.webdriver.support.ui import Select

    Select(css(driver, selector)).select_by_value(value)


def banner(driver: Any, element_id: str) -> str:
    return str(driver.execute_script(
        "const e = document.getElementById(arguments[0]); return e.hidden ? '' : e.textContent", element_id))


def confirm(driver: Any, name: str) -> None:
    wait(driver, lambda d: d.execute_script("return document.getElementById('confirm-dialog').open"))
    fill(driver, "#confirm-input", name)
    css(driver, "#confirm-ok").click()


def test_overview_create_topic_produce_and_find_it(driver: Any, console: RunningConsole, tmp_path: Path) -> None:
    go(driver, console, "overview")
    assert css(driver, "#brokers-table tbody tr").text.startswith("0 127.0.0.1:")
    save_screenshot(driver, tmp_path, "overview")
    topic = f"orders-{uuid.uuid4().hex[:6]}"
    go(driver, console, "topics")
    fill(driver, "#topic-name", topic)
    fill(driver, "#topic-partitions", "3")
    fill(driver, "#topic-configs", "retention.ms=86400000")
    css(driver, "#create-topic-btn").click()
    wait(driver, lambda d: found(d, f'#topics-table tr[data-topic="{topic}"]'), what="the new topic's row")
    assert banner(driver, "notice") == f"topic {topic} created"
    assert css(driver, f'#topics-table tr[data-topic="{topic}"]').text.split()[:3] == [topic, "3", "1"]
    save_screenshot(driver, tmp_path, "topics")
    go(driver, console, f"topics/{topic}")
    retention = [r.text for r in found(driver, "#configs-table tbody tr") if r.text.startswith("retention.ms ")]
    assert retention == ["retention.ms 86400000 DYNAMIC_TOPIC_CONFIG"]
    save_screenshot(driver, tmp_path, "topic")
    go(driver, console, f"messages/{topic}")
    fill(driver, "#prod-partition", "2")
    fill(driver, "#prod-key", "order-7")
    fill(driver, "#prod-value", '{"order": 7, "total": 12.5}')
    fill(driver, "#prod-headers", "trace=abc-123")
    css(driver, "#produce-btn").click()
    wait(driver, lambda d: banner(d, "notice"), what="the produce result")
    assert banner(driver, "notice") == f"produced to {topic}-2 at offset 0"
    choose(driver, "#msg-field", "header")
    fill(driver, "#msg-text", "abc-1")
    choose(driver, "#msg-decode", "json")
    css(driver, "#search-btn").click()
    wait(driver, lambda d: css(d, "#search-progress").get_attribute("data-state") == "done", what="search done")
    rows = found(driver, "#results tbody tr")
    assert [(r.get_attribute("data-partition"), r.get_attribute("data-offset")) for r in rows] == [("2", "0")]
    assert '"total": 12.5' in rows[0].text and "trace=abc-123" in rows[0].text
    # live tail: a record produced while it runs shows up without another click
    fill(driver, "#msg-text", "")
    css(driver, "#tail-btn").click()
    wait(driver, lambda d: len(found(d, "#results tbody tr")) == 1, what="the tail's first read")
    p = Producer({"bootstrap.servers": console.console.cfg.bootstrap})
    p.produce(topic, key=b"order-8", value=b"tailed", partition=0)
    assert p.flush(30) == 0
    wait(driver, lambda d: any("tailed" in r.text for r in found(d, "#results tbody tr")), what="the tailed record")
    css(driver, "#tail-btn").click()
    assert css(driver, "#tail-btn").text == "Live tail"


def test_find_by_header_in_a_large_partition_and_export(driver: Any, console: RunningConsole, broker: Any,
                                                        tmp_path: Path) -> None:
    topic = f"big-{uuid.uuid4().hex[:6]}"
    needle = 123_456
    create_topic(broker.bootstrap, topic, 1)
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50, "batch.num.messages": 10000,
                  "queue.buffering.max.messages": 500000, "compression.type": "lz4"})
    for i in range(BIG):
        p.produce(topic, key=b"k%d" % i, value=b'{"n": %d}' % i,
                  headers=[("trace", b"needle-42" if i == needle else b"t-%d" % i)])
    assert p.flush(90) == 0
    go(driver, console, f"messages/{topic}")
    choose(driver, "#msg-field", "header")
    fill(driver, "#msg-header", "trace")
    fill(driver, "#msg-text", "needle-42")
    css(driver, "#search-btn").click()
    wait(driver, lambda d: css(d, "#search-progress").get_attribute("data-state") == "running"
         and css(d, "#search-progress").text.startswith("running: scanned"), what="a progress count")
    wait(driver, lambda d: css(d, "#search-progress").get_attribute("data-state") == "done", what="search done")
    text = css(driver, "#search-progress").text
    assert text.startswith(f"done: scanned {BIG:,} of {BIG:,}, matched 1 in "), text
    rows = found(driver, "#results tbody tr")
    assert [r.get_attribute("data-offset") for r in rows] == [str(needle)]
    save_screenshot(driver, tmp_path, "messages")
    css(driver, "#export-jsonl").click()
    deadline = time.monotonic() + 30
    while not [f for f in driver.downloads.glob("*.jsonl")]:
        assert time.monotonic() < deadline, "no export was downloaded"
        time.sleep(0.1)
    exported = next(driver.downloads.glob("*.jsonl"))
    records = [json.loads(line) for line in exported.read_text().splitlines()]
    assert [(r["offset"], r["key"], r["headers"]) for r in records] == [(needle, f"k{needle}", {"trace": "needle-42"})]


def test_reset_a_group_to_a_timestamp_and_see_the_lag(driver: Any, console: RunningConsole, broker: Any,
                                                     tmp_path: Path) -> None:
    topic, group = f"events-{uuid.uuid4().hex[:6]}", f"billing-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, 2)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(40):
        p.produce(topic, value=b"before %d" % i)
    p.flush(30)
    time.sleep(0.01)  # a timestamp strictly between the two halves (ms resolution)
    mid = int(time.time() * 1000)
    time.sleep(0.01)
    for i in range(60):
        p.produce(topic, value=b"after %d" % i)
    p.flush(30)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe([topic])
    got, deadline = 0, time.monotonic() + 30
    while got < 100 and time.monotonic() < deadline:
        m = c.poll(1)
        got += m is not None and m.error() is None
    c.commit(asynchronous=False)
    c.close()
    assert got == 100
    go(driver, console, "groups")
    assert found(driver, f'#groups-table tr[data-group="{group}"]')
    save_screenshot(driver, tmp_path, "groups")
    go(driver, console, f"groups/{group}")
    assert css(driver, "#group-lag").text == "0"
    assert css(driver, "#reset-topic").get_attribute("value") == topic
    choose(driver, "#reset-mode", "time")
    fill(driver, "#reset-value", str(mid))
    css(driver, "#reset-preview-btn").click()
    wait(driver, lambda d: found(d, "#reset-preview tbody tr"), what="the dry-run preview")
    preview = [r.text.split() for r in found(driver, "#reset-preview tbody tr")]
    assert sum(int(r[-1]) for r in preview) == 60  # lag after the reset, per partition
    assert css(driver, "#group-lag").text == "0"  # a preview commits nothing
    css(driver, "#reset-execute-btn").click()
    confirm(driver, group)
    wait(driver, lambda d: css(d, "#group-lag").text == "60", what="the lag after the reset")
    assert banner(driver, "notice") == "offsets reset"
    save_screenshot(driver, tmp_path, "group")


def test_create_and_delete_an_acl_and_a_refusal_shown(driver: Any, consoles: dict[str, RunningConsole],
                                                     tmp_path: Path) -> None:
    admin, alice = consoles["admin"], consoles["alice"]
    go(driver, admin, "security")
    choose(driver, "#acl-resource-type", "TOPIC")
    fill(driver, "#acl-name", "payments")
    fill(driver, "#acl-principal", "User:bob")
    choose(driver, "#acl-operation", "READ")
    css(driver, "#acl-create-btn").click()
    row = 'tr[data-acl="User:bob READ TOPIC:payments"]'
    wait(driver, lambda d: found(d, row), what="the new ACL's row")
    assert css(driver, row).text.split()[:7] == ["TOPIC", "payments", "LITERAL", "User:bob", "*", "READ", "ALLOW"]
    save_screenshot(driver, tmp_path, "security")
    css(driver, f"{row} .delete-acl").click()
    confirm(driver, "User:bob")
    wait(driver, lambda d: not found(d, row), what="the ACL's row gone")
    assert banner(driver, "notice") == "1 ACL deleted"
    # alice has no rights: the broker's refusal is on the page
    go(driver, alice, "topics")
    fill(driver, "#topic-name", "alice-was-here")
    css(driver, "#create-topic-btn").click()
    wait(driver, lambda d: banner(d, "error"), what="the refusal")
    assert "create topic alice-was-here: " in banner(driver, "error")
    assert "AUTHORIZATION_FAILED" in banner(driver, "error")
    save_screenshot(driver, tmp_path, "refusal")
    go(driver, alice, "security")
    assert "CLUSTER_AUTHORIZATION_FAILED" in css(driver, "#acls-error").text


def test_transactions_metrics_and_audit_pages(driver: Any, console: RunningConsole, broker: Any,
                                              tmp_path: Path) -> None:
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "checkout-1"})
    p.init_transactions(30)
    p.begin_transaction()
    topic = f"txn-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, 1)
    p.produce(topic, b"x")
    p.flush(30)
    go(driver, console, "transactions")
    assert "checkout-1" in css(driver, "#txn-table").text and "Ongoing" in css(driver, "#txn-table").text
    css(driver, 'a[data-tid="checkout-1"]').click()
    wait(driver, lambda d: found(d, "#txn-describe"), what="the transaction's description")
    assert f"{topic}-0" in css(driver, "#txn-describe").text
    fill(driver, "#txn-topic", topic)
    css(driver, "#txn-open-btn").click()
    wait(driver, lambda d: found(d, '#txn-open-table tr[data-start="0"]'), what="the open transaction")
    save_screenshot(driver, tmp_path, "transactions")
    css(driver, '#txn-open-table tr[data-start="0"] .abort-txn').click()
    confirm(driver, topic)
    wait(driver, lambda d: banner(d, "notice").startswith("aborted the transaction of producer "), what="the abort")
    wait(driver, lambda d: not found(d, "#txn-open-table tbody tr"), what="no open transaction left")
    try:
        p.abort_transaction(30)
    except Exception:  # aborted under it already
        pass
    go(driver, console, "metrics")
    assert css(driver, "#metrics-info").text.startswith("broker 0: http://127.0.0.1:")
    # live: the page samples every 2 s and a rate needs two samples
    wait(driver, lambda d: d.execute_script(
        "return [...document.querySelectorAll('canvas[data-metric]')].length === 8"), what="the charts")
    time.sleep(2.5)  # let two more samples be drawn for the screenshot (not a synchronisation)
    save_screenshot(driver, tmp_path, "metrics")
    go(driver, console, "audit")
    assert "abort-transaction" in css(driver, "#audit-table").text
    save_screenshot(driver, tmp_path, "audit")


def test_set_and_delete_a_scram_user(driver: Any, consoles: dict[str, RunningConsole]) -> None:
    go(driver, consoles["admin"], "security")
    fill(driver, "#user-name", "erin")
    choose(driver, "#user-mechanism", "SCRAM-SHA-512")
    fill(driver, "#user-password", "erin-pw-77a1")
    css(driver, "#user-set-btn").click()
    row = 'tr[data-user="erin"]'
    wait(driver, lambda d: found(d, row), what="the new user's row")
    assert css(driver, row).text.split()[:2] == ["erin", "SCRAM-SHA-512(4096)"]
    assert banner(driver, "notice") == "credentials of erin set"
    assert css(driver, "#user-password").get_attribute("value") == ""  # not left in the form
    css(driver, f"{row} .delete-user").click()
    confirm(driver, "erin")
    wait(driver, lambda d: not found(d, row), what="the user's row gone")
    assert banner(driver, "notice") == "credentials of erin deleted"
    assert "erin-pw-77a1" not in driver.page_source
