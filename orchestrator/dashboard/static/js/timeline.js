// The timeline: newest first, a page at a time (timeline.json), "Older events" on demand,
// filtered by agent, task, event type and errors, searched; live events are put on top when
// they match. A tool call and its result are one row with the time between them and the full
// input and output behind a click (newlines kept). Text from agents is only ever textContent.
(function () {
  "use strict";
  const Raas = (window.Raas = window.Raas || {});
  const fmt = Raas.fmt;
  const LIFECYCLE = /^(project_|iteration_|task_|budget_|subagent_|prompt_|circuit_|api_key|no_workers|workers_back|approval_|round_|delivery_|pull_request_)/;
  const ERROR_TYPES = new Set(["iteration_error", "project_failed", "budget_exceeded", "circuit_breaker_triggered", "api_key_required", "delivery_failed", "llm_retry"]);
  const MAX_ROWS = 500; // live rows on top push the oldest out ("Older events" brings them back)

  function summary(ev) {
    const d = ev.data || {};
    switch (ev.type) {
      case "agent_output_chunk": return d.text;
      case "agent_tool_call": return d.tool;
      case "tool_executed": return (d.tool || d.command || "check") + (d.exit_code != null ? " exit " + d.exit_code : "") + (d.is_error ? " (error)" : "");
      case "llm_retry": return "retry: " + d.reason + (d.delay_s != null ? " after " + d.delay_s + " s" : "") + (d.error ? ": " + d.error : "");
      case "rate_limit_wait": return "waited " + d.wait_s + " s for " + d.limit;
      case "iteration_complete": return "iteration " + d.number + (d.completed_task ? " completed the task" : "") + (d.summary ? ": " + d.summary : "");
      case "iteration_error": return "iteration " + d.number + ": " + d.error;
      case "iteration_started": return "iteration " + d.number + (d.attempt > 1 ? ", attempt " + d.attempt : "") + " on " + d.worker;
      case "project_created": return "created " + d.name;
      case "project_started": return "started (" + d.workflow + " workflow)";
      case "project_paused": return "paused: " + (d.message || String(d.reason).replace(/_/g, " "));
      case "project_resumed": return "resumed by " + d.by;
      case "project_stopped": return "stopped: " + d.reason;
      case "project_failed": return "failed: " + d.reason + (d.task ? " (task " + d.task + ")" : "");
      case "task_validated": return "task " + d.task + (d.passed ? " passed" : " failed") + " its check";
      case "subagent_spawned": return "spawned " + d.category + (d.parallel ? " (parallel)" : "");
      case "budget_changed": return "budget limit set to " + fmt.money(d.limit_usd);
      case "budget_warning": case "budget_exceeded": return "spent " + fmt.money(d.spent_usd) + " of " + fmt.money(d.limit_usd);
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

  // A tool's input as "name: value" lines (strings as written, newlines kept), not one JSON line.
  function inputText(input) {
    if (input == null) return "";
    if (typeof input !== "object" || Array.isArray(input)) return typeof input === "string" ? input : JSON.stringify(input, null, 2);
    return Object.entries(input)
      .map(([k, v]) => k + ":" + (typeof v === "string" ? (v.includes("\n") ? "\n" + v : " " + v) : " " + JSON.stringify(v, null, 2)))
      .join("\n");
  }

  // One line of a tool's input for its row's summary: "command: echo 1 ⏎ ls".
  function preview(input) {
    const text = input != null && typeof input === "object" && !Array.isArray(input)
      ? Object.entries(input).map(([k, v]) => k + ": " + (typeof v === "string" ? v : JSON.stringify(v))).join(" · ")
      : typeof input === "string" ? input : JSON.stringify(input);
    return String(text || "").replace(/\s*\n\s*/g, " ⏎ ");
  }

  function isError(row) {
    if (ERROR_TYPES.has(row.type)) return true;
    const result = row.type === "tool_executed" ? row : row.result;
    return Boolean(result && result.data && result.data.is_error);
  }

  function rowClass(row) {
    if (row.type === "agent_tool_call") return row.result ? (row.result.data.is_error ? "tool-call tool-error" : "tool-call tool-ok") : "tool-call tool-running";
    if (row.type === "tool_executed") return row.data && row.data.is_error ? "tool-error" : "tool-ok";
    if (row.type === "llm_retry") return "retry";
    if (row.type === "rate_limit_wait") return "wait";
    if (ERROR_TYPES.has(row.type)) return "lifecycle error";
    if (LIFECYCLE.test(row.type)) return "lifecycle";
    return "chatter";
  }

  function td(tr, text, className) {
    const cell = document.createElement("td");
    if (text != null) cell.textContent = String(text);
    if (className) cell.className = className;
    tr.appendChild(cell);
    return cell;
  }

  function pre(label, text, className) {
    const box = document.createElement("div");
    box.className = "io " + className;
    const head = document.createElement("div");
    head.className = "io-head";
    head.textContent = label;
    const body = document.createElement("pre");
    body.className = "text";
    body.textContent = text;
    box.append(head, body);
    return box;
  }

  function Timeline(store, options) {
    const body = document.getElementById("timeline");
    const older = document.getElementById("timeline-older");
    const empty = document.getElementById("timeline-empty");
    const count = document.getElementById("timeline-count");
    const form = document.getElementById("timeline-filters");
    const inputs = {
      agent: document.getElementById("filter-agent"),
      task: document.getElementById("filter-task"),
      type: document.getElementById("filter-type"),
      errors: document.getElementById("filter-errors"),
      q: document.getElementById("filter-q"),
    };
    const self = { olderCursor: null, newest: 0, loading: true, generation: 0, error: null };
    const bySeq = new Map();

    function filters() {
      return {
        agent: inputs.agent.value, task: inputs.task.value, type: inputs.type.value,
        errors: inputs.errors.checked ? "1" : "", q: inputs.q.value.trim(),
      };
    }

    function query(before) {
      const params = new URLSearchParams();
      for (const [k, v] of Object.entries(filters())) if (v) params.set(k, v);
      if (before) params.set("before", String(before));
      return options.base + "/timeline.json?" + params.toString();
    }

    function agentCell(tr, agentId) {
      const cell = td(tr, null, "agent");
      if (!agentId) return;
      const button = document.createElement("button");
      button.type = "button";
      button.className = "agent-link";
      button.dataset.agent = agentId;
      button.title = agentId;
      button.textContent = store.agentName(agentId);
      cell.appendChild(button);
    }

    function whatCell(tr, row) {
      const cell = td(tr, null, "what");
      if (row.type !== "agent_tool_call" && row.type !== "tool_executed") {
        cell.textContent = summary(row) == null ? "" : String(summary(row));
        return;
      }
      const details = document.createElement("details");
      const head = document.createElement("summary");
      details.appendChild(head);
      details.addEventListener("toggle", () => fillTool(details, row), { once: true });
      cell.appendChild(details);
      renderToolHead(head, row);
    }

    function renderToolHead(head, row) {
      const d = row.data || {};
      const result = row.type === "tool_executed" ? row : row.result;
      let text = row.type === "agent_tool_call" ? String(d.tool) : summary(row);
      const input = row.type === "agent_tool_call" ? preview(d.input) : "";
      if (input) text += " · " + input.slice(0, 120);
      if (result) {
        const r = result.data || {};
        text += r.is_error ? " → error" : " → ok";
        if (r.exit_code != null) text += " (exit " + r.exit_code + ")";
      } else if (row.type === "agent_tool_call") text += " → running…";
      head.textContent = text;
    }

    function fillTool(details, row) {
      const result = row.type === "tool_executed" ? row : row.result;
      if (row.type === "agent_tool_call") details.appendChild(pre("input", inputText((row.data || {}).input), "input"));
      if (result) details.appendChild(pre(result.data.is_error ? "output (error)" : "output", String(result.data.output || ""), "output"));
      else details.appendChild(pre("output", "(no result yet)", "output"));
    }

    function render(row) {
      const tr = document.createElement("tr");
      tr.dataset.seq = String(row.seq);
      tr.className = "event " + rowClass(row) + " type-" + row.type;
      if (row.type === "agent_tool_call" && row.data && row.data.tool_use_id) tr.dataset.toolUse = row.data.tool_use_id;
      td(tr, row.seq, "seq");
      const time = td(tr, fmt.clock(row.ts), "time");
      time.title = fmt.fullTime(row.ts);
      td(tr, row.type, "type");
      agentCell(tr, row.agent_id);
      whatCell(tr, row);
      td(tr, row.duration_s != null ? fmt.duration(row.duration_s) : "", "took");
      bySeq.set(row.seq, tr);
      tr._row = row; // kept with its row: a live result rebuilds its call's row from it
      return tr;
    }

    function showState() {
      const shown = body.children.length;
      empty.hidden = shown > 0;
      if (!shown) {
        const f = filters();
        empty.textContent = self.error || (Object.values(f).some(Boolean)
          ? "No event matches these filters; clear one to see more."
          : "No events yet: they appear here, newest first, as the project runs.");
      }
      older.hidden = self.olderCursor == null;
      count.textContent = shown ? shown + " shown" + (self.olderCursor != null ? ", older on demand" : "") : "";
    }

    async function fetchPage(before) {
      const answer = await fetch(query(before), { credentials: "same-origin" });
      const page = await answer.json();
      if (!answer.ok) throw new Error(page.detail || "the timeline could not be read");
      return page;
    }

    // The newest page for the current filters (replacing what is shown).
    self.load = async function () {
      const generation = ++self.generation;
      self.loading = true;
      let page;
      try {
        page = await fetchPage(null);
        self.error = null;
      } catch (err) {
        if (generation !== self.generation) return;
        self.loading = false;
        body.replaceChildren(); bySeq.clear(); self.olderCursor = null; self.error = err.message;
        showState();
        return;
      }
      if (generation !== self.generation) return; // a newer filter won
      self.loading = false;
      bySeq.clear();
      body.replaceChildren(...page.rows.map(render));
      self.olderCursor = page.older;
      self.newest = page.last_event_seq;
      showState();
      apply(recent.filter((ev) => ev.seq > page.last_event_seq));
    };

    self.loadOlder = async function () {
      if (self.olderCursor == null) return;
      const generation = self.generation;
      const page = await fetchPage(self.olderCursor);
      if (generation !== self.generation) return;
      const fragment = document.createDocumentFragment();
      for (const row of page.rows) if (!bySeq.has(row.seq)) fragment.appendChild(render(row));
      body.appendChild(fragment);
      self.olderCursor = page.older;
      showState();
    };

    function matches(row) {
      const f = filters();
      if (f.agent && row.agent_id !== f.agent) return false;
      if (f.task) {
        const agent = store.agent(row.agent_id);
        if (!agent || agent.task !== f.task) return false;
      }
      if (f.type) {
        const wanted = f.type === "tool_executed" ? "agent_tool_call" : f.type;
        if (row.type !== wanted) return false;
      }
      if (f.errors && !isError(row)) return false;
      if (f.q) {
        const needle = f.q.toLowerCase();
        const hay = (row.type + " " + JSON.stringify(row.data) + (row.result ? JSON.stringify(row.result.data) : "")).toLowerCase();
        if (!hay.includes(needle)) return false;
      }
      return true;
    }

    // Live events, in seq order: a result joins its call's row; the rest go on top if they match.
    // (Kept a while: those that arrive while a page loads are put on top of it once it has.)
    const recent = [];
    const iterationStarts = new Map(); // iteration id → when it started (a live row's duration)
    self.live = function (batch) {
      recent.push(...batch);
      if (recent.length > MAX_ROWS) recent.splice(0, recent.length - MAX_ROWS);
      if (!self.loading) apply(batch);
    };

    function apply(batch) {
      const fresh = [];
      for (const ev of batch) {
        if (ev.seq <= self.newest) continue; // the page has it
        self.newest = Math.max(self.newest, ev.seq);
        if (ev.type === "tool_executed" && ev.data && ev.data.tool_use_id) {
          joinResult(ev, fresh);
          continue;
        }
        if (ev.type === "iteration_started" && ev.iteration_id) iterationStarts.set(ev.iteration_id, Date.parse(ev.ts));
        if ((ev.type === "iteration_complete" || ev.type === "iteration_error") && iterationStarts.has(ev.iteration_id)) {
          ev.duration_s = (Date.parse(ev.ts) - iterationStarts.get(ev.iteration_id)) / 1000;
        }
        if (matches(ev)) fresh.push(ev);
      }
      if (!fresh.length) return;
      const fragment = document.createDocumentFragment();
      for (let i = fresh.length - 1; i >= 0; i--) fragment.appendChild(render(fresh[i]));
      body.insertBefore(fragment, body.firstChild);
      while (body.children.length > MAX_ROWS) {
        const last = body.lastElementChild;
        bySeq.delete(Number(last.dataset.seq));
        last.remove();
        self.olderCursor = Number(body.lastElementChild.dataset.seq);
      }
      showState();
    }

    function joinResult(ev, fresh) {
      const id = ev.data.tool_use_id;
      const pending = fresh.find((row) => row.type === "agent_tool_call" && row.data.tool_use_id === id);
      if (pending) {
        pending.result = ev;
        pending.duration_s = (Date.parse(ev.ts) - Date.parse(pending.ts)) / 1000;
        return;
      }
      const tr = body.querySelector('tr[data-tool-use="' + CSS.escape(id) + '"]');
      if (!tr) {
        if (matches(ev)) fresh.push(ev); // its call is not shown (filtered or paged out)
        return;
      }
      const row = tr._row;
      row.result = ev;
      row.duration_s = (Date.parse(ev.ts) - Date.parse(row.ts)) / 1000;
      tr.replaceWith(render(row));
    }

    // The agent and task pickers follow the store.
    function fillSelect(select, items) {
      const current = select.value;
      const options = [new Option("all", "")];
      for (const [value, label] of items) options.push(new Option(label, value));
      select.replaceChildren(...options);
      select.value = items.some(([v]) => v === current) ? current : "";
    }
    store.subscribe((state) => {
      fillSelect(inputs.agent, state.agents.map((a) => [a.id, a.category + " " + fmt.shortId(a.id)]));
      fillSelect(inputs.task, state.tasks.map((t) => [t.key, t.key]));
      for (const button of body.querySelectorAll("button.agent-link")) button.textContent = store.agentName(button.dataset.agent);
    });

    let searchTimer = null;
    form.addEventListener("submit", (event) => { event.preventDefault(); self.load(); });
    for (const name of ["agent", "task", "type", "errors"]) inputs[name].addEventListener("change", () => self.load());
    inputs.q.addEventListener("input", () => {
      clearTimeout(searchTimer);
      searchTimer = setTimeout(() => self.load(), 250);
    });
    older.addEventListener("click", () => self.loadOlder());
    document.addEventListener("keydown", (event) => {
      const typing = event.target.closest && event.target.closest("input, textarea, select");
      if (event.key === "/" && !typing) { event.preventDefault(); inputs.q.focus(); }
    });
    self.filterAgent = function (agentId) { inputs.agent.value = agentId; self.load(); };
    return self;
  }

  Raas.Timeline = Timeline;
})();
