// Headless Chromium through playwright-core against edge's token checks:
// a page of edge's own origin opens WebSockets carrying the token the
// ways a browser can: in a cookie (set for the origin), and in
// Sec-WebSocket-Protocol beside the application's protocol, and alone.
// Prints one JSON line {cookie, protocol, alone}, each {protocol, seen,
// error}: the subprotocol of the 101 and what the backend received.
//
//   node authchromium.js CHROMIUM_PATH ORIGIN TOKEN COOKIE_NAME PROTOCOL_PREFIX
const { chromium } = require('playwright-core');

const [exe, origin, token, cookie, prefix] = process.argv.slice(2);

(async () => {
  const browser = await chromium.launch({
    executablePath: exe,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--ignore-certificate-errors',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  try {
    const context = await browser.newContext({ ignoreHTTPSErrors: true });
    const page = await context.newPage();
    await page.goto(origin + '/page');
    const open = (protocols) => page.evaluate(([u, p]) => new Promise((resolve) => {
      const ws = p ? new WebSocket(u, p) : new WebSocket(u);
      ws.onopen = () => ws.send('headers');
      ws.onmessage = (ev) => { resolve({ protocol: ws.protocol, seen: JSON.parse(ev.data), error: '' }); ws.close(); };
      ws.onclose = (ev) => resolve({ protocol: '', seen: null, error: `closed ${ev.code}` });
      setTimeout(() => resolve({ protocol: '', seen: null, error: 'timeout' }), 20000);
    }), [origin.replace('https:', 'wss:') + '/ws', protocols]);
    const out = {};
    out.protocol = await open([prefix + token, 'chat']);
    out.alone = await open([prefix + token]);
    await context.addCookies([{ name: cookie, value: token, url: origin, secure: true, sameSite: 'Strict' }]);
    out.cookie = await open(null);
    console.log(JSON.stringify(out));
  } finally {
    await browser.close();
  }
})().catch((e) => { console.error(e); process.exit(1); });
