// Page-wide glue for htmx: say so when an action fails instead of leaving the page as it was.
(function () {
  "use strict";
  function notice(text) {
    var box = document.getElementById("notice");
    if (!box) return;
    box.textContent = text;
    box.hidden = !text;
    box.removeAttribute("data-error-status"); // said here, not a refused request's answer
    if (text) { clearTimeout(box._t); box._t = setTimeout(function () { box.hidden = true; }, 8000); }
  }
  window.pdctlNotice = notice;
  // An error fragment (web/errors.py): the page's notice, retargeted to it. It is swapped
  // whatever its status (5xx too) and stays an error, so nothing clears it at once.
  function isErrorFragment(xhr) { return xhr.getResponseHeader("HX-Retarget") === "#notice"; }
  document.addEventListener("htmx:sendError", function () {
    notice("pdctl did not answer: is `pdctl serve` running? Retrying where the page polls.");
  });
  document.addEventListener("htmx:responseError", function (e) {
    var xhr = e.detail.xhr;
    if (isErrorFragment(xhr)) return;
    if (xhr.status >= 500 || !xhr.responseText) {
      notice("The action failed: the server answered " + xhr.status + " " + xhr.statusText +
             ". Nothing on this page changed; see the event log or the server's log.");
    }
  });
  // A success clears the notice, except a poll's while a refused request's answer shows: the
  // page polls every few seconds, and the operator must get to read why their click failed.
  // That one stays until their next action succeeds (a button, a form, a link).
  document.addEventListener("htmx:afterRequest", function (e) {
    if (!e.detail.successful) return;
    var box = document.getElementById("notice");
    var refused = box && !box.hidden && box.hasAttribute("data-error-status");
    var elt = e.detail.elt;
    var byOperator = elt && elt.closest && elt.closest("button, form, a, input, select");
    if (refused && !byOperator) return;
    notice("");
  });
  // A JSON error (from /api or a framework 4xx) reaching a fragment target: show its detail.
  document.addEventListener("htmx:beforeSwap", function (e) {
    var xhr = e.detail.xhr;
    if (isErrorFragment(xhr)) {
      e.detail.shouldSwap = true;
      e.detail.isError = true;
      return;
    }
    var type = xhr.getResponseHeader("content-type") || "";
    if (type.indexOf("application/json") === 0) {
      e.detail.shouldSwap = false;
      try {
        var body = JSON.parse(xhr.responseText);
        var d = body.detail;
        notice(typeof d === "string" ? d : JSON.stringify(d));
      } catch (err) { notice("The server answered " + xhr.status); }
    }
  });
})();
