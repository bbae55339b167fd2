// Opens WebSockets with the npm `ws` client through several edges and
// holds every one that opens, for the fleet-scope limit tests.
//
//   node fleetlimit.js COUNT INFLIGHT URL[,URL...] [RETRIES]
//
// Client i goes to URL i mod len(URLs), at most INFLIGHT handshakes at a
// time. Each open connection asks "whoami" and waits for the answer, so
// the edge counts it before it is reported. A client the edge refuses
// tries again, as real clients reconnect, up to RETRIES more times (default
// 0), 500 ms apart, through the same edge; its last answer counts, by HTTP
// status. Once every client has ended it prints one JSON line
// {opened: {backend: n}, refused: {status: n}, attempts: n, failed: n},
// holds the open connections until its standard input closes, then closes
// them (close handshake complete) and exits.
'use strict';
const WebSocket = require('ws');

const [countArg, inflightArg, urlArg, retriesArg] = process.argv.slice(2);
const count = Number(countArg);
const retries = Number(retriesArg || 0);
let attempts = 0;
const inflight = Number(inflightArg);
const urls = urlArg.split(',');

const held = [];
const opened = {};
const refused = {};
let failed = 0;

const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// client makes up to 1 + retries attempts; the last refusal counts.
async function client(url) {
  for (let i = 0; ; i++) {
    const status = await attempt(url);
    if (status === 0 || i === retries) {
      if (status > 0) refused[status] = (refused[status] || 0) + 1;
      return;
    }
    await pause(500);
  }
}

// attempt resolves with 0 once open (or failed), or the refusal's status.
function attempt(url) {
  attempts++;
  return new Promise((resolve) => {
    const ws = new WebSocket(url, { handshakeTimeout: 20000 });
    let done = false;
    const end = (status) => { if (!done) { done = true; resolve(status || 0); } };
    ws.once('unexpected-response', (req, res) => {
      res.resume();
      req.destroy();
      end(res.statusCode);
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
      await client(urls[i % urls.length]);
    }
  }
  await Promise.all(Array.from({ length: inflight }, worker));
  process.stdout.write(JSON.stringify({ opened, refused, attempts, failed }) + '\n');
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
