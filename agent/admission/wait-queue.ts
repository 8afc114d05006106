// Requests waiting for a pod, served in order instead of by a race. Pure: no timers, no I/O;
// the request path calls take() when a pod frees and expire() at nextDeadline().
//
// Order: priority classes first (critical, then standard, then sheddable); within a class,
// tenants share by start-time fair queueing (each tenant's next waiter carries a virtual start
// tag; the smallest goes first, and a tenant's tag advances by 1/weight per request served), so
// a tenant sending ten times more waits its turn like the others instead of taking ten pods
// for one; within a tenant, first come first served. A tenant that stops waiting and comes back
// starts at the class's current virtual time (idle time earns no credit) or at its own tag if
// that is later (a pause does not erase what it was just served). An empty lane is forgotten
// once the virtual time passes its tag, so memory is bounded by the tenants waiting recently.
//
// Full: a newcomer takes the place of the newest waiter of the lowest class below its own
// (from the tenant with the most waiters there: the heaviest gives way first), which is refused
// with 429. With nothing below it, the bound is shared fairly within its class: a newcomer whose
// tenant holds fewer places than another tenant (by weight) takes the newest place of the tenant
// most over its share, so one tenant's flood cannot keep the others out of the line. Otherwise
// the newcomer is refused. So sheddable requests go first, and then the heaviest tenant's.
import { PRIORITIES, PRIORITY_RANK, type Priority } from '../budget/limits.ts';

export interface Waiter<T> {
  readonly item: T;
  readonly tenant: string;
  readonly priority: Priority;
  /** Clock ms after which the waiter gives up (429). */
  readonly deadline: number;
  /** Arrival order, for FCFS and for tests. */
  readonly seq: number;
}

export type Enqueued<T> = { admitted: true; waiter: Waiter<T>; shed?: Waiter<T> } | { admitted: false };

export interface WaitQueueOptions {
  /** Most requests waiting at once; a newcomer past it sheds a lower class or is refused. */
  maxWaiting: number;
  /** A tenant's share relative to others in its class (default 1). */
  weight?: (tenant: string) => number;
}

interface TenantLane<T> {
  waiters: Waiter<T>[];
  /** Virtual start tag of the lane's next service. */
  tag: number;
}

interface ClassQueue<T> {
  lanes: Map<string, TenantLane<T>>;
  /** Virtual time: the tag of the last service. */
  now: number;
}

export class WaitQueue<T> {
  readonly #options: WaitQueueOptions;
  readonly #classes: ClassQueue<T>[] = PRIORITIES.map(() => ({ lanes: new Map(), now: 0 }));
  #size = 0;
  #seq = 0;

  constructor(options: WaitQueueOptions) {
    this.#options = options;
  }

  get size(): number {
    return this.#size;
  }

  enqueue(item: T, at: { tenant: string; priority: Priority; deadline: number }): Enqueued<T> {
    let shed: Waiter<T> | undefined;
    if (this.#size >= this.#options.maxWaiting) {
      shed = this.#sheddableBelow(PRIORITY_RANK[at.priority]) ?? this.#overShare(at.tenant, at.priority);
      if (!shed) return { admitted: false };
      this.remove(shed);
    }
    const waiter: Waiter<T> = {
      item,
      tenant: at.tenant,
      priority: at.priority,
      deadline: at.deadline,
      seq: ++this.#seq,
    };
    const cls = this.#classes[PRIORITY_RANK[at.priority]];
    let lane = cls.lanes.get(at.tenant);
    if (!lane) {
      lane = { waiters: [], tag: cls.now };
      cls.lanes.set(at.tenant, lane);
    } else if (lane.waiters.length === 0) {
      // Back after a pause: its debt still counts, idle time earns no credit.
      lane.tag = Math.max(lane.tag, cls.now);
    }
    lane.waiters.push(waiter);
    this.#size++;
    return shed ? { admitted: true, waiter, shed } : { admitted: true, waiter };
  }

  /**
   * A pod is free: the waiter that gets it, removed from the queue. `fits` says who could use
   * it (e.g. serves their model); within a tenant the earliest waiter that fits goes first.
   */
  take(fits: (waiter: Waiter<T>) => boolean = () => true): Waiter<T> | undefined {
    for (const cls of this.#classes) {
      let best: { lane: TenantLane<T>; index: number } | undefined;
      for (const [tenant, lane] of cls.lanes) {
        if (lane.waiters.length === 0) {
          // Served up to the virtual time: nothing to remember.
          if (lane.tag <= cls.now) cls.lanes.delete(tenant);
          continue;
        }
        if (best && !earlier(lane, best.lane)) continue;
        const index = lane.waiters.findIndex(fits);
        if (index >= 0) best = { lane, index };
      }
      if (!best) continue;
      const { lane, index } = best;
      const [waiter] = lane.waiters.splice(index, 1);
      cls.now = lane.tag;
      lane.tag += 1 / Math.max(1e-6, this.#options.weight?.(waiter.tenant) ?? 1);
      this.#size--;
      return waiter;
    }
    return undefined;
  }

  /** The waiter left (client gone, or served another way). False when it was not waiting. */
  remove(waiter: Waiter<T>): boolean {
    const cls = this.#classes[PRIORITY_RANK[waiter.priority]];
    const lane = cls.lanes.get(waiter.tenant);
    const index = lane ? lane.waiters.indexOf(waiter) : -1;
    if (!lane || index < 0) return false;
    lane.waiters.splice(index, 1);
    this.#size--;
    return true;
  }

  /** Waiters whose deadline has passed, removed (each answered 429). O(waiting): bounded by maxWaiting. */
  expire(now: number): Waiter<T>[] {
    const expired: Waiter<T>[] = [];
    for (const cls of this.#classes) {
      for (const lane of cls.lanes.values()) for (const w of lane.waiters) if (w.deadline <= now) expired.push(w);
    }
    for (const w of expired) this.remove(w);
    return expired;
  }

  /** When the next waiter gives up, for the shell's one timer. */
  nextDeadline(): number | undefined {
    let next: number | undefined;
    for (const cls of this.#classes) {
      for (const lane of cls.lanes.values())
        for (const w of lane.waiters) if (next === undefined || w.deadline < next) next = w.deadline;
    }
    return next;
  }

  /** Waiting requests by class and by tenant (metrics, explain). */
  depth(): { byPriority: Record<Priority, number>; byTenant: Map<string, number> } {
    const byPriority = { critical: 0, standard: 0, sheddable: 0 };
    const byTenant = new Map<string, number>();
    this.#classes.forEach((cls, rank) => {
      for (const [tenant, lane] of cls.lanes) {
        if (lane.waiters.length === 0) continue;
        byPriority[PRIORITIES[rank]] += lane.waiters.length;
        byTenant.set(tenant, (byTenant.get(tenant) ?? 0) + lane.waiters.length);
      }
    });
    return { byPriority, byTenant };
  }

  /**
   * The newest waiter of the tenant most over its share in `priority`'s class, if `tenant` holds
   * fewer places than that one would keep after giving one up (by weight): so places move toward
   * an even share and never back and forth.
   */
  #overShare(tenant: string, priority: Priority): Waiter<T> | undefined {
    const weight = (t: string) => Math.max(1e-6, this.#options.weight?.(t) ?? 1);
    const lanes = this.#classes[PRIORITY_RANK[priority]].lanes;
    const held = (lanes.get(tenant)?.waiters.length ?? 0) + 1;
    let heaviest: { lane: TenantLane<T>; load: number } | undefined;
    for (const [other, lane] of lanes) {
      if (other === tenant || lane.waiters.length === 0) continue;
      const load = lane.waiters.length / weight(other);
      if (!heaviest || load > heaviest.load) heaviest = { lane, load };
    }
    if (!heaviest) return undefined;
    const giver = heaviest.lane.waiters.at(-1)!;
    return (heaviest.lane.waiters.length - 1) / weight(giver.tenant) >= held / weight(tenant) ? giver : undefined;
  }

  #sheddableBelow(rank: number): Waiter<T> | undefined {
    for (let r = PRIORITIES.length - 1; r > rank; r--) {
      let heaviest: TenantLane<T> | undefined;
      for (const lane of this.#classes[r].lanes.values())
        if (!heaviest || lane.waiters.length > heaviest.waiters.length) heaviest = lane;
      if (heaviest && heaviest.waiters.length > 0) return heaviest.waiters.at(-1);
    }
    return undefined;
  }
}

/** Smaller virtual tag first; on a tie, the lane whose head came first. */
function earlier<T>(a: TenantLane<T>, b: TenantLane<T>): boolean {
  return a.tag < b.tag || (a.tag === b.tag && a.waiters[0].seq < b.waiters[0].seq);
}
