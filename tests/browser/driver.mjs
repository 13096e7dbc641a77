// A remote control for headless Chromium, for tests/web_console.rs.
//
// The Rust test owns the scenario (the gateway, the proxy it cuts, what to
// assert); this script only does what it is told, one JSON command per line
// on stdin, one JSON answer per line on stdout:
//
//   {"id":1,"cmd":"open","page":"a","url":"http://..."}
//   {"id":2,"cmd":"wait","page":"a","js":"() => ...","timeout_ms":60000}
//   {"id":3,"cmd":"eval","page":"a","js":"() => ..."}     (js: a function's source)
//   {"id":4,"cmd":"fill","page":"a","selector":"#prompt","text":"hi"}
//   {"id":5,"cmd":"click","page":"a","selector":"#send"}
//   {"id":6,"cmd":"screenshot","page":"a","path":"/tmp/x.png"}
//   {"id":7,"cmd":"dialogs","page":"a","answers":[false,true]}
//   {"id":8,"cmd":"quit"}
//
// `dialogs` queues how the page's next dialogs (`confirm()`, ...) are
// answered, in order (true accepts, false dismisses; with none queued a
// dialog is dismissed), and returns the messages of the dialogs seen so far.
//
// Answers are {"id":N,"ok":true,"value":...} or {"id":N,"ok":false,"error":"..."}.
// What the pages log, and their errors, go to stderr for the test's output.
// The browser gets a new empty profile directory (BROWSER_PROFILE, or one
// of its own) and is closed on `quit` or when stdin closes.

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { chromium } from "playwright-core";

const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";
// An empty directory for the browser's profile: the test's own (removed by
// the test even when it fails), else one made and removed here.
const ownProfile = !process.env.BROWSER_PROFILE;
const profile = process.env.BROWSER_PROFILE || mkdtempSync(join(tmpdir(), "tether-console-"));

const context = await chromium.launchPersistentContext(profile, {
  executablePath,
  headless: true,
  viewport: { width: 1200, height: 760 },
  args: [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    // A proxy from the environment would take the pages' requests away
    // from the test's gateway and proxy.
    "--no-proxy-server",
  ],
});

const pages = new Map();
// Per page: answers for its next dialogs, and the messages of those seen.
const dialogAnswers = new Map();
const dialogsSeen = new Map();

function page(name) {
  const p = pages.get(name);
  if (!p) {
    throw new Error("no page named " + name);
  }
  return p;
}

async function open(name, url) {
  const p = await context.newPage();
  p.on("console", (m) => process.stderr.write(`[page ${name}] ${m.type()}: ${m.text()}\n`));
  p.on("pageerror", (e) => process.stderr.write(`[page ${name}] uncaught: ${e.message}\n`));
  dialogAnswers.set(name, []);
  dialogsSeen.set(name, []);
  p.on("dialog", async (d) => {
    dialogsSeen.get(name).push(d.message());
    const accept = dialogAnswers.get(name).shift() === true;
    await (accept ? d.accept() : d.dismiss()).catch(() => {});
  });
  pages.set(name, p);
  await p.goto(url);
  return null;
}

// Functions travel as source text. Playwright would evaluate a string with
// the page's `eval`, which the console's Content-Security-Policy forbids;
// a function is sent through the DevTools protocol instead, which CSP does
// not govern, so the text is made a function here.
function call(source) {
  return new Function("return (" + source + ")();");
}

async function run(c) {
  switch (c.cmd) {
    case "open":
      return open(c.page, c.url);
    case "wait": {
      const handle = await page(c.page).waitForFunction(call(c.js), null, {
        timeout: c.timeout_ms || 60000,
        polling: 100,
      });
      return handle.jsonValue();
    }
    case "eval":
      return page(c.page).evaluate(call(c.js));
    case "fill":
      return page(c.page).fill(c.selector, c.text);
    case "click":
      return page(c.page).click(c.selector);
    case "dialogs":
      page(c.page);
      dialogAnswers.get(c.page).push(...(c.answers || []));
      return dialogsSeen.get(c.page).slice();
    case "screenshot":
      await page(c.page).screenshot({ path: c.path });
      return c.path;
    default:
      throw new Error("unknown command " + c.cmd);
  }
}

function answer(obj) {
  process.stdout.write(JSON.stringify(obj) + "\n");
}

async function shutdown() {
  await context.close().catch(() => {});
  if (ownProfile) {
    rmSync(profile, { recursive: true, force: true });
  }
  process.exit(0);
}

answer({ id: 0, ok: true, value: "ready" });

const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
  if (!line.trim()) {
    continue;
  }
  let c;
  try {
    c = JSON.parse(line);
  } catch (err) {
    answer({ id: null, ok: false, error: "not JSON: " + line });
    continue;
  }
  if (c.cmd === "quit") {
    answer({ id: c.id, ok: true, value: null });
    break;
  }
  try {
    const value = await run(c);
    answer({ id: c.id, ok: true, value: value === undefined ? null : value });
  } catch (err) {
    answer({ id: c.id, ok: false, error: String(err && err.stack ? err.stack : err) });
  }
}
await shutdown();
