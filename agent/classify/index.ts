export { classify, classifyRequest, PII_TAG, type Classification } from './classify.ts';
export { detect, DETECTORS, type Detector } from './detect.ts';
export { parseTagHeader, TAG_HEADER, MAX_HEADER_TAGS, MAX_TAG_LENGTH, type HeaderTags } from './tags.ts';
export { forEachText, requestTexts } from './texts.ts';
