// Opens N WebSockets to URL with the npm `ws` client, asks each which
// backend answers ("whoami"), and reports on stdout, one JSON object a line:
//   {"i":0,"event":"backend","id":"b2"}   the answer of connection i
//   {"event":"ready"}                      every connection has answered
//   {"i":0,"event":"close","code":1012}    connection i closed, with the code
//                                          of the close frame it received
// and exits 0 once every connection has closed. Usage: node leave_clients.js URL N
'use strict';
const WebSocket = require('ws');

const [url, nArg] = process.argv.slice(2);
const n = Number(nArg);
const out = (o) => process.stdout.write(JSON.stringify(o) + '\n');
let answered = 0;
let closed = 0;

for (let i = 0; i < n; i++) {
  const ws = new WebSocket(url);
  let asked = false;
  ws.on('open', () => ws.send('whoami'));
  ws.on('message', (data) => {
    if (asked) return;
    asked = true;
    out({ i, event: 'backend', id: data.toString() });
    if (++answered === n) out({ event: 'ready' });
  });
  ws.on('error', (err) => out({ i, event: 'error', message: err.message }));
  ws.on('close', (code) => {
    out({ i, event: 'close', code });
    if (++closed === n) process.exit(0);
  });
}
