// The dashboard in a real browser (the system Chromium, else the npm-packaged one, via
// playwright-core): it renders the pods, their load and predictions, and the requests per route,
// from the running agent.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Browser } from 'playwright-core';
import { launchChromium, SYSTEM_CHROMIUM } from './helpers/browser.ts';
import { existsSync } from 'node:fs';
import { chatBody, postJson, startStack, type Stack } from './helpers/stack.ts';

describe('dashboard', () => {
  let stack: Stack;
  let browser: Browser;
  before(async () => {
    stack = await startStack({ pods: [{}, { speed: 0.5 }] });
    const launched = await launchChromium();
    browser = launched.browser;
    // The system one whenever present; the packaged one only when it is not.
    assert.equal(launched.source, existsSync(SYSTEM_CHROMIUM) ? 'system' : 'packaged');
  });
  after(async () => {
    await browser?.close();
    await stack?.close();
  });

  it('shows every pod with its load and prediction, and the requests per route', async () => {
    for (let i = 0; i < 3; i++) await (await postJson(`${stack.api}/v1/chat/completions`, chatBody())).arrayBuffer();
    const page = await browser.newPage();
    await page.goto(`${stack.admin}/ui`);
    await page.waitForSelector('#pods tbody tr:nth-child(2)');
    const rows = await page.$$eval('#pods tbody tr', (trs) => trs.map((tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent ?? '')));
    assert.deepEqual(rows.map((r) => r[0]), ['pod-0', 'pod-1']);
    for (const row of rows) {
      assert.equal(row[1], 'local');
      assert.match(row[6], /\d+ ms/);
      assert.equal(row[8], 'ok');
    }
    await page.waitForFunction(() => document.querySelector('#tiles')?.textContent?.includes('local'));
    const tiles = await page.textContent('#tiles');
    assert.match(tiles ?? '', /3local/);
    assert.match((await page.textContent('#status')) ?? '', /^ready · 3 requests/);
    if (process.env.KINFERENCE_SCREENSHOT) await page.screenshot({ path: process.env.KINFERENCE_SCREENSHOT, fullPage: true });
  });
});
