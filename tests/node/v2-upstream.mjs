#!/usr/bin/env node
// A modern (2026-07-28, dual-era) MCP server built on the official TypeScript SDK v2
// (`@modelcontextprotocol/server` 2.4.0), served over Streamable HTTP on 127.0.0.1, for
// resmux's scenario tests (tests/scenarios/ts_v2_client.rs). Install with
//   npm ci --prefix tests/node
//
// usage: node tests/node/v2-upstream.mjs [port=0]
//
// The first stdout line is {"event":"listening","url":"http://127.0.0.1:PORT/mcp"}.
// Diagnostics go to stderr. It runs until killed.
//
// It serves:
// - resources: ts://doc/0 .. ts://doc/6 and ts://status, listed PAGE_SIZE per page
//   (resources/list is paginated here; McpServer itself never paginates);
// - a resource template ts://item/{id}, with completion for {id};
// - tools: `echo` (plain); `ask` (asks the client for a name through an MRTR
//   `input_required` elicitation with a signed requestState, then greets it); `touch`
//   (changes ts://status and publishes notifications/resources/updated on every
//   subscriptions/listen stream that asked for it);
// - a prompt `greet` whose `language` argument completes.
import { createServer } from "node:http";

import {
  McpServer,
  ResourceTemplate,
  acceptedContent,
  completable,
  createMcpHandler,
  createRequestStateCodec,
  inputRequired,
  inputResponse,
} from "@modelcontextprotocol/server";
import * as z from "zod/v4";

const PAGE_SIZE = 3;
const DOCS = 7;
const LANGUAGES = ["rust", "ruby", "python", "typescript"];
const ITEMS = ["alpha", "alder", "beta"];

// State that outlives one request (the handler builds a fresh McpServer per request).
let statusVersion = 1;
const statusText = () => `status version ${statusVersion}`;

// The `ask` tool's requestState is signed: a proxy that does not echo it byte for byte gets
// -32602 "Invalid or expired requestState" on the retry.
const stateCodec = createRequestStateCodec({ key: crypto.getRandomValues(new Uint8Array(32)), ttlSeconds: 600 });

const nameSchema = z.object({ name: z.string().meta({ title: "Your name" }) });

function build() {
  const server = new McpServer(
    { name: "ts-v2-upstream", version: "1.0.0" },
    {
      // `subscribe` lets handler.notify.resourceUpdated reach listen streams.
      capabilities: { resources: { subscribe: true, listChanged: true } },
      requestState: { verify: stateCodec.verify },
    },
  );

  for (let i = 0; i < DOCS; i++) {
    server.registerResource(`doc ${i}`, `ts://doc/${i}`, { mimeType: "text/plain" }, async (uri) => ({
      contents: [{ uri: uri.href, mimeType: "text/plain", text: `the text of doc ${i}` }],
    }));
  }
  server.registerResource("status", "ts://status", { mimeType: "text/plain" }, async (uri) => ({
    contents: [{ uri: uri.href, mimeType: "text/plain", text: statusText() }],
  }));
  server.registerResource(
    "item",
    new ResourceTemplate("ts://item/{id}", {
      list: undefined,
      complete: { id: (value) => ITEMS.filter((i) => i.startsWith(value)) },
    }),
    { description: "One item by id", mimeType: "text/plain" },
    async (uri, { id }) => ({ contents: [{ uri: uri.href, mimeType: "text/plain", text: `item ${id}` }] }),
  );

  // McpServer answers resources/list with everything at once; page it.
  const all = [
    ...Array.from({ length: DOCS }, (_, i) => ({ uri: `ts://doc/${i}`, name: `doc ${i}`, mimeType: "text/plain" })),
    { uri: "ts://status", name: "status", mimeType: "text/plain" },
  ];
  server.server.setRequestHandler("resources/list", async (request) => {
    const cursor = request.params?.cursor;
    const start = cursor === undefined ? 0 : Number.parseInt(cursor, 10);
    if (!Number.isInteger(start) || start < 0 || start > all.length) {
      throw new Error(`bad cursor ${cursor}`);
    }
    const end = Math.min(start + PAGE_SIZE, all.length);
    return { resources: all.slice(start, end), ...(end < all.length && { nextCursor: String(end) }) };
  });

  server.registerTool(
    "echo",
    { description: "Echoes its text", inputSchema: z.object({ text: z.string() }) },
    async ({ text }) => ({ content: [{ type: "text", text }] }),
  );

  server.registerTool(
    "ask",
    { description: "Asks the user for their name, then greets them", inputSchema: z.object({}) },
    async (_args, ctx) => {
      const view = inputResponse(ctx.mcpReq.inputResponses, "name");
      if (view.kind === "elicit" && view.action !== "accept") {
        return { content: [{ type: "text", text: `no name (${view.action})` }], isError: true };
      }
      const answer = acceptedContent(ctx.mcpReq.inputResponses, "name", nameSchema);
      const state = ctx.mcpReq.requestState();
      if (answer === undefined || state?.asked !== "name") {
        return inputRequired({
          inputRequests: {
            name: inputRequired.elicit({ message: "What is your name?", requestedSchema: nameSchema }),
          },
          requestState: await stateCodec.mint({ asked: "name" }),
        });
      }
      return { content: [{ type: "text", text: `Hello, ${answer.name}!` }] };
    },
  );

  server.registerTool(
    "touch",
    { description: "Changes ts://status and notifies its listeners", inputSchema: z.object({}) },
    async () => {
      statusVersion += 1;
      handler.notify.resourceUpdated("ts://status");
      return { content: [{ type: "text", text: statusText() }] };
    },
  );

  server.registerPrompt(
    "greet",
    {
      description: "A greeting in a programming language",
      argsSchema: z.object({
        language: completable(z.string().describe("Programming language"), (value) =>
          LANGUAGES.filter((l) => l.startsWith(value)),
        ),
      }),
    },
    ({ language }) => ({
      messages: [{ role: "user", content: { type: "text", text: `Say hello in ${language}.` } }],
    }),
  );

  return server;
}

const handler = createMcpHandler(() => build(), {
  onerror: (e) => console.error("handler error:", e?.message ?? e),
  keepAliveMs: 0,
});

// A plain node:http front for the web-standard handler.fetch (no extra adapter package).
const http = createServer(async (req, res) => {
  const abort = new AbortController();
  res.on("close", () => abort.abort());
  try {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const headers = new Headers();
    for (const [k, v] of Object.entries(req.headers)) {
      for (const one of Array.isArray(v) ? v : [v]) headers.append(k, one);
    }
    const hasBody = req.method !== "GET" && req.method !== "HEAD";
    const request = new Request(`http://${req.headers.host}${req.url}`, {
      method: req.method,
      headers,
      body: hasBody ? Buffer.concat(chunks) : undefined,
      signal: abort.signal,
    });
    const response = await handler.fetch(request);
    res.writeHead(response.status, Object.fromEntries(response.headers));
    res.flushHeaders();
    if (response.body) {
      for await (const chunk of response.body) res.write(chunk);
    }
    res.end();
  } catch (e) {
    if (!abort.signal.aborted) console.error("request failed:", e?.message ?? e);
    if (!res.headersSent) res.writeHead(500);
    res.end();
  }
});

const port = Number(process.argv[2] ?? 0);
http.listen(port, "127.0.0.1", () => {
  const { port: bound } = http.address();
  console.log(JSON.stringify({ event: "listening", url: `http://127.0.0.1:${bound}/mcp` }));
});
