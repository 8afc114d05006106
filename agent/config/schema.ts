// The agent's configuration file (docs/configuration.md), as one TypeBox schema.
// A wrong key or value names the key: at start the agent exits non-zero; a reload of the
// watched file (static mode) is rejected and the last good settings stay.
import { Type, type Static } from '@sinclair/typebox';
import { KubernetesConfig, StaticPodConfig } from '../cluster/config.ts';
import { GossipConfig } from '../gossip/config.ts';
import { SessionsConfig } from '../route/session-config.ts';
import { TracingConfig } from '../telemetry/tracing-config.ts';
import { LimitsConfig } from './limits.ts';
import { ProviderConfig } from '../providers/config.ts';
import { DetectorConfig } from '../classify/config.ts';
import { PodCredentialConfig } from '../forward/config.ts';
import { DurationString, HostPort, Name } from '../../shared/config-schema.ts';

/** One JSON line per request on stdout, for a sampled share of requests (0: off). */
const RequestLog = Type.Object({ sample: Type.Number({ minimum: 0, maximum: 1 }) }, { additionalProperties: false });

export const AgentConfigSchema = Type.Object(
  {
    node: Name,
    listen: Type.Object(
      { api: HostPort, admin: HostPort, gossip: Type.Optional(HostPort) },
      { additionalProperties: false },
    ),
    discovery: Type.Optional(Type.Union([Type.Literal('static'), Type.Literal('kubernetes')])),
    scrapeInterval: Type.Optional(DurationString),
    /** Ask vLLM and SGLang for only the samples the agent reads (`/metrics?name[]=…`); default true. */
    scrapeFilter: Type.Optional(Type.Boolean()),
    pods: Type.Optional(Type.Array(StaticPodConfig)),
    /**
     * Model name → a directory holding its tokenizer.json and tokenizer_config.json (e.g. the node's
     * model cache): requests for it are tokenized as the engine does, for the precise prefix index.
     */
    tokenizers: Type.Optional(
      Type.Record(Type.String({ minLength: 1, maxLength: 256 }), Type.String({ minLength: 1, maxLength: 4096 })),
    ),
    peers: Type.Optional(Type.Array(HostPort)),
    gossip: Type.Optional(GossipConfig),
    tenantHeader: Type.Optional(Name),
    providers: Type.Optional(Type.Array(ProviderConfig)),
    /** InferencePolicy objects; validated by agent/policy against the CRD's schema. */
    policies: Type.Optional(Type.Array(Type.Unknown())),
    /** Cluster-wide custom detectors (the platform team's; namespaces cannot add or remove them). */
    detectors: Type.Optional(Type.Array(DetectorConfig, { maxItems: 64 })),
    namespaces: Type.Optional(Type.Record(Type.String(), Type.Record(Type.String(), Type.String()))),
    limits: Type.Optional(LimitsConfig),
    podCredentials: Type.Optional(Type.Array(PodCredentialConfig)),
    requestLog: Type.Optional(RequestLog),
    kubernetes: Type.Optional(KubernetesConfig),
    tracing: Type.Optional(TracingConfig),
    sessions: Type.Optional(SessionsConfig),
    logLevel: Type.Optional(
      Type.Union([Type.Literal('debug'), Type.Literal('info'), Type.Literal('warn'), Type.Literal('error')]),
    ),
  },
  { additionalProperties: false },
);

export type AgentConfigFile = Static<typeof AgentConfigSchema>;
