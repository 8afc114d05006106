export {
  classify,
  classifyRequest,
  PII_TAG,
  UNSCANNED_TAG,
  type Classification,
  type ClassifyOptions,
  type Finding,
  type Unscanned,
  withForwardedHeaders,
} from './classify.ts';
export { compileDetectors, type CustomDetector, type DetectorSpec } from './custom.ts';
export { forEachForm, type Decoding } from './decode.ts';
export { detect, DETECTORS, type Detector } from './detect.ts';
export { OFF_CLUSTER_HEADERS, offClusterHeaders } from './headers.ts';
export { normalise } from './normalise.ts';
export { parseTagHeader, TAG_HEADER, MAX_HEADER_TAGS, MAX_TAG_LENGTH, type HeaderTags } from './tags.ts';
export { DEFAULT_SCAN_LIMITS, walkBody, type ScanLimits } from './walk.ts';
