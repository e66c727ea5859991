// Long source listings collapse. A chapter shows the package's source of a function or class
// as a Markdown output (a title, then a Python code block); one longer than MAX_LINES lines
// starts as a window of its first lines, with a button under it that shows the rest. Printing
// shows every line (listings.css).
document.addEventListener("DOMContentLoaded", () => {
  "use strict";
  const MAX_LINES = 40;
  // Code blocks of rendered Markdown outputs; stream outputs carry the class "output" instead.
  const blocks = document.querySelectorAll('.cell_output > div[class^="highlight-"] > div.highlight');
  blocks.forEach((block, index) => {
    const pre = block.querySelector("pre");
    if (!pre) return;
    const lines = pre.textContent.replace(/\n$/, "").split("\n").length;
    if (lines <= MAX_LINES) return;
    if (!pre.id) pre.id = `tb-listing-${index}`;
    block.classList.add("tb-listing", "tb-listing-collapsed");
    const button = document.createElement("button");
    button.type = "button";
    button.className = "tb-listing-toggle";
    button.setAttribute("aria-controls", pre.id);
    const show = `Show all ${lines} lines`;
    const setState = (collapsed) => {
      block.classList.toggle("tb-listing-collapsed", collapsed);
      button.setAttribute("aria-expanded", String(!collapsed));
      button.textContent = collapsed ? show : "Show fewer lines";
    };
    setState(true);
    button.addEventListener("click", () => {
      const collapse = !block.classList.contains("tb-listing-collapsed");
      setState(collapse);
      if (collapse) block.scrollIntoView({ block: "nearest" });
    });
    block.parentElement.after(button);
  });
});
