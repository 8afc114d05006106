// The gossip's part of the agent's config file: its schema, its defaults, and the settings the
// gossip link starts from (agent/config assembles the file from each domain's part).
import { Type, type Static } from '@sinclair/typebox';
import { isIP } from 'node:net';
import { parseDuration } from '../../shared/duration.ts';
import { hostPort } from '../cluster/kubernetes-snapshot.ts';
import { cidrBlockList } from '../cluster/peer-pods.ts';
import { DurationString, HostPort, SecretRef as SecretRefSchema } from '../../shared/config-schema.ts';
import type { SecretRef } from '../config/secrets.ts';
import { parseHostPort } from './node.ts';
import { DEFAULT_TTL_MS } from './state.ts';

export const GossipConfig = Type.Object(
  {
    key: SecretRefSchema,
    interval: Type.Optional(DurationString),
    fanout: Type.Optional(Type.Integer({ minimum: 1, maximum: 16 })),
    /** Backstop behind membership: an agent silent this long is dropped (default 30s; heartbeat ttl / 3). */
    ttl: Type.Optional(DurationString),
    /** This agent's gossip address as peers list it; default: pod IP + gossip port (Kubernetes), else the bind address. */
    advertise: Type.Optional(HostPort),
    /** Added to a peer pod's predicted TTFT: the cost of the cross-node hop. */
    networkCost: Type.Optional(DurationString),
    /** Static mode: address ranges a gossiped pod must lie in to be routable (default: the peers' own IPs). */
    peerPodCidrs: Type.Optional(Type.Array(Type.String({ minLength: 1, maxLength: 64 }), { maxItems: 256 })),
    /** This agent's Ed25519 private key (PEM, PKCS#8) that signs its origin; default: a fresh one per start. */
    identity: Type.Optional(SecretRefSchema),
    /** Static mode: each peer node's agent public key (raw Ed25519, base64); only these sign origins. */
    peerKeys: Type.Optional(
      Type.Array(
        Type.Object(
          { node: Type.String({ minLength: 1, maxLength: 253 }), key: Type.String({ minLength: 1, maxLength: 64 }) },
          { additionalProperties: false },
        ),
        { maxItems: 4096 },
      ),
    ),
    /**
     * Kubernetes: bind each agent's key to its pod (agent/gossip/binding.ts). tokenFile: a projected
     * ServiceAccount token for `audience` (default kinference-gossip); serviceAccount: the agents'
     * (default kinference-agent), the only one whose tokens bind keys.
     */
    tokenBinding: Type.Optional(
      Type.Object(
        {
          tokenFile: Type.String({ minLength: 1, maxLength: 4096 }),
          audience: Type.Optional(Type.String({ minLength: 1, maxLength: 253 })),
          serviceAccount: Type.Optional(Type.String({ minLength: 1, maxLength: 253 })),
        },
        { additionalProperties: false },
      ),
    ),
  },
  { additionalProperties: false },
);

type GossipFile = Static<typeof GossipConfig>;

export interface GossipSettings {
  bind: string;
  key: SecretRef;
  intervalMs: number;
  fanout: number;
  /** Backstop: an origin silent this long is dropped, even if membership lists its agent. */
  ttlMs: number;
  networkCostMs: number;
  /** Our gossip address as peers list it (names our origin; checked against membership). */
  advertise?: string;
  /** Our Ed25519 private key (PEM); absent: a fresh one per start. */
  identity?: SecretRef;
  /** Static mode: the peers' public keys, by node (agent/gossip/signatures.ts). */
  peerKeys?: { node: string; key: string }[];
  /** Kubernetes: bind agents' keys to their pods with a ServiceAccount token (agent/gossip/binding.ts). */
  tokenBinding?: { tokenFile: string; audience?: string; serviceAccount?: string };
}

/** The gossip's settings: absent unless the agent listens for gossip and has its key. */
export function gossipSettings(
  file: GossipFile | undefined,
  bind: string | undefined,
  podIP: string | undefined,
): GossipSettings | undefined {
  if (!bind || !file) return undefined;
  return {
    bind,
    key: file.key,
    intervalMs: parseDuration(file.interval ?? '200ms'),
    fanout: file.fanout ?? 3,
    ttlMs: file.ttl ? parseDuration(file.ttl) : DEFAULT_TTL_MS,
    networkCostMs: parseDuration(file.networkCost ?? '2ms'),
    advertise: file.advertise ?? podGossipAddress(bind, podIP),
    ...(file.identity ? { identity: file.identity } : {}),
    ...(file.peerKeys ? { peerKeys: file.peerKeys } : {}),
    ...(file.tokenBinding ? { tokenBinding: file.tokenBinding } : {}),
  };
}

/** What the schema cannot check of the gossip's part, each naming its key. */
export function gossipProblems(
  file: GossipFile | undefined,
  bind: string | undefined,
  discovery: 'static' | 'kubernetes',
  peers: readonly string[],
): string[] {
  const problems: string[] = [];
  if (bind && !file) problems.push('gossip: listen.gossip is set, so gossip.key is required');
  // Static mode has no API to vouch for an agent's key: peers' origins count only when signed by a listed key.
  if (discovery === 'static' && bind && file && peers.length && !file.peerKeys?.length)
    problems.push("gossip.peerKeys: static mode with peers needs each peer node's agent public key");
  for (const [i, { node, key }] of (file?.peerKeys ?? []).entries())
    if (Buffer.from(key, 'base64').length !== 32)
      problems.push(`gossip.peerKeys[${i}].key: ${node}: not a base64 Ed25519 public key`);
  return problems;
}

/** gossip.peerPodCidrs, checked as the screen will parse them. */
export function peerPodCidrProblems(file: GossipFile | undefined): string[] {
  try {
    cidrBlockList(file?.peerPodCidrs ?? []);
    return [];
  } catch (error) {
    return [`gossip.peerPodCidrs: ${(error as Error).message}`];
  }
}

/** Ranges a gossiped pod's address must lie in: the declared ones, else the peers' own IPs. */
export function peerPodCidrs(file: GossipFile | undefined, peers: readonly string[]): string[] {
  return file?.peerPodCidrs ?? defaultPeerPodCidrs(peers);
}

/** Kubernetes: peers reach us at our pod IP (downward API) and the gossip port. */
function podGossipAddress(bind: string, podIP: string | undefined): string | undefined {
  return podIP ? hostPort(podIP, parseHostPort(bind).port) : undefined;
}

/** Without declared ranges, a peer's pods must sit at a peer agent's own IP (single-host setups, tests). */
function defaultPeerPodCidrs(peers: readonly string[]): string[] {
  const hosts = peers.map((p) => parseHostPort(p).host).filter((h) => isIP(h) !== 0);
  return [...new Set(hosts)].map((h) => `${h}/${isIP(h) === 6 ? 128 : 32}`);
}
