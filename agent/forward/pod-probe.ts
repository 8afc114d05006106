// Readmission probes for ejected pods (agent/pool/ejection.ts): when a pod's backoff ends, one TCP
// connect to its address says whether it takes connections again. A connect is what failed, so a
// connect is what is checked; the pod's answers are judged by the requests that follow.
import { connect } from 'node:net';

export interface ProbedPool {
  ejectedDue(): { uid: string; address: string }[];
  nextEjectionDue(): number | undefined;
  probed(uid: string, ok: boolean): void;
}

export interface PodProbeOptions {
  /** How often due pods are looked for (the ejection backoff's resolution). */
  intervalMs: number;
  /** A connect that takes longer than this failed. */
  timeoutMs: number;
}

export const DEFAULT_POD_PROBE: PodProbeOptions = { intervalMs: 200, timeoutMs: 1_000 };

/** Whether `address` (host:port) accepts a TCP connection within `timeoutMs`. */
export function tcpConnects(address: string, timeoutMs: number): Promise<boolean> {
  let target: { host: string; port: number };
  try {
    const url = new URL(`http://${address}`);
    target = { host: url.hostname.replace(/^\[|\]$/g, ''), port: Number(url.port || 80) };
  } catch {
    return Promise.resolve(false);
  }
  return new Promise((resolve) => {
    const socket = connect({ host: target.host, port: target.port });
    const finish = (ok: boolean) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(ok);
    };
    const timer = setTimeout(() => finish(false), timeoutMs);
    socket.once('connect', () => finish(true));
    socket.once('error', () => finish(false));
  });
}

/** Probes the pool's due pods every `intervalMs` while any is ejected; returns a stop. */
export function startPodProbes(
  pool: ProbedPool,
  options: PodProbeOptions = DEFAULT_POD_PROBE,
  probe: (address: string, timeoutMs: number) => Promise<boolean> = tcpConnects,
): () => void {
  const probing = new Set<string>();
  let stopped = false;
  const timer = setInterval(() => {
    if (pool.nextEjectionDue() === undefined) return;
    for (const { uid, address } of pool.ejectedDue()) {
      if (probing.has(uid)) continue;
      probing.add(uid);
      void probe(address, options.timeoutMs).then((ok) => {
        probing.delete(uid);
        if (!stopped) pool.probed(uid, ok);
      });
    }
  }, options.intervalMs);
  timer.unref();
  return () => {
    stopped = true;
    clearInterval(timer);
  };
}
