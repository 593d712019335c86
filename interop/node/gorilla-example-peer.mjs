// A client of gorilla's example programs (interop/gorilla_examples_test.go):
// opens `clients` connections to `url`, sends the `send` messages from the
// first (hex-decoded binary when `binary`), waits until every connection
// has `expect` messages, closes them all with 1000 and prints what each
// received and the close code each saw, as one JSON line.
import WebSocket from "ws";
const { url, clients, send, binary, expect } = JSON.parse(process.argv[2]);
const opened = [];
for (let i = 0; i < clients; i++) {
  const ws = new WebSocket(url);
  ws.binaryType = "nodebuffer";
  ws.got = [];
  ws.on("message", (data, isBinary) => ws.got.push(isBinary ? "bin:" + data.toString("hex") : data.toString()));
  opened.push(new Promise((resolve, reject) => { ws.on("open", () => resolve(ws)); ws.on("error", reject); }));
}
const conns = await Promise.all(opened);
const sender = conns[0];
for (const m of send) sender.send(binary ? Buffer.from(m, "hex") : m, { binary });
const until = (ws) => new Promise((resolve) => {
  const check = () => ws.got.length >= expect ? resolve() : setTimeout(check, 5);
  check();
});
await Promise.all(conns.map(until));
const closes = conns.map((ws) => new Promise((resolve) => ws.on("close", (code) => resolve(code))));
for (const ws of conns) ws.close(1000, "done");
const codes = await Promise.all(closes);
console.log(JSON.stringify({ got: conns.map((ws) => ws.got), codes }));
