// Accessible names for the buttons that scripts add to every page.
//
// sphinx-copybutton (0.5) adds a copy button after every code block with a visual tooltip
// (data-tooltip) and an icon, but no text and no aria-label, so a screen reader announces
// just "button". It adds them once clipboard.js has loaded, so watch the page for them.
(() => {
  "use strict";
  const COPY_LABEL = "Copy the code to the clipboard";

  const label = () => {
    document.querySelectorAll("button.copybtn:not([aria-label])").forEach((button) => {
      button.setAttribute("aria-label", COPY_LABEL);
      button.setAttribute("title", COPY_LABEL);
    });
  };

  label();
  new MutationObserver(label).observe(document.documentElement, { childList: true, subtree: true });
})();
