// h2-peer.mjs: a WebSocket-over-HTTP/2 (RFC 8441) peer built on Node's own
// http2 module (an implementation independent of Go's), for rally's interop
// tests. It speaks just enough RFC 6455 framing for echo tests.
//
//   node h2-peer.mjs server [--tls CERT KEY]
//       serves extended CONNECT with enableConnectProtocol; echoes every data
//       message, answers a close with a close; prints {"ev":"listening","port"}
//       then one line per session ({"ev":"session"}) and per stream
//       ({"ev":"stream","protocol","version"}) and per close
//       ({"ev":"closed","code"}).
//   node h2-peer.mjs client URL N [--ca CA]
//       opens N WebSockets over one HTTP/2 session to URL (http:// = h2c,
//       https:// = h2), sends "hello I" on each, checks the echo, closes with
//       1000 and checks the server's close; prints {"ev":"done","ok":N,
//       "sessions":1} or {"ev":"error","message"}.
import http2 from 'node:http2';
import fs from 'node:fs';
import crypto from 'node:crypto';

const out = (o) => process.stdout.write(JSON.stringify(o) + '\n');

// frame builds one final frame; masked for a client.
function frame(opcode, payload, masked) {
  const len = payload.length;
  let head;
  if (len < 126) {
    head = Buffer.from([0x80 | opcode, len]);
  } else if (len < 65536) {
    head = Buffer.alloc(4);
    head[0] = 0x80 | opcode; head[1] = 126; head.writeUInt16BE(len, 2);
  } else {
    head = Buffer.alloc(10);
    head[0] = 0x80 | opcode; head[1] = 127; head.writeBigUInt64BE(BigInt(len), 2);
  }
  if (!masked) return Buffer.concat([head, payload]);
  head[1] |= 0x80;
  const key = crypto.randomBytes(4);
  const body = Buffer.from(payload);
  for (let i = 0; i < body.length; i++) body[i] ^= key[i & 3];
  return Buffer.concat([head, key, body]);
}

// parser calls onFrame(fin, opcode, payload) for each frame of the stream.
function parser(onFrame) {
  let buf = Buffer.alloc(0);
  return (chunk) => {
    buf = Buffer.concat([buf, chunk]);
    for (;;) {
      if (buf.length < 2) return;
      const fin = (buf[0] & 0x80) !== 0, opcode = buf[0] & 0x0f;
      const masked = (buf[1] & 0x80) !== 0;
      let len = buf[1] & 0x7f, off = 2;
      if (len === 126) { if (buf.length < 4) return; len = buf.readUInt16BE(2); off = 4; }
      else if (len === 127) { if (buf.length < 10) return; len = Number(buf.readBigUInt64BE(2)); off = 10; }
      const keyOff = off;
      if (masked) off += 4;
      if (buf.length < off + len) return;
      const payload = Buffer.from(buf.subarray(off, off + len));
      if (masked) for (let i = 0; i < len; i++) payload[i] ^= buf[keyOff + (i & 3)];
      buf = buf.subarray(off + len);
      onFrame(fin, opcode, payload);
    }
  };
}

function serve(args) {
  const settings = { enableConnectProtocol: true, maxConcurrentStreams: 2000 };
  let server;
  const i = args.indexOf('--tls');
  if (i >= 0) {
    server = http2.createSecureServer({ cert: fs.readFileSync(args[i + 1]), key: fs.readFileSync(args[i + 2]), settings });
  } else {
    server = http2.createServer({ settings });
  }
  server.on('session', () => out({ ev: 'session' }));
  server.on('stream', (stream, headers) => {
    if (headers[':method'] !== 'CONNECT' || headers[':protocol'] !== 'websocket') {
      stream.respond({ ':status': 400 });
      stream.end();
      return;
    }
    out({ ev: 'stream', protocol: headers[':protocol'], version: headers['sec-websocket-version'] });
    stream.respond({ ':status': 200 });
    let closed = false;
    stream.on('data', parser((fin, opcode, payload) => {
      if (closed) return;
      if (opcode === 1 || opcode === 2) {
        stream.write(frame(opcode, payload, false));
      } else if (opcode === 9) {
        stream.write(frame(10, payload, false));
      } else if (opcode === 8) {
        closed = true;
        const code = payload.length >= 2 ? payload.readUInt16BE(0) : 1005;
        out({ ev: 'closed', code });
        stream.end(frame(8, payload.subarray(0, 2), false));
      }
    }));
    stream.on('end', () => { if (!closed) { out({ ev: 'closed', code: 1006 }); } });
    stream.on('error', () => {});
  });
  server.listen(0, '127.0.0.1', () => out({ ev: 'listening', port: server.address().port }));
}

async function client(args) {
  const url = new URL(args[0]);
  const n = Number(args[1]);
  const opts = {};
  const i = args.indexOf('--ca');
  if (i >= 0) opts.ca = fs.readFileSync(args[i + 1]);
  const session = http2.connect(url.origin, opts);
  session.on('error', (e) => { out({ ev: 'error', message: String(e) }); process.exit(1); });
  await new Promise((resolve) => session.once('remoteSettings', resolve));
  if (!session.remoteSettings.enableConnectProtocol) {
    out({ ev: 'error', message: 'server did not enable extended CONNECT' });
    process.exit(1);
  }
  const one = (k) => new Promise((resolve, reject) => {
    const stream = session.request({
      ':method': 'CONNECT', ':protocol': 'websocket', ':scheme': url.protocol.slice(0, -1),
      ':path': url.pathname, ':authority': url.host, 'sec-websocket-version': '13',
    });
    stream.on('error', reject);
    stream.on('response', (h) => {
      if (h[':status'] !== 200) { reject(new Error('status ' + h[':status'])); return; }
      stream.write(frame(1, Buffer.from('hello ' + k), true));
    });
    let echoed = false;
    stream.on('data', parser((fin, opcode, payload) => {
      if (!echoed) {
        if (opcode !== 1 || payload.toString() !== 'hello ' + k) { reject(new Error('echo ' + opcode + ' ' + payload)); return; }
        echoed = true;
        const body = Buffer.alloc(2); body.writeUInt16BE(1000);
        stream.write(frame(8, body, true));
        return;
      }
      if (opcode !== 8 || payload.readUInt16BE(0) !== 1000) { reject(new Error('close ' + opcode)); return; }
      stream.end();
    }));
    stream.on('end', () => (echoed ? resolve() : reject(new Error('stream ended before the echo'))));
  });
  try {
    const all = [];
    for (let k = 0; k < n; k++) all.push(one(k));
    await Promise.all(all);
    out({ ev: 'done', ok: n, sessions: 1 });
    session.close();
  } catch (e) {
    out({ ev: 'error', message: String(e) });
    process.exit(1);
  }
}

const [mode, ...rest] = process.argv.slice(2);
if (mode === 'server') serve(rest);
else if (mode === 'client') client(rest);
else { process.stderr.write('usage: h2-peer.mjs server|client ...\n'); process.exit(2); }
