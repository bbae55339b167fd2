// Opens WebSockets with the npm `ws` client through several edges and
// holds every one that opens, for the fleet-scope limit tests.
//
//   node fleetlimit.js COUNT INFLIGHT URL[,URL...]
//
// Connection i goes to URL i mod len(URLs), at most INFLIGHT handshakes at
// a time. Each open connection asks "whoami" and waits for the answer, so
// the edge counts it before it is reported. A handshake the edge refuses
// is counted by its HTTP status. Once every attempt has ended it prints
// one JSON line {opened: {backend: n}, refused: {status: n}, failed: n},
// holds the open connections until its standard input closes, then closes
// them (close handshake complete) and exits.
'use strict';
const WebSocket = require('ws');

const [countArg, inflightArg, urlArg] = process.argv.slice(2);
const count = Number(countArg);
const inflight = Number(inflightArg);
const urls = urlArg.split(',');

const held = [];
const opened = {};
const refused = {};
let failed = 0;

function attempt(url) {
  return new Promise((resolve) => {
    const ws = new WebSocket(url, { handshakeTimeout: 20000 });
    let done = false;
    const end = () => { if (!done) { done = true; resolve(); } };
    ws.once('unexpected-response', (req, res) => {
      refused[res.statusCode] = (refused[res.statusCode] || 0) + 1;
      res.resume();
      req.destroy();
      end();
    });
    ws.once('error', () => { if (!done) failed++; end(); });
    ws.once('open', () => ws.send('whoami'));
    ws.once('message', (data) => {
      const b = data.toString();
      opened[b] = (opened[b] || 0) + 1;
      held.push(ws);
      end();
    });
  });
}

(async () => {
  let next = 0;
  async function worker() {
    while (next < count) {
      const i = next++;
      await attempt(urls[i % urls.length]);
    }
  }
  await Promise.all(Array.from({ length: inflight }, worker));
  process.stdout.write(JSON.stringify({ opened, refused, failed }) + '\n');
  process.stdin.resume();
  process.stdin.on('end', async () => {
    await Promise.all(held.map((ws) => new Promise((resolve) => {
      if (ws.readyState !== WebSocket.OPEN) return resolve();
      const t = setTimeout(resolve, 5000);
      ws.once('close', () => { clearTimeout(t); resolve(); });
      ws.close(1000);
    })));
    process.exit(0);
  });
})().catch((err) => {
  process.stderr.write(`${err.stack || err}\n`);
  process.exit(1);
});
