// The request path's hot metrics (agent/server/observability/metrics.ts) keep their series outside prom-client
// and hand them over when read: the exposition must be exactly what prom-client's own Counter and
// Histogram print for the same observations.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Counter, Histogram, Registry } from 'prom-client';
import { HotCounter, HotGauge, HotHistogram } from '../agent/server/observability/hot-metrics.ts';

const BUCKETS = [0.005, 0.01, 0.1, 1, 5];

test('a hot histogram prints exactly what a prom-client histogram prints', async () => {
  const mine = new Registry();
  const theirs = new Registry();
  const hot = new HotHistogram(mine, 'x_seconds', 'help text', ['route', 'stream'], BUCKETS);
  const reference = new Histogram({
    name: 'x_seconds',
    help: 'help text',
    labelNames: ['route', 'stream'],
    buckets: BUCKETS,
    registers: [theirs],
  });
  const observations: [number, string, string][] = [
    [0.004, 'local', 'true'],
    [0.005, 'local', 'true'], // on a bound: counted in it
    [0.5, 'peer', 'false'],
    [7, 'local', 'true'], // above every bound: +Inf only
    [0.0101, 'overflow', 'false'],
    [1, 'peer', 'false'],
  ];
  for (const [v, route, stream] of observations) {
    hot.observe(v, route, stream);
    reference.observe({ route, stream }, v);
  }
  assert.equal(await mine.metrics(), await theirs.metrics());
  assert.deepEqual(await hot.get(), await reference.get());
});

test('a hot counter prints what a prom-client counter prints, and counts added after a read are not lost', async () => {
  const mine = new Registry();
  const theirs = new Registry();
  const hot = new HotCounter(mine, 'r_total', 'help', ['api', 'route', 'outcome', 'model', 'policy']);
  const reference = new Counter({
    name: 'r_total',
    help: 'help',
    labelNames: ['api', 'route', 'outcome', 'model', 'policy'],
    registers: [theirs],
  });
  const both = (api: string, route: string, outcome: string, model: string, policy: string, n = 1) => {
    hot.add(n, api, route, outcome, model, policy);
    reference.inc({ api, route, outcome, model, policy }, n);
  };
  both('chat', 'local', 'ok', 'm', 'p');
  both('chat', 'local', 'ok', 'm', 'p');
  both('embeddings', 'rejected', '404', 'none', 'none');
  assert.equal(await mine.metrics(), await theirs.metrics());
  both('chat', 'local', 'ok', 'm', 'p', 3);
  both('chat', 'peer', 'ok', 'm', 'p');
  hot.inc({ api: 'chat', route: 'peer', outcome: 'ok', model: 'm', policy: 'p' });
  reference.inc({ api: 'chat', route: 'peer', outcome: 'ok', model: 'm', policy: 'p' });
  assert.equal(await mine.metrics(), await theirs.metrics());
  assert.match(await mine.metrics(), /r_total\{api="chat",route="local",outcome="ok",model="m",policy="p"\} 5/);
});

test('a hot gauge reads its current value', async () => {
  const registry = new Registry();
  const gauge = new HotGauge(registry, 'in_flight', 'help');
  gauge.inc();
  gauge.inc();
  gauge.dec();
  assert.match(await registry.metrics(), /^in_flight 1$/m);
});
