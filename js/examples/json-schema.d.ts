// The JSON Schema types `@ai-sdk/provider`'s declarations import from "json-schema", whose
// npm package ships none (they are @types/json-schema's, not among this package's pinned dev
// dependencies). Enough of them for the examples: a schema is an object of keywords.

declare module "json-schema" {
  /** A JSON Schema (draft 7): an object of keywords (`type`, `properties`, `required`, …). */
  export interface JSONSchema7 {
    [keyword: string]: unknown;
  }
  /** A schema, or `true`/`false` (any value, no value). */
  export type JSONSchema7Definition = JSONSchema7 | boolean;
}
