// A body worker thread (body-offload.ts starts it): judges the large bodies the agent hands it,
// off the agent's event loop. Messages: { detectors } replaces the platform's detectors (they
// change on a reload; ordered before the jobs that need them), { id, job } asks for a verdict.
import { parentPort } from 'node:worker_threads';
import type { DetectorSpec } from '../../classify/custom.ts';
import { DetectorCache, judgeBody, type BodyJob } from './body-work.ts';

const port = parentPort!;
const detectors = new DetectorCache();
let specs: readonly DetectorSpec[] = [];

port.on('message', (m: { detectors: DetectorSpec[] } | { id: number; job: BodyJob }) => {
  if ('detectors' in m) {
    specs = m.detectors;
    return;
  }
  try {
    port.postMessage({ id: m.id, verdict: judgeBody(m.job, detectors.get(specs)) });
  } catch (error) {
    // A fault of ours: the agent judges this body itself (same code, same verdict).
    port.postMessage({ id: m.id, fault: String((error as Error)?.stack ?? error) });
  }
});
