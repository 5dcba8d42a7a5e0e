// The JSON shapes of rebound-core's values, as they cross between JavaScript and the
// WebAssembly: events, commands (actions), messages, configuration, failures, tallies.
// PLACEHOLDERS: each name below is filled in with its real shape by the types change.

export type ContentBlock = any;
export type Message = any;
export type AssistantResponse = any;
export type ProviderFailure = any;
export type FailureKind = string;
export type ProviderKind = "anthropic" | "openai" | "openai_responses" | "gemini" | "bedrock";
export type ToolCall = any;
export type ToolOutcome = any;
export type MachineConfig = any;
export type RunTally = any;
export type RunError = any;
export type FinishReason = any;
export type Outcome = any;
export type Event = any;
export type Action = any;
export type Command = any;
export type StreamDeadlines = { idle_ms: number; progress_ms: number };
export type ProviderRetryInfo = any;
export type FallbackInfo = any;
export type PermitAsk = any;
export type PermitDecision = any;
export type BudgetNote = any;
export type BudgetConfig = any;
export type CompactionReport = any;
export type Usage = any;
