// Serves index.html and passes /v1/* on to a tether gateway, adding the
// token: the page and the gateway then share one origin (the gateway sends
// no CORS headers), and the token never reaches the browser. Node >= 20,
// no dependencies.
//
//   TETHER=http://127.0.0.1:7878 TETHER_TOKEN=... node serve.mjs   # then open http://127.0.0.1:3000

import { createServer } from "node:http";
import { readFile } from "node:fs/promises";
import { Readable } from "node:stream";

const tether = process.env.TETHER || "http://127.0.0.1:7878";
const token = process.env.TETHER_TOKEN;
const port = Number(process.env.PORT || 3000);
const page = new URL("./index.html", import.meta.url);

createServer(async (req, res) => {
  if (!req.url.startsWith("/v1/")) {
    res.writeHead(200, { "content-type": "text/html; charset=utf-8" });
    return res.end(await readFile(page));
  }
  const headers = { "content-type": req.headers["content-type"] || "application/json" };
  if (token) headers.authorization = `Bearer ${token}`;
  const body = req.method === "POST" ? Readable.toWeb(req) : undefined;
  try {
    const upstream = await fetch(tether + req.url, { method: req.method, headers, body, duplex: "half" });
    res.writeHead(upstream.status, Object.fromEntries(upstream.headers));
    if (!upstream.body) return res.end();
    // Streamed as it comes: the answer's chunks are not buffered here.
    for await (const chunk of upstream.body) res.write(chunk);
    res.end();
  } catch (e) {
    res.writeHead(502, { "content-type": "text/plain" });
    res.end(`tether is not reachable at ${tether}: ${e.message}\n`);
  }
}).listen(port, "127.0.0.1", () => console.log(`open http://127.0.0.1:${port}`));
