// Origins per agent and liveness from membership, in virtual time on the pure state: an origin
// whose agent leaves the cluster's membership stops being read at once (the TTL is only the
// backstop), and two agents on one node (a rollout's surge) are two origins whose pods are merged
// per pod by freshness, neither superseding the other.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { writeDelta } from '../agent/gossip/packing.ts';
import { GossipState } from '../agent/gossip/state.ts';
import type { OriginDeltaWire } from '../agent/gossip/wire.ts';
import { EPOCH, podEstimates } from './fixtures/gossip-estimates.ts';

const full = (s: GossipState, now: number): OriginDeltaWire => writeDelta(s.self, 0, 1 << 16, now)!.delta;
const since = (s: GossipState, version: number, now: number): OriginDeltaWire =>
  writeDelta(s.self, version, 1 << 16, now)!.delta;

function agent(node: string, address: string, incarnation = EPOCH, ttlMs?: number): GossipState {
  return new GossipState({ nodeId: node, agent: address, incarnation, ttlMs });
}

/** queuedNow of each pod the receiver reads, by node and pod name (each pod once). */
function read(s: GossipState, now: number): Record<string, string> {
  const out: Record<string, string> = {};
  for (const e of s.remoteEstimates(now)) {
    const key = `${e.origin}/${e.pod.name}`;
    assert.equal(out[key], undefined, `${key} read twice`);
    out[key] = `${e.queuedNow}`;
  }
  return out;
}

describe('gossip liveness from membership', () => {
  test('an origin whose agent leaves the membership is not read from then on; listed again, it is', () => {
    const receiver = agent('node-r', '10.0.0.9:7946');
    const b = agent('node-b', '10.0.0.2:7946');
    const c = agent('node-c', '10.0.0.3:7946');
    b.localUpdate(podEstimates('node-b', 2), EPOCH + 1);
    c.localUpdate(podEstimates('node-c', 2), EPOCH + 1);
    receiver.apply([full(b, EPOCH + 2), full(c, EPOCH + 2)], EPOCH + 2);

    // b is listed; c not yet (membership lags a new agent, or names it otherwise): both are read.
    assert.equal(receiver.setMembers(new Set(['10.0.0.2:7946'])), false);
    assert.equal(receiver.remoteEstimates(EPOCH + 3).length, 4);

    // b leaves (deleted, or its readiness failed): at once, whatever its version says.
    assert.equal(receiver.setMembers(new Set()), true, 'what is readable changed');
    assert.deepEqual(
      receiver.remoteEstimates(EPOCH + 4).map((e) => e.origin),
      ['node-c', 'node-c'],
    );
    assert.deepEqual(
      receiver.origins(EPOCH + 4).map((o) => o.agent),
      ['10.0.0.3:7946'],
    );

    // A draining b still gossips: held and kept up to date, not read.
    const held = receiver.origin('node-b', '10.0.0.2:7946')!.version;
    b.localUpdate(podEstimates('node-b', 2, { queuedNow: 5 }), EPOCH + 5);
    receiver.apply([since(b, held, EPOCH + 5)], EPOCH + 5);
    assert.equal(
      receiver.remoteEstimates(EPOCH + 6).filter((e) => e.origin === 'node-b').length,
      0,
      'no flapping back on news',
    );

    // Listed again (its readiness came back): read again, with the newest data.
    assert.equal(receiver.setMembers(new Set(['10.0.0.2:7946'])), true);
    const fromB = receiver.remoteEstimates(EPOCH + 7).filter((e) => e.origin === 'node-b');
    assert.deepEqual(
      fromB.map((e) => e.queuedNow),
      [5, 5],
    );
  });

  test('the TTL stays the backstop: a listed origin silent past it is dropped', () => {
    const receiver = agent('node-r', '10.0.0.9:7946', EPOCH, 30_000);
    const b = agent('node-b', '10.0.0.2:7946', EPOCH, 30_000);
    b.localUpdate(podEstimates('node-b', 2), EPOCH + 1);
    receiver.apply([full(b, EPOCH + 1)], EPOCH + 1);
    receiver.setMembers(new Set(['10.0.0.2:7946']));
    assert.equal(receiver.remoteEstimates(EPOCH + 29_000).length, 2, 'a heartbeat every 10 s keeps it well inside');
    assert.equal(receiver.remoteEstimates(EPOCH + 30_002).length, 0, 'listed, but silent past the TTL');
    assert.deepEqual(receiver.expire(EPOCH + 30_002), ['node-b']);
  });
});

describe('an origin per agent pod', () => {
  test('two agents on one node are two origins; each pod is read from the fresher report', () => {
    const peer = agent('node-b', '10.0.1.2:7946');
    const old = agent('node-a', '10.0.0.50:7946', EPOCH);
    const surge = agent('node-a', '10.0.0.51:7946', EPOCH + 5_000);
    old.localUpdate(podEstimates('node-a', 3, { queuedNow: 1 }, EPOCH + 100), EPOCH + 100);
    peer.apply([full(old, EPOCH + 100)], EPOCH + 100);

    // The new agent has scraped two of the three pods so far: the third stays the old one's.
    surge.localUpdate(podEstimates('node-a', 2, { queuedNow: 4 }, EPOCH + 5_100), EPOCH + 5_100);
    const applied = peer.apply([full(surge, EPOCH + 5_100)], EPOCH + 5_100);
    assert.equal(applied.rejected, 0);
    assert.deepEqual(read(peer, EPOCH + 5_101), {
      'node-a/vllm-llama-3-8b-0': '4',
      'node-a/vllm-llama-3-8b-1': '4',
      'node-a/vllm-llama-3-8b-2': '1',
    });
    assert.equal(peer.origins(EPOCH + 5_101).length, 2, 'neither origin supersedes the other');

    // The old agent reports pod 0 again, later: its report wins for that pod (no flapping by origin).
    const held = peer.origin('node-a', '10.0.0.50:7946')!.version;
    old.localUpdate(
      [
        ...podEstimates('node-a', 1, { queuedNow: 7 }, EPOCH + 5_300),
        ...podEstimates('node-a', 3, { queuedNow: 1 }, EPOCH + 100).slice(1),
      ],
      EPOCH + 5_300,
    );
    peer.apply([since(old, held, EPOCH + 5_300)], EPOCH + 5_300);
    assert.deepEqual(read(peer, EPOCH + 5_301), {
      'node-a/vllm-llama-3-8b-0': '7',
      'node-a/vllm-llama-3-8b-1': '4',
      'node-a/vllm-llama-3-8b-2': '1',
    });

    // The old agent leaves once the new one has every pod: nothing is lost on the way.
    const surgeHeld = peer.origin('node-a', '10.0.0.51:7946')!.version;
    surge.localUpdate(podEstimates('node-a', 3, { queuedNow: 2 }, EPOCH + 5_400), EPOCH + 5_400);
    peer.apply([since(surge, surgeHeld, EPOCH + 5_400)], EPOCH + 5_400);
    peer.setMembers(new Set(['10.0.0.51:7946', '10.0.0.50:7946']));
    peer.setMembers(new Set(['10.0.0.51:7946']));
    assert.deepEqual(read(peer, EPOCH + 5_401), {
      'node-a/vllm-llama-3-8b-0': '2',
      'node-a/vllm-llama-3-8b-1': '2',
      'node-a/vllm-llama-3-8b-2': '2',
    });
  });

  test('the other agent on our own node is held and relayed, not refused; our own old incarnation is', () => {
    const old = agent('node-a', '10.0.0.50:7946', EPOCH);
    const surge = agent('node-a', '10.0.0.51:7946', EPOCH + 5_000);
    old.localUpdate(podEstimates('node-a', 2), EPOCH + 1);
    assert.equal(surge.apply([full(old, EPOCH + 5_001)], EPOCH + 5_001).rejected, 0);
    assert.ok(surge.origin('node-a', '10.0.0.50:7946'));

    const restarted = agent('node-a', '10.0.0.50:7946', EPOCH + 9_000);
    assert.equal(restarted.apply([full(old, EPOCH + 9_001)], EPOCH + 9_001).rejected, 1, 'our previous incarnation');
  });

  test('a restarted agent (same address, newer incarnation) replaces only its own old origin', () => {
    const peer = agent('node-b', '10.0.1.2:7946');
    const first = agent('node-a', '10.0.0.50:7946', EPOCH);
    const sibling = agent('node-a', '10.0.0.51:7946', EPOCH + 10);
    const restarted = agent('node-a', '10.0.0.50:7946', EPOCH + 20_000);
    for (const s of [first, sibling, restarted]) s.localUpdate(podEstimates('node-a', 1), s.incarnation + 1);
    peer.apply([full(first, EPOCH + 20_001), full(sibling, EPOCH + 20_001)], EPOCH + 20_001);
    peer.apply([full(restarted, EPOCH + 20_002)], EPOCH + 20_002);
    assert.equal(peer.origin('node-a', '10.0.0.50:7946')!.incarnation, EPOCH + 20_000);
    assert.equal(peer.origin('node-a', '10.0.0.51:7946')!.incarnation, EPOCH + 10);
    // The superseded incarnation, relayed late, does not come back.
    assert.equal(peer.apply([full(first, EPOCH + 20_003)], EPOCH + 20_003).advanced, 0);
    assert.equal(peer.origin('node-a', '10.0.0.50:7946')!.incarnation, EPOCH + 20_000);
  });
});
