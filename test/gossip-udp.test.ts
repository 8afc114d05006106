import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { GossipNode } from '../agent/gossip/node.ts';
import { podEstimates } from './fixtures/gossip-estimates.ts';
import { waitFor } from './helpers/wait.ts';

const KEY = Buffer.alloc(32, 0x11);
const INTERVAL_MS = 50;
const TTL_MS = 600;

const nodes: GossipNode[] = [];
after(async () => {
  for (const n of nodes) await n.stop();
});

const origins = (n: GossipNode) => new Set(n.remoteEstimates().map((e) => e.origin));

test('three agents on loopback converge, and a stopped one’s pods disappear within its TTL and a round', async () => {
  for (const name of ['node-a', 'node-b', 'node-c']) {
    const n = new GossipNode({
      nodeId: name,
      bind: '127.0.0.1:0',
      peers: [],
      key: KEY,
      intervalMs: INTERVAL_MS,
      ttlMs: TTL_MS,
    });
    await n.start();
    nodes.push(n);
  }
  const addresses = nodes.map((n) => n.address());
  for (const n of nodes) n.setPeers(addresses);
  const [a, b, c] = nodes;
  let changes = 0;
  a.onChange(() => changes++);
  a.publishLocal(podEstimates('node-a', 3, {}, Date.now()));
  b.publishLocal(podEstimates('node-b', 2, {}, Date.now()));
  c.publishLocal(podEstimates('node-c', 4, {}, Date.now()));

  // Each holds the others' pods: a sees 2 + 4, b sees 3 + 4, c sees 3 + 2.
  await waitFor(
    () => a.remoteEstimates().length === 6 && b.remoteEstimates().length === 7 && c.remoteEstimates().length === 5,
    5000,
    'convergence',
  );
  assert.ok(changes > 0, 'onChange fired');
  const fromC = a.remoteEstimates().filter((e) => e.origin === 'node-c');
  assert.deepEqual(
    fromC.map((e) => e.pod.name).sort(),
    podEstimates('node-c', 4)
      .map((e) => e.pod.name)
      .sort(),
  );
  assert.ok(fromC.every((e) => e.ageMs <= TTL_MS && e.pod.node === 'node-c'));

  // A new estimate travels too.
  c.publishLocal(podEstimates('node-c', 4, { queuedNow: 7 }, Date.now()));
  await waitFor(
    () =>
      a
        .remoteEstimates()
        .filter((e) => e.origin === 'node-c')
        .every((e) => e.queuedNow === 7),
    5000,
    'a new estimate',
  );

  await c.stop();
  // Its pods stop being candidates once its TTL has passed (checked when read), and it is
  // dropped at the next round. The limit allows for timer lag on a busy machine; the
  // virtual-time tests in gossip-state hold the TTL exactly.
  // (The failure detector takes its pods out sooner, at its probes' pace; the origin itself ages out at the TTL.)
  await waitFor(
    () => !origins(a).has('node-c') && !origins(b).has('node-c') && a.stats().originsKnown === 1,
    TTL_MS + INTERVAL_MS + 1000,
    'aging out',
  );
  assert.ok(origins(a).has('node-b'), 'the others stay');
  assert.equal(a.stats().dropped.forged + a.stats().dropped.malformed, 0);
  assert.ok(a.stats().sent.datagrams > 0 && a.stats().received.bytes > 0);
});

test('two agents of one node (a surge) are both heard as origins, and one leaving the members stops being read', async () => {
  // A surge's agent boots seconds after the one it replaces; two made here could share a
  // millisecond, and an origin instance is named by its node and boot ms (agent/gossip/wire.ts).
  let boot = Date.now();
  const make = async (nodeId: string) => {
    const n = new GossipNode({
      nodeId,
      bind: '127.0.0.1:0',
      peers: [],
      key: KEY,
      intervalMs: INTERVAL_MS,
      incarnation: (boot += 1_000),
    });
    await n.start();
    nodes.push(n);
    return n;
  };
  const old = await make('node-x');
  const surge = await make('node-x');
  const peer = await make('node-y');
  for (const n of [old, surge]) n.setPeers([peer.address()]);
  peer.setPeers([old.address(), surge.address()]);
  old.publishLocal(podEstimates('node-x', 2, {}, Date.now()));
  surge.publishLocal(podEstimates('node-x', 2, { queuedNow: 5 }, Date.now() + 1));

  const agents = () =>
    peer
      .stats()
      .origins.map((o) => o.agent)
      .sort();
  await waitFor(() => agents().length === 2, 10_000, 'both agents of node-x at the peer');
  assert.deepEqual(agents(), [old.address(), surge.address()].sort());
  // Each datagram counter is the sender's own: neither agent's datagrams look like replays of the other's.
  assert.equal(peer.stats().dropped.replayed, 0);
  assert.deepEqual(
    peer.remoteEstimates().map((e) => e.queuedNow),
    [5, 5],
    'each pod once, from the later report',
  );

  // The old agent leaves the membership (its endpoint went): read no more, though it still gossips.
  peer.setPeers([old.address(), surge.address()], [surge.address()]);
  assert.deepEqual(agents(), [surge.address()]);
});

test('a rider hears a peer agent alive by node and incarnation, whatever address that agent gives', async () => {
  // The budget ledger keeps a live origin's reservations counting (agent/budget/exchange.ts): its
  // liveness must come from the agent's own origin, which is keyed by node, address and boot.
  const seen: boolean[] = [];
  const rider = {
    round: (_agents: number, alive: (node: string, incarnation: number) => boolean) =>
      seen.push(alive('node-q', 1_700_000_000_000)),
    ask: () => undefined,
    receive: () => [],
  };
  const watcher = new GossipNode({
    nodeId: 'node-p',
    bind: '127.0.0.1:0',
    peers: [],
    key: KEY,
    intervalMs: INTERVAL_MS,
    rider,
  });
  const peer = new GossipNode({
    nodeId: 'node-q',
    bind: '127.0.0.1:0',
    peers: [],
    key: KEY,
    intervalMs: INTERVAL_MS,
    incarnation: 1_700_000_000_000,
  });
  for (const n of [watcher, peer]) {
    await n.start();
    nodes.push(n);
  }
  watcher.setPeers([peer.address()]);
  peer.setPeers([watcher.address()]);
  peer.publishLocal(podEstimates('node-q', 1, {}, Date.now()));
  await waitFor(() => seen.at(-1) === true, 10_000, 'the rider to see node-q alive');
});
