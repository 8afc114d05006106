// The API half of binding a gossip key to an agent pod (agent/gossip/binding.ts): a TokenReview of
// the token the agent answered a challenge with, then a read of the pod the token is bound to. The
// key is the agent's when the token is the agent ServiceAccount's, for our gossip audience, bound
// to a pod that is on the claimed node and has the address that answered. One review and one pod
// read per (agent, key), cached by the binder.
import { AuthenticationV1Api, CoreV1Api, type KubeConfig } from '@kubernetes/client-node';
import type { BindingClaim, TokenReviewer } from '../gossip/binding.ts';
import { describeError } from '../../shared/describe-error.ts';

export interface AgentTokenReviewOptions {
  /** The agents' namespace and ServiceAccount: the only identity whose tokens bind gossip keys. */
  namespace: string;
  serviceAccount: string;
  /** The audience agents' gossip tokens are issued for (and no other token is accepted). */
  audience: string;
  /** A review or pod read slower than this fails (and is retried later). */
  timeoutMs?: number;
}

const POD_NAME = 'authentication.kubernetes.io/pod-name';
const POD_UID = 'authentication.kubernetes.io/pod-uid';
const NODE_NAME = 'authentication.kubernetes.io/node-name';

function within<T>(ms: number, what: string, work: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
  });
  return Promise.race([work, timeout]).finally(() => clearTimeout(timer));
}

const hostOf = (hostPort: string): string => hostPort.slice(0, hostPort.lastIndexOf(':')).replace(/^\[|\]$/g, '');

/** A TokenReviewer against the cluster's API server (RBAC: `tokenreviews create`, `pods get`). */
export function agentTokenReviewer(kc: KubeConfig, o: AgentTokenReviewOptions): TokenReviewer {
  const auth = kc.makeApiClient(AuthenticationV1Api);
  const core = kc.makeApiClient(CoreV1Api);
  const timeoutMs = o.timeoutMs ?? 5_000;
  const username = `system:serviceaccount:${o.namespace}:${o.serviceAccount}`;
  return async (token: string, claim: BindingClaim): Promise<string | undefined> => {
    let review;
    try {
      review = await within(
        timeoutMs,
        'TokenReview',
        auth.createTokenReview({
          body: {
            apiVersion: 'authentication.k8s.io/v1',
            kind: 'TokenReview',
            spec: { token, audiences: [o.audience] },
          },
        }),
      );
    } catch (err) {
      return `TokenReview failed: ${describeError(err)}`;
    }
    const status = review.status;
    if (!status?.authenticated) return `token not authenticated${status?.error ? `: ${status.error}` : ''}`;
    if (!(status.audiences ?? []).includes(o.audience)) return `token not for audience ${o.audience}`;
    if (status.user?.username !== username) return `token of ${status.user?.username ?? 'nobody'}, not ${username}`;
    const extra = status.user.extra ?? {};
    const podName = extra[POD_NAME]?.[0];
    if (!podName) return 'token not bound to a pod';
    const tokenNode = extra[NODE_NAME]?.[0];
    if (tokenNode !== undefined && tokenNode !== claim.node) return `token of a pod on ${tokenNode}, not ${claim.node}`;
    let pod;
    try {
      pod = await within(timeoutMs, 'pod read', core.readNamespacedPod({ name: podName, namespace: o.namespace }));
    } catch (err) {
      return `pod ${o.namespace}/${podName}: ${describeError(err)}`;
    }
    const podUid = extra[POD_UID]?.[0];
    if (podUid !== undefined && pod.metadata?.uid !== podUid) return `pod ${podName} is not the one the token names`;
    if (pod.spec?.serviceAccountName !== o.serviceAccount) return `pod ${podName} does not run as ${o.serviceAccount}`;
    if (pod.spec?.nodeName !== claim.node) return `pod ${podName} runs on ${pod.spec?.nodeName}, not ${claim.node}`;
    const ips = new Set([pod.status?.podIP, ...(pod.status?.podIPs ?? []).map((p) => p.ip)]);
    if (!ips.has(hostOf(claim.agent))) return `pod ${podName} is not at ${claim.agent}`;
    return undefined;
  };
}
