// Node `ws` clients that reconnect when edge moves them, as an
// application's resume logic does.
//
//   node rebalance_clients.js URL COUNT [CONCURRENCY] [PREFIX]
//
// Opens COUNT connections, CONCURRENCY at a time (default 1); each asks
// "whoami" and prints "on PREFIXI BACKEND". A connection closed by the
// other side prints "closed PREFIXI CODE" and, when the code is 1012
// (service restart), reconnects at once and asks again, with the cookies
// the edge set (as a browser would), so a sticky cookie leads it back
// unless the edge places it anew. Runs until killed.
'use strict';
const WebSocket = require('ws');

const [url, countArg, concArg, prefix = ''] = process.argv.slice(2);
const jar = new Map(); // client -> "name=value" cookies

function open(i) {
  return new Promise((resolve, reject) => {
    const headers = jar.has(i) ? { Cookie: jar.get(i) } : {};
    const ws = new WebSocket(url, { headers });
    ws.once('upgrade', (res) => {
      const set = res.headers['set-cookie'];
      if (set) jar.set(i, set.map((c) => c.split(';')[0]).join('; '));
    });
    ws.once('error', reject);
    ws.once('open', () => ws.send('whoami'));
    ws.once('message', (m) => {
      process.stdout.write(`on ${prefix}${i} ${m}\n`);
      resolve();
    });
    ws.on('close', (code) => {
      process.stdout.write(`closed ${prefix}${i} ${code}\n`);
      if (code === 1012) open(i).catch(fail);
    });
  });
}

function fail(e) {
  console.error(e);
  process.exitCode = 1;
  process.kill(process.pid, 'SIGTERM');
}

(async () => {
  const count = Number(countArg);
  let next = 0;
  const worker = async () => {
    while (next < count) await open(next++);
  };
  await Promise.all(Array.from({ length: Number(concArg || 1) }, worker));
})().catch(fail);
