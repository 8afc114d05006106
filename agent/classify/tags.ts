// Tags a caller declares in `x-kinference-tags: pii,internal`. They can only add: a header is
// never consulted to drop what a detector found.

export const MAX_HEADER_TAGS = 16;
export const MAX_TAG_LENGTH = 64;
/** Same charset as the policy schema's deny tags (agent/policy/schema-parts.ts TAG_PATTERN). */
const TAG = /^[a-z0-9][a-z0-9._-]*$/;

export interface HeaderTags {
  /** Valid tags, lowercased, unique, in header order, at most MAX_HEADER_TAGS. */
  tags: string[];
  /** Entries dropped: bad charset, too long, or beyond the count limit (for a 400 or a log line). */
  rejected: string[];
}

export function parseTagHeader(value: string | null | undefined): HeaderTags {
  const tags: string[] = [];
  const rejected: string[] = [];
  if (!value) return { tags, rejected };
  for (const raw of value.split(',')) {
    const tag = raw.trim().toLowerCase();
    if (tag === '') continue;
    if (tag.length > MAX_TAG_LENGTH || !TAG.test(tag) || (tags.length >= MAX_HEADER_TAGS && !tags.includes(tag))) {
      rejected.push(tag.length > MAX_TAG_LENGTH ? `${tag.slice(0, MAX_TAG_LENGTH)}…` : tag);
    } else if (!tags.includes(tag)) tags.push(tag);
  }
  return { tags, rejected };
}
