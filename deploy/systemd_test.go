package deploy

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// daemons are the two units, the command each runs and its env prefix.
var daemons = []struct {
	unit, cmd, envPrefix, envFile string
}{
	{"spillway-controlplane.service", "controlplane", "SPILLWAY_CP_", "controlplane.env"},
	{"spillway-gfe.service", "gfe", "SPILLWAY_GFE_", "gfe.env"},
}

// needTool fails the test when a tool the deployment needs is missing:
// .ci/run installs them, so a missing one is a broken machine, not a skip.
func needTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is needed (Debian: apt-get install -y systemd openssl; .ci/run installs them): %v", name, err)
	}
	return p
}

// unitCopies writes the units with their binaries pointed at the ones built
// for this test (systemd-analyze checks that ExecStart is executable) and
// returns their paths by unit name.
func unitCopies(t *testing.T) map[string]string {
	t.Helper()
	dir := t.TempDir()
	paths := map[string]string{}
	for _, d := range daemons {
		b, err := os.ReadFile(filepath.Join("systemd", d.unit))
		if err != nil {
			t.Fatal(err)
		}
		s := strings.ReplaceAll(string(b), "/usr/local/bin/spillway-"+d.cmd, bins[d.cmd])
		p := filepath.Join(dir, d.unit)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		paths[d.unit] = p
	}
	return paths
}

// TestUnitsVerify runs systemd-analyze verify (syntax, known directives,
// executable ExecStart) and systemd-analyze security on both units: no
// warning, and an exposure level of at most 2.0 ("OK"; an unhardened
// service scores 9.6).
func TestUnitsVerify(t *testing.T) {
	sa := needTool(t, "systemd-analyze")
	exposure := regexp.MustCompile(`Overall exposure level for \S+: (\d+\.\d+)`)
	for unit, path := range unitCopies(t) {
		t.Run(unit, func(t *testing.T) {
			out, err := exec.Command(sa, "verify", path).CombinedOutput()
			if err != nil || len(strings.TrimSpace(string(out))) > 0 {
				t.Errorf("systemd-analyze verify %s: %v, want no error and no warning:\n%s", unit, err, out)
			}
			out, err = exec.Command(sa, "security", "--offline=yes", "--no-pager", "--threshold=20", path).CombinedOutput()
			if err != nil {
				t.Fatalf("systemd-analyze security %s: %v\n%s", unit, err, out)
			}
			m := exposure.FindStringSubmatch(string(out))
			if m == nil {
				t.Fatalf("systemd-analyze security %s: no overall exposure level in:\n%s", unit, out)
			}
			level, _ := strconv.ParseFloat(m[1], 64)
			t.Logf("%s: exposure level %.1f", unit, level)
			if level > 2.0 {
				t.Errorf("%s: exposure level %.1f, want <= 2.0:\n%s", unit, level, out)
			}
		})
	}
}

// TestUnitsHardening: the directives docs/design.md §9 and docs/lab.md ask
// for are there with the values the deployment relies on.
func TestUnitsHardening(t *testing.T) {
	common := map[string]string{
		"User":                    "spillway",
		"Group":                   "spillway",
		"NoNewPrivileges":         "yes",
		"ProtectSystem":           "strict",
		"ProtectHome":             "yes",
		"PrivateTmp":              "yes",
		"PrivateDevices":          "yes",
		"ProtectKernelTunables":   "yes",
		"ProtectKernelModules":    "yes",
		"ProtectKernelLogs":       "yes",
		"ProtectControlGroups":    "yes",
		"RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX AF_NETLINK",
		"RestrictNamespaces":      "yes",
		"RestrictSUIDSGID":        "yes",
		"MemoryDenyWriteExecute":  "yes",
		"SystemCallArchitectures": "native",
		"ReadOnlyPaths":           "/etc/spillway",
		"ExecReload":              "/bin/kill -HUP $MAINPID",
		"Restart":                 "on-failure",
		"KillSignal":              "SIGTERM",
	}
	for _, d := range daemons {
		t.Run(d.unit, func(t *testing.T) {
			u := parseUnit(t, filepath.Join("systemd", d.unit))
			want := map[string]string{
				"EnvironmentFile": "/etc/spillway/" + d.envFile,
			}
			if d.cmd == "gfe" {
				want["CapabilityBoundingSet"] = "CAP_NET_BIND_SERVICE"
				want["AmbientCapabilities"] = "CAP_NET_BIND_SERVICE"
				want["LimitNOFILE"] = "1048576"
			} else {
				want["CapabilityBoundingSet"] = ""
				want["AmbientCapabilities"] = ""
				want["LimitNOFILE"] = "65536"
			}
			for k, v := range common {
				want[k] = v
			}
			for k, v := range want {
				if _, set := u["Service"][k]; !set {
					t.Errorf("[Service] %s not set, want %q", k, v)
				} else if got := u.get(k); got != v {
					t.Errorf("[Service] %s=%q, want %q", k, got, v)
				}
			}
			if got := u["Service"]["SystemCallFilter"]; !slices.Equal(got, []string{"@system-service", "~@privileged"}) {
				t.Errorf("SystemCallFilter = %q, want @system-service then ~@privileged", got)
			}
			if got := u["Install"]["WantedBy"]; !slices.Equal(got, []string{"multi-user.target"}) {
				t.Errorf("[Install] WantedBy = %q, want multi-user.target", got)
			}
		})
	}
}

// TestUnitFlagsExist runs each unit's ExecStart, with the real binary,
// followed by --help: the binary's own parser accepts every flag the unit
// passes (an unknown flag or a missing value exits non-zero before --help
// is reached). Every variable of the example env files and of
// docs/DEPLOY.md names a flag of its daemon.
func TestUnitFlagsExist(t *testing.T) {
	for _, d := range daemons {
		t.Run(d.unit, func(t *testing.T) {
			u := parseUnit(t, filepath.Join("systemd", d.unit))
			args := strings.Fields(u.get("ExecStart"))
			if len(args) < 2 || args[0] != "/usr/local/bin/spillway-"+d.cmd {
				t.Fatalf("ExecStart = %q, want /usr/local/bin/spillway-%s and flags", args, d.cmd)
			}
			if strings.ContainsAny(u.get("ExecStart"), `"'%$`) {
				t.Fatalf("ExecStart = %q: quotes, specifiers and variables are not checked here", u.get("ExecStart"))
			}
			flags := flagsOf(t, bins[d.cmd])
			for _, a := range args[1:] {
				if name, ok := strings.CutPrefix(a, "--"); ok && !slices.Contains(flags, name) {
					t.Errorf("ExecStart passes --%s, which spillway-%s does not define", name, d.cmd)
				}
			}
			cmd := exec.Command(bins[d.cmd], append(args[1:], "--help")...)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("spillway-%s %s --help: %v\n%s", d.cmd, strings.Join(args[1:], " "), err, out)
			}

			names := envNames(t, filepath.Join("env", d.envFile), d.envPrefix)
			names = append(names, envNames(t, filepath.Join("..", "docs", "DEPLOY.md"), d.envPrefix)...)
			if len(names) < 5 {
				t.Fatalf("found %d %s* variables in env/%s and docs/DEPLOY.md, want the host settings", len(names), d.envPrefix, d.envFile)
			}
			for _, n := range names {
				if f := envFlag(n, d.envPrefix); !slices.Contains(flags, f) {
					t.Errorf("%s names --%s, which spillway-%s does not define", n, f, d.cmd)
				}
			}
		})
	}
}

// envNames returns every variable assigned (NAME=) with prefix in file,
// commented-out ones included.
func envNames(t *testing.T, path, prefix string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	re := regexp.MustCompile(`\b(` + prefix + `[A-Z0-9_]+)=`)
	var names []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		for _, m := range re.FindAllStringSubmatch(sc.Text(), -1) {
			names = append(names, m[1])
		}
	}
	return names
}

// TestSysusers applies sysusers.d/spillway.conf to an empty root with the
// real systemd-sysusers: it creates a system user and group spillway with
// no login shell.
func TestSysusers(t *testing.T) {
	su := needTool(t, "systemd-sysusers")
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	conf, err := filepath.Abs(filepath.Join("sysusers.d", "spillway.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(su, "--root="+root, conf).CombinedOutput(); err != nil {
		t.Fatalf("systemd-sysusers: %v\n%s", err, out)
	}
	passwd, err := os.ReadFile(filepath.Join(root, "etc", "passwd"))
	if err != nil {
		t.Fatal(err)
	}
	group, err := os.ReadFile(filepath.Join(root, "etc", "group"))
	if err != nil {
		t.Fatal(err)
	}
	var user []string
	for _, l := range strings.Split(string(passwd), "\n") {
		if f := strings.Split(l, ":"); f[0] == "spillway" {
			user = f
		}
	}
	if len(user) != 7 {
		t.Fatalf("/etc/passwd has no spillway entry:\n%s", passwd)
	}
	uid, _ := strconv.Atoi(user[2])
	if uid == 0 || uid >= 1000 || user[5] != "/nonexistent" || user[6] != "/usr/sbin/nologin" {
		t.Errorf("spillway = %q, want a system uid (1..999), home /nonexistent, shell /usr/sbin/nologin", user)
	}
	if !regexp.MustCompile(`(?m)^spillway:x:` + user[3] + `:`).Match(group) {
		t.Errorf("/etc/group has no spillway group with gid %s:\n%s", user[3], group)
	}
	t.Logf("spillway: uid %s gid %s", user[2], user[3])
}
