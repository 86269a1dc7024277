// Inlined after the explain page's own script when a detector other than LOCOS chose the top
// heads (`locos-bench explain --detector NAME`; on an expert page, another detector than
// expert-locos chose the top experts): says so, lists that detector's scores beside its top units
// and keeps the LOCOS map's black borders on LOCOS's own top units.
(function () {
  "use strict";
  const D = window.locosExplain.data, C = D.detector;
  const expert = D.unit === "expert", many = expert ? "experts" : "heads", locos = expert ? "expert-locos" : "LOCOS";
  const name = (h) => "L" + h[0] + (expert ? "E" : "H") + h[1];
  const fmt = (v) => (v >= 0 ? "+" : "") + v.toPrecision(3);
  const $ = (id) => document.getElementById(id);
  $("title").textContent += ", top " + many + " by " + C.name;
  const list = $("top-list");
  list.previousElementSibling.textContent = "Top " + many + " by " + C.name + " (its score on this example)";
  for (const b of list.querySelectorAll("button")) {
    const h = D.top.find((t) => name(t) === b.dataset.head);
    b.textContent = name(h) + " " + fmt(C.scores[h[0]][h[1]]);
  }
  const locosTop = new Set(C.locos_top.map(name));
  for (const c of document.querySelectorAll("#map-locos .cell")) {
    c.classList.toggle("top", locosTop.has(name([+c.dataset.layer, +c.dataset[expert ? "expert" : "head"]])));
  }
  const note = document.createElement("div");
  note.id = "chosen-by";
  note.className = "legend";
  note.textContent = "The top " + many + " (their " + (expert ? "tokens" : "sources") + ", the verdict, ablation, " +
    "sufficiency" + (expert ? "" : " and steering") + ") are " +
    C.name + "'s top " + D.top.length + " scored on this one example (" + C.source +
    ", seed " + C.seed + "); the " + locos + " and " + (expert ? "routing" : "attention") + " maps are shown for context.";
  list.after(note);
  document.body.dataset.chosenBy = C.name;
})();
