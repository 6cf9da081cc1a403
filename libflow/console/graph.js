// A workflow's graph drawn as SVG: nodes in layers from the event nodes down, edges as curves.

const SVG = "http://www.w3.org/2000/svg";
const NODE_W = 180;
const NODE_H = 50;
const GAP_X = 24;
const GAP_Y = 52;
const PAD = 12;

function s(tag, attrs = {}, ...children) {
  const element = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) element.setAttribute(name, value);
  for (const child of children) element.append(child);
  return element;
}

const clip = (text, max) => (text.length > max ? `${text.slice(0, max - 1)}…` : text);

// Each node's layer: the longest path to it from a node nothing points at.
function layers(nodes, edges) {
  const layer = new Map(nodes.map((n) => [n.id, 0]));
  const incoming = new Map(nodes.map((n) => [n.id, 0]));
  for (const edge of edges) incoming.set(edge.to, incoming.get(edge.to) + 1);
  const ready = nodes.filter((n) => incoming.get(n.id) === 0).map((n) => n.id);
  while (ready.length) {
    const id = ready.shift();
    for (const edge of edges.filter((e) => e.from === id)) {
      layer.set(edge.to, Math.max(layer.get(edge.to), layer.get(id) + 1));
      incoming.set(edge.to, incoming.get(edge.to) - 1);
      if (incoming.get(edge.to) === 0) ready.push(edge.to);
    }
  }
  return layer;
}

export function drawGraph(definition, title = "Workflow graph") {
  const nodes = definition?.nodes || [];
  const known = new Set(nodes.map((n) => n.id));
  const edges = (definition?.edges || []).filter((e) => known.has(e.from) && known.has(e.to));
  const layer = layers(nodes, edges);
  const rows = [];
  for (const node of nodes) (rows[layer.get(node.id)] ||= []).push(node);
  // Order each row by where its predecessors sit, so edges cross less.
  const column = new Map();
  rows.forEach((row, depth) => {
    if (depth > 0) {
      const weight = (node) => {
        const from = edges.filter((e) => e.to === node.id).map((e) => column.get(e.from)).filter((x) => x !== undefined);
        return from.length ? from.reduce((a, b) => a + b, 0) / from.length : Number.MAX_SAFE_INTEGER;
      };
      row.sort((a, b) => weight(a) - weight(b));
    }
    row.forEach((node, i) => column.set(node.id, i));
  });
  const widest = Math.max(1, ...rows.map((row) => row?.length || 0));
  const width = PAD * 2 + widest * NODE_W + (widest - 1) * GAP_X;
  const height = PAD * 2 + rows.length * NODE_H + Math.max(0, rows.length - 1) * GAP_Y;
  const position = new Map();
  rows.forEach((row, depth) => {
    const rowWidth = row.length * NODE_W + (row.length - 1) * GAP_X;
    row.forEach((node, i) => position.set(node.id, {
      x: (width - rowWidth) / 2 + i * (NODE_W + GAP_X),
      y: PAD + depth * (NODE_H + GAP_Y),
    }));
  });

  // "when" may be the string or the JSON boolean: false is a branch too, not "always".
  const branch = (edge) => (edge.when === undefined || edge.when === null ? "" : String(edge.when));
  const description = `${nodes.length} nodes: ${nodes.map((n) => `${n.id} (${n.type})`).join(", ")}. `
    + `Edges: ${edges.map((e) => `${e.from} to ${e.to}${branch(e) ? ` when ${branch(e)}` : ""}`).join(", ") || "none"}.`;
  const svg = s("svg", {
    class: "graph", viewBox: `0 0 ${width} ${Math.max(height, NODE_H + PAD * 2)}`,
    width, height: Math.max(height, NODE_H + PAD * 2), role: "img", "aria-labelledby": "graph-title graph-desc",
  },
  s("title", { id: "graph-title" }, title),
  s("desc", { id: "graph-desc" }, description),
  s("defs", {}, s("marker", {
    id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse",
  }, s("path", { d: "M 0 0 L 10 5 L 0 10 z", class: "arrowhead" }))));

  for (const edge of edges) {
    const a = position.get(edge.from);
    const b = position.get(edge.to);
    const [x1, y1, x2, y2] = [a.x + NODE_W / 2, a.y + NODE_H, b.x + NODE_W / 2, b.y];
    const bend = Math.max(24, (y2 - y1) / 2);
    svg.append(s("path", {
      class: `edge${branch(edge) ? ` when-${branch(edge)}` : ""}`,
      d: `M ${x1} ${y1} C ${x1} ${y1 + bend}, ${x2} ${y2 - bend}, ${x2} ${y2}`,
      "marker-end": "url(#arrow)",
    }));
    if (branch(edge)) {
      svg.append(s("text", { class: "edge-label", x: (x1 + x2) / 2 + 4, y: (y1 + y2) / 2 }, branch(edge)));
    }
  }
  for (const node of nodes) {
    const { x, y } = position.get(node.id);
    svg.append(s("g", { class: `node type-${node.type}`, "data-node": node.id, transform: `translate(${x} ${y})` },
      s("title", {}, `${node.id} (${node.type})`),
      s("rect", { width: NODE_W, height: NODE_H, rx: 8 }),
      s("text", { class: "node-id", x: 10, y: 20 }, clip(node.id, 15)),
      s("text", { class: "node-type", x: 10, y: 38 }, clip(node.type + nodeHint(node), 24)),
      s("text", { class: "node-time", x: NODE_W - 8, y: 19, "text-anchor": "end" }, "")));
  }
  return svg;
}

function nodeHint(node) {
  if (node.type === "event") return ` · ${node.event}`;
  if (node.type === "input" || node.type === "set_output") return ` · ${node.name}`;
  return "";
}

// A node's state in a run shown on the graph (running, done, failed, cancelled, skipped)
// and its time.
export function setNodeState(svg, nodeId, state, label = "") {
  const group = [...svg.querySelectorAll("g.node")].find((g) => g.dataset.node === nodeId);
  if (!group) return;
  group.classList.remove("running", "done", "failed", "cancelled", "skipped");
  if (state) group.classList.add(state);
  group.querySelector(".node-time").textContent = label;
}

export function clearStates(svg) {
  for (const group of svg.querySelectorAll("g.node")) setNodeState(svg, group.dataset.node, null);
}
