// Command fakesystemd stands in for systemd on the lab's hosts, where no
// init system runs (package lab, Guide): installed as systemctl and as
// systemd-run, it does what docs/DEPLOY.md asks of them.
//
//	systemctl daemon-reload            nothing (units are read at start)
//	systemctl enable --now UNIT        start UNIT (enable without --now: nothing)
//	systemctl start|stop|restart UNIT
//	systemctl reload UNIT              SIGHUP (the units' ExecReload)
//	systemd-run --unit NAME CMD ARG... run CMD as root, as unit NAME
//
// Starting a unit reads /etc/systemd/system/UNIT.service and runs its
// ExecStart with the variables of its EnvironmentFile, as its User and
// Group, with its AmbientCapabilities (setpriv), detached, its output in
// /var/log/fakesystemd/UNIT.log; the pid goes to
// /var/lib/fakesystemd/UNIT.pid. Stopping sends SIGTERM and waits up to
// TimeoutStopSec (default 90s), then SIGKILL, as systemd does. The
// sandboxing directives are not applied. Anything else exits 2.
package main

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	unitDir = "/etc/systemd/system"
	pidDir  = "/var/lib/fakesystemd"
	logDir  = "/var/log/fakesystemd"
)

func main() {
	var err error
	switch filepath.Base(os.Args[0]) {
	case "systemd-run":
		err = systemdRun(os.Args[1:])
	default:
		err = systemctl(os.Args[1:])
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s (lab stand-in): %v\n", filepath.Base(os.Args[0]), err)
		os.Exit(2)
	}
}

func systemctl(args []string) error {
	if len(args) == 0 {
		return errors.New("no verb")
	}
	verb, rest := args[0], args[1:]
	now := false
	var units []string
	for _, a := range rest {
		switch {
		case a == "--now":
			now = true
		case strings.HasPrefix(a, "-"):
			return fmt.Errorf("flag %s not supported", a)
		default:
			units = append(units, strings.TrimSuffix(a, ".service"))
		}
	}
	if verb == "daemon-reload" {
		return nil
	}
	if len(units) == 0 {
		return fmt.Errorf("%s: no unit", verb)
	}
	for _, u := range units {
		var err error
		switch verb {
		case "enable":
			if now {
				err = start(u)
			}
		case "start":
			err = start(u)
		case "stop":
			err = stop(u)
		case "restart":
			if err = stop(u); err == nil {
				err = start(u)
			}
		case "reload":
			err = signal(u, syscall.SIGHUP)
		default:
			return fmt.Errorf("verb %s not supported", verb)
		}
		if err != nil {
			return fmt.Errorf("%s %s: %w", verb, u, err)
		}
	}
	return nil
}

// unit is what fakesystemd reads of a unit's [Service] section.
type unit struct {
	execStart   []string
	envFile     string
	user, group string
	ambient     []string
	timeoutStop time.Duration
}

// readUnit parses /etc/systemd/system/name.service: comments skipped,
// backslash continuations joined, the last value of a key kept.
func readUnit(name string) (*unit, error) {
	f, err := os.Open(filepath.Join(unitDir, name+".service"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	u := &unit{timeoutStop: 90 * time.Second}
	section, pending := "", ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if pending == "" && (line == "" || line[0] == '#' || line[0] == ';') {
			continue
		}
		if strings.HasSuffix(line, `\`) {
			pending += strings.TrimSuffix(line, `\`) + " "
			continue
		}
		line, pending = pending+line, ""
		if strings.HasPrefix(line, "[") {
			section = strings.Trim(line, "[]")
			continue
		}
		k, v, _ := strings.Cut(line, "=")
		if section != "Service" {
			continue
		}
		switch strings.TrimSpace(k) {
		case "ExecStart":
			u.execStart = strings.Fields(v)
		case "EnvironmentFile":
			u.envFile = strings.TrimSpace(v)
		case "User":
			u.user = strings.TrimSpace(v)
		case "Group":
			u.group = strings.TrimSpace(v)
		case "AmbientCapabilities":
			for _, c := range strings.Fields(v) {
				u.ambient = append(u.ambient, strings.ToLower(strings.TrimPrefix(c, "CAP_")))
			}
		case "TimeoutStopSec":
			d, err := time.ParseDuration(strings.TrimSpace(v))
			if err != nil {
				return nil, fmt.Errorf("TimeoutStopSec: %w", err)
			}
			u.timeoutStop = d
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(u.execStart) == 0 {
		return nil, errors.New("no ExecStart")
	}
	return u, nil
}

// start runs unit name's ExecStart (see the package doc).
func start(name string) error {
	if pid, ok := running(name); ok {
		return fmt.Errorf("already running as pid %d", pid)
	}
	u, err := readUnit(name)
	if err != nil {
		return err
	}
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	if u.envFile != "" {
		vars, err := readEnv(u.envFile)
		if err != nil {
			return err
		}
		env = append(env, vars...)
	}
	argv := u.execStart
	if u.user != "" {
		sp := []string{"setpriv", "--reuid", u.user, "--regid", cmp.Or(u.group, u.user), "--init-groups"}
		if len(u.ambient) > 0 {
			caps := "+" + strings.Join(u.ambient, ",+")
			sp = append(sp, "--inh-caps", caps, "--ambient-caps", caps)
		}
		argv = append(append(sp, "--"), argv...)
	}
	return launch(name, argv, env)
}

// systemdRun runs a command as a transient unit: systemd-run --unit NAME
// CMD ARG...
func systemdRun(args []string) error {
	if len(args) < 3 || args[0] != "--unit" {
		return errors.New("usage: systemd-run --unit NAME CMD [ARG...]")
	}
	name := strings.TrimSuffix(args[1], ".service")
	if pid, ok := running(name); ok {
		return fmt.Errorf("unit %s already running as pid %d", name, pid)
	}
	return launch(name, args[2:], []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"})
}

// launch starts argv detached as unit name, and records its pid.
func launch(name string, argv, env []string) error {
	for _, d := range []string{pidDir, logDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	logf, err := os.OpenFile(filepath.Join(logDir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env, cmd.Stdout, cmd.Stderr, cmd.Dir = env, logf, logf, "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	pid := cmd.Process.Pid
	if err := os.WriteFile(filepath.Join(pidDir, name+".pid"), []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		return err
	}
	// A process that exits within its first 300 ms is reported as a
	// failed start (systemd reports one that fails to exec); a later exit
	// shows in its log.
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		return fmt.Errorf("exited at once (%v); its log (%s):\n%s", err, logf.Name(), tail(logf.Name()))
	case <-time.After(300 * time.Millisecond):
		return nil
	}
}

// running returns the pid of unit name when it runs (alive, not a
// zombie).
func running(name string) (int, bool) {
	b, err := os.ReadFile(filepath.Join(pidDir, name+".pid"))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, false
	}
	return pid, alive(pid)
}

// alive reports whether pid runs and is not a zombie.
func alive(pid int) bool {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses.
	i := strings.LastIndexByte(string(st), ')')
	return i < 0 || i+2 >= len(st) || st[i+2] != 'Z'
}

// stop sends SIGTERM to unit name and waits for it to exit, up to its
// TimeoutStopSec, then kills it. A unit that does not run is stopped.
func stop(name string) error {
	pid, ok := running(name)
	if !ok {
		return nil
	}
	grace := 90 * time.Second
	if u, err := readUnit(name); err == nil {
		grace = u.timeoutStop
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	for deadline := time.Now().Add(grace); alive(pid); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			return fmt.Errorf("pid %d did not exit within %v of SIGTERM; killed", pid, grace)
		}
	}
	return nil
}

// signal sends sig to unit name, which must run.
func signal(name string, sig syscall.Signal) error {
	pid, ok := running(name)
	if !ok {
		return errors.New("not running")
	}
	return syscall.Kill(pid, sig)
}

// readEnv reads an EnvironmentFile: KEY=VALUE lines, # comments.
func readEnv(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var env []string
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || l[0] == '#' {
			continue
		}
		if !strings.Contains(l, "=") {
			return nil, fmt.Errorf("%s: not KEY=VALUE: %q", path, l)
		}
		env = append(env, l)
	}
	return env, nil
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}
