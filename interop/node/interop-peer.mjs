// interop-peer.mjs drives npm ws for rally's Go interop tests.
//
// It reads one JSON command per line on stdin and writes one JSON line per
// reply or event on stdout. Payloads travel as hex, so that bytes that are
// not UTF-8 survive the trip. Commands (each carries an "id", echoed in its
// reply):
//
//   listen  {maxPayload}                    -> {server, port} a WebSocketServer on 127.0.0.1
//   connect {url, maxPayload}               -> {conn}        a WebSocket client
//   send    {conn, data, binary, fin}       -> {sync, error} sync: the callback ran before send returned
//   ping    {conn, data}                    -> {error}
//   close   {conn, code, reason}            -> {error, readyState}
//   terminate {conn}                        -> {}
//   state   {conn}                          -> {readyState}
//
// Events: {ev: "connection", conn, server} for an accepted connection,
// {ev: "open"}, {ev: "message", binary, data}, {ev: "ping", data},
// {ev: "pong", data}, {ev: "error", errcode, status, message},
// {ev: "close", code, reason} and {ev: "unexpected-response", status}.
// Compression is off on both sides here; interop-deflate.mjs has the compression rows.
import { WebSocketServer, WebSocket } from "ws";
import readline from "node:readline";

const conns = new Map();
const servers = [];
let nextConn = 1;

function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + "\n");
}

function hex(b) {
  return Buffer.from(b).toString("hex");
}

// statusOf returns the close code ws attached to a protocol error.
function statusOf(err) {
  for (const s of Object.getOwnPropertySymbols(err)) {
    if (s.description === "status-code") return err[s];
  }
  return 0;
}

function watch(ws, conn) {
  conns.set(conn, ws);
  ws.on("message", (data, isBinary) => emit({ ev: "message", conn, binary: isBinary, data: hex(data) }));
  ws.on("ping", (data) => emit({ ev: "ping", conn, data: hex(data) }));
  ws.on("pong", (data) => emit({ ev: "pong", conn, data: hex(data) }));
  ws.on("error", (err) => emit({ ev: "error", conn, errcode: err.code ?? "", status: statusOf(err), message: err.message }));
  ws.on("close", (code, reason) => emit({ ev: "close", conn, code, reason: hex(reason) }));
}

// limit returns the maxPayload option when the test sets one. A key set to
// undefined would replace ws's default (100 MiB) with no limit at all.
function limit(cmd) {
  return cmd.maxPayload > 0 ? { maxPayload: cmd.maxPayload } : {};
}

const commands = {
  async listen(cmd) {
    const wss = new WebSocketServer({ host: "127.0.0.1", port: 0, perMessageDeflate: false, ...limit(cmd) });
    servers.push(wss);
    wss.on("connection", (ws) => {
      const conn = nextConn++;
      watch(ws, conn);
      emit({ ev: "connection", conn, server: servers.length });
    });
    await new Promise((resolve) => wss.on("listening", resolve));
    return { server: servers.length, port: wss.address().port };
  },
  async connect(cmd) {
    const conn = nextConn++;
    const ws = new WebSocket(cmd.url, { perMessageDeflate: false, ...limit(cmd) });
    watch(ws, conn);
    ws.on("open", () => emit({ ev: "open", conn }));
    ws.on("unexpected-response", (req, res) => {
      emit({ ev: "unexpected-response", conn, status: res.statusCode });
      req.destroy();
    });
    return { conn };
  },
  async send(cmd) {
    const ws = conns.get(cmd.conn);
    let returned = false;
    return await new Promise((resolve) => {
      try {
        ws.send(Buffer.from(cmd.data, "hex"), { binary: cmd.binary, fin: cmd.fin }, (e) =>
          resolve({ sync: !returned, error: e ? e.message : "" }));
      } catch (e) {
        resolve({ sync: true, error: "threw: " + e.message });
      }
      returned = true;
    });
  },
  async ping(cmd) {
    const ws = conns.get(cmd.conn);
    const err = await new Promise((resolve) => {
      try {
        ws.ping(Buffer.from(cmd.data, "hex"), undefined, (e) => resolve(e ? e.message : ""));
      } catch (e) {
        resolve("threw: " + e.message);
      }
    });
    return { error: err };
  },
  async close(cmd) {
    const ws = conns.get(cmd.conn);
    let error = "";
    try {
      if (cmd.code === 0) ws.close();
      else ws.close(cmd.code, Buffer.from(cmd.reason, "hex"));
    } catch (e) {
      error = e.message;
    }
    return { error, readyState: ws.readyState };
  },
  async terminate(cmd) {
    conns.get(cmd.conn).terminate();
    return {};
  },
  async state(cmd) {
    return { readyState: conns.get(cmd.conn).readyState };
  },
};

const rl = readline.createInterface({ input: process.stdin });
rl.on("line", async (line) => {
  const cmd = JSON.parse(line);
  try {
    emit({ id: cmd.id, ...(await commands[cmd.op](cmd)) });
  } catch (e) {
    emit({ id: cmd.id, fatal: String(e && e.stack) });
  }
});
rl.on("close", () => {
  for (const ws of conns.values()) ws.terminate();
  for (const wss of servers) wss.close();
  process.exit(0);
});
