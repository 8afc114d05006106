// /metrics byte for byte: every family of a populated registry rendered and compared with a page
// saved from it (test/fixtures/metrics-golden.txt), so moving metric definitions around cannot
// change a name, a help text, a label, a bucket or the order a scraper sees. A deliberate change
// to the page rewrites the file: KINFERENCE_UPDATE_GOLDEN=1 node --test test/metrics-golden.test.ts
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { createMetrics } from '../agent/server/observability/metrics.ts';

const GOLDEN = new URL('./fixtures/metrics-golden.txt', import.meta.url);

/** A registry with a value in every family, the scrape-time ones read from fixed callbacks. */
function populated() {
  const m = createMetrics({
    podPredictions: () => ({
      local: [
        { pod: 'pod-a', seconds: 0.04 },
        { pod: 'pod-b', seconds: NaN },
      ],
      peerNodes: [{ node: 'node-2', seconds: 0.12 }],
    }),
    discoveryConnected: () => true,
    waiting: () => ({
      byPriority: { critical: 1, standard: 3, sheddable: 0 },
      byTenant: new Map([
        ['team-a', 2],
        ['team-b', 1],
        ['team-c', 1],
      ]),
    }),
    maxTenantLabels: 2,
    budgetUsage: () => [
      {
        tenant: 'team-a',
        states: [
          { scope: 'minute', usedTokens: 120, usedRequests: 3, remainingTokens: 880 },
          { scope: 'day/openai', usedTokens: 5000, usedRequests: 40, remainingRequests: 60 },
        ],
      },
    ],
    budgetLedger: () => ({ counters: 7, origins: 3, dropped: 2, synced: false }),
    localPodStates: () => ({ fresh: 2, stale: 1, unhealthy: 0 }),
    providerBreakers: () => [
      { provider: 'openai', state: 'closed' },
      { provider: 'bedrock', state: 'half-open' },
    ],
  });
  m.requests.add(3, 'chat', 'local', 'ok', 'llama', 'default');
  m.requests.inc({ api: 'embeddings', route: 'overflow', outcome: 'error', model: 'other', policy: 'none' });
  m.upstreamTtft.observe(0.07, 'local', 'true');
  m.upstreamTtft.observe(2.5, 'overflow', 'false');
  m.upstreamTtft.observe(40, 'local', 'true');
  m.predictionError.observe(0.15, 'true');
  m.podTtft.observe(0.05, 'pod-a', 'measured');
  m.podTtft.observe(0.045, 'pod-a', 'predicted');
  m.overflows.inc({ provider: 'openai', reason: 'over-slo' });
  m.budgetRefusals.inc({ tenant: 'team-b', reason: 'exhausted' }, 2);
  m.sloRequests.add(4, 'local', 'true', 'true');
  m.sloRequests.add(1, 'overflow', 'true', 'false');
  m.admissionCalibration.add(5, 'pod-a', 'true');
  m.prefixTokens.add(1024, 'prompt');
  m.prefixTokens.add(512, 'expected_cached');
  m.retries.inc();
  m.waits.inc({ outcome: 'timeout' });
  m.dropped.add(2, 'stale');
  m.providerRequests.inc({ provider: 'openai', outcome: 'ok' }, 6);
  m.scrapes.inc({ outcome: 'ok' }, 10);
  m.scrapes.inc({ outcome: 'implausible' });
  m.inFlight.inc();
  m.inFlight.inc();
  m.inFlight.dec();
  m.memoryReleases.inc();
  m.policyReloads.inc({ outcome: 'rejected' });
  m.classified.inc({ detector: 'email', tag: 'pii' });
  m.unidentified.inc({ reason: 'no-token' });
  m.peerPodsRejected.inc({ reason: 'address' });
  m.policiesRejected.inc({ reason: 'guardrail' });
  return m;
}

test('/metrics of a populated registry is the saved page, byte for byte', async () => {
  const page = await populated().registry.metrics();
  if (process.env.KINFERENCE_UPDATE_GOLDEN === '1') writeFileSync(GOLDEN, page);
  assert.equal(page, readFileSync(GOLDEN, 'utf8'));
});

test('every family on the page has a value: none left out of the comparison', async () => {
  const page = await populated().registry.metrics();
  const families = [...page.matchAll(/^# TYPE (\S+) /gm)].map((m) => m[1]);
  assert.ok(families.length >= 31, `${families.length} families`);
  for (const family of families)
    assert.match(page, new RegExp(`^${family}(_bucket|_sum|_count)?(\\{| )`, 'm'), `${family} has no series`);
});
