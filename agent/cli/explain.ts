// `kinference explain`: ask a running agent what it would do with a request like this, and why.
import { parseArgs } from 'node:util';
import { request } from 'undici';
import type { Explanation } from '../server/explain.ts';

export function formatExplanation(e: Explanation): string {
  const lines = [`decision: ${e.action} → ${e.target}${'predictedTtftMs' in e ? ` (predicted TTFT ${e.predictedTtftMs} ms)` : ''}`];
  if ('status' in e) lines.push(`  ${e.status}: ${e.message}`);
  const pct = `p${Math.round(e.slo.attainment * 1000) / 10}`;
  lines.push(
    `policy:   ${e.policy}`,
    `slo:      TTFT ${e.slo.ttftMs} ms at ${pct}; judged on the ${e.slo.judgedOn === 'quantile' ? `${pct} quantile (the request may leave)` : 'mean (the request may not leave)'}`,
    `overflow: ${e.leave.allowed ? 'allowed' : 'not allowed'} — ${e.leave.reason}`,
  );
  const numbers = (x: { predictedTtftMs: number; quantileTtftMs: number; marginMs: number }) =>
    `mean ${String(x.predictedTtftMs).padStart(7)} ms  ${pct} ${String(x.quantileTtftMs).padStart(7)} ms  margin ${String(x.marginMs).padStart(7)} ms`;
  if (e.candidates.length) {
    lines.push('candidates (best first):');
    for (const c of e.candidates) lines.push(`  ${c.pod.padEnd(32)} ${numbers(c)}  queued ${c.queued}  running ${c.running}  in-flight ${c.inFlight}`);
  }
  if (e.dropped.length) {
    lines.push('dropped:');
    for (const d of e.dropped) lines.push(`  ${d.pod.padEnd(32)} ${d.reason.padEnd(10)} ${numbers(d)}  ${d.detail}`);
  }
  return lines.join('\n');
}

export async function runExplainCommand(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      admin: { type: 'string' },
      model: { type: 'string' },
      tenant: { type: 'string' },
      namespace: { type: 'string' },
      tags: { type: 'string' },
      'prompt-tokens': { type: 'string' },
      json: { type: 'boolean' },
    },
    strict: true,
  });
  if (!values.admin || !values.model) {
    console.error('kinference explain: --admin URL and --model M are required');
    return 2;
  }
  const url = new URL('/explain', values.admin);
  url.searchParams.set('model', values.model);
  if (values.tenant) url.searchParams.set('tenant', values.tenant);
  if (values.namespace) url.searchParams.set('namespace', values.namespace);
  if (values.tags) url.searchParams.set('tags', values.tags);
  if (values['prompt-tokens']) url.searchParams.set('promptTokens', values['prompt-tokens']);
  const response = await request(url, { headersTimeout: 5000, bodyTimeout: 5000 });
  const body = (await response.body.json()) as Explanation & { error?: { message: string } };
  if (response.statusCode !== 200) {
    console.error(`kinference explain: ${response.statusCode}: ${body.error?.message ?? JSON.stringify(body)}`);
    return 1;
  }
  console.log(values.json ? JSON.stringify(body, null, 2) : formatExplanation(body));
  return 0;
}
