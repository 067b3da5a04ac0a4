-- POST BENCH_BODY as a log of session after session: the ids, one a line, are read from BENCH_IDS;
-- each thread walks its own share of them, so no two requests at once log the same session.
local ids = {}
for line in io.lines(os.getenv("BENCH_IDS")) do ids[#ids + 1] = line end
local counter = 0
local stride = 1

function setup(thread)
  counter = counter + 1
  thread:set("first", counter)
end

function init(args)
  position = first
  stride = tonumber(os.getenv("BENCH_THREADS") or "2")
end

function request()
  local id = ids[((position - 1) % #ids) + 1]
  position = position + stride
  return wrk.format("POST", "/v1/training/sessions/" .. id .. "/log", {
    ["Content-Type"] = "application/json",
    ["Authorization"] = "Bearer " .. os.getenv("BENCH_TOKEN"),
  }, os.getenv("BENCH_BODY"))
end
