// The pool shapes and the peak bench:peak and bench:peak-frontier run them through: three sets of
// shapes (the main one, a fresh one and an unseen one, kept out of tuning as each says), four pods
// unless a shape says otherwise, two 60 s halves at one load, 30% of requests not allowed to leave.
import { DEFAULT_SHAPE, POOL_SHAPES, type PodShape } from '../routing/harness.ts';
import type { PeakScenario } from './harness.ts';

export const HALF_MS = 60_000;
export const MIX = { longShare: 0 };
export const SLO_MS = 800;
/** The reference's sweep, tightest first: factors over the oracle's mean prediction. */
export const SWEEP = [10, 6, 4, 3, 2.5, 2, 1.75, 1.5, 1.25, 1];

/** Shapes no constant of the agent was chosen on, beyond bench:routing's held-out ones. */
const MAIN_SHAPES: PodShape[] = [
  ...POOL_SHAPES,
  { ...DEFAULT_SHAPE, name: 'vllm 8 seqs, batch slowdown 4x', maxSeqs: 8, batchSlowdown: 3, heldOut: true },
  { ...DEFAULT_SHAPE, name: 'vllm 16 seqs, one pod 3x faster', speeds: [3, 1, 1, 1], heldOut: true },
];

/**
 * Held out for real: chosen and added after every admission constant was fixed (the shapes above
 * were all in the runs those constants were compared on), and run once, not tuned on.
 */
const FRESH_SHAPES: PodShape[] = [
  {
    ...DEFAULT_SHAPE,
    name: 'tgi 8 seqs, 2x costs',
    engine: 'tgi',
    maxSeqs: 8,
    prefillScale: 2,
    decodeScale: 2,
    heldOut: true,
  },
  {
    ...DEFAULT_SHAPE,
    name: 'sglang 64 seqs, two pods 2x slower',
    engine: 'sglang',
    maxSeqs: 64,
    speeds: [1, 1, 0.5, 0.5],
    heldOut: true,
  },
  {
    ...DEFAULT_SHAPE,
    name: 'vllm 24 seqs, batch slowdown 3x, decode 0.5x',
    maxSeqs: 24,
    batchSlowdown: 2,
    decodeScale: 0.5,
    heldOut: true,
  },
  { ...DEFAULT_SHAPE, name: 'vllm 16 seqs, 2 pods', speeds: [1, 1], heldOut: true },
];

/**
 * Chosen and committed before the tuning that followed the fresh shapes' first run (which made
 * those shapes seen): run only to report, never while choosing a constant.
 */
const UNSEEN_SHAPES: PodShape[] = [
  { ...DEFAULT_SHAPE, name: 'vllm 32 seqs, 3 pods, one 2x slower', maxSeqs: 32, speeds: [1, 1, 0.5], heldOut: true },
  {
    ...DEFAULT_SHAPE,
    name: 'tgi 48 seqs, 6 pods, decode 2x',
    engine: 'tgi',
    maxSeqs: 48,
    decodeScale: 2,
    speeds: [1, 1, 1, 1, 1, 1],
    heldOut: true,
  },
  {
    ...DEFAULT_SHAPE,
    name: 'sglang 8 seqs, prefill 0.5x, batch slowdown 2x',
    engine: 'sglang',
    maxSeqs: 8,
    prefillScale: 0.5,
    batchSlowdown: 1,
    heldOut: true,
  },
  {
    ...DEFAULT_SHAPE,
    name: 'vllm 12 seqs, 3x costs, no chunked prefill',
    maxSeqs: 12,
    prefillScale: 3,
    decodeScale: 3,
    chunkedPrefill: false,
    heldOut: true,
  },
];

export const SHAPE_SETS = { main: MAIN_SHAPES, fresh: FRESH_SHAPES, unseen: UNSEEN_SHAPES };

/** One run's scenario: `load` × the pool's capacity for two halves, the agent restarted at `restartAtMs` if given. */
export function peakScenario(shape: PodShape, load: number, seedIndex: number, restartAtMs?: number): PeakScenario {
  return {
    shape,
    speeds: shape.speeds ?? [1, 1, 1, 1],
    phases: [
      { ms: HALF_MS, load },
      { ms: HALF_MS, load },
    ],
    mix: MIX,
    sloMs: SLO_MS,
    stayShare: 0.3,
    waitMs: 2000,
    seed: 31 + 1000 * seedIndex,
    restartAtMs,
  };
}
