package main

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/geo-sidecar/geo-sidecar/e2e"
)

// instance is one geo-sidecar process of the soak, started again after
// each kill or stop with the same config and listen address; every start
// appends to the same log file, which the run keeps.
type instance struct {
	Name, Binary, Config, Listen, LogPath string
	LogLevel                              string // --log-level; info when empty

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	life    int       // starts so far: the current process's life, from 1
	started time.Time // when the current life began
}

// Start starts the process and waits (up to 60 s) until /readyz answers.
func (s *instance) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return nil
	}
	logf, err := os.OpenFile(s.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "==== soak: start %s at %s\n", s.Name, time.Now().UTC().Format(time.RFC3339Nano))
	level := s.LogLevel
	if level == "" {
		level = "info"
	}
	cmd := exec.Command(s.Binary, "run", "--config", s.Config, "--log-level", level)
	cmd.SysProcAttr = e2e.ChildProcAttr()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", s.Name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	s.cmd, s.done = cmd, done
	s.life++
	s.started = time.Now()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		select {
		case <-done:
			s.cmd = nil
			return fmt.Errorf("%s exited during start-up (log %s)", s.Name, s.LogPath)
		default:
		}
		if resp, err := http.Get("http://" + s.Listen + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready within 60 s (log %s)", s.Name, s.LogPath)
		}
	}
}

// Signal sends sig (SIGKILL or SIGTERM) and waits for the exit: up to
// 20 s after a SIGTERM, then SIGKILL. It says whether the process ran.
func (s *instance) Signal(sig syscall.Signal) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return false
	}
	_ = s.cmd.Process.Signal(sig)
	select {
	case <-s.done:
	case <-time.After(20 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	s.cmd = nil
	return true
}

// Running says whether the process is up (as far as the soak knows).
func (s *instance) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// Life returns the running process's pid, its life (1 for the first
// start, one more for each start after a kill or stop) and when it
// began; ok is false when no process runs, or while a start (which
// waits for readiness) or a stop holds the instance: the sampler skips
// a sample rather than wait for it.
func (s *instance) Life() (pid, life int, started time.Time, ok bool) {
	if !s.mu.TryLock() {
		return 0, 0, time.Time{}, false
	}
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0, 0, time.Time{}, false
	}
	select {
	case <-s.done:
		return 0, 0, time.Time{}, false
	default:
	}
	return s.cmd.Process.Pid, s.life, s.started, true
}
