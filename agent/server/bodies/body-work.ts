// What the request path does with a body before routing it (parse and check, classify, measure
// for the router), as one pure function, so that the agent's event loop and a body worker
// (body-worker.ts) run the very same code and reach the very same verdict.
import { classifyRequest, type Classification } from '../../classify/classify.ts';
import { compileDetectors, type DetectorSpec } from '../../classify/custom.ts';
import type { ScanLimits } from '../../classify/walk.ts';
import type { RequestKind, RouteRequest } from '../../types.ts';
import { parseInferenceRequest, RequestError } from './request.ts';
import { buildRouteRequest } from './route-request.ts';

/** The routing input a body gives, without the caller (tenant, namespace) and tags. */
export type BodyRoute = Omit<RouteRequest, 'tenant' | 'namespace' | 'tags'>;

export interface BodyJob {
  kind: RequestKind;
  bytes: Uint8Array;
  headerTags: string | null;
  maxDepth: number;
  prefixMaxBlocks: number;
  scanLimits: ScanLimits;
}

/** A body's verdict: its routing input and classification, or the 4xx it earns. */
export type BodyVerdict =
  | { ok: true; model: string; stream: boolean; classification: Classification; route: BodyRoute }
  | { ok: false; status: number; message: string; param: string | null; code: string | null };

/** Parses, checks, classifies and measures one body. Throws only on a fault of our own. */
export function judgeBody(job: BodyJob, detectors: ReturnType<typeof compileDetectors>['detectors']): BodyVerdict {
  let parsed;
  try {
    parsed = parseInferenceRequest(job.kind, job.bytes, job.maxDepth);
  } catch (error) {
    if (!(error instanceof RequestError)) throw error;
    return { ok: false, status: error.status, message: error.message, param: error.param, code: error.code };
  }
  const classification = classifyRequest(job.headerTags, parsed.body, { limits: job.scanLimits, detectors });
  const {
    tenant: _t,
    namespace: _n,
    tags: _g,
    ...route
  } = buildRouteRequest(parsed, { tenant: '', namespace: '' }, classification.tags, job.prefixMaxBlocks);
  return { ok: true, model: parsed.model, stream: parsed.stream, classification, route };
}

/** Detectors compiled once per set of specs (the set changes only on a reload). */
export class DetectorCache {
  #specs: readonly DetectorSpec[] | undefined;
  #compiled: ReturnType<typeof compileDetectors>['detectors'] = [];

  get(specs: readonly DetectorSpec[]): ReturnType<typeof compileDetectors>['detectors'] {
    if (specs !== this.#specs) {
      this.#compiled = compileDetectors(specs).detectors;
      this.#specs = specs;
    }
    return this.#compiled;
  }
}
