// Package docs holds Spillway's documentation pages (Markdown, next to this
// file) and the tests that keep them true: the README's size and its
// commands (the five-minute guide is run as written), links and anchors
// between pages, and a docs/ARCHITECTURE.md entry for every package.
//
// docs/config.md and docs/cli.md are generated from the code by
// cmd/refdoc (package internal/refdoc, whose tests check them):
//
//	go generate ./docs/
package docs

//go:generate go run ../cmd/refdoc
