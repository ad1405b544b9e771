// The project page: its live stream (timeline, graph, live output), the agent graph and the cost
// chart. What agents wrote is only ever set as textContent or as cytoscape labels (drawn on a
// canvas): never parsed as HTML.
(function () {
  "use strict";
  const root = document.getElementById("project");
  if (!root) return;
  const projectId = root.dataset.project;
  const base = "/ui/projects/" + encodeURIComponent(projectId);
  const timeline = document.getElementById("timeline");
  const streamState = document.getElementById("stream-state");
  const CHATTY = new Set(["agent_output_chunk", "agent_tool_call", "tool_executed"]);
  const LIFECYCLE = /^(project_|iteration_|task_|budget_|subagent_|prompt_|circuit_|api_key|no_workers|workers_back)/;
  const live = { lastSeq: 0, shown: 0, repeated: 0, source: null, connects: 0 };
  window.raasLive = live; // read by the browser tests: what the page has shown
  // What the graph draws, for the browser tests: each node's id, kind and status.
  live.nodes = () => (cy ? cy.nodes().map((n) => ({ id: n.id(), kind: n.data("kind"), status: n.data("status") })) : []);
  live.cy = () => cy; // the graph itself: its classes (a working agent's pulse) and transient tool nodes
  let selectedAgent = null;
  let cy = null;

  function cell(row, text) {
    const td = document.createElement("td");
    td.textContent = text == null ? "" : String(text);
    row.appendChild(td);
    return td;
  }

  function summary(ev) {
    const d = ev.data || {};
    switch (ev.type) {
      case "agent_output_chunk": return d.text;
      case "agent_tool_call": return d.tool + " " + JSON.stringify(d.input).slice(0, 200);
      case "tool_executed": return d.tool + (d.exit_code != null ? " exit " + d.exit_code : "") + (d.is_error ? " (error)" : "") + ": " + String(d.output || "").slice(0, 200);
      case "llm_retry": return "retry: " + d.reason + (d.delay_s != null ? " after " + d.delay_s + " s" : "");
      case "rate_limit_wait": return "waited " + d.wait_s + " s for " + d.limit;
      case "iteration_complete": return "iteration " + d.number + (d.completed_task ? " completed the task" : "") + (d.summary ? ": " + d.summary : "");
      case "iteration_error": return "iteration " + d.number + ": " + d.error;
      case "iteration_started": return "iteration " + d.number + (d.attempt > 1 ? ", attempt " + d.attempt : "") + " on " + d.worker;
      case "project_created": return "created " + d.name;
      case "project_started": return "started (" + d.workflow + " workflow)";
      case "project_paused": return "paused: " + (d.message || d.reason);
      case "project_resumed": return "resumed by " + d.by;
      case "project_stopped": return "stopped: " + d.reason;
      case "project_failed": return "failed: " + d.reason + (d.task ? " (task " + d.task + ")" : "");
      case "task_validated": return "task " + d.task + (d.passed ? " passed" : " failed") + " its check";
      case "subagent_spawned": return "spawned " + d.category + (d.parallel ? " (parallel)" : "");
      case "budget_changed": return "budget limit set to $" + d.limit_usd;
      case "budget_warning": case "budget_exceeded": return "spent $" + d.spent_usd + " of $" + d.limit_usd;
      default: return fields(d);
    }
  }

  // An event without a sentence of its own: its fields as "name value", not raw JSON.
  function fields(d) {
    return Object.entries(d)
      .filter(([, v]) => v != null && v !== "")
      .map(([k, v]) => k.replace(/_/g, " ") + " " + (typeof v === "object" ? JSON.stringify(v) : String(v)))
      .join(" · ")
      .slice(0, 300);
  }

  function rowClass(ev) {
    if (ev.type === "tool_executed") return ev.data && ev.data.is_error ? "tool-error" : "tool-ok";
    if (ev.type === "llm_retry") return "retry";
    if (ev.type === "rate_limit_wait") return "wait";
    if (LIFECYCLE.test(ev.type)) return "lifecycle";
    return "chatter";
  }

  function addRow(ev) {
    const tr = document.createElement("tr");
    tr.dataset.seq = String(ev.seq);
    tr.className = "event " + rowClass(ev) + " type-" + ev.type;
    cell(tr, ev.seq);
    cell(tr, new Date(ev.ts).toLocaleTimeString());
    cell(tr, ev.type);
    const agentCell = cell(tr, "");
    if (ev.agent_id) {
      const button = document.createElement("button");
      button.type = "button";
      button.className = "agent-link";
      button.dataset.agent = ev.agent_id;
      button.textContent = ev.agent_id.slice(0, 8);
      agentCell.appendChild(button);
    }
    cell(tr, summary(ev));
    timeline.appendChild(tr);
  }

  function appendOutput(ev) {
    const pre = document.getElementById("live-output");
    if (!pre || pre.dataset.agent !== ev.agent_id) return;
    pre.textContent = (pre.textContent + (ev.data.text || "")).slice(-20000);
  }

  let changedTimer = null;
  let graphTimer = null;
  function soon(kind) {
    if (kind === "graph" && !graphTimer) graphTimer = setTimeout(() => { graphTimer = null; loadGraph(); }, 250);
    if (kind === "page" && !changedTimer) {
      changedTimer = setTimeout(() => {
        changedTimer = null;
        document.body.dispatchEvent(new Event("project-changed"));
        document.body.dispatchEvent(new Event("costs-changed"));
      }, 400);
    }
  }

  function handle(batch) {
    for (const ev of batch) {
      if (ev.seq <= live.lastSeq) { live.repeated += 1; continue; } // a resumed stream should start after it
      live.lastSeq = ev.seq;
      live.shown += 1;
      addRow(ev);
      if (ev.type === "agent_output_chunk") appendOutput(ev);
      if (ev.agent_id && !drawnWorking(ev.agent_id) && CHATTY.has(ev.type)) soon("graph"); // it works: redraw it so
      if (ev.type === "agent_tool_call") showToolCall(ev);
      if (ev.type === "tool_executed") endToolCall(ev);
      if (!CHATTY.has(ev.type)) {
        soon("graph");
        soon("page");
      }
    }
  }

  function connect() {
    live.connects += 1;
    const source = new EventSource(base + "/events?after=" + live.lastSeq);
    live.source = source;
    source.addEventListener("open", () => { streamState.textContent = "live"; });
    source.addEventListener("events", (message) => handle(JSON.parse(message.data)));
    source.addEventListener("error", () => {
      streamState.textContent = "reconnecting…";
      // The browser retries by itself (sending Last-Event-ID); if it gave up, start again after
      // the last seq shown.
      if (source.readyState === EventSource.CLOSED && live.source === source) setTimeout(connect, 1000);
    });
  }

  // --- the graph ---------------------------------------------------------------------------
  const STATUS_COLOURS = {
    pending: "#c9ced8", ready: "#c9ced8", running: "#3d8bfd", completed: "#2fa84f", failed: "#d64545",
    idle: "#c9ced8", working: "#3d8bfd", blocked: "#e0a000", error: "#d64545",
  };

  function elementsOf(graph) {
    const elements = [];
    const stats = graph.task_stats || {};
    graph.waves.forEach((wave, index) => {
      for (const task of wave) {
        const s = stats[task.key] || { iterations: 0, attempts: 0, cost_usd: "0" };
        elements.push({ group: "nodes", data: {
          id: "t:" + task.key, kind: "task", status: task.status,
          label: task.key + " · " + task.status + "\nwave " + index + " · it " + s.iterations + " · att " + s.attempts + " · $" + Number(s.cost_usd).toFixed(4),
        } });
        for (const dep of task.depends_on) {
          elements.push({ group: "edges", data: { id: "d:" + dep + ">" + task.key, source: "t:" + dep, target: "t:" + task.key } });
        }
      }
    });
    for (const agent of graph.agents) {
      elements.push({ group: "nodes", data: {
        id: "a:" + agent.id, kind: "agent", agent: agent.id, status: agent.status, category: agent.category,
        label: agent.category + " · " + agent.status + "\nit " + agent.iterations + " · $" + Number(agent.cost_usd).toFixed(4),
      } });
      if (agent.type === "root" && agent.task) {
        elements.push({ group: "edges", data: { id: "w:" + agent.id, source: "t:" + agent.task, target: "a:" + agent.id } });
      }
    }
    for (const edge of graph.edges) {
      elements.push({ group: "edges", data: { id: "p:" + edge.child, source: "a:" + edge.parent, target: "a:" + edge.child } });
    }
    return elements;
  }

  function renderAgentList(graph) {
    const list = document.getElementById("agent-list");
    const items = [];
    for (const agent of graph.agents) {
      const li = document.createElement("li");
      const button = document.createElement("button");
      button.type = "button";
      button.className = "agent-link agent-" + agent.type + (agent.status === "working" ? " working" : "");
      button.dataset.agent = agent.id;
      button.dataset.status = agent.status;
      button.dataset.category = agent.category;
      button.textContent = agent.category + " " + agent.id.slice(0, 8) + " (" + agent.status + ")";
      li.appendChild(button);
      items.push(li);
    }
    list.replaceChildren(...items);
  }

  function makeGraph() {
    if (typeof cytoscape === "undefined") return null;
    const graph = cytoscape({
      container: document.getElementById("graph"),
      wheelSensitivity: 0.3,
      style: [
        { selector: "node", style: { label: "data(label)", "text-wrap": "wrap", "font-size": 9, "text-valign": "bottom", "background-color": (n) => STATUS_COLOURS[n.data("status")] || "#c9ced8", width: 22, height: 22 } },
        { selector: "node[kind = 'task']", style: { shape: "round-rectangle", width: 34, height: 24 } },
        { selector: "node[kind = 'tool']", style: { shape: "diamond", width: 14, height: 14, "background-color": "#9b6bdf", "font-size": 9, color: "#5a3a9a" } },
        { selector: "node[kind = 'tool'][status = 'ok']", style: { "background-color": "#2fa84f" } },
        { selector: "node[kind = 'tool'][status = 'error']", style: { "background-color": "#d64545" } },
        { selector: "edge[kind = 'tool']", style: { "line-style": "dashed", "line-color": "#b9a3e3", "target-arrow-color": "#b9a3e3" } },
        { selector: "node[status = 'working']", style: { "border-width": 2, "border-color": "#3d8bfd", "transition-property": "border-width", "transition-duration": 500 } },
        { selector: "node.pulse", style: { "border-width": 7, "border-color": "#9cc5ff" } },
        { selector: "edge", style: { width: 1.5, "curve-style": "bezier", "target-arrow-shape": "triangle", "line-color": "#aab1bf", "target-arrow-color": "#aab1bf" } },
      ],
    });
    graph.on("tap", "node[kind = 'agent']", (event) => inspect(event.target.data("agent"))); // click a node
    return graph;
  }

  function layout() {
    cy.layout({ name: "dagre", rankDir: "LR", nodeSep: 18, rankSep: 60, animate: false }).run();
  }

  async function loadGraph() {
    const answer = await fetch(base + "/graph.json", { credentials: "same-origin" });
    if (!answer.ok) return;
    const graph = await answer.json();
    renderAgentList(graph);
    if (!cy) cy = makeGraph();
    if (!cy) return;
    let added = false;
    for (const element of elementsOf(graph)) {
      const existing = cy.getElementById(element.data.id);
      if (existing.nonempty()) existing.data(element.data);
      else { cy.add(element); added = true; }
    }
    if (added) layout();
  }

  function drawnWorking(agentId) {
    if (!cy) return true; // nothing drawn yet: the first load will draw it
    const node = cy.getElementById("a:" + agentId);
    return node.empty() || node.data("status") === "working";
  }

  // A tool call shows as a small node on its agent while it runs, coloured by its outcome, then
  // goes (the seed showed each briefly as a node).
  function showToolCall(ev) {
    if (!cy || !ev.agent_id) return;
    const agentNode = cy.getElementById("a:" + ev.agent_id);
    if (agentNode.empty()) return;
    const id = "tc:" + (ev.data.tool_use_id || ev.seq);
    if (cy.getElementById(id).nonempty()) return;
    const position = agentNode.position();
    cy.add([
      { group: "nodes", data: { id: id, kind: "tool", agent: ev.agent_id, status: "running", label: String(ev.data.tool) }, position: { x: position.x + 30, y: position.y - 25 } },
      { group: "edges", data: { id: id + ":e", kind: "tool", source: "a:" + ev.agent_id, target: id } },
    ]);
    setTimeout(() => cy.remove(cy.getElementById(id)), 6000);
  }

  function endToolCall(ev) {
    if (!cy || !ev.data.tool_use_id) return;
    const id = "tc:" + ev.data.tool_use_id;
    cy.getElementById(id).data("status", ev.data.is_error ? "error" : "ok");
    setTimeout(() => cy && cy.remove(cy.getElementById(id)), 1500);
  }

  setInterval(() => { // working agents breathe
    if (!cy) return;
    cy.nodes("[status = 'working']").toggleClass("pulse");
    cy.nodes("[status != 'working']").removeClass("pulse");
  }, 600);

  // --- the inspector ----------------------------------------------------------------------
  function inspect(agentId) {
    selectedAgent = agentId;
    htmx.ajax("GET", base + "/agents/" + encodeURIComponent(agentId) + "?tab=overview", { target: "#inspector", swap: "innerHTML" });
  }

  // A new action's answer replaces the last one's: an old "paused" beside Pause would mislead.
  document.body.addEventListener("htmx:beforeRequest", (event) => {
    if (!event.detail.elt.closest || !event.detail.elt.closest("#actions")) return;
    for (const message of document.querySelectorAll("#actions .message-slot")) message.replaceChildren();
  });

  document.addEventListener("click", (event) => {
    const target = event.target.closest ? event.target.closest(".agent-link") : null;
    if (target && target.dataset.agent) inspect(target.dataset.agent);
  });

  // --- the cost chart ---------------------------------------------------------------------
  let chart = null;
  function timeRange(u) {
    const t = u.data[0];
    const first = t.length ? t[0] : Date.now() / 1000;
    const last = t.length ? t[t.length - 1] : first;
    return last - first < 60 ? [first - 30, last + 30] : [first, last];
  }
  live.chartRange = () => (chart ? [chart.scales.x.min, chart.scales.x.max] : null); // for the tests
  async function drawCosts() {
    const box = document.getElementById("cost-chart");
    if (!box || typeof uPlot === "undefined") return;
    const answer = await fetch(box.dataset.series, { credentials: "same-origin" });
    if (!answer.ok) return;
    const series = await answer.json();
    box.dataset.points = String(series.t.length);
    box.dataset.last = series.usd.length ? String(series.usd[series.usd.length - 1]) : "0";
    if (chart) chart.destroy();
    chart = new uPlot({
      width: Math.max(320, box.clientWidth || 600), height: 200,
      // One point (or none) would stretch the time axis over years (uPlot widens a lone point by
      // a day in milliseconds, ours are seconds): keep a minute around it, read from the data.
      scales: { x: { time: true, range: timeRange } },
      series: [{}, { label: "cost (USD)", stroke: "#3d8bfd", width: 2, points: { show: true } }],
      axes: [{}, { size: 70, values: (_u, ticks) => ticks.map((v) => "$" + v.toFixed(4)) }],
    }, [series.t, series.usd], box);
  }

  document.body.addEventListener("htmx:afterSwap", (event) => {
    if (event.detail.target && event.detail.target.id === "costs") drawCosts();
    if (event.detail.target && event.detail.target.id === "inspector") {
      const body = document.getElementById("inspector-body");
      if (body) selectedAgent = body.dataset.agent;
    }
  });

  loadGraph();
  connect();
})();
