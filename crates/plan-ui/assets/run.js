// A run's page: its graph, timeline, step panel, waiting calls, task board, and the buttons
// that steer it; live over the run's events.
const run = decodeURIComponent(location.pathname.split("/").pop());
const base = "/api/runs/" + encodeURIComponent(run);
function say(message) { document.getElementById("error").textContent = message; }

// --- Steering: each button does what the CLI command does, through the API.
let status = null;
async function act(path, body, done) {
  try {
    say("");
    const answer = await api(base + path, body);
    if (done) done(answer);
    if (answer && answer.going_on) follow();
    await refresh();
  } catch (error) { say(error.message); }
}
document.querySelector('[data-action="resume"]').onclick = () => act("/resume", {});
document.querySelector('[data-action="retry-failed"]').onclick = () => act("/resume", { retry_failed: true });
document.querySelector('[data-action="cancel"]').onclick = () => act("/cancel", {});
document.querySelector('#panel [data-action="retry"]').onclick = (event) => act("/retry", { steps: [event.target.dataset.stepId] });
function toolbar(taskStatus) {
  const show = (action, on) => { document.querySelector(`#toolbar [data-action="${action}"]`).hidden = !on; };
  show("resume", ["WAITING", "STOPPED", "INTERRUPTED"].includes(taskStatus));
  show("retry-failed", ["FAILED", "PARTIAL"].includes(taskStatus));
  show("cancel", ["RUNNING", "WAITING"].includes(taskStatus));
}

// --- Waiting calls: the arguments they would be called with, approve or reject (with a reason).
function approvals(report) {
  const section = document.getElementById("approvals");
  const list = document.getElementById("waiting");
  const pending = report.pending_approvals || [];
  const shown = [...list.children].map(c => c.dataset.stepId).join("\n");
  if (shown === pending.map(p => p.step_id).join("\n")) { section.hidden = pending.length === 0; return; }
  list.replaceChildren();
  for (const call of pending) {
    const box = html("div", null, list, { class: "waiting-call", "data-step-id": call.step_id });
    html("strong", call.step_id, box);
    html("span", call.tool ? " calls " + call.tool : "", box);
    if (call.reason) html("p", call.reason, box);
    if (call.input_schema) {
      // A question a tool asked a person, of the call with these arguments: answered with a
      // JSON object of the fields asked.
      if (call.args) html("pre", JSON.stringify(call.args, null, 2), box, { class: "asked-with" });
      html("pre", JSON.stringify(call.input_schema, null, 2), box);
      const answer = html("textarea", null, box, { rows: "4", placeholder: "{\"field\": \"value\"}", "aria-label": "answer to " + call.step_id });
      // `approve` as every waiting call's button is (it approves with the answer), worded so.
      const give = html("button", "Answer", box, { type: "button", "data-action": "approve", "data-step-id": call.step_id });
      give.onclick = () => {
        let input;
        try { input = JSON.parse(answer.value || "{}"); } catch (e) { say("the answer is not JSON: " + e.message); return; }
        act("/approve", { steps: [call.step_id], input });
      };
    } else {
      html("pre", JSON.stringify(call.args ?? {}, null, 2), box);
      // A call's arguments a person may answer when approving (`approve --input`): a JSON
      // object whose fields replace the arguments of their names. Empty: approved as shown.
      const answer = call.tool ? html("textarea", null, box, { rows: "2", placeholder: "answer (optional): {\"field\": \"value\"}", "aria-label": "answer for " + call.step_id }) : null;
      const approve = html("button", "Approve", box, { type: "button", "data-action": "approve", "data-step-id": call.step_id });
      approve.onclick = () => {
        const body = { steps: [call.step_id] };
        if (answer && answer.value.trim()) {
          try { body.input = JSON.parse(answer.value); } catch (e) { say("the answer is not JSON: " + e.message); return; }
        }
        act("/approve", body);
      };
    }
    const reason = html("input", null, box, { type: "text", placeholder: "why (for a rejection)", "aria-label": "reason for rejecting " + call.step_id });
    const reject = html("button", "Reject", box, { type: "button", "data-action": "reject", "data-step-id": call.step_id });
    reject.onclick = () => act("/reject", { steps: [call.step_id], reason: reason.value || null });
  }
  section.hidden = pending.length === 0;
}

// --- The graph: drawn once (common.js); later updates change each step's status only.
let drawn = false;
function drawGraph(graph) {
  drawPlanGraph(document.getElementById("graph"), graph, open);
  drawn = true;
}
function updateGraph(graph) {
  const svg = document.getElementById("graph");
  const groups = new Map([...svg.querySelectorAll("g.step")].map(g => [g.dataset.stepId, g]));
  for (const node of graph.nodes) {
    const g = groups.get(node.id);
    if (!g) continue;
    if (g.dataset.status !== node.status) g.setAttribute("data-status", node.status);
    const items = node.items ? ` · ${node.items.ok}/${node.items.done} items` : "";
    const text = (marks[node.status] || node.status) + items;
    const label = g.querySelector("text.status");
    if (label.textContent !== text) { label.textContent = text; g.setAttribute("aria-label", node.id + ": " + text); }
  }
}

// --- The timeline (Gantt): one row per call attempt, the critical path outlined.
function drawTimeline(timeline) {
  const svg = document.getElementById("timeline");
  svg.replaceChildren();
  const rows = timeline.bars;
  const note = document.getElementById("timeline-note");
  if (timeline.total > rows.length) note.textContent = `The first ${rows.length} of ${timeline.total} calls; the critical path is outlined and marked ★.`;
  const label = 190, width = 900, row = 16, span = Math.max(timeline.span_ms, 1);
  const critical = new Set(timeline.critical);
  svg.setAttribute("viewBox", `0 0 ${label + width + 70} ${rows.length * row + 24}`);
  svg.setAttribute("width", label + width + 70);
  const scale = width / span;
  const frame = document.createDocumentFragment();
  rows.forEach((bar, i) => {
    const y = i * row + 4;
    const onPath = critical.has(bar.step);
    const name = el("text", { x: "4", y: y + 11, class: "bar-label" }, frame);
    const call = bar.call.length > 24 ? bar.call.slice(0, 23) + "…" : bar.call;
    name.textContent = (onPath ? "★ " : "") + call + (bar.attempt > 1 ? " #" + bar.attempt : "");
    const end = bar.end_ms ?? timeline.span_ms;
    const state = bar.ok === undefined ? "running" : bar.ok ? "ok" : "failed";
    const rect = el("rect", { class: `bar ${state}${onPath ? " critical" : ""}`, x: label + bar.start_ms * scale, y, width: Math.max((end - bar.start_ms) * scale, 2), height: row - 4, "data-call": bar.call, "data-critical": onPath }, frame);
    el("title", {}, rect).textContent = `${bar.call} attempt ${bar.attempt}: ${state}, ${end - bar.start_ms} ms from ${bar.start_ms} ms`;
  });
  el("text", { x: label, y: rows.length * row + 18, class: "bar-label" }, frame).textContent = `0 – ${timeline.span_ms} ms`;
  svg.append(frame);
}


// --- A task breakdown's board: layers as columns, tasks as cards, from the run's state file.
const taskMarks = { completed: "✓ completed", failed: "✗ failed", abandoned: "✗ abandoned", in_progress: "◐ in progress", pending: "○ pending" };
function board(tasks) {
  const section = document.getElementById("tasks");
  section.hidden = false;
  const state = tasks.state || {};
  const cards = document.createDocumentFragment();
  for (const layer of tasks.layers) {
    const column = html("section", null, cards, { class: "layer", "data-layer": layer.name, "aria-label": "layer " + layer.name });
    const summary = (state.layers || {})[layer.name];
    html("h3", (layer.name || "(no layer)") + (summary ? ` · ${summary.status} · ${summary.tasks_completed}/${summary.tasks_total}` : ""), column);
    for (const task of layer.tasks) {
      const kept = (state.tasks || {})[task.id] || {};
      const status = kept.status || "pending";
      const card = html("article", null, column, { class: "task", "data-task-id": task.id, "data-status": status });
      html("strong", task.id + (task.title ? " " + task.title : ""), card);
      html("p", (taskMarks[status] || status) + ` · attempt ${kept.attempts || 0} of ${tasks.max_attempts}`, card, { class: "attempts" });
      const errors = kept.errors || [];
      if (errors.length) {
        const last = errors[errors.length - 1];
        html("p", `last failure (attempt ${last.attempt}, ${last.type}${last.step ? ", " + last.step : ""}): ${last.message || ""}`, card, { class: "failure" });
      }
      const feedback = kept.retry_feedback || [];
      if (feedback.length) {
        const last = feedback[feedback.length - 1];
        html("p", `feedback for attempt ${last.attempt}: ${last.feedback}`, card, { class: "feedback" });
      }
      for (const commit of kept.commits || []) {
        html("p", `${String(commit.hash || "").slice(0, 8)} ${commit.type} (attempt ${commit.attempt}): ${commit.message || ""}`, card, { class: "commit" });
      }
      if (kept.merged_at) html("p", "merged " + kept.merged_at, card);
    }
  }
  document.getElementById("board").replaceChildren(cards);
  const queue = document.getElementById("merge-queue");
  queue.replaceChildren();
  for (const entry of state.merge_queue || []) html("li", `${entry.task_id}: ${entry.status}`, queue, { "data-task-id": entry.task_id });
  document.getElementById("state-json").textContent = JSON.stringify(state, null, 2);
}

// --- The step panel.
let selected = null;
async function open(step) {
  selected = step;
  for (const g of document.querySelectorAll("g.step.selected")) g.classList.remove("selected");
  const g = document.querySelector(`g.step[data-step-id="${CSS.escape(step)}"]`);
  if (g) g.classList.add("selected");
  await showPanel();
  // Unless another step was selected meanwhile, or the panel closed.
  if (selected === step) document.getElementById("panel").hidden = false;
}
async function showPanel() {
  const step = selected;
  if (step === null) return;
  let detail;
  try { detail = await api(base + "/steps/" + encodeURIComponent(step)); } catch (error) { say(error.message); return; }
  // An answer for a step no longer selected is not shown.
  if (selected !== step) return;
  document.getElementById("panel-title").textContent = "Step " + step;
  document.querySelector('#panel [data-action="retry"]').dataset.stepId = step;
  const body = document.getElementById("panel-body");
  body.replaceChildren();
  const definition = detail.step || {};
  html("h3", "Call", body);
  html("p", (definition.block ? "a block" : definition.task ? "a task" : "tool " + definition.tool) + (definition.depends_on && definition.depends_on.length ? "; after " + definition.depends_on.join(", ") : ""), body);
  html("p", "arguments as the plan writes them:", body);
  html("pre", JSON.stringify(definition.args ?? {}, null, 2), body);
  for (const call of detail.waiting) {
    html("p", `waiting for a decision: ${call.step_id} would be called with`, body);
    html("pre", JSON.stringify(call.args ?? {}, null, 2), body);
  }
  if (detail.block) {
    html("h3", "Its block", body);
    html("p", "path taken: " + (detail.block.path.length ? detail.block.path.join(" → ") : "none yet"), body, { class: "block-path" });
    const nested = el("svg", { class: "block-graph", role: "group", "aria-label": "the block's nodes and transitions" }, body);
    drawPlanGraph(nested, detail.block.graph, () => {}, "node");
    nested.setAttribute("height", detail.block.graph.height + 40);
    nested.setAttribute("viewBox", `0 0 ${detail.block.graph.width} ${detail.block.graph.height + 40}`);
  }
  html("h3", "Records", body);
  if (!detail.records.length) html("p", "none yet", body);
  if (detail.records_total > detail.records.length) html("p", `the first ${detail.records.length} of ${detail.records_total}`, body);
  for (const record of detail.records) {
    const state = record.skipped ? "skipped" : record.ok ? "ok" : "failed";
    html("p", `${record.step_id}: ${state}, ${record.attempts} attempt(s), ${record.duration_ms} ms${record.reason ? " — " + record.reason : ""}`, body);
    if (record.error) html("pre", record.error.code + ": " + record.error.message, body, { class: "error" });
    const result = record.result;
    if (result && typeof result === "object" && (typeof result.stdout === "string" || typeof result.stderr === "string")) {
      html("p", "output (logs):", body);
      html("pre", (result.stdout || "") + (result.stderr ? "\n[stderr]\n" + result.stderr : ""), body);
    }
    if (result !== undefined) { html("p", "result:", body); html("pre", JSON.stringify(result, null, 2), body); }
  }
  html("h3", "Events", body);
  if (detail.events_total > detail.events.length) html("p", `the last ${detail.events.length} of ${detail.events_total}`, body);
  const table = html("table", null, body, { class: "events" });
  const head = html("tr", null, html("thead", null, table));
  for (const name of ["time", "event", "call", "attempt", "detail"]) html("th", name, head);
  const rows = html("tbody", null, table);
  for (const event of detail.events) {
    const tr = html("tr", null, rows);
    const detailText = event.error ? JSON.stringify(event.error) : event.duration_ms !== undefined ? event.duration_ms + " ms" : event.reason || "";
    for (const cell of [event.ts, event.type, event.step_id, event.attempt, detailText]) html("td", String(cell ?? ""), tr);
  }
}
function closePanel() {
  selected = null;
  document.getElementById("panel").hidden = true;
  for (const g of document.querySelectorAll("g.step.selected")) g.classList.remove("selected");
}
document.getElementById("panel-close").onclick = closePanel;
document.addEventListener("keydown", (event) => { if (event.key === "Escape") closePanel(); });

// --- Reading the run.
// A live run is read again at most every 250 ms, and never more than a third of the time: a
// read that took the server 300 ms (a run of 10,000 steps) waits 600 ms before the next. Its
// timeline, the dearest read, every 2 s while it runs.
let reading = null, again = false, lastCost = 0, timelineAt = 0;
async function refresh() {
  // One read at a time; an update asked for meanwhile is read after it.
  if (reading) { again = true; return reading; }
  const began = performance.now();
  reading = (async () => {
    try {
      // Asked for at once; each drawn as it comes, the graph first.
      const live = status === "RUNNING" && performance.now() - timelineAt < 2000;
      const reportAsked = api(base), timelineAsked = live ? null : api(base + "/timeline?limit=5000");
      const graph = await api(base + "/graph");
      if (!drawn) {
        drawGraph(graph);
        // When the page first showed the graph (`bench ui` reads it).
        performance.mark("plan-ui:first-graph");
      }
      updateGraph(graph);
      const report = await reportAsked;
      document.getElementById("title").textContent = "Run " + report.run_id + " of " + report.plan_id;
      status = report.task_status;
      document.getElementById("status").textContent = status;
      const meta = (report.records || []).find(r => r.step_id === "__meta__");
      document.getElementById("reason").textContent = meta && meta.reason ? "(" + meta.reason + ")" : "";
      toolbar(status);
      approvals(report);
      if (timelineAsked) { drawTimeline(await timelineAsked); timelineAt = performance.now(); }
      if (graph.nodes.some(n => n.kind === "task")) board(await api(base + "/tasks"));
      await showPanel();
    } catch (error) {
      say("Cannot read the run: " + error.message);
    }
  })();
  await reading;
  reading = null;
  lastCost = performance.now() - began;
  if (again) { again = false; await refresh(); }
}
// Live: each ledger event (server-sent, read with fetch so the token goes as a header) asks
// for the run again (paced as `refresh` says). A resume or retry from here follows the run anew.
let following = null;
async function follow() {
  if (following) following.abort();
  const mine = following = new AbortController();
  try {
    const answer = await fetch(base + "/events?new_only=true", { headers, signal: mine.signal });
    const reader = answer.body.getReader();
    let pending = null;
    for (;;) {
      const { done } = await reader.read();
      if (done) break;
      if (!pending) pending = setTimeout(() => { pending = null; refresh(); }, Math.max(250, 2 * lastCost));
    }
  } catch (error) {}
  if (following === mine) { following = null; refresh(); }
}
// A run that can go on elsewhere (`plan-cli resume` in a terminal) is looked at every 5 s
// while nothing is followed: once it runs again, the page follows it.
setInterval(async () => {
  if (following || !["WAITING", "STOPPED", "INTERRUPTED"].includes(status)) return;
  await refresh();
  if (status === "RUNNING" && !following) follow();
}, 5000);
refresh().then(follow);
