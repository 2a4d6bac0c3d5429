// What the browser tests (browser_test.js, patch_test.js, generate_test.js) share: Debian's Chromium
// launched headless with a throw-away profile, and a poll of a page condition.
'use strict';
const { chromium } = require('playwright-core');
const fs = require('fs');
const os = require('os');
const path = require('path');

// Chromium with a fresh profile directory; close() also removes it. `extra`: more context options.
async function launchChromium(extra = {}) {
  const userData = fs.mkdtempSync(path.join(os.tmpdir(), 'qkv-chromium-'));
  const context = await chromium.launchPersistentContext(userData, {
    executablePath: process.env.QKV_CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync'],
    viewport: { width: 1280, height: 900 },
    ...extra,
  });
  return { context, close: async () => { await context.close(); fs.rmSync(userData, { recursive: true, force: true }); } };
}

// Polls fn(arg) in the page with evaluate until it is truthy: page.waitForFunction evaluates a string,
// which the page's Content-Security-Policy (no 'unsafe-eval') forbids.
async function waitFor(page, fn, arg, opts = {}) {
  const deadline = Date.now() + (opts.timeout || 30000);
  for (;;) {
    if (await page.evaluate(fn, arg)) return true;
    if (Date.now() > deadline) throw new Error('timed out waiting for ' + fn.toString().slice(0, 160));
    await new Promise((r) => setTimeout(r, 40));
  }
}

module.exports = { launchChromium, waitFor };
