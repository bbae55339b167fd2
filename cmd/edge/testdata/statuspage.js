// Loads edge's status page in headless Chromium (Debian's, through
// playwright-core) and reports what a person would see.
//
//   node statuspage.js CHROMIUM URL SCREENSHOT
//
// Prints one JSON object on stdout: the title, every backend row as
// rendered (pool, id as text, state, active, weight), the pool headings,
// the overview's active count, any dialog the page opened (an injected
// script would), requests to anything but the page itself, and whether a
// meta refresh is set. Writes a full-page screenshot to SCREENSHOT.
'use strict';
const { chromium } = require('playwright-core');

const [exe, url, shot] = process.argv.slice(2);

(async () => {
  const browser = await chromium.launch({ executablePath: exe, args: ['--no-sandbox', '--disable-gpu'] });
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    const dialogs = [];
    const requests = [];
    page.on('dialog', (d) => { dialogs.push(d.message()); d.dismiss(); });
    page.on('request', (r) => requests.push(r.url()));
    await page.goto(url, { waitUntil: 'load', timeout: 20000 });
    const out = await page.evaluate(() => {
      const text = (el) => (el ? el.textContent.trim() : null);
      return {
        title: document.title,
        refresh: (document.querySelector('meta[http-equiv="refresh"]') || {}).content || '',
        scripts: document.querySelectorAll('script').length,
        active: text(document.getElementById('active')),
        drain: text(document.getElementById('drain')),
        pools: [...document.querySelectorAll('.pool-name')].map(text),
        listeners: [...document.querySelectorAll('#listeners tr td:first-child')].map(text),
        routes: [...document.querySelectorAll('#routes tr td:last-child')].map(text),
        certs: document.querySelectorAll('table.certs tr').length - document.querySelectorAll('table.certs').length,
        backends: [...document.querySelectorAll('tr.backend')].map((tr) => ({
          pool: tr.dataset.pool,
          id: text(tr.querySelector('td.id')),
          state: text(tr.querySelector('.state')),
          active: text(tr.querySelector('.active')),
          weight: text(tr.querySelector('.weight')),
        })),
      };
    });
    out.dialogs = dialogs;
    out.requests = requests;
    await page.screenshot({ path: shot, fullPage: true });
    process.stdout.write(JSON.stringify(out) + '\n');
  } finally {
    await browser.close();
  }
})().catch((e) => { console.error(e); process.exit(1); });
