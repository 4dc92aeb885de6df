#!/usr/bin/env node
// Conformance fixture server: the tools, prompts and resources the official MCP
// conformance suite's 2026-07-28 server scenarios expect, served by the
// TypeScript SDK v2 (@modelcontextprotocol/server) over Streamable HTTP.
//
//   node tests/conformance/fixture.mjs [PORT]     (PORT 0 or absent: ephemeral)
//
// The first stdout line is JSON, {"url":"http://127.0.0.1:PORT/mcp"}, so a
// script can wait for it instead of guessing when the server is up.
import http from 'node:http';
import { Readable } from 'node:stream';

import {
    createMcpHandler,
    hostHeaderValidationResponse,
    localhostAllowedHostnames,
    localhostAllowedOrigins,
    McpServer,
    originValidationResponse
} from '@modelcontextprotocol/server';

import { registerMrtr, stateCodec } from './fixture/mrtr.mjs';
import { registerSurface } from './fixture/surface.mjs';

const port = Number(process.argv[2] ?? 0);
if (!Number.isInteger(port) || port < 0 || port > 65535) {
    console.error(`usage: fixture.mjs [PORT]  (got ${process.argv[2]})`);
    process.exit(2);
}

// The trigger tools toggle these; createMcpHandler builds a new McpServer per
// request, so anything that must outlive one request lives here.
const state = { dynamicTool: false, dynamicPrompt: false };

// `notify` is only known once the handler exists; the factory runs later, per request.
let handler;
const notify = {
    toolsChanged: () => handler.notify.toolsChanged(),
    promptsChanged: () => handler.notify.promptsChanged()
};

function buildServer() {
    const server = new McpServer(
        { name: 'resmux-conformance-fixture', version: '1.0.0' },
        {
            capabilities: {
                tools: { listChanged: true },
                prompts: { listChanged: true },
                resources: {},
                completions: {},
                logging: {}
            },
            requestState: { verify: stateCodec.verify }
        }
    );
    registerSurface(server, { state, notify });
    registerMrtr(server);
    return server;
}

handler = createMcpHandler(buildServer, {
    // A conformance run should see protocol errors, not a silent fixture.
    onerror: err => console.error(`[fixture] ${err?.message ?? err}`)
});

// The SDK entry is deliberately validation-free: a localhost server must
// reject foreign Host/Origin headers itself (DNS rebinding protection).
const allowedHosts = localhostAllowedHostnames();
const allowedOrigins = localhostAllowedOrigins();

async function serve(request) {
    const url = new URL(request.url);
    if (url.pathname !== '/mcp') return new Response('not found', { status: 404 });
    return (
        hostHeaderValidationResponse(request, allowedHosts) ??
        originValidationResponse(request, allowedOrigins) ??
        handler.fetch(request)
    );
}

// node:http <-> web Request/Response, streaming both ways so SSE responses
// (progress, subscriptions/listen) reach the client as they are written.
function toWebRequest(req, signal) {
    const headers = new Headers();
    for (const [name, value] of Object.entries(req.headers)) {
        if (value === undefined) continue;
        for (const v of Array.isArray(value) ? value : [value]) headers.append(name, v);
    }
    const hasBody = req.method !== 'GET' && req.method !== 'HEAD';
    return new Request(`http://${req.headers.host ?? '127.0.0.1'}${req.url}`, {
        method: req.method,
        headers,
        body: hasBody ? Readable.toWeb(req) : undefined,
        duplex: hasBody ? 'half' : undefined,
        signal
    });
}

async function writeWebResponse(response, res) {
    const headers = {};
    response.headers.forEach((value, name) => {
        headers[name] = value;
    });
    res.writeHead(response.status, headers);
    if (!response.body) return res.end();
    for await (const chunk of response.body) {
        if (res.destroyed) break;
        res.write(chunk);
    }
    res.end();
}

const httpServer = http.createServer(async (req, res) => {
    // Abort the exchange when the client goes away (e.g. a closed listen stream).
    const abort = new AbortController();
    res.on('close', () => abort.abort());
    try {
        await writeWebResponse(await serve(toWebRequest(req, abort.signal)), res);
    } catch (err) {
        if (!res.headersSent) {
            res.writeHead(500, { 'content-type': 'text/plain' });
            res.end(String(err?.message ?? err));
        } else {
            res.destroy();
        }
    }
});

httpServer.listen(port, '127.0.0.1', () => {
    const { port: bound } = httpServer.address();
    console.log(JSON.stringify({ url: `http://127.0.0.1:${bound}/mcp` }));
});

for (const signal of ['SIGINT', 'SIGTERM']) {
    process.on(signal, async () => {
        httpServer.close();
        httpServer.closeAllConnections();
        await handler.close().catch(() => {});
        process.exit(0);
    });
}
