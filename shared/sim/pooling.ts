// The simulator's non-generating routes, shaped like vLLM's: /tokenize, rerank, score, audio
// transcription/translation (multipart), and moderations. Pure: each turns a parsed body into
// the answer object and the prompt tokens the engine should be charged, so they load the pod.
import { estimateTokens, messagesText, tokenIds } from './text.ts';

export type PoolingRoute = 'tokenize' | 'rerank' | 'score' | 'transcription' | 'moderation';

/** Paths vLLM answers for each route (it serves several aliases). */
export const POOLING_PATHS: Record<string, PoolingRoute> = {
  '/tokenize': 'tokenize',
  '/rerank': 'rerank',
  '/v1/rerank': 'rerank',
  '/v2/rerank': 'rerank',
  '/score': 'score',
  '/v1/score': 'score',
  '/v1/audio/transcriptions': 'transcription',
  '/v1/audio/translations': 'transcription',
  '/v1/moderations': 'moderation',
};

/** What a pooling request asks of the engine and answers once served. */
export interface PoolingWork {
  promptTokens: number;
  /** Skips the engine: answered at once (tokenize does no forward pass). */
  immediate: boolean;
  answer(ids: { id: string; created: number }): unknown;
}

export type PoolingResult =
  { ok: true; work: PoolingWork } | { ok: false; status: number; message: string; param: string | null };

const bad = (message: string, param: string | null = null): PoolingResult => ({
  ok: false,
  status: 400,
  message,
  param,
});

/** Word overlap in [0, 1]: enough for a reranker whose order a test can predict. */
function relevance(query: string, doc: string): number {
  const q = new Set(query.toLowerCase().split(/\W+/).filter(Boolean));
  const d = doc.toLowerCase().split(/\W+/).filter(Boolean);
  if (q.size === 0 || d.length === 0) return 0;
  const hits = d.filter((w) => q.has(w)).length;
  return Math.round((hits / d.length) * 1e4) / 1e4;
}

const strings = (v: unknown): string[] | undefined =>
  typeof v === 'string' ? [v] : Array.isArray(v) && v.every((x) => typeof x === 'string') ? (v as string[]) : undefined;

export function poolingJson(
  route: Exclude<PoolingRoute, 'transcription'>,
  body: Record<string, unknown>,
  model: string,
  maxModelLen: number,
): PoolingResult {
  switch (route) {
    case 'tokenize': {
      const text = Array.isArray(body.messages)
        ? messagesText(body.messages)
        : typeof body.prompt === 'string'
          ? body.prompt
          : undefined;
      if (text === undefined) return bad('`prompt` (a string) or `messages` is required.', 'prompt');
      const tokens = tokenIds(text);
      return {
        ok: true,
        work: {
          promptTokens: tokens.length,
          immediate: true,
          answer: () => ({ count: tokens.length, max_model_len: maxModelLen, tokens, token_strs: null }),
        },
      };
    }
    case 'rerank': {
      const documents = strings(body.documents);
      if (typeof body.query !== 'string' || !documents)
        return bad('`query` (a string) and `documents` (strings) are required.', 'documents');
      const topN = typeof body.top_n === 'number' && body.top_n > 0 ? body.top_n : documents.length;
      const promptTokens = documents.reduce((sum, d) => sum + estimateTokens(`${body.query as string}\n${d}`), 0);
      const results = documents
        .map((text, index) => ({ index, document: { text }, relevance_score: relevance(body.query as string, text) }))
        .sort((a, b) => b.relevance_score - a.relevance_score || a.index - b.index)
        .slice(0, topN);
      return {
        ok: true,
        work: {
          promptTokens,
          immediate: false,
          answer: ({ id }) => ({ id, model, usage: { total_tokens: promptTokens }, results }),
        },
      };
    }
    case 'score': {
      const first = strings(body.text_1);
      const second = strings(body.text_2);
      if (!first || first.length !== 1 || !second)
        return bad('`text_1` (a string) and `text_2` (a string or strings) are required.', 'text_1');
      const promptTokens = second.reduce((sum, t) => sum + estimateTokens(`${first[0]}\n${t}`), 0);
      const data = second.map((t, index) => ({ index, object: 'score', score: relevance(first[0], t) }));
      return {
        ok: true,
        work: {
          promptTokens,
          immediate: false,
          answer: ({ id, created }) => ({
            id,
            object: 'list',
            created,
            model,
            data,
            usage: { prompt_tokens: promptTokens, total_tokens: promptTokens, completion_tokens: 0 },
          }),
        },
      };
    }
    case 'moderation': {
      const input = strings(body.input);
      if (!input) return bad('`input` must be a string or strings.', 'input');
      const promptTokens = input.reduce((sum, t) => sum + estimateTokens(t), 0);
      const results = input.map(() => ({
        flagged: false,
        categories: { harassment: false, violence: false },
        category_scores: { harassment: 0.001, violence: 0.001 },
      }));
      return { ok: true, work: { promptTokens, immediate: false, answer: ({ id }) => ({ id, model, results }) } };
    }
  }
}

/** Transcription/translation from a parsed multipart form: the `file` part's size is the "audio". */
export function poolingForm(form: FormData): PoolingResult & { model?: string } {
  const file = form.get('file');
  const model = form.get('model');
  if (!(file instanceof Blob)) return bad('`file` (an audio file part) is required.', 'file');
  if (typeof model !== 'string' || model === '') return bad('The `model` field is required.', 'model');
  // About 25 tokens per second of 16 kHz 16-bit audio: ~1 token per 1.3 KB.
  const promptTokens = Math.max(1, Math.ceil(file.size / 1280));
  const name = file instanceof File ? file.name : 'audio';
  return {
    ok: true,
    model,
    work: { promptTokens, immediate: false, answer: () => ({ text: `transcript of ${name} (${file.size} bytes)` }) },
  };
}
