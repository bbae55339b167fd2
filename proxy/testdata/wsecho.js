// A Node `ws` client for the hand-off test. It opens n connections to
// url, each echoing numbered messages one at a time and checking every
// answer; once all are echoing it prints "echoing". On the line "stop"
// from stdin every connection echoes three more messages, then closes
// with 1000, and the client prints one JSON line: {conns, messages,
// error, unexpected}: unexpected counts close or error events before our
// own close.
//
//   node wsecho.js URL N [CAFILE SERVERNAME]   (wss: trust only CAFILE's certificate for SERVERNAME)
const fs = require('fs');
const WebSocket = require('ws');

const [url, nStr, caFile, servername] = process.argv.slice(2);
const tlsOpts = caFile ? { ca: fs.readFileSync(caFile), servername } : {};
const n = Number(nStr);
let messages = 0;
let unexpected = 0;
let error = '';
let echoing = 0;
let stopping = false;
let closed = 0;
const conns = [];

function finish() {
  console.log(JSON.stringify({ conns: n, messages, error, unexpected }));
  process.exit(0);
}

for (let i = 0; i < n; i++) {
  const ws = new WebSocket(url, { perMessageDeflate: false, ...tlsOpts });
  const st = { ws, seq: 0, left: -1, ours: false, counted: false };
  conns.push(st);
  const send = () => ws.send(`n${i}-${st.seq}`);
  ws.on('open', send);
  ws.on('message', (data) => {
    const want = `n${i}-${st.seq}`;
    if (data.toString() !== want) {
      error = error || `conn ${i}: got ${data} want ${want}`;
    }
    messages++;
    st.seq++;
    if (!st.counted) {
      st.counted = true;
      if (++echoing === n) console.log('echoing');
    }
    if (st.left > 0) st.left--;
    if (st.left === 0) {
      st.ours = true;
      ws.close(1000);
      return;
    }
    send();
  });
  ws.on('error', (e) => { if (!st.ours) { unexpected++; error = error || `conn ${i}: ${e.message}`; } });
  ws.on('close', (code) => {
    if (!st.ours) { unexpected++; error = error || `conn ${i}: closed ${code}`; }
    if (++closed === n) finish();
  });
}

let input = '';
process.stdin.on('data', (d) => {
  input += d;
  if (!stopping && input.includes('stop')) {
    stopping = true;
    for (const st of conns) st.left = 3;
  }
});
setTimeout(() => { error = error || 'timed out'; finish(); }, 60000);
