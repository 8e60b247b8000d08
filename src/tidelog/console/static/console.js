// tidelog console: one page, plain JS, no dependencies. Every text from the cluster goes through textContent
// (h() below), never innerHTML. Mutating requests carry the session's CSRF token.
"use strict";

const state = { csrf: null, user: null, timers: [], job: null };

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "cls") el.className = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function fmtBytes(n) {
  if (n === null || n === undefined || n < 0) return "";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"]; let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + u[i];
}
const fmtNum = (n) => (n === null || n === undefined ? "" : Number(n).toLocaleString("en-US"));
const fmtTime = (ms) => (ms > 0 ? new Date(ms).toISOString().replace("T", " ").replace("Z", "") : "");

function showError(text) {
  const e = document.getElementById("error");
  e.textContent = text; e.hidden = !text;
}
function showNotice(text) {
  const e = document.getElementById("notice");
  e.textContent = text; e.hidden = !text;
}

async function api(method, path, body) {
  const opts = { method, headers: {}, credentials: "same-origin" };
  if (method !== "GET") opts.headers["X-CSRF-Token"] = state.csrf || "";
  if (body !== undefined) { opts.headers["Content-Type"] = "application/json"; opts.body = JSON.stringify(body); }
  const r = await fetch(path, opts);
  let data = null;
  try { data = await r.json(); } catch (e) { data = null; }
  if (r.status === 401 && data && data.login_required) { renderLogin(); throw new Error("login required"); }
  if (!r.ok) {
    const err = new Error((data && data.error) || r.status + " " + r.statusText);
    err.status = r.status; throw err;
  }
  return data;
}

// run an action, show its refusal (the broker's error) in the banner
async function act(fn, okText) {
  showError(""); showNotice("");
  try {
    const out = await fn();
    if (okText) showNotice(typeof okText === "function" ? okText(out) : okText);
    return out;
  } catch (e) {
    if (e.message !== "login required") showError(e.message);
    return undefined;
  }
}

function confirmName(text, name) {
  return new Promise((resolve) => {
    const d = document.getElementById("confirm-dialog");
    document.getElementById("confirm-text").textContent = text;
    document.getElementById("confirm-name").textContent = name;
    const input = document.getElementById("confirm-input");
    input.value = "";
    d.addEventListener("close", () => resolve(d.returnValue === "ok" ? input.value : null), { once: true });
    d.showModal();
  });
}

function table(id, headers, rows, numeric) {
  numeric = numeric || [];
  return h("table", { id },
    h("thead", {}, h("tr", {}, headers.map((x, i) => h("th", { cls: numeric.includes(i) ? "num" : null }, x)))),
    h("tbody", {}, rows.map((r) => {
      const tr = h("tr", r.attrs || {});
      (r.cells || r).forEach((c, i) => tr.append(h("td", { cls: numeric.includes(i) ? "num" : null }, c)));
      return tr;
    })));
}

function every(ms, fn) { state.timers.push(setInterval(fn, ms)); }
function clearTimers() { state.timers.forEach(clearInterval); state.timers = []; }

// a small line chart: series = [{name, points: [[x, y], ...]}]
function lineChart(canvas, series, yLabel) {
  const ctx = canvas.getContext("2d");
  const W = canvas.width, H = canvas.height, pad = 36;
  ctx.clearRect(0, 0, W, H);
  const pts = series.flatMap((s) => s.points);
  ctx.fillStyle = "#5f6b7a"; ctx.font = "11px sans-serif";
  if (!pts.length) { ctx.fillText("no samples yet", pad, H / 2); return; }
  const xs = pts.map((p) => p[0]), ys = pts.map((p) => p[1]);
  const x0 = Math.min(...xs), x1 = Math.max(...xs) || 1, y1 = Math.max(1, ...ys);
  const X = (x) => pad + ((x - x0) / (x1 - x0 || 1)) * (W - pad - 8);
  const Y = (y) => H - 18 - (y / y1) * (H - 30);
  ctx.strokeStyle = "#d9dee5"; ctx.beginPath(); ctx.moveTo(pad, 8); ctx.lineTo(pad, H - 18); ctx.lineTo(W - 8, H - 18); ctx.stroke();
  ctx.fillText(fmtNum(Math.round(y1 * 100) / 100), 2, 14); ctx.fillText("0", 2, H - 18); ctx.fillText(yLabel || "", pad + 4, 14);
  const colors = ["#0b6bcb", "#b42318", "#067647", "#b54708"];
  series.forEach((s, i) => {
    ctx.strokeStyle = colors[i % colors.length]; ctx.lineWidth = 2; ctx.beginPath();
    s.points.forEach((p, j) => (j ? ctx.lineTo(X(p[0]), Y(p[1])) : ctx.moveTo(X(p[0]), Y(p[1]))));
    ctx.stroke();
    if (s.points.length === 1) { ctx.fillStyle = ctx.strokeStyle; ctx.fillRect(X(s.points[0][0]) - 2, Y(s.points[0][1]) - 2, 4, 4); }
  });
}

// ---- pages ----------------------------------------------------------------------------------------------------

async function pageOverview(main) {
  const o = await api("GET", "/api/overview");
  const card = (k, v, bad) => h("div", { cls: bad ? "card bad" : "card" }, h("div", { cls: "v" }, v), h("div", { cls: "k" }, k));
  main.append(h("h1", {}, "Overview"),
    h("div", { cls: "cards", id: "overview-cards" },
      card("cluster id", o.cluster_id || "?"), card("brokers", o.brokers.length), card("controller", o.controller ?? "?"),
      card("topics", o.topics), card("partitions", o.partitions),
      card("under-replicated", o.under_replicated, o.under_replicated > 0), card("offline", o.offline, o.offline > 0),
      card("under min ISR", o.under_min_isr, o.under_min_isr > 0)),
    h("h2", {}, "Brokers"),
    table("brokers-table", ["id", "host:port", "rack", "controller", "log dirs (size, state)"], o.brokers.map((b) => [
      b.id, `${b.host}:${b.port}`, b.rack || "", b.controller ? "yes" : "",
      b.error ? b.error : h("div", {}, b.log_dirs.map((d) => h("div", {}, `${d.path}  ${fmtBytes(d.size)}  ${d.offline ? "OFFLINE " + (d.error || "") : "online"}`)))])),
    h("h2", {}, "Versions and features"),
    h("p", {}, `${o.api_versions} API keys supported by the bootstrap broker. Connected as ${o.principal}.`),
    table("features-table", ["finalized feature", "min", "max"], o.finalized_features.map((f) => [f.name, f.min, f.max])));
}

async function pageTopics(main) {
  const form = h("form", { cls: "row", id: "create-topic" },
    h("label", {}, "name", h("input", { id: "topic-name", required: true })),
    h("label", {}, "partitions", h("input", { id: "topic-partitions", type: "number", min: 1, value: 1 })),
    h("label", {}, "replication factor", h("input", { id: "topic-replication", type: "number", min: 1, value: 1 })),
    h("label", {}, "configs (key=value, one a line)", h("textarea", { id: "topic-configs", rows: 1, cols: 30 })),
    h("button", { id: "create-topic-btn", type: "submit" }, "Create topic"));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const configs = {};
    for (const line of document.getElementById("topic-configs").value.split("\n")) {
      const i = line.indexOf("="); if (i > 0) configs[line.slice(0, i).trim()] = line.slice(i + 1).trim();
    }
    const name = document.getElementById("topic-name").value.trim();
    const ok = await act(() => api("POST", "/api/topics", { name, configs,
      partitions: +document.getElementById("topic-partitions").value,
      replication: +document.getElementById("topic-replication").value }), `topic ${name} created`);
    if (ok) await refresh();
  });
  const holder = h("div", { id: "topics-holder" });
  main.append(h("h1", {}, "Topics"), form, holder);
  async function refresh() {
    const rows = await api("GET", "/api/topics");
    holder.replaceChildren(table("topics-table", ["topic", "partitions", "replication", "messages", "size", "produce rate (msg/s)", "consume rate (msg/s)", "bytes out/s", "under-replicated", ""],
      rows.map((t) => ({ attrs: { "data-topic": t.name }, cells: [
        h("a", { href: "#/topics/" + encodeURIComponent(t.name) }, t.name), t.partitions, t.replication, fmtNum(t.messages),
        fmtBytes(t.size), t.produce_rate === null ? "" : t.produce_rate,
        t.consume_rate == null ? "" : t.consume_rate, t.bytes_out_rate == null ? "" : fmtBytes(t.bytes_out_rate), t.under_replicated,
        h("span", {}, h("a", { href: "#/messages/" + encodeURIComponent(t.name) }, "messages"), " ",
          h("button", { cls: "danger delete-topic", type: "button", "data-topic": t.name, onclick: () => deleteTopic(t.name) }, "Delete"))] })),
      [1, 2, 3, 4, 5, 6, 7, 8]));
  }
  async function deleteTopic(name) {
    const typed = await confirmName(`Delete topic ${name} and all its records?`, name);
    if (typed === null) return;
    const ok = await act(() => api("DELETE", "/api/topics/" + encodeURIComponent(name), { confirm: typed }), `topic ${name} deleted`);
    if (ok) await refresh();
  }
  await refresh();
  every(5000, () => refresh().catch(() => {}));
}

async function pageTopic(main, name) {
  const t = await api("GET", "/api/topics/" + encodeURIComponent(name));
  const addForm = h("form", { cls: "row", id: "add-partitions" },
    h("label", {}, "total partitions", h("input", { id: "partitions-total", type: "number", min: t.partitions.length + 1, value: t.partitions.length + 1 })),
    h("button", { type: "submit" }, "Add partitions"));
  addForm.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    if (await act(() => api("POST", `/api/topics/${encodeURIComponent(name)}/partitions`, { total: +document.getElementById("partitions-total").value }), "partitions added")) route();
  });
  const cfgForm = h("form", { cls: "row", id: "alter-config" },
    h("label", {}, "config", h("input", { id: "config-key" })), h("label", {}, "value (empty: back to the default)", h("input", { id: "config-value" })),
    h("button", { type: "submit" }, "Set config"));
  cfgForm.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const v = document.getElementById("config-value").value;
    if (await act(() => api("POST", `/api/topics/${encodeURIComponent(name)}/configs`, { key: document.getElementById("config-key").value, value: v === "" ? null : v }), "config changed")) route();
  });
  const delForm = h("form", { cls: "row", id: "delete-records" },
    h("label", {}, "partition", h("input", { id: "dr-partition", type: "number", min: 0, value: 0 })),
    h("label", {}, "delete records before offset", h("input", { id: "dr-offset", type: "number", min: -1 })),
    h("button", { type: "submit", cls: "danger" }, "Delete records"));
  delForm.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const typed = await confirmName(`Delete the records of ${name} before that offset?`, name);
    if (typed === null) return;
    if (await act(() => api("POST", `/api/topics/${encodeURIComponent(name)}/delete-records`, { confirm: typed, partition: +document.getElementById("dr-partition").value, offset: +document.getElementById("dr-offset").value }), (o) => `log start is now ${o.low_watermark}`)) route();
  });
  main.append(h("h1", {}, `Topic ${name}`), h("p", {}, h("a", { href: "#/messages/" + encodeURIComponent(name) }, "Browse and search its messages")),
    table("partitions-table", ["partition", "leader", "replicas", "ISR", "log start", "high watermark"],
      t.partitions.map((p) => [p.partition, p.leader, p.replicas.join(","), p.isr.join(","), p.start, p.end]), [0, 4, 5]),
    addForm, cfgForm, delForm, h("h2", {}, "Configs"),
    table("configs-table", ["name", "value", "source", "default", "read-only"], t.configs.map((c) => [c.name, c.sensitive ? "(sensitive)" : c.value ?? "", c.source, c.default ? "yes" : "", c.read_only ? "yes" : ""])));
}

async function pageMessages(main, topic) {
  const topics = await api("GET", "/api/topics");
  const sel = h("select", { id: "msg-topic" }, topics.map((t) => h("option", { value: t.name, selected: t.name === topic }, t.name)));
  const opt = (id, values, label) => h("label", {}, label, h("select", { id }, values.map((v) => h("option", { value: v }, v))));
  const form = h("form", { cls: "row", id: "search-form" },
    h("label", {}, "topic", sel),
    h("label", {}, "partition (empty: all)", h("input", { id: "msg-partition", type: "number", min: 0, size: 4 })),
    opt("msg-start", ["earliest", "latest", "offset", "timestamp"], "from"),
    h("label", {}, "offset / time (ms or ISO)", h("input", { id: "msg-start-value", size: 14 })),
    h("label", {}, "records per partition (0: all)", h("input", { id: "msg-limit", type: "number", min: 0, value: 0, size: 6 })),
    opt("msg-field", ["any", "key", "value", "header", "expression"], "search in"),
    h("label", {}, "header name (optional)", h("input", { id: "msg-header", size: 10 })),
    h("label", {}, "contains", h("input", { id: "msg-text", size: 18 })),
    h("label", {}, "or filter expression", h("input", { id: "msg-expression", size: 28, placeholder: 'json["total"] > 100 and offset >= 10' })),
    opt("msg-decode", ["text", "json", "hex", "base64"], "show as"),
    h("button", { id: "search-btn", type: "submit" }, "Search"),
    h("button", { id: "cancel-btn", type: "button", cls: "secondary", disabled: true }, "Cancel"),
    h("button", { id: "tail-btn", type: "button", cls: "secondary" }, "Live tail"));
  const progress = h("div", { id: "search-progress", cls: "progress" }, "");
  const bar = h("div", { cls: "bar" }, h("div", { id: "search-bar" }));
  const exportLinks = h("div", { id: "export-links" });
  const results = h("div", { id: "results-holder" });
  const prod = h("form", { cls: "row", id: "produce-form" },
    h("label", {}, "partition (empty: by key)", h("input", { id: "prod-partition", type: "number", min: 0, size: 4 })),
    h("label", {}, "key", h("input", { id: "prod-key" })),
    h("label", {}, "value", h("textarea", { id: "prod-value", rows: 1, cols: 30 })),
    h("label", {}, "headers (name=value, one a line)", h("textarea", { id: "prod-headers", rows: 1, cols: 24 })),
    h("button", { id: "produce-btn", type: "submit" }, "Produce"));
  main.append(h("h1", {}, "Messages"), form, progress, bar, exportLinks, results, h("h2", {}, "Produce a message"), prod);

  prod.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const headers = document.getElementById("prod-headers").value.split("\n").filter((l) => l.includes("=")).map((l) => [l.slice(0, l.indexOf("=")), l.slice(l.indexOf("=") + 1)]);
    const p = document.getElementById("prod-partition").value;
    const k = document.getElementById("prod-key").value;
    await act(() => api("POST", `/api/topics/${encodeURIComponent(sel.value)}/produce`, { partition: p === "" ? null : +p, key: k === "" ? null : k, value: document.getElementById("prod-value").value, headers }),
      (o) => `produced to ${o.topic}-${o.partition} at offset ${o.offset}`);
  });

  let tbody = null, since = 0;
  function startValue() {
    const v = document.getElementById("msg-start-value").value.trim();
    if (v === "") return 0;
    if (/^\d+$/.test(v)) return +v;
    const t = Date.parse(v); if (isNaN(t)) throw new Error(`not an offset nor a time: ${v}`); return t;
  }
  async function run(tail) {
    if (state.job) await api("POST", `/api/search/${state.job}/cancel`).catch(() => {});
    const p = document.getElementById("msg-partition").value;
    const body = { topic: sel.value, partition: p === "" ? null : +p, start: tail ? "latest" : document.getElementById("msg-start").value,
      start_value: startValue(), limit: +document.getElementById("msg-limit").value || (tail ? 50 : 0),
      field: document.getElementById("msg-field").value, header: document.getElementById("msg-header").value, text: document.getElementById("msg-text").value,
      expression: document.getElementById("msg-expression").value };
    const job = await act(() => api("POST", "/api/search", body));
    if (!job) return;
    state.job = job.id; since = 0;
    tbody = h("tbody");
    results.replaceChildren(h("table", { id: "results" }, h("thead", {}, h("tr", {}, ["partition", "offset", "timestamp", "key", "value", "headers"].map((x) => h("th", {}, x)))), tbody));
    exportLinks.replaceChildren();
    document.getElementById("cancel-btn").disabled = false;
    poll(job.id);
  }
  async function poll(id) {
    if (state.job !== id) return;
    let s;
    try { s = await api("GET", `/api/search/${id}?since=${since}&decode=${document.getElementById("msg-decode").value}`); }
    catch (e) { showError(e.message); return; }
    since = s.next;
    for (const r of s.results) {
      tbody.append(h("tr", { "data-offset": r.offset, "data-partition": r.partition }, h("td", { cls: "num" }, r.partition), h("td", { cls: "num" }, r.offset), h("td", {}, fmtTime(r.timestamp)),
        h("td", {}, h("pre", {}, r.key ?? "null")), h("td", {}, h("pre", {}, r.value ?? "null")),
        h("td", {}, r.headers.map(([k, v]) => h("div", {}, `${k}=${v ?? "null"}`)))));
    }
    progress.textContent = `${s.state}: scanned ${fmtNum(s.scanned)} of ${fmtNum(s.total)}, matched ${fmtNum(s.matched)}` + (s.matched > s.kept ? ` (first ${fmtNum(s.kept)} kept)` : "") + ` in ${s.seconds}s`;
    progress.setAttribute("data-state", s.state);
    document.getElementById("search-bar").style.width = (s.total ? Math.min(100, (100 * s.scanned) / s.total) : 100) + "%";
    if (s.error) showError(s.error);
    if (s.state === "running" || s.results.length) { setTimeout(() => poll(id), s.state === "running" ? 250 : 0); return; }
    document.getElementById("cancel-btn").disabled = true;
    exportLinks.replaceChildren("Export the matches: ", h("a", { id: "export-jsonl", href: `/api/search/${id}/export?format=jsonl` }, "JSON lines"), " · ",
      h("a", { id: "export-csv", href: `/api/search/${id}/export?format=csv` }, "CSV"));
  }
  form.addEventListener("submit", (ev) => { ev.preventDefault(); run(false).catch((e) => showError(e.message)); });
  // live tail: the last 50 records per partition, read again every 3 s until stopped
  let tailTimer = null;
  document.getElementById("tail-btn").addEventListener("click", (ev) => {
    if (tailTimer !== null) { clearInterval(tailTimer); tailTimer = null; ev.target.textContent = "Live tail"; return; }
    ev.target.textContent = "Stop tail";
    const again = () => { if (!state.job || document.getElementById("search-progress").dataset.state !== "running") run(true).catch((e) => showError(e.message)); };
    state.job = null; again();
    tailTimer = setInterval(again, 3000); state.timers.push(tailTimer);
  });
  document.getElementById("cancel-btn").addEventListener("click", async () => { if (state.job) await act(() => api("POST", `/api/search/${state.job}/cancel`)); });
}

async function pageGroups(main) {
  const rows = await api("GET", "/api/groups");
  main.append(h("h1", {}, "Consumer groups"), table("groups-table", ["group", "type", "state", ""], rows.map((g) => ({ attrs: { "data-group": g.group }, cells: [
    h("a", { href: (g.type === "Share" ? "#/share-groups/" : "#/groups/") + encodeURIComponent(g.group) }, g.group), g.type, g.state,
    g.type === "Share" ? h("span", { cls: "muted" }, "read-only") : h("button", { cls: "danger delete-group", type: "button", onclick: async () => {
      const typed = await confirmName(`Delete group ${g.group} and its committed offsets?`, g.group);
      if (typed !== null && await act(() => api("DELETE", "/api/groups/" + encodeURIComponent(g.group), { confirm: typed }), `group ${g.group} deleted`)) route();
    } }, "Delete")] }))));
}

async function pageShareGroup(main, group) {
  const holder = h("div"), canvas = h("canvas", { id: "lag-chart", width: 640, height: 180 });
  main.append(h("h1", {}, `Share group ${group}`), holder, h("h2", {}, "Lag over time"), canvas);
  async function refresh() {
    const g = await api("GET", "/api/share-groups/" + encodeURIComponent(group));
    holder.replaceChildren(
      h("p", { id: "share-read-only", cls: "muted" }, g.read_only),
      h("div", { cls: "cards" }, h("div", { cls: "card" }, h("div", { cls: "v", id: "group-lag" }, fmtNum(g.lag)), h("div", { cls: "k" }, "total lag")),
        h("div", { cls: "card" }, h("div", { cls: "v", id: "group-state" }, g.state), h("div", { cls: "k" }, `state (${g.type})`)),
        h("div", { cls: "card" }, h("div", { cls: "v" }, g.members.length), h("div", { cls: "k" }, "members")),
        h("div", { cls: "card" }, h("div", { cls: "v", id: "group-epoch" }, g.group_epoch), h("div", { cls: "k" }, "group epoch")),
        h("div", { cls: "card" }, h("div", { cls: "v", id: "assignment-epoch" }, g.assignment_epoch), h("div", { cls: "k" }, `assignment epoch (${g.assignor})`))),
      h("h2", {}, "Lag per topic"), table("topic-lag-table", ["topic", "lag"], Object.entries(g.lag_by_topic).map(([t, l]) => [t, fmtNum(l)]), [1]),
      h("h2", {}, "Share partitions"), table("lag-table", ["topic", "partition", "start offset (SPSO)", "log end", "lag", "error"], g.offsets.map((r) => ({ attrs: { "data-tp": `${r.topic}-${r.partition}` }, cells: [r.topic, r.partition, r.start_offset, r.end, r.lag ?? "", r.error ?? ""] })), [1, 2, 3, 4]),
      h("h2", {}, "Members"), table("members-table", ["member", "client", "host", "epoch", "assigned partitions"], g.members.map((m) => ({ attrs: { "data-member": m.member }, cells: [m.member, m.client, m.host, m.epoch, m.assignment.join(", ")] })), [3]));
    lineChart(canvas, [{ name: "lag", points: g.lag_history.map(([t, l]) => [t, l]) }], "lag (records)");
  }
  await refresh();
  every(5000, () => refresh().catch(() => {}));
}

async function pageGroup(main, group) {
  const holder = h("div"), canvas = h("canvas", { id: "lag-chart", width: 640, height: 180 });
  const topicsIn = h("input", { id: "reset-topic" });
  const form = h("form", { cls: "row", id: "reset-form" },
    h("label", {}, "topic", topicsIn),
    h("label", {}, "partition (empty: all)", h("input", { id: "reset-partition", type: "number", min: 0, size: 4 })),
    h("label", {}, "reset to", h("select", { id: "reset-mode" }, [["earliest", "earliest"], ["latest", "latest"], ["time", "a timestamp"], ["offset", "an offset"], ["shift", "shift by N"], ["current", "current"]].map(([v, t]) => h("option", { value: v }, t)))),
    h("label", {}, "offset / N / time (ms or ISO)", h("input", { id: "reset-value", size: 24 })),
    h("button", { id: "reset-preview-btn", type: "submit", cls: "secondary" }, "Preview (dry run)"),
    h("button", { id: "reset-execute-btn", type: "button", cls: "danger" }, "Execute"),
    h("button", { id: "delete-offsets-btn", type: "button", cls: "danger" }, "Delete the topic's offsets"));
  const preview = h("div", { id: "reset-preview-holder" });
  main.append(h("h1", {}, `Consumer group ${group}`), holder, h("h2", {}, "Lag over time"), canvas, h("h2", {}, "Reset offsets"), form, preview);
  function body(execute) {
    const mode = document.getElementById("reset-mode").value, raw = document.getElementById("reset-value").value.trim();
    let value = 0;
    if (mode === "time") value = /^\d+$/.test(raw) ? +raw : Date.parse(raw);
    else if (raw !== "") value = +raw;
    if (Number.isNaN(value)) throw new Error(`not a number nor a time: ${raw}`);
    const p = document.getElementById("reset-partition").value;
    return { topic: topicsIn.value, partition: p === "" ? null : +p, mode, value, execute };
  }
  async function send(execute) {
    let b; try { b = body(execute); } catch (e) { showError(e.message); return; }
    const out = await act(() => api("POST", `/api/groups/${encodeURIComponent(group)}/reset-offsets`, b), execute ? "offsets reset" : null);
    if (!out) return;
    preview.replaceChildren(h("p", {}, out.executed ? "Committed:" : "Dry run: nothing committed yet."),
      table("reset-preview", ["topic", "partition", "current offset", "new offset", "log end", "lag after"], out.rows.map((r) => [r.topic, r.partition, r.current ?? "", r.new, r.end, r.lag_after]), [1, 2, 3, 4, 5]));
    if (execute) await refresh();
  }
  form.addEventListener("submit", (ev) => { ev.preventDefault(); send(false); });
  document.getElementById("reset-execute-btn").addEventListener("click", async () => {
    const typed = await confirmName(`Commit new offsets for group ${group}?`, group);
    if (typed === group) send(true); else if (typed !== null) showError("confirmation did not match");
  });
  document.getElementById("delete-offsets-btn").addEventListener("click", async () => {
    const typed = await confirmName(`Delete the committed offsets of group ${group} for topic ${topicsIn.value}?`, group);
    if (typed === null) return;
    if (await act(() => api("POST", `/api/groups/${encodeURIComponent(group)}/delete-offsets`, { confirm: typed, topic: topicsIn.value }), "offsets deleted")) await refresh();
  });
  async function refresh() {
    const g = await api("GET", "/api/groups/" + encodeURIComponent(group));
    if (!topicsIn.value && g.offsets.length) topicsIn.value = g.offsets[0].topic;
    holder.replaceChildren(
      h("div", { cls: "cards" }, h("div", { cls: "card" }, h("div", { cls: "v", id: "group-lag" }, fmtNum(g.lag)), h("div", { cls: "k" }, "total lag")),
        h("div", { cls: "card" }, h("div", { cls: "v" }, g.state), h("div", { cls: "k" }, `state (${g.type})`)),
        h("div", { cls: "card" }, h("div", { cls: "v" }, g.members.length), h("div", { cls: "k" }, "members")),
        ...(g.kip848 ? [h("div", { cls: "card" }, h("div", { cls: "v", id: "group-epoch" }, g.kip848.group_epoch), h("div", { cls: "k" }, "group epoch")),
          h("div", { cls: "card" }, h("div", { cls: "v", id: "assignment-epoch" }, g.kip848.assignment_epoch), h("div", { cls: "k" }, `target assignment epoch (${g.assignor})`))] : [])),
      h("h2", {}, "Lag per topic"), table("topic-lag-table", ["topic", "lag"], Object.entries(g.lag_by_topic).map(([t, l]) => [t, fmtNum(l)]), [1]),
      h("h2", {}, "Lag per partition"), table("lag-table", ["topic", "partition", "committed", "log end", "lag"], g.offsets.map((r) => ({ attrs: { "data-tp": `${r.topic}-${r.partition}` }, cells: [r.topic, r.partition, r.committed, r.end, r.lag ?? ""] })), [1, 2, 3, 4]),
      h("h2", {}, "Members"), g.kip848
        ? table("members-table", ["member", "client", "host", "epoch", "assignment", "target epoch", "target assignment"], g.members.map((m) => ({ attrs: { "data-member": m.member }, cells: [m.member, m.client, m.host, m.epoch, m.assignment.join(", "), m.target_epoch, m.target_assignment.join(", ")] })), [3, 5])
        : table("members-table", ["member", "client", "host", "assignment"], g.members.map((m) => [m.member, m.client, m.host, m.assignment.join(", ")])));
    lineChart(canvas, [{ name: "lag", points: g.lag_history.map(([t, l]) => [t, l]) }], "lag (records)");
  }
  await refresh();
  every(5000, () => refresh().catch(() => {}));
}

async function pageTransactions(main) {
  const rows = await api("GET", "/api/transactions");
  const detail = h("div", { id: "txn-detail" });
  const v = (id) => document.getElementById(id).value;
  const form = h("form", { cls: "row", id: "txn-open-form" },
    h("label", {}, "topic", h("input", { id: "txn-topic" })),
    h("label", {}, "partition", h("input", { id: "txn-partition", type: "number", min: 0, value: 0, size: 4 })),
    h("button", { type: "submit", id: "txn-open-btn", cls: "secondary" }, "Open transactions in the partition"));
  const open = h("div", { id: "txn-open" });
  main.append(h("h1", {}, "Transactions"),
    table("txn-table", ["transactional id", "producer id", "state", "coordinator"], rows.map((t) => [
      h("a", { href: "#", "data-tid": t.transactional_id, onclick: async (ev) => { ev.preventDefault(); await describe(t.transactional_id); } }, t.transactional_id),
      t.producer_id, t.state, t.coordinator])),
    detail, h("h2", {}, "Abort a hanging transaction"), form, open);
  async function describe(tid) {
    const d = await act(() => api("GET", "/api/transactions/" + encodeURIComponent(tid)));
    if (!d) return;
    detail.replaceChildren(table("txn-describe", ["transactional id", "producer id / epoch", "state", "timeout ms", "duration ms", "partitions"],
      [[d.transactional_id, `${d.producer_id} / ${d.producer_epoch}`, d.state, d.timeout_ms, d.duration_ms ?? "", d.partitions.join(", ")]]));
  }
  async function listOpen() {
    const topic = v("txn-topic"), partition = +v("txn-partition");
    let rows;  // not act(): that would clear the notice of an abort just done
    try { rows = await api("GET", `/api/transactions/open?topic=${encodeURIComponent(topic)}&partition=${partition}`); }
    catch (e) { showError(e.message); return; }
    open.replaceChildren(table("txn-open-table", ["producer id", "epoch", "starts at offset", ""], rows.map((a) => ({ attrs: { "data-start": a.start_offset }, cells: [
      a.producer_id, a.producer_epoch, a.start_offset,
      h("button", { cls: "danger abort-txn", type: "button", onclick: async () => {
        const typed = await confirmName(`Write an ABORT marker for producer ${a.producer_id} in ${topic}-${partition}?`, topic);
        if (typed === null) return;
        if (await act(() => api("POST", "/api/transactions/abort", { topic, partition, start_offset: a.start_offset, confirm: typed }), (o) => `aborted the transaction of producer ${o.producer_id}`)) listOpen();
      } }, "Abort")] }))));
  }
  form.addEventListener("submit", (ev) => { ev.preventDefault(); listOpen(); });
}

async function pageSecurity(main) {
  const opt = (id, values) => h("select", { id }, values.map((v) => h("option", { value: v }, v)));
  const form = h("form", { cls: "row", id: "acl-form" },
    h("label", {}, "resource", opt("acl-resource-type", ["TOPIC", "GROUP", "CLUSTER", "TRANSACTIONAL_ID"])),
    h("label", {}, "name", h("input", { id: "acl-name", value: "" })),
    h("label", {}, "pattern", opt("acl-pattern", ["LITERAL", "PREFIXED"])),
    h("label", {}, "principal", h("input", { id: "acl-principal", placeholder: "User:alice" })),
    h("label", {}, "host", h("input", { id: "acl-host", value: "*", size: 8 })),
    h("label", {}, "operation", opt("acl-operation", ["READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE", "ALL"])),
    h("label", {}, "permission", opt("acl-permission", ["ALLOW", "DENY"])),
    h("button", { id: "acl-create-btn", type: "submit" }, "Create ACL"));
  const holder = h("div", { id: "acls-holder" }), usersHolder = h("div"), quotasHolder = h("div");
  main.append(h("h1", {}, "Security"), h("h2", {}, "ACLs"), form, holder, h("h2", {}, "SCRAM users"), usersHolder,
    h("h2", {}, "Client quotas"), quotasHolder);
  const v = (id) => document.getElementById(id).value;
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const acl = { resource_type: v("acl-resource-type"), name: v("acl-name"), pattern: v("acl-pattern"), principal: v("acl-principal"), host: v("acl-host"), operation: v("acl-operation"), permission: v("acl-permission") };
    if (await act(() => api("POST", "/api/acls", acl), "ACL created")) refresh();
  });
  async function refresh() {
    let acls;
    try { acls = await api("GET", "/api/acls"); } catch (e) { holder.replaceChildren(h("p", { id: "acls-error", cls: "muted" }, e.message)); return; }
    holder.replaceChildren(table("acls-table", ["resource", "name", "pattern", "principal", "host", "operation", "permission", ""], acls.map((a) => ({ attrs: { "data-acl": `${a.principal} ${a.operation} ${a.resource_type}:${a.name}` }, cells: [
      a.resource_type, a.name, a.pattern, a.principal, a.host, a.operation, a.permission,
      h("button", { cls: "danger delete-acl", type: "button", onclick: async () => {
        const typed = await confirmName(`Delete the ACL ${a.permission} ${a.principal} ${a.operation} on ${a.resource_type}:${a.name}?`, a.principal);
        if (typed === null) return;
        if (typed !== a.principal) { showError("confirmation did not match"); return; }
        if (await act(() => api("POST", "/api/acls/delete", a), (o) => `${o.deleted} ACL deleted`)) refresh();
      } }, "Delete")] }))));
  }
  await refresh();
  // SCRAM users: set (create or update) and delete, the user's name typed again to delete
  const userForm = h("form", { cls: "row", id: "user-form" },
    h("label", {}, "user", h("input", { id: "user-name", autocomplete: "off" })),
    h("label", {}, "mechanism", opt("user-mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])),
    h("label", {}, "password", h("input", { id: "user-password", type: "password", autocomplete: "new-password" })),
    h("label", {}, "iterations", h("input", { id: "user-iterations", type: "number", min: 4096, max: 16384, value: 4096 })),
    h("button", { id: "user-set-btn", type: "submit" }, "Set credentials"));
  usersHolder.before(userForm);
  userForm.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const body = { user: v("user-name"), mechanism: v("user-mechanism"), password: v("user-password"), iterations: +v("user-iterations") };
    document.getElementById("user-password").value = "";
    if (await act(() => api("POST", "/api/users", body), `credentials of ${body.user} set`)) refreshUsers();
  });
  async function refreshUsers() {
    try {
      const users = await api("GET", "/api/users");
      usersHolder.replaceChildren(table("users-table", ["user", "mechanisms", ""], users.map((u) => ({ attrs: { "data-user": u.user }, cells: [u.user, u.mechanisms.join(", "),
        h("button", { cls: "danger delete-user", type: "button", onclick: async () => {
          const typed = await confirmName(`Delete every SCRAM credential of ${u.user}?`, u.user);
          if (typed === null) return;
          if (await act(() => api("POST", "/api/users/delete", { user: u.user, confirm: typed }), `credentials of ${u.user} deleted`)) refreshUsers();
        } }, "Delete")] }))));
    } catch (e) { usersHolder.replaceChildren(h("p", { cls: "muted", id: "users-error" }, e.message)); }
  }
  // client quotas: set one quota of a user and/or client id (empty name: the default), remove with the entity typed again
  const quotaForm = h("form", { cls: "row", id: "quota-form" },
    h("label", {}, "user", h("input", { id: "quota-user", placeholder: "(none)" })),
    h("label", {}, h("input", { id: "quota-user-default", type: "checkbox" }), "default user"),
    h("label", {}, "client id", h("input", { id: "quota-client", placeholder: "(none)" })),
    h("label", {}, h("input", { id: "quota-client-default", type: "checkbox" }), "default client"),
    h("label", {}, "quota", opt("quota-key", ["producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate"])),
    h("label", {}, "value", h("input", { id: "quota-value", type: "number", min: 0, step: "any" })),
    h("button", { id: "quota-set-btn", type: "submit" }, "Set quota"));
  quotasHolder.before(quotaForm);
  const checked = (id) => document.getElementById(id).checked;
  quotaForm.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const entity = {};
    if (checked("quota-user-default")) entity.user = null; else if (v("quota-user")) entity.user = v("quota-user");
    if (checked("quota-client-default")) entity["client-id"] = null; else if (v("quota-client")) entity["client-id"] = v("quota-client");
    const body = { entity, set: { [v("quota-key")]: v("quota-value") } };
    if (await act(() => api("POST", "/api/quotas", body), "quota set")) refreshQuotas();
  });
  const label = (entity) => Object.entries(entity).map(([k, x]) => `${k}=${x ?? "<default>"}`).join(",");
  async function refreshQuotas() {
    try {
      const quotas = await api("GET", "/api/quotas");
      quotasHolder.replaceChildren(table("quotas-table", ["entity", "quota", "value", ""], quotas.flatMap((q) => Object.entries(q.quotas).map(([k, x]) => ({ attrs: { "data-entity": label(q.entity), "data-quota": k }, cells: [
        label(q.entity), k, x,
        h("button", { cls: "danger remove-quota", type: "button", onclick: async () => {
          const typed = await confirmName(`Remove ${k} of ${label(q.entity)}?`, label(q.entity));
          if (typed === null) return;
          if (await act(() => api("POST", "/api/quotas", { entity: q.entity, remove: [k], confirm: typed }), `${k} of ${label(q.entity)} removed`)) refreshQuotas();
        } }, "Remove")] })))));
    } catch (e) { quotasHolder.replaceChildren(h("p", { cls: "muted", id: "quotas-error" }, e.message)); }
  }
  await refreshUsers();
  await refreshQuotas();
}

async function pageMetrics(main) {
  const names = [["messages_in_per_sec", "messages in /s"], ["bytes_in_per_sec", "bytes in /s"], ["bytes_out_per_sec", "bytes out /s"],
    ["requests_per_sec", "requests /s"], ["request_latency_avg_ms", "request latency, mean (ms)"], ["event_loop_lag_ms", "event-loop lag, mean (ms)"], ["event_loop_lag_max_ms", "event-loop lag, max (ms)"],
    ["replication_lag_messages", "replication lag (messages)"]];
  const history = {};
  const charts = h("div", { cls: "charts", id: "metric-charts" });
  const canvases = {};
  for (const [k, label] of names) { canvases[k] = h("canvas", { width: 420, height: 150, "data-metric": k }); charts.append(h("figure", {}, canvases[k], h("figcaption", {}, label))); }
  const info = h("p", { cls: "muted", id: "metrics-info" });
  main.append(h("h1", {}, "Metrics"), info, charts);
  async function sample() {
    const rows = await api("GET", "/api/metrics");
    const now = Date.now();
    info.textContent = rows.length ? rows.map((r) => `broker ${r.broker}: ${r.url}${r.error ? " (" + r.error + ")" : ""}`).join("; ") : "No broker publishes tidelog metrics (tidelog.metrics.listener).";
    for (const r of rows) for (const [k] of names) if (r[k] !== null && r[k] !== undefined) ((history[k] ||= {})[r.broker] ||= []).push([now, r[k]]);
    for (const [k] of names) {
      const series = Object.entries(history[k] || {}).map(([b, pts]) => ({ name: "broker " + b, points: pts.slice(-120) }));
      lineChart(canvases[k], series, "");
    }
  }
  await sample();
  every(2000, () => sample().catch(() => {}));
}

async function pageAudit(main) {
  const rows = await api("GET", "/api/audit");
  main.append(h("h1", {}, "Audit log"), h("p", { cls: "muted" }, "Mutating actions of this console (newest first); the full log is the --audit-log file."),
    table("audit-table", ["time", "user", "principal", "action", "target", "outcome"], rows.map((a) => [a.time, a.user, a.principal, a.action, a.target, a.outcome])));
}

function renderLogin() {
  clearTimers();
  const main = document.getElementById("main");
  const form = h("form", { cls: "row", id: "login-form" }, h("label", {}, "user", h("input", { id: "login-user", autocomplete: "username" })),
    h("label", {}, "password", h("input", { id: "login-password", type: "password", autocomplete: "current-password" })), h("button", { type: "submit", id: "login-btn" }, "Log in"));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const r = await fetch("/api/login", { method: "POST", headers: { "Content-Type": "application/json" }, credentials: "same-origin",
      body: JSON.stringify({ user: document.getElementById("login-user").value, password: document.getElementById("login-password").value }) });
    if (!r.ok) { showError("wrong user or password"); return; }
    showError(""); await start();
  });
  main.replaceChildren(h("h1", {}, "Log in"), form);
}

const PAGES = { overview: pageOverview, topics: pageTopics, messages: pageMessages, groups: pageGroups, transactions: pageTransactions, security: pageSecurity, metrics: pageMetrics, audit: pageAudit };

async function route() {
  clearTimers(); state.job = null; showNotice("");
  const [page, arg] = (location.hash.replace(/^#\//, "") || "overview").split("/").map(decodeURIComponent);
  document.querySelectorAll("#nav a").forEach((a) => a.classList.toggle("active", a.dataset.page === (page === "share-groups" ? "groups" : page)));
  const main = document.getElementById("main");
  const fresh = h("main", { id: "main", "data-page": page + (arg ? "/" + arg : "") });
  main.replaceWith(fresh);
  let fn = PAGES[page] || pageOverview;
  if (page === "topics" && arg) fn = (m) => pageTopic(m, arg);
  if (page === "groups" && arg) fn = (m) => pageGroup(m, arg);
  if (page === "share-groups" && arg) fn = (m) => pageShareGroup(m, arg);
  try { showError(""); await fn(fresh, arg); fresh.setAttribute("data-ready", "1"); }
  catch (e) { if (e.message !== "login required") { showError(e.message); fresh.setAttribute("data-ready", "1"); } }
}

async function start() {
  const r = await fetch("/api/session", { credentials: "same-origin" });
  const s = await r.json();
  if (r.status === 401) { renderLogin(); return; }
  state.csrf = s.csrf; state.user = s.user;
  document.getElementById("whoami").textContent = `${s.user} → ${s.bootstrap} as ${s.principal}`;
  await route();
}

window.addEventListener("hashchange", route);
document.addEventListener("DOMContentLoaded", () => start().catch((e) => showError(e.message)));
