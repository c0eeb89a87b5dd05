/**
 * Thrown from `chat.message` (or `chat.params`) to refuse a prompt; the only error the adapter lets reach OpenCode on
 * purpose. Its own module: the plugin's main thread (plugin/transport/remote-hooks.ts) rebuilds it from the thread's answer
 * without importing the adapter.
 */
export class PromptRefused extends Error {
  constructor(message: string) {
    super(message);
    this.name = "PromptRefused";
  }
}
