// Tollgate console, read pages: the overview's spend chart (uPlot) and live
// figures from GET /ui/events. No inline script is allowed (Content-Security-
// Policy), so the data comes in data attributes.
(function () {
  "use strict";

  function usd(nano) {
    var neg = nano < 0;
    if (neg) nano = -nano;
    var whole = Math.floor(nano / 1e9), frac = String(nano % 1e9);
    while (frac.length < 9) frac = "0" + frac;
    frac = frac.replace(/0+$/, "");
    while (frac.length < 2) frac += "0";
    return (neg ? "-$" : "$") + whole + "." + frac;
  }

  // The spend chart: data-days (YYYY-MM-DD,...) and data-nanos (nano-USD,...).
  function drawChart(el) {
    if (!window.uPlot) {
      el.innerHTML = "";
      var p = document.createElement("p");
      p.className = "error-state";
      p.textContent = "The chart library did not load; the figures are in the table below.";
      el.appendChild(p);
      return;
    }
    var days = el.dataset.days ? el.dataset.days.split(",") : [];
    var nanos = el.dataset.nanos ? el.dataset.nanos.split(",") : [];
    var xs = [], ys = [];
    for (var i = 0; i < days.length; i++) {
      xs.push(Date.parse(days[i] + "T00:00:00Z") / 1000);
      ys.push(Number(nanos[i]) / 1e9);
    }
    el.innerHTML = "";
    var width = Math.max(el.clientWidth || 0, 320);
    new uPlot({
      width: width,
      height: 240,
      tzDate: function (ts) { return uPlot.tzDate(new Date(ts * 1000), "Etc/UTC"); },
      // The last 30 UTC days, whatever days hold spend (a single point
      // would otherwise stretch the axis over years).
      scales: { x: { time: true, range: function () {
        var today = Math.floor(Date.now() / 86400000) * 86400;
        return [today - 29.5 * 86400, today + 0.5 * 86400];
      } } },
      series: [{}, { label: "Spend (USD)", stroke: "#1f5fbf", fill: "rgba(31,95,191,0.12)", width: 2,
        value: function (u, v) { return v == null ? "" : "$" + v.toFixed(2); } }],
      axes: [{}, { size: 80, values: function (u, vals) { return vals.map(function (v) { return "$" + (v >= 1000 ? v.toFixed(0) : String(Number(v.toPrecision(3)))); }); } }]
    }, [xs, ys], el);
  }

  // Live figures: every element of class spend with data-scope and
  // data-period takes the spent_nano of the matching totals event.
  function follow(url) {
    if (!window.EventSource) return;
    var es = new EventSource(url);
    es.addEventListener("totals", function (e) {
      var t;
      try { t = JSON.parse(e.data); } catch (err) { return; }
      var sel = '.spend[data-scope="' + CSS.escape(t.scope) + '"][data-period="' + CSS.escape(t.period) + '"]';
      document.querySelectorAll(sel).forEach(function (el) {
        if (el.dataset.nano !== String(t.spent_nano)) {
          el.dataset.nano = String(t.spent_nano);
          el.textContent = usd(t.spent_nano);
        }
      });
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll(".chart[data-days]").forEach(drawChart);
    var live = document.querySelector("[data-events]");
    if (live) follow(live.dataset.events);
  });
})();
