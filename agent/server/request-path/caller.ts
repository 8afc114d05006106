// Who is calling, under which policy, with which data: the request path's identity, policy and
// classification, built from settings and kept current from discovery (policies, namespaces,
// callers, platform detectors). Decisions stay in identify.ts, policy/ and classify/.
import type { Caller } from '../../cluster/types.ts';
import type { HeaderReader } from '../../forward/headers.ts';
import { classifyRequest, UNSCANNED_TAG, withForwardedHeaders, type Classification } from '../../classify/classify.ts';
import { compileDetectors, type CustomDetector, type DetectorSpec } from '../../classify/custom.ts';
import type { AgentSettings } from '../../config/load.ts';
import { compilePolicies, type CompiledPolicies } from '../../policy/resolve.ts';
import { loadPolicies } from '../../policy/validate.ts';
import type { EffectivePolicy } from '../../types.ts';
import { identify, restrictUnidentified, type Identity } from './identify.ts';
import type { Metrics } from '../observability/metrics.ts';

export interface CallersDeps {
  settings: Pick<AgentSettings, 'discovery' | 'tenantHeader' | 'tenantHeaderExplicit' | 'limits' | 'detectors'>;
  metrics: Pick<Metrics, 'classified' | 'unidentified' | 'policiesRejected'>;
  log(level: 'warn', message: string): void;
}

export class Callers {
  readonly #deps: CallersDeps;
  readonly #trustTenantHeader: boolean;
  readonly #scanLimits: { maxDepth: number; maxChars: number; maxNodes: number };
  #policies: CompiledPolicies = compilePolicies([]);
  #callers: ReadonlyMap<string, Caller> = new Map();
  #detectors: CustomDetector[] = [];
  #detectorSpecs: readonly DetectorSpec[] = [];
  #detectorTags = new Map<string, string>();

  constructor(deps: CallersDeps) {
    this.#deps = deps;
    const { settings } = deps;
    this.#trustTenantHeader = settings.discovery === 'static' || settings.tenantHeaderExplicit;
    this.#scanLimits = {
      maxDepth: settings.limits.classifyMaxDepth,
      maxChars: settings.limits.classifyMaxChars,
      maxNodes: settings.limits.classifyMaxValues,
    };
    this.setDetectors(settings.detectors);
  }

  get policies(): CompiledPolicies {
    return this.#policies;
  }

  /** Policies as found in the cluster (or file): invalid ones and those that loosen the floor are left out, counted and logged. */
  setPolicies(found: unknown[], namespaces: Map<string, Record<string, string>>): void {
    const { metrics, log } = this.#deps;
    const loaded = loadPolicies(found);
    for (const e of loaded.errors)
      log('warn', `policy ${e.name} ignored: ${e.errors.map((x) => `${x.path}: ${x.message}`).join('; ')}`);
    this.#policies = compilePolicies(loaded.policies, namespaces);
    if (loaded.errors.length > 0) metrics.policiesRejected.inc({ reason: 'invalid' }, loaded.errors.length);
    if (this.#policies.rejected.length > 0)
      metrics.policiesRejected.inc({ reason: 'guardrail' }, this.#policies.rejected.length);
    for (const problem of this.#policies.problems) log('warn', `policy: ${problem}`);
  }

  setCallers(callers: ReadonlyMap<string, Caller>): void {
    this.#callers = callers;
  }

  /** Validated with the rest of their source (a bad detector rejects the reload), so these compile clean. */
  setDetectors(specs: readonly DetectorSpec[]): void {
    this.#detectorSpecs = specs;
    this.#detectors = compileDetectors(specs).detectors;
    this.#detectorTags = new Map(this.#detectors.map((d) => [d.name, d.tag]));
  }

  /** The caller at this address, claiming this tenant (believed only where the header is trusted). */
  identityOf(headerTenant: string | null, remoteIp: string | undefined): Identity {
    const claim = identify({
      trustTenantHeader: this.#trustTenantHeader,
      headerTenant,
      remoteIp,
      callers: this.#callers,
    });
    if (claim.unidentified)
      return { namespace: claim.namespace, tenant: claim.namespace, unidentified: claim.unidentified };
    return { namespace: claim.namespace, tenant: this.#policies.tenantFor(claim.namespace, claim.claimedTenant) };
  }

  /** The API listener's caller, counted when unidentified. */
  identify(req: { headers: HeaderReader }, remoteIp: string | undefined): Identity {
    const who = this.identityOf(req.headers.get(this.#deps.settings.tenantHeader), remoteIp);
    if (who.unidentified) this.#deps.metrics.unidentified.inc({ reason: who.unidentified.code });
    return who;
  }

  /** /explain's caller named by namespace and tenant (as given, no address). */
  named(namespace: string | undefined, tenant: string | undefined): Identity {
    const ns = namespace ?? tenant ?? 'default';
    return { namespace: ns, tenant: this.#policies.tenantFor(ns, tenant) };
  }

  policyFor(who: Identity, model: string): EffectivePolicy {
    const policy = this.#policies.resolve(who.tenant, who.namespace, model);
    return who.unidentified && !this.#policies.floor.unidentifiedMayLeave ? restrictUnidentified(policy) : policy;
  }

  /** `headers`: the values a provider would receive (only the off-cluster allow-list is read). */
  classify(headerTags: string | null, body: unknown, headers?: Record<string, string>): Classification {
    return classifyRequest(headerTags, body, { limits: this.#scanLimits, detectors: this.#detectors, headers });
  }

  /** A classification made elsewhere (a body worker), with the forwarded header values classified here. */
  withForwardedHeaders(c: Classification, headers: Record<string, string>): Classification {
    return withForwardedHeaders(c, headers, { detectors: this.#detectors });
  }

  /** The platform's detectors as last set (a body worker compiles the same ones). */
  get detectorSpecs(): readonly DetectorSpec[] {
    return this.#detectorSpecs;
  }

  /** The request's tags, with kinference_classified_total counted per detector that fired. */
  classifyCounted(headerTags: string | null, body: unknown, headers?: Record<string, string>): string[] {
    return this.counted(this.classify(headerTags, body, headers));
  }

  /** A classification's tags, counted in kinference_classified_total per detector that fired. */
  counted(c: Classification): string[] {
    const { classified } = this.#deps.metrics;
    for (const d of c.detectors) classified.inc({ detector: d, tag: 'pii' });
    for (const name of c.custom) classified.inc({ detector: name, tag: this.#detectorTags.get(name) ?? '' });
    if (c.unscanned.length > 0) classified.inc({ detector: UNSCANNED_TAG, tag: UNSCANNED_TAG });
    return c.tags;
  }
}
