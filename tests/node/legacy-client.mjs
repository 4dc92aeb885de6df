#!/usr/bin/env node
// A legacy (2025-11-25) MCP client built on the official TypeScript SDK 1.x, for resmux's
// scenario tests (tests/scenarios/legacy_sdk.rs). Install its dependency with
//   npm ci --prefix tests/node
//
// usage: node tests/node/legacy-client.mjs <url> <uri> [timeoutMs=30000]
//
// It connects (initialize + notifications/initialized; the SDK then opens the GET stream),
// lists every page of resources/list, reads <uri>, subscribes to it, waits for one
// notifications/resources/updated, reads <uri> again, reads a URI that does not exist, and
// ends the session (DELETE). Each step prints one JSON line on stdout, e.g.
//   {"event":"connected","protocolVersion":"2025-11-25","sessionId":"…",…}
// Diagnostics go to stderr.
//
// Exit codes: 0 done, 1 error (a line {"event":"error",…} says which), 2 hard timeout,
// 64 usage.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ResourceUpdatedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const [url, uri, timeoutArg] = process.argv.slice(2);
if (!url || !uri) {
  console.error("usage: legacy-client.mjs <url> <uri> [timeoutMs]");
  process.exit(64);
}
const timeoutMs = Number(timeoutArg ?? 30000);

const emit = (event, fields = {}) => console.log(JSON.stringify({ event, ...fields }));

// Whatever happens, the process ends: the Rust test must never wait on a hung client.
const hard = setTimeout(() => {
  emit("timeout", { afterMs: timeoutMs });
  process.exit(2);
}, timeoutMs);

const client = new Client({ name: "resmux-legacy-test", version: "0.0.1" }, { capabilities: {} });
const transport = new StreamableHTTPClientTransport(new URL(url));
client.onerror = (e) => console.error("client error:", e?.message ?? e);

let resolveUpdated;
const updated = new Promise((r) => (resolveUpdated = r));
client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => resolveUpdated(n));

const textOf = (read) => read.contents?.[0]?.text;

try {
  await client.connect(transport);
  emit("connected", {
    protocolVersion: transport.protocolVersion,
    sessionId: transport.sessionId,
    serverInfo: client.getServerVersion(),
    capabilities: client.getServerCapabilities(),
  });

  const uris = [];
  let cursor;
  let pages = 0;
  do {
    const page = await client.listResources(cursor === undefined ? {} : { cursor });
    pages += 1;
    uris.push(...page.resources.map((r) => r.uri));
    cursor = page.nextCursor;
  } while (cursor !== undefined && pages < 1000);
  emit("listed", { pages, count: uris.length, uris });

  const before = textOf(await client.readResource({ uri }));
  emit("read", { uri, text: before });

  await client.subscribeResource({ uri });
  emit("subscribed", { uri });

  const n = await updated;
  emit("updated", { uri: n.params.uri, params: n.params });

  const after = textOf(await client.readResource({ uri }));
  emit("reread", { uri, text: after });

  try {
    await client.readResource({ uri: `${uri}-does-not-exist` });
    emit("missing", { code: null });
  } catch (e) {
    emit("missing", { code: e?.code ?? null, message: e?.message });
  }

  await transport.terminateSession();
  emit("terminated");
  clearTimeout(hard);
  await client.close();
  process.exit(0);
} catch (e) {
  emit("error", { message: String(e?.message ?? e), code: e?.code ?? null });
  console.error(e?.stack ?? e);
  process.exit(1);
}
