// Command imagecheck runs the repository's Dockerfile without a container
// engine, as far as that can be done here: it executes the build stage's
// RUN steps on this machine's Go (the golang image's Go; the check fails
// if go.mod wants another minor version), assembles the final stage's root
// file system (the COPY steps, over a stand-in for the base image with the
// files that distroless/static-debian12:nonroot has: passwd and group with
// the nonroot user, Debian's CA bundle, nsswitch.conf, /tmp), and runs the
// image's ENTRYPOINT in it with chroot as the image's user: `version`
// must print the version the Dockerfile stamps, and ENTRYPOINT + CMD must
// start, answer /healthz and stop on SIGTERM, as that user. No registry is
// reached: the base images are not pulled, which is what this cannot
// check (their contents are taken as documented).
//
// Usage: imagecheck [-dockerfile Dockerfile] [-context .] (as root, or
// where unprivileged user namespaces are allowed).
package main

import (
	"bufio"
	"crypto/x509"
	"debug/elf"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type instr struct {
	cmd, args string
	line      int
}

type stage struct {
	from, name string
	steps      []instr
}

// base is what the check knows of a base image of the final stage.
type base struct {
	uid, gid uint32
	files    map[string]string // path -> contents ("@host:PATH" copies a host file)
	dirs     map[string]os.FileMode
}

var bases = map[string]base{
	// https://github.com/GoogleContainerTools/distroless/blob/main/base/README.md:
	// static: ca-certificates, /etc/passwd (root, nobody, nonroot), /etc/group,
	// /tmp, tzdata; the :nonroot tag runs as 65532:65532 in /home/nonroot.
	"gcr.io/distroless/static-debian12:nonroot": {
		uid: 65532, gid: 65532,
		files: map[string]string{
			"/etc/passwd":                        "root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n",
			"/etc/group":                         "root:x:0:\nnobody:x:65534:\ntty:x:5:\nstaff:x:50:\nnonroot:x:65532:\n",
			"/etc/nsswitch.conf":                 "hosts: files dns\n",
			"/etc/ssl/certs/ca-certificates.crt": "@host:/etc/ssl/certs/ca-certificates.crt",
		},
		dirs: map[string]os.FileMode{"/tmp": 0o1777, "/home/nonroot": 0o700, "/etc/geo-sidecar": 0o755},
	},
}

func main() {
	dockerfile := flag.String("dockerfile", "Dockerfile", "the Dockerfile")
	context := flag.String("context", ".", "the build context (the repository)")
	keep := flag.Bool("keep", false, "keep the assembled root file system")
	flag.Parse()
	start := time.Now()
	if err := run(*dockerfile, *context, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "imagecheck: FAIL:", err)
		os.Exit(1)
	}
	fmt.Printf("imagecheck: ok (%.1f s)\n", time.Since(start).Seconds())
}

func run(dockerfile, context string, keep bool) error {
	stages, err := parse(dockerfile)
	if err != nil {
		return err
	}
	if len(stages) < 2 {
		return fmt.Errorf("%s: want a build stage and a final stage, have %d stage(s)", dockerfile, len(stages))
	}
	work, err := os.MkdirTemp("", "imagecheck")
	if err != nil {
		return err
	}
	if !keep {
		defer os.RemoveAll(work)
	} else {
		fmt.Println("imagecheck: keeping", work)
	}
	roots := map[string]string{}
	for i, st := range stages[:len(stages)-1] {
		root := filepath.Join(work, fmt.Sprintf("stage%d", i))
		if err := buildStage(st, root, context); err != nil {
			return fmt.Errorf("stage %d (%s): %w", i, st.from, err)
		}
		roots[st.name] = root
		roots[strconv.Itoa(i)] = root
	}
	final := stages[len(stages)-1]
	b, ok := bases[final.from]
	if !ok {
		return fmt.Errorf("final stage FROM %s: imagecheck does not know this base image's contents (add it to bases)", final.from)
	}
	rootfs := filepath.Join(work, "rootfs")
	if err := assemble(b, rootfs); err != nil {
		return err
	}
	uid, gid := b.uid, b.gid
	var entrypoint, cmd []string
	for _, s := range final.steps {
		switch s.cmd {
		case "COPY":
			if err := copyStep(s, roots, context, rootfs); err != nil {
				return err
			}
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(s.args), &entrypoint); err != nil {
				return fmt.Errorf("line %d: ENTRYPOINT is not a JSON array: %w", s.line, err)
			}
		case "CMD":
			if err := json.Unmarshal([]byte(s.args), &cmd); err != nil {
				return fmt.Errorf("line %d: CMD is not a JSON array: %w", s.line, err)
			}
		case "USER":
			u, g, _ := strings.Cut(s.args, ":")
			n, err := strconv.ParseUint(u, 10, 32)
			if err != nil {
				return fmt.Errorf("line %d: USER %s: give a numeric uid (Kubernetes' runAsNonRoot needs one)", s.line, s.args)
			}
			uid = uint32(n)
			if g != "" {
				m, err := strconv.ParseUint(g, 10, 32)
				if err != nil {
					return fmt.Errorf("line %d: USER %s: numeric gid", s.line, s.args)
				}
				gid = uint32(m)
			}
		case "EXPOSE", "LABEL", "ENV", "WORKDIR", "ARG":
		default:
			return fmt.Errorf("line %d: %s in the final stage: imagecheck does not run it", s.line, s.cmd)
		}
	}
	if uid == 0 {
		return errors.New("the image runs as root")
	}
	if len(entrypoint) == 0 {
		return errors.New("no ENTRYPOINT")
	}
	fmt.Printf("imagecheck: final stage assembled from %s; user %d:%d; entrypoint %v; cmd %v\n", final.from, uid, gid, entrypoint, cmd)

	bin := filepath.Join(rootfs, entrypoint[0])
	if err := static(bin); err != nil {
		return err
	}
	if err := caBundle(rootfs); err != nil {
		return err
	}
	out, err := inImage(rootfs, uid, gid, append(entrypoint[1:], "version"), entrypoint[0]).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s version in the image: %w\n%s", entrypoint[0], err, out)
	}
	want := "geo-sidecar " + stampedVersion(stages)
	if strings.TrimSpace(string(out)) != want {
		return fmt.Errorf("%s version in the image printed %q, want %q", entrypoint[0], strings.TrimSpace(string(out)), want)
	}
	fmt.Printf("imagecheck: `%s version` as %d:%d in the image: %s\n", entrypoint[0], uid, gid, strings.TrimSpace(string(out)))
	return runDefault(rootfs, uid, gid, entrypoint, cmd)
}

// parse reads the Dockerfile's instructions, joining continued lines.
func parse(path string) ([]stage, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var (
		stages []stage
		buf    string
		first  int
	)
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		n++
		l := strings.TrimSpace(sc.Text())
		if buf == "" && (l == "" || strings.HasPrefix(l, "#")) {
			continue
		}
		if buf == "" {
			first = n
		}
		if strings.HasSuffix(l, "\\") {
			buf += strings.TrimSuffix(l, "\\") + " "
			continue
		}
		buf += l
		cmd, args, _ := strings.Cut(buf, " ")
		cmd, args = strings.ToUpper(cmd), strings.TrimSpace(args)
		buf = ""
		if cmd == "FROM" {
			f := strings.Fields(args)
			st := stage{from: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				st.name = f[2]
			}
			stages = append(stages, st)
			continue
		}
		if len(stages) == 0 {
			return nil, fmt.Errorf("%s:%d: %s before FROM", path, first, cmd)
		}
		stages[len(stages)-1].steps = append(stages[len(stages)-1].steps, instr{cmd, args, first})
	}
	return stages, sc.Err()
}

var goImage = regexp.MustCompile(`^golang:(\d+\.\d+)(\.\d+)?(-.*)?$`)

// buildStage runs a golang build stage: WORKDIR is the build context, COPY
// steps are no-ops (the context is used in place), RUN steps run with sh
// in the context, and absolute output paths (-o /x) land in root.
func buildStage(st stage, root, context string) error {
	m := goImage.FindStringSubmatch(st.from)
	if m == nil {
		return fmt.Errorf("FROM %s: imagecheck runs golang:X.Y build stages only", st.from)
	}
	gomod, err := os.ReadFile(filepath.Join(context, "go.mod"))
	if err != nil {
		return err
	}
	want := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(gomod)
	if want == nil || string(want[1]) != m[1] {
		return fmt.Errorf("FROM %s builds with Go %s, go.mod wants go %s", st.from, m[1], want[1])
	}
	have, err := exec.Command("go", "env", "GOVERSION").Output()
	if err != nil {
		return err
	}
	if !strings.HasPrefix(strings.TrimSpace(string(have)), "go"+m[1]) {
		return fmt.Errorf("FROM %s: this machine's Go is %s, not %s", st.from, strings.TrimSpace(string(have)), m[1])
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	outPath := regexp.MustCompile(`(\s-o\s+)/`)
	for _, s := range st.steps {
		switch s.cmd {
		case "WORKDIR", "COPY", "ENV", "ARG":
			// The context is the working directory, already complete.
		case "RUN":
			script := outPath.ReplaceAllString(s.args, "${1}"+root+"/")
			fmt.Printf("imagecheck: line %d: RUN %s\n", s.line, s.args)
			c := exec.Command("sh", "-c", script)
			c.Dir = context
			c.Stdout, c.Stderr = os.Stderr, os.Stderr
			if err := c.Run(); err != nil {
				return fmt.Errorf("line %d: RUN %s: %w", s.line, s.args, err)
			}
		default:
			return fmt.Errorf("line %d: %s in a build stage: imagecheck does not run it", s.line, s.cmd)
		}
	}
	return nil
}

func assemble(b base, rootfs string) error {
	if err := os.MkdirAll(rootfs, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(rootfs, 0o755); err != nil {
		return err
	}
	for d, mode := range b.dirs {
		p := filepath.Join(rootfs, d)
		if err := os.MkdirAll(p, 0o755); err != nil {
			return err
		}
		if err := os.Chmod(p, mode); err != nil {
			return err
		}
		if d == "/home/nonroot" {
			if err := os.Chown(p, int(b.uid), int(b.gid)); err != nil && os.Geteuid() == 0 {
				return err
			}
		}
	}
	for path, content := range b.files {
		data := []byte(content)
		if host, ok := strings.CutPrefix(content, "@host:"); ok {
			var err error
			if data, err = os.ReadFile(host); err != nil {
				return fmt.Errorf("the base image's %s comes from this machine's %s (Debian's ca-certificates, as in distroless): %w", path, host, err)
			}
		}
		p := filepath.Join(rootfs, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// copyStep runs COPY [--from=stage] SRC DST into rootfs.
func copyStep(s instr, roots map[string]string, context, rootfs string) error {
	f := strings.Fields(s.args)
	from := context
	if len(f) > 0 && strings.HasPrefix(f[0], "--from=") {
		name := strings.TrimPrefix(f[0], "--from=")
		var ok bool
		if from, ok = roots[name]; !ok {
			return fmt.Errorf("line %d: COPY --from=%s: no such stage", s.line, name)
		}
		f = f[1:]
	}
	if len(f) != 2 {
		return fmt.Errorf("line %d: COPY %s: imagecheck copies one file", s.line, s.args)
	}
	data, err := os.ReadFile(filepath.Join(from, f[0]))
	if err != nil {
		return fmt.Errorf("line %d: COPY %s: %w", s.line, s.args, err)
	}
	dst := filepath.Join(rootfs, f[1])
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return os.WriteFile(dst, data, 0o755)
}

// static fails unless bin is an ELF executable with no interpreter and no
// shared libraries (the static base has no libc).
func static(bin string) error {
	f, err := elf.Open(bin)
	if err != nil {
		return fmt.Errorf("entrypoint %s: %w", bin, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("entrypoint is dynamically linked (has an interpreter): the static base image has no libc")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		return fmt.Errorf("entrypoint needs shared libraries %v", libs)
	}
	return nil
}

func caBundle(rootfs string) error {
	b, err := os.ReadFile(filepath.Join(rootfs, "etc/ssl/certs/ca-certificates.crt"))
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return errors.New("no certificate in the image's CA bundle")
	}
	n := strings.Count(string(b), "BEGIN CERTIFICATE")
	if n < 50 {
		return fmt.Errorf("the image's CA bundle has %d certificates", n)
	}
	fmt.Printf("imagecheck: CA bundle /etc/ssl/certs/ca-certificates.crt: %d certificates (where Go's crypto/x509 looks on Linux)\n", n)
	return nil
}

// inImage is a command run in rootfs as uid:gid with the image's empty
// environment: chroot as root, else in a new user and mount namespace.
func inImage(rootfs string, uid, gid uint32, args []string, entry string) *exec.Cmd {
	c := exec.Command(entry, args...)
	c.Path = entry
	c.Dir = "/"
	c.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/home/nonroot"}
	attr := &syscall.SysProcAttr{Chroot: rootfs, Credential: &syscall.Credential{Uid: uid, Gid: gid}, Setpgid: true}
	if os.Geteuid() != 0 {
		attr.Cloneflags = syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: int(uid), HostID: os.Geteuid(), Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: int(gid), HostID: os.Getegid(), Size: 1}}
		attr.GidMappingsEnableSetgroups = false
		attr.Credential.NoSetGroups = true
	}
	c.SysProcAttr = attr
	return c
}

// stampedVersion is the -X main.version=V of the build stage's RUN.
func stampedVersion(stages []stage) string {
	re := regexp.MustCompile(`-X main\.version=([^"\s]+)`)
	for _, st := range stages {
		for _, s := range st.steps {
			if m := re.FindStringSubmatch(s.args); m != nil {
				return m[1]
			}
		}
	}
	return "dev"
}

// runDefault starts ENTRYPOINT + CMD with a config at the path CMD names
// (clusters that do not answer, /healthz on loopback), waits for
// /healthz, checks the process's user, and stops it with SIGTERM.
func runDefault(rootfs string, uid, gid uint32, entrypoint, cmd []string) error {
	cfgPath := ""
	for i, a := range cmd {
		if a == "--config" && i+1 < len(cmd) {
			cfgPath = cmd[i+1]
		}
	}
	if cfgPath == "" {
		return fmt.Errorf("CMD %v names no --config", cmd)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg := fmt.Sprintf(`sidecar:
  listen: %s
clusters:
  - name: a
    service_url: pulsar://127.0.0.1:1
    admin_url: http://127.0.0.1:1
  - name: b
    service_url: pulsar://127.0.0.1:2
    admin_url: http://127.0.0.1:2
replication:
  - source: a
    namespace: t/n
    topics: [x]
    targets: [b]
`, addr)
	p := filepath.Join(rootfs, cfgPath)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(p, []byte(cfg), 0o644); err != nil {
		return err
	}
	c := inImage(rootfs, uid, gid, append(entrypoint[1:], cmd...), entrypoint[0])
	var logs strings.Builder
	c.Stdout, c.Stderr = &logs, &logs
	if err := c.Start(); err != nil {
		return fmt.Errorf("start %v %v in the image: %w", entrypoint, cmd, err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	fail := func(err error) error {
		_ = c.Process.Kill()
		<-done
		return fmt.Errorf("%w\nlog:\n%s", err, logs.String())
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				fmt.Printf("imagecheck: ENTRYPOINT + CMD %v %v: /healthz %s", entrypoint, cmd, body)
				break
			}
		}
		select {
		case err := <-done:
			done <- err
			return fail(fmt.Errorf("ENTRYPOINT + CMD exited during start-up: %v", err))
		default:
		}
		if time.Now().After(deadline) {
			return fail(errors.New("/healthz did not answer within 20 s"))
		}
		time.Sleep(200 * time.Millisecond)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.Process.Pid))
	if err != nil {
		return fail(err)
	}
	// The uid as this machine sees it (outside a user namespace: uid
	// itself).
	if want := uid; os.Geteuid() == 0 {
		m := regexp.MustCompile(`(?m)^Uid:\s+(\d+)`).FindSubmatch(status)
		if m == nil || string(m[1]) != strconv.Itoa(int(want)) {
			return fail(fmt.Errorf("the process runs as uid %s, want %d", m[1], want))
		}
	}
	_ = c.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("exit after SIGTERM: %w\nlog:\n%s", err, logs.String())
		}
	case <-time.After(15 * time.Second):
		return fail(errors.New("no exit within 15 s of SIGTERM"))
	}
	fmt.Printf("imagecheck: ran as %d:%d, stopped cleanly on SIGTERM\n", uid, gid)
	return nil
}
