// Routing for requests whose latency the predictor does not model (rerank, score, tokenize,
// audio, moderations): the usable pod serving the model that holds the least work. Pure.
import type { Candidate } from './candidate.ts';

/** Work at a pod as the agent sees it: its queue, its batch, and what we sent since it last said. */
function load(c: Candidate): number {
  return c.queuedNow + c.unseenSent + c.running;
}

/** The least-loaded fresh, healthy pod serving `model`; ties go to a local pod, then at random. */
export function leastLoaded(
  candidates: readonly Candidate[],
  model: string,
  rand: () => number,
): Candidate | undefined {
  let best: Candidate[] = [];
  let bestKey = Infinity;
  for (const c of candidates) {
    if (!c.healthy || c.ageMs > c.maxAgeMs || !c.pod.models.includes(model)) continue;
    // A pod's in-flight cap holds here too: past it, the request waits for a slot like any other.
    if (c.inFlight >= (c.maxInFlight ?? Infinity)) continue;
    // Local pods win ties: the half step is smaller than one request of load.
    const key = load(c) + (c.where === 'peer' ? 0.5 : 0);
    if (key < bestKey) {
      best = [c];
      bestKey = key;
    } else if (key === bestKey) best.push(c);
  }
  return best.length === 0 ? undefined : best[Math.min(best.length - 1, Math.floor(rand() * best.length))];
}
