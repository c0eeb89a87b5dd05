import { describe, expect, it } from "vitest";
import { isOptchatError } from "../../src/core/errors.js";
import { resolveConfig } from "../../src/memory/config.js";

describe("resolveConfig", () => {
  it("uses documented defaults and returns a frozen object", () => {
    const config = resolveConfig({ platform: { platform: "linux", uid: 1000, home: "/home/ada" } });
    expect(config).toEqual({
      // No URL: the embedded server (src/embedded/), over its socket.
      databaseUrl: "postgres://postgres@localhost/optchat?host=%2Ftmp%2Foptchat-1000-fc5eafea",
      embedded: {
        dataDir: "/home/ada/.local/share/optchat",
        clusterDir: "/home/ada/.local/share/optchat/postgres",
        socketDir: "/tmp/optchat-1000-fc5eafea",
        idleSeconds: 300,
      },
      dataDir: "",
      socketDir: "",
      embeddedIdleSeconds: 300,
      legacyDatabaseUrl: "postgres://postgres@127.0.0.1:5432/optchat",
      poolSize: 10,
      statementTimeoutMs: 30_000,
      databaseRetryMs: 10_000,
      viewBytes: 128_000,
      viewLowerBytes: 128_000,
      sharedViewBytes: 32_000,
      sharedViewLowerBytes: 24_000,
      workerConcurrency: 8,
      failureRetrySeconds: 10,
      summarizer: "auto",
      summarizerUrl: "",
      summarizerModel: "",
      summarizerApiKey: "",
      summarizerTimeoutMs: 120_000,
      compactorMerges: "needed",
      compactorToolResults: "excerpt",
      summarizerWindowTokens: 0,
      anthropicApiKey: "",
      openaiApiKey: "",
      budgetDailyUsd: 5,
      budgetDailyTokens: 0,
      budgetScopeDailyUsd: 0,
      budgetScopeDailyTokens: 0,
      prices: "",
      settleTimeoutMs: 30_000,
      admissionWaitMs: 10_000,
      sessionVisibility: "shared",
      jobRetentionSeconds: 3600,
      revisionRetentionSeconds: 86_400,
      retentionSweepSeconds: 300,
    });
    expect(Object.isFrozen(config)).toBe(true);
  });

  it("places the embedded server by platform and user, one socket directory per data directory", () => {
    const linux = { platform: "linux" as const, uid: 1000, home: "/home/ada" };
    const xdg = resolveConfig({
      env: { XDG_DATA_HOME: "/home/ada/data", XDG_RUNTIME_DIR: "/run/user/1000" },
      platform: linux,
    }).embedded;
    expect(xdg?.dataDir).toBe("/home/ada/data/optchat");
    expect(xdg?.socketDir).toMatch(/^\/run\/user\/1000\/optchat-[0-9a-f]{8}$/);
    const mac = resolveConfig({
      env: { TMPDIR: "/var/folders/xy/very/long/T/" },
      platform: { ...linux, platform: "darwin" },
    });
    expect(mac.embedded?.dataDir).toBe("/home/ada/Library/Application Support/optchat");
    expect(mac.embedded?.socketDir).toMatch(/^\/tmp\/optchat-1000-[0-9a-f]{8}$/);
    // As root the server runs as user postgres, which cannot enter /root.
    expect(resolveConfig({ platform: { ...linux, uid: 0, home: "/root" } }).embedded?.dataDir).toBe("/var/lib/optchat");
    const a = resolveConfig({ env: { OPTCHAT_DATA_DIR: "/srv/a" }, platform: linux }).embedded;
    const b = resolveConfig({ env: { OPTCHAT_DATA_DIR: "/srv/b" }, platform: linux }).embedded;
    expect(a?.clusterDir).toBe("/srv/a/postgres");
    expect(a?.socketDir).not.toBe(b?.socketDir);
    // A configured URL: no embedded server.
    expect(resolveConfig({ env: { DATABASE_URL: "postgres://u@db/mem" } }).embedded).toBeNull();
  });

  it("refuses a socket path too long for a Unix socket and a relative data directory, naming the setting", () => {
    const long = `/tmp/${"x".repeat(95)}`;
    expect(() => resolveConfig({ env: { OPTCHAT_SOCKET_DIR: long } })).toThrow(
      /socket \/tmp\/x+\/\.s\.PGSQL\.5432 is 114 bytes, over the 103 a Unix socket path allows; set OPTCHAT_SOCKET_DIR to a shorter directory/,
    );
    expect(() => resolveConfig({ env: { OPTCHAT_DATA_DIR: "data" } })).toThrow(
      /OPTCHAT_DATA_DIR \(environment variable OPTCHAT_DATA_DIR\): not an absolute path/,
    );
  });

  it("reads the environment, and explicit options win over it", () => {
    const env = { DATABASE_URL: "postgres://u@db:5433/mem", OPTCHAT_POOL_SIZE: "4" };
    expect(resolveConfig({ env })).toMatchObject({ databaseUrl: "postgres://u@db:5433/mem", poolSize: 4 });
    expect(resolveConfig({ env, overrides: { poolSize: 7 } }).poolSize).toBe(7);
  });

  it.each([
    [{ OPTCHAT_POOL_SIZE: "0" }, "OPTCHAT_POOL_SIZE", /below 1; accepted: an integer from 1 to 100/],
    [{ OPTCHAT_POOL_SIZE: "2.5" }, "OPTCHAT_POOL_SIZE", /not an integer/],
    [{ OPTCHAT_STATEMENT_TIMEOUT_MS: "-1" }, "OPTCHAT_STATEMENT_TIMEOUT_MS", /below 0/],
    [{ DATABASE_URL: "postgres://localhost" }, "DATABASE_URL", /names no database/],
    [{ DATABASE_URL: "not a url" }, "DATABASE_URL", /not a URL/],
    [
      { OPTCHAT_VIEW_BYTES: "2000", OPTCHAT_VIEW_LOWER_BYTES: "3000" },
      "OPTCHAT_VIEW_LOWER_BYTES",
      /above OPTCHAT_VIEW_BYTES/,
    ],
    [
      { OPTCHAT_SHARED_VIEW_BYTES: "4000", OPTCHAT_SHARED_VIEW_LOWER_BYTES: "5000" },
      "OPTCHAT_SHARED_VIEW_LOWER_BYTES",
      /above OPTCHAT_SHARED_VIEW_BYTES/,
    ],
    [{ OPTCHAT_SHARED_VIEW_BYTES: "100" }, "OPTCHAT_SHARED_VIEW_BYTES", /below 1024/],
    [{ OPTCHAT_SUMMARIZER: "gemini" }, "OPTCHAT_SUMMARIZER", /not a known summarizer; accepted: 'auto'/],
    [
      { OPTCHAT_SUMMARIZER_URL: "http://127.0.0.1:8080" },
      "OPTCHAT_SUMMARIZER_URL",
      /not an http\(s\) URL ending in \/v1/,
    ],
    [{ OPTCHAT_SUMMARIZER_URL: "ftp://host/v1" }, "OPTCHAT_SUMMARIZER_URL", /not an http\(s\) URL ending in \/v1/],
    [{ OPTCHAT_BUDGET_DAILY_USD: "-1" }, "OPTCHAT_BUDGET_DAILY_USD", /below 0/],
    [{ OPTCHAT_PRICES: '{"haiku": {"input": 1, "output": 5}}' }, "OPTCHAT_PRICES", /'haiku' is not provider:model/],
  ])("rejects %j naming %s", (env, variable, message) => {
    try {
      resolveConfig({ env });
      expect.unreachable();
    } catch (error) {
      expect(isOptchatError(error, "CONFIG_INVALID")).toBe(true);
      expect((error as Error).message).toContain(variable);
      expect((error as Error).message).toMatch(message);
      expect((error as { details: { settings: string[] } }).details.settings).toEqual([variable]);
    }
  });

  it("accepts openai-compatible with a /v1 URL and a model, and names what is missing", () => {
    const config = resolveConfig({
      env: {
        OPTCHAT_SUMMARIZER: "openai-compatible",
        OPTCHAT_SUMMARIZER_URL: "https://models.example/v1/",
        OPTCHAT_SUMMARIZER_MODEL: "llama3.1:8b",
      },
    });
    expect(config).toMatchObject({
      summarizer: "openai-compatible",
      summarizerUrl: "https://models.example/v1",
      summarizerModel: "llama3.1:8b",
    });
    try {
      resolveConfig({ env: { OPTCHAT_SUMMARIZER: "openai-compatible" } });
      expect.unreachable();
    } catch (error) {
      expect(isOptchatError(error, "CONFIG_INVALID")).toBe(true);
      expect((error as Error).message).toMatch(/OPTCHAT_SUMMARIZER .*openai-compatible.*OPTCHAT_SUMMARIZER_URL/);
      expect((error as { details: { settings: string[] } }).details.settings).toEqual([
        "OPTCHAT_SUMMARIZER",
        "OPTCHAT_SUMMARIZER_URL",
        "OPTCHAT_SUMMARIZER_MODEL",
      ]);
    }
  });

  it("needs a key for anthropic and openai: the provider's standard variable or OPTCHAT_SUMMARIZER_API_KEY", () => {
    expect(() => resolveConfig({ env: { OPTCHAT_SUMMARIZER: "anthropic" } })).toThrow(/ANTHROPIC_API_KEY/);
    expect(() => resolveConfig({ env: { OPTCHAT_SUMMARIZER: "openai" } })).toThrow(/OPENAI_API_KEY/);
    expect(resolveConfig({ env: { OPTCHAT_SUMMARIZER: "anthropic", ANTHROPIC_API_KEY: "k" } }).anthropicApiKey).toBe(
      "k",
    );
    expect(resolveConfig({ env: { OPTCHAT_SUMMARIZER: "openai", OPTCHAT_SUMMARIZER_API_KEY: "k" } }).summarizer).toBe(
      "openai",
    );
    expect(() => resolveConfig({ env: { OPTCHAT_SUMMARIZER: "fake:nonsense" } })).toThrow(/unknown fake option/);
  });
});
