-- wrk script: MCP 2026-07-28 `resources/read` as a conforming client sends it, with a fresh
-- JSON-RPC id per request and the headers the spec requires (MCP-Protocol-Version,
-- Mcp-Method, Mcp-Name mirroring params.uri), cycling over KEYS resources `up0://item/N`
-- (the sample upstream's generated ones; the proxy's cache is warmed, so every read is a hit).
-- Each wrk thread starts at its own offset and counts its own ids. URI_PREFIX replaces
-- `up0://item/` (the peers script fronts a stdio upstream whose URIs are `gen://item/N`).
--
--   KEYS=100 wrk -t2 -c64 -d10s --latency -s hot-read.lua http://127.0.0.1:PORT/mcp

local keys = tonumber(os.getenv("KEYS") or "100")
local prefix = os.getenv("URI_PREFIX") or "up0://item/"
local meta = '"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
  .. '"io.modelcontextprotocol/clientCapabilities":{},'
  .. '"io.modelcontextprotocol/clientInfo":{"name":"wrk","version":"4.1.0"}}'

local threads = 0
function setup(thread)
  thread:set("offset", threads)
  threads = threads + 1
end

local id, key
function init(args)
  id = (offset or 0) * 1000000000
  key = (offset or 0) * 7919 % keys
end

function request()
  id = id + 1
  key = (key + 1) % keys
  local uri = prefix .. key
  local body = '{"jsonrpc":"2.0","id":' .. id .. ',"method":"resources/read","params":{"uri":"'
    .. uri .. '",' .. meta .. '}}'
  return wrk.format("POST", nil, {
    ["Content-Type"] = "application/json",
    ["Accept"] = "application/json, text/event-stream",
    ["MCP-Protocol-Version"] = "2026-07-28",
    ["Mcp-Method"] = "resources/read",
    ["Mcp-Name"] = uri,
  }, body)
end
