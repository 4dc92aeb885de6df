#!/usr/bin/env node
// One readiness probe: a 2026-07-28 server/discover to URL. Exits 0 when the
// answer is a result advertising the tools capability, i.e. the server (or,
// through resmux, the fixture upstream behind it) is ready for the suite.
const url = process.argv[2];
const revision = '2026-07-28';
const body = {
    jsonrpc: '2.0',
    id: 1,
    method: 'server/discover',
    params: {
        _meta: {
            'io.modelcontextprotocol/protocolVersion': revision,
            'io.modelcontextprotocol/clientInfo': { name: 'conformance-probe', version: '1.0.0' },
            'io.modelcontextprotocol/clientCapabilities': {}
        }
    }
};

try {
    const res = await fetch(url, {
        method: 'POST',
        headers: {
            'content-type': 'application/json',
            accept: 'application/json, text/event-stream',
            'mcp-protocol-version': revision,
            'mcp-method': 'server/discover'
        },
        body: JSON.stringify(body),
        signal: AbortSignal.timeout(2000)
    });
    const text = await res.text();
    // The answer may be plain JSON or a one-event SSE stream.
    const json = JSON.parse(text.startsWith('{') ? text : text.match(/^data:\s*(.*)$/m)?.[1] ?? 'null');
    process.exit(res.ok && json?.result?.capabilities?.tools ? 0 : 1);
} catch {
    process.exit(1);
}
