// The parts of prom-client the agent uses (its registry, counters, gauges, and the default process
// and Node.js metrics), from its public entry: prom-client has no exports map, and a module path
// inside the package is not its API. The entry also loads summaries, the Pushgateway client and,
// through its CPU metric, the OpenTelemetry API, none of which the agent uses: about 1.5 MB of V8
// heap, paid once (docs/benchmarks.md, "Memory").
import { collectDefaultMetrics as promDefaults, type Registry } from 'prom-client';

export { Counter, Gauge, Registry, type Metric } from 'prom-client';

/** prom-client's default process and Node.js metrics, under `prefix`. */
export function collectDefaultMetrics(options: { register: Registry; prefix: string }): void {
  promDefaults({ register: options.register, prefix: options.prefix });
}
