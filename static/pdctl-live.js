// The deployment page's chart island: JSON from /ws/deployments/{name} (history, frames,
// events; observe/frames.py is the contract) drawn with uPlot. JSON never reaches htmx's
// swapping: it is taken in htmx:wsBeforeMessage; any HTML message is left to htmx (oob swaps
// by id). The figures a test reads are data attributes on the chart containers.
(function () {
  "use strict";
  var MAX_POINTS = 900;
  var SERIES_KEYS = ["slo_attainment", "request_goodput", "request_rate", "kv_bytes_per_s",
    "xfer_p50_ms", "xfer_p99_ms", "running", "waiting", "kv_cache_usage", "rejected_share",
    "rejected_rate"];
  var COLORS = ["#2f6fde", "#1f883d", "#d4a72c", "#cf222e", "#6f42c1"];
  var root, socketTemplate, lastFrame = null, frames = 0, retry = 0, reconnectTimer = null;
  var series = { ts: [] };
  var hists = {}, lines = {};
  SERIES_KEYS.forEach(function (k) { series[k] = []; });

  // -- formatting ----------------------------------------------------------------------------
  function fmt(v, kind) {
    if (v === null || v === undefined || Number.isNaN(v)) return "—";
    switch (kind) {
      case "pct": return (v * 100).toFixed(v >= 0.995 || v === 0 ? 0 : 1) + "%";
      case "rate": return v.toFixed(v < 10 ? 2 : 1) + "/s";
      case "ms": return ms(v * 1000);
      case "msraw": return ms(v);
      case "bytes": return bytes(v) + "/s";
      default: return String(Math.round(v * 100) / 100);
    }
  }
  function ms(x) { return x < 1 ? x.toFixed(2) + " ms" : x < 1000 ? x.toFixed(x < 10 ? 1 : 0) + " ms" : (x / 1000).toFixed(2) + " s"; }
  function bytes(v) {
    var units = ["B", "KB", "MB", "GB", "TB"], i = 0;
    while (Math.abs(v) >= 1000 && i < units.length - 1) { v /= 1000; i++; }
    return v.toFixed(v < 10 ? 2 : 1) + " " + units[i];
  }
  function boundLabel(b) { return b === Infinity || b > 1e300 ? "+Inf" : ms(b * 1000); }

  // -- the socket ----------------------------------------------------------------------------
  function setStatus(state, text) {
    var el = document.getElementById("live-status");
    if (!el) return;
    el.dataset.live = state;
    el.textContent = text;
  }
  function backoff(n) { // capped exponential backoff with jitter: 0.5 s, 1 s, 2 s ... 30 s
    var cap = Math.min(30000, 500 * Math.pow(2, n));
    return cap / 2 + Math.random() * cap / 2;
  }
  function isSocket(e) { return e.target && e.target.id === "live-socket"; }

  function onMessage(e) {
    if (!isSocket(e)) return;
    var text = e.detail.message;
    if (typeof text !== "string" || text.charAt(0) !== "{") return; // HTML: htmx swaps it
    e.preventDefault();
    var msg;
    try { msg = JSON.parse(text); } catch (err) { return; }
    if (msg.type === "history") history(msg.points || []);
    else if (msg.type === "frame") frame(msg);
    else if (msg.type === "event") {
      htmx.trigger(document.body, "pd-event", msg);
      // a bench run recorded (the page's own or `pdctl bench --deployment`): the Bench panel's list
      if (typeof msg.kind === "string" && msg.kind.indexOf("bench.") === 0) htmx.trigger(document.body, "pd-bench", msg);
    }
  }
  function onOpen(e) {
    if (!isSocket(e)) return;
    retry = 0;
    setStatus("open", "live");
  }
  function onClose(e) {
    if (!isSocket(e)) return;
    var code = e.detail.event ? e.detail.event.code : 0;
    if (code === 4401) { setStatus("closed", "signed out: reload to sign in"); return; }
    if (code === 4404) { setStatus("closed", "no such deployment"); return; }
    var delay = backoff(retry);
    setStatus("closed", "disconnected, reconnecting in " + Math.ceil(delay / 1000) + " s");
    // htmx's ws extension retries 1006/1011/1012/1013 itself (with our backoff); any other
    // close would end the stream, so open a fresh socket element ourselves.
    if ([1006, 1011, 1012, 1013].indexOf(code) < 0) {
      clearTimeout(reconnectTimer);
      reconnectTimer = setTimeout(reopen, delay);
    }
    retry++;
  }
  function reopen() {
    var old = document.getElementById("live-socket");
    if (!old || !socketTemplate) return;
    var fresh = socketTemplate.cloneNode(true);
    old.replaceWith(fresh);
    htmx.process(fresh);
  }

  // -- data ----------------------------------------------------------------------------------
  function pointOf(f) {
    var kv = f.kv || {};
    var p = { ts: f.ts, slo_attainment: f.slo_attainment, request_goodput: f.request_goodput,
      request_rate: f.request_rate, kv_bytes_per_s: kv.bytes_per_s, xfer_p50_ms: kv.xfer_p50_ms,
      xfer_p99_ms: kv.xfer_p99_ms, running: f.running, waiting: f.waiting,
      kv_cache_usage: f.kv_cache_usage, rejected_share: f.rejected_share,
      rejected_rate: (f.outcomes || {}).rejected };
    return p;
  }
  function push(p) {
    var n = series.ts.length;
    if (typeof p.ts !== "number" || (n && p.ts <= series.ts[n - 1])) return;
    series.ts.push(p.ts);
    SERIES_KEYS.forEach(function (k) { series[k].push(p[k] === undefined ? null : p[k]); });
    if (series.ts.length > MAX_POINTS) {
      Object.keys(series).forEach(function (k) { series[k].shift(); });
    }
  }
  function history(points) {
    Object.keys(series).forEach(function (k) { series[k] = []; });
    points.forEach(push);
    if (lastFrame) push(pointOf(lastFrame));
    drawSeries();
  }
  function frame(f) {
    frames++;
    lastFrame = f;
    root.dataset.frames = String(frames);
    root.dataset.lastTs = String(f.ts);
    root.dataset.window = f.window || "";
    push(pointOf(f));
    tiles(f);
    ["ttft", "itl"].forEach(function (m) { drawHist(m, f[m], f.slo || {}); });
    drawSeries();
    instances(f);
    pdBanner(f.pd);
    serving(f.serving);
    canaryBanner(f.canary);
    autopilotLine(f.autopilot);
    latencySource(f);
  }

  // Where the TTFT and ITL tiles come from, and an attached deployment's engine-side TTFT
  // parts (web/views/latency_source.py says the same words at page load)
  var SOURCE_SAID = { proxy: "client side", engines: "engines' own histograms (prefill + decode legs)" };
  var PART_LABELS = [["prefill_queue", "prefill queue"], ["prefill", "prefill"],
    ["kv_transfer", "KV transfer"], ["decode_queue", "decode queue"],
    ["decode_queue_and_kv", "decode queue + KV"], ["first_decode_step", "first decode step"]];
  function latencySource(f) {
    var source = SOURCE_SAID[f.latency_source] ? f.latency_source : "proxy";
    document.querySelectorAll(".latency-source").forEach(function (el) {
      if (el.dataset.source === source) return;
      el.dataset.source = source;
      el.textContent = SOURCE_SAID[source];
    });
    var line = document.getElementById("ttft-parts"), b = f.ttft_breakdown;
    if (!line) return;
    if (!b || b.sum_ms === null || b.sum_ms === undefined) { line.hidden = true; return; }
    var parts = b.parts || {}, shown = [];
    PART_LABELS.forEach(function (p) {
      var v = parts[p[0]];
      if (v !== null && v !== undefined) shown.push(p[1] + " " + Math.round(v));
    });
    line.textContent = "engines' mean TTFT parts: " + shown.join(" · ") + " = " + Math.round(b.sum_ms) + " ms";
    line.hidden = false;
  }

  // The header's modes and revision: what the supervisor runs now (observe/sections/serving.py), so a
  // finished switch or rollout shows without a reload
  function serving(sv) {
    if (!sv) return;
    var rev = document.getElementById("head-revision");
    if (rev && sv.revision !== null && sv.revision !== undefined && rev.dataset.revision !== String(sv.revision)) {
      rev.dataset.revision = String(sv.revision);
      rev.textContent = String(sv.revision);
    }
    var modes = document.getElementById("head-modes"), want = (sv.modes || []).join(",");
    if (!modes || modes.dataset.modes === want) return;
    modes.dataset.modes = want;
    modes.textContent = "";
    (sv.modes || []).forEach(function (m) {
      var b = document.createElement("span");
      b.className = "badge mode-" + m;
      b.dataset.mode = m;
      b.textContent = m + " mode";
      modes.appendChild(b);
      modes.appendChild(document.createTextNode(" "));
    });
  }

  // The correctness canary's last verdict (observe/canary/state.py writes the line)
  function autopilotLine(a) {
    // the frame's autopilot section: the line the fragment poll also fills, a second fresher
    var el = document.getElementById("autopilot");
    if (!el || !a || typeof a.line !== "string") return;
    el.textContent = a.line;
    el.dataset.mode = a.mode || "";
  }
  function canaryBanner(c) {
    var el = document.getElementById("canary-banner");
    if (!el || !c) return;
    el.hidden = false;
    el.dataset.canary = c.state;
    el.className = "canary-banner canary-" + c.state;
    el.setAttribute("role", c.state === "failing" ? "alert" : "status");
    el.textContent = "";
    var line = document.createElement(c.state === "failing" ? "b" : "small");
    line.className = "canary-line";
    line.textContent = c.line;
    el.appendChild(line);
  }

  // "Is PD happening?" (observe/sections/pd_check.py; web/views/pd_banner.py draws the first one)
  function pdBanner(pd) {
    var el = document.getElementById("pd-banner");
    if (!el || !pd || !pd.applies) return; // colocated: the page's note stands
    var rows = (pd.decodes || []).filter(function (r) { return r.status === "recomputing"; });
    var state = rows.length ? "recomputing" : "ok";
    if (el.dataset.pd === state && !rows.length) return;
    el.dataset.pd = state;
    el.className = "pd-banner pd-" + state;
    el.hidden = !rows.length;
    el.setAttribute("role", rows.length ? "alert" : "status");
    el.textContent = "";
    if (!rows.length) return;
    var b = document.createElement("b");
    b.textContent = "PD is not happening: ";
    el.appendChild(b);
    el.appendChild(document.createTextNode(rows.map(function (r) {
      var since = r.since ? " since " + new Date(r.since * 1000).toISOString().slice(11, 19) + " UTC" : "";
      var share = r.share === null || r.share === undefined ? "no traffic since" :
        Math.round(r.share * 100) + "% of prompt tokens by KV transfer";
      return r.instance + " recomputes its prompts" + since + " (" + share + ", last 10 s)";
    }).join("; ") + ". The decode answers 200 but its KV never arrives; see the advisor for the likely causes."));
  }

  function tiles(f) {
    var kv = f.kv || {}, out = f.outcomes || {};
    var values = { slo_attainment: f.slo_attainment, request_goodput: f.request_goodput,
      request_rate: f.request_rate, kv_bytes_per_s: kv.bytes_per_s, running: f.running,
      waiting: f.waiting, kv_cache_usage: f.kv_cache_usage, failed: out.failed,
      prompt_saved_share: f.prompt_saved_share, xfer_p50_ms: kv.xfer_p50_ms, xfer_p99_ms: kv.xfer_p99_ms,
      rejected: out.rejected, rejected_share: f.rejected_share, window: f.window };
    ["ttft", "itl"].forEach(function (m) {
      ["p50", "p90", "p99"].forEach(function (q) { values[m + "_" + q] = f[m] ? f[m][q] : null; });
    });
    values.kv_note = kv.source === null || kv.source === undefined ? "not reported" :
      kv.source === "derived" ? " external prompt tokens × KV bytes/token (the engine reports none)" :
      "the engine's own, vllm:" + kv.source + "_*";
    root.querySelectorAll("[data-k]").forEach(function (el) {
      var k = el.dataset.k, v = values[k];
      el.textContent = el.dataset.fmt ? fmt(v, el.dataset.fmt) : (v === null || v === undefined ? "—" : String(v));
    });
    var derived = kv.source === "derived";
    document.querySelectorAll("#kv-source, #chart-kv .tag.derived").forEach(function (el) { el.hidden = !derived; });
    root.dataset.kvSource = kv.source || "";
    root.dataset.sloAttainment = f.slo_attainment === null ? "" : String(f.slo_attainment);
    root.dataset.requestGoodput = f.request_goodput === null ? "" : String(f.request_goodput);
    root.dataset.rejectedShare = f.rejected_share === null || f.rejected_share === undefined ? "" : String(f.rejected_share);
    root.dataset.simulated = f.simulated ? "1" : "0";
  }

  function instances(f) {
    (f.instances || []).forEach(function (i) {
      var cell = document.querySelector('[data-live-instance="' + i.name + '"]');
      if (!cell) return;
      if (!i.up) { cell.textContent = "down"; return; }  // nothing scraped: no counts to show
      cell.textContent = "up · running " + i.running + " · waiting " + i.waiting +
        (i.kv_cache_usage === null || i.kv_cache_usage === undefined ? "" :
        " · KV " + fmt(i.kv_cache_usage, "pct"));
    });
  }

  // -- histograms ----------------------------------------------------------------------------
  // x is the bucket index: bar i spans i-0.5..i+0.5 and covers (bound[i-1], bound[i]].
  function xOf(bounds, v) {
    if (v === null || v === undefined) return null;
    for (var i = 0; i < bounds.length; i++) {
      if (v <= bounds[i]) {
        var lo = i ? bounds[i - 1] : 0, hi = bounds[i];
        if (!isFinite(hi)) return i;
        return i - 0.5 + (hi > lo ? (v - lo) / (hi - lo) : 1);
      }
    }
    return bounds.length - 1;
  }
  function drawHist(metric, h, slo) {
    var fig = document.getElementById("chart-" + metric);
    if (!fig || !h) return;
    var bounds = h.buckets.map(function (b) { return b[0] === null ? Infinity : Number(b[0]); });
    var counts = h.buckets.map(function (b) { return b[1]; });
    var sloMs = metric === "ttft" ? slo.ttft_ms : slo.itl_ms;
    var p = { count: h.count, p50: h.p50, p90: h.p90, p99: h.p99 };
    Object.keys(p).forEach(function (k) {
      fig.setAttribute("data-" + metric + "-" + k, p[k] === null || p[k] === undefined ? "" : String(p[k]));
    });
    fig.setAttribute("data-" + metric + "-slo-ms", sloMs === null || sloMs === undefined ? "" : String(sloMs));
    fig.setAttribute("data-" + metric + "-buckets", JSON.stringify(h.buckets.map(function (b, i) { return [isFinite(bounds[i]) ? bounds[i] : "+Inf", b[1]]; })));
    fig.dataset.hasData = h.count > 0 ? "1" : "0";
    var marks = [
      { x: xOf(bounds, h.p50), label: "p50", color: COLORS[1] },
      { x: xOf(bounds, h.p90), label: "p90", color: COLORS[2] },
      { x: xOf(bounds, h.p99), label: "p99", color: COLORS[3] },
      { x: sloMs ? xOf(bounds, sloMs / 1000) : null, label: "SLO", color: "#000", dash: [6, 4] },
    ];
    var first = counts.findIndex(function (c) { return c > 0; });
    var last = counts.length - 1 - counts.slice().reverse().findIndex(function (c) { return c > 0; });
    if (first < 0) { first = 0; last = Math.min(counts.length - 1, 8); }
    marks.forEach(function (m) { if (m.x !== null) last = Math.max(last, Math.ceil(m.x)); });
    var range = [Math.max(0, first - 1) - 0.5, Math.min(counts.length - 1, last + 1) + 0.5];
    if (typeof uPlot === "undefined") return;
    var xs = counts.map(function (_, i) { return i; });
    var chart = hists[metric];
    if (!chart || chart._n !== counts.length) {
      if (chart) chart.destroy();
      chart = hists[metric] = histChart(fig.querySelector(".plot"), bounds);
      chart._n = counts.length;
    }
    chart._marks = marks;
    chart._bounds = bounds;
    chart._range = range;
    chart.setData([xs, counts], false);
    chart.setScale("x", { min: range[0], max: range[1] });
  }
  function histChart(el, bounds) {
    var opts = {
      width: width(el), height: 190, legend: { show: false }, cursor: { show: true, points: { show: false } },
      scales: { x: { time: false, range: function (u) { return u._range || [-0.5, bounds.length - 0.5]; } },
        y: { range: function (u, min, max) { return [0, Math.max(1, max * 1.1)]; } } },
      axes: [
        { splits: function (u, ax, min, max) {
            var out = [], step = Math.max(1, Math.ceil((max - min) / 8));
            for (var i = Math.ceil(min); i <= max; i += step) out.push(i);
            return out; },
          values: function (u, splits) { return splits.map(function (i) { return u._bounds && u._bounds[i] !== undefined ? "≤" + boundLabel(u._bounds[i]) : ""; }); },
          size: 30, font: "11px system-ui" },
        { size: 44, font: "11px system-ui" },
      ],
      series: [{}, { label: "count", fill: "rgba(47,111,222,.35)", stroke: "#2f6fde", width: 1,
        paths: uPlot.paths.bars({ size: [0.9, 80], align: 0 }), points: { show: false } }],
      hooks: { draw: [drawMarks] },
    };
    var u = new uPlot(opts, [[], []], el);
    u._bounds = bounds;
    watchSize(el, u);
    return u;
  }
  function drawMarks(u) {
    var ctx = u.ctx, top = u.bbox.top, h = u.bbox.height, dpr = window.devicePixelRatio || 1;
    (u._marks || []).forEach(function (m, k) {
      if (m.x === null || m.x === undefined) return;
      var x = Math.round(u.valToPos(m.x, "x", true));
      ctx.save();
      ctx.strokeStyle = m.color; ctx.lineWidth = 2 * dpr;
      ctx.setLineDash((m.dash || []).map(function (d) { return d * dpr; }));
      ctx.beginPath(); ctx.moveTo(x, top); ctx.lineTo(x, top + h); ctx.stroke();
      ctx.fillStyle = m.color; ctx.font = (11 * dpr) + "px system-ui";
      ctx.fillText(m.label, x + 3 * dpr, top + (12 + 12 * k) * dpr);
      ctx.restore();
    });
  }

  // -- time series ---------------------------------------------------------------------------
  function drawSeries() {
    document.querySelectorAll('#live [data-chart="series"]').forEach(function (fig) {
      var keys = fig.dataset.series.split(",");
      var lastValues = {};
      keys.forEach(function (k) {
        var arr = series[k], v = arr.length ? arr[arr.length - 1] : null;
        lastValues[k] = v;
      });
      fig.dataset.points = String(series.ts.length);
      // gaps in the first series: an interval with arrivals is a point (0%), never a gap
      fig.dataset.gaps = String(series[keys[0]].filter(function (v) { return v === null; }).length);
      // points with a value (history's and frames'): a chart fed by frames alone has few
      fig.dataset.filled = String(series.ts.length - Number(fig.dataset.gaps));
      fig.dataset.last = JSON.stringify(lastValues);
      fig.dataset.hasData = series.ts.length ? "1" : "0";
      if (typeof uPlot === "undefined") return;
      var chart = lines[fig.id];
      if (!chart) chart = lines[fig.id] = seriesChart(fig.querySelector(".plot"), keys, fig.dataset.unit);
      chart.setData([series.ts].concat(keys.map(function (k) { return series[k]; })));
    });
  }
  function seriesChart(el, keys, unit) {
    var yfmt = function (u, splits) { return splits.map(function (v) { return fmt(v, unit === "ms" ? "msraw" : unit); }); };
    var opts = {
      width: width(el), height: 170, legend: { show: keys.length > 1 },
      scales: { x: { time: true }, y: { range: function (u, min, max) {
        if (unit === "pct") return [0, 1.05];
        return [0, max > 0 ? max * 1.15 : 1]; } } },
      axes: [{ size: 28, font: "11px system-ui" }, { size: 78, values: yfmt, font: "11px system-ui" }],
      series: [{}].concat(keys.map(function (k, i) {
        return { label: k.replace(/_/g, " "), stroke: COLORS[i % COLORS.length], width: 2, spanGaps: false,
          value: function (u, v) { return fmt(v, unit === "ms" ? "msraw" : unit); } };
      })),
    };
    var u = new uPlot(opts, [[]].concat(keys.map(function () { return []; })), el);
    watchSize(el, u);
    return u;
  }

  function width(el) { return Math.max(240, (el.clientWidth || el.parentNode.clientWidth || 400) - 4); }
  function watchSize(el, u) {
    if (typeof ResizeObserver === "undefined") return;
    new ResizeObserver(function () { u.setSize({ width: width(el), height: u.height }); }).observe(el.parentNode);
  }

  function start() {
    root = document.getElementById("live");
    if (!root || typeof htmx === "undefined") return;
    var sock = document.getElementById("live-socket");
    socketTemplate = sock ? sock.cloneNode(true) : null;
    htmx.config.wsReconnectDelay = backoff;
    document.addEventListener("htmx:wsBeforeMessage", onMessage);
    document.addEventListener("htmx:wsOpen", onOpen);
    document.addEventListener("htmx:wsClose", onClose);
    document.addEventListener("htmx:wsConnecting", function (e) {
      if (isSocket(e) && retry) setStatus("connecting", "reconnecting…");
    });
    // Live cells of the topology are filled from frames; put them back after a swap.
    document.addEventListener("htmx:afterSwap", function (e) {
      if (lastFrame && e.target && e.target.id === "topology") instances(lastFrame);
      var started = document.querySelector("#switch-form [data-switch-started]");
      if (started) setTimeout(function () { var d = document.getElementById("switch-dialog"); if (d) d.close(); }, 1200);
    });
  }
  // Listeners must be in place before htmx opens the socket (htmx starts on DOMContentLoaded).
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
