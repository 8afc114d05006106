// Instructions per assembled decision (the pool's candidates, then decide) at N known pods:
// deterministic where this VM has no hardware counters and wall-clock timing is other processes'
// noise. Under callgrind with instrumentation off at start, this switches it on for exactly
// `--decisions` decisions after the warm-up (callgrind_control), so start-up and the pool's
// construction are not counted; callgrind prints the total ("Collected"). Compilation runs on the
// main thread (--single-threaded), so the same tree counts the same code.
// Run: valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/dev/null \
//        node --single-threaded bench/decide-instructions.ts [--tree DIR] [--known 1000] [--decisions 5000]
//        [--history 30000] [--observations 300]
import { spawnSync } from 'node:child_process';
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { poolKnowing, treeAt } from './known-pods.ts';
import { benchCandidates, benchLeave, benchPolicy, benchRequest } from './decide-fixtures.ts';

const args = parseArgs({
  options: {
    tree: { type: 'string', default: resolve(import.meta.dirname, '..') },
    known: { type: 'string', default: '1000' },
    decisions: { type: 'string', default: '5000' },
    warmup: { type: 'string', default: '20000' },
    history: { type: 'string', default: '30000' },
    observations: { type: 'string', default: '300' },
  },
}).values;
const dir = args.tree;
const tree = await treeAt(dir);
const pool = poolKnowing(
  Number(args.known),
  benchCandidates(8),
  8,
  Number(args.history),
  tree.classes,
  Number(args.observations),
);
let seed = 1;
// A fixed sequence, so both trees draw the same picks.
const rand = () => ((seed = (seed * 16807) % 2147483647) - 1) / 2147483646;
const run = () =>
  tree.decide({
    request: benchRequest,
    policy: benchPolicy,
    candidates: pool.candidates(benchRequest.model),
    leave: benchLeave,
    rand,
  });
for (let i = 0, n = Number(args.warmup); i < n; i++) run();
const control = (on: boolean) =>
  spawnSync('callgrind_control', ['-i', on ? 'on' : 'off', String(process.pid)], { stdio: 'ignore' });
control(true);
for (let i = 0, n = Number(args.decisions); i < n; i++) run();
control(false);
console.log(`${dir}: ${args.known} known pods, ${args.decisions} decisions counted`);
