// A Node ws client with perMessageDeflate for edge's deflate tests.
//   echo N:  sends one compressible text message of N bytes, waits for its
//            echo and prints {"answer","extensions","echoed","code"}.
//   bomb N:  sends one text message of N bytes of one byte (compressed, it
//            is about N/1000 on the wire) and prints the close it got.
//   rate N K: sends N small messages as fast as it can, K bytes each, and
//            prints the close it got and how many were echoed.
// answer is the 101's Sec-WebSocket-Extensions, extensions what ws
// negotiated (Object.keys of ws.extensions).
//
//   node deflateclient.js URL MODE N [K]
const WebSocket = require('ws');

const [url, mode, nStr, kStr] = process.argv.slice(2);
const n = Number(nStr);
const res = { answer: '', extensions: '', echoed: 0, code: 0, reason: '', error: '' };
const ws = new WebSocket(url, { perMessageDeflate: true, maxPayload: 256 * 1024 * 1024 });
const timer = setTimeout(() => { res.error = 'no end within 60s'; done(); }, 60000);
let ended = false;
function done() {
  if (ended) return;
  ended = true;
  clearTimeout(timer);
  console.log(JSON.stringify(res));
  process.exit(0);
}
ws.on('upgrade', (r) => { res.answer = r.headers['sec-websocket-extensions'] || ''; });
ws.on('open', () => {
  res.extensions = Object.keys(ws.extensions).join(',');
  if (mode === 'echo') {
    ws.send('hello edge '.repeat(Math.ceil(n / 11)).slice(0, n));
  } else if (mode === 'bomb') {
    ws.send('a'.repeat(n));
  } else if (mode === 'rate') {
    const msg = 'r'.repeat(Number(kStr || 10));
    for (let i = 0; i < n; i++) ws.send(msg);
  }
});
ws.on('message', (data) => {
  res.echoed++;
  if (mode === 'echo') {
    res.size = data.length;
    ws.close(1000);
  } else if (mode === 'rate' && res.echoed === n) {
    ws.close(1000);
  }
});
ws.on('close', (code, reason) => { res.code = code; res.reason = String(reason); done(); });
ws.on('error', (e) => { res.error = String(e); });
