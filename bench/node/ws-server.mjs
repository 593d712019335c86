// The npm ws peer on Node.js, as ws's README recommends for speed: the
// native bufferutil addon installed beside it (ws loads it by itself),
// permessage-deflate off, and the README's broadcast loop for the chat
// room. With --compress, permessage-deflate is on, the server keeping no
// context between messages like the other peers' compressed runs (ws's
// default threshold: messages under 1 KiB go out uncompressed).
// Usage: node ws-server.mjs PORT [--compress]
import { WebSocketServer } from 'ws';

const port = Number(process.argv[2] ?? 8080);
const perMessageDeflate = process.argv.includes('--compress') ? { serverNoContextTakeover: true } : false;
const wss = new WebSocketServer({ host: '127.0.0.1', port, perMessageDeflate, clientTracking: false });
const room = new Set();

wss.on('connection', (ws, req) => {
  if (req.url === '/chat') {
    room.add(ws);
    ws.on('close', () => room.delete(ws));
    ws.on('message', (data, isBinary) => {
      for (const member of room) member.send(data, { binary: isBinary });
    });
    return;
  }
  ws.on('message', (data, isBinary) => ws.send(data, { binary: isBinary }));
});
