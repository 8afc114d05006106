// What the simulator says and how it counts: token estimates, generated words, embeddings.

import { hashString, mulberry32, type Rand } from './random.ts';
import { isRecord } from '../json.ts';

/** Tokens in a text, estimated the way the brief and most routers do: about four characters each. */
export function estimateTokens(text: string): number {
  return Math.max(1, Math.ceil(text.length / 4));
}

/** All text of chat messages: string contents and the text parts of multi-part contents. */
export function messagesText(messages: readonly unknown[]): string {
  const parts: string[] = [];
  for (const message of messages) {
    if (!isRecord(message)) continue;
    const content = message.content;
    if (typeof content === 'string') parts.push(content);
    else if (Array.isArray(content)) {
      for (const part of content) {
        if (isRecord(part) && typeof part.text === 'string') parts.push(part.text);
      }
    }
  }
  return parts.join('\n');
}

/**
 * Deterministic stand-in token ids for a text: one per 4 characters (so as many as `estimateTokens`
 * counts), each the hash of its characters. Texts sharing a prefix share the ids of that prefix,
 * which is what makes the simulator's prefix cache hit on resent histories and system prompts.
 */
export function tokenIds(text: string): number[] {
  const ids: number[] = [];
  for (let i = 0; i < Math.max(1, Math.ceil(text.length / 4)); i++)
    ids.push(hashString(text.slice(i * 4, i * 4 + 4)) % 128_000);
  return ids;
}

const WORDS = [
  'the',
  'model',
  'routes',
  'each',
  'request',
  'to',
  'a',
  'pod',
  'with',
  'low',
  'latency',
  'and',
  'keeps',
  'tokens',
  'flowing',
  'while',
  'queues',
  'stay',
  'short',
  'so',
  'every',
  'user',
  'sees',
  'fast',
  'answers',
  'from',
  'GPUs',
  'on',
  'their',
  'own',
  'cluster',
  'when',
  'load',
  'peaks',
];

/** A seeded stream of token texts: words, each after the first led by a space. */
export function tokenTexts(seed: number): (index: number) => string {
  const rand: Rand = mulberry32(seed);
  return (index) => {
    const word = WORDS[Math.floor(rand() * WORDS.length)];
    return index === 0 ? word.charAt(0).toUpperCase() + word.slice(1) : ` ${word}`;
  };
}

/** A unit vector of `dim` floats, the same for the same text. */
export function embeddingFor(text: string, dim: number): number[] {
  const rand = mulberry32(hashString(text));
  const v = Array.from({ length: dim }, () => rand() * 2 - 1);
  const norm = Math.hypot(...v) || 1;
  return v.map((x) => x / norm);
}
