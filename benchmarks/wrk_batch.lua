-- wrk script for one fixed batch: POST the body in BENCH_BODY_FILE, stop after BENCH_REQUESTS responses
-- (run with -t1 so the count is exact), print one `BENCH {json}` line with the figures run.py reads.
-- wrk's main thread sleeps for the whole -d duration even after every thread has stopped; the SIGINT we send
-- ourselves (through LuaJIT's ffi) is wrk's own way to end a run early, and it then reports as usual.
local ffi = require("ffi")
ffi.cdef("int kill(int pid, int sig); int getpid(void);")
local f = assert(io.open(os.getenv("BENCH_BODY_FILE"), "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"
local auth = os.getenv("BENCH_AUTHORIZATION")
if auth and auth ~= "" then wrk.headers["Authorization"] = auth end

local limit = tonumber(os.getenv("BENCH_REQUESTS") or "0")
local seen = 0

function response(status, headers, body)
  seen = seen + 1
  if limit > 0 and seen >= limit then
    wrk.thread:stop()
    ffi.C.kill(ffi.C.getpid(), 2)
  end
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCH {"requests": %d, "seconds": %.6f, "errors": %d, "p50_us": %d, "p99_us": %d, "mean_us": %.1f}\n',
    summary.requests, summary.duration / 1e6, e.connect + e.read + e.write + e.timeout + e.status,
    latency:percentile(50), latency:percentile(99), latency.mean))
end
