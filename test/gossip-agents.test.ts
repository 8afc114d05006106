// Cluster-wide routing through gossip, with agents as separate processes on loopback: a request
// arriving at a saturated node goes to a fast pod on another node; when that node dies, its pods
// stop being candidates within the TTL and no request fails because of it; forged datagrams are
// dropped and counted.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createSocket } from 'node:dgram';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gossipIdentities, peerKeysOf } from './helpers/gossip-keys.ts';
import { stringify } from 'yaml';
import type { Explanation } from '../agent/server/admin/explain.ts';
import { startSim, type SimServer } from '../shared/sim/server.ts';
import { freeUdpPort, runAgent, stopAgent, type AgentProcess } from './helpers/process.ts';
import { chatBody, MODEL, postJson, waitFor } from './helpers/stack.ts';

const KEY = 'test-gossip-key-0123456789abcdef';

describe('two agents sharing pod estimates over gossip', () => {
  let dir: string;
  const sims: Record<'a' | 'b', SimServer[]> = { a: [], b: [] };
  let agentA: AgentProcess;
  let agentB: AgentProcess;
  let gossipA: number;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'kinference-gossip-'));
    sims.a = [await startSim({ models: [MODEL], maxSeqs: 2, seed: 1 })];
    sims.b = [await startSim({ models: [MODEL], seed: 2 }), await startSim({ models: [MODEL], seed: 3 })];
    gossipA = await freeUdpPort();
    const gossipB = await freeUdpPort();
    const ids = gossipIdentities('node-a', 'node-b');
    const config = (node: 'a' | 'b', port: number, peer: number) => ({
      node: `node-${node}`,
      listen: { api: '127.0.0.1:0', admin: '127.0.0.1:0', gossip: `127.0.0.1:${port}` },
      scrapeInterval: '50ms',
      pods: sims[node].map((sim, i) => ({
        name: `${node}-pod-${i}`,
        namespace: 'inference',
        address: new URL(sim.url).host,
        engine: 'vllm',
        models: [MODEL],
      })),
      peers: [`127.0.0.1:${peer}`],
      gossip: {
        key: { env: 'KINFERENCE_GOSSIP_KEY' },
        interval: '100ms',
        ttl: '1500ms',
        identity: ids[`node-${node}`].identity,
        peerKeys: peerKeysOf(ids),
      },
      policies: [
        {
          metadata: { name: 'default', namespace: '*' },
          spec: { slo: { ttft: '3s' }, exclude: [{ metric: 'queued', above: 2, window: '1s' }], wait: { max: '3s' } },
        },
      ],
    });
    writeFileSync(join(dir, 'a.yaml'), stringify(config('a', gossipA, gossipB)));
    writeFileSync(join(dir, 'b.yaml'), stringify(config('b', gossipB, gossipA)));
    const env = { ...process.env, KINFERENCE_GOSSIP_KEY: KEY };
    [agentA, agentB] = await Promise.all([runAgent(join(dir, 'a.yaml'), env), runAgent(join(dir, 'b.yaml'), env)]);
  });
  after(async () => {
    await Promise.all([agentA && stopAgent(agentA), agentB && stopAgent(agentB)]);
    for (const sim of [...sims.a, ...sims.b]) await sim.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const explainA = async () => (await (await fetch(`${agentA.admin}/explain?model=${MODEL}`)).json()) as Explanation;
  const sendToA = async () => {
    const response = await postJson(
      `${agentA.api}/v1/chat/completions`,
      chatBody('hi', { stream: true, max_tokens: 4 }),
    );
    const text = await response.text();
    return { status: response.status, route: response.headers.get('x-kinference-route') ?? '', text };
  };

  it("sends node A's requests to node B's pods while A's own pod is saturated", async () => {
    await waitFor(
      async () => (await explainA()).candidates.filter((c) => c.pod.startsWith('peer/node-b/')).length === 2,
      5000,
      'B pods known at A',
    );
    // Outside traffic fills A's only pod: 2 running, 8 waiting.
    const held = Array.from({ length: 10 }, () => sims.a[0].engine.submit({ promptTokens: 100, maxTokens: 100_000 }));
    await waitFor(
      async () => (await explainA()).dropped.some((d) => d.pod === 'local/a-pod-0' && d.reason === 'excluded'),
      3000,
      'A pod excluded',
    );
    for (let i = 0; i < 6; i++) {
      const r = await sendToA();
      assert.equal(r.status, 200);
      assert.match(r.route, /^peer\/node-b\/b-pod-[01]$/);
      assert.match(r.text, /data: \[DONE\]/);
    }
    for (const h of held) if (h.accepted) h.seq.abort();
    await waitFor(async () => (await sendToA()).route === 'local/a-pod-0', 5000, 'A to use its own pod again');
  });

  it("stops choosing B's pods within the TTL after B dies, and no request fails because of it", async () => {
    await stopAgent(agentB, 'SIGKILL');
    for (const sim of sims.b) await sim.close();
    const died = Date.now();
    const statuses: number[] = [];
    // Requests keep flowing while B's estimates are still fresh at A: a dead peer pod fails before
    // its first byte, so the request is retried on A's pod.
    while (
      (await explainA()).candidates.some((c) => c.pod.startsWith('peer/')) ||
      (await explainA()).dropped.some((d) => d.pod.startsWith('peer/') && d.reason !== 'stale')
    ) {
      statuses.push((await sendToA()).status);
      assert.ok(Date.now() - died < 1500 + 1500, 'B aged out within the TTL and a round');
      await new Promise((r) => setTimeout(r, 50));
    }
    for (let i = 0; i < 3; i++) statuses.push((await sendToA()).status);
    assert.ok(
      statuses.every((s) => s === 200),
      statuses.join(' '),
    );
  });

  it('drops and counts a forged datagram', async () => {
    const socket = createSocket('udp4');
    const forged = Buffer.concat([Buffer.from([0x0a, 0x06]), Buffer.from('node-b'), Buffer.alloc(64, 7)]);
    await new Promise<void>((resolve, reject) =>
      socket.send(forged, gossipA, '127.0.0.1', (e) => (e ? reject(e) : resolve())),
    );
    socket.close();
    await waitFor(
      async () =>
        /kinference_gossip_dropped_total\{reason="(forged|malformed)"\} [1-9]/.test(
          await (await fetch(`${agentA.admin}/metrics`)).text(),
        ),
      3000,
      'the forged datagram to be counted',
    );
  });
});
