// This agent's traffic to other nodes' pods. Gossip reports their queues; what we sent since
// their last report is only known here, so it is counted per pod until a newer version arrives.
import type { PodEstimate } from '../types.ts';
import type { RequestCounters } from './pod-records.ts';

export interface PeerTraffic extends RequestCounters {
  /** The gossip version of the pod's estimate our counts are relative to. */
  lastVersion: number;
  unhealthyUntil: number;
}

export class PeerTrafficBook {
  readonly #byPod = new Map<string, PeerTraffic>();

  /** The pod's traffic, if this agent ever sent it a request or marked it failed. */
  get(uid: string): PeerTraffic | undefined {
    return this.#byPod.get(uid);
  }

  /** The pod's traffic, created at zero on the first request or failure. */
  forPod(uid: string): PeerTraffic {
    let traffic = this.#byPod.get(uid);
    if (!traffic) {
      traffic = {
        inFlight: 0,
        pendingPromptTokens: 0,
        pendingRequests: 0,
        unseenSent: 0,
        lastVersion: -1,
        unhealthyUntil: 0,
        epoch: 0,
      };
      this.#byPod.set(uid, traffic);
    }
    return traffic;
  }

  /**
   * Gossip changed: a pod with a newer estimate already shows our requests in its queue (stop
   * counting them twice), and pods gossip no longer knows are forgotten.
   */
  reconcile(remote: readonly PodEstimate[]): void {
    const live = new Set(remote.map((e) => e.pod.uid));
    for (const e of remote) {
      const traffic = this.#byPod.get(e.pod.uid);
      if (traffic && e.version !== traffic.lastVersion) {
        traffic.lastVersion = e.version;
        traffic.unseenSent = 0;
        traffic.epoch++;
      }
    }
    for (const uid of this.#byPod.keys()) if (!live.has(uid)) this.#byPod.delete(uid);
  }
}
