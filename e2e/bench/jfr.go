package main

import (
	"cmp"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// ---- broker profiles (JDK Flight Recorder) --------------------------------
//
// -jfr DIR records both brokers' JVMs over each drain arm's release to its
// last message on west, one recording per broker per arm, so that what the
// east broker spends dispatching to the sidecar's cursor can be set
// against what it spends feeding its own replicator, and west's cost of
// the sidecar's producer against the built-in's. The recordings use the
// JDK's "profile" settings (Java samples every 10 ms) unless -jfr-settings
// names others; read them with
// `jfr print --events jdk.ExecutionSample` or `jfr summary`.

// jdkTool is a tool of the JDK that runs cluster's broker (jcmd, jfr):
// beside its java, which /proc/PID/exe names.
func jdkTool(cluster, tool string) (string, error) {
	pid, ok := clusterPID(cluster)
	if !ok {
		return "", fmt.Errorf("no %s broker running", cluster)
	}
	java, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return "", err
	}
	return filepath.Join(filepath.Dir(java), tool), nil
}

// jfrStart starts a recording named name on both brokers and returns the
// func that stops them and saves each to DIR/<name>-<cluster>.jfr. Without
// -jfr it does nothing; a broker that cannot be recorded is logged and
// left out (the measurement goes on).
func (e *env) jfrStart(name string) func() {
	if e.o.JFR == "" {
		return func() {}
	}
	if err := os.MkdirAll(e.o.JFR, 0o755); err != nil {
		e.logf("jfr: %v", err)
		return func() {}
	}
	var stops []func()
	for _, c := range []string{"east", "west"} {
		jcmd, err := jdkTool(c, "jcmd")
		pid, _ := clusterPID(c)
		if err != nil {
			e.logf("jfr on %s: %v", c, err)
			continue
		}
		rec := name + "-" + c
		out, err := exec.Command(jcmd, strconv.Itoa(pid), "JFR.start", "name="+rec, "settings="+cmp.Or(e.o.JFRSettings, "profile")).CombinedOutput()
		if err != nil {
			e.logf("jfr on %s: %v: %s", c, err, strings.TrimSpace(string(out)))
			continue
		}
		path := filepath.Join(e.o.JFR, rec+".jfr")
		stops = append(stops, func() {
			if out, err := exec.Command(jcmd, strconv.Itoa(pid), "JFR.stop", "name="+rec, "filename="+path).CombinedOutput(); err != nil {
				e.logf("jfr on %s: %v: %s", c, err, strings.TrimSpace(string(out)))
			}
		})
	}
	return func() {
		for _, s := range stops {
			s()
		}
	}
}
