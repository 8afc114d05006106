// The default process and Node.js metrics are prom-client's (shared/prom-client.ts): the page must
// say what prom-client's collectDefaultMetrics says, in its order, and the CPU counters must count.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as promClient from 'prom-client';
import { collectDefaultMetrics, Registry } from '../shared/prom-client.ts';

/** Each line with its numbers masked (the values differ between two reads). */
const shape = (page: string) => page.replace(/\d+(\.\d+)?(e[-+]?\d+)?/g, 'N');

test("the default metrics are prom-client's own: the same series, help, types and order", async () => {
  const ours = new Registry();
  collectDefaultMetrics({ register: ours, prefix: 'kinference_' });
  const theirs = new promClient.Registry();
  promClient.collectDefaultMetrics({ register: theirs, prefix: 'kinference_' });
  assert.equal(shape(await ours.metrics()), shape(await theirs.metrics()));
});

test('the CPU counters count the CPU time spent, the total being user plus system', async () => {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: '' });
  const value = async (name: string) => (await registry.getSingleMetric(name)!.get()).values[0].value;
  await registry.metrics();
  const started = process.cpuUsage();
  let spin = 0;
  while (process.cpuUsage(started).user < 20_000) spin++;
  assert.ok(spin > 0);
  await registry.metrics();
  const [user, system, total] = [
    await value('process_cpu_user_seconds_total'),
    await value('process_cpu_system_seconds_total'),
    await value('process_cpu_seconds_total'),
  ];
  assert.ok(user >= 0.02, `user ${user} s`);
  assert.ok(Math.abs(total - (user + system)) < 1e-9, `${total} = ${user} + ${system}`);
});
