// Opens WebSockets with the npm `ws` client from given source addresses and
// reports which backend answered each, for the client_ip stickiness tests.
//
//   node clientip.js OPEN URL[,URL...] LOCAL:COUNT...
//
// Connections are opened one after another, the addresses interleaved, and
// at most OPEN are held open: before opening the next one past OPEN, the
// oldest is closed (close handshake complete). Connection i goes to URL
// i mod len(URLs). Each open connection asks "whoami" and waits for the
// answer, so the edge has counted it before the next one is placed.
// Prints one JSON array of {local, url, backend} on stdout.
'use strict';
const WebSocket = require('ws');

const [openArg, urlArg, ...specs] = process.argv.slice(2);
const maxOpen = Number(openArg);
const urls = urlArg.split(',');
const perAddr = specs.map((s) => {
  const i = s.lastIndexOf(':');
  return { local: s.slice(0, i), count: Number(s.slice(i + 1)) };
});

const jobs = [];
for (let round = 0; jobs.length < perAddr.reduce((n, a) => n + a.count, 0); round++) {
  for (const a of perAddr) {
    if (round < a.count) jobs.push(a.local);
  }
}

function withTimeout(p, what) {
  let timer;
  const t = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: timed out`)), 10000);
  });
  return Promise.race([p, t]).finally(() => clearTimeout(timer));
}

function open(url, local) {
  return withTimeout(new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { localAddress: local });
    ws.once('error', reject);
    ws.once('open', () => ws.send('whoami'));
    ws.once('message', (data) => resolve({ ws, backend: data.toString() }));
  }), `open from ${local}`);
}

function close(ws) {
  return withTimeout(new Promise((resolve) => {
    ws.once('close', resolve);
    ws.close(1000);
  }), 'close');
}

(async () => {
  const held = [];
  const out = [];
  for (let i = 0; i < jobs.length; i++) {
    if (held.length === maxOpen) await close(held.shift());
    const url = urls[i % urls.length];
    const { ws, backend } = await open(url, jobs[i]);
    held.push(ws);
    out.push({ local: jobs[i], url, backend });
  }
  await Promise.all(held.map(close));
  process.stdout.write(JSON.stringify(out) + '\n');
})().catch((err) => {
  process.stderr.write(`${err.stack || err}\n`);
  process.exit(1);
});
