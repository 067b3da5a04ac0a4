-- POST and DELETE /v1/profiles/{id}/follow by many accounts: BENCH_TOKENS_FILE holds one access
-- token per line, BENCH_TARGETS_FILE one profile id per line. Each wrk thread takes its share of the
-- accounts; every request picks the thread's next account, which follows its next target and then
-- unfollows it, so every call changes something (a follow of someone already followed would be a
-- cheap no-op). Runs that must not see each other's follows use target files of their own.
local counter = 0
local threads = {}

function setup(thread)
  thread:set("id", counter)
  counter = counter + 1
  table.insert(threads, thread)
end

local function lines(path)
  local all = {}
  for line in io.lines(path) do
    if line ~= "" then table.insert(all, line) end
  end
  return all
end

function init(args)
  local n = tonumber(os.getenv("BENCH_THREADS") or "2")
  tokens = {}
  for i, token in ipairs(lines(os.getenv("BENCH_TOKENS_FILE"))) do
    if (i - 1) % n == id then table.insert(tokens, token) end
  end
  targets = lines(os.getenv("BENCH_TARGETS_FILE"))
  sent = 0
  statuses = {}
end

function request()
  sent = sent + 1
  local account = (sent - 1) % #tokens + 1
  local round = math.floor((sent - 1) / #tokens)
  -- Each account walks the targets in its own order, so accounts do not all hit one profile at once.
  local target = targets[(math.floor(round / 2) + account * 7) % #targets + 1]
  local method = (round % 2 == 0) and "POST" or "DELETE"
  -- An empty body, so that the request carries Content-Length: 0.
  return wrk.format(method, "/v1/profiles/" .. target .. "/follow", { ["Authorization"] = "Bearer " .. tokens[account] }, "")
end

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
  if (status < 200 or status > 299) and statuses[status] <= 2 then io.write(string.format("status %d: %s\n", status, body)) end
end

function done(summary, latency, requests)
  local total = {}
  for _, thread in ipairs(threads) do
    for status, count in pairs(thread:get("statuses")) do total[status] = (total[status] or 0) + count end
  end
  for status, count in pairs(total) do io.write(string.format("status %d: %d\n", status, count)) end
end
