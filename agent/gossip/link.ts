// The agent's gossip, built from its settings: the node itself, our pods' estimates published
// once a round, and other nodes' pods screened (agent/cluster/peer-pods.ts) before they become
// candidates. Gossiped pods become candidates only when the cluster vouches for them.
import { readFileSync } from 'node:fs';
import type { Counter, Registry } from 'prom-client';
import type { PeerPodRules } from '../cluster/types.ts';
import { peerPodScreen, type ScreenedPeers } from '../cluster/peer-pods.ts';
import type { AgentSettings } from '../config/load.ts';
import type { GossipSettings } from './config.ts';
import { resolveSecret } from '../config/secrets.ts';
import type { PodEstimate } from '../types.ts';
import { registerBindingMetrics, registerGossipMetrics } from './metrics.ts';
import { GossipNode, type GossipStats } from './node.ts';
import type { GossipRider } from './rider.ts';
import { AgentBinder, type TokenReviewer } from './binding.ts';
import { ContinuityKeyring, OriginSigner, StaticKeyring, type Keyring } from './signatures.ts';

/** Rounds without a datagram after which an agent with peers listed takes itself to be alone. */
const SILENT_ROUNDS_ALONE = 15;

/** Rejections counted once per pod, address and reason; the memory of them is bounded. */
const MAX_COUNTED_REJECTIONS = 10_000;

export interface GossipLinkDeps {
  node: string;
  settings: GossipSettings;
  /** Static: only the configured peer keys sign origins; Kubernetes: AgentBinder (tokenBinding), else ContinuityKeyring. */
  discovery: 'static' | 'kubernetes';
  peers: readonly string[];
  now: () => number;
  rand: () => number;
  registry: Registry;
  /** kinference_peer_pods_rejected_total{reason}. */
  peerPodsRejected: Pick<Counter<'reason'>, 'inc'>;
  log(level: 'warn', message: string): void;
  /** Where our estimates come from and where screened peers' estimates go. */
  pool: { localEstimates(): PodEstimate[]; setRemote(estimates: readonly PodEstimate[]): void };
  /** Our gossip origin instance (ms), shared with the budget ledger's origin name. */
  incarnation?: number;
  /** State carried in gossip's datagrams: the overflow budget counters (agent/budget/exchange.ts). */
  rider?: GossipRider;
  /** Kubernetes with `gossip.tokenBinding`: reviews agents' tokens (agent/cluster/token-review.ts). */
  reviewer?: TokenReviewer;
}

/** The agent's gossip link from its settings, or none when gossip is off; peers come from discovery. */
export function gossipFor(
  settings: AgentSettings,
  deps: Omit<GossipLinkDeps, 'node' | 'settings' | 'peers' | 'discovery'>,
): GossipLink | undefined {
  return settings.gossip
    ? new GossipLink({
        node: settings.node,
        settings: settings.gossip,
        discovery: settings.discovery,
        peers: [],
        ...deps,
        ...(settings.discovery === 'kubernetes' && settings.gossip.tokenBinding
          ? { reviewer: lazyReviewer(settings, settings.gossip.tokenBinding) }
          : {}),
      })
    : undefined;
}

/** The API client is loaded on the first review (an agent without Kubernetes loads none of it). */
function lazyReviewer(settings: AgentSettings, binding: NonNullable<GossipSettings['tokenBinding']>): TokenReviewer {
  let reviewer: Promise<TokenReviewer> | undefined;
  const load = async (): Promise<TokenReviewer> => {
    const { loadKubeConfig, resolveSettings } = await import('../cluster/kubernetes-settings.ts');
    const { agentTokenReviewer } = await import('../cluster/token-review.ts');
    const { agentNamespace } = resolveSettings({ nodeName: settings.node, ...settings.kubernetes });
    return agentTokenReviewer(loadKubeConfig(settings.kubernetes.kubeconfig), {
      namespace: agentNamespace,
      serviceAccount: binding.serviceAccount ?? 'kinference-agent',
      audience: binding.audience ?? 'kinference-gossip',
    });
  };
  return async (token, claim) => (await (reviewer ??= load()))(token, claim);
}

/** A token read at most once a minute (the kubelet rotates it well before it expires); none yet: read again. */
function tokenFile(path: string, now: () => number): () => string | undefined {
  let cached: { token: string; at: number } | undefined;
  return () => {
    if (cached && now() - cached.at < 60_000) return cached.token;
    try {
      const token = readFileSync(path, 'utf8').trim();
      if (token) cached = { token, at: now() };
    } catch {
      // not mounted (yet): challenges go unanswered, and peers retry
    }
    return cached?.token;
  };
}

function keyringFor(deps: GossipLinkDeps, signer: OriginSigner): Keyring {
  const { discovery, settings, reviewer } = deps;
  if (discovery === 'static') return new StaticKeyring(settings.peerKeys ?? []);
  if (!reviewer || !settings.tokenBinding) return new ContinuityKeyring();
  return new AgentBinder({
    review: reviewer,
    token: tokenFile(settings.tokenBinding.tokenFile, deps.now),
    signer,
    now: deps.now,
    onVerdict: (claim, refused) => {
      if (refused) deps.log('warn', `gossip key of ${claim.node} (${claim.agent}) not bound: ${refused}`);
    },
  });
}

export class GossipLink {
  readonly #deps: GossipLinkDeps;
  readonly #node: GossipNode;
  #startedAt = 0;
  #rules: PeerPodRules | undefined;
  /** Agents' own API addresses (ours, once listening): never routable pods. */
  readonly #agentApis = new Set<string>();
  #screen = peerPodScreen(undefined);
  #rejected: ScreenedPeers<PodEstimate>['rejected'] = [];
  readonly #counted = new Set<string>();
  #publishTimer: NodeJS.Timeout | undefined;

  constructor(deps: GossipLinkDeps) {
    this.#deps = deps;
    const { settings } = deps;
    const signer = new OriginSigner(settings.identity ? resolveSecret(settings.identity) : undefined);
    const keyring = keyringFor(deps, signer);
    this.#node = new GossipNode({
      nodeId: deps.node,
      bind: settings.bind,
      peers: deps.peers,
      advertise: settings.advertise,
      key: Buffer.from(resolveSecret(settings.key)),
      intervalMs: settings.intervalMs,
      fanout: settings.fanout,
      ttlMs: settings.ttlMs,
      now: deps.now,
      rand: deps.rand,
      incarnation: deps.incarnation,
      rider: deps.rider,
      signer,
      keyring,
      ...(keyring instanceof AgentBinder ? { binding: keyring } : {}),
    });
    this.#node.onChange(() => this.#screenPeers());
    registerGossipMetrics(deps.registry, this.#node);
    if (keyring instanceof AgentBinder) registerBindingMetrics(deps.registry, keyring);
  }

  async start(): Promise<void> {
    await this.#node.start();
    this.#startedAt = this.#deps.now();
    // Once per gossip round (cheap: the state machine only sends deltas).
    this.#publishTimer = setInterval(
      () => this.#node.publishLocal(this.#deps.pool.localEstimates()),
      this.#deps.settings.intervalMs,
    );
    this.#publishTimer.unref();
  }

  /** Peers to gossip with, and the members among them (whose estimates are read; default all). */
  setPeers(peers: readonly string[], members?: readonly string[]): void {
    this.#node.setPeers(peers, members);
  }

  /** New rules from discovery: screen what we hold again. */
  setPeerPodRules(rules: PeerPodRules | undefined): void {
    this.#rules = rules;
    this.#screen = peerPodScreen(rules, this.#agentApis);
    this.#screenPeers();
  }

  /** Our API's address(es) as others reach it: a gossiped pod there is a loop, never a candidate. */
  addAgentApi(...addresses: string[]): void {
    for (const a of addresses) this.#agentApis.add(a);
    this.#screen = peerPodScreen(this.#rules, this.#agentApis);
    this.#screenPeers();
  }

  /** Gossiped pods the cluster does not vouch for, for /debug/state. */
  get rejected(): ScreenedPeers<PodEstimate>['rejected'] {
    return this.#rejected;
  }

  stats(): GossipStats {
    return this.#node.stats();
  }

  /** One of `node`'s pods failed before its first byte: probe its agent, its pods out meanwhile (at once). */
  suspect(node: string): void {
    if (this.#node.suspect(node)) this.#screenPeers();
  }

  /**
   * A new agent (a rollout's surge) is ready once it has heard a peer, so it routes with the
   * cluster's view from its first request; alone in the cluster, a few seconds of silence are
   * enough (a peer answers a digest within a round).
   */
  readiness(peersKnown: boolean): { ok: boolean; detail?: string } {
    if (!peersKnown) return { ok: true };
    const heard = this.#node.stats().received.datagrams > 0;
    const { ttlMs, intervalMs } = this.#deps.settings;
    return heard || this.#deps.now() - this.#startedAt >= Math.min(ttlMs, SILENT_ROUNDS_ALONE * intervalMs)
      ? { ok: true }
      : { ok: false, detail: 'no gossip heard yet' };
  }

  async stop(): Promise<void> {
    clearInterval(this.#publishTimer);
    await this.#node.stop();
  }

  #screenPeers(): void {
    const { accepted, rejected } = this.#screen(this.#node.remoteEstimates());
    for (const r of rejected) {
      // Counted once per pod, address and reason, not on every gossip round that repeats it.
      const key = `${r.uid}\u0000${r.address}\u0000${r.reason}`;
      if (this.#counted.has(key)) continue;
      if (this.#counted.size >= MAX_COUNTED_REJECTIONS) this.#counted.clear();
      this.#counted.add(key);
      this.#deps.peerPodsRejected.inc({ reason: r.reason });
      this.#deps.log('warn', `gossiped pod ${r.uid} at ${r.address} from ${r.origin} is not routable: ${r.reason}`);
    }
    this.#rejected = rejected;
    this.#deps.pool.setRemote(accepted);
  }
}
