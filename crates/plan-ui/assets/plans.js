// The plans registry's page: each stored plan, its graph, and what validating it finds at
// its line.
function say(message) { document.getElementById("error").textContent = message; }
async function load() {
  try {
    const plans = await api("/api/plans");
    const rows = document.getElementById("plans");
    rows.replaceChildren();
    for (const plan of plans) {
      const row = html("tr", null, rows, { "data-plan-id": plan.plan_id });
      const link = html("a", plan.plan_id, html("td", null, row), { href: "#" + encodeURIComponent(plan.plan_id) });
      link.onclick = (event) => { event.preventDefault(); show(plan.plan_id); };
      html("td", plan.title || "", row);
      html("td", plan.author || "", row);
      html("td", plan.added_at || "", row);
    }
    if (!plans.length) html("td", "No stored plans: add one with `plan-cli plan add FILE`.", html("tr", null, rows), { colspan: "4" });
  } catch (error) { say("Cannot read the plans: " + error.message); }
}
let shown = null;
async function show(planId) {
  shown = planId;
  let detail;
  try { detail = await api("/api/plans/" + encodeURIComponent(planId)); } catch (error) { say(error.message); return; }
  // Another plan was selected meanwhile: its answer is the one shown.
  if (shown !== planId) return;
  say("");
  for (const row of document.querySelectorAll("#plans tr")) row.classList.toggle("selected", row.dataset.planId === planId);
  document.getElementById("plan").hidden = false;
  document.getElementById("plan-title").textContent = "Plan " + planId + (detail.plan.title ? ": " + detail.plan.title : "");
  const validation = detail.validation;
  const verdict = document.getElementById("verdict");
  verdict.dataset.valid = String(validation.valid);
  verdict.textContent = validation.valid
    ? `✓ valid: ${validation.steps} steps` + (validation.needs_approval && validation.needs_approval.length ? `; waits for approval of ${validation.needs_approval.join(", ")}` : "")
    : `✗ not valid: ${validation.errors.length} error(s)`;
  const issues = [...validation.errors, ...(validation.warnings || [])];
  const list = document.getElementById("issues");
  list.replaceChildren();
  for (const issue of issues) {
    html("li", `${issue.severity} ${issue.code}` + (issue.line ? ` at line ${issue.line}, column ${issue.column}` : "") + `: ${issue.message}` + (issue.help ? ` (${issue.help})` : ""), list, { "data-code": issue.code });
  }
  const svg = document.getElementById("graph");
  // An invalid plan has no graph: the last one shown goes.
  svg.replaceChildren();
  svg.toggleAttribute("hidden", !detail.graph);
  // A step selected in the graph: its line in the text (the one that gives its id).
  if (detail.graph) drawPlanGraph(svg, detail.graph, (id) => {
    const names = new RegExp(`(^|[^\\w-])"?id"?\\s*:\\s*["']?${id.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}["']?\\s*(,|$|})`);
    const line = [...document.querySelectorAll("#source li")].find(li => names.test(li.firstChild ? li.firstChild.textContent : ""));
    for (const li of document.querySelectorAll("#source li.selected")) li.classList.remove("selected");
    if (line) { line.classList.add("selected"); line.scrollIntoView({ block: "center" }); }
  });
  // The text, a line per item; each issue under its line, in words (not colour alone).
  const source = document.getElementById("source");
  source.replaceChildren();
  const lines = detail.source.split("\n");
  lines.forEach((text, i) => {
    const line = html("li", text, source, { "data-line": i + 1 });
    for (const issue of issues.filter(issue => issue.line === i + 1)) {
      line.classList.add("issue");
      if (issue.severity === "warning") line.classList.add("warning");
      html("span", `${" ".repeat(Math.max((issue.column || 1) - 1, 0))}^ ${issue.severity}: ${issue.message}` + (issue.label ? ` (${issue.label})` : ""), line, { class: "diagnostic", "data-code": issue.code });
    }
  });
}
load().then(() => {
  const wanted = decodeURIComponent(location.hash.slice(1));
  if (wanted) show(wanted);
});
