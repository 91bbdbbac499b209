// Package readmecheck holds no code: its test checks README.md's steps that
// can fail, by running them as a new user would. The library's steps are
// marked in README.md with HTML comments (<!-- readme-check: NAME -->)
// right before their fenced blocks: the test makes a fresh module that
// depends on this repository by the README's recipe, builds the README's
// main.go in it, runs it against a real leased, and compares what it prints
// with the README's output block.
package readmecheck
