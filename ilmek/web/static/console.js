// The ilmek console's one script. Without JavaScript nothing here happens, and every page works the same.
//
// 1. A page that asks for it (data-refresh="SECONDS" on <body>: the inbox, a running thread) reloads
//    itself after that long, unless the person is filling in a field or the tab is hidden.
// 2. The note an action leaves (carried in the URL of the redirect) is shown once: the URL then drops
//    it, so a reload does not bring it back.
// 3. Keys, outside a field: j / k move between rows (threads, checkpoints), o opens the row (Enter
//    does too), a answers (the row's first answer button, or the thread's pauses), ? shows them.
(function () {
  "use strict";

  function typing() {
    var active = document.activeElement;
    return active && (/^(INPUT|TEXTAREA|SELECT)$/.test(active.tagName) || active.isContentEditable);
  }

  // --- 1. reload ---
  var seconds = parseFloat(document.body.getAttribute("data-refresh") || "");
  if (seconds > 0) {
    var touched = false;
    document.addEventListener("input", function () { touched = true; }, true);
    var tick = function () {
      if (touched || typing() || document.hidden) { window.setTimeout(tick, 1000); return; }
      window.location.reload();
    };
    window.setTimeout(tick, seconds * 1000);
  }

  // --- 2. a note shown once ---
  var url = new URL(window.location.href);
  // A cancel's note also keeps its button disabled while the run winds down: that one stays.
  if (url.searchParams.has("note") && !url.searchParams.has("cancelling")) {
    ["note", "tone", "sig"].forEach(function (name) { url.searchParams.delete(name); });
    window.history.replaceState(window.history.state, "", url.pathname + url.search + url.hash);
  }

  // --- 3. keys ---
  var ROWS = "table.threads a.tid, .checkpoint-tree a.row";
  var current = -1;
  function rows() { return Array.prototype.slice.call(document.querySelectorAll(ROWS)); }
  function move(by) {
    var all = rows();
    if (!all.length) { return; }
    var at = all.indexOf(document.activeElement);
    current = Math.min(Math.max((at >= 0 ? at : current) + by, 0), all.length - 1);
    all.forEach(function (row) { row.classList.remove("kbd-current"); });
    var row = all[current];
    row.classList.add("kbd-current");
    row.focus();
    if (row.scrollIntoView) { row.scrollIntoView({block: "nearest"}); }
  }
  function chosen() {
    var all = rows();
    var at = all.indexOf(document.activeElement);
    return all[at >= 0 ? at : Math.max(current, 0)] || null;
  }
  function open() {
    var row = chosen();
    if (row) { window.location.href = row.getAttribute("href") || row.getAttribute("xlink:href"); }
  }
  function answer() {
    var row = chosen();
    var line = row && row.closest ? row.closest("tr") : null;
    var button = line ? line.querySelector(".row-answer button") : null;
    if (button) { button.focus(); return; }
    // The first field a person can use: a form's hidden token takes no focus.
    var field = document.querySelector(
      "#pauses button:not([disabled]), #pauses input:not([type=hidden]):not([disabled]), #pauses textarea");
    if (field) { field.focus(); field.scrollIntoView({block: "center"}); return; }
    var link = line ? line.querySelector("a.open") : null;
    if (link) { window.location.href = link.getAttribute("href"); }
  }
  var help = null;
  function toggleHelp() {
    if (help) { help.remove(); help = null; return; }
    help = document.createElement("div");
    help.className = "keys-help";
    help.setAttribute("role", "dialog");
    help.setAttribute("aria-label", "Keyboard shortcuts");
    var title = document.createElement("h2");
    title.textContent = "Keyboard shortcuts";
    help.appendChild(title);
    var list = document.createElement("dl");
    [["j / k", "next / previous row"], ["o or Enter", "open the row"],
     ["a", "answer: the row's first button, or the thread's pauses"], ["?", "show or hide this"],
     ["Esc", "close"]].forEach(function (pair) {
      var key = document.createElement("dt");
      var kbd = document.createElement("kbd");
      kbd.textContent = pair[0];
      key.appendChild(kbd);
      var what = document.createElement("dd");
      what.textContent = pair[1];
      list.appendChild(key);
      list.appendChild(what);
    });
    help.appendChild(list);
    document.body.appendChild(help);
  }
  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey || typing()) { return; }
    var actions = {j: function () { move(1); }, k: function () { move(-1); }, o: open, a: answer, "?": toggleHelp};
    if (event.key === "Escape" && help) { toggleHelp(); return; }
    var action = actions[event.key];
    if (action) { event.preventDefault(); action(); }
  });
})();
