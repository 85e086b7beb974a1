// The review page: one item at a time, keyboard-driven. Every text from data goes in through
// textContent; the item itself comes from the server as autoescaped HTML. Every request carries
// the session token (from the page's URL) in the X-Review-Token header.
"use strict";
(() => {
  const token = new URLSearchParams(location.search).get("token") || "";
  const $ = (id) => document.getElementById(id);
  const FILTERS = ["all", "unreviewed", "flagged", "rejected", "disagreed"];
  let state = null;          // {reviewer, folder, rubrics, items}
  let shown = [];            // indices of items passing the filters
  let pos = 0;               // position in shown
  let active = 0;            // active rubric field
  let current = null;        // the item on screen

  async function api(path, body) {
    const init = {headers: {"X-Review-Token": token}};
    if (body !== undefined) {
      init.method = "POST";
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const r = await fetch(path, init);
    const data = await r.json().catch(() => ({error: r.statusText}));
    if (!r.ok) throw new Error(data.error || r.statusText);
    return data;
  }

  function status(text, error) {
    $("status").textContent = text;
    $("status").className = error ? "error" : "";
  }

  function othersDisagree(it) {
    const ds = Object.values(it.others).filter((d) => d);
    if (it.label && it.label.decision) ds.push(it.label.decision);
    return new Set(ds).size > 1;
  }

  function passes(it) {
    const f = $("filter").value, q = $("qtype").value;
    if (q && it.question_type !== q) return false;
    if (f === "unreviewed") return !(it.label && it.label.decision);
    if (f === "flagged") return it.flagged > 0;
    if (f === "rejected") return Object.values(it.others).includes("reject") || (it.label && it.label.decision === "reject");
    if (f === "disagreed") return othersDisagree(it);
    return true;
  }

  function refilter(keep) {
    shown = state.items.filter(passes).map((it) => it.index);
    const at = shown.indexOf(keep);
    pos = at >= 0 ? at : Math.min(pos, Math.max(0, shown.length - 1));
    show();
  }

  function progress() {
    const done = state.items.filter((it) => it.label && it.label.decision).length;
    $("progress").textContent = `${done} / ${state.items.length} decided by ${state.reviewer} · showing ${shown.length}`;
  }

  async function show() {
    progress();
    if (!shown.length) {
      current = null;
      $("item").textContent = "No item passes the filters.";
      $("position").textContent = "";
      $("rubric").textContent = "";
      return;
    }
    const it = state.items[shown[pos]];
    current = it;
    active = 0;
    location.hash = `i=${it.index}`;
    // a scenario's type names its target context: the judge's side, not shown before the reveal
    const qtype = it.question_type && !it.type_privileged ? ", " + it.question_type : "";
    $("position").textContent = `item ${pos + 1} of ${shown.length} (#${it.index + 1}, ${it.kind}${qtype})`;
    const data = await api(`/api/item/${it.index}`);
    if (current !== it) return;
    $("item").innerHTML = data.html;  // autoescaped by the server's Jinja template
    $("item").dataset.itemId = it.item_id;
    panel();
    document.body.dataset.shown = it.index;
  }

  function label() {
    return current.label || {scores: {}, decision: null, note: ""};
  }

  function panel() {
    const rubric = state.rubrics[current.kind];
    const lab = label();
    $("guidance").textContent = rubric.guidance;
    const ol = $("rubric");
    ol.textContent = "";
    rubric.fields.forEach((f, i) => {
      const li = document.createElement("li");
      li.dataset.key = f.key;
      if (i === active) li.className = "active";
      const q = document.createElement("div");
      q.textContent = f.question;
      const scale = document.createElement("div");
      scale.className = "scale";
      f.labels.forEach((text, j) => {
        const s = document.createElement("span");
        s.textContent = `${j + 1} ${text}`;
        if (lab.scores[f.key] === j + 1) s.className = "chosen";
        s.addEventListener("click", () => { active = i; score(j + 1); });
        scale.appendChild(s);
      });
      li.append(q, scale);
      ol.appendChild(li);
    });
    document.querySelectorAll("#decision button").forEach((b) => {
      b.className = b.dataset.decision === lab.decision ? "chosen" : "";
    });
    if (document.activeElement !== $("note")) $("note").value = lab.note;
    const others = Object.entries(current.others);
    $("others").textContent = others.length ? "others: " + others.map(([r, d]) => `${r}: ${d || "—"}`).join(", ") : "";
  }

  let queue = Promise.resolve();
  let pending = 0;

  // A change shows at once and is sent in order: labels are appended in the order they were made.
  function save(change) {
    const it = current;
    const lab = label();
    const next = {...lab, scores: {...lab.scores}, ...change};
    it.label = next;
    panel();
    progress();
    const body = {item_id: it.item_id, scores: next.scores, decision: next.decision, note: next.note};
    pending += 1;
    document.body.dataset.pending = pending;
    status("saving…");
    queue = queue.then(async () => {
      try {
        const data = await api("/api/label", body);
        status(`saved ${data.label.time}`);
      } catch (e) {
        status(`not saved: ${e.message}`, true);
      } finally {
        pending -= 1;
        document.body.dataset.pending = pending;
      }
    });
    return queue;
  }

  function score(n) {
    const rubric = state.rubrics[current.kind];
    const f = rubric.fields[active];
    if (!f || n > f.labels.length) return;
    const scores = {...label().scores, [f.key]: n};
    active = Math.min(active + 1, rubric.fields.length - 1);
    return save({scores});
  }

  function move(d) {
    if (!shown.length) return;
    pos = Math.max(0, Math.min(shown.length - 1, pos + d));
    show();
  }

  function toggle() {
    $("item").classList.toggle("hide-privileged");
  }

  document.addEventListener("keydown", (ev) => {
    if (!state || ev.ctrlKey && ev.key !== "Enter" || ev.metaKey || ev.altKey) return;
    if (ev.target === $("note")) {
      if (ev.key === "Escape" || (ev.key === "Enter" && ev.ctrlKey)) {
        ev.preventDefault();
        $("note").blur();
        if (current) save({note: $("note").value});
      }
      return;
    }
    if (ev.target.tagName === "SELECT") return;
    const k = ev.key;
    if (k === "j" || k === "ArrowRight") move(1);
    else if (k === "k" || k === "ArrowLeft") move(-1);
    else if (!current) return;
    else if (/^[1-9]$/.test(k)) score(Number(k));
    else if (k === "ArrowDown" || k === "ArrowUp") {
      const n = state.rubrics[current.kind].fields.length;
      active = (active + (k === "ArrowDown" ? 1 : n - 1)) % n;
      panel();
    } else if (k === "a") save({decision: "accept"});
    else if (k === "r") save({decision: "reject"});
    else if (k === "e") save({decision: "needs_edit"});
    else if (k === "n") $("note").focus();
    else if (k === "v") toggle();
    else if (k === "u") {
      $("filter").value = FILTERS[(FILTERS.indexOf($("filter").value) + 1) % FILTERS.length];
      refilter(current.index);
    } else if (k === "?") $("help").open = !$("help").open;
    else return;
    ev.preventDefault();
  });

  document.querySelectorAll("#decision button").forEach((b) => {
    b.addEventListener("click", () => current && save({decision: b.dataset.decision}));
  });
  $("toggle").addEventListener("click", toggle);
  $("filter").addEventListener("change", () => refilter(current ? current.index : -1));
  $("qtype").addEventListener("change", () => refilter(current ? current.index : -1));

  async function start() {
    try {
      state = await api("/api/items");
    } catch (e) {
      status(`cannot load: ${e.message}`, true);
      $("item").textContent = "This page needs the address the server printed (with its token).";
      return;
    }
    $("folder").textContent = state.folder;
    for (const q of [...new Set(state.items.map((it) => it.question_type).filter((q) => q))].sort()) {
      const o = document.createElement("option");
      o.value = q;
      o.textContent = q;
      $("qtype").appendChild(o);
    }
    const m = /i=(\d+)/.exec(location.hash);
    refilter(m ? Number(m[1]) : 0);
  }
  start();
})();
