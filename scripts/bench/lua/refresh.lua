-- POST /v1/auth/token/refresh as clients do: every answer carries the next refresh token, which a
-- later request spends. Each wrk thread keeps a queue of live tokens, seeded from BENCH_TOKENS_FILE
-- (one token per line, split across threads).
local counter = 0
local threads = {}

function setup(thread)
  thread:set("id", counter)
  counter = counter + 1
  table.insert(threads, thread)
end

function init(args)
  queue = {}
  local n = tonumber(os.getenv("BENCH_THREADS") or "2")
  local i = 0
  for line in io.lines(os.getenv("BENCH_TOKENS_FILE")) do
    if i % n == id then table.insert(queue, line) end
    i = i + 1
  end
  statuses = {}
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
end

function request()
  local token = table.remove(queue, 1)
  if token == nil then token = "exhausted" end
  return wrk.format(nil, nil, nil, '{"refresh_token":"' .. token .. '"}')
end

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
  if status ~= 200 and (statuses[status] or 0) <= 2 then io.write(string.format("status %d: %s\n", status, body)) end
  local token = body:match('"refresh_token"%s*:%s*"([^"]+)"')
  if token then table.insert(queue, token) end
end

function done(summary, latency, requests)
  for _, thread in ipairs(threads) do
    local s = thread:get("statuses")
    for status, count in pairs(s) do io.write(string.format("status %d: %d\n", status, count)) end
  end
end
