"""An MCP server built on the official Python SDK whose answers depend on the caller.

It stands for the common upstream behind a `token_exchange` credential: it knows the user
from the bearer token it receives, answers each user with that user's content, and - as a
server author who set a server-wide TTL did - calls every cacheable result `public`
(`cache_hints`). Each answer names the bearer it was produced for and counts the reads, so a
test can see whose content a caller received and how many reads reached the server.

Usage: python personal_server.py  (prints `listening on http://127.0.0.1:PORT/mcp`, then serves)
"""

import socket
import sys

import uvicorn
from mcp.server.caching import CacheHint
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ListResourcesResult, Resource

PUBLIC = CacheHint(ttl_ms=60_000, scope="public")
reads = 0


def bearer(headers) -> str:
    return (headers or {}).get("authorization", "<none>")


class PersonalServer(MCPServer):
    """Lists one resource named after the caller (the SDK's list handler, extended)."""

    async def _handle_list_resources(self, ctx, params):
        listed = await super()._handle_list_resources(ctx, params)
        who = bearer(getattr(ctx.request, "headers", None))
        mine = Resource(uri="profile://me", name=f"profile of {who}", mime_type="text/plain")
        return ListResourcesResult(resources=[*listed.resources, mine])


server = PersonalServer(
    "personal",
    cache_hints={"resources/read": PUBLIC, "resources/list": PUBLIC, "tools/list": PUBLIC},
)


@server.resource("profile://{who}", name="profile", mime_type="text/plain")
def profile(who: str, ctx: Context) -> str:
    global reads
    reads += 1
    return f"profile {who} of {bearer(ctx.headers)} (read {reads})"


@server.tool()
def read_count() -> int:
    """How many reads of profile://me reached this server."""
    return reads


def main() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    app = server.streamable_http_app(stateless_http=True, json_response=True)
    config = uvicorn.Config(app, log_level="warning")
    print(f"listening on http://127.0.0.1:{port}/mcp", flush=True)
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    sys.exit(main())
