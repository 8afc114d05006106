// Passive outlier ejection (Envoy's idea, one rule): a pod that refused a connection or reset it
// before the first byte is out of every decision of this agent at once, not per request, for a
// backoff that doubles with each ejection in a row; when the backoff ends it stays out until a
// probe of it succeeds. Pure: the clock comes in, the probing is the shell's (pod-probe.ts).

export interface EjectionOptions {
  /** The first ejection's length; each further one in a row doubles it. */
  baseMs: number;
  /** The longest ejection. */
  maxMs: number;
  /** A pod readmitted and not ejected again for this long starts over at `baseMs`. */
  forgetAfterMs: number;
}

export const DEFAULT_EJECTION: EjectionOptions = { baseMs: 1_000, maxMs: 30_000, forgetAfterMs: 60_000 };

interface Ejection {
  /** Ejections in a row (readmissions in between do not reset it; `forgetAfterMs` of health does). */
  count: number;
  /** Out of decisions until then, and after it until a probe succeeds. */
  until: number;
  /** A probe is in flight (or due): the pod stays out. */
  out: boolean;
  /** When it was last readmitted (for `forgetAfterMs`). */
  readmittedAt: number;
}

export class Ejections {
  readonly #options: EjectionOptions;
  readonly #byPod = new Map<string, Ejection>();

  constructor(options: Partial<EjectionOptions> = {}) {
    this.#options = { ...DEFAULT_EJECTION, ...options };
  }

  /** The pod failed before its first byte: out now, for a backoff that grows with repeats. Returns its length. */
  eject(uid: string, now: number): number {
    let e = this.#byPod.get(uid);
    if (e && !e.out && now - e.readmittedAt >= this.#options.forgetAfterMs) e = undefined;
    // Requests already in flight to it fail together: one ejection, not one per request.
    if (e?.out && now < e.until) return e.until - now;
    return this.#out(uid, (e?.count ?? 0) + 1, now, e?.readmittedAt ?? 0);
  }

  #out(uid: string, count: number, now: number, readmittedAt: number): number {
    const ms = Math.min(this.#options.maxMs, this.#options.baseMs * 2 ** Math.min(count - 1, 30));
    this.#byPod.set(uid, { count, until: now + ms, out: true, readmittedAt });
    return ms;
  }

  /** Whether the pod is out of decisions now. */
  isOut(uid: string): boolean {
    return this.#byPod.get(uid)?.out === true;
  }

  /** How many times in a row it was ejected, and until when (for views); undefined when in. */
  state(uid: string): { count: number; until: number } | undefined {
    const e = this.#byPod.get(uid);
    return e?.out ? { count: e.count, until: e.until } : undefined;
  }

  /** Pods whose backoff is over and that wait for a probe. */
  due(now: number): string[] {
    const out: string[] = [];
    for (const [uid, e] of this.#byPod) if (e.out && now >= e.until) out.push(uid);
    return out;
  }

  /** The earliest end of a backoff still running, for the shell's one timer. */
  nextDue(): number | undefined {
    let next: number | undefined;
    for (const e of this.#byPod.values()) if (e.out && (next === undefined || e.until < next)) next = e.until;
    return next;
  }

  /** A probe answered: `ok` readmits the pod (true when that changed anything), a failure ejects it again for longer. */
  probed(uid: string, ok: boolean, now: number): boolean {
    const e = this.#byPod.get(uid);
    if (!e?.out) return false;
    if (!ok) {
      this.#out(uid, e.count + 1, now, e.readmittedAt);
      return false;
    }
    e.out = false;
    e.readmittedAt = now;
    return true;
  }

  /** The pod left the pool: nothing to remember. */
  forget(uid: string): void {
    this.#byPod.delete(uid);
  }

  /**
   * Forgets readmitted pods that `keep` says are gone or that stayed healthy long enough (bounded
   * memory). An ejected pod is kept even while unknown (its node briefly suspected and out of
   * view): it comes back ejected; one unknown when its backoff ends is forgotten then (due()'s caller).
   */
  prune(keep: (uid: string) => boolean, now: number): void {
    for (const [uid, e] of this.#byPod) {
      if (!e.out && (!keep(uid) || now - e.readmittedAt >= this.#options.forgetAfterMs)) this.#byPod.delete(uid);
    }
  }
}
