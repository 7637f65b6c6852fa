// The ilmek console's one script: a page that asks for it (data-refresh="SECONDS" on
// <body>: the inbox, a running thread) reloads itself after that long, unless the
// person is filling in a field or the tab is hidden; then it waits a little more.
// Without JavaScript nothing happens, and every page works the same.
(function () {
  "use strict";
  var seconds = parseFloat(document.body.getAttribute("data-refresh") || "");
  if (!(seconds > 0)) { return; }
  var touched = false;
  document.addEventListener("input", function () { touched = true; }, true);
  function busy() {
    var active = document.activeElement;
    var typing = active && /^(INPUT|TEXTAREA|SELECT)$/.test(active.tagName);
    return touched || typing || document.hidden;
  }
  function tick() {
    if (busy()) { window.setTimeout(tick, 1000); return; }
    window.location.reload();
  }
  window.setTimeout(tick, seconds * 1000);
})();
