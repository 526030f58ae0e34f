// The runs page: every run of the ledger, filtered by status and plan, read again every 2 s.
const form = document.getElementById("filter");
function took(ms) {
  if (ms == null) return "";
  return ms < 1000 ? ms + " ms" : (ms / 1000).toFixed(1) + " s";
}
let lastSeen = null;
// How many steps ended each way, as of the run's last end or halt.
function steps(counts) {
  if (!counts) return "";
  return [`${counts.ok} ok`, counts.failed ? `${counts.failed} failed` : "", counts.skipped ? `${counts.skipped} skipped` : ""].filter(Boolean).join(" · ");
}
async function load() {
  const query = new URLSearchParams();
  for (const [key, value] of new FormData(form)) if (value) query.set(key, value);
  try {
    const body = await api("/api/runs?" + query);
    // Rows are made again only when the runs changed (the focus stays where it is).
    const seen = JSON.stringify(body);
    if (seen === lastSeen) return;
    lastSeen = seen;
    const rows = document.getElementById("runs");
    rows.replaceChildren(...body.map(run => {
      const row = document.createElement("tr");
      row.dataset.runId = run.run_id;
      row.dataset.status = run.task_status;
      for (const [text, cls] of [[run.run_id, "run"], [run.task_status, "status"], [run.plan_id], [run.started_at], [took(run.duration_ms)], [steps(run.counts), "steps"]]) {
        const cell = document.createElement("td");
        if (cls === "run") {
          const link = document.createElement("a");
          link.href = "/runs/" + encodeURIComponent(text);
          link.textContent = text;
          cell.append(link);
        } else {
          cell.textContent = text ?? "";
        }
        if (cls) cell.className = cls;
        row.append(cell);
      }
      return row;
    }));
    document.getElementById("error").textContent = "";
  } catch (error) {
    document.getElementById("error").textContent = "Cannot read the runs: " + error.message;
  }
}
form.addEventListener("input", load);
load();
setInterval(load, 2000);
