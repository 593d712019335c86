// interop-deflate.mjs drives npm ws with permessage-deflate on, for rally's
// Go interop tests of compression (interop/deflate_test.go).
//
// It speaks the line protocol of interop-peer.mjs (one JSON command per
// line on stdin, one JSON line per reply or event on stdout, payloads in
// hex). Commands (each carries an "id", echoed in its reply):
//
//   listen  {deflate}          -> {server, port} an echo WebSocketServer on 127.0.0.1
//   connect {url, deflate}     -> {conn}         a WebSocket client
//   send    {conn, data, binary, parts} -> {error}  parts > 1: one message in that many fragments
//   close   {conn}             -> {}
//
// deflate is ws's perMessageDeflate option object (serverNoContextTakeover,
// clientNoContextTakeover, serverMaxWindowBits, clientMaxWindowBits,
// threshold, ...). The server echoes every message as it came (text as
// text), compressed as its options say.
//
// Events: {ev: "connection", conn, server} then {ev: "negotiated", conn,
// message} (the Sec-WebSocket-Extensions the server answered) for an
// accepted connection; {ev: "open", conn, message} (the answer the client
// got); {ev: "message", binary, data}; {ev: "error", message};
// {ev: "close", code, reason}.
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

function watch(ws, conn) {
  conns.set(conn, ws);
  ws.on("error", (err) => emit({ ev: "error", conn, message: err.message }));
  ws.on("close", (code, reason) => emit({ ev: "close", conn, code, reason: hex(reason) }));
}

const commands = {
  async listen(cmd) {
    const wss = new WebSocketServer({ host: "127.0.0.1", port: 0, perMessageDeflate: cmd.deflate });
    servers.push(wss);
    const server = servers.length;
    let answer = "";
    wss.on("headers", (headers) => {
      answer = "";
      for (const h of headers) {
        const i = h.indexOf(":");
        if (h.slice(0, i).toLowerCase() === "sec-websocket-extensions") answer = h.slice(i + 1).trim();
      }
    });
    wss.on("connection", (ws) => {
      const conn = nextConn++;
      watch(ws, conn);
      emit({ ev: "connection", conn, server });
      emit({ ev: "negotiated", conn, message: answer });
      ws.on("message", (data, isBinary) => {
        emit({ ev: "message", conn, binary: isBinary, data: hex(data) });
        ws.send(data, { binary: isBinary });
      });
    });
    await new Promise((resolve) => wss.on("listening", resolve));
    return { server, port: wss.address().port };
  },
  async connect(cmd) {
    const conn = nextConn++;
    const ws = new WebSocket(cmd.url, { perMessageDeflate: cmd.deflate });
    watch(ws, conn);
    let answer = "";
    ws.on("upgrade", (res) => {
      answer = res.headers["sec-websocket-extensions"] ?? "";
    });
    ws.on("open", () => emit({ ev: "open", conn, message: answer }));
    ws.on("message", (data, isBinary) => emit({ ev: "message", conn, binary: isBinary, data: hex(data) }));
    return { conn };
  },
  async send(cmd) {
    const ws = conns.get(cmd.conn);
    const data = Buffer.from(cmd.data, "hex");
    const parts = Math.max(cmd.parts ?? 1, 1);
    const size = Math.ceil(data.length / parts);
    let err = "";
    for (let i = 0; i < parts && !err; i++) {
      const piece = data.subarray(i * size, Math.min((i + 1) * size, data.length));
      const fin = i === parts - 1;
      err = await new Promise((resolve) => {
        ws.send(piece, { binary: cmd.binary, fin, compress: true }, (e) => resolve(e ? e.message : ""));
      });
    }
    return { error: err };
  },
  async close(cmd) {
    conns.get(cmd.conn).close(1000);
    return {};
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
