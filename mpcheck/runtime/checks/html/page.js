// mpcheck's report page: expand/collapse the module trees, jump from a finding to its module,
// and tie each crossing drawn in the band to its row of the table. The page reads without it.
(function () {
  "use strict";
  function all(sel) { return Array.prototype.slice.call(document.querySelectorAll(sel)); }
  function setOpen(open) { all(".tree details").forEach(function (d) { d.open = open; }); }
  var expand = document.getElementById("expand");
  var collapse = document.getElementById("collapse");
  if (expand) { expand.addEventListener("click", function () { setOpen(true); }); }
  if (collapse) { collapse.addEventListener("click", function () { setOpen(false); }); }

  function reveal(el) {
    for (var p = el.parentElement; p; p = p.parentElement) {
      if (p.tagName === "DETAILS") { p.open = true; }
    }
  }
  all("button.jump").forEach(function (b) {
    b.addEventListener("click", function () {
      var node = document.getElementById(b.getAttribute("data-target"));
      if (!node) { return; }
      all(".hi-node").forEach(function (n) { n.classList.remove("hi-node"); });
      reveal(node);
      node.classList.add("hi-node");
      var focusable = node.querySelector("summary") || node;
      focusable.focus();
      focusable.scrollIntoView({block: "center"});
    });
  });
  all("a.pin, .pinned a").forEach(function (a) {
    a.addEventListener("click", function () {
      var target = document.getElementById(a.getAttribute("href").slice(1));
      if (target) { setTimeout(function () { target.focus(); }, 0); }
    });
  });
  all(".band .crossing").forEach(function (g) {
    var row = document.getElementById(g.getAttribute("data-row"));
    if (!row) { return; }
    function on() { g.classList.add("hi"); row.classList.add("hi"); }
    function off() { g.classList.remove("hi"); row.classList.remove("hi"); }
    g.addEventListener("focus", on); g.addEventListener("blur", off);
    g.addEventListener("mouseenter", on); g.addEventListener("mouseleave", off);
  });
})();
