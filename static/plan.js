// The plan page's chart island: slo_attainment vs offered rate, one curve per configuration,
// from the JSON the result fragment carries (#plan-chart-data), drawn with uPlot whenever a
// result arrives (first load or an htmx swap). Tests read data-drawn on #plan-chart.
(function () {
  "use strict";
  var COLORS = ["#2f6fde", "#1f883d", "#d4a72c", "#cf222e", "#6f42c1", "#0a7ea4", "#bc4c00",
    "#57606a"];
  var plot = null;

  function draw() {
    var data = document.getElementById("plan-chart-data");
    var figure = document.getElementById("plan-chart");
    if (plot) { plot.destroy(); plot = null; }
    if (!data || !figure || typeof uPlot === "undefined") return;
    var chart = JSON.parse(data.textContent);
    var box = figure.querySelector(".plot");
    var columns = [chart.rates];
    var series = [{ label: "rate (req/s)" }];
    chart.series.forEach(function (s, i) {
      columns.push(s.values);
      series.push({ label: s.label, stroke: COLORS[i % COLORS.length], width: 2,
        points: { show: true, size: 5 }, spanGaps: false,
        value: function (u, v) { return v === null ? "—" : (v * 100).toFixed(0) + "%"; } });
    });
    if (chart.share !== null && chart.share !== undefined) {
      columns.push(chart.rates.map(function () { return chart.share; }));
      series.push({ label: "goodput share", stroke: "#888", dash: [6, 4], width: 1,
        points: { show: false } });
    }
    var opts = {
      width: Math.max(320, box.clientWidth || 800), height: 320, series: series,
      scales: { x: { time: false }, y: { range: [0, 1.02] } },
      axes: [{ label: "offered rate (req/s)" },
        { label: "SLO attainment", values: function (u, ticks) {
          return ticks.map(function (t) { return Math.round(t * 100) + "%"; }); } }],
    };
    plot = new uPlot(opts, columns, box);
    figure.dataset.drawn = "1";
  }

  document.addEventListener("DOMContentLoaded", draw);
  document.addEventListener("htmx:afterSettle", function (e) {
    if (e.target && e.target.id === "plan") draw();
  });
  window.addEventListener("resize", function () {
    if (plot) {
      var box = document.querySelector("#plan-chart .plot");
      if (box) plot.setSize({ width: Math.max(320, box.clientWidth), height: 320 });
    }
  });
})();
