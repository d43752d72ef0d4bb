// Package testproc runs the database servers of the topology tests (pgtopo, galeratopo):
// each in a process group of its own, killed with its group on Kill, and SIGKILLed by the
// kernel when the test binary dies first (a panic, a timeout, a SIGKILL), so no server
// outlives the tests that started it. Run as root, a command runs as the service's own
// user (postgres, mysql), as the servers refuse to run as root.
//
// Test support only.
package testproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// User is who a command runs as: the zero User is the test binary's own user.
type User struct {
	cred *syscall.Credential
	uid  int
	gid  int
}

// As returns the user name when the test binary runs as root (the servers refuse to run
// as root), and the test binary's own user otherwise.
func As(name string) (User, error) {
	if os.Geteuid() != 0 {
		return User{uid: -1, gid: -1}, nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		return User{}, fmt.Errorf("testproc: run as %s: %w", name, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return User{cred: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, uid: uid, gid: gid}, nil
}

// Own makes dir (created if missing) the user's, and lets the user reach it: each parent
// up to the root gets search permission for others (a t.TempDir is mode 0700).
func (u User) Own(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("testproc: %w", err)
	}
	if u.cred == nil {
		return nil
	}
	if err := os.Chown(dir, u.uid, u.gid); err != nil {
		return fmt.Errorf("testproc: %w", err)
	}
	for p := filepath.Dir(dir); p != "/" && p != "."; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("testproc: %w", err)
		}
		if fi.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(p, fi.Mode().Perm()|0o011); err != nil {
				return fmt.Errorf("testproc: %w", err)
			}
		}
	}
	return nil
}

// Run runs a command to its end as the user, bounded by ctx, and returns its error with
// the end of its output.
func (u User) Run(ctx context.Context, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: u.cred, Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("testproc: %s %s: %w\n%s", name, strings.Join(args, " "), err, tail(out))
	}
	return nil
}

// Process is a started server.
type Process struct {
	Pid  int
	done chan struct{} // closed when it has exited
}

// Start starts a command as the user in a process group of its own, in directory dir
// ("": the test's), its output appended to logPath.
//
// The process is started, and waited for, by a goroutine locked to its OS thread, with
// Pdeathsig set: Linux sends SIGKILL to the process when the thread that started it ends,
// which is when the test binary exits however it exits (a thread of a live Go program
// only ends with a locked goroutine, and this one ends after the process).
func (u User) Start(dir, logPath, name string, args ...string) (*Process, error) {
	if _, err := exec.LookPath(name); err != nil {
		return nil, fmt.Errorf("testproc: %s is not installed (%w); the topology tests run their own servers", name, err)
	}
	out, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("testproc: %w", err)
	}
	started := make(chan error, 1)
	p := &Process{done: make(chan struct{})}
	go func() {
		runtime.LockOSThread() // never unlocked: see above
		defer close(p.done)
		defer out.Close()
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		cmd.Stdout, cmd.Stderr = out, out
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: u.cred, Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			started <- fmt.Errorf("testproc: start %s: %w", name, err)
			return
		}
		p.Pid = cmd.Process.Pid
		started <- nil
		_ = cmd.Wait()
	}()
	if err := <-started; err != nil {
		<-p.done
		return nil, err
	}
	return p, nil
}

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Kill SIGKILLs the process group and waits for the process to exit.
func (p *Process) Kill() error {
	if err := syscall.Kill(-p.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("testproc: kill %d: %w", p.Pid, err)
	}
	<-p.done
	_ = syscall.Kill(-p.Pid, syscall.SIGKILL) // a child forked while the signal was sent
	return nil
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("testproc: find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// Poll calls cond every every until it reports nothing missing (""), fails, or ctx ends;
// the error then says what was still missing. Each call gets a context bounded by two
// seconds, so one stuck call cannot outlast ctx by much.
func Poll(ctx context.Context, every time.Duration, cond func(ctx context.Context) (missing string, err error)) error {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		missing, err := cond(cctx)
		cancel()
		switch {
		case err != nil:
			return err
		case missing == "":
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w; still missing: %s", context.Cause(ctx), missing)
		case <-tick.C:
		}
	}
}

// Tail returns the end of the file at path, for a failure message.
func Tail(path string) string {
	b, _ := os.ReadFile(path)
	return tail(b)
}

func tail(b []byte) string {
	const n = 3000
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// Slot holds the process of a server that is killed and started again; its zero value
// holds none. It is safe for concurrent use.
type Slot struct {
	mu   sync.Mutex
	proc *Process
}

// Set records p as the server's running process.
func (s *Slot) Set(p *Process) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.proc = p
}

// Running reports whether the server's process runs.
func (s *Slot) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil && !s.proc.Exited()
}

// Kill SIGKILLs the server's process group and waits for it to exit; it does nothing if
// the server does not run.
func (s *Slot) Kill() error {
	s.mu.Lock()
	p := s.proc
	s.proc = nil
	s.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.Kill()
}
