// A pod's calibration carried by gossip: the 8-byte summary on the wire, signed with its entry,
// read only from the pod's own node's agent, and a bounded prior on the receiving side (a
// restarted agent's own pods, a fresh agent's peers' pods), never a verdict.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Calibration } from '../agent/predict/calibration.ts';
import type { CalibrationSummary } from '../agent/predict/calibration-prior.ts';
import { decodeCalibration, encodeCalibration } from '../agent/gossip/calibration-wire.ts';
import { writeDelta } from '../agent/gossip/packing.ts';
import { OriginSigner, stateHash } from '../agent/gossip/signatures.ts';
import { GossipProtocol } from '../agent/gossip/protocol.ts';
import { GossipState } from '../agent/gossip/state.ts';
import { decodePayload, encodePayload, wireTypes, WireError } from '../agent/gossip/wire.ts';
import { entrySize, envelopeOverhead } from '../agent/gossip/wire-size.ts';
import { PodPool } from '../agent/pool/pool.ts';
import { PodTelemetry } from '../agent/telemetry/pod-telemetry.ts';
import type { PodEstimate, PodLoad } from '../agent/types.ts';
import { mulberry32 } from '../shared/sim/random.ts';
import { EPOCH, podEstimate, podEstimates } from './fixtures/gossip-estimates.ts';
import { poolOptions, routePod } from './helpers/route-fixtures.ts';

const COLD = Math.log(3);

/** A payload's round trip: what a peer decodes of what `from` writes for someone who knows nothing. */
function relayed(from: GossipState, receiver: GossipState, now: number): PodEstimate[] {
  const { delta } = writeDelta(from.self, 0, 1 << 16, now)!;
  receiver.apply(decodePayload(encodePayload({ deltas: [delta] })).deltas, now);
  return receiver.remoteEstimates(now);
}

test('a calibration summary round-trips the wire in 8 bytes: evidence never overstated, the 90% margin never narrower', () => {
  const summary: CalibrationSummary = {
    free: { observations: 300, median: 0.0123, p90: 0.4567 },
    queued: { observations: 40, median: 0.3, p90: 1.2 },
  };
  const origin = new GossipState({ nodeId: 'node-a', incarnation: EPOCH });
  origin.localUpdate([{ ...podEstimate('node-a', 0), calibration: summary }], EPOCH + 1);
  const entry = [...origin.self.pods.values()][0].entry;
  assert.equal(entry.calibration!.length, 8);
  assert.equal(entrySize(entry), wireTypes.podEntry.encode(entry).finish().length, 'sizes as protobufjs encodes');

  const [got] = relayed(origin, new GossipState({ nodeId: 'node-b', incarnation: EPOCH }), EPOCH + 2);
  const { free, full, queued } = got.calibration!;
  assert.equal(full, undefined, 'a regime without observations stays absent');
  assert.equal(free!.observations, 256);
  assert.equal(queued!.observations, 32);
  for (const [sent, read] of [
    [summary.free!, free!],
    [summary.queued!, queued!],
  ]) {
    assert.ok(read.p90 >= sent.p90 && read.p90 - sent.p90 < 1 / 32, `p90 ${sent.p90} read as ${read.p90}`);
    assert.ok(Math.abs(read.median - sent.median) <= 1 / 64, `median ${sent.median} read as ${read.median}`);
  }
});

test("the summary is signed with its entry: another summary is another state hash (the origin's stamp covers it)", () => {
  const stateWith = (calibration: CalibrationSummary) => {
    const s = new GossipState({ nodeId: 'node-a', incarnation: EPOCH });
    s.localUpdate([{ ...podEstimate('node-a', 0), calibration }], EPOCH + 1);
    return stateHash(s.self.pods);
  };
  const honest = stateWith({ queued: { observations: 256, median: 0.25, p90: 1.5 } });
  const narrowed = stateWith({ queued: { observations: 256, median: 0.25, p90: 0.25 } });
  assert.notDeepEqual(honest, narrowed);
});

test('a signed full state still fits one datagram: summaries are left out of one that would not fit with them', () => {
  const node = 'ip-10-0-1-17.eu-west-1.compute.internal';
  const fullState = (pods: number) => {
    const p = new GossipProtocol({
      nodeId: node,
      incarnation: EPOCH,
      signer: new OriginSigner(),
      maxPayload: 1400 - envelopeOverhead(node, EPOCH),
    });
    p.state.setAgent('10.0.1.17:7946');
    p.state.localUpdate(podEstimates(node, pods), EPOCH + 1);
    const written = writeDelta(p.state.self, 0, p.maxPayload, EPOCH + 2);
    assert.ok(written?.done, `${pods} pods: a signed state is sent whole or not at all`);
    return [written.delta.pods.filter((e) => e.calibration).length, p.state.calibrationOmitted];
  };
  assert.deepEqual(fullState(7), [7, false], 'room for every summary');
  assert.deepEqual(
    fullState(8),
    [0, true],
    '8 pods with their identities fill the datagram: their loads, not their summaries (and the agent says so)',
  );
});

test("an origin speaks for its own node's pods only: its summary of another node's pod is not read", () => {
  const origin = new GossipState({ nodeId: 'node-a', incarnation: EPOCH });
  const calibration: CalibrationSummary = { free: { observations: 256, median: 0, p90: 0.25 } };
  const elsewhere = podEstimate('node-c', 1);
  origin.localUpdate(
    [
      { ...podEstimate('node-a', 0), calibration },
      { ...elsewhere, pod: { ...elsewhere.pod, node: 'node-c' }, calibration },
    ],
    EPOCH + 1,
  );
  const read = relayed(origin, new GossipState({ nodeId: 'node-b', incarnation: EPOCH }), EPOCH + 2);
  assert.equal(read.length, 2);
  for (const e of read) assert.equal(e.calibration === undefined, e.pod.node === 'node-c', e.pod.node);
});

test('malformed summaries are refused with the datagram: a wrong length, an unknown layout', () => {
  const origin = new GossipState({ nodeId: 'node-a', incarnation: EPOCH });
  origin.localUpdate([podEstimate('node-a', 0)], EPOCH + 1);
  const { delta } = writeDelta(origin.self, 0, 1 << 16, EPOCH + 1)!;
  const withBytes = (calibration: Uint8Array) =>
    encodePayload({ deltas: [{ ...delta, pods: [{ ...delta.pods[0], calibration }] }] });
  assert.throws(() => decodePayload(withBytes(new Uint8Array(7))), WireError);
  assert.throws(() => decodePayload(withBytes(new Uint8Array(64))), WireError);
  const layout = encodeCalibration({ free: { observations: 10, median: 0, p90: 1 } })!;
  layout[1] |= 0x10;
  assert.throws(() => decodePayload(withBytes(layout)), /layout/);
});

test('hostile values are clamped on both sides: saturated on the wire, sanitized as a prior', () => {
  const wire = encodeCalibration({ queued: { observations: 1e12, median: -50, p90: 1e9 } })!;
  assert.deepEqual(decodeCalibration(wire), { queued: { observations: 512, median: -4, p90: 127 / 32 } });
  assert.equal(encodeCalibration({ free: { observations: 100, median: NaN, p90: 0.1 } }), undefined);

  const margin = (prior: CalibrationSummary) => {
    const c = new Calibration();
    c.setPrior('pod-a', prior);
    return c.margin('pod-a', 0.9, 'free');
  };
  const cold = new Calibration().margin('pod-a', 0.9);
  assert.equal(margin({ free: { observations: -5, median: 0, p90: 0.1 } }), cold, 'negative evidence: no prior');
  assert.equal(margin({ free: { observations: NaN, median: 0, p90: 0.1 } }), cold, 'NaN evidence: no prior');
  assert.equal(margin({ free: { observations: 100, median: NaN, p90: 0.1 } }), cold, 'NaN margin: no prior');
  assert.equal(margin({ free: { observations: 100, median: 0, p90: Infinity } }), cold, 'infinite margin: no prior');
  assert.equal(
    margin({ free: { observations: 1e12, median: -50, p90: -40 } }),
    0,
    'a tail never narrower than the mean',
  );
  assert.equal(margin({ free: { observations: 1e12, median: 1e9, p90: 1e9 } }), 4, 'huge margins clamped');
});

/** `n` TTFTs measured at exp(σ·z) times their prediction, for pod `uid`. */
function feed(c: Calibration, uid: string, n: number, sigma: number, seed: number): void {
  const rand = mulberry32(seed);
  for (let i = 0; i < n; i++) {
    const z = Math.sqrt(-2 * Math.log(1 - rand())) * Math.cos(2 * Math.PI * rand());
    c.observe(uid, 100, 100 * Math.exp(sigma * z), 'free', i);
  }
}

test("a prior stands for at most priorObservations: the agent's own observations replace it", () => {
  const prior: CalibrationSummary = { free: { observations: 512, median: 0, p90: 0.2 } };
  const withPrior = new Calibration();
  withPrior.setPrior('pod-a', prior);
  const without = new Calibration();
  assert.equal(withPrior.margin('pod-a', 0.9), 0.2, 'from its first request: the gossiped 90% margin');
  // Above it, an exponential tail from the 90% margin, at the cold margin's slope (steeper than the summary's own).
  const tail = (q: number) => Math.log(1 / (1 - q));
  const p99 = 0.2 + (COLD / tail(0.99)) * (tail(0.99) - tail(0.9));
  assert.ok(Math.abs(withPrior.margin('pod-a', 0.99) - p99) < 1e-12, `${withPrior.margin('pod-a', 0.99)}`);
  assert.ok(p99 < COLD);
  assert.equal(without.margin('pod-a', 0.99), COLD);
  feed(withPrior, 'pod-a', 80, 0.5, 3);
  feed(without, 'pod-a', 80, 0.5, 3);
  const mixed = withPrior.margin('pod-a', 0.99);
  assert.ok(mixed > 0.2 && mixed < without.margin('pod-a', 0.99), `${mixed}: own wider errors pull it up`);
  assert.deepEqual(
    [withPrior.stats('pod-a').priorWeight, without.stats('pod-a').priorWeight],
    [200 - 80, 0],
    '/debug/state says what the prior still stands for',
  );
  feed(withPrior, 'pod-a', 200, 0.5, 4);
  feed(without, 'pod-a', 200, 0.5, 4);
  assert.equal(withPrior.margin('pod-a', 0.99), without.margin('pod-a', 0.99), 'replaced by own evidence');
  assert.equal(withPrior.stats('pod-a').priorWeight, 0);
});

test("above 90% a prior's tail rises at least at the cold margin's slope; a steeper summary keeps its own", () => {
  const tail = (q: number) => Math.log(1 / (1 - q));
  const coldSlope = COLD / tail(0.99);
  const marginWith = (prior: CalibrationSummary, q: number) => {
    const c = new Calibration();
    c.setPrior('pod-a', prior);
    return c.margin('pod-a', q);
  };
  // A flat summary (median = 90%): two points say nothing of a heavy tail beyond them.
  const flat: CalibrationSummary = { free: { observations: 512, median: 0.3, p90: 0.3 } };
  assert.equal(marginWith(flat, 0.9), 0.3, 'the stated 90% margin unchanged');
  assert.equal(marginWith(flat, 0.5), 0.3, 'the stated median unchanged');
  for (const q of [0.95, 0.99, 0.999]) {
    const m = marginWith(flat, q);
    assert.ok(Math.abs(m - (0.3 + coldSlope * (tail(q) - tail(0.9)))) < 1e-12, `flat tail at ${q}: ${m}`);
  }
  // A steep summary: its own line through the median and 90%, unchanged.
  const steep: CalibrationSummary = { free: { observations: 512, median: 0, p90: 1 } };
  const ownSlope = 1 / (tail(0.9) - tail(0.5));
  assert.ok(ownSlope > coldSlope);
  const m = marginWith(steep, 0.99);
  assert.ok(Math.abs(m - (1 + ownSlope * (tail(0.99) - tail(0.9)))) < 1e-12, `steep tail at 0.99: ${m}`);
});

test("a prior never takes a pod below what its node's own window says, where that window answers", () => {
  const c = new Calibration();
  feed(c, 'pod-b', 400, 0.6, 5); // the node's other pod: wide errors, fully known
  const node = c.margin(undefined, 0.99);
  c.setPrior('pod-a', { free: { observations: 48, median: 0, p90: 0.1 } });
  const a = c.margin('pod-a', 0.99);
  assert.ok(a > (0.1 + node) / 2 && a <= node, `pod-a ${a}, node ${node}`);
});

const LOAD: PodLoad = { at: 0, waiting: 0, running: 2, kvCache: 0.1, engine: 'vllm' };

function localPool(now: { t: number }) {
  const p = new PodPool(poolOptions(() => now.t, { node: 'n', networkCostMs: 0 }));
  p.setLocalPods([routePod('a', { node: 'n', engine: 'vllm' })]);
  const telemetry = new PodTelemetry();
  const scrape = () => {
    const load = { ...LOAD, at: now.t };
    telemetry.record(load);
    p.recordLoad('ns/a', load, telemetry);
  };
  scrape();
  return { p, scrape };
}

test('a restarted agent starts from the calibration its previous incarnation gossiped, not cold', () => {
  const now = { t: 1000 };
  const before = localPool(now);
  const rand = mulberry32(7);
  for (let i = 0; i < 300; i++) {
    const ticket = before.p.begin(before.p.candidates()[0], 200);
    ticket.firstByte(ticket.predictedMs * Math.exp(0.15 * (rand() - 0.5)));
    ticket.end(true);
    now.t += 100;
    before.scrape();
  }
  const learned = before.p.candidates()[0].logMargin!(0.9);
  assert.ok(learned < 0.3, `${learned}`);
  // What peers hold of it: the summary as the wire carries it.
  const gossiped = before.p.localEstimates().map((e) => ({
    ...e,
    calibration: decodeCalibration(encodeCalibration(e.calibration)!),
  }));

  const after = localPool(now);
  const cold = after.p.candidates()[0].logMargin!(0.9);
  assert.ok(cold > 0.5, `nothing heard yet: cold (${cold})`);
  after.p.setRemote(gossiped);
  const restarted = after.p.candidates()[0].logMargin!(0.9);
  assert.ok(restarted >= learned && restarted - learned < 1 / 32 + 1e-9, `learned ${learned}, restarted ${restarted}`);
  // At 99%: the gossiped 90% margin plus the cold tail's rise from 90% to 99% (half the cold margin).
  const p99 = after.p.candidates()[0].logMargin!(0.99);
  assert.ok(Math.abs(p99 - (restarted + COLD / 2)) < 1e-9 && p99 < COLD, `inside the cold margin at 99%: ${p99}`);
});

test("a fresh agent judges a peer's pod by its own agent's summary; a warm one by its own evidence", () => {
  const now = { t: 1000 };
  const { p } = localPool(now);
  const peer: PodEstimate = {
    ...podEstimate('node-b', 0, { queuedNow: 0, running: 1 }, now.t),
    calibration: { free: { observations: 256, median: 0, p90: 0.25 } },
  };
  p.setRemote([peer]);
  const margin = (q: number) => p.candidates().find((c) => c.where === 'peer')!.logMargin!(q);
  assert.equal(margin(0.9), 0.25);
  p.setRemote([{ ...peer, calibration: undefined }]);
  assert.equal(margin(0.99), COLD, 'no summary: the node margin, cold');

  const warm = new Calibration();
  feed(warm, 'pod-a', 300, 0.3, 9);
  for (const q of [0.9, 0.99])
    assert.equal(warm.margin(undefined, q, 'free', peer.calibration), warm.margin(undefined, q, 'free'));
});
