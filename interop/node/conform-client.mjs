// Client driver on npm ws for the conformance suite (conform/), following the
// fuzzing-server protocol of the classic suite: ask /getCaseCount, run every
// case on /runCase echoing each message, then /updateReports.
// Usage: node conform-client.mjs ws://HOST:PORT [agent]
// DEFLATE=1 offers permessage-deflate (sections 12 and 13).
import WebSocket from 'ws';

const [base, agent = 'npm-ws'] = process.argv.slice(2);
const options = { perMessageDeflate: process.env.DEFLATE === '1', maxPayload: 64 * 1024 * 1024 };

function session(path, onMessage) {
  return new Promise((resolve) => {
    const ws = new WebSocket(base + path, options);
    ws.on('message', (data, isBinary) => onMessage(ws, data, isBinary));
    ws.on('error', () => {}); // a failed case closes the connection; the suite judges it
    ws.on('close', resolve);
  });
}

let count = 0;
await session('/getCaseCount', (ws, data) => { count = Number(data.toString()); });
for (let i = 1; i <= count; i++) {
  await session(`/runCase?case=${i}&agent=${encodeURIComponent(agent)}`, (ws, data, isBinary) => ws.send(data, { binary: isBinary }));
}
await session(`/updateReports?agent=${encodeURIComponent(agent)}`, () => {});
