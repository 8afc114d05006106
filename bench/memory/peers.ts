// The rest of a cluster, as far as one agent can tell: `--nodes` peer agents' gossip, each
// announcing `--pods` model-server pods, in one process. Each peer listens on its own loopback
// address (127.0.1.x), as a real peer would on its own node, so the agent's per-source gossip rate
// limit sees one node per address. Their pods all point at `--pod` (the bench's one upstream), so
// a request routed to a peer's pod is answered too. Every round a few pods' queues move, so the
// agent keeps receiving deltas and re-ranking its shortlists. One process plays 125 agents, so
// they gossip once a second (not 5 times) with a 10 s TTL (the bench gives the agent the same TTL).
// Prints `peers <json list of host:port>` once every node listens; runs until killed.
import { parseArgs } from 'node:util';
import { GossipNode } from '../../agent/gossip/node.ts';
import { benchPeerSigner } from './launch.ts';
import { createHash, type KeyObject } from 'node:crypto';
import { StaticKeyring, verifyStamp } from '../../agent/gossip/signatures.ts';
import { mulberry32 } from '../../shared/sim/random.ts';
import type { PodEstimate } from '../../agent/types.ts';

const { values } = parseArgs({
  options: {
    nodes: { type: 'string', default: '125' },
    pods: { type: 'string', default: '8' },
    agent: { type: 'string' },
    pod: { type: 'string' },
    model: { type: 'string', default: 'bench-model' },
    'interval-ms': { type: 'string', default: '1000' },
    'ttl-ms': { type: 'string', default: '10000' },
  },
});
const key = Buffer.from(process.env.KINFERENCE_BENCH_GOSSIP_KEY ?? '');
const nodes = Number(values.nodes);
const podsPerNode = Number(values.pods);
const intervalMs = Number(values['interval-ms']);
const ttlMs = Number(values['ttl-ms']);
const rand = mulberry32(7);

/** Peers' pods: busier than an idle local pod, a quarter of them serving another model. */
function estimatesOf(node: string, base: number): PodEstimate[] {
  return Array.from({ length: podsPerNode }, (_, i) => {
    const n = base + i;
    const queued = 1 + (n % 5);
    return {
      pod: {
        uid: `${node}/vllm-${i}`,
        name: `vllm-${i}`,
        namespace: 'inference',
        node,
        address: values.pod!,
        models: [n % 4 === 0 ? 'other-model' : values.model!],
        engine: 'vllm',
      },
      queued,
      queuedNow: queued,
      running: 8 + (n % 8),
      kvCache: 0.4,
      params: { base: 30 + (n % 7), perQueued: 120, perRunning: 3, perKPromptTokens: 40 },
      at: Date.now(),
      origin: node,
      version: 0,
    };
  });
}

// Every peer trusts every peer's key, as a static cluster's agents do (gossip.peerKeys): a relay
// without a keyring holds origins unsigned and relays them without their stamps, which the agent
// (keyring given) refuses, so it would learn only the pods it hears first-hand.
const signers = Array.from({ length: nodes }, (_, k) => benchPeerSigner(k));
const keyring = new StaticKeyring(signers.map((s, k) => ({ node: `peer-${k}`, key: s.publicKey.toString('base64') })));
// Each stamp is checked once for all 125 (each real agent has its own CPU for its checks): without
// this, one process checking every pod change 125 times falls behind its own gossip rounds.
const verdicts = new Map<string, boolean>();
function sharedVerify(publicKey: KeyObject, message: Buffer, stamp: Uint8Array): boolean {
  const id = createHash('sha256').update(message).update(stamp).digest('base64');
  let verdict = verdicts.get(id);
  if (verdict === undefined) {
    if (verdicts.size >= 100_000) verdicts.clear();
    verdicts.set(id, (verdict = verifyStamp(publicKey, message, stamp)));
  }
  return verdict;
}
const peers = await Promise.all(
  Array.from({ length: nodes }, async (_, k) => {
    const host = `127.0.1.${k + 1}`;
    const node = new GossipNode({
      nodeId: `peer-${k}`,
      bind: `${host}:0`,
      peers: [],
      key,
      intervalMs,
      ttlMs,
      signer: signers[k],
      keyring,
      verify: sharedVerify,
    });
    await node.start();
    return { node, estimates: estimatesOf(`peer-${k}`, k * podsPerNode) };
  }),
);
// Peers gossip with each other and the agent, as in a cluster: the agent hears each peer's pods
// first- or second-hand at the protocol's own fan-out, not from every peer every round.
const everyone = [values.agent!, ...peers.map((p) => p.node.address())];
for (const p of peers) p.node.setPeers(everyone);
const publish = () => {
  const now = Date.now();
  for (const p of peers) {
    // One pod in eight changes its queue a round: steady, realistic churn.
    for (const e of p.estimates) if (rand() < 0.125) e.queued = e.queuedNow = 1 + Math.floor(rand() * 5);
    p.node.publishLocal(p.estimates.map((e) => ({ ...e, at: now })));
  }
};
publish();
setInterval(publish, intervalMs);
process.stdout.write(`peers ${JSON.stringify(peers.map((p) => p.node.address()))}\n`);
