// Test helper for tests/test_graph_mermaid.py: reads a JSON array of Mermaid
// texts on stdin and prints, for each, what Mermaid itself makes of it:
//   {"problem": null | "<why Mermaid refused it>",
//    "nodes": ["<label as displayed>", ...],
//    "edges": [["<from label>", "<to label>", "<edge label>", "<stroke>"], ...],
//    "subgraphs": [["<title>", ["<label of a member>", ...]], ...]}
import { JSDOM } from "jsdom";

// Mermaid sanitizes labels with DOMPurify, which needs a browser window.
const { window } = new JSDOM("<!doctype html><html><body></body></html>");
globalThis.window = window;
globalThis.document = window.document;

const { default: mermaid } = await import("mermaid");
mermaid.initialize({ startOnLoad: false });

// Mermaid keeps entity codes ("#quot;", "#35;") as placeholders until it draws;
// undo them as it does, then let the DOM decode the HTML entities.
function displayed(text) {
  const html = String(text ?? "")
    .replace(/ﬂ°°/g, "&#")
    .replace(/ﬂ°/g, "&")
    .replace(/¶ß/g, ";");
  const box = window.document.createElement("textarea");
  box.innerHTML = html;
  return box.value;
}

async function inspect(text) {
  try {
    const parsed = await mermaid.parse(text);
    if (!parsed || parsed.diagramType !== "flowchart-v2") {
      return { problem: `read as ${parsed && parsed.diagramType}, not a flowchart` };
    }
    const diagram = await mermaid.mermaidAPI.getDiagramFromText(text);
    const vertices = diagram.db.getVertices();
    const label = (id) => displayed(vertices.get(id)?.text ?? id);
    return {
      problem: null,
      nodes: [...vertices.keys()].map(label),
      edges: diagram.db.getEdges().map((e) => [label(e.start), label(e.end), displayed(e.text), e.stroke]),
      subgraphs: diagram.db.getSubGraphs().map((s) => [displayed(s.title), s.nodes.map(label).sort()]),
    };
  } catch (error) {
    return { problem: String(error && error.message ? error.message : error) };
  }
}

let input = "";
for await (const chunk of process.stdin) input += chunk;
const results = [];
for (const text of JSON.parse(input)) results.push(await inspect(text));
process.stdout.write(JSON.stringify(results));
