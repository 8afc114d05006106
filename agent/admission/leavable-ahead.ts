// Which admission loops' requests stand ahead of a request that may not leave, at the pod it is
// sent to: this agent's requests that may leave, sent there and still awaiting their first token
// (queued or in prefill ahead of it: the engines serve in arrival order). A must-stay request that
// then misses its SLO waited for the slots they took, so it counts as a miss of the loops that
// admitted them (AdmissionThreshold.starved): their error budget pays for it, and a loop that
// keeps must-stay requests late tightens. Pure bookkeeping, bounded by pods × policies.

export class LeavableAhead<Loop> {
  /** Per pod uid: each loop's requests there still awaiting their first token. */
  readonly #byPod = new Map<string, Map<Loop, number>>();

  /**
   * A request that may leave, admitted by `loop`, was sent to `pod`. Call the result when its
   * first token is out or the attempt failed; calls after the first do nothing.
   */
  sent(pod: string, loop: Loop): () => void {
    let loops = this.#byPod.get(pod);
    if (!loops) this.#byPod.set(pod, (loops = new Map()));
    loops.set(loop, (loops.get(loop) ?? 0) + 1);
    let done = false;
    return () => {
      if (done) return;
      done = true;
      const left = (loops.get(loop) ?? 1) - 1;
      if (left > 0) return void loops.set(loop, left);
      loops.delete(loop);
      if (loops.size === 0 && this.#byPod.get(pod) === loops) this.#byPod.delete(pod);
    };
  }

  /** The loops with requests awaiting their first token at `pod` now (none: empty). */
  at(pod: string): Loop[] {
    const loops = this.#byPod.get(pod);
    return loops ? [...loops.keys()] : [];
  }
}
