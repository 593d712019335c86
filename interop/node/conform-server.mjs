// Echo server on npm ws for the conformance suite (conform/): every message
// goes back with its type. Prints the port it listens on, then serves until
// killed. DEFLATE=1 enables permessage-deflate (sections 12 and 13).
import { WebSocketServer } from 'ws';

const wss = new WebSocketServer({
  host: '127.0.0.1',
  port: Number(process.env.PORT || 0),
  perMessageDeflate: process.env.DEFLATE === '1' ? { threshold: 0 } : false,
  maxPayload: 64 * 1024 * 1024,
});
wss.on('connection', (ws) => {
  ws.on('error', () => {}); // protocol errors close the connection; nothing to report
  ws.on('message', (data, isBinary) => ws.send(data, { binary: isBinary }));
});
wss.on('listening', () => console.log(wss.address().port));
