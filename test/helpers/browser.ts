// A headless Chromium for the browser tests that needs nothing beyond `npm ci`: the system's
// Chromium when there is one (Debian's, as CI installs), else the one shipped inside the
// @sparticuz/chromium package (a compressed binary unpacked to /tmp on first use; no download).
import { existsSync } from 'node:fs';
import { chromium, type Browser } from 'playwright-core';

/** Where a system Chromium is looked for. KINFERENCE_SYSTEM_CHROMIUM overrides the path, so a
 *  test run can prove the packaged fallback works by pointing it at a path that does not exist. */
export const SYSTEM_CHROMIUM = process.env.KINFERENCE_SYSTEM_CHROMIUM ?? '/usr/bin/chromium';

const QUIET = ['--disable-background-networking', '--disable-component-update', '--no-first-run'];

export interface LaunchedBrowser {
  browser: Browser;
  /** Which Chromium runs: 'system' or 'packaged'. */
  source: 'system' | 'packaged';
  executablePath: string;
}

export async function launchChromium(): Promise<LaunchedBrowser> {
  if (existsSync(SYSTEM_CHROMIUM)) {
    const browser = await chromium.launch({
      executablePath: SYSTEM_CHROMIUM,
      args: ['--headless', '--no-sandbox', '--disable-gpu', ...QUIET],
    });
    return { browser, source: 'system', executablePath: SYSTEM_CHROMIUM };
  }
  const { default: packaged } = await import('@sparticuz/chromium');
  const executablePath = await packaged.executablePath();
  // Its defaults are for AWS Lambda: --single-process there, where closing one page can take the
  // whole browser down; a test machine runs it multi-process.
  const args = packaged.args.filter((a) => a !== '--single-process');
  const browser = await chromium.launch({ executablePath, args: [...args, ...QUIET], headless: true });
  return { browser, source: 'packaged', executablePath };
}
