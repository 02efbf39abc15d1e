// Command refdoc writes Spillway's reference pages from the code:
// docs/config.md from package config (every key with its type, unit,
// default, bounds and doc comment) and docs/cli.md from the --help of the
// binaries a deployment runs (see package internal/refdoc). Run it from
// anywhere in the module, or as go generate ./docs/, after changing the
// schema, a validator's bounds or a flag; the tests of internal/refdoc
// fail until the pages match.
//
// Usage:
//
//	go run ./cmd/refdoc
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spillway-lb/spillway/internal/proc"
	"github.com/spillway-lb/spillway/internal/refdoc"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "refdoc:", err)
		os.Exit(1)
	}
}

func run() error {
	root, err := proc.ModuleRoot()
	if err != nil {
		return err
	}
	cfg, err := refdoc.ConfigPage(root)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "refdoc-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	helps, err := refdoc.Helps(ctx, root, dir)
	if err != nil {
		return err
	}
	for name, page := range map[string]string{"config.md": cfg, "cli.md": refdoc.CLIPage(helps)} {
		path := filepath.Join(root, "docs", name)
		if err := os.WriteFile(path, []byte(page), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		fmt.Println(path)
	}
	return nil
}
