"""The console's HTTP side: a Starlette application serving one page (``static/``) and a JSON API under ``/api``.

Every Kafka call runs in a worker thread (``run_in_threadpool``), never on the event loop. Every ``/api`` route
but ``session`` and ``login`` needs a session; every mutating one (POST, DELETE) needs the session's CSRF token in
``X-CSRF-Token``, is written to the audit log (allowed or refused), and destructive ones (delete a topic, a
group, records) must repeat the resource's name in ``confirm``.
"""

from __future__ import annotations

import asyncio
import getpass
import re
import time
import urllib.request
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from tidelog.cli.group_offsets import ResetSpec
from tidelog.console import security_ops as sec
from tidelog.console import share_groups
from tidelog.console import transactions as txn
from tidelog.console.audit import AuditLog
from tidelog.console.cache import TtlCache
from tidelog.console.kafka import Cluster, ConsoleError
from tidelog.console.rates import TopicRates
from tidelog.console.search import Query, SearchRunner
from tidelog.console.sessions import COOKIE, Session, Sessions, is_loopback

_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_RESET_MODES = ("earliest", "latest", "offset", "shift", "time", "current")


@dataclass
class ConsoleConfig:
    bootstrap: str
    props: dict[str, str]
    host: str = "127.0.0.1"
    port: int = 9021
    user: str = ""
    password: str | None = None
    audit_path: Path | None = None
    timeout: float = 15.0
    cache_ttl: float = 5.0  # seconds the Overview and Topics pages' data is fresh (console/cache.py); 0: no cache


class Console:
    """One console: the cluster it talks to, its sessions, search jobs, audit log and the samples it charts."""

    def __init__(self, cfg: ConsoleConfig, cluster: Cluster | None = None) -> None:
        self.cfg = cfg
        self.cluster = cluster or Cluster(cfg.bootstrap, cfg.props, cfg.timeout)
        self.sessions = Sessions(not is_loopback(cfg.host), cfg.user or _os_user(), cfg.password)
        self.search = SearchRunner(self.cluster)
        self.audit = AuditLog(cfg.audit_path, self.cluster.principal)
        self._ends: dict[str, tuple[float, int]] = {}  # topic -> (time, sum of end offsets) for the produce rate
        self._lag: dict[str, deque[tuple[int, int]]] = {}  # group -> (ms, lag) samples, for the chart
        self._metrics: dict[str, tuple[float, dict[str, float]]] = {}  # url -> last sample, for rates
        self.cache = TtlCache(cfg.cache_ttl)
        if cfg.cache_ttl <= 0:  # no caching at all: min.insync.replicas described on every Overview too
            self.cluster.min_isr_ttl = 0.0
        self.topic_rates = TopicRates(min(cfg.timeout, 5.0))

    # -- the parts every route shares ------------------------------------------------------------------

    def session_of(self, request: Request) -> Session | None:
        return self.sessions.get(request.cookies.get(COOKIE))

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await run_in_threadpool(fn, *args)

    async def mutate(self, request: Request, action: str, target: str, fn: Callable[..., Any], *args: Any,
                     **details: Any) -> Any:
        """A mutating action: run it, record it in the audit log either way, re-raise a refusal."""
        session: Session = request.state.session
        try:
            result = await self.call(fn, *args)
        except ConsoleError as exc:
            self.audit.record(session.user, action, target, f"refused: {exc.text}", **details)
            raise
        finally:
            self.cache.invalidate()  # the pages show the console's own change at once
        self.audit.record(session.user, action, target, "ok", **details)
        return result

    def lag_sample(self, group: str, at_ms: int, lag: int) -> list[tuple[int, int]]:
        if group not in self._lag and len(self._lag) >= 500:
            self._lag.pop(next(iter(self._lag)))
        samples = self._lag.setdefault(group, deque(maxlen=360))
        samples.append((at_ms, lag))
        return list(samples)

    def overview(self) -> dict[str, Any]:
        return self.cache.get(("overview",), self.cluster.overview)  # type: ignore[no-any-return]

    def topics(self, internal: bool) -> list[dict[str, Any]]:
        return self.cache.get(("topics", internal), lambda: self._topics(internal))  # type: ignore[no-any-return]

    def _topics(self, internal: bool) -> list[dict[str, Any]]:
        """The Topics page's rows with their produce rate (end offsets) and consume rates (brokers' metrics)."""
        rows: list[dict[str, Any]] = self.cluster.topics(internal)
        self.produce_rates(rows)
        try:
            urls = self.cache.get(("metrics-urls",), self.cluster.metrics_urls)
        except ConsoleError:  # not allowed to describe the brokers' configs: no consume rates
            urls = {}
        rates = self.topic_rates.rates(urls)
        for t in rows:
            r = rates.get(t["name"], {})
            t["consume_rate"], t["bytes_out_rate"] = r.get("consume_rate"), r.get("bytes_out_rate")
        return rows

    def produce_rates(self, topics: list[dict[str, Any]]) -> None:
        now = time.monotonic()
        for t in topics:
            last = self._ends.get(t["name"])
            t["produce_rate"] = (round((t["end_offsets"] - last[1]) / (now - last[0]), 1)
                                 if last is not None and now > last[0] else None)
            self._ends[t["name"]] = (now, t["end_offsets"])

    def metrics(self) -> list[dict[str, Any]]:
        from prometheus_client.parser import text_string_to_metric_families

        out = []
        for node, url in sorted(self.cluster.metrics_urls().items()):
            try:
                with urllib.request.urlopen(url, timeout=self.cfg.timeout) as r:
                    text = r.read(16 * 1024 * 1024).decode()
            except OSError as exc:
                out.append({"broker": node, "url": url, "error": str(exc)})
                continue
            totals: dict[str, float] = {}
            for fam in text_string_to_metric_families(text):
                for s in fam.samples:
                    totals[s.name] = totals.get(s.name, 0.0) + s.value if s.name in _SUMMED else totals.get(
                        s.name, s.value)
            now = time.monotonic()
            last = self._metrics.get(url)
            self._metrics[url] = (now, totals)

            def rate(name: str, _last: Any = last, _totals: dict[str, float] = totals, _now: float = now) -> Any:
                if _last is None or name not in _totals or _now <= _last[0]:
                    return None
                return round(max(0.0, _totals[name] - _last[1].get(name, 0.0)) / (_now - _last[0]), 2)

            def mean_ms(hist: str, _last: Any = last, _totals: dict[str, float] = totals) -> Any:
                """A histogram's mean over the last interval (since the start on the first sample), in ms."""
                n, total = _totals.get(hist + "_count"), _totals.get(hist + "_sum")
                if n is None or total is None:
                    return None
                if _last is not None:
                    n, total = n - _last[1].get(hist + "_count", 0.0), total - _last[1].get(hist + "_sum", 0.0)
                return round(1000 * total / n, 3) if n > 0 else 0.0

            out.append({"broker": node, "url": url,
                        "bytes_in_per_sec": rate("tidelog_topic_bytes_in_total"),
                        "bytes_out_per_sec": rate("tidelog_topic_bytes_out_total"),
                        "messages_in_per_sec": rate("tidelog_topic_messages_in_total"),
                        "requests_per_sec": rate("tidelog_requests_total"),
                        "request_latency_avg_ms": mean_ms("tidelog_request_latency_seconds"),
                        "event_loop_lag_ms": mean_ms("tidelog_event_loop_lag_seconds"),
                        "event_loop_lag_max_ms": _ms(totals.get("tidelog_event_loop_lag_max_seconds")),
                        "replication_lag_messages": totals.get("tidelog_replica_follower_lag_messages", 0.0),
                        "connections": totals.get("tidelog_connections")})
        return out


_SUMMED = {"tidelog_topic_bytes_in_total", "tidelog_topic_bytes_out_total", "tidelog_topic_messages_in_total",
           "tidelog_requests_total", "tidelog_request_latency_seconds_count", "tidelog_request_latency_seconds_sum",
           "tidelog_event_loop_lag_seconds_count", "tidelog_event_loop_lag_seconds_sum",
           "tidelog_replica_follower_lag_messages"}


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "local"


# -- request parsing --------------------------------------------------------------------------------------------


async def _body(request: Request) -> dict[str, Any]:
    if int(request.headers.get("content-length") or 0) > 1024 * 1024:
        raise ConsoleError("request body over 1 MiB", 413)
    try:
        data = await request.json()
    except ValueError:
        raise ConsoleError("expected a JSON body", 400) from None
    if not isinstance(data, dict):
        raise ConsoleError("expected a JSON object", 400)
    return data


def _name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        raise ConsoleError(f"{what}: expected 1 to 249 of [A-Za-z0-9._-], got {value!r}", 400)
    return value


def _int(value: Any, what: str, low: int | None = None, optional: bool = False) -> Any:
    if optional and (value is None or value == ""):
        return None
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise ConsoleError(f"{what}: expected a whole number, got {value!r}", 400) from None
    if low is not None and n < low:
        raise ConsoleError(f"{what}: must be {low} or more, got {n}", 400)
    return n


def _confirm(data: dict[str, Any], name: str) -> None:
    if data.get("confirm") != name:
        raise ConsoleError(f"confirmation required: repeat the name {name!r} in 'confirm'", 409)


def _owner(request: Request) -> str:
    """The session a search job belongs to (its CSRF token: one per session, never shown to another)."""
    return str(request.state.session.csrf)


def _group_id(request: Request) -> str:
    g = request.path_params["group"]
    if not g or len(g) > 255:
        raise ConsoleError("group id: 1 to 255 characters", 400)
    return str(g)


# -- routes ---------------------------------------------------------------------------------------------------


def build_app(console: Console, allowed_hosts: list[str] | None = None) -> Starlette:
    c = console
    static_dir = resources.files("tidelog.console") / "static"

    async def index(request: Request) -> Response:
        html = (static_dir / "index.html").read_text(encoding="utf-8")
        resp = Response(html, media_type="text/html; charset=utf-8")
        _security_headers(resp)
        if c.session_of(request) is None and not c.sessions.login_required:
            token, _ = c.sessions.open_local()
            _set_cookie(resp, token)
        return resp

    async def session(request: Request) -> Response:
        s = c.session_of(request)
        if s is None:
            if c.sessions.login_required:
                return JSONResponse({"login_required": True}, status_code=401)
            token, s = c.sessions.open_local()
            resp = JSONResponse(_session_json(c, s))
            _set_cookie(resp, token)
            return resp
        return JSONResponse(_session_json(c, s))

    async def login(request: Request) -> Response:
        data = await _body(request)
        opened = c.sessions.login(str(data.get("user", "")), str(data.get("password", "")))
        if opened is None:
            c.audit.record(str(data.get("user", ""))[:64], "login", "console", "refused: wrong user or password")
            await asyncio.sleep(1.0)  # slows password guessing down, without blocking anyone else
            return JSONResponse({"error": "wrong user or password"}, status_code=401)
        token, s = opened
        c.audit.record(s.user, "login", "console", "ok")
        resp = JSONResponse(_session_json(c, s))
        _set_cookie(resp, token)
        return resp

    async def logout(request: Request) -> Response:
        c.sessions.logout(request.cookies.get(COOKIE))
        resp = JSONResponse({"ok": True})
        resp.delete_cookie(COOKIE)
        return resp

    async def overview(request: Request) -> Response:
        return JSONResponse(await c.call(c.overview))

    async def topics(request: Request) -> Response:
        return JSONResponse(await c.call(c.topics, request.query_params.get("internal") == "1"))

    async def create_topic(request: Request) -> Response:
        data = await _body(request)
        name = _name(data.get("name"), "topic name")
        parts = _int(data.get("partitions", 1), "partitions", 1)
        rf = _int(data.get("replication", 1), "replication factor", 1)
        configs = data.get("configs") or {}
        if not isinstance(configs, dict) or not all(isinstance(v, str) for v in configs.values()):
            raise ConsoleError("configs: expected an object of string values", 400)
        await c.mutate(request, "create-topic", name, c.cluster.create_topic, name, parts, rf, configs,
                       partitions=parts, replication=rf, configs=configs)
        return JSONResponse({"ok": True, "topic": name}, status_code=201)

    async def topic(request: Request) -> Response:
        return JSONResponse(await c.call(c.cluster.topic, _name(request.path_params["topic"], "topic")))

    async def delete_topic(request: Request) -> Response:
        name = _name(request.path_params["topic"], "topic")
        _confirm(await _body(request), name)
        await c.mutate(request, "delete-topic", name, c.cluster.delete_topic, name)
        return JSONResponse({"ok": True})

    async def add_partitions(request: Request) -> Response:
        name = _name(request.path_params["topic"], "topic")
        total = _int((await _body(request)).get("total"), "total partitions", 1)
        await c.mutate(request, "add-partitions", name, c.cluster.add_partitions, name, total, total=total)
        return JSONResponse({"ok": True})

    async def alter_config(request: Request) -> Response:
        name = _name(request.path_params["topic"], "topic")
        data = await _body(request)
        key = data.get("key")
        value = data.get("value")
        if not isinstance(key, str) or not key or (value is not None and not isinstance(value, str)):
            raise ConsoleError("expected key (a string) and value (a string, or null to restore the default)")
        await c.mutate(request, "alter-topic-config", name, c.cluster.alter_topic_config, name, key, value,
                       key=key, value=value)
        return JSONResponse({"ok": True})

    async def delete_records(request: Request) -> Response:
        name = _name(request.path_params["topic"], "topic")
        data = await _body(request)
        _confirm(data, name)
        p = _int(data.get("partition"), "partition", 0)
        off = _int(data.get("offset"), "offset", -1)
        low = await c.mutate(request, "delete-records", f"{name}-{p}", c.cluster.delete_records, name, p, off,
                             before_offset=off)
        return JSONResponse({"ok": True, "low_watermark": low})

    async def produce(request: Request) -> Response:
        name = _name(request.path_params["topic"], "topic")
        data = await _body(request)
        part = _int(data.get("partition"), "partition", 0, optional=True)
        headers = data.get("headers") or []
        if not isinstance(headers, list) or not all(isinstance(h, list) and len(h) == 2 for h in headers):
            raise ConsoleError("headers: expected [[name, value], ...]")
        key, value = data.get("key"), data.get("value")
        res = await c.mutate(request, "produce", name, c.cluster.produce, name, part,
                             None if key is None else str(key).encode(), None if value is None else str(value).encode(),
                             [(str(k), str(v).encode()) for k, v in headers], partition=part)
        return JSONResponse(res)

    async def start_search(request: Request) -> Response:
        data = await _body(request)
        q = Query(topic=_name(data.get("topic"), "topic"),
                  partition=_int(data.get("partition"), "partition", 0, optional=True),
                  start=str(data.get("start") or "earliest"),
                  start_value=_int(data.get("start_value") or 0, "start value"),
                  limit=_int(data.get("limit") or 0, "limit", 0), field=str(data.get("field") or "any"),
                  text=str(data.get("text") or ""), header=str(data.get("header") or ""),
                  expression=str(data.get("expression") or ""))
        if q.start not in ("earliest", "latest", "offset", "timestamp"):
            raise ConsoleError("start: earliest, latest, offset or timestamp")
        if q.field not in ("any", "key", "value", "header", "expression"):
            raise ConsoleError("field: any, key, value, header or expression")
        job = await c.call(c.search.start, q, _int(data.get("max_results"), "max results", 1, optional=True),
                           _owner(request))
        return JSONResponse(job.snapshot(0, "text"), status_code=202)

    async def search_status(request: Request) -> Response:
        job = c.search.get(request.path_params["job"], _owner(request))
        since = _int(request.query_params.get("since") or 0, "since", 0)
        how = request.query_params.get("decode") or "text"
        if how not in ("text", "json", "hex", "base64"):
            raise ConsoleError("decode: text, json, hex or base64")
        return JSONResponse(await c.call(job.snapshot, since, how))

    async def search_cancel(request: Request) -> Response:
        return JSONResponse(c.search.cancel(request.path_params["job"], _owner(request)).snapshot(0, "text"))

    async def search_export(request: Request) -> Response:
        job = c.search.get(request.path_params["job"], _owner(request))
        fmt = request.query_params.get("format") or "jsonl"
        if fmt not in ("jsonl", "csv"):
            raise ConsoleError("format: jsonl or csv")
        filename = f"{job.query.topic}-{job.id}.{fmt}"
        media = "text/csv" if fmt == "csv" else "application/x-ndjson"
        return StreamingResponse(job.export(fmt), media_type=media,
                                 headers={"Content-Disposition": f'attachment; filename="{filename}"'})

    async def groups(request: Request) -> Response:
        return JSONResponse(await c.call(c.cluster.groups))

    async def group(request: Request) -> Response:
        g = _group_id(request)
        desc = await c.call(c.cluster.group, g)
        desc["lag_history"] = c.lag_sample(g, desc["at_ms"], desc["lag"])
        return JSONResponse(desc)

    async def share_group(request: Request) -> Response:
        g = _group_id(request)
        desc = await c.call(share_groups.share_group, c.cluster, g)
        desc["lag_history"] = c.lag_sample(g, desc["at_ms"], desc["lag"])
        return JSONResponse(desc)

    async def reset_offsets(request: Request) -> Response:
        g = _group_id(request)
        data = await _body(request)
        mode = data.get("mode")
        if mode not in _RESET_MODES:
            raise ConsoleError(f"mode: one of {', '.join(_RESET_MODES)}")
        value = _int(data.get("value") or 0, "value") if mode in ("offset", "shift", "time") else 0
        if mode == "offset" and value < 0:
            raise ConsoleError("offset: must be 0 or more")
        topic_name = _name(data.get("topic"), "topic")
        part = _int(data.get("partition"), "partition", 0, optional=True)
        execute = bool(data.get("execute"))
        args = (g, topic_name, part, ResetSpec(mode, value), execute)
        if not execute:
            rows = await c.call(c.cluster.reset_offsets, *args)
        else:
            rows = await c.mutate(request, "reset-offsets", g, c.cluster.reset_offsets, *args, topic=topic_name,
                                  partition=part, mode=mode, value=value)
        return JSONResponse({"executed": execute, "rows": rows})

    async def delete_group(request: Request) -> Response:
        g = _group_id(request)
        _confirm(await _body(request), g)
        await c.mutate(request, "delete-group", g, c.cluster.delete_group, g)
        return JSONResponse({"ok": True})

    async def delete_group_offsets(request: Request) -> Response:
        g = _group_id(request)
        data = await _body(request)
        _confirm(data, g)
        topic_name = _name(data.get("topic"), "topic")
        rows = await c.mutate(request, "delete-group-offsets", g, c.cluster.delete_group_offsets, g, topic_name,
                              topic=topic_name)
        return JSONResponse({"ok": True, "rows": rows})

    async def transactions(request: Request) -> Response:
        return JSONResponse(await c.call(c.cluster.transactions))

    async def transaction(request: Request) -> Response:
        return JSONResponse(await c.call(txn.describe, c.cluster, str(request.path_params["tid"])))

    async def partition_transactions(request: Request) -> Response:
        topic_name = _name(request.query_params.get("topic"), "topic")
        part = _int(request.query_params.get("partition"), "partition", 0)
        return JSONResponse(await c.call(txn.open_transactions, c.cluster, topic_name, part))

    async def abort_transaction(request: Request) -> Response:
        data = await _body(request)
        topic_name = _name(data.get("topic"), "topic")
        _confirm(data, topic_name)
        part = _int(data.get("partition"), "partition", 0)
        start = _int(data.get("start_offset"), "start offset", 0)
        res = await c.mutate(request, "abort-transaction", f"{topic_name}-{part}", txn.abort, c.cluster, topic_name,
                             part, start, start_offset=start)
        return JSONResponse({"ok": True, **res})

    async def acls(request: Request) -> Response:
        return JSONResponse(await c.call(c.cluster.acls))

    async def create_acl(request: Request) -> Response:
        data = await _body(request)
        f = Cluster.acl_fields(data)
        await c.mutate(request, "create-acl", f"{data.get('resource_type')}:{f['resource_name']}",
                       c.cluster.create_acl, data, **{k: data.get(k) for k in ("principal", "operation", "permission",
                                                                                 "pattern", "host")})
        return JSONResponse({"ok": True}, status_code=201)

    async def delete_acl(request: Request) -> Response:
        data = await _body(request)
        f = Cluster.acl_fields(data)
        n = await c.mutate(request, "delete-acl", f"{data.get('resource_type')}:{f['resource_name']}",
                           c.cluster.delete_acl, data, **{k: data.get(k) for k in ("principal", "operation",
                                                                                   "permission", "pattern", "host")})
        return JSONResponse({"ok": True, "deleted": n})

    async def users(request: Request) -> Response:
        return JSONResponse(await c.call(c.cluster.scram_users))

    async def set_user(request: Request) -> Response:
        data = await _body(request)
        user = sec.entity_name(data.get("user"), "user")
        mech = str(data.get("mechanism") or "").upper()  # the password goes to the request only, never the audit
        await c.mutate(request, "set-scram-user", user, sec.set_scram_user, c.cluster, user, mech,
                       data.get("password"), data.get("iterations"), mechanism=mech,
                       iterations=data.get("iterations"))
        return JSONResponse({"ok": True, "user": user}, status_code=201)

    async def delete_user(request: Request) -> Response:
        data = await _body(request)
        user = sec.entity_name(data.get("user"), "user")
        _confirm(data, user)
        mechs = await c.mutate(request, "delete-scram-user", user, sec.delete_scram_user, c.cluster, user,
                               data.get("mechanism"), mechanism=data.get("mechanism"))
        return JSONResponse({"ok": True, "deleted": mechs})

    async def quotas(request: Request) -> Response:
        return JSONResponse(await c.call(c.cluster.quotas))

    async def alter_quotas(request: Request) -> Response:
        data = await _body(request)
        entity = sec.quota_entity(data.get("entity"))
        ops = sec.quota_ops(data.get("set"), data.get("remove"))
        label = sec.entity_label(entity)
        if any(op["remove"] for op in ops):  # removing a quota lifts a limit: the entity is named again
            _confirm(data, label)
        await c.mutate(request, "alter-quotas", label, sec.alter_quotas, c.cluster, entity, ops,
                       set=data.get("set") or {}, remove=data.get("remove") or [])
        return JSONResponse({"ok": True, "entity": label})

    async def metrics(request: Request) -> Response:
        return JSONResponse(await c.call(c.metrics))

    async def audit(request: Request) -> Response:
        return JSONResponse(c.audit.recent())

    routes = [
        Route("/", index),
        Route("/api/session", session),
        Route("/api/login", login, methods=["POST"]),
        Route("/api/logout", logout, methods=["POST"]),
        Route("/api/overview", overview),
        Route("/api/topics", topics),
        Route("/api/topics", create_topic, methods=["POST"]),
        Route("/api/topics/{topic}", topic),
        Route("/api/topics/{topic}", delete_topic, methods=["DELETE"]),
        Route("/api/topics/{topic}/partitions", add_partitions, methods=["POST"]),
        Route("/api/topics/{topic}/configs", alter_config, methods=["POST"]),
        Route("/api/topics/{topic}/delete-records", delete_records, methods=["POST"]),
        Route("/api/topics/{topic}/produce", produce, methods=["POST"]),
        Route("/api/search", start_search, methods=["POST"]),
        Route("/api/search/{job}", search_status),
        Route("/api/search/{job}/cancel", search_cancel, methods=["POST"]),
        Route("/api/search/{job}/export", search_export),
        Route("/api/groups", groups),
        Route("/api/groups/{group}", group),
        Route("/api/groups/{group}", delete_group, methods=["DELETE"]),
        Route("/api/share-groups/{group}", share_group),
        Route("/api/groups/{group}/reset-offsets", reset_offsets, methods=["POST"]),
        Route("/api/groups/{group}/delete-offsets", delete_group_offsets, methods=["POST"]),
        Route("/api/transactions", transactions),
        Route("/api/transactions/open", partition_transactions),
        Route("/api/transactions/abort", abort_transaction, methods=["POST"]),
        Route("/api/transactions/{tid}", transaction),
        Route("/api/acls", acls),
        Route("/api/acls", create_acl, methods=["POST"]),
        Route("/api/acls/delete", delete_acl, methods=["POST"]),
        Route("/api/users", users),
        Route("/api/users", set_user, methods=["POST"]),
        Route("/api/users/delete", delete_user, methods=["POST"]),
        Route("/api/quotas", quotas),
        Route("/api/quotas", alter_quotas, methods=["POST"]),
        Route("/api/metrics", metrics),
        Route("/api/audit", audit),
        Mount("/static", app=StaticFiles(packages=[("tidelog.console", "static")]), name="static"),
    ]

    async def guard(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        path = request.url.path
        if path.startswith("/api/") and path not in ("/api/session", "/api/login"):
            s = c.session_of(request)
            if s is None:
                return JSONResponse({"error": "login required", "login_required": True}, status_code=401)
            if request.method not in ("GET", "HEAD") and not Sessions.csrf_ok(s, request.headers.get("x-csrf-token")):
                return JSONResponse({"error": "missing or wrong CSRF token (X-CSRF-Token)"}, status_code=403)
            request.state.session = s
        try:
            resp = await call_next(request)
        except ConsoleError as exc:
            resp = JSONResponse({"error": exc.text}, status_code=exc.status)
        _security_headers(resp)
        return resp

    async def on_console_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ConsoleError)
        return JSONResponse({"error": exc.text}, status_code=exc.status)

    async def on_error(request: Request, exc: Exception) -> Response:
        return JSONResponse({"error": f"{type(exc).__name__}: {exc}"}, status_code=500)

    from starlette.middleware.base import BaseHTTPMiddleware

    middleware = [Middleware(BaseHTTPMiddleware, dispatch=guard)]
    if allowed_hosts:  # DNS rebinding: a loopback console answers only to loopback names
        middleware.insert(0, Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts))
    app = Starlette(routes=routes, middleware=middleware,
                    exception_handlers={ConsoleError: on_console_error, Exception: on_error})
    app.state.console = c
    return app


def _session_json(c: Console, s: Session) -> dict[str, Any]:
    return {"user": s.user, "csrf": s.csrf, "principal": c.cluster.principal, "bootstrap": c.cfg.bootstrap,
            "login_required": c.sessions.login_required}


def _set_cookie(resp: Response, token: str) -> None:
    resp.set_cookie(COOKIE, token, httponly=True, samesite="strict", path="/")


def _security_headers(resp: Response) -> None:
    resp.headers["Content-Security-Policy"] = ("default-src 'self'; img-src 'self' data:; style-src 'self'; "
                                               "script-src 'self'; frame-ancestors 'none'")
    resp.headers["X-Content-Type-Options"] = "nosniff"
    resp.headers["Referrer-Policy"] = "no-referrer"
