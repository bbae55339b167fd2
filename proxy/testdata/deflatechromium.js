// Headless Chromium through playwright-core for edge's deflate tests: a
// page opens a WebSocket to url (Chromium always offers
// "permessage-deflate; client_max_window_bits"), sends one compressible
// text message of n bytes, waits for its echo and prints one JSON line
// {extensions, echoed, size, code}: extensions is what the browser
// negotiated (WebSocket.extensions).
//
//   node deflatechromium.js CHROMIUM_PATH URL N
const { chromium } = require('playwright-core');

const [exe, url, nStr] = process.argv.slice(2);

(async () => {
  const browser = await chromium.launch({
    executablePath: exe,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  try {
    const page = await browser.newPage();
    const got = await page.evaluate(([u, n]) => new Promise((resolve) => {
      const res = { extensions: '', echoed: 0, size: 0, code: 0 };
      const ws = new WebSocket(u);
      ws.onopen = () => { res.extensions = ws.extensions; ws.send('hello edge '.repeat(Math.ceil(n / 11)).slice(0, n)); };
      ws.onmessage = (ev) => { res.echoed++; res.size = ev.data.length; ws.close(1000); };
      ws.onclose = (ev) => { res.code = ev.code; resolve(res); };
      setTimeout(() => resolve({ ...res, code: 0, error: 'no close within 30s' }), 30000);
    }), [url, Number(nStr)]);
    console.log(JSON.stringify(got));
  } finally {
    await browser.close();
  }
})().catch((e) => { console.error(e); process.exit(1); });
