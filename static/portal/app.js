// quotaportal's little JavaScript. Live regions carry `data-poll`; they poll only while the tab is visible, and
// catch up at once when it becomes visible again. (A filter like `[document.visibilityState === 'visible']` in
// hx-trigger would need eval, which the pages' coming content security policy forbids.)
document.addEventListener("htmx:beforeRequest", (event) => {
  const poller = event.detail.elt;
  if (document.visibilityState !== "visible" && poller.hasAttribute("data-poll")) {
    event.preventDefault();
  }
});

document.addEventListener("visibilitychange", () => {
  if (document.visibilityState === "visible" && window.htmx) {
    document.querySelectorAll("[data-poll]").forEach((poller) => window.htmx.trigger(poller, "poll-now"));
  }
});
