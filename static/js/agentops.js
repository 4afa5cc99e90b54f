/* AgentOps page behaviour. Served from our own static files: no inline scripts or
 * inline event handlers anywhere (the Content-Security-Policy forbids them).
 * Every page works without this file; it only adds live updates that keep the
 * reader's place, copy buttons, countdowns, confirmations, focus handling and
 * keyboard access to boxes that scroll. */
(function () {
  "use strict";
  document.documentElement.classList.add("js");

  // --- Live pages morph in place (idiomorph): keep what the reader opened, typed or loaded.
  if (window.Idiomorph) {
    var cb = window.Idiomorph.defaults.callbacks;
    cb.beforeAttributeUpdated = function (name, node) {
      // An open <details> stays open; a copy button the script revealed stays revealed.
      if (name === "open" && node.tagName === "DETAILS") return false;
      if (name === "hidden" && node.hasAttribute("data-copy")) return false;
    };
    cb.beforeNodeMorphed = function (oldNode) {
      if (oldNode.nodeType !== 1) return;
      if (oldNode.hasAttribute("data-keep")) return false;  // loaded details, a decided card
      var tag = oldNode.tagName;
      if (tag === "TEXTAREA" || tag === "SELECT" || (tag === "INPUT" && oldNode.type !== "hidden")) return false;
    };
    cb.beforeNodeRemoved = function (node) {
      if (node.nodeType === 1 && node.hasAttribute("data-keep") && node.classList.contains("approval")) return false;
    };
  }

  function each(root, selector, fn) {
    Array.prototype.forEach.call((root || document).querySelectorAll(selector), fn);
  }

  // --- Copy buttons (hidden until this script can make them work).
  function revealCopyButtons(root) {
    each(root, "button[data-copy]", function (b) { b.hidden = false; });
  }
  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("button[data-copy]");
    if (!button) return;
    var text = button.getAttribute("data-copy");
    var done = function () {
      button.classList.add("copied");
      button.setAttribute("data-copied", "true");
      var status = document.getElementById("copy-status");
      if (status) status.textContent = "Copied " + text;
    };
    if (navigator.clipboard && navigator.clipboard.writeText) {
      navigator.clipboard.writeText(text).then(done, function () {});
    } else {
      var area = document.createElement("textarea");
      area.value = text; document.body.appendChild(area); area.select();
      try { document.execCommand("copy"); done(); } catch (e) { /* nothing to do */ }
      area.remove();
    }
  });

  // --- Confirmations for destructive plain forms (e.g. cancel a run).
  document.addEventListener("submit", function (event) {
    var form = event.target;
    var message = form.getAttribute && form.getAttribute("data-confirm");
    if (message && !window.confirm(message)) event.preventDefault();
  }, true);

  // --- The project switcher acts on choosing (its Switch button does without this script).
  document.addEventListener("change", function (event) {
    var form = event.target.closest && event.target.closest("form[data-switch-project]");
    if (form && event.target.name === "project") form.requestSubmit();
  });

  // --- The runs list: tick two runs, Compare (the server says the same when this script is absent).
  function compareTicked(form) {
    return form.querySelectorAll("input[name=run]:checked").length;
  }
  document.addEventListener("change", function (event) {
    var form = event.target.closest && event.target.closest("form[data-compare]");
    var status = form && form.querySelector("[data-compare-status]");
    if (!status || event.target.name !== "run") return;
    var n = compareTicked(form);
    status.textContent = n === 2 ? "Two runs ticked: Compare shows them side by side."
      : n + " ticked: tick two runs to compare them.";
  });
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (!form.matches || !form.matches("form[data-compare]")) return;
    var n = compareTicked(form);
    if (n === 2) return;
    event.preventDefault();
    var status = form.querySelector("[data-compare-status]");
    if (status) status.textContent = "Tick exactly two runs to compare (" + n + " ticked).";
  });

  // --- Countdowns to an approval's effective expiry.
  function words(seconds) {
    if (seconds <= 0) return "expired";
    var h = Math.floor(seconds / 3600), m = Math.floor((seconds % 3600) / 60), s = Math.floor(seconds % 60);
    if (h) return "in " + h + " h " + m + " min";
    if (m) return "in " + m + " min " + (s < 10 ? "0" : "") + s + " s";
    return "in " + s + " s";
  }
  function tick() {
    var now = Date.now();
    each(document, "[data-countdown]", function (el) {
      var at = Date.parse(el.getAttribute("data-countdown"));
      if (!isNaN(at)) el.textContent = words((at - now) / 1000);
    });
  }
  setInterval(tick, 1000);

  // --- htmx: show 4xx fragments where the page asks for them (e.g. "already decided" on a card).
  document.addEventListener("htmx:beforeSwap", function (event) {
    var status = event.detail.xhr.status;
    var target = event.detail.target;
    if ([400, 403, 404, 409].indexOf(status) >= 0 && target && target.closest && target.closest("[data-swap-errors]")) {
      event.detail.shouldSwap = true;
      event.detail.isError = false;
    }
  });

  // --- After a decision, move focus to the next card waiting (or to the confirm step).
  function focusAfterDecision(card) {
    var confirm = card.querySelector("[data-autofocus]");
    if (confirm) { confirm.focus(); return; }
    if (card.getAttribute("data-decided") !== "true") return;
    var next = card.nextElementSibling;
    while (next && !(next.matches("article.approval") && next.getAttribute("data-decided") !== "true")) {
      next = next.nextElementSibling;
    }
    if (!next) {
      var cards = document.querySelectorAll("article.approval:not([data-decided=true])");
      next = cards.length ? cards[0] : null;
    }
    // The next card's first action (its Approve); a card without one (four-eyes, read-only): its heading.
    var action = next ? next.querySelector(".decide .actions button") : null;
    var heading = next ? next.querySelector("h2") : document.querySelector("h1");
    if (action) { action.focus(); return; }
    if (heading) { heading.setAttribute("tabindex", "-1"); heading.focus(); }
  }

  // --- The inbox by keyboard: a approves, r rejects the request the focus is in (else the first).
  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey || event.repeat) return;
    var key = event.key;
    if (key !== "a" && key !== "r") return;
    if (!document.getElementById("approval-keys")) return;
    var el = event.target;
    if (el && el.closest && el.closest("input, textarea, select, [contenteditable]")) return;
    var card = el && el.closest ? el.closest("article.approval:not([data-decided=true])") : null;
    if (!card) card = document.querySelector("article.approval:not([data-decided=true])");
    var button = card ? card.querySelector(key === "a" ? "[data-approve]" : "[data-reject]") : null;
    if (!button) return;
    event.preventDefault();
    button.focus();
    button.click();
  });

  // --- A box that scrolls (a wide table on a phone, a long JSON output) can be reached and
  // scrolled by keyboard: it takes the focus. Tables keep their role; other boxes become a
  // named region. Checked on load, after each swap and when the window is resized.
  function scrollRegionsFocusable(root) {
    each(root, "table, pre, .table-scroll, .chart-scroll", function (box) {
      if (box.hasAttribute("tabindex")) return;
      var style = getComputedStyle(box);
      var scrolls = (box.scrollWidth > box.clientWidth + 1 && /auto|scroll/.test(style.overflowX)) ||
                    (box.scrollHeight > box.clientHeight + 1 && /auto|scroll/.test(style.overflowY));
      if (!scrolls) return;
      box.tabIndex = 0;
      if (box.tagName !== "TABLE" && !box.hasAttribute("role")) {
        box.setAttribute("role", "region");
        box.setAttribute("aria-label", box.tagName === "PRE" ? "Text (scrolls)" : "Scrolling content");
      }
    });
  }
  var resizing = null;
  window.addEventListener("resize", function () {
    clearTimeout(resizing);
    resizing = setTimeout(function () { scrollRegionsFocusable(document); }, 200);
  });

  function onLoad(root) {
    revealCopyButtons(root);
    scrollRegionsFocusable(root);
    tick();
    if (root && root.matches && root.matches("article.approval[data-just-decided]")) focusAfterDecision(root);
  }
  document.addEventListener("htmx:load", function (event) { onLoad(event.detail.elt); });
  document.addEventListener("DOMContentLoaded", function () {
    onLoad(document);
    // A form with errors: say how many, and put the cursor on the first.
    var summary = document.querySelector("[data-error-summary]");
    if (summary) {
      var first = document.querySelector(".has-error input, .has-error select, .has-error textarea");
      if (first) first.focus();
    }
  });
})();
