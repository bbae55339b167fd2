// Node `ws` clients that reconnect when edge moves them, as an
// application's resume logic does.
//
//   node rebalance_clients.js URL COUNT
//
// Opens COUNT connections one after another; each asks "whoami" and
// prints "on I BACKEND". A connection closed by the other side prints
// "closed I CODE" and, when the code is 1012 (service restart), reconnects
// at once and asks again, with the cookies the edge set (as a browser
// would), so a sticky cookie leads it back unless the edge places it anew.
// Runs until killed.
'use strict';
const WebSocket = require('ws');

const [url, countArg] = process.argv.slice(2);

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
      process.stdout.write(`on ${i} ${m}\n`);
      resolve();
    });
    ws.on('close', (code) => {
      process.stdout.write(`closed ${i} ${code}\n`);
      if (code === 1012) open(i).catch((e) => { console.error(e); process.exit(1); });
    });
  });
}

(async () => {
  for (let i = 0; i < Number(countArg); i++) await open(i);
})().catch((e) => { console.error(e); process.exit(1); });
