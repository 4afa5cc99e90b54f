// Starts Redoc on the API docs page; a static file so the page needs no inline script (CSP).
(function () {
  var container = document.getElementById("redoc-container");
  if (container && window.Redoc) {
    Redoc.init(container.dataset.schemaUrl, {}, container);
  }
})();
