// pinfold's live view: reads the planner's API (Connect JSON) and redraws
// when /ui/events says the cluster changed. No framework, no build step.
"use strict";

const api = "/pinfold.v1.PlannerService/";
window.pinfoldLoadedAt = Date.now(); // a test checks the page never reloads
window.pinfoldRenders = 0;

async function call(method, body) {
  const r = await fetch(api + method, {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body || {})});
  if (!r.ok) throw new Error(method + ": " + r.status + " " + (await r.text()));
  return r.json();
}

// Linux list format ("0-3,8") to numbers.
function cpuList(s) {
  const out = [];
  for (const part of (s || "").split(",")) {
    if (!part) continue;
    const [a, b] = part.split("-").map(Number);
    for (let i = a; i <= (b === undefined ? a : b); i++) out.push(i);
  }
  return out;
}

// priorityName is a service's priority as ps writes it: a class's name, or
// the number (protojson leaves 0, production, out).
function priorityName(p) {
  return {"1000": "system", "0": "production", "-500": "batch", "-1000": "best-effort"}[String(p || 0)] || String(p);
}

function color(service) {
  let h = 0;
  for (const c of service) h = (h * 31 + c.charCodeAt(0)) >>> 0;
  return "hsl(" + (h % 360) + ", 62%, 52%)";
}

function bytes(n) {
  n = Number(n || 0);
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + units[i];
}

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else if (k === "style") e.style.cssText = v; else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k);
  return e;
}

// A host above its nominal capacity (the overbooking in use): a mark
// naming what, as used/nominal; nothing when it is within it.
function overbooked(h) {
  const over = h.overNominal || [];
  return over.length ? [" ", el("span", {class: "overbooked", title: "above its nominal capacity: only the cluster's overbooking allows it"},
    "overbooked: " + over.join(", "))] : [];
}

function sum(m) { return Object.values(m || {}).reduce((a, b) => a + Number(b), 0); }

// Every page of a listing (ListHosts, ListInstances answer a page at a
// time): field is the list's name in the answer.
async function all(method, field) {
  const out = [];
  let token = "";
  do {
    const page = await call(method, token ? {pageToken: token} : {});
    out.push(...(page[field] || []));
    if (page.nextPageToken && page.nextPageToken === token) throw new Error(method + ": the next page token did not change");
    token = page.nextPageToken || "";
  } while (token);
  return out;
}

async function refresh() {
  const [hosts, instances] = await Promise.all([all("ListHosts", "hosts"), all("ListInstances", "instances")]);
  const byHost = {};
  for (const i of instances) (byHost[i.host] = byHost[i.host] || []).push(i);
  render(hosts, instances, byHost);
}

// noAgent says why no agent enforces h's plan ("" when one does).
function noAgent(h) {
  if (h.agent) return "";
  return " — no agent: " + (h.noAgent || "registered by hand, its instances stay pending until an agent registers it");
}

function render(hosts, instances, byHost) {
  const hostByName = {};
  for (const h of hosts) hostByName[h.name] = h;
  const hb = document.querySelector("#hosts tbody");
  hb.replaceChildren();
  let cpuCap = 0, cpuUsed = 0;
  for (const h of hosts) {
    const sb = h.shareBase || 100;
    cpuCap += sum(h.capacityCpus) / sb; cpuUsed += sum(h.usedCpus) / sb;
    const n = Object.values(h.instances || {}).reduce((a, b) => a + b, 0);
    hb.append(el("tr", {"data-host": h.name},
      el("td", {}, h.name), el("td", {class: "state-" + h.state}, h.state + (h.draining ? " (draining)" : "") + (h.stuck ? " — stuck: " + h.stuck : "") + noAgent(h),
        ...overbooked(h)),
      el("td", {}, (sum(h.usedCpus) / sb).toFixed(2) + " / " + (sum(h.capacityCpus) / sb).toFixed(2)),
      el("td", {}, bytes(h.usedMemoryBytes) + " / " + bytes(h.capacityMemoryBytes)),
      el("td", {}, String((h.numaNodes || []).length)), el("td", {}, String(n))));
  }
  document.getElementById("summary").textContent = hosts.length + " hosts, " + instances.length + " instances, " +
    cpuUsed.toFixed(2) + " of " + cpuCap.toFixed(2) + " CPUs held";

  const maps = document.getElementById("maps");
  maps.replaceChildren();
  for (const h of hosts.slice(0, 200)) {
    const sb = h.shareBase || 100;
    const holders = {}; // cpu -> [[instance, pieces]]
    const mf = [];
    for (const i of byHost[h.name] || []) {
      if (!i.bind) { mf.push(i); continue; }
      for (const [cpu, p] of Object.entries(i.cpus || {})) (holders[cpu] = holders[cpu] || []).push([i, p]);
    }
    const box = el("div", {class: "host", "data-host": h.name}, el("h3", {}, h.name + " — " + h.state, ...overbooked(h)));
    const nodes = (h.numaNodes && h.numaNodes.length) ? h.numaNodes : [{id: 0, cpus: Object.keys(h.capacityCpus || {}).join(",")}];
    for (const n of nodes) {
      const row = el("div", {class: "cpus"});
      for (const cpu of cpuList(n.cpus)) {
        const cap = (h.capacityCpus || {})[cpu];
        const cell = el("div", {class: "cpu" + (cap ? "" : " reserved"), "data-cpu": String(cpu), title: "CPU " + cpu + (cap ? ": " + cap + " pieces" : ": reserved")},
          el("span", {class: "id"}, String(cpu)));
        for (const [i, p] of holders[cpu] || []) {
          cell.append(el("div", {class: "band", "data-instance": i.id, style: "height:" + (100 * p / (cap || sb)) + "%;background:" + color(i.service),
            title: i.id + " (" + i.service + "): " + p + " of " + (cap || sb) + " pieces"}));
        }
        row.append(cell);
      }
      box.append(el("div", {class: "numa"}, el("span", {class: "numa-label"}, "NUMA node " + (n.id || 0)), row));
    }
    if (mf.length) {
      box.append(el("div", {class: "mf"}, "memory-first: " + mf.map(i => i.id + " (" + ((i.cpuQuotaPieces || 0) / sb).toFixed(2) + " CPU quota)").join(", ")));
    }
    maps.append(box);
  }

  const ib = document.querySelector("#instances tbody");
  ib.replaceChildren();
  for (const i of instances) {
    const sb = i.shareBase || 100;
    const planned = i.bind ? sum(i.cpus) / sb : (i.cpuQuotaPieces || 0) / sb;
    ib.append(el("tr", {"data-instance": i.id},
      el("td", {}, el("span", {class: "swatch", style: "background:" + color(i.service)}), i.id), el("td", {}, i.service), el("td", {}, priorityName(i.priority)), el("td", {}, i.host),
      el("td", {class: "state-" + (i.state || "pending")}, (i.state || "pending") +
        ((!i.state || i.state === "pending") && hostByName[i.host] && !hostByName[i.host].agent ? " (no agent on " + i.host + ")" : "")),
      el("td", {}, planned.toFixed(2)), el("td", {}, i.cpuGotPieces ? (i.cpuGotPieces / sb).toFixed(2) : "-"),
      el("td", {}, Object.keys(i.cpus || {}).join(",") || "pool"), el("td", {}, i.bind && i.numaNode !== -1 ? String(i.numaNode || 0) : "-"),
      el("td", {}, bytes(i.memoryBytes))));
  }
  window.pinfoldRenders++;
}

function connect() {
  const status = document.getElementById("status");
  const es = new EventSource("events");
  es.addEventListener("change", () => {
    status.textContent = "live"; status.className = "status live";
    refresh().catch(e => { status.textContent = e.message; status.className = "status down"; });
  });
  es.onerror = () => { status.textContent = "reconnecting…"; status.className = "status down"; };
}

connect();
