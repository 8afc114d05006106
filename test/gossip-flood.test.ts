// A forged-gossip flood must not take a core: datagrams from addresses that are not peers, or
// beyond a source's rate, are dropped before their HMAC is computed, and counted.
import assert from 'node:assert/strict';
import { createSocket } from 'node:dgram';
import { describe, test } from 'node:test';
import { Sealer } from '../agent/gossip/envelope.ts';
import { GossipNode, parseHostPort } from '../agent/gossip/node.ts';
import { SourceGate } from '../agent/gossip/source-gate.ts';
import { encodePayload } from '../agent/gossip/wire.ts';

const KEY = Buffer.alloc(32, 0x5a);

describe('source gate', () => {
  test('with peers given as addresses, only their addresses pass', () => {
    const gate = new SourceGate({ maxPerSecond: 100 });
    gate.setPeers(['10.0.0.2:7946', '[fd00::3]:7946']);
    assert.equal(gate.admit('10.0.0.2', 0), undefined);
    assert.equal(gate.admit('fd00::3', 0), undefined);
    assert.equal(gate.admit('10.6.6.6', 0), 'unknown-source');
  });
  test('with no peer list, or peers by hostname, any address may send, at its rate', () => {
    for (const peers of [[], ['agent-b.kinference.svc:7946']]) {
      const gate = new SourceGate({ maxPerSecond: 10 });
      gate.setPeers(peers);
      const outcomes = Array.from({ length: 15 }, () => gate.admit('10.6.6.6', 1000));
      assert.equal(outcomes.filter((o) => o === undefined).length, 10, 'a one-second burst');
      assert.equal(outcomes.filter((o) => o === 'rate-limited').length, 5);
      assert.equal(gate.admit('10.6.6.6', 1100), undefined, 'refilled at 10/s: one more after 100 ms');
      assert.equal(gate.admit('10.6.6.6', 1100), 'rate-limited');
      assert.equal(gate.admit('10.7.7.7', 1100), undefined, 'each source has its own bucket');
    }
  });
  test('remembers a bounded number of sources under a spoofed-address flood', () => {
    const gate = new SourceGate({ maxPerSecond: 1, maxSources: 100 });
    for (let i = 0; i < 10_000; i++) gate.admit(`10.0.${i >> 8}.${i & 255}`, 0);
    assert.equal(gate.admit('10.0.0.0', 0), undefined, 'forgotten, so not wrongly limited forever');
  });
});

test('a flood over UDP is dropped unread (rate-limited), and a node that knows its peers drops strangers before the HMAC', async () => {
  const node = new GossipNode({
    nodeId: 'victim',
    bind: '127.0.0.1:0',
    peers: [],
    key: KEY,
    intervalMs: 50,
    maxDatagramsPerSecondPerSource: 50,
  });
  await node.start();
  const target = parseHostPort(node.address());
  const raw = createSocket('udp4');
  await new Promise<void>((resolve) => raw.bind(0, '127.0.0.1', resolve));
  try {
    const junk = Buffer.alloc(600, 0x42);
    // In small batches so the loopback socket buffer does not drop most of them before we see them.
    for (let batch = 0; batch < 20; batch++) {
      for (let i = 0; i < 50; i++) raw.send(junk, target.port, target.host);
      await new Promise((r) => setTimeout(r, 5));
    }
    await new Promise((r) => setTimeout(r, 100));
    const { received, dropped } = node.stats();
    const authenticated = dropped.forged + dropped.malformed + dropped.oversized;
    assert.ok(received.datagrams >= 200, `received ${received.datagrams}`);
    assert.equal(authenticated + dropped['rate-limited'], received.datagrams, 'every junk datagram dropped');
    // A 50/s bucket admits its burst plus what refills while the flood lasts (well under a second).
    assert.ok(
      authenticated <= 100,
      `only the source's rate reached the HMAC: ${authenticated} of ${received.datagrams}`,
    );
  } finally {
    raw.close();
    await node.stop();
  }
  // A node that knows its peers by address drops strangers before their HMAC.
  const strict = new GossipNode({
    nodeId: 'strict',
    bind: '127.0.0.1:0',
    peers: ['10.9.9.9:7946'],
    key: KEY,
    intervalMs: 50,
  });
  await strict.start();
  const sock = createSocket('udp4');
  await new Promise<void>((resolve) => sock.bind(0, '127.0.0.1', resolve));
  try {
    const sealer = new Sealer({ sender: 'stranger', key: KEY, boot: Date.now() - 1000 });
    const { host, port } = parseHostPort(strict.address());
    sock.send(sealer.seal(encodePayload({ deltas: [] }), Date.now(), strict.address()), port, host);
    const deadline = Date.now() + 3000;
    while (strict.stats().received.datagrams < 1 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    assert.equal(strict.stats().dropped['unknown-source'], 1);
  } finally {
    sock.close();
    await strict.stop();
  }
});
