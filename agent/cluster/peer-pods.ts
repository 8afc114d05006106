// Which gossiped pods may become routing candidates. Pure.
//
// Gossip is authenticated by one shared key, so one compromised node can announce a "pod" at any
// address and attract requests, data included. An estimate is therefore only believed about a
// pod the cluster itself vouches for: in Kubernetes, a routable model-server pod the API knows
// at that IP, in that namespace, on the node that announces it; in static mode, an address in
// the ranges the operator declared. Its numbers must be plausible too: a negative or absurd cost
// would pull (or push) every request.
import { BlockList, isIP } from 'node:net';
import { parseHostPort } from '../gossip/node.ts';
import type { PodEstimate } from '../types.ts';
import type { PeerPodRules } from './types.ts';

export type PeerRejection =
  | 'unknown-address'
  | 'wrong-namespace'
  | 'wrong-node'
  | 'outside-cidrs'
  | 'bad-estimate'
  | 'no-rules'
  | 'agent-address';

export interface ScreenedPeers<T> {
  accepted: T[];
  rejected: { uid: string; origin: string; address: string; reason: PeerRejection }[];
}

/** Bounds of a believable estimate (queue lengths in requests, predictor terms in ms). */
export const ESTIMATE_BOUNDS = { maxQueue: 100_000, maxParamMs: 600_000 } as const;

/**
 * A compiled check for the rules (BlockList built once per snapshot, not per estimate).
 * `agentApis`: agents' own API addresses (host:port), never a pod: a request sent there would come
 * back into an agent (a loop).
 */
export function peerPodScreen(
  rules: PeerPodRules | undefined,
  agentApis: ReadonlySet<string> = new Set(),
): <T extends PodEstimate>(estimates: readonly T[]) => ScreenedPeers<T> {
  const blocks = rules?.kind === 'cidrs' ? cidrBlockList(rules.cidrs) : undefined;
  return <T extends PodEstimate>(estimates: readonly T[]) => {
    const out: ScreenedPeers<T> = { accepted: [], rejected: [] };
    for (const e of estimates) {
      const host = hostOf(e.pod.address);
      const reason = !plausible(e)
        ? 'bad-estimate'
        : agentApis.has(e.pod.address)
          ? 'agent-address'
          : whyUnknown(rules, blocks, e, host);
      if (reason) out.rejected.push({ uid: e.pod.uid, origin: e.origin, address: e.pod.address, reason });
      else out.accepted.push(e);
    }
    return out;
  };
}

function whyUnknown(
  rules: PeerPodRules | undefined,
  blocks: BlockList | undefined,
  e: PodEstimate,
  host: string,
): PeerRejection | undefined {
  if (!rules) return 'no-rules';
  if (rules.kind === 'cidrs') {
    const family = isIP(host);
    return family !== 0 && blocks!.check(host, family === 6 ? 'ipv6' : 'ipv4') ? undefined : 'outside-cidrs';
  }
  const known = rules.pods.get(host);
  if (!known) return 'unknown-address';
  if (known.namespace !== e.pod.namespace) return 'wrong-namespace';
  // The announcing agent speaks for its own node's pods only.
  if (known.node !== e.pod.node || e.origin !== e.pod.node) return 'wrong-node';
  return undefined;
}

function plausible(e: PodEstimate): boolean {
  const queue = (x: number) => Number.isFinite(x) && x >= 0 && x <= ESTIMATE_BOUNDS.maxQueue;
  const ms = (x: number | undefined) =>
    x === undefined || (Number.isFinite(x) && x >= 0 && x <= ESTIMATE_BOUNDS.maxParamMs);
  const p = e.params;
  return (
    queue(e.queued) &&
    queue(e.queuedNow) &&
    queue(e.running) &&
    // NaN: the engine does not report KV use (TGI); unknown, not bad.
    (Number.isNaN(e.kvCache) || (e.kvCache >= 0 && e.kvCache <= 1)) &&
    ms(p.base) &&
    ms(p.perQueued) &&
    ms(p.perRunning) &&
    ms(p.perKPromptTokens) &&
    ms(p.perKPendingTokens)
  );
}

/** `10.0.0.5:8000` → `10.0.0.5`; `[fd00::1]:8000` → `fd00::1`; '' when it is no host:port. */
function hostOf(address: string): string {
  try {
    return parseHostPort(address).host;
  } catch {
    return '';
  }
}

/** Throws on a malformed range (config validation calls this too). */
export function cidrBlockList(cidrs: readonly string[]): BlockList {
  const list = new BlockList();
  for (const cidr of cidrs) {
    const [net, bits] = cidr.split('/');
    const family = isIP(net);
    const prefix = Number(bits);
    const max = family === 6 ? 128 : 32;
    if (family === 0 || bits === undefined || !Number.isInteger(prefix) || prefix < 0 || prefix > max) {
      throw new Error(`"${cidr}" is not a CIDR range like 10.0.0.0/16 or fd00::/64`);
    }
    list.addSubnet(net, prefix, family === 6 ? 'ipv6' : 'ipv4');
  }
  return list;
}
