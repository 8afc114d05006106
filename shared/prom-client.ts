// The parts of prom-client the agent uses (its registry, counters, gauges, and the default process
// and Node.js metrics), loaded without prom-client's index: the index also loads summaries and
// their t-digest, the Pushgateway client (with http, https, zlib), the cluster aggregator, and,
// through its CPU metric, the OpenTelemetry API (for exemplars, which the agent does not use).
// Measured (docs/benchmarks.md, "Memory"): the index costs 2.0 MB of V8 heap, these parts 0.5 MB.
// They are the same module instances the index loads (CommonJS caches them by path), so a
// Registry made by `import { Registry } from 'prom-client'` (tests) takes these metrics too.
import { createRequire } from 'node:module';
import type * as Prom from 'prom-client';

const require = createRequire(import.meta.url);

/** Loads one of prom-client's modules by its path inside the package (prom-client has no exports map). */
function part<T>(path: string): T {
  try {
    return require(`prom-client/lib/${path}`) as T;
  } catch (error) {
    throw new Error(`could not load prom-client/lib/${path} (the prom-client package's layout changed?)`, {
      cause: error,
    });
  }
}

export const Registry = part<typeof Prom.Registry>('registry.js');
export type Registry = Prom.Registry;
export const Counter = part<typeof Prom.Counter>('counter.js');
export type Counter<L extends string = string> = Prom.Counter<L>;
export const Gauge = part<typeof Prom.Gauge>('gauge.js');
export type Gauge<L extends string = string> = Prom.Gauge<L>;
export type Metric = Prom.Metric;

type DefaultMetric = (registry: Registry, config: { prefix: string; eventLoopMonitoringPrecision: number }) => void;

/**
 * prom-client's default metrics in its own order, each from its own module, with the CPU counters
 * made here (the same names, help and values as prom-client's, without its OpenTelemetry import).
 */
export function collectDefaultMetrics(options: { register: Registry; prefix: string }): void {
  const config = { eventLoopMonitoringPrecision: 10, prefix: options.prefix };
  processCpuTotal(options.register, options.prefix);
  const names = [
    'processStartTime',
    'osMemoryHeap',
    'processOpenFileDescriptors',
    'processMaxFileDescriptors',
    'eventLoopLag',
    ...(typeof process.getActiveResourcesInfo === 'function' ? ['processResources'] : []),
    'processHandles',
    'processRequests',
    'heapSizeAndUsed',
    'heapSpacesSizeAndUsed',
    'version',
    'gc',
  ];
  for (const name of names) part<DefaultMetric>(`metrics/${name}.js`)(options.register, config);
}

/** User, system and total CPU seconds; one read of process.cpuUsage() per scrape sets all three. */
function processCpuTotal(registry: Registry, prefix: string): void {
  let last = process.cpuUsage();
  const counter = (name: string, help: string, collect?: () => void) =>
    new Counter({ name: `${prefix}${name}`, help, registers: [registry], ...(collect && { collect }) });
  const user = counter('process_cpu_user_seconds_total', 'Total user CPU time spent in seconds.', () => {
    const now = process.cpuUsage();
    const userMicros = now.user - last.user;
    const systemMicros = now.system - last.system;
    last = now;
    user.inc(userMicros / 1e6);
    system.inc(systemMicros / 1e6);
    total.inc((userMicros + systemMicros) / 1e6);
  });
  const system = counter('process_cpu_system_seconds_total', 'Total system CPU time spent in seconds.');
  const total = counter('process_cpu_seconds_total', 'Total user and system CPU time spent in seconds.');
}
