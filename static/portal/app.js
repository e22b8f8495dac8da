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

// The submit form is checked as it is filled: htmx refills each field's error slot (`errors-<name>`) out of band
// and never replaces an input. The input follows its slot: `aria-invalid` and a description by the slot while
// the slot holds errors, neither once it is empty again.
function followErrorSlot(slot) {
  const name = slot.id.slice("errors-".length);
  const form = slot.closest("form");
  const control = form && form.querySelector(`[name="${CSS.escape(name)}"]`);
  if (!control) {
    return;
  }
  const invalid = slot.querySelector("li") !== null;
  const described = (control.getAttribute("aria-describedby") || "").split(" ").filter((id) => id && id !== slot.id);
  if (invalid) {
    described.push(slot.id);
    control.setAttribute("aria-invalid", "true");
  } else {
    control.removeAttribute("aria-invalid");
  }
  if (described.length) {
    control.setAttribute("aria-describedby", described.join(" "));
  } else {
    control.removeAttribute("aria-describedby");
  }
  const field = control.closest(".field");
  if (field) {
    field.classList.toggle("has-errors", invalid);
  }
}

document.addEventListener("htmx:oobAfterSwap", (event) => {
  // An out-of-band outerHTML swap replaces the slot: find the one now on the page by its id.
  const id = event.detail.target && event.detail.target.id;
  const slot = id && id.startsWith("errors-") ? document.getElementById(id) : null;
  if (slot) {
    followErrorSlot(slot);
  }
});

// The preference rows come back with the chosen share's instance types (the element marked
// `data-rows-refresh`). A row edited while that request was out would get back what it held before: the answer
// is then dropped and asked for again with the rows as they are now. Once new rows are in, the form is checked
// again, so their error slots say what the rules say.
let rowEdits = 0;
const countRowEdit = (event) => {
  if (event.target.closest && event.target.closest("#preferences")) {
    rowEdits += 1;
  }
};
document.addEventListener("input", countRowEdit, true);
document.addEventListener("change", countRowEdit, true);
const rowsRefresher = (event) => {
  const config = event.detail.requestConfig;
  const elt = (config && config.elt) || event.detail.elt;
  return elt && elt.hasAttribute && elt.hasAttribute("data-rows-refresh") ? elt : null;
};
document.addEventListener("htmx:beforeRequest", (event) => {
  const elt = rowsRefresher(event);
  if (elt) {
    elt.dataset.editsAtRequest = String(rowEdits);
  } else if (event.detail.target && event.detail.target.id === "preferences") {
    rowEdits += 1; // a row added or removed meanwhile: a refresh sent before it is out of date
  }
});
document.addEventListener("htmx:beforeSwap", (event) => {
  const elt = rowsRefresher(event);
  if (elt && elt.dataset.editsAtRequest !== String(rowEdits)) {
    event.detail.shouldSwap = false;
    window.htmx.trigger(elt, "refresh-rows");
  }
});
document.addEventListener("htmx:afterSwap", (event) => {
  const form = rowsRefresher(event) && document.getElementById("job-form");
  if (form) {
    window.htmx.trigger(form, "change");
  }
});
