// Routing strategies by name: Kinference's, and the baselines `npm run bench:routing` compares it
// with, over the same candidates and the same router (router.ts), so each is explained alike.
// Baselines that keep state between decisions (a round-robin cursor) are made fresh per user.
import type { Candidate } from './candidate.ts';
import type { Picker } from './picker.ts';
import { KINFERENCE_STRATEGY, type Strategy } from './router.ts';
import { predictedTtft, type Score } from './score.ts';

/** The lowest score, at random among ties. */
export const randomAmongLowest: Picker = (scored, rand) => {
  if (scored.length === 0) return undefined;
  const best = Math.min(...scored.map((s) => s.score));
  const ties = scored.filter((s) => s.score === best);
  return ties[Math.floor(rand() * ties.length)];
};

/** Fewest of this agent's own requests in flight (Envoy LEAST_REQUEST with a full scan). */
const inFlight: Score = (c: Candidate) => c.inFlight;

export const LEAST_REQUEST_STRATEGY: Strategy = {
  predict: predictedTtft,
  filters: [],
  score: inFlight,
  pick: randomAmongLowest,
};

/** What a Kubernetes Service (kube-proxy) does, in effect: each candidate in turn. */
export function roundRobinStrategy(): Strategy {
  let next = 0;
  return { predict: predictedTtft, filters: [], score: () => 0, pick: (scored) => scored[next++ % scored.length] };
}

/** Every strategy selectable by name; each call of a factory starts fresh state. */
export const STRATEGIES: Readonly<Record<string, () => Strategy>> = {
  kinference: () => KINFERENCE_STRATEGY,
  'least-request': () => LEAST_REQUEST_STRATEGY,
  'round-robin': roundRobinStrategy,
};
