// Gossip trusts each agent only for itself: an origin's pods count only when signed by that
// origin's own key, whoever relays them. Each test is an attack a holder of the shared cluster key
// could make on the unsigned protocol (impersonation, tampering on relay, injected model names,
// version forgery, table exhaustion), played against the real state machine.
import assert from 'node:assert/strict';
import { createSocket } from 'node:dgram';
import { describe, it } from 'node:test';
import { Sealer } from '../agent/gossip/envelope.ts';
import { GossipNode, parseHostPort } from '../agent/gossip/node.ts';
import { writeDelta } from '../agent/gossip/packing.ts';
import { ContinuityKeyring, EPOCH_BEATS, OriginSigner, StaticKeyring } from '../agent/gossip/signatures.ts';
import { GossipState } from '../agent/gossip/state.ts';
import { decodePayload, encodePayload, type OriginDeltaWire } from '../agent/gossip/wire.ts';
import { EPOCH, podEstimates } from './fixtures/gossip-estimates.ts';
import { waitFor } from './helpers/stack.ts';

const signers = { a: new OriginSigner(), b: new OriginSigner(), m: new OriginSigner() };
/** Every agent trusts node-a, node-b and node-m (a compromised agent: trusted, but only for itself). */
const keyring = new StaticKeyring([
  { node: 'node-a', key: signers.a.publicKey.toString('base64') },
  { node: 'node-b', key: signers.b.publicKey.toString('base64') },
  { node: 'node-m', key: signers.m.publicKey.toString('base64') },
]);

function agent(node: 'a' | 'b' | 'm', incarnation = EPOCH, signer = signers[node]): GossipState {
  return new GossipState({
    nodeId: `node-${node}`,
    agent: `10.0.0.${node.charCodeAt(0)}:7946`,
    incarnation,
    signer,
    keyring,
  });
}

/** What a receiver that knows nothing of `from` gets, through the wire encoding. */
function fullDelta(from: GossipState, now = EPOCH + 1000): OriginDeltaWire {
  const written = writeDelta(from.self, 0, 1 << 16, now)!;
  return decodePayload(encodePayload({ deltas: [written.delta] })).deltas[0];
}

function incrementDelta(from: GossipState, since: number, now = EPOCH + 2000): OriginDeltaWire {
  const written = writeDelta(from.self, since, 1 << 16, now)!;
  return decodePayload(encodePayload({ deltas: [written.delta] })).deltas[0];
}

const addresses = (s: GossipState, now: number, origin: string) =>
  s
    .remoteEstimates(now)
    .filter((e) => e.origin === origin)
    .map((e) => e.pod.address)
    .sort();

describe('signed gossip origins', () => {
  it("refuses an impostor's state under another agent's origin, even with a higher incarnation", () => {
    const a = agent('a');
    const b = agent('b');
    b.localUpdate(podEstimates('node-b', 2), EPOCH + 500);
    assert.equal(a.apply([fullDelta(b)], EPOCH + 1000).dataChanged, true);
    const real = addresses(a, EPOCH + 1000, 'node-b');

    // The impostor holds the cluster key and its own (trusted) identity, and claims B's node and
    // agent address with a newer incarnation: its "pods" are its own addresses.
    const impostor = new GossipState({
      nodeId: 'node-b',
      agent: b.self.agent,
      incarnation: EPOCH + 60_000,
      signer: signers.m,
      keyring,
    });
    impostor.localUpdate(
      podEstimates('node-b', 2).map((e) => ({ ...e, pod: { ...e.pod, address: '10.66.6.6:8000' } })),
      EPOCH + 900,
    );
    const result = a.apply([fullDelta(impostor)], EPOCH + 1000);
    assert.equal(result.untrusted, 1);
    assert.deepEqual(addresses(a, EPOCH + 1000, 'node-b'), real);

    // Unsigned, the same state is refused as well.
    const unsigned = new GossipState({ nodeId: 'node-b', agent: b.self.agent, incarnation: EPOCH + 60_000 });
    unsigned.localUpdate(podEstimates('node-b', 1), EPOCH + 900);
    assert.equal(a.apply([fullDelta(unsigned)], EPOCH + 1000).untrusted, 1);
    assert.deepEqual(addresses(a, EPOCH + 1000, 'node-b'), real);
  });

  it('accepts state relayed by a third agent unchanged, and refuses it when the relay alters a pod', () => {
    const a = agent('a');
    const b = agent('b');
    const relay = agent('m');
    b.localUpdate(podEstimates('node-b', 3), EPOCH + 500);
    relay.apply([fullDelta(b)], EPOCH + 600);
    // The relay's copy, as it would send it: B's stamp travels unchanged.
    const relayed = writeDelta(relay.origin('node-b', b.self.agent)!, 0, 1 << 16, EPOCH + 700)!.delta;
    const wire = () => decodePayload(encodePayload({ deltas: [relayed] })).deltas[0];

    const redirected = wire();
    redirected.pods[0] = { ...redirected.pods[0], info: { ...redirected.pods[0].info!, address: '10.66.6.6:8000' } };
    assert.equal(a.apply([redirected], EPOCH + 800).untrusted, 1);

    const extraModel = wire();
    extraModel.pods[1] = {
      ...extraModel.pods[1],
      info: { ...extraModel.pods[1].info!, models: [...extraModel.pods[1].info!.models, 'gpt-4o'] },
    };
    assert.equal(a.apply([extraModel], EPOCH + 800).untrusted, 1);

    const idle = wire();
    idle.pods[2] = { ...idle.pods[2], queuedNow: 0, queued: 0 };
    assert.equal(a.apply([idle], EPOCH + 800).untrusted, 1);
    assert.equal(a.remoteEstimates(EPOCH + 800).length, 0);

    assert.equal(a.apply([wire()], EPOCH + 800).dataChanged, true);
    assert.equal(a.remoteEstimates(EPOCH + 800).length, 3);
    assert.ok(a.remoteEstimates(EPOCH + 800).every((e) => e.pod.models.join() === 'llama-3-8b-instruct'));
  });

  it("refuses a rewritten increment of another origin, and applies the origin's own", () => {
    const a = agent('a');
    const b = agent('b');
    b.localUpdate(podEstimates('node-b', 2), EPOCH + 500);
    a.apply([fullDelta(b)], EPOCH + 600);
    const since = b.self.version;
    b.localUpdate(podEstimates('node-b', 2, { queuedNow: 40, queued: 40 }), EPOCH + 1500);
    const forged = incrementDelta(b, since);
    forged.pods = forged.pods.map((e) => ({ ...e, queuedNow: 0, queued: 0 }));
    assert.equal(a.apply([forged], EPOCH + 1600).untrusted, 1);
    assert.ok(a.remoteEstimates(EPOCH + 1600).every((e) => e.queuedNow === 2));
    assert.equal(a.apply([incrementDelta(b, since)], EPOCH + 1600).dataChanged, true);
    assert.ok(a.remoteEstimates(EPOCH + 1600).every((e) => e.queuedNow === 40));
  });

  it("a forged version claim cannot freeze an origin: the origin's next change still applies", () => {
    const a = agent('a');
    const b = agent('b');
    b.localUpdate(podEstimates('node-b', 1), EPOCH + 500);
    a.apply([fullDelta(b)], EPOCH + 600);
    const held = b.self.version;
    // A digest and heartbeats claiming B is far ahead, with a data lag that makes it look
    // heartbeats-only: adopted, it would make every real delta look stale.
    const claim = { origins: [b.self.id], versions: [held + 10_000], dataLag: [10_000], shard: 0, shards: 0 };
    a.compare(claim, EPOCH + 700);
    a.adoptHeartbeats(claim, EPOCH + 700);
    assert.equal(a.origin('node-b', b.self.agent)!.version, held);
    // Beats within the epoch held are adopted (no signature needed for what changes nothing).
    a.adoptHeartbeats({ ...claim, versions: [held + 1], dataLag: [1] }, EPOCH + 700);
    assert.equal(a.origin('node-b', b.self.agent)!.version, held + 1);

    b.localUpdate(podEstimates('node-b', 1, { queuedNow: 9 }), EPOCH + 1500);
    assert.equal(a.apply([incrementDelta(b, held)], EPOCH + 1600).dataChanged, true);
    assert.equal(a.remoteEstimates(EPOCH + 1600)[0].queuedNow, 9);
  });

  it('heartbeats roll into a new epoch with a fresh stamp, which a pod-less delta carries', () => {
    const a = agent('a');
    const b = agent('b');
    b.localUpdate(podEstimates('node-b', 1), EPOCH + 500);
    a.apply([fullDelta(b)], EPOCH + 600);
    const held = b.self.version;
    let now = EPOCH + 600;
    for (let i = 0; i < EPOCH_BEATS; i++) b.heartbeat((now += b.heartbeatMs));
    assert.ok(b.self.version >= held + EPOCH_BEATS);
    const delta = incrementDelta(b, held, now);
    assert.equal(delta.pods.length, 0);
    assert.ok(delta.stamp);
    const result = a.apply([delta], now);
    assert.equal(result.advanced, 1);
    assert.equal(a.origin('node-b', b.self.agent)!.version, b.self.version);
  });

  it('bounds what one key holds: made-up origins take no room, and a real agent still joins', () => {
    const a = agent('a', EPOCH, signers.a);
    // 4,200 made-up origins, each signed with a key nobody listed.
    for (let i = 0; i < 4200; i++) {
      const fake = new GossipState({
        nodeId: `fake-${i}`,
        agent: `10.9.${i >> 8}.${i & 255}:7946`,
        incarnation: EPOCH,
        signer: signers.m,
      });
      fake.localUpdate(podEstimates(`fake-${i}`, 1), EPOCH + 10);
      a.apply([fullDelta(fake)], EPOCH + 20);
    }
    // The compromised agent's own key, minting origins under its own node: only a few are held.
    for (let i = 0; i < 20; i++) {
      const minted = new GossipState({
        nodeId: 'node-m',
        agent: `10.0.9.${i}:7946`,
        incarnation: EPOCH + i,
        signer: signers.m,
        keyring,
      });
      minted.localUpdate(podEstimates('node-m', 1), EPOCH + 10);
      a.apply([fullDelta(minted)], EPOCH + 20);
    }
    assert.equal(a.size, 1 + a.maxOriginsPerKey);
    const b = agent('b');
    b.localUpdate(podEstimates('node-b', 1), EPOCH + 10);
    assert.equal(a.apply([fullDelta(b)], EPOCH + 20).dataChanged, true);
    assert.equal(addresses(a, EPOCH + 20, 'node-b').length, 1);
  });
});

describe('Kubernetes mode: an agent keeps the key it signs with', () => {
  const k8s = (node: string, agent: string, incarnation: number, signer: OriginSigner) =>
    new GossipState({ nodeId: node, agent, incarnation, signer, keyring: new ContinuityKeyring() });

  it('refuses another key for an agent whose origin is held, and takes a new one once it has left', () => {
    const agentB = '10.244.2.9:7946';
    const a = k8s('node-a', '10.244.1.4:7946', EPOCH, signers.a);
    a.setMembers(new Set([agentB]));
    const b = k8s('node-b', agentB, EPOCH, signers.b);
    b.localUpdate(podEstimates('node-b', 1), EPOCH + 10);
    assert.equal(a.apply([fullDelta(b)], EPOCH + 20).dataChanged, true);

    const impostor = k8s('node-b', agentB, EPOCH + 5000, signers.m);
    impostor.localUpdate(podEstimates('node-b', 1), EPOCH + 10);
    assert.equal(a.apply([fullDelta(impostor)], EPOCH + 20).untrusted, 1);
    assert.equal(a.origin('node-b', agentB)!.incarnation, EPOCH);

    // B's pod is replaced (a new agent at the same address, with a fresh key): once the old one
    // has left the membership, the new key is taken.
    a.setMembers(new Set());
    const restarted = k8s('node-b', agentB, EPOCH + 9000, new OriginSigner());
    restarted.localUpdate(podEstimates('node-b', 1), EPOCH + 10);
    assert.equal(a.apply([fullDelta(restarted)], EPOCH + 20).dataChanged, true);
  });
});

describe('signed gossip over UDP: two agents and an impostor holding the cluster key', () => {
  it("A keeps routing B's pods to B's addresses while the impostor publishes under B's origin", async () => {
    const KEY = Buffer.alloc(32, 0x33);
    const options = { key: KEY, intervalMs: 50, ttlMs: 3000, keyring, bind: '127.0.0.1:0', peers: [] };
    const a = new GossipNode({ ...options, nodeId: 'node-a', signer: signers.a });
    const b = new GossipNode({ ...options, nodeId: 'node-b', signer: signers.b });
    await a.start();
    await b.start();
    const raw = createSocket('udp4');
    await new Promise<void>((resolve) => raw.bind(0, '127.0.0.1', resolve));
    try {
      a.setPeers([b.address()]);
      b.setPeers([a.address()]);
      b.publishLocal(podEstimates('node-b', 2));
      await waitFor(() => a.remoteEstimates().length === 2, 5000, "A to hear B's pods");
      const real = a
        .remoteEstimates()
        .map((e) => e.pod.address)
        .sort();

      // The impostor: B's node and agent address, a newer incarnation, its own key and pods.
      const impostor = new GossipState({
        nodeId: 'node-b',
        agent: b.address(),
        incarnation: Date.now(),
        signer: signers.m,
      });
      impostor.localUpdate(
        podEstimates('node-b', 2).map((e) => ({ ...e, pod: { ...e.pod, address: '127.0.0.66:8000' } })),
        Date.now(),
      );
      const sealer = new Sealer({ sender: b.address(), key: KEY, boot: Date.now() + 1 });
      const payload = encodePayload({ deltas: [writeDelta(impostor.self, 0, 1 << 16, Date.now())!.delta] });
      const target = parseHostPort(a.address());
      raw.send(sealer.seal(payload, Date.now(), a.address()), target.port, target.host);
      await waitFor(() => a.stats().untrusted >= 1, 5000, 'the impostor to be refused');
      assert.deepEqual(
        a
          .remoteEstimates()
          .map((e) => e.pod.address)
          .sort(),
        real,
      );
    } finally {
      raw.close();
      await a.stop();
      await b.stop();
    }
  });
});
