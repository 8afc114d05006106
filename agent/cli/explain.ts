// `kinference explain`: ask a running agent what it would do with a request like this, and why.
import { readFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { request } from 'undici';
import type { Explanation } from '../server/admin/explain.ts';
import type { ThresholdState } from '../admission/threshold.ts';

/** What POST /explain adds: who the caller is taken to be, and what the classifier found where. */
interface BodyEvidence {
  caller?: { namespace: string; tenant: string; unidentified?: string };
  classification?: {
    tags: string[];
    findings: { detector: string; tag: string; path: string; via?: string; seam?: boolean }[];
    unscanned: { reason: string; path: string }[];
  };
  /** The tenant's overflow budget per limit (only under a budget), and who waits for a pod by class. */
  budget?: {
    scope: string;
    usedTokens: number;
    usedRequests: number;
    remainingTokens?: number;
    remainingRequests?: number;
    resetsAt: string;
  }[];
  waiting?: Record<string, number>;
  /** The policy's admission loop: the quantile requests that may leave are admitted on now, and why. */
  admission?: ThresholdState;
}

export function formatExplanation(e: Explanation & BodyEvidence): string {
  const lines = [
    `decision: ${e.action} → ${e.target}${'predictedTtftMs' in e ? ` (predicted TTFT ${e.predictedTtftMs} ms)` : ''}`,
  ];
  if (e.caller)
    lines.push(
      `caller:   ${e.caller.namespace} (tenant ${e.caller.tenant})${e.caller.unidentified ? ` — ${e.caller.unidentified}` : ''}`,
    );
  if (e.classification) {
    lines.push(`tags:     ${e.classification.tags.join(', ') || '(none)'}`);
    // Where and in which decoded form a detector fired; the text itself is never shown.
    for (const f of e.classification.findings) {
      const how = [f.seam ? 'across the items' : '', f.via ? `decoded: ${f.via}` : ''].filter(Boolean).join(', ');
      lines.push(`  ${f.detector.padEnd(14)} → ${f.tag.padEnd(14)} at ${f.path || '(body)'}${how ? ` (${how})` : ''}`);
    }
    for (const u of e.classification.unscanned) lines.push(`  unscanned (${u.reason}) at ${u.path || '(body)'}`);
  }
  if ('status' in e) lines.push(`  ${e.status}: ${e.message}`);
  const pct = `p${Math.round(e.slo.attainment * 1000) / 10}`;
  lines.push(
    `policy:   ${e.policy}`,
    `slo:      TTFT ${e.slo.ttftMs} ms at ${pct}; judged on the ${e.slo.judgedOn === 'quantile' ? `${e.admission ? `p${Math.round(e.admission.quantile * 1000) / 10}` : pct} quantile (the request may leave)` : 'mean (the request may not leave)'}`,
    `overflow: ${e.leave.allowed ? 'allowed' : 'not allowed'} — ${e.leave.reason}`,
  );
  if (e.admission) {
    const p = (x: number) => `${Math.round(x * 1000) / 10}%`;
    const a = e.admission;
    lines.push(
      `admission: a request that may leave goes to a pod if it meets the SLO with ≥ ${p(a.quantile)} chance (target ${p(a.target)}, aim ${p(a.aim)}); measured ${a.measured ? p(a.attainment) : '–'} of ${a.measured} admitted, planned misses ${Number.isNaN(a.plannedMiss) ? '–' : p(a.plannedMiss)}${a.starved ? `, ${a.starved} must-stay late behind admitted ones` : ''}, error budget left ${p(Math.max(0, a.budgetLeft))}: ${a.why}`,
    );
  }
  for (const b of e.budget ?? []) {
    const left = [
      b.remainingTokens !== undefined ? `${b.remainingTokens} tokens` : undefined,
      b.remainingRequests !== undefined ? `${b.remainingRequests} requests` : undefined,
    ].filter((x) => x !== undefined);
    lines.push(
      `budget:   ${b.scope.padEnd(16)} used ${b.usedTokens} tokens, ${b.usedRequests} requests; left ${left.join(', ')}; refills ${b.resetsAt}`,
    );
  }
  if (e.waiting)
    lines.push(
      `waiting:  ${Object.entries(e.waiting)
        .map(([k, n]) => `${k} ${n}`)
        .join(', ')}`,
    );
  const numbers = (x: { predictedTtftMs: number; quantileTtftMs: number; marginMs: number }) =>
    `mean ${String(x.predictedTtftMs).padStart(7)} ms  ${pct} ${String(x.quantileTtftMs).padStart(7)} ms  margin ${String(x.marginMs).padStart(7)} ms`;
  if (e.candidates.length) {
    lines.push('candidates (best first):');
    for (const c of e.candidates)
      lines.push(
        `  ${c.pod.padEnd(32)} ${numbers(c)}  queued ${c.queued}  running ${c.running}  in-flight ${c.inFlight}  cached ${c.expectedCachedTokens}${c.prefixSource ? ` (${c.prefixSource})` : ''}`,
      );
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
      body: { type: 'string' },
      api: { type: 'string' },
      ip: { type: 'string' },
      header: { type: 'string', multiple: true },
      json: { type: 'boolean' },
    },
    strict: true,
  });
  if (!values.admin || (!values.model && !values.body)) {
    console.error('kinference explain: --admin URL and --model M (or --body FILE) are required');
    return 2;
  }
  const url = new URL('/explain', values.admin);
  if (values.body) {
    // The exact request an app would send: the agent classifies it and shows where each detector fired.
    if (values.api) url.searchParams.set('api', values.api);
    for (const key of ['tenant', 'namespace', 'ip'] as const) if (values[key]) url.searchParams.set(key, values[key]);
    const text = await readFile(values.body === '-' ? '/dev/stdin' : values.body, 'utf8');
    const headers: Record<string, string> = {
      'content-type': 'application/json',
      ...(values.tags ? { 'x-kinference-tags': values.tags } : {}),
    };
    // `--header 'x-request-id: …'`: the request id and trace context the app sends, classified
    // as the request path classifies what it would forward to a provider.
    for (const h of values.header ?? []) {
      const colon = h.indexOf(':');
      if (colon <= 0) {
        console.error(`kinference explain: --header wants 'name: value', got ${JSON.stringify(h)}`);
        return 2;
      }
      headers[h.slice(0, colon).trim().toLowerCase()] = h.slice(colon + 1).trim();
    }
    const response = await request(url, {
      method: 'POST',
      body: text,
      headers,
      headersTimeout: 5000,
      bodyTimeout: 5000,
    });
    return print(
      response.statusCode,
      (await response.body.json()) as Explanation & BodyEvidence & { error?: { message: string } },
      values.json,
    );
  }
  if (!values.model) return 2;
  url.searchParams.set('model', values.model);
  if (values.tenant) url.searchParams.set('tenant', values.tenant);
  if (values.namespace) url.searchParams.set('namespace', values.namespace);
  if (values.tags) url.searchParams.set('tags', values.tags);
  if (values['prompt-tokens']) url.searchParams.set('promptTokens', values['prompt-tokens']);
  const response = await request(url, { headersTimeout: 5000, bodyTimeout: 5000 });
  return print(
    response.statusCode,
    (await response.body.json()) as Explanation & { error?: { message: string } },
    values.json,
  );
}

function print(
  status: number,
  body: Explanation & BodyEvidence & { error?: { message: string } },
  json: boolean | undefined,
): number {
  if (status !== 200) {
    console.error(`kinference explain: ${status}: ${body.error?.message ?? JSON.stringify(body)}`);
    return 1;
  }
  console.log(json ? JSON.stringify(body, null, 2) : formatExplanation(body));
  return 0;
}
