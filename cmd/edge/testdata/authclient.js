// Node `ws` against edge's token checks.
//
//   node authclient.js check URL CASES_JSON
//     CASES_JSON is [{name, headers, protocols}]; for each, prints one JSON
//     line {name, status, protocol, seen}: the HTTP status edge answered
//     (101 for an upgrade), the subprotocol of the 101, and what the
//     backend received (its answer to "headers").
//   node authclient.js hold URL COUNT AUTHORIZATION
//     opens COUNT connections with that Authorization header, prints
//     "open I" for each, then "close I CODE MS" as edge closes each one
//     (MS: unix milliseconds); exits when all are closed.
'use strict';
const WebSocket = require('ws');

const [mode, url, arg, auth] = process.argv.slice(2);
const opts = (headers) => ({ headers, rejectUnauthorized: false });

function check(c) {
  return new Promise((resolve) => {
    const ws = new WebSocket(url, c.protocols || [], opts(c.headers || {}));
    ws.on('unexpected-response', (req, res) => {
      resolve({ name: c.name, status: res.statusCode, www: res.headers['www-authenticate'] || '' });
      req.destroy();
    });
    ws.on('error', (e) => resolve({ name: c.name, status: 0, error: String(e) }));
    ws.on('open', () => ws.send('headers'));
    ws.on('message', (m) => {
      resolve({ name: c.name, status: 101, protocol: ws.protocol, seen: JSON.parse(String(m)) });
      ws.close();
    });
  });
}

async function hold(count) {
  let closed = 0; // eslint-disable-line no-unused-vars
  for (let i = 0; i < count; i++) {
    await new Promise((resolve, reject) => {
      const ws = new WebSocket(url, opts({ Authorization: auth }));
      ws.once('error', reject);
      ws.once('open', () => { process.stdout.write(`open ${i}\n`); resolve(); });
      ws.on('close', (code) => {
        // No process.exit: it would cut the lines still queued to a pipe;
        // with every socket closed the process ends by itself.
        process.stdout.write(`close ${i} ${code} ${Date.now()}\n`);
        closed++;
      });
    });
  }
}

(async () => {
  if (mode === 'check') {
    for (const c of JSON.parse(arg)) process.stdout.write(JSON.stringify(await check(c)) + '\n');
    return;
  }
  await hold(Number(arg));
})().catch((e) => { console.error(e); process.exit(1); });
