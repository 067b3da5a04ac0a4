-- POST /v1/auth/login, cycling through the bench's accounts (BENCH_ACCOUNTS_FILE: "email password"
-- per line) so that no account has more than one sign-in in flight, as with real users.
local counter = 0
local threads = {}

function setup(thread)
  thread:set("id", counter)
  counter = counter + 1
  table.insert(threads, thread)
end

function init(args)
  bodies = {}
  for line in io.lines(os.getenv("BENCH_ACCOUNTS_FILE")) do
    local email, password = line:match("^(%S+) (.+)$")
    table.insert(bodies, string.format('{"email":"%s","password":"%s"}', email, password))
  end
  next_body = id + 1
  statuses = {}
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
end

function request()
  local body = bodies[next_body]
  next_body = next_body + 2
  if next_body > #bodies then next_body = next_body - #bodies end
  return wrk.format(nil, nil, nil, body)
end

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end

function done(summary, latency, requests)
  for _, thread in ipairs(threads) do
    local s = thread:get("statuses")
    for status, count in pairs(s) do io.write(string.format("status %d: %d\n", status, count)) end
  end
end
