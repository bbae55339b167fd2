// A Node `ws` client for edge's pong tests. It opens url and answers
// pings the way ws does by default (autoPong: the pong is queued before
// the 'ping' event); after n pings (0: never) it sends "after pings". It
// closes with 1000 once it gets the message "ok", and prints one JSON
// line: the close code, and in sent the pings it saw.
//
//   node pongclient.js URL N
const WebSocket = require('ws');

const [url, nStr] = process.argv.slice(2);
const n = Number(nStr);
const ws = new WebSocket(url, { perMessageDeflate: false });
let pings = 0;
let error = '';

ws.on('ping', () => {
  pings++;
  if (pings === n) ws.send('after pings');
});
ws.on('message', (m) => {
  if (m.toString() === 'ok') ws.close(1000);
});
ws.on('error', (e) => { error = String(e && e.message); });
ws.on('close', (code, reason) => {
  console.log(JSON.stringify({ code, reason: reason.toString(), sent: pings, error }));
  process.exit(0);
});
setTimeout(() => {
  console.log(JSON.stringify({ code: 0, reason: 'no close within 30s', sent: pings, error }));
  process.exit(0);
}, 30000);
