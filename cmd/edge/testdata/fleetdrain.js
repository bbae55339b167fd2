// Opens WebSockets with the npm `ws` client and reports where they landed
// and how and when each ends.
//
//   node fleetdrain.js URL COUNT hold|probe
//
// Opens COUNT connections one after another, asks each "whoami", and
// prints "open I BACKEND" per connection. With hold, it then prints
// "close I CODE UNIX_MS" as each one is closed by the other side, and
// runs until killed. With probe, it closes each connection once it has
// answered and exits after the last.
'use strict';
const WebSocket = require('ws');

const [url, countArg, mode] = process.argv.slice(2);
const count = Number(countArg);

function open(i) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url);
    ws.once('error', reject);
    ws.once('open', () => ws.send('whoami'));
    ws.once('message', (m) => {
      process.stdout.write(`open ${i} ${m}\n`);
      if (mode === 'probe') ws.close(1000);
      resolve();
    });
    ws.on('close', (code) => {
      if (mode === 'hold') process.stdout.write(`close ${i} ${code} ${Date.now()}\n`);
    });
  });
}

(async () => {
  for (let i = 0; i < count; i++) await open(i);
  if (mode === 'probe') process.exit(0);
})().catch((e) => { console.error(e); process.exit(1); });
