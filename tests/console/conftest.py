"""Fixtures of the web console's tests: a console against a real ``tidelog serve`` and a headless Chromium driven
by Selenium (Debian's /usr/bin/chromium and /usr/bin/chromedriver; the browser tests are skipped when they are
missing). Helpers are in consolesupport.py."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "broker" / "security"))

from aclsupport import USERS, acl_overrides, sasl_port
from consolesupport import CHROMEDRIVER, CHROMIUM, RunningConsole, browser_missing, start_console


@pytest.fixture(scope="module")
def console(broker: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningConsole]:
    rc = start_console(broker.bootstrap, audit=tmp_path_factory.mktemp("audit") / "audit.log")
    yield rc
    rc.stop()


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    reason = browser_missing()
    if reason:
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    downloads = tmp_path_factory.mktemp("downloads")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--window-size=1280,900",
                f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):
        opts.add_argument(arg)
    opts.add_experimental_option("prefs", {"download.default_directory": str(downloads),
                                           "download.prompt_for_download": False})
    d = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    d.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
    d.downloads = downloads
    d.set_page_load_timeout(30)
    try:
        yield d
    finally:
        d.quit()


def sasl_props(user: str) -> dict[str, str]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": user,
            "sasl.password": USERS[user]}


@pytest.fixture(scope="module")
def acl_broker(broker_factory: Any) -> Any:
    """A broker with an authorizer, super user admin, and a SASL PLAIN listener (users of tests/broker/security)."""
    b = broker_factory(acl_overrides())
    b.sasl_port = sasl_port(b)
    return b


@pytest.fixture(scope="module")
def consoles(acl_broker: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, RunningConsole]]:
    """Two consoles of the ACL broker: one logged in to it as admin (a super user), one as alice (no rights)."""
    d = tmp_path_factory.mktemp("sec-audit")
    boot = f"127.0.0.1:{acl_broker.sasl_port}"
    out = {u: start_console(boot, sasl_props(u), audit=d / f"{u}.log", user=f"op-{u}") for u in ("admin", "alice")}
    yield out
    for rc in out.values():
        rc.stop()
