// code-puppy web: the live parts of the pages the server renders. No framework, nothing from the network.
"use strict";

async function post(path, body) {
  const response = await fetch(path, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
    credentials: "same-origin",
  });
  let data = {};
  try { data = await response.json(); } catch (e) { data = { error: `HTTP ${response.status}` }; }
  if (!response.ok) throw new Error(data.error || `HTTP ${response.status}`);
  return data;
}

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function showError(form, message) {
  const slot = form.querySelector(".form-error") || form.parentElement.querySelector(".form-error");
  if (slot) slot.textContent = message;
}

function promptForm(onStarted) {
  const form = document.getElementById("prompt-form");
  if (!form) return;
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const data = new FormData(form);
    const session = form.dataset.session;
    const body = { prompt: data.get("prompt"), model: data.get("model"), mode: data.get("mode") };
    try {
      showError(form, "");
      const started = await post(session ? `/api/sessions/${session}/prompt` : "/api/runs", body);
      form.querySelector("textarea").value = "";
      onStarted(started.session_id);
    } catch (error) {
      showError(form, error.message);
    }
  });
}

function liveList() {
  const section = document.getElementById("live-runs");
  const source = new EventSource("/api/live");
  source.onmessage = (message) => {
    const runs = JSON.parse(message.data);
    const list = section.querySelector("ul");
    list.replaceChildren();
    for (const run of runs) {
      const item = el("li");
      const link = el("a", "", `session ${run.session_id.slice(0, 8)}`);
      link.href = `/s/${run.session_id}`;
      item.append(el("span", "badge live", "live"), " ", link, ` · ${run.project} · `);
      item.append(run.here ? "started here" : `pid ${run.pid} (a terminal)`);
      list.append(item);
    }
    section.hidden = runs.length === 0;
    const ids = new Set(runs.map((run) => run.session_id));
    for (const row of document.querySelectorAll("tr[data-session]")) {
      const cell = row.querySelector(".badges");
      cell.replaceChildren();
      if (ids.has(row.dataset.session)) cell.append(el("span", "badge live", "live"));
    }
  };
}

function cell(row, text) {
  const td = el("td", "", text === null || text === undefined ? "-" : String(text));
  row.append(td);
  return td;
}

function durableRuns() {
  const section = document.getElementById("durable-runs");
  if (!section) return;
  const problem = section.querySelector(".error");
  const render = (data) => {
    problem.hidden = !data.error;
    problem.textContent = data.error || "";
    const body = section.querySelector("table.runs tbody");
    body.replaceChildren();
    for (const run of data.runs) {
      const row = el("tr");
      row.dataset.run = run.id;
      cell(row, run.id.slice(0, 8)).title = run.id;
      cell(row, "").append(el("span", `badge status-${run.status}`, run.status));
      cell(row, run.prompt || "-");
      cell(row, run.worker);
      cell(row, run.branch);
      cell(row, run.cost_usd === null ? "unknown" : `$${run.cost_usd.toFixed(4)}`);
      cell(row, run.age);
      const session = cell(row, run.session_id ? "" : "-");
      if (run.session_id) {
        const link = el("a", "", run.session_id.slice(0, 8));
        link.href = `/s/${run.session_id}`;
        session.append(link);
      }
      const action = cell(row, "");
      if (run.cancellable) {
        const button = el("button", "", "Cancel");
        button.type = "button";
        button.title = `code-puppy runs cancel ${run.id}`;  // its name stays "Cancel": no other button's
        button.addEventListener("click", async () => {
          button.disabled = true;
          try {
            await post(`/api/durable/${run.id}/cancel`, {});
            load();
          } catch (error) {
            problem.hidden = false;
            problem.textContent = error.message;
            button.disabled = false;
          }
        });
        action.append(button);
      }
      body.append(row);
    }
    const workers = document.getElementById("workers");
    const rows = workers.querySelector("tbody");
    rows.replaceChildren();
    for (const worker of data.workers) {
      const row = el("tr");
      for (const key of ["worker", "host", "pid", "concurrency", "in_hand", "last_beat"]) cell(row, worker[key]);
      rows.append(row);
    }
    workers.hidden = data.workers.length === 0;
    section.hidden = data.runs.length === 0 && data.workers.length === 0 && !data.error;
  };
  const load = async () => {
    const response = await fetch("/api/durable", { credentials: "same-origin" });
    if (response.ok) render(await response.json());
  };
  new EventSource("/api/durable/events").onmessage = (message) => render(JSON.parse(message.data));
}

function sessionPage() {
  const output = document.getElementById("live-output");
  const session = output.dataset.session;
  const controls = document.getElementById("run-controls");
  const continuing = document.getElementById("continue");
  let source = null;
  let textBlock = null;
  let lastTool = null;

  function running(on) {
    controls.hidden = !on;
    continuing.hidden = on;
  }

  function approvalCard(event) {
    const card = el("div", "approval");
    card.dataset.question = event.id;
    card.setAttribute("role", "group");
    card.setAttribute("aria-label", "Approval");
    card.append(el("div", "title", event.title));
    if (event.command) card.append(el("pre", "command", event.command));
    if (event.diff) {
      const diff = el("div");
      diff.innerHTML = event.diff; // escaped on the server (transcript.diff_html)
      card.append(diff);
    }
    const buttons = el("div", "row");
    const choices = [["Allow", "yes"]];
    if (event.always) choices.push(["Allow always", "always"]);
    choices.push(["Deny", "no"]);
    for (const [label, verdict] of choices) {
      const button = el("button", "", label);
      button.type = "button";
      button.addEventListener("click", async () => {
        try {
          await post(`/api/sessions/${session}/approvals/${event.id}`, { verdict });
        } catch (error) {
          card.querySelector(".outcome").textContent = error.message;
        }
      });
      buttons.append(button);
    }
    card.append(buttons, el("div", "outcome"));
    return card;
  }

  function show(event) {
    if (event.type === "text") {
      if (!textBlock) {
        textBlock = el("div", "msg model streaming");
        textBlock.append(el("div", "who", "model"), el("div", "text"));
        output.append(textBlock);
      }
      textBlock.querySelector(".text").textContent += event.text;
      return;
    }
    textBlock = null;
    if (event.type === "prompt") {
      const block = el("div", "msg you");
      block.append(el("div", "who", "you"), el("div", "text", event.text));
      output.append(block);
      running(true);
    } else if (event.type === "steer") {
      const block = el("div", "msg steer");
      block.append(el("div", "who", "steer"), el("div", "text", event.text));
      output.append(block);
    } else if (event.type === "tool_call") {
      lastTool = el("div", "tool-line", `⚙ ${event.line}`);
      output.append(lastTool);
    } else if (event.type === "tool_result") {
      if (lastTool) lastTool.append(el("span", "result", ` ↳ ${event.line}`));
    } else if (event.type === "approval") {
      output.append(approvalCard(event));
    } else if (event.type === "answered") {
      const card = output.querySelector(`[data-question="${event.id}"]`);
      if (card) {
        card.classList.add("answered");
        card.querySelector(".outcome").textContent = `answered: ${event.verdict}`;
        for (const button of card.querySelectorAll("button")) button.disabled = true;
      }
    } else if (event.type === "queued") {
      output.append(el("div", "note", `queued as the next turn: ${event.text}`));
    } else if (event.type === "warning") {
      output.append(el("div", "note", event.text));
    } else if (event.type === "end") {
      const line = event.status === "success" ? "run ended: success" : `run ended: ${event.message || event.status}`;
      const end = el("div", `run-end ${event.status}`, line);
      end.setAttribute("role", "status");
      output.append(end);
      running(false);
    }
  }

  function follow() {
    if (source) return;
    source = new EventSource(`/api/sessions/${session}/events`);
    source.onmessage = (message) => show(JSON.parse(message.data));
  }

  promptForm(() => { running(true); follow(); });
  if (output.dataset.live === "here") follow();
  if (output.dataset.live === "terminal") {
    // Another process's run: the steps its journal holds, rendered by the server, until it ends.
    const steps = el("div", "journal");
    output.append(steps);
    const progress = new EventSource(`/api/sessions/${session}/progress`);
    progress.onmessage = (message) => {
      const update = JSON.parse(message.data);
      if (update.html !== undefined) steps.innerHTML = update.html; // escaped on the server (transcript.render)
      if (update.ended) {
        progress.close();
        const end = el("div", "run-end", "the terminal's run ended: ");
        const reload = el("a", "", "reload the transcript");
        reload.href = location.pathname;
        end.append(reload);
        output.append(end);
        running(false);
      }
    };
  }

  const steerForm = document.getElementById("steer-form");
  const text = () => steerForm.querySelector("textarea").value;
  async function act(path, body) {
    try {
      showError(controls, "");
      await post(`/api/sessions/${session}/${path}`, body);
      steerForm.querySelector("textarea").value = "";
    } catch (error) {
      showError(controls, error.message);
    }
  }
  steerForm.addEventListener("submit", (event) => { event.preventDefault(); act("steer", { text: text() }); });
  const queue = document.getElementById("queue-button");
  if (queue) queue.addEventListener("click", () => act("queue", { text: text() }));
  const cancel = document.getElementById("cancel-button");
  if (cancel) cancel.addEventListener("click", () => act("cancel", {}));

  for (const button of document.querySelectorAll("button.rewind")) {
    button.addEventListener("click", async () => {
      const section = document.getElementById("checkpoints");
      const force = button.dataset.force === "true";
      try {
        await post(`/api/sessions/${session}/rewind`, { turns: Number(button.dataset.turns), force });
        location.reload();
      } catch (error) {
        showError(section, error.message);
        if (error.message.startsWith("rewind refused")) {
          button.textContent = "Rewind anyway (your versions are kept)";
          button.dataset.force = "true";
        }
      }
    });
  }
}

if (document.body.dataset.page === "sessions") {
  promptForm((id) => { location.href = `/s/${id}`; });
  liveList();
  durableRuns();
} else if (document.body.dataset.page === "session") {
  sessionPage();
}
