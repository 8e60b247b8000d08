"""kazoo's blocking calls, each bounded in time, for the stores whose writes run on request handler threads.

The ACL, client-quota, SCRAM, broker-config and group-config stores of ZooKeeper mode read and write ZooKeeper with
kazoo's blocking calls from the broker's request handler threads (``num.io.threads``). kazoo keeps a request made
while the connection is down queued until it reconnects, so with ZooKeeper unreachable each CreateAcls,
AlterClientQuotas, AlterUserScramCredentials or IncrementalAlterConfigs held a handler thread for the whole outage,
and a few of them held every thread. Kafka's ZooKeeper client bounds each request instead: it waits for a
connection at most ``zookeeper.connection.timeout.ms`` (``ZooKeeperClient.waitUntilConnected``, which defaults to
the session timeout) and then fails it with ``ZooKeeperClientTimeoutException``.

:class:`BoundedZooKeeper` gives those stores the same bound: the calls they make go through kazoo's asynchronous
API and are waited for at most ``timeout_s`` (:func:`~tidelog.cluster.zk_async.zk_wait`), then
:class:`~tidelog.cluster.zk_async.ZooKeeperGone`, which a client sees as REQUEST_TIMED_OUT. kazoo's own errors of a
lost connection are turned into the same, and ``retry`` retries them only within the bound. Everything else
(watches, listeners, ``state``) is the client's own.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import Any

from tidelog.cluster.zk_async import ZooKeeperGone, zk_wait


def _connection_errors() -> tuple[type[BaseException], ...]:
    from kazoo.exceptions import (
        ConnectionClosedError,
        ConnectionLoss,
        OperationTimeoutError,
        SessionExpiredError,
    )

    return ConnectionLoss, SessionExpiredError, ConnectionClosedError, OperationTimeoutError


def zk_unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` says ZooKeeper could not be reached or the session is gone: an expected fault during an outage
    (logged as one line), not a defect (logged with its traceback)."""
    return isinstance(exc, (ZooKeeperGone, *_connection_errors()))


def log_zk_failure(logger: logging.Logger, message: str, exc: BaseException, kv: dict[str, Any] | None = None) -> None:
    """Log a failed ZooKeeper-backed step of a background thread (a watch callback, a re-registration): a warning
    line when ZooKeeper was unreachable, else an error with the traceback."""
    extra = {"kv": kv or {}}
    if zk_unreachable(exc):
        logger.warning(f"{message}: ZooKeeper unreachable ({type(exc).__name__})", extra=extra)
    else:
        logger.error(message, exc_info=exc, extra=extra)


def watch_callback(what: str, logger: logging.Logger) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """For a kazoo watch callback that reads ZooKeeper: when ZooKeeper is unreachable mid-callback, one warning line
    instead of kazoo's logged traceback, and the watch kept (kazoo calls it again once the session is connected:
    its watchers re-read on reconnection)."""
    def wrap(func: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(func)
        def run(*args: Any, **kwargs: Any) -> Any:
            try:
                return func(*args, **kwargs)
            except Exception as exc:
                if not zk_unreachable(exc):
                    raise
                logger.warning(f"{what}: ZooKeeper unreachable ({type(exc).__name__}); read again on reconnection",
                               extra={"kv": {}})
                return None
        return run
    return wrap


class BoundedTransaction:
    """kazoo's ``TransactionRequest`` whose ``commit`` waits at most the bound."""

    def __init__(self, txn: Any, bounded: BoundedZooKeeper) -> None:
        self._txn = txn
        self._bounded = bounded

    def __getattr__(self, name: str) -> Any:  # create, delete, set_data, check: queued locally
        return getattr(self._txn, name)

    def commit(self) -> list[Any]:
        result: list[Any] = self._bounded.wait(self._txn.commit_async())
        return result


class BoundedZooKeeper:
    """A ``KazooClient`` whose blocking calls each end within ``timeout_s`` (then :class:`ZooKeeperGone`)."""

    def __init__(self, zk: Any, timeout_s: float, give_up: Callable[[], str | None] | None = None,
                 poll: float = 0.25) -> None:
        self.client = zk
        self.timeout_s = timeout_s
        # why waiting is pointless (the session lost, or ZooKeeper unreachable for longer than the session
        # timeout), or None: then every call fails at once instead of each waiting the bound anew, so requests
        # queued behind a store's lock or behind busy handler threads are answered together
        self.give_up = give_up
        self.poll = poll

    def __getattr__(self, name: str) -> Any:  # ChildrenWatch, DataWatch, add_listener, state...: the client's
        return getattr(self.client, name)

    def wait(self, result: Any) -> Any:
        deadline = time.monotonic() + self.timeout_s
        try:
            while True:
                reason = self.give_up() if self.give_up is not None else None
                if reason:
                    raise ZooKeeperGone(reason)
                remaining = deadline - time.monotonic()
                if remaining <= self.poll or self.give_up is None:
                    return zk_wait(result, remaining)
                if result.wait(self.poll):
                    return result.get(block=False)
        except _connection_errors() as exc:
            raise ZooKeeperGone(f"ZooKeeper: {type(exc).__name__}") from exc

    def get(self, path: str, watch: Callable[..., Any] | None = None) -> Any:
        return self.wait(self.client.get_async(path, watch))

    def get_children(self, path: str, watch: Callable[..., Any] | None = None) -> Any:
        return self.wait(self.client.get_children_async(path, watch))

    def exists(self, path: str, watch: Callable[..., Any] | None = None) -> Any:
        return self.wait(self.client.exists_async(path, watch))

    def set(self, path: str, value: bytes, version: int = -1) -> Any:
        return self.wait(self.client.set_async(path, value, version))

    def create(self, path: str, value: bytes = b"", acl: Any = None, ephemeral: bool = False,
               sequence: bool = False, makepath: bool = False) -> Any:
        return self.wait(self.client.create_async(path, value, acl=acl, ephemeral=ephemeral, sequence=sequence,
                                                  makepath=makepath))

    def delete(self, path: str, version: int = -1) -> Any:
        return self.wait(self.client.delete_async(path, version))

    def ensure_path(self, path: str) -> Any:
        return self.wait(self.client.ensure_path_async(path))

    def transaction(self) -> BoundedTransaction:
        return BoundedTransaction(self.client.transaction(), self)

    def retry(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn`` again after a lost connection, as kazoo's ``retry``, but only until the bound has passed."""
        deadline = time.monotonic() + self.timeout_s
        retried: tuple[type[BaseException], ...] = (ZooKeeperGone, *_connection_errors())
        while True:
            try:
                return fn(*args, **kwargs)
            except retried as exc:
                if time.monotonic() >= deadline or (self.give_up is not None and self.give_up()):
                    if isinstance(exc, ZooKeeperGone):
                        raise
                    raise ZooKeeperGone(f"ZooKeeper: {type(exc).__name__}") from exc
                time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
