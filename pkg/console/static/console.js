// Tollgate console: the little page code there is. No inline script is
// allowed (Content-Security-Policy), so behaviour hangs on data attributes.
(function () {
  "use strict";

  function csrfToken() {
    var m = document.querySelector('meta[name="csrf-token"]');
    return m ? m.content : "";
  }

  // htmx requests carry the session's CSRF token in a header.
  document.addEventListener("htmx:config:request", function (e) {
    var ctx = e.detail && e.detail.ctx;
    if (!ctx || !ctx.request) return;
    var h = ctx.request.headers;
    if (h && typeof h.set === "function") h.set("X-CSRF-Token", csrfToken());
    else if (h) h["X-CSRF-Token"] = csrfToken();
  });

  // Forms with data-confirm ask first (revoking a key).
  document.addEventListener("submit", function (e) {
    var f = e.target;
    if (f && f.dataset && f.dataset.confirm && !window.confirm(f.dataset.confirm)) e.preventDefault();
  });

  // Buttons with data-copy copy the text of the element with that id.
  document.addEventListener("click", function (e) {
    var b = e.target.closest ? e.target.closest("button[data-copy]") : null;
    if (!b || !navigator.clipboard) return;
    var el = document.getElementById(b.dataset.copy);
    if (el) navigator.clipboard.writeText(el.textContent).then(function () { b.textContent = "Copied"; });
  });
})();
