// Holds WebSockets open with the npm `ws` client and reports how each ends.
//
//   node wsclose.js URL COUNT
//
// Opens COUNT connections one after another, asks each "whoami", and
// prints "open I BACKEND" per connection; then prints "close I CODE" as
// each one is closed by the other side. Exits when all are closed.
'use strict';
const WebSocket = require('ws');

const [url, countArg] = process.argv.slice(2);
const count = Number(countArg);
let closed = 0;

function open(i) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url);
    ws.once('error', reject);
    ws.once('open', () => ws.send('whoami'));
    ws.once('message', (m) => {
      process.stdout.write(`open ${i} ${m}\n`);
      resolve();
    });
    ws.on('close', (code) => {
      process.stdout.write(`close ${i} ${code}\n`);
      if (++closed === count) process.exit(0);
    });
  });
}

(async () => {
  for (let i = 0; i < count; i++) await open(i);
})().catch((e) => { console.error(e); process.exit(1); });
