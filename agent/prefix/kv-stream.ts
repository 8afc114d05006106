// The order of one pod's KV-event stream: which batches to apply, when a gap needs a replay, and
// when the index must be rebuilt. Pure: the subscriber shell feeds it what the sockets deliver and
// does what it answers; a test (or the bench) can drop, reorder and replay batches without one.
//
// vLLM numbers its batches 0, 1, 2, … per publisher and keeps the last `buffer_steps` (10,000 by
// default) for its replay socket. A PUB/SUB stream loses batches silently when a subscriber is
// slow (high-water mark) or reconnects, so every gap is found by its sequence number:
//   - a batch at the expected number is applied; a live one below it means the engine restarted
//     (its numbering starts again at 0): the pod's index is cleared and follows from there;
//   - one above it opens a gap: live batches are held (bounded) while the replay socket is asked
//     for everything from the expected number on;
//   - a replay that starts at the expected number closes the gap, and the held batches follow;
//   - a replay that starts later (the engine no longer has the missing batches), a replay that
//     does not answer, or a hold that overflows, is a resync: the pod's index is cleared and
//     rebuilt from what the replay holds and what comes next. The index then misses blocks stored
//     before the engine's buffer (it under-reports, which only costs a cache hit), but never keeps a
//     block the engine removed in a batch we lost (which would send requests to a pod that lost it).
// On start, with a replay socket, the stream asks for everything from 0: an agent that restarts
// rebuilds its index from the engine's buffer instead of starting empty.

import type { KvBatch } from './kv-events.ts';

export type StreamAction =
  | { do: 'apply'; seq: bigint; batch: KvBatch }
  /** Forget everything known about the pod (the batches that follow rebuild it). */
  | { do: 'clear'; reason: string }
  /** Ask the replay socket for every batch from `from` on. */
  | { do: 'replay'; from: bigint };

export interface KvStreamOptions {
  /** Whether the pod has a replay endpoint; without one, every gap is a resync. */
  replay: boolean;
  /** Most live batches held while a replay is outstanding; past it the replay is given up (resync). */
  maxHeldBatches?: number;
}

export interface KvStreamStats {
  applied: number;
  duplicates: number;
  gaps: number;
  replays: number;
  resyncs: number;
}

export const DEFAULT_MAX_HELD_BATCHES = 10_000;

export class KvStream {
  readonly #replay: boolean;
  readonly #maxHeld: number;
  /** The next sequence number to apply; undefined before the first batch (no replay socket). */
  #expected: bigint | undefined;
  /** Whether a replay is outstanding, and the live batches held meanwhile (by sequence). */
  #replaying = false;
  #held = new Map<bigint, KvBatch>();
  #replayStarted = false;
  readonly stats: KvStreamStats = { applied: 0, duplicates: 0, gaps: 0, replays: 0, resyncs: 0 };

  constructor(opts: KvStreamOptions) {
    this.#replay = opts.replay;
    this.#maxHeld = opts.maxHeldBatches ?? DEFAULT_MAX_HELD_BATCHES;
  }

  /** Sequence of the next batch to apply (undefined until the stream has a position). */
  get expected(): bigint | undefined {
    return this.#expected;
  }

  get replaying(): boolean {
    return this.#replaying;
  }

  /** At subscription: with a replay socket, rebuild from the engine's buffer (all of it). */
  start(): StreamAction[] {
    if (!this.#replay) return [];
    this.#expected = 0n;
    return this.#beginReplay(0n);
  }

  /** A batch from the live PUB socket. */
  live(seq: bigint, batch: KvBatch): StreamAction[] {
    if (this.#replaying) {
      if (this.#expected !== undefined && seq < this.#expected) {
        this.stats.duplicates++;
        return [];
      }
      this.#held.set(seq, batch);
      if (this.#held.size <= this.#maxHeld) return [];
      // The replay is not keeping up: give it up and start over from the oldest held batch.
      return this.#resyncFromHeld('replay did not answer before the hold filled');
    }
    if (this.#expected === undefined || seq === this.#expected) return this.#apply(seq, batch);
    if (seq < this.#expected) {
      // PUB/SUB never repeats a batch: a number that goes back is a restarted engine, whose
      // numbering starts again at 0 with an empty cache.
      this.stats.resyncs++;
      return [
        { do: 'clear', reason: `sequence went back to ${seq}: the engine restarted` },
        ...this.#apply(seq, batch),
      ];
    }
    this.stats.gaps++;
    if (!this.#replay) {
      this.stats.resyncs++;
      const out: StreamAction[] = [
        { do: 'clear', reason: `gap ${this.#expected}..${seq - 1n} and no replay endpoint` },
      ];
      return [...out, ...this.#apply(seq, batch)];
    }
    this.#held.set(seq, batch);
    return this.#beginReplay(this.#expected);
  }

  /** A batch the replay socket sent back (in order, from the requested number or later). */
  replayed(seq: bigint, batch: KvBatch): StreamAction[] {
    if (!this.#replaying || this.#expected === undefined) return [];
    const out: StreamAction[] = [];
    if (!this.#replayStarted) {
      this.#replayStarted = true;
      if (seq > this.#expected) {
        // The engine's buffer no longer starts at the gap: what was lost is lost.
        this.stats.resyncs++;
        out.push({ do: 'clear', reason: `replay starts at ${seq}, after the missing ${this.#expected}` });
        this.#expected = seq;
      }
    }
    if (seq < this.#expected) {
      this.stats.duplicates++;
      return out;
    }
    if (seq > this.#expected) {
      // A hole inside the replay itself (cannot happen with vLLM's buffer, but never trust it).
      this.stats.resyncs++;
      out.push({ do: 'clear', reason: `replay skipped ${this.#expected}..${seq - 1n}` });
    }
    return [...out, ...this.#apply(seq, batch)];
  }

  /** The replay's end marker (sequence −1): the held live batches follow. */
  replayEnded(): StreamAction[] {
    if (!this.#replaying) return [];
    const out: StreamAction[] = [];
    if (!this.#replayStarted && this.#expected !== undefined && this.#expected > 0n && this.#held.size > 0) {
      // An empty replay with batches still missing: only the live ones remain.
      const first = [...this.#held.keys()].sort(compare)[0];
      if (first > this.#expected) {
        this.stats.resyncs++;
        out.push({ do: 'clear', reason: `replay had nothing from ${this.#expected}` });
        this.#expected = first;
      }
    }
    this.#replaying = false;
    return [...out, ...this.#drainHeld()];
  }

  /** The replay did not finish in time (the shell's timer): resync from the held live batches. */
  replayTimedOut(): StreamAction[] {
    if (!this.#replaying) return [];
    return this.#resyncFromHeld('replay timed out');
  }

  #resyncFromHeld(reason: string): StreamAction[] {
    this.stats.resyncs++;
    this.#replaying = false;
    const held = [...this.#held.keys()].sort(compare);
    const out: StreamAction[] = [{ do: 'clear', reason }];
    this.#expected = held[0];
    return [...out, ...this.#drainHeld()];
  }

  #beginReplay(from: bigint): StreamAction[] {
    this.stats.replays++;
    this.#replaying = true;
    this.#replayStarted = false;
    return [{ do: 'replay', from }];
  }

  /** Applies held batches in order from the expected number; a hole among them opens a new replay. */
  #drainHeld(): StreamAction[] {
    const out: StreamAction[] = [];
    for (const seq of [...this.#held.keys()].sort(compare)) {
      const batch = this.#held.get(seq)!;
      if (this.#expected !== undefined && seq < this.#expected) {
        this.#held.delete(seq);
        continue;
      }
      if (this.#expected !== undefined && seq > this.#expected) {
        this.stats.gaps++;
        return [...out, ...this.#beginReplay(this.#expected)];
      }
      this.#held.delete(seq);
      out.push(...this.#apply(seq, batch));
    }
    return out;
  }

  #apply(seq: bigint, batch: KvBatch): StreamAction[] {
    this.stats.applied++;
    this.#expected = seq + 1n;
    return [{ do: 'apply', seq, batch }];
  }
}

function compare(a: bigint, b: bigint): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
