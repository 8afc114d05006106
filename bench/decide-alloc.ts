// Bytes allocated per decision, and by which function: the sampling heap profiler (objects the
// young and old generations collected included) over many assembled decisions at N known pods.
// Run: node bench/decide-alloc.ts [--known 1000] [--decisions 200000] [--before DIR] [--history MS]
//        [--observations N: TTFTs measured per local pod]
import { Session } from 'node:inspector/promises';
import { parseArgs } from 'node:util';
import { poolKnowing, treeAt, type PoolClasses } from './known-pods.ts';
import { PodPool } from '../agent/pool/pool.ts';
import { PodTelemetry } from '../agent/telemetry/pod-telemetry.ts';
import { decide } from '../agent/route/router.ts';
import { benchCandidates, benchLeave, benchPolicy, benchRequest } from './decide-fixtures.ts';
import { allocationBySite } from './heap-sites.ts';

const args = parseArgs({
  options: {
    known: { type: 'string', default: '1000' },
    decisions: { type: 'string', default: '200000' },
    before: { type: 'string' },
    history: { type: 'string', default: '0' },
    observations: { type: 'string', default: '0' },
    top: { type: 'string', default: '12' },
  },
}).values;
const known = Number(args.known);
const decisions = Number(args.decisions);

async function profile(label: string, classes: PoolClasses, decideWith: typeof decide): Promise<void> {
  const pool = poolKnowing(known, benchCandidates(8), 8, Number(args.history), classes, Number(args.observations));
  const run = () =>
    decideWith({
      request: benchRequest,
      policy: benchPolicy,
      candidates: pool.candidates(benchRequest.model),
      leave: benchLeave,
      rand: Math.random,
    });
  for (let i = 0; i < 20_000; i++) run(); // optimised before sampling
  const session = new Session();
  session.connect();
  await session.post('HeapProfiler.startSampling', {
    samplingInterval: 256,
    includeObjectsCollectedByMajorGC: true,
    includeObjectsCollectedByMinorGC: true,
  });
  for (let i = 0; i < decisions; i++) run();
  const { total, sites } = await allocationBySite(session);
  session.disconnect();
  console.log(
    `${label}: ${known} known pods, ${(total / decisions).toFixed(0)} bytes allocated per decision (sampled)`,
  );
  for (const [site, bytes] of sites.slice(0, Number(args.top)))
    console.log(`  ${(bytes / decisions).toFixed(0).padStart(7)} B  ${site}`);
}

await profile('now', { PodPool, PodTelemetry }, decide);
if (args.before !== undefined) {
  const before = await treeAt(args.before);
  await profile(`before (${args.before})`, before.classes, before.decide);
}
