// A Node `ws` client over TLS for edge's record-layer tests: it opens url
// trusting only the certificate in CAFILE for SERVERNAME, sends one binary
// message of each size given (contents derived from the index), waits for
// each echo and compares it byte for byte. Prints one JSON line:
// {echoed, error}.
//
//   node wssecho.js URL CAFILE SERVERNAME SIZE...
const fs = require('fs');
const WebSocket = require('ws');

const [url, caFile, servername, ...sizes] = process.argv.slice(2);
const ws = new WebSocket(url, { perMessageDeflate: false, ca: fs.readFileSync(caFile), servername });
ws.binaryType = 'nodebuffer';
let i = 0;
let want = null;
let done = false;
let timer = null;

function finish(error) {
  if (done) return;
  done = true;
  clearTimeout(timer);
  console.log(JSON.stringify({ echoed: i, error }));
  ws.terminate();
}

function next() {
  if (i === sizes.length) { finish(''); return; }
  want = Buffer.alloc(Number(sizes[i]));
  for (let k = 0; k < want.length; k++) want[k] = (k * 31 + i) & 0xff;
  ws.send(want);
}

ws.on('open', next);
ws.on('message', (data) => {
  if (!Buffer.isBuffer(data) || !data.equals(want)) {
    finish(`message ${i}: got ${data.length} bytes, want ${want.length} equal bytes`);
    return;
  }
  i++;
  next();
});
ws.on('error', (e) => finish(String(e)));
ws.on('close', (code) => finish(`closed with ${code} after ${i} echoes`));
timer = setTimeout(() => finish('timeout'), 60000);
