// Fair waiting when demand is five times the capacity and neither tenant may leave the cluster:
// tenant "heavy" sends ten requests for each of tenant "light"'s, and light (far under half the
// capacity) is still served nearly always: with one agent and a waiting line kept full by heavy,
// and with three agents whose pods one agent shares out.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { startSim, type SimServer } from '../shared/sim/server.ts';
import { freeUdpPort, runAgent, stopAgent, type AgentProcess } from './helpers/process.ts';
import { chatBody, MODEL, postJson, startStack, waitFor, type Stack } from './helpers/stack.ts';
import { gossipIdentities, peerKeysOf } from './helpers/gossip-keys.ts';

const POLICY = {
  metadata: { name: 'default', namespace: '*' },
  spec: { slo: { ttft: '60s' }, exclude: [], wait: { max: '4s' } },
};

interface Tally {
  sent: number;
  served: number;
  statuses: Map<number, number>;
}

/**
 * Open-loop load on `api` for `seconds`: heavy every 100 ms, light every second (non-streamed,
 * `maxTokens` each); resolves once every answer is in.
 */
async function heavyAndLight(
  api: string,
  seconds: number,
  maxTokens: number,
): Promise<Record<'heavy' | 'light', Tally>> {
  const tally = {
    heavy: { sent: 0, served: 0, statuses: new Map<number, number>() },
    light: { sent: 0, served: 0, statuses: new Map<number, number>() },
  };
  const answers: Promise<void>[] = [];
  const send = (tenant: 'heavy' | 'light') => {
    const t = tally[tenant];
    t.sent++;
    answers.push(
      postJson(`${api}/v1/chat/completions`, chatBody('hi', { max_tokens: maxTokens }), {
        'x-kinference-tenant': tenant,
      }).then(async (res) => {
        await res.arrayBuffer();
        t.statuses.set(res.status, (t.statuses.get(res.status) ?? 0) + 1);
        if (res.status === 200) t.served++;
      }),
    );
  };
  for (let tick = 0; tick < seconds * 10; tick++) {
    send('heavy');
    if (tick % 10 === 5) send('light');
    await new Promise((r) => setTimeout(r, 100));
  }
  await Promise.all(answers);
  return tally;
}

const show = (t: Tally) => `${t.served}/${t.sent} served (${[...t.statuses].map(([s, n]) => `${s}: ${n}`).join(', ')})`;

describe('one agent, one pod, a waiting line kept full by the heavy tenant', () => {
  let stack: Stack;
  before(async () => {
    stack = await startStack({
      pods: [{ maxSeqs: 4 }],
      config: { limits: { maxConnectionsPerPod: 1, maxWaiting: 5 }, policies: [POLICY] },
    });
  });
  after(() => stack.close());

  it('serves the light tenant at least 90% of the time', async () => {
    const { heavy, light } = await heavyAndLight(stack.api, 10, 30);
    assert.ok(light.served >= 0.9 * light.sent, `light: ${show(light)}; heavy: ${show(heavy)}`);
    assert.ok((heavy.statuses.get(429) ?? 0) > heavy.sent / 2, `the line was full: heavy ${show(heavy)}`);
  });
});

describe('three agents, one small pod each, every request at one agent', () => {
  const KEY = 'test-gossip-key-0123456789abcdef';
  let dir: string;
  let sims: SimServer[];
  let agents: AgentProcess[];

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'kinference-fair-'));
    sims = await Promise.all([0, 1, 2].map((i) => startSim({ models: [MODEL], maxSeqs: 4, seed: i + 1 })));
    const ports = await Promise.all(sims.map(() => freeUdpPort()));
    const names = ['node-a', 'node-b', 'node-c'];
    const ids = gossipIdentities(...names);
    names.forEach((node, i) => {
      const config = {
        node,
        listen: { api: '127.0.0.1:0', admin: '127.0.0.1:0', gossip: `127.0.0.1:${ports[i]}` },
        scrapeInterval: '50ms',
        pods: [
          {
            name: `${node}-pod`,
            namespace: 'inference',
            address: new URL(sims[i].url).host,
            engine: 'vllm',
            models: [MODEL],
          },
        ],
        peers: ports.filter((_, k) => k !== i).map((p) => `127.0.0.1:${p}`),
        gossip: {
          key: { env: 'KINFERENCE_GOSSIP_KEY' },
          interval: '100ms',
          identity: ids[node].identity,
          peerKeys: peerKeysOf(ids),
        },
        limits: { maxConnectionsPerPod: 1 },
        policies: [POLICY],
      };
      writeFileSync(join(dir, `${node}.yaml`), stringify(config));
    });
    const env = { ...process.env, KINFERENCE_GOSSIP_KEY: KEY };
    agents = await Promise.all(names.map((node) => runAgent(join(dir, `${node}.yaml`), env)));
    await waitFor(
      async () => {
        const e = (await (await fetch(`${agents[0].admin}/explain?model=${MODEL}`)).json()) as {
          candidates: unknown[];
        };
        return e.candidates.length === 3;
      },
      15_000,
      "the other agents' pods known at the first",
    );
  });
  after(async () => {
    await Promise.all((agents ?? []).map((a) => stopAgent(a)));
    for (const s of sims ?? []) await s.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('serves the light tenant at least 90% of the time', async () => {
    const { heavy, light } = await heavyAndLight(agents[0].api, 10, 90);
    assert.ok(light.served >= 0.9 * light.sent, `light: ${show(light)}; heavy: ${show(heavy)}`);
    assert.ok(heavy.served < heavy.sent / 2, `demand was well over capacity: heavy ${show(heavy)}`);
  });
});
