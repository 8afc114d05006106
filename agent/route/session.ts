// Session affinity, pure: a soft preference for the pod that served a session's last turn (it
// holds the conversation's KV cache). The decision stands unless that pod is among the candidates
// that passed every filter, the SLO included; then the session stays. A pod predicted over the
// SLO, excluded, stale or unhealthy is no candidate, so the session moves on.
import type { Decision } from './router.ts';

/** The decision, moved to the session's pod when that pod is a scored candidate. */
export function stickToSession(decision: Decision, sessionPodUid: string | undefined): Decision {
  if (decision.action !== 'pod' || sessionPodUid === undefined) return decision;
  if (decision.chosen.candidate.pod.uid === sessionPodUid) return decision;
  const kept = decision.scored.find((s) => s.candidate.pod.uid === sessionPodUid);
  if (!kept) return decision;
  return { ...decision, chosen: kept, predictedTtftMs: kept.predictedMs };
}
