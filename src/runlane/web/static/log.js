// The run page's live log: follows a run that has not ended through the API's server-sent
// events (/api/v1/runs/{id}/logs?follow=true&after=<offset>: the stream starts just after the
// tail the page was rendered with), appends each line as a text node (never as HTML), keeps
// the last `data-max-lines` lines, and at the stream's `end` shows the run's final status.
// Without JavaScript the page shows the tail it was rendered with; a reload shows more.
"use strict";

(function () {
  var STATUSES = ["queued", "running", "success", "failure", "timeout", "skipped", "cancelled"];
  var pre = document.getElementById("log");
  if (!pre || !pre.getAttribute("data-follow-url") || typeof window.EventSource !== "function") {
    return;
  }
  var url = pre.getAttribute("data-follow-url");
  var maxLines = parseInt(pre.getAttribute("data-max-lines"), 10) || 2000;
  var lineOpen = pre.getAttribute("data-line-open") === "1";
  var state = document.getElementById("log-state");
  var dropped = 0;

  function say(text) { if (state) { state.textContent = text; } }

  function atBottom() { return pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4; }

  function addLine(text) { pre.appendChild(document.createTextNode(text)); }

  function trim() {
    while (pre.childNodes.length > maxLines) {
      pre.removeChild(pre.firstChild);
      dropped += 1;
    }
    if (dropped) {
      pre.setAttribute("data-dropped", String(dropped));
    }
  }

  // The rendered tail becomes one text node per line, so the oldest can be dropped one by one.
  var rendered = pre.textContent;
  pre.textContent = "";
  var first = rendered.split("\n");
  for (var i = 0; i < first.length; i++) {
    var last = i === first.length - 1;
    if (last && first[i] === "") { break; }
    addLine(first[i] + (last && lineOpen ? "" : "\n"));
  }
  if (pre.lastChild === null) { lineOpen = false; }

  function append(data) {
    var stick = atBottom();
    var lines = data.split("\n");
    if (lineOpen && pre.lastChild) {
      // The tail stopped mid-line: the first line of the stream is the rest of it.
      pre.lastChild.textContent += lines.shift() + "\n";
      lineOpen = false;
    }
    for (var i = 0; i < lines.length; i++) { addLine(lines[i] + "\n"); }
    trim();
    if (stick) { pre.scrollTop = pre.scrollHeight; }
  }

  function showStatus(status) {
    if (STATUSES.indexOf(status) < 0) { return; }
    var holder = document.getElementById("run-status");
    var badge = holder ? holder.querySelector(".badge") : null;
    if (badge) {
      badge.textContent = status;
      badge.className = "badge status-" + status;
    }
  }

  function parse(data) {
    try { return JSON.parse(data); } catch (e) { return null; }
  }

  var source = new window.EventSource(url, { withCredentials: true });
  say("Following the log as the run writes it.");
  source.addEventListener("message", function (event) { append(event.data); });
  source.addEventListener("notice", function (event) {
    var notice = parse(event.data);
    if (notice && typeof notice.message === "string") { say(notice.message); }
  });
  source.addEventListener("retry", function (event) {
    var retry = parse(event.data);
    if (!retry || !retry.ended) { return; }
    append("[runlane: attempt ended " + String(retry.ended.status) + "; following attempt " +
      String(retry.attempt) + " (run " + String(retry.next_run_id).slice(0, 8) + ")]");
  });
  source.addEventListener("end", function (event) {
    source.close();
    var end = parse(event.data) || {};
    var status = typeof end.status === "string" ? end.status : "";
    showStatus(status);
    var cancel = document.querySelector(".cancel-form");
    if (cancel) { cancel.hidden = true; }
    say("The run ended" + (status ? ": " + status : "") + ". These are its last lines.");
  });
  source.addEventListener("error", function (event) {
    // A named `error` event from the server carries JSON; the browser's own error does not.
    var problem = event && typeof event.data === "string" ? parse(event.data) : null;
    if (problem && problem.message) {
      source.close();
      say("The live log stopped: " + problem.message + " Reload to see more.");
    } else if (source.readyState === window.EventSource.CLOSED) {
      say("The live log stopped. Reload to see more.");
    } else {
      say("Reconnecting to the live log…");
    }
  });
}());
