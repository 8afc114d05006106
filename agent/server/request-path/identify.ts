// Who is calling. In Kubernetes the caller's source IP names its pod, hence its namespace; the
// namespace is the tenant unless its `kinference.io/tenant` annotation says otherwise (the policy
// index applies that). A tenant header is believed only in static mode or when the operator
// configured one explicitly: otherwise any pod could claim to be any tenant.
//
// Identity fails closed: a caller whose namespace cannot be established (an IP no known pod has:
// another node's pod before the view caught up, a host-network pod, a pod seconds old) is not
// "some namespace" under the cluster-wide policy; it is the most restricted tenant, whose data
// never leaves the cluster.
import type { Caller } from '../../cluster/types.ts';
import type { EffectivePolicy } from '../../types.ts';

/** Not a valid namespace name, so no namespace policy or annotation can ever select it. */
export const UNIDENTIFIED = '(unidentified)';

export interface Unidentified {
  code: 'unknown-ip' | 'no-address';
  reason: string;
}

export interface Identity {
  tenant: string;
  namespace: string;
  /** Set when the caller could not be identified (namespace and tenant are UNIDENTIFIED). */
  unidentified?: Unidentified;
}

export interface IdentifyInput {
  trustTenantHeader: boolean;
  headerTenant: string | null;
  remoteIp: string | undefined;
  callers: ReadonlyMap<string, Caller>;
}

/** The caller's namespace and, when trusted, the tenant it claims. */
export interface Claim {
  namespace: string;
  claimedTenant?: string;
  unidentified?: Unidentified;
}

function normaliseIp(ip: string | undefined): string {
  return ip?.startsWith('::ffff:') ? ip.slice(7) : (ip ?? '');
}

export function identify(input: IdentifyInput): Claim {
  const ip = normaliseIp(input.remoteIp);
  const caller = input.callers.get(ip);
  const claimed = input.trustTenantHeader ? input.headerTenant?.trim() || undefined : undefined;
  if (caller) return { namespace: caller.namespace, claimedTenant: claimed };
  // Static mode has no caller map: the operator chose to trust the claimed tenant.
  if (input.trustTenantHeader)
    return claimed ? { namespace: claimed, claimedTenant: claimed } : { namespace: 'default' };
  const unidentified: Unidentified = ip
    ? {
        code: 'unknown-ip',
        reason: `no pod known to the cluster has the caller's IP ${ip}; treated as the most restricted tenant`,
      }
    : { code: 'no-address', reason: 'the caller has no address; treated as the most restricted tenant' };
  return { namespace: UNIDENTIFIED, unidentified };
}

/** The policy an unidentified caller gets: whatever applies cluster-wide, minus leaving. */
export function restrictUnidentified(policy: EffectivePolicy): EffectivePolicy {
  return {
    ...policy,
    name: `${policy.name} (caller unidentified)`,
    overflow: { ...policy.overflow, denyTenants: [...policy.overflow.denyTenants, UNIDENTIFIED] },
  };
}
