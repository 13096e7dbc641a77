// How a session's events look: one element per durable event, each carrying
// its `data-seq`, and an assistant bubble per turn that streams its text.
//
// SessionView decides which events reach this file (each durable one once,
// in seq order, as tether-client yields them); this file only draws them.
// Streamed text is placed by the delta's `offset` (bytes of the turn's text
// before it, PROTOCOL 1.5), so a delta that was already drawn adds nothing,
// and a gap is noticed instead of drawn as if nothing was missing.
// Everything from the wire goes in as text (`textContent`), never as markup.

import { ending } from "./endings.js";

const encoder = new TextEncoder();
const decoder = new TextDecoder();

function byteLength(text) {
  return encoder.encode(text).length;
}

// `text` without its first `skip` bytes.
function bytesAfter(text, skip) {
  return decoder.decode(encoder.encode(text).slice(skip));
}

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) {
    e.className = cls;
  }
  if (text !== undefined && text !== null) {
    e.textContent = text;
  }
  return e;
}

function stamp(e, ev) {
  e.dataset.seq = String(ev.seq);
  e.dataset.type = ev.type;
  e.title = "seq " + ev.seq + (ev.ts ? " · " + ev.ts : "") + (ev.trace_id ? " · trace " + ev.trace_id : "");
  return e;
}

function json(value) {
  try {
    return JSON.stringify(value);
  } catch (err) {
    return String(value);
  }
}

// The text a turn has streamed, kept with its length in bytes.
class Stream {
  constructor(target) {
    this.target = target;
    this.text = "";
    this.bytes = 0;
  }

  set(text) {
    this.text = text;
    this.bytes = byteLength(text);
    this.target.textContent = text;
  }

  // Returns false when the delta starts past what we hold (a gap).
  place(offset, text) {
    if (offset > this.bytes) {
      this.append(text);
      this.bytes = offset + byteLength(text);
      return false;
    }
    const overlap = this.bytes - offset;
    if (overlap >= byteLength(text)) {
      return true;
    }
    this.append(overlap > 0 ? bytesAfter(text, overlap) : text);
    return true;
  }

  append(text) {
    this.text += text;
    this.bytes += byteLength(text);
    this.target.textContent = this.text;
  }
}

// One turn's assistant bubble.
class Bubble {
  constructor(turnId) {
    this.turnId = turnId;
    this.li = el("li", "msg assistant streaming");
    if (turnId) {
      this.li.dataset.turn = turnId;
    }
    const who = el("div", "who", "assistant");
    if (turnId) {
      who.append(el("span", "turn", turnId));
    }
    this.reasoningBox = el("details", "reasoning");
    this.reasoningBox.hidden = true;
    this.reasoningBox.append(el("summary", "", "reasoning"));
    const reasoningText = el("pre", "");
    this.reasoningBox.append(reasoningText);
    this.activity = el("ol", "activity");
    const text = el("div", "text");
    this.li.append(who, this.reasoningBox, this.activity, text);
    this.text = new Stream(text);
    this.reasoning = new Stream(reasoningText);
    this.done = false;
    // True once an offset skipped ahead (text is missing): then the final
    // text is not compared with what streamed.
    this.stale = false;
  }
}

export class Transcript {
  constructor(list) {
    this.list = list;
    this.bubbles = new Map();
  }

  clear() {
    this.list.replaceChildren();
    this.bubbles.clear();
  }

  // Keeps the view pinned to the newest entry when it was there already.
  scrolled(draw) {
    const l = this.list;
    const atBottom = l.scrollHeight - l.scrollTop - l.clientHeight < 48;
    draw();
    if (atBottom) {
      l.scrollTop = l.scrollHeight;
    }
  }

  note(text, cls) {
    this.list.append(el("li", "row note " + (cls || ""), text));
  }

  bubble(turnId) {
    let b = turnId ? this.bubbles.get(turnId) : undefined;
    if (!b) {
      b = new Bubble(turnId);
      if (turnId) {
        this.bubbles.set(turnId, b);
      }
      this.list.append(b.li);
    }
    return b;
  }

  // Where an event of a turn goes: inside the turn's open bubble, so that
  // tools and todos read with the reply they belong to.
  place(ev, row) {
    const b = ev.turn_id ? this.bubbles.get(ev.turn_id) : undefined;
    if (b && !b.done) {
      b.activity.append(row);
    } else {
      this.list.append(row);
    }
  }

  delta(ev) {
    const p = ev.payload || {};
    if (typeof p.text !== "string" || typeof p.offset !== "number") {
      return;
    }
    const b = this.bubble(ev.turn_id);
    if (b.done) {
      return;
    }
    if (ev.type === "reasoning.delta") {
      b.reasoningBox.hidden = false;
      b.reasoning.place(p.offset, p.text);
    } else if (!b.text.place(p.offset, p.text)) {
      b.stale = true;
    }
  }

  // One durable event, drawn as exactly one element carrying its seq.
  durable(ev) {
    const p = ev.payload || {};
    switch (ev.type) {
      case "session.created": {
        const r = stamp(el("li", "row created", "Session created: “" + (p.title || "") + "”"), ev);
        if (p.parent_session_id) {
          r.append(el("span", "dim", " (branch of " + p.parent_session_id + ")"));
        }
        this.list.append(r);
        break;
      }
      case "message.user":
      case "message.system": {
        const role = ev.type === "message.user" ? "user" : "system";
        const m = stamp(el("li", "msg " + role), ev);
        if (ev.turn_id) {
          m.dataset.turn = ev.turn_id;
        }
        m.append(el("div", "who", role), el("div", "text", p.text || ""));
        this.list.append(m);
        break;
      }
      case "message.start":
        stamp(this.bubble(ev.turn_id).li, ev);
        break;
      case "tool.start": {
        const r = stamp(el("li", "tool"), ev);
        r.dataset.tool = String(p.tool_id || "");
        r.append(el("span", "tool-name", "⚙ " + (p.name || "tool")), el("code", "", json(p.args)));
        this.place(ev, r);
        break;
      }
      case "tool.complete":
        this.toolComplete(ev, p);
        break;
      case "todo.updated": {
        const n = Array.isArray(p.items) ? p.items.length : 0;
        this.place(ev, stamp(el("li", "row todo", "todos updated: " + n + " items (rev " + p.revision + ")"), ev));
        break;
      }
      case "message.complete":
        this.complete(ev, p);
        break;
      case "status.update":
        this.place(ev, stamp(el("li", "row status", "status: " + p.kind + (p.text ? " " + p.text : "")), ev));
        break;
      case "session.compacted": {
        const r = stamp(el("li", "msg system compacted"), ev);
        r.append(el("div", "who", "compacted · removed " + p.removed + " · history v" + p.history_version),
          el("div", "text", p.summary || ""));
        this.list.append(r);
        break;
      }
      case "session.info":
        this.list.append(stamp(el("li", "row info", "session info: " + json(p)), ev));
        break;
      case "session.closed":
        this.list.append(stamp(el("li", "row closed", "Session closed (" + (p.reason || "?") + ")"), ev));
        break;
      case "error":
        this.place(ev, stamp(el("li", "row error", "error: " + (p.message || "") +
          (p.code !== undefined ? " (" + p.code + ")" : "")), ev));
        break;
      default:
        this.list.append(stamp(el("li", "row other", ev.type + " " + json(p)), ev));
    }
  }

  toolComplete(ev, p) {
    const b = ev.turn_id ? this.bubbles.get(ev.turn_id) : undefined;
    const starts = b ? b.activity.querySelectorAll("li.tool") : [];
    const start = Array.from(starts).find((s) => s.dataset.tool === String(p.tool_id || ""));
    const result = stamp(el("div", "result" + (p.is_error ? " error" : ""), "→ " + json(p.result)), ev);
    if (start) {
      start.append(result);
    } else {
      const r = el("li", "tool");
      r.append(el("span", "tool-name", "⚙ " + (p.name || "tool")), result);
      this.place(ev, r);
    }
  }

  complete(ev, p) {
    const b = this.bubble(ev.turn_id);
    const text = typeof p.text === "string" ? p.text : "";
    // Host text wins (docs/PROTOCOL.md Part 4); a stream that was whole
    // must already say the same, or the offsets were applied wrongly.
    if (!b.stale && b.text.bytes > 0 && b.text.text !== text && p.status === "complete") {
      b.li.dataset.streamMismatch = "true";
      console.warn("tether: streamed text differs from the final text", ev.turn_id);
    }
    b.text.set(text);
    b.done = true;
    b.li.classList.remove("streaming");
    const status = p.status || "complete";
    b.li.classList.add("status-" + status);
    // A turn that did not complete says how it ended and whether to send
    // it again (endings.js).
    b.li.append(stamp(el("div", "foot", ending(p) || status), ev));
  }
}
