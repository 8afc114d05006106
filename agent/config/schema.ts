// The agent's configuration file (docs/configuration.md), as one TypeBox schema.
// A wrong key or value names the key: at start the agent exits non-zero; a reload of the
// watched file (static mode) is rejected and the last good settings stay.
import { Type, type Static } from '@sinclair/typebox';
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

const Limits = Type.Object(
  {
    /** Largest request body accepted (bytes); larger → 413. */
    maxBodyBytes: Type.Optional(Type.Integer({ minimum: 1024 })),
    /** Time to the upstream pod's response headers; past it the pod counts as failed (retry). */
    podConnectTimeout: Type.Optional(DurationString),
    /**
     * Time to a pod's answer for a non-streamed request: the engine sends headers only with the
     * whole answer, so the generation is the deadline, not the connection.
     */
    podResponseTimeout: Type.Optional(DurationString),
    /** Longest gap between two chunks of an upstream stream before it is cut. */
    podIdleTimeout: Type.Optional(DurationString),
    /** How many other pods a request may try after a pod fails before its first byte. */
    maxRetries: Type.Optional(Type.Integer({ minimum: 0, maximum: 10 })),
    /** A pod that refused or reset a connection before its first byte is out of decisions this long at first. */
    ejectionBase: Type.Optional(DurationString),
    /** Longest ejection: each one in a row doubles it up to this; a probe then readmits the pod. */
    ejectionMax: Type.Optional(DurationString),
    /** Time allowed for in-flight requests to finish after SIGTERM. */
    drainTimeout: Type.Optional(DurationString),
    /** Per-scrape timeout of a pod's /metrics. */
    scrapeTimeout: Type.Optional(DurationString),
    /** Requests waiting for a pod at once; beyond it new waiters get 429 at once. */
    maxWaiting: Type.Optional(Type.Integer({ minimum: 0 })),
    /** Peers' pods a decision considers per model: the fastest predicted when gossip last changed them. */
    peerShortlist: Type.Optional(Type.Integer({ minimum: 1, maximum: 100_000 })),
    /** Completion tokens an overflow reserves against its tenant's budget when the client set no max_tokens. */
    budgetCompletionEstimate: Type.Optional(Type.Integer({ minimum: 0 })),
    /** A new (or restarted) agent admits no budgeted overflow for this long unless it has heard the cluster's counters. */
    budgetWarmup: Type.Optional(DurationString),
    /** An agent gossip no longer sees: its unsettled reservations stop counting this long later. */
    budgetPendingTtl: Type.Optional(DurationString),
    /** Budget counters held over every agent (current windows); more are dropped and counted. */
    budgetMaxCounters: Type.Optional(Type.Integer({ minimum: 100 })),
    /** Agents (origins) whose budget counters are held. */
    budgetMaxOrigins: Type.Optional(Type.Integer({ minimum: 2 })),
    /** Classification reads at most this many characters of a body; the rest makes it `unscanned`. */
    classifyMaxChars: Type.Optional(Type.Integer({ minimum: 1024 })),
    /** Deepest JSON nesting classification reads; deeper values make the request `unscanned`. */
    classifyMaxDepth: Type.Optional(Type.Integer({ minimum: 4, maximum: 256 })),
    /** JSON values (strings, numbers, objects, arrays) classification visits; past it: `unscanned`. */
    classifyMaxValues: Type.Optional(Type.Integer({ minimum: 100 })),
    /** Distinct values a metric's `model` or `policy` label may take; the rest count as "other". */
    maxLabelValues: Type.Optional(Type.Integer({ minimum: 1, maximum: 10_000 })),
    /** Deepest nesting of arrays/objects accepted in a request body; deeper → 400. */
    maxJsonDepth: Type.Optional(Type.Integer({ minimum: 4, maximum: 1000 })),
    /** Request bodies of at least this many bytes are parsed and classified on a worker thread. */
    offloadBodyBytes: Type.Optional(Type.Integer({ minimum: 1024 })),
    /** Worker threads for large request bodies, started as needed; 0: every body on the event loop. */
    bodyWorkers: Type.Optional(Type.Integer({ minimum: 0, maximum: 16 })),
    /** Connections (= requests in flight) to one pod; a pod at the cap is skipped, not queued for. */
    maxConnectionsPerPod: Type.Optional(Type.Integer({ minimum: 1, maximum: 4096 })),
    /** Largest non-streamed answer read from a pod or provider; larger → 502. */
    maxUpstreamBodyBytes: Type.Optional(Type.Integer({ minimum: 1024 })),
    /** Longest silence inside a provider's answer body before it is cut. */
    providerIdleTimeout: Type.Optional(DurationString),
    /** At most one log line per pod per interval about failing scrapes. */
    scrapeFailureLogInterval: Type.Optional(DurationString),
    /** After a pod's filtered page lacked samples its whole page has, scrape it whole this long before asking filtered again. */
    scrapeFilterRetry: Type.Optional(DurationString),
    /** After serving requests, this long with none open → one memory-reducing GC; `0s` never. */
    releaseMemoryAfterIdle: Type.Optional(DurationString),
    /** The API listener's request head at most, request line included (bytes); larger → 431. */
    apiMaxHeaderBytes: Type.Optional(Type.Integer({ minimum: 1024, maximum: 1024 * 1024 })),
    /** Header fields per API request at most; more → 431. */
    apiMaxHeaders: Type.Optional(Type.Integer({ minimum: 8, maximum: 10_000 })),
    /** An API request's target (path and query) at most (bytes); longer → 414. */
    apiMaxTargetBytes: Type.Optional(Type.Integer({ minimum: 256, maximum: 1024 * 1024 })),
    /** From an API request's first byte to the end of its head; past it → 408 and the connection closes. */
    apiHeadersTimeout: Type.Optional(DurationString),
    /** From an API request's first byte to the end of its body; past it → 408; `0s`: none. */
    apiRequestTimeout: Type.Optional(DurationString),
    /** An idle kept-alive API connection closes after this long. */
    apiKeepAliveTimeout: Type.Optional(DurationString),
    /** Requests one API connection may carry, then it closes after its answer; 0: no limit. */
    apiMaxRequestsPerSocket: Type.Optional(Type.Integer({ minimum: 0, maximum: 1_000_000 })),
    /** Prompt blocks (64 characters each) hashed per request for the prefix index; the rest is not matched. */
    prefixMaxBlocks: Type.Optional(Type.Integer({ minimum: 1, maximum: 65_536 })),
    /** Prompt blocks the prefix index remembers per local pod (~190 bytes each). */
    prefixBlocksPerPod: Type.Optional(Type.Integer({ minimum: 1, maximum: 10_000_000 })),
    /** Blocks the precise (KV-event) index keeps per pod at most (~186 bytes each); the pod's KV capacity caps it too. */
    preciseBlocksPerPod: Type.Optional(Type.Integer({ minimum: 1, maximum: 10_000_000 })),
    /** How long a pod's KV-event replay may take before its index is rebuilt without it. */
    kvReplayTimeout: Type.Optional(DurationString),
    /** Live KV-event batches held per pod while a replay runs; past it the pod's index is rebuilt. */
    kvMaxHeldBatches: Type.Optional(Type.Integer({ minimum: 1, maximum: 1_000_000 })),
    /** What loading a LoRA adapter into a GPU slot adds to a pod's predicted TTFT. */
    loraLoad: Type.Optional(DurationString),
    /** What waiting for a LoRA slot adds when every slot serves other adapters' running requests. */
    loraSlotWait: Type.Optional(DurationString),
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

const Gossip = Type.Object(
  {
    key: SecretRef,
    interval: Type.Optional(DurationString),
    fanout: Type.Optional(Type.Integer({ minimum: 1, maximum: 16 })),
    /** Backstop behind membership: an agent silent this long is dropped (default 30s; heartbeat ttl / 3). */
    ttl: Type.Optional(DurationString),
    /** This agent's gossip address as peers list it; default: pod IP + gossip port (Kubernetes), else the bind address. */
    advertise: Type.Optional(HostPort),
    /** Added to a peer pod's predicted TTFT: the cost of the cross-node hop. */
    networkCost: Type.Optional(DurationString),
    /** Static mode: address ranges a gossiped pod must lie in to be routable (default: the peers' own IPs). */
    peerPodCidrs: Type.Optional(Type.Array(Type.String({ minLength: 1, maxLength: 64 }), { maxItems: 256 })),
    /** This agent's Ed25519 private key (PEM, PKCS#8) that signs its origin; default: a fresh one per start. */
    identity: Type.Optional(SecretRef),
    /** Static mode: each peer node's agent public key (raw Ed25519, base64); only these sign origins. */
    peerKeys: Type.Optional(
      Type.Array(
        Type.Object(
          { node: Type.String({ minLength: 1, maxLength: 253 }), key: Type.String({ minLength: 1, maxLength: 64 }) },
          { additionalProperties: false },
        ),
        { maxItems: 4096 },
      ),
    ),
    /**
     * Kubernetes: bind each agent's key to its pod (agent/gossip/binding.ts). tokenFile: a projected
     * ServiceAccount token for `audience` (default kinference-gossip); serviceAccount: the agents'
     * (default kinference-agent), the only one whose tokens bind keys.
     */
    tokenBinding: Type.Optional(
      Type.Object(
        {
          tokenFile: Type.String({ minLength: 1, maxLength: 4096 }),
          audience: Type.Optional(Type.String({ minLength: 1, maxLength: 253 })),
          serviceAccount: Type.Optional(Type.String({ minLength: 1, maxLength: 253 })),
        },
        { additionalProperties: false },
      ),
    ),
  },
  { additionalProperties: false },
);

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
    gossip: Type.Optional(Gossip),
    tenantHeader: Type.Optional(Name),
    providers: Type.Optional(Type.Array(ProviderConfig)),
    /** InferencePolicy objects; validated by agent/policy against the CRD's schema. */
    policies: Type.Optional(Type.Array(Type.Unknown())),
    /** Cluster-wide custom detectors (the platform team's; namespaces cannot add or remove them). */
    detectors: Type.Optional(Type.Array(DetectorConfig, { maxItems: 64 })),
    namespaces: Type.Optional(Type.Record(Type.String(), Type.Record(Type.String(), Type.String()))),
    limits: Type.Optional(Limits),
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
