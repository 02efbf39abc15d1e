package testkit

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"github.com/spillway-lb/spillway/internal/proc"
)

// PreviousReleasesFile is the file, relative to the module root, that
// names the releases the current one must interoperate with (the
// compatibility promise of docs/DEPLOY.md): one per line, "<commit>
// <name> [<listener key>=<value>]", with # comments. The optional third
// column is a listener setting that release's gfe cannot read: the
// compatibility test sets it to show that such a gfe's refusal is visible.
const PreviousReleasesFile = "e2e/testdata/previous-releases.txt"

// Release is one line of PreviousReleasesFile.
type Release struct {
	// Commit is the release's commit as written (a hash prefix or a tag)
	// and Revision its full hash, which its binaries report (version.Info).
	Commit, Revision string
	// Name is what the tests call it ("baseline").
	Name string
	// Unreadable is a listener setting "key=value" this release's gfe
	// cannot read, "" if none is given.
	Unreadable string
}

// PreviousReleases reads PreviousReleasesFile and resolves each commit in
// the module's repository, which must hold it (a shallow clone does not).
func PreviousReleases(ctx context.Context) ([]Release, error) {
	root, err := proc.ModuleRoot()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(root, PreviousReleasesFile)
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("previous releases: %w", err)
	}
	defer f.Close()
	var out []Release
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		switch len(fields) {
		case 0:
			continue
		case 2, 3:
			r := Release{Commit: fields[0], Name: fields[1]}
			if len(fields) == 3 {
				r.Unreadable = fields[2]
			}
			if r.Revision, err = resolve(ctx, root, r.Commit); err != nil {
				return nil, fmt.Errorf("%s:%d: %w", path, n, err)
			}
			out = append(out, r)
		default:
			return nil, fmt.Errorf("%s:%d: want \"<commit> <name> [<listener key>=<value>]\", got %q", path, n, sc.Text())
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s names no release", path)
	}
	return out, nil
}

// BuildRelease builds the commands names (directories under cmd/) as they
// were at commit, and returns their paths by name. It checks the commit out
// into a temporary git worktree of the module's repository (which must
// hold the commit: a shallow clone does not), builds there without the race
// detector with the commit as internal/version's revision, and removes the
// worktree. The binaries are kept per commit and
// Go version under the user's cache directory (os.UserCacheDir, else the
// temporary directory), so only the first call for a commit builds;
// concurrent calls wait for each other.
func BuildRelease(ctx context.Context, commit string, names ...string) (map[string]string, error) {
	root, err := proc.ModuleRoot()
	if err != nil {
		return nil, err
	}
	full, err := resolve(ctx, root, commit)
	if err != nil {
		return nil, err
	}
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "spillway-releases", full+"-"+runtime.Version()+"-"+releaseRecipe)
	bins := make(map[string]string, len(names))
	for _, n := range names {
		bins[n] = filepath.Join(dir, n)
	}
	if haveAll(bins) {
		return bins, nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, err
	}
	unlock, err := lockFile(dir + ".lock")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if haveAll(bins) { // built while we waited
		return bins, nil
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "build-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	src := filepath.Join(tmp, "src")
	if _, err := git(ctx, root, "worktree", "add", "--detach", "--force", src, full); err != nil {
		return nil, fmt.Errorf("release %s: %w", commit, err)
	}
	defer func() {
		// Removes the worktree's administrative files in the repository.
		_, _ = git(context.Background(), root, "worktree", "remove", "--force", src)
	}()
	out := filepath.Join(tmp, "bin")
	// The revision by the linker, not from VCS stamping, which a
	// GOFLAGS=-buildvcs=false (or a missing git) would leave out: the
	// binaries say which release they are, as the control plane shows
	// each gfe's (internal/version).
	args := []string{"build", "-o", out + string(filepath.Separator),
		"-ldflags=-X github.com/spillway-lb/spillway/internal/version.revision=" + full}
	for _, n := range names {
		args = append(args, "./cmd/"+n)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("release %s: go build %v: %w\n%s", commit, names, err, b)
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	if err := os.Rename(out, dir); err != nil {
		return nil, fmt.Errorf("release %s: %w", commit, err)
	}
	return bins, nil
}

// resolve returns the full hash of commit in the repository at root.
func resolve(ctx context.Context, root, commit string) (string, error) {
	full, err := git(ctx, root, "rev-parse", "--verify", "--quiet", commit+"^{commit}")
	if err != nil {
		return "", fmt.Errorf("release %s is not in the repository at %s (a shallow clone? fetch the full history: git fetch --unshallow): %w", commit, root, err)
	}
	return full, nil
}

// releaseRecipe names how BuildRelease builds (its flags) in the cache's
// directory names: change it with the flags, so that binaries built the
// old way are not taken for new ones.
const releaseRecipe = "r1"

// haveAll reports whether every path exists.
func haveAll(paths map[string]string) bool {
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			return false
		}
	}
	return true
}

// git runs git in dir and returns its trimmed output.
func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
		}
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(b)), nil
}

// lockFile takes an exclusive lock on path (created if missing) and
// returns its release.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
