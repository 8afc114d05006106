// A body worker (body-offload.ts starts it, as a child process or a thread): judges the large
// bodies the agent hands it, off the agent's event loop. Messages: { detectors } replaces the
// platform's detectors (they change on a reload; ordered before the jobs that need them),
// { id, job } asks for a verdict. It says { ready } once it listens.
import { parentPort } from 'node:worker_threads';
import type { DetectorSpec } from '../classify/custom.ts';
import { DetectorCache, judgeBody, type BodyJob } from './body-work.ts';

type Message = { detectors: DetectorSpec[] } | { id: number; job: BodyJob };

/** A thread's port, or a child process's IPC channel (which ends the process when it closes). */
const port = parentPort
  ? { on: (f: (m: Message) => void) => parentPort!.on('message', f), send: (m: object) => parentPort!.postMessage(m) }
  : { on: (f: (m: Message) => void) => process.on('message', f), send: (m: object) => process.send!(m) };
if (!parentPort) process.on('disconnect', () => process.exit(0));

const detectors = new DetectorCache();
let specs: readonly DetectorSpec[] = [];

port.on((m) => {
  if ('detectors' in m) {
    specs = m.detectors;
    return;
  }
  try {
    port.send({ id: m.id, verdict: judgeBody(m.job, detectors.get(specs)) });
  } catch (error) {
    // A fault of ours: the agent judges this body itself (same code, same verdict).
    port.send({ id: m.id, fault: String((error as Error)?.stack ?? error) });
  }
});
port.send({ ready: true });
