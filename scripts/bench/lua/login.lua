-- POST /v1/auth/login with one account's credentials (set by the bench through env).
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = string.format('{"email":"%s","password":"%s"}', os.getenv("BENCH_EMAIL"), os.getenv("BENCH_PASSWORD"))

function done(summary, latency, requests)
  io.write(string.format("non-200 answers: %d\n", summary.errors.status))
end
