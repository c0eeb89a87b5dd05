/**
 * OpenCode 1.18.33 retries an unknown error thrown during a request (6 attempts over ~77 s) when its message matches
 * these patterns or contains "exhausted" / "unavailable" / "too_many_requests" (copied from the binary's
 * `SessionRetry.retryable`; found when "waited 1500 ms" in our MEMORY_NOT_READY text made it retry).
 */
const RETRY_TRIGGERS: readonly RegExp[] = [
  /429|500|502|503|504|524/i,
  /rate increased too quickly|rate limit|rate-limit|rate_limit|too many requests/i,
  /overloaded|service unavailable|service_unavailable|service-unavailable|internal error|internal_error|internal server error|server error|server_error|server-error|provider returned error|provider_returned_error|provider-returned-error/i,
  /terminated|fetch failed|failed to fetch|network[-_\s]error|upstream connect|connection error|connection refused|connection lost|socket connection was closed|socket hang up|reset before headers|getaddrinfo|enotfound|eai_again|econnrefused|econnreset|etimedout/i,
  /^timeout$|\b(?:request|response|connection|network|stream|read) (?:timeout|timed out|time out)\b/i,
  /try your request again|retry your request|resource exhausted|resource_exhausted/i,
  /\btry again (?:later|in\b)|\b(?:currently|temporarily) at capacity\b/i,
  /exhausted|unavailable|too_many_requests/i,
];

/** U+2060 WORD JOINER: invisible, and it splits a trigger so no pattern matches. */
const JOINER = "\u2060";

/**
 * The text with every retry trigger broken by an invisible word joiner after its first character, so that the error
 * stops the request once instead of being retried for a minute. It reads the same on screen.
 */
export function withoutRetryTriggers(text: string): string {
  let out = text;
  for (let pass = 0; pass < 100; pass++) {
    let changed = false;
    for (const pattern of RETRY_TRIGGERS) {
      const match = pattern.exec(out);
      if (!match || match[0].length < 2) continue;
      const at = match.index + 1;
      out = `${out.slice(0, at)}${JOINER}${out.slice(at)}`;
      changed = true;
    }
    if (!changed) return out;
  }
  return out;
}

/** True when OpenCode 1.18.33 would retry an error with this message (for tests). */
export function wouldBeRetried(text: string): boolean {
  return RETRY_TRIGGERS.some((pattern) => pattern.test(text));
}
