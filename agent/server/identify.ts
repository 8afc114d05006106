// Who is calling. In Kubernetes the caller's source IP names its pod, hence its namespace; the
// namespace is the tenant unless its `kinference.io/tenant` annotation says otherwise (the policy
// index applies that). A tenant header is believed only in static mode or when the operator
// configured one explicitly: otherwise any pod could claim to be any tenant.
import type { Caller } from '../cluster/types.ts';

export interface Identity {
  tenant: string;
  namespace: string;
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
}

function normaliseIp(ip: string | undefined): string {
  return ip?.startsWith('::ffff:') ? ip.slice(7) : (ip ?? '');
}

export function identify(input: IdentifyInput): Claim {
  const caller = input.callers.get(normaliseIp(input.remoteIp));
  const claimed = input.trustTenantHeader ? input.headerTenant?.trim() || undefined : undefined;
  if (caller) return { namespace: caller.namespace, claimedTenant: claimed };
  // Static mode has no caller map: the claimed tenant names the namespace too.
  if (claimed) return { namespace: claimed, claimedTenant: claimed };
  return { namespace: input.trustTenantHeader ? 'default' : 'unknown' };
}
