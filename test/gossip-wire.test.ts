import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { Sealer } from '../agent/gossip/envelope.ts';
import { GossipProtocol } from '../agent/gossip/protocol.ts';
import { GossipState } from '../agent/gossip/state.ts';
import {
  decodePayload,
  encodePayload,
  wireTypes,
  type OriginDeltaWire,
  type PayloadWire,
  type PodEntryWire,
} from '../agent/gossip/wire.ts';
import { deltaHeaderSize, digestSize, entrySize, envelopeOverhead, infoFieldSize } from '../agent/gossip/wire-size.ts';
import { EPOCH, podEstimates } from './fixtures/gossip-estimates.ts';
import { writeDelta } from '../agent/gossip/packing.ts';

const KEY = Buffer.alloc(32, 3);
const MAX_DATAGRAM = 1400;
const nodeName = (i: number) => `ip-10-0-${i}-17.eu-west-1.compute.internal`;

function origin(node: string, pods: number, incarnation = EPOCH): GossipProtocol {
  const p = new GossipProtocol({
    nodeId: node,
    incarnation,
    maxPayload: MAX_DATAGRAM - envelopeOverhead(node, incarnation),
    groupBytes: MAX_DATAGRAM - 400,
  });
  p.state.localUpdate(podEstimates(node, pods), EPOCH + 1);
  return p;
}

const sealedSize = (sender: string, payload: Uint8Array) =>
  new Sealer({ sender, key: KEY, boot: EPOCH }).seal(payload, EPOCH + 5000, '10.0.0.1:7946').length;

/** The deltas a peer that knows nothing of `from` gets, one payload per datagram. */
function fullStateFor(from: GossipProtocol, maxDatagramsPerReply?: number): PayloadWire[] {
  const sender = new GossipProtocol({
    nodeId: from.state.nodeId,
    incarnation: from.state.incarnation,
    maxPayload: from.maxPayload,
    maxDatagramsPerReply,
  });
  Object.defineProperty(sender, 'state', { value: from.state });
  const want = { origins: [from.state.self.id], versions: [0], dataLag: [], shard: 0, shards: 0 };
  return sender.receive('peer', { want, deltas: [] }, EPOCH + 10).out.map((o) => decodePayload(o.payload));
}

describe('gossip wire format', () => {
  test('round-trips every field of every message', () => {
    const p = origin(nodeName(1), 3);
    const written = writeDelta(p.state.self, 0, 1 << 16, EPOCH + 2)!;
    const tombstone: PodEntryWire = {
      slot: 9,
      version: 2,
      info: undefined,
      removed: true,
      queued: 0,
      queuedNow: 0,
      running: 0,
      kvCache: 0,
      params: [],
      at: 0,
    };
    const increment: OriginDeltaWire = {
      origin: 77,
      from: 1,
      to: 2,
      ageMs: 15,
      node: '',
      incarnation: 0,
      floor: 3,
      continuesFull: true,
      agent: '',
      pods: [tombstone],
    };
    const payload: PayloadWire = {
      digest: { origins: [1, 0xffffffff], versions: [5, 300_000], dataLag: [0, 2], shard: 3, shards: 8 },
      want: { origins: [7], versions: [0], dataLag: [], shard: 0, shards: 0 },
      heartbeats: { origins: [9], versions: [12], dataLag: [4], shard: 0, shards: 0 },
      offers: { origins: [11], versions: [2], dataLag: [0], shard: 0, shards: 0 },
      deltas: [written.delta, increment],
    };
    const decoded = decodePayload(encodePayload(payload));
    assert.deepEqual(decoded.digest, payload.digest);
    assert.deepEqual(decoded.want, payload.want);
    assert.deepEqual(decoded.heartbeats, payload.heartbeats);
    assert.deepEqual(decoded.offers, payload.offers);
    assert.deepEqual(decoded.deltas[1], increment);
    const full = decoded.deltas[0];
    assert.equal(full.node, nodeName(1));
    assert.equal(full.incarnation, EPOCH);
    assert.equal(full.pods.length, 3);
    const sent = written.delta.pods[0];
    assert.deepEqual(full.pods[0], { ...sent, info: { ...sent.info! } });
    assert.equal(full.pods[0].info!.engine, 1);
    assert.equal(full.pods[0].params.length, 5);
  });

  test('accepts pod entries from agents that send only the first four predictor coefficients', () => {
    const p = origin(nodeName(1), 3);
    const { delta } = writeDelta(p.state.self, 0, 1 << 16, EPOCH + 2)!;
    const empty = { origins: [], versions: [], dataLag: [], shard: 0, shards: 0 };
    const payloadWith = (params: number[]): PayloadWire => ({
      digest: empty,
      want: empty,
      heartbeats: empty,
      offers: empty,
      deltas: [{ ...delta, pods: [{ ...delta.pods[0], params }] }],
    });
    const four = delta.pods[0].params.slice(0, 4);
    assert.deepEqual(decodePayload(encodePayload(payloadWith(four))).deltas[0].pods[0].params, four);
    assert.throws(() => decodePayload(encodePayload(payloadWith([1, 2, 3]))), /params must hold 4 to 8 values/);
  });

  test('computes exactly the sizes protobufjs encodes, so datagrams are filled to the byte', () => {
    const p = origin(nodeName(2), 8);
    for (const record of p.state.self.pods.values()) {
      const entry = record.entry;
      assert.equal(entrySize(entry), wireTypes.podEntry.encode({ ...entry, info: undefined }).finish().length);
      const withInfo = wireTypes.podEntry.encode({ ...entry, info: record.info }).finish().length;
      assert.equal(entrySize(entry) + infoFieldSize(record.info!), withInfo);
    }
    for (const since of [0, 1]) {
      const w = writeDelta(p.state.self, since, 1 << 16, EPOCH + 2)!;
      const alone = encodePayload({ deltas: [w.delta] }).length;
      assert.equal(w.fieldSize, alone);
      const header = wireTypes.originDelta.encode({ ...w.delta, pods: [] }).finish().length;
      assert.equal(deltaHeaderSize(w.delta), header);
    }
    const digest = {
      origins: [1, 2, 0xfffffff0],
      versions: [1, 200, 70_000],
      dataLag: [0, 1, 129],
      shard: 5,
      shards: 16,
    };
    assert.equal(digestSize(digest), wireTypes.digest.encode(digest).finish().length);
  });

  test('fits a typical round in one datagram: a 10-node digest and one node’s 8 pods in full', (t) => {
    const a = origin(nodeName(0), 8);
    for (let i = 1; i < 10; i++) {
      const b = origin(nodeName(i), 8);
      a.state.apply([writeDelta(b.state.self, 0, 1 << 16, EPOCH + 2)!.delta], EPOCH + 3);
    }
    const digest = a.state.digest(a.maxPayload - 3, 0, EPOCH + 3);
    assert.equal(digest.shards, 1, 'a 10-node digest is complete');
    assert.equal(digest.origins.length, 10);
    const full = writeDelta(a.state.self, 0, 1 << 16, EPOCH + 3)!;
    const increment = writeDelta(a.state.self, a.state.self.version - 1, 1 << 16, EPOCH + 3)!;
    const fullRound = sealedSize(nodeName(0), encodePayload({ digest, deltas: [full.delta] }));
    const changedLoads = sealedSize(nodeName(0), encodePayload({ digest, deltas: [increment.delta] }));
    t.diagnostic(
      `digest of 10 origins + 8 pods with identities: ${fullRound} bytes; + 8 changed loads: ${changedLoads} bytes`,
    );
    t.diagnostic(`envelope: ${envelopeOverhead(nodeName(0), EPOCH)} bytes at most (HMAC tag 34)`);
    assert.ok(fullRound <= MAX_DATAGRAM, `${fullRound} bytes`);
    assert.ok(changedLoads < 700, `${changedLoads} bytes`);
  });

  test('splits a large state over datagrams: per origin, in version order, with no gaps', () => {
    const big = origin(nodeName(1), 40);
    const parts = fullStateFor(big, 16);
    assert.ok(parts.length >= 4, `${parts.length} datagrams`);
    for (const part of parts) assert.ok(sealedSize(big.state.nodeId, encodePayload(part)) <= MAX_DATAGRAM);
    const deltas = parts.flatMap((p) => p.deltas);
    assert.equal(deltas[0].from, 0);
    for (let i = 1; i < deltas.length; i++) {
      assert.equal(deltas[i].from, deltas[i - 1].to, 'each part starts where the previous ended');
      assert.ok(deltas[i].continuesFull);
    }
    assert.equal(deltas.at(-1)!.to, big.state.self.version);
    const versions = deltas.flatMap((d) => d.pods.map((p) => p.version));
    assert.deepEqual(
      versions,
      [...versions].sort((x, y) => x - y),
      'entries in version order',
    );
    assert.equal(
      deltas.reduce((n, d) => n + d.pods.length, 0),
      40,
    );

    const receiver = new GossipState({ nodeId: nodeName(9), incarnation: EPOCH });
    const now = EPOCH + 20;
    assert.equal(receiver.apply([deltas[1]], now).gaps, 1, 'a later part alone is a gap');
    assert.equal(receiver.remoteEstimates(now).length, 0);
    for (const d of deltas) receiver.apply([d], now);
    assert.equal(receiver.origin(big.state.nodeId)!.version, big.state.self.version);
    assert.equal(receiver.remoteEstimates(now).length, 40);
  });

  test('sends what fits when an answer is capped, and the rest picks up from the exact version held', () => {
    const big = origin(nodeName(1), 40);
    const first = fullStateFor(big, 2);
    assert.equal(first.length, 2);
    const receiver = new GossipState({ nodeId: nodeName(9), incarnation: EPOCH });
    const now = EPOCH + 20;
    for (const p of first) receiver.apply(p.deltas, now);
    const held = receiver.origin(big.state.nodeId)!;
    assert.ok(held.version < big.state.self.version);
    const prefix = [...big.state.self.pods.values()].filter((r) => r.entry.version <= held.version).length;
    assert.equal(receiver.remoteEstimates(now).length, prefix, 'holds exactly the entries up to its version');

    const rest = writeDelta(big.state.self, held.version, 1 << 16, now)!;
    assert.equal(receiver.apply([rest.delta], now).advanced, 1);
    assert.equal(receiver.remoteEstimates(now).length, 40);
  });

  test('rejects malformed payloads: entries out of order, over-long strings, ragged digests', () => {
    const p = origin(nodeName(1), 2);
    const good = writeDelta(p.state.self, 0, 1 << 16, EPOCH + 2)!.delta;
    const reversed = { ...good, pods: [...good.pods].reverse().map((e, i) => ({ ...e, version: good.to - i })) };
    assert.throws(() => decodePayload(encodePayload({ deltas: [reversed] })));
    const longName = { ...good, pods: [{ ...good.pods[0], info: { ...good.pods[0].info!, name: 'x'.repeat(300) } }] };
    assert.throws(() => decodePayload(encodePayload({ deltas: [longName] })));
    const ragged = { origins: [1, 2], versions: [1], dataLag: [], shard: 0, shards: 0 };
    assert.throws(() => decodePayload(encodePayload({ digest: ragged, deltas: [] })));
    assert.throws(() => decodePayload(Buffer.from('not a protobuf at all, really')));
  });
});
