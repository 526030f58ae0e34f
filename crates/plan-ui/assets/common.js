// What every page of the dashboard shares: the token, requests to the API, making elements,
// and drawing a plan's graph.

// The token comes in the URL once (the printed URL, or a link); it is kept for this tab only
// and taken out of the address bar.
const params = new URLSearchParams(location.search);
if (params.get("token")) {
  sessionStorage.setItem("plan-ui-token", params.get("token"));
  history.replaceState(null, "", location.pathname);
}
const token = sessionStorage.getItem("plan-ui-token") || "";
const headers = { Authorization: "Bearer " + token };
const svgNS = "http://www.w3.org/2000/svg";
// Status in text and in shape as well as colour.
const marks = { pending: "○ pending", running: "◐ running", ok: "✓ ok", failed: "✗ failed", skipped: "– skipped", waiting: "‖ waiting", blocked: "⊘ blocked" };

// An SVG element with `attributes`, added to `parent`.
function el(name, attributes, parent) {
  const node = document.createElementNS(svgNS, name);
  for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, value);
  if (parent) parent.append(node);
  return node;
}

// An HTML element holding `text` (as text, never as markup), added to `parent`.
function html(name, text, parent, attributes = {}) {
  const node = document.createElement(name);
  if (text !== undefined && text !== null) node.textContent = text;
  for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, value);
  if (parent) parent.append(node);
  return node;
}

// GET `path` (or POST `body` to it) with the token: its JSON, or an Error with the server's words.
async function api(path, body) {
  const options = body === undefined ? { headers } : { method: "POST", headers: { ...headers, "Content-Type": "application/json" }, body: JSON.stringify(body) };
  const answer = await fetch(path, options);
  const text = await answer.text();
  // The server's errors are JSON (`{"error": …}`); its framework's (413, 415, 422) plain text.
  let value = null;
  try { value = text ? JSON.parse(text) : null; } catch (error) { if (answer.ok) throw error; }
  if (!answer.ok) throw new Error((value && value.error) || text || answer.statusText);
  return value;
}

// Draws `graph` (the API's laid-out graph) into `svg`: an arrow per dependency (a block's
// transitions with their condition, the ones the run took drawn heavier and marked "taken"),
// a node per step (`g.step` with `data-step-id`, or for a block's nodes `g.node` with
// `data-node`; `data-status`, its status written in it), each selected by a click or by Enter
// and Space when it has the focus (`select(id)`).
function drawPlanGraph(svg, graph, select, kind = "step") {
  svg.replaceChildren();
  svg.setAttribute("viewBox", `0 0 ${graph.width} ${graph.height}`);
  svg.setAttribute("width", graph.width);
  const defs = el("defs", {}, svg);
  const marker = el("marker", { id: "arrow", viewBox: "0 0 10 10", refX: "10", refY: "5", markerWidth: "6", markerHeight: "6", orient: "auto" }, defs);
  el("path", { d: "M0,0 L10,5 L0,10 z", fill: "#999" }, marker);
  const at = new Map(graph.nodes.map(n => [n.id, n]));
  const edges = document.createDocumentFragment();
  for (const edge of graph.edges) {
    const a = at.get(edge.from), b = at.get(edge.to);
    const x1 = a.x + a.width, y1 = a.y + a.height / 2, x2 = b.x, y2 = b.y + b.height / 2, mid = (x1 + x2) / 2;
    const back = x2 <= x1;
    // A transition back (a loop) bends below its nodes.
    const d = back
      ? `M${a.x + a.width / 2},${a.y + a.height} C${a.x + a.width / 2},${a.y + a.height + 30} ${b.x + b.width / 2},${b.y + b.height + 30} ${b.x + b.width / 2},${b.y + b.height}`
      : `M${x1},${y1} C${mid},${y1} ${mid},${y2} ${x2},${y2}`;
    el("path", { class: "edge" + (edge.taken ? " taken" : ""), d, "data-from": edge.from, "data-to": edge.to }, edges);
    if (edge.label || edge.taken) {
      const lx = back ? (a.x + b.x + b.width) / 2 : mid, ly = back ? Math.max(a.y, b.y) + a.height + 26 : (y1 + y2) / 2 - 4;
      el("text", { class: "edge-label", x: lx, y: ly, "text-anchor": "middle" }, edges).textContent = [edge.label, edge.taken ? "✔ taken" : ""].filter(Boolean).join(" ");
    }
  }
  svg.append(edges);
  const nodes = document.createDocumentFragment();
  for (const node of graph.nodes) {
    const id = kind === "step" ? { "data-step-id": node.id } : { "data-node": node.id };
    const g = el("g", { class: kind, ...id, "data-status": node.status, transform: `translate(${node.x},${node.y})`, tabindex: "0", role: "button", "aria-label": node.id + ": " + (marks[node.status] || node.status) }, nodes);
    el("rect", { width: node.width, height: node.height, rx: "6" }, g);
    const name = el("text", { x: "8", y: "17" }, g);
    name.textContent = node.id.length > 20 ? node.id.slice(0, 19) + "…" : node.id;
    el("title", {}, g).textContent = node.id + " (" + node.kind + ")";
    el("text", { x: "8", y: "35", class: "status" }, g).textContent = marks[node.status] || node.status;
    g.addEventListener("click", () => select(node.id));
    g.addEventListener("keydown", (event) => { if (event.key === "Enter" || event.key === " ") { event.preventDefault(); select(node.id); } });
  }
  svg.append(nodes);
}
