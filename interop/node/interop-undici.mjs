// interop-undici.mjs runs undici's WebSocket client (the WHATWG API of
// Node.js) against a rally echo server for rally's Go interop tests.
//
//   node interop-undici.mjs URL
//
// It reads one case a line on stdin, {"id": N, "name": CASE, "args": [...]},
// runs it on a new WebSocket to URL and writes one JSON line, {"id": N,
// "result": what the client saw}. Cases run one at a time, in the order they came; the process exits
// once stdin closes and the last case is done. The server echoes every
// message; a text "close CODE REASON" makes it close with that code and
// reason, and "bad-utf8" makes it send a text frame that is not UTF-8.
import readline from "node:readline";
import { WebSocket } from "undici";

const [url] = process.argv.slice(2);

function connect(binaryType) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url);
    ws.binaryType = binaryType || "arraybuffer";
    ws.onopen = () => resolve(ws);
    ws.onerror = (e) => reject(new Error("the connection failed: " + (e.message || e.type)));
  });
}

function closeOf(e) {
  return { code: e.code, reason: e.reason, wasClean: e.wasClean };
}

// next resolves to the next message's data, or to the close if it comes first.
function next(ws) {
  return new Promise((resolve) => {
    ws.onmessage = (e) => resolve(e.data);
    ws.onclose = (e) => resolve(closeOf(e));
  });
}

function closed(ws) {
  return new Promise((resolve) => {
    ws.onclose = (e) => resolve(closeOf(e));
  });
}

async function bytesOf(data) {
  if (data instanceof Blob) data = await data.arrayBuffer();
  return Array.from(new Uint8Array(data));
}

function pattern(n) {
  const b = new Uint8Array(n);
  for (let i = 0; i < n; i++) b[i] = (i * 7) & 0xff;
  return b;
}

const cases = {
  async connect() {
    const ws = await connect();
    const r = { readyState: ws.readyState, protocol: ws.protocol, extensions: ws.extensions };
    const c = closed(ws);
    ws.close(1000);
    r.close = await c;
    return r;
  },
  async echo(kind) {
    const ws = await connect();
    let sent;
    switch (kind) {
      case "text": sent = "héllo wörld € 😀 ✓"; break;
      case "empty-text": sent = ""; break;
      case "binary": sent = pattern(70000).buffer; break;
      case "blob": sent = new Blob([pattern(300)]); break;
    }
    const p = next(ws);
    ws.send(sent);
    const got = await p;
    const r = { type: Object.prototype.toString.call(got) };
    if (typeof sent === "string") {
      r.equal = got === sent;
      r.length = got.length;
    } else {
      const a = await bytesOf(sent), b = await bytesOf(got);
      r.equal = a.length === b.length && a.every((v, i) => v === b[i]);
      r.length = b.length;
    }
    const c = closed(ws);
    ws.close(1000);
    r.close = await c;
    return r;
  },
  async close(code, reason) {
    const ws = await connect();
    const c = closed(ws);
    if (code === 0) ws.close(); else ws.close(code, reason);
    return await c;
  },
  async serverClose(command) {
    const ws = await connect();
    const c = next(ws);
    ws.send(command);
    return await c;
  },
};

// run runs one case; a case with no result within 20 s reports that.
async function run(name, args) {
  let timer;
  const late = new Promise((resolve) => {
    timer = setTimeout(() => resolve({ error: "no result within 20s" }), 20000);
  });
  try {
    return await Promise.race([cases[name](...args), late]);
  } catch (e) {
    return { error: String(e) };
  } finally {
    clearTimeout(timer);
  }
}

let done = Promise.resolve();
const rl = readline.createInterface({ input: process.stdin });
rl.on("line", (line) => {
  done = done.then(async () => {
    let id, result;
    try {
      const c = JSON.parse(line);
      id = c.id;
      result = await run(c.name, c.args ?? []);
    } catch (e) {
      result = { error: String(e) };
    }
    console.log(JSON.stringify({ id, result }));
  });
});
rl.on("close", () => done.then(() => process.exit(0)));
