// A Decision as people read it: which target, what was predicted, and why each pod was dropped.
import type { Decision } from '../../route/router.ts';
import { candidateName } from '../../route/router.ts';

const ms = (x: number) => Math.round(x * 10) / 10;

/**
 * `sloTtftMs` and `sloAttainment` come from the policy that decided. For every candidate: the mean
 * predicted TTFT (ranks), its quantile at the policy's attainment (admits requests that may leave)
 * and the margin, SLO minus quantile (negative: over).
 */
export function explainDecision(d: Decision, slo: { sloTtftMs: number; sloAttainment: number }) {
  const target =
    d.action === 'pod'
      ? candidateName(d.chosen.candidate)
      : d.action === 'overflow'
        ? `overflow/${d.providers[0]}`
        : d.action === 'wait'
          ? 'wait'
          : 'rejected';
  return {
    action: d.action,
    target,
    ...(d.action === 'pod' ? { predictedTtftMs: ms(d.predictedTtftMs) } : {}),
    ...(d.action === 'overflow' ? { providers: d.providers } : {}),
    ...(d.action === 'wait' ? { maxWaitMs: d.maxWaitMs } : {}),
    ...(d.action === 'reject' ? { status: d.status, message: d.message } : {}),
    policy: d.policy,
    slo: {
      ttftMs: slo.sloTtftMs,
      attainment: slo.sloAttainment,
      judgedOn: d.leave.allowed && d.leave.providers.length > 0 ? 'quantile' : 'mean',
    },
    leave: {
      allowed: d.leave.allowed,
      reason: d.leave.reason,
      providers: d.leave.providers,
      ...(d.leave.budget ? { budget: d.leave.budget } : {}),
    },
    candidates: d.scored.map((s) => ({
      pod: candidateName(s.candidate),
      predictedTtftMs: ms(s.predictedMs),
      quantileTtftMs: ms(s.quantileMs),
      marginMs: ms(slo.sloTtftMs - s.quantileMs),
      score: ms(s.score),
      expectedCachedTokens: s.candidate.expectedCachedTokens ?? 0,
      // Which prefix index decided the cached tokens: the pod's own KV events, or our approximation.
      ...(s.candidate.prefixSource ? { prefixSource: s.candidate.prefixSource } : {}),
      queued: s.candidate.queuedNow,
      running: s.candidate.running,
      inFlight: s.candidate.inFlight,
    })),
    dropped: d.dropped.map((x) => ({
      pod: x.pod,
      reason: x.reason,
      detail: x.detail,
      predictedTtftMs: ms(x.predictedMs),
      quantileTtftMs: ms(x.quantileMs),
      marginMs: ms(slo.sloTtftMs - x.quantileMs),
    })),
  };
}

export type Explanation = ReturnType<typeof explainDecision>;
