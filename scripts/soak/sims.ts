// Simulated vLLM pods for `npm run soak`, in a process of their own so that their work (streams,
// parsing 3 MB bodies) runs on neither the agent's nor the probe's event loop. Arguments: model,
// max-num-seqs, how many pods, their name prefix. Tells the parent their URLs, then, when asked
// ('report'), the most requests each engine held at once (running + waiting, sampled every
// 100 ms): the check that no pod was given more than it can take.
import { startSim } from '../../shared/sim/server.ts';

const model = process.argv[2] ?? 'llama-3-8b';
const maxSeqs = Number(process.argv[3] ?? 1024);
const count = Number(process.argv[4] ?? 2);
const prefix = process.argv[5] ?? 'pod-';
const sims = await Promise.all(
  Array.from({ length: count }, (_, i) => startSim({ models: [model], seed: 100 + i, name: `${prefix}${i}`, maxSeqs })),
);
const peak = sims.map(() => 0);
const timer = setInterval(() => {
  sims.forEach((s, i) => {
    const { running, waiting } = s.engine.snapshot();
    peak[i] = Math.max(peak[i], running + waiting);
  });
}, 100);

process.on('disconnect', () => process.exit(0)); // the soak ended (or died): so do its pods
process.on('message', (m: unknown) => {
  if (m === 'report') process.send!({ peak });
  if (m === 'stop') {
    clearInterval(timer);
    void Promise.all(sims.map((s) => s.close())).then(() => process.exit(0));
  }
});
process.send!({ urls: sims.map((s) => s.url) });
