// The runs list from the keyboard: ↑/↓ or j/k move between rows, Enter (or o) opens one, x marks it for
// comparison, c compares the two marked, / goes to the search box, n/p page; Esc leaves a form field.

// The keydown handler for a list whose rows are `tr.run` in `table`, paged by #older/#newer in `pager`.
export function listKeys({ table, pager, search, compare, mark }) {
  const move = (step) => {
    const rows = [...table.querySelectorAll("tr.run")];
    if (!rows.length) return;
    const at = rows.indexOf(document.activeElement);
    rows[Math.max(0, Math.min(rows.length - 1, at < 0 ? 0 : at + step))].focus();
  };
  const page = (id) => {
    const button = pager.querySelector(`#${id}`);
    if (button && !button.disabled) button.click();
  };
  return (event) => {
    if (event.target instanceof HTMLInputElement || event.target instanceof HTMLSelectElement) {
      if (event.key === "Escape") event.target.blur();
      return;
    }
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    const focused = document.activeElement;
    const row = focused && focused.closest ? focused.closest("tr.run") : null;
    if (event.key === "Enter" && !row) return; // a focused button or link keeps its own Enter
    const actions = {
      ArrowDown: () => move(1),
      j: () => move(1),
      ArrowUp: () => move(-1),
      k: () => move(-1),
      Enter: () => row && row.click(),
      o: () => row && row.click(),
      x: () => row && mark(row.dataset.id),
      c: compare,
      "/": () => search.focus(),
      n: () => page("older"),
      p: () => page("newer"),
    };
    const action = actions[event.key];
    if (action) {
      event.preventDefault();
      action();
    }
  };
}
