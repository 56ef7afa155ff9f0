-- wrk: every request a streamed completion of the fixed SSE upstream's tokens; at the end one
-- JSON line with what wrk counted (proxy_saturation.py reads it).
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model": "tiny", "prompt": "' .. string.rep("hello ", 128) ..
    '", "max_tokens": 64, "stream": true}'

function done(summary, latency, requests)
    local e = summary.errors
    io.write(string.format(
        '\nSATURATION {"requests": %d, "duration_us": %d, "connect": %d, "read": %d, ' ..
        '"write": %d, "status": %d, "timeout": %d, "latency_p50_us": %d}\n',
        summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
        latency:percentile(50)))
end
