// A circuit breaker per provider, pure: time comes in as a number. After `failureThreshold`
// consecutive failures the provider is skipped for `coolDownMs` (no request reaches it), then one
// trial request is let through; its success closes the breaker, its failure re-opens it.

export type BreakerState = 'closed' | 'open' | 'half-open';

export interface BreakerOptions {
  /** Consecutive failures that open the breaker (default 3). */
  failureThreshold?: number;
  /** How long an open breaker rejects before letting one trial through (default 10 s). */
  coolDownMs?: number;
}

export class CircuitBreaker {
  private readonly threshold: number;
  private readonly coolDownMs: number;
  private failures = 0;
  private openedAt: number | undefined;
  /** When the half-open trial was let through; undefined when none is in flight. */
  private trialAt: number | undefined;

  constructor(opts: BreakerOptions = {}) {
    this.threshold = Math.max(1, opts.failureThreshold ?? 3);
    this.coolDownMs = Math.max(0, opts.coolDownMs ?? 10_000);
  }

  state(now: number): BreakerState {
    if (this.openedAt === undefined) return 'closed';
    return now - this.openedAt >= this.coolDownMs ? 'half-open' : 'open';
  }

  /**
   * May a request go now? In half-open, only one at a time: the trial. A trial whose outcome
   * never came back (its caller vanished) stops blocking after another cool-down.
   */
  allow(now: number): boolean {
    const state = this.state(now);
    if (state === 'closed') return true;
    if (state === 'open') return false;
    if (this.trialAt !== undefined && now - this.trialAt < this.coolDownMs) return false;
    this.trialAt = now;
    return true;
  }

  /** How long until this breaker lets a request through again (0: now). */
  retryInMs(now: number): number {
    const state = this.state(now);
    if (state === 'closed') return 0;
    if (state === 'open') return this.openedAt! + this.coolDownMs - now;
    return this.trialAt === undefined ? 0 : Math.max(0, this.trialAt + this.coolDownMs - now);
  }

  onSuccess(): void {
    this.failures = 0;
    this.openedAt = undefined;
    this.trialAt = undefined;
  }

  onFailure(now: number): void {
    this.failures++;
    if (this.trialAt !== undefined || this.failures >= this.threshold) {
      this.openedAt = now;
      this.trialAt = undefined;
    }
  }

  /** The request let through ended without telling anything about the provider (client left). */
  release(): void {
    this.trialAt = undefined;
  }

  /** For /debug/state and metrics. */
  snapshot(now: number): { state: BreakerState; consecutiveFailures: number } {
    return { state: this.state(now), consecutiveFailures: this.failures };
  }
}

/** One breaker per provider name, created on first use with shared options. */
export class BreakerSet {
  private readonly opts: BreakerOptions;
  private readonly byName = new Map<string, CircuitBreaker>();

  constructor(opts: BreakerOptions = {}) {
    this.opts = opts;
  }

  get(name: string): CircuitBreaker {
    let breaker = this.byName.get(name);
    if (!breaker) {
      breaker = new CircuitBreaker(this.opts);
      this.byName.set(name, breaker);
    }
    return breaker;
  }

  snapshot(now: number): Record<string, ReturnType<CircuitBreaker['snapshot']>> {
    return Object.fromEntries([...this.byName].map(([name, b]) => [name, b.snapshot(now)]));
  }
}
