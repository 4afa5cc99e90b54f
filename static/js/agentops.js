// Page behaviour that would otherwise be inline handlers, which the Content-Security-Policy forbids.
(function () {
  // <form data-confirm="Question?">: ask before submitting.
  document.addEventListener("submit", function (event) {
    var form = event.target.closest("form[data-confirm]");
    if (form && !window.confirm(form.dataset.confirm)) {
      event.preventDefault();
      event.stopImmediatePropagation();
    }
  }, true);

  // <div data-swap-statuses="400 403 404 409">: htmx swaps these error answers in
  // (they carry a message for the user) instead of discarding them.
  document.addEventListener("htmx:beforeSwap", function (event) {
    var holder = event.target.closest && event.target.closest("[data-swap-statuses]");
    if (!holder) return;
    var statuses = holder.dataset.swapStatuses.split(/\s+/).map(Number);
    if (statuses.indexOf(event.detail.xhr.status) !== -1) {
      event.detail.shouldSwap = true;
      event.detail.isError = false;
    }
  });
})();
