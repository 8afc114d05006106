// The agent's OpenTelemetry export, built only when the config has `tracing`: a tracer provider
// of its own (nothing registered globally), batching spans to an OTLP/HTTP collector. The SDK is
// loaded on demand, so an agent without tracing never loads it.
import type { Tracer } from '@opentelemetry/api';
import type { SpanProcessor } from '@opentelemetry/sdk-trace-base';
import type { AgentSettings } from '../config/load.ts';

export interface TraceExport {
  tracer: Tracer;
  /** Flushes what is batched, then stops. */
  shutdown(): Promise<void>;
}

/** A tracer whose spans go to `processors` (tests: an in-memory exporter), sampled at `sampleRatio`. */
export async function tracerWith(
  processors: SpanProcessor[],
  attrs: { serviceName: string; node: string; sampleRatio?: number },
): Promise<TraceExport> {
  const { BasicTracerProvider, ParentBasedSampler, TraceIdRatioBasedSampler } =
    await import('@opentelemetry/sdk-trace-base');
  const { resourceFromAttributes } = await import('@opentelemetry/resources');
  const provider = new BasicTracerProvider({
    resource: resourceFromAttributes({ 'service.name': attrs.serviceName, 'host.name': attrs.node }),
    // A caller that sampled its trace gets our spans in it; a new trace is sampled at the ratio.
    sampler: new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(attrs.sampleRatio ?? 1) }),
    spanProcessors: processors,
  });
  return { tracer: provider.getTracer('kinference'), shutdown: () => provider.shutdown() };
}

/** The configured OTLP/HTTP export, or undefined when tracing is not configured. */
export async function traceExportFor(settings: AgentSettings): Promise<TraceExport | undefined> {
  const tracing = settings.tracing;
  if (!tracing) return undefined;
  const { OTLPTraceExporter } = await import('@opentelemetry/exporter-trace-otlp-http');
  const { BatchSpanProcessor } = await import('@opentelemetry/sdk-trace-base');
  const exporter = new OTLPTraceExporter({ url: tracing.endpoint, headers: tracing.headers ?? {} });
  return tracerWith([new BatchSpanProcessor(exporter, { scheduledDelayMillis: 1000 })], {
    serviceName: tracing.serviceName ?? 'kinference',
    node: settings.node,
    sampleRatio: tracing.sampleRatio,
  });
}
