#!/usr/bin/env python3
# RSS per idle keep-alive connection: opens N connections to HOST:PORT (at most 200 opening at
# once), sends one 2026-07-28 `resources/read` of `up0://item/K` on each (the `targets`
# hot-read proxy's URIs), reads the answer, keeps every connection open, and prints the
# proxy's RSS (VmRSS of PID) before and after, per connection. Raise `ulimit -n` above N.
#
#   loadtests/external/idle-keepalive.py HOST PORT PID N
import asyncio, json, sys
host, port, pid, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
def rss():
    for l in open(f"/proc/{pid}/status"):
        if l.startswith("VmRSS"): return int(l.split()[1])
meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
async def one(i, conns, sem):
    async with sem:
        r, w = await asyncio.open_connection(host, port)
        uri = f"up0://item/{i % 100}"
        body = json.dumps({"jsonrpc": "2.0", "id": i, "method": "resources/read", "params": {"uri": uri, "_meta": meta}})
        w.write((f"POST /mcp HTTP/1.1\r\nhost: {host}:{port}\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\n"
                 f"mcp-protocol-version: 2026-07-28\r\nmcp-method: resources/read\r\nmcp-name: {uri}\r\ncontent-length: {len(body)}\r\n\r\n{body}").encode())
        await w.drain()
        head = await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), 10)
        assert head.startswith(b"HTTP/1.1 200"), head
        length = int([l.split(b":")[1] for l in head.split(b"\r\n") if l.lower().startswith(b"content-length")][0])
        await asyncio.wait_for(r.readexactly(length), 10)
        conns.append((r, w))
async def main():
    before = rss(); conns = []; sem = asyncio.Semaphore(200)
    await asyncio.gather(*(one(i, conns, sem) for i in range(n)))
    await asyncio.sleep(1)
    after = rss()
    print(f"{n} idle keep-alive connections: RSS {before} -> {after} KiB, {(after - before) / n:.2f} KiB each")
    for r, w in conns: w.close()
asyncio.run(main())
