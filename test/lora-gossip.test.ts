// LoRA residency across nodes through gossip alone: two agents on loopback, each scraping only its
// own pods, gossip which adapters each pod holds (signed with the rest of the pod entry); a
// request for adapter A arriving at node A goes to the pod on node B that holds A, not to B's pod
// that serves A without holding it, nor to A's own pod, which would have to load it. The wire's
// bounds hold against a peer that says too much.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Explanation } from '../agent/server/admin/explain.ts';
import { decodePayload, encodePayload, type PodEntryWire } from '../agent/gossip/wire.ts';
import { entryOf, estimateOf, makeRecord, newOrigin } from '../agent/gossip/records.ts';
import { startSim, type SimServer } from '../shared/sim/server.ts';
import { gossipIdentities, peerKeysOf } from './helpers/gossip-keys.ts';
import { freeUdpPort } from './helpers/process.ts';
import { chatBody, MODEL, postJson, startStack, waitFor, type Stack } from './helpers/stack.ts';
import type { PodEstimate } from '../agent/types.ts';

const ADAPTERS = ['sql-lora', 'chat-lora'];
const KEY = 'test-gossip-key-0123456789abcdef';

describe('LoRA residency through gossip', () => {
  let a: Stack;
  let b: Stack;
  const sims: SimServer[] = [];

  before(async () => {
    process.env.KINFERENCE_LORA_GOSSIP_KEY = KEY;
    for (let i = 0; i < 3; i++)
      sims.push(await startSim({ models: [MODEL], adapters: ADAPTERS, maxLoras: 1, seed: 40 + i }));
    // B's pod 1 holds sql-lora; B's pod 0 and A's pod chat-lora (one slot each): as their gauges will say.
    for (const [sim, adapter] of [
      [sims[2], 'sql-lora'],
      [sims[1], 'chat-lora'],
      [sims[0], 'chat-lora'],
    ] as const) {
      const res = await postJson(`${sim.url}/v1/chat/completions`, { ...chatBody(), model: adapter });
      assert.equal(res.status, 200);
      await res.text();
    }
    const [portA, portB] = [await freeUdpPort(), await freeUdpPort()];
    const ids = gossipIdentities('node-a', 'node-b');
    const config = (node: 'a' | 'b', port: number, peer: number, pods: SimServer[]) => ({
      node: `node-${node}`,
      listen: { api: '127.0.0.1:0', admin: '127.0.0.1:0', gossip: `127.0.0.1:${port}` },
      pods: pods.map((sim, i) => ({
        name: `${node}-pod-${i}`,
        namespace: 'inference',
        address: new URL(sim.url).host,
        engine: 'vllm',
        models: [MODEL],
        adapters: ADAPTERS,
      })),
      peers: [`127.0.0.1:${peer}`],
      gossip: {
        key: { env: 'KINFERENCE_LORA_GOSSIP_KEY' },
        interval: '100ms',
        ttl: '3s',
        identity: ids[`node-${node}`].identity,
        peerKeys: peerKeysOf(ids),
      },
      // Loading an adapter costs more here than crossing to another node.
      limits: { loraLoad: '1s' },
      policies: [
        {
          metadata: { name: 'default', namespace: '*' },
          spec: { slo: { ttft: '10s' }, exclude: [], wait: { max: '2s' } },
        },
      ],
    });
    [a, b] = await Promise.all([
      startStack({ pods: [], config: config('a', portA, portB, [sims[0]]) }),
      startStack({ pods: [], config: config('b', portB, portA, [sims[1], sims[2]]) }),
    ]);
  });
  after(async () => {
    await Promise.all([a?.close(), b?.close()]);
    for (const sim of sims) await sim.close();
  });

  const explainA = async (model: string) =>
    (await (await fetch(`${a.admin}/explain?model=${model}`)).json()) as Explanation;

  it("sends node A's requests for an adapter to node B's pod that holds it", async () => {
    await waitFor(
      async () => (await explainA(MODEL)).candidates.filter((c) => c.pod.startsWith('peer/node-b/')).length === 2,
      8000,
      "B's pods known at A",
    );
    // Of B's pods only the one holding sql-lora is a candidate for it; both serve the base model.
    await waitFor(
      async () => (await explainA('sql-lora')).candidates.some((c) => c.pod === 'peer/node-b/b-pod-1'),
      8000,
      "B's pod 1 holding sql-lora, known at A",
    );
    const peers = (await explainA('sql-lora')).candidates.map((c) => c.pod).filter((p) => p.startsWith('peer/'));
    assert.deepEqual(peers, ['peer/node-b/b-pod-1']);
    for (let i = 0; i < 4; i++) {
      const res = await postJson(`${a.api}/v1/chat/completions`, {
        ...chatBody('hi', { max_tokens: 2 }),
        model: 'sql-lora',
      });
      await res.text();
      assert.equal(res.status, 200);
      assert.equal(res.headers.get('x-kinference-route'), 'peer/node-b/b-pod-1');
    }
  });
});

describe('LoRA fields on the gossip wire', () => {
  const estimate = (resident: string[], running: string[] = []): PodEstimate => ({
    pod: {
      uid: 'inference/p',
      name: 'p',
      namespace: 'inference',
      node: 'n',
      address: '10.0.0.1:8000',
      models: [MODEL, ...resident],
      adapters: resident,
    },
    queued: 0,
    queuedNow: 0,
    running: 0,
    kvCache: 0.1,
    params: { base: 20, perQueued: 5, perRunning: 1, perKPromptTokens: 3 },
    at: 1_000,
    origin: 'n',
    version: 1,
    lora: { maxLora: 4, resident, running, waiting: [] },
  });
  const roundTrip = (entry: PodEntryWire) =>
    decodePayload(
      encodePayload({
        deltas: [
          {
            origin: 7,
            from: 1,
            to: 2,
            ageMs: 0,
            node: '',
            incarnation: 0,
            floor: 0,
            continuesFull: false,
            agent: '',
            pods: [entry],
          },
        ],
      }),
    ).deltas[0].pods[0];

  it('carries the resident adapters and which run, and a receiver sees the pod serve them', () => {
    const entry = roundTrip(entryOf(estimate(['sql-lora', 'chat-lora'], ['chat-lora']), 1, 2, 0));
    assert.equal(entry.maxLora, 4);
    assert.deepEqual(entry.loraResident, ['sql-lora', 'chat-lora']);
    assert.deepEqual(entry.loraRunning, [1]);
    const origin = newOrigin(7, 'n', '', 0, 0);
    const info = {
      uid: '',
      name: 'p',
      namespace: 'inference',
      node: '',
      address: '10.0.0.1:8000',
      models: [MODEL],
      engine: 1,
    };
    const seen = estimateOf(origin, makeRecord(entry, info, 1), 0);
    assert.deepEqual(seen.pod.models, [MODEL, 'sql-lora', 'chat-lora']);
    assert.deepEqual(seen.lora, {
      maxLora: 4,
      resident: ['sql-lora', 'chat-lora'],
      running: ['chat-lora'],
      waiting: [],
    });
  });

  it('sends at most 16 names of at most 128 characters, most recently used first', () => {
    const many = Array.from({ length: 40 }, (_, i) => `adapter-${i}`);
    const entry = entryOf(estimate(['x'.repeat(129), ...many], ['adapter-39']), 1, 2, 0);
    assert.deepEqual(entry.loraResident, many.slice(0, 16));
    assert.deepEqual(entry.loraRunning, []);
  });

  it('refuses a datagram that says too much', () => {
    const base = entryOf(estimate(['a']), 1, 2, 0);
    for (const bad of [
      { ...base, loraResident: Array.from({ length: 17 }, (_, i) => `a${i}`) },
      { ...base, loraResident: ['y'.repeat(129)] },
      { ...base, loraRunning: [3] },
      { ...base, maxLora: 0 },
      { ...base, maxLora: 5000 },
    ])
      assert.throws(() => roundTrip(bad), /LoRA|max_lora/);
  });
});
