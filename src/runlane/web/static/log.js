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

  // pages.css lays the log out as a reversed column, whose scroll box starts at its end: there
  // scrollTop is 0 at the bottom and negative above it. Without that style, the usual way round.
  var reversed = window.getComputedStyle(pre).flexDirection === "column-reverse";

  function fromBottom() {
    return reversed ? -pre.scrollTop : pre.scrollHeight - pre.clientHeight - pre.scrollTop;
  }

  function newlines(text) { return text.split("\n").length - 1; }

  // The rendered tail stays as the page drew it (one text node: replacing it would lay the log
  // out again before its first paint); each streamed line is a text node after it.
  var total = newlines(pre.textContent);  // lines in the page
  if (pre.lastChild === null || pre.lastChild.nodeType !== 3) { lineOpen = false; }

  function addLine(text) { pre.appendChild(document.createTextNode(text)); }

  // Keeps the last `maxLines` lines: whole nodes go, and the oldest lines of the rendered tail
  // are cut off its front.
  function trim() {
    var excess = total - maxLines;
    while (excess > 0 && pre.firstChild) {
      var node = pre.firstChild;
      var count = node.nodeType === 3 ? newlines(node.data) : 0;
      if (count <= excess) {
        pre.removeChild(node);
        excess -= count;
        total -= count;
        dropped += count;
        continue;
      }
      var at = -1;
      for (var k = 0; k < excess; k++) { at = node.data.indexOf("\n", at + 1); }
      node.deleteData(0, at + 1);
      total -= excess;
      dropped += excess;
      excess = 0;
    }
    if (dropped) {
      pre.setAttribute("data-dropped", String(dropped));
    }
  }

  function append(data) {
    var below = fromBottom();
    var stick = below <= 4;
    var height = stick ? 0 : pre.scrollHeight;
    var lines = data.split("\n");
    if (lineOpen && pre.lastChild) {
      // The tail stopped mid-line: the first line of the stream is the rest of it.
      pre.lastChild.appendData(lines.shift() + "\n");
      lineOpen = false;
      total += 1;
    }
    for (var i = 0; i < lines.length; i++) { addLine(lines[i] + "\n"); }
    total += lines.length;
    var added = stick ? 0 : pre.scrollHeight - height;  // only a reader scrolled up needs it
    trim();
    if (stick) {
      pre.scrollTop = reversed ? 0 : pre.scrollHeight;
    } else if (reversed) {
      // A reader scrolled up keeps the lines they are reading where they are: new lines (and
      // the oldest dropped) only move the end further below.
      pre.scrollTop = -(below + added);
    }
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
