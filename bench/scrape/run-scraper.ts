// Runs only the production scraper against the bench pages for --seconds (for `node --cpu-prof`).
//   node --cpu-prof --cpu-prof-dir /tmp/prof bench/scrape/run-scraper.ts --seconds 20
import { spawn } from 'node:child_process';
import { parseArgs } from 'node:util';
import { Scraper } from '../../agent/telemetry/scraper.ts';
import type { Pod } from '../../agent/types.ts';

const { values } = parseArgs({
  options: {
    interval: { type: 'string', default: '100' },
    seconds: { type: 'string', default: '10' },
    pages: {
      type: 'string',
      default:
        'vllm-v1.txt,vllm-v1-dp2.txt,vllm-v1-lora.txt,vllm-v1-openmetrics.txt,vllm-v0-busy.txt,tgi.txt,sglang.txt,sglang-tp2.txt',
    },
  },
});
const server = spawn(process.execPath, [new URL('./pages.ts', import.meta.url).pathname, ...values.pages.split(',')], {
  stdio: ['ignore', 'pipe', 'inherit'],
});
const listed = await new Promise<{ name: string; address: string }[]>((done) => {
  let output = '';
  server.stdout.on('data', (d: Buffer) => {
    output += d;
    const match = /^pods (.*)$/m.exec(output);
    if (match) done(JSON.parse(match[1]));
  });
});
const pods: Pod[] = listed.map((p) => ({
  uid: p.name,
  name: p.name,
  namespace: 'bench',
  node: 'here',
  address: p.address,
  models: ['m'],
}));
let scrapes = 0;
let errors = 0;
const scraper = new Scraper(
  { intervalMs: Number(values.interval) },
  () => scrapes++,
  () => errors++,
);
scraper.setPods(pods);
scraper.start();
await new Promise((r) => setTimeout(r, 1000));
scrapes = 0;
const cpu = process.cpuUsage();
await new Promise((r) => setTimeout(r, Number(values.seconds) * 1000));
const used = process.cpuUsage(cpu);
console.log(
  `${scrapes} scrapes, ${errors} errors, ${((used.user + used.system) / 1000 / scrapes).toFixed(3)} ms CPU/scrape`,
);
await scraper.stop();
server.kill();
