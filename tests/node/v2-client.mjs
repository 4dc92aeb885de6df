#!/usr/bin/env node
// A modern (2026-07-28) MCP client built on the official TypeScript SDK v2
// (`@modelcontextprotocol/client` 2.4.0), for resmux's scenario tests
// (tests/scenarios/ts_v2_client.rs). Install with
//   npm ci --prefix tests/node
//
// usage: node tests/node/v2-client.mjs <url> [plan-json]
//
// plan (all optional): {"ts": "<prefix>", "rs": "<prefix>", "timeoutMs": 30000, "keepGoing": false}
//   ts  the namespace prefix the server gives the TS v2 upstream (tests/node/v2-upstream.mjs):
//       names become `${ts}__name`, URIs `${ts}+uri`; "" or absent = talking to it directly.
//   rs  the prefix of an rmcp upstream serving the tool `shout`; absent = no such upstream,
//       its call is skipped.
//   keepGoing  report a failed step and carry on with the next (still exits 1 at the end).
//
// It declares elicitation, sampling and roots, as desktop clients do, with real handlers,
// and keeps no response cache (a store that holds nothing), so every call reaches the wire.
// Steps, one JSON line each on stdout, in order:
//   discover, list (x4: resources/list, tools/list, prompts/list, resources/templates/list),
//   read, missing, call (x2, or x1 without rs), prompt, complete (x2), listening, updated,
//   reread, elicited, done.
// A failed step prints {"event":"error","step":…,"message":…,"code":…,"data":…}.
// Diagnostics go to stderr.
//
// Exit codes: 0 done, 1 a step failed, 2 hard timeout, 64 usage.
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";

const [url, planArg] = process.argv.slice(2);
if (!url) {
  console.error("usage: v2-client.mjs <url> [plan-json]");
  process.exit(64);
}
const plan = planArg ? JSON.parse(planArg) : {};
const timeoutMs = Number(plan.timeoutMs ?? 30000);
const ts = plan.ts || "";
const tsName = (n) => (ts ? `${ts}__${n}` : n);
const tsUri = (u) => (ts ? `${ts}+${u}` : u);

const emit = (event, fields = {}) => console.log(JSON.stringify({ event, ...fields }));

// Whatever happens, the process ends: the Rust test must never wait on a hung client.
const hard = setTimeout(() => {
  emit("timeout", { afterMs: timeoutMs });
  process.exit(2);
}, timeoutMs);

/** A response cache that holds nothing: every cacheable verb goes to the wire. */
class NoCache {
  stamp = 0;
  get() {
    return undefined;
  }
  set() {
    return ++this.stamp;
  }
  delete() {}
  evict() {}
  clear() {}
}

const ELICITED_NAME = "Ada";
const elicitations = [];
const client = new Client(
  { name: "resmux-ts-v2-test", version: "0.0.1" },
  {
    versionNegotiation: { mode: { pin: "2026-07-28" } },
    capabilities: {
      elicitation: { form: {} },
      sampling: {},
      roots: { listChanged: true },
    },
    responseCacheStore: new NoCache(),
  },
);
client.onerror = (e) => console.error("client error:", e?.message ?? e);
client.setRequestHandler("elicitation/create", async (request) => {
  elicitations.push(request.params.message);
  return { action: "accept", content: { name: ELICITED_NAME } };
});
client.setRequestHandler("sampling/createMessage", async () => ({
  model: "test-model",
  role: "assistant",
  content: { type: "text", text: "sampled" },
}));
client.setRequestHandler("roots/list", async () => ({ roots: [{ uri: "file:///tmp/resmux-test", name: "test" }] }));

let resolveUpdated;
const updated = new Promise((r) => (resolveUpdated = r));
client.setNotificationHandler("notifications/resources/updated", (n) => resolveUpdated(n));

const req = { timeout: timeoutMs };
const nocache = { ...req, cacheMode: "bypass" };
const textOf = (result) => result.content?.find((c) => c.type === "text")?.text;

let failed = false;
/** Runs one step; a failure is reported and (unless keepGoing) ends the run. */
async function step(name, body) {
  try {
    await body();
    return true;
  } catch (e) {
    failed = true;
    emit("error", {
      step: name,
      message: e?.message ?? String(e),
      ...(e?.code !== undefined && { code: e.code }),
      ...(e?.data !== undefined && { data: e.data }),
    });
    if (!plan.keepGoing) finish();
    return false;
  }
}

function expect(cond, what) {
  if (!cond) throw new Error(`unexpected: ${what}`);
}

/** Walks every page of a list method by hand, so the page count is visible. */
async function walk(method, key, id) {
  const items = [];
  let cursor;
  let pages = 0;
  do {
    const page = await client.request({ method, params: cursor === undefined ? {} : { cursor } }, req);
    pages += 1;
    items.push(...page[key].map(id));
    cursor = page.nextCursor;
  } while (cursor !== undefined && pages < 1000);
  return { pages, items };
}

async function finish() {
  clearTimeout(hard);
  await client.close().catch(() => {});
  process.exit(failed ? 1 : 0);
}

const connected = await step("connect", async () => {
  await client.connect(new StreamableHTTPClientTransport(new URL(url)), req);
  const discover = client.getDiscoverResult();
  emit("discover", {
    era: client.getProtocolEra(),
    protocolVersion: client.getNegotiatedProtocolVersion(),
    supportedVersions: discover?.supportedVersions,
    serverInfo: client.getServerVersion(),
    capabilities: client.getServerCapabilities(),
  });
});
if (!connected) finish();

const lists = [
  ["resources/list", "resources", (r) => r.uri, (o) => client.listResources(undefined, o)],
  ["tools/list", "tools", (t) => t.name, (o) => client.listTools(undefined, o)],
  ["prompts/list", "prompts", (p) => p.name, (o) => client.listPrompts(undefined, o)],
  ["resources/templates/list", "resourceTemplates", (t) => t.uriTemplate, (o) => client.listResourceTemplates(undefined, o)],
];
for (const [method, key, id, aggregate] of lists) {
  await step(method, async () => {
    const { pages, items } = await walk(method, key, id);
    // The SDK's own walk (no cursor: it follows every nextCursor itself) sees the same.
    const all = (await aggregate(nocache))[key].map(id);
    expect(JSON.stringify(all) === JSON.stringify(items), `${method}: SDK walk ${all} != page walk ${items}`);
    emit("list", { method, pages, count: items.length, items });
  });
}

await step("read", async () => {
  const uri = tsUri("ts://doc/1");
  const read = await client.readResource({ uri }, nocache);
  emit("read", { uri, contentUri: read.contents[0]?.uri, text: read.contents[0]?.text });
});

await step("missing", async () => {
  const uri = tsUri("ts://doc/does-not-exist");
  let err;
  try {
    await client.readResource({ uri }, nocache);
  } catch (e) {
    err = e;
  }
  expect(err !== undefined, `reading ${uri} succeeded`);
  expect(err.code === -32602, `not-found code ${err.code} (${err.message}), expected -32602`);
  emit("missing", { uri, code: err.code, data: err.data, message: err.message });
});

const calls = [[tsName("echo"), { text: "hello" }]];
if (plan.rs) calls.push([`${plan.rs}__shout`, { message: "quiet" }]);
for (const [name, args] of calls) {
  await step(`tools/call ${name}`, async () => {
    const result = await client.callTool({ name, arguments: args }, req);
    expect(!result.isError, `${name} returned isError: ${JSON.stringify(result)}`);
    emit("call", { name, text: textOf(result) });
  });
}

await step("prompts/get", async () => {
  const name = tsName("greet");
  const prompt = await client.getPrompt({ name, arguments: { language: "rust" } }, req);
  emit("prompt", { name, text: prompt.messages[0]?.content?.text });
});

const completions = [
  [{ type: "ref/prompt", name: tsName("greet") }, { name: "language", value: "ru" }],
  [{ type: "ref/resource", uri: tsUri("ts://item/{id}") }, { name: "id", value: "al" }],
];
for (const [ref, argument] of completions) {
  await step(`completion/complete ${ref.type}`, async () => {
    const { completion } = await client.complete({ ref, argument }, req);
    emit("complete", { ref, values: completion.values });
  });
}

await step("subscriptions/listen", async () => {
  const uri = tsUri("ts://status");
  const sub = await client.listen({ resourceSubscriptions: [uri] }, req);
  emit("listening", { uri, honoredFilter: sub.honoredFilter });
  const touched = await client.callTool({ name: tsName("touch"), arguments: {} }, req);
  expect(!touched.isError, `touch returned isError: ${JSON.stringify(touched)}`);
  const closed = sub.closed.then((reason) => {
    throw new Error(`the listen stream closed (${reason}) before the update`);
  });
  const n = await Promise.race([updated, closed]);
  emit("updated", { uri: n.params.uri, params: n.params });
  const read = await client.readResource({ uri }, nocache);
  emit("reread", { uri, text: read.contents[0]?.text, touched: textOf(touched) });
  await sub.close();
});

await step("elicitation", async () => {
  const name = tsName("ask");
  const before = elicitations.length;
  const result = await client.callTool({ name, arguments: {} }, req);
  expect(!result.isError, `${name} returned isError: ${JSON.stringify(result)}`);
  const text = textOf(result);
  expect(text === `Hello, ${ELICITED_NAME}!`, `${name} answered ${JSON.stringify(text)}`);
  emit("elicited", { name, text, asked: elicitations.slice(before) });
});

if (!failed) emit("done");
await finish();
