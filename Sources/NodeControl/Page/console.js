"use strict";
// The node's console: everything shown comes from the control API (/v1) and its events stream.
const $ = (id) => document.getElementById(id);
const log = (...parts) => console.log("callnode-console", ...parts);

let node = null, calls = new Map(), events = null, signedIn = false, live = false, skew = 0;
const rows = new Map();      // call id → its row and cells, kept so meters and buttons update in place
const history = new Map();   // call id → the last 60 seconds of its stats
const recentRows = new Map(); // recent id → { tr, key, detail }
const pending = new Set();   // "id action" while its request runs
const SPARKS = [
  { name: "loss", title: "packet loss, % per second", min: 5, unit: (v) => v.toFixed(1) + " %" },
  { name: "jitter", title: "jitter, ms", min: 20, unit: (v) => Math.round(v) + " ms" },
  { name: "rtt", title: "round-trip time, ms", min: 50, unit: (v) => Math.round(v) + " ms" },
  { name: "concealed", title: "concealed frames per second", min: 5, unit: (v) => Math.round(v) + "/s" },
];
const LABELS = {
  answer: "answer", decline: "decline", hangup: "hang up", hold: "hold", resume: "resume", mute: "mute",
  unmute: "unmute", dtmf: "DTMF", play: "play", "stop-prompt": "stop prompt", record: "record",
  "stop-recording": "stop recording", transfer: "transfer", merge: "merge", unmerge: "unmerge",
};
// Events after which the calls are fetched again: the API is the source of truth.
const CALL_EVENTS = new Set(["dialing", "incoming", "ringing", "state", "secured", "connected", "remote-hold", "ended",
  "recording-failed", "playback-finished", "playback-stopped", "recording-started", "recording-stopped", "transfer",
  "connection-lost", "connection-restored"]);

// ---- errors ----
let errorTimer = null;
function showError(message) {
  $("error-text").textContent = String(message);
  $("error").hidden = false;
  clearTimeout(errorTimer);
  errorTimer = setTimeout(clearError, 15000);
}
function clearError() { clearTimeout(errorTimer); $("error").hidden = true; $("error-text").textContent = ""; }
const messageOf = (e) => (e && e.message) || String(e);
function uncaught(message) { console.error("callnode-console-error", message); showError(message); }
window.addEventListener("error", (e) => uncaught(e.message || String(e.error)));
window.addEventListener("unhandledrejection", (e) => uncaught(messageOf(e.reason)));
// Background refreshes: a node that is away is the link's news, not an error; the node's refusals are.
const quietly = (promise) => promise.catch((e) => { if (e.status && e.status !== 401) showError(messageOf(e)); });

// ---- the API ----
// Requests in flight and refreshes waiting to start: 0 when the page has nothing on its way
// (what a test waits for before it changes the node behind the page's back).
let busy = 0;
async function api(method, path, body) {
  busy++;
  try { return await request(method, path, body); } finally { busy--; }
}
async function request(method, path, body) {
  const init = { method: method, credentials: "same-origin", headers: {} };
  if (method !== "GET") {
    // The node refuses cookie-authorised writes without this header (a cross-site form cannot set it).
    init.headers["X-CallNode-Console"] = "1";
    init.headers["Content-Type"] = "application/json";
    if (body !== undefined) init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init), text = await response.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (e) { /* not JSON: callers treat it as nothing */ }
  if (!response.ok) {
    const error = new Error((data && typeof data.error === "string" && data.error) || "HTTP " + response.status);
    error.status = response.status;
    if (response.status === 401 && path !== "/console/session") showLogin();
    throw error;
  }
  return data;
}

// Runs fn at most once per ms, after the first ask: a burst of events makes one fetch.
function debounced(fn, ms) {
  let timer = null;
  return () => {
    if (timer) return;
    busy++;
    timer = setTimeout(() => { timer = null; busy--; quietly(fn()); }, ms);
  };
}
const refetchCalls = debounced(() => loadCalls(), 100);
const refetchRecents = debounced(() => loadRecents(), 150);
const refetchNode = debounced(() => loadNode(), 100);

// ---- signing in and out ----
function showLogin() {
  signedIn = false; live = false;
  if (events) { events.close(); events = null; }
  calls = new Map(); history.clear();
  for (const id of [...rows.keys()]) dropRow(id);
  for (const id of [...recentRows.keys()]) dropRecent(id);
  renderEmpty();
  $("console").hidden = true; $("login").hidden = false;
  $("token").focus();
}
function showConsole() {
  if (!signedIn) log("signed-in");
  signedIn = true;
  $("login").hidden = true; $("console").hidden = false; $("login-error").textContent = "";
}

$("login").addEventListener("submit", async (e) => {
  e.preventDefault();
  const field = $("token"), button = $("login").querySelector("button[type=submit]");
  if (!field.value) return;
  $("login-error").textContent = "";
  button.disabled = true;
  try {
    await api("POST", "/console/session", { token: field.value });
    field.value = "";
    await start();
  } catch (error) {
    $("login-error").textContent = error.status === 401 ? "That is not this node's token." : messageOf(error);
    field.select();
  } finally { button.disabled = false; }
});

$("signout").addEventListener("click", async () => {
  try { await api("DELETE", "/console/session"); } catch (e) { if (e.status !== 401) showError("sign out: " + messageOf(e)); }
  log("signed-out");
  showLogin();
});

// ---- start and the events stream ----
let unreachable = false;
async function start() {
  try { node = await api("GET", "/v1/node"); } catch (e) {
    if (e.status === 401) return;  // the sign-in form is up
    if (!unreachable) showError("the node does not answer: " + messageOf(e));
    unreachable = true;
    setTimeout(start, 2000);
    return;
  }
  unreachable = false;
  showConsole();
  renderNode();
  openEvents();
}
function setLink(text) { $("link").textContent = text; $("link").dataset.state = text === "live" ? "live" : "down"; }

function openEvents() {
  if (events) events.close();
  const es = new EventSource("/v1/events");  // same origin: the session cookie goes with it
  events = es;
  es.addEventListener("open", () => {
    if (es !== events) return;
    live = true;
    log("events open");
    setLink("live");
    // After every (re)connect: what happened while away is only in the API.
    quietly(loadNode()); quietly(loadCalls()); quietly(loadRecents());
  });
  es.addEventListener("error", () => {
    if (es !== events) return;
    live = false;
    log("events error");
    setLink("reconnecting…");
    // EventSource retries by itself unless it gave up (a refusal, or a node that went away).
    if (es.readyState === EventSource.CLOSED) { events = null; setTimeout(reconnect, 1000); }
  });
  es.addEventListener("dropped", (m) => {
    // The node dropped this reader for falling behind: a fresh stream and a fresh look.
    if (es !== events) return;
    es.close(); events = null; live = false;
    log("events dropped");
    let reason = "";
    try { reason = String(JSON.parse(m.data).reason || ""); } catch (e) { /* the notice without its reason */ }
    showError("the node dropped this page's events" + (reason ? " (" + reason + ")" : "") + ": reconnecting, calls fetched afresh");
    setLink("reconnecting…");
    reconnect();
  });
  es.addEventListener("message", (m) => onEvent(m.data));
}

async function reconnect() {
  if (!signedIn || events) return;
  try { node = await api("GET", "/v1/node"); } catch (e) {
    if (e.status !== 401) setTimeout(reconnect, 1000);  // 401: the sign-in form is up
    return;
  }
  renderNode();
  openEvents();
}

function onEvent(data) {
  let e;
  try { e = JSON.parse(data); } catch (error) { return; }
  if (!e || typeof e !== "object" || typeof e.event !== "string") return;
  if (typeof e.time === "number") skew = e.time - Date.now() / 1000;
  if (e.event === "stats") { onStats(e); return; }
  if (CALL_EVENTS.has(e.event) || (e.call && !calls.has(e.call))) refetchCalls();
  if (e.event === "ended") refetchRecents();
  if (e.event === "ended" || e.event === "incoming") refetchNode();
}
setInterval(() => { if (signedIn && live && !document.hidden) quietly(loadNode()); }, 5000);

// ---- the node ----
async function loadNode() {
  const data = await api("GET", "/v1/node");
  if (data && typeof data === "object") { node = data; renderNode(); }
}

function renderNode() {
  if (!node) return;
  const name = node.name || "CallNode", fp = String(node.fingerprint || "");
  $("node-name").textContent = name;
  document.title = name + " · CallNode console";
  Object.assign($("node-fingerprint"), { textContent: fp.slice(0, 16), title: fp });
  const n = Number(node.calls) || 0;
  $("node-calls").textContent = n + (n === 1 ? " call" : " calls");
  Object.assign($("node-state"), { textContent: node.draining ? "draining" : node.taking_calls === false ? "not taking calls" : "taking calls",
    title: node.listen ? "listening on " + node.listen : "not listening for calls" });
  $("dnd").textContent = "Do not disturb: " + (node.do_not_disturb ? "on" : "off");
  $("dnd").setAttribute("aria-pressed", node.do_not_disturb ? "true" : "false");
  Object.assign($("drain"), { textContent: node.draining ? "draining" : "Drain", disabled: !!node.draining });
}

$("dnd").addEventListener("click", async () => {
  const button = $("dnd");
  button.disabled = true;
  try { await api("PUT", "/v1/do-not-disturb", { on: !(node && node.do_not_disturb) }); await loadNode(); }
  catch (e) { if (e.status !== 401) showError("do not disturb: " + messageOf(e)); }
  finally { button.disabled = false; }
});

$("drain").addEventListener("click", async () => {
  if (!confirm("Drain this node? It takes no new calls; the calls it has run to their end.")) return;
  const button = $("drain");
  button.disabled = true;
  try { await api("POST", "/v1/drain", {}); button.textContent = "draining"; await loadNode(); } catch (e) {
    button.disabled = false;
    if (e.status !== 401) showError("drain: " + messageOf(e));
  }
});
$("error-close").addEventListener("click", clearError);

// ---- live calls ----
let callsSeq = 0;
async function loadCalls() {
  const seq = ++callsSeq, data = await api("GET", "/v1/calls");
  if (seq !== callsSeq || !signedIn) return;  // a newer answer is on its way, or signed out meanwhile
  if (!data || !Array.isArray(data.calls)) { setTimeout(refetchCalls, 1000); return; }
  calls = new Map();
  for (const c of data.calls) if (c && typeof c.id === "string") calls.set(c.id, c);
  for (const id of [...history.keys()]) if (!calls.has(id)) history.delete(id);
  for (const call of calls.values()) {
    const h = historyOf(call.id);
    if (!h.prev && call.stats && typeof call.stats === "object") h.prev = call.stats;  // the baseline for the first deltas
  }
  renderCalls();
  log("calls refreshed", calls.size);
}

function historyOf(id) {
  if (!history.has(id)) history.set(id, { loss: [], jitter: [], rtt: [], concealed: [], prev: null });
  return history.get(id);
}
const num = (v) => (typeof v === "number" && isFinite(v) ? v : null);
function push(list, value) { list.push(value); if (list.length > 60) list.shift(); }

function onStats(s) {
  const call = calls.get(s.call);
  if (!call) { refetchCalls(); return; }  // not known yet (or gone): the API says which
  const h = historyOf(s.call), p = h.prev;
  if (p) {
    const lost = Math.max(0, (num(s.packets_lost) || 0) - (num(p.packets_lost) || 0));
    const received = Math.max(0, (num(s.packets_received) || 0) - (num(p.packets_received) || 0));
    push(h.loss, lost + received > 0 ? lost / (lost + received) * 100 : 0);
    push(h.concealed, Math.max(0, (num(s.concealed) || 0) - (num(p.concealed) || 0)));
  }
  push(h.jitter, num(s.jitter_ms));
  push(h.rtt, num(s.rtt_ms));
  h.prev = s;
  call.stats = s;
  if (typeof s.codec === "string") call.codec = s.codec;
  const row = rows.get(s.call);
  if (row) { setText(row.codec, call.codec || ""); renderLevels(row, s); renderSparks(row, h); }
}

const el = (tag, className, text) => Object.assign(document.createElement(tag), className ? { className: className } : {},
  text !== undefined ? { textContent: text } : {});
const SVG = "http://www.w3.org/2000/svg";
const setText = (e, text) => { if (e.textContent !== text) e.textContent = text; };
const shortPeer = (peer) => (/^[0-9a-f]{17,}$/i.test(peer) ? peer.slice(0, 16) + "…" : peer);

function renderEmpty() {
  const tbody = $("calls").tBodies[0], empty = tbody.querySelector("tr.empty");
  if (rows.size > 0 && empty) empty.remove();
  if (rows.size > 0 || empty) return;
  const tr = el("tr", "empty"), td = el("td", "", "No calls.");
  td.colSpan = 8;
  tbody.append(tr);
  tr.append(td);
}
function dropRow(id) { const row = rows.get(id); if (row) row.tr.remove(); rows.delete(id); }

function renderCalls() {
  for (const id of [...rows.keys()]) if (!calls.has(id)) dropRow(id);
  const tbody = $("calls").tBodies[0];
  for (const call of calls.values()) {
    if (!rows.has(call.id)) rows.set(call.id, makeRow(call.id));
    if (rows.get(call.id).tr.parentNode !== tbody) tbody.append(rows.get(call.id).tr);
    updateRow(rows.get(call.id), call);
  }
  renderEmpty();
  tickDurations();
}

function makeRow(id) {
  const tr = el("tr"), row = { tr: tr, actionsKey: null };
  tr.dataset.call = id;
  for (const name of ["direction", "peer", "status", "duration", "security", "levels", "sparks", "actions"]) {
    row[name] = el("td", name);
    tr.append(row[name]);
  }
  Object.assign(row, { name: el("b"), peerText: el("span", "peer-id"), kind: el("span", "tag kind"),
    group: el("span", "tag conference", "conference"), statusWord: el("span", "word"), tags: el("span", "tags"),
    codec: el("span", "codec"), lock: el("span", "lock") });
  row.peer.append(row.name, " ", row.peerText, " ", row.kind, " ", row.group);
  row.status.append(row.statusWord, row.tags);
  row.security.append(row.codec, " ", row.lock);
  const meter = (side, label) => {
    const box = el("div", "meter meter-" + side), line = el("div", "level"), caption = el("span", "meter-label", label);
    box.dataset.level = "";
    box.append(el("span"));
    line.append(side === "send" ? caption : box, side === "send" ? box : caption);
    row.levels.append(line);
    return box;
  };
  row.send = meter("send", "mic →");
  row.receive = meter("receive", "← peer");
  row.spark = {};
  for (const spec of SPARKS) {
    const box = el("span", "spark-box"), svg = document.createElementNS(SVG, "svg"), title = document.createElementNS(SVG, "title");
    svg.setAttribute("class", "spark spark-" + spec.name);
    svg.setAttribute("viewBox", "0 0 60 20");
    title.textContent = spec.title;
    svg.append(title, document.createElementNS(SVG, "polyline"));
    row.spark[spec.name] = { svg: svg, value: el("span", "spark-value", "–") };
    box.title = spec.title;
    box.append(svg, row.spark[spec.name].value);
    row.sparks.append(box);
  }
  row.actions.addEventListener("click", (e) => {
    const button = e.target.closest("button[data-action]");
    if (button) runAction(id, button.dataset.action);
  });
  return row;
}

function updateRow(row, call) {
  const status = String(call.status || "");
  if (row.tr.dataset.status !== status) row.tr.dataset.status = status;
  const outgoing = call.direction === "outgoing", peer = String(call.peer || "");
  setText(row.direction, outgoing ? "↗" : "↙");
  row.direction.title = outgoing ? "outgoing" : "incoming";
  setText(row.name, call.name || "");
  row.name.hidden = !call.name;
  setText(row.peerText, shortPeer(peer));
  row.peerText.title = peer;
  setText(row.kind, call.peer_kind || "");
  row.kind.hidden = !call.peer_kind;
  row.group.hidden = !call.group;
  row.group.title = call.group ? "conference " + call.group : "";
  setText(row.statusWord, status);
  row.statusWord.title = call.state ? String(call.state) : "";
  const tags = [call.muted && "muted", call.held && status !== "held" && "held", call.recording && "recording",
    call.playback && "playing"].filter(Boolean);
  if (row.tagsKey !== tags.join()) {
    row.tagsKey = tags.join();
    row.tags.replaceChildren(...tags.flatMap((t) => [" ", Object.assign(el("span", "tag tag-" + t, t),
      { title: t === "recording" ? String(call.recording) : "" })]));
  }
  setText(row.codec, call.codec || "");
  const kx = call.key_exchange ? " (key exchange: " + call.key_exchange + ")" : "";
  setText(row.lock, call.encrypted === true ? "encrypted" : call.encrypted === false ? "unencrypted" : "");
  row.lock.className = "lock " + (call.encrypted === true ? "secure" : call.encrypted === false ? "insecure" : "");
  row.lock.title = call.encrypted === true ? "encrypted" + kx : call.encrypted === false ? "not encrypted" + kx : "";
  renderLevels(row, call.stats);
  renderSparks(row, historyOf(call.id));
  renderActions(row, call);
}

function renderLevels(row, stats) {
  const one = (box, db) => {
    const v = num(db), bar = box.firstChild;
    const level = v === null ? "" : (Math.round(v * 10) / 10).toFixed(1);
    if (box.dataset.level !== level) box.dataset.level = level;
    const width = v === null ? 0 : Math.min(1, Math.max(0, (v + 60) / 60)) * 100;
    bar.style.width = width.toFixed(1) + "%";
    bar.className = v === null ? "" : v >= -3 ? "hot" : v >= -12 ? "loud" : "";
    box.title = (box === row.send ? "what this node sends" : "what the peer sends") + (level ? ": " + level + " dBFS" : "");
  };
  one(row.send, stats && stats.send_level_db);
  one(row.receive, stats && stats.receive_level_db);
}

function renderSparks(row, h) {
  for (const spec of SPARKS) {
    const values = h[spec.name], { svg, value } = row.spark[spec.name];
    const scale = Math.max(spec.min, ...values.filter((v) => v !== null));
    // One polyline per unbroken run: an RTT the node does not know leaves a gap.
    const runs = [];
    let run = [];
    values.forEach((v, i) => {
      if (v === null) { if (run.length) runs.push(run); run = []; return; }
      const x = 60 - values.length + i + 0.5, y = 19 - (v / scale) * 18;
      run.push(x.toFixed(1) + "," + y.toFixed(1));
    });
    if (run.length) runs.push(run);
    if (!runs.length) runs.push([]);
    const lines = svg.querySelectorAll("polyline");
    for (let i = runs.length; i < lines.length; i++) lines[i].remove();
    runs.forEach((points, i) => {
      let line = lines[i];
      if (!line) { line = document.createElementNS(SVG, "polyline"); svg.append(line); }
      line.setAttribute("points", points.length === 1 ? points[0] + " " + points[0] : points.join(" "));
    });
    const last = values.length ? values[values.length - 1] : null;
    setText(value, last === null ? "–" : spec.unit(last));
  }
}

const established = (c) => c.status === "connected" || c.status === "held";
const mergePartner = (call) => [...calls.values()].find((other) =>
  other.id !== call.id && established(other) && !(call.group && other.group === call.group)) || null;

function actionsFor(call) {
  if (call.status === "ended") return [];
  if (call.status === "ringing" && call.direction === "incoming") return ["answer", "decline"];
  if (!established(call)) return ["hangup"];  // dialing, connecting, ringing out
  const list = ["hangup", call.held || call.status === "held" ? "resume" : "hold", call.muted ? "unmute" : "mute", "dtmf",
    call.playback ? "stop-prompt" : "play", call.recording ? "stop-recording" : "record", "transfer"];
  if (mergePartner(call)) list.push("merge");
  if (call.group) list.push("unmerge");
  return list;
}

function renderActions(row, call) {
  const list = actionsFor(call), key = list.join();
  if (row.actionsKey !== key) {
    row.actionsKey = key;
    row.actions.replaceChildren(...list.map((action) => {
      const b = Object.assign(el("button", "action action-" + action, LABELS[action]), { type: "button" });
      b.dataset.action = action;
      return b;
    }));
  }
  for (const b of row.actions.querySelectorAll("button[data-action]")) b.disabled = pending.has(call.id + " " + b.dataset.action);
}

async function runAction(id, action) {
  const call = calls.get(id);
  if (!call) { refetchCalls(); return; }
  const base = "/v1/calls/" + encodeURIComponent(id), ask = (question) => (prompt(question) || "").trim();
  let method = "POST", path = base + "/" + action, body = {};
  if (action === "dtmf") {
    const digits = ask("DTMF digits to send (0-9 * # A-D)");
    if (!digits) return;
    body = { digits: digits };
  } else if (action === "play") {
    const what = ask("Play a tone in Hz, or a WAV file path on the node");
    if (!what) return;
    body = isFinite(Number(what)) ? { tone: Number(what), seconds: 3 } : { file: what };
  } else if (action === "stop-prompt" || action === "stop-recording") {
    method = "DELETE"; path = base + (action === "stop-prompt" ? "/play" : "/record"); body = undefined;
  } else if (action === "transfer") {
    const to = ask("Transfer to (sip:…)");
    if (!to) return;
    body = { to: to };
  } else if (action === "merge") {
    const other = mergePartner(call);
    if (!other) { showError("merge: no other connected call"); return; }
    body = { with: other.id };
  }
  const key = id + " " + action;
  pending.add(key);
  refreshButtons(id);
  log("action", action);
  try { await api(method, path, body); } catch (e) {
    if (e.status !== 401) showError((LABELS[action] || action) + ": " + messageOf(e));
  } finally {
    pending.delete(key);
    refreshButtons(id);
    refetchCalls();
  }
}
function refreshButtons(id) { if (rows.has(id) && calls.has(id)) renderActions(rows.get(id), calls.get(id)); }
const clock = (seconds, s = Math.max(0, Math.floor(seconds))) => Math.floor(s / 60) + ":" + String(s % 60).padStart(2, "0");

// One ticker for the whole table; node times are corrected by the clock difference its events show.
function tickDurations() {
  const now = Date.now() / 1000 + skew;
  for (const [id, row] of rows) {
    const call = calls.get(id);
    if (!call) continue;
    const since = num(call.connected) !== null ? call.connected : num(call.started);
    setText(row.duration, since === null ? "" : clock(now - since));
    row.duration.title = num(call.connected) !== null ? "connected" : "since the call started";
  }
}
setInterval(tickDurations, 1000);

// ---- recents ----
async function loadRecents() {
  const data = await api("GET", "/v1/recents?limit=30");
  if (!signedIn) return;
  if (!data || !Array.isArray(data.recents)) { setTimeout(refetchRecents, 2000); return; }
  const tbody = $("recents").tBodies[0], seen = new Set();
  for (const r of data.recents) {
    if (!r || typeof r.id !== "string" || seen.has(r.id)) continue;
    if (calls.has(r.id) && r.outcome === "in progress") continue;  // live: shown above
    seen.add(r.id);
    const key = JSON.stringify(r);
    let entry = recentRows.get(r.id);
    if (entry && entry.key !== key) {
      // Changed (a call that was in progress): a fresh row, keeping its quality view open.
      const tr = recentRow(r);
      entry.tr.replaceWith(tr);
      entry.tr = tr; entry.key = key;
      if (entry.detail && !r.quality) { entry.detail.remove(); entry.detail = null; }
    }
    if (!entry) { entry = { tr: recentRow(r), key: key, detail: null }; recentRows.set(r.id, entry); }
    tbody.append(entry.tr);
    if (entry.detail) tbody.append(entry.detail);
  }
  for (const id of [...recentRows.keys()]) if (!seen.has(id)) dropRecent(id);
}
function dropRecent(id) {
  const entry = recentRows.get(id);
  if (entry) { entry.tr.remove(); if (entry.detail) entry.detail.remove(); recentRows.delete(id); }
}
function when(seconds) {
  const t = new Date(seconds * 1000), today = new Date().toDateString() === t.toDateString();
  return today ? t.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" })
    : t.toLocaleString([], { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
}

function recentRow(r) {
  const tr = el("tr"), cells = [];
  Object.assign(tr.dataset, { recent: r.id, outcome: String(r.outcome || "") });
  for (let i = 0; i < 7; i++) { cells.push(el("td")); tr.append(cells[i]); }
  if (num(r.started) !== null) { cells[0].textContent = when(r.started); cells[0].title = new Date(r.started * 1000).toString(); }
  cells[1].textContent = r.direction === "outgoing" ? "↗" : "↙";
  cells[1].title = String(r.direction || "");
  const peer = String(r.peer || "");
  if (r.name) cells[2].append(el("b", "", String(r.name)), " ");
  cells[2].append(Object.assign(el("span", "peer-id", shortPeer(peer)), { title: peer }));
  Object.assign(cells[3], { textContent: String(r.outcome || ""), className: "outcome" });
  Object.assign(cells[4], { textContent: num(r.duration_s) === null ? "–" : clock(r.duration_s), className: "duration" });
  if (r.recording) {
    const audio = Object.assign(el("audio"), { controls: true, preload: "none" });
    audio.src = "/v1/recents/" + encodeURIComponent(r.id) + "/recording";  // the session cookie authorises it
    cells[5].append(audio);
  }
  if (r.recording_problem) cells[5].append(el("span", "problem", "⚠ " + r.recording_problem));
  if (r.quality) {
    const b = Object.assign(el("button", "quality", "quality"), { type: "button" });
    b.dataset.action = "quality";
    b.addEventListener("click", () => toggleQuality(r.id, b));
    cells[6].append(b);
  }
  return tr;
}

async function toggleQuality(id, button) {
  const entry = recentRows.get(id);
  if (!entry) return;
  if (entry.detail) { entry.detail.remove(); entry.detail = null; button.setAttribute("aria-expanded", "false"); return; }
  const tr = el("tr", "quality-row"), td = el("td"), img = el("img", "quality-plot"), pre = el("pre", "", "loading…");
  tr.dataset.quality = id;
  td.colSpan = 7;
  Object.assign(img, { src: "/v1/recents/" + encodeURIComponent(id) + "/quality.svg", alt: "quality over time" });
  td.append(img, pre);
  tr.append(td);
  entry.detail = tr;
  entry.tr.after(tr);
  button.setAttribute("aria-expanded", "true");
  try {
    const data = await api("GET", "/v1/recents/" + encodeURIComponent(id) + "/quality");
    const lines = data && Array.isArray(data.summary) ? data.summary.map(String) : [];
    pre.textContent = lines.length ? lines.join("\n") : "(no summary)";
  } catch (e) {
    pre.textContent = messageOf(e);
    if (e.status !== 401) showError("quality: " + messageOf(e));
  }
}

start();
