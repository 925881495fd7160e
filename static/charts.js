// Plotly's `responsive` option follows the window's size only. A chart whose card changes width
// without the window changing is redrawn here: a grid of cards filling in while the page is parsed
// (with `auto-fit`, the first card spans the whole row until its neighbour exists, so its chart was
// drawn twice as wide as the card that then clipped it), or a part swapped in by htmx.
(function () {
  if (!window.ResizeObserver) return;
  var watched = new WeakSet();
  var observer = new ResizeObserver(function (entries) {
    entries.forEach(function (entry) {
      var el = entry.target;
      if (window.Plotly && el.data && el.offsetWidth > 0) window.Plotly.Plots.resize(el);
    });
  });
  function watch(root) {
    (root.querySelectorAll ? root : document).querySelectorAll(".js-plotly-plot").forEach(function (el) {
      if (!watched.has(el)) {
        watched.add(el);
        observer.observe(el);
      }
    });
  }
  document.addEventListener("DOMContentLoaded", function () { watch(document); });
  window.addEventListener("load", function () { watch(document); });
  document.addEventListener("htmx:afterSettle", function (event) { watch(event.target); });
})();
