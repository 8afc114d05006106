// The agent as an operator runs it: `kinference agent --config FILE` in its own process.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { stringify } from 'yaml';
import { startSim, type SimServer } from '../shared/sim/server.ts';
import { runAgent } from './helpers/process.ts';
import { chatBody, MODEL, postJson, waitFor } from './helpers/stack.ts';

const MAIN = new URL('../agent/cli/main.ts', import.meta.url).pathname;

function baseConfig(sim: SimServer, extra: Record<string, unknown> = {}) {
  return {
    node: 'node-a',
    listen: { api: '127.0.0.1:0', admin: '127.0.0.1:0' },
    scrapeInterval: '50ms',
    pods: [{ name: 'pod-0', namespace: 'inference', address: new URL(sim.url).host, engine: 'vllm', models: [MODEL] }],
    ...extra,
  };
}

/** Waits until the agent at `admin` has counted one rejected config reload. */
async function rejectedReload(admin: string): Promise<void> {
  await waitFor(
    async () =>
      /kinference_policy_reloads_total\{outcome="rejected"\} 1/.test(await (await fetch(`${admin}/metrics`)).text()),
    3000,
    'the rejected reload',
  );
}

describe('kinference agent (process)', () => {
  let dir: string;
  let sim: SimServer;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'kinference-agent-'));
    sim = await startSim({ models: [MODEL] });
  });
  after(async () => {
    await sim.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('refuses a config with a wrong key or value, naming it, and exits non-zero', async () => {
    const path = join(dir, 'bad.yaml');
    writeFileSync(
      path,
      stringify({ ...baseConfig(sim), scrapeIntervall: '100ms', listen: { api: 'localhost', admin: '127.0.0.1:0' } }),
    );
    const child = spawn(process.execPath, [MAIN, 'agent', '--config', path], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d) => (stderr += d));
    const code = await new Promise((resolve) => child.on('exit', resolve));
    assert.equal(code, 1);
    assert.match(stderr, /scrapeIntervall: unexpected property/);
    assert.match(stderr, /listen\.api: expected host:port, found "localhost"/);
  });

  it('applies a changed policy without restart, and keeps the old one when the new file is bad', async () => {
    const path = join(dir, 'reload.yaml');
    const policy = (slo: string) => [{ metadata: { name: 'p', namespace: '*' }, spec: { slo: { ttft: slo } } }];
    writeFileSync(path, stringify(baseConfig(sim, { policies: policy('900ms') })));
    const agent = await runAgent(path);
    try {
      const slo = async () => {
        const e = (await (await fetch(`${agent.admin}/explain?model=${MODEL}&promptTokens=100000`)).json()) as {
          dropped: { detail: string }[];
        };
        return /SLO (\d+)ms/.exec(e.dropped[0]?.detail ?? '')?.[1];
      };
      await waitFor(async () => (await slo()) === '900', 3000, 'the first policy');
      writeFileSync(path, stringify(baseConfig(sim, { policies: policy('700ms') })));
      await waitFor(async () => (await slo()) === '700', 3000, 'the changed policy');
      writeFileSync(
        path,
        stringify(
          baseConfig(sim, { policies: [{ metadata: { name: 'p', namespace: '*' }, spec: { slo: { ttft: 'fast' } } }] }),
        ),
      );
      await rejectedReload(agent.admin);
      assert.equal(await slo(), '700');
      assert.match(
        agent.output(),
        /config change rejected, keeping the previous one: [\s\S]*spec\.slo\.ttft: expected a duration/,
      );
    } finally {
      agent.child.kill('SIGTERM');
      await agent.exited;
    }
  });

  it('applies changed platform detectors without restart, and refuses a backtracking one', async () => {
    const path = join(dir, 'detectors.yaml');
    const detectors = (spec: Record<string, unknown>) => [{ name: 'codename', tag: 'confidential', ...spec }];
    writeFileSync(path, stringify(baseConfig(sim, { detectors: detectors({ keywords: ['bluebird'] }) })));
    const agent = await runAgent(path);
    try {
      const tags = async (text: string) => {
        const e = (await (await postJson(`${agent.admin}/explain`, chatBody(text))).json()) as {
          classification: { tags: string[] };
        };
        return e.classification.tags;
      };
      assert.deepEqual(await tags('about bluebird'), ['confidential']);
      writeFileSync(path, stringify(baseConfig(sim, { detectors: detectors({ keywords: ['falcon'] }) })));
      await waitFor(async () => (await tags('about falcon')).includes('confidential'), 3000, 'the changed detector');
      assert.deepEqual(await tags('about bluebird'), []);
      writeFileSync(path, stringify(baseConfig(sim, { detectors: detectors({ pattern: '(a+)+$' }) })));
      await rejectedReload(agent.admin);
      assert.deepEqual(await tags('about falcon'), ['confidential']);
      assert.match(agent.output(), /detectors\[0\] \(codename\): pattern may take exponential time/);
    } finally {
      agent.child.kill('SIGTERM');
      await agent.exited;
    }
  });

  it('on SIGTERM stops taking requests, reports not ready, finishes the stream in flight, then exits 0', async () => {
    const path = join(dir, 'drain.yaml');
    writeFileSync(path, stringify(baseConfig(sim, { limits: { drainTimeout: '20s' } })));
    const agent = await runAgent(path);
    const response = await request(`${agent.api}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(chatBody('a long story', { stream: true, max_tokens: 120 })),
    });
    const iterator = response.body[Symbol.asyncIterator]();
    let text = Buffer.from((await iterator.next()).value).toString();

    agent.child.kill('SIGTERM');
    await waitFor(
      async () =>
        (await fetch(`${agent.admin}/readyz`).then(
          (r) => r.status,
          () => 0,
        )) !== 200,
      3000,
      'not ready',
    );
    const late = await postJson(`${agent.api}/v1/chat/completions`, chatBody()).then(
      (r) => r.status,
      () => 'refused',
    );
    assert.ok(late === 'refused' || late === 503, `a new request after SIGTERM got ${late}`);

    for (let next = await iterator.next(); !next.done; next = await iterator.next())
      text += Buffer.from(next.value).toString();
    assert.match(text, /data: \[DONE\]\n\n$/);
    assert.doesNotMatch(text, /"error"/);
    assert.equal(await agent.exited, 0);
    assert.match(agent.output(), /SIGTERM: draining/);
  });
});
