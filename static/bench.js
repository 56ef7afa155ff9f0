// /bench/compare: each stored bench run as a curve against the offered rate (uPlot), one chart
// per figure[data-chart=bench] (data-key: the point field, data-unit: pct | ms). The curves
// come as JSON in script#bench-curves (web/bench_compare.py `curve`).
(function () {
  "use strict";
  var COLORS = ["#2f6fde", "#1f883d", "#d4a72c", "#cf222e", "#6f42c1", "#0a7d8c", "#b35900"];

  function fmt(v, unit) {
    if (v === null || v === undefined) return "—";
    if (unit === "pct") return (v * 100).toFixed(1) + "%";
    return v >= 100 ? v.toFixed(0) + " ms" : v.toFixed(1) + " ms";
  }

  // uPlot wants one x array: every rate any run offered, each curve null where it has none.
  function table(curves, key) {
    var rates = [];
    curves.forEach(function (c) {
      c.points.forEach(function (p) { if (rates.indexOf(p.rate) < 0) rates.push(p.rate); });
    });
    rates.sort(function (a, b) { return a - b; });
    return [rates].concat(curves.map(function (c) {
      return rates.map(function (r) {
        var p = c.points.filter(function (q) { return q.rate === r; })[0];
        return p && p[key] !== null && p[key] !== undefined ? p[key] : null;
      });
    }));
  }

  function width(el) { return Math.max(280, (el.clientWidth || el.parentNode.clientWidth || 480) - 4); }

  function draw(fig, curves) {
    var el = fig.querySelector(".plot"), unit = fig.dataset.unit, key = fig.dataset.key;
    var opts = {
      width: width(el), height: 260,
      scales: { x: { time: false }, y: { range: function (u, min, max) {
        if (unit === "pct") return [0, 1.05];
        return [0, max > 0 ? max * 1.15 : 1]; } } },
      axes: [
        { label: "offered rate (req/s)", size: 40, font: "11px system-ui" },
        { size: 70, font: "11px system-ui",
          values: function (u, splits) { return splits.map(function (v) { return fmt(v, unit); }); } },
      ],
      series: [{ label: "rate", value: function (u, v) { return v === null ? "—" : v + " req/s"; } }]
        .concat(curves.map(function (c, i) {
          return { label: c.label, stroke: COLORS[i % COLORS.length], width: 2, spanGaps: true,
            points: { show: true, size: 7 }, value: function (u, v) { return fmt(v, unit); } };
        })),
    };
    var u = new uPlot(opts, table(curves, key), el);
    fig.dataset.curves = String(curves.length);
    if (typeof ResizeObserver !== "undefined") {
      new ResizeObserver(function () { u.setSize({ width: width(el), height: u.height }); })
        .observe(fig);
    }
  }

  function start() {
    var data = document.getElementById("bench-curves");
    if (!data || typeof uPlot === "undefined") return;
    var curves = JSON.parse(data.textContent);
    document.querySelectorAll("figure[data-chart=bench]").forEach(function (fig) { draw(fig, curves); });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
