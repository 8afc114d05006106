// A whole agent on loopback for tests: simulated pods, optional providers, the production agent.
import { startAgent, type RunningAgent } from '../../agent/agent.ts';
import { settingsFromObject } from '../../agent/config/load.ts';
import { startSim, type SimOptions, type SimServer } from '../../shared/sim/server.ts';
import { waitFor } from './wait.ts';
export { waitFor };

export const MODEL = 'llama-3-8b';

export interface StackOptions {
  /** One simulator per entry. */
  pods?: SimOptions[];
  /** Extra config keys (providers, policies, namespaces, limits, …). */
  config?: Record<string, unknown>;
  node?: string;
  /** Receives the agent's per-request JSON log lines (config requestLog.sample decides which). */
  requestLog?: (line: string) => void;
  /** Pods that are not simulators (servers a test writes to misbehave), by host:port. */
  extraPods?: { name: string; address: string }[];
  /** The agent's wall clock (default: the real one), for tests that move time on. */
  now?: () => number;
  /** Where the agent's spans go (tests: an in-memory exporter's tracer). */
  tracer?: import('@opentelemetry/api').Tracer;
}

export interface Stack {
  agent: RunningAgent;
  sims: SimServer[];
  api: string;
  admin: string;
  close(): Promise<void>;
}

export async function startStack(options: StackOptions = {}): Promise<Stack> {
  const sims: SimServer[] = [];
  for (const [i, sim] of (options.pods ?? [{}]).entries())
    sims.push(await startSim({ models: [MODEL], seed: 10 + i, name: `pod-${i}`, ...sim }));
  const settings = settingsFromObject({
    node: options.node ?? 'node-a',
    listen: { api: '127.0.0.1:0', admin: '127.0.0.1:0' },
    scrapeInterval: '50ms',
    pods: [
      ...sims.map((sim, i) => ({
        name: `pod-${i}`,
        namespace: 'inference',
        address: new URL(sim.url).host,
        engine: sim.flavor,
        models: [MODEL],
      })),
      ...(options.extraPods ?? []).map((p) => ({
        name: p.name,
        namespace: 'inference',
        address: p.address,
        engine: 'vllm',
        models: [MODEL],
      })),
    ],
    ...options.config,
  });
  const agent = await startAgent(settings, {
    log: () => {},
    requestLog: options.requestLog,
    now: options.now,
    tracer: options.tracer,
  });
  await waitFor(async () => (await fetch(`${agent.adminUrl}/readyz`)).ok, 5000, 'agent ready');
  return {
    agent,
    sims,
    api: agent.apiUrl,
    admin: agent.adminUrl,
    async close() {
      await agent.shutdown();
      await Promise.all(sims.map((s) => s.close()));
    },
  };
}

/** An OpenAI-compatible provider entry for the config, at a stand-in's URL, its key read from `keyEnv`. */
export function openaiProvider(name: string, url: string, keyEnv: string) {
  return {
    name,
    kind: 'openai',
    endpoint: url,
    models: { [MODEL]: `${name}-llama` },
    apiKey: { env: keyEnv },
    timeout: '1s',
  };
}

export function chatBody(content = 'Hello there', extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { model: MODEL, messages: [{ role: 'user', content }], max_tokens: 8, ...extra };
}

export async function postJson(url: string, body: unknown, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
}
