// The latency model of one node's pods: a shared shape times a per-pod speed.
//
//   ttft(pod, features) = speed(pod) · shared(features)
//
// `shared` is the linear TTFT model (predictor.ts) fitted to every local pod's observations,
// each normalised by its pod's speed; `speed` is one number per pod, learned as an average of
// log(measured / predicted). Why not a full model per pod: four parameters per pod need far
// more data than a pod gets, and a pod that draws a few unlucky samples early looks slow,
// stops receiving traffic, and never gets the chance to look fast again. One parameter per pod
// converges in a handful of requests, and the shape — how queue, batch and prompt add up — is
// the same on every replica of an engine. A pod half as fast gets speed 2, and the shape
// learns from its requests too.
import type { PredictorParams } from '../types.ts';
import { TtftPredictor, predictWith, type Features, type PredictorOptions } from './predictor.ts';

interface PodSpeed {
  /** log of the pod's slowness relative to the shared shape. */
  logSpeed: number;
  observations: number;
  apeSum: number;
  /** Its speed came from a warm start (adopt), not from this node's typical pod. */
  adopted?: boolean;
}

/** Measured/predicted ratios outside this range are treated as this range (outliers). */
const MAX_RATIO = 8;
/** Slowest adaptation of a pod's speed (per observation) once it has plenty of data. */
const MIN_SPEED_GAIN = 0.05;

/** A typical request's features: where two parameter sets are compared to give a speed. */
const REFERENCE_FEATURES: Features = { queued: 1, running: 4, promptTokens: 512 };

export class NodeModel {
  #shared: TtftPredictor;
  readonly #options: Partial<PredictorOptions>;
  readonly #pods = new Map<string, PodSpeed>();
  /** Each pod's parameters as last computed, valid while `#version` has not moved: every local
   *  candidate of every decision asks for them, and they change only when the model learns. */
  readonly #params = new Map<string, { version: number; params: Readonly<PredictorParams> }>();
  /** Bumped by every observation and forgotten pod (the shared shape and typical speed move). */
  #version = 0;

  constructor(options: Partial<PredictorOptions> = {}) {
    this.#options = options;
    this.#shared = new TtftPredictor(options);
  }

  /**
   * A warm start: parameters learned elsewhere for `uid` (what this agent gossiped before it
   * restarted, as peers give it back) or for a pod of the same class on another node (`uid`
   * undefined). Before this node has measured anything they become the shared shape's prior; a
   * pod not yet measured takes its speed from them. Measurements then take over as usual.
   */
  adopt(uid: string | undefined, params: PredictorParams): void {
    const plausible = Object.values(params).every((x) => x === undefined || (Number.isFinite(x) && x >= 0));
    if (!plausible) return;
    if (this.#shared.observations === 0 && !this.#adopted) {
      this.#shared = new TtftPredictor({ ...this.#options, prior: { ...params } });
      this.#adopted = true;
      this.#version++;
    }
    if (uid === undefined) return;
    const pod = this.#pod(uid);
    if (pod.observations > 0) return;
    const ratio = predictWith(params, REFERENCE_FEATURES) / this.#shared.predict(REFERENCE_FEATURES);
    if (Number.isFinite(ratio) && ratio > 0) {
      pod.logSpeed = Math.log(Math.min(MAX_RATIO, Math.max(1 / MAX_RATIO, ratio)));
      pod.adopted = true;
      this.#version++;
    }
  }

  /** Whether the shared shape's prior came from a warm start. */
  #adopted = false;

  #pod(uid: string): PodSpeed {
    let pod = this.#pods.get(uid);
    if (!pod) {
      pod = { logSpeed: this.#typicalLogSpeed(), observations: 0, apeSum: 0 };
      this.#pods.set(uid, pod);
    }
    return pod;
  }

  /**
   * A pod with no measurement yet is taken as fast as this node's measured pods are on average
   * (replicas of one engine are alike), not as the shared shape's prior: otherwise the first pod
   * measured faster than that prior looked faster than its idle twin even while busy, and the
   * twin got no traffic to show otherwise.
   */
  #typicalLogSpeed(): number {
    let sum = 0;
    let n = 0;
    for (const pod of this.#pods.values())
      if (pod.observations > 0) {
        sum += pod.logSpeed;
        n++;
      }
    return n > 0 ? sum / n : 0;
  }

  forget(uid: string): void {
    this.#pods.delete(uid);
    this.#params.delete(uid);
    this.#version++;
  }

  speed(uid: string): number {
    const pod = this.#pods.get(uid);
    return Math.exp(pod && (pod.observations > 0 || pod.adopted) ? pod.logSpeed : this.#typicalLogSpeed());
  }

  /** The pod's model as plain parameters (what the router and gossip use); shared, so frozen. */
  params(uid: string): Readonly<PredictorParams> {
    const cached = this.#params.get(uid);
    if (cached?.version === this.#version) return cached.params;
    const shared = this.#shared.params;
    const s = this.speed(uid);
    const params = Object.freeze({
      base: shared.base * s,
      perQueued: shared.perQueued * s,
      perRunning: shared.perRunning * s,
      perKPromptTokens: shared.perKPromptTokens * s,
      perKPendingTokens: (shared.perKPendingTokens ?? 0) * s,
    });
    this.#params.set(uid, { version: this.#version, params });
    return params;
  }

  predict(uid: string, f: Features): number {
    return predictWith(this.params(uid), f, this.#shared.options.minTtftMs);
  }

  /** Learn from one measured TTFT (ms) of a request sent to `uid` when it looked like `f`. */
  observe(uid: string, f: Features, ttftMs: number): void {
    if (!Number.isFinite(ttftMs) || ttftMs <= 0) return;
    const pod = this.#pod(uid);
    const predicted = this.predict(uid, f);
    this.#version++;
    pod.apeSum += Math.abs(predicted - ttftMs) / ttftMs;
    pod.observations++;
    // Speed first: an average in log space, fast at first (1/n), then an EWMA that follows drift.
    const ratio = Math.min(MAX_RATIO, Math.max(1 / MAX_RATIO, ttftMs / predicted));
    const gain = Math.max(MIN_SPEED_GAIN, 1 / (pod.observations + 1));
    pod.logSpeed += gain * Math.log(ratio);
    // Then the shape, on the measurement as if the pod had speed 1.
    this.#shared.observe(f, ttftMs / Math.exp(pod.logSpeed));
  }

  stats(uid: string): { speed: number; observations: number; mape: number } {
    const pod = this.#pods.get(uid);
    return {
      speed: this.speed(uid),
      observations: pod?.observations ?? 0,
      mape: pod && pod.observations ? pod.apeSum / pod.observations : NaN,
    };
  }
}
