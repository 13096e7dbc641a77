// The console's entry point: one connection, the session list, and the
// session that the URL's `#session=ID` names (docs/CONSOLE.md).
//
// The connection is tether-client's (clients/typescript, served at
// /console/tether-client/): its reconnects, backoff and exactly-once
// streams are the library's, not a second copy of them here.
//
// The page URL's `?token=` is the credential. The library puts it on the
// WebSocket URL (browsers cannot set headers on a WebSocket, PROTOCOL 1.1)
// and the page keeps it on every link it makes, so a link opened in a new
// tab works too.

import { connect } from "./tether-client/index.js";
import { SessionView } from "./session_view.js";

const LIST_PAGE = 25;

const token = new URLSearchParams(location.search).get("token");
const wsUrl = (location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/ws";

function byId(id) {
  return document.getElementById(id);
}

const dom = {
  view: byId("session-view"),
  empty: byId("empty"),
  body: byId("session-body"),
  transcript: byId("transcript"),
  title: byId("info-title"),
  id: byId("info-id"),
  status: byId("info-status"),
  peers: byId("info-peer-count"),
  attached: byId("info-attached"),
  messages: byId("info-messages"),
  watermark: byId("watermark"),
  notice: byId("notice"),
  todos: byId("todos"),
  todosRev: byId("todos-rev"),
  todoItems: byId("todo-items"),
  prompt: byId("prompt"),
  send: byId("send"),
  interrupt: byId("interrupt"),
  compress: byId("compress"),
  // The open session's entry in the list follows what the view learns.
  onInfo(info, watermark) {
    const li = Array.from(byId("sessions").children).find((e) => e.dataset.sessionId === info.session_id);
    if (li) {
      li.replaceWith(listItem(Object.assign({}, info, { latest_seq: watermark }), li));
    }
  },
};

// A link to this page (keeping `?token=`) with the given hash.
function link(hash) {
  return location.pathname + location.search + hash;
}

function sessionFromHash() {
  const m = /^#session=(.+)$/.exec(location.hash);
  return m ? decodeURIComponent(m[1]) : null;
}

let view = null;
let listCursor = null;

// Told to the other peers of the sessions it opens (PROTOCOL Part 4, "Presence").
const gw = connect(wsUrl, { token: token || undefined, client: { app: "tether console" } });

gw.on("state", (change) => {
  const c = byId("conn");
  const state = change.state;
  c.dataset.state = state;
  let detail = "";
  if (state === "reconnecting" && change.delay !== undefined) {
    detail = "in " + (change.delay / 1000).toFixed(1) + " s";
  } else if (state === "closed" && change.error) {
    detail = change.error.message;
  }
  let text = state + (detail ? " (" + detail + ")" : "");
  if (state === "reconnecting" && !gw.ready && !token) {
    // A browser hides the upgrade's 401; say what the likely cause is.
    text += ": no answer yet; if the gateway has tokens, open this page as /?token=TOKEN";
  }
  byId("conn-text").textContent = text;
  if (view) {
    // Nothing can be sent, interrupted or compressed without a socket.
    view.setConnected(state === "open");
  }
});

gw.on("open", ({ ready }) => {
  const meta = byId("gateway-meta");
  meta.textContent = "profile " + ready.profile + " · " + ready.server + " " +
    ready.version + " · " + ready.peer_id;
  meta.dataset.peerId = ready.peer_id;
  loadList(true);
});

function openFromHash() {
  const id = sessionFromHash();
  if (view && view.id === id) {
    return;
  }
  if (view) {
    view.dispose();
    view = null;
  }
  dom.empty.hidden = id !== null;
  dom.body.hidden = id === null;
  dom.view.dataset.sessionId = "";
  if (id !== null) {
    view = new SessionView(gw, id, dom);
    view.notice("");
  }
  markCurrent();
}

function markCurrent() {
  for (const li of byId("sessions").children) {
    li.classList.toggle("current", !!view && li.dataset.sessionId === view.id);
  }
}

async function loadList(reset) {
  const params = { limit: LIST_PAGE, include_closed: byId("include-closed").checked };
  if (!reset && listCursor) {
    params.cursor = listCursor;
  }
  let r;
  try {
    r = await gw.call("session.list", params);
  } catch (err) {
    return;
  }
  const ul = byId("sessions");
  if (reset) {
    ul.replaceChildren();
  }
  for (const s of r.sessions) {
    ul.append(listItem(s));
  }
  listCursor = r.next_cursor;
  byId("more").hidden = !listCursor;
  markCurrent();
}

// A list entry (`old`: the entry it replaces, whose marks it keeps).
function listItem(s, old) {
  const li = document.createElement("li");
  if (old) {
    li.className = old.className;
  }
  li.dataset.sessionId = s.session_id;
  const a = document.createElement("a");
  a.href = link("#session=" + encodeURIComponent(s.session_id));
  a.textContent = s.title || "(untitled)";
  const status = document.createElement("span");
  status.className = "badge status-" + (s.status || "unknown");
  status.textContent = s.status || "";
  const facts = document.createElement("span");
  facts.className = "dim";
  const known = (v) => (v === undefined || v === null ? "?" : v);
  facts.textContent = known(s.peers) + " peers · " + known(s.message_count) + " msgs · seq " +
    known(s.latest_seq);
  li.append(a, status, facts);
  li.title = s.session_id + " · updated " + s.updated_at;
  return li;
}

async function act(what, run, describe) {
  if (!view) {
    return;
  }
  const v = view;
  try {
    const r = await run(v);
    v.notice(describe ? describe(r) : "", "info");
  } catch (err) {
    v.notice(what + " failed: " + err.message + (err.code !== undefined ? " (" + err.code + ")" : ""), "error");
  }
}

byId("create-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const input = byId("new-title");
  try {
    const r = await gw.call("session.create", { title: input.value.trim(), attach: false });
    input.value = "";
    location.hash = "#session=" + encodeURIComponent(r.session.session_id);
    loadList(true);
  } catch (err) {
    input.setCustomValidity("Could not create: " + err.message);
    input.reportValidity();
    setTimeout(() => input.setCustomValidity(""), 3000);
  }
});

function submitPrompt() {
  const text = dom.prompt.value;
  // Enter while disconnected: the text stays in the box for later.
  if (!text.trim() || !view || dom.send.disabled) {
    return;
  }
  act("Send", async (v) => {
    const r = await v.send(text);
    // Cleared only once the gateway has it, so a failed send keeps the text.
    if (dom.prompt.value === text) {
      dom.prompt.value = "";
    }
    return r;
  }, (r) => (r.status === "queued" ? "Queued behind the running turn." : ""));
}

byId("composer").addEventListener("submit", (e) => {
  e.preventDefault();
  submitPrompt();
});
dom.prompt.addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
    e.preventDefault();
    submitPrompt();
  }
});
dom.interrupt.addEventListener("click", () => act("Interrupt", (v) => v.interrupt(),
  (r) => (r.status === "idle" ? "Nothing was running." : "Interrupted.")));
// A compression replaces the session's history with a summary for good,
// so it is asked for, and refused outright when there is nothing to
// summarise (the button is disabled then; this is for a stale page).
dom.compress.addEventListener("click", () => {
  if (!view) {
    return;
  }
  const n = view.compressible();
  if (n === 0) {
    view.notice("Nothing to compress: the session has no messages since its last summary.", "info");
    return;
  }
  if (!window.confirm("Compress this session? Its " + n + " messages are replaced by a summary " +
    "for the engine, for good.")) {
    return;
  }
  act("Compress", (v) => v.compress(),
    (r) => (r.status === "pending" ? "Compression is pending; it applies when the host answers."
      : "Compressed: " + r.removed + " messages summarised."));
});
byId("refresh").addEventListener("click", () => loadList(true));
byId("more").addEventListener("click", () => loadList(false));
byId("include-closed").addEventListener("change", () => loadList(true));
byId("home").href = link("");

window.addEventListener("hashchange", openFromHash);
openFromHash();
