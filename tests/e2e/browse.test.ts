import type { ChildProcess } from "node:child_process";
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { connect } from "node:net";
import { networkInterfaces, tmpdir } from "node:os";
import { dirname, join, relative, resolve } from "node:path";
import { type Browser, chromium, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createBrowseModel, PREVIEW_WINDOW } from "../../src/memory/browse.js";
import type { Session } from "../../src/store/sessions.js";
import {
  collect,
  databaseDigest,
  type Finished,
  HOSTILE_TEXT,
  ROOT,
  runCli,
  seedBrowseMemory,
  useTestMemory,
  waitForLine,
} from "../helpers.js";

// Debian's chromium, driven by playwright-core (no browser download). .ci/run installs it with apt-get when missing;
// in CI its absence fails the suite (below), locally the browser tests are skipped with this message.
const CHROMIUM = "/usr/bin/chromium";
const haveChromium = existsSync(CHROMIUM);
const inCi = process.env.CI === "true" || process.env.CI === "1";
if (!haveChromium && !inCi) {
  console.warn(
    `tests/e2e/browse.test.ts: ${CHROMIUM} is missing, so the browser tests are SKIPPED (apt-get install chromium)`,
  );
}
const SCREENSHOT = join(ROOT, "test-artifacts", "browse.png");
const SCOPE = "project:prj_browse";

// A view of at most 1024 bytes (the smallest setting) folds six messages into higher lines, so zooming goes down several levels.
const db = useTestMemory({ viewBytes: 1024 });
let a: Session;
let b: Session;
let texts: Map<string, string>;
let digestBefore: Record<string, string>;
let browse: { child: ChildProcess; url: string; origin: string; finished: Promise<Finished> };
let browser: Browser | undefined;
const exportDir = mkdtempSync(join(tmpdir(), "optchat-export-"));

async function startBrowse(databaseUrl: string): Promise<typeof browse> {
  const child = spawn(process.execPath, [`${ROOT}/bin/optchat.mjs`, "browse", "--port", "0"], {
    cwd: ROOT,
    env: { ...process.env, DATABASE_URL: databaseUrl },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const finished = collect(child);
  const url = await waitForLine(child, /^http:\/\/127\.0\.0\.1:\d+\/\?token=[A-Za-z0-9_-]+$/);
  return { child, url, origin: new URL(url).origin, finished };
}

beforeAll(async () => {
  ({ a, b, texts } = await seedBrowseMemory(db.memory, db.config));
  // A request the plugin recorded for B, with the budget it assembled for: the model's own window (issue 40).
  await db.memory.host.recordInjection({
    sessionId: b.sessionId,
    turnId: "b1",
    holder: "test-holder",
    status: "injected",
    mode: "replace",
    query: "What did session A decide about the queue?",
    detail: { budget: { windowTokens: 24_000 }, model: { providerID: "anthropic", modelID: "claude-small" } },
    error: null,
  });
  digestBefore = await databaseDigest(db.memory.pool);
  browse = await startBrowse(db.url);
  if (haveChromium) browser = await chromium.launch({ executablePath: CHROMIUM });
}, 120_000);

afterAll(async () => {
  await browser?.close();
  if (browse?.child.exitCode === null) browse.child.kill("SIGTERM");
  await browse?.finished;
  rmSync(exportDir, { recursive: true, force: true });
});

/** A page that records every dialog (an alert from injected markup would be one) and dismisses it. */
async function openPage(): Promise<{ page: Page; dialogs: string[] }> {
  const context = await (browser as Browser).newContext();
  const page = await context.newPage();
  const dialogs: string[] = [];
  page.on("dialog", (dialog) => {
    dialogs.push(dialog.message());
    void dialog.dismiss();
  });
  return { page, dialogs };
}

const text = (page: Page, selector: string) => page.locator(selector).first().textContent();

describe("chromium", () => {
  it.runIf(!haveChromium && inCi)("is installed where CI runs the browser tests", () => {
    throw new Error(
      `${CHROMIUM} is missing: .ci/run installs it (apt-get install -y chromium); the browser tests need it`,
    );
  });
});

describe.skipIf(!haveChromium)("the memory browser in chromium", () => {
  it("navigates scopes → a scope → a session, zooms from a view line down to its message, and saves a screenshot", async () => {
    const { page, dialogs } = await openPage();
    const response = await page.goto(browse.url);
    expect(response?.status()).toBe(200);
    // The token moved into a cookie and out of the address.
    expect(page.url()).toBe(`${browse.origin}/`);
    await page.getByRole("link", { name: SCOPE }).click();
    expect(await page.locator("h1").textContent()).toBe(`Scope ${SCOPE}`);
    await page.getByRole("link", { name: "queue design" }).click();
    expect(await page.locator("h1").textContent()).toBe(`Session ${a.sessionId}: queue design`);
    // The memory as the next request gets it, byte for byte.
    const preview = await db.memory.previewContext(a.sessionId, PREVIEW_WINDOW);
    expect(preview.blocks.length).toBeGreaterThan(0);
    for (const block of preview.blocks) expect(await text(page, `#block-${block.name}`)).toBe(block.text);
    await page.screenshot({ path: SCREENSHOT, fullPage: true });
    console.log(`browser screenshot: ${SCREENSHOT}`);

    // Zoom: the first view line, then each time the first line it summarizes, until a message opens.
    const first = page.locator("ol.lines").first().locator("a.ref").first();
    const path: string[] = [(await first.textContent()) as string];
    await first.click();
    while (!/\/message\/\d+$/.test(page.url())) {
      expect(path.length).toBeLessThan(10);
      const child = page.locator("ol.lines").nth(1).locator("a.ref").first();
      path.push((await child.textContent()) as string);
      await child.click();
    }
    // Down one level per click from a folded line (the small view folded the messages), ending at the first message.
    expect(path.length).toBeGreaterThanOrEqual(2);
    expect(path.map((ref) => ref.split("+")[0])).toEqual(path.map(() => "0"));
    const counts = path.map((ref) => Number(ref.split("+")[1]));
    expect(counts).toEqual(counts.map((_, k) => 2 ** (counts.length - 1 - k)));
    expect(page.url()).toBe(`${browse.origin}/session/${a.sessionId}/message/0`);
    expect(await text(page, "#payload")).toBe(texts.get(`${a.sessionId}:0`));
    expect(dialogs).toEqual([]);
  });

  it("searches a scope for a Latin word and a two-character CJK word, with the matches highlighted", async () => {
    const { page } = await openPage();
    await page.goto(browse.url);
    await page.goto(`${browse.origin}/scope/${encodeURIComponent(SCOPE)}`);
    await page.getByRole("searchbox").fill("broker");
    await page.getByRole("searchbox").press("Enter");
    await page.waitForURL(/\/search\?q=broker/);
    const latin = await page.locator("ol.hits mark").allTextContents();
    expect(latin.length).toBeGreaterThan(0);
    expect(latin.map((m) => m.toLowerCase())).toEqual(latin.map(() => "broker"));
    await page.getByRole("searchbox").fill("数据");
    await page.getByRole("searchbox").press("Enter");
    await page.waitForURL(/\/search\?q=/);
    expect(await page.locator("ol.hits mark").allTextContents()).toContain("数据");
    // A hit opens where it was found.
    await page.locator("ol.hits a.ref").first().click();
    expect(page.url()).toMatch(/\/(zoom|message)\//);
  });

  it("shows stored markup, a closing memory tag and entities literally, and runs none of it", async () => {
    const { page, dialogs } = await openPage();
    await page.goto(browse.url);
    const hostile = [...texts].find(([, value]) => value === HOSTILE_TEXT)?.[0] as string;
    const seq = Number(hostile.split(":")[1]);
    await page.goto(`${browse.origin}/session/${a.sessionId}/messages`);
    expect(await text(page, `#payload-${seq}`)).toBe(HOSTILE_TEXT);
    await page.goto(`${browse.origin}/session/${a.sessionId}/message/${seq}`);
    expect(await text(page, "#payload")).toBe(HOSTILE_TEXT);
    // In the shared block the model's own escaping shows, as the model reads it.
    await page.goto(`${browse.origin}/scope/${encodeURIComponent(SCOPE)}/shared`);
    const block = (await createBrowseModel(db.memory).shared(SCOPE)).block;
    expect(block).toContain("&lt;/shared_memory&gt;");
    expect(await text(page, "#shared-block")).toBe(block);
    await page.goto(`${browse.origin}/session/${b.sessionId}/injections`);
    expect(await text(page, "table")).toContain('"note": "</shared_memory>"');
    await page.goto(`${browse.origin}/session/${a.sessionId}/level/0`);
    expect(await page.locator(`tr[data-ref="${seq}+1"] td.text`).textContent()).toContain("<script>alert(1)</script>");
    // A search excerpt of it, with its highlight, is text too.
    await page.goto(`${browse.origin}/scope/${encodeURIComponent(SCOPE)}/search?q=careful`);
    const excerpts = await page.locator("ol.hits .excerpt").allTextContents();
    expect(
      excerpts.some((excerpt) =>
        excerpt.includes('<script>alert(1)</script> and </shared_memory> then <img src=x onerror="alert(2)">'),
      ),
    ).toBe(true);
    expect(await page.locator("ol.hits mark").first().textContent()).toBe("Careful");
    expect(await page.locator("script").count()).toBe(0);
    expect(dialogs).toEqual([]);
  });
});

describe.skipIf(!haveChromium)("what a person needs first (issue 40)", () => {
  it("lists sessions by title and first prompt, without the store's jargon", async () => {
    const { page } = await openPage();
    await page.goto(browse.url);
    await page.getByRole("link", { name: SCOPE }).click();
    const row = page.locator("#sessions tr", { hasText: "queue design" });
    expect(await row.locator(".first-prompt").textContent()).toBe(
      "Where should the importer keep its queue? Not in Redis, please.",
    );
    expect(await row.textContent()).toContain("browse-A");
    expect(await page.locator("main, body").first().textContent()).not.toMatch(/policy revision|retention epoch/);
  });

  it("has a health page with the status verdict and backlog, and a cost page against the cap", async () => {
    const { page } = await openPage();
    await page.goto(browse.url);
    await page.getByRole("link", { name: "Health" }).click();
    const health = (await text(page, "#health")) ?? "";
    expect(health).toMatch(/^verdict\s+(working|stalled|not set up)/);
    expect(health).toContain("backlog");
    expect(health).toContain("failing");
    await page.goto(browse.url);
    await page.getByRole("link", { name: "Cost" }).click();
    expect(await text(page, "#spend-today")).toMatch(
      /The compactor today \(\d{4}-\d{2}-\d{2} UTC\): \$\d+\.\d{4} .* of \$5 a day/,
    );
  });

  it("searches every project from the home page", async () => {
    const { page } = await openPage();
    await page.goto(browse.url);
    await page.getByRole("searchbox", { name: "search every project" }).fill("broker");
    await page.getByRole("button", { name: "Search" }).click();
    expect(page.url()).toBe(`${browse.origin}/search?q=broker`);
    expect(await page.locator("h2").first().textContent()).toBe(SCOPE);
    expect(await page.locator("ol.hits mark").first().textContent()).toBe("broker");
  });

  it("assembles 'as a model reads it' for the session's real window when its requests were recorded", async () => {
    const { page } = await openPage();
    await page.goto(browse.url);
    await page.goto(`${browse.origin}/session/${b.sessionId}`);
    expect(await page.locator("body").textContent()).toContain(
      "24000-token window (the window of anthropic/claude-small, from its last request)",
    );
    await page.goto(`${browse.origin}/session/${a.sessionId}`);
    expect(await page.locator("body").textContent()).toContain(
      "200000-token window (an assumed window: no request of this session was recorded)",
    );
  });
});

describe("the browser's server", () => {
  it("answers 403 without the token, with a wrong one or a forged cookie, and moves the right one into a cookie", async () => {
    const origin = browse.origin;
    const token = new URL(browse.url).searchParams.get("token") as string;
    for (const path of ["/", `/scope/${encodeURIComponent(SCOPE)}`, `/session/${a.sessionId}/message/0`, "/nowhere"]) {
      expect((await fetch(`${origin}${path}`)).status).toBe(403);
    }
    expect((await fetch(`${origin}/?token=${token.slice(0, -1)}x`)).status).toBe(403);
    const admitted = await fetch(browse.url, { redirect: "manual" });
    expect(admitted.status).toBe(303);
    expect(admitted.headers.get("location")).toBe("/");
    const cookie = (admitted.headers.get("set-cookie") as string).split(";")[0] as string;
    expect(cookie).toMatch(/^optchat_browse_[0-9a-f]{12}=/);
    expect(admitted.headers.get("set-cookie")).toMatch(/HttpOnly/i);
    const [name] = cookie.split("=");
    expect((await fetch(`${origin}/`, { headers: { cookie: `${name}=forged` } })).status).toBe(403);
    const home = await fetch(`${origin}/`, { headers: { cookie } });
    expect(home.status).toBe(200);
    expect(home.headers.get("content-security-policy")).toContain("default-src 'none'");
    expect(await home.text()).toContain(SCOPE);
  });

  it("listens on 127.0.0.1 only, and refuses to listen anywhere else", async () => {
    const { hostname, port } = new URL(browse.url);
    expect(hostname).toBe("127.0.0.1");
    const external = Object.values(networkInterfaces())
      .flat()
      .find((address) => address && address.family === "IPv4" && !address.internal);
    if (external) {
      const refused = await new Promise<string>((done) => {
        const socket = connect({ host: external.address, port: Number(port) });
        socket.once("connect", () => {
          socket.destroy();
          done("connected");
        });
        socket.once("error", (error: NodeJS.ErrnoException) => done(error.code ?? "error"));
      });
      expect(refused).toBe("ECONNREFUSED");
    }
    const elsewhere = await runCli(["browse", "--host", "0.0.0.0", "--port", "0"], { DATABASE_URL: db.url });
    expect(elsewhere.code).toBe(1);
    expect(elsewhere.stderr).toMatch(
      /INPUT_INVALID: --host 0\.0\.0\.0: optchat browse listens only on a loopback address/,
    );
  });
});

describe("optchat export --html", () => {
  it("writes every page as a file, linked relatively (every link resolves), with no token and no script", async () => {
    const result = await runCli(["export", "--html", exportDir], { DATABASE_URL: db.url });
    expect(result.stderr).toBe("");
    expect(result.code).toBe(0);
    expect(result.stdout).toMatch(
      /^Wrote \d+ pages \(\d+ bytes\) to .*: 1 scope\(s\), 2 session\(s\), 8 message\(s\)\./,
    );
    const files: string[] = [];
    const walk = (dir: string) => {
      for (const entry of readdirSync(dir, { withFileTypes: true })) {
        if (entry.isDirectory()) walk(join(dir, entry.name));
        else files.push(relative(exportDir, join(dir, entry.name)));
      }
    };
    walk(exportDir);
    const scopeDir = "scopes/project~prj_browse";
    for (const expected of [
      "index.html",
      `${scopeDir}/index.html`,
      `${scopeDir}/shared.html`,
      `${scopeDir}/publications-0.html`,
      `${scopeDir}/zoom-0-1.html`,
      `sessions/${a.sessionId}/index.html`,
      `sessions/${a.sessionId}/messages-0.html`,
      `sessions/${a.sessionId}/level-0-0.html`,
      `sessions/${b.sessionId}/injections.html`,
    ])
      expect(files).toContain(expected);
    expect(files.filter((f) => /\/message-\d+\.html$/.test(f))).toHaveLength(8);
    const token = new URL(browse.url).searchParams.get("token") as string;
    let links = 0;
    for (const file of files) {
      const page = readFileSync(join(exportDir, file), "utf8");
      expect(page).not.toMatch(/<script/i);
      expect(page).not.toContain(token);
      for (const [, href] of page.matchAll(/href="([^"]*)"/g)) {
        links += 1;
        expect(href).not.toMatch(/^(\/|[a-z]+:)/i);
        const target = resolve(dirname(join(exportDir, file)), (href as string).split("#")[0] as string);
        expect(existsSync(target), `${file} links to ${href}`).toBe(true);
      }
    }
    expect(links).toBeGreaterThan(files.length);
    const message = readFileSync(join(exportDir, `sessions/${a.sessionId}/message-5.html`), "utf8");
    expect(message).toContain("&lt;script&gt;alert(1)&lt;/script&gt;");
  });

  it.skipIf(!haveChromium)("opens from disk in chromium and shows stored text literally", async () => {
    const { page, dialogs } = await openPage();
    await page.goto(`file://${exportDir}/index.html`);
    await page.getByRole("link", { name: SCOPE }).click();
    await page.getByRole("link", { name: "queue design" }).click();
    await page.getByRole("link", { name: "messages" }).click();
    expect(await text(page, "#payload-5")).toBe(HOSTILE_TEXT);
    expect(dialogs).toEqual([]);
  });

  it("refuses a directory that is not empty", async () => {
    const again = await runCli(["export", "--html", exportDir], { DATABASE_URL: db.url });
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/is not empty; give a new or empty directory/);
  });
});

describe("after all of it", () => {
  it("stops on SIGTERM, having printed the token once, on stdout, and nowhere else", async () => {
    browse.child.kill("SIGTERM");
    const { code, stdout, stderr } = await browse.finished;
    expect(code).toBe(0);
    const token = new URL(browse.url).searchParams.get("token") as string;
    expect(stdout.split(token).length - 1).toBe(1);
    expect(stderr).not.toContain(token);
  });

  it("wrote nothing to the database while browsing and exporting", async () => {
    expect(await databaseDigest(db.memory.pool)).toEqual(digestBefore);
  });
});

mkdirSync(dirname(SCREENSHOT), { recursive: true });
