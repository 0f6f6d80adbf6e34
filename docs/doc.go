// Package docs holds sluice's user documentation (the Markdown files in this
// directory) and a test that keeps it honest: every relative link in the
// repository's Markdown resolves to a file inside the repository and, when
// it names an anchor, to a heading of that file (GitHub's anchor rules);
// README.md stays short; no document sends the reader outside the
// repository for required reading. It has no code of its own.
package docs
