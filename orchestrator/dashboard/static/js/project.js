// The project page: one store (store.js) read from the database's current state, one stream of
// events from the last seq that state had (history is never replayed: the timeline pages it in
// newest first), and the views that read the store: the header, the actions, the agent list, the
// graph (graph.js), the inspector (inspector.js), the costs and the timeline (timeline.js).
// What agents wrote is only ever set as textContent or as cytoscape labels (drawn on a canvas):
// never parsed as HTML.
(function () {
  "use strict";
  const root = document.getElementById("project");
  if (!root) return;
  const Raas = window.Raas;
  const fmt = Raas.fmt;
  const projectId = root.dataset.project;
  const base = "/ui/projects/" + encodeURIComponent(projectId);
  const streamState = document.getElementById("stream-state");
  const CHATTY = new Set(["agent_output_chunk", "agent_tool_call", "tool_executed"]);
  // What the page has done, for the browser tests and the benchmark.
  const live = { lastSeq: 0, shown: 0, repeated: 0, seqs: [], source: null, connects: 0, ready: null, startSeq: null };
  window.raasLive = live;

  const store = Raas.createStore(base);
  live.store = store;
  let inspector = null;
  const graph = Raas.Graph(store, { onPick: (agentId) => inspector.open(agentId) });
  inspector = Raas.Inspector(store, { base, onSelect: (agentId) => { graph.select(agentId); markSelected(agentId); } });
  const timeline = Raas.Timeline(store, { base });
  live.nodes = () => (graph.cy ? graph.cy.nodes().map((n) => ({ id: n.id(), kind: n.data("kind"), status: n.data("status") })) : []);
  live.cy = () => graph.cy;
  live.clicks = () => inspector.clicks;

  // --- the header, the actions, the agent list: from the store ----------------------------
  function header(state) {
    const p = state.project;
    const set = (name, text) => {
      for (const el of document.querySelectorAll('#project-header [data-bind="' + name + '"]')) el.textContent = text;
    };
    const status = document.getElementById("project-status");
    status.className = "badge status-" + p.status;
    set("status", p.status);
    set("duration", p.started_at ? fmt.duration(fmt.span(p.started_at, p.finished_at)) : "—");
    const tokensIn = state.agents.reduce((sum, a) => sum + a.input_tokens, 0);
    const tokensOut = state.agents.reduce((sum, a) => sum + a.output_tokens, 0);
    set("tokens", tokensIn + " tokens in / " + tokensOut + " out");
    const reason = document.getElementById("project-reason");
    const parts = [];
    if (p.pause_reason) {
      const badge = document.createElement("span");
      badge.className = "badge";
      badge.textContent = p.pause_reason;
      parts.push(badge, " ");
    }
    parts.push(reasonOf(p));
    reason.replaceChildren(...parts);
    reason.hidden = !p.pause_reason && !p.status_reason;
    set("spent", fmt.money(state.meter.settled_usd));
    set("reserved", fmt.money(state.meter.reserved_usd));
    set("limit", fmt.money(state.meter.limit_usd));
    set("warning", fmt.money(state.meter.warning_usd));
    const meter = document.getElementById("budget-meter-bar");
    if (meter) {
      meter.max = Number(state.meter.limit_usd) || 1;
      meter.value = Number(state.meter.settled_usd) + Number(state.meter.reserved_usd);
    }
    document.getElementById("empty-state").hidden = state.agents.length > 0 || p.terminal;
  }

  // The reason's words without its code (a badge beside them), as render.py's reason filter.
  function reasonOf(p) {
    const words = p.status_reason || "";
    const code = p.pause_reason || "";
    return code && words.startsWith(code) ? words.slice(code.length).replace(/^[ :]+/, "") : words;
  }

  const OPEN = new Set(["created", "running", "paused"]);
  function actions(state) {
    const status = state.project.status;
    const enable = (id, on) => { const el = document.getElementById(id); if (el) el.disabled = !on; };
    enable("action-pause", status === "running");
    enable("action-resume", status === "paused");
    enable("action-stop", OPEN.has(status) || status === "waiting_for_approval");
    for (const id of ["action-budget", "budget-input", "action-prompt", "prompt-input", "action-say", "say-input", "say-now"]) enable(id, OPEN.has(status));
    const budget = document.getElementById("budget-input");
    if (budget && document.activeElement !== budget && budget.dataset.limit !== state.project.limit_usd) {
      budget.dataset.limit = state.project.limit_usd;
      budget.value = fmt.money(state.project.limit_usd).replace(/,/g, "");
    }
    const prompt = document.getElementById("prompt-input");
    if (prompt && document.activeElement !== prompt && prompt.dataset.shown !== state.project.prompt) {
      prompt.dataset.shown = state.project.prompt;
      prompt.value = state.project.prompt;
      document.getElementById("prompt-first-line").textContent = state.project.prompt.split("\n")[0].slice(0, 100);
    }
  }

  function agentList(state) {
    const list = document.getElementById("agent-list");
    const items = state.agents.map((agent) => {
      const shown = store.agentShown(agent);
      const li = document.createElement("li");
      const button = document.createElement("button");
      button.type = "button";
      button.className = "agent-link agent-" + (agent.parent_id ? "sub" : "root") + " status-" + shown + (agent.status === "working" ? " working" : "");
      button.dataset.agent = agent.id;
      button.dataset.status = agent.status;
      button.dataset.category = agent.category;
      button.title = agent.id;
      if (agent.id === inspector.agent) button.setAttribute("aria-current", "true");
      button.textContent = agent.category + " " + fmt.shortId(agent.id) + " · " + shown + " · " + fmt.money(agent.cost_usd);
      li.appendChild(button);
      return li;
    });
    const focused = document.activeElement && document.activeElement.closest("#agent-list") ? document.activeElement.dataset.agent : null;
    list.replaceChildren(...items);
    if (focused) {
      const again = list.querySelector('button[data-agent="' + CSS.escape(focused) + '"]');
      if (again) again.focus();
    }
  }

  function markSelected(agentId) {
    for (const button of document.querySelectorAll("#agent-list button")) {
      if (button.dataset.agent === agentId) button.setAttribute("aria-current", "true");
      else button.removeAttribute("aria-current");
    }
  }

  // Arrow keys move along the agent list; Enter opens (a button's own).
  document.getElementById("agent-list").addEventListener("keydown", (event) => {
    if (!["ArrowRight", "ArrowDown", "ArrowLeft", "ArrowUp"].includes(event.key)) return;
    const buttons = [...document.querySelectorAll("#agent-list button")];
    const at = buttons.indexOf(document.activeElement);
    if (at < 0) return;
    event.preventDefault();
    const step = event.key === "ArrowRight" || event.key === "ArrowDown" ? 1 : -1;
    buttons[(at + step + buttons.length) % buttons.length].focus();
  });

  let lastSpent = null;
  function costs(state) {
    const spent = state.meter.settled_usd + "/" + state.project.status;
    if (lastSpent !== null && spent !== lastSpent) document.body.dispatchEvent(new Event("costs-changed"));
    lastSpent = spent;
  }

  store.subscribe((state) => { header(state); actions(state); agentList(state); costs(state); });

  // --- the stream -------------------------------------------------------------------------
  function handle(batch) {
    const fresh = [];
    let changed = false;
    for (const ev of batch) {
      if (ev.seq <= live.lastSeq) { live.repeated += 1; continue; } // a resumed stream starts after it
      live.lastSeq = ev.seq;
      live.shown += 1;
      live.seqs.push(ev.seq);
      fresh.push(ev);
      inspector.event(ev);
      if (ev.type === "agent_tool_call") graph.toolCall(ev);
      if (ev.type === "tool_executed") graph.toolResult(ev);
      if (!CHATTY.has(ev.type)) changed = true;
      else if (ev.agent_id) {
        const agent = store.agent(ev.agent_id);
        if (!agent || agent.status !== "working") changed = true; // it works: the store should say so
      }
    }
    if (fresh.length) timeline.live(fresh);
    if (changed) store.soon();
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
      // the last seq seen.
      if (source.readyState === EventSource.CLOSED && live.source === source) setTimeout(connect, 1000);
    });
  }

  // --- the actions' answers ---------------------------------------------------------------
  // A new action's answer replaces the last one's: an old "paused" beside Pause would mislead.
  document.body.addEventListener("htmx:beforeRequest", (event) => {
    if (!event.detail.elt.closest || !event.detail.elt.closest("#actions")) return;
    for (const message of document.querySelectorAll("#actions .message-slot")) message.replaceChildren();
  });
  document.body.addEventListener("htmx:afterRequest", (event) => {
    if (event.detail.elt.closest && event.detail.elt.closest("#actions")) store.refresh();
  });

  document.addEventListener("click", (event) => {
    const target = event.target.closest ? event.target.closest(".agent-link") : null;
    if (target && target.dataset.agent) inspector.open(target.dataset.agent);
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
    const css = getComputedStyle(document.documentElement);
    const ink = (css.getPropertyValue("--fg") || "#1d2330").trim();
    const grid = (css.getPropertyValue("--line") || "#e3e6eb").trim();
    chart = new uPlot({
      width: Math.max(320, box.clientWidth || 600), height: 200,
      // One point (or none) would stretch the time axis over years (uPlot widens a lone point by
      // a day in milliseconds, ours are seconds): keep a minute around it, read from the data.
      scales: { x: { time: true, range: timeRange } },
      series: [{}, { label: "cost", stroke: "#3d8bfd", width: 2, points: { show: true }, value: (_u, v) => (v == null ? "—" : fmt.money(v)) }],
      axes: [
        { stroke: ink, grid: { stroke: grid } },
        { size: 80, stroke: ink, grid: { stroke: grid }, values: (_u, ticks) => ticks.map((v) => fmt.money(v)) },
      ],
    }, [series.t, series.usd], box);
  }

  document.body.addEventListener("htmx:afterSwap", (event) => {
    if (event.detail.target && event.detail.target.id === "costs") drawCosts();
  });

  // --- start: the state, the newest page of the timeline, then the stream after that state --
  (async () => {
    await store.refresh();
    live.lastSeq = store.state ? store.state.project.last_event_seq : 0;
    live.startSeq = live.lastSeq;
    connect();
    await timeline.load();
    live.ready = performance.now();
  })();
})();
