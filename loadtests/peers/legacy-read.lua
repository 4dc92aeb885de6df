-- wrk script: `resources/read` in the legacy (session) era, for peers that speak only it:
-- the session from `initialize` in SESSION, its protocol version in PROTOCOL, the URIs to
-- cycle over in URIS (comma-separated, as the peer lists them), a fresh id per request.

local session = assert(os.getenv("SESSION"), "SESSION")
local protocol = os.getenv("PROTOCOL") or "2025-06-18"
local uris = {}
for u in string.gmatch(assert(os.getenv("URIS"), "URIS"), "[^,]+") do
  uris[#uris + 1] = u
end

local threads = 0
function setup(thread)
  thread:set("offset", threads)
  threads = threads + 1
end

local id, key
function init(args)
  id = (offset or 0) * 1000000000
  key = (offset or 0) * 7919 % #uris
end

function request()
  id = id + 1
  key = key % #uris + 1
  local body = '{"jsonrpc":"2.0","id":' .. id .. ',"method":"resources/read","params":{"uri":"' .. uris[key] .. '"}}'
  return wrk.format("POST", nil, {
    ["Content-Type"] = "application/json",
    ["Accept"] = "application/json, text/event-stream",
    ["Mcp-Session-Id"] = session,
    ["MCP-Protocol-Version"] = protocol,
  }, body)
end
