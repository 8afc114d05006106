import assert from 'node:assert/strict';
import { createSocket, type Socket } from 'node:dgram';
import { after, before, describe, test } from 'node:test';
import { Registry } from 'prom-client';
import { Sealer, sealEnvelope } from '../agent/gossip/envelope.ts';
import { registerGossipMetrics } from '../agent/gossip/metrics.ts';
import { GossipNode, parseHostPort } from '../agent/gossip/node.ts';
import { GossipState } from '../agent/gossip/state.ts';
import { encodePayload, type PayloadWire } from '../agent/gossip/wire.ts';
import { podEstimates } from './fixtures/gossip-estimates.ts';
import { writeDelta } from '../agent/gossip/packing.ts';

const KEY = Buffer.alloc(32, 0x5a);
const OTHER_KEY = Buffer.alloc(32, 0x5b);

/** A full state of `node`'s pods: what a forged datagram would try to plant. */
function fullState(node: string, pods: number): PayloadWire {
  const s = new GossipState({ nodeId: node, incarnation: Date.now() - 1000 });
  s.localUpdate(podEstimates(node, pods, {}, Date.now()), Date.now());
  return { deltas: [writeDelta(s.self, 0, 1 << 16, Date.now())!.delta] };
}

describe('gossip security, over UDP on 127.0.0.1', () => {
  let node: GossipNode;
  let raw: Socket;
  let target: { host: string; port: number };
  let sent = 0;

  before(async () => {
    node = new GossipNode({ nodeId: 'victim', bind: '127.0.0.1:0', peers: [], key: KEY, intervalMs: 50 });
    await node.start();
    target = parseHostPort(node.address());
    raw = createSocket('udp4');
    await new Promise<void>((resolve) => raw.bind(0, '127.0.0.1', resolve));
  });

  after(async () => {
    raw.close();
    await node.stop();
  });

  /** Sends datagrams and waits until the node has taken them all in. */
  async function deliver(...datagrams: Buffer[]): Promise<void> {
    for (const d of datagrams) raw.send(d, target.port, target.host);
    sent += datagrams.length;
    const deadline = Date.now() + 5000;
    while (node.stats().received.datagrams < sent && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
    assert.equal(node.stats().received.datagrams, sent);
  }

  const remoteOrigins = () => new Set(node.remoteEstimates().map((e) => e.origin));

  test('accepts a well-formed datagram sealed with the cluster key', async () => {
    const sealer = new Sealer({ sender: 'peer-ok', key: KEY, boot: Date.now() - 5000 });
    await deliver(sealer.seal(encodePayload(fullState('peer-ok', 2)), Date.now(), node.address()));
    assert.deepEqual(node.stats().dropped, {
      oversized: 0,
      malformed: 0,
      forged: 0,
      replayed: 0,
      stale: 0,
      misdirected: 0,
      'unknown-source': 0,
      'rate-limited': 0,
    });
    assert.ok(remoteOrigins().has('peer-ok'));
  });

  test('drops and counts a forged datagram: a valid shape with the wrong key, or a flipped bit', async () => {
    const forger = new Sealer({ sender: 'mallory', key: OTHER_KEY, boot: Date.now() - 5000 });
    const honest = new Sealer({ sender: 'peer-ok', key: KEY, boot: Date.now() - 4000 });
    const tampered = honest.seal(encodePayload(fullState('peer-ok', 3)), Date.now(), node.address());
    tampered[20] ^= 0x01;
    await deliver(forger.seal(encodePayload(fullState('mallory', 2)), Date.now(), node.address()), tampered);
    assert.equal(node.stats().dropped.forged, 2);
    assert.ok(!remoteOrigins().has('mallory'));
  });

  test('drops and counts a replayed datagram, and one from before the sender restarted', async () => {
    const boot = Date.now() - 3000;
    const sealer = new Sealer({ sender: 'peer-replay', key: KEY, boot });
    const first = sealer.seal(encodePayload(fullState('peer-replay', 1)), Date.now(), node.address());
    const second = sealer.seal(encodePayload({ deltas: [] }), Date.now(), node.address());
    await deliver(second, first); // reordered within the window: both fine
    await deliver(first);
    assert.equal(node.stats().dropped.replayed, 1);
    // The sender restarts: a later boot starts its counter again, and the old boot is over.
    const restarted = new Sealer({ sender: 'peer-replay', key: KEY, boot: boot + 2000 });
    await deliver(restarted.seal(encodePayload({ deltas: [] }), Date.now(), node.address()));
    await deliver(sealer.seal(encodePayload({ deltas: [] }), Date.now(), node.address()));
    assert.equal(node.stats().dropped.replayed, 2);
  });

  test('drops and counts a stale datagram, sent too long ago (or from too far ahead)', async () => {
    const sealer = new Sealer({ sender: 'peer-stale', key: KEY, boot: Date.now() - 600_000 });
    await deliver(
      sealer.seal(encodePayload(fullState('peer-stale', 1)), Date.now() - 120_000, node.address()),
      sealer.seal(encodePayload(fullState('peer-stale', 1)), Date.now() + 120_000, node.address()),
    );
    assert.equal(node.stats().dropped.stale, 2);
    assert.ok(!remoteOrigins().has('peer-stale'));
  });

  test('drops and counts an oversized datagram before looking inside', async () => {
    const sealer = new Sealer({ sender: 'peer-big', key: KEY, boot: Date.now() - 5000 });
    const big = sealer.seal(encodePayload(fullState('peer-big', 12)), Date.now(), node.address());
    assert.ok(big.length > 1400);
    await deliver(big);
    assert.equal(node.stats().dropped.oversized, 1);
    assert.ok(!remoteOrigins().has('peer-big'));
  });

  test('drops a datagram an agent authentically sent to another peer, replayed unchanged to us', async () => {
    // B sealed this for M (its own key, its own counter): replaying it to A is not B speaking to A.
    const sealer = new Sealer({ sender: 'peer-b', key: KEY, boot: Date.now() - 5000 });
    const meantForM = sealer.seal(encodePayload(fullState('peer-misdirected', 1)), Date.now(), '127.0.0.1:9');
    const before = node.stats().dropped.misdirected;
    await deliver(meantForM);
    assert.equal(node.stats().dropped.misdirected, before + 1);
    assert.ok(!remoteOrigins().has('peer-misdirected'));
  });

  test('drops and counts malformed datagrams: garbage, a sealed non-envelope, a sealed non-payload', async () => {
    const garbage = Buffer.from('GET / HTTP/1.1\r\nHost: victim\r\n\r\n');
    const notAnEnvelope = sealEnvelope(
      { sender: '', boot: 0, seq: 0, sentAt: Date.now(), payload: new Uint8Array(0), recipient: node.address() },
      KEY,
    );
    const badPayload = new Sealer({ sender: 'peer-bad', key: KEY, boot: Date.now() - 5000 }).seal(
      Buffer.from([0x22, 0xff, 0xff, 0x01]),
      Date.now(),
      node.address(),
    );
    await deliver(garbage, notAnEnvelope, badPayload);
    assert.equal(node.stats().dropped.malformed, 3);
    assert.ok(!remoteOrigins().has('peer-bad'));
    assert.equal(node.stats().received.datagrams, sent);
  });

  test('refuses a cluster key short enough to guess', () => {
    assert.throws(
      () => new GossipNode({ nodeId: 'n', bind: '127.0.0.1:0', peers: [], key: Buffer.alloc(0) }),
      /at least 16 bytes/,
    );
  });

  test('exposes the drop counters as Prometheus metrics', async () => {
    const registry = new Registry();
    registerGossipMetrics(registry, node);
    const text = await registry.metrics();
    assert.match(text, /kinference_gossip_dropped_total\{reason="forged"\} 2/);
    assert.match(text, /kinference_gossip_dropped_total\{reason="replayed"\} 2/);
    assert.match(text, /kinference_gossip_dropped_total\{reason="malformed"\} 3/);
    assert.match(text, /kinference_gossip_origins \d/);
  });
});
