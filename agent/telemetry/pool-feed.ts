// The scraper the agent runs, built from its settings: every page becomes the pool's load (or a
// failure the pool knows about), counted, with failures logged at a bounded rate.
import type { Counter } from 'prom-client';
import type { AgentSettings } from '../config/load.ts';
import type { PodLoad } from '../types.ts';
import { FailureLog } from './failure-log.ts';
import type { PodTelemetry } from './pod-telemetry.ts';
import { Scraper } from './scraper.ts';

export interface PoolFeedDeps {
  now: () => number;
  /** kinference_scrapes_total{outcome}. */
  scrapes: Pick<Counter<'outcome'>, 'inc'>;
  log(level: 'warn', message: string): void;
  pool: {
    recordLoad(uid: string, load: PodLoad, telemetry: PodTelemetry): void;
    recordScrapeFailure(uid: string, implausible?: string): void;
  };
  /** Telemetry windows must cover the longest exclusion window a policy may name. */
  windowSpanMs: number;
}

export function scraperFeedingPool(
  settings: Pick<AgentSettings, 'scrapeIntervalMs' | 'scrapeFilter' | 'limits'>,
  deps: PoolFeedDeps,
): Scraper {
  const { now, scrapes, log, pool } = deps;
  const failures = new FailureLog(settings.limits.scrapeFailureLogIntervalMs);
  return new Scraper(
    // 1 s resolution for the policy windows.
    {
      intervalMs: settings.scrapeIntervalMs,
      timeoutMs: settings.limits.scrapeTimeoutMs,
      filter: settings.scrapeFilter,
      filterRetryMs: settings.limits.scrapeFilterRetryMs,
      now,
      windows: { spanMs: deps.windowSpanMs, bucketMs: 1000 },
    },
    (pod, load, telemetry) => {
      scrapes.inc({ outcome: 'ok' });
      failures.forget(pod.uid);
      pool.recordLoad(pod.uid, load, telemetry);
    },
    (pod, error, kind) => {
      scrapes.inc({ outcome: kind === 'implausible' ? 'implausible' : 'error' });
      const line = failures.line(
        pod.uid,
        `scrape of pod ${pod.namespace}/${pod.name} (${pod.address}) failed: ${error}`,
        now(),
      );
      if (line !== undefined) log('warn', line);
      pool.recordScrapeFailure(pod.uid, kind === 'implausible' ? error : undefined);
    },
  );
}
