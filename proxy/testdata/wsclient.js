// A Node `ws` client for edge's interop tests. It opens url, sends what
// the mode asks for and prints one JSON line: the close code and reason it
// saw, and how many bytes it handed to ws.
//
//   node wsclient.js URL frame N        one binary frame of N bytes
//   node wsclient.js URL fragments N K  one message of N bytes in K-byte fragments
//   node wsclient.js URL stream N       1 MiB messages until closed, N bytes at most
const WebSocket = require('ws');

const [url, mode, nStr, kStr] = process.argv.slice(2);
const n = Number(nStr);
const ws = new WebSocket(url, { perMessageDeflate: false });
let sent = 0;
let error = '';

function stream() {
  const chunk = Buffer.alloc(1 << 20, 0x61);
  // At most four messages per turn of the event loop: socket writes that
  // complete at once keep bufferedAmount at 0, and a loop that never
  // yields would never read the close frame.
  const pump = () => {
    for (let i = 0; i < 4 && ws.readyState === WebSocket.OPEN && sent < n && ws.bufferedAmount < 4 << 20; i++) {
      ws.send(chunk);
      sent += chunk.length;
    }
    if (ws.readyState === WebSocket.OPEN && sent < n) setImmediate(pump);
  };
  pump();
}

ws.on('open', () => {
  if (mode === 'frame') {
    ws.send(Buffer.alloc(n, 0x62));
    sent = n;
  } else if (mode === 'fragments') {
    // fin:false keeps the message open; the last fragment has fin:true.
    const k = Number(kStr);
    for (let off = 0; off < n; off += k) {
      const len = Math.min(k, n - off);
      ws.send(Buffer.alloc(len, 0x63), { binary: true, fin: off + len >= n });
      sent += len;
    }
  } else {
    stream();
  }
});
ws.on('message', () => {});
ws.on('error', (e) => { error = String(e && e.message); });
ws.on('close', (code, reason) => {
  console.log(JSON.stringify({ code, reason: reason.toString(), sent, error }));
  process.exit(0);
});
setTimeout(() => {
  console.log(JSON.stringify({ code: 0, reason: 'no close within 30s', sent, error }));
  process.exit(0);
}, 30000);
