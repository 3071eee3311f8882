// nsqpy-admin: the little JavaScript the pages use; every page works without it.
//  - destructive forms (data-confirm) ask before they are sent (a replicated topic's placement
//    forms show the value asked for: data-confirm-field);
//  - the one-time ?notice= is dropped from the address so refreshes do not repeat it;
//  - live refresh: every data-refresh-ms the page is fetched again and its #live part (and the
//    warnings) swapped in place; paused while the tab is hidden or by the header button.
(function () {
  "use strict";
  document.addEventListener("submit", function (ev) {
    var msg = ev.target.getAttribute("data-confirm");
    // data-confirm-field: the form field whose value the question shows as {value}
    var field = ev.target.getAttribute("data-confirm-field");
    if (msg && field && ev.target.elements[field]) {
      msg = msg.replace("{value}", ev.target.elements[field].value);
    }
    if (msg && !window.confirm(msg)) { ev.preventDefault(); }
  });

  if (window.history && history.replaceState && location.search.indexOf("notice=") >= 0) {
    var u = new URL(location.href);
    u.searchParams.delete("notice");
    history.replaceState(null, "", u.toString());
  }

  var ms = parseInt(document.body.getAttribute("data-refresh-ms") || "0", 10);
  var live = document.getElementById("live");
  if (!ms || !live || !window.fetch || !window.DOMParser) { return; }

  var box = document.getElementById("refresh");
  var status = document.getElementById("refresh-status");
  var toggle = document.getElementById("refresh-toggle");
  var paused = false, busy = false;
  if (box) { box.hidden = false; }
  if (toggle) {
    toggle.addEventListener("click", function () {
      paused = !paused;
      toggle.textContent = paused ? "resume" : "pause";
      status.textContent = paused ? "paused" : "live";
    });
  }

  function pad(n) { return (n < 10 ? "0" : "") + n; }
  function stamp(text) {
    if (!status) { return; }
    var d = new Date();
    status.textContent = text + " " + pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
  }

  function tick() {
    if (busy || paused || document.hidden) { return; }
    busy = true;
    fetch(location.href, { credentials: "same-origin", headers: { "X-Live-Refresh": "1" } })
      .then(function (r) { return r.text(); })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.getElementById("live");
        if (fresh) { live.innerHTML = fresh.innerHTML; }
        var w = doc.getElementById("warnings"), cur = document.getElementById("warnings");
        if (w && cur) { cur.innerHTML = w.innerHTML; }
        document.body.setAttribute("data-refreshed", String(Date.now()));
        stamp("updated");
      })
      .catch(function () { stamp("refresh failed"); })
      .then(function () { busy = false; });
  }
  setInterval(tick, ms);
}());
