// The graph, drawn from the store (never by replaying events): tasks and agents laid out left to
// right in the direction the work flows (a task → its research → its builder → its validator;
// a dependency → the task that waits for it), labels sized into the layout so they never
// overlap. Tool calls made while the page is open show briefly on their agent (unlabelled, so
// they never cover an agent's label); a replayed history never animates.
(function () {
  "use strict";
  const Raas = (window.Raas = window.Raas || {});
  const fmt = Raas.fmt;

  function colours() {
    const css = getComputedStyle(document.documentElement);
    const get = (name, fallback) => (css.getPropertyValue(name) || fallback).trim();
    return {
      waiting: get("--st-waiting", "#b8c7e0"), idle: get("--st-idle", "#c9ced8"), ready: get("--st-idle", "#c9ced8"),
      pending: get("--st-idle", "#c9ced8"), running: get("--st-working", "#3d8bfd"), working: get("--st-working", "#3d8bfd"),
      blocked: get("--st-blocked", "#e0a000"), completed: get("--st-completed", "#2fa84f"), failed: get("--st-failed", "#d64545"),
      error: get("--st-failed", "#d64545"), text: get("--fg", "#1d2330"), edge: get("--edge", "#aab1bf"),
      selected: get("--accent", "#7a4bc2"), bg: get("--panel", "#fff"),
    };
  }

  // How long a task has run: from its first agent's start to its last one's end (so far, if
  // one still runs).
  function taskDuration(state, task) {
    const agents = state.agents.filter((a) => a.task === task.key && a.started_at);
    if (!agents.length) return "";
    const start = Math.min(...agents.map((a) => Date.parse(a.started_at)));
    const open = task.status === "running" || agents.some((a) => !a.finished_at);
    const end = open ? Date.now() : Math.max(...agents.map((a) => Date.parse(a.finished_at)));
    return fmt.duration((end - start) / 1000) + (open ? " so far" : "");
  }

  // Elements from the store's state: ids, kinds and statuses as before (tests read them).
  function elementsOf(store, state) {
    const elements = [];
    for (const task of state.tasks) {
      const shown = store.taskShown(task);
      const took = taskDuration(state, task);
      elements.push({ group: "nodes", data: { id: "t:" + task.key, kind: "task", status: task.status, shown, label: task.key + "\n" + shown + (took ? " · " + took : "") } });
      for (const dep of task.depends_on) {
        elements.push({ group: "edges", data: { id: "d:" + dep + ">" + task.key, source: "t:" + dep, target: "t:" + task.key } });
      }
    }
    const byTask = new Map();
    for (const agent of state.agents) {
      const shown = store.agentShown(agent);
      const it = agent.iterations === 1 ? "1 iteration" : agent.iterations + " iterations";
      elements.push({ group: "nodes", data: {
        id: "a:" + agent.id, kind: "agent", agent: agent.id, status: agent.status, shown, category: agent.category,
        label: agent.category + " " + fmt.shortId(agent.id) + "\n" + shown + " · " + it + " · " + fmt.money(agent.cost_usd),
      } });
      if (agent.parent_id && !agent.feeds_parent) {
        elements.push({ group: "edges", data: { id: "p:" + agent.id, source: "a:" + agent.parent_id, target: "a:" + agent.id } });
      }
      if (agent.task && !agent.parent_id) {
        if (!byTask.has(agent.task)) byTask.set(agent.task, []);
        byTask.get(agent.task).push(agent);
      }
    }
    // A task's root agents in the order they came (builder, then its validator), each after the
    // one before; research feeds its builder, and the task starts whatever comes first.
    const feeders = new Map();
    for (const agent of state.agents) {
      if (agent.feeds_parent) {
        if (!feeders.has(agent.parent_id)) feeders.set(agent.parent_id, []);
        feeders.get(agent.parent_id).push(agent);
        elements.push({ group: "edges", data: { id: "f:" + agent.id, source: "a:" + agent.id, target: "a:" + agent.parent_id } });
      }
    }
    for (const [task, roots] of byTask) {
      roots.forEach((agent, index) => {
        const before = feeders.get(agent.id) || [];
        if (index === 0) {
          for (const feeder of before) elements.push({ group: "edges", data: { id: "w:" + feeder.id, source: "t:" + task, target: "a:" + feeder.id } });
        }
        if (index === 0 && !before.length) elements.push({ group: "edges", data: { id: "w:" + agent.id, source: "t:" + task, target: "a:" + agent.id } });
        if (index > 0) elements.push({ group: "edges", data: { id: "n:" + agent.id, source: "a:" + roots[index - 1].id, target: "a:" + agent.id } });
      });
    }
    pullRequest(state, elements);
    return elements;
  }

  // A followed pull request after the tasks that made it, then each round of feedback on it, in
  // order (issue #25: every round shows in the graph).
  function pullRequest(state, elements) {
    const pr = state.pull_request;
    if (!pr) return;
    const status = pr.status === "ended" ? "completed" : pr.status === "in_round" ? "working" : "waiting";
    elements.push({ group: "nodes", data: { id: "pr", kind: "pr", status, label: "PR #" + pr.pr_number + "\n" + pr.status.replace("_", " ") } });
    const needed = new Set(state.tasks.flatMap((task) => task.depends_on));
    for (const task of state.tasks) {
      if (!needed.has(task.key)) elements.push({ group: "edges", data: { id: "pr:" + task.key, source: "t:" + task.key, target: "pr" } });
    }
    let before = "pr";
    for (const round of pr.rounds) {
      const id = "r:" + round.number;
      const cause = round.cause.length > 40 ? round.cause.slice(0, 39) + "…" : round.cause;
      elements.push({ group: "nodes", data: {
        id, kind: "round", status: round.open ? "working" : "completed",
        label: "round " + round.number + " · " + fmt.money(round.cost_usd) + "\n" + cause,
      } });
      elements.push({ group: "edges", data: { id: "rr:" + round.number, source: before, target: id } });
      before = id;
    }
  }

  function style(c) {
    return [
      { selector: "node", style: {
        label: "data(label)", "text-wrap": "wrap", "text-max-width": 140, "font-size": 10, color: c.text,
        "text-valign": "bottom", "text-margin-y": 4, "text-background-color": c.bg, "text-background-opacity": 0.85,
        "text-background-padding": 1, "background-color": (n) => c[n.data("shown")] || c[n.data("status")] || c.idle,
        width: 24, height: 24, "border-width": 1, "border-color": c.edge,
      } },
      { selector: "node[kind = 'task']", style: { shape: "round-rectangle", width: 40, height: 26, "font-weight": "bold" } },
      { selector: "node[kind = 'pr']", style: { shape: "tag", width: 34, height: 24, "font-weight": "bold" } },
      { selector: "node[kind = 'round']", style: { shape: "hexagon", width: 26, height: 24 } },
      { selector: "node[shown = 'waiting']", style: { "border-style": "dashed", "border-width": 2, "border-color": c.working } },
      { selector: "node[kind = 'tool']", style: { label: "", shape: "diamond", width: 10, height: 10, "background-color": "#9b6bdf", "border-width": 0 } },
      { selector: "node[kind = 'tool'][status = 'ok']", style: { "background-color": c.completed } },
      { selector: "node[kind = 'tool'][status = 'error']", style: { "background-color": c.failed } },
      { selector: "edge[kind = 'tool']", style: { "line-style": "dashed", "line-color": "#b9a3e3", "target-arrow-shape": "none", width: 1 } },
      { selector: "node[status = 'working']", style: { "border-width": 2, "border-color": c.working, "transition-property": "border-width", "transition-duration": 500 } },
      { selector: "node.pulse", style: { "border-width": 7, "border-color": "#9cc5ff" } },
      { selector: "node.selected", style: { "border-width": 4, "border-color": c.selected, "border-style": "double", "font-weight": "bold" } },
      { selector: "edge", style: { width: 1.5, "curve-style": "bezier", "target-arrow-shape": "triangle", "line-color": c.edge, "target-arrow-color": c.edge } },
    ];
  }

  function Graph(store, options) {
    const self = { cy: null, selected: null };
    const container = document.getElementById("graph");
    let laidOut = false;

    function make() {
      if (typeof cytoscape === "undefined") return null;
      const cy = cytoscape({ container, style: style(colours()), wheelSensitivity: 0.3, minZoom: 0.2, maxZoom: 3 });
      cy.on("tap", "node[kind = 'agent']", (event) => options.onPick(event.target.data("agent")));
      cy.on("dragpan scrollzoom pinchzoom", () => { userMoved = true; });
      return cy;
    }

    let userMoved = false; // a user's own zoom or pan is kept when the graph is laid out again
    function layout() {
      self.cy.layout({
        name: "dagre", rankDir: "LR", nodeSep: 30, rankSep: 90, edgeSep: 10, animate: false,
        nodeDimensionsIncludeLabels: true, fit: false,
      }).run();
      if (!userMoved) self.fit();
    }

    // Fit, but never blow a small graph up into giant labels.
    self.fit = function () {
      const cy = self.cy;
      if (!cy) return;
      cy.fit(cy.nodes("[kind != 'tool']"), 24);
      if (cy.zoom() > 1.25) { cy.zoom(1.25); cy.center(); }
    };

    function draw(state) {
      if (!self.cy) self.cy = make();
      const cy = self.cy;
      if (!cy) return;
      const all = elementsOf(store, state);
      const nodes = all.filter((e) => e.group === "nodes");
      const nodeIds = new Set(nodes.map((e) => e.data.id));
      const edges = all.filter((e) => e.group === "edges" && nodeIds.has(e.data.source) && nodeIds.has(e.data.target));
      const wanted = [...nodes, ...edges];
      const ids = new Set(wanted.map((e) => e.data.id));
      let changed = false;
      cy.batch(() => {
        for (const element of wanted) {
          const existing = cy.getElementById(element.data.id);
          if (existing.empty()) { cy.add(element); changed = true; continue; }
          // A label of another size needs its room again (labels never overlap).
          if (String(existing.data("label") || "").length !== String(element.data.label || "").length) changed = true;
          existing.data(element.data);
        }
        cy.elements().forEach((el) => {
          if (el.data("kind") === "tool" || ids.has(el.id())) return;
          el.remove();
          changed = true;
        });
        highlight();
      });
      if (changed || !laidOut) { layout(); laidOut = true; }
    }

    function highlight() {
      const cy = self.cy;
      if (!cy) return;
      cy.nodes(".selected").removeClass("selected");
      if (self.selected) cy.getElementById("a:" + self.selected).addClass("selected");
    }

    self.select = function (agentId) { self.selected = agentId; highlight(); };

    // A tool call made while the page is open: a small node on its agent until its result.
    self.toolCall = function (ev) {
      const cy = self.cy;
      if (!cy || !ev.agent_id) return;
      const agentNode = cy.getElementById("a:" + ev.agent_id);
      if (agentNode.empty()) return;
      const id = "tc:" + (ev.data.tool_use_id || ev.seq);
      if (cy.getElementById(id).nonempty()) return;
      const shown = agentNode.outgoers("node[kind = 'tool']").length;
      const p = agentNode.position();
      cy.add([
        { group: "nodes", data: { id, kind: "tool", agent: ev.agent_id, status: "running", label: String(ev.data.tool) }, position: { x: p.x + 20 + 12 * (shown % 4), y: p.y - 22 } },
        { group: "edges", data: { id: id + ":e", kind: "tool", source: "a:" + ev.agent_id, target: id } },
      ]);
      setTimeout(() => cy.remove(cy.getElementById(id)), 6000);
    };

    self.toolResult = function (ev) {
      const cy = self.cy;
      if (!cy || !ev.data.tool_use_id) return;
      const id = "tc:" + ev.data.tool_use_id;
      cy.getElementById(id).data("status", ev.data.is_error ? "error" : "ok");
      setTimeout(() => cy.remove(cy.getElementById(id)), 1500);
    };

    setInterval(() => { // working agents breathe
      const cy = self.cy;
      if (!cy) return;
      cy.nodes("[status = 'working']").toggleClass("pulse");
      cy.nodes("[status != 'working']").removeClass("pulse");
    }, 600);

    document.getElementById("graph-fit").addEventListener("click", () => { userMoved = false; self.fit(); });
    const zoomBy = (factor) => {
      const cy = self.cy;
      if (!cy) return;
      userMoved = true;
      cy.zoom({ level: cy.zoom() * factor, renderedPosition: { x: container.clientWidth / 2, y: container.clientHeight / 2 } });
    };
    document.getElementById("graph-zoom-in").addEventListener("click", () => zoomBy(1.25));
    document.getElementById("graph-zoom-out").addEventListener("click", () => zoomBy(0.8));
    if (window.matchMedia) {
      window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", () => self.cy && self.cy.style(style(colours())));
    }

    store.subscribe(draw);
    return self;
  }

  Raas.Graph = Graph;
})();
