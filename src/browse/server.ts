/**
 * `optchat browse`: the memory browser as a local web server. Routing is hono's, serving @hono/node-server's (no
 * hand-written router); pages are hono html`` templates (src/browse/pages). Every request needs the run's random
 * token: in the printed URL once (it is then moved into a cookie and dropped from the address), in the cookie after.
 * The server listens on a loopback address only and never logs requests, so the token appears nowhere but the one
 * line `optchat browse` prints.
 */
import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import type { AddressInfo } from "node:net";
import { serve } from "@hono/node-server";
import { type Context, Hono } from "hono";
import { getCookie, setCookie } from "hono/cookie";
import { html } from "hono/html";
import { z } from "zod";
import { isOptchatError, OptchatError } from "../core/errors.js";
import type { BrowseModel, TreeOwner } from "../memory/browse.js";
import { CONTENT_SECURITY_POLICY, crumbsOf, documentOf } from "./layout.js";
import { serverLinks as links } from "./links.js";
import { costPage, healthPage, searchAllPage } from "./pages/overview.js";
import { homePage, publicationsPage, scopePage, searchPage, sharedPage } from "./pages/scopes.js";
import { injectionsPage, messagePage, recordsPage, sessionPage } from "./pages/session.js";
import { levelPage, zoomPage } from "./pages/tree.js";

const count = z.coerce.number().int().min(0).max(Number.MAX_SAFE_INTEGER);
const paging = z.object({ from: count.default(0) });
const windowQuery = z.object({ window: z.coerce.number().int().min(1000).max(10_000_000).optional() });
const levelParam = z.coerce.number().int().min(0).max(40);

/** 127.0.0.0/8 or ::1: the browser serves every stored message over plain HTTP, so never beyond this machine. */
export function isLoopback(host: string): boolean {
  return /^127(\.(25[0-5]|2[0-4]\d|1?\d?\d)){3}$/.test(host) || host === "::1";
}

function sameToken(given: string, token: string): boolean {
  const a = Buffer.from(given);
  const b = Buffer.from(token);
  return a.length === b.length && timingSafeEqual(a, b);
}

function parse<S extends z.ZodTypeAny>(schema: S, value: unknown, what: string): z.output<S> {
  const parsed = schema.safeParse(value);
  if (!parsed.success)
    throw new OptchatError("INPUT_INVALID", `${what}: ${parsed.error.issues.map((i) => i.message).join("; ")}`);
  return parsed.data;
}

const STATUS_OF_CODE: Record<string, 400 | 404 | 410> = {
  INPUT_INVALID: 400,
  REF_NOT_FOUND: 404,
  SESSION_NOT_FOUND: 404,
  SESSION_DELETED: 410,
  SCOPE_DENIED: 404,
};

/** The browser's routes over a page model; `token` guards every one of them. */
export function createBrowseApp(model: BrowseModel, token: string): Hono {
  const app = new Hono();
  // Per run: a second `optchat browse` on another port of the same host must not overwrite this one's cookie.
  const cookie = `optchat_browse_${createHash("sha256").update(token).digest("hex").slice(0, 12)}`;

  app.use("*", async (c, next) => {
    c.header("Content-Security-Policy", CONTENT_SECURITY_POLICY);
    c.header("Referrer-Policy", "no-referrer");
    c.header("X-Content-Type-Options", "nosniff");
    c.header("Cache-Control", "no-store");
    const given = c.req.query("token");
    if (given !== undefined) {
      if (!sameToken(given, token)) return forbidden(c);
      setCookie(c, cookie, token, { httpOnly: true, sameSite: "Strict", path: "/" });
      // Out of the address bar and the history once it is in the cookie.
      const url = new URL(c.req.url);
      url.searchParams.delete("token");
      return c.redirect(`${url.pathname}${url.search}`, 303);
    }
    const held = getCookie(c, cookie);
    if (held === undefined || !sameToken(held, token)) return forbidden(c);
    await next();
  });

  const page = (c: Context, body: Promise<string>) => body.then((text) => c.html(text));
  const session = (c: Context): TreeOwner => ({ kind: "session", sessionId: c.req.param("session") as string });
  const shared = (c: Context): TreeOwner => ({ kind: "shared", scopeId: c.req.param("scope") as string });

  app.get("/", async (c) => page(c, homePage(links, await model.scopes())));
  app.get("/health", async (c) => page(c, healthPage(links, await model.health())));
  app.get("/cost", async (c) => page(c, costPage(links, await model.cost())));
  app.get("/search", async (c) => {
    const query = (c.req.query("q") ?? "").trim();
    if (query === "") return page(c, searchAllPage(links, { query, error: "Type a word to search for." }));
    try {
      return page(c, searchAllPage(links, await model.searchAll(query)));
    } catch (error) {
      if (isOptchatError(error) && error.code === "INPUT_INVALID")
        return page(c, searchAllPage(links, { query, error: error.message }));
      throw error;
    }
  });
  app.get("/scope/:scope", async (c) => {
    const { from } = parse(paging, c.req.query(), "from");
    return page(c, scopePage(links, await model.scope(c.req.param("scope"), from)));
  });
  app.get("/scope/:scope/shared", async (c) => page(c, sharedPage(links, await model.shared(c.req.param("scope")))));
  app.get("/scope/:scope/publications", async (c) => {
    const { from } = parse(paging, c.req.query(), "from");
    return page(c, publicationsPage(links, await model.publications(c.req.param("scope"), from)));
  });
  app.get("/scope/:scope/search", async (c) => {
    const scopeId = c.req.param("scope");
    const query = (c.req.query("q") ?? "").trim();
    const cursor = c.req.query("cursor");
    if (query === "") return page(c, searchPage(links, { scopeId, query, error: "Type a word to search for." }));
    try {
      return page(c, searchPage(links, await model.search(scopeId, query, cursor)));
    } catch (error) {
      if (isOptchatError(error) && error.code === "INPUT_INVALID")
        return page(c, searchPage(links, { scopeId, query, error: error.message }));
      throw error;
    }
  });
  for (const [prefix, owner] of [
    ["/scope/:scope", shared],
    ["/session/:session", session],
  ] as const) {
    app.get(`${prefix}/level/:level`, async (c) => {
      const level = parse(levelParam, c.req.param("level"), "level");
      const { from } = parse(paging, c.req.query(), "from");
      return page(c, levelPage(links, await model.level(owner(c), level, from)));
    });
    app.get(`${prefix}/zoom/:ref`, async (c) => {
      const zoomed = await model.zoom(owner(c), c.req.param("ref"));
      if (zoomed.kind === "message") return c.redirect(links.message(zoomed.sessionId, zoomed.seq), 303);
      return page(c, zoomPage(links, zoomed));
    });
  }
  app.get("/session/:session", async (c) => {
    const { window } = parse(windowQuery, c.req.query(), "window");
    return page(c, sessionPage(links, await model.session(c.req.param("session"), window)));
  });
  app.get("/session/:session/messages", async (c) => {
    const { from } = parse(paging, c.req.query(), "from");
    return page(c, recordsPage(links, await model.records(c.req.param("session"), from)));
  });
  app.get("/session/:session/message/:seq", async (c) => {
    const seq = parse(count, c.req.param("seq"), "seq");
    return page(c, messagePage(links, await model.message(c.req.param("session"), seq, c.req.query("cursor"))));
  });
  app.get("/session/:session/injections", async (c) => {
    const { session: found, injections } = await model.injections(c.req.param("session"));
    return page(c, injectionsPage(links, found, injections));
  });

  app.notFound(async (c) => c.html(await problemPage("Not found", "No such page."), 404));
  app.onError(async (error, c) => {
    const status = isOptchatError(error) ? (STATUS_OF_CODE[error.code] ?? 500) : 500;
    const message = isOptchatError(error) ? `${error.code}: ${error.message}` : `INTERNAL: ${error.message}`;
    return c.html(await problemPage(status === 500 ? "Failed" : "Not here", message), status);
  });
  return app;
}

function forbidden(c: Context): Response {
  // Nothing about the memory, not even whether the page exists.
  return c.text("optchat browse: open the address with the token that `optchat browse` printed.\n", 403);
}

function problemPage(title: string, message: string): Promise<string> {
  return documentOf(title, crumbsOf(links), html`<p class="note">${message}</p>`);
}

export interface BrowseServer {
  /** The address to open, token included. */
  readonly url: string;
  readonly host: string;
  readonly port: number;
  close(): Promise<void>;
}

/** Listens on `host` (a loopback address) and `port` (0: any free one) with a new random token. */
export async function startBrowseServer(
  model: BrowseModel,
  options: { host: string; port: number },
): Promise<BrowseServer> {
  if (!isLoopback(options.host)) {
    throw new OptchatError(
      "INPUT_INVALID",
      `--host ${options.host}: optchat browse listens only on a loopback address (127.0.0.1 or ::1), since every stored message would be served over plain HTTP`,
    );
  }
  const token = randomBytes(24).toString("base64url");
  const app = createBrowseApp(model, token);
  const server = serve({ fetch: app.fetch, hostname: options.host, port: options.port });
  const address = await new Promise<AddressInfo>((resolve, reject) => {
    server.once("listening", () => resolve(server.address() as AddressInfo));
    server.once("error", (error: NodeJS.ErrnoException) =>
      reject(
        new OptchatError(
          "INPUT_INVALID",
          `cannot listen on ${options.host}:${options.port}: ${error.code ?? error.message}${error.code === "EADDRINUSE" ? " (choose another --port, or 0 for any free one)" : ""}`,
        ),
      ),
    );
  });
  const hostInUrl = address.family === "IPv6" ? `[${address.address}]` : address.address;
  return {
    url: `http://${hostInUrl}:${address.port}/?token=${token}`,
    host: address.address,
    port: address.port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        (server as { closeAllConnections?: () => void }).closeAllConnections?.();
      }),
  };
}
