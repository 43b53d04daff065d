"use strict";
const settings = new URLSearchParams(location.hash.slice(1));
const $ = (id) => document.getElementById(id);
const log = (...parts) => console.log("callnode:", ...parts);
window.addEventListener("error", (e) => console.error("callnode-error", e.message, e.filename + ":" + e.lineno));
window.addEventListener("unhandledrejection", (e) => console.error("callnode-error", String(e.reason && (e.reason.stack || e.reason))));

let socket = null, pc = null, call = null, mic = null, role = null, pendingCandidates = [], remoteSet = false;
let connectedAt = null, statsTimer = null, hangupTimer = null, audioContext = null;

// End-to-end frame encryption, in the node's format: AES-256-GCM over each frame, then the
// 16-byte tag and a 4-byte big-endian counter (the nonce is 8 zero bytes and the counter).
// Chromium's encoded streams where they exist (its script transform left the sender's frames
// untransformed here), else the standard RTCRtpScriptTransform (Firefox, Safari).
const encodedStreams = typeof RTCRtpSender !== "undefined" && "createEncodedStreams" in RTCRtpSender.prototype;
const scriptTransform = !encodedStreams && typeof RTCRtpScriptTransform !== "undefined";
const canEncrypt = scriptTransform || encodedStreams;
let frameKeys = null, frameFailures = 0, securityCode = null, worker = null;

function frameTransform(side, rawKey, failed) {
  let key = null, counter = 0;
  const ready = rawKey ? crypto.subtle.importKey("raw", rawKey, "AES-GCM", false, [side === "send" ? "encrypt" : "decrypt"]).then((k) => { key = k; }) : null;
  return new TransformStream({ async transform(frame, controller) {
    if (!ready) { controller.enqueue(frame); return; }  // no keys: frames pass as they are
    await ready;
    const data = new Uint8Array(frame.data);
    const iv = new Uint8Array(12);
    if (side === "send") {
      const n = counter++ >>> 0;
      new DataView(iv.buffer).setUint32(8, n);
      const sealed = new Uint8Array(await crypto.subtle.encrypt({ name: "AES-GCM", iv: iv }, key, data));
      const out = new Uint8Array(sealed.length + 4);
      out.set(sealed);
      new DataView(out.buffer).setUint32(sealed.length, n);
      frame.data = out.buffer;
      controller.enqueue(frame);
      return;
    }
    if (data.length <= 20) { failed(); return; }
    iv.set(data.subarray(data.length - 4), 8);
    try {
      frame.data = await crypto.subtle.decrypt({ name: "AES-GCM", iv: iv }, key, data.subarray(0, data.length - 4));
      controller.enqueue(frame);
    } catch (e) { failed(); }  // not sealed with the node's key: dropped (the browser conceals it)
  } });
}

function e2eeWorker() {
  if (!worker) {
    const source = frameTransform.toString() + `
onrtctransform = (event) => {
  const t = event.transformer, o = t.options;
  t.readable.pipeThrough(frameTransform(o.side, o.key, () => self.postMessage("failed"))).pipeTo(t.writable);
};`;
    worker = new Worker(URL.createObjectURL(new Blob([source], { type: "text/javascript" })));
    worker.onmessage = (e) => { if (e.data === "failed") frameFailures++; };
  }
  return worker;
}

// Sets up the transforms once the node's description is known: encrypting ones with its keys,
// or (encoded streams, which must always be piped) ones that pass frames through.
function installTransforms(peer, sdp) {
  if (peer.e2eeInstalled) return;
  peer.e2eeInstalled = true;
  const m = /a=callnode-frame-keys:v1 (\S+) (\S+)/.exec(sdp);
  const raw = (b64) => Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  // The node's first key seals what it sends (we open with it); its second opens what we send.
  frameKeys = m && canEncrypt ? { receive: raw(m[1]), send: raw(m[2]) } : null;
  const attach = (endpoint, side) => {
    const key = frameKeys ? (side === "send" ? frameKeys.send : frameKeys.receive) : null;
    if (scriptTransform) {
      if (key) endpoint.transform = new RTCRtpScriptTransform(e2eeWorker(), { side: side, key: key });
    } else if (encodedStreams) {
      const streams = endpoint.createEncodedStreams();
      streams.readable.pipeThrough(frameTransform(side, key, () => { frameFailures++; })).pipeTo(streams.writable);
    }
  };
  for (const sender of peer.getSenders()) attach(sender, "send");
  for (const receiver of peer.getReceivers()) attach(receiver, "receive");
  log("frames", frameKeys ? "encrypted end to end" : "not encrypted end to end", scriptTransform ? "(script transform)" : encodedStreams ? "(encoded streams)" : "(no transform API)");
}

// Tells the node this page can encrypt frames.
function withAccept(sdp) { return canEncrypt ? sdp.replace(/\s*$/, "") + "\r\na=callnode-frame-keys:v1 accept\r\n" : sdp; }

// The code the node shows too: SHA-256 over a label and both certificate fingerprints (the
// node's identity, this page's DTLS certificate), lower one first; 12 digits in threes.
async function showSecurityCode(peer, remoteSdp) {
  const fp = (sdp) => { const m = /a=fingerprint:sha-256 (\S+)/i.exec(sdp || ""); return m ? Uint8Array.from(m[1].split(":"), (h) => parseInt(h, 16)) : null; };
  const node = fp(remoteSdp), page = fp(peer.localDescription && peer.localDescription.sdp);
  if (!node || !page) return;
  const less = (a, b) => { for (let i = 0; i < Math.min(a.length, b.length); i++) if (a[i] !== b[i]) return a[i] < b[i]; return a.length < b.length; };
  const [x, y] = less(node, page) ? [node, page] : [page, node];
  const label = new TextEncoder().encode("callnode security code v1");
  const all = new Uint8Array(label.length + x.length + y.length);
  all.set(label); all.set(x, label.length); all.set(y, label.length + x.length);
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", all));
  let n = 0n;
  for (let i = 0; i < 8; i++) n = (n << 8n) | BigInt(digest[i]);
  securityCode = (n % 1000000000000n).toString().padStart(12, "0").match(/.{3}/g).join(" ");
  $("security").textContent = "Security code " + securityCode + (frameKeys ? " · frames encrypted end to end" : " · frames not encrypted end to end");
  console.log("callnode-security " + JSON.stringify({ code: securityCode, frameEncryption: !!frameKeys }));
}

function state(text, detail) { $("state").textContent = text; $("detail").textContent = detail || ""; log("state", text, detail || ""); }
function send(type, fields) {
  if (!socket || socket.readyState !== WebSocket.OPEN) return;
  socket.send(JSON.stringify(Object.assign({ v: 1, type: type, call: call }, fields || {})));
}
function buttons(inCall, ringing) {
  $("call").disabled = inCall || ringing || !socket || socket.readyState !== WebSocket.OPEN;
  $("answer").hidden = $("decline").hidden = !ringing;
  $("mute").disabled = $("hangup").disabled = !inCall;
}

function connect() {
  const secret = settings.get("secret");
  if (!secret) { state("No secret", "Open this page with #secret=… as the node printed it."); return; }
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  socket = new WebSocket(scheme + "//" + location.host + "/ws?secret=" + encodeURIComponent(secret));
  socket.onopen = () => {
    state("Ready", "Connected to the node.");
    buttons(false, false);
    if (settings.get("call") === "1" && !call) startCall();
  };
  socket.onmessage = (event) => {
    let message;
    try { message = JSON.parse(event.data); } catch (e) { console.error("callnode-error", "not JSON from the node:", event.data); return; }
    handle(message).catch((e) => { console.error("callnode-error", String(e && (e.stack || e))); finish("failed", String(e)); });
  };
  socket.onclose = (event) => {
    if (call) finish("connection closed");
    socket = null;
    buttons(false, false);
    if (event.code === 1006 && !event.wasClean && $("state").textContent === "Connecting to the node…") {
      state("Refused", "The node refused the connection: check the secret.");
    }
    setTimeout(connect, 1000);
  };
}
setInterval(() => { if (socket && socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify({ v: 1, type: "keep-alive" })); }, 10000);

async function microphone() {
  const processing = settings.get("raw") !== "1";
  if (!mic) mic = await navigator.mediaDevices.getUserMedia({ audio: { echoCancellation: processing, noiseSuppression: processing, autoGainControl: processing }, video: false });
  meter(mic, $("localLevel"));
  return mic;
}

async function makePeer() {
  const peer = new RTCPeerConnection(Object.assign({ bundlePolicy: "max-bundle", rtcpMuxPolicy: "require" },
                                                   encodedStreams ? { encodedInsertableStreams: true } : {}));
  pc = peer;
  pendingCandidates = []; remoteSet = false;
  for (const track of (await microphone()).getAudioTracks()) peer.addTrack(track, mic);
  peer.onicecandidate = (event) => {
    if (event.candidate && event.candidate.candidate) send("candidates", { candidates: [event.candidate.candidate], end: false });
    else if (!event.candidate) send("candidates", { candidates: [], end: true });
  };
  peer.ontrack = (event) => {
    const stream = event.streams[0] || new MediaStream([event.track]);
    $("remote").srcObject = stream;
    $("remote").play().catch(() => {});
    meter(stream, $("remoteLevel"));
  };
  peer.onconnectionstatechange = () => {
    log("connection", peer.connectionState);
    if (peer !== pc) return;  // a call that has ended
    if (peer.connectionState === "connected" && !connectedAt) {
      connectedAt = Date.now();
      state("In call", "Media is flowing (DTLS-SRTP, Opus).");
      buttons(true, false);
      const after = Number(settings.get("hangup") || 0);
      if (after > 0) hangupTimer = setTimeout(() => hangUp(), after * 1000);
    }
    if (peer.connectionState === "failed") finish("failed", "no network path to the node (ICE failed)");
  };
  if (settings.get("stats") === "1") statsTimer = setInterval(() => reportStats(), 1000);
}

async function handle(message) {
  switch (message.type) {
  case "invite":
    if (call) { socket.send(JSON.stringify({ v: 1, type: "reject", call: message.call, reason: "busy" })); return; }
    call = message.call; role = "callee";
    send("ringing");
    const who = (message.invitation && message.invitation.displayName) || "the node";
    state("Incoming call", who + " is calling.");
    buttons(false, true);
    if (settings.get("answer") === "1") await answer();
    return;
  case "ringing": state("Ringing…"); return;
  case "offer":
    if (pc && connectedAt) {
      // A new offer for a running call: the node holds it (sendonly, inactive) or resumes (RFC 3264).
      const holding = /a=(sendonly|inactive)/.test(message.sdp);
      state(holding ? "On hold" : "In call", holding ? "The node put the call on hold." : "The node resumed the call.");
    }
    if (!pc) await makePeer();
    const answering = pc;
    await answering.setRemoteDescription({ type: "offer", sdp: message.sdp });
    installTransforms(answering, message.sdp);
    remoteSet = true; await flushCandidates();
    await answering.setLocalDescription(await answering.createAnswer());
    if (answering === pc) send("answer", { sdp: withAccept(answering.localDescription.sdp) });
    if (!securityCode) await showSecurityCode(answering, message.sdp);
    return;
  case "answer":
    if (!pc) return;  // the call ended meanwhile
    await pc.setRemoteDescription({ type: "answer", sdp: message.sdp });
    installTransforms(pc, message.sdp);
    remoteSet = true; await flushCandidates();
    if (!securityCode) await showSecurityCode(pc, message.sdp);
    return;
  case "candidates":
    for (const candidate of message.candidates || []) pendingCandidates.push({ candidate: candidate, sdpMid: "0", sdpMLineIndex: 0 });
    if (message.end) pendingCandidates.push(null);
    if (remoteSet) await flushCandidates();
    return;
  case "hold": state(message.hold ? "On hold" : "In call"); return;
  case "end": finish("ended by the node", message.reason === "hangup" ? "" : "reason: " + message.reason); return;
  case "reject": finish("refused", "The node refused the call: " + message.reason); return;
  case "error": log("node reports:", message.message); $("detail").textContent = "The node reports: " + message.message; return;
  case "keep-alive": return;
  default: log("ignored message", message.type);
  }
}

async function flushCandidates() {
  const peer = pc, queued = pendingCandidates;
  pendingCandidates = [];
  if (!peer) return;
  for (const candidate of queued) {
    // An mDNS name the node cannot resolve is left out: its checks arrive as peer-reflexive.
    if (candidate === null) await peer.addIceCandidate();
    else if (!/\.local /.test(candidate.candidate)) await peer.addIceCandidate(candidate);
  }
}

async function startCall() {
  call = (crypto.randomUUID ? crypto.randomUUID() : fallbackUUID()).toUpperCase(); role = "caller";
  state("Calling…");
  buttons(true, false);
  $("mute").disabled = true;
  await microphone();
  send("invite", { invitation: { displayName: settings.get("name") || "web page", title: "web" } });
}

async function answer() {
  buttons(true, false);
  state("Connecting…");
  await makePeer();
  const offering = pc;
  // In this protocol the callee makes the offer.
  await offering.setLocalDescription(await offering.createOffer());
  if (offering === pc) send("offer", { sdp: withAccept(offering.localDescription.sdp) });
}

function decline() { send("reject", { reason: "declined" }); finish("declined"); }
function hangUp() { send("end", { reason: "hangup" }); finish("hung up"); }

function finish(text, detail) {
  const peer = pc;
  pc = null;
  if (hangupTimer) { clearTimeout(hangupTimer); hangupTimer = null; }
  if (statsTimer) {
    clearInterval(statsTimer); statsTimer = null;
    // The last figures, taken before the connection closes.
    if (peer) reportStats(peer).finally(() => peer.close());
  } else if (peer) {
    peer.close();
  }
  call = null; role = null; connectedAt = null; frameKeys = null; securityCode = null; frameFailures = 0;
  $("security").textContent = "";
  $("remote").srcObject = null;
  state("Call " + text, detail);
  buttons(false, false);
}

async function reportStats(peer = pc) {
  if (!peer) return;
  const out = { role: role, connection: peer.connectionState, frameEncryption: !!frameKeys, frameDecryptionFailures: frameFailures,
                securityCode: securityCode };
  const report = await peer.getStats();
  report.forEach((s) => {
    if (s.type === "inbound-rtp" && s.kind === "audio") Object.assign(out, { packetsReceived: s.packetsReceived, packetsLost: s.packetsLost,
      totalAudioEnergy: s.totalAudioEnergy, audioLevel: s.audioLevel, totalSamplesReceived: s.totalSamplesReceived, jitter: s.jitter,
      codec: s.codecId && report.get(s.codecId) ? report.get(s.codecId).mimeType : undefined });
    if (s.type === "outbound-rtp" && s.kind === "audio") Object.assign(out, { packetsSent: s.packetsSent });
    if (s.type === "transport") Object.assign(out, { dtlsState: s.dtlsState, srtpCipher: s.srtpCipher, dtlsRole: s.dtlsRole, tlsVersion: s.tlsVersion });
  });
  console.log("callnode-stats " + JSON.stringify(out));
}

function meter(stream, bar) {
  try {
    audioContext = audioContext || new AudioContext();
    const analyser = audioContext.createAnalyser();
    analyser.fftSize = 1024;
    audioContext.createMediaStreamSource(stream).connect(analyser);
    const samples = new Float32Array(analyser.fftSize);
    const tick = () => {
      analyser.getFloatTimeDomainData(samples);
      let sum = 0; for (const x of samples) sum += x * x;
      const db = 10 * Math.log10(sum / samples.length + 1e-12);
      bar.style.width = Math.max(0, Math.min(100, (db + 60) * 100 / 60)) + "%";
      if (stream.active) requestAnimationFrame(tick); else bar.style.width = "0";
    };
    tick();
  } catch (e) { log("no level meter:", String(e)); }
}

function fallbackUUID() {
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40; b[8] = (b[8] & 0x3f) | 0x80;
  const h = Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
  return h.slice(0, 8) + "-" + h.slice(8, 12) + "-" + h.slice(12, 16) + "-" + h.slice(16, 20) + "-" + h.slice(20);
}

$("call").onclick = () => startCall().catch((e) => { console.error("callnode-error", String(e)); finish("failed", String(e)); });
$("answer").onclick = () => answer().catch((e) => { console.error("callnode-error", String(e)); finish("failed", String(e)); });
$("decline").onclick = decline;
$("hangup").onclick = hangUp;
$("mute").onclick = () => {
  if (!mic) return;
  const track = mic.getAudioTracks()[0];
  track.enabled = !track.enabled;
  $("mute").textContent = track.enabled ? "Mute" : "Unmute";
  state(track.enabled ? "In call" : "In call (muted)");
};
connect();
