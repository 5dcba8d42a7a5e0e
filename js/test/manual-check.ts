// tsc checks the manual entry's types (nothing runs this file): initRebound takes what an
// edge runtime hands over, and the entry has the main one's exports.

import { AgentMachine, initRebound, initReboundSync, userText } from "rebound-agent/manual";
import type { Action } from "rebound-agent/manual";

declare const compiled: WebAssembly.Module;
declare const bytes: Uint8Array<ArrayBuffer>;

export async function start(): Promise<Action[]> {
  await initRebound(compiled);
  await initRebound(fetch("/rebound_bg.wasm"));
  initReboundSync(bytes);
  const machine = new AgentMachine({ seed: 1 });
  machine.handle(0, userText("hi"));
  return machine.drain();
}
