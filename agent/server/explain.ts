// A Decision as people read it: which target, what was predicted, and why each pod was dropped.
import type { Decision } from '../route/router.ts';
import { candidateName } from '../route/router.ts';

const ms = (x: number) => Math.round(x * 10) / 10;

export function explainDecision(d: Decision) {
  const target =
    d.action === 'pod' ? candidateName(d.chosen.candidate) : d.action === 'overflow' ? `overflow/${d.providers[0]}` : d.action === 'wait' ? 'wait' : 'rejected';
  return {
    action: d.action,
    target,
    ...(d.action === 'pod' ? { predictedTtftMs: ms(d.predictedTtftMs) } : {}),
    ...(d.action === 'overflow' ? { providers: d.providers } : {}),
    ...(d.action === 'wait' ? { maxWaitMs: d.maxWaitMs } : {}),
    ...(d.action === 'reject' ? { status: d.status, message: d.message } : {}),
    policy: d.policy,
    leave: { allowed: d.leave.allowed, reason: d.leave.reason, providers: d.leave.providers },
    candidates: d.scored.map((s) => ({
      pod: candidateName(s.candidate),
      predictedTtftMs: ms(s.predictedMs),
      score: ms(s.score),
      queued: s.candidate.queuedNow,
      running: s.candidate.running,
      inFlight: s.candidate.inFlight,
    })),
    dropped: d.dropped.map((x) => ({ pod: x.pod, reason: x.reason, detail: x.detail, predictedTtftMs: ms(x.predictedMs) })),
  };
}

export type Explanation = ReturnType<typeof explainDecision>;
