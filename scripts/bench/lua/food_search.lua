-- GET /v1/foods?q=... for the queries in BENCH_QUERIES_FILE (one a line), in turn: each wrk thread
-- starts at its own place in the list. BENCH_TOKEN is the caller's access token.
local counter = 0

function setup(thread)
  thread:set("id", counter)
  counter = counter + 1
end

local function encode(text)
  return (text:gsub("[^%w]", function(c) return string.format("%%%02X", string.byte(c)) end))
end

function init(args)
  queries = {}
  for line in io.lines(os.getenv("BENCH_QUERIES_FILE")) do
    if line ~= "" then table.insert(queries, "/v1/foods?limit=10&q=" .. encode(line)) end
  end
  next_query = (id * 7) % #queries
  token = "Bearer " .. os.getenv("BENCH_TOKEN")
end

function request()
  next_query = next_query % #queries + 1
  return wrk.format("GET", queries[next_query], { ["Authorization"] = token })
end
