// cursor-byok dashboard: local times, copy buttons, and live runs over server-sent events. No build step.
"use strict";

function localTimes(root) {
  for (const el of root.querySelectorAll("time[data-ms]")) {
    const when = new Date(Number(el.dataset.ms));
    el.textContent = when.toLocaleString(undefined, {
      year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit", second: "2-digit",
    });
    el.title = when.toISOString();
  }
}

function copyText(text) {
  // http://cursor-byok.invalid is not a secure context: navigator.clipboard may be missing there
  if (navigator.clipboard && window.isSecureContext) {
    return navigator.clipboard.writeText(text);
  }
  const area = document.createElement("textarea");
  area.value = text;
  area.setAttribute("readonly", "");
  area.style.position = "fixed";
  area.style.opacity = "0";
  document.body.appendChild(area);
  area.select();
  try {
    document.execCommand("copy");
  } finally {
    area.remove();
  }
  return Promise.resolve();
}

document.addEventListener("click", (event) => {
  const button = event.target.closest("button.copy");
  if (!button) return;
  copyText(button.dataset.copy).then(() => {
    button.classList.add("done");
    button.textContent = "copied";
    setTimeout(() => { button.classList.remove("done"); button.textContent = "copy"; }, 1200);
  });
});

function findForm() {
  const form = document.getElementById("find-form");
  if (!form) return;
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const id = form.elements.id.value.trim();
    if (id) window.location.href = "/trace/" + encodeURIComponent(id);
  });
}

function liveRuns() {
  const live = document.getElementById("live");
  if (!live || !window.EventSource) return;
  const state = document.getElementById("live-state");
  const source = new EventSource(live.dataset.events);
  source.addEventListener("open", () => state && state.classList.add("on"));
  source.addEventListener("error", () => state && state.classList.remove("on"));
  source.addEventListener("live", (event) => {
    live.innerHTML = event.data;
    localTimes(live);
  });
}

document.addEventListener("DOMContentLoaded", () => {
  localTimes(document);
  findForm();
  liveRuns();
});
