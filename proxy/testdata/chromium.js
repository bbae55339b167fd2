// Headless Chromium through playwright-core: a page opens a WebSocket to
// url, sends one binary message of n bytes and reports the close event.
// Prints one JSON line {code, reason, wasClean}.
//
//   node chromium.js CHROMIUM_PATH URL N
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
      const ws = new WebSocket(u);
      ws.binaryType = 'arraybuffer';
      ws.onopen = () => ws.send(new Uint8Array(n).fill(0x64));
      ws.onclose = (ev) => resolve({ code: ev.code, reason: ev.reason, wasClean: ev.wasClean });
      setTimeout(() => resolve({ code: 0, reason: 'no close within 30s', wasClean: false }), 30000);
    }), [url, Number(nStr)]);
    console.log(JSON.stringify(got));
  } finally {
    await browser.close();
  }
})().catch((e) => { console.error(e); process.exit(1); });
