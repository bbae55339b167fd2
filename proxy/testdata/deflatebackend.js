// A Node ws backend with permessage-deflate (context takeover, windows as
// negotiated) for edge's deflate tests. It echoes every message and prints
// one JSON line per event on stdout:
//   {"event":"listening","port":N}
//   {"event":"upgrade","offer":"...","answer":"..."}   extension headers
//   {"event":"message","size":N}                       each message, inflated
//   {"event":"close","code":N}
// maxPayload is large (128 MiB by default) so that only edge can stop a
// message over the pool's limit.
//
//   node deflatebackend.js [MAX_PAYLOAD]
const { WebSocketServer } = require('ws');

const maxPayload = Number(process.argv[2] || 128 * 1024 * 1024);
const out = (o) => process.stdout.write(JSON.stringify(o) + '\n');
const wss = new WebSocketServer({ host: '127.0.0.1', port: 0, perMessageDeflate: true, maxPayload });

wss.on('listening', () => out({ event: 'listening', port: wss.address().port }));
wss.on('headers', (headers, req) => {
  const h = headers.find((l) => l.toLowerCase().startsWith('sec-websocket-extensions:'));
  out({ event: 'upgrade', offer: req.headers['sec-websocket-extensions'] || '', answer: h ? h.slice(h.indexOf(':') + 1).trim() : '' });
});
wss.on('connection', (ws) => {
  ws.on('message', (data, isBinary) => {
    out({ event: 'message', size: data.length });
    ws.send(data, { binary: isBinary });
  });
  ws.on('close', (code) => out({ event: 'close', code }));
  ws.on('error', (e) => out({ event: 'error', error: String(e) }));
});
