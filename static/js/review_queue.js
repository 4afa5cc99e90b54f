// Working a review queue by keyboard (templates/review/queue_work.html lists the keys):
// digits pick a value of the highlighted score, j / k move between scores, c comments,
// d or Enter finishes, s skips, o opens the trace, ? shows the keys. Typing in a text box
// is left alone (a number takes the letter shortcuts too); Esc leaves the box.
(function () {
  "use strict";

  function scores() { return Array.prototype.slice.call(document.querySelectorAll("fieldset.queue-score")); }
  function active() { return document.querySelector("fieldset.queue-score[data-active]"); }
  function say(text) {
    var box = document.getElementById("review-said");
    if (box) box.textContent = text;
  }

  function highlight(fieldset, focus) {
    scores().forEach(function (f) { f.removeAttribute("data-active"); });
    if (!fieldset) return;
    fieldset.setAttribute("data-active", "");
    var number = fieldset.querySelector("input[type=number]");
    var target = number || fieldset.querySelector("input:checked") || fieldset.querySelector("input");
    if (focus && target) target.focus();
    fieldset.scrollIntoView({block: "nearest"});
  }

  function move(step) {
    var all = scores(), at = all.indexOf(active());
    var next = all[Math.min(all.length - 1, Math.max(0, at + step))];
    highlight(next, true);
  }

  function typing(el) {
    if (!el || !el.closest) return false;
    if (el.closest("textarea, select, [contenteditable]")) return true;
    return el.matches("input") && !el.matches("[type=radio], [type=checkbox], [type=submit], [type=button]");
  }

  function pick(fieldset, key) {
    var radios = fieldset.querySelectorAll("input[type=radio]");
    if (!radios.length) return false;
    var index = key === "y" ? 0 : key === "n" ? 1 : parseInt(key, 10) - 1;
    if (key === "y" || key === "n") {
      if (radios.length !== 2 || radios[0].value !== "yes") return false;
    }
    var radio = radios[index];
    if (!radio) return false;
    radio.checked = true;
    say(fieldset.getAttribute("data-score") + ": " + radio.value);
    var all = scores(), next = all[all.indexOf(fieldset) + 1];
    highlight(next || fieldset, true);
    return true;
  }

  function click(id) {
    var button = document.getElementById(id);
    if (!button) return false;
    button.click();
    return true;
  }

  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey || event.isComposing) return;
    var el = event.target, key = event.key;
    var form = document.getElementById("review-form");
    if (key === "Escape" && typing(el)) {
      el.blur();
      var fieldset = el.closest("fieldset.queue-score");
      if (fieldset) highlight(fieldset, false);
      event.preventDefault();
      return;
    }
    // A number takes digits, a sign, a point; a letter there is a shortcut (d, s, c, j, k, o, ?), Enter submits.
    var number = el && el.matches && el.matches("input[type=number]");
    if (typing(el) && !(number && /^[a-df-z?]$/i.test(key))) return;
    if (number && (key === "j" || key === "k")) el.blur();
    if (key === "?") {
      var help = document.getElementById("queue-keys");
      if (help) { help.open = !help.open; help.querySelector("summary").focus(); }
      event.preventDefault();
      return;
    }
    if (!form) return;
    if (event.repeat) return;
    if (key === "Enter" && el && el.closest && el.closest("a, button, summary")) return;   // its own action
    var handled = false;
    if (key === "d" || key === "Enter") handled = click("review-done");
    else if (key === "s") handled = click("review-skip");
    else if (key === "c") { var box = document.getElementById("review-comment"); if (box) { box.focus(); handled = true; } }
    else if (key === "o") { var link = document.getElementById("trace-link"); if (link) { window.open(link.href, "_blank", "noopener"); handled = true; } }
    else if (key === "j" || key === "ArrowDown" && !el.matches("input[type=radio]")) { move(1); handled = true; }
    else if (key === "k" || key === "ArrowUp" && !el.matches("input[type=radio]")) { move(-1); handled = true; }
    else if (/^[1-9yn]$/.test(key) && active()) handled = pick(active(), key);
    if (handled) event.preventDefault();
  });

  // Clicking or tabbing into a score highlights it, so the digits then go to it.
  document.addEventListener("focusin", function (event) {
    var fieldset = event.target.closest && event.target.closest("fieldset.queue-score");
    if (fieldset && !fieldset.hasAttribute("data-active")) highlight(fieldset, false);
  });

  document.addEventListener("DOMContentLoaded", function () {
    var first = active();
    if (first) highlight(first, true);
  });
})();
