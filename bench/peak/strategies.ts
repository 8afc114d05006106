// The admission strategies compared by `npm run bench:peak`. All but the oracle are the production
// pool (scraped telemetry, learned model, calibration) and router; they differ only in the rule
// that sends a request that may leave to the provider.
import { PodPool } from '../../agent/pool/pool.ts';
import type { Candidate } from '../../agent/route/candidate.ts';
import { decide, type Decision, type LeaveVerdict } from '../../agent/route/router.ts';
import { TtftPredictor } from '../../agent/predict/predictor.ts';
import { AdmissionThreshold } from '../../agent/admission/threshold.ts';
import { plannedMissChance } from '../../agent/admission/planned-miss.ts';
import { LeavableAhead } from '../../agent/admission/leavable-ahead.ts';
import type { EffectivePolicy } from '../../agent/types.ts';
import { VirtualClock } from '../../shared/sim/clock.ts';
import { engineFor, fitOracleModel, submitTracked, type PodShape } from '../routing/harness.ts';
import { generateArrivals, type PromptMix } from '../routing/workload.ts';
import { benchRequest, oracleCandidate } from '../routing/strategies.ts';
import { poolOptions } from '../../test/helpers/route-fixtures.ts';
import { decodeCalibration, encodeCalibration } from '../../agent/gossip/calibration-wire.ts';
import {
  both,
  shares,
  type PeakAction,
  type PeakArrival,
  type PeakContext,
  type PeakStrategyFactory,
  type PhaseResult,
} from './harness.ts';
import { SWEEP } from './shapes.ts';

export const ATTAINMENT = 0.99;
const LEAVE: LeaveVerdict = { allowed: true, reason: 'bench', providers: ['hosted'] };
const STAY: LeaveVerdict = { allowed: false, reason: 'bench: may not leave', providers: [] };

function policyFor(ctx: PeakContext, attainment = ATTAINMENT): EffectivePolicy {
  return {
    name: 'bench',
    sloTtftMs: ctx.scenario.sloMs,
    sloAttainment: attainment,
    exclude: [],
    overflow: { providers: ['hosted'], denyTags: [], denyTenants: [] },
    waitMaxMs: ctx.scenario.waitMs,
  };
}

/** The production router's decision for one arrival among these candidates. */
function decideArrival(
  ctx: PeakContext,
  policy: EffectivePolicy,
  a: PeakArrival,
  waitedMs: number,
  candidates: Candidate[],
  admissionQuantile?: number,
): Decision {
  return decide({
    request: benchRequest(a),
    policy,
    candidates,
    leave: a.mayLeave ? LEAVE : STAY,
    waitedMs,
    rand: ctx.rand,
    admissionQuantile,
  });
}

function toAction(
  d: Decision,
  pods: PeakContext['pods'],
  onPod: (c: Candidate) => Partial<Extract<PeakAction, { action: 'pod' }>>,
): PeakAction {
  if (d.action === 'pod') {
    const c = d.chosen.candidate;
    return {
      action: 'pod',
      pod: pods.findIndex((p) => p.pod.uid === c.pod.uid),
      quantileMs: d.chosen.quantileMs,
      ...onPod(c),
    };
  }
  if (d.action === 'overflow') return { action: 'overflow' };
  return { action: d.action };
}

/**
 * The production pool and router; `calibrated` admits each request on its own quantile at the
 * target, `controlled` steers the admission quantile with the agent's loop on measured attainment
 * (agent/admission/threshold.ts), fed as the agent feeds it: leavable requests served by a pod,
 * and must-stay requests that missed behind them. `attainment`: the policy's target (the loop's
 * to steer to, the quantile the p99 rule admits on).
 */
function agent(rule: 'calibrated' | 'controlled', attainment = ATTAINMENT): PeakStrategyFactory {
  return (ctx) => {
    const pool = new PodPool(poolOptions(ctx.now, { node: 'bench', networkCostMs: 0 }));
    pool.setLocalPods(ctx.pods.map((p) => p.pod));
    // A restarted agent hears of its own pods from peers first (what it gossiped before).
    if (ctx.gossiped) pool.setRemote(ctx.gossiped);
    const policy = policyFor(ctx, attainment);
    const loop = rule === 'controlled' ? new AdmissionThreshold(policy.sloAttainment) : undefined;
    const leavableAhead = new LeavableAhead<AdmissionThreshold>();
    return {
      scraped: (p, load) => pool.recordLoad(p.pod.uid, load, p.telemetry),
      // As peers hold them: the calibration summary as the wire carries it (8 bytes, rounded).
      estimates: () =>
        pool.localEstimates().map((e) => {
          const wire = encodeCalibration(e.calibration);
          return { ...e, calibration: wire && decodeCalibration(wire) };
        }),
      decide: (a, waitedMs) => {
        const candidates = pool.candidates();
        loop?.expire(ctx.now());
        const d = decideArrival(ctx, policy, a, waitedMs, candidates, loop?.quantile);
        return toAction(d, ctx.pods, (c) => {
          // The miss chance before begin(): the request is not yet among the pod's own.
          const settle =
            a.mayLeave && d.action === 'pod'
              ? loop?.admitted(a.at, policy.sloTtftMs, plannedMissChance(d.chosen, policy.sloTtftMs))
              : undefined;
          // As the request path does: a must-stay miss is a miss of the loops whose requests were ahead.
          const ahead = (a.mayLeave ? [] : leavableAhead.at(c.pod.uid)).map((loop) => ({
            loop,
            admissionsThen: loop.admissions,
          }));
          const firstTokenOut = loop && a.mayLeave ? leavableAhead.sent(c.pod.uid, loop) : undefined;
          const ticket = pool.begin(c, a.promptTokens);
          return {
            firstToken: (ms) => {
              ticket.firstByte(ms);
              firstTokenOut?.();
              const within = ms + waitedMs <= policy.sloTtftMs;
              if (settle) settle(ctx.now(), within);
              else if (!within)
                for (const { loop: admittedBy, admissionsThen } of ahead) admittedBy.starved(ctx.now(), admissionsThen);
            },
            done: () => {
              firstTokenOut?.(); // ended without a first token: no longer ahead of anyone
              ticket.end(true);
            },
          };
        });
      },
    };
  };
}

/**
 * Perfect information: each pod's true queue, batch, pending prompt tokens and speed at the instant
 * of decision, the TTFT model fitted offline on that truth, and the q-quantile of that model's
 * error measured offline. The best admission a predictor can do without seeing the future.
 * With `reservedSlots`, a request that may leave is admitted only to a pod with more batch slots
 * free than that (of the engine's configured batch, true queue counted against it): a trunk
 * reservation for must-stay requests, which the agent approximates with its batch reserve.
 */
function oracle(reservedSlots = 0): PeakStrategyFactory {
  return (ctx) => {
    const policy = policyFor(ctx);
    const batch = ctx.scenario.shape.maxSeqs;
    return {
      scraped: () => {},
      decide: (a, waitedMs) => {
        const candidates = ctx.pods
          .map((p) => ({ ...oracleCandidate(p, ctx.oracle.params), logMargin: () => ctx.oracle.logMargin }))
          .filter((c) => !a.mayLeave || reservedSlots === 0 || batch - c.running - c.queuedNow > reservedSlots);
        return toAction(decideArrival(ctx, policy, a, waitedMs, candidates), ctx.pods, () => ({}));
      },
    };
  };
}

/**
 * The oracle's perfect information with a fixed log margin: swept offline per shape and load, the
 * loosest margin whose leavable requests still meet the target gives the reference local share.
 * `reservedSlots` as for the oracle (bench:peak-frontier; the reference keeps none).
 */
export function fixedMargin(logMargin: number, reservedSlots = 0): PeakStrategyFactory {
  return (ctx) => oracle(reservedSlots)({ ...ctx, oracle: { ...ctx.oracle, logMargin } });
}

/** The reference's figures: the best local share at the target, the factor that gave it, and the rest of that run. */
export interface Reference {
  local: number;
  factor: number;
  leavable: number;
  staying: number;
}

/**
 * The reference for one shape, load and seed: the oracle with no reserve, swept over SWEEP's
 * margins, keeping the largest local share whose leavable requests met the target over the run.
 * Tightest first, loosening while the target holds: the local share grows as the margin shrinks,
 * and the first miss of the target ends the sweep (the looser runs, with their runaway queues, are
 * the slow ones to simulate and could only miss it by more). `runAt` runs the oracle at a factor.
 */
export function sweepReference(runAt: (factor: number) => PhaseResult[]): Reference {
  let reference: Reference = { local: 0, factor: NaN, leavable: NaN, staying: NaN };
  for (const factor of SWEEP) {
    const [cold, steady] = runAt(factor);
    const whole = shares(both(cold, steady));
    if (whole.leavable < ATTAINMENT) break;
    if (whole.local > reference.local)
      reference = { local: whole.local, factor, leavable: whole.leavable, staying: shares(steady).staying };
  }
  return reference;
}

/** The oracle's model for a shape, and the q-quantile of its error on the true state (offline). */
export function fitOracle(
  shape: PodShape,
  mix: PromptMix,
  capacityPerS: number,
  q = ATTAINMENT,
): PeakContext['oracle'] {
  const params = fitOracleModel(mix, capacityPerS, 7, shape);
  const fit = new TtftPredictor({ prior: params });
  const errors: number[] = [];
  for (const load of [0.5, 0.8, 0.95, 1.1]) {
    const clock = new VirtualClock();
    const engine = engineFor(clock, 1, 8, shape);
    const pending = { pendingPromptTokens: 0 };
    for (const a of generateArrivals(8, [{ ms: 30_000, load }], capacityPerS, mix)) {
      clock.set(a.at);
      engine.advanceTo(a.at);
      const s = engine.snapshot();
      const predicted = fit.predict({
        queued: s.waiting,
        running: s.running,
        promptTokens: a.promptTokens,
        pendingPromptTokens: pending.pendingPromptTokens,
      });
      submitTracked(engine, pending, a, {
        onToken: (at, n) => n === 1 && errors.push(Math.log((at - a.at) / predicted)),
      });
    }
    engine.runUntilIdle();
  }
  errors.sort((x, y) => x - y);
  return { params, logMargin: errors[Math.min(errors.length - 1, Math.ceil(q * errors.length) - 1)] };
}

/**
 * Today's rule (each request on its own p99) and the loop on measured attainment, its target
 * `loopAttainment` (ATTAINMENT unless a run asks what a stricter target trades).
 */
export function peakStrategies(loopAttainment = ATTAINMENT): [string, PeakStrategyFactory][] {
  return [
    ['calibrated', agent('calibrated')],
    ['controlled', agent('controlled', loopAttainment)],
  ];
}
export const PEAK_STRATEGIES = peakStrategies();
