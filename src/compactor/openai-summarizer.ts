import type { ChatMessage } from "../core/summary.js";
import { type Summarizer, SummarizerError } from "./summarizer.js";

export interface OpenAiCompatibleSummarizerOptions {
  /** The provider's base URL, ending in /v1 (e.g. http://127.0.0.1:8080/v1); /chat/completions is appended. */
  readonly baseUrl: string;
  readonly model: string;
  /** Sent as a bearer token; empty or absent sends no Authorization header (local servers). */
  readonly apiKey?: string;
  readonly windowBytes?: number;
  /** Per call, including reading the answer. */
  readonly timeoutMs?: number;
}

const DEFAULT_WINDOW_BYTES = 64 * 1024;
const DEFAULT_TIMEOUT_MS = 120_000;
const BODY_EXCERPT_CHARS = 300;
const SETTINGS_HINT =
  "Check OPTCHAT_SUMMARIZER_URL (the provider's base URL ending in /v1), OPTCHAT_SUMMARIZER_MODEL and OPTCHAT_SUMMARIZER_API_KEY";

/**
 * A summarizer backed by any OpenAI-compatible chat completions endpoint (a hosted provider, a local server, or the
 * project's scripted model server). Non-streaming and at temperature 0: the compactor needs one whole line per call and
 * wants reruns to agree as far as the provider allows.
 */
export function createOpenAiCompatibleSummarizer(options: OpenAiCompatibleSummarizerOptions): Summarizer {
  const base = options.baseUrl.replace(/\/+$/, "");
  let host: string;
  try {
    host = new URL(base).host;
  } catch {
    throw new SummarizerError(`openai-compatible summarizer: '${options.baseUrl}' is not a URL. ${SETTINGS_HINT}.`);
  }
  const url = `${base}/chat/completions`;
  const identity = `openai-compatible:${options.model}@${host}`;
  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const headers: Record<string, string> = { "content-type": "application/json", accept: "application/json" };
  if (options.apiKey) headers.authorization = `Bearer ${options.apiKey}`;

  return {
    identity,
    windowBytes: options.windowBytes ?? DEFAULT_WINDOW_BYTES,
    async complete(messages: readonly ChatMessage[], signal?: AbortSignal): Promise<string> {
      if (signal?.aborted) throw new SummarizerError(`${identity}: aborted before calling ${url}`);
      const timeout = AbortSignal.timeout(timeoutMs);
      const combined = signal ? AbortSignal.any([signal, timeout]) : timeout;
      const failed = (error: unknown): SummarizerError => {
        if (signal?.aborted)
          return new SummarizerError(`${identity}: the call to ${url} was aborted`, { cause: error });
        if (timeout.aborted) {
          return new SummarizerError(
            `${identity}: no answer from ${url} within ${timeoutMs} ms. Is the provider overloaded or the model too slow? ${SETTINGS_HINT}.`,
            { cause: error },
          );
        }
        return new SummarizerError(`${identity}: cannot reach ${url}: ${networkReason(error)}. ${SETTINGS_HINT}.`, {
          cause: error,
        });
      };

      let status: number;
      let text: string;
      try {
        const response = await fetch(url, {
          method: "POST",
          headers,
          body: JSON.stringify({
            model: options.model,
            messages: messages.map((m) => ({ role: m.role, content: m.content })),
            temperature: 0,
          }),
          signal: combined,
        });
        status = response.status;
        text = await response.text();
      } catch (error) {
        throw failed(error);
      }

      if (status < 200 || status > 299) {
        throw new SummarizerError(
          `${identity}: ${url} answered HTTP ${status}: ${excerpt(text)}. ${hintForStatus(status)}${SETTINGS_HINT}.`,
        );
      }
      let parsed: unknown;
      try {
        parsed = JSON.parse(text);
      } catch {
        throw new SummarizerError(
          `${identity}: ${url} answered HTTP ${status} with a body that is not JSON: ${excerpt(text)}. Is OPTCHAT_SUMMARIZER_URL an OpenAI-compatible /v1 endpoint?`,
        );
      }
      const content = messageContent(parsed);
      if (content === undefined) {
        throw new SummarizerError(
          `${identity}: ${url} answered without choices[0].message.content: ${excerpt(text)}. Is OPTCHAT_SUMMARIZER_URL an OpenAI-compatible /v1 endpoint?`,
        );
      }
      return content;
    },
  };
}

/** choices[0].message.content as text; some servers send content parts instead of a string. */
function messageContent(body: unknown): string | undefined {
  const choice = (body as { choices?: unknown[] } | null)?.choices?.[0] as
    | { message?: { content?: unknown } }
    | undefined;
  const content = choice?.message?.content;
  if (typeof content === "string") return content;
  if (Array.isArray(content)) {
    return content.map((part) => (typeof part?.text === "string" ? (part.text as string) : "")).join("");
  }
  return undefined;
}

function hintForStatus(status: number): string {
  if (status === 401 || status === 403) return "The provider refused the credentials. ";
  if (status === 404) return "The URL or the model name is wrong. ";
  if (status === 429) return "The provider is rate-limiting; the compactor retries later. ";
  if (status >= 500) return "The provider failed; the compactor retries later. ";
  return "";
}

/** fetch hides the socket error (ECONNREFUSED, ENOTFOUND, ...) in `cause`; that is the part worth showing. */
function networkReason(error: unknown): string {
  const cause = (error as { cause?: { code?: string; message?: string } } | null)?.cause;
  const outer = error instanceof Error ? error.message : String(error);
  if (cause?.code) return `${cause.code} (${cause.message ?? outer})`;
  if (cause?.message) return `${outer}: ${cause.message}`;
  return outer;
}

function excerpt(text: string): string {
  const flat = text.replace(/\s+/g, " ").trim();
  if (flat.length === 0) return "(empty body)";
  return flat.length > BODY_EXCERPT_CHARS ? `${flat.slice(0, BODY_EXCERPT_CHARS)} ...` : flat;
}
