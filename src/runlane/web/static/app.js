// runlane's web UI: small progressive enhancements. Every page works without this script;
// it only rewrites times in the zone the viewer picked (UTC, theirs, or the job's), and
// offers `window.runlane.formatTimes(root)` to scripts that add times to a page later.
"use strict";

(function () {
  var KEY = "runlane.zone";
  var CHOICES = ["utc", "local", "job"];

  function chosen() {
    var value = null;
    try { value = window.localStorage.getItem(KEY); } catch (e) { value = null; }
    return CHOICES.indexOf(value) >= 0 ? value : "utc";
  }

  function pad(n) { return (n < 10 ? "0" : "") + n; }

  function utcText(date) {
    return date.getUTCFullYear() + "-" + pad(date.getUTCMonth() + 1) + "-" + pad(date.getUTCDate()) +
      " " + pad(date.getUTCHours()) + ":" + pad(date.getUTCMinutes()) + " UTC";
  }

  function zoneText(date, zone) {
    try {
      var parts = new Intl.DateTimeFormat("en-CA", {
        timeZone: zone, year: "numeric", month: "2-digit", day: "2-digit",
        hour: "2-digit", minute: "2-digit", hourCycle: "h23"
      }).formatToParts(date);
      var get = function (type) {
        for (var i = 0; i < parts.length; i++) { if (parts[i].type === type) { return parts[i].value; } }
        return "";
      };
      return get("year") + "-" + get("month") + "-" + get("day") + " " + get("hour") + ":" + get("minute") + " " + zone;
    } catch (e) {
      return utcText(date);
    }
  }

  function localZone() {
    try { return Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC"; } catch (e) { return "UTC"; }
  }

  function formatTimes(root) {
    var mode = chosen();
    // Only the "local" mode asks for the viewer's zone: the first Intl call of a page loads
    // the time zone data, which costs more than the rest of this script.
    var mine = mode === "local" ? localZone() : null;
    var nodes = (root || document).querySelectorAll("time[datetime]:not([data-fixed])");
    for (var i = 0; i < nodes.length; i++) {
      var node = nodes[i];
      var date = new Date(node.getAttribute("datetime"));
      if (isNaN(date.getTime())) { continue; }
      var zone = mode === "local" ? mine : (mode === "job" ? node.getAttribute("data-zone") : null);
      node.textContent = zone && zone !== "UTC" ? zoneText(date, zone) : utcText(date);
      node.title = utcText(date);
    }
  }

  function setUp() {
    var select = document.getElementById("zone-switch");
    if (select) {
      select.value = chosen();
      select.addEventListener("change", function () {
        try { window.localStorage.setItem(KEY, select.value); } catch (e) { /* private mode */ }
        formatTimes(document);
      });
      var holder = select.closest(".zone-switch");
      if (holder) { holder.hidden = false; }
    }
    // The server writes every time in UTC: in the UTC mode (the default) there is nothing to
    // rewrite, and the page paints without waiting for a pass over its times.
    if (chosen() !== "utc") { formatTimes(document); }
  }

  window.runlane = window.runlane || {};
  window.runlane.formatTimes = formatTimes;
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", setUp);
  } else {
    setUp();
  }
}());
