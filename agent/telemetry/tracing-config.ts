// Tracing's part of the agent's config file (OpenTelemetry over OTLP/HTTP; the export is
// trace-export.ts, loaded only when this is set).
import { Type } from '@sinclair/typebox';
import { Name } from '../../shared/config-schema.ts';

/** OpenTelemetry traces, exported over OTLP/HTTP only when this is set. */
export const TracingConfig = Type.Object(
  {
    /** The collector's traces URL, e.g. http://otel-collector:4318/v1/traces. */
    endpoint: Type.String({ pattern: '^https?://' }),
    /** Extra headers for the collector (e.g. an API key). */
    headers: Type.Optional(Type.Record(Type.String(), Type.String())),
    /** service.name on every span (default: kinference). */
    serviceName: Type.Optional(Name),
    /** Share of new traces recorded (0..1, default 1); a caller's sampled flag is followed. */
    sampleRatio: Type.Optional(Type.Number({ minimum: 0, maximum: 1 })),
  },
  { additionalProperties: false },
);
