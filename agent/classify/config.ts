// The custom detectors' part of the agent's config file (agent/config assembles the file;
// custom.ts compiles and checks them).
import { Type } from '@sinclair/typebox';
import { Name } from '../../shared/config-schema.ts';

/** A platform detector: keywords and/or a pattern that add a tag (validated by agent/classify/custom.ts). */
export const DetectorConfig = Type.Object(
  {
    name: Name,
    tag: Name,
    keywords: Type.Optional(Type.Array(Type.String({ minLength: 1, maxLength: 256 }), { maxItems: 1024 })),
    pattern: Type.Optional(Type.String({ minLength: 1, maxLength: 1024 })),
    ignoreCase: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: false },
);
