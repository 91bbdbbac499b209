// Package readmecheck holds no code: its test follows README.md, then the
// docs pages that continue it (docs/SECURITY.md, docs/OPERATING.md), as a
// new user would, on a fresh copy of the repository: it runs every sh
// block of each page in order, in one shell per page, against the real
// servers the pages start, and then checks that the steps left the work
// tree clean (what they make is ignored by git, or lies outside the tree).
//
// A block may be marked with an HTML comment right before its fence:
//
//	<!-- readme-check: NAME -->
//	<!-- readme-check: NAME; DIRECTIVE -->
//
// NAME is for readers and error messages. The directives:
//
//   - skip: REASON — the block is not run (the test command itself);
//   - background until CMD succeeds — the block runs a server in the
//     foreground, as a user runs it in a terminal of its own: the test runs
//     it in the background and goes on once CMD, a leasectl command, exits
//     with status 0;
//   - save as FILE — the block (of any language) is written to FILE in the
//     shell's current folder, as the page asks the reader to save it;
//   - prints the block before — a text block that the sh block before it
//     must print on its standard output, exactly.
//
// A sh block without a marker is run as it is: every command in it must
// succeed, so a step that fails on purpose says so in the block
// (`|| echo "exit status $?"`).
package readmecheck
