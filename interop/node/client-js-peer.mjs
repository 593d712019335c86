// client-js-peer.mjs runs rally's JavaScript client (the /client.js that
// `rally serve` serves) in Node, for the Go tests in clientjs_test.go.
//
//   node client-js-peer.mjs BASE_URL [ws|global]
//
// It imports the module from BASE_URL/client.js (the served bytes, not a
// copy), with npm ws as the WebSocket ("ws": what Node 20 needs) or the
// global one ("global": Node 22, or Node 20 with --experimental-websocket).
// It reads one JSON command per line on stdin and writes one JSON line per
// event on stdout: the commands and events of client-js-harness.mjs, and
// {ev: "ready"} once the module is loaded.
import readline from "node:readline";
import { WebSocket as NpmWebSocket } from "ws";
import { harness } from "./client-js-harness.mjs";

const [base, impl = "ws"] = process.argv.slice(2);

function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + "\n");
}

const src = await (await fetch(new URL("/client.js", base))).text();
const { Client } = await import("data:text/javascript;base64," + Buffer.from(src).toString("base64"));
const run = harness(Client, emit, impl === "ws" ? { WebSocket: NpmWebSocket } : {});

emit({ ev: "ready", websocket: impl });
const rl = readline.createInterface({ input: process.stdin });
rl.on("line", (line) => {
  try {
    run(JSON.parse(line));
  } catch (err) {
    emit({ ev: "fatal", message: String(err?.stack ?? err) });
  }
});
rl.on("close", () => {
  run({ cmd: "close" });
  process.exit(0);
});
