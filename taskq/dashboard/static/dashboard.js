// taskq dashboard: keeps pages current from server-sent events, draws the sparklines, and
// adds a few keyboard shortcuts. Every page is complete without it: the server renders it
// all (escaped), and every action is a plain form. No framework, no build step, no CDN.
(function () {
  "use strict";

  var WINDOW_MS = 15 * 60 * 1000; // what a sparkline shows
  var STORE = "taskq-sparks:" + location.host; // kept across reloads of this tab only

  function number(value) {
    if (typeof value !== "number") return String(value);
    if (Number.isInteger(value)) return value.toLocaleString("en-US");
    return value.toLocaleString("en-US", { minimumFractionDigits: 1, maximumFractionDigits: 1 });
  }

  function age(seconds) {
    var s = Math.max(0, Math.floor(seconds));
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m" + String(s % 60).padStart(2, "0") + "s";
    if (s < 86400) return Math.floor(s / 3600) + "h" + String(Math.floor((s % 3600) / 60)).padStart(2, "0") + "m";
    return Math.floor(s / 86400) + "d" + Math.floor((s % 86400) / 3600) + "h";
  }

  function clock(text) {  // as the server renders one: milliseconds, UTC
    if (!text) return "-";
    var millis = text.charAt(19) === "." ? (text.slice(19, 23) + "000").slice(0, 4) : ".000";
    return text.slice(0, 10) + " " + text.slice(11, 19) + millis + "Z";
  }

  // Set a cell's text (the link inside it, if it has one), touching the DOM only on change.
  function put(cell, text) {
    if (!cell) return;
    var target = cell.querySelector("a") || cell;
    if (target.textContent !== text) target.textContent = text;
  }

  function badge(cell, queue) {
    if (!cell) return;
    var text = queue.paused ? "paused " + (queue.paused_until ? "until " + clock(queue.paused_until) : "until resumed") : "running";
    var span = cell.querySelector(".badge");
    if (span && span.textContent === text) return;
    span = document.createElement("span");
    span.className = "badge " + (queue.paused ? "warn" : "ok");
    span.textContent = text;
    cell.replaceChildren(span);
  }

  // -- sparklines: in/out rates over the last 15 minutes, kept by the browser -------------
  var history = {};
  try { history = JSON.parse(sessionStorage.getItem(STORE) || "{}"); } catch (e) { history = {}; }

  function remember(queue, at, rateIn, rateOut) {
    var points = history[queue] || (history[queue] = []);
    points.push([at, rateIn, rateOut]);
    while (points.length && points[0][0] < at - WINDOW_MS) points.shift();
  }

  // x spans what is known, up to the window: a fresh page's line fills the box at once
  function line(svg, points, index, cls, now, top) {
    var span = Math.max(10000, Math.min(WINDOW_MS, now - (points.length ? points[0][0] : now)));
    var poly = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
    poly.setAttribute("class", cls);
    poly.setAttribute("points", points.map(function (p) {
      var x = 180 - ((now - p[0]) / span) * 180;
      var y = 27 - (p[index] / top) * 25;
      return x.toFixed(1) + "," + y.toFixed(1);
    }).join(" "));
    svg.appendChild(poly);
  }

  function draw(svg) {
    var points = history[svg.getAttribute("data-spark")] || [];
    var now = Date.now();
    var top = 1;
    points.forEach(function (p) { top = Math.max(top, p[1], p[2]); });
    svg.replaceChildren();
    line(svg, points, 1, "in", now, top);
    line(svg, points, 2, "out", now, top);
    svg.setAttribute("data-points", String(points.length));
  }

  function drawAll() {
    document.querySelectorAll("svg[data-spark]").forEach(draw);
    try { sessionStorage.setItem(STORE, JSON.stringify(history)); } catch (e) { /* full: fine */ }
  }

  // -- the overview's (and queue page's) `stats` events -----------------------------------
  function updateQueue(queue, rates) {
    document.querySelectorAll("[data-queue]").forEach(function (box) {
      if (box.getAttribute("data-queue") !== queue.queue) return;
      ["waiting", "runnable", "in_flight", "held", "delayed", "redelivered", "dead", "consumers"].forEach(function (field) {
        put(box.querySelector('[data-field="' + field + '"]'), number(queue[field]));
      });
      heldBy(box, queue);
      if (rates) {
        put(box.querySelector('[data-field="enqueued_per_s"]'), number(queue.enqueued_per_s));
        put(box.querySelector('[data-field="settled_per_s"]'), number(queue.settled_per_s));
      }
      badge(box.querySelector('[data-field="paused"]'), queue);
    });
  }

  // which limits hold the queue's tasks: the count's title, and the queue page's list
  function heldBy(box, queue) {
    var by = queue.held_by || {};
    var lines = Object.keys(by).sort().map(function (limit) { return limit + ": " + number(by[limit]); });
    var cell = box.querySelector('[data-field="held"]');
    if (cell && cell.title !== lines.join(", ")) cell.title = lines.join(", ");
    var list = box.querySelector('[data-field="held_by"]');
    if (!list) return;
    var shownNow = Array.prototype.map.call(list.children, function (li) { return li.textContent; });
    if (shownNow.join("\n") === lines.join("\n")) return;
    list.replaceChildren.apply(list, lines.map(function (text) {
      var li = document.createElement("li");
      li.textContent = text;
      return li;
    }));
  }

  function updateWorker(worker) {
    document.querySelectorAll("[data-worker]").forEach(function (row) {
      if (row.getAttribute("data-worker") !== worker.id) return;
      var counts = worker.counts || {};
      put(row.querySelector('[data-field="running"]'), worker.running.length + " / " + worker.concurrency);
      ["succeeded", "retried", "dead"].forEach(function (field) {
        put(row.querySelector('[data-field="' + field + '"]'), number(counts[field] || 0));
      });
      put(row.querySelector('[data-field="uptime"]'), age(worker.uptime));
      put(row.querySelector('[data-field="heartbeat_age"]'), age(worker.heartbeat_age) + " ago");
    });
  }

  function shown(selector, attribute) {
    return Array.prototype.map.call(document.querySelectorAll(selector), function (el) {
      return el.getAttribute(attribute);
    }).sort().join("\n");
  }

  function onStats(data) {
    var at = Date.parse(data.at);
    data.queues.forEach(function (q) {
      updateQueue(q, data.rates);
      if (data.rates) remember(q.queue, at, q.enqueued_per_s, q.settled_per_s);
    });
    data.workers.forEach(updateWorker);
    drawAll();
    var queues = data.queues.map(function (q) { return q.queue; }).sort().join("\n");
    var workers = data.workers.map(function (w) { return w.id; }).sort().join("\n");
    var rowsQueues = shown("tr[data-queue]", "data-queue");
    var rowsWorkers = shown("tr[data-worker]", "data-worker");
    var overview = document.querySelector('[data-section="queues"]');
    if ((overview && queues !== rowsQueues) || (document.querySelector('[data-section="workers"]') && workers !== rowsWorkers)) {
      refresh();
    }
  }

  // A queue or a worker came or went, or a run changed: fetch this page again and swap its
  // live sections. A refresh asked for while one is under way follows it (the later state
  // is the one shown). A section marked `data-keep` (a form being filled in) is swapped
  // only for one that is not: when what it acts on is gone.
  var refreshing = false;
  var again = false;
  function refresh() {
    if (refreshing) { again = true; return; }
    refreshing = true;
    fetch(location.href, { headers: { Accept: "text/html" }, credentials: "same-origin" })
      .then(function (r) { return r.text(); })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html");
        document.querySelectorAll("[data-section]").forEach(function (section) {
          var name = section.getAttribute("data-section");
          var other = fresh.querySelector('[data-section="' + name + '"]');
          if (!other || (section.hasAttribute("data-keep") && other.hasAttribute("data-keep"))) return;
          section.replaceWith(document.importNode(other, true));
        });
        drawAll();
      })
      .finally(function () {
        refreshing = false;
        if (again) { again = false; refresh(); }
      });
  }

  // -- the task page's `state`, `progress` and `final` events ----------------------------
  function onState(data) {
    var holder = document.querySelector('[data-live="state"]');
    if (!holder) return;
    var span = document.createElement("span");
    span.className = "state state-" + data.state;
    span.textContent = data.state;
    holder.replaceChildren(span);
  }

  function onProgress(data) {
    var section = document.querySelector('[data-section="progress"]');
    if (section) section.hidden = false;
    var bar = document.getElementById("progress");
    var label = document.querySelector('[data-live="progress-label"]');
    if (typeof data.value === "number") {
      if (bar) bar.value = data.value;
      put(label, Math.round(data.value * 100) + "% " + (data.message || ""));
    } else {
      put(label, JSON.stringify(data.value) + " " + (data.message || ""));
    }
  }

  function connect(url) {
    var status = document.getElementById("live");
    var source = new EventSource(url);
    source.onopen = function () { if (status) status.textContent = "live"; };
    source.onerror = function () { if (status) status.textContent = "reconnecting…"; };
    function json(handler) { return function (e) { handler(JSON.parse(e.data)); }; }
    source.addEventListener("stats", json(onStats));
    source.addEventListener("state", json(onState));
    source.addEventListener("progress", json(onProgress));
    source.addEventListener("problem", json(function (d) { if (status) status.textContent = d.error; }));
    source.addEventListener("final", function () { source.close(); location.reload(); });
    // a workflow run's page: its state or journal changed; after a final state, no more
    source.addEventListener("run", function (e) {
      var data = JSON.parse(e.data);
      if (data.final) {
        source.close();
        if (status) status.textContent = "ended: " + data.state;
      }
      refresh();
    });
    window.addEventListener("pagehide", function () { source.close(); });
  }

  // -- keyboard: `/` searches, `g` then a page's key goes there ----------------------------
  var pending = false;
  function typing(target) {
    return target && (target.isContentEditable || /^(INPUT|SELECT|TEXTAREA)$/.test(target.tagName));
  }
  document.addEventListener("keydown", function (e) {
    if (e.ctrlKey || e.metaKey || e.altKey || typing(e.target)) return;
    if (e.key === "/") {
      var search = document.getElementById("go");
      if (search) { e.preventDefault(); search.focus(); }
    } else if (pending) {
      pending = false;
      var link = document.querySelector('nav a[data-key="' + e.key + '"]');
      if (link) location.href = link.getAttribute("href");
    } else if (e.key === "g") {
      pending = true;
      setTimeout(function () { pending = false; }, 1500);
    }
  });

  var events = document.body.getAttribute("data-events");
  drawAll();
  if (events && window.EventSource) connect(events);
})();
