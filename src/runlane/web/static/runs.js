// The runs page, kept live: while the tab is visible, the first page of the list is read
// again from the API (/api/v1/runs with the page's filters and the session cookie) every few
// seconds, and the table becomes what a reload would show: new runs at the top, statuses and
// times updated in place. Rows are built from text nodes, never from HTML. A failing read
// backs off (up to a minute); a hidden tab reads nothing.
"use strict";

(function () {
  var STATUSES = ["queued", "running", "success", "failure", "timeout", "skipped", "cancelled"];
  var EVERY_MS = 4000;
  var MAX_BACKOFF_MS = 60000;
  var body = document.getElementById("runs-body");
  if (!body || !body.getAttribute("data-live-url") || typeof window.fetch !== "function") {
    return;
  }
  var url = body.getAttribute("data-live-url");
  var state = document.getElementById("runs-live");
  var wait = EVERY_MS;
  var timer = null;
  var busy = false;
  var stopped = false;

  function say(text) { if (state) { state.textContent = text; } }

  function pad(n) { return (n < 10 ? "0" : "") + n; }

  function stamp(date) { return date.toISOString().replace(/\.\d{3}Z$/, "Z"); }

  function utcText(date) {
    return date.getUTCFullYear() + "-" + pad(date.getUTCMonth() + 1) + "-" + pad(date.getUTCDate()) +
      " " + pad(date.getUTCHours()) + ":" + pad(date.getUTCMinutes()) + " UTC";
  }

  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) { node.className = cls; }
    if (text !== undefined && text !== null) { node.appendChild(document.createTextNode(String(text))); }
    return node;
  }

  function timeCell(name, value) {
    var td = el("td");
    td.setAttribute("data-col", name);
    fillTime(td, value);
    return td;
  }

  function fillTime(td, value) {
    td.textContent = "";
    var date = value ? new Date(value) : null;
    if (!date || isNaN(date.getTime())) {
      td.appendChild(el("span", "none", "—"));
      td.setAttribute("data-at", "");
      return;
    }
    var time = el("time", null, utcText(date));
    time.setAttribute("datetime", stamp(date));
    td.appendChild(time);
    td.setAttribute("data-at", stamp(date));
  }

  function badge(status) {
    var css = STATUSES.indexOf(status) >= 0 ? status : "other";
    return el("span", "badge status-" + css, status);
  }

  function newRow(run) {
    var tr = el("tr", "new-run");
    tr.setAttribute("data-run-id", run.id);
    var th = el("th");
    th.setAttribute("scope", "row");
    var link = el("a", "mono", String(run.id).slice(0, 8));
    link.href = "/runs/" + encodeURIComponent(run.id);
    th.appendChild(link);
    tr.appendChild(th);
    var job = el("td");
    var jobLink = el("a", null, run.job);
    jobLink.href = "/jobs/" + encodeURIComponent(run.job);
    job.appendChild(jobLink);
    if (run.attempt > 1) {
      job.appendChild(document.createTextNode(" "));
      job.appendChild(el("span", "count", "attempt " + run.attempt));
    }
    tr.appendChild(job);
    var status = el("td");
    status.setAttribute("data-col", "status");
    tr.appendChild(status);
    tr.appendChild(el("td", null, run.trigger));
    var who = el("td");
    who.appendChild(run.requested_by ? document.createTextNode(run.requested_by) : el("span", "none", "—"));
    tr.appendChild(who);
    tr.appendChild(timeCell("queued_at", run.queued_at));
    tr.appendChild(timeCell("started_at", null));
    tr.appendChild(timeCell("finished_at", null));
    return tr;
  }

  function cell(tr, name) { return tr.querySelector('td[data-col="' + name + '"]'); }

  function update(tr, run) {
    var status = cell(tr, "status");
    var shown = status.querySelector(".badge");
    if (!shown || shown.textContent !== run.status) {
      status.textContent = "";
      status.appendChild(badge(run.status));
    }
    ["started_at", "finished_at"].forEach(function (name) {
      var td = cell(tr, name);
      var at = run[name] ? stamp(new Date(run[name])) : "";
      var time = td.querySelector("time");
      var current = time ? time.getAttribute("datetime") : "";
      if (at !== current) { fillTime(td, run[name]); }
    });
  }

  function apply(items) {
    var rows = {};
    for (var i = 0; i < body.rows.length; i++) {
      rows[body.rows[i].getAttribute("data-run-id")] = body.rows[i];
    }
    var wanted = {};
    var before = body.firstChild;
    for (var j = 0; j < items.length; j++) {
      var run = items[j];
      var tr = rows[run.id] || newRow(run);
      update(tr, run);
      wanted[run.id] = true;
      // In the API's order: each row goes right after the one before it.
      if (tr !== before) { body.insertBefore(tr, before); } else { before = before.nextSibling; }
      before = tr.nextSibling;
    }
    for (var id in rows) {
      if (Object.prototype.hasOwnProperty.call(rows, id) && !wanted[id]) { body.removeChild(rows[id]); }
    }
    var none = document.getElementById("runs-none");
    if (none) { none.hidden = items.length > 0; }
    if (window.runlane && typeof window.runlane.formatTimes === "function") {
      window.runlane.formatTimes(body);
    }
  }

  function later() {
    window.clearTimeout(timer);
    if (!stopped && !document.hidden) { timer = window.setTimeout(poll, wait); }
  }

  function poll() {
    if (busy || stopped || document.hidden) { return; }
    busy = true;
    window.fetch(url, { credentials: "same-origin", cache: "no-store", headers: { Accept: "application/json" } })
      .then(function (response) {
        if (response.status === 401 || response.status === 403) {
          stopped = true;
          throw new Error("Live updates stopped: log in again to see new runs.");
        }
        if (!response.ok) { throw new Error("Live updates failed (" + response.status + "); trying again."); }
        return response.json();
      })
      .then(function (page) {
        apply(page && page.items ? page.items : []);
        wait = EVERY_MS;
        say("Live: updated " + utcText(new Date()) + ".");
      })
      .catch(function (error) {
        wait = Math.min(wait * 2, MAX_BACKOFF_MS);
        say(error && error.message ? error.message : "Live updates failed; trying again.");
      })
      .then(function () { busy = false; later(); });
  }

  document.addEventListener("visibilitychange", function () {
    if (document.hidden) { window.clearTimeout(timer); } else { poll(); }
  });
  later();
}());
