// A node holding the shared gossip key announces pods. The agent believes an announcement only
// about a pod the cluster vouches for (static mode: an address inside gossip.peerPodCidrs) with
// plausible numbers; a "pod" anywhere else never receives a request, however fast it claims to be.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { GossipNode } from '../agent/gossip/node.ts';
import { peerPodScreen } from '../agent/cluster/peer-pods.ts';
import type { PodEstimate } from '../agent/types.ts';
import { startSim, type SimServer } from '../shared/sim/server.ts';
import { gossipIdentities } from './helpers/gossip-keys.ts';
import { freeUdpPort } from './helpers/process.ts';
import { chatBody, MODEL, postJson, startStack, waitFor, type Stack } from './helpers/stack.ts';

const ids = gossipIdentities('node-r');
const KEY = 'test-gossip-key-peer-pods-0123456789';

function estimate(node: string, name: string, address: string, over: Partial<PodEstimate> = {}): PodEstimate {
  return {
    pod: { uid: `${node}/${name}`, name, namespace: 'inference', node, address, models: [MODEL], engine: 'vllm' },
    queued: 0,
    queuedNow: 0,
    running: 0,
    kvCache: 0.1,
    params: { base: 5, perQueued: 10, perRunning: 1, perKPromptTokens: 1 },
    at: Date.now(),
    origin: node,
    version: 0,
    ...over,
  };
}

describe('gossiped pods must be pods the cluster knows', () => {
  let stack: Stack;
  let legit: SimServer;
  // Any connection to the decoy address counts: a request sent there at all is the leak.
  let decoy: Server;
  let decoyHits = 0;
  let decoyHost = '';
  let rogue: GossipNode;

  before(async () => {
    legit = await startSim({ models: [MODEL], seed: 21, name: 'legit' });
    // Same loopback network, another address: outside the declared range.
    decoy = createServer((_req, res) => {
      decoyHits++;
      res.writeHead(500).end();
    });
    await new Promise<void>((resolve) => decoy.listen(0, '127.0.0.2', resolve));
    decoyHost = `127.0.0.2:${(decoy.address() as AddressInfo).port}`;
    const agentPort = await freeUdpPort();
    const roguePort = await freeUdpPort();
    process.env.KINFERENCE_TEST_GOSSIP_KEY = KEY;
    stack = await startStack({
      pods: [{ maxSeqs: 1 }],
      config: {
        listen: { api: '127.0.0.1:0', admin: '127.0.0.1:0', gossip: `127.0.0.1:${agentPort}` },
        peers: [`127.0.0.1:${roguePort}`],
        gossip: {
          key: { env: 'KINFERENCE_TEST_GOSSIP_KEY' },
          interval: '50ms',
          ttl: '2s',
          peerPodCidrs: ['127.0.0.1/32'],
          // The sender of the decoys is a compromised agent: trusted, for its own origin only.
          peerKeys: [ids['node-r'].peerKey],
        },
        policies: [
          {
            metadata: { name: 'default', namespace: '*' },
            spec: {
              slo: { ttft: '5s' },
              exclude: [{ metric: 'queued', above: 0.5, window: '1s' }],
              wait: { max: '2s' },
            },
          },
        ],
      },
    });
    rogue = new GossipNode({
      nodeId: 'node-r',
      bind: `127.0.0.1:${roguePort}`,
      peers: [`127.0.0.1:${agentPort}`],
      key: Buffer.from(KEY),
      signer: ids['node-r'].signer,
      intervalMs: 50,
      ttlMs: 2000,
    });
    await rogue.start();
    const publish = () =>
      rogue.publishLocal([
        estimate('node-r', 'legit', new URL(legit.url).host),
        // The decoy claims to be idle and fast: a router that believed it would pick it first.
        estimate('node-r', 'decoy', decoyHost, {
          params: { base: 0.1, perQueued: 0, perRunning: 0, perKPromptTokens: 0 },
        }),
      ]);
    publish();
    const timer = setInterval(publish, 50);
    timer.unref();
    // The local pod is saturated by traffic the agent never sees.
    for (let i = 0; i < 4; i++) stack.sims[0].engine.submit({ promptTokens: 50, maxTokens: 10_000_000 });
  });
  after(async () => {
    await rogue?.stop();
    await stack?.close();
    await legit?.close();
    await new Promise((resolve) => decoy?.close(resolve));
  });

  it('no request goes to a pod at an address outside the declared ranges; the legit peer pod serves them', async () => {
    await waitFor(
      async () => {
        const metrics = await (await fetch(`${stack.admin}/metrics`)).text();
        return /kinference_peer_pods_rejected_total\{reason="outside-cidrs"\} 1/.test(metrics);
      },
      5000,
      'the decoy to be rejected',
    );
    await waitFor(
      async () => {
        const e = (await (await fetch(`${stack.admin}/explain?model=${MODEL}`)).json()) as {
          action: string;
          target: string;
        };
        return e.action === 'pod' && e.target === 'peer/node-r/legit';
      },
      5000,
      'the legit peer pod to be chosen',
    );
    for (let i = 0; i < 8; i++) {
      const response = await postJson(`${stack.api}/v1/chat/completions`, chatBody('hello', { max_tokens: 2 }));
      await response.arrayBuffer();
      assert.equal(response.headers.get('x-kinference-route'), 'peer/node-r/legit');
    }
    assert.equal(decoyHits, 0);
    const state = (await (await fetch(`${stack.admin}/debug/state`)).json()) as {
      peerPodsRejected: { uid: string; reason: string }[];
    };
    assert.deepEqual(
      state.peerPodsRejected.map((r) => [r.uid, r.reason]),
      [['node-r/decoy', 'outside-cidrs']],
    );
  });
});

describe('peer pod screening (pure)', () => {
  const pods = new Map([['10.0.2.5', { namespace: 'inference', name: 'vllm-0', node: 'node-b' }]]);
  const screen = peerPodScreen({ kind: 'cluster', pods });
  const reasons = (e: PodEstimate) => screen([e]).rejected.map((r) => r.reason);

  it('accepts a pod the API knows at that IP, in that namespace, announced by its own node', () => {
    assert.deepEqual(reasons(estimate('node-b', 'vllm-0', '10.0.2.5:8000')), []);
  });
  it("rejects unknown addresses, another namespace, and a node speaking for another node's pod", () => {
    assert.deepEqual(reasons(estimate('node-b', 'x', '10.9.9.9:8000')), ['unknown-address']);
    assert.deepEqual(
      reasons({
        ...estimate('node-b', 'vllm-0', '10.0.2.5:8000'),
        pod: { ...estimate('node-b', 'vllm-0', '10.0.2.5:8000').pod, namespace: 'finance' },
      }),
      ['wrong-namespace'],
    );
    assert.deepEqual(reasons(estimate('node-c', 'vllm-0', '10.0.2.5:8000')), ['wrong-node']);
  });
  it('rejects implausible numbers: negative costs, NaN, absurd queues', () => {
    const ok = estimate('node-b', 'vllm-0', '10.0.2.5:8000');
    assert.deepEqual(reasons({ ...ok, params: { ...ok.params, base: -50 } }), ['bad-estimate']);
    assert.deepEqual(reasons({ ...ok, queued: Number.NaN }), ['bad-estimate']);
    assert.deepEqual(reasons({ ...ok, running: 1e9 }), ['bad-estimate']);
    assert.deepEqual(reasons({ ...ok, kvCache: 3 }), ['bad-estimate']);
    assert.deepEqual(reasons({ ...ok, kvCache: Number.POSITIVE_INFINITY }), ['bad-estimate']);
  });
  it('accepts a TGI pod whose KV use is not reported (NaN: unknown, not bad)', () => {
    const tgi = estimate('node-b', 'vllm-0', '10.0.2.5:8000', { kvCache: Number.NaN });
    assert.deepEqual(reasons({ ...tgi, pod: { ...tgi.pod, engine: 'tgi' } }), []);
  });
  it("never routes to an agent's own API address, whatever the rules allow", () => {
    const apis = new Set(['10.0.2.5:8080']);
    const cidrs = peerPodScreen({ kind: 'cidrs', cidrs: ['10.0.0.0/8'] }, apis);
    assert.deepEqual(
      cidrs([estimate('node-b', 'loop', '10.0.2.5:8080')]).rejected.map((r) => r.reason),
      ['agent-address'],
    );
    assert.equal(cidrs([estimate('node-b', 'vllm-0', '10.0.2.5:8000')]).accepted.length, 1);
  });
  it('without rules nothing is routable (fail closed); CIDRs cover IPv4 and IPv6', () => {
    assert.deepEqual(
      peerPodScreen(undefined)([estimate('n', 'p', '10.0.0.1:1')]).rejected.map((r) => r.reason),
      ['no-rules'],
    );
    const cidrs = peerPodScreen({ kind: 'cidrs', cidrs: ['10.244.0.0/16', 'fd00::/64'] });
    assert.equal(
      cidrs([estimate('n', 'p', '10.244.3.4:8000'), estimate('n', 'q', '[fd00::7]:8000')]).accepted.length,
      2,
    );
    assert.deepEqual(
      cidrs([estimate('n', 'p', '10.245.0.1:8000')]).rejected.map((r) => r.reason),
      ['outside-cidrs'],
    );
  });
});
