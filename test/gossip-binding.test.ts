// Kubernetes: an agent's gossip key is bound to its pod through the API before it may sign that
// agent's origin (agent/gossip/binding.ts, agent/cluster/token-review.ts). Real agents on loopback
// addresses of their own (the pods' IPs), a Kubernetes API stand-in that issues pod-bound
// ServiceAccount tokens and answers TokenReview, and agents that try to pass with the wrong token.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { agentTokenReviewer } from '../agent/cluster/token-review.ts';
import { loadKubeConfig } from '../agent/cluster/kubernetes-settings.ts';
import { AgentBinder, type BindingClaim } from '../agent/gossip/binding.ts';
import { GossipNode } from '../agent/gossip/node.ts';
import { OriginSigner } from '../agent/gossip/signatures.ts';
import { FakeKubeApiServer } from './fixtures/kube-apiserver.ts';
import { podEstimates } from './fixtures/gossip-estimates.ts';
import { waitFor } from './helpers/stack.ts';

const NS = 'kinference';
const SA = 'kinference-agent';
const AUDIENCE = 'kinference-gossip';
const KEY = Buffer.alloc(32, 0x5a);

interface Agent {
  name: string;
  node: GossipNode;
  binder: AgentBinder;
  signer: OriginSigner;
}

describe('gossip keys bound to agent pods by TokenReview (Kubernetes stand-in)', () => {
  let api: FakeKubeApiServer;
  const agents: Agent[] = [];
  const verdicts = new Map<string, string | undefined>();
  let tokenOfB = '';

  /** A pod in the stand-in; returns its uid. */
  const pod = (name: string, node: string, ip: string, serviceAccount = SA): string =>
    api.put({
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name, namespace: NS, labels: { 'app.kubernetes.io/name': 'kinference' } },
      spec: { nodeName: node, serviceAccountName: serviceAccount },
      status: { phase: 'Running', podIP: ip, podIPs: [{ ip }] },
    }).metadata.uid!;

  const tokenFor = (podName: string, node: string, uid: string, o: { audience?: string; sa?: string } = {}) =>
    api.tokens.issue({
      namespace: NS,
      serviceAccount: o.sa ?? SA,
      audiences: [o.audience ?? AUDIENCE],
      pod: { name: podName, uid },
      node: { name: node, uid: `uid-${node}` },
    });

  async function start(name: string, nodeId: string, ip: string, token: () => string | undefined): Promise<Agent> {
    const signer = new OriginSigner();
    const review = agentTokenReviewer(loadKubeConfig(api.kubeconfigPath), {
      namespace: NS,
      serviceAccount: SA,
      audience: AUDIENCE,
    });
    const binder = new AgentBinder({
      review,
      token,
      signer,
      now: Date.now,
      retryMs: 60_000,
      onVerdict: (claim: BindingClaim, refused) => verdicts.set(`${name}<-${claim.node}@${claim.agent}`, refused),
    });
    const node = new GossipNode({
      nodeId,
      bind: `${ip}:0`,
      peers: [],
      key: KEY,
      intervalMs: 50,
      ttlMs: 5000,
      signer,
      keyring: binder,
      binding: binder,
    });
    await node.start();
    const agent = { name, node, binder, signer };
    agents.push(agent);
    return agent;
  }

  before(async () => {
    api = await FakeKubeApiServer.start();
  });

  after(async () => {
    for (const a of agents) await a.node.stop();
    await api.close();
  });

  it("accepts a real agent's origin, and refuses tokens of another node, another ServiceAccount, another audience, unknown ones, and a real agent's token presented from another address", async () => {
    const uidA = pod('agent-a', 'node-a', '127.0.0.11');
    const uidB = pod('agent-b', 'node-b', '127.0.0.12');
    const uidC = pod('agent-c', 'node-c', '127.0.0.13');
    const uidD = pod('batch-d', 'node-d', '127.0.0.14', 'default');
    const uidE = pod('agent-e', 'node-e', '127.0.0.15');
    pod('agent-m', 'node-m', '127.0.0.17');
    tokenOfB = tokenFor('agent-b', 'node-b', uidB);
    const tokenOfA = tokenFor('agent-a', 'node-a', uidA);

    const a = await start('A', 'node-a', '127.0.0.11', () => tokenOfA);
    const b = await start('B', 'node-b', '127.0.0.12', () => tokenOfB);
    // Its token is for its pod on node-c; it claims node-x.
    const otherNode = await start('C', 'node-x', '127.0.0.13', () => tokenFor('agent-c', 'node-c', uidC));
    // A pod on node-d, but of another ServiceAccount.
    const otherAccount = await start('D', 'node-d', '127.0.0.14', () =>
      tokenFor('batch-d', 'node-d', uidD, { sa: 'default' }),
    );
    // The agent ServiceAccount, but a token for the API server's own audience.
    const otherAudience = await start('E', 'node-e', '127.0.0.15', () =>
      tokenFor('agent-e', 'node-e', uidE, { audience: 'https://kubernetes.default.svc.cluster.local' }),
    );
    const unknown = await start('F', 'node-f', '127.0.0.16', () => 'eyJhbGciOiJSUzI1NiJ9.e30.bm90LWEtdG9rZW4');
    // A forged origin with a valid key: it claims B's node and presents B's real token (which any
    // holder of the cluster key can obtain by challenging B), from its own address.
    const forged = await start('M', 'node-b', '127.0.0.17', () => tokenOfB);

    const others = [b, otherNode, otherAccount, otherAudience, unknown, forged];
    a.node.setPeers(others.map((o) => o.node.address()));
    for (const o of others) {
      o.node.setPeers([a.node.address()]);
      o.node.publishLocal(podEstimates(o.node.nodeId, 1));
    }
    await waitFor(() => verdicts.size >= 6, 10_000, 'A to decide on every agent');
    await waitFor(() => a.node.remoteEstimates().length === 1, 5000, "A to take B's pod");

    const verdict = (o: Agent) => verdicts.get(`A<-${o.node.nodeId}@${o.node.address()}`);
    assert.equal(verdict(b), undefined, 'the real agent was refused');
    assert.match(verdict(otherNode) ?? '', /on node-c, not node-x/);
    assert.match(verdict(otherAccount) ?? '', /system:serviceaccount:kinference:default, not .*kinference-agent/);
    assert.match(verdict(otherAudience) ?? '', /not authenticated.*invalid for the target audiences/);
    assert.match(verdict(unknown) ?? '', /not authenticated/);
    assert.match(verdict(forged) ?? '', /pod agent-b is not at 127\.0\.0\.17/);

    // Only B's pod is routable from A, under B's agent address.
    const held = a.node.stats().origins.filter((o) => o.pods > 0);
    assert.deepEqual(
      held.map((o) => `${o.origin}@${o.agent}`),
      [`node-b@${b.node.address()}`],
    );
    assert.deepEqual(
      a.node.remoteEstimates().map((e) => e.origin),
      ['node-b'],
    );
    assert.ok(a.node.stats().untrusted >= 5, 'the refused origins were not counted');

    // Each origin is reviewed once, whatever it keeps sending: verdicts are cached.
    const reviews = api.tokens.reviews;
    const trusted = a.binder.counters.trusted;
    await new Promise((r) => setTimeout(r, 500));
    assert.equal(api.tokens.reviews, reviews);
    assert.equal(trusted, 1);
  });

  it("refuses a forged origin signed with a valid key under B's address: B answers the challenge with its own key", async () => {
    const a = agents.find((x) => x.name === 'A')!;
    const b = agents.find((x) => x.name === 'B')!;
    // An impostor on B's node and at B's address, with a key of its own: A challenges B's address,
    // and B answers with B's key.
    const impostorKey = new OriginSigner();
    const refused = a.binder.counters.refused;
    assert.equal(a.binder.trusts('node-b', b.node.address(), impostorKey.publicKey), false);
    await waitFor(() => a.binder.counters.refused > refused, 5000, 'the challenge to be answered');
    assert.match(
      verdicts.get(`A<-node-b@${b.node.address()}`) ?? '',
      /another key/,
      'the impostor key was not refused',
    );
    assert.equal(a.binder.trusts('node-b', b.node.address(), impostorKey.publicKey), false);
    // B's own key stays bound.
    assert.equal(a.binder.trusts('node-b', b.node.address(), b.signer.publicKey), true);
  });
});
