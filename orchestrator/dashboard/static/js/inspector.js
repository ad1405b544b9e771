// The inspector: one agent's fragment from the server (history, outputs, config: what the
// store does not hold), with its numbers (status, iterations, tokens, cost, how long it ran)
// filled from the store, so they change with the list and the graph. Its live output starts
// with what the agent already wrote (the server sends it) and follows the stream, one block
// per message.
(function () {
  "use strict";
  const Raas = (window.Raas = window.Raas || {});
  const fmt = Raas.fmt;

  function Inspector(store, options) {
    const box = document.getElementById("inspector");
    const self = { agent: null, clicks: [], pendingAt: null, breakAfter: true };

    self.open = function (agentId) {
      self.agent = agentId;
      self.pendingAt = performance.now();
      options.onSelect(agentId);
      htmx.ajax("GET", options.base + "/agents/" + encodeURIComponent(agentId) + "?tab=overview", { target: "#inspector", swap: "innerHTML" });
    };

    function bind() {
      const body = document.getElementById("inspector-body");
      if (!body || !store.state) return;
      const agent = store.agent(body.dataset.agent);
      if (!agent) return;
      const shown = store.agentShown(agent);
      const set = (field, text) => {
        for (const el of body.querySelectorAll('[data-field="' + field + '"]')) el.textContent = text;
      };
      for (const badge of body.querySelectorAll('[data-field="status"]')) badge.className = "badge status-" + shown;
      set("status", shown);
      set("name", agent.category + " " + fmt.shortId(agent.id));
      set("iterations", String(agent.iterations));
      set("tokens", "input " + agent.input_tokens + " · output " + agent.output_tokens);
      set("cost", fmt.money(agent.cost_usd));
      set("calls", String(agent.calls));
      set("cache", "write " + agent.cache_write_tokens + " · read " + agent.cache_read_tokens);
      set("duration", agent.started_at ? fmt.duration(fmt.span(agent.started_at, agent.finished_at)) + (agent.finished_at ? "" : " so far") : "not started");
    }

    // Output as it streams: a chunk right after the last one continues its message; anything
    // the agent did between them (a tool call, a new iteration) starts the next.
    self.event = function (ev) {
      const out = document.getElementById("live-output");
      if (!out || out.dataset.agent !== ev.agent_id) return;
      if (ev.type !== "agent_output_chunk") { self.breakAfter = true; return; }
      let last = out.lastElementChild;
      if (!last || self.breakAfter || last.dataset.iteration !== String(ev.iteration_id || "")) {
        last = document.createElement("pre");
        last.className = "text msg";
        last.dataset.iteration = String(ev.iteration_id || "");
        out.appendChild(last);
        while (out.children.length > 50) out.firstElementChild.remove();
      }
      self.breakAfter = false;
      const following = out.scrollHeight - out.scrollTop - out.clientHeight < 40; // at the end: stay there
      last.textContent = (last.textContent + (ev.data.text || "")).slice(-20000);
      if (following) out.scrollTop = out.scrollHeight;
      const hint = document.getElementById("live-output-empty");
      if (hint) hint.remove();
    };

    document.body.addEventListener("htmx:afterSwap", (event) => {
      if (!event.detail.target || event.detail.target.id !== "inspector") return;
      const body = document.getElementById("inspector-body");
      if (body) {
        self.agent = body.dataset.agent;
        options.onSelect(self.agent);
      }
      self.breakAfter = true;
      bind();
      const out = document.getElementById("live-output");
      if (out) out.scrollTop = out.scrollHeight; // the latest output first in view
      if (self.pendingAt != null) {
        self.clicks.push(performance.now() - self.pendingAt); // the benchmark's click-to-shown times
        self.pendingAt = null;
      }
    });
    store.subscribe(bind);
    box.addEventListener("keydown", (event) => {
      if (event.key === "Escape" && self.agent) {
        const back = document.querySelector('#agent-list button[data-agent="' + CSS.escape(self.agent) + '"]');
        if (back) back.focus();
      }
    });
    return self;
  }

  Raas.Inspector = Inspector;
})();
