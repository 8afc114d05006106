// `npm run screenshot`: runs the demo, and at its peak (60 % of the run, 1.7× local capacity)
// saves a full-page screenshot of the agent's dashboard to docs/dashboard.png (or the path given).
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { launchChromium } from '../test/helpers/browser.ts';

const out = process.argv[2] ?? 'docs/dashboard.png';
const DURATION_S = 60;
const demo = spawn(process.execPath, ['agent/cli/main.ts', 'demo', '--duration', String(DURATION_S)], {
  stdio: ['ignore', 'pipe', 'inherit'],
});
const started = Date.now();
const dashboard = await new Promise<string>((resolve, reject) => {
  demo.once('exit', (code) => reject(new Error(`the demo exited (${code}) before printing its dashboard address`)));
  createInterface({ input: demo.stdout! }).on('line', (line) => {
    process.stdout.write(`${line}\n`);
    const url = /dashboard: (http:\/\/\S+\/ui)/.exec(line)?.[1];
    if (url) resolve(url);
  });
});
const { browser, source } = await launchChromium();
try {
  const page = await browser.newPage({ viewport: { width: 1220, height: 900 } });
  await page.goto(dashboard);
  // The page keeps its own history: open it early, shoot at the peak.
  await new Promise((r) => setTimeout(r, Math.max(0, started + DURATION_S * 600 - Date.now())));
  await page.screenshot({ path: out, fullPage: true });
  console.log(`saved ${out} (chromium: ${source})`);
} finally {
  await browser.close();
  demo.kill('SIGINT');
}
