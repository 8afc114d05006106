// Requests never loop between agents. A gossiped "pod" at another agent's API address (a key
// holder can announce one, and static mode's default ranges are the peers' own IPs) once turned
// one client request into hundreds bouncing between two agents. Each agent now says how many
// agents a request has passed through (x-kinference-hops), refuses one that has passed through
// too many, and never takes its own API address for a pod.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { GossipNode } from '../agent/gossip/node.ts';
import type { PodEstimate } from '../agent/types.ts';
import { gossipIdentities } from './helpers/gossip-keys.ts';
import { freeUdpPort } from './helpers/process.ts';
import { chatBody, MODEL, postJson, startStack, waitFor, type Stack } from './helpers/stack.ts';

const ids = gossipIdentities('node-r');
const KEY = 'test-gossip-key-request-loop-0123456789';

function fakePod(name: string, address: string): PodEstimate {
  return {
    pod: { uid: `node-r/${name}`, name, namespace: 'inference', node: 'node-r', address, models: [MODEL] },
    queued: 0,
    queuedNow: 0,
    running: 0,
    kvCache: 0,
    // Idle and fast: the best candidate there is.
    params: { base: 0.1, perQueued: 0, perRunning: 0, perKPromptTokens: 0 },
    at: Date.now(),
    origin: 'node-r',
    version: 0,
  };
}

async function requestsServed(stack: Stack): Promise<number> {
  const page = await (await fetch(`${stack.admin}/metrics`)).text();
  let total = 0;
  for (const m of page.matchAll(/^kinference_requests_total\{[^}]*\} (\d+)/gm)) total += Number(m[1]);
  return total;
}

describe('the hop header, on one agent', () => {
  let stack: Stack;
  before(async () => {
    stack = await startStack();
  });
  after(async () => stack?.close());

  it('refuses a request that has already passed through two agents (508), and an unreadable count (400)', async () => {
    const looped = await fetch(`${stack.api}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-kinference-hops': '2' },
      body: JSON.stringify(chatBody('hello', { max_tokens: 2 })),
    });
    assert.equal(looped.status, 508);
    assert.equal(((await looped.json()) as { error: { code: string } }).error.code, 'loop_detected');
    const garbled = await fetch(`${stack.api}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-kinference-hops': 'many' },
      body: JSON.stringify(chatBody('hello', { max_tokens: 2 })),
    });
    assert.equal(garbled.status, 400);
    await garbled.arrayBuffer();
  });

  it('forwards a request that passed through one agent once more, and tells the pod it did', async () => {
    const once = await fetch(`${stack.api}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-kinference-hops': '1' },
      body: JSON.stringify(chatBody('hello', { max_tokens: 2 })),
    });
    assert.equal(once.status, 200);
    await once.arrayBuffer();
  });
});

describe('two agents, each announced as a pod to the other', () => {
  let a: Stack;
  let b: Stack;
  let rogue: GossipNode;

  before(async () => {
    const [gossipA, gossipB, gossipR] = [await freeUdpPort(), await freeUdpPort(), await freeUdpPort()];
    process.env.KINFERENCE_TEST_LOOP_KEY = KEY;
    const config = (port: number) => ({
      listen: { api: '127.0.0.1:0', admin: '127.0.0.1:0', gossip: `127.0.0.1:${port}` },
      peers: [`127.0.0.1:${gossipR}`],
      gossip: {
        key: { env: 'KINFERENCE_TEST_LOOP_KEY' },
        interval: '50ms',
        ttl: '2s',
        peerPodCidrs: ['127.0.0.1/32'],
        // The sender of the decoys is a compromised agent: trusted, for its own origin only.
        peerKeys: [ids['node-r'].peerKey],
      },
      policies: [
        {
          metadata: { name: 'default', namespace: '*' },
          spec: { slo: { ttft: '5s' }, exclude: [{ metric: 'queued', above: 0.5, window: '1s' }], wait: { max: '1s' } },
        },
      ],
    });
    // Each agent's one local pod is down: its only candidate is the "pod" at the other's API address.
    const down = [{ name: 'down', address: '127.0.0.1:9' }];
    a = await startStack({ node: 'node-a', pods: [], extraPods: down, config: config(gossipA) });
    b = await startStack({ node: 'node-b', pods: [], extraPods: down, config: config(gossipB) });
    rogue = new GossipNode({
      nodeId: 'node-r',
      bind: `127.0.0.1:${gossipR}`,
      peers: [`127.0.0.1:${gossipA}`, `127.0.0.1:${gossipB}`],
      key: Buffer.from(KEY),
      signer: ids['node-r'].signer,
      intervalMs: 50,
      ttlMs: 2000,
    });
    await rogue.start();
    const publish = () =>
      rogue.publishLocal([fakePod('agent-a', new URL(a.api).host), fakePod('agent-b', new URL(b.api).host)]);
    publish();
    setInterval(publish, 50).unref();
  });
  after(async () => {
    await rogue?.stop();
    await a?.close();
    await b?.close();
  });

  it('one client request is seen by at most three agents, not bounced between them', async () => {
    const target = async (s: Stack) =>
      ((await (await fetch(`${s.admin}/explain?model=${MODEL}`)).json()) as { target: string }).target;
    await waitFor(
      async () => (await target(a)) === 'peer/node-r/agent-b' && (await target(b)) === 'peer/node-r/agent-a',
      5000,
      "each agent's API address to look like the other's best pod",
    );
    // A never takes its own address for a pod.
    const state = (await (await fetch(`${a.admin}/debug/state`)).json()) as {
      peerPodsRejected: { uid: string; reason: string }[];
    };
    assert.deepEqual(
      state.peerPodsRejected.map((r) => [r.uid, r.reason]),
      [['node-r/agent-a', 'agent-address']],
    );
    const before = (await requestsServed(a)) + (await requestsServed(b));
    const response = await postJson(`${a.api}/v1/chat/completions`, chatBody('hello', { max_tokens: 2 }));
    await response.arrayBuffer();
    await waitFor(
      async () => (await requestsServed(a)) + (await requestsServed(b)) - before >= 2,
      5000,
      'both agents to count the request',
    );
    const seen = (await requestsServed(a)) + (await requestsServed(b)) - before;
    assert.ok(seen <= 3, `one client request was served ${seen} times by the two agents`);
  });
});
