// SSE framing cost: CPU seconds to relay N MB of provider stream, as proper events and as one
// endless line without blank lines (which the old framing copied quadratically: 32 MB took 31.5 s).
//   node bench/sse-framing.ts
import { relaySse } from '../agent/providers/openai.ts';
async function run(mb: number, blank: boolean): Promise<number> {
  const chunk = new TextEncoder().encode(blank ? 'data: ' + 'x'.repeat(16 * 1024 - 8) + '\n\n' : 'x'.repeat(16 * 1024));
  const n = (mb * 1024 * 1024) / chunk.length;
  async function* up() {
    for (let i = 0; i < n; i++) yield chunk;
  }
  const t = process.cpuUsage();
  const r = relaySse(up(), { onCancel: () => {}, describeBreak: () => 'x' }).getReader();
  while (!(await r.read()).done) {
    // drain
  }
  const u = process.cpuUsage(t);
  return (u.user + u.system) / 1e6;
}
for (const mb of [8, 32])
  console.log(
    `${mb} MB without blank lines: ${(await run(mb, false)).toFixed(2)} CPU-s; with events: ${(await run(mb, true)).toFixed(2)} CPU-s`,
  );
