// The run table's filters: each <select data-dim> keeps the rows whose data-<dim> equals its value
// (data-behaviour holds a space-separated list); the state lives in the URL's fragment.
(function () {
  "use strict";
  var rows = Array.prototype.slice.call(document.querySelectorAll("#runs tbody tr"));
  var selects = Array.prototype.slice.call(document.querySelectorAll("select[data-dim]"));

  function matches(row, dim, value) {
    if (!value) return true;
    if (dim === "behaviour") return row.dataset.behaviour.split(" ").indexOf(value) >= 0;
    return row.dataset[dim] === value;
  }

  function keeps(row, except, value) {
    return selects.every(function (sel) {
      return matches(row, sel.dataset.dim, sel === except ? value : sel.value);
    });
  }

  function apply() {
    var shown = 0;
    rows.forEach(function (row) {
      var ok = keeps(row, null, null);
      row.hidden = !ok;
      if (ok) shown += 1;
    });
    // Each option counts the rows it would show with the other filters as they are.
    selects.forEach(function (sel) {
      Array.prototype.forEach.call(sel.options, function (opt) {
        var n = rows.filter(function (row) { return keeps(row, sel, opt.value); }).length;
        opt.textContent = opt.dataset.label + " (" + n + ")";
      });
      sel.classList.toggle("active", sel.value !== "");
    });
    var active = selects.filter(function (sel) { return sel.value; });
    document.getElementById("shown").textContent = String(shown);
    document.getElementById("active").textContent = active.length
      ? "filters: " + active.map(function (sel) {
          return sel.dataset.dim + " = " + sel.options[sel.selectedIndex].dataset.label;
        }).join(" · ")
      : "no filter";
    var hash = active.map(function (sel) {
      return encodeURIComponent(sel.dataset.dim) + "=" + encodeURIComponent(sel.value);
    }).join("&");
    if (location.hash.slice(1) !== hash) history.replaceState(null, "", "#" + hash);
  }

  function fromHash() {
    var wanted = {};
    location.hash.slice(1).split("&").forEach(function (part) {
      var i = part.indexOf("=");
      if (i > 0) wanted[decodeURIComponent(part.slice(0, i))] = decodeURIComponent(part.slice(i + 1));
    });
    selects.forEach(function (sel) {
      var value = wanted[sel.dataset.dim] || "";
      var known = Array.prototype.some.call(sel.options, function (opt) { return opt.value === value; });
      sel.value = known ? value : "";
    });
  }

  selects.forEach(function (sel) { sel.addEventListener("change", apply); });
  document.getElementById("reset").addEventListener("click", function () {
    selects.forEach(function (sel) { sel.value = ""; });
    apply();
  });
  window.addEventListener("hashchange", function () { fromHash(); apply(); });
  fromHash();
  apply();
})();
