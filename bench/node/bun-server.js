// The Bun peer: Bun.serve with its built-in WebSocket server (uWebSockets
// inside), as Bun's documentation shows it. The chat room is a topic: every
// client subscribes, and server.publish delivers each message to all of
// them, the sender included (ws.publish would skip the sender). With
// --compress, perMessageDeflate is on, as Bun's documentation switches it on
// (perMessageDeflate: true).
// Usage: bun bun-server.js PORT [--compress]
const port = Number(process.argv[2] ?? 8080);
const compress = process.argv.includes('--compress');

const server = Bun.serve({
  hostname: '127.0.0.1',
  port,
  fetch(req, srv) {
    const chat = new URL(req.url).pathname === '/chat';
    if (srv.upgrade(req, { data: { chat } })) return undefined;
    return new Response('WebSocket only', { status: 400 });
  },
  websocket: {
    perMessageDeflate: compress,
    open(ws) {
      if (ws.data.chat) ws.subscribe('room');
    },
    message(ws, msg) {
      if (ws.data.chat) server.publish('room', msg);
      else ws.send(msg);
    },
  },
});
