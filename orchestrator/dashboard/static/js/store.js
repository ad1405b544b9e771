// The project page's one store: the project, its tasks and agents as the database holds them
// (state.json), read again whenever the stream says something changed. Every number the page
// shows (status, iterations, cost, tokens) is drawn from here, so the header, the agent list, the
// graph, the inspector and the costs cannot disagree. Also the page's one spelling of money,
// durations, times and agent names.
(function () {
  "use strict";
  const Raas = (window.Raas = window.Raas || {});

  const MONEY = new Intl.NumberFormat("en-US", { minimumFractionDigits: 4, maximumFractionDigits: 4 });
  function money(value) {
    if (value == null || value === "") return "—";
    return "$" + MONEY.format(Number(value));
  }

  // As render.py's duration filter: 4.2s, 42s, 3m 05s, 2h 07m.
  function duration(seconds) {
    if (seconds == null || !isFinite(seconds)) return "—";
    const whole = Math.max(Math.floor(seconds), 0);
    if (whole < 60) return seconds < 10 ? Math.max(seconds, 0).toFixed(1) + "s" : whole + "s";
    const pad = (n) => String(n).padStart(2, "0");
    if (whole < 3600) return Math.floor(whole / 60) + "m " + pad(whole % 60) + "s";
    return Math.floor(whole / 3600) + "h " + pad(Math.floor((whole % 3600) / 60)) + "m";
  }

  function span(start, end) {
    if (!start) return null;
    return ((end ? Date.parse(end) : Date.now()) - Date.parse(start)) / 1000;
  }

  const TIME = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false });
  const FULL = new Intl.DateTimeFormat(undefined, { dateStyle: "full", timeStyle: "long" });
  function clock(iso) { return TIME.format(new Date(iso)); }
  function fullTime(iso) { return FULL.format(new Date(iso)) + " (" + iso + ")"; }

  const shortId = (id) => String(id || "").slice(0, 6);

  // An agent's display status: "waiting" when blocked only on its own unfinished subagents (a
  // pipeline's builder waiting for research), not stuck.
  const FINISHED = new Set(["completed", "error"]);
  function agentShown(state, agent) {
    if (agent.status !== "blocked") return agent.status;
    const open = state.agents.some((a) => a.parent_id === agent.id && !FINISHED.has(a.status));
    return open ? "waiting" : "blocked";
  }
  function taskShown(state, task) {
    if (task.status !== "pending") return task.status;
    const done = new Set(state.tasks.filter((t) => t.status === "completed").map((t) => t.key));
    return task.depends_on.every((key) => done.has(key)) ? "ready" : "waiting";
  }

  function createStore(base) {
    const listeners = [];
    const store = {
      state: null,
      version: 0,
      agents: new Map(),
      subscribe(listener) {
        listeners.push(listener);
        if (store.state) listener(store.state);
      },
      agent(id) { return store.agents.get(id) || null; },
      agentName(id) {
        const agent = store.agents.get(id);
        return (agent ? agent.category : "agent") + " " + shortId(id);
      },
      agentShown(agent) { return agentShown(store.state, agent); },
      taskShown(task) { return taskShown(store.state, task); },
      set(state) {
        store.state = state;
        store.agents = new Map(state.agents.map((a) => [a.id, a]));
        store.version += 1;
        for (const listener of listeners) {
          try { listener(state); } catch (err) { console.error(err); }
        }
      },
    };
    let running = null;
    let again = false;
    // While the state says an ended iteration waits for the coordinator (project.settling), read
    // it again: that advance changes rows without an event of its own. Backs off to 5 s, so a
    // coordinator that is down is not hammered; and a failed read tries again the same way.
    let settleTimer = null;
    let settleDelay = 250;
    function settleLater() {
      if (settleTimer) return;
      settleTimer = setTimeout(() => { settleTimer = null; store.refresh(); }, settleDelay);
      settleDelay = Math.min(settleDelay * 2, 5000);
    }
    // One read at a time; a change during a read asks for one more after it.
    store.refresh = function () {
      if (running) { again = true; return running; }
      running = (async () => {
        do {
          again = false;
          let state = null;
          try {
            const answer = await fetch(base + "/state.json", { credentials: "same-origin" });
            if (answer.ok) state = await answer.json();
          } catch (err) {
            console.error(err);
          }
          if (state) store.set(state);
          if (!state || state.project.settling) settleLater();
          else settleDelay = 250;
        } while (again);
        running = null;
      })();
      return running;
    };
    let timer = null;
    store.soon = function () {
      if (timer) return;
      timer = setTimeout(() => { timer = null; store.refresh(); }, 150);
    };
    return store;
  }

  Raas.fmt = { money, duration, span, clock, fullTime, shortId };
  Raas.createStore = createStore;
})();
