// The agent's configuration file (docs/configuration.md), as one TypeBox schema.
// A wrong key or value names the key: at start the agent exits non-zero; a reload of the
// watched file (static mode) is rejected and the last good settings stay.
import { Type, type Static } from '@sinclair/typebox';
import { GossipConfig } from '../gossip/config.ts';
import { LimitsConfig } from './limits.ts';
import { ProviderConfig } from './providers.ts';
import { DurationString, HostPort, Name, SecretRef } from './schema-parts.ts';

const ZmqEndpoint = Type.String({ pattern: '^tcp://[^\\s]+:[0-9]{1,5}$', maxLength: 256 });
const KvEvents = Type.Object(
  {
    endpoint: ZmqEndpoint,
    replayEndpoint: Type.Optional(ZmqEndpoint),
    topic: Type.Optional(Type.String({ maxLength: 256 })),
  },
  { additionalProperties: false },
);

const StaticPod = Type.Object(
  {
    name: Name,
    namespace: Type.Optional(Name),
    address: HostPort,
    engine: Type.Optional(Type.Union([Type.Literal('vllm'), Type.Literal('tgi'), Type.Literal('sglang')])),
    models: Type.Array(Name, { minItems: 1 }),
    /** Requests the server runs at once (e.g. vLLM --max-num-seqs): caps connections to it. */
    maxConcurrency: Type.Optional(Type.Integer({ minimum: 1 })),
    /** The pod's KV-cache event sockets (vLLM --kv-events-config), for precise prefix routing. */
    kvEvents: Type.Optional(KvEvents),
    /** LoRA adapters the server serves (vLLM --lora-modules): requests may name them as the model. */
    adapters: Type.Optional(Type.Array(Name, { maxItems: 1024 })),
  },
  { additionalProperties: false },
);

/** A platform detector: keywords and/or a pattern that add a tag (validated by agent/classify/custom.ts). */
const DetectorConfig = Type.Object(
  {
    name: Name,
    tag: Name,
    keywords: Type.Optional(Type.Array(Type.String({ minLength: 1, maxLength: 256 }), { maxItems: 1024 })),
    pattern: Type.Optional(Type.String({ minLength: 1, maxLength: 1024 })),
    ignoreCase: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: false },
);

/** The API key a model-server pod was started with (`vllm --api-key`): for every pod, a namespace's, or one pod's. */
const PodCredential = Type.Object(
  { namespace: Type.Optional(Name), pod: Type.Optional(Name), apiKey: SecretRef },
  { additionalProperties: false },
);

/** One JSON line per request on stdout, for a sampled share of requests (0: off). */
const RequestLog = Type.Object({ sample: Type.Number({ minimum: 0, maximum: 1 }) }, { additionalProperties: false });

const Kubernetes = Type.Object(
  {
    /** Path to a kubeconfig; absent: in-cluster config, else the default kubeconfig. */
    kubeconfig: Type.Optional(Name),
    podIP: Type.Optional(Name),
    agentNamespace: Type.Optional(Name),
    gossipService: Type.Optional(Name),
    providersConfigMap: Type.Optional(Name),
    /** Also discover model-server pods through GIE InferencePools (inference.networking.k8s.io/v1). */
    inferencePools: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: false },
);

/** Session affinity: keep a session on the pod that served it while that pod stays within the SLO. */
const Sessions = Type.Object(
  {
    /** Header carrying the session id (default x-session-id). */
    header: Type.Optional(Name),
    /** Without the header, use the body's `user` or `metadata.user_id` (default true). */
    fromBody: Type.Optional(Type.Boolean()),
    /** Sessions remembered at most (least recently used forgotten first; default 100,000). */
    maxSessions: Type.Optional(Type.Integer({ minimum: 1, maximum: 10_000_000 })),
    /** A session not seen for this long is forgotten (default 10m). */
    ttl: Type.Optional(DurationString),
  },
  { additionalProperties: false },
);

/** OpenTelemetry traces, exported over OTLP/HTTP only when this is set. */
const Tracing = Type.Object(
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
    pods: Type.Optional(Type.Array(StaticPod)),
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
    podCredentials: Type.Optional(Type.Array(PodCredential)),
    requestLog: Type.Optional(RequestLog),
    kubernetes: Type.Optional(Kubernetes),
    tracing: Type.Optional(Tracing),
    sessions: Type.Optional(Sessions),
    logLevel: Type.Optional(
      Type.Union([Type.Literal('debug'), Type.Literal('info'), Type.Literal('warn'), Type.Literal('error')]),
    ),
  },
  { additionalProperties: false },
);

export type AgentConfigFile = Static<typeof AgentConfigSchema>;
