package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/geo-sidecar/geo-sidecar/e2e/wan"
)

var farUp struct {
	once sync.Once
	err  error
}

// UpFar starts the cluster far unless it is up (once per test binary);
// only the WAN tests use it.
func UpFar(t testing.TB) {
	t.Helper()
	farUp.once.Do(func() { farUp.err = Up("far") })
	if farUp.err != nil {
		t.Fatalf("cluster far did not start: %v", farUp.err)
	}
}

// FarWAN starts the WAN proxy (e2e/wan) in front of the cluster far, on
// the addresses cluster.sh has far advertise to clients that come through
// it (cluster.sh env far: FAR_WAN_*): one link for the binary protocol,
// forwarding to far's "wan" listener, whose lookup answers name the link,
// and one for the admin API. It returns the links (binary protocol first)
// and far as seen through them; a client given these URLs never reaches
// far but through the links. The links close when t ends. Only one FarWAN
// can be open at a time (the addresses are fixed).
func FarWAN(t testing.TB) (wan.Links, Cluster) {
	t.Helper()
	links, c, err := OpenWAN("far")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { links.Close() })
	return links, c
}

// OpenWAN is FarWAN for any cluster cluster.sh puts behind the WAN proxy
// (wan_ports: far, north), without a test: the caller closes the links.
// A cluster without WAN addresses is an error.
func OpenWAN(name string) (wan.Links, Cluster, error) {
	env := map[string]string{}
	out, err := exec.Command(ScriptPath(), "env", name).Output()
	if err != nil {
		return nil, Cluster{}, fmt.Errorf("cluster.sh env %s: %w", name, err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			env[k] = v
		}
	}
	u := strings.ToUpper(name)
	svc, adm, bind := env[u+"_WAN_SERVICE_URL"], env[u+"_WAN_ADMIN_URL"], env[u+"_WAN_UPSTREAM"]
	if svc == "" || adm == "" || bind == "" {
		return nil, Cluster{}, fmt.Errorf("cluster.sh env %s names no WAN addresses:\n%s", name, out)
	}
	direct := Get(name)
	broker, err := wan.Listen(name+"-broker", strings.TrimPrefix(svc, "pulsar://"), bind)
	if err != nil {
		return nil, Cluster{}, err
	}
	web, err := wan.Listen(name+"-web", strings.TrimPrefix(adm, "http://"), strings.TrimPrefix(direct.AdminURL, "http://"))
	if err != nil {
		broker.Close()
		return nil, Cluster{}, err
	}
	return wan.Links{broker, web}, Cluster{Name: name, ServiceURL: svc, AdminURL: adm}, nil
}

// LogSummary counts a sidecar log's warning and error lines, and the
// informational ones about connections (closed, reconnecting,
// reconnected), by level, logger, cluster, message and error, most
// frequent first: what an operator would grep.
func LogSummary(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return []string{err.Error()}
	}
	counts := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e map[string]any
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue
		}
		lvl, _ := e["level"].(string)
		msg, _ := e["msg"].(string)
		if lvl != "warn" && lvl != "error" && !(lvl == "info" && strings.Contains(msg, "connect")) {
			continue
		}
		errText, _ := e["error"].(string)
		errText = logNoise.Replace(errText)
		for _, re := range logVarying {
			errText = re.re.ReplaceAllString(errText, re.with)
		}
		if len(errText) > 120 {
			errText = errText[:120] + "…"
		}
		who := e["cluster"]
		if who == nil {
			who = e["target"]
		}
		counts[fmt.Sprintf("%s %s %v %q error=%q", lvl, e["logger"], who, msg, errText)]++
	}
	var out []string
	for k, n := range counts {
		out = append(out, fmt.Sprintf("%5d× %s", n, k))
	}
	sort.Sort(sort.Reverse(sort.StringSlice(out)))
	return out
}

// logNoise and logVarying make errors that differ only in a client port,
// a duration or an id count as one.
var (
	logNoise   = strings.NewReplacer("read: read", "read")
	logVarying = []struct {
		re   *regexp.Regexp
		with string
	}{
		{regexp.MustCompile(`tcp [0-9.]+:[0-9]+->`), "tcp "},
		{regexp.MustCompile(`[0-9][0-9.hm]*s\b`), "Ns"},
		{regexp.MustCompile(`(id|producer) [0-9]+`), "$1 N"},
	}
)

// FirstLog finds the first line of a sidecar log at or after after whose
// message is msg, and returns its time and error field.
func FirstLog(path, msg string, after time.Time) (time.Time, string, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return time.Time{}, "", false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e struct {
			TS    time.Time `json:"ts"`
			Msg   string    `json:"msg"`
			Error string    `json:"error"`
		}
		// The log's times are in milliseconds.
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.Msg != msg || e.TS.Before(after.Truncate(time.Millisecond)) {
			continue
		}
		return e.TS, e.Error, true
	}
	return time.Time{}, "", false
}
