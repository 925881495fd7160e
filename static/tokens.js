// The tokens page: "Copy" buttons copy the text of the element named by data-copy. Without clipboard
// access (plain HTTP other than localhost) the text is selected instead, for Ctrl+C.
document.addEventListener("click", (event) => {
  const button = event.target.closest("[data-copy]");
  if (!button) return;
  const source = document.getElementById(button.dataset.copy);
  const state = button.parentElement.querySelector(".copy-state");
  const select = () => {
    const range = document.createRange();
    range.selectNodeContents(source);
    window.getSelection().removeAllRanges();
    window.getSelection().addRange(range);
    if (state) state.textContent = "selected: press Ctrl+C to copy";
  };
  if (!navigator.clipboard || !window.isSecureContext) {
    select();
    return;
  }
  navigator.clipboard.writeText(source.textContent).then(
    () => { if (state) state.textContent = "copied"; },
    select,
  );
});
