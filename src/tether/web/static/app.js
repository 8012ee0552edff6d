// The tether dashboard page: polls /api/agents, shows one agent's events (rendered by the
// server through tether's display), its inbox and questions, and a terminal for PTY agents.
// Every request carries the token the page was served with.
"use strict";

const TOKEN = document.querySelector('meta[name="tether-token"]').content;
const HEADERS = { "X-Tether-Token": TOKEN, "Content-Type": "application/json" };
const $ = (selector) => document.querySelector(selector);
const state = { agents: [], selected: null, events: null, drive: null, term: null, fit: null,
                questionsKey: "" };

async function api(path, body) {
  const init = body === undefined ? { headers: HEADERS }
    : { method: "POST", headers: HEADERS, body: JSON.stringify(body) };
  const response = await fetch(path, init);
  const data = await response.json();
  if (!response.ok) throw new Error(data.error || `HTTP ${response.status}`);
  return data;
}

function node(tag, props = {}, ...children) {
  const element = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key === "class") element.className = value;
    else if (key.startsWith("data-")) element.setAttribute(key, value);
    else element[key] = value;
  }
  for (const child of children) element.append(child);
  return element;
}

function age(ts) {
  if (!ts) return "-";
  const s = Math.max(0, Math.floor(Date.now() / 1000 - ts));
  if (s >= 86400) return `${Math.floor(s / 86400)}d`;
  if (s >= 3600) return `${Math.floor(s / 3600)}h`;
  if (s >= 60) return `${Math.floor(s / 60)}m`;
  return `${s}s`;
}

function usage(u) {
  return u && (u.input || u.output) ? `${u.input || 0}/${u.output || 0}` : "-";
}

function kindOf(agent) {
  if (agent.kind === "pty") return `pty: ${(agent.argv || ["?"])[0]}`;
  const who = agent.agent || "tether";
  return agent.provider ? `${who}/${agent.provider}` : who;
}

function socketUrl(name, kind) {
  return `ws://${location.host}/api/agents/${encodeURIComponent(name)}/${kind}?token=${TOKEN}`;
}

function say(text, error = false) {
  const ack = $("#ack");
  ack.textContent = text;
  ack.classList.toggle("error", error);
}

// -- the fleet table ----------------------------------------------------------------------

async function refresh() {
  try {
    const data = await api("/api/agents");
    // agents that wait on a person first (oldest wait first), then as the daemon lists them
    const since = (agent) => (agent.waiting ? agent.waiting.since : Infinity);
    state.agents = data.agents.slice().sort((a, b) => since(a) - since(b));
    const waiting = state.agents.filter((agent) => agent.waiting).length;
    document.title = waiting ? `(${waiting}) tether dashboard` : "tether dashboard";
    const count = `${data.agents.length} agent${data.agents.length === 1 ? "" : "s"}`;
    $("#daemon").textContent = waiting ? `${count}, ${waiting} waiting for you` : count;
    renderTable();
    renderDetail();
  } catch (error) {
    $("#daemon").textContent = `daemon: ${error.message}`;
  }
  setTimeout(refresh, 1000);
}

function renderTable() {
  const body = $("#agents tbody");
  body.replaceChildren(...state.agents.map((agent) => {
    const last = agent.last_event ? `${agent.last_event.type} ${agent.last_event.text}` : "-";
    const questions = (agent.questions || []).length;
    const row = node("tr", { "data-name": agent.name, onclick: () => select(agent.name) },
      node("td", { class: "name" }, agent.name),
      node("td", { class: "kind" }, kindOf(agent)),
      agent.waiting
        ? node("td", { class: "state state-waiting", title: `${agent.waiting.kind} ${agent.waiting.key}` },
          "waiting")
        : node("td", { class: `state state-${agent.state}` }, agent.state),
      node("td", { class: "turn" }, String(agent.turn)),
      node("td", { class: "usage" }, usage(agent.usage)),
      node("td", { class: "age" }, age(agent.created_at)),
      node("td", { class: "last", title: last }, last),
      node("td", { class: "questions" },
        questions ? node("span", { class: "badge" }, String(questions)) : ""));
    if (agent.name === state.selected) row.classList.add("selected");
    if (agent.waiting) row.classList.add("waiting");
    return row;
  }));
  $("#empty").hidden = state.agents.length > 0;
}

// -- one agent ------------------------------------------------------------------------------

function current() {
  return state.agents.find((agent) => agent.name === state.selected);
}

function select(name) {
  if (state.selected === name) return;
  closeSockets();
  state.selected = name;
  state.questionsKey = "";
  const agent = current();
  $("#detail").hidden = false;
  $("#detail-name").textContent = name;
  $("#events").replaceChildren();
  say("");
  const pty = agent && agent.kind === "pty";
  for (const part of document.querySelectorAll(".wire-only")) part.hidden = pty;
  $("#terminal").hidden = !pty;
  if (pty) openTerminal(name); else { openEvents(name); loadInbox(name); }
  loadDiff(name);
  renderTable();
  renderDetail();
}

// an agent with a worktree: its changes against its base, as git writes them
async function loadDiff(name) {
  const agent = current();
  const shown = Boolean(agent && agent.worktree);
  $("#diff-title").hidden = !shown;
  $("#diff").hidden = !shown;
  $("#diff").replaceChildren();
  if (!shown) return;
  const base = agent.base || "(no base branch)";
  $("#diff-branch").textContent = `${agent.branch} → ${base}, worktree ${agent.worktree}`;
  try {
    const data = await api(`/api/agents/${encodeURIComponent(name)}/diff`);
    if (name !== state.selected) return;
    $("#diff").textContent = data.text || "(no changes)";
  } catch (error) {
    $("#diff").textContent = `diff: ${error.message}`;
  }
}

// the steers and follow-ups the agent has not taken in yet, each with Withdraw
async function loadQueue(name) {
  try {
    const data = await api(`/api/agents/${encodeURIComponent(name)}/queue`);
    if (name !== state.selected) return;
    const items = data.queue || [];
    $("#queue-title").hidden = items.length === 0;
    $("#queue").hidden = items.length === 0;
    $("#queue").replaceChildren(...items.map((item) => node("li", { "data-ref": String(item.ref) },
      `${item.kind} ${item.ref}: ${item.text} `,
      node("button", { type: "button", class: "withdraw", onclick: () => withdraw(item.ref) },
        "Withdraw"))));
  } catch (error) {
    $("#queue").hidden = true;
  }
}

async function withdraw(ref) {
  try {
    const result = await api(`/api/agents/${encodeURIComponent(state.selected)}/unqueue`, { ref });
    say(result.ack === "applied" ? `withdrew ${ref}` : `not withdrawn: ${result.reason}`,
      result.ack !== "applied");
    loadQueue(state.selected);
  } catch (error) {
    say(`withdraw failed: ${error.message}`, true);
  }
}

function renderDetail() {
  const agent = current();
  if (!agent) return;
  if (agent.kind !== "pty") loadQueue(agent.name);
  $("#detail-state").textContent = `${kindOf(agent)} · ${agent.state} · turn ${agent.turn}`;
  const questions = agent.questions || [];
  const key = questions.map((q) => q.key).join(",");
  if (key === state.questionsKey) return;
  state.questionsKey = key;
  $("#questions").replaceChildren(...questions.map(questionBox));
  if (agent.kind !== "pty") loadInbox(agent.name);
}

function questionBox(question) {
  const input = node("input", { type: "text", placeholder: "your answer", class: "answer-text" });
  const send = (decision, scope) => answer(question.key, input.value, decision, scope);
  const buttons = question.type === "approval_request"
    ? [node("button", { type: "button", class: "approve", onclick: () => send("approve") }, "Approve"),
       node("button", { type: "button", class: "deny", onclick: () => send("deny") }, "Deny"),
       node("button", { type: "button", class: "always", title: "approve this kind of call for the rest of the run",
         onclick: () => send("approve", "always") }, "Always")]
    : [node("button", { type: "button", class: "answer", onclick: () => send(null) }, "Answer")];
  const label = question.type === "approval_request" ? "Approval requested" : "Question";
  return node("div", { class: "question", "data-key": question.key },
    node("div", { class: "q" }, `${label}: ${question.text}`), input, ...buttons);
}

async function answer(key, text, decision, scope) {
  try {
    const body = { key, text };
    if (decision) body.decision = decision;
    if (scope) body.scope = scope;
    const result = await api(`/api/agents/${encodeURIComponent(state.selected)}/answer`, body);
    say(`answered as ${result.sent_as} ${result.ack} (seq ${result.seq})`);
  } catch (error) {
    say(`answer failed: ${error.message}`, true);
  }
}

async function act(action) {
  const name = state.selected;
  if (!name) return;
  const text = $("#steer-text").value;
  const body = action === "steer" || action === "follow_up" ? { text }
    : action === "finalize" && text ? { note: text } : {};
  try {
    const result = await api(`/api/agents/${encodeURIComponent(name)}/${action}`, body);
    say(`${action.replace("_", "-")} ${result.ack} (seq ${result.seq})`);
    if (action === "steer" || action === "follow_up") $("#steer-text").value = "";
  } catch (error) {
    say(`${action} failed: ${error.message}`, true);
  }
}

async function loadInbox(name) {
  try {
    const data = await api(`/api/agents/${encodeURIComponent(name)}/inbox`);
    if (name !== state.selected) return;
    $("#inbox").replaceChildren(...data.messages.map((m) => {
      const body = m.body || {};
      const text = body.q || body.reason || body.text || body.summary || body.note
        || m.rejected_reason || JSON.stringify(body);
      const cut = body.cut ? ` … [cut: ${body.cut} characters; tether inbox shows it whole]` : "";
      const answered = m.answer ? ` → ${m.answer.answer}` : "";
      return node("li", { class: m.answer ? "answered" : "" }, `[${m.type || "rejected"}] ${text}${cut}${answered}`);
    }));
  } catch (error) {
    $("#inbox").replaceChildren(node("li", {}, `inbox: ${error.message}`));
  }
}

function openEvents(name) {
  const socket = new WebSocket(socketUrl(name, "events"));
  const pre = $("#events");
  state.events = socket;
  socket.onmessage = (message) => {
    const data = JSON.parse(message.data);
    const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    if (data.type === "event") pre.insertAdjacentHTML("beforeend", data.html);
    else if (data.type === "end") pre.append(node("div", { class: "s-dim" }, `— ${name} ${data.state}`));
    else if (data.type === "error") pre.append(node("div", { class: "s-red" }, data.message));
    if (atEnd) pre.scrollTop = pre.scrollHeight;
  };
}

function openTerminal(name) {
  const box = $("#terminal");
  box.replaceChildren();
  const term = new Terminal({ cursorBlink: true, fontSize: 13, scrollback: 5000 });
  const fit = new FitAddon.FitAddon();
  term.loadAddon(fit);
  term.open(box);
  state.term = term;
  state.fit = fit;
  const socket = new WebSocket(socketUrl(name, "drive"));
  socket.binaryType = "arraybuffer";
  state.drive = socket;
  const encoder = new TextEncoder();
  const sendSize = () => {
    fit.fit();
    if (socket.readyState === WebSocket.OPEN) {
      socket.send(JSON.stringify({ type: "resize", cols: term.cols, rows: term.rows }));
    }
  };
  socket.onopen = sendSize;
  socket.onmessage = (message) => {
    if (typeof message.data !== "string") { term.write(new Uint8Array(message.data)); return; }
    const control = JSON.parse(message.data);
    if (control.type === "exit") term.write(`\r\n[tether] the program ended: ${control.state}\r\n`);
  };
  socket.onclose = () => term.write("\r\n[tether] disconnected\r\n");
  term.onData((data) => {
    if (socket.readyState === WebSocket.OPEN) socket.send(encoder.encode(data));
  });
  window.onresize = sendSize;
  term.focus();
}

function closeSockets() {
  for (const socket of [state.events, state.drive]) if (socket) socket.close();
  if (state.term) state.term.dispose();
  state.events = state.drive = state.term = state.fit = null;
  window.onresize = null;
}

for (const action of ["steer", "follow_up", "finalize", "cancel", "stop"]) {
  $(`#${action}`).onclick = () => act(action);
}
$("#steer-text").addEventListener("keydown", (event) => {
  if (event.key === "Enter") act(event.shiftKey ? "follow_up" : "steer");
});
refresh();
