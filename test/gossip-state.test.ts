import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { GossipState } from '../agent/gossip/state.ts';
import { originId, type DigestWire } from '../agent/gossip/wire.ts';
import { EPOCH, podEstimate, podEstimates } from './fixtures/gossip-estimates.ts';
import { GossipSim } from './fixtures/gossip-sim.ts';
import { writeDelta } from '../agent/gossip/packing.ts';

const names = (n: number) => Array.from({ length: n }, (_, i) => `node-${String.fromCharCode(97 + i)}`);

/** Agent `at` holds exactly what `origin` published: same pods, same loads, data up to date. */
function holdsExactly(sim: GossipSim, at: string, origin: string): boolean {
  const mine = sim.get(origin).state.self;
  const held = sim.get(at).state.origin(origin);
  if (!held || held.dataVersion < mine.dataVersion || held.version > mine.version) return false;
  const live = (pods: typeof mine.pods) =>
    [...pods.values()]
      .filter((r) => !r.entry.removed)
      .map((r) => `${r.entry.slot}:${r.entry.version}:${r.entry.queuedNow}`)
      .sort();
  return JSON.stringify(live(held.pods)) === JSON.stringify(live(mine.pods));
}

const converged = (sim: GossipSim, nodes: string[]) =>
  nodes.every((a) => nodes.every((o) => a === o || sim.stopped.has(o) || holdsExactly(sim, a, o)));

const digestOf = (s: GossipState, entries: [number, number, number?][]): DigestWire => ({
  origins: entries.map((e) => e[0]),
  versions: entries.map((e) => e[1]),
  dataLag: entries.map((e) => e[2] ?? 0),
  shard: 0,
  shards: 0,
});

describe('gossip state', () => {
  test('converges: every agent ends up holding every origin’s pods exactly, despite 20% loss', () => {
    const nodes = names(12);
    const sim = new GossipSim({ nodes, seed: 7, loss: 0.2 });
    for (const n of nodes) sim.get(n).publishLocal(podEstimates(n, 4));
    const took = sim.runUntil(() => converged(sim, nodes), 10_000);
    assert.ok(converged(sim, nodes), `not converged after ${took} ms`);
    for (const n of nodes) assert.equal(sim.get(n).state.remoteEstimates(sim.now).length, 11 * 4);

    // A new estimate from one origin reaches everyone, and nothing else changes.
    sim.get('node-c').publishLocal(podEstimates('node-c', 4).map((e, i) => (i === 0 ? { ...e, queuedNow: 9 } : e)));
    sim.run(sim.intervalMs * 1.1); // published at its next round
    const spread = sim.runUntil(() => converged(sim, nodes), 5000);
    assert.ok(spread < 2000, `${spread} ms`);
    for (const n of nodes.filter((x) => x !== 'node-c')) {
      const pods = sim
        .get(n)
        .state.remoteEstimates(sim.now)
        .filter((e) => e.origin === 'node-c');
      assert.deepEqual(pods.map((e) => e.queuedNow).sort(), [2, 2, 2, 9]);
    }
  });

  test('ages out an origin that falls silent within its TTL, and does not bring it back', () => {
    const nodes = names(6);
    const sim = new GossipSim({ nodes, seed: 3, ttlMs: 3000 });
    for (const n of nodes) sim.get(n).publishLocal(podEstimates(n, 2));
    sim.runUntil(() => converged(sim, nodes), 5000);
    sim.stopped.add('node-f');
    const stoppedAt = sim.now;
    const holders = () =>
      nodes.filter(
        (n) =>
          n !== 'node-f' &&
          sim
            .get(n)
            .state.remoteEstimates(sim.now)
            .some((e) => e.origin === 'node-f'),
      );
    sim.run(3000 + 1);
    assert.deepEqual(holders(), [], 'no pods of node-f are candidates once its TTL has passed');
    sim.run(sim.intervalMs);
    for (const n of nodes.filter((x) => x !== 'node-f'))
      assert.equal(sim.get(n).state.origin('node-f'), undefined, 'and it is dropped');
    // Peers that heard it last (relayed news carries its age) cannot revive it for one another.
    sim.run(6000);
    assert.deepEqual(holders(), []);
    assert.ok(sim.now - stoppedAt > 9000);
  });

  test('keeps an origin alive on heartbeats alone, with nothing to publish', () => {
    const nodes = names(5);
    const sim = new GossipSim({ nodes, seed: 11, loss: 0.1, ttlMs: 3000 });
    sim.get('node-a').publishLocal(podEstimates('node-a', 3));
    sim.run(10_000);
    for (const n of nodes.slice(1)) {
      const held = sim.get(n).state.origin('node-a');
      assert.ok(held, `${n} still holds node-a`);
      assert.equal(held.dataVersion, sim.get('node-a').state.self.dataVersion);
      assert.ok(held.version > 5, 'versions moved with heartbeats');
    }
    assert.equal(sim.get('node-b').counters.expired, 0);
  });

  test('only the origin writes its own pods: deltas about ourselves are refused', () => {
    const a = new GossipState({ nodeId: 'node-a', incarnation: EPOCH });
    a.localUpdate(podEstimates('node-a', 2), EPOCH + 1);
    // Someone else claims to be node-a (another incarnation), with other pods.
    const impostor = new GossipState({ nodeId: 'node-a', incarnation: EPOCH + 5 });
    impostor.localUpdate(podEstimates('node-a', 5), EPOCH + 6);
    const full = writeDelta(impostor.self, 0, 1 << 16, EPOCH + 7)!.delta;
    assert.equal(a.apply([full], EPOCH + 8).rejected, 1);
    // An increment for our own origin id, as if relayed back with a higher version.
    const own = { ...writeDelta(a.self, 0, 1 << 16, EPOCH + 8)!.delta, from: 1, to: 99, node: '', incarnation: 0 };
    assert.equal(a.apply([own], EPOCH + 8).rejected, 1);
    assert.equal(a.self.version, 1);
    assert.equal(a.remoteEstimates(EPOCH + 9).length, 0);
    // And a delta whose id does not match its node and incarnation is refused too.
    const b = new GossipState({ nodeId: 'node-b', incarnation: EPOCH });
    b.localUpdate(podEstimates('node-b', 1), EPOCH + 1);
    const mislabelled = { ...writeDelta(b.self, 0, 1 << 16, EPOCH + 2)!.delta, node: 'node-c' };
    assert.equal(a.apply([mislabelled], EPOCH + 3).rejected, 1);
  });

  test('a restarted agent is a new origin instance that replaces the old one everywhere', () => {
    const nodes = names(4);
    const sim = new GossipSim({ nodes, seed: 5 });
    for (const n of nodes) sim.get(n).publishLocal(podEstimates(n, 2));
    sim.runUntil(() => converged(sim, nodes), 5000);
    const oldId = sim.get('node-d').state.self.id;
    const restarted = sim.add('node-d', sim.now);
    restarted.publishLocal(podEstimates('node-d', 3));
    sim.runUntil(() => converged(sim, nodes), 5000);
    assert.ok(converged(sim, nodes));
    for (const n of nodes.slice(0, 3)) {
      const held = sim.get(n).state.origin('node-d')!;
      assert.notEqual(held.id, oldId);
      assert.equal(held.id, originId('node-d', restarted.state.incarnation));
      assert.equal(
        sim
          .get(n)
          .state.remoteEstimates(sim.now)
          .filter((e) => e.origin === 'node-d').length,
        3,
      );
    }
  });

  test('stays exact when pods leave: tombstones, and a full state for whoever is older than the floor', () => {
    const origin = new GossipState({ nodeId: 'node-a', incarnation: EPOCH, maxTombstonesPerOrigin: 2 });
    const receiver = new GossipState({ nodeId: 'node-b', incarnation: EPOCH });
    let now = EPOCH + 1;
    origin.localUpdate(podEstimates('node-a', 8), now);
    receiver.apply([writeDelta(origin.self, 0, 1 << 16, now)!.delta], now);
    const behind = receiver.origin('node-a')!.version;

    // Two pods leave: the receiver, behind, gets their tombstones in an ordinary delta.
    origin.localUpdate(podEstimates('node-a', 6), ++now);
    const increment = writeDelta(origin.self, behind, 1 << 16, now)!.delta;
    assert.equal(increment.from, behind);
    assert.deepEqual(
      increment.pods.map((p) => p.removed),
      [true, true],
    );
    const twin = new GossipState({ nodeId: 'node-c', incarnation: EPOCH });
    twin.apply([writeDelta(origin.self, 0, 1 << 16, EPOCH + 1)!.delta], now);

    // Three more leave, one at a time: only two tombstones are kept, so the floor rises.
    for (const count of [5, 4, 3]) origin.localUpdate(podEstimates('node-a', count), ++now);
    assert.ok(origin.self.floor > behind);
    receiver.apply([increment], now);
    const stale = receiver.origin('node-a')!.version;
    assert.ok(stale < origin.self.floor);
    const answer = writeDelta(origin.self, stale, 1 << 16, now)!.delta;
    assert.equal(answer.from, 0, 'older than the floor: a full state');
    receiver.apply([answer], now);
    assert.deepEqual(
      receiver
        .remoteEstimates(now)
        .map((e) => e.pod.uid)
        .sort(),
      podEstimates('node-a', 3)
        .map((e) => e.pod.uid)
        .sort(),
    );
    assert.equal(receiver.origin('node-a')!.floor, origin.self.floor, 'and inherits the floor');
  });

  test('adopts heartbeat-only advances from a digest, and never skips pod data that way', () => {
    const origin = new GossipState({ nodeId: 'node-a', incarnation: EPOCH, heartbeatMs: 100 });
    const b = new GossipState({ nodeId: 'node-b', incarnation: EPOCH });
    origin.localUpdate(podEstimates('node-a', 2), EPOCH + 1);
    b.apply([writeDelta(origin.self, 0, 1 << 16, EPOCH + 1)!.delta], EPOCH + 1);
    const v = b.origin('node-a')!.version;
    origin.heartbeat(EPOCH + 200);
    origin.heartbeat(EPOCH + 400);
    const self = origin.self;
    let c = b.compare(digestOf(origin, [[self.id, self.version, self.version - self.dataVersion]]), EPOCH + 400);
    assert.equal(c.adopted, 1);
    assert.equal(c.want.origins.length, 0);
    assert.equal(b.origin('node-a')!.version, v + 2);

    origin.localUpdate([podEstimate('node-a', 0, { queuedNow: 7 }), podEstimate('node-a', 1)], EPOCH + 500);
    origin.heartbeat(EPOCH + 700);
    c = b.compare(digestOf(origin, [[self.id, self.version, self.version - self.dataVersion]]), EPOCH + 700);
    assert.equal(c.adopted, 0, 'pod data changed in between: no shortcut');
    assert.deepEqual(c.want.versions, [v + 2]);
  });

  test('publishes only meaningful changes, and at most one version a round', () => {
    const s = new GossipState({ nodeId: 'node-a', incarnation: EPOCH });
    assert.equal(s.localUpdate(podEstimates('node-a', 2), EPOCH + 1), true);
    const v = s.self.version;
    assert.equal(s.localUpdate(podEstimates('node-a', 2, { queued: 1.52, kvCache: 0.425 }), EPOCH + 2), false, 'noise');
    assert.equal(s.localUpdate(podEstimates('node-a', 2, { queuedNow: 3 }), EPOCH + 3), true, 'a queued request');
    assert.equal(s.self.version, v + 1);

    const sim = new GossipSim({ nodes: ['node-a', 'node-b'], seed: 2 });
    const a = sim.get('node-a');
    sim.run(250);
    const before = a.state.self.version;
    for (const queuedNow of [4, 5, 6]) a.publishLocal(podEstimates('node-a', 2, { queuedNow }));
    sim.run(sim.intervalMs * 1.1);
    assert.equal(a.state.self.version, before + 1);
    assert.equal(a.state.self.pods.get(0)!.entry.queuedNow, 6, 'the latest estimate wins');
  });

  test('works with a clock that has fractional milliseconds (performance.timeOrigin + now())', () => {
    const a = new GossipState({ nodeId: 'node-a', incarnation: EPOCH + 0.375 });
    const b = new GossipState({ nodeId: 'node-b', incarnation: EPOCH + 0.5 });
    a.localUpdate(podEstimates('node-a', 2, {}, EPOCH + 10.25), EPOCH + 10.25);
    const result = b.apply([writeDelta(a.self, 0, 1 << 16, EPOCH + 11.125)!.delta], EPOCH + 11.5);
    assert.deepEqual(result, { dataChanged: true, advanced: 1, gaps: 0, rejected: 0, untrusted: 0 });
    assert.equal(b.remoteEstimates(EPOCH + 12.75).length, 2);
  });

  test('bounds what a peer can make it hold', () => {
    const a = new GossipState({ nodeId: 'node-a', incarnation: EPOCH, maxOrigins: 3, maxPodsPerOrigin: 4 });
    const big = new GossipState({ nodeId: 'node-big', incarnation: EPOCH });
    big.localUpdate(podEstimates('node-big', 6), EPOCH + 1);
    assert.equal(a.apply([writeDelta(big.self, 0, 1 << 16, EPOCH + 1)!.delta], EPOCH + 1).rejected, 1, 'too many pods');
    for (const n of ['node-x', 'node-y', 'node-z']) {
      const s = new GossipState({ nodeId: n, incarnation: EPOCH });
      s.localUpdate(podEstimates(n, 1), EPOCH + 1);
      a.apply([writeDelta(s.self, 0, 1 << 16, EPOCH + 1)!.delta], EPOCH + 1);
    }
    assert.equal(a.size, 3, 'ourselves and two others: the limit');
  });
});
