// Headless Chromium through playwright-core for edge's record-layer
// tests: a page opens a WebSocket to url (the test's self-signed
// certificate accepted), sends one binary message of each size given,
// waits for each echo and compares it. Prints one JSON line:
// {echoed, error}.
//
//   node wsschromium.js CHROMIUM_PATH URL SIZE...
const { chromium } = require('playwright-core');

const [exe, url, ...sizes] = process.argv.slice(2);

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
    const got = await page.evaluate(([u, sz]) => new Promise((resolve) => {
      const ws = new WebSocket(u);
      ws.binaryType = 'arraybuffer';
      let i = 0;
      let want = null;
      const next = () => {
        if (i === sz.length) { resolve({ echoed: i, error: '' }); ws.close(); return; }
        want = new Uint8Array(sz[i]);
        for (let k = 0; k < want.length; k++) want[k] = (k * 31 + i) & 0xff;
        ws.send(want);
      };
      ws.onopen = next;
      ws.onmessage = (ev) => {
        const b = new Uint8Array(ev.data);
        if (b.length !== want.length || b.some((v, k) => v !== want[k])) {
          resolve({ echoed: i, error: `message ${i}: got ${b.length} bytes, want ${want.length} equal bytes` });
          return;
        }
        i++;
        next();
      };
      ws.onclose = (ev) => resolve({ echoed: i, error: `closed with ${ev.code} after ${i} echoes` });
      setTimeout(() => resolve({ echoed: i, error: 'timeout' }), 60000);
    }), [url, sizes.map(Number)]);
    console.log(JSON.stringify(got));
  } finally {
    await browser.close();
  }
})().catch((e) => { console.error(e); process.exit(1); });
